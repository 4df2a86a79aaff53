-- The container runtime an ACK cluster's nodes run, and the correction of the attach script with it.
-- ACK sometimes answers DescribeClusterAttachScripts with `--runtime docker` for Kubernetes 1.24 and
-- later, which have no dockershim: a node launched with it never joins. The cluster's node pools know
-- the right runtime (DescribeClusterNodePools, ROA GET /clusters/{ClusterId}/nodepools): the default
-- pool's, else the one of the pool with the most healthy nodes, replaces the script's
-- `--runtime X --runtime-version Y` (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap).
--
--   ACTION                                   "DescribeClusterNodePools"
--   pick(nodepools) -> runtime, version | nil, why       pure: the runtime of the pool that wins
--   rewrite(script, runtime, version) -> script, count   pure: the flags replaced (count of them)
--   correct(c, cluster_id, script) -> script, settled
--     the script with the node pools' runtime. When the call fails the script comes back unchanged
--     with settled false (the caller may ask again later); an answer without a usable runtime
--     leaves it unchanged with settled true. Both are logged at warn with the action, code and
--     request ID, never the script (it holds the cluster's join token). Never fails the launch.
local luaprov = require "luaprov"

local M = {}

M.ACTION = "DescribeClusterNodePools"

local FLAGS = "%s+%-%-runtime%s+%S+%s+%-%-runtime%-version%s+%S+"
-- A runtime and its version go into a shell command line: one plain word each.
local WORD = "^[%w][%w._+-]*$"

local function field(t, name)
  if type(t) == "table" then return t[name] end
  return nil
end

--- pick(nodepools) -> runtime, version | nil, why. The default pool (nodepool_info.is_default) first,
-- then by status.healthy_nodes, most first; ties keep the API's order. The first pool's
-- kubernetes_config.runtime and runtime_version, when both are plain words.
function M.pick(nodepools)
  if type(nodepools) ~= "table" or #nodepools == 0 then return nil, "the cluster has no node pools" end
  local order = {}
  for i, pool in ipairs(nodepools) do
    local healthy = field(field(pool, "status"), "healthy_nodes")
    order[i] = { pool = pool, index = i, default = field(field(pool, "nodepool_info"), "is_default") == true,
      healthy = math.type(healthy) and healthy or 0 }
  end
  table.sort(order, function(a, b)
    if a.default ~= b.default then return a.default end
    if a.healthy ~= b.healthy then return a.healthy > b.healthy end
    return a.index < b.index
  end)
  local first = order[1].pool
  local config = field(first, "kubernetes_config")
  local runtime, version = field(config, "runtime"), field(config, "runtime_version")
  local name = field(field(first, "nodepool_info"), "name")
  if type(runtime) ~= "string" or not runtime:find(WORD) or type(version) ~= "string" or not version:find(WORD) then
    return nil, ("node pool %s has no usable kubernetes_config.runtime and runtime_version"):format(
      type(name) == "string" and name or "#" .. order[1].index)
  end
  return runtime, version
end

--- rewrite(script, runtime, version) -> script, count: every ` --runtime X --runtime-version Y` of the
-- script (blanks of any length around them) becomes ` --runtime <runtime> --runtime-version <version>`.
function M.rewrite(script, runtime, version)
  local flags = (" --runtime %s --runtime-version %s"):format(runtime, version)
  return script:gsub(FLAGS, function() return flags end)
end

local function warn(message, cluster_id, fields)
  fields.cluster_id, fields.action = cluster_id, M.ACTION
  luaprov.log.warn(message, fields)
end

function M.correct(c, cluster_id, script)
  local value, request_id = c:roa("cs", M.ACTION, { method = "GET", path = "/clusters/" .. cluster_id .. "/nodepools" })
  if value == nil then
    local err = request_id
    warn("alibaba attach script: the node pools' runtime is unknown; the script's runtime is kept", cluster_id,
      { code = err.code, api_code = err.api_code, request_id = err.request_id, http_status = err.http_status,
        error = err.message })
    return script, false
  end
  local runtime, version = M.pick(field(value, "nodepools"))
  if not runtime then
    warn("alibaba attach script: the node pools name no runtime; the script's runtime is kept", cluster_id,
      { code = "NoNodePoolRuntime", request_id = request_id, error = version })
    return script, true
  end
  local corrected, count = M.rewrite(script, runtime, version)
  luaprov.log.info("alibaba attach script runtime set from the node pools", { cluster_id = cluster_id,
    runtime = runtime, runtime_version = version, replaced = count, request_id = request_id })
  return corrected, true
end

return M
