# Shared by the integration tests that run `luaprov run --sim` (sourced after lib.sh): start the
# engine and find its simulators, then read and write the simulated Kubernetes API ($K) and Alibaba
# account ($ALI) with curl and jq.

# start_sim_engine ARGS...: `luaprov run --sim ARGS...`; sets K and ALI from its start line.
start_sim_engine() {
  command -v jq >/dev/null || fail "jq missing: tools/install-deps.sh test installs it"
  start_engine --sim "$@"
  local sim
  sim="$(sed -n 's/.*"msg":"engine started".*"sim":\({[^}]*}\).*/\1/p' "$ENGINE_LOG" | head -1)"
  K="$(jq -r .kubernetes <<<"$sim")"
  ALI="$(jq -r .alibaba <<<"$sim")"
  [[ "$K" == http* && "$ALI" == http* ]] || fail "simulator URLs in the start line: $sim"
}

kget() { curl -sf "$K$1"; }
kpost() { curl -sf -X POST -H 'content-type: application/json' "$K$1" -d "$2" >/dev/null || fail "POST $1"; }
kpatch() {
  curl -sf -X PATCH -H 'content-type: application/merge-patch+json' "$K$1" -d "$2" >/dev/null || fail "PATCH $1"
}
# until_ok DESCRIPTION SECONDS COMMAND...: retries COMMAND every 0.1 s.
until_ok() {
  local what="$1" secs="$2"
  shift 2
  for _ in $(seq 1 $((secs * 10))); do
    "$@" && return 0
    sleep 0.1
  done
  fail "timed out after ${secs}s waiting for: $what"
}
condition() { # condition PATH TYPE STATUS
  kget "$1" | jq -e --arg t "$2" --arg s "$3" '.status.conditions[]? | select(.type == $t and .status == $s)' >/dev/null
}
gone() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "$K$1")" == "404" ]]; }
advance() { curl -sf -X POST "$ALI/_sim/advance" -d "{\"seconds\": $1}" >/dev/null; }

# post_default_nodeclass: the ECSNodeClass "default", selecting the simulated account's vSwitches and
# security groups (tag karpenter.sh/discovery=luaprov-sim) and Alibaba Cloud Linux 3.
post_default_nodeclass() {
  kpost /apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses '{"apiVersion":"karpenter.alibabacloud.com/v1alpha1",
    "kind":"ECSNodeClass","metadata":{"name":"default"},"spec":{
    "vSwitchSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
    "securityGroupSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
    "imageSelectorTerms":[{"alias":"AlibabaCloudLinux3"}]}}'
}

# web_claim NAME [CLASS]: a NodeClaim of NodePool default for ECSNodeClass CLASS (default "default"):
# label team=web, taint dedicated=web:NoSchedule, on-demand amd64, 1 CPU and 1Gi.
web_claim() {
  printf '{"apiVersion":"karpenter.sh/v1","kind":"NodeClaim","metadata":{"name":"%s",
  "labels":{"karpenter.sh/nodepool":"default","team":"web"}},
  "spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"%s"},
  "taints":[{"key":"dedicated","value":"web","effect":"NoSchedule"}],
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]},
  {"key":"kubernetes.io/arch","operator":"In","values":["amd64"]}],
  "resources":{"requests":{"cpu":"1","memory":"1Gi"}}}}' "$1" "${2:-default}"
}
