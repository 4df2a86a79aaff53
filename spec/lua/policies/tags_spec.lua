-- policies/tags.lua: rule CP7 (docs/contracts.md), the engine's tags win over the class's.
local kit = require "luaprov.testkit"
local tags = require "policies.tags"

describe("tags policy", function()
  local nodeclaim = kit.nodeclaim { metadata = { name = "default-x1" } }
  local nodeclass = kit.nodeclass { metadata = { name = "gpu" }, spec = { tags = {
    team = "ml", ["kubernetes.io/cluster/c-1"] = "shared", ["ecs:ecs-cluster-id"] = "spoofed" } } }

  it("merges the class's tags with the engine's, the engine's winning", function()
    assert.same({
      team = "ml",
      ["kubernetes.io/cluster/c-1"] = "owned",
      ["karpenter.sh/nodepool"] = "default",
      ["karpenter.sh/nodeclaim"] = "default-x1",
      ["karpenter.k8s.alibabacloud/ecsnodeclass"] = "gpu",
      ["ecs:ecs-cluster-id"] = "c-1",
    }, tags.build_instance_tags(nodeclaim, nodeclass, kit.ctx { cluster_id = "c-1" }))
  end)

  it("works for a class without tags and a claim without a pool", function()
    local claim = kit.nodeclaim { metadata = { name = "n", labels = kit.NONE } }
    local class = kit.nodeclass { metadata = { name = "c" }, spec = kit.NONE }
    local got = tags.build_instance_tags(claim, class, kit.ctx { cluster_id = "c-2" })
    assert.equals("owned", got["kubernetes.io/cluster/c-2"])
    assert.equals("", got["karpenter.sh/nodepool"])
    assert.equals("c-2", got["ecs:ecs-cluster-id"])
  end)
end)
