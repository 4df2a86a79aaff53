#!/usr/bin/env bash
# `make bench-scale`: runs each scenario once per controller, each run on a control plane of its own,
# and prints every phase's figures with the ratios luaprov / Karpenter. A benchmark: it never fails on
# time; it fails only when a scenario could not run (its log is printed).
#
# usage: spec/bench-scale/run.sh LUAPROV_BINARY
#   SCENARIOS="basic drift"      the scenarios to run (default: all, in the order below)
#   CONTROLLERS="luaprov"        the controllers to run them with (default: luaprov karpenter)
#   LUAPROV_E2E_CACHE            tools/install-e2e.sh's cache (default .cache/e2e)
#   LUAPROV_BENCH_SCALE_CACHE    tools/install-bench-scale.sh's (default <e2e cache>/bench-scale)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
LUAPROV="$(realpath "${1:?usage: run.sh LUAPROV_BINARY}")"
e2e_cache="${LUAPROV_E2E_CACHE:-$root/.cache/e2e}"
export LUAPROV LUAPROV_E2E_BIN="$e2e_cache/bin"
export LUAPROV_BENCH_SCALE_CACHE="${LUAPROV_BENCH_SCALE_CACHE:-$e2e_cache/bench-scale}"
ALL="basic hostname-spread anti-affinity wide drift consolidation do-not-disrupt"
read -r -a scenarios <<<"${SCENARIOS:-$ALL}"
read -r -a controllers <<<"${CONTROLLERS:-luaprov karpenter}"
for s in "${scenarios[@]}"; do
  [[ -f "$here/$s.sh" && " $ALL " == *" $s "* ]] || { echo "bench-scale: no scenario $s (have: $ALL)" >&2; exit 2; }
done

results="$(mktemp /tmp/luaprov-bench-scale-XXXXXX)"
trap 'rm -f "$results" "$results".*' EXIT
echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
failed=()
for s in "${scenarios[@]}"; do
  for c in "${controllers[@]}"; do
    echo "== $s with $c"
    started=$SECONDS
    if BENCH_CONTROLLER="$c" BENCH_RESULTS="$results" bash "$here/$s.sh" >"$results.log" 2>&1; then
      grep '^figure: ' "$results.log" | sed 's/^/   /'
      echo "   ($((SECONDS - started)) s with the control plane's start and stop)"
    else
      echo "   FAILED after $((SECONDS - started)) s; its output:"
      tail -n 60 "$results.log" | sed 's/^/   | /'
      failed+=("$s/$c")
    fi
  done
done

echo
echo "== figures (lp: luaprov, kp: Karpenter; s: seconds from applying the change to the end state;"
echo "   MiB: the controller's peak RSS; CPU: its user+system seconds over that time; NC: NodeClaims at the end;"
echo "   ratio: luaprov / Karpenter)"
awk '
  { key = $1 " " $2; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    t[key, $3] = $4; rss[key, $3] = $5; cpu[key, $3] = $6; claims[key, $3] = $7 }
  function cell(k, c, a) { return ((k, c) in a) ? a[k, c] : "-" }
  function ratio(k, a) {
    if (!((k, "luaprov") in a) || !((k, "karpenter") in a)) return "-"
    x = a[k, "luaprov"] + 0; y = a[k, "karpenter"] + 0
    if (a[k, "luaprov"] ~ /unsettled/ || a[k, "karpenter"] ~ /unsettled/ || y == 0) return "-"
    return sprintf("%.2f", x / y)
  }
  END {
    printf "%-16s %-13s | %9s %9s %6s | %8s %8s %6s | %7s %7s %6s | %6s %6s\n", "scenario", "phase",
      "lp s", "kp s", "ratio", "lp MiB", "kp MiB", "ratio", "lp CPU", "kp CPU", "ratio", "lp NC", "kp NC"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, " ")
      printf "%-16s %-13s | %9s %9s %6s | %8s %8s %6s | %7s %7s %6s | %6s %6s\n", p[1], p[2],
        cell(k, "luaprov", t), cell(k, "karpenter", t), ratio(k, t),
        cell(k, "luaprov", rss), cell(k, "karpenter", rss), ratio(k, rss),
        cell(k, "luaprov", cpu), cell(k, "karpenter", cpu), ratio(k, cpu),
        cell(k, "luaprov", claims), cell(k, "karpenter", claims)
    }
  }' "$results"
if ((${#failed[@]})); then
  echo "bench-scale: could not run: ${failed[*]}" >&2
  exit 1
fi
