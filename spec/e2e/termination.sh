#!/usr/bin/env bash
# Termination against the real API server: deleting a NodeClaim cordons its Node and drains it
# through the Eviction API, which the real PodDisruptionBudget holds back (the evicted pods are
# provisioned elsewhere, never more than the budget down at once); its instance is released and its
# Node goes. Then `kubectl delete node` terminates the NodeClaim of that Node the same way. Last, a
# budget that never allows an eviction holds a drain only until the NodeClaim's
# terminationGracePeriod: then the pod is deleted and the node goes.
source "$(dirname "$0")/lib.sh"

cluster_up
install_luaprov
start_sim
start_luaprov a
wait_until "luaprov ready" 60 luaprov_ready a
small_nodepool
deployment guarded 3
kc create poddisruptionbudget guarded --selector app=guarded --min-available 2 >/dev/null
wait_until "3 guarded pods Running" 120 running_is guarded 3
wait_until "NodeClaims, Nodes and instances agree" 60 settled

# drained_through_pdb NODE: waits until NODE is gone, checking at every step that at least 2 guarded
# pods run (what the budget allows) and that the instance behind NODE is released.
drained_through_pdb() {
  local node="$1" provider instance lowest=3 running
  provider="$(kc get node "$node" -o jsonpath='{.spec.providerID}')"
  instance="${provider#*.}"
  local deadline=$((SECONDS + 180))
  while kc get node "$node" -o name >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "node $node still there after 180 s"
    running="$(running_pods -l app=guarded)"
    ((running < lowest)) && lowest=$running
    sleep 0.3
  done
  ((lowest >= 2)) || fail "only $lowest guarded pods ran during the drain of $node: the budget was not honoured"
  wait_until "instance $instance released" 60 \
    is 0 instance_alive "$instance"
  wait_until "3 guarded pods Running again" 180 running_is guarded 3
}

step "kubectl delete nodeclaim: cordon, drain through the PodDisruptionBudget, release"
claim="$(kc get pods -l app=guarded -o json | jq -r '[.items[].spec.nodeName] | group_by(.) | max_by(length) | .[0]')"
node="$claim"
claim="$(kc get nodeclaims -o json | jq -r --arg n "$node" '.items[] | select(.status.nodeName == $n) | .metadata.name')"
[[ -n "$claim" ]] || fail "no NodeClaim for node $node"
kc delete nodeclaim "$claim" --wait=false >/dev/null
wait_until "node $node cordoned" 30 cordoned "$node"
drained_through_pdb "$node"
kc get nodeclaim "$claim" -o name >/dev/null 2>&1 && fail "NodeClaim $claim is still there"
refusals="$(jq -s '[.[] | select(.objectRef.subresource == "eviction" and .responseStatus.code == 429)] | length' "$AUDIT_LOG")"
[[ "$refusals" -gt 0 ]] || fail "no eviction was refused: the PodDisruptionBudget was never tested"
figure "$refusals evictions refused by the PodDisruptionBudget while draining $node"
wait_until "NodeClaims, Nodes and instances agree" 60 settled

step "kubectl delete node: its NodeClaim terminates"
node="$(kc get pods -l app=guarded -o jsonpath='{.items[0].spec.nodeName}')"
claim="$(kc get nodeclaims -o json | jq -r --arg n "$node" '.items[] | select(.status.nodeName == $n) | .metadata.name')"
kc delete node "$node" --wait=false >/dev/null
drained_through_pdb "$node"
wait_until "NodeClaim $claim gone" 60 gone nodeclaim "$claim"
wait_until "NodeClaims, Nodes and instances agree" 60 settled
no_empty_nodes guarded

step "a budget that allows no eviction holds the drain until terminationGracePeriod, then the pod is deleted"
kc apply -f - >/dev/null <<'YAML'
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: graceful}
spec:
  template:
    metadata: {labels: {e2e/pool: graceful}}
    spec:
      nodeClassRef: {group: karpenter.alibabacloud.com, kind: ECSNodeClass, name: default}
      terminationGracePeriod: 15s
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [ecs.g7.xlarge]}
YAML
deployment stuck 1
kc patch deployment stuck --type merge -p '{"spec":{"template":{"spec":{"nodeSelector":{"e2e/pool":"graceful"}}}}}' >/dev/null
kc create poddisruptionbudget stuck --selector app=stuck --min-available 1 >/dev/null
wait_until "the stuck pod Running" 120 running_is stuck 1
node="$(kc get pods -l app=stuck -o jsonpath='{.items[0].spec.nodeName}')"
pod="$(kc get pods -l app=stuck -o jsonpath='{.items[0].metadata.name}')"
claim="$(kc get nodeclaims -o json | jq -r --arg n "$node" '.items[] | select(.status.nodeName == $n) | .metadata.name')"
kc delete nodeclaim "$claim" --wait=false >/dev/null
wait_until "the pod deleted past the grace period" 120 \
  gone pod "$pod"
wait_until "node $node gone" 60 gone node "$node"
jq -s -e --arg p "$pod" '[.[] | select(.objectRef.name == $p)] as $r
  | ($r | map(select(.objectRef.subresource == "eviction" and .responseStatus.code == 429)) | length) > 0
  and ($r | map(select(.verb == "delete" and .objectRef.subresource == null)) | length) == 1' "$AUDIT_LOG" >/dev/null \
  || fail "pod $pod was not first refused eviction and then deleted once by luaprov"
wait_until "the stuck pod Running again" 120 running_is stuck 1
no_rbac_denials
echo "e2e termination: passed" >&2
