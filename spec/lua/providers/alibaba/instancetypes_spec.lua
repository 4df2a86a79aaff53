-- Instance types, offerings, capacity and overhead (providers/alibaba/instancetypes.lua and its
-- helpers), against the shape `luaprov eval instance-types` prints, rules CP4 and CP8 of
-- docs/contracts.md and the upstream provider's formulas. First against an in-process fake of the
-- APIs, then against the Alibaba simulator over real HTTP.
local luaprov = require "luaprov"
local harness = require "spec.fixtures.alibaba.harness"
local capacity = require "providers.alibaba.capacity"
local instancetypes = require "providers.alibaba.instancetypes"
local pricing = require "providers.alibaba.pricing"
local requirements = require "providers.alibaba.requirements"

local json = luaprov.json

local function by_name(list)
  local out = {}
  for _, t in ipairs(list) do out[t.name] = t end
  return out
end

local function req_of(reqs, key)
  for _, r in ipairs(reqs) do
    if r.key == key then return r end
  end
end

local function offering(t, zone, ct)
  for _, o in ipairs(t.offerings) do
    if o.zone == zone and o.capacity_type == ct then return o end
  end
end

local function itype(id, cpu, gib, extra)
  local t = { InstanceTypeId = id, CpuCoreCount = cpu, MemorySize = gib, CpuArchitecture = "X86",
    PhysicalProcessorModel = "Intel Xeon(Ice Lake) Platinum 8369B", GPUAmount = 0, GPUSpec = "",
    EniQuantity = 3, EniPrivateIpAddressQuantity = 15 }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local H, I, J = "cn-fake-h", "cn-fake-i", "cn-fake-j"

local function data()
  return {
    region = "cn-fake",
    zones = { H, I, J },
    instance_types = {
      itype("ecs.g7.xlarge", 4, 16),
      itype("ecs.g8y.large", 2, 8, { CpuArchitecture = "ARM", PhysicalProcessorModel = "Yitian 710" }),
      itype("ecs.gn7i-c8g1.2xlarge", 8, 30, { GPUAmount = 1, GPUSpec = "NVIDIA A10", GPUMemorySize = 24,
        EniQuantity = 4 }),
      itype("ecs.t6-c1m1.large", 2, 2, { EniQuantity = 1, EniPrivateIpAddressQuantity = 2 }),
      itype("ecs.e-c1m1.large", 2, 2, { EniQuantity = 0, PhysicalProcessorModel = "AMD EPYC 7T83" }),
      itype("ecs.c7.large", 2, 4),
      itype("ecs.x9.huge", 2, 4), -- not sold in the region at all
    },
    stock = {
      ["on-demand"] = {
        ["ecs.g7.xlarge"] = { [H] = "WithStock", [I] = "WithoutStock", [J] = "WithStock" },
        ["ecs.g8y.large"] = { [H] = "WithStock" },
        ["ecs.gn7i-c8g1.2xlarge"] = { [I] = "ClosedWithStock" },
        ["ecs.t6-c1m1.large"] = { [H] = "WithStock" },
        ["ecs.e-c1m1.large"] = { [H] = "WithStock" },
        ["ecs.c7.large"] = { [H] = "WithStock", [I] = "WithStock" },
      },
      spot = {
        ["ecs.g7.xlarge"] = { [H] = "WithStock", [I] = "ClosedWithStock" },
        ["ecs.g8y.large"] = { [H] = "ClosedWithoutStock" },
        ["ecs.c7.large"] = { [H] = "WithStock" },
      },
    },
    prices = { ["ecs.g7.xlarge"] = 0.5, ["ecs.g8y.large"] = 0.3, ["ecs.gn7i-c8g1.2xlarge"] = 9.8,
      ["ecs.t6-c1m1.large"] = 0.05, ["ecs.e-c1m1.large"] = 0.06 },
    spot_prices = { ["ecs.g7.xlarge"] = { [H] = 0.1, [I] = 0.12 } },
  }
end

