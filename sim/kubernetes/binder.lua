-- The simulated scheduler and container runtime: pending pods are bound to the node with the most
-- free cpu among those they fit (fit.lua; ties by name), and a bound pod on a Ready node starts at once
-- (Running, Ready). A pod that fits nowhere gets PodScheduled=False, reason Unschedulable, with the
-- scheduler's "0/N nodes are available: ..." message: what Karpenter looks for to provision. Also
-- POST pods/<name>/binding, which real schedulers use.
--
-- Every change goes through the store, so watchers see MODIFIED; a sync that changes nothing writes
-- nothing. sync() runs before every request (controllers.lua) but works only when pods changed, or
-- nodes changed while some pod still waits for one: a cluster of thousands of nodes stays cheap.
local conditions = require "sim.kubernetes.conditions"
local fit = require "sim.kubernetes.fit"
local objects = require "sim.kubernetes.objects"
local store = require "sim.kubernetes.store"
local validation = require "sim.kubernetes.validation"
local wire = require "sim.kubernetes.wire"

local present, array = wire.present, wire.array

local M = {}

local PODS = store.find("", "v1", "pods")
local NODES = store.find("", "v1", "nodes")

local DEFAULT_SCHEDULER = "default-scheduler"

local function spec_of(pod) return type(pod.spec) == "table" and pod.spec or {} end
local function phase_of(pod) return type(pod.status) == "table" and pod.status.phase or nil end

local function waiting(pod)
  local phase = phase_of(pod)
  return not present(pod.metadata.deletionTimestamp) and (phase == nil or phase == "Pending")
end

local function pending(pod)
  local spec = spec_of(pod)
  local scheduler = present(spec.schedulerName) and spec.schedulerName or DEFAULT_SCHEDULER
  return waiting(pod) and not present(spec.nodeName) and scheduler == DEFAULT_SCHEDULER
end

local function holds_resources(pod)
  local phase = phase_of(pod)
  return present(spec_of(pod).nodeName) and phase ~= "Succeeded" and phase ~= "Failed"
end

-- Running and Ready: what the kubelet of a Ready node reports once the containers are up.
local function start(pod, node, now)
  pod.status = type(pod.status) == "table" and pod.status or {}
  local status = pod.status
  status.phase, status.hostIP, status.startTime = "Running", node and node.ip or status.hostIP, status.startTime or now
  for _, kind in ipairs { "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready" } do
    conditions.set(pod, { type = kind, status = "True" }, now)
  end
  local statuses = array()
  for _, c in ipairs(type(spec_of(pod).containers) == "table" and spec_of(pod).containers or {}) do
    if type(c) == "table" then
      statuses[#statuses + 1] = { name = c.name, image = c.image, ready = true, started = true, restartCount = 0,
        state = { running = { startedAt = now } } }
    end
  end
  status.containerStatuses = statuses
end

local function assign(pod, node_name, now)
  pod.spec = spec_of(pod)
  pod.spec.nodeName = node_name
  conditions.set(pod, { type = "PodScheduled", status = "True" }, now)
end

local function save(pod)
  store.put(PODS, pod.metadata.namespace, pod.metadata.name, pod, "MODIFIED")
end

