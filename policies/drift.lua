-- Drift policy: decides whether a running node no longer matches its ECSNodeClass (rule CP5 in
-- docs/contracts.md). The engine calls it about every five minutes per node, so it must be cheap and
-- must not call the cloud: everything it needs is in the NodeClaim, the ECSNodeClass (spec and
-- resolved status) and the instance the engine already holds.
--
-- Returns a DriftReason ("NodeClassDrift", "ImageDrift", "SecurityGroupDrift", "VSwitchDrift"),
-- "" when the node is not drifted, or nil plus a message when the answer is not known yet (the
-- engine then leaves the Drifted condition as it is and asks again later).
local M = {}

M.HASH_ANNOTATION = "karpenter.k8s.alibabacloud/ecsnodeclass-hash"
M.HASH_VERSION_ANNOTATION = "karpenter.k8s.alibabacloud/ecsnodeclass-hash-version"

local function annotation(object, key)
  local metadata = object and object.metadata
  local annotations = metadata and metadata.annotations
  return annotations and annotations[key]
end

-- Whether the status list holds an item whose `field` is value; nil when the list is missing or empty.
-- A scan, not a set: the lists hold a handful of items, and the engine calls this for every node
-- (a table per call is garbage the collector then pays for).
local function listed(list, field, value)
  if type(list) ~= "table" or #list == 0 then return nil end
  if value == nil or value == false then return false end
  for _, item in ipairs(list) do
    if type(item) == "table" and item[field] == value then return true end
  end
  return false
end

local function contains(list, value)
  for _, v in ipairs(list) do
    if v == value then return true end
  end
  return false
end

local NONE = {} -- the groups of an instance that lists none (only read)

-- NodeClassDrift needs no API call: both objects carry the hash of the hashed NodeClass fields. A
-- hash-version mismatch means the hash algorithm changed, not the class, so it is not drift.
function M.static_drift(nodeclaim, nodeclass)
  local claim_hash = annotation(nodeclaim, M.HASH_ANNOTATION)
  local class_hash = annotation(nodeclass, M.HASH_ANNOTATION)
  local claim_version = annotation(nodeclaim, M.HASH_VERSION_ANNOTATION)
  local class_version = annotation(nodeclass, M.HASH_VERSION_ANNOTATION)
  if claim_hash and class_hash and claim_version and claim_version == class_version and claim_hash ~= class_hash then
    return "NodeClassDrift"
  end
  return ""
end

-- Drift when the instance's value is not among the ids the class resolved into status[field].
local function membership_drift(nodeclass, field, value, reason, what)
  local found = listed(nodeclass.status and nodeclass.status[field], "id", value)
  if found == nil then return nil, "no " .. what .. " are resolved in the ECSNodeClass status yet" end
  if not found then return reason end
  return ""
end

function M.image_drift(nodeclass, instance)
  return membership_drift(nodeclass, "images", instance.image_id, "ImageDrift", "images")
end

-- Exact set equality: an extra group on either side is drift.
function M.security_group_drift(nodeclass, instance)
  local wanted = nodeclass.status and nodeclass.status.securityGroups
  if type(wanted) ~= "table" or #wanted == 0 then
    return nil, "no security groups are resolved in the ECSNodeClass status yet"
  end
  local actual = instance.security_group_ids or NONE
  for _, id in ipairs(actual) do
    if not listed(wanted, "id", id) then return "SecurityGroupDrift" end
  end
  for _, item in ipairs(wanted) do
    if type(item) == "table" and item.id and not contains(actual, item.id) then return "SecurityGroupDrift" end
  end
  return ""
end

function M.vswitch_drift(nodeclass, instance)
  return membership_drift(nodeclass, "vSwitches", instance.vswitch_id, "VSwitchDrift", "vSwitches")
end

-- The checks in the order of rule CP5 (cheapest first); the first reason found wins.
M.checks = { M.image_drift, M.security_group_drift, M.vswitch_drift }

function M.is_drifted(nodeclaim, nodeclass, instance, _ctx)
  local reason = M.static_drift(nodeclaim, nodeclass)
  if reason ~= "" then return reason end
  for _, check in ipairs(M.checks) do
    local found, err = check(nodeclass, instance)
    if found == nil then return nil, err end
    if found ~= "" then return found end
  end
  return ""
end

return M
