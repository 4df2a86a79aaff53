-- Capacity reservations of an ECSNodeClass (providers/alibaba/reservations.lua): the selector terms
-- into status.capacityReservations and CapacityReservationResolved (every reason, and when it counts
-- for Ready), the offerings' price and availability per capacityReservationPreference, and the
-- launch's PrivatePoolOptions with the retry when a targeted pool is full. Against an in-process fake
-- of the APIs, then against the Alibaba simulator over real HTTP.
local luaprov = require "luaprov"
local harness = require "spec.fixtures.alibaba.harness"
local launching = require "spec.fixtures.alibaba.launching"
local nodeclass = require "providers.alibaba.nodeclass"
local reservations = require "providers.alibaba.reservations"

local json = luaprov.json

local cond = launching.cond

local function item(id, status, match, type_, zone, total, used, tags)
  return { PrivatePoolOptionsId = id, Status = status, PrivatePoolOptionsMatchCriteria = match, tags = tags,
    AllocatedResources = { AllocatedResource = { { InstanceType = type_, zoneId = zone, TotalAmount = total,
      UsedAmount = used } } } }
end

local DATA = {
  region = "cn-fake",
  vswitches = { { VSwitchId = "vsw-a", ZoneId = "cn-fake-i", AvailableIpAddressCount = 100, tags = { team = "a" } } },
  security_groups = { { SecurityGroupId = "sg-1", SecurityGroupName = "nodes", tags = { team = "a" } } },
  images = { { ImageId = "m-custom", ImageName = "golden", Architecture = "x86_64", ImageOwnerAlias = "self" } },
  reservations = {
    item("crp-1", "Active", "Target", "ecs.g7.xlarge", "cn-fake-i", 4, 1, { team = "ml" }),
    item("crp-2", "Active", "Open", "ecs.g7.large", "cn-fake-h", 2, 2, { team = "ml", env = "prod" }),
    item("crp-3", "Prepared", "Open", "ecs.g7.large", "cn-fake-i", 5, 0, { team = "ml" }),
    item("crp-4", "Active", "Open", "ecs.c7.large", "cn-fake-j", 1, 0, { team = "web" }),
  },
}

local function class(over, status)
  local spec = { vSwitchSelectorTerms = { { tags = { team = "a" } } },
    securityGroupSelectorTerms = { { tags = { team = "a" } } }, imageSelectorTerms = { { id = "m-custom" } } }
  for k, v in pairs(over or {}) do spec[k] = v end
  return { metadata = { name = "default" }, spec = spec, status = status }
end

