-- The Alibaba simulator's capacity reservations (private pools): DescribeCapacityReservations (shape,
-- filters, paging), RunInstances' PrivatePoolOptions (Target, Open, None; the real refusals, a full
-- pool's Invalid.PrivatePoolOptions.status), UsedAmount taken on launch and given back on release, the
-- pool recorded on the instance, and the admin paths.
local luaprov = require "luaprov"
local s = require "sim.alibaba_support"

local R = "cn-hangzhou"
local TARGET, OPEN, PREPARED = "crp-bp1sim0target0001", "crp-bp1sim0open000001", "crp-bp1sim0prepared01"
local H, I = "cn-hangzhou-h", "cn-hangzhou-i"

describe("alibaba simulator: capacity reservations", function()
  local sim

  setup(function() sim = s.start() end)
  teardown(function() if sim then sim.stop() end end)
  before_each(function() s.reset(sim) end)

  local function describe_pools(params)
    local p = { RegionId = R }
    for k, v in pairs(params or {}) do p[k] = v end
    return s.ok(sim, "ecs", "DescribeCapacityReservations", p)
  end

  local function ids(body)
    local out = {}
    for i, item in ipairs(body.CapacityReservationSet.CapacityReservationItem) do out[i] = item.PrivatePoolOptionsId end
    return out
  end

  local function pool(id)
    for _, p in ipairs(s.state(sim).capacity_reservations) do
      if p.id == id then return p end
    end
  end

  -- RunInstances of instance_type in zone's tagged vSwitch.
  local function run(instance_type, zone, extra)
    local p = { RegionId = R, InstanceType = instance_type, ImageId = "aliyun_3_x64_20G_alibase_20240819.vhd",
      VSwitchId = zone == H and "vsw-bp1simh0000001" or "vsw-bp1simi0000001",
      ["SecurityGroupIds.1"] = "sg-bp1sim0nodes00001" }
    for k, v in pairs(extra or {}) do p[k] = v end
    return s.call(sim, "ecs", "RunInstances", p)
  end

  local function launched(instance_type, zone, extra)
    local status, body = run(instance_type, zone, extra)
    assert.equals(200, status, body and body.Code)
    return body.InstanceIdSets.InstanceIdSet[1]
  end

  local function recorded(id)
    for _, inst in ipairs(s.state(sim).instances) do
      if inst.id == id then return inst end
    end
  end

  local function target(id)
    return { ["PrivatePoolOptions.MatchCriteria"] = "Target", ["PrivatePoolOptions.Id"] = id }
  end

  describe("DescribeCapacityReservations", function()
    it("lists the pools in effect or coming (not Pending or Released), in the documented shape", function()
      local body = describe_pools()
      assert.same({ OPEN, PREPARED, TARGET }, ids(body)) -- by ID
      assert.equals(3, body.TotalCount)
      local item = body.CapacityReservationSet.CapacityReservationItem[3]
      assert.equals("Active", item.Status)
      assert.equals("Target", item.PrivatePoolOptionsMatchCriteria)
      assert.equals("luaprov-sim-ml", item.PrivatePoolOptionsName)
      assert.same({ { InstanceType = "ecs.g7.xlarge", zoneId = I, TotalAmount = 2, UsedAmount = 0,
        AvailableAmount = 2 } }, item.AllocatedResources.AllocatedResource)
      assert.same({ { TagKey = "karpenter.sh/discovery", TagValue = "luaprov-sim" },
        { TagKey = "team", TagValue = "ml" } }, item.Tags.Tag)
      assert.equals("Prepared", body.CapacityReservationSet.CapacityReservationItem[2].Status)
    end)

    it("filters by PrivatePoolOptions.Ids (a JSON array), tags, Status, type and zone", function()
      assert.same({ OPEN },
        ids(describe_pools { ["PrivatePoolOptions.Ids"] = luaprov.json.encode { OPEN, "crp-none" } }))
      assert.same({ TARGET }, ids(describe_pools { ["Tag.1.Key"] = "team", ["Tag.1.Value"] = "ml" }))
      assert.same({ OPEN, TARGET }, ids(describe_pools { Status = "Active" }))
      assert.same({ OPEN }, ids(describe_pools { InstanceType = "ecs.g7.large", ZoneId = H }))
      local status, body = s.call(sim, "ecs", "DescribeCapacityReservations",
        { RegionId = R, ["PrivatePoolOptions.Ids"] = "crp-1" })
      assert.equals(400, status)
      assert.equals("InvalidParameter.PrivatePoolOptions.Ids", body.Code)
    end)

    it("pages with MaxResults and NextToken", function()
      local first = describe_pools { MaxResults = "2" }
      assert.same({ OPEN, PREPARED }, ids(first))
      assert.is_true(#first.NextToken > 0)
      local second = describe_pools { MaxResults = "2", NextToken = first.NextToken }
      assert.same({ TARGET }, ids(second))
      assert.equals("", second.NextToken)
    end)
  end)

  describe("RunInstances' PrivatePoolOptions", function()
    it("Target launches into the pool, taking one of its capacity, and release gives it back", function()
      local id = launched("ecs.g7.xlarge", I, target(TARGET))
      assert.same({ id = TARGET, match_criteria = "Target" }, recorded(id).private_pool)
      assert.equals(1, pool(TARGET).used_amount)
      local item = describe_pools({ ["PrivatePoolOptions.Ids"] = luaprov.json.encode { TARGET } })
        .CapacityReservationSet.CapacityReservationItem[1]
      assert.equals(1, item.AllocatedResources.AllocatedResource[1].UsedAmount)
      assert.equals(1, item.AllocatedResources.AllocatedResource[1].AvailableAmount)
      assert.equals(200, (s.admin(sim, "POST", "/_sim/advance", { seconds = 30 })))
      s.ok(sim, "ecs", "DeleteInstance", { InstanceId = id, Force = "true" })
      assert.equals(0, pool(TARGET).used_amount)
    end)

    it("refuses a full pool with Invalid.PrivatePoolOptions.status, launching nothing", function()
      launched("ecs.g7.xlarge", I, target(TARGET))
      launched("ecs.g7.xlarge", I, target(TARGET))
      local status, body = run("ecs.g7.xlarge", I, target(TARGET))
      assert.equals(400, status)
      assert.equals("Invalid.PrivatePoolOptions.status", body.Code)
      assert.equals("The PrivatePool has been used up.", body.Message)
      assert.equals(2, #s.state(sim).instances)
      assert.equals(2, pool(TARGET).used_amount)
    end)

    it("refuses a pool that does not fit the launch, with the API's codes", function()
      local function code(instance_type, zone, extra)
        local status, body = run(instance_type, zone, extra)
        assert.equals(400, status)
        return body.Code
      end
      assert.equals("Invalid.InstanceType", code("ecs.g7.large", I, target(TARGET)))
      assert.equals("Invalid.ZoneId", code("ecs.g7.xlarge", H, target(TARGET)))
      assert.equals("Invalid.PrivatePoolOptions.Id", code("ecs.g7.xlarge", I, target("crp-none")))
      assert.equals("Invalid.PrivatePoolOptions.status", code("ecs.g7.large", I, target(PREPARED)))
      assert.equals("MissingParameter.PrivatePoolOptions.Id", code("ecs.g7.xlarge", I,
        { ["PrivatePoolOptions.MatchCriteria"] = "Target" }))
      assert.equals("SpotNotSupported", code("ecs.g7.xlarge", I, { SpotStrategy = "SpotAsPriceGo",
        ["PrivatePoolOptions.MatchCriteria"] = "Target", ["PrivatePoolOptions.Id"] = TARGET }))
      assert.same({}, s.state(sim).instances)
    end)

    it("Open takes a matching open pool with room, even when the public pool is sold out", function()
      s.admin(sim, "POST", "/_sim/faults", { kind = "nostock", zone = H, instance_type = "ecs.g7.large" })
      local open = { ["PrivatePoolOptions.MatchCriteria"] = "Open" }
      local a = launched("ecs.g7.large", H, open)
      local b = launched("ecs.g7.large", H, open)
      assert.same({ id = OPEN, match_criteria = "Open" }, recorded(a).private_pool)
      assert.same({ id = OPEN, match_criteria = "Open" }, recorded(b).private_pool)
      assert.equals(3, pool(OPEN).used_amount)
      -- the pool is full: the public pool, sold out here
      local status, body = run("ecs.g7.large", H, open)
      assert.equals(403, status)
      assert.equals("OperationDenied.NoStock", body.Code)
    end)

    it("None, or no PrivatePoolOptions, launches from the public pool", function()
      local none = launched("ecs.g7.large", H, { ["PrivatePoolOptions.MatchCriteria"] = "None" })
      local plain = launched("ecs.g7.large", H)
      assert.is_nil(recorded(none).private_pool)
      assert.is_nil(recorded(plain).private_pool)
      assert.equals(1, pool(OPEN).used_amount)
    end)
  end)

  describe("admin paths", function()
    it("shows the pools and lets a test change another workload's use", function()
      local status, body = s.admin(sim, "GET", "/_sim/capacity-reservations")
      assert.equals(200, status)
      assert.equals(3, #body.capacity_reservations)
      status, body = s.admin(sim, "POST", "/_sim/capacity-reservations/" .. TARGET, { used_amount = 2 })
      assert.equals(200, status)
      assert.same({ id = TARGET, used_amount = 2, total_amount = 2 }, body)
      local refused = run("ecs.g7.xlarge", I, target(TARGET))
      assert.equals(400, refused)
      assert.equals(400, (s.admin(sim, "POST", "/_sim/capacity-reservations/" .. TARGET, { used_amount = 3 })))
      assert.equals(404, (s.admin(sim, "POST", "/_sim/capacity-reservations/crp-none", { used_amount = 0 })))
      -- a reset restores them
      s.reset(sim)
      assert.equals(0, pool(TARGET).used_amount)
    end)
  end)
end)
