-- policies/repair.lua: SPEC §5 rule 6.
local repair = require "policies.repair"

describe("repair policy", function()
  it("tolerates Ready=False and Ready=Unknown for 30 minutes", function()
    assert.same({
      { condition_type = "Ready", condition_status = "False", toleration_seconds = 1800 },
      { condition_type = "Ready", condition_status = "Unknown", toleration_seconds = 1800 },
    }, repair.policies({}))
  end)
end)
