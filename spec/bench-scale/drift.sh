#!/usr/bin/env bash
# Drift (Karpenter's performance suite, "Drift Performance"): 300 pods spread over hostnames and 300
# of 3.5 CPU / 28 GiB; once they run, an annotation added to the NodePool's template drifts every
# node (NodePoolDrifted). Measured until none of the old NodeClaims is left, all 600 pods are bound
# again and the NodeClaims have stayed the same for BENCH_QUIET_SECONDS.
source "$(dirname "$0")/lib.sh"
bench_up
start_clock
bench_deployment hostname-spread-app 300 900m 3100Mi hostname-spread
bench_deployment standard-app 300 3500m 28Gi
result scale-out "$(wait_bound 600 1800)"
wait_until "the NodeClaims settled" 300 quiet_nodeclaims
OLD_CLAIMS="$(nodeclaim_set)"
old_claims_gone() {
  local current c
  current=" $(nodeclaim_set)"
  for c in $OLD_CLAIMS; do [[ "$current" != *" $c "* ]] || return 1; done
}
start_clock
kc patch nodepool default --type merge -p "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{
  \"test-drift-trigger\":\"drift-$(date +%s)\"}}}}}" >/dev/null
result drift "$(wait_settled 600 2400 old_claims_gone)"
