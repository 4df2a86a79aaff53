-- ECS (2014-05-26) read actions over the catalogue and the account: regions, zones, instance types,
-- availability, prices, images and security groups. Instance actions are in instances.lua.
-- Each action takes the parsed call and returns the response body (RequestId is added by the caller);
-- invalid input raises through wire.fail with the real API's code.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local account = require "sim.alibaba.account"
local catalogue = require "sim.alibaba.catalogue"
local state = require "sim.alibaba.state"
local wire = require "sim.alibaba.wire"

local list = wire.list

local M = {}

--- region(p[, required]) -> the RegionId, checked: this simulator serves one region.
function M.region(p, optional)
  local region = optional and wire.str(p, "RegionId", catalogue.REGION) or wire.required(p, "RegionId")
  if region ~= catalogue.REGION then
    wire.fail(404, "InvalidRegionId.NotFound", ("The specified RegionId does not exist. (The simulator serves %s.)")
      :format(catalogue.REGION))
  end
  return region
end

--- ecs_tags(map) -> Tags.Tag[] in ECS's spelling (TagKey/TagValue), or nil when there are none, as the
-- API leaves the container out.
function M.ecs_tags(map)
  local keys = {}
  for k in pairs(map) do keys[#keys + 1] = k end
  if #keys == 0 then return nil end
  table.sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = { TagKey = k, TagValue = map[k] } end
  return { Tag = list(out) }
end

-- SpotStrategy / InstanceChargeType -> "spot" | "on-demand".
local function capacity_of(p)
  local spot = wire.one_of(p, "SpotStrategy", "NoSpot", "NoSpot", "SpotAsPriceGo", "SpotWithPriceLimit")
  wire.one_of(p, "InstanceChargeType", "PostPaid", "PostPaid", "PrePaid")
  return spot == "NoSpot" and "on-demand" or "spot"
end
M.capacity_of = capacity_of

local function language(p)
  return wire.one_of(p, "AcceptLanguage", "zh-CN", "zh-CN", "en-US", "ja") == "en-US" and "en-US" or "zh-CN"
end

function M.DescribeRegions(call)
  local lang = language(call.params)
  return { Regions = { Region = list({ { RegionId = catalogue.REGION, LocalName = catalogue.REGION_NAME[lang],
    RegionEndpoint = wire.HOSTS.ecs, Status = "available" } }) } }
end

function M.DescribeZones(call)
  local p = call.params
  M.region(p)
  local lang = language(p)
  local capacity = capacity_of(p)
  local verbose = wire.bool(p, "Verbose", true)
  local zones = {}
  for _, z in ipairs(catalogue.zones()) do
    local zone = { ZoneId = z.id, LocalName = z.local_name[lang], ZoneType = "AvailabilityZone",
      AvailableResourceCreation = { ResourceTypes = list({ "VSwitch", "IoOptimized", "Instance", "Disk" }) },
      AvailableDiskCategories = { DiskCategories = list({ "cloud_essd", "cloud_auto", "cloud_essd_entry",
        "cloud_ssd", "cloud_efficiency" }) },
      AvailableVolumeCategories = { VolumeCategories = list({ "san_ssd", "san_efficiency" }) } }
    if verbose then
      local names, families, seen = {}, {}, {}
      for _, t in ipairs(catalogue.types()) do
        local stock = catalogue.stock(t, z.id, capacity)
        if stock and catalogue.has_stock(stock) then
          names[#names + 1] = t.id
          if not seen[t.family] then seen[t.family] = true families[#families + 1] = t.family end
        end
      end
      zone.AvailableInstanceTypes = { InstanceTypes = list(names) }
      -- Inner arrays start with a lowercase letter on the real API ("supportedInstanceType").
      zone.AvailableResources = { ResourcesInfo = list({ {
        IoOptimized = true,
        InstanceTypes = { supportedInstanceType = list(names) },
        InstanceTypeFamilies = { supportedInstanceTypeFamily = list(families) },
        InstanceGenerations = { supportedInstanceGeneration = list({ "ecs-3", "ecs-4", "ecs-5", "ecs-6" }) },
        NetworkTypes = { supportedNetworkCategory = list({ "vpc" }) },
        SystemDiskCategories = { supportedSystemDiskCategory = list({ "cloud_essd", "cloud_auto", "cloud_ssd",
          "cloud_efficiency", "cloud_essd_entry" }) },
        DataDiskCategories = { supportedDataDiskCategory = list({ "cloud_essd", "cloud_auto", "cloud_ssd",
          "cloud_efficiency", "cloud_essd_entry" }) },
      } }) }
    end
    zones[#zones + 1] = zone
  end
  return { Zones = { Zone = list(zones) } }
end

-- DescribeInstanceTypes filters: each returns true when the type passes.
local function type_filter(p)
  local names = wire.repeated(p, "InstanceTypes", 10)
  local families = wire.repeated(p, "InstanceTypeFamilies")
  local family = wire.str(p, "InstanceTypeFamily")
  if family then families[#families + 1] = family end
  local archs = wire.repeated(p, "CpuArchitectures")
  local arch = wire.str(p, "CpuArchitecture")
  if arch then archs[#archs + 1] = arch end
  local function set(values)
    if #values == 0 then return nil end
    local s = {}
    for _, v in ipairs(values) do s[v] = true end
    return s
  end
  local want_names, want_families, want_archs = set(names), set(families), set(archs)
  local gpu_spec, category = wire.str(p, "GPUSpec"), wire.str(p, "InstanceCategory")
  local level = wire.str(p, "InstanceFamilyLevel")
  local ranges = {}
  for _, r in ipairs({ { "CpuCoreCount", "CpuCoreCount" }, { "MemorySize", "MemorySize" },
    { "GPUAmount", "GPUAmount" }, { "EniQuantity", "EniQuantity" },
    { "EniPrivateIpAddressQuantity", "EniPrivateIpAddressQuantity" } }) do
    ranges[#ranges + 1] = { field = r[2], min = wire.number(p, "Minimum" .. r[1]),
      max = wire.number(p, "Maximum" .. r[1]) }
  end
  return function(t)
    local a = t.api
    if want_names and not want_names[t.id] then return false end
    if want_families and not want_families[t.family] then return false end
    if want_archs and not want_archs[t.arch] then return false end
    if gpu_spec and a.GPUSpec ~= gpu_spec then return false end
    if category and a.InstanceCategory ~= category then return false end
    if level and a.InstanceFamilyLevel ~= level then return false end
    for _, r in ipairs(ranges) do
      if (r.min and a[r.field] < r.min) or (r.max and a[r.field] > r.max) then return false end
    end
    return true
  end
end

local function type_key(t) return t.id end

function M.DescribeInstanceTypes(call)
  local p = call.params
  local keep = type_filter(p)
  local matched = {}
  for _, t in ipairs(catalogue.types()) do
    if keep(t) then matched[#matched + 1] = t end
  end
  -- At most 100 per page since November 2023, and only the first page without NextToken.
  local page, next_token = wire.page_by_token(matched, p, type_key, 100, 100)
  local out = {}
  for i, t in ipairs(page) do out[i] = t.api end
  return { NextToken = next_token, InstanceTypes = { InstanceType = list(out) } }
end

function M.DescribeInstanceTypeFamilies(call)
  M.region(call.params)
  local seen, out = {}, {}
  for _, t in ipairs(catalogue.types()) do
    if not seen[t.family] then
      seen[t.family] = true
      out[#out + 1] = { InstanceTypeFamilyId = t.family, Generation = "ecs-" .. (t.family:match("(%d+)") or "6") }
    end
  end
  return { InstanceTypeFamilies = { InstanceTypeFamily = list(out) } }
end

local function status_of(category)
  return catalogue.has_stock(category) and "Available" or "SoldOut"
end

-- Disk sizes the API advertises per category (GiB).
local DISK_LIMITS = { system = { 20, 2048 }, data = { 20, 32768 } }

local function disk_resources(t, kind)
  local out = {}
  for _, c in ipairs(t.system_disks) do
    out[#out + 1] = { Value = c, Status = "Available", StatusCategory = "WithStock", Min = DISK_LIMITS[kind][1],
      Max = DISK_LIMITS[kind][2], Unit = "GiB" }
  end
  return out
end

function M.DescribeAvailableResource(call)
  local p = call.params
  M.region(p)
  local dest = wire.required(p, "DestinationResource")
  local capacity = capacity_of(p)
  local want_zone = wire.str(p, "ZoneId")
  local type_id = wire.str(p, "InstanceType")
  local cores, memory = wire.int(p, "Cores"), wire.number(p, "Memory")
  local only
  if type_id then
    only = catalogue.type(type_id)
    if not only then return { AvailableZones = { AvailableZone = list() } } end
  end
  if (dest == "SystemDisk" or dest == "DataDisk") and not type_id then wire.missing("InstanceType") end
  local zones = {}
  for _, z in ipairs(catalogue.zones()) do
    if not want_zone or want_zone == z.id then
      local resources, any_stock = {}, false
      for _, t in ipairs(only and { only } or catalogue.types()) do
        local stock = catalogue.stock(t, z.id, capacity)
        if stock and (not cores or t.cpu == cores) and (not memory or t.memory == memory) then
          resources[#resources + 1] = { Value = t.id, Status = status_of(stock), StatusCategory = stock }
          any_stock = any_stock or catalogue.has_stock(stock)
        end
      end
      local zone_category = (catalogue.zone_sold_out(z.id, capacity) or (only and not any_stock))
        and "WithoutStock" or "WithStock"
      local entry = { RegionId = catalogue.REGION, ZoneId = z.id, Status = status_of(zone_category),
        StatusCategory = zone_category }
      local available
      if dest == "InstanceType" then
        available = { { Type = "InstanceType", SupportedResources = { SupportedResource = list(resources) } } }
      elseif dest == "Zone" then
        available = { { Type = "Zone", SupportedResources = { SupportedResource = list({ { Value = z.id,
          Status = entry.Status, StatusCategory = zone_category } }) } } }
      elseif dest == "SystemDisk" or dest == "DataDisk" then
        available = #resources > 0 and { { Type = dest, SupportedResources = { SupportedResource =
          list(disk_resources(only, dest == "SystemDisk" and "system" or "data")) } } } or nil
      elseif dest == "IoOptimized" or dest == "Network" then
        available = { { Type = dest, SupportedResources = { SupportedResource = list({ {
          Value = dest == "Network" and "vpc" or "optimized", Status = "Available",
          StatusCategory = "WithStock" } }) } } }
      else
        wire.invalid("DestinationResource", "Use Zone, IoOptimized, InstanceType, Network, SystemDisk or DataDisk.")
      end
      if available and (dest ~= "InstanceType" or #resources > 0) then
        entry.AvailableResources = { AvailableResource = list(available) }
        zones[#zones + 1] = entry
      end
    end
  end
  return { AvailableZones = { AvailableZone = list(zones) } }
end

local function known_type(id)
  local t = catalogue.type(id)
  if not t then
    wire.fail(400, "InvalidInstanceType.ValueNotSupported",
      "The specified InstanceType does not exist or beyond the permitted range.")
  end
  return t
end
M.known_type = known_type

-- CNY per GiB-hour of a system disk, by category (PL1 for ESSD).
local DISK_PRICE = { cloud_essd = 0.001370, cloud_auto = 0.001370, cloud_essd_entry = 0.000685,
  cloud_ssd = 0.001370, cloud_efficiency = 0.000479, cloud = 0.000411 }
local UNIT_HOURS = { Hour = 1, Week = 168, Month = 730, Year = 8760 }

local function money(x) return math.floor(x * 10000 + 0.5) / 10000 end

function M.DescribePrice(call)
  local p = call.params
  M.region(p)
  local resource = wire.one_of(p, "ResourceType", "instance", "instance", "disk")
  if resource ~= "instance" then wire.invalid("ResourceType", "The simulator prices instances only.") end
  local t = known_type(wire.required(p, "InstanceType"))
  local unit = wire.one_of(p, "PriceUnit", "Hour", "Hour", "Week", "Month", "Year")
  local period = wire.int(p, "Period", 1, 1, 60)
  local amount = wire.int(p, "Amount", 1, 1, 1000)
  local capacity = capacity_of(p)
  local zone = wire.str(p, "ZoneId")
  if zone and not catalogue.zone(zone) then
    wire.fail(404, "InvalidZoneId.NotFound", "The specified zone does not exist.")
  end
  local category = wire.str(p, "SystemDisk.Category", "cloud_essd")
  if not DISK_PRICE[category] then wire.invalid("SystemDisk.Category") end
  local size = wire.int(p, "SystemDisk.Size", 40, 20, 2048)
  local hours = UNIT_HOURS[unit] * period
  local hourly
  if capacity == "spot" then
    if unit ~= "Hour" or period ~= 1 then
      wire.invalid("SpotStrategy", "Spot prices need PriceUnit=Hour and Period=1.")
    end
    zone = zone or catalogue.zones()[1].id
    hourly = catalogue.spot_price(t, zone, clock.now())
  else
    hourly = catalogue.on_demand_price(t)
  end
  local instance_price = money(hourly * hours * amount)
  local disk_price = money(DISK_PRICE[category] * size * hours * amount)
  local original = money(instance_price + disk_price)
  return { PriceInfo = {
    Price = { Currency = "CNY", OriginalPrice = original, DiscountPrice = 0, TradePrice = original,
      DetailInfos = { DetailInfo = list({
        { Resource = "instanceType", OriginalPrice = instance_price, DiscountPrice = 0, TradePrice = instance_price,
          SubRules = { Rule = list() } },
        { Resource = "systemDisk", OriginalPrice = disk_price, DiscountPrice = 0, TradePrice = disk_price,
          SubRules = { Rule = list() } } }) } },
    Rules = { Rule = list() },
  } }
end

local function parse_time(p, name, default)
  local v = wire.str(p, name)
  if not v then return default end
  local t = luaprov.time.parse_iso8601(v)
  if not t then wire.invalid(name, "Use yyyy-MM-ddTHH:mm:ssZ.") end
  return t
end

function M.DescribeSpotPriceHistory(call)
  local p = call.params
  M.region(p)
  wire.required(p, "NetworkType")
  wire.one_of(p, "NetworkType", "vpc", "vpc", "classic")
  local t = known_type(wire.required(p, "InstanceType"))
  local zone = wire.str(p, "ZoneId")
  local now = clock.now()
  local finish = parse_time(p, "EndTime", now)
  local start = parse_time(p, "StartTime", finish - 3 * 3600)
  if start > finish or finish - start > 30 * 86400 then wire.invalid("StartTime", "The range is at most 30 days.") end
  local offset = wire.int(p, "Offset", 0, 0)
  local points = {}
  -- One price point per zone and hour, as the real history moves at most hourly.
  for _, z in ipairs(catalogue.zones()) do
    if (not zone or zone == z.id) and catalogue.stock(t, z.id, "spot") then
      local first = math.floor(start / 3600) * 3600
      for at = first, finish, 3600 do
        points[#points + 1] = { ZoneId = z.id, InstanceType = t.id, IoOptimized = "optimized", NetworkType = "vpc",
          SpotPrice = catalogue.spot_price(t, z.id, at), OriginPrice = catalogue.on_demand_price(t),
          Timestamp = wire.iso_time(math.max(at, start)) }
      end
    end
  end
  local page = {}
  for i = offset + 1, math.min(offset + 1000, #points) do page[#page + 1] = points[i] end
  return { Currency = "CNY", NextOffset = offset + #page < #points and offset + #page or 0,
    SpotPrices = { SpotPriceType = list(page) } }
end

local ARCH_OF_TYPE = { X86 = "x86_64", ARM = "arm64" }

local function image_record(img)
  return { ImageId = img.id, ImageName = img.name, ImageFamily = img.family, ImageVersion = img.version,
    ImageOwnerAlias = img.owner, Architecture = img.arch, OSType = img.os_type, OSName = img.os_name,
    OSNameEn = img.os_name_en, Platform = img.platform, Status = "Available", Size = img.size,
    CreationTime = img.created, IsSupportCloudinit = true, IsSupportIoOptimized = true, IsSelfShared = "",
    IsPublic = img.owner == "system", BootMode = img.boot_mode or "BIOS", Usage = "instance", ProductCode = "",
    Progress = "100%", Description = "", ResourceGroupId = "",
    DiskDeviceMappings = { DiskDeviceMapping = list({ { Device = "/dev/xvda", Size = tostring(img.size),
      Type = "system", Format = "", ImportOSSBucket = "", ImportOSSObject = "", SnapshotId = "" } }) },
    Features = { NvmeSupport = img.nvme, ImdsSupport = "v2" }, Tags = M.ecs_tags(img.tags) }
end

function M.DescribeImages(call)
  local p = call.params
  M.region(p)
  local ids = wire.str(p, "ImageId")
  local id_set
  if ids then
    id_set = {}
    for id in ids:gmatch("[^,%s]+") do id_set[id] = true end
  end
  local name, family = wire.str(p, "ImageName"), wire.str(p, "ImageFamily")
  local owner = wire.one_of(p, "ImageOwnerAlias", nil, "system", "self", "others", "marketplace")
  local owner_id = wire.str(p, "ImageOwnerId")
  local arch = wire.one_of(p, "Architecture", nil, "i386", "x86_64", "arm64")
  local os_type = wire.one_of(p, "OSType", nil, "linux", "windows")
  -- Every simulated image is Available: a Status filter without it (Deprecated, ...) matches none.
  local status_ok = wire.str(p, "Status", "Available"):find("Available", 1, true) ~= nil
  local type_id = wire.str(p, "InstanceType")
  if type_id then arch = ARCH_OF_TYPE[known_type(type_id).arch] end
  local tags = wire.tags(p, "Tag", 20)
  local pattern
  if name then
    -- ImageName is a fuzzy match; "*" is a wildcard.
    pattern = name:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*")
  end
  local matched = {}
  for _, img in ipairs(account.images()) do
    local ok = status_ok and (not id_set or id_set[img.id]) and (not family or img.family == family)
      and (not arch or img.arch == arch) and (not os_type or img.os_type == os_type)
      and wire.match_tags(img.tags, tags)
      and (owner and img.owner == owner or (not owner and img.owner ~= "marketplace"))
      and (not pattern or img.name:find(pattern) ~= nil) and (not owner_id or img.owner_id == owner_id)
    if ok then matched[#matched + 1] = img end
  end
  local page, number, size = wire.page_by_number(matched, p, 10, 100)
  local out = {}
  for i, img in ipairs(page) do out[i] = image_record(img) end
  return { RegionId = catalogue.REGION, TotalCount = #matched, PageNumber = number, PageSize = size,
    Images = { Image = list(out) } }
end

local function group_key(g) return g.id end

function M.DescribeSecurityGroups(call)
  local p = call.params
  M.region(p)
  local ids = wire.json_array(p, "SecurityGroupIds", 100)
  local id_set
  local one = wire.str(p, "SecurityGroupId")
  if ids or one then
    id_set = {}
    for _, id in ipairs(ids or {}) do id_set[id] = true end
    if one then id_set[one] = true end
  end
  local vpc, name = wire.str(p, "VpcId"), wire.str(p, "SecurityGroupName")
  wire.one_of(p, "SecurityGroupType", nil, "normal", "enterprise")
  local tags = wire.tags(p, "Tag", 20)
  local with_count = wire.bool(p, "IsQueryEcsCount", false)
  local members = {}
  if with_count then
    for _, inst in ipairs(state.list()) do
      for _, id in ipairs(inst.security_group_ids) do members[id] = (members[id] or 0) + 1 end
    end
  end
  local matched = {}
  for _, g in ipairs(account.security_groups()) do
    if (not id_set or id_set[g.id]) and (not vpc or g.vpc == vpc) and (not name or g.name == name)
      and wire.match_tags(g.tags, tags) then
      matched[#matched + 1] = g
    end
  end
  table.sort(matched, function(a, b) return a.id < b.id end)
  local page, body
  if p.MaxResults or p.NextToken then
    local next_token
    page, next_token = wire.page_by_token(matched, p, group_key, 10, 100)
    body = { NextToken = next_token }
  else
    local number, size
    page, number, size = wire.page_by_number(matched, p, 10, 50)
    body = { TotalCount = #matched, PageNumber = number, PageSize = size }
  end
  local out = {}
  for i, g in ipairs(page) do
    out[i] = { SecurityGroupId = g.id, SecurityGroupName = g.name, SecurityGroupType = "normal", VpcId = g.vpc,
      Description = g.description, CreationTime = account.CREATED, ResourceGroupId = account.RESOURCE_GROUP,
      ServiceManaged = false, Tags = M.ecs_tags(g.tags) or { Tag = list() } }
    if with_count then
      out[i].EcsCount = members[g.id] or 0
      out[i].AvailableInstanceAmount = 2000 - (members[g.id] or 0)
    end
  end
  body.RegionId = catalogue.REGION
  body.SecurityGroups = { SecurityGroup = list(out) }
  return body
end

return M
