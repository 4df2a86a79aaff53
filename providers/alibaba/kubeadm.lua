-- The bootstrap of cluster type Kubeadm (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap): a
-- bash script that writes a kubeadm JoinConfiguration and a KubeletConfiguration patch, then runs
-- `kubeadm join --config`. bootstrap.lua checks the NodeClaim's labels and taints and the class's
-- kubelet settings and merges the result with spec.userData; this module owns what is kubeadm's.
--
--   endpoint(spec) -> "host:port" | nil, err       the API server of spec.clusterEndpoint
--   credentials(ctx) -> {token, ca_cert_hash} | nil, err   the bootstrap token (ctx.kubeadm_token, else
--                                                  LUAPROV_KUBEADM_TOKEN: a variable, not a setting,
--                                                  because the engine logs its settings) and the
--                                                  kubeadm-ca-cert-hash setting (ctx, else its variable)
--   script(join) -> the commands (no "#!" line)    join = {endpoint, token, ca_cert_hash, labels =
--                                                  {"k=v", ...}, taints = {{key, value?, effect}},
--                                                  kubelet = {KubeletConfiguration fields} | nil}
--   API_VERSION, DIR, CONFIG, PATCHES             where the script writes what
--
-- err = {code = "InvalidNodeClass" | "InvalidConfig", message}. No message ever holds the token.
local luaprov = require "luaprov"

local M = {}

