-- Capacity reservations (ECS private pools) of an ECSNodeClass: spec.capacityReservationSelectorTerms
-- resolved into status.capacityReservations, what they do to the offerings, and the private pool a
-- launch asks for. docs/alibaba.md#capacity-reservations says the same for operators.
--
-- Public:
--   preference(spec) -> "open" | "target" | "none" | nil (nil: no terms and no preference: nothing
--                       changes, RunInstances gets no PrivatePoolOptions), or false, message for a
--                       value it does not know
--   resolve(c, cerr, nodeclass) -> list, condition, gates
--       list = {{id, zoneID, instanceType, available, matchCriteria}} (Active reservations only, one
--       entry per instance type and zone they reserve); condition CapacityReservationResolved; gates:
--       whether the condition counts for root Ready (only with preference "target", or a preference
--       it does not know: then nothing could launch as asked)
--   apply(offerings, type_name, nodeclass, vswitch_zones): the offerings of one type, changed in place:
--       "open"/"target": an on-demand offering a reservation with room covers costs 0 (the engine
--       hands offerings cheapest first) and is available where the class has a vSwitch, whatever the
--       public stock; "target": the other on-demand offerings are unavailable. Spot ones never change.
--   pool_for(nodeclass, offering) -> {match_criteria, id} | nil: RunInstances' PrivatePoolOptions
--   run(ctx, req, nodeclass, offering) -> instance | nil, err: instances.run with that private pool; a
--       Target launch refused because the pool is used up (Invalid.PrivatePoolOptions.status) is
--       retried once with Open under "open", and is the offering out of stock (InsufficientCapacity)
--       under "target"
local luaprov = require "luaprov"
local instances = require "providers.alibaba.instances"
local util = require "providers.alibaba.util"

local log = luaprov.log

local M = {}

M.CONDITION = "CapacityReservationResolved"
M.ACTION = "DescribeCapacityReservations"
-- What ECS answers a Target launch into a pool that is used up, expired or not in effect.
M.POOL_UNUSABLE = "Invalid.PrivatePoolOptions.status"
M.PREFERENCES = { open = true, target = true, none = true }

local MAX_TOKEN = 64

local present, array = util.present, util.array

local function condition(status, reason, message)
  return { type = M.CONDITION, status = status, reason = reason, message = message or "" }
end

local function spec_of(nodeclass)
  return present(nodeclass.spec) and nodeclass.spec or {}
end

local function terms_of(spec)
  local terms = spec.capacityReservationSelectorTerms
  return (present(terms) and type(terms) == "table") and terms or {}
end

function M.preference(spec)
  local value = spec.capacityReservationPreference
  if present(value) and value ~= "" then
    if M.PREFERENCES[value] then return value end
    return false, ("capacityReservationPreference %q is not open, target or none"):format(tostring(value))
  end
  if #terms_of(spec) > 0 then return "open" end
  return nil
end

-- Resolution ---------------------------------------------------------------------------------------

local function previous(nodeclass)
  local status = present(nodeclass.status) and nodeclass.status or {}
  local list = status.capacityReservations
  if present(list) and type(list) == "table" and #list > 0 then return list end
  return array()
end

