-- The simulated region's catalogue: zones, instance types, prices and stock.
-- Deterministic: the default catalogue is fixed data, and the synthetic one (generate) derives every
-- choice from a hash of names, so two runs with the same size answer byte for byte the same.
--
-- Stock is per (instance type, zone, capacity type) with the values of DescribeAvailableResource's
-- StatusCategory: WithStock, ClosedWithStock (low, still sold), WithoutStock, ClosedWithoutStock.
-- Out-of-stock faults (faults.lua) are stock state too, so they are kept here (add_sold_out).
local luaprov = require "luaprov"

local sha256_hex = luaprov.crypto.sha256_hex

local M = {}

M.REGION = "cn-hangzhou"
M.REGION_NAME = { ["zh-CN"] = "华东 1（杭州）", ["en-US"] = "China (Hangzhou)" }
M.CAPACITY_TYPES = { "on-demand", "spot" }

-- A stable 32-bit hash for deterministic "random" choices (Lua's math.random is seeded per process,
-- and its sequence depends on call order). SHA-256 runs in C: a synthetic catalogue hashes a few
-- hundred thousand names, which a byte loop in Lua would spend the call's instruction budget on.
local function hash(s)
  return tonumber(sha256_hex(s):sub(1, 8), 16)
end
M.hash = hash

local function round(x, digits)
  local m = 10 ^ digits
  return math.floor(x * m + 0.5) / m
end

local SIZE_CPUS = {
  large = 2, xlarge = 4, ["2xlarge"] = 8, ["3xlarge"] = 12, ["4xlarge"] = 16, ["6xlarge"] = 24,
  ["8xlarge"] = 32, ["12xlarge"] = 48, ["16xlarge"] = 64,
}

local ZONE_LETTERS = { "h", "i", "j", "k", "b", "e", "f", "g", "l", "m", "n", "p", "q", "r", "s", "t" }
local DEFAULT_ZONES = 4

