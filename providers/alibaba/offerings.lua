-- Where an instance type can run and whether it is in stock: the zones of the region
-- (DescribeZones) and the stock per type, zone and capacity type (DescribeAvailableResource, once
-- for on-demand and once for spot), turned into offerings as the upstream provider
-- builds them.
--
-- Public:
--   stock(c, region, scope) -> {zones = {zone...}, ["on-demand"] = {type = {zone = bool}}, spot = ...} | nil, err
--   build(name, stock, vswitch_zones, prices, shared) -> offerings
--   any_available(name, stock, vswitch_zones) -> bool
--   CAPACITY_TYPES = {"on-demand", "spot"}
--
-- Rule CP4 (docs/contracts.md): a type has one offering for EVERY known (zone, capacity type), with
-- available = false when it is sold out there, not sold there at all, or the zone has no vSwitch of
-- the ECSNodeClass.
-- Dropping offerings instead would make Karpenter see running nodes' types vanish (InstanceTypeNotFound).
local luaprov = require "luaprov"
local requirements = require "providers.alibaba.requirements"

local json = luaprov.json
local sort = table.sort

local M = {}

M.CAPACITY_TYPES = { "on-demand", "spot" }
M.ZONES_TTL = 60 * 60
M.STOCK_TTL = 5 * 60

local zones_cache = luaprov.cache.new("alibaba-zones", M.ZONES_TTL)
local stock_cache = luaprov.cache.new("alibaba-stock", M.STOCK_TTL)

-- WithStock and ClosedWithStock can be bought (the latter is low supply); WithoutStock and
-- ClosedWithoutStock cannot. An answer with Status but no StatusCategory falls back to Status.
local SELLABLE = { WithStock = true, ClosedWithStock = true }

local function present(v)
  return v ~= nil and v ~= json.null
end

local function list_at(node, a, b)
  node = present(node) and node[a]
  node = present(node) and node[b]
  return type(node) == "table" and node or {}
end

local function sellable(x)
  if present(x.StatusCategory) then return SELLABLE[x.StatusCategory] == true end
  if present(x.Status) then return x.Status == "Available" end
  return true
end

-- type -> zone -> in stock. A type listed in a zone with no stock is still recorded (false): the
-- zone is known for it.
local function parse_stock(body, zones)
  local by_type = {}
  for _, z in ipairs(list_at(body, "AvailableZones", "AvailableZone")) do
    local zone = type(z) == "table" and z.ZoneId
    if type(zone) == "string" then
      zones[zone] = true
      local zone_ok = sellable(z)
      for _, r in ipairs(list_at(z, "AvailableResources", "AvailableResource")) do
        if type(r) == "table" and (not present(r.Type) or r.Type == "InstanceType") then
          for _, s in ipairs(list_at(r, "SupportedResources", "SupportedResource")) do
            if type(s) == "table" and type(s.Value) == "string" then
              local t = by_type[s.Value] or {}
              by_type[s.Value] = t
              t[zone] = (t[zone] or false) or (zone_ok and sellable(s))
            end
          end
        end
      end
    end
  end
  return by_type
end

local function region_zones(c, region, scope)
  local hit = zones_cache:get(scope)
  if hit then return hit end
  local body, err = c:call("ecs", "DescribeZones", { RegionId = region, Verbose = false })
  if not body then return nil, err end
  local zones = setmetatable({}, json.array_mt)
  for _, z in ipairs(list_at(body, "Zones", "Zone")) do
    if type(z) == "table" and type(z.ZoneId) == "string" then zones[#zones + 1] = z.ZoneId end
  end
  zones_cache:set(scope, zones)
  return zones
end

local function fetch_stock(c, region, capacity_type, zones)
  local params = { RegionId = region, DestinationResource = "InstanceType", InstanceChargeType = "PostPaid" }
  if capacity_type == "spot" then params.SpotStrategy = "SpotAsPriceGo" end
  local body, err = c:call("ecs", "DescribeAvailableResource", params)
  if not body then return nil, err end
  return parse_stock(body, zones)
end

function M.stock(c, region, scope)
  local hit = stock_cache:get(scope)
  if hit then return hit end
  local known, err = region_zones(c, region, scope)
  if not known then return nil, err end
  local zones = {}
  for _, z in ipairs(known) do zones[z] = true end
  local result = {}
  for _, ct in ipairs(M.CAPACITY_TYPES) do
    result[ct], err = fetch_stock(c, region, ct, zones)
    if not result[ct] then return nil, err end
  end
  local list = {}
  for z in pairs(zones) do list[#list + 1] = z end
  sort(list)
  result.zones = setmetatable(list, json.array_mt)
  stock_cache:set(scope, result)
  return result
end

-- One offering per (zone, capacity type), zones in order then on-demand before spot. The
-- offering requirements are shared between types of one list (they are equal, and the result is
-- only ever encoded): at a thousand types and eight offerings each that saves tens of thousands
-- of tables under the generation's memory cap.
function M.build(name, stock, vswitch_zones, prices, shared)
  local offerings = setmetatable({}, json.array_mt)
  local price = prices or {}
  for _, zone in ipairs(stock.zones) do
    for _, ct in ipairs(M.CAPACITY_TYPES) do
      local in_stock = stock[ct][name] and stock[ct][name][zone] or false
      local key = zone .. "|" .. ct
      local reqs = shared[key]
      if not reqs then
        reqs = requirements.for_offering(zone, ct)
        shared[key] = reqs
      end
      local p
      if ct == "on-demand" then p = price.od else p = price.spot and price.spot[zone] end
      offerings[#offerings + 1] = {
        zone = zone,
        capacity_type = ct,
        price = p,
        available = in_stock and vswitch_zones[zone] == true,
        requirements = reqs,
      }
    end
  end
  return offerings
end

-- Whether any offering of the type could launch now (used to order price fetches).
function M.any_available(name, stock, vswitch_zones)
  for _, ct in ipairs(M.CAPACITY_TYPES) do
    for zone, ok in pairs(stock[ct][name] or {}) do
      if ok and vswitch_zones[zone] then return true end
    end
  end
  return false
end

return M