local function nodeclass(spec_extra, vswitch_zones)
  local vsw = setmetatable({}, json.array_mt)
  for i, z in ipairs(vswitch_zones or { H, I }) do vsw[i] = { id = "vsw-" .. i, zoneID = z } end
  local spec = { systemDisk = { volumeSize = "40Gi" } }
  for k, v in pairs(spec_extra or {}) do spec[k] = v end
  return { metadata = { name = "default" }, spec = spec, status = { vSwitches = vsw } }
end

describe("capacity formulas (the upstream provider's)", function()
  it("reserves CPU as ACK does", function()
    local want = { [500] = 0, [1000] = 60, [2000] = 70, [3000] = 75, [4000] = 80, [8000] = 90, [16000] = 110,
      [32000] = 150, [64000] = 230, [104000] = 330 }
    for milli, m in pairs(want) do assert.equals(m, capacity.cpu_overhead_milli(milli), milli) end
  end)

  it("reserves memory as min(11 per pod + 255, a quarter) + 200 MiB", function()
    local cases = { { 110, 1024, 456 }, { 110, 2048, 712 }, { 110, 4096, 1224 }, { 110, 8192, 1665 },
      { 110, 16384, 1665 }, { 256, 32768, 3271 }, { 33, 16384, 818 }, { 0, 0, 200 } }
    for _, c in ipairs(cases) do assert.equals(c[3], capacity.memory_overhead_mib(c[2], c[1])) end
  end)

  it("subtracts the 6.5 % VM overhead, rounded up", function()
    local want = { [0.5] = 478, [1] = 957, [2] = 1914, [4] = 3829, [8] = 7659, [16] = 15319, [32] = 30638,
      [64] = 61276, [128] = 122552, [256] = 245104 }
    for gib, mib in pairs(want) do assert.equals(mib, capacity.memory_mib({ MemorySize = gib }), gib) end
  end)

  it("counts pods from maxPods, the CNI and podsPerCore", function()
    local it4 = { CpuCoreCount = 4, EniQuantity = 3, EniPrivateIpAddressQuantity = 15 }
    assert.equals(33, capacity.pods(it4, nil, "terway-eniip"))
    assert.equals(16, capacity.pods(it4, { podsPerCore = 4 }, "terway-eniip"))
    assert.equals(5, capacity.pods(it4, nil, "terway-eni"))
    assert.equals(256, capacity.pods(it4, nil, "Flannel"))
    assert.equals(110, capacity.pods(it4, nil, nil))
    assert.equals(50, capacity.pods(it4, { maxPods = 50 }, "terway-eniip"))
    assert.equals(40, capacity.pods(it4, { maxPods = 50, podsPerCore = 10 }, nil))
    assert.equals(0, capacity.pods(it4, { maxPods = 0 }, nil))
  end)

  it("keeps a type under Terway only with 11 pod IPs on its secondary ENIs", function()
    assert.is_false(capacity.keep_for_cni({ EniQuantity = 2, EniPrivateIpAddressQuantity = 6 }, "terway-eniip"))
    assert.is_true(capacity.keep_for_cni({ EniQuantity = 3, EniPrivateIpAddressQuantity = 6 }, "terway-eniip"))
    assert.is_true(capacity.keep_for_cni({ EniQuantity = 1 }, nil))
  end)

  it("parses type names as the upstream provider does", function()
    local cases = {
      ["ecs.g7.xlarge"] = { "g", "7", "ecs.g7", "xlarge" },
      ["ecs.c7a.large"] = { "c", "7", "ecs.c7a", "large" },
      ["ecs.gn7i-c8g1.2xlarge"] = { "gn", "7", "ecs.gn7i-c8g1", "2xlarge" },
      ["ecs.ebmg7.32xlarge"] = { "ebmg", "7", "ecs.ebmg7", "32xlarge" },
      ["ecs.t6-c1m1.large"] = { "t", "6", "ecs.t6-c1m1", "large" },
      ["ecs.e-c1m1.large"] = { nil, nil, "ecs.e-c1m1", "large" },
      ["ecs.d1-2tb3.large"] = { "d", "1", "ecs.d1-2tb3", "large" },
    }
    for name, want in pairs(cases) do
      local p = requirements.name_parts(name)
      assert.same(want, { p.category, p.generation, p.family, p.size }, name)
    end
  end)
end)

