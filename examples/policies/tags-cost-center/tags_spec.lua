-- examples/policies/tags-cost-center: cost-center and team tags from the NodePool's labels.
local kit = require "luaprov.testkit"
local tags = require "policies.tags"

-- A NodeClaim of a NodePool whose template carries the labels (Karpenter copies them over).
local function claim_of(pool)
  return kit.nodeclaim { metadata = { labels = pool.spec.template.metadata.labels } }
end

describe("tags-cost-center", function()
  it("tags cost-center and team from the NodePool's template labels", function()
    local pool = kit.nodepool { spec = { template = { metadata = { labels = {
      ["example.com/cost-center"] = "cc-4711", ["example.com/team"] = "ml" } } } } }
    local got = tags.build_instance_tags(claim_of(pool), kit.nodeclass(), kit.ctx())
    assert.equals("cc-4711", got["cost-center"])
    assert.equals("ml", got.team)
    assert.equals("owned", got["kubernetes.io/cluster/" .. kit.defaults.cluster_id])
    assert.equals(kit.defaults.nodeclaim, got["karpenter.sh/nodeclaim"])
  end)

  it("falls back to the class's tags, then to cost-center=unassigned", function()
    local class = kit.nodeclass { spec = { tags = { team = "platform" } } }
    local got = tags.build_instance_tags(claim_of(kit.nodepool()), class, kit.ctx())
    assert.equals("platform", got.team)
    assert.equals("unassigned", got["cost-center"])
  end)

  it("lets a pool label win over the class's tag, and never touches the engine's tags", function()
    local pool = kit.nodepool { spec = { template = { metadata = { labels = { ["example.com/team"] = "ml" } } } } }
    local class = kit.nodeclass { spec = { tags = { team = "platform", ["karpenter.sh/nodepool"] = "spoofed" } } }
    local got = tags.build_instance_tags(claim_of(pool), class, kit.ctx())
    assert.equals("ml", got.team)
    assert.equals("default", got["karpenter.sh/nodepool"])
  end)
end)
