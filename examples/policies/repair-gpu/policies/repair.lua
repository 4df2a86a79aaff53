-- Repair policy (operator tree): the shipped Ready=False/Unknown policies, plus GPU nodes whose
-- device plugin or health checker reports GPUUnhealthy=True (e.g. an NVIDIA DCGM/NPD condition) and
-- nodes whose network is down (NetworkUnavailable=True, set by the CNI). Each has its own toleration;
-- the engine still never repairs more than 20% of a NodePool at once.
local default = require "defaults.policies.repair"

local M = {}

M.EXTRA = {
  { condition_type = "GPUUnhealthy", condition_status = "True", toleration_seconds = 5 * 60 },
  { condition_type = "NetworkUnavailable", condition_status = "True", toleration_seconds = 10 * 60 },
}

function M.policies(ctx)
  local list = default.policies(ctx)
  for _, p in ipairs(M.EXTRA) do
    list[#list + 1] = { condition_type = p.condition_type, condition_status = p.condition_status,
      toleration_seconds = p.toleration_seconds }
  end
  return list
end

return M
