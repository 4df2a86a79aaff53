-- What providers/alibaba/init.lua exports besides functions, which the engine reads once at start
-- (docs/contracts.md#the-node-class-descriptor, #settings): the node class descriptor, the settings
-- `luaprov run` takes, the drift reasons, the simulator and the demo's part. Each must agree with the
-- modules that use the same names (the drift policy's annotations and reasons, the simulator).
local mapping = require "providers.alibaba"
local drift = require "policies.drift"
local kit = require "luaprov.testkit"

local function reasons()
  local set = {}
  for _, r in ipairs(mapping.drift_reasons) do set[r] = true end
  return set
end

describe("the Alibaba mapping's exports", function()
  it("names its node class: ECSNodeClass, the finalizer and the hash annotations", function()
    assert.same({
      group = "karpenter.alibabacloud.com",
      aliases = { "karpenter.k8s.alibabacloud" },
      version = "v1alpha1",
      kind = "ECSNodeClass",
      resource = "ecsnodeclasses",
      finalizer = "karpenter.k8s.alibabacloud/termination",
      hash_annotation = "karpenter.k8s.alibabacloud/ecsnodeclass-hash",
      hash_version_annotation = "karpenter.k8s.alibabacloud/ecsnodeclass-hash-version",
    }, mapping.nodeclass)
  end)

  it("stamps the annotations the drift policy compares", function()
    assert.equals(drift.HASH_ANNOTATION, mapping.nodeclass.hash_annotation)
    assert.equals(drift.HASH_VERSION_ANNOTATION, mapping.nodeclass.hash_version_annotation)
  end)

  it("declares every reason the default drift policy returns", function()
    local known = reasons()
    local cases = {
      kit.instance { image_id = "m-old" },
      kit.instance { security_group_ids = { "sg-x" } },
      kit.instance { vswitch_id = "vsw-gone" },
    }
    for _, inst in ipairs(cases) do
      local r = drift.is_drifted(kit.nodeclaim(), kit.nodeclass(), inst)
      assert.is_true(known[r] == true, r)
    end
    assert.is_nil(known.NodeClassDrift) -- the engine's own, not the mapping's to declare
  end)

  it("takes the region from --region, REGION_ID or ALIBABA_CLOUD_REGION_ID, required; the cluster type", function()
    local region = mapping.settings[1]
    assert.equals("region", region.name)
    assert.same({ "REGION_ID", "ALIBABA_CLOUD_REGION_ID" }, region.env)
    assert.is_true(region.required)
    assert.equals("cn-hangzhou", region.sim)
    local cluster_type = mapping.settings[2]
    assert.equals("cluster-type", cluster_type.name)
    assert.same({ "LUAPROV_ALIBABA_CLUSTER_TYPE" }, cluster_type.env)
    assert.is_nil(cluster_type.default) -- absent: bootstrap.lua's own default (ACKManaged) applies
    assert.equals("ACKManaged", require("providers.alibaba.bootstrap").cluster_type({}))
  end)

  it("names the simulator standing in for Alibaba Cloud and its endpoint variable", function()
    assert.equals("alibaba", mapping.sim.service)
    assert.equals("LUAPROV_ALIBABA_ENDPOINT", mapping.sim.endpoint_env)
    assert.is_string(mapping.sim.env.ALIBABA_CLOUD_ACCESS_KEY_ID)
  end)

  it("gives the demo a class to apply and an edit that drifts with a declared reason", function()
    local demo = mapping.demo
    assert.is_table(demo.nodeclass.spec.imageSelectorTerms)
    assert.is_true(reasons()[demo.drift.reason] == true)
    -- the edit changes what the class resolves to, not its hashed spec: dynamic drift, as the story says
    assert.is_table(demo.drift.patch.spec.imageSelectorTerms)
    for _, entry in ipairs(demo.resolved) do assert.is_string(entry.field) end
  end)
end)
