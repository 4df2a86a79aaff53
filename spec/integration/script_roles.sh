#!/usr/bin/env bash
# Each script role gets only what it needs (docs/lua-api.md#capabilities): `luaprov check` names every
# capability a policy, a policy module, a mapping or the test kit reaches for and its role lacks, at the
# script's line; a policy cannot borrow a mapping's module; and a mapping's luaprov.http reaches only
# the hosts it declares, its endpoint variables and --endpoint. Every assertion compares whole lines.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
WHY="policies decide from the objects they are given; see docs/lua-api.md#capabilities"

check_says() { # check_says TREE EXPECTED_LINE: exit 1 and exactly that one problem
  local got status=0
  got="$("$LUAPROV" check "$1" 2>/dev/null)" || status=$?
  [[ "$status" == 1 && "$got" == "$2"$'\n'"$1: 1 problem" ]] || fail "check $1: expected '$2', got '$got' ($status)"
}

# policy FILE ENTRY USE: a policy whose entry (line 3) uses USE on line 4, called by check on the kit's
# defaults; the refusal surfaces at that call.
policy() {
  rm -rf t && mkdir -p t/policies
  printf 'local luaprov = require "luaprov"\nlocal M = {}\nfunction M.%s()\n  local _ = %s\n  return %s\nend\nreturn M\n' \
    "$2" "$3" "$4" > "t/policies/$1"
}
# The uses, and the capability each message names.
USES=(
  'luaprov.http.request { url = "http://attacker.example.invalid/" }|luaprov.http'
  'luaprov.http.request_all { { url = "http://attacker.example.invalid/" } }|luaprov.http'
  'luaprov.env("ALIBABA_CLOUD_ACCESS_KEY_SECRET")|luaprov.env'
  'luaprov.fs.read("/var/run/secrets/kubernetes.io/serviceaccount/token")|luaprov.fs'
  'luaprov.cache.new("alibaba-attach-script", 60)|luaprov.cache'
  'luaprov.stream.write("1", "x")|luaprov.stream'
  'luaprov.time.sleep(0)|luaprov.time.sleep'
)
# file, entry point, what it returns, the role's title
for spec in 'drift.lua|is_drifted|""|a drift policy' 'tags.lua|build_instance_tags|{}|a tags policy' \
  'disruption.lua|can_disrupt|true|a disruption policy'; do
  IFS='|' read -r file entry ret title <<<"$spec"
  for use in "${USES[@]}"; do
    policy "$file" "$entry" "${use%|*}" "$ret"
    check_says t "t/policies/$file:4: ${use#*|} is not available to $title ($WHY)"
  done
done

# The repair policy's rules are read at load: a capability reached for at module load is a load problem.
for use in "${USES[@]}"; do
  rm -rf t && mkdir -p t/policies
  printf 'local luaprov = require "luaprov"\nlocal _ = %s\nreturn { policies = function() return {} end }\n' \
    "${use%|*}" > t/policies/repair.lua
  check_says t "t/policies/repair.lua:2: ${use#*|} is not available to a repair policy ($WHY)"
done

# A module a policy requires has the policy role too; so does a local alias taken at load and used later.
rm -rf t && mkdir -p t/policies/lib
printf 'local http = require("luaprov").http\nlocal M = {}\nfunction M.send()\n  return http.request { url = "http://x.invalid/" }\nend\nreturn M\n' \
  > t/policies/lib/exfil.lua
printf 'local exfil = require "policies.lib.exfil"\nlocal M = {}\nfunction M.is_drifted()\n  exfil.send()\n  return ""\nend\nreturn M\n' \
  > t/policies/drift.lua
check_says t "t/policies/lib/exfil.lua:4: luaprov.http is not available to a policy module ($WHY)"

# A policy cannot borrow a mapping's module (and with it the mapping's network and credentials).
rm -rf t && mkdir -p t/policies
printf 'local M = {}\nlocal client = require "providers.alibaba.client"\nfunction M.is_drifted() return "" end\nreturn M\n' \
  > t/policies/drift.lua
check_says t "t/policies/drift.lua:2: module 'providers.alibaba.client' is not available to a drift policy: it is \
a mapping's and may use luaprov.http, which a drift policy may not ($WHY)"

# What a policy may use still works: json, log, crypto, time.now, version.
rm -rf t && mkdir -p t/policies
printf '%s\n' 'local luaprov = require "luaprov"' 'local M = {}' 'function M.is_drifted()' \
  '  local _ = luaprov.json.encode { a = 1 } .. luaprov.crypto.sha256_hex("x") .. luaprov.time.now() .. luaprov.version' \
  '  luaprov.log.debug("checked")' '  return ""' 'end' 'return M' > t/policies/drift.lua
"$LUAPROV" check t >/dev/null || fail "a policy using json, log, crypto and time: $("$LUAPROV" check t 2>&1)"

# A mapping requires only its own modules: through another's it would reach that mapping's endpoints.
rm -rf t && mkdir -p t/providers/bizfly
printf '%s\n' 'local default = require "defaults.providers.bizfly"' 'local _ = require "providers.alibaba.client"' \
  'return default' > t/providers/bizfly/init.lua
check_says t "t/providers/bizfly/init.lua:2: module 'providers.alibaba.client' is not available to the mapping \
providers.bizfly: it is the mapping providers.alibaba's, and a mapping requires only its own modules (each reaches \
only its own endpoints; see docs/lua-api.md#capabilities)"

# A mapping has no luaprov.stream (the simulators' handlers have).
rm -rf t && mkdir -p t/providers/alibaba
printf '%s\n' 'local default = require "defaults.providers.alibaba"' 'local luaprov = require "luaprov"' \
  'luaprov.stream.open("1")' 'return default' > t/providers/alibaba/init.lua
