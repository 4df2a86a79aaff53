-- The node's RAM role (spec.role of an ECSNodeClass): checked with RAM GetRole when the class is
-- resolved, so a role that is missing or that ECS may not assume shows as a condition of the class
-- (RAMRoleResolved False, root Ready False: no NodePool launches from it) instead of as a launch
-- that fails again and again. launch.lua sends the role as RunInstances' RamRoleName.
--
-- Public:
--   resolve(c, cerr, nodeclass) -> ram_role (the role's name, or nil), condition {type, status, reason, message}
--   trusts_ecs(document) -> true | false, why       (document: AssumeRolePolicyDocument, a JSON text)
--
-- Conditions (type RAMRoleResolved):
--   True  RAMRoleResolved      the role exists and its trust policy lets ECS assume it; or no role is set
--   False RoleNotFound         GetRole answered EntityNotExist.Role
--   False InvalidAssumePolicy  the trust policy does not let ECS assume the role, or cannot be parsed
--   Unknown GetRoleFailed      any other error (the message has the API code and the RequestId); the
--                              ramRole resolved before is kept while it names the same role
local luaprov = require "luaprov"

local json = luaprov.json

local M = {}

M.CONDITION = "RAMRoleResolved"
M.ECS_SERVICE = "ecs.aliyuncs.com"

local function present(v)
  return v ~= nil and v ~= json.null
end

local function condition(status, reason, message)
  return { type = M.CONDITION, status = status, reason = reason, message = message }
end

-- Principal.Service is a string or a list of strings.
local function names_ecs(service)
  if type(service) == "string" then return service == M.ECS_SERVICE end
  if type(service) ~= "table" then return false end
  for _, s in ipairs(service) do
    if s == M.ECS_SERVICE then return true end
  end
  return false
end

function M.trusts_ecs(document)
  if type(document) ~= "string" or document == "" then
    return false, "its AssumeRolePolicyDocument is empty"
  end
  local ok, doc = pcall(json.decode, document)
  if not ok or type(doc) ~= "table" then
    return false, "its AssumeRolePolicyDocument cannot be parsed as JSON"
  end
  if type(doc.Statement) ~= "table" then
    return false, "its AssumeRolePolicyDocument has no Statement list"
  end
  for _, st in ipairs(doc.Statement) do
    if type(st) == "table" and st.Effect == "Allow" and type(st.Principal) == "table"
        and names_ecs(st.Principal.Service) then
      return true
    end
  end
  return false, ("its trust policy has no Allow statement whose Principal.Service is %s"):format(M.ECS_SERVICE)
end

function M.resolve(c, cerr, nodeclass)
  local spec = present(nodeclass.spec) and nodeclass.spec or {}
  local name = spec.role
  if not present(name) or name == "" then
    return nil, condition("True", M.CONDITION, "no spec.role is set: instances launch without a RAM role")
  end
  if type(name) ~= "string" then
    return nil, condition("False", "RoleNotFound", "spec.role must be the name of a RAM role")
  end
  local status = present(nodeclass.status) and nodeclass.status or {}
  local kept = status.ramRole == name and name or nil
  if not c then
    return kept, condition("Unknown", "GetRoleFailed", "GetRole: " .. tostring(cerr and (cerr.message or cerr.code)))
  end
  local body, err = c:call("ram", "GetRole", { RoleName = name })
  if not body then
    if (err.api_code or err.code) == "EntityNotExist.Role" then
      return nil, condition("False", "RoleNotFound", ("RAM role %s does not exist (%s)"):format(name, err.message))
    end
    return kept, condition("Unknown", "GetRoleFailed", tostring(err.message or err.code))
  end
  local role = type(body.Role) == "table" and body.Role or {}
  local ok, why = M.trusts_ecs(role.AssumeRolePolicyDocument)
  if not ok then
    return nil, condition("False", "InvalidAssumePolicy", ("ECS cannot assume RAM role %s: %s"):format(name, why))
  end
  local resolved = type(role.RoleName) == "string" and role.RoleName or name
  return resolved, condition("True", M.CONDITION, ("RAM role %s can be assumed by ECS"):format(resolved))
end

return M
