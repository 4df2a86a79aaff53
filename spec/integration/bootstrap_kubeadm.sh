#!/usr/bin/env bash
# Cluster type Kubeadm end to end (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap): the real
# binary, `luaprov run --sim --cluster-type Kubeadm` (LUAPROV_KUBEADM_TOKEN and the
# kubeadm-ca-cert-hash setting take the simulated kubeadm cluster's values), the simulated Kubernetes
# API and Alibaba Cloud over real HTTP. The token never shows in the engine's log.
#   (a) a NodeClaim (label, taint) of an ECSNodeClass with spec.clusterEndpoint the simulated API
#       server and maxPods -> the instance's user data writes a kubeadm JoinConfiguration with the
#       token, the CA hash, the NodeClaim's labels and taints, a kubelet patch with maxPods, and runs
#       kubeadm join -> the simulated kubelet registers the Node with exactly those -> the NodeClaim
#       is Registered and Initialized, with no Container Service call.
#   (b) a class whose clusterEndpoint is another API server: launched, never joins, the kubelet says
#       why; (c) a class without clusterEndpoint: UserDataReady=False naming the field.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sim_lib.sh"

start_sim_engine --cluster-type Kubeadm
NC=/apis/karpenter.sh/v1/nodeclaims
CLASSES=/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses
API_SERVER=172.16.255.100:6443 # sim/alibaba/kubeadm.lua, docs/sim.md
TOKEN=lpsim1.kubeadmsimulator

nodeclass() { # nodeclass NAME ENDPOINT-JSON
  kpost $CLASSES '{"apiVersion":"karpenter.alibabacloud.com/v1alpha1","kind":"ECSNodeClass","metadata":{"name":"'"$1"'"},
    "spec":{"vSwitchSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
    "securityGroupSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
    "imageSelectorTerms":[{"alias":"AlibabaCloudLinux3"}],"kubelet":{"maxPods":42},
    "clusterEndpoint":'"$2"'}}'
}
instance_of() { kget "$NC/$1" | jq -r .status.providerID | sed 's/^[^.]*\.//'; }

nodeclass kubeadm "\"https://$API_SERVER\""
nodeclass elsewhere '"10.9.9.9:6443"'
nodeclass unset null
until_ok "ECSNodeClass kubeadm Ready" 10 condition "$CLASSES/kubeadm" Ready True
kpost /apis/karpenter.sh/v1/nodepools '{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"default"},
  "spec":{"template":{"spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"kubeadm"},
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]}]}}}}'

# ---- (c) no clusterEndpoint: the class says what to set ------------------------------------------
until_ok "ECSNodeClass unset UserDataReady=False" 10 condition "$CLASSES/unset" UserDataReady False
kget "$CLASSES/unset" | jq -e '.status.conditions[] | select(.type == "UserDataReady") | .reason == "InvalidUserData"
  and (.message | startswith("ECSNodeClass spec.clusterEndpoint is not set"))' >/dev/null \
  || fail "UserDataReady names spec.clusterEndpoint: $(kget "$CLASSES/unset" | jq -c .status.conditions)"

# ---- (a) the node joins through kubeadm ---------------------------------------------------------
kpost $NC "$(web_claim join-1 kubeadm)"
kpost $NC "$(web_claim lost-1 elsewhere)"
for c in join-1 lost-1; do until_ok "NodeClaim $c Launched" 15 condition "$NC/$c" Launched True; done
ID="$(instance_of join-1)"
ud="$(curl -sf "$ALI/_sim/instances/$ID/user-data" | jq -r .user_data)" || fail "user data of $ID"
[[ "$ud" == '#!/bin/bash'* ]] || fail "the user data is a bash script: $ud"
[[ "$(grep -c '^kubeadm join --config /etc/kubernetes/luaprov/kubeadm-join.json$' <<<"$ud")" == 1 ]] \
  || fail "one kubeadm join: $ud"
! grep -q attach_node.sh <<<"$ud" || fail "no ACK attach command: $ud"
config="$(sed -n "/<<'LUAPROV_JOIN_CONFIGURATION'/,/^LUAPROV_JOIN_CONFIGURATION$/p" <<<"$ud" | sed '1d;$d')"
jq -e --arg s "$API_SERVER" --arg t "$TOKEN" '.apiVersion == "kubeadm.k8s.io/v1beta4" and .kind == "JoinConfiguration"
  and .discovery.bootstrapToken.apiServerEndpoint == $s and .discovery.bootstrapToken.token == $t
  and (.discovery.bootstrapToken.caCertHashes | length) == 1
  and .nodeRegistration.kubeletExtraArgs == [{"name": "node-labels",
    "value": "karpenter.sh/capacity-type=on-demand,karpenter.sh/nodepool=default,team=web"}]
  and .nodeRegistration.taints == [{"key": "dedicated", "value": "web", "effect": "NoSchedule"},
    {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]' <<<"$config" >/dev/null \
  || fail "JoinConfiguration: $config"
grep -qx '{"maxPods":42}' <<<"$ud" || fail "kubelet patch with maxPods: $ud"
bash -n <<<"$ud" || fail "the user data is not valid bash"

advance 20 # Running after 15 simulated seconds
until_ok "NodeClaim join-1 Initialized" 15 condition "$NC/join-1" Initialized True
condition "$NC/join-1" Registered True || fail "join-1 Registered"
pid="$(kget "$NC/join-1" | jq -r .status.providerID)"
curl -sf "$K/_sim/kubelet/nodes" | jq -e --arg p "$pid" '.nodes[] | select(.node.spec.providerID == $p) | .node
  | ([.spec.taints[] | "\(.key)=\(.value // ""):\(.effect)"] == ["dedicated=web:NoSchedule", "karpenter.sh/unregistered=:NoExecute"])
    and .metadata.labels.team == "web" and .metadata.labels["karpenter.sh/capacity-type"] == "on-demand"
    and .metadata.labels["ack.aliyun.com"] == null and .status.capacity.pods == "42"' >/dev/null \
  || fail "the kubelet's Node: $(curl -sf "$K/_sim/kubelet/nodes" | jq -c .)"
node="$(kget "$NC/join-1" | jq -r .status.nodeName)"
kget "/api/v1/nodes/$node" | jq -e '[.spec.taints[]? | .key] == ["dedicated"]' >/dev/null \
  || fail "the engine lifts the unregistered taint: $(kget "/api/v1/nodes/$node" | jq -c .spec.taints)"

# ---- (b) another API server: the kubelet refuses, and says why ----------------------------------
LOST="$(instance_of lost-1)"
refused() { curl -sf "$K/_sim/state" | jq -e --arg id "$LOST" '.kubelet.nodes[] | select(.instance_id == $id)
  | .not_registered == "kubeadm join: discovery.bootstrapToken.apiServerEndpoint \"10.9.9.9:6443\" is not the simulated cluster'"'"'s API server (172.16.255.100:6443)"' >/dev/null; }
until_ok "the kubelet refuses $LOST" 10 refused
! condition "$NC/lost-1" Registered True || fail "lost-1 never registers"

CALLS="$(curl -sf "$ALI/_sim/state" | jq -c '[.calls.DescribeClusterAttachScripts // 0, .calls.DescribeClusterNodePools // 0]')"
[[ "$CALLS" == "[0,0]" ]] || fail "no Container Service call for Kubeadm, got $CALLS"
! grep -q "$TOKEN" "$ENGINE_LOG" || fail "the token is in the engine's log"
echo "ok: a node joined through kubeadm join; another API server and a missing clusterEndpoint refused"
