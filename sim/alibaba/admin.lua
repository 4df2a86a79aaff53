-- The simulator's admin paths under /_sim/ (unsigned, JSON in and out): fault rules, simulated time,
-- state for assertions, reset, catalogue scaling, the ACK clusters' node pools, and out-of-band
-- instance changes (a spot reclaim, a stopped node). Tests and the demo drive the simulated cloud
-- through these; see docs/sim.md.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local rules = require "sim.rules"
local account = require "sim.alibaba.account"
local auth = require "sim.alibaba.auth"
local catalogue = require "sim.alibaba.catalogue"
local faults = require "sim.alibaba.faults"
local nodepools = require "sim.alibaba.nodepools"
local ram = require "sim.alibaba.ram"
local reservations = require "sim.alibaba.reservations"
local reclaim = require "sim.alibaba.reclaim"
local state = require "sim.alibaba.state"
local wire = require "sim.alibaba.wire"

local json = luaprov.json

local M = {}

local admin = rules.admin({ json = json, wire = wire, faults = faults })
local reply, bad, body_json, fault_list = admin.reply, admin.bad, admin.body_json, admin.fault_list

--- reset_all(): everything back to how `luaprov sim` starts (the shared clock too).
function M.reset_all()
  clock.reset()
  catalogue.reset()
  account.reset()
  state.reset()
  faults.reset()
  auth.reset()
  nodepools.reset()
  ram.reset()
  reservations.reset()
end

local function get_state()
  local summary = state.summary()
  return reply(200, { time = clock.state(), catalogue = catalogue.summary(), faults = fault_list(),
    credentials = auth.state(), instances = summary.instances, calls = summary.calls, errors = summary.errors,
    total_calls = summary.total_calls, capacity_reservations = reservations.summary() })
end

local function post_catalogue(request)
  local body, err = body_json(request, false)
  if not body then return bad(err) end
  local n, z = body.instance_types, body.zones
  if n ~= nil and (math.type(n) ~= "integer" or n < 1 or n > 5000) then
    return bad("instance_types must be an integer between 1 and 5000")
  end
  if z ~= nil and (math.type(z) ~= "integer" or z < 1 or z > 16) then
    return bad("zones must be an integer between 1 and 16")
  end
  -- The network follows the zones (one tagged vSwitch per zone) and instances would point at
  -- vSwitches and types that may no longer exist, so both are rebuilt; faults are kept.
  if n == nil and z == nil then
    catalogue.reset()
  else
    catalogue.generate(n or #catalogue.types(), z or #catalogue.zones())
  end
  account.reset()
  state.reset()
  reservations.reset()
  for _, r in ipairs(faults.list()) do
    if r.kind == "nostock" then
      catalogue.add_sold_out({ zone = r.zone, instance_type = r.instance_type, capacity_type = r.capacity_type })
    end
  end
  return reply(200, catalogue.summary())
end

local STATUSES = { Running = true, Stopping = true, Stopped = true, Starting = true, Pending = true }

local function instance_path(request, id)
  local inst = state.get(id)
  if not inst then return reply(404, { error = "no instance " .. id }) end
  if request.method == "DELETE" then
    -- Out-of-band release (a spot reclaim without notice): gone from every listing, its address freed.
    reclaim.release(inst)
    return reply(200, { deleted = id })
  end
  local body, err = body_json(request, true)
  if not body then return bad(err) end
  if body.status == json.null or body.status == "" then
    inst.status = nil  -- back to the time-driven lifecycle
  elseif not STATUSES[body.status] then
    return bad("status must be one of Pending, Starting, Running, Stopping, Stopped, or null")
  else
    inst.status = body.status
  end
  return reply(200, { id = id, status = state.status(inst) })
end

-- The user data an instance was launched with, decoded (as the instance's metadata service serves it
-- at /latest/user-data): tests read back what a launch sent. The simulated cluster's join token is in
-- it; this path is for tests, like the rest of /_sim/.
local function get_user_data(id)
  local inst = state.get(id)
  if not inst then return reply(404, { error = "no instance " .. id }) end
  local text = inst.user_data and (luaprov.crypto.base64_decode(inst.user_data) or inst.user_data) or ""
  return reply(200, { id = id, user_data = text })
end

-- {"used_amount": N}: another workload's use of a capacity reservation changed.
local function post_capacity_reservation(request, id)
  local body, err = body_json(request, false)
  if not body then return bad(err) end
  local pool, why = reservations.set_used(id, body.used_amount)
  if not pool then return reply(reservations.get(id) and 400 or 404, { error = why }) end
  return reply(200, { id = id, used_amount = pool.used, total_amount = pool.total })
end

-- A spot reclaim with notice: the instance is released notice_seconds (simulated) from now, and its
-- Node shows InstanceExpired=True meanwhile.
local function post_reclaim(request)
  local body, err = body_json(request, false)
  if not body then return bad(err) end
  if type(body.instance_id) ~= "string" then return bad("instance_id must be a string") end
  local inst, status, message = reclaim.schedule(body.instance_id, body.notice_seconds)
  if not inst then return reply(status, { error = message }) end
  return reply(200, { instance_id = inst.id, termination_time = reclaim.termination_time(inst) })
end

-- {"cluster_id": "luaprov-sim" (the default), "nodepools": [...]}: what DescribeClusterNodePools
-- answers for that cluster from now on (until a reset).
local function post_nodepools(request)
  local body, err = body_json(request, false)
  if not body then return bad(err) end
  local cluster_id = body.cluster_id or account.CLUSTER
  local list, why = nodepools.set(cluster_id, body.nodepools)
  if not list then return bad(why) end
  return reply(200, { cluster_id = cluster_id, nodepools = list })
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
  if path == "/_sim/catalogue" then
    if method == "GET" then return reply(200, catalogue.summary()) end
    if method == "POST" then return post_catalogue(request) end
  end
  if path == "/_sim/reclaim" and method == "POST" then return post_reclaim(request) end
  if path == "/_sim/nodepools" then
    if method == "GET" then return reply(200, { clusters = nodepools.summary() }) end
    if method == "POST" then return post_nodepools(request) end
  end
  if path == "/_sim/capacity-reservations" and method == "GET" then
    return reply(200, { capacity_reservations = reservations.summary() })
  end
  local crp = path:match("^/_sim/capacity%-reservations/([%w%-]+)$")
  if crp and method == "POST" then return post_capacity_reservation(request, crp) end
  local ud = path:match("^/_sim/instances/([%w%-]+)/user%-data$")
  if ud and method == "GET" then return get_user_data(ud) end
  local id = path:match("^/_sim/instances/([%w%-]+)$")
  if id and (method == "POST" or method == "DELETE") then return instance_path(request, id) end
  return reply(404, { error = ("no admin path %s %s (see docs/sim.md)"):format(method, path) })
end

return M
