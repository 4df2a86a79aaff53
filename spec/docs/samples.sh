#!/usr/bin/env bash
# Every self-contained Lua sample in docs/*.md runs under plain lua5.4 with luaprov.so: the docs
# cannot drift from the code. Samples whose first line says `-- inside the engine`, `-- needs network`
# or `-- busted spec` are checked for syntax only (luac -p).
set -euo pipefail
ROOT="${LUAPROV_SOURCE_DIR:?}"
WORK="$(mktemp -d /tmp/luaprov-docs-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
ran=0 parsed=0
for doc in "$ROOT"/docs/*.md; do
  awk -v dir="$WORK" -v base="$(basename "$doc" .md)" '
    /^```lua$/ { n++; file = sprintf("%s/%s-%02d.lua", dir, base, n); inblock = 1; next }
    /^```$/ && inblock { inblock = 0; close(file); next }
    inblock { print > file }' "$doc"
done
shopt -s nullglob
for sample in "$WORK"/*.lua; do
  name="$(basename "$sample")"
  if head -1 "$sample" | grep -qE '^-- (inside the engine|needs network|busted spec)'; then
    luac5.4 -p "$sample" 2>/dev/null || lua5.4 -e "assert(loadfile('$sample'))" || { echo "FAIL: $name does not parse"; exit 1; }
    parsed=$((parsed + 1))
    continue
  fi
  if ! (cd "$WORK" && lua5.4 "$sample" >"$sample.out" 2>&1); then
    echo "FAIL: $name"
    cat "$sample"
    echo "--- output ---"
    cat "$sample.out"
    exit 1
  fi
  ran=$((ran + 1))
done
echo "doc samples: $ran ran, $parsed parsed only"
[[ $ran -gt 0 ]] || { echo "FAIL: no runnable samples found"; exit 1; }
