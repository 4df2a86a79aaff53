-- Tag policy (operator tree): the shipped tags, plus cost-center and team for the cloud bill.
-- The tags policy receives the NodeClaim, not the NodePool: Karpenter copies the NodePool's
-- spec.template.metadata.labels onto every NodeClaim, so the labels are read there. Precedence:
-- the ECSNodeClass's spec.tags < these pool labels < the engine's own tags (cluster ownership,
-- nodepool, nodeclaim), which nothing may change.
local default = require "defaults.policies.tags"

local M = {}

-- NodePool template label -> ECS tag key.
M.LABEL_TAGS = {
  ["example.com/cost-center"] = "cost-center",
  ["example.com/team"] = "team",
}
M.FALLBACK = { ["cost-center"] = "unassigned" }

function M.build_instance_tags(nodeclaim, nodeclass, ctx)
  local tags = default.build_instance_tags(nodeclaim, nodeclass, ctx)
  local engine = default.engine_tags(nodeclaim, nodeclass, ctx)
  local labels = (nodeclaim.metadata and nodeclaim.metadata.labels) or {}
  for label, tag in pairs(M.LABEL_TAGS) do
    local value = labels[label]
    if type(value) ~= "string" or value == "" then value = tags[tag] or M.FALLBACK[tag] end
    if value ~= nil and engine[tag] == nil then tags[tag] = value end
  end
  return tags
end

return M
