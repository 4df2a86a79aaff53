-- examples/policies/repair-gpu: the defaults plus GPU and network conditions.
local kit = require "luaprov.testkit"
local repair = require "policies.repair"

describe("repair-gpu", function()
  local list = repair.policies(kit.ctx())

  it("keeps the shipped Ready policies", function()
    assert.repair_policy({ condition_type = "Ready", condition_status = "False", toleration_seconds = 1800 }, list)
    assert.repair_policy({ condition_type = "Ready", condition_status = "Unknown", toleration_seconds = 1800 }, list)
  end)

  it("repairs an unhealthy GPU after 5 minutes and a lost network after 10", function()
    assert.repair_policy({ condition_type = "GPUUnhealthy", condition_status = "True", toleration_seconds = 300 }, list)
    assert.repair_policy({ condition_type = "NetworkUnavailable", condition_status = "True",
      toleration_seconds = 600 }, list)
    assert.is_not.repair_policy({ condition_type = "NetworkUnavailable", condition_status = "False" }, list)
    assert.equals(4, #list)
  end)

  it("meets the contract the engine checks at load", function()
    assert.valid_repair_policies(repair.policies({}))
  end)
end)