describe("nodeclass.resolve: capacity reservations (fake cloud)", function()
  local cloud
  before_each(function()
    cloud = harness.fake_cloud(DATA)
    cloud.install()
  end)
  after_each(function() cloud.uninstall() end)

  it("resolves terms by tags and id (ORed, no duplicates), keeping Active ones, into the status", function()
    local status = nodeclass.resolve(cloud.ctx, class { capacityReservationSelectorTerms = {
      { tags = { team = "ml" } }, { id = "crp-4" }, { id = "crp-1" } } })
    assert.same({
      { id = "crp-1", zoneID = "cn-fake-i", instanceType = "ecs.g7.xlarge", available = 3, matchCriteria = "Target" },
      { id = "crp-2", zoneID = "cn-fake-h", instanceType = "ecs.g7.large", available = 0, matchCriteria = "Open" },
      { id = "crp-4", zoneID = "cn-fake-j", instanceType = "ecs.c7.large", available = 1, matchCriteria = "Open" },
    }, status.capacityReservations)
    assert.equals(json.array_mt, getmetatable(status.capacityReservations))
    assert.same({ type = "CapacityReservationResolved", status = "True", reason = "CapacityReservationResolved",
      message = "" }, cond(status, "CapacityReservationResolved"))
    assert.equals(3, cloud.calls.DescribeCapacityReservations)
    assert.equals("True", cond(status, "Ready").status)
  end)

  it("ANDs id and tags inside a term", function()
    local status = nodeclass.resolve(cloud.ctx, class { capacityReservationSelectorTerms = {
      { id = "crp-4", tags = { team = "ml" } } } })
    assert.same({}, status.capacityReservations)
  end)

  it("is True with an empty list and no call when there are no terms", function()
    local status = nodeclass.resolve(cloud.ctx, class())
    assert.same({}, status.capacityReservations)
    assert.same({ type = "CapacityReservationResolved", status = "True", reason = "CapacityReservationResolved",
      message = "no capacityReservationSelectorTerms are set" }, cond(status, "CapacityReservationResolved"))
    assert.is_nil(cloud.calls.DescribeCapacityReservations)
  end)

  it("is CapacityReservationNotFound when the terms match nothing active; Ready stays True unless target", function()
    local terms = { { tags = { team = "nobody" } }, { id = "crp-3" } } -- crp-3 is only Prepared
    local open = nodeclass.resolve(cloud.ctx, class { capacityReservationSelectorTerms = terms })
    local c = cond(open, "CapacityReservationResolved")
    assert.same({ "False", "CapacityReservationNotFound" }, { c.status, c.reason })
    assert.matches("did not match any active CapacityReservations; launches use open capacity", c.message, 1, true)
    assert.equals("True", cond(open, "Ready").status)
    local target = nodeclass.resolve(cloud.ctx, class { capacityReservationSelectorTerms = terms,
      capacityReservationPreference = "target" })
    assert.equals("CapacityReservationNotFound", cond(target, "CapacityReservationResolved").reason)
    assert.same({ type = "Ready", status = "False", reason = "UnhealthyDependents",
      message = "CapacityReservationResolved=False" }, cond(target, "Ready"))
    -- none: reported, not a dependent
    local none = nodeclass.resolve(cloud.ctx, class { capacityReservationSelectorTerms = terms,
      capacityReservationPreference = "none" })
    assert.equals("True", cond(none, "Ready").status)
  end)

  it("says which terms could not be sent", function()
    local status = nodeclass.resolve(cloud.ctx, class { capacityReservationSelectorTerms = { { tags = {} } } })
    assert.matches("capacityReservationSelectorTerms[1] has neither id nor tags",
      cond(status, "CapacityReservationResolved").message, 1, true)
    assert.is_nil(cloud.calls.DescribeCapacityReservations)
  end)

  it("makes target without terms, and a preference it does not know, not Ready", function()
    local status = nodeclass.resolve(cloud.ctx, class { capacityReservationPreference = "target" })
    local c = cond(status, "CapacityReservationResolved")
    assert.same({ "False", "CapacityReservationNotFound" }, { c.status, c.reason })
    assert.matches("no capacityReservationSelectorTerms are set: no instance could launch", c.message, 1, true)
    assert.equals("False", cond(status, "Ready").status)
    status = nodeclass.resolve(cloud.ctx, class { capacityReservationPreference = "Targeted" })
    c = cond(status, "CapacityReservationResolved")
    assert.same({ "False", "InvalidCapacityReservationPreference" }, { c.status, c.reason })
    assert.matches('"Targeted" is not open, target or none', c.message, 1, true)
    assert.equals("False", cond(status, "Ready").status)
  end)

  it("turns an API error into DescribeCapacityReservationsFailed, keeping the list resolved before", function()
    cloud.faults.DescribeCapacityReservations = { status = 403, code = "Forbidden.RAM", message = "not authorized" }
    local before = { capacityReservations = { { id = "crp-1", zoneID = "cn-fake-i", instanceType = "ecs.g7.xlarge",
      available = 3, matchCriteria = "Target" } } }
    local spec = { capacityReservationSelectorTerms = { { id = "crp-1" } } }
    local status = nodeclass.resolve(cloud.ctx, class(spec, before))
    assert.same(before.capacityReservations, status.capacityReservations)
    local c = cond(status, "CapacityReservationResolved")
    assert.same({ "Unknown", "DescribeCapacityReservationsFailed" }, { c.status, c.reason })
    assert.matches("Forbidden.RAM", c.message, 1, true)
    assert.matches("RequestId req-fault", c.message, 1, true)
    assert.matches("keeping the 1 resolved before", c.message, 1, true)
    assert.equals("True", cond(status, "Ready").status) -- open: launches go on with open capacity
    spec.capacityReservationPreference = "target"
    assert.same({ type = "Ready", status = "Unknown", reason = "ReconcilingDependents",
      message = "CapacityReservationResolved=Unknown" },
      cond(nodeclass.resolve(cloud.ctx, class(spec, before)), "Ready"))
  end)
end)

