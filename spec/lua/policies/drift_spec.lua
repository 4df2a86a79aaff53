-- policies/drift.lua: the reasons of rule CP5 (docs/contracts.md), in their order, and "not known yet".
local kit = require "luaprov.testkit"
local drift = require "policies.drift"

local HASH, VERSION = kit.HASH_ANNOTATION, kit.HASH_VERSION_ANNOTATION

describe("drift policy", function()
  it("reports nothing when the instance matches its class", function()
    assert.not_drifted(drift, kit.nodeclaim(), kit.nodeclass(), kit.instance())
    assert.equals("", drift.is_drifted(kit.nodeclaim(), kit.nodeclass(), kit.instance()))
  end)

  it("reports NodeClassDrift when both hashes of one version differ, before anything else", function()
    local claim = kit.nodeclaim()
    local class = kit.nodeclass { metadata = { annotations = { [HASH] = "bbb" } } }
    local inst = kit.instance { image_id = "m-old" }
    assert.drifted("NodeClassDrift", drift, claim, class, inst)
    assert.equals("NodeClassDrift", drift.is_drifted(claim, class, inst))
    assert.equals("NodeClassDrift", drift.static_drift(claim, class))
  end)

  it("ignores the hashes when their versions differ or one is missing", function()
    local class = kit.nodeclass { metadata = { annotations = { [HASH] = "bbb", [VERSION] = "lp2" } } }
    assert.not_drifted(drift, kit.nodeclaim(), class, kit.instance())
    local bare = kit.nodeclaim { metadata = { annotations = kit.NONE } }
    assert.equals("", drift.static_drift(bare, class))
  end)

  it("reports ImageDrift before SecurityGroupDrift and VSwitchDrift", function()
    local inst = kit.instance { image_id = "m-old", vswitch_id = "vsw-gone", security_group_ids = { "sg-x" } }
    assert.drifted("ImageDrift", drift, kit.nodeclaim(), kit.nodeclass(), inst)
  end)

  it("reports SecurityGroupDrift for a missing or an extra group, before VSwitchDrift", function()
    local class = kit.nodeclass { status = { securityGroups = { { id = "sg-a" }, { id = "sg-b" } } } }
    local inst = kit.instance { security_group_ids = { "sg-a" }, vswitch_id = "vsw-gone" }
    assert.drifted("SecurityGroupDrift", drift, kit.nodeclaim(), class, inst)
    inst.security_group_ids = { "sg-a", "sg-b", "sg-c" }
    assert.drifted("SecurityGroupDrift", drift, kit.nodeclaim(), class, inst)
    inst.security_group_ids = { "sg-b", "sg-a" }
    assert.drifted("VSwitchDrift", drift, kit.nodeclaim(), class, inst)
  end)

  it("reports VSwitchDrift when the instance's vSwitch is no longer selected", function()
    assert.drifted("VSwitchDrift", drift, kit.nodeclaim(), kit.nodeclass(), kit.instance { vswitch_id = "vsw-gone" })
  end)

  for _, list in ipairs({ "images", "securityGroups", "vSwitches" }) do
    it("cannot decide while status." .. list .. " is empty (a transient error, not drift)", function()
      local class = kit.nodeclass { status = { [list] = kit.list() } }
      assert.drift_unknown(drift, kit.nodeclaim(), class, kit.instance(), {}, "ECSNodeClass status yet")
      local reason, err = drift.is_drifted(kit.nodeclaim(), class, kit.instance())
      assert.is_nil(reason)
      assert.matches("ECSNodeClass status yet", err)
    end)
  end

  it("agrees with the eval fixtures an operator dry-runs with `luaprov eval drift`", function()
    local dir = (os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/eval/"
    local claim, class = kit.load(dir .. "nodeclaim.yaml"), kit.load(dir .. "nodeclass.json")
    local inst = kit.load(dir .. "instance.json")
    assert.not_drifted(drift, claim, class, inst)
    inst.image_id = "m-retired"
    assert.drifted("ImageDrift", drift, claim, class, inst)
  end)
end)
