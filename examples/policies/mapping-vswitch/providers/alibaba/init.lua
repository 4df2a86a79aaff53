-- CloudProvider mapping (operator tree): the shipped Alibaba mapping with one rule changed. The
-- shipped resolve_nodeclass orders status.vSwitches by free IP addresses (the launch path takes the
-- first vSwitch of each zone); here the vSwitches an ECSNodeClass names in the annotation
-- examples.luaprov.io/preferred-vswitches ("vsw-a,vsw-b") come first, in that order, and the others
-- keep the shipped order behind them. Everything else is the shipped mapping.
local default = require "defaults.providers.alibaba"
local luaprov = require "luaprov"

local json = luaprov.json

local M = {}

M.PREFERENCE_ANNOTATION = "examples.luaprov.io/preferred-vswitches"

-- The contract reads exports with rawget: copy them into this table.
for key, value in pairs(default) do M[key] = value end

local function preference(nodeclass)
  local annotations = nodeclass.metadata and nodeclass.metadata.annotations
  local text = type(annotations) == "table" and annotations[M.PREFERENCE_ANNOTATION]
  local rank, n = {}, 0
  for id in (type(text) == "string" and text or ""):gmatch("[^,%s]+") do
    if not rank[id] then
      n = n + 1
      rank[id] = n
    end
  end
  return rank, n
end

--- prefer(vswitches, rank) -> a new list: ranked vSwitches first by rank, then the rest in their order.
function M.prefer(vswitches, rank)
  local keyed = {}
  for i, v in ipairs(vswitches) do keyed[i] = { v = v, rank = rank[v.id] or math.huge, i = i } end
  table.sort(keyed, function(a, b)
    if a.rank ~= b.rank then return a.rank < b.rank end
    return a.i < b.i
  end)
  local out = setmetatable({}, json.array_mt)
  for i, k in ipairs(keyed) do out[i] = k.v end
  return out
end

function M.resolve_nodeclass(ctx, nodeclass)
  local status, err = default.resolve_nodeclass(ctx, nodeclass)
  local rank, n = preference(nodeclass)
  if type(status) == "table" and type(status.vSwitches) == "table" and n > 0 then
    status.vSwitches = M.prefer(status.vSwitches, rank)
    local order = {}
    for i, v in ipairs(status.vSwitches) do order[i] = v.id end
    luaprov.log.info("vSwitch preference applied", { nodeclass = nodeclass.metadata and nodeclass.metadata.name,
      order = table.concat(order, ",") })
  end
  return status, err
end

return M
