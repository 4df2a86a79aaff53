-- The Bizfly simulator's admin paths under /_sim/ (no token, JSON in and out), with the Alibaba
-- simulator's conventions: fault rules, simulated time, state for assertions, reset; plus cluster
-- scaling for benchmarks, the project's capacity, node status overrides and token revocation.
-- See docs/sim.md.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local rules = require "sim.rules"
local auth = require "sim.bizfly.auth"
local calls = require "sim.bizfly.calls"
local cluster = require "sim.bizfly.cluster"
local faults = require "sim.bizfly.faults"
local fixture = require "sim.bizfly.fixture"
local wire = require "sim.bizfly.wire"

local json = luaprov.json

local M = {}

M.MAX_POOLS = 500
M.MAX_NODES = 20000

local admin = rules.admin({ json = json, wire = wire, faults = faults, objects_only = true })
local reply, bad, body_json, fault_list = admin.reply, admin.bad, admin.body_json, admin.fault_list

--- reset_all(): everything back to how `luaprov sim` starts (the shared clock too).
function M.reset_all()
  clock.reset()
  cluster.load(fixture.default())
  faults.reset()
  auth.reset()
  calls.reset()
end

local function get_state()
  local c = calls.summary()
  return reply(200, { time = clock.state(), cluster = cluster.summary(), capacity = cluster.capacity(),
    faults = fault_list(), credentials = auth.state(), calls = c.calls, errors = c.errors,
    total_calls = c.total_calls, last_request_id = c.last_request_id })
end

local function cluster_summary()
  local s = cluster.summary()
  local autoscaled = 0
  for _, p in ipairs(s.pools) do
    if p.enable_autoscaling then autoscaled = autoscaled + 1 end
  end
  return { uid = s.uid, name = s.name, pools = #s.pools, autoscaled_pools = autoscaled, nodes = s.nodes }
end

-- A new cluster forgets every node (and what was being deleted); faults and tokens stay.
local function post_cluster(request)
  local body, err = body_json(request, false)
  if not body then return bad(err) end
  local pools, nodes = body.pools, body.nodes
  if pools == nil and nodes == nil then
    cluster.load(fixture.default())
    return reply(200, cluster_summary())
  end
  if math.type(pools) ~= "integer" or pools < 1 or pools > M.MAX_POOLS then
    return bad(("pools must be an integer between 1 and %d"):format(M.MAX_POOLS))
  end
  if math.type(nodes) ~= "integer" or nodes < 0 or nodes > M.MAX_NODES then
    return bad(("nodes must be an integer between 0 and %d"):format(M.MAX_NODES))
  end
  cluster.load(fixture.generate(pools, nodes))
  return reply(200, cluster_summary())
end

local function post_capacity(request)
  local body, err = body_json(request, true)
  if not body then return bad(err) end
  local nodes = body.nodes
  if nodes == json.null then nodes = nil end
  if nodes ~= nil and (math.type(nodes) ~= "integer" or nodes < 0) then
    return bad("nodes must be an integer >= 0, or null for no quota")
  end
  local limits = {}
  if body.flavors ~= nil then
    if type(body.flavors) ~= "table" then return bad("flavors must map flavor names to node counts") end
    for name, n in pairs(body.flavors) do
      if n ~= json.null then
        if math.type(n) ~= "integer" or n < 0 then
          return bad("flavors." .. tostring(name) .. " must be an integer >= 0")
        end
        limits[name] = n
      end
    end
  end
  cluster.set_capacity(nodes, limits)
  return reply(200, cluster.capacity())
end

local function post_node(request, id)
  local node = cluster.node(id)
  if not node then return reply(404, { error = "no node " .. id }) end
  local body, err = body_json(request, true)
  if not body then return bad(err) end
  local status = body.status
  if status == json.null then status = nil end
  local reason = type(body.status_reason) == "string" and body.status_reason or nil
  local ok = cluster.force(node, status, reason)
  if not ok then return bad("status must be one of PROVISIONING, ACTIVE, ERROR, DELETING, WARNING, RECOVERING, "
    .. "UPDATING, or null to return to the lifecycle") end
  local s, r = cluster.status(node)
  return reply(200, { id = id, status = s, status_reason = r })
end

--- handle(request) -> response for a path under /_sim/.
function M.handle(request)
  local path, method = request.path, request.method
  if path == "/_sim/state" and method == "GET" then return get_state() end
  local faults_response = admin.handle_faults(request)
  if faults_response then return faults_response end
  local clock_response = admin.handle_clock(request)
  if clock_response then return clock_response end
  if path == "/_sim/reset" and method == "POST" then
    M.reset_all()
    return reply(200, { reset = true, time = clock.state() })
  end
  if path == "/_sim/cluster" then
    if method == "GET" then return reply(200, cluster_summary()) end
    if method == "POST" then return post_cluster(request) end
  end
  if path == "/_sim/capacity" then
    if method == "GET" then return reply(200, cluster.capacity()) end
    if method == "POST" then return post_capacity(request) end
  end
  if path == "/_sim/tokens" and method == "DELETE" then return reply(200, { revoked = auth.revoke_all() }) end
  local node_id = path:match("^/_sim/nodes/([%w%-]+)$")
  if node_id and method == "POST" then return post_node(request, node_id) end
  return reply(404, { error = ("no admin path %s %s (see docs/sim.md)"):format(method, path) })
end

return M
