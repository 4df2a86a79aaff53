#!/usr/bin/env bash
# luaprov eval against fixture files: every drift reason in the order of rule CP5 (docs/contracts.md),
# repair, tags, disruption, an operator's script tree, and the errors an operator meets (bad files,
# broken scripts, undecided policies).
source "$(dirname "$0")/lib.sh"
F="$LUAPROV_SOURCE_DIR/spec/fixtures/eval"

expect() { # expect EXPECTED_STDOUT EXPECTED_STATUS ARGS...
  local want="$1" want_status="$2"
  shift 2
  local got status=0
  got="$("$LUAPROV" eval "$@" 2>"$WORK/stderr")" || status=$?
  [[ "$got" == "$want" ]] || fail "eval $*: expected $want, got $got ($(cat "$WORK/stderr"))"
  [[ "$status" == "$want_status" ]] || fail "eval $*: expected exit $want_status, got $status"
}
drift() { expect "$1" "${2:-0}" drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json" "${@:3}"; }
reset() { cp "$F/nodeclaim.yaml" "$WORK/claim.yaml"; cp "$F/nodeclass.json" "$WORK/class.json"; cp "$F/instance.json" "$WORK/instance.json"; }

reset
drift '{"reason":""}'

# NodeClassDrift: same hash version, different hashes; it wins over every other reason.
sed -i 's/6d9f4c2b1a8e7f30/0000000000000000/' "$WORK/claim.yaml"
sed -i 's/"sg-bp1nodes"\]/"sg-other"]/' "$WORK/instance.json"
drift '{"reason":"NodeClassDrift"}'
# a different hash version means a new algorithm, not drift: the next check decides
sed -i 's/hash-version: lp1/hash-version: lp0/' "$WORK/claim.yaml"
drift '{"reason":"SecurityGroupDrift"}'

# ImageDrift comes before SecurityGroupDrift and VSwitchDrift.
reset
sed -i 's/"image_id": "[^"]*"/"image_id": "m-old"/; s/"vsw-bp1h"/"vsw-gone"/' "$WORK/instance.json"
drift '{"reason":"ImageDrift"}'
reset
sed -i 's/"vswitch_id": "vsw-bp1h"/"vswitch_id": "vsw-gone"/' "$WORK/instance.json"
drift '{"reason":"VSwitchDrift"}'
# an extra security group on the instance is drift too (set equality)
reset
sed -i 's/"security_group_ids": \["sg-bp1nodes"\]/"security_group_ids": ["sg-bp1nodes", "sg-extra"]/' "$WORK/instance.json"
drift '{"reason":"SecurityGroupDrift"}'

# An empty status list is not drift: the policy cannot decide yet.
reset
sed -i 's/"images": \[{.*$/"images": [],/; /"requirements": \[{"key": "kubernetes.io\/arch"/d' "$WORK/class.json"
# "not known yet" is an answer (the engine leaves Drifted as it is), not a failure: exit 0, no reason
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json")" || fail "undecided drift should exit 0: $got"
[[ "$got" == '{"reason":"","undecided":"policies.drift.is_drifted returned no answer: no images are resolved in the ECSNodeClass status yet"}' ]] || fail "undecided drift answer: $got"

# repair: the defaults of rule CP6
expect '[{"condition_status":"False","condition_type":"Ready","toleration_seconds":1800},{"condition_status":"Unknown","condition_type":"Ready","toleration_seconds":1800}]' 0 repair

# tags: the class's own tags, then the engine's, which win
reset
got="$("$LUAPROV" eval tags --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --cluster-id demo)"
for pair in '"kubernetes.io/cluster/demo":"owned"' '"karpenter.sh/nodepool":"default"' '"karpenter.sh/nodeclaim":"default-x7k2p"' \
  '"karpenter.k8s.alibabacloud/ecsnodeclass":"default"' '"ecs:ecs-cluster-id":"demo"' '"team":"platform"'; do
  [[ "$got" == *"$pair"* ]] || fail "tags lack $pair: $got"
done

# A policy cannot drop or override the engine's own tags: eval shows what a launch carries (rule CP7)
# and names the engine's keys on stderr.
mkdir -p "$WORK/notags/policies"
printf 'return { build_instance_tags = function() return { ["kubernetes.io/cluster/demo"] = "shared" } end }\n' \
  > "$WORK/notags/policies/tags.lua"
got="$("$LUAPROV" eval tags --scripts "$WORK/notags" --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" \
  --cluster-id demo 2>"$WORK/notags/err")" || fail "eval tags of an overriding policy failed: $got"
