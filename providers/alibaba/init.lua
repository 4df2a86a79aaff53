-- The Alibaba Cloud ECS mapping behind Karpenter's CloudProvider contract (docs/contracts.md#mappings;
-- the table of what the engine passes and expects is in providers/alibaba/README.md). This file only
-- wires the contract names to the modules that do the work; the engine enforces rules CP1–CP9
-- (docs/contracts.md#cloudprovider-rules) around every result.
local bootstrap = require "providers.alibaba.bootstrap"
local instances = require "providers.alibaba.instances"
local launch = require "providers.alibaba.launch"
local instancetypes = require "providers.alibaba.instancetypes"
local nodeclass = require "providers.alibaba.nodeclass"
local demo = require "providers.alibaba.demo"

local M = {}

M.name = "alibabacloud"

-- The node class this mapping resolves and launches from: the engine watches `resource` in
-- `group/version`, answers GetSupportedNodeClasses with it, holds a deleted class with `finalizer`
-- and stamps the hash annotations static drift compares. Read once when the engine starts; a reload
-- that changes it is refused (docs/contracts.md#the-node-class-descriptor).
-- The group is the official Alibaba provider's, so its ECSNodeClasses and NodePools apply unchanged;
-- luaprov's earlier group stays watched as an alias (docs/alibaba.md#the-ecsnodeclass). The finalizer
-- and the annotations keep their earlier names: existing classes and NodeClaims carry them.
M.nodeclass = {
  group = "karpenter.alibabacloud.com",
  aliases = { "karpenter.k8s.alibabacloud" },
  version = "v1alpha1",
  kind = "ECSNodeClass",
  resource = "ecsnodeclasses",
  finalizer = "karpenter.k8s.alibabacloud/termination",
  hash_annotation = "karpenter.k8s.alibabacloud/ecsnodeclass-hash",
  hash_version_annotation = "karpenter.k8s.alibabacloud/ecsnodeclass-hash-version",
}

-- The provider settings `luaprov run` takes as `--<name> VALUE` or from the first environment
-- variable set, passed to every call as ctx[name with "-" -> "_"] (docs/contracts.md#settings).
-- `sim` is the value used under --sim when none is given.
M.settings = {
  {
    name = "region",
    env = { "REGION_ID", "ALIBABA_CLOUD_REGION_ID" },
    required = true,
    sim = "cn-hangzhou",
    help = "the Alibaba Cloud region of the cluster, e.g. cn-hangzhou",
  },
  {
    -- no default here: bootstrap.lua takes ACKManaged when ctx.cluster_type is absent
    name = "cluster-type",
    env = { "LUAPROV_ALIBABA_CLUSTER_TYPE" },
    help = "how nodes join the cluster: ACKManaged (the default; the ACK attach script), Kubeadm "
      .. "(kubeadm join of spec.clusterEndpoint) or Custom (spec.userData as it is)",
  },
  -- Cluster type Kubeadm (providers/alibaba/kubeadm.lua). Its bootstrap token is a secret, and the
  -- engine logs every setting, so it is no setting: the mapping reads LUAPROV_KUBEADM_TOKEN itself, as
  -- it reads its credentials. The sim values are the simulated cluster's (sim/alibaba/kubeadm.lua).
  {
    name = "kubeadm-ca-cert-hash",
    env = { "LUAPROV_KUBEADM_CA_CERT_HASH" },
    sim = "sha256:868dca96097a88ad2250dfe5fdeae2c0a897c366fef2207fa7e914d57cad9b25",
    help = "cluster type Kubeadm: sha256:<hex> of the cluster CA's public key (the bootstrap token is read "
      .. "from $LUAPROV_KUBEADM_TOKEN, never a setting: settings are logged)",
  },
}

-- The only hosts this mapping's modules may send requests to (docs/lua-api.md#capabilities): the
-- public and VPC endpoints of every product and region, the ECS metadata service, and whatever the
-- operator points these variables at (the simulator under --sim, a private gateway, a regional STS).
M.endpoints = {
  hosts = { "*.aliyuncs.com", "100.100.100.200" },
  env = { "LUAPROV_ALIBABA_ENDPOINT", "LUAPROV_ALIBABA_METADATA_ENDPOINT", "ALIBABA_CLOUD_STS_ENDPOINT" },
}

-- Under `luaprov run --sim`: the simulator standing in for Alibaba Cloud (sim/alibaba), the variable
-- that sends every product to its URL, and the simulator's own, published credentials and kubeadm
-- bootstrap token (docs/sim.md).
M.sim = {
  service = "alibaba",
  endpoint_env = "LUAPROV_ALIBABA_ENDPOINT",
  env = {
    ALIBABA_CLOUD_ACCESS_KEY_ID = "LTAI5simulatoraccess",
    ALIBABA_CLOUD_ACCESS_KEY_SECRET = "simulator-secret-do-not-use",
    -- the simulated kubeadm cluster's bootstrap token (cluster type Kubeadm)
    LUAPROV_KUBEADM_TOKEN = "lpsim1.kubeadmsimulator",
  },
}

-- What `luaprov demo` applies and edits for this cloud (providers/alibaba/demo.lua).
M.demo = demo

-- The instance fields this mapping adds to the neutral instance shape
-- (docs/contracts.md#the-instance-shape): `luaprov eval --instance` accepts them besides the neutral ones.
M.instance_fields = { "region", "security_group_ids", "vswitch_id" }

-- The drift reasons policies/drift.lua may return besides the engine's own NodeClassDrift
-- (rule CP5): `luaprov check` and every IsDrifted answer are checked against them.
M.drift_reasons = { "ImageDrift", "SecurityGroupDrift", "VSwitchDrift" }

M.resolve_nodeclass = nodeclass.resolve
M.nodeclass_hash = nodeclass.hash
M.instance_types = instancetypes.list
-- The user data a launch sends (`luaprov eval user-data` prints it): (ctx, nodeclaim, nodeclass,
-- capacity_type) -> text | nil, err.
M.user_data = bootstrap.user_data

-- launch = {nodeclaim, nodeclass, tags, offerings}: launch.lua chooses one and launches it.
function M.create(ctx, request)
  return launch.create(ctx, request)
end

function M.delete(ctx, instance_id)
  return instances.delete(ctx, instance_id)
end

function M.get(ctx, instance_id)
  return instances.get(ctx, instance_id)
end

-- Optional in the contract: the engine's drift pass describes the instances of up to 100 NodeClaims at
-- once (DescribeInstances InstanceIds, one call per 100 ids) instead of one get per NodeClaim. An id
-- missing from the answer is not found; released instances are absent, as in get.
function M.get_many(ctx, instance_ids)
  return instances.describe(ctx, instance_ids)
end

function M.list(ctx)
  return instances.list(ctx)
end

-- The Node conditions that announce the instance's interruption: ACK raises InstanceExpired on the
-- Node of a spot instance the cloud will reclaim (about 5 minutes ahead; docs/alibaba.md#spot-interruption).
M.interruption_conditions = { "InstanceExpired" }

-- Called once a NodeClaim's Node registered: the instance gets the Node's name as its Name tag, so the
-- console shows which node an instance is.
function M.registered(ctx, instance_id, node_name)
  if type(node_name) ~= "string" or node_name == "" then
    return nil, { code = "InvalidParameter", message = "registered: node_name must be a non-empty string" }
  end
  return instances.tag(ctx, instance_id, { Name = node_name })
end

-- ACK's node providerID: "<region>.<instance-id>", e.g. "cn-hangzhou.i-bp1abc".
function M.provider_id(instance)
  if type(instance) ~= "table" then return nil, "provider_id: instance must be a table" end
  local region, id = instance.region, instance.id
  if type(region) ~= "string" or region == "" or type(id) ~= "string" or id == "" then
    return nil, "provider_id: the instance needs a region and an id"
  end
  return region .. "." .. id
end

-- The inverse, split at the last dot as upstream's greedy `(.*)\.(.*)` does, so
-- "a.b.c" is region "a.b" and instance "c". A scheme some tools prefix ("alicloud://") is dropped.
-- Stricter than upstream where upstream accepts garbage: an empty region or instance ID is an error.
function M.parse_provider_id(s)
  if type(s) ~= "string" then return nil, "parse_provider_id: expected a string, got " .. type(s) end
  local region, id = s:gsub("^%a[%w+.-]*://", ""):match("^(.*)%.([^.]*)$")
  if not region or region == "" or id == "" then
    return nil, ("parsing instance id %q: want <region>.<instance-id>, e.g. cn-hangzhou.i-bp1abc"):format(s)
  end
  return { region = region, instance_id = id }
end

return M
