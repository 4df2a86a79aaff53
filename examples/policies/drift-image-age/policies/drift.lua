-- Drift policy (operator tree): the shipped checks first, then two of our own.
--   ImageAgeDrift       the node's image is older than MAX_IMAGE_AGE_DAYS. The instance and the
--                       ECSNodeClass status carry no image creation date, so the date is read from the
--                       image ID (Alibaba's public images end in _alibase_YYYYMMDD.vhd); for other
--                       images the instance's launch_time stands in ("node age").
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

--- image_date(instance) -> seconds since the epoch, and where it came from ("image" | "launch_time"),
--- or nil when neither is known.
function M.image_date(instance)
  local y, m, d = (instance.image_id or ""):match("_(%d%d%d%d)(%d%d)(%d%d)%.vhd$")
  if y then
    local t = time.parse_iso8601(("%s-%s-%sT00:00:00Z"):format(y, m, d))
    if t then return t, "image" end
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
  local since, source = M.image_date(instance)
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
