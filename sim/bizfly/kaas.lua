-- The Kubernetes Engine API of the simulated Bizfly region: the paths gobizfly calls below the
-- kubernetes_engine service URL of the service catalog, for the four calls the
-- autoscaler needs and the two listings around them.
--
--   kaas.route(method, rest) -> operation, handler | nil      rest = the path below the service URL
--   handler(request, region) -> status, body
-- The cluster lives in HaNoi; the HoChiMinh service answers, but holds no cluster.
local cluster = require "sim.bizfly.cluster"
local wire = require "sim.bizfly.wire"

local M = {}

M.HOME_REGION = "HaNoi"

local function find_cluster(uid, region)
  if region ~= M.HOME_REGION or uid ~= cluster.uid() then wire.not_found("cluster " .. uid) end
end

local function find_pool(uid, pool_id, region)
  find_cluster(uid, region)
  local pool = cluster.pool(pool_id)
  if not pool then wire.not_found(("worker pool %s in cluster %s"):format(pool_id, uid)) end
  return pool
end

local function list_clusters(_, region)
  cluster.sweep()
  if region ~= M.HOME_REGION then return 200, { clusters = wire.list({}) } end
  return 200, { clusters = wire.list({ cluster.cluster_json(false) }) }
end

local function get_cluster(args, region)
  find_cluster(args[1], region)
  cluster.sweep()
  return 200, cluster.cluster_json(true)
end

local function get_pool(args, region)
  local pool = find_pool(args[1], args[2], region)
  cluster.sweep()
  return 200, cluster.pool_json(pool, true)
end

local function get_pool_alone(args, region)
  if region ~= M.HOME_REGION then wire.not_found("worker pool " .. args[1]) end
  local pool = cluster.pool(args[1])
  if not pool then wire.not_found("worker pool " .. args[1]) end
  cluster.sweep()
  return 200, cluster.pool_json(pool, true)
end

local function update_pool(args, region, request)
  local pool = find_pool(args[1], args[2], region)
  local fields = wire.body_object(request)
  cluster.sweep()
  cluster.update(pool, fields)
  return 200, cluster.pool_json(pool, false)
end

local function delete_node(args, region)
  local pool = find_pool(args[1], args[2], region)
  local outcome = cluster.delete_node(pool, args[3])
  return 200, { message = ("Node %s is %s"):format(args[3], outcome) }
end

-- (method, pattern) -> operation name (what fault rules and call counts use), handler.
local ROUTES = {
  { "GET", "^/_/?$", "list_clusters", list_clusters },
  { "GET", "^/_/([^/]+)/?$", "get_cluster", get_cluster },
  { "GET", "^/_/([^/]+)/([^/]+)/?$", "get_pool", get_pool },
  { "PATCH", "^/_/([^/]+)/([^/]+)/?$", "update_pool", update_pool },
  { "DELETE", "^/_/([^/]+)/([^/]+)/([^/]+)/?$", "delete_node", delete_node },
  { "GET", "^/worker_pool/([^/]+)/?$", "get_pool", get_pool_alone },
}

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

--- route(method, rest) -> operation, handler(request, region) -> status, body; nil when no route.
function M.route(method, rest)
  for _, r in ipairs(ROUTES) do
    if r[1] == method then
      -- A pattern without captures yields the whole match, which its handler ignores.
      local captures = { rest:match(r[2]) }
      if captures[1] ~= nil then
        for i, c in ipairs(captures) do captures[i] = unescape(c) end
        local handler = r[4]
        return r[3], function(request, region) return handler(captures, region, request) end
      end
    end
  end
  return nil
end

return M
