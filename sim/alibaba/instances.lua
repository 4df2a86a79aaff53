-- ECS instance actions: RunInstances, DescribeInstances, DescribeInstanceStatus, DeleteInstance,
-- DeleteInstances. Validation follows RunInstances' documented error table in the order the real API
-- applies it (parameters, then resources, then stock), so a provider sees the same codes it would in
-- production: OperationDenied.NoStock for sold-out offerings, IdempotentParameterMismatch for a reused
-- ClientToken, InvalidInstanceId.NotFound for an instance already released.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local account = require "sim.alibaba.account"
local catalogue = require "sim.alibaba.catalogue"
local ecs = require "sim.alibaba.ecs"
local ram = require "sim.alibaba.ram"
local reclaim = require "sim.alibaba.reclaim"
local reservations = require "sim.alibaba.reservations"
local state = require "sim.alibaba.state"
local tags = require "sim.alibaba.tags"
local wire = require "sim.alibaba.wire"

local crypto = luaprov.crypto
local list = wire.list

local M = {}

local ARCH_OF_TYPE = { X86 = "x86_64", ARM = "arm64" }
local MAX_USER_DATA = 32 * 1024
-- Data disk categories RunInstances accepts (DataDisk.N.Category), and at most 16 data disks.
local DATA_DISK_CATEGORIES = { cloud = true, cloud_efficiency = true, cloud_ssd = true, cloud_essd = true,
  cloud_auto = true, cloud_essd_entry = true }
local MAX_DATA_DISKS = 16

-- The parameters a call asked for, minus the per-request signing fields: what ClientToken idempotency
-- compares (a retry must change its nonce and timestamp, and may move between V2 and V3).
local function fingerprint(p)
  local keys = {}
  for k in pairs(p) do
    if not wire.COMMON_PARAMS[k] then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = k .. "=" .. p[k] end
  return table.concat(parts, "\n")
end

-- ClientToken: at most 64 ASCII characters. Returns the remembered answer of an identical earlier call.
local function idempotent(call, action)
  local token = wire.str(call.params, "ClientToken")
  if not token then return nil end
  if #token > 64 or not token:match("^[\33-\126]+$") then
    wire.invalid("ClientToken", "It must be at most 64 ASCII characters.")
  end
  local seen = state.recall(action, token)
  if seen then
    if seen.fingerprint ~= fingerprint(call.params) then
      wire.fail(400, "IdempotentParameterMismatch",
        "Request uses a client token in a previous request but is not identical to that request.")
    end
    return token, seen.result
  end
  return token
end

local function dry_run(p)
  if wire.bool(p, "DryRun", false) then
    wire.fail(400, "DryRunOperation", "Request validation has been passed with DryRun flag set.")
  end
end

local function security_groups(p, vswitch)
  local ids = wire.repeated(p, "SecurityGroupIds", 5)
  local one = wire.str(p, "SecurityGroupId")
  if one then
    if #ids > 0 then
      wire.fail(400, "InvalidParameter.Conflict", "SecurityGroupId and SecurityGroupIds cannot be set together.")
    end
    ids = { one }
  end
  if #ids == 0 then wire.missing("SecurityGroupId") end
  for _, id in ipairs(ids) do
    local g = account.security_group(id)
    if not g then wire.fail(404, "InvalidSecurityGroupId.NotFound", "The specified SecurityGroupId does not exist.") end
    if g.vpc ~= vswitch.vpc then
      wire.fail(400, "InvalidParameter.Mismatch",
        "Specified security group and virtual switch are not in the same VPC.")
    end
  end
  return ids
end

-- <prefix>Encrypted and <prefix>KMSKeyId: a key without encryption is refused, as ECS refuses it.
local function encryption(p, prefix, disk)
  disk.encrypted = wire.bool(p, prefix .. "Encrypted", false)
  disk.kms_key_id = wire.str(p, prefix .. "KMSKeyId")
  if disk.kms_key_id and not disk.encrypted then
    wire.fail(400, "InvalidParameter.KMSKeyId", "The specified parameter " .. prefix
      .. "KMSKeyId requires " .. prefix .. "Encrypted to be true.")
  end
  return disk
