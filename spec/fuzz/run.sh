#!/usr/bin/env bash
# Runs one libFuzzer target for a while over its checked-in seeds (README.md).
# usage: spec/fuzz/run.sh BUILD_DIR TARGET SECONDS [WORK_DIR]
# New inputs go to WORK_DIR/corpus (the checked-in corpus is only read), crashes to WORK_DIR/artifacts.
# On a crash, a hang or a leak it minimises the reproducer (at most 90 s), prints both paths and how
# to replay them, and exits 1.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: run.sh BUILD_DIR TARGET SECONDS [WORK_DIR]}"
target="${2:?target, e.g. fuzz_json}"
seconds="${3:?seconds}"
work="${4:-$build/fuzz-runs/$target}"
bin="$build/spec/fuzz/$target"
[[ -x "$bin" ]] || { echo "fuzz: $bin is not built (spec/fuzz/build.sh $build)" >&2; exit 1; }
seeds="$here/corpus/$target"
[[ -d "$seeds" ]] || { echo "fuzz: no seed corpus $seeds" >&2; exit 1; }
mkdir -p "$work/corpus" "$work/artifacts"
args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
  -artifact_prefix="$work/artifacts/")
dict="$here/dict/${target#fuzz_}.dict"
[[ -f "$dict" ]] && args+=(-dict="$dict")
before="$(ls "$work/artifacts")"
"$bin" "${args[@]}" "$work/corpus" "$seeds" 2>"$work/log"
rc=$?
grep -E '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs|stat::)' "$work/log"
[[ $rc -eq 0 ]] && exit 0
tail -n 60 "$work/log"
artifact="$(comm -13 <(echo "$before") <(ls "$work/artifacts") | grep -v '^minimized-' | head -n 1)"
if [[ -z "$artifact" ]]; then
  echo "fuzz: $target exited $rc without a reproducer (log: $work/log)" >&2
  exit 1
fi
repro="$work/artifacts/$artifact"
small="$work/artifacts/minimized-$artifact"
# libFuzzer's own -max_total_time does not bound minimising a timeout (each try runs to -timeout)
timeout -k 5 90 "$bin" -minimize_crash=1 -max_total_time=60 -timeout=10 -exact_artifact_path="$small" "$repro" \
  >"$work/minimize.log" 2>&1
echo "fuzz: $target failed (exit $rc)" >&2
echo "fuzz: reproducer: $repro" >&2
[[ -s "$small" ]] && echo "fuzz: minimised reproducer: $small" >&2
echo "fuzz: replay with: $bin $repro" >&2
exit 1
