-- testkit luassert extensions: pass and fail the way the policy contracts say, with messages that
-- show what the policy answered.
local kit = require "luaprov.testkit"
local drift = require "policies.drift"

local function failure(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "the assertion should have failed")
  return tostring(type(err) == "table" and err.message or err)
end

describe("testkit assertions", function()
  it("drifted / not_drifted / drift_unknown follow is_drifted's answers", function()
    local claim, class = kit.nodeclaim(), kit.nodeclass()
    assert.not_drifted(drift, claim, class, kit.instance())
    assert.drifted(drift, claim, class, kit.instance { image_id = "m-old" })
    assert.drifted("ImageDrift", drift, claim, class, kit.instance { image_id = "m-old" })
    assert.drift_unknown(drift, claim, kit.nodeclass { status = { images = kit.list() } }, kit.instance())
  end)

  it("fail with what the policy answered", function()
    local claim, class = kit.nodeclaim(), kit.nodeclass()
    local msg = failure(assert.drifted, "VSwitchDrift", drift, claim, class, kit.instance { image_id = "m-old" })
    assert.matches('report "VSwitchDrift", it answered drifted: "ImageDrift"', msg, 1, true)
    local unresolved = kit.nodeclass { status = { vSwitches = kit.list() } }
    msg = failure(assert.not_drifted, drift, claim, unresolved, kit.instance())
    assert.matches("not known yet", msg, 1, true)
    msg = failure(assert.drifted, drift, claim, class, kit.instance())
    assert.matches('it answered not drifted ("")', msg, 1, true)
  end)

  it("ask static_drift first, as the engine does", function()
    local policy = {
      static_drift = function() return "NodeClassDrift" end,
      is_drifted = function() error("is_drifted must not be called") end,
    }
    assert.drifted("NodeClassDrift", policy, kit.nodeclaim(), kit.nodeclass(), kit.instance())
    policy = { is_drifted = function() return nil end }
    assert.not_drifted(policy, kit.nodeclaim(), kit.nodeclass(), kit.instance())
  end)

  it("repair_policy finds an entry, toleration optional, and lists the policies when it does not", function()
    local list = require("policies.repair").policies({})
    assert.repair_policy({ condition_type = "Ready", condition_status = "Unknown" }, list)
    local msg = failure(assert.repair_policy, { condition_type = "Ready", condition_status = "False",
      toleration_seconds = 60 }, list)
    assert.matches("Ready=False for 1800s", msg, 1, true)
  end)

  it("valid_repair_policies checks the list with the engine's messages", function()
    assert.valid_repair_policies({})
    local msg = failure(assert.valid_repair_policies, { { condition_type = "Ready", condition_status = "false",
      toleration_seconds = 1 } })
    assert.matches('policies(ctx)[1].condition_status is "false"; it must be "True", "False" or "Unknown" '
      .. '(did you mean "False"?)', msg, 1, true)
    assert.same({ false, "policies(ctx)[1].toleration_seconds is -1; it must be a number of seconds >= 0 (how long "
      .. "the condition may last before the node is repaired)" },
      { kit.check_repair_policies({ { condition_type = "X", condition_status = "True", toleration_seconds = -1 } }) })
  end)
end)
