-- Fault injection for the Kubernetes simulator: rules added through POST /_sim/faults that make
-- matching API calls answer an error Status (or answer late), and one-shot actions an apiserver
-- outage or an etcd compaction would cause (drop_watches, compact).
--
-- A rule matches calls by `verb` (get, list, watch, create, update, patch, delete; "*" or absent for
-- all) and `resource` (the plural, "*" or absent for all), lets `skip` matching calls pass, then fires
-- `count` times (forever without count). Kinds: `error` (the default: answers `status`, 500 unless
-- given, with the apiserver's reason and message), `slow` (waits `seconds`, then serves the call) and
-- `timeout` (serves the call, then answers `seconds` late, 5 unless given: a client that gives up
-- sooner loses the answer of a call that took effect, as when a connection breaks after the object
-- was stored).
local luaprov = require "luaprov"
local rules_mod = require "sim.rules"
local store = require "sim.kubernetes.store"
local wire = require "sim.kubernetes.wire"

local M = {}

local rules = rules_mod.new()

local STATUS = {
  [403] = { "Forbidden", "forbidden: the caller's RBAC role does not allow this verb on this resource" },
  [409] = { "Conflict", "Operation cannot be fulfilled: the object has been modified; please apply your "
    .. "changes to the latest version and try again" },
  [410] = { "Expired", "The provided continue parameter is too old to display a consistent list result." },
  [422] = { "Invalid", "the object is invalid: injected by the simulator" },
  [429] = { "TooManyRequests", "Too many requests, please try again later." },
  [500] = { "InternalError", "Internal error occurred: injected by the simulator" },
  [503] = { "ServiceUnavailable", "The server is currently unable to handle the request" },
}

local VERBS = { ["*"] = true, get = true, list = true, watch = true, create = true, update = true, patch = true,
  delete = true }

function M.reset() rules:reset() end

function M.list() return rules:list() end

function M.remove(id) return rules:remove(id) end

local function action(kind)
  if kind == "drop_watches" then return { kind = kind, dropped = store.drop_watches() } end
  store.compact()
  return { kind = kind, compacted = store.compacted() }
end

--- add(spec) -> rule (or the result of a one-shot action) | nil, message.
function M.add(spec)
  if not wire.is_object(spec) then return nil, "a fault rule must be a JSON object" end
  local kind = spec.kind or "error"
  if kind == "drop_watches" or kind == "compact" then return action(kind) end
  if kind ~= "error" and kind ~= "slow" and kind ~= "timeout" then
    return nil, "unknown fault kind " .. tostring(kind)
  end
  local rule, err = rules_mod.read_strings(spec, { kind = kind }, { "verb", "resource", "message" })
  if not rule then return nil, err end
  if rule.verb and not VERBS[rule.verb] then return nil, "unknown verb " .. rule.verb end
  rule, err = rules_mod.read_limits(spec, rule)
  if not rule then return nil, err end
  return rules:add(rule)
end

--- apply(verb, res, request): raises the Status of the first matching error rule, sleeps for a slow one,
-- or marks the request to be answered late (request.answer_late, seconds) for a timeout one.
function M.apply(verb, res, request)
  local rule = rules:take(function(r)
    return (r.verb == nil or r.verb == "*" or r.verb == verb)
      and (r.resource == nil or r.resource == "*" or r.resource == res.name)
  end)
  if not rule then return end
  if rule.kind == "slow" then
    luaprov.time.sleep(rule.seconds or 1)
    return
  end
  if rule.kind == "timeout" then
    request.answer_late = rule.seconds or 5
    return
  end
  local code = rule.status or 500
  local known = STATUS[code] or STATUS[500]
  wire.fail(code, known[1], rule.message or known[2])
end

return M
