-- examples/deploy/ram-policy.json is exactly what the mapping calls: the whole life of a node (class
-- resolved with its node RAM role and capacity reservations, instance types, a launch with the ACK
-- bootstrap, describe, list, the Name tag, delete) runs against the Alibaba simulator, and the
-- actions the simulator counted must all be allowed by the policy, and the policy must allow nothing
-- else (least privilege, docs/deploying.md).
local luaprov = require "luaprov"
local mapping = require "providers.alibaba"
local session = require "providers.alibaba.session"

local json = luaprov.json
local source_dir = os.getenv("LUAPROV_SOURCE_DIR") or "."

-- The RAM service of each action the simulator serves outside ECS; STS AssumeRoleWithOIDC needs no
-- permission (the OIDC token is the credential), so it is not in a policy.
local SERVICE = { DescribeVSwitches = "vpc", DescribeClusterAttachScripts = "cs", DescribeClusterNodePools = "cs",
  GetRole = "ram", AssumeRoleWithOIDC = false }

-- Permissions that are no API call of their own: ram:PassRole lets RunInstances hand the instance the
-- ECSNodeClass's spec.role (RamRoleName); it is needed when a launch sent one.
local function implied(state)
  local out = {}
  for _, inst in ipairs(state.instances) do
    if inst.ram_role ~= "" then out["ram:PassRole"] = true end
  end
  return out
end

local function policy_actions()
  local f = assert(io.open(source_dir .. "/examples/deploy/ram-policy.json"))
  local policy = assert(json.decode(f:read("a")))
  f:close()
  local actions = {}
  for _, statement in ipairs(policy.Statement) do
    assert.equals("Allow", statement.Effect)
    for _, action in ipairs(statement.Action) do actions[action] = true end
  end
  return actions
end

describe("examples/deploy/ram-policy.json", function()
  local simulator = dofile(source_dir .. "/spec/fixtures/alibaba/simulator.lua")
  local sim, ctx

  setup(function()
    sim = simulator.start()
    ctx = sim:session("luaprov-sim")
  end)
  teardown(function()
    if sim then sim:stop() end
    session.reset()
  end)

  it("allows every action a node's life calls, and nothing more", function()
    sim:reset()
    local nc = { metadata = { name = "default" }, spec = {
      vSwitchSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
      securityGroupSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
      imageSelectorTerms = { { alias = "AlibabaCloudLinux3" } },
      role = "KarpenterNodeRole",
      capacityReservationSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
    } }
    nc.status = mapping.resolve_nodeclass(ctx, nc)
    local types = assert(mapping.instance_types(ctx, nc))
    local offerings = {}
    for _, t in ipairs(types) do
      for _, o in ipairs(t.offerings) do
        if o.available and t.name == "ecs.g7.large" then
          offerings[#offerings + 1] = { instance_type = t.name, zone = o.zone, capacity_type = o.capacity_type,
            price = o.price, client_token = "ram-" .. o.zone .. "-" .. o.capacity_type, type = t }
        end
      end
    end
    assert.is_true(#offerings > 0)
    local inst = assert(mapping.create(ctx, { nodeclass = nc, offerings = offerings,
      nodeclaim = { spec = {},
        metadata = { name = "default-ram", uid = "uid-ram", labels = { ["karpenter.sh/nodepool"] = "default" } } },
      tags = { ["kubernetes.io/cluster/luaprov-sim"] = "owned" } }))
    local needed = implied(sim:state()) -- while the instance is there to show what its launch sent
    sim:advance(120) -- Running: an instance still initializing cannot be deleted
    assert(mapping.get(ctx, inst.id))
    assert(mapping.list(ctx))
    assert(mapping.registered(ctx, inst.id, "node-ram"))
    assert(mapping.delete(ctx, inst.id))

    local allowed, called = policy_actions(), needed
    for action, n in pairs(sim:state().calls) do
      local service = SERVICE[action]
      if service == nil then service = "ecs" end
      if service and n > 0 then
        local name = service .. ":" .. action
        called[name] = true
        assert.is_true(allowed[name] == true, name .. " is called but not allowed")
      end
    end
    for action in pairs(allowed) do
      assert.is_true(called[action] == true, action .. " is allowed but never called")
    end
  end)
end)
