-- The two patch formats the simulator applies: RFC 7386 JSON merge patch (every kind) and the part of
-- strategic merge patch that kubectl's three-way patches use on built-in kinds (lists merged by their
-- merge key, `$patch: delete|replace`, `$setElementOrder/`, `$deleteFromPrimitiveList/`,
-- `$retainKeys`). A merge patch would replace a pod's whole container list with the one container
-- kubectl changed, so the built-in kinds need the strategic one to survive a second `kubectl apply`.
--
-- Merge keys come from the Go types' patchMergeKey tags, looked up by field name: the simulator
-- serves no two built-in kinds whose same-named lists merge differently.
local luaprov = require "luaprov"
local wire = require "sim.kubernetes.wire"

local json = luaprov.json
local array, is_array, is_object = wire.array, wire.is_array, wire.is_object

local M = {}

--- merge(target, patch) -> target with the RFC 7386 merge patch applied (target is changed).
function M.merge(target, patch)
  if not is_object(patch) then return patch end
  if not is_object(target) then target = {} end
  for k, v in pairs(patch) do
    if v == json.null then target[k] = nil else target[k] = M.merge(target[k], v) end
  end
  return target
end

local MERGE_KEYS = {
  containers = "name", initContainers = "name", ephemeralContainers = "name", env = "name",
  ports = "containerPort", volumes = "name", volumeMounts = "mountPath", volumeDevices = "devicePath",
  imagePullSecrets = "name", hostAliases = "ip", conditions = "type", addresses = "type",
  ownerReferences = "uid", resourceClaims = "name",
}
-- lists of scalars whose patchStrategy is merge: a patch adds to them instead of replacing them
local MERGED_SCALARS = { finalizers = true }

local strategic

local function index_of(list, key, value)
  for i, item in ipairs(list) do
    if is_object(item) and item[key] == value then return i end
  end
  return nil
end

local function merge_keyed(current, items, key)
  local out = array()
  for i, v in ipairs(is_array(current) and current or {}) do out[i] = v end
  for _, item in ipairs(items) do
    if is_object(item) and item["$patch"] == "replace" then
      local replaced = array()
      for _, other in ipairs(items) do
        if other ~= item then replaced[#replaced + 1] = strategic(nil, other) end
      end
      return replaced
    end
    local at = is_object(item) and item[key] ~= nil and index_of(out, key, item[key])
    if is_object(item) and item["$patch"] == "delete" then
      if at then table.remove(out, at) end
    elseif at then
      out[at] = strategic(out[at], item)
    else
      out[#out + 1] = strategic(nil, item)
    end
  end
  return out
end

local function merge_list(field, current, items)
  local key = MERGE_KEYS[field]
  if key then return merge_keyed(current, items, key) end
  if MERGED_SCALARS[field] then
    local out, seen = array(), {}
    for _, v in ipairs(is_array(current) and current or {}) do
      out[#out + 1], seen[v] = v, true
    end
    for _, v in ipairs(items) do
      if not seen[v] then out[#out + 1], seen[v] = v, true end
    end
    return out
  end
  local out = array()
  for i, v in ipairs(items) do out[i] = strategic(nil, v) end
  return out
end

-- The element (or its merge key) an entry of a $setElementOrder list names.
local function order_key(field, entry)
  local key = MERGE_KEYS[field]
  if key and is_object(entry) then return entry[key] end
  return entry
end

local function set_order(field, list, order)
  if not is_array(list) or not is_array(order) then return list end
  local key = MERGE_KEYS[field]
  local rank = {}
  for i, entry in ipairs(order) do rank[order_key(field, entry)] = i end
  local positioned = {}
  for i, item in ipairs(list) do
    local k = key and is_object(item) and item[key] or item
    positioned[i] = { item = item, rank = rank[k] or (#order + i), at = i }
  end
  table.sort(positioned, function(a, b)
    if a.rank ~= b.rank then return a.rank < b.rank end
    return a.at < b.at
  end)
  local out = array()
  for i, p in ipairs(positioned) do out[i] = p.item end
  return out
end

local function delete_scalars(list, values)
  if not is_array(list) then return list end
  local drop = {}
  for _, v in ipairs(is_array(values) and values or {}) do drop[v] = true end
  local out = array()
  for _, v in ipairs(list) do
    if not drop[v] then out[#out + 1] = v end
  end
  return out
end

local function apply_directives(target, patch)
  for k, v in pairs(patch) do
    local ordered = k:match("^%$setElementOrder/(.+)$")
    if ordered then target[ordered] = set_order(ordered, target[ordered], v) end
    local trimmed = k:match("^%$deleteFromPrimitiveList/(.+)$")
    if trimmed then target[trimmed] = delete_scalars(target[trimmed], v) end
  end
  if is_array(patch["$retainKeys"]) then
    local keep = {}
    for _, k in ipairs(patch["$retainKeys"]) do keep[k] = true end
    for k in pairs(target) do
      if not keep[k] then target[k] = nil end
    end
  end
end

--- strategic(target, patch) -> target with the strategic merge patch applied (target is changed).
function strategic(target, patch)
  if is_array(patch) then return merge_list(nil, nil, patch) end
  if not is_object(patch) then return patch end
  if patch["$patch"] == "replace" or not is_object(target) then target = {} end
  for k, v in pairs(patch) do
    if k:sub(1, 1) ~= "$" then
      if v == json.null then
        target[k] = nil
      elseif is_array(v) then
        target[k] = merge_list(k, target[k], v)
      elseif is_object(v) and v["$patch"] == "delete" then
        target[k] = nil
      else
        target[k] = strategic(target[k], v)
      end
    end
  end
  apply_directives(target, patch)
  return target
end

M.strategic = strategic

return M
