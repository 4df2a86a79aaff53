#!/usr/bin/env bash
# When a node cannot join (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap, "When it fails"),
# end to end: the real binary, `luaprov run --sim`, over real HTTP.
#   (a) the Container Service refuses the attach script (Forbidden.RAM, then Throttling.User, then a
#       cluster it does not know): a pending pod's NodeClaim stays with Launched=Unknown and a message
#       naming DescribeClusterAttachScripts, the code and the request ID; no instance is launched and
#       the offering is not marked unavailable: once the fault is cleared the NodeClaim launches in
#       that very offering (the NodePool allows only it), made once, nothing leaked.
#   (b) a Custom cluster whose spec.userData runs no attach command: the instance never gets a Node,
#       the simulated kubelet says why, and the registration timeout (shortened by the run config)
#       deletes the NodeClaim and releases its instance.
#   (c) a spec.userData that is a broken MIME document: the ECSNodeClass is UserDataReady=False and
#       Ready=False with the parser's reason, and nothing is launched.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sim_lib.sh"

NC=/apis/karpenter.sh/v1/nodeclaims
CLASSES=/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses
TYPE=ecs.g7.xlarge ZONE=cn-hangzhou-i

calls() { curl -sf "$ALI/_sim/state" | jq -r --arg a "$1" '.calls[$a] // 0'; }
instances() { curl -sf "$ALI/_sim/state" | jq '.instances | length'; }
claims() { kget $NC | jq '.items | length'; }
launched_message() { kget "$NC/$1" | jq -r '.status.conditions[]? | select(.type == "Launched") | "\(.status) \(.reason) \(.message)"'; }
# launch_refused CLAIM REASON TEXT...: Launched=Unknown with REASON and a message holding each TEXT
# and a request ID
launch_refused() {
  local m
  m="$(launched_message "$1")"
  [[ "$m" == "Unknown $2 "* && "$m" == *"DescribeClusterAttachScripts"* && "$m" =~ RequestId\ [0-9A-F-]{36} ]] || return 1
  shift 2
  for t in "$@"; do [[ "$m" == *"$t"* ]] || return 1; done
}
nodepool() { # nodepool NAME [TEMPLATE_METADATA]: on-demand $TYPE in $ZONE only
  kpost /apis/karpenter.sh/v1/nodepools "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodePool\",\"metadata\":{\"name\":\"$1\"},
  \"spec\":{\"template\":{\"spec\":{\"nodeClassRef\":{\"group\":\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"name\":\"default\"},
  \"requirements\":[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]},
  {\"key\":\"node.kubernetes.io/instance-type\",\"operator\":\"In\",\"values\":[\"$TYPE\"]},
  {\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[\"$ZONE\"]}]}}}}"
}
pod() { kpost /api/v1/namespaces/default/pods "{\"metadata\":{\"name\":\"$1\"},
  \"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"nginx\",\"resources\":{\"requests\":{\"cpu\":\"500m\"}}}]}}"; }
one_claim() { [[ "$(claims)" == 1 ]]; }
# pending_pod_claim: the default class and NodePool, a pending pod, and the NodeClaim the provisioner
# makes for it (in CLAIM)
pending_pod_claim() {
  post_default_nodeclass
  nodepool default
  until_ok "ECSNodeClass Ready" 10 condition "$CLASSES/default" Ready True
  pod web
  until_ok "the provisioner made a NodeClaim" 15 one_claim
  CLAIM="$(kget $NC | jq -r '.items[0].metadata.name')"
}

# ---- (a) the Container Service refuses: Forbidden.RAM, then throttling ----------------------------
start_sim_engine
RAM_RULE="$(curl -sf -X POST "$ALI/_sim/faults" -d '{"action":"DescribeClusterAttachScripts","code":"Forbidden.RAM"}' \
  | jq -r '.added[0].id')" || fail "Forbidden.RAM fault"
pending_pod_claim
until_ok "$CLAIM refused for Forbidden.RAM" 15 launch_refused "$CLAIM" ForbiddenRAM "Forbidden.RAM" "ACK cluster luaprov-sim" "HTTP 403"
grep -q '"msg":"reconcile failed, will retry".*DescribeClusterAttachScripts: Auth (Forbidden.RAM).*"code":"CreateError","reason":"Forbidden.RAM","action":"DescribeClusterAttachScripts","request_id":"[0-9A-F-]\{36\}"' \
  "$ENGINE_LOG" || fail "the refusal logged with the action, the cloud's code and the request ID as fields"

# the throttle rule goes in behind the Forbidden.RAM one (the oldest rule fires), which then goes:
# no call finds the Container Service answering in between
curl -sf -X POST "$ALI/_sim/faults" -d '{"action":"DescribeClusterAttachScripts","kind":"throttle"}' >/dev/null \
  || fail "throttle fault"
curl -sf -X DELETE "$ALI/_sim/faults/$RAM_RULE" >/dev/null || fail "remove the Forbidden.RAM rule"
until_ok "$CLAIM refused for throttling" 40 launch_refused "$CLAIM" ThrottlingUser "Throttling.User"
[[ "$(calls RunInstances)" == 0 && "$(instances)" == 0 ]] || fail "nothing launched while the attach script fails"
one_claim || fail "the provisioner waits for its NodeClaim: $(claims) NodeClaims"
! grep -q '"msg":"offering marked unavailable"' "$ENGINE_LOG" || fail "an attach-script failure marked an offering unavailable"

curl -sf -X DELETE "$ALI/_sim/faults" >/dev/null
until_ok "$CLAIM launched once the fault is cleared" 60 condition "$NC/$CLAIM" Launched True
OFFERING="$(curl -sf "$ALI/_sim/state" | jq -r '.instances[0] | "\(.instance_type)/\(.zone)"')"
[[ "$OFFERING" == "$TYPE/$ZONE" ]] || fail "launched in $OFFERING: the only offering allowed must still be available"
advance 20
until_ok "$CLAIM Initialized" 15 condition "$NC/$CLAIM" Initialized True
until_ok "pod web Running" 10 bash -c "curl -sf '$K/api/v1/namespaces/default/pods/web' | jq -e '.status.phase == \"Running\"' >/dev/null"
[[ "$(claims)" == 1 && "$(instances)" == 1 && "$(calls RunInstances)" == 1 ]] \
  || fail "one NodeClaim, one instance, one RunInstances: $(claims), $(instances), $(calls RunInstances)"
kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status after SIGTERM"

# ---- (a) a cluster the Container Service does not know ------------------------------------------
ENGINE_LOG="$WORK/engine-unknown.log"
start_sim_engine --cluster-id c-unknown
pending_pod_claim
until_ok "$CLAIM refused: no such cluster" 15 launch_refused "$CLAIM" ErrorClusterNotFound "ACK cluster c-unknown" \
  "ErrorClusterNotFound" "HTTP 404"
[[ "$(calls RunInstances)" == 0 && "$(instances)" == 0 ]] || fail "nothing launched for an unknown cluster"
kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status after SIGTERM"

# ---- (b) Custom user data that joins nothing: the registration timeout cleans up ----------------
cat >"$WORK/config.yaml" <<'YAML'
controllers:
  registrationTimeout: 5s
  terminateRequeue: 0.5s
YAML
ENGINE_LOG="$WORK/engine-custom.log"
start_sim_engine --cluster-type Custom --config "$WORK/config.yaml"
kpost $CLASSES '{"apiVersion":"karpenter.alibabacloud.com/v1alpha1","kind":"ECSNodeClass","metadata":{"name":"default"},
  "spec":{"vSwitchSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "securityGroupSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "imageSelectorTerms":[{"alias":"AlibabaCloudLinux3"}],"userData":"#!/bin/bash\necho no attach here\n"}}'
until_ok "ECSNodeClass Ready" 10 condition "$CLASSES/default" Ready True
kpost $NC '{"apiVersion":"karpenter.sh/v1","kind":"NodeClaim","metadata":{"name":"lonely","labels":{"karpenter.sh/nodepool":"default"}},
  "spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"default"},
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]}],
  "resources":{"requests":{"cpu":"1","memory":"1Gi"}}}}'
