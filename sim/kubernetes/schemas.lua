-- The schemas of the kinds the simulator serves, in the OpenAPI v3 shape and names the apiserver
-- publishes ("io.k8s.api.core.v1.Node", "sh.karpenter.v1.NodePool"): the components of the
-- /openapi/v3 documents, and what `fieldValidation=Strict` (kubectl's default) checks bodies against.
--
-- Permissive where the simulator does not model a type (a pod's spec keeps unknown fields), exact where
-- an unknown field is a mistake worth a 400: object metadata, the top level of every kind, lease specs,
-- and the Karpenter CRDs' specs down to the fields examples/deploy/crds declares.
local wire = require "sim.kubernetes.wire"

local array = wire.array

local M = {}

local META = "io.k8s.apimachinery.pkg.apis.meta.v1."
local INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"

-- ---- a small vocabulary for schemas ----------------------------------------------------------

local function ref(name) return { ["$ref"] = "#/components/schemas/" .. name } end
local function str() return { type = "string" } end
local function int() return { type = "integer", format = "int32" } end
local function bool() return { type = "boolean" } end
local function time() return { type = "string", format = "date-time" } end
local function strings() return { type = "array", items = str() } end
local function string_map() return { type = "object", additionalProperties = str() } end
local function free() return { type = "object", ["x-kubernetes-preserve-unknown-fields"] = true } end
local function list_of(items) return { type = "array", items = items } end
local function object(properties, required)
  return { type = "object", properties = properties, required = required and array(required) or nil }
end

local function resource_body(spec, status)
  return { apiVersion = str(), kind = str(), metadata = ref(META .. "ObjectMeta"), spec = spec, status = status }
end

-- ---- the kinds -------------------------------------------------------------------------------

local requirement = object { key = str(), operator = str(), values = strings(), minValues = int() }
local taint = object { key = str(), value = str(), effect = str(), timeAdded = time() }
local node_class_ref = object({ group = str(), kind = str(), name = str() }, { "group", "kind", "name" })

local nodeclaim_spec = object({
  requirements = list_of(requirement), taints = list_of(taint), startupTaints = list_of(taint),
  nodeClassRef = node_class_ref, resources = object { requests = free() }, expireAfter = str(),
  terminationGracePeriod = str(),
}, { "requirements", "nodeClassRef" })

local nodepool_spec = object({
  template = object({ metadata = object { labels = string_map(), annotations = string_map() },
    spec = nodeclaim_spec }, { "spec" }),
  disruption = object { consolidateAfter = str(), consolidationPolicy = str(),
    budgets = list_of(object { nodes = str(), schedule = str(), duration = str(), reasons = strings() }) },
  limits = free(), weight = int(), replicas = { type = "integer", format = "int64" },
}, { "template" })

local selector_term = object { id = str(), name = str(), alias = str(), tags = string_map() }
local ecsnodeclass_spec = object({
  vSwitchSelectorTerms = list_of(selector_term), vSwitchSelectionPolicy = str(),
  securityGroupSelectorTerms = list_of(selector_term), imageSelectorTerms = list_of(selector_term),
  kubeletConfiguration = free(), systemDisk = free(), dataDisks = list_of(free()), dataDiskCategories = strings(),
  formatDataDisk = bool(), tags = string_map(), resourceGroupId = str(), userData = str(), password = str(),
  keyPairName = str(), passwordInherit = bool(),
}, { "vSwitchSelectorTerms", "securityGroupSelectorTerms", "imageSelectorTerms" })

-- The ECSNodeClass spec of karpenter.alibabacloud.com (Alibaba's official provider's group), down to
-- the fields examples/deploy/crds/karpenter.alibabacloud.com_ecsnodeclasses.yaml declares.
local function number() return { type = "number" } end
local official_ecsnodeclass_spec = object({
  clusterID = str(), clusterName = str(), clusterEndpoint = str(),
  vSwitchSelectorTerms = list_of(object { id = str(), tags = string_map(), zoneID = str() }),
  vSwitchSelectionPolicy = str(),
  securityGroupSelectorTerms = list_of(object { id = str(), name = str(), tags = string_map() }),
  imageSelectorTerms = list_of(object { id = str(), name = str(), tags = string_map(), imageFamily = str(),
    imageOwnerAlias = str(), imageOwnerID = str(), alias = str() }),
  role = str(),
  systemDisk = object { category = str(), categories = strings(), size = int(), performanceLevel = str(),
    encrypted = bool(), kmsKeyID = str() },
  dataDisks = list_of(object { category = str(), size = int(), device = str(), performanceLevel = str(),
    encrypted = bool(), kmsKeyID = str(), snapshotID = str(), deleteWithInstance = bool() }),
  formatDataDisk = bool(), spotStrategy = str(), spotPriceLimit = number(), userData = str(), tags = string_map(),
  kubelet = free(),
  capacityReservationSelectorTerms = list_of(object { id = str(), tags = string_map() }),
  capacityReservationPreference = str(),
  metadataOptions = object { httpTokens = str(), httpPutResponseHopLimit = int(), httpEndpoint = str() },
  launchTemplateID = str(), resourceGroupId = str(), keyPairName = str(), password = str(), passwordInherit = bool(),
}, { "vSwitchSelectorTerms", "securityGroupSelectorTerms", "imageSelectorTerms" })

local lease_spec = object { holderIdentity = str(), leaseDurationSeconds = int(), acquireTime = time(),
  renewTime = time(), leaseTransitions = int(), strategy = str(), preferredHolder = str() }

local pdb_spec = object { minAvailable = ref(INT_OR_STRING), maxUnavailable = ref(INT_OR_STRING),
  selector = ref(META .. "LabelSelector"), unhealthyPodEvictionPolicy = str() }

local event_body = {
  apiVersion = str(), kind = str(), metadata = ref(META .. "ObjectMeta"), involvedObject = free(),
  reason = str(), message = str(), source = free(), firstTimestamp = time(), lastTimestamp = time(),
  count = int(), type = str(), eventTime = time(), series = free(), action = str(), related = free(),
  reportingComponent = str(), reportingInstance = str(),
}

-- Bodies by kind name; the resource list (store.RESOURCES) says which group/version each is in.
-- GROUP_BODIES overrides a kind in one group, where two groups serve a kind of one name.
local BODIES = {
  Namespace = resource_body(free(), free()),
  Node = resource_body(free(), free()),
  Pod = resource_body(free(), free()),
  DaemonSet = resource_body(free(), free()),
  Event = event_body,
  Lease = resource_body(lease_spec),
  PodDisruptionBudget = resource_body(pdb_spec, free()),
  PersistentVolumeClaim = resource_body(free(), free()),
  PersistentVolume = resource_body(free(), free()),
  StorageClass = { apiVersion = str(), kind = str(), metadata = ref(META .. "ObjectMeta"), provisioner = str(),
    parameters = string_map(), reclaimPolicy = str(), volumeBindingMode = str(), allowVolumeExpansion = bool(),
    mountOptions = strings(), allowedTopologies = list_of(free()) },
  NodePool = resource_body(nodepool_spec, free()),
  NodeClaim = resource_body(nodeclaim_spec, free()),
  ECSNodeClass = resource_body(ecsnodeclass_spec, free()),
}

local GROUP_BODIES = {
  ["karpenter.alibabacloud.com"] = { ECSNodeClass = resource_body(official_ecsnodeclass_spec, free()) },
}

--- body(group, kind) -> the top-level properties of kind as group serves it, or nil.
local function body_of(group, kind)
  local in_group = GROUP_BODIES[group]
  return in_group and in_group[kind] or BODIES[kind]
end

-- Kinds that are only ever the body of an action subresource.
local ACTION_BODIES = {
  Binding = { apiVersion = str(), kind = str(), metadata = ref(META .. "ObjectMeta"), target = free() },
  Eviction = { apiVersion = str(), kind = str(), metadata = ref(META .. "ObjectMeta"),
    deleteOptions = ref(META .. "DeleteOptions") },
}

local function meta_schemas()
  return {
    [META .. "ObjectMeta"] = object {
      name = str(), generateName = str(), namespace = str(), selfLink = str(), uid = str(),
      resourceVersion = str(), generation = { type = "integer", format = "int64" }, creationTimestamp = time(),
      deletionTimestamp = time(), deletionGracePeriodSeconds = { type = "integer", format = "int64" },
      labels = string_map(), annotations = string_map(), finalizers = strings(),
      ownerReferences = list_of(free()), managedFields = list_of(free()),
    },
    [META .. "ListMeta"] = object { resourceVersion = str(), continue = str(), remainingItemCount = int(),
      selfLink = str() },
    [META .. "LabelSelector"] = object { matchLabels = string_map(), matchExpressions = list_of(
      object({ key = str(), operator = str(), values = strings() }, { "key", "operator" })) },
    [META .. "DeleteOptions"] = object { apiVersion = str(), kind = str(), dryRun = strings(),
      gracePeriodSeconds = { type = "integer", format = "int64" }, orphanDependents = bool(),
      preconditions = object { uid = str(), resourceVersion = str() }, propagationPolicy = str() },
    [META .. "Status"] = object { apiVersion = str(), kind = str(), metadata = ref(META .. "ListMeta"),
      status = str(), message = str(), reason = str(), details = free(), code = int() },
    [META .. "WatchEvent"] = object({ type = str(), object = free() }, { "type", "object" }),
    [INT_OR_STRING] = { type = "string", format = "int-or-string",
      ["x-kubernetes-int-or-string"] = true },
  }
end

-- ---- names -----------------------------------------------------------------------------------

--- package(group, version) -> the schema name prefix: "io.k8s.api.core.v1", "io.k8s.api.policy.v1",
-- "sh.karpenter.v1" (a CRD group's DNS labels reversed, as the apiserver names CRD schemas).
function M.package(group, version)
  if group == "" then return "io.k8s.api.core." .. version end
  local k8s = group:match("^(.-)%.k8s%.io$")
  if k8s then return "io.k8s.api." .. k8s .. "." .. version end
  if group == "policy" then return "io.k8s.api.policy." .. version end
  local labels = {}
  for label in group:gmatch("[^.]+") do table.insert(labels, 1, label) end
  return table.concat(labels, ".") .. "." .. version
end

function M.name(group, version, kind) return M.package(group, version) .. "." .. kind end

local function gvk(group, version, kind)
  return array { { group = group, version = version, kind = kind } }
end

local function kind_schema(body, group, version, kind)
  local s = object(body)
  s["x-kubernetes-group-version-kind"] = gvk(group, version, kind)
  return s
end

local function list_schema(group, version, kind)
  return {
    type = "object", required = array { "items" },
    properties = { apiVersion = str(), kind = str(), metadata = ref(META .. "ListMeta"),
      items = list_of(ref(M.name(group, version, kind))) },
    ["x-kubernetes-group-version-kind"] = gvk(group, version, kind .. "List"),
  }
end

--- components(resources) -> the components.schemas of a document serving those resources: each
-- kind, its List, the kinds of their action subresources, and the meta types they refer to.
function M.components(resources)
  local out = meta_schemas()
  for _, r in ipairs(resources) do
    out[M.name(r.group, r.version, r.kind)] = kind_schema(body_of(r.group, r.kind), r.group, r.version, r.kind)
    out[M.name(r.group, r.version, r.kind .. "List")] = list_schema(r.group, r.version, r.kind)
    for _, a in ipairs(r.actions or {}) do
      out[M.name(a.group, a.version, a.kind)] = kind_schema(ACTION_BODIES[a.kind], a.group, a.version, a.kind)
    end
  end
  return out
end

-- ---- unknown fields --------------------------------------------------------------------------

local REFS = meta_schemas()

local function resolve(schema)
  local target = schema and schema["$ref"]
  if target then return REFS[target:match("[^/]+$")] end
  return schema
end

local function walk(schema, value, path, out)
  schema = resolve(schema)
  if not schema or schema["x-kubernetes-preserve-unknown-fields"] then return end
  if schema.type == "array" and wire.is_array(value) then
    for _, item in ipairs(value) do walk(schema.items, item, path, out) end
  elseif schema.properties and wire.is_object(value) then
    for k, v in pairs(value) do
      local field = path == "" and k or (path .. "." .. k)
      if schema.properties[k] then walk(schema.properties[k], v, field, out) else out[#out + 1] = field end
    end
  end
end

--- unknown_fields(group, kind, obj) -> the sorted paths ("spec.weigth") of fields obj has that the
-- schema of kind in group does not declare.
function M.unknown_fields(group, kind, obj)
  local out = {}
  local body = body_of(group, kind) or ACTION_BODIES[kind]
  if body then walk(object(body), obj, "", out) end
  table.sort(out)
  return out
end

return M
