-- Worker pools <-> node groups: which pools the autoscaler manages, what a group looks like in the
-- engine's snapshot (docs/contracts.md#mappings), and what state each pool node is in
-- (docs/bizfly.md#what-each-call-does).
--
--   pools.autoscaled(cluster) -> list of pool listings with enable_autoscaling == true
--   pools.group(listing, detail) -> {id, min_size, max_size, target_size, debug, nodes}
--   pools.node_status(pool_node) -> state ("running" | "creating" | "deleting"), error | nil
--   pools.provider_id(pool_node) -> "bizflycloud://<physical_id>" | nil
--   pools.find_node(detail, provider_id) -> the pool node with that provider ID | nil
local luaprov = require "luaprov"

local json, log = luaprov.json, luaprov.log

local M = {}

M.PROVIDER_PREFIX = "bizflycloud://"

-- Node statuses, lower-cased. Upstream expected provisioning/running/draining/deleting, while the
-- live API (OpenStack Senlin underneath) answers ACTIVE and friends, so both vocabularies are here.
local STATES = {
  active = "running", running = "running", ok = "running", warning = "running", updating = "running",
  provisioning = "creating", creating = "creating", init = "creating", build = "creating",
  building = "creating", pending = "creating", recovering = "creating", rebuilding = "creating",
  deleting = "deleting", draining = "deleting", deleted = "deleting", terminating = "deleting",
}
local FAILED = { error = true, failed = true, create_failed = true, ["create-failed"] = true }

-- status_reason texts that mean "no capacity": the autoscaler backs the group off and tries another
-- (ErrorClass OutOfResources) instead of counting a broken node. Nova's stock-out is "No valid host
-- was found"; quotas say "Quota exceeded".
local QUOTA = { "quota", "limit exceeded", "exceeds the limit" }
local STOCK = { "no valid host", "not enough hosts", "out of stock", "insufficient capacity",
  "insufficient resources", "capacity exhausted", "resources exhausted", "sold out" }

local function contains_any(text, words)
  for _, w in ipairs(words) do
    if text:find(w, 1, true) then return true end
  end
  return false
end

local function int(v, default)
  return math.tointeger(v) or default
end

local function str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

local function list(t)
  if getmetatable(t) ~= json.array_mt then setmetatable(t, json.array_mt) end
  return t
end

--- creation_error(reason) -> {class, code, message}: what a failed creation tells the autoscaler.
function M.creation_error(reason)
  local message = str(reason) or "node creation failed"
  local lower = message:lower()
  if contains_any(lower, QUOTA) then
    return { class = "OutOfResources", code = "quota-exceeded-bizflycloud", message = message }
  end
  if contains_any(lower, STOCK) then
    return { class = "OutOfResources", code = "out-of-stock-bizflycloud", message = message }
  end
  -- Upstream's code for every other failure, kept for dashboards that count it.
  return { class = "Other", code = "no-code-bizflycloud", message = message }
end

local unknown_seen = {}

--- node_status(node) -> state, error|nil.
-- A failed node is reported "creating" with an error: the only combination the autoscaler acts on
-- (create-error cleanup and backoff); an error on "running" would be dropped. A status
-- nobody knows is "running" without an error: then an unregistered node is still cleaned up after
-- max-node-provision-time, but a healthy one is never deleted as a failed creation.
function M.node_status(node)
  local status = (str(node.status) or ""):lower()
  if not str(node.id) then return "creating", nil end
  if FAILED[status] then return "creating", M.creation_error(node.status_reason) end
  local state = STATES[status]
  if state then return state, nil end
  if not unknown_seen[status] then
    unknown_seen[status] = true
    log.warn("bizfly node status not known; treating it as running", { status = node.status,
      status_reason = node.status_reason, node = node.name })
  end
  return "running", nil
end

--- provider_id(node) -> "bizflycloud://<physical_id>", the providerID the Bizfly cloud-controller-
-- manager writes on the Kubernetes node. A node whose server was never created (a
-- quota refusal) has no physical_id: it is named by its pool-node id instead, so the autoscaler can
-- still see it and ask for its deletion.
function M.provider_id(node)
  local id = str(node.physical_id) or str(node.id)
  return id and (M.PROVIDER_PREFIX .. id) or nil
end

--- autoscaled(cluster) -> the pool listings the autoscaler manages. As upstream, the flag of the
-- cluster listing decides, not the one of the pool detail.
function M.autoscaled(cluster)
  local out = {}
  local pools = type(cluster) == "table" and cluster.worker_pools or nil
  if type(pools) ~= "table" then return out end
  for _, p in ipairs(pools) do
    if type(p) == "table" and p.enable_autoscaling == true and str(p.id) then out[#out + 1] = p end
  end
  return out
end

local function nodes_of(detail)
  local nodes = type(detail) == "table" and detail.nodes or nil
  return type(nodes) == "table" and nodes or {}
end

--- group(listing, detail) -> the snapshot entry of one pool. min and max come from the listing and the
-- target from the detail, as upstream reads them.
function M.group(listing, detail)
  local nodes = list({})
  for _, n in ipairs(nodes_of(detail)) do
    local provider_id = type(n) == "table" and M.provider_id(n) or nil
    if provider_id then
      local state, err = M.node_status(n)
      nodes[#nodes + 1] = { provider_id = provider_id, state = state, error = err }
    end
  end
  local min_size, max_size = int(listing.min_size, 0), int(listing.max_size, 0)
  local target = int(detail.desired_size, int(listing.desired_size, 0))
  return {
    id = listing.id,
    min_size = min_size,
    max_size = max_size,
    target_size = target,
    debug = ("pool %s (%s): min %d, max %d, target %d, flavor %s"):format(tostring(listing.name or "?"),
      listing.id, min_size, max_size, target, tostring(detail.flavor or listing.flavor or "?")),
    nodes = nodes,
  }
end

--- find_node(detail, provider_id) -> the pool node the provider ID names, or nil. The pool-node id
-- is accepted too, so a fake node built from a snapshot entry of either kind is found.
function M.find_node(detail, provider_id)
  if type(provider_id) ~= "string" or provider_id:sub(1, #M.PROVIDER_PREFIX) ~= M.PROVIDER_PREFIX then
    return nil
  end
  local id = provider_id:sub(#M.PROVIDER_PREFIX + 1)
  if id == "" then return nil end
  for _, n in ipairs(nodes_of(detail)) do
    if type(n) == "table" and (n.physical_id == id or n.id == id) then return n end
  end
  return nil
end

return M
