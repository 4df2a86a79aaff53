-- The launch decision of the mapping's create (docs/contracts.md#create): of the offerings the
-- engine allows, cheapest first, choose the one to launch and everything ECS needs for it from the
-- ECSNodeClass (the vSwitch by spec.vSwitchSelectionPolicy, the image for the type's architecture,
-- security groups, disks, key pair or password, spot strategy, user data), then launch one instance
-- through instances.run; an instance already launched for the NodeClaim is returned instead
-- (adopted = true, rule CP9). docs/alibaba.md#launching-an-instance says the same for operators.
--   create(ctx, launch) -> instance | nil, err
--   launch = {nodeclaim, nodeclass, tags, offerings = {{instance_type, zone, capacity_type, price,
--             client_token, type}}}
-- err.code "InsufficientCapacity" carries offerings = {{instance_type, zone, capacity_type}} (the
-- ones found out of stock), or no offerings when the class can launch in none of them.
local luaprov = require "luaprov"
local bootstrap = require "providers.alibaba.bootstrap"
local instances = require "providers.alibaba.instances"
local shape = require "providers.alibaba.shape"
local util = require "providers.alibaba.util"
local reservations = require "providers.alibaba.reservations"

local log = luaprov.log

local M = {}

-- balanced counts the launches this process made into a vSwitch since the status showed its count
-- (the status controller refreshes it every 300 s): the count minus those launches is what the next
-- launch compares. The discount starts over when the status shows another count, and is dropped
-- LAUNCH_DISCOUNT_TTL seconds after its first launch, by when a refresh has counted those addresses.
M.LAUNCH_DISCOUNT_TTL = 300
M.clock = luaprov.time.now
-- The luaprov.cache TTL only bounds memory; the age is judged on M.clock.
local launches = luaprov.cache.new("alibaba-vswitch-launches", 2 * M.LAUNCH_DISCOUNT_TTL, 10000)

-- API codes saying "this instance type does not take that disk category": the next category is tried.
local CATEGORY_REFUSED = {
  ["InvalidSystemDiskCategory.ValueNotSupported"] = true,
  ["InvalidSystemDisk.CategoryNotSupported"] = true,
  ["InvalidDiskCategory.NotSupported"] = true,
  ["InvalidDiskCategory.ValueNotSupported"] = true,
}

local MAX_TOKEN = 64

local field, class_name = util.field, util.class_name


-- vSwitch and image ------------------------------------------------------------------------------

local function status_free_ips(vswitch)
  return tonumber(field(vswitch, "availableIPAddressCount")) or 0
end

-- The discount entry of the vSwitch, {base, at, count}, while it still applies to the status's count.
local function discount(vswitch)
  local hit = launches:get(vswitch.id)
  local now = M.clock()
  if type(hit) == "table" and hit.base == status_free_ips(vswitch) and type(hit.at) == "number"
      and now >= hit.at and now - hit.at < M.LAUNCH_DISCOUNT_TTL then
    return hit
  end
  return nil
end

-- The vSwitch's free addresses: the status's count minus this process's launches since (above).
local function free_ips(vswitch)
  local hit = discount(vswitch)
  return status_free_ips(vswitch) - (hit and tonumber(hit.count) or 0)
end

-- count_launch(vswitch, n): n more launches (-1: one fewer, a launch that failed) into the vSwitch.
-- A launch counts when it chooses the vSwitch, before its first call that waits: the launches of one
-- scale-up run together, each choosing while the others wait on the API, and must see each other.
-- One thread runs every script, so this get and set cannot interleave with another call.
local function count_launch(vswitch, n)
  local hit = discount(vswitch)
  local count = (hit and tonumber(hit.count) or 0) + n
  launches:set(vswitch.id, count > 0 and { base = status_free_ips(vswitch), at = hit and hit.at or M.clock(),
    count = count } or nil)
end

-- The zone's first vSwitch in status.vSwitches, or nil. resolve_nodeclass lists them most free
-- addresses first, so this is the zone's emptiest; a mapping that reorders the status (an operator's
-- preference, examples/policies/mapping-vswitch) is followed.
local function vswitch_in(status, zone)
  for _, v in ipairs(field(status, "vSwitches") or {}) do
    if field(v, "zoneID") == zone and type(field(v, "id")) == "string" then return v end
  end
  return nil
end

-- Whether the type's requirements allow some value of each In requirement of an image (its
-- kubernetes.io/arch): an In of the type must share a value, a NotIn must leave one, DoesNotExist
-- allows none; a key the type does not constrain is allowed.
local function allows(type_reqs, image_reqs)
  for _, want in ipairs(image_reqs) do
    if field(want, "operator") == "In" then
      for _, have in ipairs(type_reqs) do
        if field(have, "key") == want.key then
          local values = {}
          for _, v in ipairs(field(have, "values") or {}) do values[v] = true end
          local op, any = field(have, "operator"), false
          for _, v in ipairs(field(want, "values") or {}) do
            if (op == "In" and values[v]) or (op == "NotIn" and not values[v]) or op == "Exists" then any = true end
          end
          if not any then return false end
        end
      end
    end
  end
  return true
