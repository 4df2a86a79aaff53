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

-- Whether a decoded JSON value is there: neither absent nor null.
local function present(v)
  return v ~= nil and v ~= json.null
end
M.present = present

-- A Lua table that encodes as a JSON array, even when empty.
function M.array(t)
  return setmetatable(t or {}, json.array_mt)
end

-- t[k] when t is a table and the value is present, else nil.
function M.field(t, k)
  if type(t) ~= "table" then return nil end
  local v = t[k]
  if present(v) then return v end
  return nil
end

-- The object's metadata.name, or "?", for messages.
function M.class_name(object)
  return tostring(M.field(M.field(object, "metadata"), "name") or "?")
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys, M.byte_less)
  return keys
end

-- Selector terms (nodeclass.lua, reservations.lua) ------------------------------------------------

-- Tag.N.Key / Tag.N.Value in key order; "*" means "any value", so the value is left out.
function M.tag_filter(tags)
  local list = {}
  for _, k in ipairs(sorted_keys(tags)) do
    local v = tags[k]
    if present(v) and v ~= "*" then
      list[#list + 1] = { Key = k, Value = tostring(v) }
    else
      list[#list + 1] = { Key = k }
    end
  end
  return list
end

function M.has_tags(term)
  return present(term.tags) and type(term.tags) == "table" and next(term.tags) ~= nil
end

function M.nonempty(s)
  return present(s) and type(s) == "string" and s ~= ""
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
