#!/usr/bin/env bash
# Do-not-disrupt (Karpenter's performance suite, "Do Not Disrupt"): 500 pods spread over hostnames,
# 500 of 3.5 CPU / 28 GiB and 100 of 0.9 CPU / 450 MiB annotated karpenter.sh/do-not-disrupt (1,100
# pods), then the first two scaled to 250 (600 pods); measured like consolidation.sh. Also prints how
# many of the nodes that ran a do-not-disrupt pod before are still there.
source "$(dirname "$0")/lib.sh"
bench_up
start_clock
bench_deployment small-resource-app 500 900m 3100Mi hostname-spread
bench_deployment large-resource-app 500 3500m 28Gi
bench_deployment do-not-disrupt-app 100 900m 450Mi do-not-disrupt
result scale-out "$(wait_bound 1100 1800)"
wait_until "the NodeClaims settled" 300 quiet_nodeclaims
protected_nodes() { kc get pods -l app=do-not-disrupt-app -o jsonpath='{.items[*].spec.nodeName}' | tr ' ' '\n' | sort -u; }
protected_before="$(protected_nodes)"
start_clock
kc scale deployment small-resource-app large-resource-app --replicas 250 >/dev/null
result consolidation "$(wait_settled 600 2400)"
kept="$(comm -12 <(echo "$protected_before") <(kc get nodes -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort))"
figure "$(grep -c . <<<"$kept") of $(grep -c . <<<"$protected_before") nodes with a do-not-disrupt pod kept"
