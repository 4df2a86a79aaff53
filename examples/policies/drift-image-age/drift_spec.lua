-- examples/policies/drift-image-age: the shipped drift reasons still win; then image age and labels.
local kit = require "luaprov.testkit"   -- first: it maps require "defaults.*" to the shipped tree
local drift = require "policies.drift"

local function claim(labels)
  return kit.nodeclaim { metadata = { labels = labels or { ["example.com/team"] = "ml" } } }
end

-- The kit's class with its image dated as DescribeImages dates it (status.images[].creationTime).
local function class_with_image_of(creation_time)
  local class = kit.nodeclass()
  class.status.images[1].creationTime = creation_time
  return class
end

describe("drift-image-age", function()
  it("is not drifted while the image is younger than 30 days and the labels are there", function()
    kit.clock.freeze("2025-01-10T00:00:00Z")
    assert.not_drifted(drift, claim(), class_with_image_of("2024-12-18T07:11:32Z"), kit.instance())
  end)

  it("drifts an image older than 30 days, dated by the class's status.images[].creationTime", function()
    local class = class_with_image_of("2024-12-18T07:11:32Z")
    kit.clock.freeze("2025-01-17T07:11:32Z")
    assert.not_drifted(drift, claim(), class, kit.instance())
    kit.clock.advance(1)
    assert.drifted("ImageAgeDrift", drift, claim(), class, kit.instance())
  end)

  it("reads creationTime, not a date in the image ID", function()
    -- the ID says 2024-12-18; the image was rebuilt under that name later, and creationTime says so
    kit.clock.freeze("2025-03-01T00:00:00Z")
    assert.not_drifted(drift, claim(), class_with_image_of("2025-02-20T00:00:00Z"), kit.instance())
  end)

  it("dates an image without a creationTime by the instance's launch time", function()
    local inst = kit.instance { launch_time = "2026-11-01T00:00:00Z" }
    kit.clock.freeze("2026-11-30T00:00:00Z")
    assert.not_drifted(drift, claim(), kit.nodeclass(), inst)
    kit.clock.advance(2 * 86400)
    assert.drifted("ImageAgeDrift", drift, claim(), kit.nodeclass(), inst)
  end)

  it("drifts a NodeClaim without the required label", function()
    kit.clock.freeze("2025-01-10T00:00:00Z")
    local class = class_with_image_of("2024-12-18T07:11:32Z")
    assert.drifted("MissingLabelDrift", drift, claim({ other = "x" }), class, kit.instance())
  end)

  it("keeps the shipped reasons and their order, and 'not known yet'", function()
    kit.clock.freeze("2030-01-01T00:00:00Z")
    assert.drifted("ImageDrift", drift, claim(), kit.nodeclass(), kit.instance { image_id = "m-gone" })
    local class = kit.nodeclass { metadata = { annotations = { [kit.HASH_ANNOTATION] = "other" } } }
    assert.drifted("NodeClassDrift", drift, claim(), class, kit.instance())
    assert.drift_unknown(drift, claim(), kit.nodeclass { status = { vSwitches = kit.list() } }, kit.instance())
  end)
end)
