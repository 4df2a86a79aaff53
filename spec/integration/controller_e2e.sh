#!/usr/bin/env bash
# The in-cluster controller end to end: the real binary, `luaprov run --sim`, every controller against
# the simulated Kubernetes API and Alibaba Cloud over real HTTP.
#   ECSNodeClass resolved (Ready, finalizer, hash) -> NodeClaim launched (one instance) -> the
#   simulated kubelet registers its Node -> Registered, Initialized -> a pod is bound to it ->
#   the NodeClaim is deleted while a PodDisruptionBudget protects the pod: cordoned, eviction refused,
#   nothing deleted -> the budget is relaxed: pod evicted, instance released, Node and NodeClaim gone.
#   A leaked instance (its NodeClaim vanished without termination) is garbage collected.
#   A NodeClaim the cloud cannot serve (out of stock everywhere) is deleted with an event.
# /readyz is 503 until the caches synced; metrics count each step.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sim_lib.sh"

cat >"$WORK/config.yaml" <<'YAML'
controllers:
  garbageCollectionInterval: 1s
  leakedInstanceGrace: 2s
  drainRequeue: 0.2s
  terminateRequeue: 0.5s
YAML
start_sim_engine --config "$WORK/config.yaml"

ready() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/readyz")" == "200" ]]; }
wait_for "caches synced (/readyz 200)" ready
curl -sf "http://$ADDR/readyz?verbose" | grep -q '^\[+\]caches synced$' || fail "/readyz?verbose names the caches"

live_instances() { curl -sf "$ALI/_sim/state" | jq '[.instances[] | select(.status != "Stopped")] | length'; }

NC=/apis/karpenter.sh/v1/nodeclaims
CLASS=/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses/default

# ---- the ECSNodeClass resolves ----------------------------------------------------------------
post_default_nodeclass
kpost /apis/karpenter.sh/v1/nodepools '{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"default"},
  "spec":{"template":{"spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"default"},
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]}]}}}}'
until_ok "ECSNodeClass Ready" 10 condition "$CLASS" Ready True
kget "$CLASS" | jq -e '.metadata.finalizers | index("karpenter.k8s.alibabacloud/termination")' >/dev/null \
  || fail "ECSNodeClass finalizer"
kget "$CLASS" | jq -e '.metadata.annotations["karpenter.k8s.alibabacloud/ecsnodeclass-hash"] | length > 0' >/dev/null \
  || fail "ECSNodeClass hash annotation"
kget "$CLASS" | jq -e '(.status.vSwitches | length) > 0 and (.status.images | length) > 0' >/dev/null \
  || fail "ECSNodeClass status lists"

# ---- a NodeClaim launches, registers and initializes ------------------------------------------
claim() { # claim NAME
  printf '{"apiVersion":"karpenter.sh/v1","kind":"NodeClaim","metadata":{"name":"%s","labels":{"karpenter.sh/nodepool":"default"}},
  "spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"default"},
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]},
  {"key":"kubernetes.io/arch","operator":"In","values":["amd64"]}],
  "resources":{"requests":{"cpu":"1","memory":"1Gi"}}}}' "$1"
}
kpost $NC "$(claim web-1)"
until_ok "NodeClaim web-1 Launched" 15 condition $NC/web-1 Launched True
PID="$(kget $NC/web-1 | jq -r .status.providerID)"
[[ "$PID" == cn-hangzhou.i-* ]] || fail "providerID: $PID"
[[ "$(live_instances)" == "1" ]] || fail "exactly one instance launched, got $(live_instances)"
kget $NC/web-1 | jq -e '.metadata.finalizers | index("karpenter.sh/termination")' >/dev/null || fail "NodeClaim finalizer"

advance 20 # the instance boots (Running after 15 simulated seconds); the simulated kubelet registers it
until_ok "NodeClaim web-1 Registered" 15 condition $NC/web-1 Registered True
until_ok "NodeClaim web-1 Initialized" 15 condition $NC/web-1 Initialized True
until_ok "NodeClaim web-1 Ready" 5 condition $NC/web-1 Ready True
NODE="$(kget $NC/web-1 | jq -r .status.nodeName)"
kget "/api/v1/nodes/$NODE" | jq -e --arg p "$PID" '.spec.providerID == $p
  and .metadata.labels["karpenter.sh/registered"] == "true" and .metadata.labels["karpenter.sh/initialized"] == "true"
  and ([.spec.taints[]? | select(.key == "karpenter.sh/unregistered")] | length == 0)
  and (.metadata.ownerReferences[0].kind == "NodeClaim")' >/dev/null || fail "Node synced: $(kget "/api/v1/nodes/$NODE")"
