-- Simulated time, shared by every simulator of a `luaprov sim` process (one module instance per script
-- generation, so the Alibaba and Kubernetes simulators read the same clock).
--
-- Simulated time follows the engine's clock (luaprov.time.now, itself simulated under `luaprov demo`)
-- at `speed` times its rate, plus whatever the admin paths added with advance(). Tests jump over waits
-- (instance boot, token expiry) by advancing instead of sleeping.
--
-- It is only for what the simulated cloud decides (lifecycles, expirations, price history). Request
-- signatures are checked against the engine's clock, because that is the clock clients sign with.
local luaprov = require "luaprov"

local real_now = luaprov.time.now

local M = {}

-- now() = base_sim + (real_now() - base_real) * speed. Changing the speed rebases first, so time never
-- jumps when the rate changes.
local base_real, base_sim, speed

--- reset(): simulated time equals the engine's clock again, at speed 1.
function M.reset()
  base_real = real_now()
  base_sim = base_real
  speed = 1
end

--- now() -> seconds since the epoch (float), simulated.
function M.now()
  return base_sim + (real_now() - base_real) * speed
end

--- advance(seconds): jumps simulated time forward. Raises on a negative or non-number argument:
-- simulated time never goes back, so lifecycles and expirations stay monotonic.
function M.advance(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0 or seconds == math.huge then
    error("clock.advance: seconds must be a finite number >= 0", 2)
  end
  base_sim = base_sim + seconds
  return M.now()
end

--- set_speed(factor): simulated seconds per engine second from now on (0 freezes time).
function M.set_speed(factor)
  if type(factor) ~= "number" or factor ~= factor or factor < 0 or factor > 10000 then
    error("clock.set_speed: factor must be a number between 0 and 10000", 2)
  end
  local now = M.now()
  base_real, base_sim, speed = real_now(), now, factor
end

--- speed() -> the current factor.
function M.speed()
  return speed
end

--- offset() -> how far simulated time is ahead of the engine's clock, in seconds.
function M.offset()
  return M.now() - real_now()
end

--- iso8601([t]) -> "2026-11-30T03:22:51Z" for t (default now()).
function M.iso8601(t)
  return luaprov.time.iso8601(t or M.now())
end

--- state() -> plain table for the admin paths.
function M.state()
  local now = M.now()
  return { now = M.iso8601(now), epoch = now, speed = speed, offset_seconds = now - real_now() }
end

M.reset()

return M
