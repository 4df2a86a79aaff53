#!/usr/bin/env bash
# A stock kubectl against the Kubernetes simulator of `luaprov sim`, validation on (kubectl reads the
# simulator's OpenAPI v3 and leaves field validation to it): apply every kind the simulator serves from
# YAML, get it (table and JSON), apply again unchanged and changed, watch nodes, drain a node through
# the eviction subresource and a PodDisruptionBudget, delete everything. Skipped (exit 0 with a
# message) when kubectl is not installed.
source "$(dirname "$0")/lib.sh"

if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIP: kubectl is not installed"
  exit 0
fi

OUT="$WORK/sim.out"
"$LUAPROV" sim --log-format json >"$OUT" 2>"$ENGINE_LOG" &
ENGINE_PID=$!
for _ in $(seq 1 100); do
  [[ -s "$OUT" ]] && break
  kill -0 "$ENGINE_PID" 2>/dev/null || fail "luaprov sim exited during start"
  sleep 0.05
done
K="$(sed -n 's/.*"kubernetes":"\([^"]*\)".*/\1/p' "$OUT")"
[[ -n "$K" ]] || fail "no kubernetes endpoint: $(cat "$OUT")"
export KUBECONFIG="$WORK/kubeconfig" HOME="$WORK"
kc() { kubectl --server "$K" --insecure-skip-tls-verify --request-timeout=10s "$@"; }
# kc_ok NAME ARGS...: runs kubectl, its output in $WORK/NAME.txt, failing with that output.
kc_ok() {
  local name="$1"
  shift
  kc "$@" >"$WORK/$name.txt" 2>&1 || fail "kubectl $*: $(cat "$WORK/$name.txt")"
}
expect() { grep -q -- "$2" "$WORK/$1.txt" || fail "$1 says '$2': $(cat "$WORK/$1.txt")"; }

# kind name (with namespace for namespaced kinds) and its YAML
declare -A YAML
YAML[ecsnodeclass]='apiVersion: karpenter.alibabacloud.com/v1alpha1
kind: ECSNodeClass
metadata: {name: default}
spec:
  vSwitchSelectorTerms: [{tags: {karpenter.sh/discovery: sim}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sim}}]
  imageSelectorTerms: [{alias: AlibabaCloudLinux3}]'
YAML[nodepool]='apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  weight: 10
  template:
    spec:
      nodeClassRef: {group: karpenter.alibabacloud.com, kind: ECSNodeClass, name: default}
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]'
YAML[nodeclaim]='apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: general-x2k4p, labels: {karpenter.sh/nodepool: general}}
spec:
  nodeClassRef: {group: karpenter.alibabacloud.com, kind: ECSNodeClass, name: default}
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [ecs.g7.large]}]'
YAML[node]='apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {zone: a}}'
YAML[pod]='apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  containers:
  - {name: app, image: "nginx:1.27", resources: {requests: {cpu: 100m, memory: 64Mi}}}
  - {name: side, image: busybox}'
YAML[pdb]='apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}'
YAML[lease]='apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: luaprov, namespace: kube-system}
spec: {holderIdentity: luaprov-0, leaseDurationSeconds: 15}'
YAML[event]='apiVersion: v1
kind: Event
metadata: {name: web.17a4b2c3d4e5f6a7, namespace: default}
involvedObject: {kind: Pod, name: web, namespace: default}
reason: Scheduled
message: placed by the simulator
type: Normal
source: {component: luaprov}'
declare -A NAME=([ecsnodeclass]=default [nodepool]=general [nodeclaim]=general-x2k4p [node]=node-a [pod]=web
  [pdb]=web [lease]=luaprov [event]=web.17a4b2c3d4e5f6a7)
declare -A NS=([pod]=default [pdb]=default [lease]=kube-system [event]=default)
KINDS=(ecsnodeclass nodepool nodeclaim node pod pdb lease event)
ns_args() { [[ -n "${NS[$1]:-}" ]] && echo "-n ${NS[$1]}"; }

for kind in "${KINDS[@]}"; do printf '%s\n' "${YAML[$kind]}" >"$WORK/$kind.yaml"; done

for kind in "${KINDS[@]}"; do
  kc_ok apply apply -f "$WORK/$kind.yaml"
  expect apply " created"
  # shellcheck disable=SC2046
  kc_ok get get "$kind" "${NAME[$kind]}" $(ns_args "$kind")
  # the simulator prints tables as an apiserver does: events lead with LAST SEEN, the rest with NAME
  if [[ "$kind" == event ]]; then expect get "Normal   Scheduled   pod/web"; else expect get "^${NAME[$kind]} "; fi
  # shellcheck disable=SC2046
  kc_ok json get "$kind" "${NAME[$kind]}" $(ns_args "$kind") -o json
  expect json "\"name\": \"${NAME[$kind]}\""
