-- Capacity reservations (ECS private pools) of the simulated account, DescribeCapacityReservations,
-- and what RunInstances' PrivatePoolOptions do with them:
--   Target (+ Id)   the named pool: it must be Active, of the instance type and zone, with room, else
--                   the real refusals (Invalid.PrivatePoolOptions.Id / .status, Invalid.InstanceType,
--                   Invalid.ZoneId); a full pool answers Invalid.PrivatePoolOptions.status
--                   "The PrivatePool has been used up."
--   Open            an Active open pool of the type and zone with room, else the public pool
--   None, not given the public pool (not given: as None, the default the API documents for
--                   PrivatePoolOptions elsewhere; the simulator's choice)
-- A launch into a pool takes one of its TotalAmount (UsedAmount + 1), skips the public stock check
-- (the capacity is held for the account), and is recorded on the instance (private_pool, in
-- GET /_sim/state); releasing the instance gives it back. Spot launches cannot use a pool
-- (SpotNotSupported when Open or Target is asked for).
local account = require "sim.alibaba.account"
local catalogue = require "sim.alibaba.catalogue"
local ecs = require "sim.alibaba.ecs"
local wire = require "sim.alibaba.wire"

local list = wire.list

local M = {}

M.TARGET_POOL = "crp-bp1sim0target0001"
M.OPEN_POOL = "crp-bp1sim0open000001"
M.PREPARED_POOL = "crp-bp1sim0prepared01"

local DISCOVERY = "karpenter.sh/discovery"

local pools, by_id

--- reset(): the account's pools: a targeted one (ecs.g7.xlarge in the second zone, 2 reserved,
-- team=ml), an open one (ecs.g7.large in the first zone, 3 reserved, 1 used by another workload) and
-- an open one not in effect yet (Prepared), all tagged for the cluster's discovery.
function M.reset()
  pools, by_id = {}, {}
  local zones = catalogue.zones()
  local function zone(i) return zones[math.min(i, #zones)].id end
  local function pool(spec)
    spec.used = spec.used or 0
    pools[#pools + 1] = spec
    by_id[spec.id] = spec
  end
  pool { id = M.TARGET_POOL, name = "luaprov-sim-ml", match = "Target", status = "Active", zone = zone(2),
    type = "ecs.g7.xlarge", total = 2, tags = { [DISCOVERY] = account.CLUSTER, team = "ml" },
    description = "Reserved for the ML team's nodes" }
  pool { id = M.OPEN_POOL, name = "luaprov-sim-open", match = "Open", status = "Active", zone = zone(1),
    type = "ecs.g7.large", total = 3, used = 1, tags = { [DISCOVERY] = account.CLUSTER },
    description = "Open reservation shared with another workload" }
  pool { id = M.PREPARED_POOL, name = "luaprov-sim-next-week", match = "Open", status = "Prepared",
    zone = zone(3), type = "ecs.g7.large", total = 5, tags = { [DISCOVERY] = account.CLUSTER },
    description = "Takes effect next week" }
end

function M.get(id) return by_id[id] end

--- summary() -> the pools for GET /_sim/state and GET /_sim/capacity-reservations.
function M.summary()
  local out = {}
  for i, pool in ipairs(pools) do
    out[i] = { id = pool.id, name = pool.name, match_criteria = pool.match, status = pool.status, zone = pool.zone,
      instance_type = pool.type, total_amount = pool.total, used_amount = pool.used, tags = pool.tags }
  end
  return list(out)
end

--- set_used(id, n) -> pool | nil, message: an admin's change of UsedAmount (another workload took or
-- gave back capacity).
function M.set_used(id, n)
  local pool = by_id[id]
  if not pool then return nil, "no capacity reservation " .. tostring(id) end
  if math.type(n) ~= "integer" or n < 0 or n > pool.total then
    return nil, ("used_amount must be an integer from 0 to %d"):format(pool.total)
  end
  pool.used = n
  return pool
end

local function free(pool) return pool.total - pool.used end

local function pool_error(code, message)
  wire.fail(400, code, message)
end

--- choose(p, t, zone, capacity, count) -> pool, match_criteria | nil: the pool a RunInstances
-- launches `count` instances of type t in `zone` from, or nil for the public pool; raises the API's
-- refusal. Changes nothing (take does, once the launch is sure).
function M.choose(p, t, zone, capacity, count)
  local match = wire.one_of(p, "PrivatePoolOptions.MatchCriteria", nil, "Open", "Target", "None")
  if capacity == "spot" then
    if match == "Open" or match == "Target" then
      pool_error("SpotNotSupported", "Spot is not supported for PrivatePool.")
    end
    return nil
  end
  if match == nil or match == "None" then return nil end
  if match == "Target" then
    local id = wire.str(p, "PrivatePoolOptions.Id")
    if not id then
      pool_error("MissingParameter.PrivatePoolOptions.Id", 'The specified parameter "PrivatePoolOptions.Id" can not be '
        .. "empty.")
    end
    local pool = by_id[id]
    if not pool then pool_error("Invalid.PrivatePoolOptions.Id", "The PrivatePool does not exist.") end
    if pool.status ~= "Active" then
      pool_error("Invalid.PrivatePoolOptions.status", "The PrivatePool is expired or inactive.")
    end
    if pool.type ~= t.id then pool_error("Invalid.InstanceType", "The InstanceType does not match the PrivatePool.") end
    if pool.zone ~= zone then pool_error("Invalid.ZoneId", "The ZoneId does not match the PrivatePool.") end
    if free(pool) < count then pool_error("Invalid.PrivatePoolOptions.status", "The PrivatePool has been used up.") end
    return pool, "Target"
  end
  for _, pool in ipairs(pools) do
    if pool.match == "Open" and pool.status == "Active" and pool.type == t.id and pool.zone == zone
        and free(pool) >= count then
      return pool, "Open"
    end
  end
  return nil
end

--- take(pool, n): n instances launched into the pool.
function M.take(pool, n)
  pool.used = pool.used + n
end

--- release(inst): the instance's place in its pool is free again (it was released).
function M.release(inst)
  local pool = inst.private_pool and by_id[inst.private_pool.id]
  if pool and pool.used > 0 then pool.used = pool.used - 1 end
end

-- The DescribeCapacityReservations shape of a pool.
local function record(pool)
  return {
    PrivatePoolOptionsId = pool.id, PrivatePoolOptionsName = pool.name, PrivatePoolOptionsMatchCriteria = pool.match,
    Status = pool.status, RegionId = catalogue.REGION, InstanceChargeType = "PostPaid", Platform = "linux",
    Description = pool.description, StartTimeType = "Now", EndTimeType = "Unlimited", TimeSlot = "",
    StartTime = account.CREATED:sub(1, 16) .. "Z", EndTime = "",
    AllocatedResources = { AllocatedResource = list { { InstanceType = pool.type, zoneId = pool.zone,
      TotalAmount = pool.total, UsedAmount = pool.used, AvailableAmount = free(pool) } } },
    Tags = ecs.ecs_tags(pool.tags),
  }
end

-- Without Status, every pool but Pending and Released ones, as documented.
local HIDDEN = { Pending = true, Released = true }

local function pool_key(pool) return pool.id end

function M.DescribeCapacityReservations(call)
  local p = call.params
  ecs.region(p)
  local ids = wire.json_array(p, "PrivatePoolOptions.Ids", 100, "InvalidParameter.PrivatePoolOptions.Ids")
  local status = wire.one_of(p, "Status", nil, "All", "Pending", "Preparing", "Prepared", "Active", "Released")
  local type_id, zone = wire.str(p, "InstanceType"), wire.str(p, "ZoneId")
  wire.one_of(p, "InstanceChargeType", "PostPaid", "PostPaid", "PrePaid")
  wire.one_of(p, "Platform", "all", "all", "linux", "windows")
  local tag_filters = wire.tags(p, "Tag", 20)
  local wanted
  if ids then
    wanted = {}
    for _, id in ipairs(ids) do wanted[id] = true end
  end
  local matched = {}
  for _, pool in ipairs(pools) do
    local shown = (status == nil and not HIDDEN[pool.status]) or status == "All" or status == pool.status
    if shown and (not wanted or wanted[pool.id]) and (not type_id or type_id == pool.type)
        and (not zone or zone == pool.zone) and wire.match_tags(pool.tags, tag_filters) then
      matched[#matched + 1] = pool
    end
  end
  table.sort(matched, function(a, b) return a.id < b.id end)
  local page, next_token = wire.page_by_token(matched, p, pool_key, 10, 100)
  local out = {}
  for i, pool in ipairs(page) do out[i] = record(pool) end
  local size = math.min(wire.int(p, "MaxResults", 10, 1, nil), 100)
  return { NextToken = next_token, TotalCount = #matched, MaxResults = size,
    CapacityReservationSet = { CapacityReservationItem = list(out) } }
end

M.reset()

return M
