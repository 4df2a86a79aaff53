-- Small helpers shared by the Alibaba modules.
local luaprov = require "luaprov"

local json = luaprov.json

local M = {}

-- Bytewise, so orders do not depend on the process locale (Lua's "<" on strings uses strcoll).
function M.byte_less(a, b)
  local n = #a < #b and #a or #b
  for i = 1, n do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- A JSON array: tagged as one when decoded, or a table with exactly the keys 1..n (n > 0).
function M.is_list(t)
  if getmetatable(t) == json.array_mt then return true end
  local n = #t
  if n == 0 then return false end
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return true
end

return M