end

local function system_disk(p, t, img)
  local category = wire.str(p, "SystemDisk.Category", t.system_disks[1])
  local supported = false
  for _, c in ipairs(t.system_disks) do
    if c == category then supported = true end
  end
  if not supported then
    wire.fail(403, "InvalidSystemDiskCategory.ValueNotSupported",
      "The specified parameter SystemDisk.Category is not supported by the instance type.")
  end
  local size = wire.int(p, "SystemDisk.Size", math.max(40, img.size), 20, 2048)
  if size < img.size then
    wire.fail(403, "InvalidSystemDiskSize.LessThanImageSize",
      "The specified parameter SystemDisk.Size is less than the image size.")
  end
  return encryption(p, "SystemDisk.", { category = category, size = size,
    performance_level = wire.str(p, "SystemDisk.PerformanceLevel", "PL1") })
end

-- DataDisk.N.Size (GiB, 20-32768), .Category (a known category, default cloud_efficiency), .Device
-- (/dev/xvd[b-z], optional), in N order.
local function data_disks(p)
  local seen, ns = {}, {}
  for k in pairs(p) do
    local n = tonumber(k:match("^DataDisk%.(%d+)%.%a+$"))
    if n and not seen[n] then
      seen[n] = true
      ns[#ns + 1] = n
    end
  end
  table.sort(ns)
  local out = {}
  for _, n in ipairs(ns) do
    local prefix = "DataDisk." .. n .. "."
    local category = wire.str(p, prefix .. "Category", "cloud_efficiency")
    if not DATA_DISK_CATEGORIES[category] then
      wire.fail(400, "InvalidDataDiskCategory.ValueNotSupported",
        "The specified parameter " .. prefix .. "Category is not valid.")
    end
    local size = wire.int(p, prefix .. "Size", nil, 20, 32768)
    if not size then wire.missing(prefix .. "Size") end
    local device = wire.str(p, prefix .. "Device")
    if device and not device:match("^/dev/xvd[b-z]$") then
      wire.fail(400, "InvalidDataDiskDevice.Malformed", "The specified parameter " .. prefix .. "Device is not valid.")
    end
    out[#out + 1] = encryption(p, prefix, { category = category, size = size, device = device,
      performance_level = wire.str(p, prefix .. "PerformanceLevel"), snapshot_id = wire.str(p, prefix .. "SnapshotId"),
      delete_with_instance = wire.bool(p, prefix .. "DeleteWithInstance", true) })
  end
  if #out > MAX_DATA_DISKS then wire.invalid("DataDisk", ("At most %d data disks."):format(MAX_DATA_DISKS)) end
  return out
end

-- RamRoleName, when given, must name a role of the account that ECS may assume.
local function ram_role(p)
  local name = wire.str(p, "RamRoleName")
  if not name then return "" end
  local role = ram.get(name)
  if not role then wire.fail(404, "InvalidRamRole.NotFound", "The specified RAMRoleName does not exist.") end
  if not ram.trusts_ecs(role) then
    wire.fail(404, "InvalidRamRole.NotEcsRole",
      "The specified ram role is not authorized for ecs, please check your role policy.")
  end
  return name
end

local function user_data(p)
  local v = wire.str(p, "UserData")
  if not v then return nil end
  local raw = crypto.base64_decode(v)
  if not raw then
    wire.fail(400, "InvalidUserData.Base64FormatInvalid", "The specified parameter UserData must be base64 encoded.")
  end
  if #raw > MAX_USER_DATA then
    wire.fail(400, "InvalidUserData.SizeExceeded", "The specified parameter UserData exceeds the size (32 KB).")
  end
  return v
end

