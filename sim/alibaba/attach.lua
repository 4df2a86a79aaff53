-- The ACK attach script of the simulated account's clusters: what the Container Service's
-- DescribeClusterAttachScripts answers for a cluster, and the token that ties a node to it. The
-- simulated kubelet registers a Node only for an instance whose user data runs this script for a
-- cluster the account has (parse), with the labels, taints and kubelet settings the command names.
--
-- As ACK sometimes does, the script names the docker runtime although the cluster's Kubernetes (1.31)
-- has no dockershim since 1.24: a node that runs it as answered never starts. Its node pools run
-- containerd (sim/alibaba/nodepools.lua); the provider puts their runtime in the command
-- (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap), and parse refuses docker.
--   CLUSTERS                      cluster ID -> {kubernetes_version, script_runtime, runtime}:
--                                 script_runtime the {name, version} the attach script names,
--                                 runtime the one its node pools run
--   token(cluster_id) -> the --openapi-token of the cluster's attach command
--   script(cluster_id, format_disk[, runtime]) -> the one-line attach command (with runtime {name,
--                                 version} instead of the script_runtime when given), or nil when
--                                 there is no such cluster
--   parse(user_data) -> {cluster_id, labels, taints, node_config, format_disk, runtime} | nil, why
--   labels(text, option) -> {k = v} | nil, why   "k=v,..." as a kubelet's --node-labels takes it
--                                 (option names the text in why: "--labels")
--   taint(key, value, effect, option) -> nil | why   a taint a kubelet registers with
local luaprov = require "luaprov"
local account = require "sim.alibaba.account"
local catalogue = require "sim.alibaba.catalogue"
local userdata = require "sim.alibaba.userdata"

local M = {}

M.CLUSTERS = { [account.CLUSTER] = { kubernetes_version = "1.31.1-aliyun.1",
  script_runtime = { name = "docker", version = "19.03.15" },
  runtime = { name = "containerd", version = "1.6.38" } } }

function M.token(cluster_id)
  return luaprov.crypto.sha256_hex("luaprov-sim attach " .. cluster_id):sub(1, 32)
end

function M.script(cluster_id, format_disk, runtime)
  local cluster = M.CLUSTERS[cluster_id]
  if not cluster then return nil end
  local region = catalogue.REGION
  runtime = runtime or cluster.script_runtime
  return ("curl -fsSL http://aliacs-k8s-%s.oss-%s.aliyuncs.com/public/pkg/run/attach/%s/attach_node.sh"
    .. " | bash -s -- --openapi-token %s --ess true --auto-drain false --runtime %s --runtime-version %s%s")
    :format(region, region, cluster.kubernetes_version, M.token(cluster_id), runtime.name, runtime.version,
      format_disk and " --format-disk" or "")
end

-- ---- parse: the attach command an instance's user data runs ----------------------------------------

local json = luaprov.json

-- A label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
local function valid_label_name(name)
  return #name <= 63 and (name:match("^[A-Za-z0-9]$") or name:match("^[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]$")) ~= nil
end

local function valid_label_key(key)
  local prefix, name = key:match("^([^/]*)/(.*)$")
  if not prefix then return valid_label_name(key) end
  return #prefix >= 1 and #prefix <= 253 and prefix:match("^[a-z0-9][-a-z0-9.]*$") ~= nil
    and prefix:match("[a-z0-9]$") ~= nil and valid_label_name(name)
end

local function valid_label_value(value) return value == "" or valid_label_name(value) end

-- A kubelet refuses to start with a --node-labels key in the kubernetes.io or k8s.io namespaces other
-- than its own well-known labels and the kubelet.kubernetes.io and node.kubernetes.io namespaces.
local KUBELET_OWN = {}
for _, key in ipairs { "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/arch",
  "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
  "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
  "failure-domain.beta.kubernetes.io/region" } do
  KUBELET_OWN[key] = true
end

