#!/usr/bin/env bash
# `luaprov instance` (docs/writing-policies.md#a-real-instance-document) against `luaprov run --sim`:
# a NodeClaim launches, its instance document is printed from the NodeClaim as kubectl writes it and
# by its name from the simulated API server (--kubeconfig, $KUBECONFIG, ~/.kube/config), and that
# document fed to `luaprov eval drift` is accepted as the drift policy's `instance`. The errors: a
# NodeClaim not launched, not found, an API server that does not answer, none configured.
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
# by name, from the cluster: the same document
kubeconfig() { # kubeconfig SERVER: a kubeconfig naming SERVER, as kubectl config writes one
  printf 'apiVersion: v1\nkind: Config\ncurrent-context: sim\ncontexts: [{name: sim, context: {cluster: sim, user: sim}}]
clusters: [{name: sim, cluster: {server: "%s"}}]\nusers: [{name: sim, user: {token: unused}}]\n' "$1"
}
kubeconfig "$K" >"$WORK/kubeconfig"
mkdir -p "$WORK/home/.kube" && cp "$WORK/kubeconfig" "$WORK/home/.kube/config"
by_name() { "$LUAPROV" instance "$@" --endpoint "$ALI" --cluster-id luaprov-sim 2>"$WORK/by_name.err"; }
got="$(by_name web-1 --kubeconfig "$WORK/kubeconfig")" || fail "instance web-1 --kubeconfig: $got $(cat "$WORK/by_name.err")"
[[ "$got" == "$(cat "$WORK/instance.json")" ]] || fail "by name differs from --nodeclaim: $got"
got="$(KUBECONFIG="$WORK/kubeconfig" by_name web-1)" || fail "instance web-1 with \$KUBECONFIG: $got"
[[ "$got" == "$(cat "$WORK/instance.json")" ]] || fail "\$KUBECONFIG: $got"
got="$(env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST HOME="$WORK/home" "$LUAPROV" instance web-1 --endpoint "$ALI" \
  --cluster-id luaprov-sim)" || fail "instance web-1 with ~/.kube/config: $got"
[[ "$got" == "$(cat "$WORK/instance.json")" ]] || fail "~/.kube/config: $got"

# a name the cluster does not hold: named, with the API server, exit 1; the object as a field
got="$(by_name web-9 --kubeconfig "$WORK/kubeconfig")" && fail "a missing NodeClaim accepted: $got"
[[ "$got" == '{"error":"nodeclaim web-9 not found in the cluster at '"$K"' (kubeconfig '"$WORK/kubeconfig"')"}' ]] \
  || fail "missing NodeClaim: $got"
[[ "$(cat "$WORK/by_name.err")" == "  object: web-9" ]] || fail "missing NodeClaim's fields: $(cat "$WORK/by_name.err")"
# a NodeClaim of another provider's node class is not this engine's to launch: no providerID
kpost $NC "$(web_claim web-2 | jq -c '.spec.nodeClassRef.group = "example.com"')"
got="$(by_name web-2 --kubeconfig "$WORK/kubeconfig")" && fail "a NodeClaim without providerID accepted: $got"
[[ "$got" == '{"error":"nodeclaim/web-2: the NodeClaim has no status.providerID (not launched yet)"}' ]] \
  || fail "no providerID by name: $got"
# an API server that does not answer: its URL, exit 1
kubeconfig http://127.0.0.1:1 >"$WORK/dead.kubeconfig"
got="$(by_name web-1 --kubeconfig "$WORK/dead.kubeconfig")" && fail "a dead API server accepted: $got"
[[ "$got" == '{"error":"cannot reach the Kubernetes API server at http://127.0.0.1:1 (kubeconfig '"$WORK/dead.kubeconfig"'): '* ]] \
  || fail "dead API server: $got"
# none configured: where it looked
got="$(env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST HOME="$WORK/nohome" "$LUAPROV" instance web-1 --endpoint "$ALI")" \
  && fail "no kubeconfig accepted: $got"
[[ "$got" == '{"error":"no Kubernetes API configured: pass --kubeconfig FILE, set KUBECONFIG, create '"$WORK"'/nohome/.kube/config, or run in a Pod (KUBERNETES_SERVICE_HOST)"}' ]] \
  || fail "no kubeconfig: $got"
# usage errors: one of the three forms; --kubeconfig goes with a name
status=0
"$LUAPROV" instance web-1 --provider-id "$PID" 2>"$WORK/usage.err" || status=$?
[[ "$status" == 2 && "$(head -1 "$WORK/usage.err")" == "luaprov instance: give one of NAME, --nodeclaim FILE and --provider-id ID" ]] \
  || fail "NAME with --provider-id: $status $(cat "$WORK/usage.err")"
status=0
"$LUAPROV" instance --nodeclaim "$WORK/claim.json" --kubeconfig "$WORK/kubeconfig" 2>"$WORK/usage.err" || status=$?
[[ "$status" == 2 && "$(head -1 "$WORK/usage.err")" == "luaprov instance: --kubeconfig reads a NodeClaim by NAME; give its name" ]] \
  || fail "--kubeconfig with --nodeclaim: $status $(cat "$WORK/usage.err")"
echo "PASS"
