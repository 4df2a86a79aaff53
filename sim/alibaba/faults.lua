-- Fault injection: rules added through POST /_sim/faults that make matching API calls fail the way the
-- real cloud fails, so the provider's retries, backoff and capacity fallbacks can be tested.
--
-- Kinds (a rule with only `code` is an "error"):
--   error      answer the API error `code` (HTTP status and message from the real API unless given)
--   throttle   Throttling.User, HTTP 400, with the x-ratelimit-user-api hint header
--   5xx        InternalError 500 (or ServiceUnavailable when status is 503)
--   timeout    answer `seconds` late; the call is carried out first, as when a response is lost
--   malformed  the call is carried out, then the body is cut in half (or replaced by `body`)
--   nostock    not per call: makes (zone, instance_type, capacity_type) sold out until cleared
-- Per-call rules match `action` ("*" for any) and optionally `product`, let `skip` matching calls pass
-- first, then fire `count` times (forever when count is absent). Rules are tried in insertion order
-- and at most one fires per call.
local catalogue = require "sim.alibaba.catalogue"
local rules_mod = require "sim.rules"

local M = {}

local KNOWN = {
  Throttling = { 400, "Request was denied due to request throttling." },
  ["Throttling.User"] = { 400, "Request was denied due to user flow control." },
  ["Throttling.Api"] = { 400, "Request was denied due to api flow control." },
  InternalError = { 500, "The request processing has failed due to some unknown error, exception or failure." },
  ServiceUnavailable = { 503, "The request has failed due to a temporary failure of the server." },
  ["OperationDenied.NoStock"] = { 403, "The requested resource is sold out in the specified zone; try other "
    .. "types of resources or other regions and zones." },
  ["Zone.NotOnSale"] = { 403, "The resource in the specified zone is no longer available for sale." },
  ["QuotaExceed.ElasticQuota"] = { 403, "No additional quota is available for the specified ECS instance type." },
  ["InvalidAccountStatus.NotEnoughBalance"] = { 403, "Your account does not have enough balance." },
  ["InvalidVSwitchId.IpNotEnough"] = { 403, "The specified VSwitch has not enough IP addresses." },
  ["Forbidden.RAM"] = { 403, "User not authorized to operate on the specified resource, or this API doesn't "
    .. "support RAM." },
}

local KINDS = { error = true, throttle = true, ["5xx"] = true, timeout = true, malformed = true, nostock = true }
local CAPACITY = { ["on-demand"] = true, spot = true }

local rules = rules_mod.new()

function M.reset()
  rules:reset()
  catalogue.clear_sold_out()
end

--- add(spec) -> rule | nil, message. `spec` is the decoded JSON object of one rule.
function M.add(spec)
  if type(spec) ~= "table" then return nil, "a fault rule must be a JSON object" end
  local rule, err = rules_mod.read_strings(spec, { action = "*" }, { "action", "product", "kind", "code", "message",
    "zone", "instance_type", "capacity_type", "body" })
  if not rule then return nil, err end
  rule.kind = rule.kind or (rule.code and "error")
  if not rule.kind then return nil, "give a kind (error, throttle, 5xx, timeout, malformed, nostock) or a code" end
  if not KINDS[rule.kind] then return nil, "unknown kind '" .. rule.kind .. "'" end
  rule, err = rules_mod.read_limits(spec, rule)
  if not rule then return nil, err end
  if rule.kind == "error" and not rule.code then return nil, "an error fault needs a code" end
  if rule.kind == "throttle" then rule.code = rule.code or "Throttling.User" end
  if rule.kind == "5xx" then
    rule.status = rule.status or 500
    if rule.status < 500 then return nil, "a 5xx fault needs a status of 500..599" end
    rule.code = rule.code or (rule.status == 503 and "ServiceUnavailable" or "InternalError")
  end
  if rule.kind == "timeout" then rule.seconds = rule.seconds or 5 end
  if rule.kind == "nostock" then
    if rule.capacity_type and not CAPACITY[rule.capacity_type] then
      return nil, "capacity_type must be on-demand or spot"
    end
    if rule.zone and not catalogue.zone(rule.zone) then return nil, "unknown zone '" .. rule.zone .. "'" end
    if rule.instance_type and not catalogue.type(rule.instance_type) then
      return nil, "unknown instance type '" .. rule.instance_type .. "'"
    end
    catalogue.add_sold_out({ zone = rule.zone, instance_type = rule.instance_type,
      capacity_type = rule.capacity_type })
  elseif rule.code then
    local known = KNOWN[rule.code]
    rule.status = rule.status or (known and known[1]) or 400
    rule.message = rule.message or (known and known[2]) or ("Simulated fault " .. rule.code .. ".")
  end
  return rules:add(rule)
end

--- take(call) -> the rule to apply to this call, or nil. Consumes one use of it.
function M.take(call)
  return rules:take(function(r)
    return r.kind ~= "nostock" and (r.action == "*" or r.action == call.action)
      and (r.product == nil or r.product == call.product)
  end)
end

--- list() -> the active rules (plain tables).
function M.list()
  return rules:list()
end

--- remove(id) -> whether a rule was removed. Removing a nostock rule restocks only when no other
-- nostock rule remains for it, so the sold-out set is rebuilt from the rules left.
function M.remove(id)
  if not rules:remove(id) then return false end
  catalogue.clear_sold_out()
  for _, other in ipairs(rules:list()) do
    if other.kind == "nostock" then
      catalogue.add_sold_out({ zone = other.zone, instance_type = other.instance_type,
        capacity_type = other.capacity_type })
    end
  end
  return true
end

M.reset()

return M