local function spot_settings(p, t, zone, capacity)
  local strategy = wire.str(p, "SpotStrategy", "NoSpot")
  local charge = wire.str(p, "InstanceChargeType", "PostPaid")
  if capacity == "spot" and charge ~= "PostPaid" then
    wire.fail(400, "InvalidParameter.Conflict", "Spot instances must be PostPaid (pay-as-you-go).")
  end
  local limit
  if strategy == "SpotWithPriceLimit" then
    limit = wire.number(p, "SpotPriceLimit")
    if not limit then wire.missing("SpotPriceLimit") end
    if limit < catalogue.spot_price(t, zone, clock.now()) then
      wire.fail(400, "InvalidSpotPriceLimit.LowerThanPublicPrice",
        "The specified parameter spotPriceLimit can't be lower than current public price.")
    end
  end
  return strategy, charge, limit
end

local function new_instance(p, t, zone, vswitch, img, sgs, disks, spot, charge, limit, instance_tags, token, index)
  local id = state.new_id("i-bp1")
  local ip = account.take_ip(vswitch)
  local name = wire.str(p, "InstanceName", id)
  if wire.bool(p, "UniqueSuffix", false) then name = name .. ("%03d"):format(index) end
  local mac_hex = crypto.sha256_hex(id):sub(1, 10)
  return {
    id = id, type = t, zone = zone, vswitch_id = vswitch.id, vpc_id = vswitch.vpc, image_id = img.id, image = img,
    security_group_ids = sgs, ip = ip, tags = instance_tags, created = clock.now(), spot_strategy = spot,
    spot_price_limit = limit or 0, charge_type = charge, name = name,
    hostname = wire.str(p, "HostName", "iZ" .. id:sub(3) .. "Z"), description = wire.str(p, "Description", ""),
    user_data = user_data(p), system_disk = disks.system, data_disks = disks.data,
    resource_group_id = wire.str(p, "ResourceGroupId", ""), password_set = wire.str(p, "Password") ~= nil,
    password_inherit = wire.bool(p, "PasswordInherit", false),
    deletion_protection = wire.bool(p, "DeletionProtection", false),
    key_pair = wire.str(p, "KeyPairName", ""), ram_role = ram_role(p),
    http_tokens = wire.one_of(p, "HttpTokens", "optional", "optional", "required"),
    http_endpoint = wire.one_of(p, "HttpEndpoint", "enabled", "enabled", "disabled"),
    http_put_response_hop_limit = wire.int(p, "HttpPutResponseHopLimit", 1, 1, 64),
    launch_template_id = wire.str(p, "LaunchTemplateId"),
    eni_id = "eni-bp1" .. crypto.sha256_hex("eni" .. id):sub(1, 17),
    mac = ("00:16:3e:%s:%s:%s"):format(mac_hex:sub(1, 2), mac_hex:sub(3, 4), mac_hex:sub(5, 6)),
    client_token = token,
  }
end

