-- policies/disruption.lua: the default allows every voluntary disruption; protect_namespace, the
-- example its comments show, keeps nodes running payments pods from consolidation during office hours.
-- Times are fixed local times (os.time of a date), never the wall clock.
local kit = require "luaprov.testkit"
local disruption = require "policies.disruption"

local function at(hour, overrides)
  local ctx = kit.disruption_ctx(overrides)
  ctx.now = os.time { year = 2026, month = 12, day = 2, hour = hour, min = 0, sec = 0 }
  return ctx
end

local function pods(namespace)
  return { kit.pod(), kit.pod { metadata = { name = "pay-0", namespace = namespace } } }
end

describe("disruption policy", function()
  it("allows every disruption by default, registered node or not", function()
    for _, method in ipairs({ "emptiness", "drift", "multi-node consolidation", "single-node consolidation" }) do
      assert.is_true(disruption.can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"), at(10, { method = method })))
    end
    assert.is_true(disruption.can_disrupt(kit.nodeclaim(), nil, {}, at(10)))
  end)

  describe("protect_namespace('payments', 9, 18)", function()
    local can_disrupt = disruption.protect_namespace("payments", 9, 18)

    it("vetoes consolidating a node with a payments pod at 10:00, and says why", function()
      local ok, why = can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"), at(10))
      assert.is_false(ok)
      assert.equals("the node runs pod payments/pay-0 and payments nodes are not consolidated between "
        .. "09:00 and 18:00", why)
      assert.is_false((can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"), at(9, { reason = "Empty" }))))
      assert.is_false((can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"), at(17))))
    end)

    it("allows it at 20:00 and from 18:00 on", function()
      assert.is_true(can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"), at(20)))
      assert.is_true(can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"), at(18)))
      assert.is_true(can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"), at(8)))
    end)

    it("allows nodes without a payments pod, and drift", function()
      assert.is_true(can_disrupt(kit.nodeclaim(), kit.node(), pods("checkout"), at(10)))
      assert.is_true(can_disrupt(kit.nodeclaim(), kit.node(), {}, at(10)))
      assert.is_true(can_disrupt(kit.nodeclaim(), kit.node(), pods("payments"),
        at(10, { reason = "Drifted", method = "drift" })))
    end)
  end)
end)