-- The Active reservations of the terms (ORed; within a term id and tags are ANDed, as the API does).
local function describe(c, region, terms)
  local by_key, problems = {}, {}
  for i, term in ipairs(terms) do
    if type(term) == "table" and (util.nonempty(term.id) or util.has_tags(term)) then
      local params = { RegionId = region }
      if util.nonempty(term.id) then params["PrivatePoolOptions.Ids"] = { term.id } end
      if util.has_tags(term) then params.Tag = util.tag_filter(term.tags) end
      local items, err = c:paginate("ecs", M.ACTION, params,
        { list = "CapacityReservationSet.CapacityReservationItem", style = "NextToken", page_size = 100 })
      if not items then return nil, err end
      for _, item in ipairs(items) do
        local ok = type(item) == "table" and item.Status == "Active" and type(item.PrivatePoolOptionsId) == "string"
        local allocated = ok and type(item.AllocatedResources) == "table" and item.AllocatedResources.AllocatedResource
        for _, r in ipairs(type(allocated) == "table" and allocated or {}) do
          if type(r) == "table" and type(r.InstanceType) == "string" and type(r.zoneId) == "string" then
            local key = item.PrivatePoolOptionsId .. "|" .. r.zoneId .. "|" .. r.InstanceType
            local available = (tonumber(r.TotalAmount) or 0) - (tonumber(r.UsedAmount) or 0)
            by_key[key] = { id = item.PrivatePoolOptionsId, zoneID = r.zoneId, instanceType = r.InstanceType,
              available = math.tointeger(available) or available, matchCriteria = item.PrivatePoolOptionsMatchCriteria }
          end
        end
      end
    else
      -- Sent as is, a term with neither id nor tags would match every reservation of the region.
      problems[#problems + 1] = ("capacityReservationSelectorTerms[%d] has neither id nor tags"):format(i)
    end
  end
  local keys = {}
  for k in pairs(by_key) do keys[#keys + 1] = k end
  table.sort(keys, util.byte_less)
  local list = array()
  for i, k in ipairs(keys) do list[i] = by_key[k] end
  return list, nil, problems
end

function M.resolve(c, cerr, nodeclass)
  local spec = spec_of(nodeclass)
  local pref, bad = M.preference(spec)
  local terms = terms_of(spec)
  if pref == false then
    return array(), condition("False", "InvalidCapacityReservationPreference", bad), true
  end
  local gates = pref == "target"
  if #terms == 0 then
    if pref == "target" then
      return array(), condition("False", "CapacityReservationNotFound", "capacityReservationPreference is target "
        .. "but no capacityReservationSelectorTerms are set: no instance could launch"), true
    end
    return array(), condition("True", M.CONDITION, "no capacityReservationSelectorTerms are set"), gates
  end
  local list, err, problems
  if c then
    list, err, problems = describe(c, c.region, terms)
  else
    err = cerr or { message = "no client" }
  end
  if err then
    local kept = previous(nodeclass)
    local message = ("%s: %s"):format(M.ACTION, tostring(err.message or err.code or err))
    if #kept > 0 then message = message .. ("; keeping the %d resolved before"):format(#kept) end
    return kept, condition("Unknown", M.ACTION .. "Failed", message), gates
  end
  if #list == 0 then
    local message = "CapacityReservationSelector did not match any active CapacityReservations"
    if #problems > 0 then message = message .. " (" .. table.concat(problems, "; ") .. ")" end
    if not gates then message = message .. "; launches use open capacity" end
    return list, condition("False", "CapacityReservationNotFound", message), gates
  end
  return list, condition("True", M.CONDITION), gates
end

-- Offerings and launches ---------------------------------------------------------------------------

-- The first reservation in status.capacityReservations with room for the type in the zone, or nil.
local function covering(nodeclass, instance_type, zone)
  local status = present(nodeclass.status) and nodeclass.status or {}
  local list = status.capacityReservations
  for _, r in ipairs((present(list) and type(list) == "table") and list or {}) do
    if type(r) == "table" and r.instanceType == instance_type and r.zoneID == zone and type(r.id) == "string"
        and (tonumber(r.available) or 0) > 0 then
      return r
    end
  end
  return nil
end

function M.apply(offers, name, nodeclass, vswitch_zones)
  local pref = M.preference(spec_of(nodeclass))
  if pref ~= "open" and pref ~= "target" then return end
  for _, o in ipairs(offers) do
    if o.capacity_type == "on-demand" then
      if covering(nodeclass, name, o.zone) then
        o.price = 0
        o.available = vswitch_zones[o.zone] == true
      elseif pref == "target" then
        o.available = false
      end
    end
  end
end

function M.pool_for(nodeclass, offering)
  local pref = M.preference(spec_of(nodeclass))
  if not pref or offering.capacity_type ~= "on-demand" then return nil end
  if pref == "none" then return { match_criteria = "None" } end
  local r = covering(nodeclass, offering.instance_type, offering.zone)
  if r then return { match_criteria = "Target", id = r.id } end
  return { match_criteria = "Open" }
end

local function describe_offering(offering)
  return ("%s in %s"):format(tostring(offering.instance_type), tostring(offering.zone))
end

-- The token of the Open retry: derived from the Target launch's, so a repeated create repeats both.
local function open_token(token)
  if type(token) ~= "string" then return token end
  return token:sub(1, MAX_TOKEN - 2) .. "-o"
end

function M.run(ctx, req, nodeclass, offering)
  local pref = M.preference(spec_of(nodeclass))
  local pool = M.pool_for(nodeclass, offering)
  if pref == "target" and pool and pool.match_criteria ~= "Target" then
    return nil, { code = "InsufficientCapacity", action = "RunInstances", message = ("RunInstances: not sent: %s "
      .. "has no capacity reservation with room and capacityReservationPreference is target")
      :format(describe_offering(offering)) }
  end
  req.private_pool = pool
  local inst, err = instances.run(ctx, req)
  if inst or not (pool and pool.match_criteria == "Target") or (err.api_code or err.code) ~= M.POOL_UNUSABLE then
    return inst, err
  end
  if pref == "target" then
    err.code = "InsufficientCapacity"
    return nil, err
  end
  log.info("capacity reservation cannot take the launch; launching from open capacity",
    { capacity_reservation = pool.id, instance_type = offering.instance_type, zone = offering.zone,
      request_id = err.request_id })
  req.private_pool = { match_criteria = "Open" }
  req.client_token = open_token(req.client_token)
  return instances.run(ctx, req)
end

return M
