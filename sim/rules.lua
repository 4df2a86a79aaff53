-- Fault-rule plumbing shared by the simulators: validators for the fields of a rule spec, an ordered
-- rule set (ids, skip/count firing, list, remove, reset), and the /_sim/faults admin endpoints. Each
-- simulator keeps its own kinds, matching and messages in its faults.lua.
local clock = require "sim.clock"
local M = {}

--- opt_string(spec, name) -> the string field, nil, or nil, message.
function M.opt_string(spec, name)
  local v = spec[name]
  if v ~= nil and type(v) ~= "string" then return nil, name .. " must be a string" end
  return v
end

--- opt_int(spec, name, min, max) -> the integer field in [min, max] (max nil: unbounded), nil, or nil, message.
function M.opt_int(spec, name, min, max)
  local v = spec[name]
  if v == nil then return nil end
  if math.type(v) ~= "integer" or v < min or (max and v > max) then
    return nil, ("%s must be an integer between %d and %s"):format(name, min, max or "any")
  end
  return v
end

--- read_strings(spec, rule, strings) -> rule | nil, message: copies the string fields named in `strings`.
function M.read_strings(spec, rule, strings)
  for _, name in ipairs(strings) do
    local v, err = M.opt_string(spec, name)
    if err then return nil, err end
    if v ~= nil then rule[name] = v end
  end
  return rule
end

--- read_limits(spec, rule) -> rule | nil, message: count, skip, status and seconds.
function M.read_limits(spec, rule)
  for _, f in ipairs({ { "count", 1, nil }, { "skip", 0, nil }, { "status", 400, 599 } }) do
    local v, err = M.opt_int(spec, f[1], f[2], f[3])
    if err then return nil, err end
    rule[f[1]] = v
  end
  if spec.seconds ~= nil then
    if type(spec.seconds) ~= "number" or spec.seconds <= 0 or spec.seconds > 50 then
      return nil, "seconds must be a number in (0, 50] (a handler call may not outlive 60 s)"
    end
    rule.seconds = spec.seconds
  end
  return rule
end

local Set = {}
Set.__index = Set

--- new() -> an empty rule set.
function M.new()
  return setmetatable({ rules = {}, next_id = 0 }, Set)
end

function Set:reset()
  self.rules, self.next_id = {}, 0
end

--- add(rule) -> rule, given the next id and a fired count of 0, appended last.
function Set:add(rule)
  self.next_id = self.next_id + 1
  rule.id = self.next_id
  rule.fired = 0
  self.rules[#self.rules + 1] = rule
  return rule
end

--- consume(i, r) -> r, counted as fired; dropped once its count is used up.
function Set:consume(i, r)
  r.fired = r.fired + 1
  if r.count then
    r.count = r.count - 1
    if r.count == 0 then table.remove(self.rules, i) end
  end
  return r
end

--- take(matches) -> the first rule for which matches(rule) holds and that has no skip left, consumed;
-- matching rules with a skip left use up one skip instead.
function Set:take(matches)
  for i, r in ipairs(self.rules) do
    if matches(r) then
      if r.skip and r.skip > 0 then
        r.skip = r.skip - 1
      else
        return self:consume(i, r)
      end
    end
  end
  return nil
end

function Set:list()
  return self.rules
end

--- remove(id) -> whether a rule was removed.
function Set:remove(id)
  for i, r in ipairs(self.rules) do
    if r.id == id then
      table.remove(self.rules, i)
      return true
    end
  end
  return false
end

--- admin(opts) -> helpers for a simulator's admin paths: reply, bad, body_json, fault_list,
-- handle_faults and handle_clock. opts: json (luaprov.json), wire (with list and json_response), faults (add, list,
-- remove, reset), objects_only (a body must decode to a table: "the body is not a JSON object or
-- list"; otherwise any JSON value: "the body is not JSON").
function M.admin(opts)
  local json, wire, faults = opts.json, opts.wire, opts.faults
  local A = {}

  function A.reply(status, value) return wire.json_response(status, value) end
  function A.bad(message) return A.reply(400, { error = message }) end

  function A.body_json(request, required)
    local text = request.body or ""
    if text == "" then
      if required then return nil, "a JSON body is required" end
      return {}
    end
    local ok, value = pcall(json.decode, text)
    if opts.objects_only then
      if not ok or type(value) ~= "table" then return nil, "the body is not a JSON object or list" end
    elseif not ok or value == nil then
      return nil, "the body is not JSON"
    end
    return value
  end

  function A.fault_list()
    local out = {}
    for i, r in ipairs(faults.list()) do out[i] = r end
    return wire.list(out)
  end

  local function post_faults(request)
    local spec, err = A.body_json(request, true)
    if not spec then return A.bad(err) end
    -- One rule, or a list of rules added in order (all or nothing).
    local is_list = type(spec) == "table"
      and (#spec > 0 or (opts.objects_only and getmetatable(spec) == json.array_mt))
    local specs = is_list and spec or { spec }
    local added = {}
    for i, s in ipairs(specs) do
      local rule, message = faults.add(s)
      if not rule then
        for _, r in ipairs(added) do faults.remove(r.id) end
        return A.bad(("fault %d: %s"):format(i, message))
      end
      added[#added + 1] = rule
    end
    return A.reply(200, { added = wire.list(added), faults = A.fault_list() })
  end

  --- handle_clock(request) -> the response for POST /_sim/advance {"seconds"} and GET/POST /_sim/clock
  -- {"speed"} (the simulated clock every simulator shares), or nil for any other request.
  function A.handle_clock(request)
    local path, method = request.path, request.method
    if path == "/_sim/clock" and method == "GET" then return A.reply(200, clock.state()) end
    if not (method == "POST" and (path == "/_sim/advance" or path == "/_sim/clock")) then return nil end
    local body, err = A.body_json(request, true)
    if not body then return A.bad(err) end
    if path == "/_sim/advance" then
      local seconds = body.seconds
      if type(seconds) ~= "number" or seconds < 0 or seconds ~= seconds or seconds == math.huge then
        return A.bad("seconds must be a number >= 0")
      end
      clock.advance(seconds)
    else
      if type(body.speed) ~= "number" or body.speed < 0 or body.speed > 10000 then
        return A.bad("speed must be a number between 0 and 10000")
      end
      clock.set_speed(body.speed)
    end
    return A.reply(200, clock.state())
  end

  --- handle_faults(request) -> the response for GET/POST/DELETE /_sim/faults and DELETE
  -- /_sim/faults/<id>, or nil for any other request.
  function A.handle_faults(request)
    local path, method = request.path, request.method
    if path == "/_sim/faults" then
      if method == "GET" then return A.reply(200, { faults = A.fault_list() }) end
      if method == "POST" then return post_faults(request) end
      if method == "DELETE" then
        faults.reset()
        return A.reply(200, { faults = A.fault_list() })
      end
    end
    local fault_id = path:match("^/_sim/faults/(%d+)$")
    if fault_id and method == "DELETE" then
      if not faults.remove(tonumber(fault_id)) then return A.reply(404, { error = "no fault " .. fault_id }) end
      return A.reply(200, { faults = A.fault_list() })
    end
    return nil
  end

  return A
end

return M
