-- Builders of the objects policies receive, in their `kubectl get -o json` shape. The defaults agree
-- with each other: kit.nodeclaim(), kit.nodeclass() and kit.instance() describe a node that is not
-- drifted (same hash, same image, security group and vSwitch), so a spec changes only what it tests.
local merge = require "luaprov.testkit.merge"

local list, copy = merge.list, merge.copy

local M = {}

M.HASH_ANNOTATION = "karpenter.k8s.alibabacloud/ecsnodeclass-hash"
M.HASH_VERSION_ANNOTATION = "karpenter.k8s.alibabacloud/ecsnodeclass-hash-version"

-- The ids every default uses; specs read them instead of repeating literals.
M.defaults = {
  cluster_id = "c-test", region = "cn-hangzhou", zone = "cn-hangzhou-h",
  nodepool = "default", nodeclass = "default", nodeclaim = "default-x7k2p",
  instance_id = "i-bp1abcdef0123456789", image_id = "aliyun_3_x64_20G_alibase_20241218.vhd",
  security_group_id = "sg-bp1nodes", vswitch_id = "vsw-bp1h", hash = "6d9f4c2b1a8e7f30", hash_version = "lp1",
  creation_timestamp = "2026-11-30T03:00:00Z",
}
local D = M.defaults

local function build(base, overrides)
  assert(overrides == nil or type(overrides) == "table", "kit builders take a table of overrides")
  return merge.merge(base, overrides)
end

function M.nodeclaim(overrides)
  return build({
    apiVersion = "karpenter.sh/v1", kind = "NodeClaim",
    metadata = {
      name = D.nodeclaim, uid = "4f1b2c3d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", creationTimestamp = D.creation_timestamp,
      labels = { ["karpenter.sh/nodepool"] = D.nodepool, ["kubernetes.io/arch"] = "amd64",
        ["karpenter.sh/capacity-type"] = "on-demand", ["topology.kubernetes.io/zone"] = D.zone },
      annotations = { [M.HASH_ANNOTATION] = D.hash, [M.HASH_VERSION_ANNOTATION] = D.hash_version },
    },
    spec = {
      nodeClassRef = { group = "karpenter.alibabacloud.com", kind = "ECSNodeClass", name = D.nodeclass },
      requirements = list { { key = "karpenter.sh/capacity-type", operator = "In", values = list { "on-demand" } } },
    },
    status = { providerID = D.region .. "." .. D.instance_id, imageID = D.image_id, nodeName = "node-" .. D.nodeclaim },
  }, overrides)
end

function M.nodeclass(overrides)
  return build({
    apiVersion = "karpenter.alibabacloud.com/v1alpha1", kind = "ECSNodeClass",
    metadata = {
      name = D.nodeclass,
      annotations = { [M.HASH_ANNOTATION] = D.hash, [M.HASH_VERSION_ANNOTATION] = D.hash_version },
    },
    spec = {
      vSwitchSelectorTerms = list { { tags = { ["karpenter.sh/discovery"] = "test" } } },
      securityGroupSelectorTerms = list { { tags = { ["karpenter.sh/discovery"] = "test" } } },
      imageSelectorTerms = list { { alias = "AlibabaCloudLinux3" } },
    },
    status = {
      vSwitches = list { { id = D.vswitch_id, zoneID = D.zone }, { id = "vsw-bp1i", zoneID = "cn-hangzhou-i" } },
      securityGroups = list { { id = D.security_group_id, name = "nodes" } },
      images = list { { id = D.image_id, name = "Alibaba Cloud Linux 3", requirements = list {
        { key = "kubernetes.io/arch", operator = "In", values = list { "amd64" } } } } },
      conditions = list { { type = "Ready", status = "True", reason = "Ready", message = "" } },
    },
  }, overrides)
end

function M.nodepool(overrides)
  return build({
    apiVersion = "karpenter.sh/v1", kind = "NodePool",
    metadata = { name = D.nodepool, labels = {} },
    spec = {
      template = {
        metadata = { labels = {} },
        spec = {
          nodeClassRef = { group = "karpenter.alibabacloud.com", kind = "ECSNodeClass", name = D.nodeclass },
          requirements = list { { key = "karpenter.sh/capacity-type", operator = "In",
            values = list { "on-demand" } } },
        },
      },
      disruption = { consolidationPolicy = "WhenEmptyOrUnderutilized", budgets = list { { nodes = "10%" } } },
      limits = { cpu = "1000" },
    },
  }, overrides)
end

function M.node(overrides)
  return build({
    apiVersion = "v1", kind = "Node",
    metadata = {
      name = "node-" .. D.nodeclaim, creationTimestamp = D.creation_timestamp,
      labels = { ["karpenter.sh/nodepool"] = D.nodepool, ["kubernetes.io/arch"] = "amd64",
        ["topology.kubernetes.io/zone"] = D.zone, ["karpenter.sh/initialized"] = "true" },
    },
    spec = { providerID = D.region .. "." .. D.instance_id },
    status = {
      conditions = list { { type = "Ready", status = "True", reason = "KubeletReady",
        lastTransitionTime = D.creation_timestamp } },
      addresses = list { { type = "InternalIP", address = "10.0.1.17" } },
    },
  }, overrides)
end

-- The instance shape (docs/contracts.md#the-instance-shape), as the drift policy receives it
-- (spec/fixtures/eval/instance.json).
function M.instance(overrides)
  return build({
    id = D.instance_id, region = D.region, zone = D.zone, instance_type = "ecs.g7.large",
    capacity_type = "on-demand", image_id = D.image_id, state = "running",
    security_group_ids = list { D.security_group_id }, vswitch_id = D.vswitch_id, private_ip = "10.0.1.17",
    tags = { ["kubernetes.io/cluster/" .. D.cluster_id] = "owned", ["karpenter.sh/nodepool"] = D.nodepool },
    launch_time = D.creation_timestamp,
  }, overrides)
end

-- A Bizfly worker pool as GET /_/<cluster>/pools/<id> answers it (providers/bizfly/pools.lua reads
-- the listing fields id, name, enable_autoscaling, min_size, max_size, desired_size, flavor and the
-- nodes' id, physical_id, name, status, status_reason).
function M.bizfly_pool(overrides)
  local pool = build({
    id = "pool-general", name = "general", flavor = "nix.2c_4g", enable_autoscaling = true,
    min_size = 1, max_size = 5, desired_size = 1, labels = {}, taints = list {},
    nodes = list { { id = "pn-1", physical_id = "srv-1", name = "general-1", status = "ACTIVE", status_reason = "" } },
  }, overrides)
  return pool
end

-- A pod bound to the default node, as the disruption policy receives it in its pods list.
function M.pod(overrides)
  return build({
    apiVersion = "v1", kind = "Pod",
    metadata = { name = "web-0", namespace = "default", labels = {} },
    spec = { nodeName = "node-" .. D.nodeclaim, containers = list { { name = "web", image = "nginx" } } },
    status = { phase = "Running" },
  }, overrides)
end

-- The `ctx` of the disruption policy (can_disrupt): a single-node consolidation of the default pool at
-- 12:00 local time on the defaults' day. Pass `now = os.time { ... }` for another local time.
function M.disruption_ctx(overrides)
  return build({
    reason = "Underutilized", nodepool = D.nodepool, method = "single-node consolidation",
    now = os.time { year = 2026, month = 11, day = 30, hour = 12, min = 0, sec = 0 },
  }, overrides)
end

-- The `ctx` the engine passes to tag and drift policies.
function M.ctx(overrides)
  return build({ cluster_id = D.cluster_id, region = D.region }, overrides)
end

M.copy = copy
return M
