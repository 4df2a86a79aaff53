#!/usr/bin/env bash
# ECSNodeClasses of both groups against the real API server (docs/alibaba.md#the-ecsnodeclass): the
# examples of Alibaba Cloud's own provider (spec/fixtures/upstream-examples) apply to luaprov's CRDs
# unchanged, with strict field validation, and launch; a class in luaprov's earlier group
# (karpenter.k8s.alibabacloud), written in its earlier field names and with the same name, launches the
# same instance from its own NodePool; a class of the official group naming the spot strategy, the
# metadata options and kubelet settings launches an instance with each. Every launch parameter is
# read back from the simulated cloud.
source "$(dirname "$0")/lib.sh"
EXAMPLES="$ROOT/spec/fixtures/upstream-examples"
SIM_CLUSTER=luaprov-sim # the discovery tag of the simulated account's vSwitches and security groups

cluster_up
install_luaprov
start_sim
start_luaprov a
wait_until "luaprov ready" 60 luaprov_ready a

step "the upstream examples apply unchanged"
# ${CLUSTER_NAME} filled in, as the examples' README has envsubst do it
sed "s/\${CLUSTER_NAME}/$SIM_CLUSTER/" "$EXAMPLES/default-ecsnodeclass.yaml" \
  | kc apply --validate=strict -f - >/dev/null || fail "default-ecsnodeclass.yaml was refused"
kc apply --validate=strict -f "$EXAMPLES/minimal-ecsnodeclass.yaml" >/dev/null || fail "minimal-ecsnodeclass.yaml was refused"
condition() { # condition CLASS TYPE [GROUP]: the condition's "status reason"
  kc get "ecsnodeclasses.${3:-karpenter.alibabacloud.com}" "$1" -o json \
    | jq -r --arg t "$2" '.status.conditions[]? | select(.type == $t) | "\(.status) \(.reason)"'
}
ready() { [[ "$(condition "$1" Ready "${2:-}")" == "True Ready" ]]; }
wait_until "ECSNodeClass default Ready" 60 ready default
# minimal's selectors name the example's own cluster, which this account does not have
unresolved() { [[ "$(condition minimal VSwitchResolved)" == "False VSwitchResolutionFailed" ]]; }
wait_until "minimal says its vSwitch selector matched nothing" 60 unresolved
[[ "$(condition minimal RAMRoleResolved)" == "True RAMRoleResolved" ]] || fail "minimal: RAMRoleResolved $(condition minimal RAMRoleResolved)"
[[ "$(kc get ecsnodeclasses.karpenter.alibabacloud.com minimal -o jsonpath='{.status.ramRole}')" == KarpenterNodeRole ]] \
  || fail "minimal: status.ramRole"
# as its README says, the operator names their cluster: the same example, the tag edited
sed "s/my-cluster/$SIM_CLUSTER/" "$EXAMPLES/minimal-ecsnodeclass.yaml" | kc apply --validate=strict -f - >/dev/null
wait_until "ECSNodeClass minimal Ready" 60 ready minimal
jq -e '.status.vSwitches | length > 0 and all(.[]; .zone == .zoneID and (.availableIPAddressCount | type) == "number")' \
  <<<"$(kc get ecsnodeclasses.karpenter.alibabacloud.com default -o json)" >/dev/null || fail "default: status.vSwitches shape"

step "a class of the earlier group, in the earlier names, and one naming spot, metadata and kubelet settings"
if ! warning="$(kc apply --validate=strict -f - 2>&1 >/dev/null <<YAML
apiVersion: karpenter.k8s.alibabacloud/v1alpha1
kind: ECSNodeClass
metadata: {name: default}
spec:
  vSwitchSelectorTerms: [{tags: {karpenter.sh/discovery: $SIM_CLUSTER}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: $SIM_CLUSTER}}]
  imageSelectorTerms: [{id: aliyun_3_x64_20G_container_optimized_alibase_20250629.vhd}]
  systemDisk: {categories: [cloud_essd], volumeSize: 40Gi, performanceLevel: PL0}
  dataDisks: [{volumeSize: 120Gi}]
  dataDiskCategories: [cloud_essd]
  tags: {team: platform, environment: production}
YAML
)"; then fail "the earlier group's class was refused: $warning"; fi
[[ "$warning" == *"deprecated"* ]] || fail "applying the earlier group printed no deprecation warning: $warning"
kc apply --validate=strict -f - >/dev/null <<YAML
apiVersion: karpenter.alibabacloud.com/v1alpha1
kind: ECSNodeClass
metadata: {name: tuned}
spec:
  vSwitchSelectorTerms: [{tags: {karpenter.sh/discovery: $SIM_CLUSTER}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: $SIM_CLUSTER}}]
  imageSelectorTerms: [{imageFamily: acs:alibaba_cloud_linux_3_2104_lts_x64, imageOwnerAlias: system}]
  spotStrategy: SpotWithPriceLimit
  spotPriceLimit: 5
  metadataOptions: {httpTokens: required, httpPutResponseHopLimit: 2}
  kubelet: {maxPods: 50, systemReserved: {cpu: 200m, memory: 300Mi}, evictionHard: {memory.available: 5%}}
YAML
wait_until "the earlier group's default Ready" 60 ready default karpenter.k8s.alibabacloud
wait_until "ECSNodeClass tuned Ready" 60 ready tuned