-- Families of the default catalogue. `ratio` is GiB per vCPU; `zones` (letters) limits where the family
-- is sold (GPUs and local-SSD types are not everywhere); `price` scales the per-vCPU/GiB base price;
-- `gen8` families take ESSD-class system disks only, as 8th-generation types do.
local INTEL_ICE = "Intel Xeon(Ice Lake) Platinum 8369B"
local INTEL_SPR = "Intel Xeon(Sapphire Rapids) Platinum 8475B"
local INTEL_CLX = "Intel Xeon(Cascade Lake) Platinum 8269CY"
local YITIAN = "Yitian 710"
local FAMILIES = {
  { family = "ecs.g7", category = "General-purpose", model = INTEL_ICE, ghz = 2.7, turbo = 3.5, ratio = 4,
    sizes = { "large", "xlarge", "2xlarge", "3xlarge", "4xlarge", "6xlarge", "8xlarge", "16xlarge" } },
  { family = "ecs.c7", category = "Compute-optimized", model = INTEL_ICE, ghz = 2.7, turbo = 3.5, ratio = 2,
    sizes = { "large", "xlarge", "2xlarge", "4xlarge", "8xlarge" } },
  { family = "ecs.r7", category = "Memory-optimized", model = INTEL_ICE, ghz = 2.7, turbo = 3.5, ratio = 8,
    sizes = { "large", "xlarge", "2xlarge", "4xlarge" } },
  { family = "ecs.g8i", category = "General-purpose", model = INTEL_SPR, ghz = 2.7, turbo = 3.2, ratio = 4,
    price = 1.05, gen8 = true, sizes = { "large", "xlarge", "2xlarge", "4xlarge", "8xlarge" } },
  { family = "ecs.c8i", category = "Compute-optimized", model = INTEL_SPR, ghz = 2.7, turbo = 3.2, ratio = 2,
    price = 1.05, gen8 = true, sizes = { "large", "xlarge", "2xlarge", "4xlarge" } },
  { family = "ecs.g8a", category = "General-purpose", model = "AMD EPYC Genoa 9T24", ghz = 2.7, turbo = 3.7,
    ratio = 4, price = 0.9, gen8 = true, sizes = { "large", "xlarge", "2xlarge", "4xlarge" } },
  { family = "ecs.g8y", category = "General-purpose", model = YITIAN, ghz = 2.75, turbo = 2.75, ratio = 4,
    arch = "ARM", price = 0.85, gen8 = true, sizes = { "large", "xlarge", "2xlarge", "4xlarge", "8xlarge" } },
  { family = "ecs.c8y", category = "Compute-optimized", model = YITIAN, ghz = 2.75, turbo = 2.75, ratio = 2,
    arch = "ARM", price = 0.85, gen8 = true, sizes = { "large", "xlarge", "2xlarge", "4xlarge" } },
  { family = "ecs.r8y", category = "Memory-optimized", model = YITIAN, ghz = 2.75, turbo = 2.75, ratio = 8,
    arch = "ARM", price = 0.85, gen8 = true, sizes = { "large", "xlarge", "2xlarge" } },
  { family = "ecs.hfc7", category = "High Clock Speed", model = "Intel Xeon(Cooper Lake) Platinum 8369HC",
    ghz = 3.3, turbo = 3.8, ratio = 2, price = 1.2, zones = "hij",
    sizes = { "large", "xlarge", "2xlarge", "4xlarge" } },
  { family = "ecs.g6", category = "General-purpose", model = INTEL_CLX, ghz = 2.5, turbo = 3.2, ratio = 4,
    price = 0.95, sizes = { "large", "xlarge", "2xlarge" } },
  { family = "ecs.i3", category = "Local SSDs", model = INTEL_ICE, ghz = 2.7, turbo = 3.5, ratio = 8, price = 1.1,
    zones = "hi", local_disk = { category = "local_nvme_ssd", gib_per_vcpu = 447 }, sizes = { "xlarge", "2xlarge" } },
  -- GPU and burstable families have irregular shapes, so their sizes are spelled out: {name, vCPU, GiB, GPUs}.
  { family = "ecs.gn6i", category = "GPU-accelerated", model = INTEL_CLX, ghz = 2.5, turbo = 3.2, zones = "hij",
    gpu = { spec = "NVIDIA T4", memory = 16, price = 6.2 },
    shapes = { { "ecs.gn6i-c4g1.xlarge", 4, 15, 1 }, { "ecs.gn6i-c8g1.2xlarge", 8, 31, 1 },
      { "ecs.gn6i-c16g1.4xlarge", 16, 62, 1 }, { "ecs.gn6i-c24g1.6xlarge", 24, 93, 1 },
      { "ecs.gn6i-c24g1.12xlarge", 48, 186, 2 } } },
  { family = "ecs.gn7i", category = "GPU-accelerated", model = INTEL_ICE, ghz = 2.9, turbo = 3.5, zones = "hik",
    gpu = { spec = "NVIDIA A10", memory = 24, price = 9.8 },
    shapes = { { "ecs.gn7i-c8g1.2xlarge", 8, 30, 1 }, { "ecs.gn7i-c16g1.4xlarge", 16, 60, 1 },
      { "ecs.gn7i-c32g1.8xlarge", 32, 188, 1 }, { "ecs.gn7i-c32g1.16xlarge", 64, 376, 2 } } },
  { family = "ecs.t6", category = "Shared", model = "Intel Xeon(Skylake) Platinum 8163", ghz = 2.5, turbo = 3.1,
    price = 0.4, burstable = true,
    shapes = { { "ecs.t6-c2m1.large", 2, 1 }, { "ecs.t6-c1m1.large", 2, 2 }, { "ecs.t6-c1m2.large", 2, 4 },
      { "ecs.t6-c1m4.large", 2, 8 }, { "ecs.t6-c1m4.xlarge", 4, 16 } } },
}

-- Fixed stock exceptions of the default catalogue (documented in docs/sim.md): sold out, low, or
-- sold out and never restocked. `capacity` nil means both capacity types.
local STOCK_EXCEPTIONS = {
  { "ecs.g7.16xlarge", "cn-hangzhou-h", nil, "WithoutStock" },
  { "ecs.gn7i-c8g1.2xlarge", "cn-hangzhou-i", "spot", "WithoutStock" },
  { "ecs.gn6i-c4g1.xlarge", "cn-hangzhou-h", "spot", "WithoutStock" },
  { "ecs.c8y.4xlarge", "cn-hangzhou-j", "on-demand", "ClosedWithoutStock" },
  { "ecs.r7.4xlarge", "cn-hangzhou-k", "spot", "WithoutStock" },
  { "ecs.g7.large", "cn-hangzhou-j", nil, "ClosedWithStock" },
}

-- ENIs and private IPs per ENI grow with the size, as on the real 7th/8th-generation families.
local function eni_spec(cpus, burstable)
  if burstable then return 2, cpus <= 2 and 2 or 6 end
  if cpus <= 2 then return 3, 6 end
  if cpus <= 8 then return 4, 15 end
  if cpus <= 12 then return 8, 15 end
  return 8, 30
end

local function system_disks(fam)
  if fam.gen8 then return { "cloud_essd", "cloud_auto", "cloud_essd_entry" } end
  return { "cloud_essd", "cloud_auto", "cloud_essd_entry", "cloud_ssd", "cloud_efficiency" }
