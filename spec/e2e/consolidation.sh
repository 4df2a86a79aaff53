#!/usr/bin/env bash
# Consolidation against the real scheduler and controller-manager: a Deployment of 100 pods scaled to
# 30 leaves its nodes underutilized; the disruption controller deletes or replaces them until the 30
# pods run on fewer nodes that cost less, never disrupting more nodes at once than the NodePool's
# budget allows, and every pod runs again at the end (the ReplicaSet recreates what a drain evicts,
# the real scheduler binds it). Eight replicas spread over the zones (maxSkew 1), scaled to three, are
# not skewed further by the consolidation that follows, and none is left pending. Three replicas with
# hostname anti-affinity get three nodes; scaled to zero, they leave empty nodes, which emptiness
# deletes once consolidateAfter has passed, while a pod annotated karpenter.sh/do-not-disrupt keeps its
# node.
source "$(dirname "$0")/lib.sh"
BUDGET_PERCENT=20

cluster_up
install_luaprov
start_sim
start_luaprov a
wait_until "luaprov ready" 60 luaprov_ready a
getting_started_objects | kc apply -f - >/dev/null
kc patch nodepool default --type merge -p "{\"spec\":{\"disruption\":{
  \"consolidationPolicy\":\"WhenEmptyOrUnderutilized\",\"consolidateAfter\":\"10s\",
  \"budgets\":[{\"nodes\":\"${BUDGET_PERCENT}%\"}]}}}" >/dev/null

# cost: what the running instances cost per hour (CNY), as the simulated account bills them.
cost() { curl -sf "$ALI/_sim/state" | jq '[.instances[] | select(.status == "Running") | .hourly_price] | add // 0'; }
# disrupting: NodeClaims being deleted, or whose Node carries the disrupted taint.
disrupting() {
  kc get nodeclaims -o json | jq '[.items[] | select(.metadata.deletionTimestamp != null)] | length'
}

step "a Deployment of 100 pods"
deployment web 100
wait_until "100 pods Running" 300 running_is web 100
wait_until "NodeClaims, Nodes and instances agree" 60 settled
nodes_before="$(count nodes)" cost_before="$(cost)"
figure "100 pods on $nodes_before nodes costing $cost_before CNY/h"

step "scaled to 30: consolidation to fewer, cheaper nodes within the budget"
kc scale deployment web --replicas 30 >/dev/null
t0=$SECONDS most=0 most_allowed=0 deadline=$((SECONDS + 600))
consolidated() {
  [[ "$(count nodes)" -lt "$nodes_before" ]] && running_is web 30 && [[ "$(pending_pods)" == 0 ]] \
    && [[ "$(disrupting)" == 0 ]] && settled
}
quiet_since=0
while :; do
  ((SECONDS < deadline)) || fail "not consolidated after 600 s: $(count nodes) nodes, $(running_pods -l app=web) running"
  d="$(disrupting)" n="$(count nodeclaims)"
  allowed=$(((n * BUDGET_PERCENT + 99) / 100))
  ((d > most)) && most=$d
  ((allowed > most_allowed)) && most_allowed=$allowed
  ((d > allowed)) && fail "$d nodes disrupted at once among $n; the budget allows $allowed"
  if consolidated; then
    ((quiet_since == 0)) && quiet_since=$SECONDS
    # settled for 30 s (two disruption passes after the 15 s validation) with nothing new disrupted
    ((SECONDS - quiet_since >= 30)) && break
  else
    quiet_since=0
  fi
  sleep 1
done
nodes_after="$(count nodes)" cost_after="$(cost)"
figure "30 pods: $nodes_before -> $nodes_after nodes, $cost_before -> $cost_after CNY/h in $((SECONDS - t0)) s; at most $most disrupting at once"
awk -v a="$cost_after" -v b="$cost_before" 'BEGIN { exit !(a < b) }' || fail "consolidation did not cut the cost: $cost_before -> $cost_after"
decisions="$(metric a 'luaprov_voluntary_disruption_decisions_total{decision="delete",reason="underutilized",consolidation_type="multi"}')"
decisions_single="$(metric a 'luaprov_voluntary_disruption_decisions_total{decision="delete",reason="underutilized",consolidation_type="single"}')"
replaced="$(metric a 'luaprov_voluntary_disruption_decisions_total{decision="replace",reason="underutilized",consolidation_type="single"}')"
figure "consolidation decisions: multi-node delete ${decisions:-0}, single-node delete ${decisions_single:-0}, single-node replace ${replaced:-0}"
no_empty_nodes web

