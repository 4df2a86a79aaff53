-- PodDisruptionBudgets and the Eviction subresource: what Karpenter's termination controller drains
-- nodes through. A budget selects pods of its namespace; healthy pods are the selected ones Running and
-- not being deleted; minAvailable (or expected - maxUnavailable; percentages of the selected pods,
-- rounded up) is how many must stay healthy. An eviction that any selecting budget cannot afford is
-- refused with 429 TooManyRequests and the budget named, as the real API does; otherwise the pod is
-- deleted (finalizers honoured) and the answer is 201 Success.
--
-- sync() keeps every budget's status (currentHealthy, desiredHealthy, disruptionsAllowed,
-- expectedPods, observedGeneration and the DisruptionAllowed condition) current; init.lua runs it
-- whenever the store moved, so reads, lists and watches see fresh figures.
local luaprov = require "luaprov"
local conditions = require "sim.kubernetes.conditions"
local objects = require "sim.kubernetes.objects"
local selectors = require "sim.kubernetes.selectors"
local store = require "sim.kubernetes.store"
local validation = require "sim.kubernetes.validation"
local wire = require "sim.kubernetes.wire"

local json = luaprov.json
local present, array = wire.present, wire.array

local M = {}

local PODS = store.find("", "v1", "pods")
local PDBS = store.find("policy", "v1", "poddisruptionbudgets")

local function healthy(pod)
  return type(pod.status) == "table" and pod.status.phase == "Running" and not present(pod.metadata.deletionTimestamp)
end

-- An IntOrString of the spec as a pod count: percentages of expected, rounded up.
local function count_of(value, expected)
  if math.type(value) == "integer" then return value end
  local pct = type(value) == "string" and tonumber(value:match("^(%d+)%%$"))
  if not pct then return 0 end
  return (pct * expected + 99) // 100
end

local function selected_pods(pdb, pods)
  local out = {}
  local selector = type(pdb.spec) == "table" and pdb.spec.selector or nil
  for _, e in ipairs(pods) do
    if selectors.selector_matches(selector, e.object.metadata.labels) then out[#out + 1] = e.object end
  end
  return out
end

--- figures(pdb, pods) -> {expected, healthy, desired, allowed} for the budget over the namespace's pods.
local function figures(pdb, pods)
  local selected = selected_pods(pdb, pods)
  local expected, current = #selected, 0
  for _, pod in ipairs(selected) do
    if healthy(pod) then current = current + 1 end
  end
  local spec = type(pdb.spec) == "table" and pdb.spec or {}
  local desired = 0
  if present(spec.maxUnavailable) then
    desired = math.max(expected - count_of(spec.maxUnavailable, expected), 0)
  elseif present(spec.minAvailable) then
    desired = count_of(spec.minAvailable, expected)
  end
  return { expected = expected, healthy = current, desired = desired, allowed = math.max(current - desired, 0),
    selected = selected }
end

local function status_of(pdb, f, now)
  local copy = store.copy(pdb)
  copy.status = type(copy.status) == "table" and copy.status or {}
  local s = copy.status
  s.currentHealthy, s.desiredHealthy, s.disruptionsAllowed, s.expectedPods = f.healthy, f.desired, f.allowed,
    f.expected
  s.observedGeneration = pdb.metadata.generation
  local allowed = f.allowed > 0
  conditions.set(copy, { type = "DisruptionAllowed", status = allowed and "True" or "False",
    reason = allowed and "SufficientPods" or "InsufficientPods", message = "",
    observedGeneration = pdb.metadata.generation }, now)
  return copy
end

local function refresh(pdb, now)
  local f = figures(pdb, store.list(PODS, pdb.metadata.namespace))
  local updated = status_of(pdb, f, now)
  if json.encode(updated.status) ~= json.encode(pdb.status) then
    store.put(PDBS, pdb.metadata.namespace, pdb.metadata.name, updated, "MODIFIED")
  end
  return f
end

local seen_pods, seen_pdbs = -1, -1

function M.reset()
  seen_pods, seen_pdbs = -1, -1
end

--- sync(): every budget's status recomputed, written only where it changed; nothing to do unless
-- pods or budgets changed since the last sync.
function M.sync()
  if store.last_change(PODS) == seen_pods and store.last_change(PDBS) == seen_pdbs then return end
  local now = store.now()
  for _, e in ipairs(store.list(PDBS)) do refresh(e.object, now) end
  seen_pods, seen_pdbs = store.last_change(PODS), store.last_change(PDBS)
end

-- Pods that are not running yet, finished or already going need no budget, as on the real API.
local function needs_budget(pod)
  local phase = type(pod.status) == "table" and pod.status.phase or "Pending"
  return phase == "Running" and not present(pod.metadata.deletionTimestamp)
end

local function refuse(pdb, f)
  wire.fail(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
    { causes = array { { reason = "DisruptionBudget", message = string.format(
      "The disruption budget %s needs %d healthy pods and has %d currently", pdb.metadata.name, f.desired,
      f.healthy) } } })
end

local function check_body(body, name)
  if present(body.kind) and body.kind ~= "Eviction" then
    wire.bad_request("the body must be an Eviction, not " .. tostring(body.kind))
  end
  local md = type(body.metadata) == "table" and body.metadata or {}
  if present(md.name) and md.name ~= name then
    wire.bad_request("name in URL does not match name in Eviction object")
  end
  return type(body.deleteOptions) == "table" and body.deleteOptions or nil
end

--- evict(ns, name, request, params) -> the response to POST pods/<name>/eviction (params: the query).
function M.evict(ns, name, request, params)
  local delete_options = check_body(wire.body_json(request), name)
  local opts = validation.options(params, delete_options)
  local pod = store.get(PODS, ns, name)
  if not pod then wire.not_found(PODS, name) end
  if needs_budget(pod) then
    local now = store.now()
    for _, e in ipairs(store.list(PDBS, ns)) do
      local f = refresh(e.object, now)
      for _, selected in ipairs(f.selected) do
        if selected.metadata.name == name and f.allowed <= 0 then refuse(e.object, f) end
      end
    end
  end
  objects.delete(PODS, ns, name, pod, opts, delete_options)
  if not opts.dry_run then M.sync() end
  return wire.respond(201, wire.success(201))
end

return M
