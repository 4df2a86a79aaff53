-- ECS instances behind the CloudProvider contract: launch one instance as launch.lua decided, delete,
-- describe (batched), list the cluster's instances, and the mapping of an API instance to the instance shape
-- (docs/contracts.md#the-instance-shape). Calls go through session.client(ctx); errors are the
-- client's tables (code "NotFound", "InsufficientCapacity", "Throttled", ... or the API Code).
--   run(ctx, req) -> instance | nil, err      delete(ctx, id) -> true | nil, err
--   get(ctx, id) -> instance | nil, err       describe(ctx, ids) -> instances | nil, err
--   list(ctx) -> instances | nil, err         to_instance(api_instance) -> instance
--   launched_for(ctx, nodeclaim_name, opts) -> instance | false | nil, err
local luaprov = require "luaprov"
local session = require "providers.alibaba.session"

local crypto, json, log, time = luaprov.crypto, luaprov.json, luaprov.log, luaprov.time

local M = {}

-- DescribeInstances takes at most 100 ids in InstanceIds and returns at most 100 per page.
local BATCH = 100
-- A new instance can take a moment to show up in DescribeInstances (eventual consistency): looked
-- up this many times, this far apart (a spec may shorten the wait).
M.DESCRIBE_NEW_ATTEMPTS = 5
M.DESCRIBE_NEW_WAIT_S = 0.5

local STATES = {
  Pending = "pending", Starting = "pending", Running = "running", Stopping = "stopping", Stopped = "stopped",
  Deleted = "terminated", Released = "terminated", Terminated = "terminated",
}

local function array(t)
  return setmetatable(t or {}, json.array_mt)
end

local function list_at(node, a, b)
  node = type(node) == "table" and node[a] or nil
  node = type(node) == "table" and node[b] or nil
  if type(node) ~= "table" then return {} end
  return node
end

local function str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

-- ECS writes times with minute precision ("2017-12-10T04:04Z"); the shape wants RFC 3339 seconds.
local function rfc3339(text)
  text = str(text)
  if not text then return nil end
  local t = time.parse_iso8601(text)
  if not t then
    local minute, zone = text:match("^(%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d)([Zz+-].*)$")
    if minute then t = time.parse_iso8601(minute .. ":00" .. zone) end
  end
  return t and time.iso8601(t) or nil
end

local function private_ip(api)
  local ip = list_at(api.VpcAttributes, "PrivateIpAddress", "IpAddress")[1]
  if str(ip) then return ip end
  for _, nic in ipairs(list_at(api, "NetworkInterfaces", "NetworkInterface")) do
    if str(nic.PrimaryIpAddress) and (nic.Type == nil or nic.Type == "Primary") then return nic.PrimaryIpAddress end
  end
  return str(list_at(api, "InnerIpAddress", "IpAddress")[1])
end

--- to_instance(api_instance) -> the instance, in the shape of docs/contracts.md#the-instance-shape.
-- capacity_type: NoSpot or no SpotStrategy is on-demand (the upstream provider counts an empty
-- strategy as spot; an instance launched without one is pay-as-you-go, so this does not).
function M.to_instance(api)
  local spot = str(api.SpotStrategy)
  local groups = array()
  for _, id in ipairs(list_at(api, "SecurityGroupIds", "SecurityGroupId")) do groups[#groups + 1] = id end
  local tags = {}
  for _, tag in ipairs(list_at(api, "Tags", "Tag")) do
    local key = tag.TagKey or tag.Key
    if type(key) == "string" then tags[key] = tag.TagValue or tag.Value or "" end
  end
  return {
    id = api.InstanceId,
    region = api.RegionId,
    zone = api.ZoneId,
    instance_type = api.InstanceType,
    capacity_type = (spot == nil or spot == "NoSpot") and "on-demand" or "spot",
    image_id = api.ImageId,
    state = STATES[api.Status] or "pending",
    security_group_ids = groups,
    vswitch_id = type(api.VpcAttributes) == "table" and str(api.VpcAttributes.VSwitchId) or nil,
    private_ip = private_ip(api),
    tags = tags,
    launch_time = rfc3339(api.CreationTime) or rfc3339(api.StartTime),
  }
end

local function client_for(ctx)
  return session.client(ctx)
end

local function describe_page(c, ctx, ids)
  return c:paginate("ecs", "DescribeInstances", { RegionId = ctx.region, InstanceIds = ids },
    { list = "Instances.Instance", style = "NextToken", page_size = BATCH })
end

--- describe(ctx, ids) -> list of instances (the ones that exist; released ones are simply absent).
function M.describe(ctx, ids)
  local c, err = client_for(ctx)
  if not c then return nil, err end
  local out = array()
  for first = 1, #ids, BATCH do
    local batch = {}
    for i = first, math.min(first + BATCH - 1, #ids) do batch[#batch + 1] = ids[i] end
    local items, derr = describe_page(c, ctx, batch)
    if not items then return nil, derr end
    for _, api in ipairs(items) do out[#out + 1] = M.to_instance(api) end
  end
  return out
end

local function not_found(id, region)
  return { code = "NotFound", action = "DescribeInstances",
    message = ("instance %s not found in region %s"):format(tostring(id), tostring(region)) }
end

--- get(ctx, id) -> instance | nil, {code = "NotFound"} | nil, err
function M.get(ctx, id)
  local found, err = M.describe(ctx, { id })
  if not found then return nil, err end
  for _, inst in ipairs(found) do
    if inst.id == id then return inst end
  end
  return nil, not_found(id, ctx.region)
end

--- list(ctx) -> every instance tagged kubernetes.io/cluster/<cluster_id>=owned, all pages.
function M.list(ctx)
  if type(ctx.cluster_id) ~= "string" or ctx.cluster_id == "" then
    return nil, { code = "InvalidConfig", message = "instances.list needs ctx.cluster_id" }
  end
  local c, err = client_for(ctx)
  if not c then return nil, err end
  local items, lerr = c:paginate("ecs", "DescribeInstances", {
    RegionId = ctx.region,
    Tag = { { Key = "kubernetes.io/cluster/" .. ctx.cluster_id, Value = "owned" } },
  }, { list = "Instances.Instance", style = "NextToken", page_size = BATCH })
  if not items then return nil, lerr end
  local out = array()
  for i, api in ipairs(items) do out[i] = M.to_instance(api) end
  return out
end

--- launched_for(ctx, nodeclaim_name, {attempts}) -> the cluster's live instance launched for the
-- NodeClaim (tagged kubernetes.io/cluster/<cluster_id>=owned and karpenter.sh/nodeclaim=<name>, the
-- engine's tags, rule CP7), the oldest when there are several; false when there is none. A
-- terminated or stopping instance (being deleted) does not count. With attempts > 1 the lookup is
-- repeated while it finds none, M.DESCRIBE_NEW_WAIT_S apart: a new instance can take a moment to show
-- up. The answer's RequestId is in instance.request_id.
function M.launched_for(ctx, nodeclaim_name, opts)
  if type(ctx.cluster_id) ~= "string" or ctx.cluster_id == "" then
    return nil, { code = "InvalidConfig", message = "instances.launched_for needs ctx.cluster_id" }
  end
  local c, err = client_for(ctx)
  if not c then return nil, err end
  local attempts = opts and opts.attempts or 1
  for n = 1, attempts do
    local body, derr = c:call("ecs", "DescribeInstances", { RegionId = ctx.region, MaxResults = BATCH,
      Tag = { { Key = "kubernetes.io/cluster/" .. ctx.cluster_id, Value = "owned" },
        { Key = "karpenter.sh/nodeclaim", Value = nodeclaim_name } } }, { idempotent = true })
    if not body then return nil, derr end
    local found
    for _, api in ipairs(list_at(body, "Instances", "Instance")) do
      local inst = M.to_instance(api)
      if inst.state ~= "terminated" and inst.state ~= "stopping"
          and (not found or (inst.launch_time or "") < (found.launch_time or "")) then
        found = inst
      end
    end
    if found then
      found.request_id = body.RequestId
      return found
    end
    if n < attempts then time.sleep(M.DESCRIBE_NEW_WAIT_S) end
  end
  return false
end

-- Tags in key order, so the same request always flattens to the same Tag.N numbering.
local function tag_params(tags)
  local keys = {}
  for k in pairs(tags or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = { Key = k, Value = tostring(tags[k]) } end
  return out
end

-- What the engine learns when DescribeInstances has not caught up with a launch yet: everything the
-- request fixed, so the NodeClaim can be built; the next get() fills in the rest.
local function from_request(ctx, req, id)
  local groups = array()
  for i, g in ipairs(req.security_group_ids or {}) do groups[i] = g end
  return {
    id = id, region = ctx.region, zone = req.zone, instance_type = req.instance_type,
    capacity_type = req.capacity_type == "spot" and "spot" or "on-demand", image_id = req.image_id,
    state = "pending", security_group_ids = groups, vswitch_id = req.vswitch_id, tags = req.tags or {},
    launch_time = time.iso8601(),
  }
end

--- run(ctx, req) -> instance | nil, err
-- req = {instance_type, zone, capacity_type, vswitch_id, image_id, security_group_ids, tags,
-- client_token, user_data, system_disk = {category, size, performance_level, encrypted, kms_key_id},
-- data_disks = {{size, category, device, performance_level, encrypted, kms_key_id, snapshot_id,
-- delete_with_instance}}, spot_strategy, spot_price_limit, key_pair_name, password, password_inherit,
-- resource_group_id, ram_role_name, launch_template_id, http_endpoint, http_tokens,
-- http_put_response_hop_limit, private_pool = {match_criteria, id}}: what launch.lua decided. One
-- RunInstances with Amount=1; the ClientToken makes a repeated request return the first instance
-- instead of launching a second one.
-- The password goes on the wire only: never into a log or an error.
function M.run(ctx, req)
  local c, err = client_for(ctx)
  if not c then return nil, err end
  local spot = req.capacity_type == "spot"
  local params = {
    RegionId = ctx.region,
    Amount = 1,
    InstanceType = req.instance_type,
    -- The vSwitch fixes the zone; ZoneId is sent too so a mismatch fails loudly instead of
    -- launching somewhere the engine did not choose.
    VSwitchId = req.vswitch_id,
    ZoneId = req.zone,
    ImageId = req.image_id,
    SecurityGroupIds = req.security_group_ids,
    InstanceChargeType = "PostPaid",
    SpotStrategy = req.spot_strategy or (spot and "SpotAsPriceGo" or "NoSpot"),
    SpotPriceLimit = req.spot_price_limit,
    Tag = tag_params(req.tags),
    ClientToken = req.client_token,
    KeyPairName = req.key_pair_name,
    Password = req.password,
    PasswordInherit = req.password_inherit,
    ResourceGroupId = req.resource_group_id,
    RamRoleName = req.ram_role_name ~= "" and req.ram_role_name or nil,
    LaunchTemplateId = req.launch_template_id,
    HttpEndpoint = req.http_endpoint,
    HttpTokens = req.http_tokens,
    HttpPutResponseHopLimit = req.http_put_response_hop_limit,
  }
  if type(req.private_pool) == "table" then
    params.PrivatePoolOptions = { MatchCriteria = req.private_pool.match_criteria, Id = req.private_pool.id }
  end
  if type(req.system_disk) == "table" then
    local d = req.system_disk
    params.SystemDisk = { Category = d.category, Size = d.size, PerformanceLevel = d.performance_level,
      Encrypted = d.encrypted, KMSKeyId = d.kms_key_id }
  end
  if type(req.data_disks) == "table" and #req.data_disks > 0 then
    params.DataDisk = {}
    for i, d in ipairs(req.data_disks) do
      params.DataDisk[i] = { Size = d.size, Category = d.category, Device = d.device,
        PerformanceLevel = d.performance_level, Encrypted = d.encrypted, KMSKeyId = d.kms_key_id,
        SnapshotId = d.snapshot_id, DeleteWithInstance = d.delete_with_instance }
    end
  end
  if type(req.user_data) == "string" and req.user_data ~= "" then
    params.UserData = crypto.base64_encode(req.user_data)
  end
  local body, rerr = c:call("ecs", "RunInstances", params)
  if not body then return nil, rerr end
  local id = list_at(body, "InstanceIdSets", "InstanceIdSet")[1]
  if type(id) ~= "string" then
    return nil, { code = "InvalidResponse", action = "RunInstances", request_id = body.RequestId,
      message = ("RunInstances: InvalidResponse: no InstanceIdSets.InstanceIdSet in the answer (RequestId %s)")
        :format(tostring(body.RequestId)) }
  end
  log.info("instance launched", { instance_id = id, instance_type = req.instance_type, zone = req.zone,
    capacity_type = req.capacity_type, request_id = body.RequestId })
  for n = 1, M.DESCRIBE_NEW_ATTEMPTS do
    local inst, gerr = M.get(ctx, id)
    if inst then return inst end
    if gerr.code ~= "NotFound" then break end
    if n < M.DESCRIBE_NEW_ATTEMPTS then time.sleep(M.DESCRIBE_NEW_WAIT_S) end
  end
  log.debug("new instance not described yet; answering from the request", { instance_id = id })
  return from_request(ctx, req, id)
end

--- tag(ctx, id, tags) -> true | nil, err: sets tags (a map key -> value) on the instance with one
-- TagResources; setting the same tags again changes nothing, so a lost answer may be retried.
function M.tag(ctx, id, tags)
  local c, err = client_for(ctx)
  if not c then return nil, err end
  local body, terr = c:call("ecs", "TagResources", { RegionId = ctx.region, ResourceType = "instance",
    ResourceId = { id }, Tag = tag_params(tags) }, { idempotent = true })
  if not body then return nil, terr end
  log.info("instance tagged", { instance_id = id, request_id = body.RequestId })
  return true
end

--- delete(ctx, id) -> true once deletion is triggered | nil, {code = "NotFound"} when already gone
function M.delete(ctx, id)
  local c, err = client_for(ctx)
  if not c then return nil, err end
  -- Force releases a Running instance without stopping it first. Repeating a delete is safe (the
  -- second answers NotFound), so a lost answer or a 5xx may be retried.
  local body, derr = c:call("ecs", "DeleteInstance", { InstanceId = id, Force = true, TerminateSubscription = true },
    { idempotent = true })
  if not body then return nil, derr end
  log.info("instance deletion triggered", { instance_id = id, request_id = body.RequestId })
  return true
end

return M
