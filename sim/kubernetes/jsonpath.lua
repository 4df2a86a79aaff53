-- The JSONPath of CRD printer columns, as far as the Karpenter CRDs use it: fields (dots in a label
-- key escaped as `\.`), `[*]` over a list, and `[?(@.field=="value")]` filters, e.g.
-- `.status.conditions[?(@.type=="Ready")].status` or `.metadata.labels.node\.kubernetes\.io/instance-type`.
local wire = require "sim.kubernetes.wire"

local M = {}

local function read_field(path, i)
  local name = {}
  while i <= #path do
    local c = path:sub(i, i)
    if c == "\\" then
      name[#name + 1] = path:sub(i + 1, i + 1)
      i = i + 2
    elseif c == "." or c == "[" then
      break
    else
      name[#name + 1] = c
      i = i + 1
    end
  end
  return { field = table.concat(name) }, i
end

local function read_bracket(path, i)
  local close = path:find("]", i, true)
  if not close then error("jsonpath: no ] in " .. path) end
  local inside = path:sub(i + 1, close - 1)
  if inside == "*" then return { all = true }, close + 1 end
  local key, value = inside:match('^%?%(@%.([%w_]+)%s*==%s*"(.*)"%)$')
  if not key then error("jsonpath: unsupported [" .. inside .. "] in " .. path) end
  return { key = key, value = value }, close + 1
end

--- compile(path) -> the steps of path; raises on what this subset does not read.
function M.compile(path)
  local steps, i = {}, 1
  while i <= #path do
    local c, step = path:sub(i, i), nil
    if c == "." then
      step, i = read_field(path, i + 1)
    elseif c == "[" then
      step, i = read_bracket(path, i)
    else
      error("jsonpath: unexpected " .. c .. " in " .. path)
    end
    steps[#steps + 1] = step
  end
  return steps
end

local function apply(step, value, out)
  if step.field then
    if wire.is_object(value) and wire.present(value[step.field]) then out[#out + 1] = value[step.field] end
  elseif wire.is_array(value) then
    for _, item in ipairs(value) do
      if step.all or (wire.is_object(item) and tostring(item[step.key]) == step.value) then out[#out + 1] = item end
    end
  end
end

--- find(steps, obj) -> the values the compiled path selects in obj (a list, empty when none).
function M.find(steps, obj)
  local values = { obj }
  for _, step in ipairs(steps) do
    local out = {}
    for _, v in ipairs(values) do apply(step, v, out) end
    values = out
  end
  return values
end

return M