end

-- The first image whose requirements (its architecture) the type's requirements allow.
local function image_for(status, instance_type)
  local type_reqs = field(instance_type, "requirements") or {}
  for _, image in ipairs(field(status, "images") or {}) do
    if type(field(image, "id")) == "string" and allows(type_reqs, field(image, "requirements") or {}) then
      return image
    end
  end
  return nil
end

-- The offerings the class can launch in, each with its vSwitch and image, in the engine's order; and
-- why the others cannot, for the error when none can.
local function launchable(launch)
  local status = field(launch.nodeclass, "status")
  local out, why = {}, {}
  for _, offering in ipairs(field(launch, "offerings") or {}) do
    local vswitch = vswitch_in(status, offering.zone)
    local image = image_for(status, offering.type)
    if vswitch and image then
      out[#out + 1] = { offering = offering, vswitch = vswitch, image = image }
    else
      why[#why + 1] = ("%s in %s: %s"):format(tostring(offering.instance_type), tostring(offering.zone),
        vswitch and "no image for its architecture" or "no vSwitch in the zone")
    end
  end
  return out, why
end

-- The candidates to try in this call, by spec.vSwitchSelectionPolicy:
-- cheapest: the first launchable offering alone (on out-of-stock the engine calls again with the rest).
-- balanced: the offerings of the first launchable type and capacity type, the zone with the most free
-- addresses first (ties: the engine's order), tried in turn.
local function candidates(list, policy)
  if #list == 0 then return {} end
  if policy ~= "balanced" then return { list[1] } end
  local first = list[1].offering
  local group = {}
  for i, c in ipairs(list) do
    if c.offering.instance_type == first.instance_type and c.offering.capacity_type == first.capacity_type then
      group[#group + 1] = { c = c, i = i }
    end
  end
  table.sort(group, function(a, b)
    local x, y = free_ips(a.c.vswitch), free_ips(b.c.vswitch)
    if x ~= y then return x > y end
    return a.i < b.i
  end)
  local out = {}
  for i, g in ipairs(group) do out[i] = g.c end
  return out
end

-- Disks, spot, access ----------------------------------------------------------------------------

-- The data disks of the normalized spec as instances.run takes them.
local function data_disks(spec)
  local out = {}
  for i, d in ipairs(spec.dataDisks or {}) do
    out[i] = { size = d.size, category = d.category, device = d.device, performance_level = d.performanceLevel,
      encrypted = d.encrypted, kms_key_id = d.kmsKeyID, snapshot_id = d.snapshotID,
      delete_with_instance = d.deleteWithInstance }
  end
  return out
end

-- NoSpot on demand; on spot the class's strategy, SpotAsPriceGo when it names none.
local function spot(spec, capacity_type)
  if capacity_type ~= "spot" then return "NoSpot" end
  local strategy = spec.spotStrategy or "SpotAsPriceGo"
  return strategy, strategy == "SpotWithPriceLimit" and spec.spotPriceLimit or nil
end

-- The request of instances.run for one candidate, without the system disk category and token.
-- The tags the instance carries: the engine's (launch.tags, the policy's with the engine's over them)
-- and this mapping's own, which no tag policy can drop or override either (rule CP7).
local function launch_tags(ctx, launch)
  local tags = {}
  for key, value in pairs(launch.tags or {}) do tags[key] = value end
  tags["karpenter.k8s.alibabacloud/ecsnodeclass"] = class_name(launch.nodeclass)
  tags["ecs:ecs-cluster-id"] = ctx.cluster_id
  return tags
end

local function request(ctx, launch, c)
  local spec = launch.nodeclass.spec
  local offering = c.offering
  local strategy, limit = spot(spec, offering.capacity_type)
  local text, uerr = bootstrap.user_data(ctx, launch.nodeclaim, launch.nodeclass, offering.capacity_type)
  if text == nil then return nil, uerr end
  local groups = {}
  for _, g in ipairs(field(field(launch.nodeclass, "status"), "securityGroups") or {}) do
    if type(field(g, "id")) == "string" then groups[#groups + 1] = g.id end
  end
  local metadata = spec.metadataOptions or {}
  return {
    instance_type = offering.instance_type, zone = offering.zone, capacity_type = offering.capacity_type,
    vswitch_id = c.vswitch.id, image_id = c.image.id, security_group_ids = groups,
    tags = launch_tags(ctx, launch),
    user_data = text, spot_strategy = strategy, spot_price_limit = limit, data_disks = data_disks(spec),
    key_pair_name = spec.keyPairName, password = spec.password,
    password_inherit = spec.passwordInherit == true or nil, resource_group_id = spec.resourceGroupId,
    ram_role_name = spec.role, launch_template_id = spec.launchTemplateID,
    http_endpoint = field(metadata, "httpEndpoint"), http_tokens = field(metadata, "httpTokens"),
    http_put_response_hop_limit = field(metadata, "httpPutResponseHopLimit"),
  }
end

-- The token of the index-th category: the engine's for the first, derived for the others, so a
-- repeated create walks the same tokens and finds the instance an earlier walk launched.
local function token_for(token, index)
  if index == 1 or type(token) ~= "string" then return token end
  local suffix = "-c" .. index
  return token:sub(1, MAX_TOKEN - #suffix) .. suffix
end

-- The cluster's instance already launched for the NodeClaim (instances.launched_for), marked adopted
-- and logged; false when there is none; nil, err when the lookup failed. Without the engine's
-- karpenter.sh/nodeclaim tag in launch.tags (rule CP7) no instance can be found: false.
local function already_launched(ctx, launch, attempts)
  local name = field(launch.tags, "karpenter.sh/nodeclaim")
  if type(name) ~= "string" or name == "" then return false end
  local inst, err = instances.launched_for(ctx, name, { attempts = attempts })
  if not inst then return inst, err end
  log.info("instance already launched for NodeClaim", { nodeclaim = name, instance_id = inst.id,
    request_id = inst.request_id })
  inst.request_id = nil
  inst.adopted = true
  return inst
end

-- One offering: RunInstances with each system disk category in turn while the type refuses it. A
-- reused token with other parameters (IdempotentParameterMismatch: the vSwitch, image, user data...
-- changed since the first attempt) means that attempt launched: its instance is looked up again,
-- a few times while DescribeInstances catches up.
local function launch_one(ctx, launch, c)
  local req, err = request(ctx, launch, c)
  if not req then return nil, err end
  local disk = launch.nodeclass.spec.systemDisk
  local last
  for i, category in ipairs(disk.categories) do
    -- ECS takes a performance level for ESSDs only.
    req.system_disk = { category = category, size = disk.size,
      performance_level = category == "cloud_essd" and disk.performanceLevel or nil,
      encrypted = disk.encrypted, kms_key_id = disk.kmsKeyID }
    req.client_token = token_for(c.offering.client_token, i)
    local inst, rerr = reservations.run(ctx, req, launch.nodeclass, c.offering) -- instances.run, private pool
    if inst then return inst end
    if (rerr.api_code or rerr.code) == "IdempotentParameterMismatch" then
      local found, ferr = already_launched(ctx, launch, instances.DESCRIBE_NEW_ATTEMPTS)
      if found then return found end
      if found == nil then return nil, ferr end
      return nil, rerr
    end
    if not CATEGORY_REFUSED[rerr.api_code or rerr.code] then return nil, rerr end
    last = rerr
  end
  return nil, last
end

local function out_of_stock(offering)
  return { instance_type = offering.instance_type, zone = offering.zone, capacity_type = offering.capacity_type }
end

function M.create(ctx, launch)
  if type(launch) ~= "table" then error("create: launch must be a table", 2) end
  -- A create repeated after a lost answer may be handed other offerings or build another request:
  -- the instance the first one launched is the answer (one DescribeInstances per launch).
  local existing, lerr = already_launched(ctx, launch, 1)
  if existing then return existing end
  if existing == nil then return nil, lerr end
  local nodeclass, nerr = shape.normalize(launch.nodeclass)
  if not nodeclass then return nil, nerr end
  launch = { nodeclaim = launch.nodeclaim, nodeclass = nodeclass, tags = launch.tags, offerings = launch.offerings }
  local list, why = launchable(launch)
  local tries = candidates(list, nodeclass.spec.vSwitchSelectionPolicy)
  if #tries == 0 then
    return nil, { code = "InsufficientCapacity",
      message = ("ECSNodeClass %s can launch none of the %d offerings: %s"):format(class_name(launch.nodeclass),
        #(field(launch, "offerings") or {}), #why > 0 and table.concat(why, "; ") or "none were offered") }
  end
  local sold_out, last = {}, nil
  for _, c in ipairs(tries) do
    count_launch(c.vswitch, 1)
    local inst, err = launch_one(ctx, launch, c)
    if inst then return inst end
    count_launch(c.vswitch, -1)
    if err.code ~= "InsufficientCapacity" then return nil, err end
    sold_out[#sold_out + 1] = out_of_stock(c.offering)
    last = err
  end
  last.offerings = sold_out
  return nil, last
end

return M
