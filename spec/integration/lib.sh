# Shared by the integration tests (sourced): a scratch folder, failure reporting with the engine's
# log, and the engine helpers of tools/engine.sh.
set -euo pipefail

LUAPROV="${LUAPROV:?set LUAPROV to the luaprov binary}"
WORK="$(mktemp -d /tmp/luaprov-it-XXXXXX)"
ENGINE_LOG="$WORK/engine.log"
# shellcheck source=../../tools/engine.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/engine.sh"

cleanup() {
  if [[ -n "$ENGINE_PID" ]] && kill -0 "$ENGINE_PID" 2>/dev/null; then kill -KILL "$ENGINE_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [[ -f "$ENGINE_LOG" ]] && { echo "--- engine log ---" >&2; cat "$ENGINE_LOG" >&2; }
  exit 1
}

# start_alibaba_sim: `luaprov sim` in the background; sets SIM_PID and ENDPOINT (the Alibaba URL) and
# stops the simulator on exit.
start_alibaba_sim() {
  "$LUAPROV" sim --log-level warn > "$WORK/sim.json" 2>"$WORK/sim.log" &
  SIM_PID=$!
  trap 'kill $SIM_PID 2>/dev/null; cleanup' EXIT
  for _ in $(seq 1 100); do [[ -s "$WORK/sim.json" ]] && break; sleep 0.05; done
  ENDPOINT="$(sed 's/.*"alibaba":"\([^"]*\)".*/\1/' "$WORK/sim.json")"
  [[ "$ENDPOINT" == http://127.0.0.1:* ]] || fail "no simulator endpoint in $(cat "$WORK/sim.json")"
}
