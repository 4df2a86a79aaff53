-- What a stock kubectl needs of the Kubernetes simulator, driven in process through handle(request):
-- aggregated discovery, OpenAPI v3 documents whose PATCH operations advertise fieldValidation,
-- fieldValidation and dryRun on writes, strategic merge patch as `kubectl apply` computes it, the
-- Tables `kubectl get` prints, and the Lease updates leader election makes.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local kubernetes = require "sim.kubernetes"
local tables = require "sim.kubernetes.tables"

local json = luaprov.json

local AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
local TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
  .. "application/json"

local function call(method, path, body, headers)
  local query
  path, query = path:match("^([^?]*)%??(.*)$")
  local h = { ["content-type"] = "application/json" }
  for k, v in pairs(headers or {}) do h[k] = v end
  local res = kubernetes.handle { service = "kubernetes", method = method, path = path, query = query,
    headers = h, stream = "spec", body = body and (type(body) == "string" and body or json.encode(body)) or "" }
  return res.status, res.body ~= "" and json.decode(res.body) or nil, res
end

local function ok(method, path, body, headers)
  local status, obj, res = call(method, path, body, headers)
  assert(status < 300, method .. " " .. path .. " answered " .. status .. ": " .. tostring(res.body))
  return obj, res
end

local function by(list, field)
  local out = {}
  for _, item in ipairs(list) do out[item[field]] = item end
  return out
end

before_each(function() ok("POST", "/_sim/reset") end)