for pair in '"kubernetes.io/cluster/demo":"owned"' '"karpenter.sh/nodepool":"default"' \
  '"karpenter.sh/nodeclaim":"default-x7k2p"'; do
  [[ "$got" == *"$pair"* ]] || fail "the engine's tags lost to the policy, lack $pair: $got"
done
grep -q "^note: the engine's own tags, set after the policy (it cannot remove or override them):.* kubernetes.io/cluster/demo" \
  "$WORK/notags/err" || fail "no note of the engine's tags: $(cat "$WORK/notags/err")"

# The mapping's settings reach ctx: --region as a flag, else its simulator value; an option that names
# no setting is refused.
mkdir -p "$WORK/ctx/policies"
printf 'return { build_instance_tags = function(_, _, ctx) return { region = ctx.region, type = ctx.cluster_type } end }\n' \
  > "$WORK/ctx/policies/tags.lua"
got="$("$LUAPROV" eval tags --scripts "$WORK/ctx" --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --region cn-beijing)"
[[ "$got" == *'"region":"cn-beijing"'* ]] || fail "--region in ctx: $got"
got="$("$LUAPROV" eval tags --scripts "$WORK/ctx" --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --cluster-type Custom)"
[[ "$got" == *'"region":"cn-hangzhou"'* && "$got" == *'"type":"Custom"'* ]] \
  || fail "the simulator's region by default, --cluster-type: $got"
