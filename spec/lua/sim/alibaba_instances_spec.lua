-- The Alibaba simulator's instances: RunInstances with its validations and the NoStock class,
-- ClientToken idempotency, the Pending -> Starting -> Running lifecycle in simulated time,
-- DescribeInstances filters and both paginations, deletion, and tags.
local luaprov = require "luaprov"
local s = require "sim.alibaba_support"

local R = "cn-hangzhou"
local X86 = "aliyun_3_x64_20G_alibase_20240819.vhd"
local ARM = "aliyun_3_arm64_20G_alibase_20240819.vhd"
local VSW_H, VSW_K = "vsw-bp1simh0000001", "vsw-bp1simk0000001"
local SG = "sg-bp1sim0nodes00001"

describe("alibaba simulator: instances", function()
  local sim

  setup(function() sim = s.start() end)
  teardown(function() if sim then sim.stop() end end)
  before_each(function() s.reset(sim) end)

  local function params(extra)
    local p = { RegionId = R, InstanceType = "ecs.g7.large", ImageId = X86, VSwitchId = VSW_H,
      ["SecurityGroupIds.1"] = SG, ["SystemDisk.Category"] = "cloud_essd", ["SystemDisk.Size"] = "40",
      ["Tag.1.Key"] = "kubernetes.io/cluster/c-sim", ["Tag.1.Value"] = "owned",
      ["Tag.2.Key"] = "karpenter.sh/nodepool", ["Tag.2.Value"] = "default" }
    for k, v in pairs(extra or {}) do p[k] = v ~= false and v or nil end
    return p
  end

  local function run(extra, opts)
    return s.call(sim, "ecs", "RunInstances", params(extra), opts)
  end

  local function launch(extra)
    local body = s.ok(sim, "ecs", "RunInstances", params(extra))
    return body.InstanceIdSets.InstanceIdSet[1], body
  end

  local function describe_ids(ids)
    return s.ok(sim, "ecs", "DescribeInstances", { RegionId = R, InstanceIds = luaprov.json.encode(ids) })
  end

  local function advance(seconds)
    assert.equals(200, (s.admin(sim, "POST", "/_sim/advance", { seconds = seconds })))
  end

  it("launches an instance that moves Pending -> Starting -> Running in simulated time", function()
    local id, body = launch()
    assert.matches("^i%-bp1%w+$", id)
    assert.is_number(body.TradePrice)
    local inst = describe_ids({ id }).Instances.Instance[1]
    assert.equals("Pending", inst.Status)
    advance(5)
    assert.equals("Starting", describe_ids({ id }).Instances.Instance[1].Status)
    advance(10)
    assert.equals("Running", describe_ids({ id }).Instances.Instance[1].Status)
  end)

  it("describes an instance with the fields the provider maps", function()
    local id = launch({ SpotStrategy = "SpotAsPriceGo", UserData = luaprov.crypto.base64_encode("#!/bin/bash\n") })
    local inst = describe_ids({ id }).Instances.Instance[1]
    assert.equals(id, inst.InstanceId)
    assert.equals(R, inst.RegionId)
    assert.equals("cn-hangzhou-h", inst.ZoneId)
    assert.equals("ecs.g7.large", inst.InstanceType)
    assert.equals(X86, inst.ImageId)
    assert.equals("SpotAsPriceGo", inst.SpotStrategy)
    assert.equals("PostPaid", inst.InstanceChargeType)
    assert.same({ SG }, inst.SecurityGroupIds.SecurityGroupId)
    assert.equals(VSW_H, inst.VpcAttributes.VSwitchId)
    assert.matches("^172%.16%.%d+%.%d+$", inst.VpcAttributes.PrivateIpAddress.IpAddress[1])
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%dZ$", inst.CreationTime)  -- minute precision, as the API
    assert.equals(8192, inst.Memory)
    local tags = {}
    for _, t in ipairs(inst.Tags.Tag) do tags[t.TagKey] = t.TagValue end
    assert.same({ ["kubernetes.io/cluster/c-sim"] = "owned", ["karpenter.sh/nodepool"] = "default" }, tags)
  end)

  it("launches ARM types from arm64 images, and refuses an image of the wrong architecture", function()
    launch({ InstanceType = "ecs.g8y.large", ImageId = ARM, VSwitchId = VSW_K })
    local status, err = run({ InstanceType = "ecs.g8y.large" })
    assert.equals(403, status)
    assert.equals("ImageNotSupportInstanceType", err.Code)
  end)

  it("answers OperationDenied.NoStock for a sold-out offering, per capacity type", function()
    local status, err = run({ InstanceType = "ecs.g7.16xlarge" })
    assert.equals(403, status)
    assert.equals("OperationDenied.NoStock", err.Code)
    assert.equals("The requested resource is sold out in the specified zone; try other types of resources or other "
      .. "regions and zones.", err.Message)
    status, err = run({ InstanceType = "ecs.r7.4xlarge", VSwitchId = VSW_K, SpotStrategy = "SpotAsPriceGo" })
    assert.equals(403, status)
    assert.equals("OperationDenied.NoStock", err.Code)
    launch({ InstanceType = "ecs.r7.4xlarge", VSwitchId = VSW_K })  -- on-demand still has stock
    status, err = run({ InstanceType = "ecs.gn7i-c8g1.2xlarge", VSwitchId = "vsw-bp1simj0000001" })
    assert.equals(403, status)
    assert.equals("InvalidInstanceType.ZoneNotSupported", err.Code)
  end)

  it("validates parameters and resources with the real codes", function()
    local cases = {
      { { ImageId = "m-missing" }, 404, "InvalidImageId.NotFound" },
      { { VSwitchId = "vsw-missing" }, 404, "InvalidVSwitchId.NotFound" },
      { { ["SecurityGroupIds.1"] = "sg-missing" }, 404, "InvalidSecurityGroupId.NotFound" },
      { { ["SecurityGroupIds.1"] = "sg-bp1sim0other00001" }, 400, "InvalidParameter.Mismatch" },
      { { ["SecurityGroupIds.1"] = false }, 400, "MissingParameter" },
      { { InstanceType = false }, 400, "MissingParameter" },
      { { InstanceType = "ecs.x9.huge" }, 400, "InvalidInstanceType.ValueNotSupported" },
      { { ZoneId = "cn-hangzhou-i" }, 400, "InvalidParameter.Mismatch" },
      { { UserData = "not base64!" }, 400, "InvalidUserData.Base64FormatInvalid" },
      { { ["Tag.3.Key"] = "acs:reserved" }, 400, "InvalidTagKey.Malformed" },
      { { InstanceType = "ecs.g8i.large", ["SystemDisk.Category"] = "cloud_efficiency" }, 403,
        "InvalidSystemDiskCategory.ValueNotSupported" },
      { { SpotStrategy = "SpotWithPriceLimit", SpotPriceLimit = "0.001" }, 400,
        "InvalidSpotPriceLimit.LowerThanPublicPrice" },
      { { SpotStrategy = "Sometimes" }, 400, "InvalidParameter" },
      { { Amount = "0" }, 400, "InvalidParameter" },
      { { DryRun = "true" }, 400, "DryRunOperation" },
      { { ["DataDisk.1.Size"] = "10" }, 400, "InvalidParameter" },
      { { ["DataDisk.1.Size"] = "100", ["DataDisk.1.Category"] = "floppy" }, 400,
        "InvalidDataDiskCategory.ValueNotSupported" },
      { { ["DataDisk.1.Category"] = "cloud_essd" }, 400, "MissingParameter" },
      { { ["DataDisk.1.Size"] = "100", ["DataDisk.1.Device"] = "/dev/sda" }, 400, "InvalidDataDiskDevice.Malformed" },
    }
    for _, c in ipairs(cases) do
      local status, err = run(c[1])
      assert.equals(c[3], err and err.Code, luaprov.json.encode(c[1]))
      assert.equals(c[2], status, c[3])
    end
    assert.equals(0, #s.state(sim).instances)
  end)

  it("keeps data disks in N order, the key pair and the resource group, and shows them in its state", function()
    local id = launch({ ["DataDisk.2.Size"] = "20", ["DataDisk.1.Size"] = "200", ["DataDisk.1.Category"] = "cloud_auto",
      ["DataDisk.1.Device"] = "/dev/xvdb", KeyPairName = "kp-1", ResourceGroupId = "rg-1", Password = "Pa55word!" })
    local inst = s.state(sim).instances[1]
    assert.equals(id, inst.id)
    assert.same({ { size = 200, category = "cloud_auto", device = "/dev/xvdb", encrypted = false,
      delete_with_instance = true }, { size = 20, category = "cloud_efficiency", encrypted = false,
      delete_with_instance = true } }, inst.data_disks)
    assert.equals("kp-1", inst.key_pair)
    assert.is_true(inst.password_set)
    local described = describe_ids({ id }).Instances.Instance[1]
    assert.equals("kp-1", described.KeyPairName)
    assert.equals("rg-1", described.ResourceGroupId)
  end)

  it("honours Amount, all or nothing", function()
    local body = s.ok(sim, "ecs", "RunInstances", params({ Amount = "3" }))
    assert.equals(3, #body.InstanceIdSets.InstanceIdSet)
    local status, err = run({ VSwitchId = "vsw-bp1simh0000002", Amount = "100" })  -- 52 addresses left there
    assert.equals(403, status)
    assert.equals("InvalidVSwitchId.IpNotEnough", err.Code)
  end)

  it("returns the same instances for a repeated ClientToken and refuses it with other parameters", function()
    local first = s.ok(sim, "ecs", "RunInstances", params({ ClientToken = "nodeclaim-uid-1" }))
    -- a retry: new nonce and date, the other scheme even, same parameters
    local again = s.ok(sim, "ecs", "RunInstances", params({ ClientToken = "nodeclaim-uid-1" }), { scheme = "v2" })
    assert.same(first.InstanceIdSets, again.InstanceIdSets)
    assert.are_not.equal(first.RequestId, again.RequestId)
    assert.equals(1, #s.state(sim).instances)
    local status, err = run({ ClientToken = "nodeclaim-uid-1", InstanceType = "ecs.c7.large" })
    assert.equals(400, status)
    assert.equals("IdempotentParameterMismatch", err.Code)
    assert.equals(3, s.state(sim).calls.RunInstances)
  end)

  it("filters DescribeInstances by tag, vSwitch, status and type, and by a JSON list of IDs", function()
    local a = launch()
    local b = launch({ VSwitchId = VSW_K, ["Tag.2.Value"] = "gpu" })
    launch({ ["Tag.1.Value"] = "shared", ["Tag.2.Key"] = false, ["Tag.2.Value"] = false })
    local function ids(p)
      p.RegionId = R
      local out = {}
      for i, inst in ipairs(s.ok(sim, "ecs", "DescribeInstances", p).Instances.Instance) do out[i] = inst.InstanceId end
      table.sort(out)
      return out
    end
    local both = { a, b }
    table.sort(both)
    assert.same(both, ids({ ["Tag.1.Key"] = "kubernetes.io/cluster/c-sim", ["Tag.1.Value"] = "owned" }))
    assert.same({ b }, ids({ ["Tag.1.Key"] = "karpenter.sh/nodepool", ["Tag.1.Value"] = "gpu" }))
    assert.equals(2, #ids({ ["Tag.1.Key"] = "karpenter.sh/nodepool" }))  -- key only: any value
    assert.same({ b }, ids({ VSwitchId = VSW_K }))
    assert.equals(3, #ids({ Status = "Pending", InstanceType = "ecs.g7.large" }))
    assert.same({}, ids({ Status = "Running" }))
    assert.same({ a }, ids({ InstanceIds = '["' .. a .. '","i-bp1gone"]' }))
  end)

  it("paginates DescribeInstances by NextToken and by PageNumber", function()
    s.ok(sim, "ecs", "RunInstances", params({ Amount = "25" }))
    local seen, token, pages = {}, nil, 0
    repeat
      local body = s.ok(sim, "ecs", "DescribeInstances", { RegionId = R, MaxResults = "10", NextToken = token })
      assert.equals(25, body.TotalCount)
      for _, inst in ipairs(body.Instances.Instance) do
        assert.is_nil(seen[inst.InstanceId])
        seen[inst.InstanceId] = true
      end
      token, pages = body.NextToken, pages + 1
    until token == ""
    assert.equals(3, pages)
    -- MaxResults below 10 counts as 10
    assert.equals(10, #s.ok(sim, "ecs", "DescribeInstances", { RegionId = R, MaxResults = "2" }).Instances.Instance)
    local page3 = s.ok(sim, "ecs", "DescribeInstances", { RegionId = R, PageNumber = "3", PageSize = "10" })
    assert.same({ 25, 3, 10, 5 }, { page3.TotalCount, page3.PageNumber, page3.PageSize, #page3.Instances.Instance })
    local status, err = s.call(sim, "ecs", "DescribeInstances", { RegionId = R, InstanceIds = "i-1,i-2" })
    assert.equals(400, status)
    assert.equals("InvalidInstanceIds.Malformed", err.Code)
    local many = {}
    for i = 1, 101 do many[i] = "i-" .. i end
    status = s.call(sim, "ecs", "DescribeInstances", { RegionId = R, InstanceIds = luaprov.json.encode(many) })
    assert.equals(400, status)
  end)

  it("releases instances with DeleteInstance and DeleteInstances, and 404s once they are gone", function()
    local id = launch()
    local status, err = s.call(sim, "ecs", "DeleteInstance", { InstanceId = id, Force = "true" })
    assert.equals(403, status)
    assert.equals("IncorrectInstanceStatus.Initializing", err.Code)
    advance(15)
    status, err = s.call(sim, "ecs", "DeleteInstance", { InstanceId = id })
    assert.equals(403, status)
    assert.equals("IncorrectInstanceStatus", err.Code)  -- Running needs Force
    s.ok(sim, "ecs", "DeleteInstance", { InstanceId = id, Force = "true", TerminateSubscription = "true" })
    assert.equals(0, describe_ids({ id }).TotalCount)
    status, err = s.call(sim, "ecs", "DeleteInstance", { InstanceId = id, Force = "true" })
    assert.equals(404, status)
    assert.equals("InvalidInstanceId.NotFound", err.Code)
    local body = s.ok(sim, "ecs", "RunInstances", params({ Amount = "2" }))
    advance(15)
    local ids = body.InstanceIdSets.InstanceIdSet
    s.ok(sim, "ecs", "DeleteInstances", { RegionId = R, ["InstanceId.1"] = ids[1], ["InstanceId.2"] = ids[2],
      Force = "true" })
    assert.equals(0, #s.state(sim).instances)
    local vsw = s.ok(sim, "vpc", "DescribeVSwitches", { RegionId = R, VSwitchId = VSW_H }).VSwitches.VSwitch[1]
    assert.equals(4092, vsw.AvailableIpAddressCount)  -- every address given back
  end)

  it("counts addresses taken from the vSwitch", function()
    s.ok(sim, "ecs", "RunInstances", params({ Amount = "3" }))
    local vsw = s.ok(sim, "vpc", "DescribeVSwitches", { RegionId = R, VSwitchId = VSW_H }).VSwitches.VSwitch[1]
    assert.equals(4089, vsw.AvailableIpAddressCount)
  end)

  it("tags instances with AddTags and TagResources, and removes tags", function()
    local id = launch()
    s.ok(sim, "ecs", "AddTags", { RegionId = R, ResourceType = "instance", ResourceId = id,
      ["Tag.1.Key"] = "Name", ["Tag.1.Value"] = "node-1", ["Tag.2.Key"] = "ecs:ecs-cluster-id",
      ["Tag.2.Value"] = "c-sim" })
    s.ok(sim, "ecs", "TagResources", { RegionId = R, ResourceType = "instance", ["ResourceId.1"] = id,
      ["Tag.1.Key"] = "karpenter.sh/nodeclaim", ["Tag.1.Value"] = "default-abc" })
    local listed = s.ok(sim, "ecs", "ListTagResources", { RegionId = R, ResourceType = "instance",
      ["ResourceId.1"] = id }).TagResources.TagResource
    assert.equals(5, #listed)
    s.ok(sim, "ecs", "UntagResources", { RegionId = R, ResourceType = "instance", ["ResourceId.1"] = id,
      ["TagKey.1"] = "Name" })
    s.ok(sim, "ecs", "RemoveTags", { RegionId = R, ResourceType = "instance", ResourceId = id,
      ["Tag.1.Key"] = "ecs:ecs-cluster-id" })
    local tags = {}
    for _, t in ipairs(describe_ids({ id }).Instances.Instance[1].Tags.Tag) do tags[t.TagKey] = t.TagValue end
    assert.same({ ["kubernetes.io/cluster/c-sim"] = "owned", ["karpenter.sh/nodepool"] = "default",
      ["karpenter.sh/nodeclaim"] = "default-abc" }, tags)
    local status, err = s.call(sim, "ecs", "AddTags", { RegionId = R, ResourceType = "instance", ResourceId = "i-gone",
      ["Tag.1.Key"] = "Name", ["Tag.1.Value"] = "x" })
    assert.equals(404, status)
    assert.equals("InvalidResourceId.NotFound", err.Code)
  end)

  it("reports statuses through DescribeInstanceStatus", function()
    local id = launch()
    advance(20)
    local body = s.ok(sim, "ecs", "DescribeInstanceStatus", { RegionId = R, ["InstanceId.1"] = id })
    assert.same({ { InstanceId = id, Status = "Running" } }, body.InstanceStatuses.InstanceStatus)
  end)
end)
