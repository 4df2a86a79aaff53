#!/usr/bin/env bash
# Drift against the real API server, then the NodePool's deletion: an image change on the ECSNodeClass
# drifts every node; they are replaced no faster than the NodePool's budget allows, and no pod is left
# pending. A node of a second NodePool past its expireAfter is replaced although that NodePool's budget
# allows no disruption. Deleting the NodePools then deletes, through the real garbage collector, every
# NodeClaim they own (the replacements too) and so every Node and instance.
source "$(dirname "$0")/lib.sh"
BUDGET=1

cluster_up
install_luaprov
start_sim
start_luaprov a
wait_until "luaprov ready" 60 luaprov_ready a
small_nodepool "$BUDGET"
deployment web 8
wait_until "8 pods Running" 180 running_is web 8
wait_until "NodeClaims, Nodes and instances agree" 60 settled
before="$(kc get nodeclaims -o jsonpath='{.items[*].metadata.name}')"
nodes_before="$(count nodeclaims)"
((nodes_before >= 3)) || fail "expected several nodes for 8 pods, got $nodes_before"

step "an image change drifts $nodes_before nodes; replaced at most $BUDGET at a time"
kc patch ecsnodeclass default --type merge \
  -p '{"spec":{"imageSelectorTerms":[{"id":"aliyun_3_x64_20G_alibase_20230727.vhd"}]}}' >/dev/null
old_left() {
  local n=0 c
  for c in $before; do kc get nodeclaim "$c" -o name >/dev/null 2>&1 && n=$((n + 1)); done
  echo "$n"
}
most_disrupting=0 deadline=$((SECONDS + 400))
while [[ "$(old_left)" != 0 ]]; do
  ((SECONDS < deadline)) || fail "drifted nodes still there after 400 s: $(old_left) left"
  disrupting="$(kc get nodeclaims -o json | jq '[.items[] | select(.metadata.deletionTimestamp != null)] | length')"
  ((disrupting > most_disrupting)) && most_disrupting=$disrupting
  sleep 0.5
done
figure "$nodes_before drifted nodes replaced, at most $most_disrupting terminating at once (budget $BUDGET)"
((most_disrupting <= BUDGET)) || fail "$most_disrupting nodes were disrupted at once; the budget is $BUDGET"
wait_until "8 pods Running after the replacement" 120 running_is web 8
[[ "$(pending_pods)" == 0 ]] || fail "pods left pending after the drift"
wait_until "NodeClaims, Nodes and instances agree" 60 settled
kc get nodeclaims -o json | jq -e 'all(.items[]; .status.imageID == "aliyun_3_x64_20G_alibase_20230727.vhd")' >/dev/null \
  || fail "a NodeClaim still runs the old image"
kc get nodeclaims -o json | jq -e 'all(.items[]; any(.metadata.ownerReferences[]?; .kind == "NodePool" and .name == "default"))' \
  >/dev/null || fail "a replacement NodeClaim has no ownerReference to its NodePool"

step "a node past expireAfter is replaced, whatever its NodePool's budget says"
# a second NodePool whose nodes live 45 s and whose budget allows no disruption at all; one pod selects it
kc get nodepool default -o json | jq '{apiVersion, kind, metadata: {name: "expiring"}, spec: (.spec
  | .template.spec.expireAfter = "45s" | .template.metadata.labels.lifetime = "short"
  | .disruption.budgets = [{nodes: "0"}])}' | kc apply -f - >/dev/null
kc apply -f - >/dev/null <<'JSON'
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"short","namespace":"default"},
 "spec":{"replicas":1,"selector":{"matchLabels":{"app":"short"}},"template":{"metadata":{"labels":{"app":"short"}},
 "spec":{"terminationGracePeriodSeconds":5,"nodeSelector":{"lifetime":"short"},
 "containers":[{"name":"app","image":"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}}}
JSON
wait_until "the pod of short Running" 120 running_is short 1
short_node() { kc get pods -l app=short --field-selector status.phase=Running -o jsonpath='{.items[0].spec.nodeName}'; }
first_node="$(short_node)" t0=$SECONDS
wait_until "its node, past expireAfter, gone" 180 gone node "$first_node"
moved_on() { running_is short 1 && [[ "$(short_node)" != "$first_node" ]]; }
wait_until "the pod of short Running on a new node" 120 moved_on
expired="$(metric a 'luaprov_nodeclaims_disrupted_total{reason="expired",nodepool="expiring"}')"
[[ "${expired:-0}" != 0 ]] || fail "no expiration was counted"
figure "expireAfter 45s under a budget of 0: node $first_node replaced by $(short_node) in $((SECONDS - t0)) s after its pod ran"

step "deleting the NodePools deletes every NodeClaim they own, and their instances"
kc delete deployment short --wait=false >/dev/null
kc delete nodepool default expiring --wait=false >/dev/null
wait_until "every NodeClaim gone" 180 is 0 count nodeclaims
wait_until "every Node gone" 60 is 0 count nodes
wait_until "every instance released" 60 is 0 live_instances
no_rbac_denials
echo "e2e drift: passed" >&2
