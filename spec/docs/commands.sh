#!/usr/bin/env bash
# Every ```sh block of docs/*.md runs (bash -e, 60 s each) from a scratch folder laid out like the
# repository root after the README's build: build/ is the tested build, spec/ the fixtures.
set -euo pipefail
ROOT="${LUAPROV_SOURCE_DIR:?}"
BUILD="${LUAPROV_BINARY_DIR:?}"
WORK="$(mktemp -d /tmp/luaprov-doccmd-XXXXXX)"
trap 'jobs -p | xargs -r kill 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/root" "$WORK/blocks"
ln -s "$BUILD" "$WORK/root/build"
for entry in spec policies providers sim examples docs testkit; do [[ -e "$ROOT/$entry" ]] && ln -s "$ROOT/$entry" "$WORK/root/$entry"; done
for doc in "$ROOT"/docs/*.md; do
  awk -v dir="$WORK/blocks" -v base="$(basename "$doc" .md)" '
    /^```sh$/ { n++; file = sprintf("%s/%s-%02d.sh", dir, base, n); inblock = 1; next }
    /^```$/ && inblock { inblock = 0; close(file); next }
    inblock { print > file }' "$doc"
done
ran=0
shopt -s nullglob
for block in "$WORK"/blocks/*.sh; do
  if ! (cd "$WORK/root" && timeout 60 bash -e "$block" >"$block.out" 2>&1); then
    echo "FAIL: $(basename "$block")"
    cat "$block"
    echo "--- output ---"
    cat "$block.out"
    exit 1
  fi
  ran=$((ran + 1))
done
echo "doc commands: $ran blocks ran"
