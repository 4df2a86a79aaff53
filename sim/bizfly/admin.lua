-- The Bizfly simulator's admin paths under /_sim/ (no token, JSON in and out), with the Alibaba
-- simulator's conventions: fault rules, simulated time, state for assertions, reset; plus cluster
-- scaling for benchmarks, the project's capacity, node status overrides and token revocation.
-- See docs/sim.md.
local luaprov = require "luaprov"
local clock = require "sim.clock"
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

local function reply(status, value) return wire.json_response(status, value) end
local function bad(message) return reply(400, { error = message }) end

local function body_json(request, required)
  local text = request.body or ""
  if text == "" then
    if required then return nil, "a JSON body is required" end
    return {}
  end
  local ok, value = pcall(json.decode, text)
  if not ok or type(value) ~= "table" then return nil, "the body is not a JSON object or list" end
  return value
end

local function fault_list()
  local out = {}
  for i, r in ipairs(faults.list()) do out[i] = r end
  return wire.list(out)
end

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
    total_calls = c.total_calls })
end

local function post_faults(request)
  local spec, err = body_json(request, true)
  if not spec then return bad(err) end
  -- One rule, or a list of rules added in order (all or nothing).
  local specs = (getmetatable(spec) == json.array_mt or #spec > 0) and spec or { spec }
  local added = {}
  for i, s in ipairs(specs) do
    local rule, message = faults.add(s)
    if not rule then
      for _, r in ipairs(added) do faults.remove(r.id) end
      return bad(("fault %d: %s"):format(i, message))
    end
    added[#added + 1] = rule
  end
  return reply(200, { added = wire.list(added), faults = fault_list() })
end

local function post_advance(request)
  local body, err = body_json(request, true)
  if not body then return bad(err) end
  local seconds = body.seconds
  if type(seconds) ~= "number" or seconds < 0 or seconds ~= seconds or seconds == math.huge then
    return bad("seconds must be a number >= 0")
  end
  clock.advance(seconds)
  return reply(200, clock.state())
end

local function post_clock(request)
  local body, err = body_json(request, true)
  if not body then return bad(err) end
  if type(body.speed) ~= "number" or body.speed < 0 or body.speed > 10000 then
    return bad("speed must be a number between 0 and 10000")
  end
  clock.set_speed(body.speed)
  return reply(200, clock.state())
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
  if path == "/_sim/faults" then
    if method == "GET" then return reply(200, { faults = fault_list() }) end
    if method == "POST" then return post_faults(request) end
    if method == "DELETE" then
      faults.reset()
      return reply(200, { faults = fault_list() })
    end
  end
  local fault_id = path:match("^/_sim/faults/(%d+)$")
  if fault_id and method == "DELETE" then
    if not faults.remove(tonumber(fault_id)) then return reply(404, { error = "no fault " .. fault_id }) end
    return reply(200, { faults = fault_list() })
  end
  if path == "/_sim/advance" and method == "POST" then return post_advance(request) end
  if path == "/_sim/clock" then
    if method == "GET" then return reply(200, clock.state()) end
    if method == "POST" then return post_clock(request) end
  end
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