function M.RunInstances(call)
  local p = call.params
  ecs.region(p)
  local token, previous = idempotent(call, "RunInstances")
  if previous then return previous end

  local t = ecs.known_type(wire.required(p, "InstanceType"))
  local img = account.image(wire.required(p, "ImageId"))
  if not img then wire.fail(404, "InvalidImageId.NotFound", "The specified ImageId does not exist.") end
  local vswitch = account.vswitch(wire.required(p, "VSwitchId"))
  if not vswitch then wire.fail(404, "InvalidVSwitchId.NotFound", "Specified virtual switch does not exist.") end
  local zone = wire.str(p, "ZoneId", vswitch.zone)
  if zone ~= vswitch.zone then
    wire.fail(400, "InvalidParameter.Mismatch", "Specified virtual switch is not in the specified zone.")
  end
  local sgs = security_groups(p, vswitch)
  ram_role(p)
  if ARCH_OF_TYPE[t.arch] ~= img.arch then
    wire.fail(403, "ImageNotSupportInstanceType", "The specified instance type does not support this image.")
  end
  local disks = { system = system_disk(p, t, img), data = data_disks(p) }
  local capacity = ecs.capacity_of(p)
  local spot, charge, limit = spot_settings(p, t, zone, capacity)
  local amount = wire.int(p, "Amount", 1, 1, 100)
  local min_amount = wire.int(p, "MinAmount", amount, 1, amount)
  local instance_tags = tags.from_params(p, "Tag")
  user_data(p)
  wire.one_of(p, "HttpTokens", "optional", "optional", "required")
  wire.one_of(p, "HttpEndpoint", "enabled", "enabled", "disabled")
  wire.int(p, "HttpPutResponseHopLimit", 1, 1, 64)
  local template = wire.str(p, "LaunchTemplateId")
  if template and not account.launch_template(template) then
    wire.fail(404, "InvalidLaunchTemplate.NotFound", "The specified launch template does not exist.")
  end

  local stock = catalogue.stock(t, zone, capacity)
  if not stock then
    wire.fail(403, "InvalidInstanceType.ZoneNotSupported", "The specified zone does not support this instancetype.")
  end
  -- A private pool holds its capacity for the account: the public stock does not matter to it.
  local pool, match = reservations.choose(p, t, zone, capacity, amount)
  if not pool and not catalogue.has_stock(stock) then
    wire.fail(403, "OperationDenied.NoStock", "The requested resource is sold out in the specified zone; try other "
      .. "types of resources or other regions and zones.")
  end
  -- All or nothing unless MinAmount says how few will do; the limit here is free addresses.
  local count = math.min(amount, account.available_ips(vswitch))
  if count < min_amount then
    wire.fail(403, "InvalidVSwitchId.IpNotEnough", "The specified VSwitch has not enough IP addresses.")
  end
  dry_run(p)

  local ids = {}
  for i = 1, count do
    local copy = {}
    for k, v in pairs(instance_tags) do copy[k] = v end
    local inst = new_instance(p, t, zone, vswitch, img, sgs, disks, spot, charge, limit, copy, token, i)
    inst.private_pool = pool and { id = pool.id, match_criteria = match } or nil
    state.add(inst)
    ids[i] = inst.id
  end
  if pool then reservations.take(pool, count) end
  local price = capacity == "spot" and catalogue.spot_price(t, zone, clock.now()) or catalogue.on_demand_price(t)
  local body = { InstanceIdSets = { InstanceIdSet = list(ids) }, TradePrice = price * count }
  if token then state.remember("RunInstances", token, fingerprint(p), body) end
  return body
end

