-- Deep copy and deep merge of plain data, the way builders apply their overrides: tables merge key by
-- key, lists (a table with [1], or tagged json.array_mt) and scalars replace, kit.NONE removes a key.
local json = require("luaprov").json

local M = {}

M.NONE = setmetatable({}, { __name = "kit.NONE", __tostring = function() return "kit.NONE" end })

local function is_list(t)
  return getmetatable(t) == json.array_mt or rawget(t, 1) ~= nil
end

function M.copy(v)
  if type(v) ~= "table" or v == M.NONE or v == json.null then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.copy(x) end
  if is_list(v) then setmetatable(out, json.array_mt) end
  return out
end

--- merge(base, overrides) -> base, changed in place (overrides is deep-copied into it).
function M.merge(base, overrides)
  for k, v in pairs(overrides or {}) do
    if v == M.NONE then
      base[k] = nil
    elseif type(v) == "table" and v ~= json.null and not is_list(v) and type(base[k]) == "table"
      and not is_list(base[k]) then
      M.merge(base[k], v)
    else
      base[k] = M.copy(v)
    end
  end
  return base
end

--- list{...}: a JSON array (so an empty list encodes as [] and replaces a default list).
function M.list(t)
  return setmetatable(t or {}, json.array_mt)
end

return M
