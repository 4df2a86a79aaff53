-- The Alibaba simulator's catalogue and account, through the read actions a provider calls: zones,
-- instance types (paginated), stock per (type, zone, capacity type), prices, images, security groups,
-- vSwitches and VPCs, in the real response shapes.
local s = require "sim.alibaba_support"

local R = "cn-hangzhou"
local ZONES = { "cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j", "cn-hangzhou-k" }

describe("alibaba simulator: catalogue", function()
  local sim

  setup(function() sim = s.start() end)
  teardown(function() if sim then sim.stop() end end)
  before_each(function() s.reset(sim) end)

  local function all_types(page_size, params)
    local out, token, pages = {}, nil, 0
    repeat
      local p = { MaxResults = tostring(page_size) }
      for k, v in pairs(params or {}) do p[k] = v end
      p.NextToken = token
      local body = s.ok(sim, "ecs", "DescribeInstanceTypes", p)
      for _, t in ipairs(body.InstanceTypes.InstanceType) do out[#out + 1] = t end
      token = body.NextToken
      pages = pages + 1
    until token == nil or token == ""
    return out, pages
  end

  local function stock(params)
    local p = { RegionId = R, DestinationResource = "InstanceType" }
    for k, v in pairs(params or {}) do p[k] = v end
    local body = s.ok(sim, "ecs", "DescribeAvailableResource", p)
    local out = {}
    for _, z in ipairs(body.AvailableZones.AvailableZone) do
      for _, r in ipairs(z.AvailableResources.AvailableResource) do
        for _, sr in ipairs(r.SupportedResources.SupportedResource) do
          out[sr.Value .. "@" .. z.ZoneId] = sr
        end
      end
    end
    return out, body
  end

  it("has four zones in cn-hangzhou, with the real shape of DescribeZones", function()
    local body = s.ok(sim, "ecs", "DescribeZones", { RegionId = R, AcceptLanguage = "en-US" })
    local ids = {}
    for i, z in ipairs(body.Zones.Zone) do ids[i] = z.ZoneId end
    assert.same(ZONES, ids)
    local h = body.Zones.Zone[1]
    assert.equals("Hangzhou Zone H", h.LocalName)
    -- inner arrays start with a lowercase letter, as on the real API
    local info = h.AvailableResources.ResourcesInfo[1]
    assert.truthy(#info.InstanceTypes.supportedInstanceType > 40)
    assert.same({ "vpc" }, info.NetworkTypes.supportedNetworkCategory)
    body = s.ok(sim, "ecs", "DescribeZones", { RegionId = R, Verbose = "false" })
    assert.is_nil(body.Zones.Zone[1].AvailableResources)
  end)

  it("lists at least 50 instance types, x86 and ARM, with GPUs, through NextToken pages", function()
    local types, pages = all_types(100)
    assert.is_true(#types >= 50)
    assert.equals(1, pages)
    local small, small_pages = all_types(10)
    assert.equals(#types, #small)
    assert.is_true(small_pages >= 5)
    local seen, arm, gpu, burstable = {}, 0, 0, 0
    for _, t in ipairs(small) do
      assert.is_nil(seen[t.InstanceTypeId], "duplicate " .. t.InstanceTypeId)
      seen[t.InstanceTypeId] = true
      if t.CpuArchitecture == "ARM" then arm = arm + 1 end
      if t.GPUAmount > 0 then
        gpu = gpu + 1
        assert.matches("^NVIDIA ", t.GPUSpec)
        assert.is_true(t.GPUMemorySize > 0)
      end
      if t.InstanceFamilyLevel == "CreditEntryLevel" then burstable = burstable + 1 end
      for _, field in ipairs({ "CpuCoreCount", "MemorySize", "EniQuantity", "EniPrivateIpAddressQuantity",
        "EniTotalQuantity", "InstancePpsRx", "InstanceBandwidthRx", "LocalStorageAmount" }) do
        assert.is_number(t[field], field)
      end
      assert.is_string(t.InstanceTypeFamily)
      assert.is_string(t.LocalStorageCategory)
    end
    assert.is_true(arm >= 5 and gpu >= 5 and burstable >= 3)
    local g7 = s.ok(sim, "ecs", "DescribeInstanceTypes", { ["InstanceTypes.1"] = "ecs.g7.xlarge" })
      .InstanceTypes.InstanceType[1]
    assert.same({ 4, 16, "ecs.g7", "X86", 4, 15 }, { g7.CpuCoreCount, g7.MemorySize, g7.InstanceTypeFamily,
      g7.CpuArchitecture, g7.EniQuantity, g7.EniPrivateIpAddressQuantity })
    assert.matches("Intel", g7.PhysicalProcessorModel)
  end)

  it("filters instance types by architecture, family and size", function()
    local arm = all_types(100, { CpuArchitecture = "ARM" })
    for _, t in ipairs(arm) do assert.equals("ARM", t.CpuArchitecture) end
    assert.is_true(#arm >= 5)
    local fam = all_types(100, { InstanceTypeFamily = "ecs.gn7i" })
    assert.equals(4, #fam)
    local big = all_types(100, { MinimumCpuCoreCount = "32", MaximumMemorySize = "128" })
    for _, t in ipairs(big) do assert.is_true(t.CpuCoreCount >= 32 and t.MemorySize <= 128) end
  end)

  it("reports stock per zone and capacity type, with some sold out", function()
    local od = stock({ InstanceChargeType = "PostPaid", SpotStrategy = "NoSpot" })
    local spot = stock({ InstanceChargeType = "PostPaid", SpotStrategy = "SpotAsPriceGo" })
    assert.same({ Status = "Available", StatusCategory = "WithStock", Value = "ecs.g7.large" },
      od["ecs.g7.large@cn-hangzhou-h"])
    assert.equals("SoldOut", od["ecs.g7.16xlarge@cn-hangzhou-h"].Status)
    assert.equals("WithoutStock", od["ecs.g7.16xlarge@cn-hangzhou-h"].StatusCategory)
    assert.equals("Available", od["ecs.r7.4xlarge@cn-hangzhou-k"].Status)
    assert.equals("WithoutStock", spot["ecs.r7.4xlarge@cn-hangzhou-k"].StatusCategory)
    assert.equals("ClosedWithoutStock", od["ecs.c8y.4xlarge@cn-hangzhou-j"].StatusCategory)
    assert.equals("ClosedWithStock", od["ecs.g7.large@cn-hangzhou-j"].StatusCategory)
    -- GPUs are not sold everywhere
    assert.is_nil(od["ecs.gn7i-c8g1.2xlarge@cn-hangzhou-j"])
    local one, body = stock({ InstanceType = "ecs.g7.16xlarge" })
    assert.equals(4, #body.AvailableZones.AvailableZone)
    assert.equals("SoldOut", body.AvailableZones.AvailableZone[1].Status)
    assert.equals("Available", one["ecs.g7.16xlarge@cn-hangzhou-i"].Status)
  end)

  it("answers the system-disk query the image resolver makes, and needs DestinationResource", function()
    local body = s.ok(sim, "ecs", "DescribeAvailableResource", { RegionId = R, DestinationResource = "SystemDisk",
      InstanceType = "ecs.g8y.large" })
    local cats = {}
    for _, sr in ipairs(body.AvailableZones.AvailableZone[1].AvailableResources.AvailableResource[1]
      .SupportedResources.SupportedResource) do
      cats[sr.Value] = sr
    end
    assert.truthy(cats.cloud_essd)
    assert.is_nil(cats.cloud_efficiency)  -- 8th-generation types take ESSD-class disks only
    assert.equals("GiB", cats.cloud_essd.Unit)
    local status, err = s.call(sim, "ecs", "DescribeAvailableResource", { RegionId = R })
    assert.equals(400, status)
    assert.equals("MissingParameter", err.Code)
    assert.equals('The input parameter "DestinationResource" that is mandatory for processing this request is not '
      .. "supplied.", err.Message)
  end)

  it("prices on-demand per type and spot per zone, spot lower", function()
    local od = s.ok(sim, "ecs", "DescribePrice", { RegionId = R, InstanceType = "ecs.g7.large",
      ["SystemDisk.Category"] = "cloud_essd", ["SystemDisk.Size"] = "40" }).PriceInfo.Price
    assert.equals("CNY", od.Currency)
    assert.is_true(od.TradePrice > 0.4 and od.TradePrice < 1)
    local spot = s.ok(sim, "ecs", "DescribePrice", { RegionId = R, InstanceType = "ecs.g7.large",
      ZoneId = "cn-hangzhou-i", SpotStrategy = "SpotAsPriceGo" }).PriceInfo.Price
    assert.is_true(spot.TradePrice < od.TradePrice)
    local status, err = s.call(sim, "ecs", "DescribePrice", { RegionId = R, InstanceType = "ecs.nope.large" })
    assert.equals(400, status)
    assert.equals("InvalidInstanceType.ValueNotSupported", err.Code)
  end)

  it("keeps a spot price history per zone below the on-demand price", function()
    local body = s.ok(sim, "ecs", "DescribeSpotPriceHistory", { RegionId = R, NetworkType = "vpc",
      InstanceType = "ecs.c7.xlarge" })
    local zones = {}
    for _, p in ipairs(body.SpotPrices.SpotPriceType) do
      zones[p.ZoneId] = true
      assert.is_true(p.SpotPrice < p.OriginPrice)
      assert.equals("ecs.c7.xlarge", p.InstanceType)
    end
    for _, z in ipairs(ZONES) do assert.truthy(zones[z], z) end
    assert.equals(0, body.NextOffset)
    local status, err = s.call(sim, "ecs", "DescribeSpotPriceHistory", { RegionId = R, InstanceType = "ecs.c7.xlarge" })
    assert.equals(400, status)
    assert.matches('"NetworkType"', err.Message)
  end)

  it("lists Alibaba Cloud Linux 3 images for x86_64 and arm64, and filters them", function()
    local body = s.ok(sim, "ecs", "DescribeImages", { RegionId = R, ImageOwnerAlias = "system", PageSize = "50" })
    local archs = {}
    for _, img in ipairs(body.Images.Image) do
      if img.ImageId:find("^aliyun_3_") then archs[img.Architecture] = true end
      assert.equals("linux", img.OSType)
      assert.truthy(img.CreationTime)
    end
    assert.same({ x86_64 = true, arm64 = true }, archs)
    assert.equals(#body.Images.Image, body.TotalCount)
    body = s.ok(sim, "ecs", "DescribeImages", { RegionId = R, ImageId = "aliyun_3_arm64_20G_alibase_20240819.vhd",
      ShowExpired = "true" })
    assert.equals(1, body.TotalCount)
    assert.equals("arm64", body.Images.Image[1].Architecture)
    body = s.ok(sim, "ecs", "DescribeImages", { RegionId = R, ImageName = "aliyun_3_x64" })
    assert.equals(3, body.TotalCount)  -- the current image, an older one and the container-optimized one
    body = s.ok(sim, "ecs", "DescribeImages", { RegionId = R, ["Tag.1.Key"] = "karpenter.sh/discovery",
      ["Tag.1.Value"] = "luaprov-sim" })
    assert.equals("m-bp1sim0custom00001", body.Images.Image[1].ImageId)
    assert.same({ { TagKey = "karpenter.sh/discovery", TagValue = "luaprov-sim" } }, body.Images.Image[1].Tags.Tag)
    body = s.ok(sim, "ecs", "DescribeImages", { RegionId = R, ImageId = "m-none" })
    assert.equals(0, body.TotalCount)
  end)

  it("finds security groups by tag, by a JSON list of IDs and by VPC, page by page", function()
    local body = s.ok(sim, "ecs", "DescribeSecurityGroups", { RegionId = R, MaxResults = "100",
      ["Tag.1.Key"] = "karpenter.sh/discovery", ["Tag.1.Value"] = "luaprov-sim", IsQueryEcsCount = "true" })
    local ids = {}
    for i, g in ipairs(body.SecurityGroups.SecurityGroup) do ids[i] = g.SecurityGroupId end
    assert.same({ "sg-bp1sim0extra00001", "sg-bp1sim0nodes00001" }, ids)
    assert.equals("", body.NextToken)
    assert.equals(0, body.SecurityGroups.SecurityGroup[1].EcsCount)
    body = s.ok(sim, "ecs", "DescribeSecurityGroups", { RegionId = R,
      SecurityGroupIds = '["sg-bp1sim0nodes00001","sg-bp1sim0other00001"]' })
    assert.equals(2, body.TotalCount)
    body = s.ok(sim, "ecs", "DescribeSecurityGroups", { RegionId = R, VpcId = "vpc-bp1sim0cluster0001",
      MaxResults = "1" })
    assert.equals(1, #body.SecurityGroups.SecurityGroup)
    assert.is_true(#body.NextToken > 0)
    assert.is_nil(body.TotalCount)
    body = s.ok(sim, "ecs", "DescribeSecurityGroups", { RegionId = R, SecurityGroupName = "luaprov-sim-nodes" })
    assert.equals("sg-bp1sim0nodes00001", body.SecurityGroups.SecurityGroup[1].SecurityGroupId)
    local status, err = s.call(sim, "ecs", "DescribeSecurityGroups", { RegionId = R, SecurityGroupIds = "sg-1" })
    assert.equals(400, status)
    assert.equals("InvalidParameter", err.Code)
  end)

  it("has a tagged vSwitch in each zone, with free addresses, VPC-style tags", function()
    local body = s.ok(sim, "vpc", "DescribeVSwitches", { RegionId = R, PageSize = "50", PageNumber = "1",
      ["Tag.1.Key"] = "karpenter.sh/discovery", ["Tag.1.Value"] = "luaprov-sim" })
    assert.equals(4, body.TotalCount)
    local zones = {}
    for _, v in ipairs(body.VSwitches.VSwitch) do
      zones[#zones + 1] = v.ZoneId
      assert.equals(4092, v.AvailableIpAddressCount)  -- a /20 less the 4 reserved addresses
      assert.equals("vpc-bp1sim0cluster0001", v.VpcId)
      local tags = {}
      for _, t in ipairs(v.Tags.Tag) do tags[t.Key] = t.Value end
      assert.equals("luaprov-sim", tags["karpenter.sh/discovery"])
    end
    table.sort(zones)
    assert.same(ZONES, zones)
    body = s.ok(sim, "vpc", "DescribeVSwitches", { RegionId = R, VSwitchId = "vsw-bp1simh0000002" })
    assert.equals(1, body.TotalCount)
    assert.is_true(body.VSwitches.VSwitch[1].AvailableIpAddressCount < 100)
    body = s.ok(sim, "vpc", "DescribeVSwitches", { RegionId = R, ZoneId = "cn-hangzhou-h" })
    assert.equals(2, body.TotalCount)
    local status, err = s.call(sim, "vpc", "DescribeVSwitches", {})
    assert.equals(400, status)
    assert.equals("MissingParameter", err.Code)
    status, err = s.call(sim, "vpc", "DescribeVSwitches", { RegionId = R, PageSize = "51" })
    assert.equals(400, status)
    assert.equals("InvalidParameter", err.Code)
    local vpcs = s.ok(sim, "vpc", "DescribeVpcs", { RegionId = R })
    assert.equals(2, vpcs.TotalCount)
  end)

  it("refuses other regions", function()
    local status, err = s.call(sim, "ecs", "DescribeZones", { RegionId = "cn-beijing" })
    assert.equals(404, status)
    assert.equals("InvalidRegionId.NotFound", err.Code)
  end)
end)
