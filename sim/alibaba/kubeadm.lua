-- The simulated account's self-managed (kubeadm) cluster, as its nodes join it: the API server's
-- address, a bootstrap token and the hash of the cluster CA's public key. The simulated kubelet
-- registers a Node for an instance whose user data runs `kubeadm join --config FILE` with a
-- JoinConfiguration that discovers this cluster with this token and pins this CA (parse), with the
-- labels, taints and kubelet settings it names, as it does for the ACK attach command (attach.lua).
--   API_SERVER, TOKEN, CA_CERT_HASH   the cluster's (published: docs/sim.md; under `luaprov run --sim`
--                                     the provider gets TOKEN as LUAPROV_KUBEADM_TOKEN and CA_CERT_HASH
--                                     as the sim value of its kubeadm-ca-cert-hash setting)
--   joins(user_data) -> whether a script of the user data runs `kubeadm join`
--   parse(user_data) -> {labels, taints, node_config} | nil, why
--
-- What the kubelet reads of the scripts: files written with a heredoc (`cat > PATH <<'EOF'` ... `EOF`)
-- before the join line, the JoinConfiguration among them as JSON (which kubeadm, reading YAML, also
-- takes), and the JSON merge patches of target kubeletconfiguration in its patches directory.
local luaprov = require "luaprov"
local attach = require "sim.alibaba.attach"
local userdata = require "sim.alibaba.userdata"

local json = luaprov.json

local M = {}

M.API_SERVER = "172.16.255.100:6443"
M.TOKEN = "lpsim1.kubeadmsimulator"
M.CA_CERT_HASH = "sha256:868dca96097a88ad2250dfe5fdeae2c0a897c366fef2207fa7e914d57cad9b25"

local VERSIONS = { ["kubeadm.k8s.io/v1beta3"] = "v1beta3", ["kubeadm.k8s.io/v1beta4"] = "v1beta4" }

local JOIN = "^%s*kubeadm%s+join%f[%s\0]"

local function lines(text)
  return (text .. "\n"):gmatch("([^\n]*)\n")
end

function M.joins(user_data)
  local scripts = userdata.scripts(user_data)
  for _, text in ipairs(scripts or {}) do
    for line in lines(text) do
      if line:gsub("\r$", ""):find(JOIN) then return true end
    end
  end
  return false
end