until_ok "NodeClaim lonely Launched" 15 condition "$NC/lonely" Launched True
ID="$(kget "$NC/lonely" | jq -r .status.providerID | sed 's/^[^.]*\.//')"
[[ "$(curl -sf "$ALI/_sim/instances/$ID/user-data" | jq -r .user_data)" == $'#!/bin/bash\necho no attach here' ]] \
  || fail "Custom: the user data is spec.userData as written: $(curl -sf "$ALI/_sim/instances/$ID/user-data")"
[[ "$(calls DescribeClusterAttachScripts)" == 0 ]] || fail "Custom makes no Container Service call"
advance 20 # the instance is Running, and still no Node
refused() { curl -sf "$K/_sim/state" | jq -e --arg i "$ID" '.kubelet.nodes[] | select(.instance_id == $i)
  | .not_registered | test("no ACK attach command")' >/dev/null; }
until_ok "the kubelet refuses $ID" 10 refused
until_ok "NodeClaim lonely deleted by the registration timeout" 20 gone "$NC/lonely"
[[ "$(kget /api/v1/nodes | jq '.items | length')" == 0 ]] || fail "no Node ever registered"
until_ok "instance $ID released" 10 bash -c "[[ \$(curl -sf '$ALI/_sim/state' | jq '.instances | length') == 0 ]]"
metric_is 'luaprov_nodeclaims_disrupted_total{reason="registration_timeout",nodepool="default"}' 1 \
  || fail "registration_timeout counted: $(curl -sf "http://$ADDR/metrics" | grep disrupted)"
kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status after SIGTERM"

# ---- (c) a broken MIME document: the class is not Ready, nothing launches -----------------------
ENGINE_LOG="$WORK/engine-mime.log"
start_sim_engine
kpost $CLASSES '{"apiVersion":"karpenter.alibabacloud.com/v1alpha1","kind":"ECSNodeClass","metadata":{"name":"default"},
  "spec":{"vSwitchSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "securityGroupSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "imageSelectorTerms":[{"alias":"AlibabaCloudLinux3"}],
  "userData":"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"==B==\"\n\n--==B==\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho hi\n"}}'