done
kc_ok events get events -n default -o wide
expect events "placed by the simulator .* web.17a4b2c3d4e5f6a7$"
kc_ok nodes get nodes
expect nodes "^NAME  *STATUS  *ROLES  *AGE  *VERSION"
expect nodes "^node-a  *Unknown "

# Unchanged: kubectl computes an empty patch and says so. A PodDisruptionBudget is the exception on a
# real cluster too: its selector's patch strategy is "replace", so the patch is never empty.
for kind in "${KINDS[@]}"; do
  kc_ok reapply apply -f "$WORK/$kind.yaml"
  if [[ "$kind" == pdb ]]; then expect reapply " configured"; else expect reapply " unchanged"; fi
done

# Changed: a CRD takes a merge patch, a pod a strategic merge patch that keeps its other container.
sed -i 's/weight: 10/weight: 20/' "$WORK/nodepool.yaml"
kc_ok changed apply -f "$WORK/nodepool.yaml"
expect changed "nodepool.karpenter.sh/general configured"
[[ "$(kc get nodepool general -o jsonpath='{.spec.weight}')" == 20 ]] || fail "weight not changed"
sed -i 's/nginx:1.27/nginx:1.28/' "$WORK/pod.yaml"
kc_ok changed apply -f "$WORK/pod.yaml"
expect changed "pod/web configured"
IMAGES="$(kc get pod web -o jsonpath='{.spec.containers[*].image}')"
[[ "$IMAGES" == "nginx:1.28 busybox" ]] || fail "containers after a strategic merge patch: $IMAGES"

# Validation is on: the server refuses an unknown field, kubectl says which.
sed 's/weight: 20/wieght: 20/' "$WORK/nodepool.yaml" >"$WORK/typo.yaml"
if kc apply -f "$WORK/typo.yaml" >"$WORK/typo.txt" 2>&1; then fail "an unknown field was accepted"; fi
expect typo 'unknown field "spec.wieght"'

# A watch sees a node created while it runs.
kc get nodes -w --request-timeout=4s >"$WORK/watch.txt" 2>&1 &
WATCH_PID=$!
sleep 1
curl -sf -X POST "$K/api/v1/nodes" -d '{"metadata":{"name":"node-late"}}' >/dev/null || fail "create node-late"
wait "$WATCH_PID" || true
expect watch "^node-late "

# Drain through evictions. Each pod goes to the Ready node with the most free cpu: web to node-keep,
# web-2 and web-3 to node-drain. The budget (2 of the 3) lets one of those two go, not both.
ready_node() {
  curl -sf -X POST "$K/api/v1/nodes" -d '{"metadata":{"name":"'"$1"'"},"status":{"allocatable":{"cpu":"'"$2"'",
    "memory":"8Gi","pods":"110"},"conditions":[{"type":"Ready","status":"True"}]}}' >/dev/null || fail "node $1"
}
ready_node node-keep 2
[[ "$(kc get pod web -o jsonpath='{.spec.nodeName} {.status.phase}')" == "node-keep Running" ]] \
  || fail "web not bound: $(kc get pod web -o json)"
ready_node node-drain 8
kc_ok run run web-2 --image=nginx --labels=app=web
kc_ok run run web-3 --image=nginx --labels=app=web
[[ "$(kc get pod web-3 -o jsonpath='{.spec.nodeName} {.status.phase}')" == "node-drain Running" ]] \
  || fail "web-3 not bound: $(kc get pod web-3 -o json)"
if kc drain node-drain --force --timeout=3s >"$WORK/drain.txt" 2>&1; then fail "drain ignored the budget"; fi
expect drain "Cannot evict pod as it would violate the pod's disruption budget"
[[ "$(kc get pods -o name | wc -l)" == 2 ]] || fail "two web pods should be left: $(kc get pods)"
[[ "$(kc get node node-drain -o jsonpath='{.spec.unschedulable}')" == true ]] || fail "node not cordoned"

for kind in "${KINDS[@]}"; do
  kc_ok delete delete -f "$WORK/$kind.yaml"
  expect delete "\"${NAME[$kind]}\" deleted"
done
for path in apis/karpenter.sh/v1/nodepools/general api/v1/nodes/node-a api/v1/namespaces/default/pods/web \
  apis/policy/v1/namespaces/default/poddisruptionbudgets/web \
  apis/coordination.k8s.io/v1/namespaces/kube-system/leases/luaprov; do
  CODE="$(curl -s -o /dev/null -w '%{http_code}' "$K/$path")"
  [[ "$CODE" == "404" ]] || fail "$path still there after delete: $CODE"
done

kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "luaprov sim exit status"
echo "kubectl against the simulator: ok"
