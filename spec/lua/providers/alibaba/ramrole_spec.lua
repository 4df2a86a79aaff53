-- The node's RAM role (providers/alibaba/ramrole.lua): spec.role checked with RAM GetRole into
-- status.ramRole and the RAMRoleResolved condition (every reason), root Ready False when the role
-- cannot be used, and the launch's RamRoleName. First against an in-process fake of the APIs, then
-- against the Alibaba simulator over real HTTP.
local luaprov = require "luaprov"
local harness = require "spec.fixtures.alibaba.harness"
local launching = require "spec.fixtures.alibaba.launching"
local nodeclass = require "providers.alibaba.nodeclass"
local ramrole = require "providers.alibaba.ramrole"

local json = luaprov.json

local cond = launching.cond

local function trust(statements)
  return assert(json.encode({ Version = "1", Statement = statements }))
end

local ECS_ROLE = trust { { Action = "sts:AssumeRole", Effect = "Allow",
  Principal = { Service = { "ecs.aliyuncs.com" } } } }

local DATA = {
  region = "cn-fake",
  vswitches = { { VSwitchId = "vsw-a", ZoneId = "cn-fake-i", AvailableIpAddressCount = 100, tags = { team = "a" } } },
  security_groups = { { SecurityGroupId = "sg-1", SecurityGroupName = "nodes", tags = { team = "a" } } },
  images = { { ImageId = "m-custom", ImageName = "golden", Architecture = "x86_64", ImageOwnerAlias = "self" } },
  roles = {
    KarpenterNodeRole = ECS_ROLE,
    StringService = trust { { Effect = "Allow", Principal = { Service = "ecs.aliyuncs.com" } } },
    OtherService = trust { { Effect = "Allow", Principal = { Service = { "fc.aliyuncs.com", "cs.aliyuncs.com" } } } },
    DeniedEcs = trust { { Effect = "Deny", Principal = { Service = "ecs.aliyuncs.com" } } },
    AccountOnly = trust { { Effect = "Allow", Principal = { RAM = { "acs:ram::1:root" } } } },
    Broken = "{not json",
  },
}

local function class(role, status)
  return { metadata = { name = "default" }, status = status, spec = {
    vSwitchSelectorTerms = { { tags = { team = "a" } } }, securityGroupSelectorTerms = { { tags = { team = "a" } } },
    imageSelectorTerms = { { id = "m-custom" } }, role = role } }
end

describe("ramrole.trusts_ecs", function()
  it("accepts an Allow statement naming ECS as a string or in a list", function()
    assert.is_true(ramrole.trusts_ecs(DATA.roles.KarpenterNodeRole))
    assert.is_true(ramrole.trusts_ecs(DATA.roles.StringService))
    assert.is_true(ramrole.trusts_ecs(trust { { Effect = "Allow", Principal = { Service = "fc.aliyuncs.com" } },
      { Effect = "Allow", Principal = { Service = { "cs.aliyuncs.com", "ecs.aliyuncs.com" } } } }))
  end)

  it("refuses other services, Deny, principals that are not services, and a document it cannot parse", function()
    for _, name in ipairs { "OtherService", "DeniedEcs", "AccountOnly" } do
      local ok, why = ramrole.trusts_ecs(DATA.roles[name])
      assert.is_false(ok, name)
      assert.matches("no Allow statement whose Principal.Service is ecs.aliyuncs.com", why, 1, true)
    end
    local ok, why = ramrole.trusts_ecs("{not json")
    assert.is_false(ok)
    assert.matches("cannot be parsed", why, 1, true)
    assert.matches("no Statement", select(2, ramrole.trusts_ecs('{"Version":"1"}')), 1, true)
    assert.matches("empty", select(2, ramrole.trusts_ecs(nil)), 1, true)
  end)
end)

