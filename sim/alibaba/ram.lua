-- RAM (Resource Access Management, API 2015-05-01) of the simulated account: the roles an
-- ECSNodeClass's spec.role names, and GetRole. Each role has a trust policy
-- (AssumeRolePolicyDocument, a JSON text as the real API returns it): the ACK worker role and the
-- official Karpenter example's KarpenterNodeRole trust ECS (Principal.Service as a string and as a
-- list), AliyunFCDefaultRole trusts Function Compute only, so an instance cannot take it.
-- RunInstances asks exists() and trusts_ecs() of a RamRoleName (instances.lua).
local luaprov = require "luaprov"
local account = require "sim.alibaba.account"
local wire = require "sim.alibaba.wire"

local json = luaprov.json

local M = {}

M.ECS_SERVICE = "ecs.aliyuncs.com"
M.WORKER_ROLE = "KubernetesWorkerRole-6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
M.NODE_ROLE = "KarpenterNodeRole"
M.OTHER_SERVICE_ROLE = "AliyunFCDefaultRole"

local function trust(service)
  return assert(json.encode({ Version = "1", Statement = { { Action = "sts:AssumeRole", Effect = "Allow",
    Principal = { Service = service } } } }))
end

local roles

--- reset(): the account's roles.
function M.reset()
  roles = {}
  local function role(name, id, services, description)
    roles[name] = { name = name, id = id, document = trust(services), description = description }
  end
  role(M.WORKER_ROLE, "300800000000000001", M.ECS_SERVICE, "The role of the ACK cluster's worker nodes")
  role(M.NODE_ROLE, "300800000000000002", setmetatable({ M.ECS_SERVICE }, json.array_mt),
    "The nodes Karpenter launches")
  role(M.OTHER_SERVICE_ROLE, "300800000000000003", setmetatable({ "fc.aliyuncs.com" }, json.array_mt),
    "Function Compute's default role")
end

local function arn(name)
  return ("acs:ram::%s:role/%s"):format(account.ACCOUNT_ID, name)
end

--- get(name) -> the role or nil.
function M.get(name)
  return roles[name]
end

--- trusts_ecs(role) -> whether its trust policy lets ECS assume it (an Allow statement naming the
-- ECS service).
function M.trusts_ecs(role)
  local doc = json.decode(role.document)
  for _, st in ipairs(doc.Statement or {}) do
    local services = st.Principal and st.Principal.Service
    if type(services) == "string" then services = { services } end
    for _, s in ipairs(st.Effect == "Allow" and services or {}) do
      if s == M.ECS_SERVICE then return true end
    end
  end
  return false
end

function M.GetRole(call)
  local name = wire.required(call.params, "RoleName")
  local role = roles[name]
  if not role then
    wire.fail(404, "EntityNotExist.Role", ("The role not exists: %s."):format(arn(name)))
  end
  return { Role = { RoleId = role.id, RoleName = role.name, Arn = arn(role.name), Description = role.description,
    AssumeRolePolicyDocument = role.document, MaxSessionDuration = 3600, IsServiceLinkedRole = false,
    CreateDate = account.CREATED, UpdateDate = account.CREATED } }
end

M.reset()

return M
