#!/usr/bin/env bash
# luaprov check and eval over broken operator trees: each problem is one line naming file:line, what
# is wrong and what to do. Every assertion compares the whole line.
source "$(dirname "$0")/lib.sh"
F="$LUAPROV_SOURCE_DIR/spec/fixtures/eval"
cd "$WORK"

tree() { # tree NAME FILE: the script on stdin becomes NAME/policies/FILE
  mkdir -p "$1/policies"
  cat > "$1/policies/$2"
}
check_says() { # check_says TREE EXPECTED_FIRST_LINE
  local got status=0
  got="$("$LUAPROV" check "$1" 2>/dev/null)" || status=$?
  [[ "$status" == 1 ]] || fail "check $1: expected exit 1, got $status ($got)"
  [[ "$(head -n 1 <<<"$got")" == "$2" ]] || fail "check $1: expected '$2', got '$got'"
  [[ "$(sed -n 2p <<<"$got")" == "$1: 1 problem" ]] || fail "check $1: expected one problem, got '$got'"
}
eval_says() { # eval_says EXPECTED_ERROR ARGS...
  local want="$1" got status=0
  shift
  got="$("$LUAPROV" eval "$@" 2>/dev/null)" || status=$?
  [[ "$status" == 1 ]] || fail "eval $*: expected exit 1, got $status ($got)"
  [[ "$got" == "{\"error\":\"$want\"}" ]] || fail "eval $*: expected {\"error\":\"$want\"}, got $got"
}
drift_with() { eval_says "$1" drift --scripts "$2" --nodeclaim "$F/nodeclaim.yaml" --nodeclass "$F/nodeclass.json" --instance "$F/instance.json"; }

# drift policy: a misspelled entry point is pointed at, not just reported missing
tree drift_missing drift.lua <<'LUA'
local M = {}
function M.is_drifed(nodeclaim, nodeclass, instance, ctx)
  return ""
end
return M
LUA
check_says drift_missing "drift_missing/policies/drift.lua:2: the drift policy must export function 'is_drifted'; it has 'is_drifed' here: did you mean is_drifted?"

tree drift_absent drift.lua <<'LUA'
local M = {}
return M
LUA
check_says drift_absent "drift_absent/policies/drift.lua:2: the drift policy must export function 'is_drifted'; add function M.is_drifted(nodeclaim, nodeclass, instance, ctx) to the table returned here"

tree drift_static drift.lua <<'LUA'
local M = {}
function M.static_drft(nodeclaim, nodeclass) return "" end
function M.is_drifted() return "" end
return M
LUA
check_says drift_static "drift_static/policies/drift.lua:4: the drift policy exports 'static_drft', which the engine never calls; did you mean optional function 'static_drift'?"

tree drift_static_num drift.lua <<'LUA'
local M = {}
M.static_drift = 5
function M.is_drifted() return "" end
return M
LUA
check_says drift_static_num "drift_static_num/policies/drift.lua:4: 'static_drift' of the drift policy must be a function, not a number; define it as function M.static_drift(nodeclaim, nodeclass)"

tree drift_notable drift.lua <<'LUA'
return function() return "" end
LUA
check_says drift_notable "drift_notable/policies/drift.lua:1: the drift policy must return a table, not a function; end the file with 'return M', M holding function 'is_drifted'"

tree drift_loaderr drift.lua <<'LUA'
local M = {}
local x = nil
M.threshold = x.value
return M
LUA
check_says drift_loaderr "drift_loaderr/policies/drift.lua:3: attempt to index a nil value (local 'x')"

