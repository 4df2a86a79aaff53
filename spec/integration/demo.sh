#!/usr/bin/env bash
# `luaprov demo` (what `make run` runs): the whole story against the built-in simulators must check out
# (exit 0) within two minutes, print every step and the summary, and leave no process behind.
source "$(dirname "$0")/lib.sh"

start=$(date +%s)
"$LUAPROV" demo --speed 20 >"$WORK/demo.out" 2>&1 || { cat "$WORK/demo.out"; fail "luaprov demo exited $?"; }
elapsed=$(($(date +%s) - start))
cat "$WORK/demo.out"
((elapsed < 120)) || fail "the demo took ${elapsed}s (must be under 120)"
grep -q 'Every step checked out.' "$WORK/demo.out" || fail "no success line"
for step in 'apply the node class (ECSNodeClass' 'pending pods' 'change the ECSNodeClass image' 'hot-reload the repair policy' \
  'is repaired' 'externalgrpc server'; do
  grep -q "$step" "$WORK/demo.out" || fail "step missing: $step"
done
summary="$(grep '^summary' "$WORK/demo.out")"
[[ "$summary" =~ ([1-9][0-9]*)\ nodes\ launched ]] || fail "no node launched: $summary"
[[ "$summary" =~ 6\ pods\ bound ]] || fail "pods bound: $summary"
[[ "$summary" =~ ([1-9][0-9]*)\ nodes\ drifted\ and\ replaced ]] || fail "nothing replaced: $summary"
[[ "$summary" =~ 1\ nodes\ repaired ]] || fail "repair: $summary"
[[ "$summary" =~ engine\ exit\ status\ 0 ]] || fail "engine exit: $summary"
! pgrep -f "luaprov run --sim --scripts /tmp/luaprov-demo" >/dev/null || fail "an engine child is still running"
echo "demo: ok in ${elapsed}s"
