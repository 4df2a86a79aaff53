-- ECS tags: the key/value rules shared by RunInstances and the tagging actions (AddTags and RemoveTags,
-- which the upstream provider's tagging controller calls; TagResources, UntagResources and
-- ListTagResources, their newer forms). Tags are maps key -> value on each resource.
local account = require "sim.alibaba.account"
local state = require "sim.alibaba.state"
local wire = require "sim.alibaba.wire"

local list = wire.list

local M = {}

M.MAX_PER_RESOURCE = 20

-- Keys may not be empty, longer than 128 characters, start with acs: or aliyun, or hold a URL scheme;
-- values follow the same rules but may be empty.
local function bad_text(s, max)
  local lower = s:lower()
  return #s > max or lower:find("^acs:") or lower:find("^aliyun") or lower:find("https?://")
end

local function check_tag(n, key, value)
  if key == "" or bad_text(key, 128) then
    wire.fail(400, "InvalidTagKey.Malformed", ("The specified Tag.%d.Key is not valid."):format(n))
  end
  if value and bad_text(value, 128) then
    wire.fail(400, "InvalidTagValue.Malformed", ("The specified Tag.%d.Value is not valid."):format(n))
  end
end

--- from_params(p, prefix) -> map of the Tag.N.Key / Tag.N.Value pairs (a missing value is ""), checked.
function M.from_params(p, prefix)
  local out = {}
  for n, t in ipairs(wire.tags(p, prefix, M.MAX_PER_RESOURCE)) do
    check_tag(n, t.key, t.value)
    out[t.key] = t.value or ""
  end
  return out
end

-- ResourceType (lowercase on ECS) -> lookup of a resource's tag map.
local RESOURCES = {
  instance = function(id)
    local inst = state.get(id)
    return inst and inst.tags
  end,
  securitygroup = function(id)
    local g = account.security_group(id)
    return g and g.tags
  end,
  image = function(id)
    local img = account.image(id)
    return img and img.owner == "self" and img.tags or nil
  end,
}

local function resource_type(p)
  local rt = wire.required(p, "ResourceType")
  local lookup = RESOURCES[rt:lower()]
  if not lookup then
    wire.fail(400, "InvalidResourceType.NotSupported", "The specified ResourceType is not supported: use instance, "
      .. "securitygroup or image.")
  end
  return rt:lower(), lookup
end

local function tag_maps(lookup, ids)
  local maps = {}
  for i, id in ipairs(ids) do
    maps[i] = lookup(id)
    if not maps[i] then
      wire.fail(404, "InvalidResourceId.NotFound", "The specified ResourceIds are not found in our records.")
    end
  end
  return maps
end

local function add(maps, new)
  for _, m in ipairs(maps) do
    local count = 0
    for k in pairs(m) do
      if new[k] == nil then count = count + 1 end
    end
    for _ in pairs(new) do count = count + 1 end
    if count > M.MAX_PER_RESOURCE then
      wire.fail(400, "InvalidTagCount", ("A resource can have at most %d tags."):format(M.MAX_PER_RESOURCE))
    end
  end
  for _, m in ipairs(maps) do
    for k, v in pairs(new) do m[k] = v end
  end
end

local function require_tags(p)
  local new = M.from_params(p, "Tag")
  if next(new) == nil then wire.missing("Tag.1.Key") end
  return new
end

--- AddTags: RegionId, ResourceType, ResourceId, Tag.N.
function M.AddTags(call)
  local p = call.params
  local _, lookup = resource_type(p)
  local maps = tag_maps(lookup, { wire.required(p, "ResourceId") })
  add(maps, require_tags(p))
  return {}
end

--- RemoveTags: Tag.N.Key with an optional Tag.N.Value that must match; no Tag removes nothing.
function M.RemoveTags(call)
  local p = call.params
  local _, lookup = resource_type(p)
  local m = tag_maps(lookup, { wire.required(p, "ResourceId") })[1]
  for _, t in ipairs(wire.tags(p, "Tag", M.MAX_PER_RESOURCE)) do
    if t.value == nil or m[t.key] == t.value then m[t.key] = nil end
  end
  return {}
end

--- TagResources: ResourceId.N (at most 50), Tag.N.
function M.TagResources(call)
  local p = call.params
  local _, lookup = resource_type(p)
  local ids = wire.repeated(p, "ResourceId", 50)
  if #ids == 0 then wire.missing("ResourceId.1") end
  add(tag_maps(lookup, ids), require_tags(p))
  return {}
end

--- UntagResources: ResourceId.N, TagKey.N or All=true.
function M.UntagResources(call)
  local p = call.params
  local _, lookup = resource_type(p)
  local ids = wire.repeated(p, "ResourceId", 50)
  if #ids == 0 then wire.missing("ResourceId.1") end
  local keys = wire.repeated(p, "TagKey", 20)
  local all = wire.bool(p, "All", false)
  for _, m in ipairs(tag_maps(lookup, ids)) do
    if all then
      for k in pairs(m) do m[k] = nil end
    else
      for _, k in ipairs(keys) do m[k] = nil end
    end
  end
  return {}
end

local function entry_key(e) return e.ResourceId .. "\0" .. e.TagKey end

--- ListTagResources: by ResourceId.N and/or Tag.N, paginated by NextToken (50 per page).
function M.ListTagResources(call)
  local p = call.params
  local rt, lookup = resource_type(p)
  local ids = wire.repeated(p, "ResourceId", 50)
  local filters = wire.tags(p, "Tag", 20)
  if #ids == 0 then
    if #filters == 0 then wire.missing("ResourceId.1") end
    if rt == "instance" then
      for _, inst in ipairs(state.list()) do ids[#ids + 1] = inst.id end
    elseif rt == "securitygroup" then
      for _, g in ipairs(account.security_groups()) do ids[#ids + 1] = g.id end
    else
      for _, img in ipairs(account.images()) do
        if img.owner == "self" then ids[#ids + 1] = img.id end
      end
    end
  end
  local entries = {}
  for _, id in ipairs(ids) do
    local m = lookup(id)
    if m and wire.match_tags(m, filters) then
      for k, v in pairs(m) do
        entries[#entries + 1] = { ResourceId = id, ResourceType = rt, TagKey = k, TagValue = v }
      end
    end
  end
  table.sort(entries, function(a, b) return entry_key(a) < entry_key(b) end)
  local page, next_token = wire.page_by_token(entries, p, entry_key, 50, 50)
  return { NextToken = next_token, TagResources = { TagResource = list(page) } }
end

return M
