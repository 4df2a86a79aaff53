#!/usr/bin/env bash
# Spot interruption against the real control plane (docs/alibaba.md#spot-interruption): a Deployment
# whose pods require spot capacity runs on a spot node; the simulated cloud announces the reclaim of
# its instance with notice (POST /_sim/reclaim); the kubelet (`luaprov sim --kubelet-kubeconfig`)
# raises InstanceExpired=True on the Node; luaprov records TerminatingOnInterruption on the NodeClaim
# and the Node, deletes the NodeClaim and drains the Node through the real Eviction API, which a
# PodDisruptionBudget holds to one pod down at a time; the ReplicaSet recreates the pods, luaprov
# launches a replacement, and the pods run there before the simulated clock reaches the reclaim time.
# Then the clock passes it: the old instance is gone, nothing leaked, one NodeClaim made per node.
# Prints the seconds from the notice to the pods running elsewhere. The notice is 120 s rather than
# ECS's 5 minutes so that "before the reclaim" is a check that a slow move fails.
source "$(dirname "$0")/lib.sh"
NOTICE=120 # the simulated clock runs at real speed: the pods must move within two minutes

cluster_up
install_luaprov
start_sim
start_luaprov a
wait_until "luaprov ready" 60 luaprov_ready a
getting_started_objects | awk 'BEGIN { RS = "---\n"; ORS = "---\n" } /\nkind: ECSNodeClass/' | kc apply -f - >/dev/null
kc apply -f - >/dev/null <<'YAML'
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: spot}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.alibabacloud.com, kind: ECSNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [ecs.g7.xlarge, ecs.g7.2xlarge]}
YAML
kc apply -f - >/dev/null <<'JSON'
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"reclaimed","namespace":"default"},
 "spec":{"replicas":2,"selector":{"matchLabels":{"app":"reclaimed"}},"template":{"metadata":{"labels":{"app":"reclaimed"}},
 "spec":{"terminationGracePeriodSeconds":5,"nodeSelector":{"karpenter.sh/capacity-type":"spot"},
 "containers":[{"name":"app","image":"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}}}
JSON
kc create poddisruptionbudget reclaimed --selector app=reclaimed --min-available 1 >/dev/null
wait_until "2 pods Running" 120 running_is reclaimed 2
wait_until "NodeClaims, Nodes and instances agree" 60 settled

step "the spot node and its instance"
node="$(kc get pods -l app=reclaimed -o jsonpath='{.items[0].spec.nodeName}')"
[[ "$(kc get pods -l app=reclaimed -o json | jq -r '[.items[].spec.nodeName] | unique | length')" == 1 ]] \
  || fail "both pods on one node"
[[ "$(kc get node "$node" -o jsonpath='{.metadata.labels.karpenter\.sh/capacity-type}')" == spot ]] || fail "$node is not spot"
claim="$(kc get nodeclaims -o json | jq -r --arg n "$node" '.items[] | select(.status.nodeName == $n) | .metadata.name')"
instance="$(kc get node "$node" -o jsonpath='{.spec.providerID}')"
instance="${instance#*.}"
offering="$(kc get node "$node" -o json | jq -r '.metadata.labels | "\(.["node.kubernetes.io/instance-type"])/\(.["topology.kubernetes.io/zone"])"')"

step "the cloud announces the reclaim of $instance ($offering) in $NOTICE simulated seconds"
t0=$SECONDS
reclaim="$(curl -sf -X POST "$ALI/_sim/reclaim" -d "{\"instance_id\": \"$instance\", \"notice_seconds\": $NOTICE}")" \
  || fail "POST /_sim/reclaim"
reclaim_at="$(date -u -d "$(jq -r .termination_time <<<"$reclaim")" +%s)"
expired() { kc get node "$node" -o json | jq -e '.status.conditions[] | select(.type == "InstanceExpired")
  | .status == "True" and .reason == "SpotInstanceReclaim"' >/dev/null; }
wait_until "InstanceExpired=True on $node" 30 expired

# the pods move, never both down at once (the budget), to a replacement node
lowest=2
moved() {
  local running
  running="$(running_pods -l app=reclaimed)"
  ((running < lowest)) && lowest=$running
  [[ "$(kc get pods -l app=reclaimed --field-selector status.phase=Running -o json \
    | jq -r --arg n "$node" '[.items[] | select(.spec.nodeName != $n and .metadata.deletionTimestamp == null)] | length')" == 2 ]]
}
wait_until "both pods Running on another node" 180 moved
moved_after=$((SECONDS - t0))
now="$(curl -sf "$ALI/_sim/clock" | jq -r '.epoch | floor')"
((now < reclaim_at)) || fail "the pods ran elsewhere only at $now, past the reclaim at $reclaim_at"
((lowest >= 1)) || fail "both pods were down at once during the drain: the budget was not honoured"
figure "spot reclaim notice -> both pods Running on a replacement node in ${moved_after} s ($((reclaim_at - now)) simulated s of notice left)"
new_node="$(kc get pods -l app=reclaimed -o jsonpath='{.items[0].spec.nodeName}')"
[[ "$new_node" != "$node" ]] || fail "the pods must have left $node"
new_offering="$(kc get node "$new_node" -o json | jq -r '.metadata.labels | "\(.["node.kubernetes.io/instance-type"])/\(.["topology.kubernetes.io/zone"])/\(.["karpenter.sh/capacity-type"])"')"
[[ "$new_offering" != "$offering/spot" && "$new_offering" == */spot ]] \
  || fail "the replacement ($new_offering) must be spot and avoid $offering (marked unavailable)"

step "events, evictions and the old node's fate"
for who in "NodeClaim/$claim" "Node/$node"; do
  kc get events -A -o json | jq -e --arg k "${who%%/*}" --arg n "${who#*/}" '.items[] | select(.reason == "TerminatingOnInterruption"
    and .type == "Warning" and .involvedObject.kind == $k and .involvedObject.name == $n)' >/dev/null \
    || fail "no Warning TerminatingOnInterruption on $who"
done
evictions="$(jq -s '[.[] | select(.objectRef.subresource == "eviction" and .verb == "create"
  and (.objectRef.name | startswith("reclaimed-")))] | length' "$AUDIT_LOG")"
[[ "$evictions" -ge 2 ]] || fail "the pods must be evicted through the Eviction API: $evictions eviction requests"
refused="$(jq -s '[.[] | select(.objectRef.subresource == "eviction" and .responseStatus.code == 429)] | length' "$AUDIT_LOG")"
figure "$evictions evictions requested, $refused refused by the PodDisruptionBudget, while the notice ran"
[[ "$(metric a 'luaprov_interruptions_total{reason="InstanceExpired"}')" == 1 ]] || fail "one interruption counted"
wait_until "NodeClaim $claim gone" 60 gone nodeclaim "$claim"

step "the reclaim time passes"
curl -sf -X POST "$ALI/_sim/advance" -d "{\"seconds\": $NOTICE}" >/dev/null || fail "advance the clock"
wait_until "instance $instance gone" 30 is 0 instance_alive "$instance"
wait_until "node $node gone" 60 gone node "$node"
wait_until "NodeClaims, Nodes and instances agree" 60 settled
[[ "$(count nodeclaims)" == 1 && "$(live_instances)" == 1 ]] \
  || fail "one NodeClaim and one instance left: $(count nodeclaims), $(live_instances)"
made="$(jq -s '[.[] | select(.objectRef.resource == "nodeclaims" and .verb == "create"
  and .objectRef.subresource == null and .responseStatus.code == 201)] | length' "$AUDIT_LOG")"
[[ "$made" == 2 ]] || fail "two NodeClaims made (the first and its replacement), got $made"
[[ "$(curl -sf "$ALI/_sim/state" | jq '.calls.RunInstances')" == 2 ]] || fail "two launches"
# the replacement reused the cached attach script (docs/alibaba.md, Cache)
[[ "$(curl -sf "$ALI/_sim/state" | jq '.calls.DescribeClusterAttachScripts')" == 1 ]] \
  || fail "one DescribeClusterAttachScripts, got $(curl -sf "$ALI/_sim/state" | jq -c .calls)"
running_is reclaimed 2 || fail "the pods still run"
no_rbac_denials
echo "e2e spot: passed" >&2
