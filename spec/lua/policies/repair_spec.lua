-- policies/repair.lua: rule CP6 (docs/contracts.md).
local kit = require "luaprov.testkit"
local repair = require "policies.repair"

describe("repair policy", function()
  it("tolerates Ready=False and Ready=Unknown for 30 minutes", function()
    local list = repair.policies({})
    assert.repair_policy({ condition_type = "Ready", condition_status = "False", toleration_seconds = 1800 }, list)
    assert.repair_policy({ condition_type = "Ready", condition_status = "Unknown", toleration_seconds = 1800 }, list)
    assert.is_not.repair_policy({ condition_type = "Ready", condition_status = "True" }, list)
    assert.same({
      { condition_type = "Ready", condition_status = "False", toleration_seconds = 1800 },
      { condition_type = "Ready", condition_status = "Unknown", toleration_seconds = 1800 },
    }, list)
  end)

  it("meets the contract the engine checks at load", function()
    assert.valid_repair_policies(repair.policies({}))
    assert.valid_repair_policies(repair.policies(kit.ctx()))
  end)
end)
