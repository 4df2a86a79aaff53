-- Repair policy: which Node conditions mean a node is unhealthy, and for how long that is tolerated
-- before the engine replaces the node (rule CP6 in docs/contracts.md). The engine never repairs more
-- than 20% of a NodePool's nodes at once, whatever this list says.
local M = {}

local THIRTY_MINUTES = 30 * 60

-- ctx is reserved for the engine (e.g. ctx.cluster_id); the defaults do not need it.
function M.policies(_ctx)
  return {
    { condition_type = "Ready", condition_status = "False", toleration_seconds = THIRTY_MINUTES },
    { condition_type = "Ready", condition_status = "Unknown", toleration_seconds = THIRTY_MINUTES },
  }
end

return M
