-- policies/drift.lua: the reasons of SPEC §5 rule 5, in their order, and "not known yet".
local drift = require "policies.drift"

local HASH, VERSION = drift.HASH_ANNOTATION, drift.HASH_VERSION_ANNOTATION

local function fixtures()
  local nodeclaim = { metadata = { name = "n1", annotations = { [HASH] = "aaa", [VERSION] = "lp1" } } }
  local nodeclass = {
    metadata = { name = "default", annotations = { [HASH] = "aaa", [VERSION] = "lp1" } },
    status = {
      images = { { id = "m-new" }, { id = "m-arm" } },
      securityGroups = { { id = "sg-a" }, { id = "sg-b" } },
      vSwitches = { { id = "vsw-h", zoneID = "h" }, { id = "vsw-i", zoneID = "i" } },
    },
  }
  local instance = { id = "i-1", image_id = "m-new", security_group_ids = { "sg-b", "sg-a" }, vswitch_id = "vsw-i" }
  return nodeclaim, nodeclass, instance
end

describe("drift policy", function()
  it("reports nothing when the instance matches its class", function()
    assert.equals("", drift.is_drifted(fixtures()))
  end)

  it("reports NodeClassDrift when both hashes of one version differ, before anything else", function()
    local claim, class, inst = fixtures()
    class.metadata.annotations[HASH] = "bbb"
    inst.image_id = "m-old"
    assert.equals("NodeClassDrift", drift.is_drifted(claim, class, inst))
    assert.equals("NodeClassDrift", drift.static_drift(claim, class))
  end)

  it("ignores the hashes when their versions differ or one is missing", function()
    local claim, class, inst = fixtures()
    class.metadata.annotations[HASH] = "bbb"
    class.metadata.annotations[VERSION] = "lp2"
    assert.equals("", drift.is_drifted(claim, class, inst))
    claim.metadata.annotations = nil
    assert.equals("", drift.static_drift(claim, class))
  end)

  it("reports ImageDrift before SecurityGroupDrift and VSwitchDrift", function()
    local claim, class, inst = fixtures()
    inst.image_id, inst.vswitch_id, inst.security_group_ids = "m-old", "vsw-gone", { "sg-x" }
    assert.equals("ImageDrift", drift.is_drifted(claim, class, inst))
  end)

  it("reports SecurityGroupDrift for a missing or an extra group, before VSwitchDrift", function()
    local claim, class, inst = fixtures()
    inst.security_group_ids = { "sg-a" }
    inst.vswitch_id = "vsw-gone"
    assert.equals("SecurityGroupDrift", drift.is_drifted(claim, class, inst))
    inst.security_group_ids = { "sg-a", "sg-b", "sg-c" }
    assert.equals("SecurityGroupDrift", drift.is_drifted(claim, class, inst))
  end)

  it("reports VSwitchDrift when the instance's vSwitch is no longer selected", function()
    local claim, class, inst = fixtures()
    inst.vswitch_id = "vsw-gone"
    assert.equals("VSwitchDrift", drift.is_drifted(claim, class, inst))
  end)

  for _, list in ipairs({ "images", "securityGroups", "vSwitches" }) do
    it("cannot decide while status." .. list .. " is empty (a transient error, not drift)", function()
      local claim, class, inst = fixtures()
      class.status[list] = {}
      local reason, err = drift.is_drifted(claim, class, inst)
      assert.is_nil(reason)
      assert.matches("ECSNodeClass status yet", err)
    end)
  end
end)
