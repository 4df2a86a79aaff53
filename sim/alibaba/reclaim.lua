-- Spot reclaims with notice: ECS tells a spot instance about 5 minutes ahead that it will be released,
-- and ACK raises the Node condition InstanceExpired on its Node (docs/alibaba.md#spot-interruption).
-- schedule() gives an instance a reclaim time on the simulated clock; the simulated kubelet shows
-- condition() on its Node while the notice runs; sweep() releases every instance whose time has come,
-- as the cloud does (gone from every listing, its address freed). Nothing here reads the wall clock.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local account = require "sim.alibaba.account"
local reservations = require "sim.alibaba.reservations"
local state = require "sim.alibaba.state"

local M = {}

M.DEFAULT_NOTICE_SECONDS = 300
M.CONDITION = "InstanceExpired"
M.REASON = "SpotInstanceReclaim"

--- schedule(id, notice_seconds) -> the instance | nil, status, message: the spot instance id will be
-- released notice_seconds (simulated) from now. 404 for an unknown instance, 400 for an on-demand one
-- or a bad notice. Scheduling again moves the time.
function M.schedule(id, notice)
  local inst = state.get(id)
  if not inst then return nil, 404, "no instance " .. tostring(id) end
  if inst.spot_strategy == "NoSpot" then
    return nil, 400, ("instance %s is on-demand: only a spot instance is reclaimed"):format(id)
  end
  notice = notice == nil and M.DEFAULT_NOTICE_SECONDS or notice
  if type(notice) ~= "number" or notice ~= notice or notice < 0 or notice > 86400 then
    return nil, 400, "notice_seconds must be a number of seconds from 0 to 86400"
  end
  inst.reclaim_at = clock.now() + notice
  return inst
end

--- termination_time(inst) -> the RFC 3339 time the instance will be released, or nil.
function M.termination_time(inst)
  return inst.reclaim_at and luaprov.time.iso8601(math.floor(inst.reclaim_at)) or nil
end

--- condition(inst) -> the Node condition {type, status, reason, message} of a reclaim notice, or nil.
function M.condition(inst)
  local at = M.termination_time(inst)
  if not at then return nil end
  return { type = M.CONDITION, status = "True", reason = M.REASON,
    message = ("The spot instance %s will be reclaimed at %s"):format(inst.id, at) }
end

--- release(inst): the instance is released: gone from every listing, its address and its place in a
-- capacity reservation freed (DeleteInstance(s), a reclaim whose time came, or DELETE /_sim/instances/<id>).
function M.release(inst)
  state.remove(inst.id)
  local v = account.vswitch(inst.vswitch_id)
  if v then account.release_ip(v, inst.ip) end
  reservations.release(inst)
end

--- sweep(): releases the instances whose reclaim time has passed on the simulated clock.
function M.sweep()
  local now = clock.now()
  for _, inst in ipairs(state.list()) do
    if inst.reclaim_at and inst.reclaim_at <= now then
      M.release(inst)
      luaprov.log.info("spot instance reclaimed",
        { instance_id = inst.id, termination_time = M.termination_time(inst) })
    end
  end
end

return M