grep -q '"msg":"launched nodeclaim"' "$ENGINE_LOG" || fail "launched nodeclaim logged"
# the NodePool counts it (kubectl get nodepools: NODES 1, READY True)
until_ok "NodePool default counts 1 node" 10 bash -c "curl -sf '$K/apis/karpenter.sh/v1/nodepools/default' | jq -e \
  '.status.nodes == 1 and .status.resources.nodes == \"1\" and
   ([.status.conditions[] | select(.type == \"Ready\" and .status == \"True\")] | length == 1)' >/dev/null"

# ---- a pod lands on it; a PodDisruptionBudget holds the drain until relaxed ---------------------
kpost /api/v1/namespaces/default/pods '{"metadata":{"name":"web","labels":{"app":"web"}},
  "spec":{"containers":[{"name":"c","image":"nginx","resources":{"requests":{"cpu":"100m"}}}]}}'
until_ok "pod bound to $NODE" 10 bash -c "curl -sf '$K/api/v1/namespaces/default/pods/web' | jq -e '.spec.nodeName == \"$NODE\"' >/dev/null"
kpost /apis/policy/v1/namespaces/default/poddisruptionbudgets '{"metadata":{"name":"web"},
  "spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"web"}}}}'
curl -sf -X DELETE "$K$NC/web-1" >/dev/null || fail "DELETE NodeClaim"
until_ok "Node cordoned" 10 bash -c "curl -sf '$K/api/v1/nodes/$NODE' | jq -e '.spec.unschedulable == true' >/dev/null"
sleep 1
kget /api/v1/namespaces/default/pods/web >/dev/null || fail "the PDB must keep the pod"
[[ "$(live_instances)" == "1" ]] || fail "the instance must stay while the drain is blocked"
kget $NC/web-1 >/dev/null || fail "the NodeClaim must stay while the drain is blocked"
kpatch /apis/policy/v1/namespaces/default/poddisruptionbudgets/web '{"spec":{"minAvailable":0}}'
until_ok "pod evicted" 10 gone /api/v1/namespaces/default/pods/web
until_ok "NodeClaim web-1 gone" 15 gone $NC/web-1
gone "/api/v1/nodes/$NODE" || fail "Node $NODE deleted"
[[ "$(live_instances)" == "0" ]] || fail "instance released"

# ---- a leaked instance is garbage collected ---------------------------------------------------
kpost $NC "$(claim web-3)"
until_ok "NodeClaim web-3 Launched" 15 condition $NC/web-3 Launched True
# The NodeClaim vanishes without termination: its finalizer is dropped with a PUT while every PATCH of
# NodeClaims fails (so the lifecycle controller cannot put the finalizer back), then it is deleted.
curl -sf -X POST "$K/_sim/faults" -d '{"verb":"patch","resource":"nodeclaims","status":500}' >/dev/null
kget $NC/web-3 | jq '.metadata.finalizers = []' >"$WORK/web-3.json"
curl -sf -X PUT -H 'content-type: application/json' "$K$NC/web-3" --data @"$WORK/web-3.json" >/dev/null \
  || fail "PUT web-3 without finalizers"
curl -sf -X DELETE "$K$NC/web-3" >/dev/null || fail "DELETE web-3"
gone $NC/web-3 || fail "web-3 deleted at once"
curl -sf -X DELETE "$K/_sim/faults" >/dev/null
until_ok "leaked instance released" 20 bash -c "[[ \$(curl -sf '$ALI/_sim/state' | jq '.instances | length') == 0 ]]"
grep -q '"msg":"garbage collecting instance with no nodeclaim"' "$ENGINE_LOG" || fail "GC logged"

# ---- out of stock everywhere: the NodeClaim is deleted, with an event -------------------------
curl -sf -X POST "$ALI/_sim/faults" -d '{"kind":"nostock"}' >/dev/null || fail "nostock fault"
kpost $NC "$(claim web-2)"
until_ok "NodeClaim web-2 deleted for insufficient capacity" 15 gone $NC/web-2
kget /api/v1/namespaces/default/events | jq -e '.items[] | select(.reason == "InsufficientCapacityError"
  and .involvedObject.name == "web-2")' >/dev/null || fail "InsufficientCapacityError event"
curl -sf -X DELETE "$ALI/_sim/faults" >/dev/null

# ---- metrics ---------------------------------------------------------------------------------
METRICS="$(curl -sf "http://$ADDR/metrics")"
for m in 'luaprov_caches_synced 1' 'luaprov_controllers_active 1' 'luaprov_nodeclaims_launched_total{nodepool="default"}' \
  'luaprov_nodeclaims_terminated_total{nodepool="default"}' 'luaprov_gc_instances_deleted_total' \
  'luaprov_nodeclaims_disrupted_total{reason="insufficient_capacity",nodepool="default"}'; do
  grep -qF "$m" <<<"$METRICS" || fail "metric $m in: $(grep -E '^luaprov_(nodeclaims|gc|caches|controllers)' <<<"$METRICS")"
done

kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status after SIGTERM"
grep -q '"msg":"shutdown complete"' "$ENGINE_LOG" || fail "clean shutdown"
echo "controller end to end: ok"
