-- How many calls each operation of the simulated Bizfly API received, and how many failed, for
-- assertions such as "a refresh made 1 + N GETs" from /_sim/state.
local M = {}

local calls, errors

function M.reset()
  calls, errors = {}, {}
end

--- count(operation, failed): one more call (and one more failure when `failed`).
function M.count(operation, failed)
  operation = operation or "(none)"
  calls[operation] = (calls[operation] or 0) + 1
  if failed then errors[operation] = (errors[operation] or 0) + 1 end
end

function M.summary()
  local total = 0
  for _, n in pairs(calls) do total = total + n end
  return { calls = calls, errors = errors, total_calls = total }
end

M.reset()

return M
