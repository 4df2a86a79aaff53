#!/usr/bin/env bash
# `luaprov run` takes the CloudProvider mapping's settings (docs/contracts.md#settings): --help lists
# them from the mapping, --region VALUE reaches the mapping's ctx as before, an option that names no
# setting is refused, and a missing required one stops the controllers naming the flag and variables.
source "$(dirname "$0")/lib.sh"

help="$("$LUAPROV" run --help)"
grep -q -- '--region VALUE .*(env \$REGION_ID, \$ALIBABA_CLOUD_REGION_ID; required)' <<<"$help" \
  || fail "--help lists the mapping's region setting: $help"
grep -q -- '--cluster-type VALUE .*(env \$LUAPROV_ALIBABA_CLUSTER_TYPE)' <<<"$help" || fail "--help lists cluster-type"
grep -q -- '--kubeadm-ca-cert-hash VALUE .*(env \$LUAPROV_KUBEADM_CA_CERT_HASH)' <<<"$help" \
  || fail "--help lists kubeadm-ca-cert-hash"
! grep -q -- '--kubeadm-token' <<<"$help" || fail "the kubeadm token is no setting"

# a setting of an operator's mapping shows in --help with --scripts
mkdir -p "$WORK/scripts/providers/alibaba"
cat > "$WORK/scripts/providers/alibaba/init.lua" <<'LUA'
local default = require "defaults.providers.alibaba"
local M = {}
for k, v in pairs(default) do M[k] = v end
M.settings = { { name = "zone-hint", env = { "ZONE_HINT" }, default = "any", help = "an operator's setting" } }
return M
LUA
"$LUAPROV" run --scripts "$WORK/scripts" --help | grep -q -- '--zone-hint VALUE .*an operator.s setting' \
  || fail "--help lists the settings of the --scripts tree"

# an option that is no setting: exit 2, one line and the hint to --help
if "$LUAPROV" run --colour blue 2>"$WORK/err"; then fail "--colour accepted"; fi
grep -q "luaprov run: unknown option '--colour'" "$WORK/err" || fail "unknown option named: $(cat "$WORK/err")"
grep -qx "run 'luaprov run --help' for usage" "$WORK/err" || fail "the hint to --help (which lists the settings) after an unknown option"

# a required setting missing: the controllers do not start, and the log says which flag and variables
unset REGION_ID ALIBABA_CLOUD_REGION_ID
if CLUSTER_ID=c-1 "$LUAPROV" run --metrics-addr 127.0.0.1:0 --kubeconfig "$WORK/none" 2>"$ENGINE_LOG"; then
  fail "started without a region"
fi
grep -q '"msg":"the controllers need the settings of the CloudProvider mapping".*"error":"the region is not set: pass --region VALUE or set REGION_ID or set ALIBABA_CLOUD_REGION_ID"' \
  "$ENGINE_LOG" || fail "the missing region named"

# --region reaches the mapping's ctx (the controllers log the settings they start with), next to the
# simulated kubeadm cluster's CA hash (a sim value); the kubeadm token is no setting and never logged
unset LUAPROV_ALIBABA_CLUSTER_TYPE LUAPROV_KUBEADM_CA_CERT_HASH
start_engine --sim --region cn-beijing
wait_for "controllers starting" grep -q '"msg":"controllers starting"' "$ENGINE_LOG"
grep -q '"msg":"controllers starting".*"settings":{"kubeadm_ca_cert_hash":"sha256:[0-9a-f]\{64\}","region":"cn-beijing"}' \
  "$ENGINE_LOG" \
  || fail "--region in the settings"
kill -TERM "$ENGINE_PID"
wait "$ENGINE_PID" || fail "exit status $? after SIGTERM"
ENGINE_PID=""

# the environment instead: the second variable when the first is unset, so the settings pass and the
# start goes on to the (missing) kubeconfig
if ALIBABA_CLOUD_REGION_ID=cn-shanghai CLUSTER_ID=c-1 "$LUAPROV" run --metrics-addr 127.0.0.1:0 \
  --kubeconfig "$WORK/none" 2>"$ENGINE_LOG"; then
  fail "started without a kubeconfig"
fi
! grep -q '"msg":"the controllers need the settings' "$ENGINE_LOG" || fail "ALIBABA_CLOUD_REGION_ID not read"
grep -q '"msg":"cannot configure the Kubernetes client"' "$ENGINE_LOG" || fail "the start went on"
echo "run settings: ok"