# An option that names no setting is a usage error, with or without a value after it: one line and the
# --help hint on stderr, nothing on stdout, exit 2.
for args in "--colour blue" "--colour" "--colour --cluster-id demo"; do
  status=0
  # shellcheck disable=SC2086 # the words of $args are the options
  got="$("$LUAPROV" eval tags --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" $args 2>"$WORK/usage.err")" \
    || status=$?
  [[ "$status" == 2 && -z "$got" ]] || fail "eval tags $args: expected exit 2 and no answer, got $status: $got"
  [[ "$(cat "$WORK/usage.err")" == "luaprov eval: unknown option '--colour'
run 'luaprov eval --help' for usage" ]] || fail "eval tags $args: usage error: $(cat "$WORK/usage.err")"
done

# An operator's tree: a drift policy building on the default one, with a reason of its own.
mkdir -p "$WORK/ops/policies"
cat > "$WORK/ops/policies/drift.lua" <<'LUA'
local default = require "defaults.policies.drift"
local M = {}
M.static_drift = default.static_drift
function M.is_drifted(nodeclaim, nodeclass, instance, ctx)
  local reason, err = default.is_drifted(nodeclaim, nodeclass, instance, ctx)
  if reason ~= "" then return reason, err end
  if instance.instance_type:find("^ecs%.g7%.") then return "RetiredFamilyDrift" end
  return ""
end
return M
LUA
expect '{"reason":"RetiredFamilyDrift"}' 0 drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json" --scripts "$WORK/ops"

# A reason that is not a CamelCase word is refused with a hint.
sed -i 's/"RetiredFamilyDrift"/"retired family"/' "$WORK/ops/policies/drift.lua"
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json" --scripts "$WORK/ops")" && fail "bad reason should exit 1"
[[ "$got" == *'a reason is \"\" or a CamelCase word'* ]] || fail "bad reason message: $got"
# the error's fields on stderr, under the message: where the policy is
"$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json" \
  --scripts "$WORK/ops" >/dev/null 2>"$WORK/fields.err" && fail "bad reason should exit 1"
[[ "$(cat "$WORK/fields.err")" == "  at: $WORK/ops/policies/drift.lua:4" ]] || fail "bad reason's fields: $(cat "$WORK/fields.err")"

# A broken script names its file and line.
printf 'local M = {}\nfunction M.is_drifted(\nreturn M\n' > "$WORK/ops/policies/drift.lua"
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json" --scripts "$WORK/ops")" && fail "broken script should exit 1"
[[ "$got" == *"ops/policies/drift.lua:3:"* ]] || fail "broken script message: $got"

# An error whose text is not UTF-8 still comes out as one JSON line.
printf 'local M = {}\nfunction M.is_drifted() error("bad \\255 byte") end\nreturn M\n' > "$WORK/ops/policies/drift.lua"
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json" --scripts "$WORK/ops")" && fail "raising policy should exit 1"
[[ "$got" == '{"error":"'*'ops/policies/drift.lua:2: bad '*' byte"}' ]] || fail "non-UTF-8 error message: $got"
# a policy that raises: the line of the error(), as a field too (the log line of the failed call aside)
"$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/instance.json" \
  --scripts "$WORK/ops" >/dev/null 2>"$WORK/fields.err" && fail "raising policy should exit 1"
grep -qx "  at: $WORK/ops/policies/drift.lua:2" "$WORK/fields.err" || fail "raising policy's fields: $(cat "$WORK/fields.err")"

# Malformed input files name the file and the position.
printf '{"id": "i-1",\n "zone": }\n' > "$WORK/bad.json"
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml" --nodeclass "$WORK/class.json" --instance "$WORK/bad.json")" && fail "bad JSON should exit 1"
[[ "$got" == *"bad.json:2:"* ]] || fail "bad JSON message: $got"
printf 'metadata:\n  name: [unclosed\n' > "$WORK/bad.yaml"
got="$("$LUAPROV" eval tags --nodeclaim "$WORK/bad.yaml" --nodeclass "$WORK/class.json")" && fail "bad YAML should exit 1"
[[ "$got" == *"bad.yaml:"*"line"* ]] || fail "bad YAML message: $got"
got="$("$LUAPROV" eval drift --nodeclaim "$WORK/claim.yaml")" && fail "missing file should exit 1"
[[ "$got" == '{"error":"--nodeclass FILE is required"}' ]] || fail "missing flag message: $got"

# Fixtures with a misspelled top-level field, the wrong kind or broken YAML: one line naming the flag,
# the file, the line of the field and a hint.
fixture_says() { # fixture_says EXPECTED_ERROR ARGS...
  local want="$1" got
  shift
  got="$("$LUAPROV" eval "$@" 2>/dev/null)" && fail "eval $*: should exit 1, printed $got"
  [[ "$got" == "{\"error\":\"$want\"}" ]] || fail "eval $*: expected {\"error\":\"$want\"}, got $got"
}
reset
cd "$WORK"
sed 's/^metadata:/metdata:/' claim.yaml > metdata.yaml
fixture_says "--nodeclaim metdata.yaml:4: unknown top-level field 'metdata'; did you mean 'metadata'?" \
  drift --nodeclaim metdata.yaml --nodeclass class.json --instance instance.json
sed 's/^status:/stauts:/' claim.yaml > stauts.yaml
fixture_says "--nodeclaim stauts.yaml:22: unknown top-level field 'stauts'; did you mean 'status'?" \
  tags --nodeclaim stauts.yaml --nodeclass class.json
sed 's/"status":/"stauts":/' class.json > stauts.json
fixture_says "--nodeclass stauts.json:17: unknown top-level field 'stauts'; did you mean 'status'?" \
  drift --nodeclaim claim.yaml --nodeclass stauts.json --instance instance.json
sed 's/"image_id"/"imageid"/' instance.json > imageid.json
fixture_says "--instance imageid.json:7: unknown top-level field 'imageid'; did you mean 'image_id'?" \
  drift --nodeclaim claim.yaml --nodeclass class.json --instance imageid.json
printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n' > node.yaml
fixture_says "--nodeclaim node.yaml:2: kind is Node, expected NodeClaim; pass the object of that kind (kubectl get ... -o yaml)" \
  drift --nodeclaim node.yaml --nodeclass class.json --instance instance.json
fixture_says "--instance claim.yaml:3: is a Kubernetes NodeClaim, not an instance; --instance takes the instance shape of docs/contracts.md#the-instance-shape (id, zone, instance_type, image_id, ...)" \
  drift --nodeclaim claim.yaml --nodeclass class.json --instance claim.yaml
fixture_says "--nodeclaim bad.yaml: did not find expected ',' or ']' at line 3, column 1; the file must be one JSON or YAML object as kubectl get -o json|yaml prints it" \
  tags --nodeclaim bad.yaml --nodeclass class.json
cd - >/dev/null

# disruption: the shipped policy allows; the payments example vetoes at 10:00 and allows at 20:00 (and
# for drift); ctx reaches the policy as the engine builds it; the errors an operator meets. Fixed times
# (--now), in UTC.
disruption() { TZ=UTC expect "$1" "$2" disruption "${@:3}"; }
policy() { # policy TREE: the script on stdin becomes TREE/policies/disruption.lua
  mkdir -p "$1/policies"
  cat > "$1/policies/disruption.lua"
}
cd "$WORK"
# the shipped policy allows everything
disruption '{"allowed":true,"why":null}' 0 --nodeclaim "$F/nodeclaim.yaml" --pods "$F/pods.yaml"

policy payments <<'LUA'
local default = require "defaults.policies.disruption"
local M = {}
M.can_disrupt = default.protect_namespace("payments", 9, 18)
return M
LUA
VETO='{"allowed":false,"why":"the node runs pod payments/ledger-0 and payments nodes are not consolidated between 09:00 and 18:00"}'
disruption "$VETO" 0 --scripts payments --nodeclaim "$F/nodeclaim.yaml" --pods "$F/pods.yaml" --now 2026-12-02T10:00:00Z
disruption "$VETO" 0 --scripts payments --nodeclaim "$F/nodeclaim.yaml" --pods "$F/pods.yaml" --now 1796205600 \
  --reason Empty
disruption '{"allowed":true,"why":null}' 0 --scripts payments --nodeclaim "$F/nodeclaim.yaml" --pods "$F/pods.yaml" \
  --now 2026-12-02T20:00:00Z
disruption '{"allowed":true,"why":null}' 0 --scripts payments --nodeclaim "$F/nodeclaim.yaml" --pods "$F/pods.yaml" \
  --now 2026-12-02T10:00:00Z --reason Drifted
disruption '{"allowed":true,"why":null}' 0 --scripts payments --nodeclaim "$F/nodeclaim.yaml" --now 2026-12-02T10:00:00Z

# what the policy receives: the NodeClaim, the Node (json.null without --node), the pods and ctx
policy echo <<'LUA'
local json = require("luaprov").json
local M = {}
function M.can_disrupt(nodeclaim, node, pods, ctx)
  local name = node == json.null and "-" or node.metadata.name
  return false, table.concat({ nodeclaim.metadata.name, name, #pods, ctx.reason, ctx.method, ctx.nodepool,
    ctx.now }, "|")
end
return M
LUA
cat > node.yaml <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: node-default-x7k2p
YAML
cat > pool.yaml <<'YAML'
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: batch
YAML
disruption '{"allowed":false,"why":"default-x7k2p|-|0|Underutilized|single-node consolidation|default|1796205600"}' 0 \
  --scripts echo --nodeclaim "$F/nodeclaim.yaml" --now 1796205600
disruption '{"allowed":false,"why":"default-x7k2p|node-default-x7k2p|2|Empty|emptiness|batch|1796205600"}' 0 \
  --scripts echo --nodeclaim "$F/nodeclaim.yaml" --node node.yaml --pods "$F/pods.yaml" --nodepool pool.yaml \
  --reason Empty --now 2026-12-02T10:00:00Z
disruption '{"allowed":false,"why":"default-x7k2p|-|0|Underutilized|multi-node consolidation|default|1796205600"}' 0 \
  --scripts echo --nodeclaim "$F/nodeclaim.yaml" --method "multi-node consolidation" --now 1796205600
# a single Pod, or a plain list, is accepted as --pods too
sed -n '/^- apiVersion/,$p' "$F/pods.yaml" | sed '/^metadata:/,$d' > list.yaml
disruption '{"allowed":false,"why":"default-x7k2p|-|2|Drifted|drift|default|1796205600"}' 0 \
  --scripts echo --nodeclaim "$F/nodeclaim.yaml" --pods list.yaml --reason Drifted --now 1796205600

# errors: one JSON line naming the file and line, exit 1
policy raising <<'LUA'
local M = {}
function M.can_disrupt(_nodeclaim, _node, _pods, _ctx)
  error("no disruption today")
end
return M
LUA
disruption '{"error":"raising/policies/disruption.lua:2: can_disrupt: raising/policies/disruption.lua:3: no disruption today"}' 1 \
  --scripts raising --nodeclaim "$F/nodeclaim.yaml"
policy yes <<'LUA'
return { can_disrupt = function() return "yes" end }
LUA
disruption '{"error":"yes/policies/disruption.lua:1: can_disrupt returned \"yes\", which is neither true nor false; return true to allow the disruption, or false and why to veto it (docs/contracts.md#policies)"}' 1 \
  --scripts yes --nodeclaim "$F/nodeclaim.yaml"
# repair: a list the repair controller cannot use gets the same sentence from load-time validation (which
# calls policies({})) and from the run-time check of eval's own call, at the policy's file:line
mkdir -p badrepair/policies
printf 'local M = {}\nfunction M.policies(_ctx)\n  return { { condition_type = "Ready", condition_status = "false", toleration_seconds = 60 } }\nend\nreturn M\n' \
  >badrepair/policies/repair.lua
expect '{"error":"the scripts do not load: badrepair/policies/repair.lua:2: policies(ctx)[1].condition_status is \"false\"; it must be \"True\", \"False\" or \"Unknown\" (did you mean \"False\"?)"}' 1 \
  repair --scripts badrepair
printf 'local M = {}\nfunction M.policies(ctx)\n  return ctx.cluster_id and "Ready" or {}\nend\nreturn M\n' >badrepair/policies/repair.lua
expect '{"error":"badrepair/policies/repair.lua:2: policies(ctx) must return a list of {condition_type, condition_status, toleration_seconds}, not a string"}' 1 \
  repair --scripts badrepair
disruption '{"error":"--reason Emty: a disruption reason is Empty, Underutilized or Drifted"}' 1 \
  --nodeclaim "$F/nodeclaim.yaml" --reason Emty
disruption '{"error":"--method consolidation: a disruption method is emptiness, drift, \"multi-node consolidation\" or \"single-node consolidation\""}' 1 \
  --nodeclaim "$F/nodeclaim.yaml" --method consolidation
disruption '{"error":"--now noon: give epoch seconds (1796205600) or RFC 3339 (2026-12-02T10:00:00Z)"}' 1 \
  --nodeclaim "$F/nodeclaim.yaml" --now noon
disruption "{\"error\":\"--node $F/nodeclaim.yaml:3: kind is NodeClaim, expected Node; pass the object of that kind (kubectl get ... -o yaml)\"}" 1 \
  --nodeclaim "$F/nodeclaim.yaml" --node "$F/nodeclaim.yaml"
disruption "{\"error\":\"--pods $F/nodeclaim.yaml:3: item 1 is a NodeClaim, not a Pod; pass the pods bound to the node (kubectl get pods -o yaml --field-selector spec.nodeName=NODE)\"}" 1 \
  --nodeclaim "$F/nodeclaim.yaml" --pods "$F/nodeclaim.yaml"
disruption '{"error":"--nodeclaim FILE is required"}' 1 --pods "$F/pods.yaml"
cd - >/dev/null

echo "eval: ok"
