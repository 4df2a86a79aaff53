#!/usr/bin/env bash
# Provisioning against the real scheduler: a Deployment of 150 pods (1 CPU, 1 GiB each) that the
# kube-scheduler marks Unschedulable becomes NodeClaims, the simulated instances register Nodes, and
# the real scheduler binds every pod. Every NodeClaim has its instance and its Node, no node is empty,
# the NodePool's status counts them, each Node carries its attach command's labels and its instance
# the tag Name=<node>, and the API server refused luaprov nothing.
# Prints luaprov's resident memory at idle and with the pods, NodeClaims and Nodes cached.
source "$(dirname "$0")/lib.sh"
REPLICAS="${E2E_REPLICAS:-150}"

rss_mib() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/${ENGINE_PIDS[$1]}/status"; }

cluster_up
install_luaprov
start_sim
start_luaprov a
wait_until "luaprov ready (caches synced)" 60 luaprov_ready a
getting_started_objects | kc apply -f - >/dev/null
figure "luaprov RSS at idle: $(rss_mib a) MiB"

step "a Deployment of $REPLICAS pods"
t0=$SECONDS
kc create deployment web --image registry.k8s.io/pause:3.10 --replicas 0 >/dev/null
kc set resources deployment web --requests cpu=1,memory=1Gi >/dev/null
kc scale deployment web --replicas "$REPLICAS" >/dev/null
all_running() { [[ "$(running_pods -l app=web)" == "$REPLICAS" ]]; }
wait_until "$REPLICAS pods Running" 300 all_running
figure "$REPLICAS pods pending -> bound and Running in $((SECONDS - t0)) s"

step "every NodeClaim has one instance and one Node; no node is empty"
claims="$(count nodeclaims)"
nodes="$(count nodes)"
instances="$(live_instances)"
figure "$claims NodeClaims, $nodes Nodes, $instances instances for $REPLICAS pods"
[[ "$claims" -gt 0 && "$claims" == "$nodes" && "$nodes" == "$instances" ]] \
  || fail "NodeClaims $claims, Nodes $nodes, instances $instances"
kc get nodeclaims -o json | jq -e 'all(.items[]; .status.conditions[]? | select(.type == "Ready") | .status == "True")' \
  >/dev/null || fail "a NodeClaim is not Ready"
empty="$(kc get pods -l app=web -o json | jq -r '.items[].spec.nodeName' | sort -u | wc -l)"
[[ "$empty" == "$nodes" ]] || fail "only $empty of $nodes nodes have a pod: $((nodes - empty)) empty"
# each Node joined through its attach command (--labels) and its instance is tagged with its name
for n in $(kc get nodes -o jsonpath='{.items[*].metadata.name}'); do
  kc get node "$n" -o json | jq -e '.metadata.labels["ack.aliyun.com"] == "luaprov-sim"
    and .metadata.labels["k8s.aliyun.com"] == "true" and .metadata.labels["karpenter.sh/nodepool"] == "default"' \
    >/dev/null || fail "Node $n lacks the attach command's labels"
  id="$(kc get node "$n" -o jsonpath='{.spec.providerID}')"
  wait_until "instance ${id#*.} tagged Name=$n" 30 bash -c "curl -sf '$ALI/_sim/state' | jq -e --arg i '${id#*.}' \
    --arg n '$n' '.instances[] | select(.id == \$i) | .tags.Name == \$n' >/dev/null"
done
[[ "$(count events -A --field-selector reason=FailedScheduling)" -gt 0 ]] \
  || fail "the scheduler never marked a pod Unschedulable (the test did not test provisioning)"

step "NodePool status"
wait_until "NodePool status.nodes = $nodes" 30 \
  is "$nodes" kc get nodepool default -o jsonpath='{.status.nodes}'
kc get nodepool default -o json | jq -e '(.status.conditions[] | select(.type == "Ready") | .status == "True")
  and (.status.resources.cpu | tonumber) > 0' >/dev/null || fail "NodePool status: $(kc get nodepool default -o json | jq -c .status)"

step "more pods, memory with everything cached"
kc create deployment idle --image registry.k8s.io/pause:3.10 --replicas 100 >/dev/null
wait_until "100 small pods Running" 120 running_is idle 100
sleep 2
figure "luaprov RSS with $((REPLICAS + 100)) pods, $(count nodeclaims) NodeClaims, $(count nodes) Nodes cached: $(rss_mib a) MiB"
no_rbac_denials
echo "e2e provisioning: passed" >&2
