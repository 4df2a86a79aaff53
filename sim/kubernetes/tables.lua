-- Server-side printing: the meta.k8s.io Table that `kubectl get` asks for (Accept
-- `application/json;as=Table;v=v1;g=meta.k8s.io`), with the columns a real apiserver prints for the
-- built-in kinds (a node's STATUS and VERSION, a pod's READY and STATUS) and the CRDs' printer columns
-- (examples/deploy/crds), so kubectl's output reads as it does against a cluster.
local luaprov = require "luaprov"
local jsonpath = require "sim.kubernetes.jsonpath"
local wire = require "sim.kubernetes.wire"

local json = luaprov.json
local present, array = wire.present, wire.array

local M = {}

M.VERSIONS = { v1 = true, v1beta1 = true }

--- age(timestamp) -> how long ago, the way kubectl prints it ("45s", "3m20s", "5h", "12d").
function M.age(timestamp)
  local t = type(timestamp) == "string" and luaprov.time.parse_iso8601(timestamp)
  if not t then return "<unknown>" end
  local s = math.floor(luaprov.time.now() - t)
  if s < 0 then return "0s" end
  if s < 120 then return s .. "s" end
  local m = s // 60
  if m < 10 then return s % 60 == 0 and m .. "m" or string.format("%dm%ds", m, s % 60) end
  if m < 180 then return m .. "m" end
  local h = m // 60
  if h < 8 then return m % 60 == 0 and h .. "h" or string.format("%dh%dm", h, m % 60) end
  if h < 48 then return h .. "h" end
  if h < 24 * 8 then return h % 24 == 0 and (h // 24) .. "d" or string.format("%dd%dh", h // 24, h % 24) end
  if h < 24 * 365 * 2 then return (h // 24) .. "d" end
  return (h // (24 * 365)) .. "y"
end

local function get(t, ...)
  for _, k in ipairs { ... } do
    if type(t) ~= "table" then return nil end
    t = t[k]
  end
  return present(t) and t or nil
end

-- The table at that path, or an empty one: what a malformed object gets iterated as.
local function items(t, ...)
  local v = get(t, ...)
  return type(v) == "table" and v or {}
end

local function condition(obj, kind)
  for _, c in ipairs(items(obj, "status", "conditions")) do
    if type(c) == "table" and c.type == kind then return c.status end
  end
  return nil
end

-- ---- built-in kinds --------------------------------------------------------------------------

local function node_status(node)
  local ready = condition(node, "Ready")
  local s = ready == "True" and "Ready" or ready == "False" and "NotReady" or "Unknown"
  if get(node, "spec", "unschedulable") == true then s = s .. ",SchedulingDisabled" end
  return s
end

local function node_roles(node)
  local roles = {}
  for k in pairs(items(node, "metadata", "labels")) do
    local role = k:match("^node%-role%.kubernetes%.io/(.+)$")
    if role then roles[#roles + 1] = role end
  end
  table.sort(roles)
  return #roles > 0 and table.concat(roles, ",") or "<none>"
end

local function address(node, kind)
  for _, a in ipairs(items(node, "status", "addresses")) do
    if type(a) == "table" and a.type == kind then return a.address end
  end
  return "<none>"
end

local function pod_ready(pod)
  local ready = 0
  for _, c in ipairs(items(pod, "status", "containerStatuses")) do
    if type(c) == "table" and c.ready == true then ready = ready + 1 end
  end
  return string.format("%d/%d", ready, #(items(pod, "spec", "containers")))
end

local function pod_status(pod)
  if get(pod, "metadata", "deletionTimestamp") then return "Terminating" end
  return get(pod, "status", "reason") or get(pod, "status", "phase") or "Pending"
end

-- A cell of text whatever a client stored there.
local function text(v)
  if type(v) == "table" then return json.encode(v) end
  return v ~= nil and tostring(v) or ""
end

local function or_none(v) return v ~= nil and v or "<none>" end

local function count_or_na(v) return v ~= nil and tostring(v) or "N/A" end

local function name_of(o) return o.metadata.name end
local NAME = { "Name", "string", 0, name_of }
local function age_of(o) return M.age(o.metadata.creationTimestamp) end

-- {name, type, priority (1: only with -o wide), cell(obj)}
local BUILT_IN = {
  Namespace = {
    NAME, { "Status", "string", 0, function(o) return get(o, "status", "phase") or "Active" end },
    { "Age", "string", 0, age_of },
  },
  Node = {
    NAME, { "Status", "string", 0, node_status },
    { "Roles", "string", 0, node_roles },
    { "Age", "string", 0, age_of },
    { "Version", "string", 0, function(o) return get(o, "status", "nodeInfo", "kubeletVersion") or "" end },
    { "Internal-IP", "string", 1, function(o) return address(o, "InternalIP") end },
    { "External-IP", "string", 1, function(o) return address(o, "ExternalIP") end },
    { "OS-Image", "string", 1, function(o) return get(o, "status", "nodeInfo", "osImage") or "<unknown>" end },
    { "Kernel-Version", "string", 1, function(o)
      return get(o, "status", "nodeInfo", "kernelVersion") or "<unknown>"
    end },
    { "Container-Runtime", "string", 1, function(o)
      return get(o, "status", "nodeInfo", "containerRuntimeVersion") or "<unknown>"
    end },
  },
  Pod = {
    NAME, { "Ready", "string", 0, pod_ready },
    { "Status", "string", 0, pod_status },
    { "Restarts", "string", 0, function() return "0" end },
    { "Age", "string", 0, age_of },
    { "IP", "string", 1, function(o) return or_none(get(o, "status", "podIP")) end },
    { "Node", "string", 1, function(o) return or_none(get(o, "spec", "nodeName")) end },
    { "Nominated Node", "string", 1, function(o) return or_none(get(o, "status", "nominatedNodeName")) end },
    { "Readiness Gates", "string", 1, function() return "<none>" end },
  },
  -- kubectl get events leads with when, and names the event last, in the wide view
  Event = {
    { "Last Seen", "string", 0, function(o)
      return M.age(get(o, "lastTimestamp") or get(o, "eventTime") or o.metadata.creationTimestamp)
    end },
    { "Type", "string", 0, function(o) return get(o, "type") or "" end },
    { "Reason", "string", 0, function(o) return get(o, "reason") or "" end },
    { "Object", "string", 0, function(o)
      return string.lower(text(get(o, "involvedObject", "kind"))) .. "/" .. text(get(o, "involvedObject", "name"))
    end },
    { "Message", "string", 0, function(o) return get(o, "message") or "" end },
    { "Count", "integer", 1, function(o) return get(o, "count") or 1 end },
    { "Name", "string", 1, name_of },
  },
  Lease = {
    NAME, { "Holder", "string", 0, function(o) return get(o, "spec", "holderIdentity") or "" end },
    { "Age", "string", 0, age_of },
  },
  PodDisruptionBudget = {
    NAME, { "Min Available", "string", 0, function(o) return count_or_na(get(o, "spec", "minAvailable")) end },
    { "Max Unavailable", "string", 0, function(o) return count_or_na(get(o, "spec", "maxUnavailable")) end },
    { "Allowed Disruptions", "integer", 0, function(o) return get(o, "status", "disruptionsAllowed") or 0 end },
    { "Age", "string", 0, age_of },
  },
}

-- ---- CRD printer columns ----------------------------------------------------------------------

local READY = '.status.conditions[?(@.type=="Ready")].status'
-- {name, type, priority, JSONPath}, as the CRDs declare them
local PRINTER_COLUMNS = {
  NodePool = {
    { "NodeClass", "string", 0, ".spec.template.spec.nodeClassRef.name" },
    { "Nodes", "string", 0, ".status.resources.nodes" }, { "Ready", "string", 0, READY },
    { "Age", "date", 0, ".metadata.creationTimestamp" }, { "Weight", "integer", 1, ".spec.weight" },
    { "CPU", "string", 1, ".status.resources.cpu" }, { "Memory", "string", 1, ".status.resources.memory" },
  },
  NodeClaim = {
    { "Type", "string", 0, ".metadata.labels.node\\.kubernetes\\.io/instance-type" },
    { "Capacity", "string", 0, ".metadata.labels.karpenter\\.sh/capacity-type" },
    { "Zone", "string", 0, ".metadata.labels.topology\\.kubernetes\\.io/zone" },
    { "Node", "string", 0, ".status.nodeName" }, { "Ready", "string", 0, READY },
    { "Age", "date", 0, ".metadata.creationTimestamp" }, { "ImageID", "string", 1, ".status.imageID" },
    { "ID", "string", 1, ".status.providerID" },
    { "NodePool", "string", 1, ".metadata.labels.karpenter\\.sh/nodepool" },
    { "NodeClass", "string", 1, ".spec.nodeClassRef.name" },
    { "Drifted", "string", 1, '.status.conditions[?(@.type=="Drifted")].status' },
  },
  ECSNodeClass = {
    { "Ready", "string", 0, READY }, { "Age", "date", 0, ".metadata.creationTimestamp" },
    { "Policy", "string", 1, ".spec.vSwitchSelectionPolicy" },
    { "VSwitches", "string", 1, ".status.vSwitches[*].id" },
    { "SecurityGroups", "string", 1, ".status.securityGroups[*].id" },
  },
}

local function printer_cell(column)
  local steps = jsonpath.compile(column[4])
  return function(obj)
    local found = jsonpath.find(steps, obj)
    if #found == 0 then return json.null end
    if column[2] == "date" then return M.age(found[1]) end
    if #found == 1 then return found[1] end
    local parts = {}
    for i, v in ipairs(found) do parts[i] = type(v) == "table" and json.encode(v) or tostring(v) end
    return table.concat(parts, ",")
  end
end

local printers = {}
for kind, columns in pairs(PRINTER_COLUMNS) do
  printers[kind] = { NAME }
  for _, c in ipairs(columns) do printers[kind][#printers[kind] + 1] = { c[1], c[2], c[3], printer_cell(c) } end
end
for kind, columns in pairs(BUILT_IN) do printers[kind] = columns end

-- A kind without columns prints its name and age, as the apiserver's default table does.
local DEFAULT = { NAME, { "Age", "date", 0, age_of } }

-- ---- tables ----------------------------------------------------------------------------------

local function definitions(columns)
  local defs = array()
  for i, c in ipairs(columns) do
    defs[i] = { name = c[1], type = c[2] == "date" and "string" or c[2], format = c[4] == name_of and "name" or "",
      priority = c[3], description = c[1] }
  end
  return defs
end

local function row(columns, obj, include)
  local cells = array()
  for i, c in ipairs(columns) do cells[i] = c[4](obj) end
  local embedded
  if include == "Object" then
    embedded = obj
  elseif include ~= "None" then
    embedded = { kind = "PartialObjectMetadata", apiVersion = "meta.k8s.io/v1", metadata = obj.metadata }
  end
  return { cells = cells, object = embedded }
end

--- wanted(request) -> the Table version the client asks for first, or nil.
function M.wanted(request)
  return wire.accepts(request, "Table", "meta.k8s.io", M.VERSIONS)
end

--- table_of(res, objects, meta, params, version) -> the Table of objects (one object, a list's items
-- or a watch event's object); meta is the list's metadata, params the query (includeObject).
function M.table_of(res, objects, meta, params, version)
  local columns = printers[res.kind] or DEFAULT
  local rows = array()
  for i, obj in ipairs(objects) do rows[i] = row(columns, obj, params.includeObject) end
  return { kind = "Table", apiVersion = "meta.k8s.io/" .. (version or "v1"), metadata = meta or {},
    columnDefinitions = definitions(columns), rows = rows }
end

return M
