-- Fault injection for the Bizfly simulator: rules added through POST /_sim/faults that make API calls
-- or node creations fail the way the real cloud fails, so the client's re-login, retries and the
-- mapping's error reporting can be tested. Same conventions as the Alibaba simulator's rules.
--
-- Per-call kinds match `operation` ("*" for any; token, catalog, list_clusters, get_cluster,
-- get_pool, update_pool, delete_node), let `skip` matching calls pass first, then fire `count` times
-- (forever without count); at most one fires per call, the oldest first:
--   error         answer `status` (default 400) with `message`
--   unauthorized  revoke every token, then answer 401: a token revoked under a running client
--   5xx           500 Internal Server Error (or `status` 500..599)
--   timeout       the call takes effect, then the answer waits `seconds` (default 5, at most 50)
--   malformed     the call takes effect; the body is cut in half (or replaced by `body`), HTTP 200
-- Node kinds act when a pool grows, not per call:
--   quota         the next `count` node creations (all, without count) fail: Quota exceeded
--   nostock       creations of `flavor` (any flavor when absent) fail: No valid host was found
local rules_mod = require "sim.rules"

local M = {}

M.OPERATIONS = { ["*"] = true, token = true, catalog = true, list_clusters = true, get_cluster = true,
  get_pool = true, update_pool = true, delete_node = true }
local PER_CALL = { error = true, unauthorized = true, ["5xx"] = true, timeout = true, malformed = true }
local KINDS = { error = true, unauthorized = true, ["5xx"] = true, timeout = true, malformed = true, quota = true,
  nostock = true }

local rules = rules_mod.new()

function M.reset()
  rules:reset()
end

--- add(spec) -> rule | nil, message. `spec` is the decoded JSON object of one rule.
function M.add(spec)
  if type(spec) ~= "table" then return nil, "a fault rule must be a JSON object" end
  local rule, err = rules_mod.read_strings(spec, { operation = "*" },
    { "operation", "kind", "message", "body", "flavor" })
  if not rule then return nil, err end
  if not rule.kind then
    return nil, "give a kind: error, unauthorized, 5xx, timeout, malformed, quota or nostock"
  end
  if not KINDS[rule.kind] then return nil, "unknown kind '" .. rule.kind .. "'" end
  if not M.OPERATIONS[rule.operation] then return nil, "unknown operation '" .. rule.operation .. "'" end
  rule, err = rules_mod.read_limits(spec, rule)
  if not rule then return nil, err end
  if rule.kind == "error" then
    rule.status = rule.status or 400
    rule.message = rule.message or ("Simulated error " .. rule.status .. ".")
  elseif rule.kind == "5xx" then
    rule.status = rule.status or 500
    if rule.status < 500 then return nil, "a 5xx fault needs a status of 500..599" end
    rule.message = rule.message or (rule.status == 503 and "Service Unavailable" or "Internal Server Error")
  elseif rule.kind == "timeout" then
    rule.seconds = rule.seconds or 5
  end
  return rules:add(rule)
end

--- take(operation) -> the per-call rule to apply to this call, or nil. Consumes one use of it.
function M.take(operation)
  return rules:take(function(r)
    return PER_CALL[r.kind] and (r.operation == "*" or r.operation == operation)
  end)
end

--- creation_failure(flavor) -> "quota" | "nostock" | nil for one node about to be created. A quota
-- rule is consumed; a nostock rule lasts until removed.
function M.creation_failure(flavor)
  for i, r in ipairs(rules:list()) do
    if r.kind == "nostock" and (r.flavor == nil or r.flavor == flavor) then
      r.fired = r.fired + 1
      return "nostock", r
    end
    if r.kind == "quota" then return "quota", rules:consume(i, r) end
  end
  return nil
end

function M.list()
  return rules:list()
end

function M.remove(id)
  return rules:remove(id)
end

M.reset()

return M