describe("reservations.apply (offerings per preference)", function()
  local RESERVED = {
    { id = "crp-1", zoneID = "z-i", instanceType = "t.large", available = 2, matchCriteria = "Target" },
    { id = "crp-2", zoneID = "z-h", instanceType = "t.large", available = 0, matchCriteria = "Open" } }

  local function offers()
    local out = {}
    for _, zone in ipairs { "z-h", "z-i", "z-j" } do
      out[#out + 1] = { zone = zone, capacity_type = "on-demand", price = 1.5, available = zone ~= "z-i" }
      out[#out + 1] = { zone = zone, capacity_type = "spot", price = 0.5, available = true }
    end
    return out
  end

  -- zone|capacity type -> {price, available} after apply.
  local function applied(pref, name, vswitch_zones)
    local list = offers()
    local nc = { spec = { capacityReservationSelectorTerms = { { id = "crp-1" } },
      capacityReservationPreference = pref }, status = { capacityReservations = RESERVED } }
    reservations.apply(list, name or "t.large", nc, vswitch_zones or { ["z-h"] = true, ["z-i"] = true, ["z-j"] = true })
    local out = {}
    for _, o in ipairs(list) do out[o.zone .. "|" .. o.capacity_type] = { o.price, o.available } end
    return out
  end

  it("open (the default with terms): a covered on-demand offering costs 0 and is available, sold out or not", function()
    for _, pref in ipairs { "open", json.null } do
      local got = applied(pref)
      assert.same({ 0, true }, got["z-i|on-demand"])      -- publicly sold out, reserved for the class
      assert.same({ 1.5, true }, got["z-h|on-demand"])    -- its reservation is used up
      assert.same({ 1.5, true }, got["z-j|on-demand"])
      assert.same({ 0.5, true }, got["z-i|spot"])
    end
    -- no vSwitch in the zone: still unavailable (rule CP4 keeps the offering)
    assert.same({ 0, false }, applied("open", nil, { ["z-h"] = true })["z-i|on-demand"])
    -- another type is not covered
    assert.same({ 1.5, false }, applied("open", "t.xlarge")["z-i|on-demand"])
  end)

  it("target: on-demand offerings no reservation covers are unavailable; spot ones are left alone", function()
    local got = applied("target")
    assert.same({ 0, true }, got["z-i|on-demand"])
    assert.same({ 1.5, false }, got["z-h|on-demand"])
    assert.same({ 1.5, false }, got["z-j|on-demand"])
    assert.same({ 0.5, true }, got["z-h|spot"])
  end)

  it("none: reservations change nothing (what open changes stays as it was)", function()
    assert.same({ 0, true }, applied("open")["z-i|on-demand"])
    local got = applied("none")
    assert.same({ 1.5, false }, got["z-i|on-demand"])
    assert.same({ 1.5, true }, got["z-h|on-demand"])
  end)

  it("without terms or preference changes nothing either, even with reservations left in the status", function()
    local zones = { ["z-i"] = true }
    local with_terms = offers()
    reservations.apply(with_terms, "t.large", { spec = { capacityReservationSelectorTerms = { { id = "crp-1" } } },
      status = { capacityReservations = RESERVED } }, zones)
    assert.are_not.same(offers(), with_terms)
    local list = offers()
    reservations.apply(list, "t.large", { spec = {}, status = { capacityReservations = RESERVED } }, zones)
    assert.same(offers(), list)
  end)
end)

describe("nodeclass.hash and capacity reservations", function()
  it("is not changed by the terms or the preference (they steer new launches only)", function()
    local base = harness.load_json("ecsnodeclass.json")
    local h = nodeclass.hash(base)
    local edited = json.decode(json.encode(base))
    edited.spec.capacityReservationSelectorTerms = { { id = "crp-1" } }
    edited.spec.capacityReservationPreference = "target"
    assert.equals(h, nodeclass.hash(edited))
  end)
end)

-- The simulator's pools (sim/alibaba/reservations.lua): crp-bp1sim0target0001 (Target, ecs.g7.xlarge in
-- cn-hangzhou-i, 2, team=ml), crp-bp1sim0open000001 (Open, ecs.g7.large in cn-hangzhou-h, 3, 1 used),
-- crp-bp1sim0prepared01 (not in effect yet); all tagged karpenter.sh/discovery=luaprov-sim.
describe("capacity reservations against the Alibaba simulator", function()
  local mapping = require "providers.alibaba"
  local instances = require "providers.alibaba.instances"
  local env = launching.new("c-crp")
  local TARGET, OPEN = "crp-bp1sim0target0001", "crp-bp1sim0open000001"
  local H, I = "cn-hangzhou-h", "cn-hangzhou-i"
  local DISCOVERY = { ["karpenter.sh/discovery"] = "luaprov-sim" }
  local ML = { { tags = { team = "ml" } } }
  setup(env.start) teardown(env.stop) before_each(env.before) after_each(env.after)

  local sim_class, create, recorded = env.class, env.create, env.recorded

  local function used(id)
    for _, p in ipairs(env.sim:state().capacity_reservations) do
      if p.id == id then return p.used_amount end
    end
  end

  it("resolves the account's active reservations by tags into the status", function()
    local status = sim_class { capacityReservationSelectorTerms = { { tags = DISCOVERY } } }.status
    assert.same({
      { id = OPEN, zoneID = H, instanceType = "ecs.g7.large", available = 2, matchCriteria = "Open" },
      { id = TARGET, zoneID = I, instanceType = "ecs.g7.xlarge", available = 2, matchCriteria = "Target" },
    }, status.capacityReservations)
    assert.equals("True", cond(status, "CapacityReservationResolved").status)
    assert.equals("True", cond(status, "Ready").status)
  end)

  it("offers the reserved type and zone first (price 0); target makes the other on-demand offerings unavailable",
    function()
      local function offering(types, name, zone, capacity_type)
        for _, t in ipairs(types) do
          if t.name == name then
            for _, o in ipairs(t.offerings) do
              if o.zone == zone and o.capacity_type == capacity_type then return o end
            end
          end
        end
      end
      local open = assert(mapping.instance_types(env.ctx, sim_class { capacityReservationSelectorTerms = ML }))
      assert.equals(0, offering(open, "ecs.g7.xlarge", I, "on-demand").price)
      assert.is_true(offering(open, "ecs.g7.xlarge", I, "on-demand").available)
      assert.is_true(offering(open, "ecs.g7.xlarge", H, "on-demand").price > 0)
      assert.is_true(offering(open, "ecs.g7.large", I, "on-demand").available)
      local target = assert(mapping.instance_types(env.ctx, sim_class { capacityReservationSelectorTerms = ML,
        capacityReservationPreference = "target" }))
      assert.is_true(offering(target, "ecs.g7.xlarge", I, "on-demand").available)
      assert.is_false(offering(target, "ecs.g7.xlarge", H, "on-demand").available)
      assert.is_false(offering(target, "ecs.g7.large", I, "on-demand").available)
      assert.is_true(offering(target, "ecs.g7.large", I, "spot").available)
    end)

  it("launches a covered offering into its reservation (Target + id)", function()
    local inst = assert(create(sim_class { capacityReservationSelectorTerms = ML }, "ecs.g7.xlarge", I))
    assert.same({ id = TARGET, match_criteria = "Target" }, recorded(inst.id).private_pool)
    assert.equals(1, used(TARGET))
  end)

  it("sends Open for an offering no resolved reservation covers, None with preference none", function()
    -- ecs.g7.large in h: the account's open pool takes an Open launch; the class's terms name only the ML pool
    local open = assert(create(sim_class { capacityReservationSelectorTerms = ML }, "ecs.g7.large", H))
    assert.same({ id = OPEN, match_criteria = "Open" }, recorded(open.id).private_pool)
    local none = assert(create(sim_class { capacityReservationSelectorTerms = ML,
      capacityReservationPreference = "none" }, "ecs.g7.xlarge", I))
    assert.is_nil(recorded(none.id).private_pool) -- None: not even the targeted pool that covers it
    assert.equals(0, used(TARGET))
  end)

  it("sends no PrivatePoolOptions without terms or preference, and none for spot", function()
    local plain = assert(create(sim_class(), "ecs.g7.large", H))
    assert.is_nil(recorded(plain.id).private_pool) -- as before reservations: the open pool is not asked for
    assert.equals(1, used(OPEN))
    local target = sim_class { capacityReservationSelectorTerms = ML, capacityReservationPreference = "target" }
    local od = assert(create(target, "ecs.g7.xlarge", I))
    assert.same({ id = TARGET, match_criteria = "Target" }, recorded(od.id).private_pool)
    local spot = assert(create(target, "ecs.g7.xlarge", I, "spot"))
    assert.is_nil(recorded(spot.id).private_pool)
    assert.equals("SpotAsPriceGo", recorded(spot.id).spot_strategy)
  end)

  it("open: a full targeted pool is retried once with Open in the same create", function()
    local nc = sim_class { capacityReservationSelectorTerms = ML }
    env.sim:admin("POST", "/_sim/capacity-reservations/" .. TARGET, { used_amount = 2 }) -- the status still shows room
    local inst = assert(create(nc, "ecs.g7.xlarge", I))
    local state = env.sim:state()
    assert.equals(2, state.calls.RunInstances)
    assert.equals(1, state.errors.RunInstances)
    assert.is_nil(recorded(inst.id).private_pool) -- open capacity: no open pool holds ecs.g7.xlarge in i
    assert.matches("%-o$", recorded(inst.id).client_token)
  end)

  it("target: a full targeted pool is the offering out of stock, and nothing uncovered is launched", function()
    local nc = sim_class { capacityReservationSelectorTerms = ML, capacityReservationPreference = "target" }
    env.sim:admin("POST", "/_sim/capacity-reservations/" .. TARGET, { used_amount = 2 })
    local none, err = create(nc, "ecs.g7.xlarge", I)
    assert.is_nil(none)
    assert.equals("InsufficientCapacity", err.code)
    assert.equals("Invalid.PrivatePoolOptions.status", err.api_code)
    assert.same({ { instance_type = "ecs.g7.xlarge", zone = I, capacity_type = "on-demand" } }, err.offerings)
    assert.equals(1, env.sim:state().calls.RunInstances)
    -- an offering no reservation covers is not sent at all
    local uncovered
    uncovered, err = create(nc, "ecs.g7.large", H)
    assert.is_nil(uncovered)
    assert.equals("InsufficientCapacity", err.code)
    assert.same({ { instance_type = "ecs.g7.large", zone = H, capacity_type = "on-demand" } }, err.offerings)
    assert.equals(1, env.sim:state().calls.RunInstances)
    assert.same({}, env.sim:state().instances)
  end)

  it("gives the reservation back when the instance is deleted", function()
    local inst = assert(create(sim_class { capacityReservationSelectorTerms = ML }, "ecs.g7.xlarge", I))
    assert.equals(1, used(TARGET))
    env.sim:advance(30)
    assert(instances.delete(env.ctx, inst.id))
    assert.equals(0, used(TARGET))
  end)
end)
