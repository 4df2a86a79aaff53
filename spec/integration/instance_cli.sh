#!/usr/bin/env bash
# `luaprov instance` (docs/writing-policies.md#a-real-instance-document) against `luaprov run --sim`:
# a NodeClaim launches, its instance document is printed from the NodeClaim as kubectl writes it, and
# that document fed to `luaprov eval drift` is accepted as the drift policy's `instance`.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/sim_lib.sh"

start_sim_engine
# the simulator accepts its own credentials (docs/alibaba.md)
export ALIBABA_CLOUD_ACCESS_KEY_ID=LTAI5simulatoraccess ALIBABA_CLOUD_ACCESS_KEY_SECRET=simulator-secret-do-not-use
NC=/apis/karpenter.sh/v1/nodeclaims
CLASSES=/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses
post_default_nodeclass
until_ok "ECSNodeClass default Ready" 10 condition "$CLASSES/default" Ready True
kpost $NC "$(web_claim web-1)"
until_ok "NodeClaim web-1 Launched" 15 condition "$NC/web-1" Launched True
kget "$NC/web-1" >"$WORK/claim.json"
kget "$CLASSES/default" >"$WORK/class.json"
PID="$(jq -r .status.providerID "$WORK/claim.json")"

"$LUAPROV" instance --nodeclaim "$WORK/claim.json" --endpoint "$ALI" --cluster-id luaprov-sim \
  >"$WORK/instance.json" 2>"$WORK/instance.err" || fail "luaprov instance: $(cat "$WORK/instance.json" "$WORK/instance.err")"
[[ "$PID" == *"$(jq -r .id "$WORK/instance.json")" ]] || fail "instance of another NodeClaim: $(cat "$WORK/instance.json")"
[[ "$(jq -r '.tags["karpenter.sh/nodeclaim"]' "$WORK/instance.json")" == web-1 ]] \
  || fail "not web-1's instance document: $(cat "$WORK/instance.json")"
for field in zone instance_type capacity_type image_id state launch_time; do
  jq -e --arg f "$field" 'has($f)' "$WORK/instance.json" >/dev/null || fail "instance lacks $field: $(cat "$WORK/instance.json")"
done
got="$("$LUAPROV" instance --provider-id "$PID" --endpoint "$ALI" --cluster-id luaprov-sim)"
[[ "$got" == "$(cat "$WORK/instance.json")" ]] || fail "--provider-id differs from --nodeclaim: $got"

# the saved document is what eval drift takes: the node matches its class, so not drifted
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.json" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json")" \
  || fail "eval drift on the printed instance: $got"
[[ "$got" == '{"reason":""}' ]] || fail "eval drift on a matching instance: $got"
# and its image_id is what the policy compares: a class resolving to another image drifts it
jq '.status.images |= map(.id = "m-other")' "$WORK/class.json" >"$WORK/other.json"
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.json" --nodeclass "$WORK/other.json" --instance "$WORK/instance.json")"
[[ "$got" == '{"reason":"ImageDrift"}' ]] || fail "eval drift on another image: $got"

# a NodeClaim not launched yet says so
jq 'del(.status.providerID)' "$WORK/claim.json" >"$WORK/new.json"
got="$("$LUAPROV" instance --nodeclaim "$WORK/new.json" --endpoint "$ALI")" && fail "no providerID accepted: $got"
[[ "$got" == *"the NodeClaim has no status.providerID (not launched yet)"* ]] || fail "no providerID: $got"
echo "PASS"