step "a NodePool for each class, and a pod on each"
for pool in official:karpenter.alibabacloud.com:default:on-demand earlier:karpenter.k8s.alibabacloud:default:on-demand \
  minimal:karpenter.alibabacloud.com:minimal:on-demand tuned:karpenter.alibabacloud.com:tuned:spot; do
  IFS=: read -r name group class capacity <<<"$pool"
  kc apply -f - >/dev/null <<YAML
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: $name}
spec:
  template:
    spec:
      nodeClassRef: {group: $group, kind: ECSNodeClass, name: $class}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [$capacity]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [ecs.g7.xlarge]}
YAML
  kc apply -f - >/dev/null <<JSON
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"$name","namespace":"default"},
 "spec":{"replicas":1,"selector":{"matchLabels":{"app":"$name"}},"template":{"metadata":{"labels":{"app":"$name"}},
 "spec":{"terminationGracePeriodSeconds":5,"nodeSelector":{"karpenter.sh/nodepool":"$name"},
 "containers":[{"name":"app","image":"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}}}
JSON
done
all_running() { for app in official earlier minimal tuned; do running_is "$app" 1 || return 1; done; }
wait_until "a pod Running on each NodePool's node" 180 all_running
wait_until "NodeClaims, Nodes and instances agree" 60 settled

# instance POOL: what the simulated cloud recorded of the instance of the pool's NodeClaim
instance() {
  local id
  id="$(kc get nodeclaims -l "karpenter.sh/nodepool=$1" -o jsonpath='{.items[0].status.providerID}')"
  curl -sf "$ALI/_sim/state" | jq -c --arg id "${id#*.}" '.instances[] | select(.id == $id)'
}
official="$(instance official)" earlier="$(instance earlier)" minimal="$(instance minimal)" tuned="$(instance tuned)"

step "the upstream default launched what it names"
jq -e '.image_id == "aliyun_3_x64_20G_container_optimized_alibase_20250629.vhd"
  and .system_disk.category == "cloud_essd" and .system_disk.size == 40 and .system_disk.performance_level == "PL0"
  and (.data_disks | length) == 1 and .data_disks[0].category == "cloud_essd" and .data_disks[0].size == 120
  and .data_disks[0].performance_level == "PL0" and .data_disks[0].delete_with_instance == true
  and .tags.team == "platform" and .tags.environment == "production" and .ram_role == ""' <<<"$official" >/dev/null \
  || fail "official default's instance: $official"
step "the earlier group's class of the same name launched the same instance"
for field in image_id system_disk instance_type security_group_ids; do
  [[ "$(jq -c ".$field" <<<"$official")" == "$(jq -c ".$field" <<<"$earlier")" ]] \
    || fail "$field: official $(jq -c ".$field" <<<"$official"), earlier $(jq -c ".$field" <<<"$earlier")"
done
[[ "$(jq -c '.data_disks | map({category, size})' <<<"$official")" == "$(jq -c '.data_disks | map({category, size})' <<<"$earlier")" ]] \
  || fail "data disks differ: $official / $earlier"
[[ "$(jq -r .tags.team <<<"$earlier")" == platform ]] || fail "earlier: tags"
step "minimal launched with its RAM role"
[[ "$(jq -r .ram_role <<<"$minimal")" == KarpenterNodeRole ]] || fail "minimal's instance: $minimal"
step "tuned launched spot at its limit, with its metadata options, and its node has its kubelet settings"
jq -e '.spot_strategy == "SpotWithPriceLimit" and .spot_price_limit == 5 and .http_tokens == "required"
  and .http_put_response_hop_limit == 2 and .http_endpoint == "enabled"' <<<"$tuned" >/dev/null \
  || fail "tuned's instance: $tuned"
config="$(curl -sf "$ALI/_sim/instances/$(jq -r .id <<<"$tuned")/user-data" | jq -r .user_data \
  | sed -n 's/.* --node-config \([^ ]*\) .*/\1/p')"
[[ "$(base64 -d <<<"$config")" == '{"kubelet_config":{"evictionHard":{"memory.available":"5%"},"maxPods":50,"systemReserved":{"cpu":"200m","memory":"300Mi"}}}' ]] \
  || fail "tuned's node config: $(base64 -d <<<"$config")"
tuned_claim="$(kc get nodeclaims -l karpenter.sh/nodepool=tuned -o json | jq '.items[0].status')"
[[ "$(jq -r .capacity.pods <<<"$tuned_claim")" == 50 ]] || fail "tuned's NodeClaim pods capacity: $tuned_claim"

step "editing a field that changes an instance drifts the nodes of that class only"
kc patch ecsnodeclasses.karpenter.alibabacloud.com default --type merge -p '{"spec":{"dataDisks":[{"category":"cloud_essd","size":200}]}}' >/dev/null
claim_of() { kc get nodeclaims -l "karpenter.sh/nodepool=$1" -o json; }
drifted() { jq -e 'any(.items[].status.conditions[]?; .type == "Drifted" and .status == "True")' <<<"$(claim_of "$1")" >/dev/null; }
wait_until "the official default's NodeClaim Drifted" 60 drifted official
! drifted earlier || fail "the earlier group's same-named class drifted with the official one"

no_rbac_denials
echo "e2e nodeclass_shapes: passed" >&2
