-- ECSNodeClass resolution and hash (providers/alibaba/nodeclass.lua): selector terms to status and
-- conditions (docs/controllers.md#ecsnodeclass-status-nodeclass), the hash. First against an
-- in-process fake of the APIs, then against the Alibaba simulator over real HTTP.
local luaprov = require "luaprov"
local harness = require "spec.fixtures.alibaba.harness"
local nodeclass = require "providers.alibaba.nodeclass"

local json = luaprov.json

local function class(spec, status)
  return { metadata = { name = "default" }, spec = spec, status = status }
end

local function ids(list)
  local out = {}
  for i, x in ipairs(list) do out[i] = x.id end
  return out
end

local function cond(status, type_)
  for _, c in ipairs(status.conditions) do
    if c.type == type_ then return c end
  end
end

local DATA = {
  region = "cn-fake",
  vswitches = {
    { VSwitchId = "vsw-b", ZoneId = "cn-fake-h", AvailableIpAddressCount = 100, tags = { team = "a", env = "prod" } },
    { VSwitchId = "vsw-a", ZoneId = "cn-fake-i", AvailableIpAddressCount = 100, tags = { team = "a" } },
    { VSwitchId = "vsw-c", ZoneId = "cn-fake-i", AvailableIpAddressCount = 250, tags = { team = "a" } },
    { VSwitchId = "vsw-d", ZoneId = "cn-fake-j", AvailableIpAddressCount = 5, tags = { team = "b" } },
  },
  security_groups = {
    { SecurityGroupId = "sg-3", SecurityGroupName = "nodes", tags = { team = "a" } },
    { SecurityGroupId = "sg-1", SecurityGroupName = "nodes-extra", tags = { team = "a" } },
    { SecurityGroupId = "sg-2", SecurityGroupName = "other", tags = { team = "b" } },
  },
  images = {
    { ImageId = "aliyun_3_x64_20G_alibase_20240101.vhd", ImageName = "aliyun_3_x64_20G_alibase_20240101.vhd",
      Architecture = "x86_64", ImageOwnerAlias = "system", CreationTime = "2024-01-01T00:00:00Z" },
    { ImageId = "aliyun_3_x64_20G_alibase_20240819.vhd", ImageName = "aliyun_3_x64_20G_alibase_20240819.vhd",
      Architecture = "x86_64", ImageOwnerAlias = "system", CreationTime = "2024-08-19T00:00:00Z" },
    { ImageId = "aliyun_3_arm64_20G_alibase_20240819.vhd", ImageName = "aliyun_3_arm64_20G_alibase_20240819.vhd",
      Architecture = "arm64", ImageOwnerAlias = "system", CreationTime = "2024-08-19T00:00:00Z" },
    { ImageId = "aliyun_3_x64_20G_container_optimized_alibase_20240901.vhd", ImageName = "acl3-co",
      Architecture = "x86_64", ImageOwnerAlias = "system", CreationTime = "2024-09-01T00:00:00Z" },
    { ImageId = "m-container-os", ImageName = "ContainerOS 3.3", Architecture = "x86_64",
      ImageOwnerAlias = "system", CreationTime = "2024-05-01T00:00:00Z" },
    { ImageId = "m-i386", ImageName = "old", Architecture = "i386", ImageOwnerAlias = "self" },
    { ImageId = "m-custom", ImageName = "golden", Architecture = "x86_64", ImageOwnerAlias = "self",
      tags = { golden = "yes" } },
  },
}

local FULL_SPEC = {
  vSwitchSelectorTerms = { { tags = { team = "a" } } },
  securityGroupSelectorTerms = { { tags = { team = "a" } } },
  imageSelectorTerms = { { alias = "AlibabaCloudLinux3" } },
}

-- FULL_SPEC with some fields replaced.
local function spec_with(over)
  local s = {}
  for k, v in pairs(FULL_SPEC) do s[k] = v end
  for k, v in pairs(over) do s[k] = v end
  return s
end

describe("nodeclass.resolve (fake cloud)", function()
  local cloud
  before_each(function()
    cloud = harness.fake_cloud(DATA)
    cloud.install()
  end)
  after_each(function() cloud.uninstall() end)

  it("resolves vSwitches by tags, most free addresses first (kept in the status), then by ID", function()
    local status = nodeclass.resolve(cloud.ctx, class(FULL_SPEC))
    assert.same({ "vsw-c", "vsw-a", "vsw-b" }, ids(status.vSwitches))
    assert.same({ id = "vsw-c", zone = "cn-fake-i", zoneID = "cn-fake-i", availableIPAddressCount = 250 },
      status.vSwitches[1])
    assert.equals(json.array_mt, getmetatable(status.vSwitches))
  end)

  it("resolves vSwitches by id, and ORs terms without duplicates", function()
    local terms = { { id = "vsw-d" }, { tags = { env = "prod" } }, { id = "vsw-b" } }
    local spec = spec_with { vSwitchSelectorTerms = terms }
    local status = nodeclass.resolve(cloud.ctx, class(spec))
    assert.same({ "vsw-b", "vsw-d" }, ids(status.vSwitches))
  end)

  it("treats a tag value * as any value", function()
    local spec = { vSwitchSelectorTerms = { { tags = { env = "*" } } },
      securityGroupSelectorTerms = { { id = "sg-2" } }, imageSelectorTerms = { { id = "m-custom" } } }
    assert.same({ "vsw-b" }, ids(nodeclass.resolve(cloud.ctx, class(spec)).vSwitches))
  end)

  it("resolves security groups by tags, id and name, sorted by ID", function()
    local status = nodeclass.resolve(cloud.ctx, class(FULL_SPEC))
    assert.same({ { id = "sg-1", name = "nodes-extra" }, { id = "sg-3", name = "nodes" } }, status.securityGroups)
    local spec = spec_with { securityGroupSelectorTerms = { { name = "nodes" }, { id = "sg-2" } } }
    assert.same({ "sg-2", "sg-3" }, ids(nodeclass.resolve(cloud.ctx, class(spec)).securityGroups))
  end)

  it("resolves the AlibabaCloudLinux3 alias to the newest alibase image per architecture", function()
    local status = nodeclass.resolve(cloud.ctx, class(FULL_SPEC))
    assert.same({
      { id = "aliyun_3_arm64_20G_alibase_20240819.vhd", name = "aliyun_3_arm64_20G_alibase_20240819.vhd",
        architecture = "arm64", creationTime = "2024-08-19T00:00:00Z",
        requirements = { { key = "kubernetes.io/arch", operator = "In", values = { "arm64" } } } },
      { id = "aliyun_3_x64_20G_alibase_20240819.vhd", name = "aliyun_3_x64_20G_alibase_20240819.vhd",
        architecture = "amd64", creationTime = "2024-08-19T00:00:00Z",
        requirements = { { key = "kubernetes.io/arch", operator = "In", values = { "amd64" } } } },
    }, status.images)
  end)

  it("resolves the ContainerOS alias (with a version, which is ignored), ids and names", function()
    local function images(terms)
      return ids(nodeclass.resolve(cloud.ctx, class(spec_with { imageSelectorTerms = terms })).images)
    end
    assert.same({ "m-container-os" }, images { { alias = "ContainerOS@latest" } })
    assert.same({ "m-custom" }, images { { id = "m-custom" } })
    assert.same({ "m-custom" }, images { { name = "golden" } })
    assert.same({ "m-custom" }, images { { tags = { golden = "yes" } } })
    -- one image per architecture: the earlier term wins
    assert.same({ "m-custom", "aliyun_3_arm64_20G_alibase_20240819.vhd" },
      images { { id = "m-custom" }, { alias = "AlibabaCloudLinux3" } })
    -- an architecture Kubernetes does not run is skipped
    assert.same({}, images { { id = "m-i386" } })
  end)

  it("reports every dependent and Ready True when all resolve", function()
    local status = nodeclass.resolve(cloud.ctx, class(FULL_SPEC))
    assert.same({
      { type = "CapacityReservationResolved", status = "True", reason = "CapacityReservationResolved",
        message = "no capacityReservationSelectorTerms are set" },
      { type = "ImageResolved", status = "True", reason = "ImageResolved", message = "" },
      { type = "RAMRoleResolved", status = "True", reason = "RAMRoleResolved",
        message = "no spec.role is set: instances launch without a RAM role" },
      { type = "Ready", status = "True", reason = "Ready", message = "" },
      { type = "SecurityGroupResolved", status = "True", reason = "SecurityGroupResolved", message = "" },
      { type = "UserDataReady", status = "True", reason = "UserDataReady", message = "" },
      { type = "VSwitchResolved", status = "True", reason = "VSwitchResolved", message = "" },
      { type = "ValidationSucceeded", status = "True", reason = "ValidationSucceeded", message = "" },
    }, status.conditions)
  end)

  it("makes a spec the launch cannot read a condition, not a launch failure", function()
    local spec = {}
    for k, v in pairs(FULL_SPEC) do spec[k] = v end
    spec.kubelet, spec.kubeletConfiguration = { maxPods = 20 }, { maxPods = 30 }
    local status = nodeclass.resolve(cloud.ctx, class(spec))
    local c = cond(status, "ValidationSucceeded")
    assert.equals("False", c.status)
    assert.equals("InvalidSpec", c.reason)
    assert.matches("spec.kubelet and spec.kubeletConfiguration (its earlier name) are both set", c.message, 1, true)
    assert.equals("False", cond(status, "Ready").status)
  end)

  it("makes a userData the cluster type cannot use a condition, not a launch failure", function()
    local spec = {}
    for k, v in pairs(FULL_SPEC) do spec[k] = v end
    spec.userData = "MIME-Version: 1.0\nInvalid-Content"
    local status = nodeclass.resolve(cloud.ctx, class(spec))
    local c = cond(status, "UserDataReady")
    assert.equals("False", c.status)
    assert.equals("InvalidUserData", c.reason)
    assert.matches("spec.userData", c.message, 1, true)
    assert.equals("False", cond(status, "Ready").status)
    -- a Custom cluster runs the user's data as it is: nothing to refuse
    local custom = { cluster_type = "Custom" }
    for k, v in pairs(cloud.ctx) do custom[k] = v end
    assert.equals("True", cond(nodeclass.resolve(custom, class(spec)), "UserDataReady").status)
  end)

  it("sets upstream's reasons and messages when a selector matches nothing", function()
    local spec = { vSwitchSelectorTerms = { { id = "vsw-none" } }, securityGroupSelectorTerms = { { name = "none" } },
      imageSelectorTerms = { { id = "m-none" } } }
    local status = nodeclass.resolve(cloud.ctx, class(spec))
    assert.same({}, status.vSwitches)
    assert.equals(json.array_mt, getmetatable(status.vSwitches))
    assert.same({ type = "VSwitchResolved", status = "False", reason = "VSwitchResolutionFailed",
      message = "VSwitchSelector did not match any VSwitches" }, cond(status, "VSwitchResolved"))
    assert.same({ type = "SecurityGroupResolved", status = "False", reason = "SecurityGroupResolutionFailed",
      message = "SecurityGroupSelector did not match any SecurityGroups" }, cond(status, "SecurityGroupResolved"))
    assert.same({ type = "ImageResolved", status = "False", reason = "ImageResolutionFailed",
      message = "ImageSelector did not match any Images" }, cond(status, "ImageResolved"))
    assert.same({ type = "Ready", status = "False", reason = "UnhealthyDependents",
      message = "VSwitchResolved=False, SecurityGroupResolved=False, ImageResolved=False" }, cond(status, "Ready"))
  end)

  it("says which terms could not be sent", function()
    local status = nodeclass.resolve(cloud.ctx, class(spec_with {
      vSwitchSelectorTerms = { { tags = {} } }, securityGroupSelectorTerms = { { id = "" } } }))
    assert.matches("vSwitchSelectorTerms[1] has neither id nor tags", cond(status, "VSwitchResolved").message, 1, true)
    assert.matches("securityGroupSelectorTerms[1] has neither id, name nor tags",
      cond(status, "SecurityGroupResolved").message, 1, true)
    assert.equals(0, cloud.calls.DescribeVSwitches or 0)
  end)

  it("says why an unknown image alias matches nothing", function()
    local spec = spec_with { imageSelectorTerms = { { alias = "Ubuntu" } } }
    local c = cond(nodeclass.resolve(cloud.ctx, class(spec)), "ImageResolved")
    assert.equals("ImageResolutionFailed", c.reason)
    assert.matches('unknown image alias "Ubuntu"', c.message, 1, true)
  end)

  it("turns an API error into an Unknown condition naming the action and request, not a crash", function()
    cloud.faults.DescribeSecurityGroups = { status = 403, code = "Forbidden.RAM", message = "not authorized" }
    local status = nodeclass.resolve(cloud.ctx, class(FULL_SPEC))
    local c = cond(status, "SecurityGroupResolved")
    assert.equals("Unknown", c.status)
    assert.equals("DescribeSecurityGroupsFailed", c.reason)
    assert.matches("Forbidden.RAM", c.message, 1, true)
    assert.matches("req-fault", c.message, 1, true)
    assert.same({ type = "Ready", status = "Unknown", reason = "ReconcilingDependents",
      message = "SecurityGroupResolved=Unknown" }, cond(status, "Ready"))
    -- the other dependents still resolved
    assert.equals(3, #status.vSwitches)
    assert.equals("True", cond(status, "VSwitchResolved").status)
  end)

  it("keeps the previously resolved list when the API fails", function()
    cloud.faults.DescribeVSwitches = { status = 503, code = "ServiceUnavailable" }
    local before = { vSwitches = { { id = "vsw-old", zoneID = "cn-fake-h" } } }
    local status = nodeclass.resolve(cloud.ctx, class(FULL_SPEC, before))
    assert.same({ { id = "vsw-old", zoneID = "cn-fake-h" } }, status.vSwitches)
    assert.matches("keeping the 1 resolved before", cond(status, "VSwitchResolved").message, 1, true)
  end)

  it("reports a client that cannot be built on every dependent", function()
    cloud.uninstall()
    local session = require "providers.alibaba.session"
    local saved = session.client
    session.client = function() return nil, { code = "InvalidConfig", message = "no Alibaba Cloud region" } end
    local ok, status = pcall(nodeclass.resolve, {}, class(FULL_SPEC))
    session.client = saved
    assert.is_true(ok)
    for _, t in ipairs { "VSwitchResolved", "SecurityGroupResolved", "ImageResolved" } do
      assert.equals("Unknown", cond(status, t).status)
      assert.matches("no Alibaba Cloud region", cond(status, t).message, 1, true)
    end
  end)
end)

describe("nodeclass.hash", function()
  local base = harness.load_json("ecsnodeclass.json")

  local function copy(v)
    return json.decode(json.encode(v))
  end

  it("is 16 hex digits with our own version", function()
    local h, v = nodeclass.hash(base)
    assert.matches("^%x+$", h)
    assert.equals(16, #h)
    assert.equals("lp2", v)
  end)

  it("is stable across key order and table construction", function()
    local a = { spec = { tags = { b = "2", a = "1" }, kubeletConfiguration = { maxPods = 64 },
      systemDisk = { categories = { "cloud_essd" }, volumeSize = "40Gi" } } }
    local b = { spec = {} }
    b.spec.kubeletConfiguration = { maxPods = 64.0 }
    b.spec.systemDisk = { volumeSize = "40Gi" }
    b.spec.systemDisk.categories = { "cloud_essd" }
    b.spec.tags = {}
    b.spec.tags.a = "1"
    b.spec.tags.b = "2"
    local decoded = json.decode('{"spec":{"tags":{"a":"1","b":"2"},"kubeletConfiguration":{"maxPods":64},'
      .. '"systemDisk":{"volumeSize":"40Gi","categories":["cloud_essd"]}}}')
    assert.equals(nodeclass.hash(a), nodeclass.hash(b))
    assert.equals(nodeclass.hash(a), nodeclass.hash(decoded))
  end)

  it("ignores selector-term edits, metadata and status", function()
    local edited = copy(base)
    edited.spec.vSwitchSelectorTerms = { { id = "vsw-other" } }
    edited.spec.securityGroupSelectorTerms = { { name = "x" } }
    edited.spec.imageSelectorTerms = { { alias = "ContainerOS" } }
    edited.status = json.null
    edited.metadata.annotations = { x = "y" }
    assert.equals(nodeclass.hash(base), nodeclass.hash(edited))
  end)

  it("treats zero values as absent", function()
    local a = copy(base)
    a.spec.formatDataDisk = false
    a.spec.kubeletConfiguration.clusterDNS = {}
    a.spec.resourceGroupId = json.null
    assert.equals(nodeclass.hash(base), nodeclass.hash(a))
  end)

  it("changes with every hashed field", function()
    local h = nodeclass.hash(base)
    local edits = {
      function(s) s.vSwitchSelectionPolicy = "balanced" end,
      function(s) s.kubeletConfiguration.maxPods = 64 end,
      function(s) s.systemDisk.volumeSize = "80Gi" end,
      function(s) s.systemDisk.categories = { "cloud_auto", "cloud_essd" } end,
      function(s) s.dataDisks = { { volumeSize = "100Gi" } } end,
      function(s)
        s.dataDisks = { { volumeSize = "100Gi" } }
        s.dataDiskCategories = { "cloud_auto" }
      end,
      function(s) s.formatDataDisk = true end,
      function(s) s.tags.team = "b" end,
      function(s) s.resourceGroupId = "rg-abc" end,
      function(s) s.userData = "#!/bin/sh\necho hi" end,
      function(s) s.keyPairName = "key1" end,
      function(s) s.passwordInherit = true end,
    }
    local seen = { [h] = true }
    for i, edit in ipairs(edits) do
      local c = copy(base)
      edit(c.spec)
      local h2 = nodeclass.hash(c)
      assert.is_nil(seen[h2], "edit " .. i .. " did not change the hash")
      seen[h2] = true
    end
  end)
end)

-- The simulator's account (sim/alibaba/account.lua): one vSwitch per zone tagged for discovery, an
-- untagged nearly full one in zone h, another VPC's vSwitch tagged team=other; security groups
-- "nodes" and "extra" tagged for discovery; Alibaba Cloud Linux 3 images of two dates (x86) and arm64.
describe("nodeclass.resolve against the Alibaba simulator", function()
  local sim
  local DISCOVERY = { ["karpenter.sh/discovery"] = "luaprov-sim" }
  local SIM_SPEC = {
    vSwitchSelectorTerms = { { tags = DISCOVERY } },
    securityGroupSelectorTerms = { { tags = DISCOVERY } },
    imageSelectorTerms = { { alias = "AlibabaCloudLinux3" } },
  }

  local function resolve(over)
    local spec = {}
    for k, v in pairs(SIM_SPEC) do spec[k] = v end
    for k, v in pairs(over or {}) do spec[k] = v end
    return nodeclass.resolve(sim.ctx, class(spec))
  end

  setup(function()
    sim = harness.start_sim()
    sim.use_credentials(harness.sim_credentials())
  end)
  teardown(function() if sim then sim.stop() end end)
  after_each(function() sim.admin("DELETE", "/_sim/faults") end)

  it("resolves every selector and reports Ready", function()
    local status = resolve()
    assert.same({ "vsw-bp1simh0000001", "vsw-bp1simi0000001", "vsw-bp1simj0000001", "vsw-bp1simk0000001" },
      ids(status.vSwitches))
    assert.equals("cn-hangzhou-h", status.vSwitches[1].zoneID)
    assert.same({ { id = "sg-bp1sim0extra00001", name = "luaprov-sim-extra" },
      { id = "sg-bp1sim0nodes00001", name = "luaprov-sim-nodes" } }, status.securityGroups)
    -- the newest alibase build per architecture, not the 2023 one
    assert.same({ "aliyun_3_arm64_20G_alibase_20240819.vhd", "aliyun_3_x64_20G_alibase_20240819.vhd" },
      ids(status.images))
    assert.same({ "arm64" }, status.images[1].requirements[1].values)
    assert.equals("True", cond(status, "Ready").status)
    assert(json.encode(status))
  end)

  it("orders vSwitches by free addresses, then by ID", function()
    local status = resolve { vSwitchSelectorTerms = { { id = "vsw-bp1simh0000002" }, { tags = DISCOVERY } } }
    assert.same({ "vsw-bp1simh0000001", "vsw-bp1simi0000001", "vsw-bp1simj0000001", "vsw-bp1simk0000001",
      "vsw-bp1simh0000002" }, ids(status.vSwitches))       -- the nearly full one last
  end)

  it("matches tags across VPCs and ANDs id with tags inside a term", function()
    assert.same({ "vsw-bp1simi0000003" }, ids(resolve({ vSwitchSelectorTerms = { { tags = { team = "other" } } } })
      .vSwitches))
    local status = resolve { vSwitchSelectorTerms = { { id = "vsw-bp1simh0000002", tags = DISCOVERY } } }
    assert.same({}, status.vSwitches)
    assert.equals("VSwitchResolutionFailed", cond(status, "VSwitchResolved").reason)
  end)

  it("resolves security groups by name and by id", function()
    assert.same({ "sg-bp1sim0default001" },
      ids(resolve({ securityGroupSelectorTerms = { { name = "default" } } }).securityGroups))
    local terms = { { id = "sg-bp1sim0other00001" }, { name = "luaprov-sim-nodes" } }
    assert.same({ "sg-bp1sim0nodes00001", "sg-bp1sim0other00001" },
      ids(resolve({ securityGroupSelectorTerms = terms }).securityGroups))
  end)

  it("resolves images by id and by tags", function()
    local status = resolve { imageSelectorTerms = { { id = "m-bp1sim0custom00001" } } }
    assert.same({ { id = "m-bp1sim0custom00001", name = "luaprov-sim-node-2024", architecture = "amd64",
      creationTime = "2024-09-02T10:00:00Z", -- the simulator's DescribeImages CreationTime, unchanged
      requirements = { { key = "kubernetes.io/arch", operator = "In", values = { "amd64" } } } } }, status.images)
    assert.same({ "m-bp1sim0custom00001" }, ids(resolve({ imageSelectorTerms = { { tags = DISCOVERY } } }).images))
  end)

  it("reports each selector that matches nothing, and Ready False", function()
    local status = resolve {
      vSwitchSelectorTerms = { { tags = { team = "nobody" } } },
      securityGroupSelectorTerms = { { name = "nobody" } },
      imageSelectorTerms = { { alias = "ContainerOS" } },    -- the simulated region has none
    }
    assert.equals("VSwitchResolutionFailed", cond(status, "VSwitchResolved").reason)
    assert.equals("SecurityGroupResolutionFailed", cond(status, "SecurityGroupResolved").reason)
    assert.equals("ImageResolutionFailed", cond(status, "ImageResolved").reason)
    assert.same({ type = "Ready", status = "False", reason = "UnhealthyDependents",
      message = "VSwitchResolved=False, SecurityGroupResolved=False, ImageResolved=False" }, cond(status, "Ready"))
  end)

  it("turns API errors into conditions with the action, code and request ID", function()
    sim.admin("POST", "/_sim/faults", { { action = "DescribeVSwitches", code = "Forbidden.RAM" },
      { action = "DescribeImages", kind = "5xx", status = 503 } })
    local before = { vSwitches = { { id = "vsw-bp1simh0000001", zoneID = "cn-hangzhou-h" } } }
    local status = nodeclass.resolve(sim.ctx, class(SIM_SPEC, before))
    local v = cond(status, "VSwitchResolved")
    assert.equals("Unknown", v.status)
    assert.equals("DescribeVSwitchesFailed", v.reason)
    assert.matches("Forbidden.RAM", v.message, 1, true)
    assert.matches("RequestId [%w-]+", v.message)
    assert.same(before.vSwitches, status.vSwitches)
    local i = cond(status, "ImageResolved")
    assert.equals("DescribeImagesFailed", i.reason)
    assert.matches("ServiceUnavailable", i.message, 1, true)
    assert.equals("True", cond(status, "SecurityGroupResolved").status)
    assert.equals("ReconcilingDependents", cond(status, "Ready").reason)
  end)
end)