--- instance_record(inst, now) -> the DescribeInstances shape of an instance.
local function instance_record(inst, now)
  local t = inst.type
  local status = state.status(inst, now)
  return {
    InstanceId = inst.id, InstanceName = inst.name, HostName = inst.hostname, Description = inst.description,
    InstanceType = t.id, InstanceTypeFamily = t.family, Cpu = t.cpu, Memory = math.floor(t.memory * 1024),
    GPUAmount = t.gpu, GPUSpec = t.gpu_spec, Status = status, ZoneId = inst.zone, RegionId = catalogue.REGION,
    ImageId = inst.image_id, OSType = inst.image.os_type, OSName = inst.image.os_name,
    OSNameEn = inst.image.os_name_en, SerialNumber = crypto.sha256_hex("sn" .. inst.id):sub(1, 8) .. "-0000-4000-8000-"
      .. crypto.sha256_hex("sn" .. inst.id):sub(9, 20),
    -- Instance times are written to the minute on this API ("2017-12-10T04:04Z").
    CreationTime = wire.minute_time(inst.created),
    StartTime = status == "Pending" and "" or wire.minute_time(inst.created + state.STARTING_AFTER),
    ExpiredTime = "2099-12-31T15:59Z", AutoReleaseTime = "",
    InstanceChargeType = inst.charge_type, InternetChargeType = "PayByTraffic", InternetMaxBandwidthIn = -1,
    InternetMaxBandwidthOut = 0, SpotStrategy = inst.spot_strategy, SpotPriceLimit = inst.spot_price_limit,
    SpotDuration = inst.spot_strategy == "NoSpot" and 0 or 1,
    SpotInterruptionBehavior = "Terminate", DeletionProtection = inst.deletion_protection,
    StoppedMode = status == "Stopped" and "KeepCharging" or "Not-applicable", ResourceGroupId = inst.resource_group_id,
    InstanceNetworkType = "vpc", IoOptimized = true, DeviceAvailable = true, Recyclable = false,
    KeyPairName = inst.key_pair, CreditSpecification = t.burstable and "Standard" or "",
    LocalStorageAmount = t.local_amount, LocalStorageCapacity = t.local_capacity,
    VpcAttributes = { VpcId = inst.vpc_id, VSwitchId = inst.vswitch_id, NatIpAddress = "",
      PrivateIpAddress = { IpAddress = list({ inst.ip }) } },
    PublicIpAddress = { IpAddress = list() }, InnerIpAddress = { IpAddress = list() },
    EipAddress = { AllocationId = "", IpAddress = "", InternetChargeType = "" },
    SecurityGroupIds = { SecurityGroupId = list({ table.unpack(inst.security_group_ids) }) },
    NetworkInterfaces = { NetworkInterface = list({ { NetworkInterfaceId = inst.eni_id, Type = "Primary",
      MacAddress = inst.mac, PrimaryIpAddress = inst.ip,
      PrivateIpSets = { PrivateIpSet = list({ { PrivateIpAddress = inst.ip, Primary = true } }) } } }) },
    OperationLocks = { LockReason = list() },
    CpuOptions = { CoreCount = t.api.CpuOptions.Core, ThreadsPerCore = t.api.CpuOptions.ThreadsPerCore, Numa = "" },
    MetadataOptions = { HttpEndpoint = inst.http_endpoint, HttpTokens = inst.http_tokens,
      HttpPutResponseHopLimit = inst.http_put_response_hop_limit },
    Tags = ecs.ecs_tags(inst.tags),
  }
end

local function instance_key(inst) return inst.id end

-- "*" in InstanceName is a wildcard.
local function name_matcher(pattern)
  if not pattern then return nil end
  local lua = "^" .. pattern:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*") .. "$"
  return function(name) return name:find(lua) ~= nil end
end

