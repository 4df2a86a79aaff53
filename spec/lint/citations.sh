#!/usr/bin/env bash
# Citations resolve (citations.lua). First the checker is shown a sample tree with one broken citation
# of each kind (spec/fixtures/citations) and must report exactly what expected.txt lists, so that a
# checker that reports nothing cannot pass; then it checks the repository.
#
# usage: citations.sh [ROOT]   (ROOT defaults to the repository holding this script)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=${1:-$(cd "$here/../.." && pwd)}
lua=${LUA:-lua5.4}
sample=$root/spec/fixtures/citations

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
cp -R "$sample/tree/." "$tree"
# The citation of a document outside the repository is written here, in pieces, so that no file of
# the repository holds one.
printf '/* As %s says. */\n' "engi""neering""_anchors" >>"$tree/engine/broken.c"

if diff -u "$sample/expected.txt" <("$lua" "$here/citations.lua" "$tree"); then
  echo "ok: the sample tree's broken citations are reported, and only they"
else
  echo "FAIL: the checker's report on the sample tree differs from $sample/expected.txt (above)"
  exit 1
fi
"$lua" "$here/citations.lua" "$root"
