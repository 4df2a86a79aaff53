-- Drift policy (operator tree): the shipped checks first, then two of our own.
--   ImageAgeDrift       the node's image is older than MAX_IMAGE_AGE_DAYS, dated by its creationTime
--                       in the ECSNodeClass's status.images[] (a luaprov extension, DescribeImages'
--                       CreationTime; docs/alibaba.md). An image the class no longer lists, or one without
--                       a date, is dated by the instance's launch_time instead ("node age").
--   MissingLabelDrift   the NodeClaim lacks a label of REQUIRED_LABELS (added to the NodePool's
--                       template after the node was launched).
-- Both are cheap and call no cloud API, as the drift contract asks.
local default = require "defaults.policies.drift"
local luaprov = require "luaprov"

local time = luaprov.time

local M = {}

M.MAX_IMAGE_AGE_DAYS = 30
M.REQUIRED_LABELS = { "example.com/team" }

-- Keep the engine's cheap first question: hash drift needs no instance.
M.static_drift = default.static_drift

--- image_date(nodeclass, instance) -> seconds since the epoch, and where it came from ("creationTime" |
--- "launch_time"), or nil when neither is known.
function M.image_date(nodeclass, instance)
  local images = (nodeclass and nodeclass.status and nodeclass.status.images) or {}
  for _, image in ipairs(images) do
    if image.id == instance.image_id and type(image.creationTime) == "string" then
      local t = time.parse_iso8601(image.creationTime)
      if t then return t, "creationTime" end
    end
  end
  local launched = type(instance.launch_time) == "string" and time.parse_iso8601(instance.launch_time)
  if launched then return launched, "launch_time" end
  return nil
end

local function missing_label(nodeclaim)
  local labels = (nodeclaim.metadata and nodeclaim.metadata.labels) or {}
  for _, key in ipairs(M.REQUIRED_LABELS) do
    if type(labels) ~= "table" or labels[key] == nil then return key end
  end
  return nil
end

function M.is_drifted(nodeclaim, nodeclass, instance, ctx)
  local reason, err = default.is_drifted(nodeclaim, nodeclass, instance, ctx)
  if reason == nil and err then return nil, err end          -- not known yet: ask again later
  if reason and reason ~= "" then return reason end          -- drifted by the shipped rules
  local since, source = M.image_date(nodeclass, instance)
  if since and time.now() - since > M.MAX_IMAGE_AGE_DAYS * 86400 then
    luaprov.log.info("image too old", { instance_id = instance.id, image_id = instance.image_id, source = source })
    return "ImageAgeDrift"
  end
  local label = missing_label(nodeclaim)
  if label then
    luaprov.log.info("required label missing", { instance_id = instance.id, label = label })
    return "MissingLabelDrift"
  end
  return ""
end

return M
