-- The Bizfly Cloud Kubernetes Engine mapping behind the Cluster Autoscaler's NodeGroup contract
-- (docs/contracts.md#mappings): one node group per worker pool with autoscaling enabled. The engine
-- calls these through the externalgrpc server, keeps the snapshot refresh() returns (and the previous
-- one when a refresh fails), and enforces rules NG1–NG6 of docs/contracts.md (size bounds, deltas,
-- foreign nodes) around them.
--
-- ctx (every call) = {cluster = "<cluster UID>", endpoint = nil | "http://127.0.0.1:41236"}.
-- cluster falls back to CLUSTER_NAME, endpoint to LUAPROV_BIZFLY_ENDPOINT, then BIZFLYCLOUD_API_URL;
-- credentials and region come from the BIZFLYCLOUD_* variables (config.lua, README.md).
local luaprov = require "luaprov"
local config = require "providers.bizfly.config"
local pools = require "providers.bizfly.pools"
local session = require "providers.bizfly.session"
local template = require "providers.bizfly.template"

local json, log = luaprov.json, luaprov.log

local M = {}

M.name = "bizflycloud"

-- The only hosts this mapping's modules may send requests to (docs/lua-api.md#capabilities): the
-- Bizfly API and the services its catalog names, and whatever the operator points these variables at.
M.endpoints = {
  hosts = { "manage.bizflycloud.vn", "*.bizflycloud.vn" },
  env = { "LUAPROV_BIZFLY_ENDPOINT", "BIZFLYCLOUD_API_URL" },
}
M.gpu_label = template.GPU_LABEL
-- The label BKE puts on worker nodes naming the pool node to delete.
M.node_id_label = "bke.bizflycloud.vn/node-id"

local function connect(ctx)
  local c, err = session.client(ctx)
  if not c then return nil, nil, err end
  local cluster
  cluster, err = config.cluster(ctx)
  if not cluster then return nil, nil, err end
  return c, cluster
end

local function bad_argument(message)
  return nil, { code = "InvalidArgument", message = message }
end

local function valid_id(id)
  return type(id) == "string" and id ~= ""
end

--- refresh(ctx) -> list of {id, min_size, max_size, target_size, debug, nodes = {{provider_id, state,
-- error}}} | nil, err. One GET of the cluster, then one GET per autoscaled pool (in parallel). Any
-- failure fails the whole refresh, so the engine keeps serving its last snapshot; only a pool deleted
-- between the two reads is left out.
function M.refresh(ctx)
  local c, cluster_id, err = connect(ctx)
  if not c then return nil, err end
  local cluster
  cluster, err = c:get_cluster(cluster_id)
  if not cluster then return nil, err end
  local listings = pools.autoscaled(cluster)
  local ids = {}
  for i, p in ipairs(listings) do ids[i] = p.id end
  local details = #ids > 0 and c:get_pools(cluster_id, ids) or {}
  local groups = setmetatable({}, json.array_mt)
  for i, listing in ipairs(listings) do
    local d = details[i]
    if d.pool then
      groups[#groups + 1] = pools.group(listing, d.pool)
    elseif d.error.code == "NotFound" then
      log.info("worker pool gone during refresh", { cluster = cluster_id, pool = listing.id })
    else
      return nil, d.error
    end
  end
  if #groups == 0 then
    log.debug("no worker pool has autoscaling enabled", { cluster = cluster_id })
  end
  return groups
end

--- set_target_size(ctx, id, n) -> true | nil, err: PATCH the pool's desired_size to n (0 included).
function M.set_target_size(ctx, id, n)
  if not valid_id(id) then return bad_argument("set_target_size: the node group id must be a non-empty string") end
  local size = math.tointeger(n)
  if not size or size < 0 then
    return bad_argument(("set_target_size: the size must be an integer >= 0, not %s"):format(tostring(n)))
  end
  local c, cluster_id, err = connect(ctx)
  if not c then return nil, err end
  return c:set_desired_size(cluster_id, id, size)
end

local function label(node, key)
  local labels = type(node) == "table" and node.labels or nil
  local v = type(labels) == "table" and labels[key] or nil
  return type(v) == "string" and v ~= "" and v or nil
end

--- delete_node(ctx, id, node) -> true | nil, err. node = {provider_id, name, labels}.
-- The node-id label names the pool node when BKE set it; a node without labels (the autoscaler's
-- fake nodes for unregistered or failed instances) is found in the pool by its provider ID. The
-- engine has already checked the node belongs to group `id` in its snapshot.
function M.delete_node(ctx, id, node)
  if not valid_id(id) then return bad_argument("delete_node: the node group id must be a non-empty string") end
  if type(node) ~= "table" then return bad_argument("delete_node: node must be a table {provider_id, name, labels}") end
  local c, cluster_id, err = connect(ctx)
  if not c then return nil, err end
  local node_id = label(node, M.node_id_label)
  if not node_id then
    local detail
    detail, err = c:get_pool(cluster_id, id)
    if not detail then return nil, err end
    local found = pools.find_node(detail, node.provider_id)
    if not found then
      return nil, { code = "NotFound",
        message = ("node %q (provider ID %q) is not in worker pool %s and has no %s label"):format(
          tostring(node.name), tostring(node.provider_id), id, M.node_id_label) }
    end
    node_id = found.id
  end
  return c:delete_pool_node(cluster_id, id, node_id)
end

--- template_node(ctx, id) -> {labels, taints, capacity, allocatable} | nil, err. NotFound when the
-- pool is gone or its flavor is not understood (the engine then answers the RPC as unimplemented).
function M.template_node(ctx, id)
  if not valid_id(id) then return bad_argument("template_node: the node group id must be a non-empty string") end
  local c, cluster_id, err = connect(ctx)
  if not c then return nil, err end
  local detail
  detail, err = c:get_pool(cluster_id, id)
  if not detail then return nil, err end
  return template.build(detail)
end

return M
