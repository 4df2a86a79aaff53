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
