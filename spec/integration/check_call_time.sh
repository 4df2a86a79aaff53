#!/usr/bin/env bash
# Validation calls each policy once on the test kit's defaults (docs/hot-reload.md "Validate, then
# swap"): `luaprov check` and a hot reload reject a drift policy whose call loops, exhausts memory,
# returns a table or a reason one typo from a known one; "cannot tell yet" (nil, message) passes. A tags
# policy with a value that is not a string, a disruption policy that raises or answers "yes" are
# rejected by check as well.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

# drift_tree DIR BODY: DIR/policies/drift.lua whose is_drifted (line 2) runs BODY (line 3).
drift_tree() {
  mkdir -p "$1/policies"
  printf 'local M = {}\nfunction M.is_drifted(nodeclaim, nodeclass, instance, ctx)\n  %s\nend\nreturn M\n' "$2" \
    > "$1/policies/drift.lua"
}
LOOP='while true do end'
ALLOC='local t = {} while true do t[#t + 1] = string.rep("x", 4096) .. #t end'
TABLE='return { reason = "ImageDrift" }'
TYPO='return "ImageDrfit"'
KIT="is_drifted, called on the test kit's default objects"
WANT_LOOP="policies/drift.lua:3: instruction budget of 20000000 exceeded"
WANT_ALLOC="policies/drift.lua:3: memory limit of 65536 KiB for the script generation exceeded"
WANT_TABLE="policies/drift.lua:2: $KIT: is_drifted returned a table {\"reason\":\"ImageDrift\"}, not a string; \
return a drift reason such as \"NodeClassDrift\", or \"\" when the node has not drifted"
WANT_TYPO="policies/drift.lua:2: $KIT: is_drifted returned \"ImageDrfit\", which is not a drift reason; did you mean \
\"ImageDrift\"? (the known reasons are NodeClassDrift, ImageDrift, SecurityGroupDrift, VSwitchDrift; a reason of \
your own must not be one typo away from them)"

check_says() { # check_says BODY EXPECTED_LINE (after the tree's path)
  local got status=0
  rm -rf t && drift_tree t "$1"
  got="$("$LUAPROV" check t 2>/dev/null)" || status=$?
  [[ "$status" == 1 ]] || fail "check of '$1': expected exit 1, got $status ($got)"
  [[ "$got" == "t/$2"$'\n'"t: 1 problem" ]] || fail "check of '$1': expected 't/$2', got '$got'"
}
check_says "$LOOP" "$WANT_LOOP"
check_says "$ALLOC" "$WANT_ALLOC"
check_says "$TABLE" "$WANT_TABLE"
check_says "$TYPO" "$WANT_TYPO"
# luaprov eval says the same for its own call of is_drifted; a raise's traceback follows on stderr.
F="$LUAPROV_SOURCE_DIR/spec/fixtures/eval"
eval_says() { # eval_says BODY EXPECTED_ERROR [EXPECTED_STDERR]
  local got status=0
  rm -rf t && drift_tree t "$1"
  got="$("$LUAPROV" eval drift --scripts t --nodeclaim "$F/nodeclaim.yaml" --nodeclass "$F/nodeclass.json" \
    --instance "$F/instance.json" 2>stderr)" || status=$?
  [[ "$status" == 1 && "$got" == "{\"error\":\"t/$2\"}" ]] || fail "eval of '$1': expected 't/$2', got '$got' ($status)"
  [[ "$(grep -v '"level"' stderr)" == "${3:-}" ]] || fail "eval of '$1': expected stderr '${3:-}', got '$(cat stderr)'"
}
# stderr: the error's fields (docs/writing-policies.md#when-eval-fails); a memory error has no traceback,
# as Lua unwinds before anything can read the stack
eval_says "$ALLOC" "$WANT_ALLOC" "  at: t/policies/drift.lua:3"
eval_says "$LOOP" "$WANT_LOOP" $'  at: t/policies/drift.lua:3\n  traceback: t/policies/drift.lua:3: in function <t/policies/drift.lua:2>'
eval_says 'error("no image yet")' "policies/drift.lua:3: no image yet" \
  $'  at: t/policies/drift.lua:3\n  traceback: [C]: in function \'error\'\n    t/policies/drift.lua:3: in function <t/policies/drift.lua:2>'

drift_tree t 'return nil, "instance not ready yet"'
"$LUAPROV" check t >/dev/null || fail "check rejects a policy that cannot tell yet (nil, message)"

# The tags and disruption policies are called too, and held to the answers the engine accepts.
policy_says() { # policy_says FILE SOURCE EXPECTED_LINE
  local got status=0
  rm -rf t && mkdir -p t/policies && printf '%s\n' "$2" >"t/policies/$1"
  got="$("$LUAPROV" check t 2>/dev/null)" || status=$?
  [[ "$status" == 1 && "$got" == "t/$3"$'\n'"t: 1 problem" ]] || fail "check of $1: expected 't/$3', got '$got' ($status)"
}
policy_says tags.lua $'local M = {}\nfunction M.build_instance_tags()\n  return { team = 7 }\nend\nreturn M' \
  "policies/tags.lua:2: build_instance_tags, called on the test kit's default objects: build_instance_tags returned \
tag 'team' = 7, a number; tag values must be strings (wrap it in tostring())"
policy_says disruption.lua $'local M = {}\nfunction M.can_disrupt(nodeclaim, node, pods)\n  return pods[1].x.y\nend\nreturn M' \
  "policies/disruption.lua:3: attempt to index a nil value (field 'x')"
policy_says disruption.lua $'local M = {}\nfunction M.can_disrupt()\n  return "yes"\nend\nreturn M' \
  "policies/disruption.lua:2: can_disrupt, called on the test kit's default objects: can_disrupt returned \"yes\", which is \
neither true nor false; return true to allow the disruption, or false and why to veto it (docs/contracts.md#policies)"

# A running engine: each bad tree is rejected and generation 1 keeps serving.
drift_tree live 'return ""'
start_engine --scripts "$WORK/live"
rejected=0
reload_rejects() { # reload_rejects BODY EXPECTED_ERROR
  drift_tree live "$1"
  rejected=$((rejected + 1))
  wait_for "reload of '$1' rejected" metric_is 'luaprov_script_reload_total{result="error"}' "$rejected"
  local line file
  line="$(grep '"msg":"script reload rejected, previous generation stays in service"' "$ENGINE_LOG" | tail -1)"
  file="$(jq -r .file <<<"$line")"
  [[ "${file#"$WORK/"}:$(jq -r .line <<<"$line"): $(jq -r .error <<<"$line")" == "$2" ]] \
    || fail "reload of '$1': expected '$2' in $line"
  [[ "$(metric luaprov_script_generation)" == "1" ]] || fail "generation 1 serves after rejecting '$1'"
}
command -v jq >/dev/null || fail "jq missing: tools/install-deps.sh test installs it"
reload_rejects "$LOOP" "live/$WANT_LOOP"
reload_rejects "$ALLOC" "live/$WANT_ALLOC" # the line whose allocation the cap refused
reload_rejects "$TABLE" "live/$WANT_TABLE"
reload_rejects "$TYPO" "live/$WANT_TYPO"
[[ "$(curl -sf "http://$ADDR/readyz")" == "ok" ]] || fail "still ready with generation 1"
kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status $? after SIGTERM"
