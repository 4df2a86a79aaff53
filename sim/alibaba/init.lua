-- Alibaba Cloud simulator: ECS, VPC, STS and RAM on one endpoint, told apart by the API version, speaking
-- the real RPC wire format (V2 and V3 signatures); the Container Service's ROA paths (/clusters/...);
-- the ECS metadata service's credential paths and the unsigned admin paths under /_sim/. Served by
-- `luaprov sim` through handle(request).
--
-- Routing only; the parts are: wire (parsing, responses, errors), auth (signatures, credentials,
-- STS, metadata), catalogue and account (what exists), state (instances, tokens, counts), faults,
-- ecs / instances / reservations / tags / vpc / cs / ram (the actions), admin (/_sim/).
--
-- handle never raises: bad input gets the API's error, and a bug in an action answers InternalError
-- (HTTP 500) with the cause logged, the way the real gateway hides its internals.
local luaprov = require "luaprov"
local admin = require "sim.alibaba.admin"
local auth = require "sim.alibaba.auth"
local cs = require "sim.alibaba.cs"
local ecs = require "sim.alibaba.ecs"
local faults = require "sim.alibaba.faults"
local instances = require "sim.alibaba.instances"
local ram = require "sim.alibaba.ram"
local reservations = require "sim.alibaba.reservations"
local reclaim = require "sim.alibaba.reclaim"
local state = require "sim.alibaba.state"
local tags = require "sim.alibaba.tags"
local vpc = require "sim.alibaba.vpc"
local wire = require "sim.alibaba.wire"

local M = {}

local ACTIONS = {
  ecs = {
    DescribeRegions = ecs.DescribeRegions,
    DescribeZones = ecs.DescribeZones,
    DescribeInstanceTypes = ecs.DescribeInstanceTypes,
    DescribeInstanceTypeFamilies = ecs.DescribeInstanceTypeFamilies,
    DescribeAvailableResource = ecs.DescribeAvailableResource,
    DescribePrice = ecs.DescribePrice,
    DescribeSpotPriceHistory = ecs.DescribeSpotPriceHistory,
    DescribeImages = ecs.DescribeImages,
    DescribeSecurityGroups = ecs.DescribeSecurityGroups,
    DescribeCapacityReservations = reservations.DescribeCapacityReservations,
    RunInstances = instances.RunInstances,
    DescribeInstances = instances.DescribeInstances,
    DescribeInstanceStatus = instances.DescribeInstanceStatus,
    DeleteInstance = instances.DeleteInstance,
    DeleteInstances = instances.DeleteInstances,
    AddTags = tags.AddTags,
    RemoveTags = tags.RemoveTags,
    TagResources = tags.TagResources,
    UntagResources = tags.UntagResources,
    ListTagResources = tags.ListTagResources,
  },
  vpc = {
    DescribeVSwitches = vpc.DescribeVSwitches,
    DescribeVpcs = vpc.DescribeVpcs,
  },
  sts = {
    AssumeRoleWithOIDC = auth.AssumeRoleWithOIDC,
    AssumeRole = auth.AssumeRole,
    GetCallerIdentity = auth.GetCallerIdentity,
  },
  ram = {
    GetRole = ram.GetRole,
  },
}

local PER_CALL_ERRORS = { error = true, throttle = true, ["5xx"] = true }

-- The gateway's order: which API (action and version), who is calling (signature), the gateway's
-- own refusals (fault rules standing in for throttling and outages), then the action.
-- The RPC action a call names, or the API's error.
local function rpc_action(call)
  if not call.action or call.action == "" then
    wire.fail(400, "MissingAction", "Action is mandatory for this action.")
  end
  if not call.version or call.version == "" then
    wire.fail(400, "MissingVersion", "Version is mandatory for this action.")
  end
  if not call.product then wire.fail(400, "InvalidVersion", "Specified parameter Version is not valid.") end
  local action = ACTIONS[call.product][call.action]
  if not action then
    wire.fail(404, "InvalidAction.NotFound", "Specified api is not found, please check your url and method.")
  end
  return action
end

local function serve(call, rule_out)
  local action
  if call.roa then
    cs.check(call)
    action = cs[call.action]
  else
    action = rpc_action(call)
  end
  auth.verify(call)
  local rule = faults.take(call)
  rule_out.rule = rule
  if rule and PER_CALL_ERRORS[rule.kind] then
    local headers
    if rule.code:find("^Throttling") then
      headers = { ["x-ratelimit-user-api"] = "Limit:1,Remain:0,TimeLeft:2000,Reset:2000" }
    end
    wire.fail(rule.status, rule.code, rule.message, headers)
  end
  if call.roa then return wire.roa_ok(call, action(call)) end
  return wire.ok(call, action(call))
end

local function api(request)
  local parsed, call = pcall(wire.parse, request)
  if not parsed then
    luaprov.log.error("alibaba simulator could not parse a request", { error = tostring(call) })
    return wire.json_response(400, { Code = "InvalidParameter", Message = "The request could not be parsed." })
  end
  cs.route(call)
  local applied = {}
  local ok, res = pcall(serve, call, applied)
  if not ok then
    if not wire.is_api_error(res) then
      luaprov.log.error("alibaba simulator action failed", { action = call.action, error = tostring(res),
        request_id = call.request_id })
      res = { status = 500, code = "InternalError",
        message = "The request processing has failed due to some unknown error, exception or failure." }
    end
    res = wire.error_response(call, res)
  end
  state.count(call.action, res.status >= 400)
  local rule = applied.rule
  if rule and rule.kind == "malformed" then
    res.body = rule.body or res.body:sub(1, #res.body // 2)
  elseif rule and rule.kind == "timeout" then
    -- Answer late, after the call took effect: the client gives up, and a retry must not act twice.
    luaprov.time.sleep(rule.seconds)
  end
  return res
end

--- handle(request) -> response. The engine's entry point (engine/script/handler.h).
function M.handle(request)
  local path = type(request) == "table" and type(request.path) == "string" and request.path or "/"
  local ok, res = pcall(function()
    reclaim.sweep() -- instances whose reclaim time passed are gone before anyone looks
    if path:sub(1, 6) == "/_sim/" or path == "/_sim" then return admin.handle(request) end
    if path:sub(1, 8) == "/latest/" then return auth.metadata(request) end
    return nil
  end)
  if not ok then
    luaprov.log.error("alibaba simulator admin path failed", { path = path, error = tostring(res) })
    return wire.json_response(500, { error = tostring(res) })
  end
  if res then return res end
  return api(request)
end

return M