describe("instancetypes.list (fake cloud)", function()
  local cloud
  before_each(function()
    cloud = harness.fake_cloud(data())
    cloud.install()
  end)
  after_each(function() cloud.uninstall() end)

  it("emits an offering for every known zone and capacity type (rule CP4)", function()
    local types = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))
    for name, t in pairs(types) do
      assert.equals(6, #t.offerings, name)
      for _, z in ipairs { H, I, J } do
        for _, ct in ipairs { "on-demand", "spot" } do assert.is_table(offering(t, z, ct), name .. z .. ct) end
      end
    end
    local g7 = types["ecs.g7.xlarge"]
    assert.is_true(offering(g7, H, "on-demand").available)
    assert.is_true(offering(g7, H, "spot").available)
    assert.is_false(offering(g7, I, "on-demand").available)   -- sold out
    assert.is_true(offering(g7, I, "spot").available)         -- ClosedWithStock is still sold
    assert.is_false(offering(g7, J, "on-demand").available)   -- in stock, but no vSwitch in J
    assert.is_false(offering(g7, J, "spot").available)        -- not sold as spot in J
    assert.is_false(offering(types["ecs.g8y.large"], H, "spot").available) -- ClosedWithoutStock
    -- a type the region does not sell at all (DescribeAvailableResource never lists it) has no offering
    assert.is_nil(types["ecs.x9.huge"])
  end)

  it("builds the type's zone and capacity-type requirements from all offerings", function()
    local g8y = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))["ecs.g8y.large"]
    assert.same({ key = "topology.kubernetes.io/zone", operator = "In", values = { H, I, J } },
      req_of(g8y.requirements, "topology.kubernetes.io/zone"))
    assert.same({ H, I, J }, req_of(g8y.requirements, "topology.k8s.alibabacloud/zone-id").values)
    assert.same({ "on-demand", "spot" }, req_of(g8y.requirements, "karpenter.sh/capacity-type").values)
    assert.same({
      { key = "karpenter.sh/capacity-type", operator = "In", values = { "spot" } },
      { key = "topology.kubernetes.io/zone", operator = "In", values = { H } },
      { key = "topology.k8s.alibabacloud/zone-id", operator = "In", values = { H } },
    }, offering(g8y, H, "spot").requirements)
  end)

  it("prices on-demand offerings and spot offerings per zone; a type without a price keeps its offerings", function()
    local types = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))
    local g7 = types["ecs.g7.xlarge"]
    assert.equals(0.5, offering(g7, H, "on-demand").price)
    assert.equals(0.5, offering(g7, J, "on-demand").price)
    assert.equals(0.1, offering(g7, H, "spot").price)    -- the newest point of the history
    assert.equals(0.12, offering(g7, I, "spot").price)
    assert.is_nil(offering(g7, J, "spot").price)
    local c7 = types["ecs.c7.large"]
    assert.equals(6, #c7.offerings)
    assert.is_nil(offering(c7, H, "on-demand").price)
    assert.is_true(offering(c7, H, "on-demand").available)
  end)

  it("labels a type with every well-known and provider label", function()
    local g7 = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))["ecs.g7.xlarge"]
    local want = {
      ["node.kubernetes.io/instance-type"] = { "In", "ecs.g7.xlarge" },
      ["kubernetes.io/arch"] = { "In", "amd64" },
      ["kubernetes.io/os"] = { "In", "linux" },
      ["topology.kubernetes.io/region"] = { "In", "cn-fake" },
      ["node.kubernetes.io/windows-build"] = { "DoesNotExist" },
      ["karpenter.k8s.alibabacloud/instance-cpu"] = { "In", "4" },
      ["karpenter.k8s.alibabacloud/instance-memory"] = { "In", "16384" },
      ["karpenter.k8s.alibabacloud/instance-category"] = { "In", "g" },
      ["karpenter.k8s.alibabacloud/instance-generation"] = { "In", "7" },
      ["karpenter.k8s.alibabacloud/instance-family"] = { "In", "ecs.g7" },
      ["karpenter.k8s.alibabacloud/instance-size"] = { "In", "xlarge" },
      ["karpenter.k8s.alibabacloud/instance-cpu-model"] = { "In", "intel" },
      ["karpenter.k8s.alibabacloud/instance-gpu-name"] = { "DoesNotExist" },
      ["karpenter.k8s.alibabacloud/instance-gpu-manufacturer"] = { "DoesNotExist" },
      ["karpenter.k8s.alibabacloud/instance-gpu-count"] = { "DoesNotExist" },
      ["karpenter.k8s.alibabacloud/instance-gpu-memory"] = { "DoesNotExist" },
    }
    for key, w in pairs(want) do
      local r = req_of(g7.requirements, key)
      assert.is_table(r, key)
      assert.equals(w[1], r.operator, key)
      if w[2] then assert.same({ w[2] }, r.values, key) else assert.same({}, r.values, key) end
    end
    assert.equals(19, #g7.requirements)
    for i = 2, #g7.requirements do assert.is_true(g7.requirements[i - 1].key < g7.requirements[i].key) end
  end)

  it("computes capacity and overhead of a 4 vCPU / 16 GiB type by hand", function()
    local g7 = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))["ecs.g7.xlarge"]
    assert.same({ cpu = "4", memory = "15319Mi", pods = "110", ["ephemeral-storage"] = "40Gi",
      ["alibabacloud.com/exclusive-eni"] = "2" }, g7.capacity)
    -- cpu 60+10+5+5 = 80m; memory min(11*110+255, 16384/4) + 200 = 1665Mi
    assert.same({ kube_reserved = { cpu = "80m", memory = "1665Mi" }, system_reserved = {}, eviction_threshold = {} },
      g7.overhead)
  end)

  it("uses the Terway ENI formula for pods and drops types Terway cannot serve", function()
    local ctx = { region = cloud.ctx.region, endpoint = cloud.ctx.endpoint, cni = "terway-eniip" }
    local types = by_name(assert(instancetypes.list(ctx, nodeclass())))
    local g7 = types["ecs.g7.xlarge"]
    assert.equals("33", g7.capacity.pods)                      -- (3 - 1) * 15 + 3
    assert.equals("818Mi", g7.overhead.kube_reserved.memory)   -- min(11*33+255, 4096) + 200
    assert.is_nil(types["ecs.t6-c1m1.large"])                  -- (1 - 1) * 2 < 11
  end)

  it("takes maxPods and podsPerCore from the kubelet configuration, and the system disk size", function()
    local class = nodeclass { kubeletConfiguration = { maxPods = 64, podsPerCore = 8 }, systemDisk = { size = 60 } }
    local g7 = by_name(assert(instancetypes.list(cloud.ctx, class)))["ecs.g7.xlarge"]
    assert.equals("32", g7.capacity.pods)
    assert.equals("60Gi", g7.capacity["ephemeral-storage"])
    local plain = by_name(assert(instancetypes.list(cloud.ctx, nodeclass { systemDisk = json.null })))
    assert.equals("40Gi", plain["ecs.g7.xlarge"].capacity["ephemeral-storage"])
  end)

  it("describes ARM types", function()
    local g8y = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))["ecs.g8y.large"]
    assert.same({ "arm64" }, req_of(g8y.requirements, "kubernetes.io/arch").values)
    assert.equals("DoesNotExist", req_of(g8y.requirements, "karpenter.k8s.alibabacloud/instance-cpu-model").operator)
    assert.equals("7659Mi", g8y.capacity.memory)
    assert.same({ cpu = "70m", memory = "1665Mi" }, g8y.overhead.kube_reserved)
  end)

  it("describes GPU types", function()
    local gn = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))["ecs.gn7i-c8g1.2xlarge"]
    assert.equals("1", gn.capacity["nvidia.com/gpu"])
    assert.equals("28723Mi", gn.capacity.memory)                -- 30720 - ceil(30720 * 0.065)
    assert.equals("3", gn.capacity["alibabacloud.com/exclusive-eni"])
    assert.same({ "nvidia-a10" }, req_of(gn.requirements, "karpenter.k8s.alibabacloud/instance-gpu-name").values)
    assert.same({ "NVIDIA" }, req_of(gn.requirements, "karpenter.k8s.alibabacloud/instance-gpu-manufacturer").values)
    assert.same({ "1" }, req_of(gn.requirements, "karpenter.k8s.alibabacloud/instance-gpu-count").values)
    assert.same({ "24" }, req_of(gn.requirements, "karpenter.k8s.alibabacloud/instance-gpu-memory").values)
    assert.same({ "gn" }, req_of(gn.requirements, "karpenter.k8s.alibabacloud/instance-category").values)
  end)

  it("never reports a negative or zero exclusive-ENI count", function()
    local types = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))
    assert.is_nil(types["ecs.t6-c1m1.large"].capacity["alibabacloud.com/exclusive-eni"]) -- 1 ENI
    assert.is_nil(types["ecs.e-c1m1.large"].capacity["alibabacloud.com/exclusive-eni"])  -- 0 ENIs
    for name, t in pairs(types) do
      local n = t.capacity["alibabacloud.com/exclusive-eni"]
      if n then assert.is_true(tonumber(n) > 0, name) end
    end
    local t6 = types["ecs.t6-c1m1.large"]
    assert.equals("1914Mi", t6.capacity.memory)
    assert.equals("712Mi", t6.overhead.kube_reserved.memory)   -- min(1465, 512) + 200
    assert.equals("amd",
      req_of(types["ecs.e-c1m1.large"].requirements, "karpenter.k8s.alibabacloud/instance-cpu-model").values[1])
  end)

  it("marks every offering unavailable when the class has no vSwitches yet", function()
    local class = nodeclass()
    class.status = json.null
    for _, t in ipairs(assert(instancetypes.list(cloud.ctx, class))) do
      for _, o in ipairs(t.offerings) do assert.is_false(o.available) end
    end
  end)

  it("makes no API call on a repeat list", function()
    assert(instancetypes.list(cloud.ctx, nodeclass()))
    local first = cloud.total
    assert.is_true(first > 0)
    assert(instancetypes.list(cloud.ctx, nodeclass({}, { J })))
    assert.equals(first, cloud.total)
  end)

  it("bounds the price requests of one call, and prices the launchable types first", function()
    local saved = pricing.max_calls_per_list
    pricing.max_calls_per_list = 2
    local ok, err = pcall(function()
      -- launchable types by name: c7.large (on-demand + spot), e-c1m1.large (on-demand only), g7.xlarge, ...
      local types = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))
      assert.equals(1, cloud.calls.DescribePrice)
      assert.equals(1, cloud.calls.DescribeSpotPriceHistory)
      assert.is_nil(offering(types["ecs.g7.xlarge"], H, "on-demand").price)  -- not yet
      local before = cloud.total
      types = by_name(assert(instancetypes.list(cloud.ctx, nodeclass())))
      assert.equals(2, cloud.total - before)                 -- the next call prices the next ones
      assert.equals(0.06, offering(types["ecs.e-c1m1.large"], H, "on-demand").price)
      assert.equals(0.5, offering(types["ecs.g7.xlarge"], H, "on-demand").price)
      assert.is_nil(offering(types["ecs.g7.xlarge"], H, "spot").price)       -- its spot price comes next time
    end)
    pricing.max_calls_per_list = saved
    assert(ok, err)
  end)

  it("returns the API error, naming the action, when the catalogue cannot be read", function()
    cloud.faults.DescribeInstanceTypes = { status = 503, code = "ServiceUnavailable", message = "down" }
    local types, err = instancetypes.list(cloud.ctx, nodeclass())
    assert.is_nil(types)
    assert.equals("ServiceUnavailable", err.code)
    assert.matches("DescribeInstanceTypes", err.message, 1, true)
  end)

  it("keeps listing, without prices, when the price API throttles", function()
    cloud.faults.DescribePrice = { status = 400, code = "Throttling", message = "slow down" }
    local types = assert(instancetypes.list(cloud.ctx, nodeclass()))
    assert.equals(6, #types)
    for _, t in ipairs(types) do
      for _, o in ipairs(t.offerings) do
        if o.capacity_type == "on-demand" then assert.is_nil(o.price, t.name) end
      end
    end
    -- every type was asked (in one batch), and a throttled answer is not asked again at once
    local asked = cloud.calls.DescribePrice
    assert.is_true(asked >= 6)
    assert(instancetypes.list(cloud.ctx, nodeclass()))
    assert.equals(asked, cloud.calls.DescribePrice)
  end)
end)

