-- Kubernetes resource quantities ("250m", "1.5", "512Mi", "2G", "1e3"), read into plain numbers so
-- the binder can add requests up and compare them with a node's allocatable.
local M = {}

local SUFFIX = {
  [""] = 1, n = 1e-9, u = 1e-6, m = 1e-3, k = 1e3, M = 1e6, G = 1e9, T = 1e12, P = 1e15, E = 1e18,
  Ki = 2 ^ 10, Mi = 2 ^ 20, Gi = 2 ^ 30, Ti = 2 ^ 40, Pi = 2 ^ 50, Ei = 2 ^ 60,
}

--- parse(q) -> the quantity as a number of base units (cores, bytes, pods), or nil when q is not one.
function M.parse(q)
  if type(q) == "number" then return q end
  if type(q) ~= "string" then return nil end
  local sign, digits, rest = q:match("^%s*([+-]?)([%d%.]+)(.-)%s*$")
  local n = digits and digits:match("^%d*%.?%d*$") and digits ~= "." and tonumber(digits)
  if not n then return nil end
  if sign == "-" then n = -n end
  local exp = rest:match("^[eE]([+-]?%d+)$")
  if exp then return n * 10 ^ tonumber(exp) end
  local scale = SUFFIX[rest]
  return scale and n * scale or nil
end

--- milli(q) -> the quantity in thousandths, rounded up as Kubernetes rounds CPU (0 when unreadable).
function M.milli(q)
  local v = M.parse(q)
  if not v then return 0 end
  return math.ceil(v * 1000 - 1e-6)
end

return M
