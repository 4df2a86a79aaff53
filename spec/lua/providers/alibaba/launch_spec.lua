-- The mapping's launch decision (providers/alibaba/launch.lua, docs/alibaba.md#launching-an-instance)
-- against the Alibaba simulator over real HTTP: the vSwitch policy, the image by architecture, the
-- system disk fall-through and its tokens, data disks and access, the spot strategy, offerings the
-- class cannot launch in, out-of-stock reporting, the bootstrap error, a repeated create finding the
-- instance the first launched, and balanced's count of its own launches between status refreshes.
local instances = require "providers.alibaba.instances"
local launch = require "providers.alibaba.launch"
local bootstrap = require "providers.alibaba.bootstrap"
local nodeclass = require "providers.alibaba.nodeclass"

describe("alibaba launch against the simulator", function()
  local simulator = dofile((os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/alibaba/simulator.lua")
  local session = require "providers.alibaba.session"
  local sim, ctx

  local H, I, J = "cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j"
  local AMD64 = { { key = "kubernetes.io/arch", operator = "In", values = { "amd64" } } }
  local ARM64 = { { key = "kubernetes.io/arch", operator = "In", values = { "arm64" } } }

  setup(function()
    sim = simulator.start()
    ctx = sim:session("c-spec")
    -- The user data is bootstrap.lua's (its own spec); here spec.userData as is, no ACK cluster needed.
    ctx.cluster_type = "Custom"
  end)
  teardown(function()
    if sim then sim:stop() end
    session.reset()
  end)
  -- The discount clock (launch.clock) starts far after the previous spec's, so no launch counts twice.
  local now, saved_clock, saved_wait = 0, nil, nil
  before_each(function()
    sim:reset()
    now = now + 10 * launch.LAUNCH_DISCOUNT_TTL
    saved_clock, launch.clock = launch.clock, function() return now end
    saved_wait, instances.DESCRIBE_NEW_WAIT_S = instances.DESCRIBE_NEW_WAIT_S, 0
  end)
  after_each(function()
    launch.clock, instances.DESCRIBE_NEW_WAIT_S = saved_clock, saved_wait
  end)

  -- An ECSNodeClass over the simulated account's tagged resources, resolved now; spec fields from `spec`.
  local function class(spec, annotations)
    local nc = { metadata = { name = "default", annotations = annotations or {} }, spec = {
      vSwitchSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
      securityGroupSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
      imageSelectorTerms = { { alias = "AlibabaCloudLinux3" } },
    } }
    for k, v in pairs(spec or {}) do nc.spec[k] = v end
    nc.status = nodeclass.resolve(ctx, nc)
    return nc
  end

  local function offering(instance_type, zone, capacity_type, token, reqs)
    return { instance_type = instance_type, zone = zone, capacity_type = capacity_type or "on-demand",
      client_token = token or ("tok-" .. instance_type .. "-" .. zone .. "-" .. (capacity_type or "od")), price = 0.1,
      type = { name = instance_type, requirements = reqs or AMD64 } }
  end

  -- A create for the NodeClaim name (a new one each call when nil), with the engine's tags (rule CP7).
  local claims = 0
  local function request(nc, offerings, name)
    claims = claims + 1
    name = name or ("default-x" .. claims)
    return { nodeclaim = { metadata = { name = name, uid = "uid-" .. name } }, nodeclass = nc,
      tags = { ["kubernetes.io/cluster/c-spec"] = "owned", ["karpenter.sh/nodeclaim"] = name },
      offerings = offerings }
  end

  local function live_instances()
    local n = 0
    for _, inst in ipairs(sim:state().instances) do
      if inst.status ~= "Deleted" and inst.status ~= "Released" then n = n + 1 end
    end
    return n
  end

  local function sim_instance(id)
    for _, inst in ipairs(sim:state().instances) do
      if inst.id == id then return inst end
    end
  end

  -- What the simulator recorded of the instance a create for one offering launched.
  local function launched(nc, one)
    return sim_instance(assert(launch.create(ctx, request(nc, { one }))).id)
  end

  local function three_zones(token_prefix)
    local out = {}
    for i, zone in ipairs { H, I, J } do out[i] = offering("ecs.g7.large", zone, nil, token_prefix .. "-" .. zone) end
    return out
  end

  describe("vSwitch selection", function()
    it("cheapest launches in the first offering's zone, in its vSwitch with the most free addresses", function()
      -- Two vSwitches in zone h: the tagged /20 and a nearly full /24; resolve lists the emptiest first.
      local nc = class { vSwitchSelectorTerms = { { id = "vsw-bp1simh0000002" }, { id = "vsw-bp1simh0000001" },
        { id = "vsw-bp1simi0000001" } } }
      for n = 1, 3 do
        local inst = assert(launch.create(ctx, request(nc, three_zones("cheap" .. n))))
        assert.equals(H, inst.zone)
        assert.equals("vsw-bp1simh0000001", inst.vswitch_id)
        nc.status = nodeclass.resolve(ctx, nc)
      end
      -- An operator's mapping that reorders status.vSwitches (examples/policies/mapping-vswitch) is followed.
      table.sort(nc.status.vSwitches, function(a, b) return a.availableIPAddressCount < b.availableIPAddressCount end)
      assert.equals("vsw-bp1simh0000002", nc.status.vSwitches[1].id)
      local preferred = assert(launch.create(ctx, request(nc, three_zones("preferred"))))
      assert.equals("vsw-bp1simh0000002", preferred.vswitch_id)
    end)

    it("balanced launches in the zone whose vSwitch has the most free addresses", function()
      local nc = class { vSwitchSelectionPolicy = "balanced" }
      for _, v in ipairs(nc.status.vSwitches) do
        v.availableIPAddressCount = ({ [H] = 10, [I] = 30, [J] = 20 })[v.zoneID] or 0
      end
      local inst = assert(launch.create(ctx, request(nc, three_zones("bal"))))
      assert.equals(I, inst.zone)
      -- cheapest ignores the counts across zones
      nc.spec.vSwitchSelectionPolicy = "cheapest"
      assert.equals(H, assert(launch.create(ctx, request(nc, three_zones("cheap")))).zone)
    end)

    it("balanced spreads launches across zones as their addresses are used", function()
      local nc = class { vSwitchSelectionPolicy = "balanced" }
      local zones = {}
      for n = 1, 3 do
        local inst = assert(launch.create(ctx, request(nc, three_zones("spread" .. n))))
        zones[#zones + 1] = inst.zone
        nc.status = nodeclass.resolve(ctx, nc) -- the status controller's next pass
      end
      -- all three zones start with the same count: ties go by offering order, then the used one is behind
      assert.same({ H, I, J }, zones)
    end)

    it("balanced spreads a burst across zones before the status is refreshed", function()
      local nc = class { vSwitchSelectionPolicy = "balanced" }
      local zones = {}
      for n = 1, 4 do zones[n] = assert(launch.create(ctx, request(nc, three_zones("burst" .. n)))).zone end
      -- no resolve in between: each launch counts against its vSwitch's address count in the status
      assert.same({ H, I, J, H }, zones)
    end)

    it("balanced counts a launch from its choice: one made while another waits on the API sees it", function()
      local nc = class { vSwitchSelectionPolicy = "balanced" }
      local saved, inner, busy = bootstrap.user_data, nil, false
      -- While the first launch waits for its user data, a second one (another NodeClaim of the same
      -- scale-up) chooses and launches, as the engine interleaves them.
      bootstrap.user_data = function(...)
        if not busy and not inner then
          busy = true
          inner = assert(launch.create(ctx, request(nc, three_zones("inner"), "default-x2")))
        end
        return saved(...)
      end
      local ok, outer = pcall(launch.create, ctx, request(nc, three_zones("outer")))
      bootstrap.user_data = saved
      assert.is_true(ok, outer)
      assert.equals(H, assert(outer).zone)
      assert.equals(I, inner.zone)
    end)

    it("balanced stops counting a launch that failed", function()
      sim:fault { kind = "nostock", zone = H, instance_type = "ecs.g7.large" }
      local nc = class { vSwitchSelectionPolicy = "balanced" }
      assert.equals(I, assert(launch.create(ctx, request(nc, three_zones("failed1")))).zone)
      sim:admin("DELETE", "/_sim/faults")
      -- h's failed try holds nothing: h and j are even again, ties by offering order
      assert.equals(H, assert(launch.create(ctx, request(nc, three_zones("failed2")))).zone)
    end)

    it("balanced forgets its launches when the status shows another count, or after the refresh period", function()
      local nc = class { vSwitchSelectionPolicy = "balanced" }
      local function counts(h, i, j)
        for _, v in ipairs(nc.status.vSwitches) do
          v.availableIPAddressCount = ({ [H] = h, [I] = i, [J] = j })[v.zoneID]
        end
      end
      local function next_zone(n) return assert(launch.create(ctx, request(nc, three_zones("fresh" .. n)))).zone end
      counts(10, 10, 10)
      assert.same({ H, I }, { next_zone(1), next_zone(2) })
      -- the status controller's refresh counts those two: they are not discounted again
      counts(9, 9, 10)
      assert.same({ J, H }, { next_zone(3), next_zone(4) })
      -- the refresh period passed without another count: the discount is dropped (the status is trusted)
      now = now + launch.LAUNCH_DISCOUNT_TTL
      assert.equals(J, next_zone(5))
    end)

    it("skips an offering in a zone without a vSwitch, and says so when no offering can launch", function()
      local nc = class { vSwitchSelectorTerms = { { id = "vsw-bp1simi0000001" } } }
      local inst = assert(launch.create(ctx, request(nc, three_zones("skip"))))
      assert.equals(I, inst.zone)
      local none, err = launch.create(ctx, request(nc, { offering("ecs.g7.large", H), offering("ecs.g7.large", J) }))
      assert.is_nil(none)
      assert.equals("InsufficientCapacity", err.code)
      assert.is_nil(err.offerings)
      assert.matches("can launch none of the 2 offerings: ecs.g7.large in cn%-hangzhou%-h: no vSwitch", err.message)
    end)
  end)

  it("launches an arm64 type from the arm64 image and an amd64 type from the amd64 one", function()
    local nc = class()
    local arm = assert(launch.create(ctx, request(nc, { offering("ecs.g8y.large", H, nil, "arm", ARM64) })))
    assert.equals("aliyun_3_arm64_20G_alibase_20240819.vhd", arm.image_id)
    local x86 = assert(launch.create(ctx, request(nc, { offering("ecs.g7.large", H, nil, "x86", AMD64) })))
    assert.equals("aliyun_3_x64_20G_alibase_20240819.vhd", x86.image_id)
  end)

  it("skips an offering whose architecture has no image", function()
    local nc = class { imageSelectorTerms = { { id = "aliyun_3_x64_20G_alibase_20240819.vhd" } } }
    local inst = assert(launch.create(ctx, request(nc, { offering("ecs.g8y.large", H, nil, "a", ARM64),
      offering("ecs.g7.large", I, nil, "b") })))
    assert.equals("ecs.g7.large", inst.instance_type)
  end)

  it("falls through system disk categories the type refuses, with a token per category", function()
    -- 8th-generation types take ESSD-class disks only: cloud_ssd is refused, cloud_essd launches.
    local nc = class { systemDisk = { categories = { "cloud_ssd", "cloud_essd" }, volumeSize = "40Gi" } }
    local req = request(nc, { offering("ecs.g8i.large", H, nil, "disk-token") })
    local inst = assert(launch.create(ctx, req))
    local state = sim:state()
    assert.equals(2, state.calls.RunInstances)
    local recorded = sim_instance(inst.id)
    assert.same({ category = "cloud_essd", size = 40, performance_level = "PL1", encrypted = false },
      recorded.system_disk)
    assert.equals("disk-token-c2", recorded.client_token)
    -- A repeated create (a lost answer) walks the same tokens and finds the same instance.
    local again = assert(launch.create(ctx, req))
    assert.equals(inst.id, again.id)
    assert.equals(1, #sim:state().instances)
  end)

  it("sends data disks, the key pair, the password and the resource group", function()
    local nc = class { dataDisks = { { volumeSize = "100Gi", device = "/dev/xvdb" }, { volumeSize = "5Gi" } },
      dataDiskCategories = { "cloud_auto", "cloud_essd" }, keyPairName = "kp-nodes", password = "Sim-Passw0rd!",
      resourceGroupId = "rg-nodes" }
    local inst = assert(launch.create(ctx, request(nc, { offering("ecs.g7.large", H) })))
    local recorded = sim_instance(inst.id)
    assert.same({ { size = 100, category = "cloud_auto", device = "/dev/xvdb", encrypted = false,
      delete_with_instance = true }, { size = 20, category = "cloud_auto", encrypted = false,
      delete_with_instance = true } }, recorded.data_disks)
    assert.equals("kp-nodes", recorded.key_pair)
    assert.is_true(recorded.password_set)
    assert.equals("rg-nodes", recorded.resource_group_id)
    assert.same({ category = "cloud_essd", size = 40, performance_level = "PL1", encrypted = false },
      recorded.system_disk)
  end)

  it("never puts the password into an error", function()
    sim:fault { action = "RunInstances", code = "QuotaExceed.ElasticQuota" }
    local nc = class { password = "Sim-Passw0rd!" }
    local inst, err = launch.create(ctx, request(nc, { offering("ecs.g7.large", H) }))
    assert.is_nil(inst)
    assert.equals("QuotaExceed.ElasticQuota", err.code)
    for _, v in pairs(err) do assert.is_nil(tostring(v):find("Sim-Passw0rd!", 1, true)) end
  end)

  describe("spot", function()
    it("is SpotAsPriceGo without the annotation, NoSpot on demand", function()
      local nc = class()
      local spot = assert(launch.create(ctx, request(nc, { offering("ecs.g7.large", H, "spot") })))
      assert.equals("SpotAsPriceGo", sim_instance(spot.id).spot_strategy)
      local od = assert(launch.create(ctx, request(nc, { offering("ecs.g7.large", H) })))
      assert.equals("NoSpot", sim_instance(od.id).spot_strategy)
    end)

    it("is SpotWithPriceLimit at the annotation's price", function()
      local nc = class(nil, { ["luaprov.io/spot-price-limit"] = "5.5" })
      local inst = assert(launch.create(ctx, request(nc, { offering("ecs.g7.large", H, "spot") })))
      local recorded = sim_instance(inst.id)
      assert.equals("SpotWithPriceLimit", recorded.spot_strategy)
      assert.equals(5.5, recorded.spot_price_limit)
    end)

    it("refuses a bad annotation, naming it, without calling RunInstances", function()
      local nc = class(nil, { ["luaprov.io/spot-price-limit"] = "cheap" })
      local inst, err = launch.create(ctx, request(nc, { offering("ecs.g7.large", H, "spot") }))
      assert.is_nil(inst)
      assert.equals("InvalidNodeClass", err.code)
      assert.matches("luaprov.io/spot-price-limit", err.message, 1, true)
      assert.is_nil(sim:state().calls.RunInstances)
    end)

    it("takes spec.spotStrategy and spec.spotPriceLimit, which win over the annotation", function()
      local nc = class({ spotStrategy = "SpotWithPriceLimit", spotPriceLimit = 3.25 },
        { ["luaprov.io/spot-price-limit"] = "5.5" })
      local recorded = launched(nc, offering("ecs.g7.large", H, "spot", "s1"))
      assert.equals("SpotWithPriceLimit", recorded.spot_strategy)
      assert.equals(3.25, recorded.spot_price_limit)
      nc = class { spotStrategy = "SpotAsPriceGo" }
      recorded = launched(nc, offering("ecs.g7.large", H, "spot", "s2"))
      assert.equals("SpotAsPriceGo", recorded.spot_strategy)
      assert.equals(0, recorded.spot_price_limit)
      -- the strategy applies to spot launches only
      recorded = launched(nc, offering("ecs.g7.large", H))
      assert.equals("NoSpot", recorded.spot_strategy)
    end)

    it("refuses SpotWithPriceLimit without a limit, naming the fields, without calling RunInstances", function()
      local nc = class { spotStrategy = "SpotWithPriceLimit" }
      local inst, err = launch.create(ctx, request(nc, { offering("ecs.g7.large", H, "spot") }))
      assert.is_nil(inst)
      assert.equals("InvalidNodeClass", err.code)
      assert.matches("spec.spotStrategy SpotWithPriceLimit needs spec.spotPriceLimit", err.message, 1, true)
      assert.is_nil(sim:state().calls.RunInstances)
    end)
  end)

  describe("the official ECSNodeClass fields", function()
    local OFFICIAL = {
      role = "KarpenterNodeRole",
      systemDisk = { category = "cloud_essd", size = 60, performanceLevel = "PL2", encrypted = true,
        kmsKeyID = "key-hzz0000sim" },
      dataDisks = { { category = "cloud_auto", size = 120, device = "/dev/xvdb", encrypted = true,
        snapshotID = "s-bp1sim0data0001", deleteWithInstance = false }, { category = "cloud_essd", size = 30,
        performanceLevel = "PL0" } },
      metadataOptions = { httpTokens = "required", httpPutResponseHopLimit = 2, httpEndpoint = "enabled" },
      launchTemplateID = "lt-bp1sim0nodes00001",
    }

    it("sends the role, every disk setting, the metadata options and the launch template", function()
      local recorded = launched(class(OFFICIAL), offering("ecs.g7.large", H))
      assert.equals("KarpenterNodeRole", recorded.ram_role)
      assert.same({ category = "cloud_essd", size = 60, performance_level = "PL2", encrypted = true,
        kms_key_id = "key-hzz0000sim" }, recorded.system_disk)
      assert.same({ { category = "cloud_auto", size = 120, device = "/dev/xvdb", encrypted = true,
        snapshot_id = "s-bp1sim0data0001", delete_with_instance = false },
        { category = "cloud_essd", size = 30, performance_level = "PL0", encrypted = false,
          delete_with_instance = true } }, recorded.data_disks)
      assert.equals("required", recorded.http_tokens)
      assert.equals(2, recorded.http_put_response_hop_limit)
      assert.equals("enabled", recorded.http_endpoint)
      assert.equals("lt-bp1sim0nodes00001", recorded.launch_template_id)
    end)

    it("launches the same instance from luaprov's earlier field names", function()
      local earlier = class { systemDisk = { categories = { "cloud_essd" }, volumeSize = "60Gi",
        performanceLevel = "PL2" },
        dataDisks = { { volumeSize = "100Gi" } }, dataDiskCategories = { "cloud_auto" } }
      local official = class { systemDisk = { category = "cloud_essd", size = 60, performanceLevel = "PL2" },
        dataDisks = { { category = "cloud_auto", size = 100 } } }
      local a = launched(earlier, offering("ecs.g7.large", H, nil, "e1"))
      local b = launched(official, offering("ecs.g7.large", H, nil, "o1"))
      for _, k in ipairs { "system_disk", "data_disks", "spot_strategy", "instance_type", "zone", "image_id" } do
        assert.same(a[k], b[k], k)
      end
      assert.equals(nodeclass.hash(earlier), nodeclass.hash(official))
    end)

    it("leaves the metadata options and the role to ECS when the class names none", function()
      local recorded = launched(class(), offering("ecs.g7.large", H))
      assert.equals("", recorded.ram_role)
      assert.equals("optional", recorded.http_tokens)
      assert.equals(1, recorded.http_put_response_hop_limit)
      assert.is_nil(recorded.launch_template_id)
    end)

    it("passes ECS's refusal of an unknown launch template through, naming the action", function()
      local inst, err = launch.create(ctx, request(class { launchTemplateID = "lt-missing" },
        { offering("ecs.g7.large", H) }))
      assert.is_nil(inst)
      assert.equals("InvalidLaunchTemplate.NotFound", err.api_code)
      assert.matches("RunInstances", err.message, 1, true)
    end)
  end)

  describe("out of stock", function()
    it("cheapest reports the offering it tried", function()
      sim:fault { kind = "nostock", zone = H, instance_type = "ecs.g7.large" }
      local inst, err = launch.create(ctx, request(class(), three_zones("ice")))
      assert.is_nil(inst)
      assert.equals("InsufficientCapacity", err.code)
      assert.same({ { instance_type = "ecs.g7.large", zone = H, capacity_type = "on-demand" } }, err.offerings)
    end)

    it("balanced tries the type's other zones before reporting", function()
      sim:fault { kind = "nostock", zone = H, instance_type = "ecs.g7.large" }
      local nc = class { vSwitchSelectionPolicy = "balanced" }
      local inst = assert(launch.create(ctx, request(nc, three_zones("ice-bal"))))
      assert.equals(I, inst.zone)
      sim:fault { kind = "nostock", instance_type = "ecs.g7.large" }
      local none, err = launch.create(ctx, request(nc, three_zones("ice-bal2")))
      assert.is_nil(none)
      assert.equals(3, #err.offerings)
    end)
  end)

  describe("a create repeated for the same NodeClaim", function()
    local function two_vswitches_in_h()
      return class { vSwitchSelectorTerms = { { id = "vsw-bp1simh0000002" }, { id = "vsw-bp1simh0000001" },
        { id = "vsw-bp1simi0000001" } } }
    end
    -- An operator's order, or a refreshed status, puts the zone's other vSwitch first.
    local function resort(nc)
      table.sort(nc.status.vSwitches, function(a, b) return a.availableIPAddressCount < b.availableIPAddressCount end)
    end

    -- again is first, found (adopted), and the simulator holds that one instance after `calls` RunInstances.
    local function assert_adopted(first, again, calls)
      assert.equals(first.id, again.id)
      assert.is_true(again.adopted)
      assert.equals(1, live_instances())
      assert.equals(calls, sim:state().calls.RunInstances)
    end

    it("returns the instance already launched when the request changed (another vSwitch)", function()
      local nc = two_vswitches_in_h()
      local req = request(nc, three_zones("again"))
      local first = assert(launch.create(ctx, req))
      resort(nc)
      assert.is_nil(first.adopted)
      assert_adopted(first, assert(launch.create(ctx, req)), 1)
    end)

    it("returns the instance already launched when the offerings changed (the first one gone)", function()
      local nc = class()
      local first = assert(launch.create(ctx, request(nc, three_zones("moved"), "default-moved")))
      assert.equals(H, first.zone)
      local rest = three_zones("moved")
      table.remove(rest, 1)
      local again = assert(launch.create(ctx, request(nc, rest, "default-moved")))
      assert.equals(H, again.zone) -- not one of the offerings handed this time: the engine accepts it adopted
      assert_adopted(first, again, 1)
    end)

    it("on IdempotentParameterMismatch looks the instance up again while DescribeInstances catches up", function()
      local nc = two_vswitches_in_h()
      local req = request(nc, three_zones("lag"))
      local first = assert(launch.create(ctx, req))
      resort(nc)
      -- the first lookup does not see the instance yet (eventual consistency), the next ones do
      sim:fault { action = "DescribeInstances", kind = "malformed", count = 2,
        body = '{"RequestId":"lagging","Instances":{"Instance":[]},"TotalCount":0,"NextToken":""}' }
      -- the second RunInstances answered IdempotentParameterMismatch
      assert_adopted(first, assert(launch.create(ctx, req)), 2)
    end)

    it("on IdempotentParameterMismatch with no live instance returns the error", function()
      local nc = two_vswitches_in_h()
      local req = request(nc, three_zones("gone"))
      local first = assert(launch.create(ctx, req))
      sim:advance(30) -- Running: an initializing instance cannot be deleted
      assert(instances.delete(ctx, first.id))
      resort(nc)
      local none, err = launch.create(ctx, req)
      assert.is_nil(none)
      assert.equals("IdempotentParameterMismatch", err.api_code or err.code)
      assert.equals(0, live_instances())
    end)
  end)

  describe("user data", function()
    local saved
    before_each(function() saved = bootstrap.user_data end)
    after_each(function() bootstrap.user_data = saved end)

    it("passes the bootstrap error through unchanged, without launching", function()
      local failure = { code = "BootstrapFailed", message = "no cluster token" }
      bootstrap.user_data = function() return nil, failure end
      local inst, err = launch.create(ctx, request(class(), { offering("ecs.g7.large", H) }))
      assert.is_nil(inst)
      assert.equals(failure, err)
      assert.is_nil(sim:state().calls.RunInstances)
    end)

    it("asks bootstrap with the offering's capacity type", function()
      local seen
      bootstrap.user_data = function(_, claim, _, capacity_type)
        seen = { claim.metadata.name, capacity_type }
        return "#!/bin/sh\necho hi\n"
      end
      assert(launch.create(ctx, request(class(), { offering("ecs.g7.large", H, "spot") }, "default-u1")))
      assert.same({ "default-u1", "spot" }, seen)
    end)
  end)
end)
