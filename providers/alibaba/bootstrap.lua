-- What an ECS instance runs first: the user data of a launch (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap).
--   user_data(ctx, nodeclaim, nodeclass, capacity_type) -> text | nil, err
--   cluster_type(ctx) -> "ACKManaged" | "Kubeadm" | "Custom" | nil, err
--   kubelet_accepts(label_key) -> whether a kubelet takes the label in --node-labels
--   check(ctx, nodeclass) -> nil | message   why spec.userData cannot make user data for the cluster
--                                            type (the ECSNodeClass's UserDataReady condition)
-- text is the raw user data (not base64). For cluster type ACKManaged (the default) it runs the
-- cluster's attach script (attachscript.lua) with the node's labels, kubelet settings and taints,
-- between the parts of the ECSNodeClass's spec.userData before and after the separator line, or as
-- one more part of a MIME multi-part spec.userData (mime.lua). For Kubeadm the same, with a `kubeadm
-- join` of spec.clusterEndpoint (kubeadm.lua) in place of the attach script. For Custom, spec.userData
-- unchanged.
-- err = {code, message, action, request_id, http_status}: "InvalidNodeClass" / "InvalidNodeClaim" for
-- objects that cannot make a safe script, "InvalidConfig", or the attach-script call's error.
local luaprov = require "luaprov"
local attachscript = require "providers.alibaba.attachscript"
local kubeadm = require "providers.alibaba.kubeadm"
local mime = require "providers.alibaba.mime"
local shape = require "providers.alibaba.shape"
local util = require "providers.alibaba.util"

local M = {}

M.SEPARATOR = "#===USERDATA_SEPARATOR==="
local UNREGISTERED = "karpenter.sh/unregistered"
local EFFECTS = { NoSchedule = true, PreferNoSchedule = true, NoExecute = true }
local TYPES = { ACKManaged = true, Kubeadm = true, Custom = true }

local function present(v) return v ~= nil and v ~= "" and v ~= luaprov.json.null end

local function invalid(code, fmt, ...)
  return nil, { code = code, message = fmt:format(...) }
end

function M.cluster_type(ctx)
  local value = present(ctx and ctx.cluster_type) and ctx.cluster_type
    or luaprov.env("LUAPROV_ALIBABA_CLUSTER_TYPE")
  if not present(value) then return "ACKManaged" end
  if not TYPES[value] then
    return invalid("InvalidConfig", "cluster type %q is not ACKManaged, Kubeadm or Custom (ctx.cluster_type, "
      .. "LUAPROV_ALIBABA_CLUSTER_TYPE)", tostring(value))
  end
  return value
end

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- What may stand in the attach command's --labels and --taints lists unquoted: Kubernetes label
-- keys (an optional DNS prefix and "/") and values. Anything else (space, quote, comma, "=", ":",
-- "$") would break the command line or smuggle in another argument.
local KEY = "^[%w][%w%._%-]*/?[%w%._%-]*$"
local VALUE = "^[%w%._%-]*$"

local function safe_key(s) return type(s) == "string" and #s <= 317 and s:find(KEY) ~= nil and s:sub(-1) ~= "/" end
local function safe_value(s) return type(s) == "string" and #s <= 63 and s:find(VALUE) ~= nil end

-- The labels a kubelet accepts in --node-labels from the kubernetes.io and k8s.io domains: it refuses to
-- start on any other label there (node-restriction.kubernetes.io/..., node-role.kubernetes.io/...).
-- Such labels stay out of the command; the engine puts every NodeClaim label on the Node when it
-- registers, so the node still ends up with them.
local KUBELET_LABELS = {
  ["kubernetes.io/hostname"] = true, ["kubernetes.io/arch"] = true, ["kubernetes.io/os"] = true,
  ["beta.kubernetes.io/arch"] = true, ["beta.kubernetes.io/os"] = true, ["beta.kubernetes.io/instance-type"] = true,
  ["node.kubernetes.io/instance-type"] = true, ["topology.kubernetes.io/zone"] = true,
  ["topology.kubernetes.io/region"] = true, ["failure-domain.beta.kubernetes.io/zone"] = true,
  ["failure-domain.beta.kubernetes.io/region"] = true,
}

local function in_domain(domain, parent)
  return domain == parent or domain:sub(-(#parent + 1)) == "." .. parent
end

function M.kubelet_accepts(key)
  if KUBELET_LABELS[key] then return true end
  local domain = key:match("^([^/]*)/") or ""
  if in_domain(domain, "kubelet.kubernetes.io") or in_domain(domain, "node.kubernetes.io") then return true end
  return not (in_domain(domain, "kubernetes.io") or in_domain(domain, "k8s.io"))
end

-- The NodeClaim's labels (and the capacity type's) the kubelet takes, "k=v" sorted by key; target names
-- what they are passed to in an error.
local function node_labels(nodeclaim, capacity_type, target)
  local labels = {}
  local meta = type(nodeclaim) == "table" and nodeclaim.metadata
  local given = type(meta) == "table" and meta.labels
  if type(given) == "table" then
    for k, v in pairs(given) do labels[k] = v end
  end
  labels["karpenter.sh/capacity-type"] = capacity_type
  local keys = {}
  for k, v in pairs(labels) do
    if not safe_key(k) then
      return invalid("InvalidNodeClaim", "NodeClaim label key %q cannot be passed to %s "
        .. "(letters, digits, '.', '_', '-', one '/')", tostring(k), target)
    end
    if not safe_value(v) then
      return invalid("InvalidNodeClaim", "NodeClaim label %s=%q cannot be passed to %s "
        .. "(at most 63 letters, digits, '.', '_', '-')", k, tostring(v), target)
    end
    if M.kubelet_accepts(k) then keys[#keys + 1] = k end
  end
  table.sort(keys, util.byte_less)
  local out = {}
  for i, k in ipairs(keys) do out[i] = k .. "=" .. labels[k] end
  return out
end

-- spec.taints, spec.startupTaints, then karpenter.sh/unregistered:NoExecute: {{key, value?, effect}}.
local function node_taints(nodeclaim, target)
  local spec = type(nodeclaim) == "table" and type(nodeclaim.spec) == "table" and nodeclaim.spec or {}
  local out, unregistered = {}, false
  for _, field in ipairs({ "taints", "startupTaints" }) do
    local list = spec[field]
    if list ~= nil and type(list) ~= "table" then
      return invalid("InvalidNodeClaim", "NodeClaim spec.%s must be a list of taints", field)
    end
    for i, t in ipairs(list or {}) do
      local where = ("NodeClaim spec.%s[%d]"):format(field, i - 1)
      if type(t) ~= "table" then return invalid("InvalidNodeClaim", "%s is not a taint object", where) end
      if not safe_key(t.key) then
        return invalid("InvalidNodeClaim", "%s: key %q cannot be passed to %s (letters, digits, "
          .. "'.', '_', '-', one '/')", where, tostring(t.key), target)
      end
      if present(t.value) and not safe_value(t.value) then
        return invalid("InvalidNodeClaim", "%s (%s): value %q cannot be passed to %s (at most 63 "
          .. "letters, digits, '.', '_', '-')", where, t.key, tostring(t.value), target)
      end
      if not EFFECTS[t.effect] then
        return invalid("InvalidNodeClaim", "%s (%s): effect %q is not NoSchedule, PreferNoSchedule or NoExecute",
          where, t.key, tostring(t.effect))
      end
      out[#out + 1] = { key = t.key, value = present(t.value) and t.value or nil, effect = t.effect }
      if t.key == UNREGISTERED and t.effect == "NoExecute" then unregistered = true end
    end
  end
  -- Karpenter removes this taint once the node registered; the node must come up with it.
  if not unregistered then out[#out + 1] = { key = UNREGISTERED, effect = "NoExecute" } end
  return out
end

local function taint_list(taints)
  local out = {}
  for i, t in ipairs(taints) do out[i] = t.key .. (t.value and ("=" .. t.value) or "") .. ":" .. t.effect end
  return table.concat(out, ",")
end

-- The kubelet settings the node-config carries, by the type each must have; an unknown one is left
-- out (the CRD has no others).
local KUBELET_FIELDS = {
  clusterDNS = "strings", maxPods = "count", podsPerCore = "count", systemReserved = "map",
  kubeReserved = "map", evictionHard = "map", evictionSoft = "map", evictionSoftGracePeriod = "map",
  evictionMaxPodGracePeriod = "count", imageGCHighThresholdPercent = "percent",
  imageGCLowThresholdPercent = "percent", cpuCFSQuota = "boolean",
}

local function kubelet_value(kind, v)
  if kind == "boolean" then
    if type(v) == "boolean" then return v end
    return nil
  end
  if kind == "count" or kind == "percent" then
    local n = type(v) == "number" and math.tointeger(v)
    if not n or n < 0 or (kind == "percent" and n > 100) then return nil end
    return n
  end
  if type(v) ~= "table" then return nil end
  for k, item in pairs(v) do
    if type(item) ~= "string" or (kind == "strings" and math.type(k) ~= "integer")
        or (kind == "map" and type(k) ~= "string") then
      return nil
    end
  end
  return v
end

-- The class's kubelet settings under their KubeletConfiguration names: {name = value} ({} for none).
local function kubelet_settings(spec)
  local kubelet = type(spec.kubelet) == "table" and spec.kubelet or {}
  local config = {}
  for name, kind in pairs(KUBELET_FIELDS) do
    local v = kubelet[name]
    if present(v) then
      local ok = kubelet_value(kind, v)
      if ok == nil or (name == "maxPods" and ok < 1) then
        return invalid("InvalidNodeClass", "ECSNodeClass spec.kubelet.%s is %s, not %s", name,
          type(v) == "table" and "a " .. type(v) or tostring(v),
          ({ strings = "a list of strings", count = name == "maxPods" and "a positive integer" or "a whole number",
            percent = "a whole number from 0 to 100", map = "a map of strings", boolean = "true or false" })[kind])
      end
      config[name] = ok
    end
  end
  return config
end

-- --node-config: base64 of {"kubelet_config": {...}} with the class's kubelet settings (keys sorted,
-- so the same class always gives the same script).
local function node_config(spec)
  local config, err = kubelet_settings(spec)
  if not config then return nil, err end
  if next(config) == nil then return luaprov.crypto.base64_encode('{"kubelet_config":{}}') end
  local doc = assert(luaprov.json.encode({ kubelet_config = config }))
  return luaprov.crypto.base64_encode(doc)
end

local function attach_command(ctx, nodeclaim, spec, capacity_type)
  -- The class's clusterID names the ACK cluster its nodes join; else the engine's cluster.
  local cluster_id, source = spec.clusterID, "spec.clusterID"
  if not present(cluster_id) then cluster_id, source = ctx.cluster_id, "ctx.cluster_id" end
  if not present(cluster_id) or not tostring(cluster_id):find("^[%w_%-]+$") then
    return invalid("InvalidConfig", "ACK cluster ID %q is not a cluster ID (%s)", tostring(cluster_id), source)
  end
  local labels, err = node_labels(nodeclaim, capacity_type, "the attach script")
  if not labels then return nil, err end
  local taints
  taints, err = node_taints(nodeclaim, "the attach script")
  if not taints then return nil, err end
  local config
  config, err = node_config(spec)
  if not config then return nil, err end
  local format_disk = spec.formatDataDisk
  if format_disk ~= nil and type(format_disk) ~= "boolean" then
    return invalid("InvalidNodeClass", "ECSNodeClass spec.formatDataDisk is %s, not true or false",
      tostring(format_disk))
  end
  local script
  script, err = attachscript.get(ctx, cluster_id, format_disk == true)
  if not script then return nil, err end
  table.insert(labels, 1, "ack.aliyun.com=" .. cluster_id)
  table.insert(labels, 1, "k8s.aliyun.com=true")
  return ("%s --labels %s --node-config %s --taints %s"):format(script, table.concat(labels, ","), config,
    taint_list(taints))
end

-- The commands of cluster type Kubeadm: checks what is the class's and the settings' before the
-- NodeClaim's, as attach_command does.
local function kubeadm_command(ctx, nodeclaim, spec, capacity_type)
  local endpoint, err = kubeadm.endpoint(spec)
  if not endpoint then return nil, err end
  local creds
  creds, err = kubeadm.credentials(ctx)
  if not creds then return nil, err end
  local kubelet
  kubelet, err = kubelet_settings(spec)
  if not kubelet then return nil, err end
  local labels
  labels, err = node_labels(nodeclaim, capacity_type, "kubeadm")
  if not labels then return nil, err end
  local taints
  taints, err = node_taints(nodeclaim, "kubeadm")
  if not taints then return nil, err end
  local script = kubeadm.script { endpoint = endpoint, token = creds.token, ca_cert_hash = creds.ca_cert_hash,
    labels = labels, taints = taints, kubelet = kubelet }
  return (script:gsub("\n$", ""))
end

-- The text before the separator line runs before the attach command, the text after it (or all of
-- it when there is no separator) after.
local function split(user)
  local first, last = user:find(M.SEPARATOR, 1, true)
  if not first then return "", trim(user) end
  return trim(user:sub(1, first - 1)), trim(user:sub(last + 1))
end

local function bash(command, user)
  local pre, post = split(user)
  local out = { "#!/bin/bash\n\n" }
  if pre ~= "" then out[#out + 1] = 'echo "Executing preUserData..."\n' .. pre .. "\n" end
  out[#out + 1] = command .. "\n"
  if post ~= "" then out[#out + 1] = '\necho "Executing postUserData..."\n' .. post .. "\n" end
  return table.concat(out)
end

local function user_text(nodeclass)
  local spec = type(nodeclass) == "table" and type(nodeclass.spec) == "table" and nodeclass.spec or {}
  local user = spec.userData
  if not present(user) then user = "" end
  if type(user) ~= "string" then return nil, "ECSNodeClass spec.userData is not a string", spec end
  return user, nil, spec
end

-- What is wrong with spec.userData (user) for cluster type kind: a MIME document must parse and
-- survive the merge; a bootstrap part stands in for the join command, which cannot change the
-- outcome (it never holds the boundary).
local function user_data_problem(kind, user)
  if kind == "Custom" or not mime.is_mime(user) then return nil end
  local _, merr = mime.merge("#!/bin/bash\n", user)
  if merr then return "ECSNodeClass spec.userData: " .. merr end
  return nil
end

-- The launch-independent half of user_data: what is wrong with spec.userData for this cluster type,
-- and for Kubeadm with spec.clusterEndpoint and the token and hash settings (never the token itself).
function M.check(ctx, nodeclass)
  local user, why, spec = user_text(nodeclass)
  if not user then return why end
  local kind, err = M.cluster_type(ctx or {})
  if not kind then return err.message end
  if kind == "Kubeadm" then
    local ok, kerr = kubeadm.endpoint(spec)
    if ok then ok, kerr = kubeadm.credentials(ctx) end
    if not ok then return kerr.message end
  end
  return user_data_problem(kind, user)
end

function M.user_data(ctx, nodeclaim, nodeclass, capacity_type)
  ctx = ctx or {}
  local nerr
  nodeclass, nerr = shape.normalize(nodeclass)
  if not nodeclass then return nil, nerr end
  local user, why, spec = user_text(nodeclass)
  if not user then return invalid("InvalidNodeClass", "%s", why) end
  local kind, err = M.cluster_type(ctx)
  if not kind then return nil, err end
  if kind == "Custom" then return user end
  if capacity_type ~= "spot" and capacity_type ~= "on-demand" then
    return invalid("InvalidArgument", "capacity type %q is not spot or on-demand", tostring(capacity_type))
  end
  -- A broken document is the node class's fault: say so before asking the cluster for anything.
  why = user_data_problem(kind, user)
  if why then return invalid("InvalidNodeClass", "%s", why) end
  local command
  if kind == "Kubeadm" then
    command, err = kubeadm_command(ctx, nodeclaim, spec, capacity_type)
  else
    command, err = attach_command(ctx, nodeclaim, spec, capacity_type)
  end
  if not command then return nil, err end
  if mime.is_mime(user) then
    local text, merr = mime.merge("#!/bin/bash\n" .. command .. "\n", user)
    if not text then return invalid("InvalidNodeClass", "ECSNodeClass spec.userData: %s", merr) end
    return text
  end
  return bash(command, user)
end

return M
