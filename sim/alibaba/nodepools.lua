-- The node pools of the simulated account's ACK clusters, as the Container Service's
-- DescribeClusterNodePools answers them: {nodepool_info = {name, nodepool_id, is_default}, status =
-- {healthy_nodes}, kubernetes_config = {runtime, runtime_version}}. Each cluster starts with one
-- default pool running the cluster's runtime (sim/alibaba/attach.lua CLUSTERS); a test replaces them
-- through POST /_sim/nodepools (sim/alibaba/admin.lua) to choose which runtime the provider finds.
--   reset()                          every cluster back to its default pool
--   list(cluster_id) -> pools | nil  nil when the account has no such cluster
--   set(cluster_id, pools) -> pools | nil, why   replaces a cluster's pools (kept as given, checked
--                                    for shape only)
--   summary() -> {cluster_id -> pools} for the admin path
local luaprov = require "luaprov"
local attach = require "sim.alibaba.attach"

local array_mt = luaprov.json.array_mt

local M = {}

local pools

local function default_pools(cluster_id, cluster)
  return setmetatable({ {
    nodepool_info = { name = "default-nodepool", is_default = true,
      nodepool_id = "np" .. luaprov.crypto.sha256_hex("luaprov-sim nodepool " .. cluster_id):sub(1, 32) },
    status = { healthy_nodes = 3 },
    kubernetes_config = { runtime = cluster.runtime.name, runtime_version = cluster.runtime.version },
  } }, array_mt)
end

function M.reset()
  pools = {}
  for id, cluster in pairs(attach.CLUSTERS) do pools[id] = default_pools(id, cluster) end
end

function M.list(cluster_id) return pools[cluster_id] end

-- Each pool must be an object and its three parts objects when present: the rest (missing runtime,
-- no default pool, ties) is what a test wants the provider to cope with.
function M.set(cluster_id, list)
  if not pools[cluster_id] then return nil, ("no cluster %s"):format(tostring(cluster_id)) end
  if type(list) ~= "table" or (next(list) ~= nil and #list == 0) then return nil, "nodepools must be an array" end
  for i, pool in ipairs(list) do
    if type(pool) ~= "table" then return nil, ("nodepools[%d] is not an object"):format(i - 1) end
    for _, part in ipairs({ "nodepool_info", "status", "kubernetes_config" }) do
      if pool[part] ~= nil and type(pool[part]) ~= "table" then
        return nil, ("nodepools[%d].%s is not an object"):format(i - 1, part)
      end
    end
  end
  if getmetatable(list) ~= array_mt then setmetatable(list, array_mt) end
  pools[cluster_id] = list
  return pools[cluster_id]
end

function M.summary() return pools end

M.reset()

return M