check_says t "t/providers/alibaba/init.lua:3: luaprov.stream is not available to a mapping (streams belong to the \
simulators' HTTP handlers; see docs/lua-api.md#capabilities)"

# A malformed endpoints declaration is a load problem of the mapping.
sed -i 's/^return default$/default.endpoints = { hosts = { "*" } }\nreturn default/' t/providers/alibaba/init.lua
sed -i '3d' t/providers/alibaba/init.lua
check_says t "t/providers/alibaba/init.lua: providers.alibaba: endpoints.hosts[1] \"*\" is not a lower-case host \
name, address or *.domain (see docs/lua-api.md#capabilities)"

# The test kit's builders, loaded into every generation for validation, get json, log, crypto and time.
KIT="$WORK/defaults"
cp -r "$LUAPROV_SOURCE_DIR/policies" "$LUAPROV_SOURCE_DIR/providers" "$LUAPROV_SOURCE_DIR/sim" \
  "$LUAPROV_SOURCE_DIR/testkit" "$WORK/" && mkdir -p "$KIT" && mv "$WORK"/{policies,providers,sim,testkit} "$KIT/"
sed -i '1a local _ = require("luaprov").env("HOME")' "$KIT/testkit/luaprov/testkit/merge.lua"
rm -rf t && mkdir -p t/policies
got="$(LUAPROV_DEFAULT_SCRIPTS="$KIT" "$LUAPROV" check t 2>/dev/null)" && fail "check with a kit that reads env passed"
[[ "$(head -1 <<<"$got")" == *"testkit/merge.lua:2: luaprov.env is not available to the test kit (the test kit's \
builders only build objects; see docs/lua-api.md#capabilities)" ]] || fail "kit reading env: got '$got'"

# The mapping's host allow-list: an operator mapping whose instance_types requests $H6_URL and says
# what came back. Declared hosts (exact and *.domain), the variable it names and --endpoint are
# reachable (the request then fails to connect: nothing listens); everything else is refused.
rm -rf m && mkdir -p m/providers/alibaba
cat > m/providers/alibaba/init.lua <<'LUA'
local default = require "defaults.providers.alibaba"
local luaprov = require "luaprov"
local M = {}
for key, value in pairs(default) do M[key] = value end
M.endpoints = { hosts = { "api.example.invalid", "*.cloud.example.invalid" }, env = { "H6_ENDPOINT" } }
function M.instance_types()
  local url = luaprov.env("H6_URL")
  local res, _, code
  if luaprov.env("H6_ALL") then
    res = luaprov.http.request_all({ { url = "http://api.example.invalid/", timeout_ms = 2000 },
      { url = url, timeout_ms = 2000 } })[2]
    code = res.code
  else
    res, _, code = luaprov.http.request { url = url, timeout_ms = 2000 }
  end
  error("reached: " .. tostring(res and res.status or code), 0)
end
return M
LUA
NC="$LUAPROV_SOURCE_DIR/spec/fixtures/alibaba/ecsnodeclass.json"
types() { # types URL [ARGS...]: the error eval instance-types prints
  local url="$1"
  shift
  H6_URL="$url" H6_ENDPOINT="http://127.0.0.1:9" "$LUAPROV" eval instance-types --scripts m --nodeclass "$NC" "$@" \
    2>/dev/null | jq -r .error
}
command -v jq >/dev/null || fail "jq missing: tools/install-deps.sh test installs it"
refused() { # refused HOST: the refusal at line LINE of the mapping
  echo "m/providers/alibaba/init.lua:$2: luaprov.$3: host $1 is not an endpoint of the mapping providers.alibaba (a \
mapping reaches only the hosts its endpoints declare, the ones its endpoint variables name, and --endpoint or --sim; \
see docs/lua-api.md#capabilities)"
}
for url in http://api.example.invalid/ https://API.example.invalid:8443/x http://a.b.cloud.example.invalid/ \
  http://127.0.0.1:9/; do
  [[ "$(types "$url")" == "reached: ConnectFailed" ]] || fail "$url is allowed: got '$(types "$url")'"
done
[[ "$(types http://127.0.0.1:11/ --endpoint http://127.0.0.1:11)" == "reached: ConnectFailed" ]] \
  || fail "--endpoint is allowed"
[[ "$(types http://attacker.example.invalid/x)" == "$(refused attacker.example.invalid 14 http.request)" ]] \
  || fail "an arbitrary host: got '$(types http://attacker.example.invalid/x)'"
[[ "$(types http://cloud.example.invalid/)" == "$(refused cloud.example.invalid 14 http.request)" ]] \
  || fail "*.domain is not the domain itself"
[[ "$(types http://127.0.0.1:10/)" == "$(refused 127.0.0.1:10 14 http.request)" ]] \
  || fail "the variable's port: got '$(types http://127.0.0.1:10/)'"
[[ "$(H6_ALL=1 types http://attacker.example.invalid/)" == "$(refused attacker.example.invalid 10 http.request_all)" ]] \
  || fail "request_all: got '$(H6_ALL=1 types http://attacker.example.invalid/)'"
NOT_HTTP="m/providers/alibaba/init.lua:14: luaprov.http.request: a mapping may reach only http(s) URLs with a host \
and no user name (see docs/lua-api.md#capabilities)"
for url in file:///etc/passwd http://api.example.invalid@attacker.example.invalid/; do
  [[ "$(types "$url")" == "$NOT_HTTP" ]] || fail "$url: got '$(types "$url")'"
done
echo "script roles: ok"