describe("nodeclass.resolve: spec.role (fake cloud)", function()
  local cloud
  before_each(function()
    cloud = harness.fake_cloud(DATA)
    cloud.install()
  end)
  after_each(function() cloud.uninstall() end)

  it("resolves a role ECS may assume into status.ramRole, RAMRoleResolved True and Ready True", function()
    local status = nodeclass.resolve(cloud.ctx, class("KarpenterNodeRole"))
    assert.equals("KarpenterNodeRole", status.ramRole)
    assert.same({ type = "RAMRoleResolved", status = "True", reason = "RAMRoleResolved",
      message = "RAM role KarpenterNodeRole can be assumed by ECS" }, cond(status, "RAMRoleResolved"))
    assert.equals("True", cond(status, "Ready").status)
    assert.equals(1, cloud.calls.GetRole)
  end)

  it("says no role is set, True, without calling RAM", function()
    local status = nodeclass.resolve(cloud.ctx, class(nil))
    assert.is_nil(status.ramRole)
    local c = cond(status, "RAMRoleResolved")
    assert.equals("True", c.status)
    assert.equals("RAMRoleResolved", c.reason)
    assert.matches("no spec.role is set", c.message, 1, true)
    assert.is_nil(cloud.calls.GetRole)
    assert.equals("True", cond(nodeclass.resolve(cloud.ctx, class("")), "RAMRoleResolved").status)
  end)

  it("makes a missing role RoleNotFound and the class not Ready", function()
    local status = nodeclass.resolve(cloud.ctx, class("NoSuchRole"))
    assert.is_nil(status.ramRole)
    local c = cond(status, "RAMRoleResolved")
    assert.equals("False", c.status)
    assert.equals("RoleNotFound", c.reason)
    assert.matches("RAM role NoSuchRole does not exist", c.message, 1, true)
    assert.matches("EntityNotExist.Role", c.message, 1, true)
    assert.same({ type = "Ready", status = "False", reason = "UnhealthyDependents", message = "RAMRoleResolved=False" },
      cond(status, "Ready"))
  end)

  it("makes a role ECS may not assume InvalidAssumePolicy, saying why", function()
    local c = cond(nodeclass.resolve(cloud.ctx, class("OtherService")), "RAMRoleResolved")
    assert.same({ "False", "InvalidAssumePolicy" }, { c.status, c.reason })
    assert.matches("ECS cannot assume RAM role OtherService: its trust policy has no Allow statement", c.message, 1,
      true)
    local broken = nodeclass.resolve(cloud.ctx, class("Broken"))
    c = cond(broken, "RAMRoleResolved")
    assert.same({ "False", "InvalidAssumePolicy" }, { c.status, c.reason })
    assert.matches("cannot be parsed", c.message, 1, true)
    assert.equals("False", cond(broken, "Ready").status)
  end)

  it("makes another API error GetRoleFailed (Unknown) with the code and RequestId, keeping status.ramRole", function()
    cloud.faults.GetRole = { status = 403, code = "NoPermission", message = "not authorized" }
    local status = nodeclass.resolve(cloud.ctx, class("KarpenterNodeRole", { ramRole = "KarpenterNodeRole" }))
    assert.equals("KarpenterNodeRole", status.ramRole)
    local c = cond(status, "RAMRoleResolved")
    assert.same({ "Unknown", "GetRoleFailed" }, { c.status, c.reason })
    assert.matches("NoPermission", c.message, 1, true)
    assert.matches("RequestId req-fault", c.message, 1, true)
    assert.same({ type = "Ready", status = "Unknown", reason = "ReconcilingDependents",
      message = "RAMRoleResolved=Unknown" }, cond(status, "Ready"))
    -- a status that named another role (spec.role changed) is not kept
    assert.is_nil(nodeclass.resolve(cloud.ctx, class("KarpenterNodeRole", { ramRole = "OldRole" })).ramRole)
  end)
end)

describe("spec.role against the Alibaba simulator", function()
  local env = launching.new("c-role")
  local WORKER = "KubernetesWorkerRole-6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
  setup(env.start) teardown(env.stop) before_each(env.before) after_each(env.after)

  local function sim_class(role) return env.class { role = role } end
  local function create(nc) return env.create(nc, "ecs.g7.large", "cn-hangzhou-h") end
  local recorded = env.recorded

  it("resolves the ACK worker role and the official example's role", function()
    for _, role in ipairs { WORKER, "KarpenterNodeRole" } do
      local status = sim_class(role).status
      assert.equals(role, status.ramRole)
      assert.equals("True", cond(status, "RAMRoleResolved").status)
      assert.equals("True", cond(status, "Ready").status)
    end
  end)

  it("reports the simulator's missing role and its role for another service", function()
    local missing = sim_class("KarpenterNodeRoleTypo").status
    assert.equals("RoleNotFound", cond(missing, "RAMRoleResolved").reason)
    assert.matches("RequestId [%w-]+", cond(missing, "RAMRoleResolved").message)
    assert.equals("False", cond(missing, "Ready").status)
    assert.equals("InvalidAssumePolicy", cond(sim_class("AliyunFCDefaultRole").status, "RAMRoleResolved").reason)
  end)

  it("reports a RAM outage as GetRoleFailed", function()
    env.sim:fault { action = "GetRole", kind = "5xx", status = 503 }
    local c = cond(sim_class("KarpenterNodeRole").status, "RAMRoleResolved")
    env.sim:admin("DELETE", "/_sim/faults")
    assert.same({ "Unknown", "GetRoleFailed" }, { c.status, c.reason })
    assert.matches("ServiceUnavailable", c.message, 1, true)
  end)

  it("launches with RamRoleName = spec.role, and without one when no role is set", function()
    local inst = assert(create(sim_class("KarpenterNodeRole")))
    assert.equals("KarpenterNodeRole", recorded(inst.id).ram_role)
    local plain = assert(create(sim_class(nil)))
    assert.equals("", recorded(plain.id).ram_role)
  end)
end)