step "zone spread through consolidation: 8 replicas spread over the zones, scaled to 3, stay spread"
kc apply -f - >/dev/null <<'JSON'
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"zonal","namespace":"default"},
 "spec":{"replicas":8,"selector":{"matchLabels":{"app":"zonal"}},"template":{"metadata":{"labels":{"app":"zonal"}},
 "spec":{"terminationGracePeriodSeconds":5,"topologySpreadConstraints":[{"maxSkew":1,
   "topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule",
   "labelSelector":{"matchLabels":{"app":"zonal"}}}],
 "containers":[{"name":"app","image":"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}}}
JSON
# zone_skew APP: the most minus the fewest pods of APP Running per zone, over the zones of every Node.
# kube-scheduler counts the zones of the nodes there are when it binds, so a burst onto the nodes of
# one zone may be skewed more than maxSkew once other zones' nodes come.
zone_skew() {
  kc get nodes -o json | jq -c '[.items[] | {(.metadata.name): .metadata.labels["topology.kubernetes.io/zone"]}] | add' \
    >"$WORK/zones.json"
  kc get pods -l "app=$1" --field-selector status.phase=Running -o json | jq --slurpfile z "$WORK/zones.json" '
    ($z[0] | [.[]] | unique | map({(.): 0}) | add) as $zero
    | reduce (.items[] | $z[0][.spec.nodeName]) as $zone ($zero; .[$zone] += 1)
    | [.[]] | max - min'
}
wait_until "8 pods of zonal Running" 240 running_is zonal 8
skew_before="$(zone_skew zonal)" nodes_before="$(count nodes)" cost_before="$(cost)"
kc scale deployment zonal --replicas 3 >/dev/null
wait_until "3 pods of zonal Running" 60 running_is zonal 3
# the ReplicaSet picks which replicas go, not by zone: what consolidation starts from may be skewed more
skew_scaled="$(zone_skew zonal)" allowed_skew=1
((skew_scaled > allowed_skew)) && allowed_skew=$skew_scaled
t0=$SECONDS quiet_since=0 deadline=$((SECONDS + 300)) worst=0
while :; do
  ((SECONDS < deadline)) || fail "zonal not settled after 300 s: $(running_pods -l app=zonal) running"
  skew="$(zone_skew zonal)"
  if running_is zonal 3 && [[ "$(pending_pods)" == 0 && "$(disrupting)" == 0 ]] && settled; then
    ((skew > worst)) && worst=$skew
    ((quiet_since == 0)) && quiet_since=$SECONDS
    ((SECONDS - quiet_since >= 30)) && break
  else
    quiet_since=0
  fi
  sleep 1
done
((worst <= allowed_skew)) || fail "consolidation left the 3 zonal replicas with a zone skew of $worst (maxSkew 1, $skew_scaled after the scale-down)"
figure "zone spread: 8 replicas (skew $skew_before) -> 3 (skew $skew_scaled) -> consolidated, skew $worst (maxSkew 1), $nodes_before -> $(count nodes) nodes, $cost_before -> $(cost) CNY/h in $((SECONDS - t0)) s"
kc scale deployment zonal --replicas 0 >/dev/null

step "a do-not-disrupt pod keeps its node; scaled to zero, the other nodes are empty and go"
kc apply -f - >/dev/null <<'JSON'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"keep","namespace":"default",
 "annotations":{"karpenter.sh/do-not-disrupt":"true"}},
 "spec":{"terminationGracePeriodSeconds":5,"containers":[{"name":"app","image":"registry.k8s.io/pause:3.10",
 "resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}
JSON
wait_until "pod keep Running" 120 is Running kc get pod keep -o jsonpath='{.status.phase}'
keep_node="$(kc get pod keep -o jsonpath='{.spec.nodeName}')"
# three replicas that may not share a node: new nodes, which scaling to zero leaves empty
kc apply -f - >/dev/null <<'JSON'
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"apart","namespace":"default"},
 "spec":{"replicas":3,"selector":{"matchLabels":{"app":"apart"}},"template":{"metadata":{"labels":{"app":"apart"}},
 "spec":{"terminationGracePeriodSeconds":5,"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
   {"topologyKey":"kubernetes.io/hostname","labelSelector":{"matchLabels":{"app":"apart"}}}]}},
 "containers":[{"name":"app","image":"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}}}
JSON
wait_until "3 pods of apart Running" 240 running_is apart 3
apart_nodes="$(kc get pods -l app=apart -o jsonpath='{.items[*].spec.nodeName}' | tr ' ' '\n' | sort -u | wc -l)"
[[ "$apart_nodes" == 3 ]] || fail "the anti-affine replicas share nodes: $apart_nodes nodes for 3"
figure "3 anti-affine replicas on 3 nodes; $(count nodes) nodes in all"
kc scale deployment web --replicas 0 >/dev/null
kc scale deployment apart --replicas 0 >/dev/null
wait_until "only the node of pod keep is left" 300 is 1 count nodes
[[ "$(kc get nodes -o jsonpath='{.items[0].metadata.name}')" == "$keep_node" ]] \
  || fail "the node of the do-not-disrupt pod ($keep_node) went"
empty="$(metric a 'luaprov_voluntary_disruption_decisions_total{decision="delete",reason="empty",consolidation_type="empty"}')"
[[ "${empty:-0}" != 0 ]] || fail "no emptiness decision was counted"
figure "scaled to zero: emptiness deleted the empty nodes in ${empty} decision(s); the do-not-disrupt pod's node stayed"
blocked_events() { [[ "$(count events --field-selector reason=DisruptionBlocked)" -gt 0 ]]; }
wait_until "a DisruptionBlocked event for the kept node" 60 blocked_events
wait_until "NodeClaims, Nodes and instances agree" 60 settled
no_rbac_denials
echo "e2e consolidation: passed" >&2