-- v1beta4 is the version kubeadm 1.31 introduced and the one it writes; v1beta3 is deprecated since
-- then and goes away in a later release. (v1beta4's kubeletExtraArgs is a list of {name, value}.)
M.API_VERSION = "kubeadm.k8s.io/v1beta4"
M.DIR = "/etc/kubernetes/luaprov"
M.CONFIG = M.DIR .. "/kubeadm-join.json"
M.PATCHES = M.DIR .. "/patches"
M.DEFAULT_PORT = 6443

-- The ECS metadata service, asked at boot for the node's providerID (<region>.<instance id>), with a
-- session token so that it also works when the instance enforces IMDSv2 (metadataOptions.httpTokens).
local METADATA = "http://100.100.100.200/latest"

local function present(v) return v ~= nil and v ~= "" and v ~= luaprov.json.null end

local function invalid(code, fmt, ...)
  return nil, { code = code, message = fmt:format(...) }
end

-- A DNS name or IPv4 address, or an IPv6 address in brackets.
local function valid_host(host)
  if host:find("^%[[%x:.]+%]$") then return true end
  if #host > 253 or not host:find("^[%w][%w%.%-]*$") or host:find("..", 1, true) then return false end
  for label in host:gmatch("[^.]+") do
    if #label > 63 or label:sub(-1) == "-" then return false end
  end
  return host:sub(-1) ~= "."
end

function M.endpoint(spec)
  local value = type(spec) == "table" and spec.clusterEndpoint or nil
  if not present(value) then
    return invalid("InvalidNodeClass", "ECSNodeClass spec.clusterEndpoint is not set: cluster type Kubeadm needs "
      .. "the API server nodes join (https://host:port or host:port)")
  end
  local bad = { code = "InvalidNodeClass", message = ("ECSNodeClass spec.clusterEndpoint %q is not "
    .. "https://host[:port] or host[:port] (the API server nodes join)"):format(tostring(value)) }
  if type(value) ~= "string" then return nil, bad end
  local rest = value:gsub("^https://", ""):gsub("/$", "")
  local host, port = rest:match("^(.-):(%d+)$")
  if not host then host, port = rest, tostring(M.DEFAULT_PORT) end
  local n = tonumber(port)
  if not valid_host(host) or not n or n < 1 or n > 65535 or port:sub(1, 1) == "0" then return nil, bad end
  return host .. ":" .. port
end

local TOKEN_SETTING = { key = "kubeadm_token", env = "LUAPROV_KUBEADM_TOKEN" }
local HASH_SETTING = { name = "kubeadm-ca-cert-hash", key = "kubeadm_ca_cert_hash",
  env = "LUAPROV_KUBEADM_CA_CERT_HASH" }

local function setting(ctx, s)
  local v = ctx[s.key]
  if present(v) then return v end
  v = luaprov.env(s.env)
  if present(v) then return v end
  return nil
end


function M.credentials(ctx)
  ctx = ctx or {}
  local token = setting(ctx, TOKEN_SETTING)
  if not token then
    return invalid("InvalidConfig", "the kubeadm bootstrap token is not set: set %s (cluster type Kubeadm)",
      TOKEN_SETTING.env)
  end
  -- The message says what is wrong with it, never what it is.
  if type(token) ~= "string" or not token:find("^[a-z0-9][a-z0-9][a-z0-9][a-z0-9][a-z0-9][a-z0-9]%.[a-z0-9]+$")
      or #token ~= 23 then
    return invalid("InvalidConfig", "%s is not a kubeadm bootstrap token: want 6 and 16 characters a-z, 0-9 "
      .. "joined by a dot, as `kubeadm token create` prints", TOKEN_SETTING.env)
  end
  local hash = setting(ctx, HASH_SETTING)
  if not hash then
    return invalid("InvalidConfig", "the kubeadm CA certificate hash is not set: pass --%s or set %s (cluster "
      .. "type Kubeadm)", HASH_SETTING.name, HASH_SETTING.env)
  end
  if type(hash) ~= "string" or not hash:find("^sha256:" .. ("%x"):rep(64) .. "$") then
    return invalid("InvalidConfig", "the %s setting (%s) %q is not sha256:<64 hex digits>, the hash of the "
      .. "cluster CA's public key (`kubeadm token create --print-join-command` prints it)", HASH_SETTING.name,
      HASH_SETTING.env, tostring(hash))
  end
  return { token = token, ca_cert_hash = hash:lower() }
end

-- JSON (which is YAML, so kubeadm reads it as any config file) written with a fixed key order and
-- indentation, so the same NodeClaim always gives the same script. Strings go through json.encode.
local function value_text(v, indent)
  if type(v) ~= "table" then return assert(luaprov.json.encode(v)) end
  local inner = indent .. "  "
  local lines = {}
  if v[1] ~= nil then
    for i, item in ipairs(v) do lines[i] = inner .. value_text(item, inner) end
    return "[\n" .. table.concat(lines, ",\n") .. "\n" .. indent .. "]"
  end
  for i, pair in ipairs(v.__order) do
    lines[i] = inner .. assert(luaprov.json.encode(pair[1])) .. ": " .. value_text(pair[2], inner)
  end
  return "{\n" .. table.concat(lines, ",\n") .. "\n" .. indent .. "}"
end

local function object(...)
  local pairs_list = {}
  local args = table.pack(...)
  for i = 1, args.n, 2 do
    if args[i + 1] ~= nil then pairs_list[#pairs_list + 1] = { args[i], args[i + 1] } end
  end
  return { __order = pairs_list }
end

local function join_configuration(join)
  local taints = {}
  for i, t in ipairs(join.taints) do taints[i] = object("key", t.key, "value", t.value, "effect", t.effect) end
  local args = { object("name", "node-labels", "value", table.concat(join.labels, ",")) }
  return value_text(object(
    "apiVersion", M.API_VERSION,
    "kind", "JoinConfiguration",
    "discovery", object("bootstrapToken", object(
      "apiServerEndpoint", join.endpoint,
      "token", join.token,
      "caCertHashes", { join.ca_cert_hash })),
    "nodeRegistration", object("kubeletExtraArgs", args, "taints", taints),
    "patches", object("directory", M.PATCHES)), "")
end

-- A heredoc with a quoted delimiter: the shell expands nothing inside. No line of the JSON above can
-- be the delimiter (each starts with a blank, a brace or a bracket).
local function write(path, text, delimiter)
  return ("cat > %s <<'%s'\n%s\n%s\n"):format(path, delimiter, text, delimiter)
end

function M.script(join)
  local out = {
    "# kubeadm join (luaprov, cluster type Kubeadm)\n",
    "mkdir -p " .. M.PATCHES .. "\n",
    "chmod 700 " .. M.DIR .. "\n",
    "LUAPROV_UMASK=\"$(umask)\"\n",
    "umask 077\n",
    write(M.CONFIG, join_configuration(join), "LUAPROV_JOIN_CONFIGURATION"),
  }
  if join.kubelet and next(join.kubelet) ~= nil then
    -- The class's kubelet settings, merged (RFC 7386) into the KubeletConfiguration kubeadm downloads
    -- from the cluster's kubelet-config ConfigMap before it writes /var/lib/kubelet/config.yaml.
    out[#out + 1] = write(M.PATCHES .. "/kubeletconfiguration0+merge.json", assert(luaprov.json.encode(join.kubelet)),
      "LUAPROV_KUBELET_CONFIGURATION")
  end
  -- The providerID Karpenter matches the Node to its NodeClaim by, as the ACK attach script sets it.
  out[#out + 1] = table.concat({
    ("LUAPROV_IMDS_TOKEN=\"$(curl -fsS --retry 5 -X PUT -H 'X-aliyun-ecs-metadata-token-ttl-seconds: 300' "
      .. "%s/api/token)\"\n"):format(METADATA),
    ("luaprov_metadata() { curl -fsS --retry 5 -H \"X-aliyun-ecs-metadata-token: $LUAPROV_IMDS_TOKEN\" "
      .. "\"%s/meta-data/$1\"; }\n"):format(METADATA),
    "LUAPROV_PROVIDER_ID=\"$(luaprov_metadata region-id).$(luaprov_metadata instance-id)\"\n",
    ("printf '{\"providerID\":\"%%s\"}\\n' \"$LUAPROV_PROVIDER_ID\" > %s/kubeletconfiguration1+merge.json\n")
      :format(M.PATCHES),
    "umask \"$LUAPROV_UMASK\"\n",
    "kubeadm join --config " .. M.CONFIG .. "\n",
  })
  return table.concat(out)
end

return M
