#!/usr/bin/env bash
# The start-up log of `luaprov run --sim --scripts DIR` names the tree in use (DIR) once, as the
# "scripts loaded" line; the simulators' own scripts log as "simulator scripts loaded" with "tree".
source "$(dirname "$0")/lib.sh"

mkdir -p "$WORK/scripts/policies"
cp "$LUAPROV_SOURCE_DIR/policies/repair.lua" "$WORK/scripts/policies/repair.lua"
start_engine --sim --scripts "$WORK/scripts"

[[ "$(grep -c '"scripts":' "$ENGINE_LOG")" == "1" ]] || fail "one line names the scripts tree"
grep -q "\"msg\":\"scripts loaded\",\"generation\":1,\"scripts\":\"$WORK/scripts\",\"defaults\":\"$LUAPROV_SOURCE_DIR\"" \
  "$ENGINE_LOG" || fail "scripts loaded names the operator's tree"
grep -q "\"msg\":\"simulator scripts loaded\",\"generation\":1,\"tree\":\"$LUAPROV_SOURCE_DIR\"" "$ENGINE_LOG" \
  || fail "the simulators' tree is logged as theirs"

kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status $? after SIGTERM"
ENGINE_PID=""
echo "startup log: ok"