function M.DescribeInstances(call)
  local p = call.params
  ecs.region(p)
  local ids = wire.json_array(p, "InstanceIds", 100, "InvalidInstanceIds.Malformed")
  local ips = wire.json_array(p, "PrivateIpAddresses", 100)
  local function set(values)
    if not values then return nil end
    local s = {}
    for _, v in ipairs(values) do s[v] = true end
    return s
  end
  local id_set, ip_set = set(ids), set(ips)
  local filters = {}
  for _, name in ipairs({ "ZoneId", "VpcId", "VSwitchId", "InstanceType", "InstanceTypeFamily", "ImageId",
    "Status", "InstanceChargeType", "SecurityGroupId" }) do
    filters[name] = wire.str(p, name)
  end
  wire.one_of(p, "Status", nil, "Pending", "Running", "Starting", "Stopping", "Stopped")
  local name_ok = name_matcher(wire.str(p, "InstanceName"))
  local tag_filters = wire.tags(p, "Tag", 20)
  local now = clock.now()
  local matched = {}
  for _, inst in ipairs(state.list()) do
    local f = filters
    local ok = (not id_set or id_set[inst.id]) and (not ip_set or ip_set[inst.ip])
      and (not f.ZoneId or f.ZoneId == inst.zone) and (not f.VpcId or f.VpcId == inst.vpc_id)
      and (not f.VSwitchId or f.VSwitchId == inst.vswitch_id) and (not f.InstanceType or f.InstanceType == inst.type.id)
      and (not f.InstanceTypeFamily or f.InstanceTypeFamily == inst.type.family)
      and (not f.ImageId or f.ImageId == inst.image_id)
      and (not f.InstanceChargeType or f.InstanceChargeType == inst.charge_type)
      and (not f.Status or f.Status == state.status(inst, now)) and (not name_ok or name_ok(inst.name))
      and wire.match_tags(inst.tags, tag_filters)
    if ok and f.SecurityGroupId then
      ok = false
      for _, g in ipairs(inst.security_group_ids) do
        if g == f.SecurityGroupId then ok = true end
      end
    end
    if ok then matched[#matched + 1] = inst end
  end
  local body, page
  if p.MaxResults or p.NextToken then
    -- MaxResults below 10 counts as 10 and above 100 as 100, as documented.
    local next_token
    page, next_token = wire.page_by_token(matched, p, instance_key, 10, 100, 10)
    body = { NextToken = next_token, TotalCount = #matched }
  else
    local number, size
    page, number, size = wire.page_by_number(matched, p, 10, 100)
    body = { NextToken = "", TotalCount = #matched, PageNumber = number, PageSize = size }
  end
  local out = {}
  for i, inst in ipairs(page) do out[i] = instance_record(inst, now) end
  body.Instances = { Instance = list(out) }
  return body
end

function M.DescribeInstanceStatus(call)
  local p = call.params
  ecs.region(p)
  local ids = wire.repeated(p, "InstanceId", 100)
  local zone = wire.str(p, "ZoneId")
  local want = {}
  for _, id in ipairs(ids) do want[id] = true end
  local now = clock.now()
  local matched = {}
  for _, inst in ipairs(state.list()) do
    if (#ids == 0 or want[inst.id]) and (not zone or zone == inst.zone) then matched[#matched + 1] = inst end
  end
  local page, number, size = wire.page_by_number(matched, p, 10, 50)
  local out = {}
  for i, inst in ipairs(page) do out[i] = { InstanceId = inst.id, Status = state.status(inst, now) } end
  return { TotalCount = #matched, PageNumber = number, PageSize = size,
    InstanceStatuses = { InstanceStatus = list(out) } }
end

local function not_found()
  wire.fail(404, "InvalidInstanceId.NotFound", "The specified InstanceId does not exist.")
end

-- Whether an instance may be released now; raises the API's refusal otherwise.
local function check_deletable(inst, force)
  local status = state.status(inst)
  if status == "Pending" then
    wire.fail(403, "IncorrectInstanceStatus.Initializing", "The specified instance is in initializing state, "
      .. "please try again later.")
  end
  if not force and status ~= "Stopped" then
    wire.fail(403, "IncorrectInstanceStatus", "The current status of the resource does not support this operation.")
  end
  if inst.deletion_protection then
    wire.fail(403, "InvalidOperation.DeletionProtection", "The specified instance is protected from being released.")
  end
end

local release = reclaim.release

function M.DeleteInstance(call)
  local p = call.params
  local inst = state.get(wire.required(p, "InstanceId"))
  if not inst then not_found() end
  local force = wire.bool(p, "Force", false)
  wire.bool(p, "TerminateSubscription", false)
  check_deletable(inst, force)
  dry_run(p)
  release(inst)
  return {}
end

function M.DeleteInstances(call)
  local p = call.params
  ecs.region(p)
  local token, previous = idempotent(call, "DeleteInstances")
  if previous then return previous end
  local ids = wire.repeated(p, "InstanceId", 100)
  if #ids == 0 then wire.missing("InstanceId.1") end
  local force = wire.bool(p, "Force", false)
  local found = {}
  for i, id in ipairs(ids) do
    found[i] = state.get(id)
    if not found[i] then not_found() end
    check_deletable(found[i], force)
  end
  dry_run(p)
  for _, inst in ipairs(found) do release(inst) end
  local body = {}
  if token then state.remember("DeleteInstances", token, fingerprint(p), body) end
  return body
end

return M