tree drift_syntax drift.lua <<'LUA'
local M = {}
function M.is_drifted(nodeclaim
  return ""
end
return M
LUA
check_says drift_syntax "drift_syntax/policies/drift.lua:3: ')' expected near 'return'"

# what is_drifted returns on given objects: eval names its definition line (check calls it on the kit's)
tree drift_number drift.lua <<'LUA'
local M = {}
function M.is_drifted(nodeclaim, nodeclass, instance, ctx)
  return 42
end
return M
LUA
drift_with 'drift_number/policies/drift.lua:2: is_drifted returned a number 42, not a string; return a drift reason such as \"NodeClassDrift\", or \"\" when the node has not drifted' drift_number

tree drift_table drift.lua <<'LUA'
local M = {}

function M.is_drifted(nodeclaim, nodeclass, instance, ctx)
  return { reason = "ImageDrift" }
end
return M
LUA
drift_with 'drift_table/policies/drift.lua:3: is_drifted returned a table {\"reason\":\"ImageDrift\"}, not a string; return a drift reason such as \"NodeClassDrift\", or \"\" when the node has not drifted' drift_table

tree drift_typo drift.lua <<'LUA'
local M = {}
function M.is_drifted(nodeclaim, nodeclass, instance, ctx)
  return "ImagDrift"
end
return M
LUA
drift_with 'drift_typo/policies/drift.lua:2: is_drifted returned \"ImagDrift\", which is not a drift reason; did you mean \"ImageDrift\"? (the known reasons are NodeClassDrift, ImageDrift, SecurityGroupDrift, VSwitchDrift; a reason of your own must not be one typo away from them)' drift_typo
check_says drift_typo "drift_typo/policies/drift.lua:2: is_drifted, called on the test kit's default objects: is_drifted returned \"ImagDrift\", which is not a drift reason; did you mean \"ImageDrift\"? (the known reasons are NodeClassDrift, ImageDrift, SecurityGroupDrift, VSwitchDrift; a reason of your own must not be one typo away from them)"

# repair policy: policies({}) is called at load, so check sees the entries
tree repair_misspelled repair.lua <<'LUA'
local M = {}
function M.policies(ctx)
  return {
    { condition_type = "Ready", condition_status = "False", toleration_second = 600 },
  }
end
return M
LUA
check_says repair_misspelled "repair_misspelled/policies/repair.lua:2: policies(ctx)[1] has unknown field 'toleration_second'; did you mean 'toleration_seconds'?"

tree repair_negative repair.lua <<'LUA'
local M = {}
function M.policies(ctx)
  return { { condition_type = "Ready", condition_status = "False", toleration_seconds = -5 } }
end
return M
LUA
check_says repair_negative "repair_negative/policies/repair.lua:2: policies(ctx)[1].toleration_seconds is -5; it must be a number of seconds >= 0 (how long the condition may last before the node is repaired)"

tree repair_status repair.lua <<'LUA'
local M = {}
function M.policies(ctx)
  return { { condition_type = "Ready", condition_status = "false", toleration_seconds = 600 } }
end
return M
LUA
check_says repair_status 'repair_status/policies/repair.lua:2: policies(ctx)[1].condition_status is "false"; it must be "True", "False" or "Unknown" (did you mean "False"?)'
eval_says 'the scripts do not load: repair_status/policies/repair.lua:2: policies(ctx)[1].condition_status is \"false\"; it must be \"True\", \"False\" or \"Unknown\" (did you mean \"False\"?)' repair --scripts repair_status

# tags policy
tree tags_missing tags.lua <<'LUA'
local M = {}
function M.build_tags(nodeclaim, nodeclass, ctx) return {} end
return M
LUA
check_says tags_missing "tags_missing/policies/tags.lua:3: the tags policy must export function 'build_instance_tags'; add function M.build_instance_tags(nodeclaim, nodeclass, ctx) to the table returned here"

tree tags_nonstring tags.lua <<'LUA'
local M = {}
function M.build_instance_tags(nodeclaim, nodeclass, ctx)
  return { team = "platform", cost = 42 }
end
return M
LUA
eval_says "tags_nonstring/policies/tags.lua:2: build_instance_tags returned tag 'cost' = 42, a number; tag values must be strings (wrap it in tostring())" \
  tags --scripts tags_nonstring --nodeclaim "$F/nodeclaim.yaml" --nodeclass "$F/nodeclass.json"

# the CloudProvider mapping's optional fields are checked for their type too
mkdir -p mapping_fields/providers/alibaba
cat > mapping_fields/providers/alibaba/init.lua <<'LUA'
local M = { name = "alibabacloud" }
for _, f in ipairs { "instance_types", "create", "delete", "get", "list", "resolve_nodeclass", "provider_id",
  "parse_provider_id" } do M[f] = function() end end
M.interruption_conditions = "InstanceExpired"
return M
LUA
check_says mapping_fields "mapping_fields/providers/alibaba/init.lua:5: 'interruption_conditions' of the CloudProvider mapping must be a list, not a string; set M.interruption_conditions = {\"...\"}"

# the node class descriptor the engine reads at start: a missing field names the line that sets it
mkdir -p mapping_descriptor/providers/alibaba
cat > mapping_descriptor/providers/alibaba/init.lua <<'LUA'
local default = require "defaults.providers.alibaba"
local M = {}
for k, v in pairs(default) do M[k] = v end
M.nodeclass = { group = "g.example.com", version = "v1", kind = "ExampleNodeClass", resource = "examplenodeclasses",
  hash_annotation = "g.example.com/hash", hash_version_annotation = "g.example.com/hash-version" }
return M
LUA
check_says mapping_descriptor "mapping_descriptor/providers/alibaba/init.lua:4: the CloudProvider mapping's node class descriptor: nodeclass.finalizer is missing or not a non-empty string (docs/contracts.md#the-node-class-descriptor)"

# disruption policy: a misspelled entry point is pointed at; a value that is not a function is refused
tree disruption_missing disruption.lua <<'LUA'
local M = {}
function M.can_disrupted(nodeclaim, node, pods, ctx)
  return true
end
return M
LUA
check_says disruption_missing "disruption_missing/policies/disruption.lua:2: the disruption policy must export function 'can_disrupt'; it has 'can_disrupted' here: did you mean can_disrupt?"
tree disruption_type disruption.lua <<'LUA'
local M = {}
M.can_disrupt = true
return M
LUA
check_says disruption_type "disruption_type/policies/disruption.lua:3: 'can_disrupt' of the disruption policy must be a function, not a boolean; define it as function M.can_disrupt(nodeclaim, node, pods, ctx)"

# The policies/ folder given instead of the tree's root: checking nothing must not pass.
tree folder_given repair.lua <<'LUA'
local M = {}
function M.policies() return {} end
return M
LUA
status=0
got="$("$LUAPROV" check folder_given/policies 2>/dev/null)" || status=$?
[[ "$status" == 1 ]] || fail "check of a policies/ folder: expected exit 1, got $status ($got)"
[[ "$got" == "folder_given/policies: no scripts found: a scripts tree holds policies/*.lua and providers/<name>/*.lua; pass its root (the folder that contains policies/)" ]] \
  || fail "check of a policies/ folder: got '$got'"

echo "check_messages: ok"
