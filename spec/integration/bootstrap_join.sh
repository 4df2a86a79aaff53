#!/usr/bin/env bash
# How a node joins the cluster, end to end (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap):
# the real binary, `luaprov run --sim`, the simulated Kubernetes API and Alibaba Cloud over real HTTP.
#   three NodeClaims (labels, a taint) of an ECSNodeClass with maxPods -> each instance's user data
#   (read back from the simulator) runs the ACK attach command with the NodeClaim's labels, its taint
#   then karpenter.sh/unregistered:NoExecute, and the class's maxPods -> the simulated kubelet
#   registers each Node with exactly those labels and taints (and that many pods) -> the engine
#   removes the unregistered taint -> the NodeClaims are Registered and Initialized. The attach script
#   is fetched once for the three launches, even while the first answer is slow (its cache).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sim_lib.sh"

start_sim_engine
NC=/apis/karpenter.sh/v1/nodeclaims
CLASS=/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses/default

kpost /apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses '{"apiVersion":"karpenter.alibabacloud.com/v1alpha1",
  "kind":"ECSNodeClass","metadata":{"name":"default"},"spec":{
  "vSwitchSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "securityGroupSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "imageSelectorTerms":[{"alias":"AlibabaCloudLinux3"}],"kubeletConfiguration":{"maxPods":42}}}'
kpost /apis/karpenter.sh/v1/nodepools '{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"default"},
  "spec":{"template":{"spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"default"},
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]}]}}}}'
until_ok "ECSNodeClass Ready" 10 condition "$CLASS" Ready True

CLAIMS="join-1 join-2 join-3"
# The first answer is slow (1 s), so the three launches all ask while it is on its way: they wait
# for it instead of calling again.
curl -sf -X POST "$ALI/_sim/faults" -d '{"action":"DescribeClusterAttachScripts","kind":"timeout","seconds":1,"count":1}' \
  >/dev/null || fail "slow attach-script fault"
for c in $CLAIMS; do kpost $NC "$(web_claim "$c")"; done
for c in $CLAIMS; do until_ok "NodeClaim $c Launched" 15 condition "$NC/$c" Launched True; done

# ---- what each launch sent: the attach command with the NodeClaim's settings ------------------
TAINTS="dedicated=web:NoSchedule,karpenter.sh/unregistered:NoExecute"
for c in $CLAIMS; do
  id="$(kget "$NC/$c" | jq -r .status.providerID | sed 's/^[^.]*\.//')"
  ud="$(curl -sf "$ALI/_sim/instances/$id/user-data" | jq -r .user_data)" || fail "user data of $id"
  attach="$(grep 'attach_node.sh' <<<"$ud")" || fail "$c: no attach command in the user data: $ud"
  [[ "$(grep -c 'attach_node.sh' <<<"$ud")" == 1 ]] || fail "$c: one attach command, got: $ud"
  [[ "$ud" == '#!/bin/bash'* ]] || fail "$c: the user data is a bash script: $ud"
  labels="$(sed -n 's/.* --labels \([^ ]*\).*/\1/p' <<<"$attach")"
  ct="$(kget "$NC/$c" | jq -r '.metadata.labels["karpenter.sh/capacity-type"]')"
  want="k8s.aliyun.com=true,ack.aliyun.com=luaprov-sim,karpenter.sh/capacity-type=$ct,karpenter.sh/nodepool=default,team=web"
  [[ "$labels" == "$want"* ]] || fail "$c: --labels $labels, want $want first"
  taints="$(sed -n 's/.* --taints \([^ ]*\).*/\1/p' <<<"$attach")"
  [[ "$taints" == "$TAINTS" ]] || fail "$c: --taints $taints, want $TAINTS"
  config="$(sed -n 's/.* --node-config \([^ ]*\).*/\1/p' <<<"$attach" | base64 -d)"
  [[ "$(jq -c . <<<"$config")" == '{"kubelet_config":{"maxPods":42}}' ]] || fail "$c: --node-config $config"
done
ATTACH_CALLS="$(curl -sf "$ALI/_sim/state" | jq '.calls.DescribeClusterAttachScripts')"
[[ "$ATTACH_CALLS" == 1 ]] || fail "one DescribeClusterAttachScripts for three launches (the cache), got $ATTACH_CALLS"

# ---- the kubelet registers each Node with exactly those; the engine lifts the unregistered taint
advance 20 # Running after 15 simulated seconds
for c in $CLAIMS; do until_ok "NodeClaim $c Initialized" 15 condition "$NC/$c" Initialized True; done
REGISTERED="$(curl -sf "$K/_sim/kubelet/nodes")"
for c in $CLAIMS; do
  pid="$(kget "$NC/$c" | jq -r .status.providerID)"
  node="$(kget "$NC/$c" | jq -r .status.nodeName)"
  condition "$NC/$c" Registered True || fail "$c Registered"
  # as the kubelet registered it (--register-with-taints, --node-labels, maxPods)
  jq -e --arg p "$pid" --arg ct "$(kget "$NC/$c" | jq -r '.metadata.labels["karpenter.sh/capacity-type"]')" \
    '.nodes[] | select(.node.spec.providerID == $p) | .node
    | ([.spec.taints[] | "\(.key)=\(.value // ""):\(.effect)"] == ["dedicated=web:NoSchedule", "karpenter.sh/unregistered=:NoExecute"])
      and .metadata.labels.team == "web" and .metadata.labels["karpenter.sh/nodepool"] == "default"
      and .metadata.labels["ack.aliyun.com"] == "luaprov-sim" and .metadata.labels["karpenter.sh/capacity-type"] == $ct
      and .status.capacity.pods == "42"' <<<"$REGISTERED" >/dev/null \
    || fail "$c: the kubelet's Node: $(jq -c --arg p "$pid" '.nodes[] | select(.node.spec.providerID == $p) | .node.metadata.labels, .node.spec.taints' <<<"$REGISTERED")"
  # as it is now: the engine removed the unregistered taint, kept the NodeClaim's
  kget "/api/v1/nodes/$node" | jq -e '[.spec.taints[]? | .key] == ["dedicated"] and .metadata.labels.team == "web"
    and .metadata.labels["karpenter.sh/registered"] == "true" and .status.allocatable.pods == "42"' >/dev/null \
    || fail "$c: Node $node now: $(kget "/api/v1/nodes/$node" | jq -c '{labels: .metadata.labels, taints: .spec.taints}')"
done
CALLS="$(curl -sf "$ALI/_sim/state" | jq -c '[.calls.DescribeClusterAttachScripts, .calls.DescribeClusterNodePools]')"
[[ "$CALLS" == "[1,1]" ]] || fail "still one DescribeClusterAttachScripts and one DescribeClusterNodePools, got $CALLS"
[[ "$(curl -sf "$ALI/_sim/state" | jq '.calls.RunInstances')" == 3 ]] || fail "three launches"
echo "ok: three NodeClaims joined through the attach command, one attach-script call"