describe("kubernetes simulator: discovery", function()
  it("answers aggregated discovery when the client asks for it, the plain documents otherwise", function()
    local api, res = ok("GET", "/api", nil, { accept = AGGREGATED .. ",application/json" })
    assert.equal(AGGREGATED, res.headers["content-type"])
    assert.same({ "APIGroupDiscoveryList", "apidiscovery.k8s.io/v2" }, { api.kind, api.apiVersion })
    assert.equal(1, #api.items)
    local core = api.items[1].versions[1]
    assert.same({ "v1", "Current" }, { core.version, core.freshness })
    local resources = by(core.resources, "resource")
    assert.same({ "Cluster", "node", { "no" } }, { resources.nodes.scope, resources.nodes.singularResource,
      resources.nodes.shortNames })
    local subs = by(resources.pods.subresources, "subresource")
    assert.same({ group = "policy", version = "v1", kind = "Eviction" }, subs.eviction.responseKind)
    assert.same({ "create" }, subs.eviction.verbs)
    assert.same({ "get", "patch", "update" }, subs.status.verbs)

    local apis = ok("GET", "/apis", nil, { accept = AGGREGATED })
    local groups = by((function()
      local t = {}
      for i, item in ipairs(apis.items) do t[i] = { name = item.metadata.name, item = item } end
      return t
    end)(), "name")
    assert.truthy(groups["karpenter.sh"] and groups["coordination.k8s.io"] and groups["karpenter.k8s.alibabacloud"])
    local pdb = groups.policy.item.versions[1].resources[1]
    assert.same({ "poddisruptionbudgets", "Namespaced", { "pdb" } }, { pdb.resource, pdb.scope, pdb.shortNames })

    local plain, plain_res = ok("GET", "/api", nil, { accept = "application/json" })
    assert.equal("APIVersions", plain.kind)
    assert.equal("application/json", plain_res.headers["content-type"])
    local beta = ok("GET", "/apis", nil, { accept = AGGREGATED:gsub("v=v2", "v=v2beta1") })
    assert.equal("apidiscovery.k8s.io/v2beta1", beta.apiVersion)
  end)

  it("lists the eviction and binding subresources in the legacy resource list", function()
    local core = by(ok("GET", "/api/v1").resources, "name")
    assert.same({ "policy", "v1", "Eviction", { "create" } }, { core["pods/eviction"].group,
      core["pods/eviction"].version, core["pods/eviction"].kind, core["pods/eviction"].verbs })
    assert.equal("Binding", core["pods/binding"].kind)
    local policy = ok("GET", "/apis/policy/v1")
    assert.equal("PodDisruptionBudget", policy.resources[1].kind)
    assert.equal("poddisruptionbudgets/status", policy.resources[2].name)
  end)
end)

describe("kubernetes simulator: OpenAPI v3", function()
  local function documents()
    local root = ok("GET", "/openapi/v3")
    local docs = {}
    for gv, entry in pairs(root.paths) do
      assert.matches("^/openapi/v3/" .. gv:gsub("%p", "%%%0") .. "%?hash=%x+$", entry.serverRelativeURL)
      docs[gv] = ok("GET", entry.serverRelativeURL)
    end
    return docs
  end

  it("publishes one document per group/version with a schema per kind", function()
    local docs = documents()
    for _, gv in ipairs { "api/v1", "apis/policy/v1", "apis/coordination.k8s.io/v1", "apis/karpenter.sh/v1",
      "apis/karpenter.k8s.alibabacloud/v1alpha1" } do
      assert.truthy(docs[gv], gv)
      assert.equal("3.0.0", docs[gv].openapi)
    end
    local core = docs["api/v1"].components.schemas
    assert.same({ { group = "", version = "v1", kind = "Node" } },
      core["io.k8s.api.core.v1.Node"]["x-kubernetes-group-version-kind"])
    assert.truthy(core["io.k8s.api.core.v1.PodList"] and core["io.k8s.api.policy.v1.Eviction"])
    assert.truthy(core["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].properties.finalizers)
    local nodepool = docs["apis/karpenter.sh/v1"].components.schemas["sh.karpenter.v1.NodePool"]
    local spec = nodepool.properties.spec.properties
    assert.truthy(spec.template and spec.disruption and spec.limits and spec.weight)
    assert.truthy(spec.template.properties.spec.properties.nodeClassRef)
    local class = docs["apis/karpenter.k8s.alibabacloud/v1alpha1"].components.schemas
      ["alibabacloud.k8s.karpenter.v1alpha1.ECSNodeClass"]
    assert.truthy(class.properties.spec.properties.vSwitchSelectorTerms)
    assert.truthy(docs["apis/karpenter.sh/v1"].components.schemas["sh.karpenter.v1.NodeClaim"]
      .properties.spec.properties.requirements)
  end)

  it("gives every resource a PATCH operation with its kind and a fieldValidation parameter", function()
    local docs = documents()
    -- what kubectl checks before leaving validation to the server
    local function supports(gv, group, version, kind)
      for _, item in pairs(docs[gv].paths) do
        local gvk = item.patch and item.patch["x-kubernetes-group-version-kind"]
        if gvk and gvk.group == group and gvk.version == version and gvk.kind == kind then
          for _, p in ipairs(item.patch.parameters) do
            if p.name == "fieldValidation" and p["in"] == "query" then return true end
          end
        end
      end
      return false
    end
    for gv, kinds in pairs {
      ["api/v1"] = { "", "v1", "Namespace", "Node", "Pod", "Event" },
      ["apis/policy/v1"] = { "policy", "v1", "PodDisruptionBudget" },
      ["apis/coordination.k8s.io/v1"] = { "coordination.k8s.io", "v1", "Lease" },
      ["apis/karpenter.sh/v1"] = { "karpenter.sh", "v1", "NodePool", "NodeClaim" },
      ["apis/karpenter.k8s.alibabacloud/v1alpha1"] = { "karpenter.k8s.alibabacloud", "v1alpha1", "ECSNodeClass" },
    } do
      for i = 3, #kinds do assert.is_true(supports(gv, kinds[1], kinds[2], kinds[i]), gv .. " " .. kinds[i]) end
    end
    assert.is_false(supports("api/v1", "", "v1", "Lease"))
    local eviction = docs["api/v1"].paths["/api/v1/namespaces/{namespace}/pods/{name}/eviction"].post
    assert.same({ group = "policy", version = "v1", kind = "Eviction" }, eviction["x-kubernetes-group-version-kind"])
    assert.equal(404, (call("GET", "/openapi/v3/apis/nope/v1")))
  end)
end)

describe("kubernetes simulator: ECSNodeClass in two groups", function()
  local OLD = "/apis/karpenter.k8s.alibabacloud/v1alpha1/ecsnodeclasses"
  local NEW = "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses"
  local spec = { vSwitchSelectorTerms = { { tags = { a = "b" } } }, securityGroupSelectorTerms = { { id = "sg-1" } },
    imageSelectorTerms = { { alias = "AlibabaCloudLinux3" } } }

  it("serves the kind in luaprov's group and in karpenter.alibabacloud.com, one object store each", function()
    local _, groups = call("GET", "/apis")
    local found = {}
    for _, g in ipairs(groups.groups) do found[g.name] = g.preferredVersion.version end
    assert.same({ "v1alpha1", "v1alpha1" },
      { found["karpenter.k8s.alibabacloud"], found["karpenter.alibabacloud.com"] })
    local _, list = call("GET", "/apis/karpenter.alibabacloud.com/v1alpha1")
    assert.same({ "ecsnodeclasses", "ECSNodeClass" }, { list.resources[1].name, list.resources[1].kind })

    -- the same name in both groups is two objects
    ok("POST", OLD, { metadata = { name = "default" }, spec = spec })
    local new = ok("POST", NEW .. "?fieldValidation=Strict", { metadata = { name = "default" }, spec = spec })
    assert.equal("karpenter.alibabacloud.com/v1alpha1", new.apiVersion)
    ok("PATCH", NEW .. "/default", { metadata = { annotations = { group = "new" } } },
      { ["content-type"] = "application/merge-patch+json" })
    assert.equal("new", ok("GET", NEW .. "/default").metadata.annotations.group)
    assert.is_nil(ok("GET", OLD .. "/default").metadata.annotations)
    assert.equal("karpenter.k8s.alibabacloud/v1alpha1", ok("GET", OLD .. "/default").apiVersion)
    ok("DELETE", OLD .. "/default")
    assert.equal(404, (call("GET", OLD .. "/default")))
    assert.equal(1, #ok("GET", NEW).items)
  end)

  it("checks each group's objects against that group's schema", function()
    local status, e = call("POST", NEW .. "?fieldValidation=Strict",
      { metadata = { name = "typo" }, spec = { vSwitchSelectorTerm = {} } })
    assert.equal(400, status)
    assert.matches('unknown field "spec.vSwitchSelectorTerm"', e.message, 1, true)
    local root = ok("GET", "/openapi/v3")
    local doc = ok("GET", root.paths["apis/karpenter.alibabacloud.com/v1alpha1"].serverRelativeURL)
    local class = doc.components.schemas["com.alibabacloud.karpenter.v1alpha1.ECSNodeClass"]
    assert.same({ { group = "karpenter.alibabacloud.com", version = "v1alpha1", kind = "ECSNodeClass" } },
      class["x-kubernetes-group-version-kind"])
    assert.truthy(class.properties.spec.properties.vSwitchSelectorTerms)
    local schemas = require "sim.kubernetes.schemas"
    assert.same({ "spec.nope" }, schemas.unknown_fields("karpenter.alibabacloud.com", "ECSNodeClass",
      { spec = { nope = 1, imageSelectorTerms = {} } }))
    assert.same({ "spec.nope" }, schemas.unknown_fields("karpenter.k8s.alibabacloud", "ECSNodeClass",
      { spec = { nope = 1 } }))
  end)
end)

describe("kubernetes simulator: tables", function()
  local function columns(t)
    local names = {}
    for i, c in ipairs(t.columnDefinitions) do names[i] = c.name end
    return names
  end

  it("prints nodes and pods with the columns of a real apiserver", function()
    ok("POST", "/api/v1/nodes", { metadata = { name = "n1", labels = { ["node-role.kubernetes.io/worker"] = "" } },
      spec = { unschedulable = true }, status = { conditions = { { type = "Ready", status = "True" } },
        nodeInfo = { kubeletVersion = "v1.31.0" } } })
    local t = ok("GET", "/api/v1/nodes", nil, { accept = TABLE })
    assert.same({ "Table", "meta.k8s.io/v1" }, { t.kind, t.apiVersion })
    assert.same({ "Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP", "OS-Image",
      "Kernel-Version", "Container-Runtime" }, columns(t))
    local cells = t.rows[1].cells
    assert.same({ "n1", "Ready,SchedulingDisabled", "worker", "v1.31.0" }, { cells[1], cells[2], cells[3], cells[5] })
    assert.matches("^%d+s$", cells[4])
    assert.same({ "PartialObjectMetadata", "n1" }, { t.rows[1].object.kind, t.rows[1].object.metadata.name })
    assert.truthy(t.metadata.resourceVersion)

    ok("POST", "/api/v1/namespaces/default/pods", { metadata = { name = "web" },
      spec = { containers = { { name = "a", image = "x" }, { name = "b", image = "y" } } },
      status = { phase = "Running", containerStatuses = { { name = "a", ready = true } } } })
    local one = ok("GET", "/api/v1/namespaces/default/pods/web?includeObject=Object", nil, { accept = TABLE })
    assert.same({ "web", "1/2", "Running", "0" }, { table.unpack(one.rows[1].cells, 1, 4) })
    assert.equal("Pod", one.rows[1].object.kind)
    assert.equal("PodList", ok("GET", "/api/v1/namespaces/default/pods").kind, "JSON unless a Table is asked for")
  end)

  it("prints the CRDs' printer columns through their JSONPath", function()
    ok("POST", "/apis/karpenter.sh/v1/nodeclaims", { metadata = { name = "c1", labels = {
      ["node.kubernetes.io/instance-type"] = "ecs.g7.large", ["karpenter.sh/capacity-type"] = "spot" } },
      spec = { nodeClassRef = { name = "default" } } })
    ok("PATCH", "/apis/karpenter.sh/v1/nodeclaims/c1/status", { status = { nodeName = "n1", conditions = {
      { type = "Launched", status = "True" }, { type = "Ready", status = "False" } } } },
      { ["content-type"] = "application/merge-patch+json" })
    local t = ok("GET", "/apis/karpenter.sh/v1/nodeclaims", nil, { accept = TABLE })
    assert.same({ "Name", "Type", "Capacity", "Zone", "Node", "Ready", "Age" }, { table.unpack(columns(t), 1, 7) })
    local cells = t.rows[1].cells
    assert.same({ "c1", "ecs.g7.large", "spot", json.null, "n1", "False" }, { table.unpack(cells, 1, 6) })
    assert.matches("^%d+s$", cells[7])
    assert.equal("default", cells[11])

    -- a NodePool's NODES and READY come from the status the engine's nodepool.status controller writes
    ok("POST", "/apis/karpenter.sh/v1/nodepools", { metadata = { name = "np1" },
      spec = { template = { spec = { nodeClassRef = { name = "default" }, requirements = {} } } } })
    ok("PATCH", "/apis/karpenter.sh/v1/nodepools/np1/status", { status = { nodes = 2,
      resources = { cpu = "8", memory = "32Gi", nodes = "2" }, conditions = { { type = "Ready", status = "True" } } } },
      { ["content-type"] = "application/merge-patch+json" })
    local pools = ok("GET", "/apis/karpenter.sh/v1/nodepools", nil, { accept = TABLE })
    assert.same({ "Name", "NodeClass", "Nodes", "Ready", "Age", "Weight", "CPU", "Memory" }, columns(pools))
    local row = pools.rows[1].cells
    assert.same({ "np1", "default", "2", "True" }, { table.unpack(row, 1, 4) })
    assert.same({ "8", "32Gi" }, { row[7], row[8] })
  end)

  it("sends a watching kubectl one-row tables", function()
    ok("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", { metadata = { name = "l" },
      spec = { holderIdentity = "me" } })
    local _, res = ok("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?watch=true", nil,
      { accept = TABLE })
    local event = json.decode(res.body:match("^[^\n]+"))
    assert.same({ "ADDED", "Table" }, { event.type, event.object.kind })
    assert.same({ "l", "me" }, { event.object.rows[1].cells[1], event.object.rows[1].cells[2] })
  end)

  it("says ages the way kubectl does", function()
    local now = clock.now()
    local function ago(s) return tables.age(luaprov.time.iso8601(now - s)) end
    assert.same({ "45s", "119s", "3m20s", "5m", "120m", "5h3m", "47h", "3d4h", "30d", "2y" },
      { ago(45), ago(119), ago(200), ago(300), ago(7200), ago(5 * 3600 + 180), ago(47 * 3600),
        ago(76 * 3600), ago(30 * 86400), ago(800 * 86400) })
  end)
end)

describe("kubernetes simulator: write options", function()
  local NP = "/apis/karpenter.sh/v1/nodepools"

  it("rejects unknown fields under fieldValidation=Strict, warns under Warn, ignores under Ignore", function()
    local body = { metadata = { name = "typo", labelz = {} }, spec = { wieght = 1 } }
    local status, e = call("POST", NP .. "?fieldValidation=Strict", body)
    assert.equal(400, status)
    assert.equal('NodePool in version "v1" cannot be handled as a NodePool: strict decoding error: '
      .. 'unknown field "metadata.labelz", unknown field "spec.wieght"', e.message)
    local _, res = ok("POST", NP .. "?fieldValidation=Warn", body)
    assert.equal('299 - "unknown field \\"metadata.labelz\\"", 299 - "unknown field \\"spec.wieght\\""',
      res.headers.warning)
    ok("DELETE", NP .. "/typo")
    _, res = ok("POST", NP .. "?fieldValidation=Ignore", body)
    assert.is_nil(res.headers.warning)
    ok("POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict",
      { metadata = { name = "p" }, spec = { anything = { goes = true } } })
    assert.equal(400, (call("POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict",
      { metadata = { name = "q" }, extra = 1 })))
    assert.equal(400, (call("POST", NP .. "?fieldValidation=Loose", { metadata = { name = "x" } })))
  end)

  it("answers dryRun=All writes without storing them", function()
    local status, obj = call("POST", NP .. "?dryRun=All", { metadata = { name = "dry" }, spec = { weight = 1 } })
    assert.equal(201, status)
    assert.equal("dry", obj.metadata.name)
    assert.equal(404, (call("GET", NP .. "/dry")))
    ok("POST", NP, { metadata = { name = "wet" }, spec = { weight = 1 } })
    local patched = ok("PATCH", NP .. "/wet?dryRun=All", { spec = { weight = 5 } },
      { ["content-type"] = "application/merge-patch+json" })
    assert.equal(5, patched.spec.weight)
    assert.equal(1, ok("GET", NP .. "/wet").spec.weight)
    ok("DELETE", NP .. "/wet", { kind = "DeleteOptions", dryRun = { "All" } })
    assert.equal(200, (call("GET", NP .. "/wet")))
    assert.equal(400, (call("POST", NP .. "?dryRun=Some", { metadata = { name = "x" } })))
  end)

  it("checks DeleteOptions preconditions", function()
    local obj = ok("POST", NP, { metadata = { name = "guarded" } })
    local status, e = call("DELETE", NP .. "/guarded", { preconditions = { uid = "someone-else" } })
    assert.equal(409, status)
    assert.matches("Precondition failed: UID in precondition: someone%-else", e.message)
    ok("DELETE", NP .. "/guarded", { preconditions = { uid = obj.metadata.uid } })
    assert.equal(404, (call("GET", NP .. "/guarded")))
  end)
end)

describe("kubernetes simulator: strategic merge patch", function()
  local POD = "/api/v1/namespaces/default/pods/web"
  local SMP = { ["content-type"] = "application/strategic-merge-patch+json" }

  before_each(function()
    ok("POST", "/api/v1/namespaces/default/pods", { metadata = { name = "web", finalizers = { "a/x" } },
      spec = { containers = { { name = "app", image = "nginx:1.27", env = { { name = "A", value = "1" } } },
        { name = "side", image = "busybox" } } } })
  end)

  it("merges lists by their merge key, as kubectl apply's three-way patch expects", function()
    local p = ok("PATCH", POD, { spec = { ["$setElementOrder/containers"] = { { name = "app" }, { name = "side" } },
      containers = { { name = "app", image = "nginx:1.28" } } } }, SMP)
    assert.same({ "app", "nginx:1.28", "1", "side" }, { p.spec.containers[1].name, p.spec.containers[1].image,
      p.spec.containers[1].env[1].value, p.spec.containers[2].name })
    p = ok("PATCH", POD, { spec = { containers = { { name = "side", ["$patch"] = "delete" },
      { name = "new", image = "redis" } } } }, SMP)
    assert.same({ "app", "new" }, { p.spec.containers[1].name, p.spec.containers[2].name })
    p = ok("PATCH", POD, { spec = { ["$setElementOrder/containers"] = { { name = "new" }, { name = "app" } } } }, SMP)
    assert.same({ "new", "app" }, { p.spec.containers[1].name, p.spec.containers[2].name })
    p = ok("PATCH", POD, { metadata = { finalizers = { "b/y" } } }, SMP)
    assert.same({ "a/x", "b/y" }, p.metadata.finalizers)
    p = ok("PATCH", POD, { metadata = { ["$deleteFromPrimitiveList/finalizers"] = { "a/x" } } }, SMP)
    assert.same({ "b/y" }, p.metadata.finalizers)
    p = ok("PATCH", POD, { metadata = { finalizers = json.null } },
      { ["content-type"] = "application/merge-patch+json" })
    assert.is_nil(p.metadata.finalizers)
  end)

  it("replaces lists without a merge key, and refuses strategic patches of custom resources", function()
    ok("PATCH", POD, { spec = { tolerations = { { operator = "Exists" } } } }, SMP)
    local p = ok("PATCH", POD, { spec = { tolerations = { { key = "a", operator = "Exists" } } } }, SMP)
    assert.same({ { key = "a", operator = "Exists" } }, p.spec.tolerations)
    ok("POST", "/apis/karpenter.sh/v1/nodepools", { metadata = { name = "np" } })
    assert.equal(415, (call("PATCH", "/apis/karpenter.sh/v1/nodepools/np", { spec = {} }, SMP)))
  end)
end)

describe("kubernetes simulator: leases and events", function()
  local LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"

  it("updates a Lease with PUT carrying its resourceVersion, and refuses a stale one", function()
    local lease = ok("POST", LEASES, { metadata = { name = "luaprov" },
      spec = { holderIdentity = "a", leaseDurationSeconds = 15 } })
    local renewed = ok("PUT", LEASES .. "/luaprov", { metadata = { name = "luaprov",
      resourceVersion = lease.metadata.resourceVersion },
      spec = { holderIdentity = "a", renewTime = "2026-01-01T00:00:00.000000Z" } })
    assert.is_true(tonumber(renewed.metadata.resourceVersion) > tonumber(lease.metadata.resourceVersion))
    local status, e = call("PUT", LEASES .. "/luaprov", { metadata = { name = "luaprov",
      resourceVersion = lease.metadata.resourceVersion }, spec = { holderIdentity = "b" } })
    assert.equal(409, status)
    assert.equal("Conflict", e.reason)
    assert.equal("a", ok("GET", LEASES .. "/luaprov").spec.holderIdentity)
  end)

  it("creates Events with generateName and an involvedObject", function()
    local event = ok("POST", "/api/v1/namespaces/default/events?fieldValidation=Strict", {
      metadata = { generateName = "web." }, involvedObject = { kind = "Pod", name = "web", namespace = "default" },
      reason = "Evicted", message = "evicted by the simulator", type = "Normal", count = 1,
      source = { component = "luaprov" }, firstTimestamp = "2026-01-01T00:00:00Z" })
    assert.matches("^web%.%w%w%w%w%w$", event.metadata.name)
    local list = ok("GET", "/api/v1/namespaces/default/events?fieldSelector=metadata.name%3D" .. event.metadata.name)
    assert.equal("Pod", list.items[1].involvedObject.kind)
    -- as kubectl describe lists an object's events
    local about = "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D"
    assert.equal(1, #ok("GET", about .. "web%2CinvolvedObject.namespace%3Ddefault").items)
    assert.equal(0, #ok("GET", about .. "db").items)
    assert.equal(0, #ok("GET", about .. "web%2Creason!%3DEvicted").items)
    assert.equal(1, #ok("GET", about .. "web%2Creason!%3DScheduled").items)
    assert.equal(400, (call("GET", "/api/v1/namespaces/default/events?fieldSelector=spec.nope%3D1")))
  end)
end)

describe("kubernetes simulator: garbage in", function()
  it("answers thousands of malformed requests with a Status, never a 500, and keeps the cluster syncing", function()
    local failures = {}
    local log_error = luaprov.log.error
    luaprov.log.error = function(msg, fields) failures[#failures + 1] = msg .. " " .. json.encode(fields or {}) end
    finally(function() luaprov.log.error = log_error end)
    math.randomseed(7)
    local paths = { "/api/v1/namespaces/default/pods", "/api/v1/nodes", "/api/v1/namespaces/default/pods/a",
      "/api/v1/namespaces/default/pods/a/eviction", "/api/v1/namespaces/default/pods/a/binding",
      "/api/v1/namespaces/default/pods/a/status", "/api/v1/nodes/n", "/api/v1/nodes/n/status",
      "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
      "/apis/policy/v1/namespaces/default/poddisruptionbudgets/p",
      "/apis/karpenter.sh/v1/nodeclaims", "/api/v1/namespaces/default/events", "/openapi/v3/api/v1", "/_sim/kubelet",
      "/api/v1/namespaces/default/pods/a/x/y", "/apis/%zz/v1", "/" }
    local bodies = { "", "{}", "[]", "null", "{", "7", '{"metadata":5}', '{"metadata":{"name":"A_"}}',
      '{"metadata":{"name":"a"},"spec":{"containers":[1,{"resources":{"requests":{"cpu":"abc","memory":[]}}}],'
        .. '"tolerations":"all","nodeSelector":5,"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuring'
        .. 'Execution":{"nodeSelectorTerms":[7,{"matchExpressions":[1]}]}}}},"status":5}',
      '{"metadata":{"name":"n","labels":"x"},"spec":{"taints":[1,{"effect":"NoSchedule"}],"unschedulable":"yes"},'
        .. '"status":{"allocatable":7,"conditions":[3,{"type":"Ready","status":"True"}],"addresses":{}}}',
      '{"metadata":{"name":"p"},"spec":{"minAvailable":"50%","selector":{"matchLabels":4,"matchExpressions":[1]}}}',
      '{"metadata":{"name":"e"},"involvedObject":{"kind":{},"name":[]},"lastTimestamp":5,"reason":{}}',
      '{"target":{"name":"n"}}', '{"target":5}', '{"kind":"Eviction","metadata":{"name":"a"}}',
      '{"metadata":{"labels":{"app":"x"}},"spec":{"$setElementOrder/containers":5,"containers":[1,2],'
        .. '"$retainKeys":7}}', '{"node":"n","ready":7}', '{"preconditions":{"uid":1}}' }
    local queries = { "", "watch=1", "dryRun=All", "dryRun=x", "fieldValidation=Strict", "fieldValidation=?",
      "labelSelector=a%20in%20(", "fieldSelector=x%3Dy", "limit=1&continue=%25%25", "resourceVersion=abc&watch=true",
      "includeObject=Object" }
    local methods = { "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS" }
    local types = { "application/json", "application/merge-patch+json", "application/strategic-merge-patch+json",
      "text/plain" }
    local accepts = { "application/json", "application/json;as=Table;v=v1;g=meta.k8s.io", AGGREGATED }
    for i = 1, 3000 do
      local req = { service = "kubernetes", method = methods[math.random(#methods)], path = paths[math.random(#paths)],
        query = queries[math.random(#queries)], body = bodies[math.random(#bodies)], stream = "g" .. i,
        headers = { ["content-type"] = types[math.random(#types)], accept = accepts[math.random(#accepts)] } }
      local okay, res = pcall(kubernetes.handle, req)
      assert.is_true(okay, tostring(res))
      assert.is_true(math.type(res.status) == "integer" and res.status < 500 and type(res.body) == "string",
        ("request %d: %s %s?%s %s -> %s %s"):format(i, req.method, req.path, req.query, req.body, res.status,
          tostring(res.body)))
    end
    assert.same({}, failures)
  end)
end)

describe("kubernetes simulator: odd but well-formed objects", function()
  it("refuses a patch that makes metadata a number, and prints objects with odd field types", function()
    ok("POST", "/api/v1/nodes", { metadata = { name = "n" } })
    local status, e = call("PATCH", "/api/v1/nodes/n", { metadata = 5 },
      { ["content-type"] = "application/merge-patch+json" })
    assert.equal(422, status)
    assert.equal("Invalid", e.reason)
    ok("POST", "/api/v1/namespaces/default/events", { metadata = { name = "e" }, lastTimestamp = 5,
      involvedObject = { kind = {}, name = 7 } })
    local t = ok("GET", "/api/v1/namespaces/default/events", nil, { accept = TABLE })
    assert.same({ "<unknown>", "{}/7" }, { t.rows[1].cells[1], t.rows[1].cells[4] })
  end)
end)
