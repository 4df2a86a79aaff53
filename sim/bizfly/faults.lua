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
local M = {}

M.OPERATIONS = { ["*"] = true, token = true, catalog = true, list_clusters = true, get_cluster = true,
  get_pool = true, update_pool = true, delete_node = true }
local PER_CALL = { error = true, unauthorized = true, ["5xx"] = true, timeout = true, malformed = true }
local KINDS = { error = true, unauthorized = true, ["5xx"] = true, timeout = true, malformed = true, quota = true,
  nostock = true }

local rules, next_id

function M.reset()
  rules, next_id = {}, 0
end

local function opt_string(spec, name)
  local v = spec[name]
  if v ~= nil and type(v) ~= "string" then return nil, name .. " must be a string" end
  return v
end

local function opt_int(spec, name, min, max)
  local v = spec[name]
  if v == nil then return nil end
  if math.type(v) ~= "integer" or v < min or (max and v > max) then
    return nil, ("%s must be an integer between %d and %s"):format(name, min, max or "any")
  end
  return v
end

--- add(spec) -> rule | nil, message. `spec` is the decoded JSON object of one rule.
function M.add(spec)
  if type(spec) ~= "table" then return nil, "a fault rule must be a JSON object" end
  local rule, err = { operation = "*" }
  for _, name in ipairs({ "operation", "kind", "message", "body", "flavor" }) do
    local v
    v, err = opt_string(spec, name)
    if err then return nil, err end
    if v ~= nil then rule[name] = v end
  end
  if not rule.kind then
    return nil, "give a kind: error, unauthorized, 5xx, timeout, malformed, quota or nostock"
  end
  if not KINDS[rule.kind] then return nil, "unknown kind '" .. rule.kind .. "'" end
  if not M.OPERATIONS[rule.operation] then return nil, "unknown operation '" .. rule.operation .. "'" end
  for _, f in ipairs({ { "count", 1, nil }, { "skip", 0, nil }, { "status", 400, 599 } }) do
    local v
    v, err = opt_int(spec, f[1], f[2], f[3])
    if err then return nil, err end
    rule[f[1]] = v
  end
  if spec.seconds ~= nil then
    if type(spec.seconds) ~= "number" or spec.seconds <= 0 or spec.seconds > 50 then
      return nil, "seconds must be a number in (0, 50] (a handler call may not outlive 60 s)"
    end
    rule.seconds = spec.seconds
  end
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
  next_id = next_id + 1
  rule.id = next_id
  rule.fired = 0
  rules[#rules + 1] = rule
  return rule
end

local function consume(i, r)
  r.fired = r.fired + 1
  if r.count then
    r.count = r.count - 1
    if r.count == 0 then table.remove(rules, i) end
  end
  return r
end

--- take(operation) -> the per-call rule to apply to this call, or nil. Consumes one use of it.
function M.take(operation)
  for i, r in ipairs(rules) do
    if PER_CALL[r.kind] and (r.operation == "*" or r.operation == operation) then
      if r.skip and r.skip > 0 then
        r.skip = r.skip - 1
      else
        return consume(i, r)
      end
    end
  end
  return nil
end

--- creation_failure(flavor) -> "quota" | "nostock" | nil for one node about to be created. A quota
-- rule is consumed; a nostock rule lasts until removed.
function M.creation_failure(flavor)
  for i, r in ipairs(rules) do
    if r.kind == "nostock" and (r.flavor == nil or r.flavor == flavor) then
      r.fired = r.fired + 1
      return "nostock", r
    end
    if r.kind == "quota" then return "quota", consume(i, r) end
  end
  return nil
end

function M.list()
  return rules
end

function M.remove(id)
  for i, r in ipairs(rules) do
    if r.id == id then
      table.remove(rules, i)
      return true
    end
  end
  return false
end

M.reset()

return M
