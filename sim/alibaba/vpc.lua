-- VPC (2016-04-28) actions: DescribeVSwitches (what vSwitch selectors resolve against) and DescribeVpcs.
-- VPC spells response tags Key/Value, unlike ECS's TagKey/TagValue; both appear on the wire, so a client
-- has to read each product in its own spelling.
local account = require "sim.alibaba.account"
local catalogue = require "sim.alibaba.catalogue"
local wire = require "sim.alibaba.wire"

local list = wire.list

local M = {}

local function vpc_tags(map)
  local keys = {}
  for k in pairs(map) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = { Key = k, Value = map[k] } end
  return { Tag = list(out) }
end

local function region(p)
  local r = wire.str(p, "RegionId")
  if r and r ~= catalogue.REGION then
    wire.fail(404, "InvalidRegionId.NotFound", ("The specified RegionId does not exist. (The simulator serves %s.)")
      :format(catalogue.REGION))
  end
  return r
end

function M.DescribeVSwitches(call)
  local p = call.params
  local r, vpc = region(p), wire.str(p, "VpcId")
  if not r and not vpc then wire.missing("RegionId") end
  local ids
  local id = wire.str(p, "VSwitchId")
  if id then
    ids = {}
    for one in id:gmatch("[^,%s]+") do ids[one] = true end
  end
  local zone, name = wire.str(p, "ZoneId"), wire.str(p, "VSwitchName")
  local is_default = wire.bool(p, "IsDefault")
  local filters = wire.tags(p, "Tag", 20)
  local matched = {}
  for _, v in ipairs(account.vswitches()) do
    if (not ids or ids[v.id]) and (not vpc or v.vpc == vpc) and (not zone or v.zone == zone)
      and (not name or v.name == name) and (is_default == nil or v.is_default == is_default)
      and wire.match_tags(v.tags, filters) then
      matched[#matched + 1] = v
    end
  end
  table.sort(matched, function(a, b) return a.id < b.id end)
  local page, number, size = wire.page_by_number(matched, p, 10, 50)
  local out = {}
  for i, v in ipairs(page) do
    out[i] = { VSwitchId = v.id, VSwitchName = v.name, VpcId = v.vpc, ZoneId = v.zone, CidrBlock = v.cidr,
      Ipv6CidrBlock = "", EnabledIpv6 = false, AvailableIpAddressCount = account.available_ips(v),
      Status = "Available", IsDefault = v.is_default, CreationTime = account.CREATED, Description = v.description,
      NetworkAclId = "", OwnerId = tonumber(account.ACCOUNT_ID), ResourceGroupId = account.RESOURCE_GROUP,
      ShareType = "", RouteTable = { RouteTableId = "vtb-bp1sim0" .. v.vpc:sub(-5), RouteTableType = "System" },
      Tags = vpc_tags(v.tags) }
  end
  return { TotalCount = #matched, PageNumber = number, PageSize = size, VSwitches = { VSwitch = list(out) } }
end

function M.DescribeVpcs(call)
  local p = call.params
  region(p)
  if not p.RegionId or p.RegionId == "" then wire.missing("RegionId") end
  local want = wire.str(p, "VpcId")
  local ids
  if want then
    ids = {}
    for one in want:gmatch("[^,%s]+") do ids[one] = true end
  end
  local filters = wire.tags(p, "Tag", 20)
  local matched = {}
  for _, v in ipairs(account.vpcs()) do
    if (not ids or ids[v.id]) and wire.match_tags(v.tags, filters) then matched[#matched + 1] = v end
  end
  local page, number, size = wire.page_by_number(matched, p, 10, 50)
  local out = {}
  for i, v in ipairs(page) do
    local vsws = {}
    for _, s in ipairs(account.vswitches()) do
      if s.vpc == v.id then vsws[#vsws + 1] = s.id end
    end
    out[i] = { VpcId = v.id, VpcName = v.name, CidrBlock = v.cidr, Status = "Available", RegionId = catalogue.REGION,
      IsDefault = false, CreationTime = account.CREATED, OwnerId = tonumber(account.ACCOUNT_ID),
      ResourceGroupId = account.RESOURCE_GROUP, VSwitchIds = { VSwitchId = list(vsws) }, Tags = vpc_tags(v.tags) }
  end
  return { TotalCount = #matched, PageNumber = number, PageSize = size, Vpcs = { Vpc = list(out) } }
end

return M
