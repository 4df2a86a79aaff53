#!/usr/bin/env bash
# Consolidation (Karpenter's performance suite, "Basic Deployment", phase 2): the basic scale-out's
# 1,000 pods, then both Deployments scaled to 350; measured until 700 pods are bound, nothing is being
# deleted and the NodeClaims have stayed the same for BENCH_QUIET_SECONDS (the time printed ends at
# their last change).
source "$(dirname "$0")/lib.sh"
bench_up
start_clock
bench_deployment small-resource-app 500 900m 3100Mi
bench_deployment large-resource-app 500 3500m 28Gi
result scale-out "$(wait_bound 1000 1800)"
wait_until "the NodeClaims settled" 300 quiet_nodeclaims
start_clock
kc scale deployment small-resource-app large-resource-app --replicas 350 >/dev/null
result consolidation "$(wait_settled 700 2400)"