-- The simulator's default catalogue (sim/alibaba/catalogue.lua): cn-hangzhou, zones h i j k, 65 types,
-- fixed sold-out exceptions. The ECSNodeClass fixture has vSwitches in h, i and j only, so k is the
-- vSwitch-less zone. Each describe block starts its own simulator, so the mapping's caches (keyed
-- by endpoint) start cold.
describe("instancetypes.list against the Alibaba simulator", function()
  local sim, class, types
  local ZONES = { "cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j", "cn-hangzhou-k" }

  local function calls()
    return sim.admin("GET", "/_sim/state")
  end

  setup(function()
    sim = harness.start_sim()
    sim.use_credentials(harness.sim_credentials())
    class = harness.load_json("ecsnodeclass.json")
    types = by_name(assert(instancetypes.list(sim.ctx, class)))
  end)
  teardown(function() if sim then sim.stop() end end)

  it("lists every type of the catalogue with an offering per zone and capacity type", function()
    local n = 0
    for name, t in pairs(types) do
      n = n + 1
      assert.equals(8, #t.offerings, name)
      for _, z in ipairs(ZONES) do
        for _, ct in ipairs { "on-demand", "spot" } do assert.is_table(offering(t, z, ct), name .. " " .. z .. ct) end
      end
    end
    assert.equals(calls().catalogue.instance_types, n)
  end)

  it("marks sold-out stock unavailable and keeps low stock available", function()
    local g7big = types["ecs.g7.16xlarge"]                  -- WithoutStock in h
    assert.is_false(offering(g7big, "cn-hangzhou-h", "on-demand").available)
    assert.is_false(offering(g7big, "cn-hangzhou-h", "spot").available)
    assert.is_true(offering(g7big, "cn-hangzhou-i", "on-demand").available)
    assert.is_false(offering(types["ecs.c8y.4xlarge"], "cn-hangzhou-j", "on-demand").available) -- ClosedWithoutStock
    assert.is_true(offering(types["ecs.c8y.4xlarge"], "cn-hangzhou-j", "spot").available)
    assert.is_false(offering(types["ecs.gn7i-c8g1.2xlarge"], "cn-hangzhou-i", "spot").available)
    assert.is_true(offering(types["ecs.g7.large"], "cn-hangzhou-j", "on-demand").available)  -- ClosedWithStock
  end)

  it("marks every offering in a zone without a vSwitch unavailable", function()
    for name, t in pairs(types) do
      assert.is_false(offering(t, "cn-hangzhou-k", "on-demand").available, name)
      assert.is_false(offering(t, "cn-hangzhou-k", "spot").available, name)
    end
  end)

  it("builds zone and capacity-type requirements from all offerings, sold there or not", function()
    local gn6i = types["ecs.gn6i-c4g1.xlarge"]              -- sold in h, i, j only
    assert.is_false(offering(gn6i, "cn-hangzhou-k", "on-demand").available)
    assert.same(ZONES, req_of(gn6i.requirements, "topology.kubernetes.io/zone").values)
    assert.same({ "on-demand", "spot" }, req_of(gn6i.requirements, "karpenter.sh/capacity-type").values)
  end)

  it("prices on-demand from DescribePrice and spot per zone from the price history", function()
    local g7 = types["ecs.g7.xlarge"]
    assert.equals(0.96, offering(g7, "cn-hangzhou-h", "on-demand").price)   -- 4 * 0.12 + 16 * 0.03
    for _, z in ipairs(ZONES) do
      local spot = offering(g7, z, "spot").price
      assert.is_number(spot)
      -- 12-36% of on-demand, moving up to 5% either way by the hour: 11.4-37.8%
      assert.is_true(spot >= 0.96 * 0.114 - 1e-4 and spot <= 0.96 * 0.378 + 1e-4, z)
    end
  end)

  it("computes capacity and overhead of known types by the upstream formulas", function()
    local g7 = types["ecs.g7.xlarge"]                       -- 4 vCPU, 16 GiB, 4 ENIs
    assert.same({ cpu = "4", memory = "15319Mi", pods = "110", ["ephemeral-storage"] = "40Gi",
      ["alibabacloud.com/exclusive-eni"] = "3" }, g7.capacity)
    assert.same({ cpu = "80m", memory = "1665Mi" }, g7.overhead.kube_reserved)
    local t6 = types["ecs.t6-c2m1.large"]                   -- 2 vCPU, 1 GiB, 2 ENIs
    assert.same({ cpu = "2", memory = "957Mi", pods = "110", ["ephemeral-storage"] = "40Gi",
      ["alibabacloud.com/exclusive-eni"] = "1" }, t6.capacity)
    assert.same({ cpu = "70m", memory = "456Mi" }, t6.overhead.kube_reserved)  -- min(1465, 256) + 200
    -- the class's kubelet systemReserved, which the bootstrap hands the node
    assert.same({ cpu = "100m", memory = "200Mi" }, t6.overhead.system_reserved)
    assert.same({}, t6.overhead.eviction_threshold)
  end)

  it("describes ARM types", function()
    local g8y = types["ecs.g8y.large"]                      -- Yitian 710, 2 vCPU, 8 GiB
    assert.same({ "arm64" }, req_of(g8y.requirements, "kubernetes.io/arch").values)
    assert.equals("DoesNotExist", req_of(g8y.requirements, "karpenter.k8s.alibabacloud/instance-cpu-model").operator)
    assert.same({ "8192" }, req_of(g8y.requirements, "karpenter.k8s.alibabacloud/instance-memory").values)
    assert.equals("7659Mi", g8y.capacity.memory)
    assert.same({ "amd" },
      req_of(types["ecs.g8a.large"].requirements, "karpenter.k8s.alibabacloud/instance-cpu-model").values)
  end)

  it("describes GPU types", function()
    local gn6i = types["ecs.gn6i-c4g1.xlarge"]              -- 4 vCPU, 15 GiB, one NVIDIA T4
    assert.equals("1", gn6i.capacity["nvidia.com/gpu"])
    assert.equals("14361Mi", gn6i.capacity.memory)           -- 15360 - ceil(998.4)
    assert.same({ "nvidia-t4" }, req_of(gn6i.requirements, "karpenter.k8s.alibabacloud/instance-gpu-name").values)
    assert.same({ "16" }, req_of(gn6i.requirements, "karpenter.k8s.alibabacloud/instance-gpu-memory").values)
    assert.equals("2", types["ecs.gn7i-c32g1.16xlarge"].capacity["nvidia.com/gpu"])
    assert.is_nil(types["ecs.g7.xlarge"].capacity["nvidia.com/gpu"])
  end)

  it("never reports a negative exclusive-ENI count", function()
    for name, t in pairs(types) do
      local n = t.capacity["alibabacloud.com/exclusive-eni"]
      assert.is_true(n == nil or tonumber(n) >= 1, name)
    end
  end)

  it("uses the Terway ENI formula for pods when the CNI is Terway", function()
    local ctx = { region = sim.ctx.region, endpoint = sim.ctx.endpoint, cni = "terway-eniip" }
    local noclass = harness.load_json("ecsnodeclass.json")
    noclass.spec.kubeletConfiguration = json.null
    local terway = by_name(assert(instancetypes.list(ctx, noclass)))
    assert.equals("48", terway["ecs.g7.xlarge"].capacity.pods)               -- (4 - 1) * 15 + 3
    assert.equals("983Mi", terway["ecs.g7.xlarge"].overhead.kube_reserved.memory) -- min(11*48+255, 4096) + 200
    assert.is_nil(terway["ecs.t6-c2m1.large"])                               -- (2 - 1) * 2 pod IPs < 11
  end)

  it("makes no API call when listed again", function()
    local before = calls().total_calls
    assert(instancetypes.list(sim.ctx, class))
    assert(instancetypes.list(sim.ctx, harness.load_json("ecsnodeclass.json")))
    assert.equals(before, calls().total_calls)
  end)
end)

describe("instancetypes.list against the simulator with faults", function()
  local sim

  setup(function()
    sim = harness.start_sim()
    sim.use_credentials(harness.sim_credentials())
  end)
  teardown(function() if sim then sim.stop() end end)

  it("follows out-of-stock faults, and keeps the offerings of a type the price API refuses", function()
    sim.admin("POST", "/_sim/faults", {
      { kind = "nostock", zone = "cn-hangzhou-i", instance_type = "ecs.c7.large", capacity_type = "on-demand" },
      { action = "DescribePrice", code = "InvalidInstanceType.ValueNotSupported", count = 1 },
    })
    local types = assert(instancetypes.list(sim.ctx, harness.load_json("ecsnodeclass.json")))
    local c7 = by_name(types)["ecs.c7.large"]
    assert.is_false(offering(c7, "cn-hangzhou-i", "on-demand").available)
    assert.is_true(offering(c7, "cn-hangzhou-i", "spot").available)
    local unpriced = {}
    for _, t in ipairs(types) do
      if offering(t, "cn-hangzhou-h", "on-demand").price == nil then unpriced[#unpriced + 1] = t end
    end
    assert.equals(1, #unpriced)
    assert.equals(8, #unpriced[1].offerings)
    assert.is_number(offering(unpriced[1], "cn-hangzhou-h", "spot").price)
  end)
end)

describe("instancetypes.list against a scaled simulator catalogue", function()
  local sim

  setup(function()
    sim = harness.start_sim()
    sim.use_credentials(harness.sim_credentials())
    sim.admin("POST", "/_sim/catalogue", { instance_types = 400, zones = 6 })
  end)
  teardown(function() if sim then sim.stop() end end)

  local function price_calls()
    local c = sim.admin("GET", "/_sim/state").calls
    return (c.DescribePrice or 0) + (c.DescribeSpotPriceHistory or 0)
  end

  it("lists 400 types with 12 offerings each and bounds the price requests of each call", function()
    local class = harness.load_json("ecsnodeclass.json")
    local types = assert(instancetypes.list(sim.ctx, class))
    assert.equals(400, #types)
    for _, t in ipairs(types) do assert.equals(12, #t.offerings, t.name) end
    -- 400 types x (on-demand + spot), one batch, capped by max_calls_per_list
    assert.equals(math.min(pricing.max_calls_per_list, 800), price_calls())
    local rounds = 1
    repeat
      local before = price_calls()
      assert(instancetypes.list(sim.ctx, class))
      rounds = rounds + 1
    until price_calls() == before or rounds > 10
    assert.is_true(rounds <= 6)
    local priced = 0
    for _, t in ipairs(assert(instancetypes.list(sim.ctx, class))) do
      for _, o in ipairs(t.offerings) do
        if o.capacity_type == "on-demand" and o.price then
          priced = priced + 1
          break
        end
      end
    end
    assert.is_true(priced >= 390, priced)
  end)
end)
