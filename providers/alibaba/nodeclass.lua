-- ECSNodeClass: resolves the selector terms into status (vSwitches, security groups, images and
-- conditions), and computes the hash behind the ecsnodeclass-hash annotation. The status and its
-- conditions as operators see them: docs/controllers.md#ecsnodeclass-status-nodeclass.
--
-- Public:
--   resolve(ctx, nodeclass) -> status = {vSwitches = {{id, zone, zoneID, availableIPAddressCount}},
--                                        securityGroups = {{id, name}},
--                                        images = {{id, name, architecture, requirements,
--                                                   creationTime}},
--                                        ramRole = the role's name (ramrole.lua) | nil,
--                                        capacityReservations = {{id, zoneID, instanceType, available,
--                                                                 matchCriteria}} (reservations.lua),
--                                        conditions = {{type, status, reason, message}}}
--   hash(nodeclass) -> hash, version
--
-- resolve never fails: an API error becomes a condition (status Unknown, a reason naming the action,
-- the client's message with its request ID) and the list keeps what the previous status held, so a
-- cloud hiccup neither crashes the status controller nor empties a working class (upstream keeps
-- the old status too, by returning before it patches).
local luaprov = require "luaprov"
local bootstrap = require "providers.alibaba.bootstrap"
local ramrole = require "providers.alibaba.ramrole"
local reservations = require "providers.alibaba.reservations"
local util = require "providers.alibaba.util"
local session = require "providers.alibaba.session"
local shape = require "providers.alibaba.shape"

local json, crypto = luaprov.json, luaprov.crypto
local concat, sort = table.concat, table.sort

local M = {}

-- Our own hash scheme, not upstream's hashstructure/FNV, so its own version: the engine then
-- re-stamps NodeClaims on a version change instead of drifting them all (rule CP5: only hashes of the
-- same version are compared).
M.HASH_VERSION = "lp2"

local ARCH = { x86_64 = "amd64", arm64 = "arm64" }
local ARCH_LABEL = "kubernetes.io/arch"

-- Image families by alias, as upstream's: AlibabaCloudLinux3 keeps the public images whose
-- ID reads aliyun_3_<arch>_<n>G_alibase_<date>.vhd (not the container-optimized ones), ContainerOS
-- those whose name starts with "ContainerOS".
local FAMILIES = {
  AlibabaCloudLinux3 = function(image)
    return (image.ImageId or ""):find("aliyun_3_.*G_alibase_.*vhd") ~= nil
  end,
  ContainerOS = function(image)
    return (image.ImageName or ""):sub(1, #"ContainerOS") == "ContainerOS"
  end,
}

local present, array = util.present, util.array

local function list_of(v)
  return (present(v) and type(v) == "table") and v or {}
end

local tag_filter, has_tags, nonempty = util.tag_filter, util.has_tags, util.nonempty

-- vSwitches ----------------------------------------------------------------------------------------

-- One DescribeVSwitches per term (terms are ORed; within a term the API ANDs id, tags and zoneID).
local function resolve_vswitches(c, region, terms)
  local by_id, problems = {}, {}
  for i, term in ipairs(terms) do
    if nonempty(term.id) or has_tags(term) then
      local params = { RegionId = region }
      if nonempty(term.id) then params.VSwitchId = term.id end
      if has_tags(term) then params.Tag = tag_filter(term.tags) end
      if nonempty(term.zoneID) then params.ZoneId = term.zoneID end
      local items, err = c:paginate("vpc", "DescribeVSwitches", params,
        { list = "VSwitches.VSwitch", style = "PageNumber", page_size = 50 })
      if not items then return nil, err end
      for _, v in ipairs(items) do
        if type(v) == "table" and type(v.VSwitchId) == "string" and not by_id[v.VSwitchId] then
          by_id[v.VSwitchId] = { id = v.VSwitchId, zoneID = v.ZoneId, ips = tonumber(v.AvailableIpAddressCount) or 0 }
        end
      end
    else
      -- Sent as is, a term with neither id nor tags would match every vSwitch of the region (or of the
      -- zone, for a zoneID alone), in every VPC.
      problems[#problems + 1] = ("vSwitchSelectorTerms[%d] has neither id nor tags%s"):format(i,
        nonempty(term.zoneID) and " (zoneID only narrows them)" or "")
    end
  end
  local list = {}
  for _, v in pairs(by_id) do list[#list + 1] = v end
  -- Most free addresses first, then by ID; the count is kept for the launch's vSwitch choice
  -- (launch.lua: the vSwitch with the most free addresses, across zones under the balanced policy).
  sort(list, function(a, b)
    if a.ips ~= b.ips then return a.ips > b.ips end
    return util.byte_less(a.id, b.id)
  end)
  local out = array()
  -- zone and zoneID hold the same value, as the official status has both.
  for i, v in ipairs(list) do
    out[i] = { id = v.id, zone = v.zoneID, zoneID = v.zoneID, availableIPAddressCount = v.ips }
  end
  return out, nil, problems
end

-- Security groups --------------------------------------------------------------------------------

-- One filter per term: id, else name, else tags, as upstream filters.
local function resolve_security_groups(c, region, terms)
  local by_id, problems = {}, {}
  for i, term in ipairs(terms) do
    local params = { RegionId = region }
    if nonempty(term.id) then
      params.SecurityGroupId = term.id
    elseif nonempty(term.name) then
      params.SecurityGroupName = term.name
    elseif has_tags(term) then
      params.Tag = tag_filter(term.tags)
    else
      params = nil
      problems[#problems + 1] = ("securityGroupSelectorTerms[%d] has neither id, name nor tags"):format(i)
    end
    if params then
      local items, err = c:paginate("ecs", "DescribeSecurityGroups", params,
        { list = "SecurityGroups.SecurityGroup", style = "NextToken" })
      if not items then return nil, err end
      for _, g in ipairs(items) do
        -- SecurityGroupName is an exact filter in the docs; check it, in case an API matches fuzzily.
        local ok = type(g) == "table" and type(g.SecurityGroupId) == "string"
          and (params.SecurityGroupName == nil or g.SecurityGroupName == params.SecurityGroupName)
        if ok then
          by_id[g.SecurityGroupId] = by_id[g.SecurityGroupId] or { id = g.SecurityGroupId, name = g.SecurityGroupName }
        end
      end
    end
  end
  local list = array()
  for _, g in pairs(by_id) do list[#list + 1] = g end
  sort(list, function(a, b) return util.byte_less(a.id, b.id) end)
  return list, nil, problems
end

-- Images -----------------------------------------------------------------------------------------

-- paginate's second result on success is the page count; only items, or nil and the error, go on.
local function describe_images(c, params)
  local items, err = c:paginate("ecs", "DescribeImages", params,
    { list = "Images.Image", style = "PageNumber", page_size = 100 })
  if not items then return nil, err end
  return items
end

-- Newest first, so that "the first image per architecture" is the latest build.
local function newest_first(images)
  sort(images, function(a, b)
    local x, y = tostring(a.CreationTime or ""), tostring(b.CreationTime or "")
    if x ~= y then return x > y end
    return util.byte_less(tostring(a.ImageId or ""), tostring(b.ImageId or ""))
  end)
  return images
end

-- "AlibabaCloudLinux3" or "AlibabaCloudLinux3@latest": upstream ignores the version, and so do we.
local function family_of(alias)
  return (alias:match("^([^@]+)"))
end

-- The images of one term, newest first; nil, err on an API failure; nil, nil, problem for a term
-- that names nothing we can look up. Within a term the fields are ANDed, as DescribeImages ANDs its
-- filters; imageOwnerAlias and imageOwnerID only narrow what the other fields select.
local function images_of_term(c, region, term)
  local params, keep = { RegionId = region }, nil
  if nonempty(term.imageOwnerAlias) then params.ImageOwnerAlias = term.imageOwnerAlias end
  if nonempty(term.imageOwnerID) then params.ImageOwnerId = term.imageOwnerID end
  if nonempty(term.alias) then
    local family = family_of(term.alias)
    keep = family and FAMILIES[family]
    if not keep then
      return nil, nil, ("unknown image alias %q (known: AlibabaCloudLinux3, ContainerOS)"):format(term.alias)
    end
    -- the alias families are public images
    params.ImageOwnerAlias, params.OSType = "system", "linux"
  elseif nonempty(term.id) or nonempty(term.imageFamily) or nonempty(term.name) or has_tags(term) then
    if nonempty(term.id) then params.ImageId, params.ShowExpired = term.id, true end
    if nonempty(term.imageFamily) then params.ImageFamily = term.imageFamily end
    if has_tags(term) then params.Tag = tag_filter(term.tags) end
    if nonempty(term.name) then
      -- ImageName is a fuzzy filter: keep the exact name only
      params.ImageName = term.name
      keep = function(image) return image.ImageName == term.name end
    end
  else
    return nil, nil, "an image selector term needs id, alias, imageFamily, name or tags "
      .. "(imageOwnerAlias and imageOwnerID only narrow them)"
  end
  local items, err = describe_images(c, params)
  if not items then return nil, err end
  local kept = {}
  for _, image in ipairs(items) do
    if type(image) == "table" and (not keep or keep(image)) then kept[#kept + 1] = image end
  end
  return newest_first(kept)
end

-- One image per architecture: the first found wins, so earlier terms take priority (upstream
-- dedups by the requirement set, which here is the architecture alone).
local function resolve_images(c, region, terms)
  local out, by_arch, problems = array(), {}, {}
  for _, term in ipairs(terms) do
    local images, err, problem = images_of_term(c, region, term)
    if err then return nil, err end
    if problem then problems[#problems + 1] = problem end
    for _, image in ipairs(images or {}) do
      local arch = type(image) == "table" and ARCH[image.Architecture]
      if arch and type(image.ImageId) == "string" and not by_arch[arch] then
        by_arch[arch] = true
        out[#out + 1] = {
          id = image.ImageId,
          name = image.ImageName,
          architecture = arch,
          requirements = array { { key = ARCH_LABEL, operator = "In", values = array { arch } } },
          -- a luaprov extension (docs/alibaba.md): DescribeImages' CreationTime as the cloud returns it,
          -- so a drift policy can tell an image's age from the class status
          creationTime = type(image.CreationTime) == "string" and image.CreationTime or nil,
        }
      end
    end
  end
  return out, nil, problems
end

-- Conditions -------------------------------------------------------------------------------------

local function condition(type_, status, reason, message)
  return { type = type_, status = status, reason = reason, message = message or "" }
end

local function previous(nodeclass, field)
  local status = present(nodeclass.status) and nodeclass.status or {}
  local list = status[field]
  if present(list) and type(list) == "table" and #list > 0 then return list end
  return array()
end

-- Runs one reconciler and turns its outcome into (list, condition), as the upstream reconcilers do:
-- True with the condition type as reason when something matched, False with upstream's
-- reason and message when nothing did, Unknown with the API's error when the API failed.
local function reconcile(nodeclass, spec, empty_ok, run)
  local list, err, extra = run()
  if err then
    local kept = previous(nodeclass, spec.field)
    local message = ("%s: %s"):format(spec.action, tostring(err.message or err.code or err))
    if #kept > 0 then message = message .. ("; keeping the %d resolved before"):format(#kept) end
    return kept, condition(spec.type, "Unknown", spec.action .. "Failed", message)
  end
  if #list == 0 and empty_ok then
    return list, condition(spec.type, "True", spec.type)
  end
  if #list == 0 then
    local message = spec.not_found_message
    if type(extra) == "table" and #extra > 0 then message = message .. " (" .. concat(extra, "; ") .. ")" end
    return list, condition(spec.type, "False", spec.not_found_reason, message)
  end
  return list, condition(spec.type, "True", spec.type)
end

local DEPENDENTS = {
  { type = "VSwitchResolved", field = "vSwitches", action = "DescribeVSwitches",
    not_found_reason = "VSwitchResolutionFailed", not_found_message = "VSwitchSelector did not match any VSwitches" },
  { type = "SecurityGroupResolved", field = "securityGroups", action = "DescribeSecurityGroups",
    not_found_reason = "SecurityGroupResolutionFailed",
    not_found_message = "SecurityGroupSelector did not match any SecurityGroups" },
  { type = "ImageResolved", field = "images", action = "DescribeImages",
    not_found_reason = "ImageResolutionFailed", not_found_message = "ImageSelector did not match any Images" },
}

-- Root Ready, as operatorpkg computes it: True when every dependent is, False when one is False,
-- else Unknown; the message lists the dependents that are not True, in reconcile order. A condition
-- whose type is in `ignored` is reported but is no dependent.
local function ready(conditions, ignored)
  local not_true, any_false = {}, false
  for _, c in ipairs(conditions) do
    if not (ignored and ignored[c.type]) then
      if c.status ~= "True" then not_true[#not_true + 1] = c.type .. "=" .. c.status end
      if c.status == "False" then any_false = true end
    end
  end
  if #not_true == 0 then return condition("Ready", "True", "Ready") end
  if any_false then return condition("Ready", "False", "UnhealthyDependents", concat(not_true, ", ")) end
  return condition("Ready", "Unknown", "ReconcilingDependents", concat(not_true, ", "))
end

function M.resolve(ctx, nodeclass)
  if type(nodeclass) ~= "table" then error("resolve_nodeclass: nodeclass must be a table", 2) end
  local spec = present(nodeclass.spec) and nodeclass.spec or {}
  local c, cerr = session.client(ctx or {})
  local region = c and c.region

  local runners = {
    function()
      local terms = list_of(spec.vSwitchSelectorTerms)
      return resolve_vswitches(c, region, terms)
    end,
    function()
      local terms = list_of(spec.securityGroupSelectorTerms)
      return resolve_security_groups(c, region, terms)
    end,
    function()
      local terms = list_of(spec.imageSelectorTerms)
      return resolve_images(c, region, terms)
    end,
  }
  -- Upstream: an empty security-group result is only a failure when there were terms to match.
  local empty_ok = { false, #list_of(spec.securityGroupSelectorTerms) == 0, false }

  local status, conditions = {}, {}
  for i, dep in ipairs(DEPENDENTS) do
    local run = runners[i]
    if not c then
      run = function() return nil, cerr end
    end
    local list, cond = reconcile(nodeclass, dep, empty_ok[i], run)
    status[dep.field] = list
    conditions[#conditions + 1] = cond
  end
  -- A spec the launch could not read, or a userData it would refuse, makes the class not Ready now,
  -- instead of failing every launch.
  local _, problem = shape.spec(nodeclass)
  conditions[#conditions + 1] = problem and condition("ValidationSucceeded", "False", "InvalidSpec", problem)
    or condition("ValidationSucceeded", "True", "ValidationSucceeded")
  local why = bootstrap.check(ctx, nodeclass)
  conditions[#conditions + 1] = why and condition("UserDataReady", "False", "InvalidUserData", why)
    or condition("UserDataReady", "True", "UserDataReady")
  -- spec.role: RAMRoleResolved and status.ramRole (ramrole.lua).
  local role, role_condition = ramrole.resolve(c, cerr, nodeclass)
  status.ramRole = role
  conditions[#conditions + 1] = role_condition
  -- Capacity reservations (reservations.lua): a dependent of Ready only when launches need them.
  local reserved, reserved_condition, gates = reservations.resolve(c, cerr, nodeclass)
  status.capacityReservations = reserved
  conditions[#conditions + 1] = reserved_condition
  local all = { ready(conditions, not gates and { [reserved_condition.type] = true } or nil) }
  for _, cond in ipairs(conditions) do all[#all + 1] = cond end
  -- Conditions are a list keyed by type; sorted by type as operatorpkg keeps them.
  sort(all, function(a, b) return util.byte_less(a.type, b.type) end)
  status.conditions = array(all)
  return status
end

-- Hash ---------------------------------------------------------------------------------------------

-- Selector terms are excluded: editing them changes what status resolves to, and drift follows from
-- the status (security groups, vSwitches, images), not from the terms themselves. Capacity
-- reservations decide where an instance is billed, not what it is, so changing them drifts nothing.
local NOT_HASHED = { vSwitchSelectorTerms = true, securityGroupSelectorTerms = true, imageSelectorTerms = true,
  capacityReservationSelectorTerms = true, capacityReservationPreference = true }


-- Zero values are dropped (null, false, {} and []), recursively, like hashstructure's
-- IgnoreZeroValue: an explicit `formatDataDisk: false` or `tags: {}` hashes as the field left out,
-- and a new optional field does not change the hash of classes that do not set it. Strings and
-- numbers are kept as they are: "" and 0 can mean something (maxPods: 0).
local function canonical(v)
  if v == nil or v == json.null or v == false then return nil end
  if type(v) ~= "table" then return v end
  if util.is_list(v) then
    local out = array()
    for _, item in ipairs(v) do
      local c = canonical(item)
      if c ~= nil then out[#out + 1] = c end
    end
    return #out > 0 and out or nil
  end
  local out, any = {}, false
  for k, item in pairs(v) do
    if type(k) == "string" then
      local c = canonical(item)
      if c ~= nil then
        out[k] = c
        any = true
      end
    end
  end
  return any and out or nil
end

-- hash = the first 16 hex digits of SHA-256 over the canonical JSON of the normalized spec
-- (shape.lua) without its selector terms: a class written in the official fields and the same class
-- written in luaprov's earlier ones hash alike, and a default filled in hashes as if written.
-- luaprov.json.encode writes object keys sorted bytewise and integral floats as
-- integers, so the text does not depend on key order, table iteration order or how the number
-- was read. Arrays keep their order: the order of systemDisk.categories and dataDisks is the
-- preference order and the order of the disks sent to the API, so reordering them is a change.
function M.hash(nodeclass)
  if type(nodeclass) ~= "table" then error("nodeclass_hash: nodeclass must be a table", 2) end
  -- A spec shape.lua cannot read is hashed as written: the class is not Ready, so nothing launches
  -- from it, and fixing it changes the hash.
  local spec = shape.spec(nodeclass) or (present(nodeclass.spec) and nodeclass.spec) or {}
  local hashed = {}
  for k, v in pairs(spec) do
    if type(k) == "string" and not NOT_HASHED[k] then hashed[k] = v end
  end
  local text = assert(json.encode(canonical(hashed) or {}))
  return assert(crypto.sha256_hex(text)):sub(1, 16), M.HASH_VERSION
end

return M
