#!/usr/bin/env bash
# The real binary: starts, serves /healthz /readyz /metrics, hot-reloads on file change and SIGHUP,
# keeps the old generation when a script is broken, and shuts down cleanly on SIGTERM.
source "$(dirname "$0")/lib.sh"

mkdir -p "$WORK/scripts/policies"
cp "$LUAPROV_SOURCE_DIR/policies/repair.lua" "$WORK/scripts/policies/repair.lua"
start_engine --scripts "$WORK/scripts"

[[ "$(curl -sf "http://$ADDR/healthz")" == "ok" ]] || fail "/healthz"
[[ "$(curl -sf "http://$ADDR/readyz")" == "ok" ]] || fail "/readyz"
curl -sf "http://$ADDR/readyz?verbose" | grep -q '^\[+\]scripts ok$' || fail "/readyz?verbose"
curl -sfI "http://$ADDR/metrics" | grep -qi '^content-type: text/plain; version=0.0.4' || fail "metrics content type"
[[ "$(metric luaprov_script_generation)" == "1" ]] || fail "generation 1 at start"
[[ "$(metric 'luaprov_build_info{version="0.1.0"}')" == "1" ]] || fail "build info"
[[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/nope")" == "404" ]] || fail "404 for unknown paths"

# A file change reloads (generation 2).
sed -i 's/30 \* 60/20 * 60/' "$WORK/scripts/policies/repair.lua"
wait_for "reload after a file change" metric_is luaprov_script_generation 2

# A broken script is rejected; generation 2 stays and the error names file and line.
printf 'local M = {}\nfunction M.policies(\nreturn M\n' > "$WORK/scripts/policies/repair.lua"
wait_for "rejected reload" metric_is 'luaprov_script_reload_total{result="error"}' 1
[[ "$(metric luaprov_script_generation)" == "2" ]] || fail "generation kept after a bad reload"
grep -q '"msg":"script reload rejected, previous generation stays in service".*"file":"[^"]*policies/repair.lua","line":3' "$ENGINE_LOG" \
  || fail "reload error names file and line"
[[ "$(curl -sf "http://$ADDR/readyz")" == "ok" ]] || fail "still ready with the old generation"

# SIGHUP reloads even when nothing changed on disk, once the file is good again.
cp "$LUAPROV_SOURCE_DIR/policies/repair.lua" "$WORK/scripts/policies/repair.lua"
wait_for "reload of the fixed file" metric_is luaprov_script_generation 3
kill -HUP "$ENGINE_PID"
wait_for "SIGHUP reload" metric_is luaprov_script_generation 4

# A new folder changes no script (no reload), but a file written into it afterwards is seen.
mkdir -p "$WORK/scripts/policies/extra"
sleep 0.3
wait_for "the empty folder noticed" metric_is 'luaprov_script_reload_total{result="unchanged"}' 1
printf 'return { answer = 42 }\n' > "$WORK/scripts/policies/extra/answer.lua"
wait_for "a file in a new folder reloads" metric_is luaprov_script_generation 5
grep -q '"trigger":"SIGHUP"' "$ENGINE_LOG" || fail "SIGHUP named as the trigger"

# Every log line is JSON with the stable keys.
while IFS= read -r line; do
  [[ "$line" =~ ^\{\"ts\":\"[0-9T:.-]+Z\",\"level\":\"[a-z]+\",\"logger\":\"[a-z.]+\",\"msg\":\" ]] || fail "log line shape: $line"
done < "$ENGINE_LOG"

# SIGTERM: graceful shutdown, exit status 0, the port is released.
kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status $? after SIGTERM"
grep -q '"msg":"shutdown complete"' "$ENGINE_LOG" || fail "shutdown complete logged"
if curl -sf "http://$ADDR/healthz" >/dev/null 2>&1; then fail "still serving after shutdown"; fi
ENGINE_PID=""
echo "engine lifecycle: ok"