local function under(namespace, root)
  return namespace == root or namespace:sub(-#root - 1) == "." .. root
end

local function kubelet_refuses(key)
  local namespace = key:match("^(.*)/") or ""
  if KUBELET_OWN[key] or under(namespace, "kubelet.kubernetes.io") or under(namespace, "node.kubernetes.io") then
    return false
  end
  return under(namespace, "kubernetes.io") or under(namespace, "k8s.io")
end

-- "k=v,k=v" -> {k = v}
function M.labels(text, option)
  local labels = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    local key, value = item:match("^([^=]*)=([^=]*)$")
    if not key then return nil, ("%s item %q is not key=value"):format(option, item) end
    if not valid_label_key(key) then return nil, ("%s key %q is not a valid label key"):format(option, key) end
    if not valid_label_value(value) then
      return nil, ("%s value %q of %s is not a valid label value"):format(option, value, key)
    end
    if labels[key] then return nil, ("%s names %s twice"):format(option, key) end
    if kubelet_refuses(key) then
      return nil, ("%s %s: the kubelet refuses unknown kubernetes.io and k8s.io labels and does not start")
        :format(option, key)
    end
    labels[key] = value
  end
  return labels
end

local EFFECTS = { NoSchedule = true, PreferNoSchedule = true, NoExecute = true }

function M.taint(key, value, effect, option)
  if not valid_label_key(key) then return ("%s key %q is not a valid taint key"):format(option, key) end
  if value and not valid_label_value(value) then
    return ("%s value %q of %s is not a valid taint value"):format(option, value, key)
  end
  if not EFFECTS[effect] then
    return ("%s effect %q of %s is not NoSchedule, PreferNoSchedule or NoExecute"):format(option, effect, key)
  end
  return nil
end

-- "key=value:Effect,key:Effect" -> {{key, value?, effect}, ...} in the given order; "" -> none
local function parse_taints(text)
  local taints = {}
  if text == "" then return taints end
  for item in (text .. ","):gmatch("([^,]*),") do
    local spec, effect = item:match("^(.*):([^:]*)$")
    if not spec then return nil, ("--taints item %q is not key[=value]:Effect"):format(item) end
    local key, value = spec:match("^([^=]*)=(.*)$")
    key = key or spec
    local why = M.taint(key, value, effect, "--taints")
    if why then return nil, why end
    taints[#taints + 1] = { key = key, value = value ~= "" and value or nil, effect = effect }
  end
  return taints
end

-- base64 of {"kubelet_config": {"maxPods": N}} -> the decoded object
local function parse_node_config(text)
  local raw, why = luaprov.crypto.base64_decode(text)
  if not raw then return nil, "--node-config is not base64: " .. why end
  local config, err = json.decode(raw)
  if config == nil then return nil, "--node-config is not JSON: " .. err end
  if type(config) ~= "table" then return nil, "--node-config is not a JSON object" end
  local kubelet = config.kubelet_config
  if kubelet == nil then return config end
  if type(kubelet) ~= "table" then return nil, "--node-config kubelet_config is not an object" end
  local max_pods = kubelet.maxPods
  if max_pods ~= nil and (math.type(max_pods) ~= "integer" or max_pods < 1) then
    return nil, "--node-config kubelet_config.maxPods must be a positive integer, not " .. json.encode(max_pods)
  end
  return config
end

-- The words of a command line as the shell splits them: blanks apart, '...' and "..." kept whole.
local function words(line)
  local out, pos = {}, 1
  while true do
    pos = line:find("%S", pos)
    if not pos then return out end
    local word = {}
    while pos <= #line and not line:sub(pos, pos):match("%s") do
      local c = line:sub(pos, pos)
      if c == "'" or c == '"' then
        local close = line:find(c, pos + 1, true)
        if not close then return nil, "unbalanced " .. c end
        word[#word + 1] = line:sub(pos + 1, close - 1)
        pos = close + 1
      else
        word[#word + 1] = c
        pos = pos + 1
      end
    end
    out[#out + 1] = table.concat(word)
  end
end

local PIPE = "|%s*bash%s+%-s%s+%-%-"

-- The one line of the scripts that pipes attach_node.sh into bash -> the command before the pipe, the
-- arguments after "--".
local function attach_line(scripts)
  local found
  for _, text in ipairs(scripts) do
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      line = line:gsub("\r$", "")
      if not line:match("^%s*#") and line:find("attach_node.sh", 1, true) and line:find(PIPE) then
        if found then return nil, "the user data runs the ACK attach command twice" end
        local from, to = line:find(PIPE)
        found = { command = line:sub(1, from - 1):match("^%s*(.-)%s*$"), args = line:sub(to + 1) }
      end
    end
  end
  if not found then
    return nil, "the user data has no ACK attach command (curl .../attach_node.sh | bash -s -- ...)"
  end
  return found
end

local VALUED = { ["--openapi-token"] = true, ["--ess"] = true, ["--auto-drain"] = true, ["--labels"] = true,
  ["--taints"] = true, ["--node-config"] = true, ["--runtime"] = true, ["--runtime-version"] = true }

-- The arguments after "--" -> {option -> value (true for --format-disk)}
local function options(args)
  local list, why = words(args)
  if not list then return nil, why end
  local opts, i = {}, 1
  while i <= #list do
    local name = list[i]
    if name ~= "--format-disk" and not VALUED[name] then
      return nil, name:sub(1, 2) == "--" and "unknown option " .. name or ("unexpected argument %q"):format(name)
    end
    if opts[name] then return nil, name .. " given twice" end
    if name == "--format-disk" then
      opts[name] = true
    else
      local value = list[i + 1]
      if value == nil or value:sub(1, 2) == "--" then return nil, name .. " needs a value" end
      opts[name], i = value, i + 1
    end
    i = i + 1
  end
  return opts
end

local RUNTIMES = { containerd = true, docker = true, ["Sandboxed-Container.runv"] = true }

-- "1.31.1-aliyun.1" -> whether it is Kubernetes 1.24 or later (no dockershim).
local function without_dockershim(version)
  local major, minor = version:match("^v?(%d+)%.(%d+)")
  major, minor = tonumber(major), tonumber(minor)
  return major ~= nil and (major > 1 or (major == 1 and minor >= 24))
end

-- --runtime and --runtime-version (both or neither) -> {name, version} | nil (neither) | false, why.
-- A node told to run docker on a Kubernetes without dockershim never starts its kubelet.
local function check_runtime(opts, cluster_id)
  local name, version = opts["--runtime"], opts["--runtime-version"]
  if name == nil and version == nil then return nil end
  if name == nil or version == nil then return false, "--runtime and --runtime-version go together" end
  if not RUNTIMES[name] then
    return false, ("--runtime %q is not containerd, docker or Sandboxed-Container.runv"):format(name)
  end
  local kubernetes = M.CLUSTERS[cluster_id].kubernetes_version
  if name == "docker" and without_dockershim(kubernetes) then
    return false, ("--runtime docker on Kubernetes %s, which has no dockershim since 1.24: the kubelet never "
      .. "starts"):format(kubernetes)
  end
  return { name = name, version = version }
end

local function check(line)
  local opts, why = options(line.args)
  if not opts then return nil, why end
  if not opts["--labels"] then return nil, "no --labels (it must name ack.aliyun.com=<cluster id>)" end
  local labels, lerr = M.labels(opts["--labels"], "--labels")
  if not labels then return nil, lerr end
  local cluster_id = labels["ack.aliyun.com"]
  if not cluster_id then return nil, "--labels has no ack.aliyun.com=<cluster id>" end
  if not M.CLUSTERS[cluster_id] then
    return nil, ("cluster %q of --labels ack.aliyun.com is not a cluster of the account"):format(cluster_id)
  end
  if not opts["--openapi-token"] then return nil, "no --openapi-token" end
  if opts["--openapi-token"] ~= M.token(cluster_id) then
    return nil, ("--openapi-token is not cluster %s's"):format(cluster_id)
  end
  local want = M.script(cluster_id):match("^(.-)%s*|")
  if line.command ~= want then return nil, ("the attach script is not cluster %s's (%s)"):format(cluster_id, want) end
  local taints, terr = parse_taints(opts["--taints"] or "")
  if not taints then return nil, terr end
  local node_config, nerr = {}, nil
  if opts["--node-config"] then node_config, nerr = parse_node_config(opts["--node-config"]) end
  if not node_config then return nil, nerr end
  local runtime, rerr = check_runtime(opts, cluster_id)
  if runtime == false then return nil, rerr end
  return { cluster_id = cluster_id, labels = labels, taints = taints, node_config = node_config,
    format_disk = opts["--format-disk"] == true, runtime = runtime }
end

--- parse(user_data) -> {cluster_id, labels, taints, node_config, format_disk, runtime} | nil, why: the ACK attach
-- command the user data (base64 as the instance keeps it, or text; a script or a MIME archive) runs.
-- labels {k = v} as --labels names them; taints {{key, value?, effect}} in --taints order; node_config
-- the decoded --node-config ({} without it); runtime {name, version} of --runtime and --runtime-version
-- (nil without them). Nil with why when the scripts run no attach command, or one whose token, cluster,
-- labels, taints, node config or runtime are not right. why never holds the token.
function M.parse(user_data)
  local scripts, why = userdata.scripts(user_data)
  if not scripts then return nil, why end
  local line, lwhy = attach_line(scripts)
  if not line then return nil, lwhy end
  local parsed, cwhy = check(line)
  if not parsed then return nil, "attach command: " .. cwhy end
  return parsed
end

return M
