-- kit.clock: freezes luaprov.time.now (and the default time of luaprov.time.iso8601) for the current
-- test. reset() (after each test under busted) puts the real clock back.
local luaprov = require "luaprov"
local stubs = require "luaprov.testkit.stubs"

local time = luaprov.time
local real_now, real_iso8601 = time.now, time.iso8601

local M = {}

local frozen = nil

local function to_seconds(t)
  if type(t) == "string" then
    local s, err = time.parse_iso8601(t)
    if not s then error("kit.clock: " .. tostring(err), 3) end
    return s
  end
  if t == nil then return real_now() end
  assert(type(t) == "number", "kit.clock: a time is seconds since the epoch or an RFC 3339 string")
  return t
end

--- freeze([t]) -> t: now() answers t (a number or "2026-11-30T03:00:00Z"; default the real now).
function M.freeze(t)
  local first = frozen == nil
  frozen = to_seconds(t)
  if first then
    stubs.stub(time, "now", function() return frozen end)
    stubs.stub(time, "iso8601", function(s) return real_iso8601(s == nil and frozen or s) end)
  end
  return frozen
end

--- advance(seconds) -> the new now; freezes the clock first if it is not frozen.
function M.advance(seconds)
  assert(type(seconds) == "number", "kit.clock.advance: seconds must be a number")
  if frozen == nil then M.freeze() end
  frozen = frozen + seconds
  return frozen
end

--- now(): the kit's idea of now (the frozen time, else the real clock).
function M.now()
  return frozen or real_now()
end

function M.is_frozen()
  return frozen ~= nil
end

stubs.on_reset(function() frozen = nil end)

return M
