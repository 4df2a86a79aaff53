-- How many calls each operation of the simulated Bizfly API received, and how many failed, for
-- assertions such as "a refresh made 1 + N GETs" from /_sim/state; and the request ID each answer
-- carries, as the real gateway's answers do in X-Request-Id, so a client's logs can be followed back
-- to one call.
local wire = require "sim.bizfly.wire"

local M = {}

local calls, errors, sequence, last_request_id

function M.reset()
  calls, errors, sequence, last_request_id = {}, {}, 0, nil
end

--- count(operation, failed) -> request ID: one more call (and one more failure when `failed`). The ID
-- ("req-<uuid>") comes from the call's place since the last reset, so a run can be replayed.
function M.count(operation, failed)
  operation = operation or "(none)"
  calls[operation] = (calls[operation] or 0) + 1
  if failed then errors[operation] = (errors[operation] or 0) + 1 end
  sequence = sequence + 1
  last_request_id = "req-" .. wire.uuid("request:" .. sequence)
  return last_request_id
end

function M.summary()
  local total = 0
  for _, n in pairs(calls) do total = total + n end
  return { calls = calls, errors = errors, total_calls = total, last_request_id = last_request_id }
end

M.reset()

return M
