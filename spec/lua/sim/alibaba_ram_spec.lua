-- The Alibaba simulator's RAM: GetRole over the account's roles (the real error for an unknown one),
-- and RunInstances' RamRoleName: recorded on the instance (GET /_sim/state), refused when the role
-- does not exist or does not trust ECS.
local luaprov = require "luaprov"
local s = require "sim.alibaba_support"

local WORKER = "KubernetesWorkerRole-6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"

describe("alibaba simulator: RAM roles", function()
  local sim

  setup(function() sim = s.start() end)
  teardown(function() if sim then sim.stop() end end)
  before_each(function() s.reset(sim) end)

  local function services(role)
    local doc = assert(luaprov.json.decode(role.AssumeRolePolicyDocument))
    local service = doc.Statement[1].Principal.Service
    return type(service) == "string" and { service } or service, doc.Statement[1].Effect
  end

  it("GetRole answers a role with its ARN and its trust policy as a JSON text, in V3 and V2", function()
    for _, scheme in ipairs { "v3", "v2" } do
      local body = s.ok(sim, "ram", "GetRole", { RoleName = "KarpenterNodeRole" }, { scheme = scheme })
      assert.equals("KarpenterNodeRole", body.Role.RoleName)
      assert.equals("acs:ram::1234567890123456:role/KarpenterNodeRole", body.Role.Arn)
      assert.is_string(body.Role.AssumeRolePolicyDocument)
      assert.same({ { "ecs.aliyuncs.com" }, "Allow" }, { services(body.Role) })
      assert.is_string(body.RequestId)
    end
    -- the ACK worker role names the service as a string
    local worker = s.ok(sim, "ram", "GetRole", { RoleName = WORKER }).Role
    assert.equals("ecs.aliyuncs.com",
      assert(luaprov.json.decode(worker.AssumeRolePolicyDocument)).Statement[1].Principal.Service)
    assert.same({ "fc.aliyuncs.com" }, (services(s.ok(sim, "ram", "GetRole", { RoleName = "AliyunFCDefaultRole" })
      .Role)))
  end)

  it("answers EntityNotExist.Role (404) for a role the account does not have", function()
    local status, body = s.call(sim, "ram", "GetRole", { RoleName = "NoSuchRole" })
    assert.equals(404, status)
    assert.equals("EntityNotExist.Role", body.Code)
    assert.matches("acs:ram::1234567890123456:role/NoSuchRole", body.Message, 1, true)
    assert.equals("ram.aliyuncs.com", body.HostId)
    assert.equals(1, s.state(sim).errors.GetRole)
  end)

  describe("RunInstances' RamRoleName", function()
    local function params(extra)
      local p = { RegionId = "cn-hangzhou", InstanceType = "ecs.g7.large",
        ImageId = "aliyun_3_x64_20G_alibase_20240819.vhd", VSwitchId = "vsw-bp1simh0000001",
        ["SecurityGroupIds.1"] = "sg-bp1sim0nodes00001" }
      for k, v in pairs(extra or {}) do p[k] = v end
      return p
    end

    local function recorded(id)
      for _, inst in ipairs(s.state(sim).instances) do
        if inst.id == id then return inst end
      end
    end

    it("records the role on the instance, and no role when none is given", function()
      local id = s.ok(sim, "ecs", "RunInstances", params { RamRoleName = WORKER }).InstanceIdSets.InstanceIdSet[1]
      assert.equals(WORKER, recorded(id).ram_role)
      local plain = s.ok(sim, "ecs", "RunInstances", params()).InstanceIdSets.InstanceIdSet[1]
      assert.equals("", recorded(plain).ram_role)
    end)

    it("refuses a role that does not exist, and one ECS may not assume, launching nothing", function()
      local status, body = s.call(sim, "ecs", "RunInstances", params { RamRoleName = "NoSuchRole" })
      assert.equals(404, status)
      assert.equals("InvalidRamRole.NotFound", body.Code)
      status, body = s.call(sim, "ecs", "RunInstances", params { RamRoleName = "AliyunFCDefaultRole" })
      assert.equals(404, status)
      assert.equals("InvalidRamRole.NotEcsRole", body.Code)
      assert.same({}, s.state(sim).instances)
    end)
  end)
end)
