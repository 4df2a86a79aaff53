#!/usr/bin/env bash
# `luaprov sim` as users run it: prints one JSON line naming its endpoints, serves the Alibaba
# simulator's admin path and API (an unsigned call gets a proper API error), exits 0 on SIGTERM.
source "$(dirname "$0")/lib.sh"

OUT="$WORK/sim.out"
"$LUAPROV" sim --log-format json >"$OUT" 2>"$ENGINE_LOG" &
ENGINE_PID=$!
for _ in $(seq 1 100); do
  [[ -s "$OUT" ]] && break
  kill -0 "$ENGINE_PID" 2>/dev/null || fail "luaprov sim exited during start"
  sleep 0.05
done
LINE="$(head -1 "$OUT")"
[[ "$LINE" =~ ^\{.*\"alibaba\":\"http://127\.0\.0\.1:[0-9]+\".*\}$ ]] || fail "endpoint line: $LINE"
URL="$(sed -n 's/.*"alibaba":"\([^"]*\)".*/\1/p' <<<"$LINE")"

STATE="$(curl -sf "$URL/_sim/state")" || fail "GET /_sim/state"
grep -q '"default_access_key_id":"LTAI5simulatoraccess"' <<<"$STATE" || fail "state names the default key: $STATE"
grep -q '"zones":\["cn-hangzhou-h","cn-hangzhou-i","cn-hangzhou-j","cn-hangzhou-k"\]' <<<"$STATE" \
  || fail "state lists the zones: $STATE"

# No signature: the gateway's error, as JSON because Format=JSON was asked for.
CODE="$(curl -s -o "$WORK/api.json" -w '%{http_code}' \
  "$URL/?Action=DescribeRegions&Version=2014-05-26&Format=JSON&RegionId=cn-hangzhou")"
[[ "$CODE" == "400" ]] || fail "unsigned call answered $CODE: $(cat "$WORK/api.json")"
grep -q '"Code":"MissingAccessKeyId"' "$WORK/api.json" || fail "error code: $(cat "$WORK/api.json")"
grep -q '"RequestId":"[0-9A-F-]\{36\}"' "$WORK/api.json" || fail "error RequestId: $(cat "$WORK/api.json")"

kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status $? after SIGTERM"
ENGINE_PID=""
if curl -sf "$URL/_sim/state" >/dev/null 2>&1; then fail "still serving after SIGTERM"; fi
echo "sim cli: ok"
