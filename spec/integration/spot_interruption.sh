#!/usr/bin/env bash
# Spot interruption end to end (docs/alibaba.md#spot-interruption): the real binary, `luaprov run
# --sim`, every controller against the simulated Kubernetes API and Alibaba Cloud over real HTTP.
#   pending pods -> the provisioner launches a spot NodeClaim -> its Node registers (and the instance
#   is tagged Name=<node>) -> the pods run there -> the cloud announces a reclaim in NOTICE simulated
#   seconds (POST /_sim/reclaim) -> InstanceExpired=True on the Node -> the NodeClaim is deleted with
#   TerminatingOnInterruption events, its offering marked unavailable -> the Node is drained and the
#   engine releases the old instance -> the pods (recreated by this script, as their ReplicaSet would)
#   run on a replacement NodeClaim of another offering ->
#   all before the reclaim: the simulated clock has not reached the reclaim time, and the old instance
#   was released by the engine (DeleteInstances), not by the cloud's reclaim (the simulator logs
#   "spot instance reclaimed" when its sweep releases one); then the clock passes the reclaim time and
#   nothing is left of the old instance, nothing leaked, nothing launched twice.
#
# Why NOTICE is 60 s: the simulated clock follows real time plus what the script advances, and the
# replacement's boot advances it 20 s, so the engine has NOTICE - 20 = 40 s of real time from the
# announcement to the pods running on the replacement. A normal run needs 2-3 s (a wide margin even on
# a loaded machine), yet the check can fail: an engine that took longer would have its old instance
# reclaimed under its pods, and the test says so ("replaced only after the reclaim") instead of passing
# because a 300 s notice cannot run out within the script's timeouts.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sim_lib.sh"

cat >"$WORK/config.yaml" <<'YAML'
controllers:
  drainRequeue: 0.2s
  terminateRequeue: 0.5s
YAML
start_sim_engine --config "$WORK/config.yaml"
NOTICE=60 # see the header

sim_now() { curl -sf "$ALI/_sim/clock" | jq -r '.epoch'; }
instances() { curl -sf "$ALI/_sim/state" | jq -c '[.instances[].id]'; }
claims() { kget /apis/karpenter.sh/v1/nodeclaims | jq -r '[.items[] | select(.metadata.deletionTimestamp == null)
  | .metadata.name] | join(" ")'; }
one_claim() { [[ -n "$(claims)" && "$(claims)" != *" "* ]]; }
pods_on() { # pods_on NODE: both pods bound there and Running
  kget /api/v1/namespaces/default/pods | jq -e --arg n "$1" '[.items[] | select(.spec.nodeName == $n
    and .status.phase == "Running")] | length == 2' >/dev/null
}
pods_gone() { [[ "$(kget /api/v1/namespaces/default/pods | jq '.items | length')" == "0" ]]; }
make_pods() {
  for p in web-a web-b; do
    kpost /api/v1/namespaces/default/pods "{\"metadata\":{\"name\":\"$p\",\"labels\":{\"app\":\"web\"}},
      \"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"nginx\",\"resources\":{\"requests\":{\"cpu\":\"500m\"}}}]}}"
  done
}
# boot NAME: the NodeClaim launches, its instance boots (simulated time), its Node registers; prints the Node
boot() {
  until_ok "NodeClaim $1 Launched" 15 condition "/apis/karpenter.sh/v1/nodeclaims/$1" Launched True
  advance 20
  until_ok "NodeClaim $1 Initialized" 15 condition "/apis/karpenter.sh/v1/nodeclaims/$1" Initialized True
  kget "/apis/karpenter.sh/v1/nodeclaims/$1" | jq -r .status.nodeName
}
offering() { kget "/api/v1/nodes/$1" | jq -r '.metadata.labels["node.kubernetes.io/instance-type"] + "/"
  + .metadata.labels["topology.kubernetes.io/zone"] + "/" + .metadata.labels["karpenter.sh/capacity-type"]'; }

post_default_nodeclass
kpost /apis/karpenter.sh/v1/nodepools '{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"spot"},
  "spec":{"template":{"spec":{"nodeClassRef":{"group":"karpenter.alibabacloud.com","kind":"ECSNodeClass","name":"default"},
  "requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["spot"]},
  {"key":"kubernetes.io/arch","operator":"In","values":["amd64"]}]}}}}'
until_ok "ECSNodeClass Ready" 10 condition /apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses/default Ready True

# ---- two pods run on a spot node; the instance carries the node's name -------------------------
make_pods
until_ok "the provisioner made one NodeClaim" 15 one_claim
OLD="$(claims)"
OLD_NODE="$(boot "$OLD")"
until_ok "pods running on $OLD_NODE" 10 pods_on "$OLD_NODE"
OLD_OFFERING="$(offering "$OLD_NODE")"
[[ "$OLD_OFFERING" == */spot ]] || fail "a spot node, got $OLD_OFFERING"
OLD_ID="$(kget "/apis/karpenter.sh/v1/nodeclaims/$OLD" | jq -r .status.providerID | sed 's/^[^.]*\.//')"
tagged() { curl -sf "$ALI/_sim/state" | jq -e --arg i "$OLD_ID" --arg n "$OLD_NODE" \
  '.instances[] | select(.id == $i) | .tags.Name == $n' >/dev/null; }
until_ok "instance $OLD_ID tagged Name=$OLD_NODE" 10 tagged
until_ok "NodeClaim $OLD annotated as tagged" 10 bash -c "curl -sf '$K/apis/karpenter.sh/v1/nodeclaims/$OLD' | jq -e \
  '.metadata.annotations[\"luaprov.io/instance-tagged\"] == \"true\"' >/dev/null"

