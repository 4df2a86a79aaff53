-- kit.load(path): a `kubectl get -o json` or `-o yaml` file as the tables the engine would pass a
-- script (arrays tagged json.array_mt, null as json.null). A List kind gives its items; a YAML file
-- with several documents gives them all, in order.
local json = require("luaprov").json

local M = {}

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then error("kit.load: " .. tostring(err), 3) end
  local text = f:read("a")
  f:close()
  return text
end

-- lyaml's tables to the JSON mapping: its null becomes json.null, sequences become arrays.
local function normalize(v, null)
  if v == null then return json.null end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = normalize(x, null) end
  if rawget(v, 1) ~= nil or (getmetatable(v) and getmetatable(v)._type == "sequence") then
    setmetatable(out, json.array_mt)
  end
  return out
end

local function decode_yaml(text, path)
  local ok, lyaml = pcall(require, "lyaml")
  if not ok then
    error(("kit.load: %s is YAML and lyaml is not installed (Debian: apt-get install lua-yaml; or "
      .. "luarocks install lyaml), or convert it with kubectl get -o json"):format(path), 3)
  end
  local ok2, docs = pcall(lyaml.load, text, { all = true })
  if not ok2 then error(("kit.load: %s: %s"):format(path, tostring(docs)), 3) end
  local out = {}
  for _, doc in ipairs(docs) do
    if doc ~= lyaml.null and doc ~= nil then out[#out + 1] = normalize(doc, lyaml.null) end
  end
  return out
end

local function is_list_kind(obj)
  return type(obj) == "table" and type(obj.kind) == "string" and obj.kind:match("List$") and type(obj.items) == "table"
end

function M.load(path)
  assert(type(path) == "string", "kit.load: expected a file path")
  local text = read(path)
  local docs
  if path:match("%.json$") or text:match("^%s*[{%[]") then
    local value, err = json.decode(text)
    if value == nil then error(("kit.load: %s: %s"):format(path, err), 2) end
    docs = { value }
  else
    docs = decode_yaml(text, path)
  end
  local objects = setmetatable({}, json.array_mt)
  for _, doc in ipairs(docs) do
    if is_list_kind(doc) then
      for _, item in ipairs(doc.items) do objects[#objects + 1] = item end
    else
      objects[#objects + 1] = doc
    end
  end
  if #docs == 1 and not is_list_kind(docs[1]) then return docs[1] end
  return objects
end

return M
