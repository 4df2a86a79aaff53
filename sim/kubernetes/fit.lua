-- Whether a pod fits a node, by the default scheduler's filters the simulator models: the node is
-- Ready and schedulable, the pod tolerates its NoSchedule and NoExecute taints, the node's labels
-- satisfy the pod's nodeSelector and required node affinity, and the node's free allocatable cpu,
-- memory and pod slots hold the pod's requests. A misfit is said in the scheduler's own words
-- ("Insufficient cpu"), which binder.lua adds up into the PodScheduled=False message.
local conditions = require "sim.kubernetes.conditions"
local quantity = require "sim.kubernetes.quantity"
local selectors = require "sim.kubernetes.selectors"
local wire = require "sim.kubernetes.wire"

local present = wire.present

local M = {}

local function field(t, k)
  local v = type(t) == "table" and t[k] or nil
  return present(v) and v or nil
end

-- The table at t[k], or an empty one: what a malformed object gets iterated as.
local function items(t, k)
  local v = field(t, k)
  return type(v) == "table" and v or {}
end

local function internal_ip(node)
  for _, a in ipairs(items(field(node, "status"), "addresses")) do
    if type(a) == "table" and a.type == "InternalIP" then return a.address end
  end
  return nil
end

--- node_view(node) -> what placing pods needs of a Node: name, readiness, taints, labels, the free
-- allocatable (cpu in millicores, memory in bytes, pod slots) before any pod is counted.
function M.node_view(node)
  local status = items(node, "status")
  local alloc = type(status.allocatable) == "table" and status.allocatable or items(status, "capacity")
  local spec = items(node, "spec")
  return {
    name = node.metadata.name, ready = conditions.status(node, "Ready"), ip = internal_ip(node),
    unschedulable = spec.unschedulable == true, taints = items(spec, "taints"), labels = items(node.metadata, "labels"),
    free = { cpu = quantity.milli(alloc.cpu), memory = quantity.parse(alloc.memory) or 0,
      pods = tonumber(alloc.pods) or 0 },
  }
end

local function container_requests(c)
  local resources = field(c, "resources")
  local req, lim = items(resources, "requests"), items(resources, "limits")
  -- a limit without a request is the request too (the apiserver's defaulting)
  return quantity.milli(req.cpu or lim.cpu), quantity.parse(req.memory or lim.memory) or 0
end

--- requests(pod) -> {cpu = millicores, memory = bytes, pods = 1}: the containers' sum, or the largest
-- init container when that is more, as the scheduler counts them.
function M.requests(pod)
  local spec = items(pod, "spec")
  local cpu, memory = 0, 0
  for _, c in ipairs(items(spec, "containers")) do
    local c_cpu, c_mem = container_requests(c)
    cpu, memory = cpu + c_cpu, memory + c_mem
  end
  for _, c in ipairs(items(spec, "initContainers")) do
    local c_cpu, c_mem = container_requests(c)
    cpu, memory = math.max(cpu, c_cpu), math.max(memory, c_mem)
  end
  return { cpu = cpu, memory = memory, pods = 1 }
end

--- tolerates(toleration, taint) -> the standard matching: an empty key with Exists tolerates
-- everything; Equal (the default operator) wants the same value; an empty effect matches any.
function M.tolerates(tol, taint)
  local effect = field(tol, "effect")
  if effect and effect ~= taint.effect then return false end
  local op = field(tol, "operator") or "Equal"
  local key = field(tol, "key")
  if not key or key == "" then return op == "Exists" end
  if key ~= taint.key then return false end
  if op == "Exists" then return true end
  return op == "Equal" and (field(tol, "value") or "") == (field(taint, "value") or "")
end

local function untolerated_taint(pod, node)
  local tolerations = items(field(pod, "spec"), "tolerations")
  for _, taint in ipairs(node.taints) do
    if type(taint) == "table" and (taint.effect == "NoSchedule" or taint.effect == "NoExecute") then
      local ok = false
      for _, tol in ipairs(tolerations) do
        if M.tolerates(tol, taint) then ok = true break end
      end
      if not ok then return taint end
    end
  end
  return nil
end

local function term_matches(term, node)
  local exprs, fields = items(term, "matchExpressions"), items(term, "matchFields")
  if #exprs == 0 and #fields == 0 then return false end
  for _, req in ipairs(exprs) do
    if type(req) ~= "table" or not selectors.requirement_matches(req, node.labels[req.key]) then return false end
  end
  for _, req in ipairs(fields) do
    if type(req) ~= "table" or req.key ~= "metadata.name" or not selectors.requirement_matches(req, node.name) then
      return false
    end
  end
  return true
end

local function affinity_matches(pod, node)
  local spec = items(pod, "spec")
  for k, v in pairs(items(spec, "nodeSelector")) do
    if node.labels[k] ~= v then return false end
  end
  local node_affinity = field(field(spec, "affinity"), "nodeAffinity")
  local required = field(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
  if not required then return true end
  for _, term in ipairs(items(required, "nodeSelectorTerms")) do
    if term_matches(term, node) then return true end
  end
  return false
end

local function taint_reason(key, value)
  return string.format("node(s) had untolerated taint {%s: %s}", key, value or "")
end

local function resource_reasons(need, node)
  local out = {}
  if need.cpu > node.free.cpu then out[#out + 1] = "Insufficient cpu" end
  if need.memory > node.free.memory then out[#out + 1] = "Insufficient memory" end
  if need.pods > node.free.pods then out[#out + 1] = "Too many pods" end
  return out
end

--- misfits(pod, need, node) -> the reasons pod (needing need) cannot go on node; empty when it fits.
-- A node that is not Ready is said the way the scheduler sees it: tainted by the lifecycle controller.
function M.misfits(pod, need, node)
  if node.ready ~= "True" then
    local key = node.ready == "False" and "node.kubernetes.io/not-ready" or "node.kubernetes.io/unreachable"
    return { taint_reason(key) }
  end
  if node.unschedulable then return { "node(s) were unschedulable" } end
  local taint = untolerated_taint(pod, node)
  if taint then return { taint_reason(taint.key, field(taint, "value")) } end
  if not affinity_matches(pod, node) then return { "node(s) didn't match Pod's node affinity/selector" } end
  return resource_reasons(need, node)
end

return M