# ---- the cloud announces the reclaim ----------------------------------------------------------
RECLAIM="$(curl -sf -X POST "$ALI/_sim/reclaim" -d "{\"instance_id\": \"$OLD_ID\", \"notice_seconds\": $NOTICE}")" \
  || fail "POST /_sim/reclaim"
RECLAIM_AT="$(jq -r .termination_time <<<"$RECLAIM")"
# the admin path names what it cannot reclaim
[[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$ALI/_sim/reclaim" -d '{"instance_id": "i-none"}')" == 404 ]] \
  || fail "reclaim of an unknown instance must be 404"
# the engine acted on InstanceExpired=True: its event says so (the Node itself may be drained away
# before a poll of it would see the condition)
announced() {
  kget /api/v1/namespaces/default/events | jq -e --arg n "$OLD_NODE" '.items[] | select(.reason ==
    "TerminatingOnInterruption" and .involvedObject.name == $n and (.message | contains("InstanceExpired")))' >/dev/null
}
until_ok "TerminatingOnInterruption (InstanceExpired) on $OLD_NODE" 10 announced
until_ok "pods evicted from $OLD_NODE" 15 pods_gone
make_pods # their ReplicaSet's work: the evicted pods come back pending
until_ok "a replacement NodeClaim" 15 bash -c "[[ -n \"\$(curl -sf '$K/apis/karpenter.sh/v1/nodeclaims' | jq -r \
  '.items[] | select(.metadata.name != \"$OLD\" and .metadata.deletionTimestamp == null) | .metadata.name')\" ]]"
NEW="$(claims | tr ' ' '\n' | grep -v "^$OLD$" | head -1)"
NEW_NODE="$(boot "$NEW")"
until_ok "pods running on $NEW_NODE" 10 pods_on "$NEW_NODE"
NOW="$(sim_now)" # the moment the replacement serves the pods
STATE_THEN="$(curl -sf "$ALI/_sim/state")"
[[ "$NEW_NODE" != "$OLD_NODE" ]] || fail "the pods must move to another node"
[[ "$(offering "$NEW_NODE")" != "$OLD_OFFERING" ]] || fail "the replacement must avoid $OLD_OFFERING (marked unavailable)"
# all of it before the reclaim: the simulated clock had not reached the termination time when the pods
# ran on the replacement, and the old instance was gone by then because the engine released it
reclaimed_old() { grep -q "\"msg\":\"spot instance reclaimed\".*\"instance_id\":\"$OLD_ID\"" "$ENGINE_LOG"; }
AT="$(date -u -d "$RECLAIM_AT" +%s)"
awk -v now="$NOW" -v at="$AT" 'BEGIN { exit !(now < at) }' \
  || fail "replaced only after the reclaim (simulated clock $NOW >= $AT): the engine took more than $((NOTICE - 20)) s"
! reclaimed_old || fail "the cloud's reclaim released $OLD_ID before the engine did"
[[ "$(jq --arg i "$OLD_ID" '[.instances[].id] | index($i)' <<<"$STATE_THEN")" == null ]] \
  || fail "the engine had not released $OLD_ID when the replacement served the pods"
[[ "$(jq '(.calls.DeleteInstances // 0) + (.calls.DeleteInstance // 0)' <<<"$STATE_THEN")" -ge 1 ]] \
  || fail "the engine released $OLD_ID with no DeleteInstances call"

for who in "$OLD" "$OLD_NODE"; do
  kget /api/v1/namespaces/default/events | jq -e --arg n "$who" '.items[] | select(.reason == "TerminatingOnInterruption"
    and .type == "Warning" and .involvedObject.name == $n)' >/dev/null || fail "TerminatingOnInterruption event on $who"
done
grep -q '"msg":"terminating on interruption".*"condition":"InstanceExpired"' "$ENGINE_LOG" || fail "interruption logged"
metric_is 'luaprov_interruptions_total{reason="InstanceExpired"}' 1 || fail "luaprov_interruptions_total"

# ---- the reclaim time passes: nothing left of the old instance, nothing leaked or made twice ----
advance "$NOTICE"
awk -v now="$(sim_now)" -v at="$AT" 'BEGIN { exit !(now >= at) }' || fail "the clock passed the reclaim time"
gone_old() { [[ "$(instances | jq --arg i "$OLD_ID" 'index($i)')" == null ]]; }
until_ok "old instance gone" 10 gone_old
! reclaimed_old || fail "the cloud's reclaim found $OLD_ID still there after the engine's release"
until_ok "old NodeClaim gone" 15 gone "/apis/karpenter.sh/v1/nodeclaims/$OLD"
[[ "$(instances | jq length)" == 1 ]] || fail "one instance (the replacement) left, got $(instances)"
[[ "$(claims)" == "$NEW" ]] || fail "one NodeClaim (the replacement) left, got $(claims)"
RUNS="$(curl -sf "$ALI/_sim/state" | jq '.calls.RunInstances')"
[[ "$RUNS" == 2 ]] || fail "two launches (the first and its replacement), got $RUNS"
pods_on "$NEW_NODE" || fail "the pods still run on $NEW_NODE"
metric_is 'luaprov_interruptions_total{reason="InstanceExpired"}' 1 || fail "interrupted once"
echo "ok: spot interruption replaced $OLD ($OLD_OFFERING) by $NEW before the reclaim at $RECLAIM_AT"
