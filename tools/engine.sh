# Shell helpers to drive a running `luaprov run` (sourced by the integration tests). The caller sets LUAPROV (the binary), ENGINE_LOG (where stderr goes) and defines fail().

ENGINE_PID=""
ADDR=""

# start_engine ARGS...: runs `luaprov run` on a free metrics port and waits until it serves.
start_engine() {
  "$LUAPROV" run --metrics-addr 127.0.0.1:0 --log-format json "$@" 2>"$ENGINE_LOG" &
  ENGINE_PID=$!
  for _ in $(seq 1 100); do
    ADDR="$(sed -n 's/.*"msg":"engine started".*"metrics_addr":"\([^"]*\)".*/\1/p' "$ENGINE_LOG" | head -1)"
    [[ -n "$ADDR" ]] && return 0
    kill -0 "$ENGINE_PID" 2>/dev/null || fail "engine exited during start"
    sleep 0.05
  done
  fail "engine did not start within 5 s"
}

# metric NAME_WITH_LABELS: prints the value of one sample from /metrics.
metric() {
  curl -sf "http://$ADDR/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

# metric_is NAME VALUE: succeeds when the sample has that value now.
metric_is() {
  [[ "$(metric "$1")" == "$2" ]]
}

# wait_for DESCRIPTION COMMAND...: retries COMMAND for up to 5 s.
wait_for() {
  local what="$1"
  shift
  for _ in $(seq 1 100); do
    "$@" && return 0
    sleep 0.05
  done
  fail "timed out waiting for: $what"
}