local function cluster()
  local nodes, by_name = {}, {}
  for _, e in ipairs(store.list(NODES)) do
    local view = fit.node_view(e.object)
    nodes[#nodes + 1], by_name[view.name] = view, view
  end
  local pods = store.list(PODS)
  for _, e in ipairs(pods) do
    local node = holds_resources(e.object) and by_name[spec_of(e.object).nodeName]
    if node then
      local need = fit.requests(e.object)
      node.free.cpu, node.free.memory, node.free.pods =
        node.free.cpu - need.cpu, node.free.memory - need.memory, node.free.pods - 1
    end
  end
  return nodes, by_name, pods
end

local function unschedulable_message(counts, total)
  if total == 0 then return "no nodes available to schedule pods" end
  local parts = {}
  for reason, n in pairs(counts) do parts[#parts + 1] = n .. " " .. reason end
  table.sort(parts)
  return string.format("0/%d nodes are available: %s.", total, table.concat(parts, ", "))
end

-- The node with the most free cpu the pod fits, or nil and the reasons it fits none.
local function choose(pod, nodes)
  local need, best, counts = fit.requests(pod), nil, {}
  for _, node in ipairs(nodes) do
    local reasons = fit.misfits(pod, need, node)
    if #reasons == 0 then
      if not best or node.free.cpu > best.free.cpu or (node.free.cpu == best.free.cpu and node.name < best.name) then
        best = node
      end
    end
    for _, r in ipairs(reasons) do counts[r] = (counts[r] or 0) + 1 end
  end
  if best then
    best.free.cpu, best.free.memory, best.free.pods =
      best.free.cpu - need.cpu, best.free.memory - need.memory, best.free.pods - 1
  end
  return best, unschedulable_message(counts, #nodes)
end

-- Returns whether the pod was placed.
local function schedule(current, nodes, now)
  local node, message = choose(current, nodes)
  local pod = store.copy(current)
  if node then
    assign(pod, node.name, now)
    start(pod, node, now)
    save(pod)
    return true
  else
    local changed = conditions.set(pod, { type = "PodScheduled", status = "False", reason = "Unschedulable",
      message = message }, now)
    if pod.status.phase == nil then pod.status.phase, changed = "Pending", true end
    if changed then save(pod) end
    return false
  end
end

-- What the last sync saw: the pods' and nodes' last changes, and whether a pod was left waiting for a
-- node (then any node change may let it in).
local seen_pods, seen_nodes, pods_waiting = -1, -1, false

function M.reset()
  seen_pods, seen_nodes, pods_waiting = -1, -1, false
end

--- sync(): starts bound pods whose node is Ready, then places pending pods, oldest first.
function M.sync()
  local pods_at, nodes_at = store.last_change(PODS), store.last_change(NODES)
  if pods_at == seen_pods and (nodes_at == seen_nodes or not pods_waiting) then
    seen_nodes = nodes_at
    return
  end
  local now = store.now()
  local nodes, by_name, pods = cluster()
  local queue = {}
  for _, e in ipairs(pods) do
    local pod = e.object
    local node = by_name[spec_of(pod).nodeName or ""]
    if node and node.ready == "True" and waiting(pod) then
      local started = store.copy(pod)
      start(started, node, now)
      save(started)
    elseif pending(pod) then
      queue[#queue + 1] = e
    end
  end
  table.sort(queue, function(a, b)
    local ta, tb = a.object.metadata.creationTimestamp or "", b.object.metadata.creationTimestamp or ""
    if ta ~= tb then return ta < tb end
    return a.key < b.key
  end)
  local left = 0
  for _, e in ipairs(queue) do
    if not schedule(e.object, nodes, now) then left = left + 1 end
  end
  for _, e in ipairs(pods) do
    local node = by_name[spec_of(e.object).nodeName or ""]
    if node and node.ready ~= "True" and waiting(e.object) then left = left + 1 end
  end
  pods_waiting = left > 0
  seen_pods, seen_nodes = store.last_change(PODS), store.last_change(NODES)
end

--- bind(ns, name, request, params) -> response to POST pods/<name>/binding (params: the query): the
-- pod goes to the target node whether it fits or not (as on a real apiserver), and starts when that
-- node is Ready.
function M.bind(ns, name, request, params)
  local opts = validation.options(params)
  local body = wire.body_json(request)
  local target = type(body.target) == "table" and body.target or {}
  if not present(target.name) or target.name == "" then
    wire.fail(422, "Invalid", string.format('Binding "%s" is invalid: target.name: Required value', name),
      { name = name, kind = "Binding", causes = array { { reason = "FieldValueRequired",
        message = "Required value", field = "target.name" } } })
  end
  local current = store.get(PODS, ns, name)
  if not current then wire.not_found(PODS, name) end
  local bound = spec_of(current).nodeName
  if present(bound) and bound ~= "" then
    wire.fail(409, "Conflict", string.format('Operation cannot be fulfilled on pods/binding "%s": pod %s is '
      .. 'already assigned to node "%s"', name, name, bound), { name = name, kind = "pods" })
  end
  local now = store.now()
  local pod = store.copy(current)
  assign(pod, target.name, now)
  local node = store.get(NODES, nil, target.name)
  if node and conditions.status(node, "Ready") == "True" and waiting(pod) then
    start(pod, fit.node_view(node), now)
  end
  objects.write(PODS, ns, name, pod, "MODIFIED", opts)
  return wire.respond(201, wire.success(201))
end

return M