nodepool default
until_ok "ECSNodeClass UserDataReady=False" 10 condition "$CLASSES/default" UserDataReady False
kget "$CLASSES/default" | jq -e '.status.conditions[] | select(.type == "UserDataReady")
  | .reason == "InvalidUserData" and (.message | test("spec.userData: MIME user data: the closing boundary line"))' >/dev/null \
  || fail "UserDataReady names the MIME problem: $(kget "$CLASSES/default" | jq -c .status.conditions)"
kget "$CLASSES/default" | jq -e '.status.conditions[] | select(.type == "Ready") | .status == "False"
  and .reason == "InvalidUserData" and (.message | test("closing boundary"))' >/dev/null || fail "Ready=False with the reason: $(kget "$CLASSES/default" | jq -c .status.conditions)"
pod web
# the provisioner has seen the pod and found no NodePool whose class can launch it
until_ok "the provisioner gives up on pod web" 10 grep -q '"msg":"could not schedule pod","pod":"default/web"' "$ENGINE_LOG"
[[ "$(claims)" == 0 ]] || fail "no NodeClaim for a class that is not Ready: $(claims)"
[[ "$(calls RunInstances)" == 0 && "$(instances)" == 0 ]] || fail "nothing launched with a broken MIME userData"
echo "ok: attach-script refusals, a node that never joins, and broken MIME user data"
