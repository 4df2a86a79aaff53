#!/usr/bin/env bash
# Two engines with --leader-elect against one `luaprov sim` (a kubeconfig to its Kubernetes API, the
# Alibaba mapping pointed at its cloud): both sync their caches and are ready, exactly one holds the
# Lease and reconciles, the standby does nothing; when the leader stops (SIGTERM releases the Lease)
# the standby takes over within seconds and carries on (it launches the next NodeClaim).
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || fail "jq missing: tools/install-deps.sh test installs it"

"$LUAPROV" sim --log-format json >"$WORK/sim.out" 2>"$WORK/sim.log" &
SIM_PID=$!
trap 'kill -KILL $SIM_PID ${PIDS[*]:-} 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 1 100); do [[ -s "$WORK/sim.out" ]] && break; sleep 0.05; done
K="$(jq -r .kubernetes "$WORK/sim.out")"
export LUAPROV_ALIBABA_ENDPOINT="$(jq -r .alibaba "$WORK/sim.out")"
export ALIBABA_CLOUD_ACCESS_KEY_ID=LTAI5simulatoraccess ALIBABA_CLOUD_ACCESS_KEY_SECRET=simulator-secret-do-not-use
export CLUSTER_ID=luaprov-sim REGION_ID=cn-hangzhou POD_NAMESPACE=kube-system
cat >"$WORK/kubeconfig" <<YAML
current-context: sim
contexts: [{name: sim, context: {cluster: sim, user: sim}}]
clusters: [{name: sim, cluster: {server: "$K"}}]
users: [{name: sim, user: {}}]
YAML

declare -a PIDS ADDRS
start() { # start INDEX NAME
  local log="$WORK/engine-$2.log"
  POD_NAME="engine-$2" "$LUAPROV" run --kubeconfig "$WORK/kubeconfig" --leader-elect --metrics-addr 127.0.0.1:0 \
    --log-format json 2>"$log" &
  PIDS[$1]=$!
  for _ in $(seq 1 100); do
    ADDRS[$1]="$(sed -n 's/.*"msg":"engine started".*"metrics_addr":"\([^"]*\)".*/\1/p' "$log" | head -1)"
    [[ -n "${ADDRS[$1]}" ]] && return 0
    sleep 0.05
  done
  ENGINE_LOG="$log" fail "engine $2 did not start"
}
value() { curl -sf "http://${ADDRS[$1]}/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }
active() { [[ "$(value "$1" luaprov_controllers_active)" == "1" ]]; }
ready() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://${ADDRS[$1]}/readyz")" == "200" ]]; }
reconciles() { curl -sf "http://${ADDRS[$1]}/metrics" | awk '$1 ~ /^luaprov_controller_reconciles_total/ { n += $2 } END { print n + 0 }'; }
until_ok() {
  local what="$1" secs="$2"
  shift 2
  for _ in $(seq 1 $((secs * 10))); do "$@" && return 0; sleep 0.1; done
  ENGINE_LOG="$WORK/engine-a.log" fail "timed out after ${secs}s waiting for: $what (see also $WORK/engine-b.log: $(cat "$WORK/engine-b.log"))"
}

start 0 a
until_ok "engine a leads" 10 active 0
start 1 b
until_ok "engine b ready (caches synced)" 10 ready 1
sleep 3 # several of b's campaign rounds
active 1 && fail "both engines act"
HOLDER="$(curl -sf "$K/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/luaprov-leader-election" | jq -r .spec.holderIdentity)"
[[ "$HOLDER" == engine-a ]] || fail "the Lease names engine a: $HOLDER"

curl -sf -X POST -H 'content-type: application/json' "$K/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses" -d '{
  "apiVersion":"karpenter.alibabacloud.com/v1alpha1","kind":"ECSNodeClass","metadata":{"name":"default"},"spec":{
  "vSwitchSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "securityGroupSelectorTerms":[{"tags":{"karpenter.sh/discovery":"luaprov-sim"}}],
  "imageSelectorTerms":[{"alias":"AlibabaCloudLinux3"}]}}' >/dev/null || fail "create ECSNodeClass"
class_ready() {
  curl -sf "$K/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses/default" \
    | jq -e '.status.conditions[]? | select(.type == "Ready" and .status == "True")' >/dev/null
}
until_ok "ECSNodeClass Ready (by the leader)" 10 class_ready
[[ "$(reconciles 1)" == "0" ]] || fail "the standby reconciled: $(reconciles 1)"
(($(reconciles 0) > 0)) || fail "the leader reconciled nothing"

# the leader stops: it releases the Lease, the standby takes over at its next attempt
kill -TERM "${PIDS[0]}"
wait "${PIDS[0]}" || fail "engine a exit status"
grep -q '"msg":"shutdown complete"' "$WORK/engine-a.log" || fail "engine a shut down cleanly"
until_ok "engine b leads" 10 active 1
curl -sf -X POST -H 'content-type: application/json' "$K/apis/karpenter.sh/v1/nodeclaims" -d '{
  "apiVersion":"karpenter.sh/v1","kind":"NodeClaim","metadata":{"name":"after-failover"},
  "spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"default"},
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]}],
  "resources":{"requests":{"cpu":"1"}}}}' >/dev/null || fail "create NodeClaim"
launched() {
  curl -sf "$K/apis/karpenter.sh/v1/nodeclaims/after-failover" \
    | jq -e '.status.conditions[]? | select(.type == "Launched" and .status == "True")' >/dev/null
}
until_ok "NodeClaim launched by engine b" 15 launched
grep -q '"msg":"launched nodeclaim"' "$WORK/engine-b.log" || fail "engine b logged the launch"

kill -TERM "${PIDS[1]}"
wait "${PIDS[1]}" || fail "engine b exit status"
echo "leader election failover: ok"
