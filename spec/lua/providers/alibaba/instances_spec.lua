-- ECS instances: the mapping of an API instance to the instance shape
-- (docs/contracts.md#the-instance-shape), then run/get/describe/delete/list against the Alibaba
-- simulator over real HTTP.
local instances = require "providers.alibaba.instances"
local luaprov = require "luaprov"
local json = luaprov.json

local function api_instance(extra)
  local api = json.decode([[{
    "InstanceId": "i-bp1abc", "RegionId": "cn-hangzhou", "ZoneId": "cn-hangzhou-h",
    "InstanceType": "ecs.g7.large", "ImageId": "aliyun_3_x64_20G_alibase_20240819.vhd",
    "Status": "Running", "SpotStrategy": "NoSpot", "CreationTime": "2017-12-10T04:04Z",
    "SecurityGroupIds": {"SecurityGroupId": ["sg-1", "sg-2"]},
    "VpcAttributes": {"VSwitchId": "vsw-1", "VpcId": "vpc-1", "PrivateIpAddress": {"IpAddress": ["10.0.0.5"]}},
    "Tags": {"Tag": [{"TagKey": "kubernetes.io/cluster/c-1", "TagValue": "owned"},
                     {"TagKey": "karpenter.sh/nodepool", "TagValue": "default"}]}
  }]])
  for k, v in pairs(extra or {}) do api[k] = v end
  return api
end

describe("alibaba instances", function()
  describe("to_instance", function()
    it("maps every field of the instance shape", function()
      assert.same({
        id = "i-bp1abc", region = "cn-hangzhou", zone = "cn-hangzhou-h", instance_type = "ecs.g7.large",
        capacity_type = "on-demand", image_id = "aliyun_3_x64_20G_alibase_20240819.vhd", state = "running",
        security_group_ids = { "sg-1", "sg-2" }, vswitch_id = "vsw-1", private_ip = "10.0.0.5",
        tags = { ["kubernetes.io/cluster/c-1"] = "owned", ["karpenter.sh/nodepool"] = "default" },
        launch_time = "2017-12-10T04:04:00Z",
      }, instances.to_instance(api_instance()))
    end)

    it("maps Status to the engine's states", function()
      local cases = { Pending = "pending", Starting = "pending", Running = "running", Stopping = "stopping",
        Stopped = "stopped", Deleted = "terminated" }
      for status, state in pairs(cases) do
        assert.equals(state, instances.to_instance(api_instance { Status = status }).state, status)
      end
    end)

    it("reads the capacity type from SpotStrategy", function()
      assert.equals("spot", instances.to_instance(api_instance { SpotStrategy = "SpotAsPriceGo" }).capacity_type)
      assert.equals("spot", instances.to_instance(api_instance { SpotStrategy = "SpotWithPriceLimit" }).capacity_type)
      assert.equals("on-demand", instances.to_instance(api_instance { SpotStrategy = "" }).capacity_type)
    end)

    it("keeps full RFC 3339 times and survives missing containers", function()
      assert.equals("2026-11-30T03:22:51Z",
        instances.to_instance(api_instance { CreationTime = "2026-11-30T03:22:51Z" }).launch_time)
      local bare = instances.to_instance({ InstanceId = "i-1", Status = "Pending" })
      assert.equals("[]", json.encode(bare.security_group_ids))
      assert.same({}, bare.tags)
      assert.is_nil(bare.private_ip)
      assert.is_nil(bare.launch_time)
      assert.equals("pending", bare.state)
    end)

    it("falls back to the primary network interface for the private IP", function()
      local api = api_instance { VpcAttributes = { VSwitchId = "vsw-2" },
        NetworkInterfaces = { NetworkInterface = { { Type = "Primary", PrimaryIpAddress = "10.1.0.9" } } } }
      assert.equals("10.1.0.9", instances.to_instance(api).private_ip)
    end)
  end)
end)

describe("alibaba instances against the simulator", function()
  local simulator = dofile((os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/alibaba/simulator.lua")
  local session = require "providers.alibaba.session"
  local sim, ctx, c

  local ZONE, VSWITCH = "cn-hangzhou-h", "vsw-bp1simh0000001"
  local SG, IMAGE = "sg-bp1sim0nodes00001", "aliyun_3_x64_20G_alibase_20240819.vhd"

  setup(function()
    sim = simulator.start()
    ctx, c = sim:session("c-spec")
  end)
  teardown(function()
    if sim then sim:stop() end
    session.reset()
  end)
  before_each(function() sim:reset() end)

  local function request(extra)
    local req = {
      instance_type = "ecs.g7.large", zone = ZONE, capacity_type = "on-demand", vswitch_id = VSWITCH,
      image_id = IMAGE, security_group_ids = { SG }, client_token = "nodeclaim-uid-1",
      tags = { ["kubernetes.io/cluster/c-spec"] = "owned", ["karpenter.sh/nodepool"] = "default" },
      user_data = "#!/bin/sh\necho hello\n",
    }
    for k, v in pairs(extra or {}) do req[k] = v end
    return req
  end

  local function instance_count() return #sim:state().instances end

  it("run launches one offering and returns it in the instance shape", function()
    local inst = assert(instances.run(ctx, request()))
    assert.matches("^i%-", inst.id)
    assert.equals("cn-hangzhou", inst.region)
    assert.equals(ZONE, inst.zone)
    assert.equals("ecs.g7.large", inst.instance_type)
    assert.equals("on-demand", inst.capacity_type)
    assert.equals(IMAGE, inst.image_id)
    assert.equals("pending", inst.state)
    assert.same({ SG }, inst.security_group_ids)
    assert.equals(VSWITCH, inst.vswitch_id)
    assert.matches("^172%.16%.", inst.private_ip)
    assert.equals("owned", inst.tags["kubernetes.io/cluster/c-spec"])
    assert.equals("default", inst.tags["karpenter.sh/nodepool"])
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:00Z$", inst.launch_time)
  end)

  it("launches spot with SpotAsPriceGo", function()
    local inst = assert(instances.run(ctx, request { capacity_type = "spot", client_token = "spot-1" }))
    assert.equals("spot", inst.capacity_type)
  end)

  it("the same client token twice launches one instance", function()
    local first = assert(instances.run(ctx, request()))
    local second = assert(instances.run(ctx, request()))
    assert.equals(first.id, second.id)
    assert.equals(1, instance_count())
    assert.equals(2, sim:state().calls.RunInstances)
  end)

  it("a lost RunInstances answer is retried with its token and still launches one instance", function()
    -- The simulator carries the call out, then answers after the client gave up.
    sim:fault { action = "RunInstances", kind = "timeout", seconds = 1.5, count = 1 }
    sim:fault { action = "DescribeInstances", kind = "throttle", count = 1 }
    c.timeout_ms = 500
    local inst, err = instances.run(ctx, request { client_token = "retried-1" })
    c.timeout_ms = 10000
    assert(inst, err and err.message)
    assert.equals(1, instance_count())
    assert.equals(2, sim:state().calls.RunInstances)
  end)

  it("a sold-out offering is InsufficientCapacity (launch.lua names the offering)", function()
    sim:fault { kind = "nostock", zone = ZONE, instance_type = "ecs.g7.large", capacity_type = "spot" }
    local inst, err = instances.run(ctx, request { capacity_type = "spot", client_token = "ice-1" })
    assert.is_nil(inst)
    assert.equals("InsufficientCapacity", err.code)
    assert.equals("OperationDenied.NoStock", err.api_code)
    assert.equals(1, sim:state().calls.RunInstances)
    assert.equals(0, instance_count())
    -- Only that offering is sold out.
    assert(instances.run(ctx, request { client_token = "od-1" }))
  end)

  it("launched_for finds the cluster's live instance of a NodeClaim only", function()
    local function tags(cluster, claim)
      return { ["kubernetes.io/cluster/" .. cluster] = "owned", ["karpenter.sh/nodeclaim"] = claim }
    end
    local mine = assert(instances.run(ctx, request { client_token = "mine", tags = tags("c-spec", "claim-a") }))
    assert(instances.run(ctx, request { client_token = "other-claim", tags = tags("c-spec", "claim-b") }))
    assert(instances.run(ctx, request { client_token = "other-cluster", tags = tags("c-other", "claim-a") }))
    local found = assert(instances.launched_for(ctx, "claim-a"))
    assert.equals(mine.id, found.id)
    assert.is_string(found.request_id)
    assert.is_false(instances.launched_for(ctx, "claim-c"))
    -- released (being deleted) does not count
    sim:advance(20)
    assert(instances.delete(ctx, mine.id))
    assert.is_false(instances.launched_for(ctx, "claim-a"))
  end)

  it("get returns the instance, and NotFound once it is gone; delete twice is NotFound", function()
    local inst = assert(instances.run(ctx, request()))
    sim:advance(20) -- past Pending: an initializing instance cannot be released
    assert.equals("running", assert(instances.get(ctx, inst.id)).state)
    assert.is_true(instances.delete(ctx, inst.id))
    local again, err = instances.delete(ctx, inst.id)
    assert.is_nil(again)
    assert.equals("NotFound", err.code)
    local gone, gerr = instances.get(ctx, inst.id)
    assert.is_nil(gone)
    assert.equals("NotFound", gerr.code)
  end)

  it("registered tags the instance Name=<node name> with TagResources, keeping its other tags", function()
    local mapping = require "providers.alibaba"
    local inst = assert(instances.run(ctx, request { client_token = "tag-1" }))
    assert.is_true(mapping.registered(ctx, inst.id, "cn-hangzhou.172.16.0.9"))
    local tags = sim:state().instances[1].tags
    assert.equals("cn-hangzhou.172.16.0.9", tags.Name)
    assert.equals("owned", tags["kubernetes.io/cluster/c-spec"])
    assert.equals(1, sim:state().calls.TagResources)
    local none, err = mapping.registered(ctx, "i-bp1doesnotexist0000", "n")
    assert.is_nil(none)
    assert.matches("TagResources", err.message)
    assert.matches("RequestId", err.message)
    assert.is_nil((mapping.registered(ctx, inst.id, "")))
  end)

  it("describe batches ids by 100 in InstanceIds", function()
    local launched = assert(c:call("ecs", "RunInstances", { RegionId = "cn-hangzhou", Amount = 100,
      InstanceType = "ecs.g7.large", VSwitchId = VSWITCH, ImageId = IMAGE, SecurityGroupIds = { SG } }))
    local more = assert(c:call("ecs", "RunInstances", { RegionId = "cn-hangzhou", Amount = 50,
      InstanceType = "ecs.g7.large", VSwitchId = VSWITCH, ImageId = IMAGE, SecurityGroupIds = { SG } }))
    local ids = {}
    for _, id in ipairs(launched.InstanceIdSets.InstanceIdSet) do ids[#ids + 1] = id end
    for _, id in ipairs(more.InstanceIdSets.InstanceIdSet) do ids[#ids + 1] = id end
    ids[#ids + 1] = "i-bp1released000000"
    local before = sim:state().calls.DescribeInstances or 0
    local found = assert(instances.describe(ctx, ids))
    assert.equals(150, #found)
    assert.equals(2, sim:state().calls.DescribeInstances - before)
  end)

  it("the mapping's get_many describes 100 ids in one call; a missing id is absent, a failure is the call's", function()
    local mapping = require "providers.alibaba"
    local launched = assert(c:call("ecs", "RunInstances", { RegionId = "cn-hangzhou", Amount = 99,
      InstanceType = "ecs.g7.large", VSwitchId = VSWITCH, ImageId = IMAGE, SecurityGroupIds = { SG } }))
    local ids = {}
    for _, id in ipairs(launched.InstanceIdSets.InstanceIdSet) do ids[#ids + 1] = id end
    ids[#ids + 1] = "i-bp1released000000"
    local before = sim:state().calls.DescribeInstances or 0
    local found = assert(mapping.get_many(ctx, ids))
    assert.equals(1, sim:state().calls.DescribeInstances - before)
    assert.equals(99, #found)
    local seen = {}
    for _, inst in ipairs(found) do
      assert.equals("ecs.g7.large", inst.instance_type) -- the instance shape, as get answers it
      seen[inst.id] = true
    end
    for i = 1, 99 do assert.is_true(seen[ids[i]], ids[i]) end
    assert.is_nil(seen["i-bp1released000000"])
    sim:fault { action = "DescribeInstances", code = "Forbidden.RAM", count = 1 }
    local none, err = mapping.get_many(ctx, ids)
    assert.is_nil(none)
    assert.equals("DescribeInstances", err.action)
    assert.is_string(err.request_id)
    assert.matches(err.request_id, err.message, 1, true)
  end)

  it("list returns every instance of the cluster, 100 per page", function()
    local function launch(amount, cluster)
      assert(c:call("ecs", "RunInstances", { RegionId = "cn-hangzhou", Amount = amount, InstanceType = "ecs.g7.large",
        VSwitchId = VSWITCH, ImageId = IMAGE, SecurityGroupIds = { SG },
        Tag = { { Key = "kubernetes.io/cluster/" .. cluster, Value = "owned" } } }))
    end
    launch(100, "c-spec")
    launch(100, "c-spec")
    launch(50, "c-spec")
    launch(30, "c-other")
    local before = sim:state().calls.DescribeInstances or 0
    local all = assert(instances.list(ctx))
    assert.equals(250, #all)
    assert.equals(math.ceil(250 / 100), sim:state().calls.DescribeInstances - before)
    local seen = {}
    for _, inst in ipairs(all) do
      assert.equals("owned", inst.tags["kubernetes.io/cluster/c-spec"])
      assert.is_nil(seen[inst.id])
      seen[inst.id] = true
    end
  end)

  it("list of an empty cluster is an empty JSON array, and needs a cluster id", function()
    assert.equals("[]", json.encode(assert(instances.list(ctx))))
    local _, err = instances.list { region = "cn-hangzhou", endpoint = sim.url }
    assert.equals("InvalidConfig", err.code)
  end)
end)
