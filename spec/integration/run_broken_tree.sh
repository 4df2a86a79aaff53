#!/usr/bin/env bash
# `luaprov run` with a tree that does not load exits 1 after logging why, with --sim as without it
# (docs/hot-reload.md): the simulators it started are closed, so nothing keeps the process alive.
source "$(dirname "$0")/lib.sh"

mkdir -p "$WORK/scripts/policies"
printf 'local M = {}\nfunction M.policies(\nreturn M\n' > "$WORK/scripts/policies/repair.lua"

# run_broken ARGS...: `luaprov run ARGS...` on the broken tree; fails unless it exits 1 within 20 s
# (a bounded wait: a hang ends in SIGKILL and a failure, whatever the machine's speed).
run_broken() {
  local status=0
  timeout --signal=KILL 20 "$LUAPROV" run --metrics-addr 127.0.0.1:0 --log-format json \
    --scripts "$WORK/scripts" "$@" 2>"$ENGINE_LOG" || status=$?
  [[ "$status" == 1 ]] || fail "luaprov run $* on a broken tree: exit status $status, want 1"
  grep -q '"msg":"scripts failed to load".*"file":"[^"]*policies/repair.lua","line":3' "$ENGINE_LOG" \
    || fail "luaprov run $*: the log names the file and line"
}

run_broken
run_broken --sim
