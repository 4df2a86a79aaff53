-- examples/policies/drift-image-age: the shipped drift reasons still win; then image age and labels.
local kit = require "luaprov.testkit"   -- first: it maps require "defaults.*" to the shipped tree
local drift = require "policies.drift"

-- The default image is aliyun_3_x64_20G_alibase_20241218.vhd: built 2024-12-18.
local function claim(labels)
  return kit.nodeclaim { metadata = { labels = labels or { ["example.com/team"] = "ml" } } }
end

describe("drift-image-age", function()
  it("is not drifted while the image is younger than 30 days and the labels are there", function()
    kit.clock.freeze("2025-01-10T00:00:00Z")
    assert.not_drifted(drift, claim(), kit.nodeclass(), kit.instance())
  end)

  it("drifts an image older than 30 days, dated by its ID", function()
    kit.clock.freeze("2025-01-18T00:00:01Z")
    assert.drifted("ImageAgeDrift", drift, claim(), kit.nodeclass(), kit.instance())
  end)

  it("dates an image without a date in its ID by the instance's launch time", function()
    local class = kit.nodeclass { status = { images = { { id = "m-custom" } } } }
    local inst = kit.instance { image_id = "m-custom", launch_time = "2026-11-01T00:00:00Z" }
    kit.clock.freeze("2026-11-30T00:00:00Z")
    assert.not_drifted(drift, claim(), class, inst)
    kit.clock.advance(2 * 86400)
    assert.drifted("ImageAgeDrift", drift, claim(), class, inst)
  end)

  it("drifts a NodeClaim without the required label", function()
    kit.clock.freeze("2025-01-10T00:00:00Z")
    assert.drifted("MissingLabelDrift", drift, claim({ other = "x" }), kit.nodeclass(), kit.instance())
  end)

  it("keeps the shipped reasons and their order, and 'not known yet'", function()
    kit.clock.freeze("2030-01-01T00:00:00Z")
    assert.drifted("ImageDrift", drift, claim(), kit.nodeclass(), kit.instance { image_id = "m-gone" })
    local class = kit.nodeclass { metadata = { annotations = { [kit.HASH_ANNOTATION] = "other" } } }
    assert.drifted("NodeClassDrift", drift, claim(), class, kit.instance())
    assert.drift_unknown(drift, claim(), kit.nodeclass { status = { vSwitches = kit.list() } }, kit.instance())
  end)
end)
