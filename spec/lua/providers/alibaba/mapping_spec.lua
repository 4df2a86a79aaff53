-- The CloudProvider mapping module (providers/alibaba/init.lua): the exports of README's contract
-- table, the providerID format (upstream's `<region>.<instance-id>`), delegation to the
-- instances module, and the engine's own contract check (`luaprov check`).
local luaprov = require "luaprov"
local harness = require "spec.fixtures.alibaba.harness"
local mapping = require "providers.alibaba"
local instances = require "providers.alibaba.instances"
local launch = require "providers.alibaba.launch"
local instancetypes = require "providers.alibaba.instancetypes"
local nodeclass = require "providers.alibaba.nodeclass"

local json = luaprov.json

describe("the Alibaba CloudProvider mapping", function()
  it("exports the contract of providers/alibaba/README.md", function()
    assert.equals("alibabacloud", rawget(mapping, "name"))
    for _, f in ipairs { "instance_types", "create", "delete", "get", "get_many", "list", "resolve_nodeclass",
      "nodeclass_hash", "provider_id", "parse_provider_id", "registered" } do
      assert.is_function(rawget(mapping, f), f)
    end
    assert.equals(nodeclass.resolve, mapping.resolve_nodeclass)
    assert.equals(nodeclass.hash, mapping.nodeclass_hash)
    assert.equals(instancetypes.list, mapping.instance_types)
    -- the Node condition ACK raises on a spot instance about to be reclaimed (docs/alibaba.md)
    assert.same({ "InstanceExpired" }, mapping.interruption_conditions)
  end)

  it("passes `luaprov check`", function()
    local binary = assert(os.getenv("LUAPROV_BINARY_DIR"), "LUAPROV_BINARY_DIR not set") .. "/luaprov"
    local source = os.getenv("LUAPROV_SOURCE_DIR") or "."
    local p = io.popen(("%s check %s 2>&1; echo rc=$?"):format(binary, source))
    local out = p:read("a")
    p:close()
    assert.matches("rc=0", out, 1, true)
  end)

  it("builds ACK's providerID from the instance's region and id", function()
    local instance = harness.load_json("instance.json")
    assert.equals("cn-hangzhou.i-bp1abcdef0123456", mapping.provider_id(instance))
    local none, err = mapping.provider_id({ id = "i-1" })
    assert.is_nil(none)
    assert.matches("region", err)
  end)

  it("parses providerIDs at the last dot, as upstream does", function()
    local cases = {
      ["cn-hangzhou.i-bp1abc"] = { "cn-hangzhou", "i-bp1abc" },
      ["a.b.c"] = { "a.b", "c" },
      ["alicloud://cn-beijing.i-2ze"] = { "cn-beijing", "i-2ze" },
    }
    for s, want in pairs(cases) do
      assert.same({ region = want[1], instance_id = want[2] }, mapping.parse_provider_id(s), s)
    end
    for _, bad in ipairs { "i-bp1abc", "", "cn-hangzhou.", ".i-1" } do
      local v, err = mapping.parse_provider_id(bad)
      assert.is_nil(v, bad)
      assert.matches("parsing instance id", err)
    end
    assert.is_nil((mapping.parse_provider_id(42)))
  end)

  it("round-trips the NodeClaim fixture's providerID", function()
    local claim = harness.load_json("nodeclaim.json")
    local parsed = assert(mapping.parse_provider_id(claim.status.providerID))
    assert.equals(claim.status.providerID,
      mapping.provider_id { region = parsed.region, id = parsed.instance_id })
  end)

  describe("delegates create to providers.alibaba.launch and the rest to providers.alibaba.instances", function()
    local saved = {}
    local seen
    local function fake(module, f)
      saved[#saved + 1] = { module, f, module[f] }
      module[f] = function(...)
        seen[#seen + 1] = { f, ... }
        return f .. "-result"
      end
    end
    before_each(function()
      seen = {}
      fake(launch, "create")
      for _, f in ipairs { "delete", "get", "describe", "list" } do fake(instances, f) end
    end)
    after_each(function()
      for _, s in ipairs(saved) do s[1][s[2]] = s[3] end
      saved = {}
    end)

    it("create -> launch.create, delete, get, get_many -> describe, list with the same arguments", function()
      local ctx, req, ids = { region = "cn-hangzhou" }, { offerings = {} }, { "i-3", "i-4" }
      assert.equals("create-result", mapping.create(ctx, req))
      assert.equals("delete-result", mapping.delete(ctx, "i-1"))
      assert.equals("get-result", mapping.get(ctx, "i-2"))
      assert.equals("describe-result", mapping.get_many(ctx, ids))
      assert.equals("list-result", mapping.list(ctx))
      assert.same({ { "create", ctx, req }, { "delete", ctx, "i-1" }, { "get", ctx, "i-2" }, { "describe", ctx, ids },
        { "list", ctx } }, seen)
    end)
  end)

  it("hashes the ECSNodeClass fixture to its own annotation", function()
    local class = harness.load_json("ecsnodeclass.json")
    local hash, version = mapping.nodeclass_hash(class)
    assert.equals(class.metadata.annotations["karpenter.k8s.alibabacloud/ecsnodeclass-hash"], hash)
    assert.equals(class.metadata.annotations["karpenter.k8s.alibabacloud/ecsnodeclass-hash-version"], version)
    local claim = harness.load_json("nodeclaim.json")
    assert.equals(hash, claim.metadata.annotations["karpenter.k8s.alibabacloud/ecsnodeclass-hash"])
  end)

  it("returns plain data the engine can encode", function()
    local cloud = harness.fake_cloud {
      region = "cn-fake", zones = { "cn-fake-h" },
      instance_types = { { InstanceTypeId = "ecs.g7.large", CpuCoreCount = 2, MemorySize = 8, EniQuantity = 3,
        EniPrivateIpAddressQuantity = 6 } },
      stock = { ["on-demand"] = { ["ecs.g7.large"] = { ["cn-fake-h"] = "WithStock" } }, spot = {} },
      prices = { ["ecs.g7.large"] = 0.25 },
      vswitches = { { VSwitchId = "vsw-1", ZoneId = "cn-fake-h", AvailableIpAddressCount = 9 } },
      security_groups = { { SecurityGroupId = "sg-1", SecurityGroupName = "n" } },
      images = {},
    }
    cloud.install()
    local ok, err = pcall(function()
      local class = harness.load_json("ecsnodeclass.json")
      class.spec.vSwitchSelectorTerms = { { id = "vsw-1" } }
      class.status = mapping.resolve_nodeclass(cloud.ctx, class)
      assert(json.encode(class.status))
      local types = assert(mapping.instance_types(cloud.ctx, class))
      local text = assert(json.encode(types))
      assert.matches('"offerings":%[{"available":true,"capacity_type":"on%-demand","price":0.25,', text)
      assert.matches('"values":%[%]', text)       -- DoesNotExist keeps an empty list, not an object
    end)
    cloud.uninstall()
    assert(ok, err)
  end)
end)
