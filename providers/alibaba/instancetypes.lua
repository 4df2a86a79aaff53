-- The instance types an ECSNodeClass can launch, with their offerings, capacity and overhead: what
-- the engine's GetInstanceTypes returns, in the shape `luaprov eval instance-types` prints.
--
-- Public:
--   list(ctx, nodeclass) -> {{name, requirements, offerings, capacity, overhead}} | nil, err
--
-- Where the numbers come from (all cached in luaprov.cache, so they survive hot reloads and a
-- repeat call makes no API call at all):
--   catalogue   DescribeInstanceTypes, paged by NextToken            1 h
--   zones       DescribeZones                                         1 h   (offerings.lua)
--   stock       DescribeAvailableResource, on-demand and spot         5 min (offerings.lua)
--   prices      DescribePrice / DescribeSpotPriceHistory, per type    30 min (pricing.lua)
-- The types are those DescribeAvailableResource lists for the region (sold out or not); each has
-- an offering for every zone of the region and both capacity types (offerings.lua, rule CP4 in
-- docs/contracts.md).
-- Capacity, overhead and requirements are computed on every call from those (capacity.lua,
-- requirements.lua): they depend on the ECSNodeClass (system disk, kubelet settings) and on
-- status.vSwitches (which zones can launch), which change without any API answer changing.
--
-- The CNI decides the pods formula (upstream asks ACK's DescribeClusterDetail for it, an API
-- this engine does not call). It is read from ctx.cni when the engine passes one, else from the
-- environment variable LUAPROV_ALIBABA_CNI ("terway-eniip", "terway-eni", "Flannel"; unset: 110
-- pods), and the VM memory overhead from VM_MEMORY_OVERHEAD_PERCENT (upstream's name, 0.065).
local luaprov = require "luaprov"
local capacity = require "providers.alibaba.capacity"
local offerings = require "providers.alibaba.offerings"
local pricing = require "providers.alibaba.pricing"
local requirements = require "providers.alibaba.requirements"
local reservations = require "providers.alibaba.reservations"
local session = require "providers.alibaba.session"
local shape = require "providers.alibaba.shape"

local json, log = luaprov.json, luaprov.log
local sort = table.sort

local M = {}

M.CATALOGUE_TTL = 60 * 60

local catalogue_cache = luaprov.cache.new("alibaba-instance-types", M.CATALOGUE_TTL)

-- Only the fields the mapping reads are kept: a region lists hundreds of types with ~60 fields
-- each, and the cache hands back a decoded copy on every call.
local FIELDS = {
  "InstanceTypeId", "CpuArchitecture", "CpuCoreCount", "MemorySize", "GPUAmount", "GPUSpec",
  "GPUMemorySize", "PhysicalProcessorModel", "EniQuantity", "EniPrivateIpAddressQuantity",
}

local function present(v)
  return v ~= nil and v ~= json.null
end

-- The client's messages already start with the action; `what` names the step otherwise.
local function fail(err, what)
  if type(err) ~= "table" then err = { code = "InvalidResponse", message = tostring(err) } end
  local step = err.action and "" or what .. ": "
  return nil, {
    code = err.code or "InvalidResponse",
    message = "listing instance types: " .. step .. tostring(err.message or err.code),
    api_code = err.api_code, -- the cloud's own code: the error's reason field
    action = err.action,
    request_id = err.request_id,
    http_status = err.http_status,
  }
end

-- Cache entries are per region and endpoint: the simulator and the real cloud never share one.
local function scope_of(ctx, region)
  return region .. "|" .. (ctx.endpoint or luaprov.env("LUAPROV_ALIBABA_ENDPOINT") or "")
end

local function catalogue(c, scope)
  local hit = catalogue_cache:get(scope)
  if hit then return hit end
  local items, err = c:paginate("ecs", "DescribeInstanceTypes", {},
    { list = "InstanceTypes.InstanceType", style = "NextToken" })
  if not items then return nil, err end
  local slim = setmetatable({}, json.array_mt)
  for _, item in ipairs(items) do
    if type(item) == "table" and type(item.InstanceTypeId) == "string" then
      local t = {}
      for _, f in ipairs(FIELDS) do
        if present(item[f]) then t[f] = item[f] end
      end
      slim[#slim + 1] = t
    end
  end
  sort(slim, function(a, b) return a.InstanceTypeId < b.InstanceTypeId end)
  catalogue_cache:set(scope, slim)
  return slim
end

local function settings_of(ctx)
  local pct = tonumber(luaprov.env("VM_MEMORY_OVERHEAD_PERCENT") or "")
  if not pct or pct < 0 or pct >= 1 then pct = capacity.DEFAULT_VM_OVERHEAD_PCT end
  return { cni = ctx.cni or luaprov.env("LUAPROV_ALIBABA_CNI"), vm_overhead_pct = pct }
end

local function vswitch_zones(nodeclass)
  local zones = {}
  local status = present(nodeclass.status) and nodeclass.status or {}
  for _, v in ipairs(present(status.vSwitches) and status.vSwitches or {}) do
    if type(v) == "table" and type(v.zoneID) == "string" then zones[v.zoneID] = true end
  end
  return zones
end

-- Spot prices only for types sold as spot (the history of the others is empty). Types that can
-- launch somewhere now come first, then by name, so which types a bounded round prices is the
-- same from one call to the next.
local function price_order(types, stock, zones)
  local wanted = {}
  for _, it in ipairs(types) do
    local name = it.InstanceTypeId
    wanted[#wanted + 1] = {
      name = name,
      launchable = offerings.any_available(name, stock, zones),
      spot = stock.spot[name] ~= nil,
    }
  end
  sort(wanted, function(a, b)
    if a.launchable ~= b.launchable then return a.launchable end
    return a.name < b.name
  end)
  return wanted
end

function M.list(ctx, nodeclass)
  ctx = ctx or {}
  if type(nodeclass) ~= "table" then error("instance_types: nodeclass must be a table", 2) end
  local normalized, nerr = shape.normalize(nodeclass)
  if not normalized then return nil, nerr end
  local spec = normalized.spec
  local c, cerr = session.client(ctx)
  if not c then return fail(cerr, "client") end
  local region = c.region
  local scope = scope_of(ctx, region)

  local all, err = catalogue(c, scope)
  if not all then return fail(err, "instance type catalogue") end
  local stock
  stock, err = offerings.stock(c, region, scope)
  if not stock then return fail(err, "availability") end

  -- DescribeInstanceTypes lists the types of every region; a type this region's
  -- DescribeAvailableResource never mentions (not even sold out) has no zone here, so no offering
  -- to emit: it is left out, as upstream drops types without offerings. Sold-out types are listed
  -- by the API (WithoutStock, ClosedWithoutStock) and keep all their offerings.
  local settings = settings_of(ctx)
  local types = {}
  for _, it in ipairs(all) do
    local name = it.InstanceTypeId
    local sold_here = stock["on-demand"][name] ~= nil or stock.spot[name] ~= nil
    if sold_here and capacity.keep_for_cni(it, settings.cni) then types[#types + 1] = it end
  end
  local zones = vswitch_zones(nodeclass)
  if next(zones) == nil then
    log.warn("ECSNodeClass has no vSwitches in its status: every offering is unavailable",
      { nodeclass = present(nodeclass.metadata) and nodeclass.metadata.name or nil })
  end

  local prices, stats = pricing.fill(c, region, scope, price_order(types, stock, zones))
  if stats.skipped > 0 then
    log.info("alibaba prices pending", { priced_now = stats.calls, cached = stats.cached, pending = stats.skipped })
  end

  local result = setmetatable({}, json.array_mt)
  local shared = {}
  for _, it in ipairs(types) do
    local name = it.InstanceTypeId
    local offers = offerings.build(name, stock, zones, prices[name], shared)
    reservations.apply(offers, name, normalized, zones) -- reserved capacity first (or only)
    local cap = capacity.capacity(it, spec, settings)
    result[#result + 1] = {
      name = name,
      requirements = requirements.for_type(it, region, offers),
      offerings = offers,
      capacity = cap,
      overhead = capacity.overhead(it, cap, spec.kubelet),
    }
  end
  return result
end

return M