-- The scripts -> {path -> content} of their heredocs before the join line, and the join line's
-- arguments. One join line in all.
local function scan(scripts)
  local files, join = {}, nil
  for _, text in ipairs(scripts) do
    local path, delimiter, body
    for line in lines(text) do
      line = line:gsub("\r$", "")
      if path then
        if line == delimiter then
          files[path], path = table.concat(body, "\n"), nil
        else
          body[#body + 1] = line
        end
      elseif line:find(JOIN) then
        if join then return nil, "the user data runs kubeadm join twice" end
        join = { args = line:gsub(JOIN, ""):match("^%s*(.-)%s*$"), files = {} }
        for k, v in pairs(files) do join.files[k] = v end
      else
        local p, _, d = line:match("^%s*cat%s*>%s*(%S+)%s*<<%s*(['\"]?)([%w_]+)%2%s*$")
        if p then path, delimiter, body = p, d, {} end
      end
    end
  end
  if not join then return nil, "the user data runs no kubeadm join" end
  return join
end

local function config_path(args)
  local list = {}
  for word in args:gmatch("%S+") do list[#list + 1] = word end
  local path
  if #list == 2 and list[1] == "--config" then path = list[2] end
  if #list == 1 then path = list[1]:match("^%-%-config=(.+)$") end
  if not path then
    return nil, ("arguments %q: the simulated kubelet reads `kubeadm join --config FILE` only"):format(args)
  end
  return path
end

local function object(v) return type(v) == "table" and v or nil end

-- kubeletExtraArgs (v1beta4: [{name, value}], v1beta3: {name = value}) -> the node-labels value or ""
local function node_labels(args, version)
  if args == nil then return "" end
  local found
  if version == "v1beta4" then
    if type(args) ~= "table" or (next(args) ~= nil and args[1] == nil) then
      return nil, "nodeRegistration.kubeletExtraArgs is not a list of {name, value} (v1beta4)"
    end
    for _, arg in ipairs(args) do
      if type(arg) ~= "table" or type(arg.name) ~= "string" or type(arg.value) ~= "string" then
        return nil, "nodeRegistration.kubeletExtraArgs has an item that is not {name, value}"
      end
      if arg.name == "node-labels" then
        if found then return nil, "nodeRegistration.kubeletExtraArgs names node-labels twice" end
        found = arg.value
      end
    end
  else
    if type(args) ~= "table" or args[1] ~= nil then
      return nil, "nodeRegistration.kubeletExtraArgs is not a map of strings (v1beta3)"
    end
    found = args["node-labels"]
    if found ~= nil and type(found) ~= "string" then return nil, "kubeletExtraArgs node-labels is not a string" end
  end
  return found or ""
end

local function taints_of(list)
  local taints = {}
  if list == nil then return taints end
  if type(list) ~= "table" or (next(list) ~= nil and list[1] == nil) then
    return nil, "nodeRegistration.taints is not a list"
  end
  for i, t in ipairs(list) do
    local where = ("nodeRegistration.taints[%d]"):format(i - 1)
    if type(t) ~= "table" or type(t.key) ~= "string" or (t.value ~= nil and type(t.value) ~= "string") then
      return nil, where .. " is not {key, value?, effect}"
    end
    local why = attach.taint(t.key, t.value, tostring(t.effect), where)
    if why then return nil, why end
    taints[i] = { key = t.key, value = t.value ~= "" and t.value or nil, effect = t.effect }
  end
  return taints
end

-- The discovery of this cluster: its API server, its token (never named in why), its CA.
local function check_discovery(discovery)
  local bt = object(object(discovery) and discovery.bootstrapToken)
  if not bt then
    return "discovery.bootstrapToken is missing (the simulated cluster is joined by bootstrap token discovery)"
  end
  if bt.apiServerEndpoint ~= M.API_SERVER then
    return ("discovery.bootstrapToken.apiServerEndpoint %s is not the simulated cluster's API server (%s)")
      :format(json.encode(bt.apiServerEndpoint or json.null), M.API_SERVER)
  end
  if bt.token ~= M.TOKEN then return "discovery.bootstrapToken.token is not a bootstrap token of the cluster" end
  local tls = discovery.tlsBootstrapToken
  if tls ~= nil and tls ~= "" and tls ~= M.TOKEN then
    return "discovery.tlsBootstrapToken is not a bootstrap token of the cluster"
  end
  if bt.unsafeSkipCAVerification == true then return nil end
  for _, hash in ipairs(object(bt.caCertHashes) or {}) do
    if type(hash) == "string" and hash:lower() == M.CA_CERT_HASH then return nil end
  end
  return ("discovery.bootstrapToken.caCertHashes does not pin the cluster's CA (%s): kubeadm refuses the "
    .. "API server"):format(M.CA_CERT_HASH)
end

-- The kubeletconfiguration patches of dir, in file name order, merged -> {field = value}.
local function kubelet_config(files, dir)
  local names = {}
  local prefix = dir:gsub("/+$", "") .. "/"
  for path in pairs(files) do
    local name = path:sub(1, #prefix) == prefix and path:sub(#prefix + 1)
    if name and name:find("^kubeletconfiguration[^/]*$") then names[#names + 1] = name end
  end
  table.sort(names)
  local config = {}
  for _, name in ipairs(names) do
    local kind = name:match("%+(%a+)%.") or "strategic"
    if not name:find("%.json$") or kind == "json" then
      return nil, ("patch %s: the simulator reads kubeletconfiguration patches as JSON merge patches "
        .. "(kubeletconfiguration[suffix][+merge].json)"):format(name)
    end
    local patch, err = json.decode(files[prefix .. name])
    if type(patch) ~= "table" then return nil, ("patch %s is not a JSON object: %s"):format(name, err or "") end
    for k, v in pairs(patch) do config[k] = v end
  end
  local max_pods = config.maxPods
  if max_pods ~= nil and (math.type(max_pods) ~= "integer" or max_pods < 1) then
    return nil, "the kubelet configuration's maxPods must be a positive integer, not " .. json.encode(max_pods)
  end
  return config
end

local function check(join)
  local path, why = config_path(join.args)
  if not path then return nil, why end
  local text = join.files[path]
  if not text then return nil, ("no heredoc before kubeadm join writes %s"):format(path) end
  local config = json.decode(text)
  if type(config) ~= "table" then
    return nil, ("%s is not a JSON object (the simulator reads JoinConfigurations written as JSON)"):format(path)
  end
  local version = VERSIONS[config.apiVersion]
  if not version then
    return nil, ("apiVersion %s is not kubeadm.k8s.io/v1beta4 or v1beta3"):format(json.encode(config.apiVersion
      or json.null))
  end
  if config.kind ~= "JoinConfiguration" then
    return nil, ("kind %s is not JoinConfiguration"):format(json.encode(config.kind or json.null))
  end
  if object(config.controlPlane) then return nil, "controlPlane is set: the simulator joins worker nodes only" end
  why = check_discovery(config.discovery)
  if why then return nil, why end
  local reg = object(config.nodeRegistration) or {}
  local label_text, lerr = node_labels(reg.kubeletExtraArgs, version)
  if not label_text then return nil, lerr end
  local labels = {}
  if label_text ~= "" then
    labels, lerr = attach.labels(label_text, "kubeletExtraArgs node-labels")
    if not labels then return nil, lerr end
  end
  local taints, terr = taints_of(reg.taints)
  if not taints then return nil, terr end
  local kubelet = {}
  local dir = object(config.patches) and config.patches.directory
  if type(dir) == "string" and dir ~= "" then
    local kerr
    kubelet, kerr = kubelet_config(join.files, dir)
    if not kubelet then return nil, kerr end
  end
  return { labels = labels, taints = taints, node_config = { kubelet_config = kubelet } }
end

--- parse(user_data) -> {labels, taints, node_config} | nil, why: the kubeadm join the user data (base64
-- or text; a script or a MIME archive) runs. labels {k = v} of kubeletExtraArgs node-labels; taints
-- {{key, value?, effect}} of nodeRegistration.taints in order; node_config {kubelet_config = the merged
-- kubeletconfiguration patches}, the shape attach.parse gives. why never holds the token.
function M.parse(user_data)
  local scripts, why = userdata.scripts(user_data)
  if not scripts then return nil, why end
  local join, jwhy = scan(scripts)
  if not join then return nil, jwhy end
  local parsed, cwhy = check(join)
  if not parsed then return nil, "kubeadm join: " .. cwhy end
  return parsed
end

return M