end

-- CNY per hour: per-vCPU plus per-GiB base, scaled by family; GPUs carry their own price.
local function on_demand_price(fam, cpus, gib, gpus)
  local p = (cpus * 0.12 + gib * 0.03) * (fam.price or 1)
  if fam.gpu then p = p + gpus * fam.gpu.price end
  if fam.local_disk then p = p + cpus * 0.05 end
  return round(p, 3)
end

-- The DescribeInstanceTypes record, built once per type: the wire shape is what every call returns.
local function api_record(t, fam)
  local eni, ips = eni_spec(t.cpu, fam.burstable)
  local arm = t.arch == "ARM"
  local bandwidth = math.min(t.cpu * 1000000, 32000000)  -- kbit/s: about 1 Gbit/s per vCPU, capped
  local queues = math.min(math.max(t.cpu // 2, 2), 32)
  local rec = {
    InstanceTypeId = t.id,
    InstanceTypeFamily = t.family,
    InstanceCategory = fam.category,
    InstanceFamilyLevel = fam.burstable and "CreditEntryLevel" or "EnterpriseLevel",
    CpuCoreCount = t.cpu,
    MemorySize = t.memory,
    CpuArchitecture = t.arch,
    PhysicalProcessorModel = fam.model,
    CpuSpeedFrequency = fam.ghz,
    CpuTurboFrequency = fam.turbo,
    GPUAmount = t.gpu,
    GPUSpec = t.gpu_spec,
    GPUMemorySize = t.gpu_memory,
    EniQuantity = eni,
    EniPrivateIpAddressQuantity = ips,
    EniIpv6AddressQuantity = ips,
    EniTotalQuantity = fam.burstable and eni or eni + (t.cpu >= 4 and 12 or 3),
    EniTrunkSupported = not fam.burstable,
    EriQuantity = 0,
    DiskQuantity = fam.burstable and 9 or 17,
    LocalStorageAmount = t.local_amount,
    LocalStorageCapacity = t.local_capacity,
    LocalStorageCategory = t.local_category,
    InstanceBandwidthRx = bandwidth,
    InstanceBandwidthTx = bandwidth,
    InstancePpsRx = math.min(t.cpu * 150000, 24000000),
    InstancePpsTx = math.min(t.cpu * 150000, 24000000),
    PrimaryEniQueueNumber = queues,
    SecondaryEniQueueNumber = math.min(queues, 8),
    MaximumQueueNumberPerEni = queues,
    TotalEniQueueQuantity = queues * eni,
    QueuePairNumber = queues,
    NvmeSupport = fam.gen8 and "required" or "unsupported",
    JumboFrameSupport = not fam.burstable,
    NetworkCardQuantity = 1,
    NetworkCards = { NetworkCardInfo = { { NetworkCardIndex = 0 } } },
    SupportedBootModes = { SupportedBootMode = arm and { "UEFI" } or { "BIOS", "UEFI" } },
    CpuOptions = { Core = arm and t.cpu or math.max(t.cpu // 2, 1), ThreadsPerCore = arm and 1 or 2,
      SupportedTopologyTypes = { SupportedTopologyType = { "DiscreteCoreToHyperThreadMapping" } } },
  }
  if fam.burstable then
    rec.BaselineCredit = t.cpu * 10
    rec.InitialCredit = t.cpu * 30
  end
  return rec
end

-- Catalogue state: replaced wholesale by reset/generate.
local cat

local function new_catalogue(nzones)
  local zones = {}
  for i = 1, nzones do
    local letter = ZONE_LETTERS[i] or ("z" .. i)
    zones[i] = { id = M.REGION .. "-" .. letter, letter = letter,
      local_name = { ["zh-CN"] = "华东 1 可用区 " .. letter:upper(), ["en-US"] = "Hangzhou Zone " .. letter:upper() } }
  end
  local by_id = {}
  for _, z in ipairs(zones) do by_id[z.id] = z end
  return { zones = zones, zone_by_id = by_id, types = {}, type_by_id = {}, stock = {}, sold_out = {} }
end

local function add_type(c, fam, spec, zone_filter)
  local t = {
    id = spec.id, family = fam.family, cpu = spec.cpu, memory = spec.memory, arch = fam.arch or "X86",
    gpu = spec.gpu or 0, gpu_spec = fam.gpu and spec.gpu and spec.gpu > 0 and fam.gpu.spec or "",
    gpu_memory = fam.gpu and spec.gpu and spec.gpu > 0 and fam.gpu.memory or 0,
    local_amount = 0, local_capacity = 0, local_category = "",
    system_disks = system_disks(fam), burstable = fam.burstable or false, zones = {},
  }
  if fam.local_disk then
    local d = fam.local_disk
    t.local_amount, t.local_capacity, t.local_category = 1, spec.cpu * d.gib_per_vcpu, d.category
  end
  t.price = on_demand_price(fam, t.cpu, t.memory, t.gpu)
  for _, z in ipairs(c.zones) do
    if zone_filter(t, z) then t.zones[z.id] = true end
  end
  t.api = api_record(t, fam)
  c.types[#c.types + 1] = t
  c.type_by_id[t.id] = t
  return t
end

local function family_specs(fam)
  local specs = {}
  if fam.shapes then
    for i, s in ipairs(fam.shapes) do specs[i] = { id = s[1], cpu = s[2], memory = s[3], gpu = s[4] } end
  else
    for i, size in ipairs(fam.sizes) do
      local cpu = SIZE_CPUS[size]
      specs[i] = { id = fam.family .. "." .. size, cpu = cpu, memory = cpu * fam.ratio }
    end
  end
  return specs
end

local function by_id(a, b) return a.id < b.id end

local function default_zone_filter(fam)
  return function(_, z)
    return fam.zones == nil or fam.zones:find(z.letter, 1, true) ~= nil
  end
end

-- The default catalogue: 4 zones, the families above, the fixed stock exceptions.
local function default_catalogue()
  local c = new_catalogue(DEFAULT_ZONES)
  for _, fam in ipairs(FAMILIES) do
    for _, spec in ipairs(family_specs(fam)) do add_type(c, fam, spec, default_zone_filter(fam)) end
  end
  table.sort(c.types, by_id)
  for _, e in ipairs(STOCK_EXCEPTIONS) do
    for _, ct in ipairs(M.CAPACITY_TYPES) do
      if e[3] == nil or e[3] == ct then c.stock[e[1] .. "|" .. e[2] .. "|" .. ct] = e[4] end
    end
  end
  c.synthetic = false
  return c
end

--- reset(): back to the default catalogue, with no sold-out faults.
function M.reset()
  cat = default_catalogue()
end

-- Synthetic families reuse the shapes of the regular families under new names that still parse like
-- real ones (ecs.<letters><generation>.<size>), so label computations behave the same.
local SYNTHETIC_SIZES = { "large", "xlarge", "2xlarge", "3xlarge", "4xlarge", "6xlarge", "8xlarge", "16xlarge" }
local SYNTHETIC_PREFIXES = { "g", "c", "r", "gs", "cs", "rs", "ge", "ce" }

--- generate(n_types, n_zones): a larger catalogue for benchmarks. The default types come first (so ARM,
-- GPU and sold-out types stay present while n_types >= their count), then synthetic families; stock
-- comes from a hash: about 10% of (type, zone) pairs not sold, 4% sold out, 3% low.
function M.generate(n_types, n_zones)
  -- Built aside and swapped in at the end: a call that fails half way (over budget) leaves the old
  -- catalogue whole, never a half-built, unsorted one that pagination would loop on.
  local base = default_catalogue()
  local out = new_catalogue(n_zones)
  local function hashed_filter(t, z)
    return hash(t.id .. "@" .. z.id) % 10 ~= 0
  end
  for _, t in ipairs(base.types) do
    if #out.types >= n_types then break end
    local fam
    for _, f in ipairs(FAMILIES) do
      if f.family == t.family then fam = f break end
    end
    local spec = { id = t.id, cpu = t.cpu, memory = t.memory, gpu = t.gpu }
    add_type(out, fam, spec, function(tt, z)
      -- the default zones keep their default placement; extra zones sell what the hash says
      if base.zone_by_id[z.id] then return base.type_by_id[tt.id].zones[z.id] == true end
      return hashed_filter(tt, z)
    end)
  end
  for key, status in pairs(base.stock) do
    if out.type_by_id[key:match("^[^|]+")] then out.stock[key] = status end
  end
  local generation = 9
  while #out.types < n_types do
    for p, prefix in ipairs(SYNTHETIC_PREFIXES) do
      local fam = { family = "ecs." .. prefix .. generation, category = "General-purpose", model = INTEL_SPR,
        ghz = 2.9, turbo = 3.6, ratio = ({ 4, 2, 8 })[(p - 1) % 3 + 1], price = 1 + (p % 4) / 20,
        arch = p % 4 == 0 and "ARM" or nil, gen8 = true }
      for _, size in ipairs(SYNTHETIC_SIZES) do
        if #out.types >= n_types then break end
        local cpu = SIZE_CPUS[size]
        add_type(out, fam, { id = fam.family .. "." .. size, cpu = cpu, memory = cpu * fam.ratio }, hashed_filter)
      end
      if #out.types >= n_types then break end
    end
    generation = generation + 1
  end
  table.sort(out.types, by_id)
  for _, t in ipairs(out.types) do
    for _, z in ipairs(out.zones) do
      for _, ct in ipairs(M.CAPACITY_TYPES) do
        local key = t.id .. "|" .. z.id .. "|" .. ct
        if not out.stock[key] and (not base.zone_by_id[z.id] or not base.type_by_id[t.id]) then
          local h = hash(key) % 100
          if h < 4 then out.stock[key] = "WithoutStock" elseif h < 7 then out.stock[key] = "ClosedWithStock" end
        end
      end
    end
  end
  out.synthetic = true
  cat = out
end

--- zones() -> list of {id, letter, local_name = {lang = name}} in catalogue order.
function M.zones() return cat.zones end
function M.zone(id) return cat.zone_by_id[id] end

--- types() -> all instance types sorted by id; type(id) -> one or nil.
function M.types() return cat.types end
function M.type(id) return cat.type_by_id[id] end

--- offered(type, zone_id) -> whether the type is sold in the zone at all.
function M.offered(t, zone_id)
  return t.zones[zone_id] == true
end

local function sold_out_by_fault(type_id, zone_id, capacity)
  for _, r in ipairs(cat.sold_out) do
    if (r.instance_type == nil or r.instance_type == type_id) and (r.zone == nil or r.zone == zone_id)
      and (r.capacity_type == nil or r.capacity_type == capacity) then
      return true
    end
  end
  return false
end

--- stock(type, zone_id, capacity) -> StatusCategory, or nil when the type is not sold in the zone.
-- capacity is "on-demand" or "spot".
function M.stock(t, zone_id, capacity)
  if not t.zones[zone_id] then return nil end
  if sold_out_by_fault(t.id, zone_id, capacity) then return "WithoutStock" end
  return cat.stock[t.id .. "|" .. zone_id .. "|" .. capacity] or "WithStock"
end

--- has_stock(category) -> whether a StatusCategory can be bought (WithStock, ClosedWithStock).
function M.has_stock(category)
  return category == "WithStock" or category == "ClosedWithStock"
end

--- zone_sold_out(zone_id, capacity) -> true when a fault sold out the whole zone.
function M.zone_sold_out(zone_id, capacity)
  for _, r in ipairs(cat.sold_out) do
    if r.instance_type == nil and (r.zone == nil or r.zone == zone_id)
      and (r.capacity_type == nil or r.capacity_type == capacity) then
      return true
    end
  end
  return false
end

--- add_sold_out{zone, instance_type, capacity_type}: any field nil matches everything.
function M.add_sold_out(rule)
  cat.sold_out[#cat.sold_out + 1] = rule
end

function M.clear_sold_out()
  cat.sold_out = {}
end

--- on_demand_price(type) -> CNY per hour.
function M.on_demand_price(t)
  return t.price
end

--- spot_price(type, zone_id, t) -> CNY per hour at simulated time t: 12-36% of the on-demand price
-- depending on (type, zone), moving by up to +-5% from one hour to the next.
function M.spot_price(t, zone_id, at)
  local base = 0.12 + (hash(t.id .. "|" .. zone_id) % 25) / 100
  local hour = math.floor(at / 3600)
  local wobble = ((hash(t.id .. "|" .. zone_id .. "|" .. hour) % 101) - 50) / 1000
  return round(t.price * base * (1 + wobble), 4)
end

--- summary() -> plain table for the admin paths.
function M.summary()
  local arm, gpu, sold_out = 0, 0, {}
  for _, t in ipairs(cat.types) do
    if t.arch == "ARM" then arm = arm + 1 end
    if t.gpu > 0 then gpu = gpu + 1 end
  end
  local zone_ids = {}
  for i, z in ipairs(cat.zones) do zone_ids[i] = z.id end
  for key, status in pairs(cat.stock) do
    if not M.has_stock(status) then sold_out[#sold_out + 1] = key .. "=" .. status end
  end
  table.sort(sold_out)
  local count = #sold_out
  for i = count, 101, -1 do sold_out[i] = nil end  -- a synthetic catalogue has hundreds: show the first 100
  return { region = M.REGION, zones = zone_ids, instance_types = #cat.types, arm_types = arm, gpu_types = gpu,
    sold_out = sold_out, sold_out_count = count, sold_out_faults = #cat.sold_out, synthetic = cat.synthetic }
end

M.reset()

return M
