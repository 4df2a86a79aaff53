-- status.conditions of nodes, pods and PodDisruptionBudgets, kept the way Kubernetes controllers
-- keep them: one entry per type, lastTransitionTime moved only when the status changes, so a client
-- can tell how long a node has been NotReady.
local wire = require "sim.kubernetes.wire"

local M = {}

--- find(obj, kind) -> the condition of that type, or nil.
function M.find(obj, kind)
  local status = type(obj.status) == "table" and obj.status or {}
  for _, c in ipairs(type(status.conditions) == "table" and status.conditions or {}) do
    if type(c) == "table" and c.type == kind then return c end
  end
  return nil
end

--- status(obj, kind) -> "True", "False", "Unknown", or nil without such a condition.
function M.status(obj, kind)
  local c = M.find(obj, kind)
  return c and c.status or nil
end

--- set(obj, cond, now) -> whether obj changed: puts cond (type, status, reason, message, ...) in place
-- of the condition of its type, unless those three are what it already says: an unchanged condition
-- costs no resourceVersion.
function M.set(obj, cond, now)
  if type(obj.status) ~= "table" then obj.status = {} end
  if type(obj.status.conditions) ~= "table" then obj.status.conditions = wire.array() end
  local list = obj.status.conditions
  local at = #list + 1
  for i, c in ipairs(list) do
    if type(c) == "table" and c.type == cond.type then at = i end
  end
  local old = list[at]
  if old and old.status == cond.status and old.reason == cond.reason and old.message == cond.message then
    return false
  end
  cond.lastTransitionTime = (old and old.status == cond.status) and old.lastTransitionTime or now
  list[at] = cond
  return true
end

return M
