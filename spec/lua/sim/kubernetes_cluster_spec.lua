-- The simulated cluster behind the Kubernetes simulator, driven in process through both simulators'
-- handle(request), as `luaprov sim` serves them from one script generation: the kubelet registers a
-- Node per Running Alibaba instance whose user data runs the ACK attach command, the binder places
-- pending pods, and PodDisruptionBudgets guard the eviction subresource.
local luaprov = require "luaprov"
local signer = require "providers.alibaba.signer"
local attach_support = require "sim.attach_support"
local kubernetes = require "sim.kubernetes"
local alibaba = require "sim.alibaba"

local json = luaprov.json

local function call(method, path, body, ctype)
  local query
  path, query = path:match("^([^?]*)%??(.*)$")
  local res = kubernetes.handle { service = "kubernetes", method = method, path = path, query = query,
    headers = { ["content-type"] = ctype or "application/json" }, stream = "spec",
    body = body and (type(body) == "string" and body or json.encode(body)) or "" }
  return res.status, res.body ~= "" and json.decode(res.body) or nil, res
end

local function ok(method, path, body, ctype)
  local status, obj, res = call(method, path, body, ctype)
  assert(status < 300, method .. " " .. path .. " answered " .. status .. ": " .. tostring(res.body))
  return obj
end

local function alibaba_admin(path, body)
  local res = alibaba.handle { service = "alibaba", method = "POST", path = path, query = "", headers = {},
    body = body and json.encode(body) or "" }
  assert(res.status == 200, path .. ": " .. res.body)
end

local function advance(seconds) ok("POST", "/_sim/advance", { seconds = seconds }) end

-- An ECS action as the provider sends it (signed, V3); returns the decoded answer.
local function ecs(action, params)
  params.RegionId = "cn-hangzhou"
  local headers = { host = "127.0.0.1", ["x-acs-action"] = action, ["x-acs-version"] = "2014-05-26",
    ["x-acs-date"] = luaprov.time.iso8601(), ["x-acs-signature-nonce"] = luaprov.crypto.random_hex(16) }
  headers.authorization = assert(signer.acs3_authorization({ method = "POST", path = "/", query = params,
    headers = headers, body = "" }, "LTAI5simulatoraccess", "simulator-secret-do-not-use"))
  local res = alibaba.handle { service = "alibaba", method = "POST", path = "/", headers = headers, body = "",
    query = signer.canonical_query(params) }
  assert(res.status == 200, res.body)
  return json.decode(res.body)
end

-- RunInstances of one instance (user data that joins the cluster unless extra says otherwise; false
-- for none); returns its ID.
local function launch(extra)
  local params = { InstanceType = "ecs.g7.large", ImageId = "aliyun_3_x64_20G_alibase_20240819.vhd",
    VSwitchId = "vsw-bp1simh0000001", ["SecurityGroupIds.1"] = "sg-bp1sim0nodes00001",
    ["SystemDisk.Category"] = "cloud_essd", ["SystemDisk.Size"] = "40", UserData = attach_support.base64() }
  for k, v in pairs(extra or {}) do params[k] = v or nil end
  return ecs("RunInstances", params).InstanceIdSets.InstanceIdSet[1]
end

local function nodes() return ok("GET", "/api/v1/nodes").items end

local function condition(obj, kind)
  for _, c in ipairs(obj.status and obj.status.conditions or {}) do
    if c.type == kind then return c end
  end
  return nil
end

local function ready_node(name, opts)
  opts = opts or {}
  return ok("POST", "/api/v1/nodes", {
    metadata = { name = name, labels = opts.labels },
    spec = { taints = opts.taints, unschedulable = opts.unschedulable },
    status = { allocatable = { cpu = opts.cpu or "2", memory = opts.memory or "4Gi", pods = opts.pods or "110" },
      conditions = { { type = "Ready", status = opts.ready or "True" } } },
  })
end

local function pod(name, opts)
  opts = opts or {}
  local requests = { cpu = opts.cpu or "500m", memory = opts.memory or "256Mi" }
  return ok("POST", "/api/v1/namespaces/default/pods", {
    metadata = { name = name, labels = opts.labels or { app = "web" } },
    spec = { containers = { { name = "app", image = "nginx", resources = { requests = requests } } },
      tolerations = opts.tolerations, nodeSelector = opts.nodeSelector, affinity = opts.affinity,
      nodeName = opts.nodeName },
  })
end

local function get_pod(name) return ok("GET", "/api/v1/namespaces/default/pods/" .. name) end

before_each(function()
  alibaba_admin("/_sim/reset")
  ok("POST", "/_sim/reset")
end)

describe("kubernetes simulator: kubelet", function()
  it("registers a Ready Node for an instance only once the instance is Running", function()
    local id = launch({ ["Tag.1.Key"] = "karpenter.sh/nodeclaim", ["Tag.1.Value"] = "general-x2k4p",
      UserData = attach_support.base64 { labels = { ["karpenter.sh/nodepool"] = "general",
        ["karpenter.sh/capacity-type"] = "on-demand" }, taints = { "karpenter.sh/unregistered:NoExecute" } } })
    assert.equal(0, #nodes())
    advance(5)
    assert.equal(0, #nodes(), "Starting is not Running yet")
    advance(10)
    local list = nodes()
    assert.equal(1, #list)
    local node = list[1]
    assert.equal("iz" .. id:sub(3):lower() .. "z", node.metadata.name)
    assert.equal("cn-hangzhou." .. id, node.spec.providerID)
    assert.same({ ["kubernetes.io/arch"] = "amd64", ["kubernetes.io/os"] = "linux",
      ["node.kubernetes.io/instance-type"] = "ecs.g7.large", ["topology.kubernetes.io/zone"] = "cn-hangzhou-h",
      ["topology.kubernetes.io/region"] = "cn-hangzhou", ["kubernetes.io/hostname"] = node.metadata.name,
      ["k8s.aliyun.com"] = "true", ["ack.aliyun.com"] = "luaprov-sim", ["karpenter.sh/capacity-type"] = "on-demand",
      ["karpenter.sh/nodepool"] = "general" }, node.metadata.labels)
    assert.same({ { key = "karpenter.sh/unregistered", effect = "NoExecute" } }, node.spec.taints)
    assert.same({ "2", "110", "41943040Ki" }, { node.status.capacity.cpu, node.status.capacity.pods,
      node.status.capacity["ephemeral-storage"] })
    assert.matches("^%d+Ki$", node.status.capacity.memory)
    assert.equal("1930m", node.status.allocatable.cpu)
    assert.is_true(tonumber(node.status.allocatable.memory:match("%d+"))
      < tonumber(node.status.capacity.memory:match("%d+")))
    assert.same({ "v1.31.0", "amd64", "linux" }, { node.status.nodeInfo.kubeletVersion,
      node.status.nodeInfo.architecture, node.status.nodeInfo.operatingSystem })
    assert.equal("InternalIP", node.status.addresses[1].type)
    local ready = condition(node, "Ready")
    assert.same({ "True", "KubeletReady" }, { ready.status, ready.reason })
    assert.truthy(ready.lastHeartbeatTime and ready.lastTransitionTime)
  end)

  it("labels ARM instances, and takes labels and taints from the attach command, not from tags", function()
    launch({ InstanceType = "ecs.g8y.large", ImageId = "aliyun_3_arm64_20G_alibase_20240819.vhd",
      SpotStrategy = "SpotAsPriceGo", ["Tag.1.Key"] = "karpenter.sh/nodeclaim", ["Tag.1.Value"] = "general-x2k4p",
      ["Tag.2.Key"] = "karpenter.sh/nodepool", ["Tag.2.Value"] = "general" })
    advance(15)
    local node = nodes()[1]
    assert.equal("arm64", node.metadata.labels["kubernetes.io/arch"])
    assert.is_nil(node.metadata.labels["karpenter.sh/capacity-type"])
    assert.is_nil(node.metadata.labels["karpenter.sh/nodepool"])
    assert.is_nil(node.spec.taints)
  end)

  it("registers with exactly the attach command's taints, and its maxPods (a MIME archive too)", function()
    launch({ UserData = attach_support.base64 { mime = true, max_pods = 64,
      taints = { "dedicated=gpu:NoSchedule", "karpenter.sh/unregistered:NoExecute" } } })
    advance(15)
    local node = nodes()[1]
    assert.same({ { key = "dedicated", value = "gpu", effect = "NoSchedule" },
      { key = "karpenter.sh/unregistered", effect = "NoExecute" } }, node.spec.taints)
    assert.same({ "64", "64" }, { node.status.capacity.pods, node.status.allocatable.pods })
  end)

  it("never registers an instance whose user data does not join the cluster, and says why", function()
    local warnings = {}
    local warn = luaprov.log.warn
    luaprov.log.warn = function(msg, fields) warnings[#warnings + 1] = { msg = msg, fields = fields } end
    local bare = launch({ UserData = false })
    local plain = launch({ UserData = luaprov.crypto.base64_encode("#!/bin/bash\necho hello\n") })
    local other = launch({ UserData = luaprov.crypto.base64_encode(
      attach_support.text():gsub("ack%.aliyun%.com=luaprov%-sim", "ack.aliyun.com=c-other")) })
    advance(15)
    advance(60)
    luaprov.log.warn = warn
    assert.equal(0, #nodes())
    local why = {}
    for _, n in ipairs(ok("GET", "/_sim/state").kubelet.nodes) do
      assert.is_false(n.exists)
      why[n.instance_id] = n.not_registered
    end
    assert.same({ [bare] = "the instance has no user data",
      [plain] = "the user data has no ACK attach command (curl .../attach_node.sh | bash -s -- ...)",
      [other] = 'attach command: cluster "c-other" of --labels ack.aliyun.com is not a cluster of the account' }, why)
    assert.equal(3, #warnings, "once per instance")
    for _, w in ipairs(warnings) do
      assert.equal("simulated kubelet: instance does not join the cluster", w.msg)
      assert.equal(why[w.fields.instance_id], w.fields.reason)
    end
    assert.same({ nodes = {} }, ok("GET", "/_sim/kubelet/nodes"), "nor in another API server")
  end)

  it("registers an instance that runs kubeadm join of the simulated kubeadm cluster, refuses a wrong token", function()
    local kubeadm = require "sim.alibaba.kubeadm"
    local bootstrap = require "providers.alibaba.bootstrap"
    local function kubeadm_data(token)
      local ctx = { cluster_type = "Kubeadm", kubeadm_token = token, kubeadm_ca_cert_hash = kubeadm.CA_CERT_HASH }
      local nodeclaim = { metadata = { labels = { ["karpenter.sh/nodepool"] = "general" } },
        spec = { taints = { { key = "dedicated", value = "web", effect = "NoSchedule" } } } }
      return luaprov.crypto.base64_encode(assert(bootstrap.user_data(ctx, nodeclaim,
        { spec = { clusterEndpoint = kubeadm.API_SERVER, kubelet = { maxPods = 42 } } }, "on-demand")))
    end
    local joined = launch({ UserData = kubeadm_data(kubeadm.TOKEN) })
    local wrong = launch({ UserData = kubeadm_data("abcdef.0123456789abcdef") })
    advance(15)
    local list = nodes()
    assert.equal(1, #list)
    local node = list[1]
    assert.equal("cn-hangzhou." .. joined, node.spec.providerID)
    assert.equal("general", node.metadata.labels["karpenter.sh/nodepool"])
    assert.equal("on-demand", node.metadata.labels["karpenter.sh/capacity-type"])
    assert.is_nil(node.metadata.labels["ack.aliyun.com"])
    assert.same({ { key = "dedicated", value = "web", effect = "NoSchedule" },
      { key = "karpenter.sh/unregistered", effect = "NoExecute" } }, node.spec.taints)
    assert.same({ "42", "42" }, { node.status.capacity.pods, node.status.allocatable.pods })
    local why
    for _, n in ipairs(ok("GET", "/_sim/state").kubelet.nodes) do
      if n.instance_id == wrong then why = n.not_registered end
    end
    assert.equal("kubeadm join: discovery.bootstrapToken.token is not a bootstrap token of the cluster", why)
  end)

  it("reads the user data again when an Alibaba reset gives the instance ID to another launch", function()
    local refused = launch({ UserData = false })
    advance(15)
    assert.equal(0, #nodes())
    alibaba_admin("/_sim/reset")
    assert.equal(refused, launch())
    assert.equal(0, #nodes(), "Pending")
    advance(15)
    assert.equal("cn-hangzhou." .. refused, nodes()[1].spec.providerID)
  end)

  it("names the node <region>.<private ip> when the hostname cannot be a node name", function()
    launch({ HostName = "Web_Server" })
    advance(15)
    local node = nodes()[1]
    assert.equal("cn-hangzhou." .. node.status.addresses[1].address, node.metadata.name)
  end)

  it("turns Ready Unknown when the instance is released or stopped, and never deletes the node", function()
    local gone, stopped = launch(), launch()
    advance(15)
    assert.equal(2, #nodes())
    alibaba_admin("/_sim/instances/" .. stopped, { status = "Stopped" })
    local by_provider = {}
    for _, n in ipairs(nodes()) do by_provider[n.spec.providerID] = n end
    assert.equal("True", condition(by_provider["cn-hangzhou." .. gone], "Ready").status)
    local silent = condition(by_provider["cn-hangzhou." .. stopped], "Ready")
    assert.same({ "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status." },
      { silent.status, silent.reason, silent.message })
    assert.equal("Unknown", condition(by_provider["cn-hangzhou." .. stopped], "MemoryPressure").status)

    ecs("DeleteInstance", { InstanceId = gone, Force = "true" })
    for _, n in ipairs(nodes()) do
      assert.equal("Unknown", condition(n, "Ready").status, n.metadata.name)
    end
    assert.equal(2, #nodes())
  end)

  it("does not register again a node deleted while its instance runs", function()
    launch()
    advance(15)
    local name = nodes()[1].metadata.name
    ok("DELETE", "/api/v1/nodes/" .. name)
    advance(60)
    assert.equal(0, #nodes())
    assert.is_false(ok("GET", "/_sim/state").kubelet.nodes[1].exists)
  end)

  it("stays out of the way of a Node someone else registered for the instance", function()
    local id = launch()
    ok("POST", "/api/v1/nodes", { metadata = { name = "by-hand" }, spec = { providerID = "cn-hangzhou." .. id } })
    advance(15)
    local list = nodes()
    assert.equal(1, #list)
    assert.same({ "by-hand", false }, { list[1].metadata.name, list[1].status ~= nil })
    ecs("DeleteInstance", { InstanceId = id, Force = "true" })
    assert.is_nil(nodes()[1].status, "not marked Unknown either")
    assert.is_true(ok("GET", "/_sim/state").kubelet.nodes[1].registered_elsewhere)
  end)

  it("holds a forced Ready condition until it is released", function()
    launch()
    advance(15)
    local name = nodes()[1].metadata.name
    local forced = ok("POST", "/_sim/kubelet", { node = name, ready = false })
    local ready = condition(forced, "Ready")
    assert.same({ "False", "KubeletNotReady" }, { ready.status, ready.reason })
    advance(30)
    assert.equal("False", condition(nodes()[1], "Ready").status)
    ok("POST", "/_sim/kubelet", { node = name, ready = "Unknown" })
    assert.equal("Unknown", condition(nodes()[1], "Ready").status)
    local released = ok("POST", "/_sim/kubelet", { node = name, ready = json.null })
    assert.equal("True", condition(released, "Ready").status)
    assert.equal(404, (call("POST", "/_sim/kubelet", { node = "nope", ready = false })))
    assert.equal(400, (call("POST", "/_sim/kubelet", { node = name, ready = "maybe" })))
  end)

  it("writes nothing while nothing changes", function()
    launch()
    advance(15)
    local before = ok("GET", "/api/v1/nodes").metadata.resourceVersion
    for _ = 1, 3 do ok("GET", "/api/v1/namespaces/default/pods") end
    advance(120)
    assert.equal(before, ok("GET", "/api/v1/nodes").metadata.resourceVersion)
  end)
end)

describe("kubernetes simulator: a spot reclaim with notice", function()
  local function reclaim(body)
    local res = alibaba.handle { service = "alibaba", method = "POST", path = "/_sim/reclaim", query = "",
      headers = {}, body = json.encode(body) }
    return res.status, json.decode(res.body)
  end
  local function instance_ids()
    local ids = {}
    for _, inst in ipairs(ecs("DescribeInstances", {}).Instances.Instance) do ids[#ids + 1] = inst.InstanceId end
    table.sort(ids)
    return ids
  end
  local function sorted(list)
    table.sort(list)
    return list
  end

  it("shows InstanceExpired on the spot node during the notice, then releases the instance", function()
    local id, other = launch({ SpotStrategy = "SpotAsPriceGo" }), launch({ SpotStrategy = "SpotAsPriceGo" })
    advance(15)
    local status, answer = reclaim({ instance_id = id, notice_seconds = 120 })
    assert.equal(200, status)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", answer.termination_time)
    local by_provider = {}
    for _, n in ipairs(nodes()) do by_provider[n.spec.providerID] = n end
    local expired = condition(by_provider["cn-hangzhou." .. id], "InstanceExpired")
    assert.same({ "True", "SpotInstanceReclaim" }, { expired.status, expired.reason })
    assert.matches(id, expired.message, 1, true)
    assert.matches(answer.termination_time, expired.message, 1, true)
    assert.is_nil(condition(by_provider["cn-hangzhou." .. other], "InstanceExpired"))
    assert.equal("True", condition(by_provider["cn-hangzhou." .. id], "Ready").status, "still running")

    advance(119)
    assert.same(sorted { id, other }, instance_ids(), "not released before its time")
    advance(1)
    assert.same({ other }, instance_ids())
    for _, n in ipairs(nodes()) do
      if n.spec.providerID == "cn-hangzhou." .. id then assert.equal("Unknown", condition(n, "Ready").status) end
    end
  end)

  it("defaults the notice to 300 seconds and refuses on-demand and unknown instances", function()
    local spot, od = launch({ SpotStrategy = "SpotAsPriceGo" }), launch()
    local status = reclaim({ instance_id = spot })
    assert.equal(200, status)
    advance(299)
    assert.equal(2, #instance_ids())
    advance(1)
    assert.same({ od }, instance_ids())
    local refused, err = reclaim({ instance_id = od, notice_seconds = 60 })
    assert.equal(400, refused)
    assert.matches("on%-demand", err.error)
    assert.equal(404, (reclaim({ instance_id = "i-bp1nosuchinstance00" })))
    assert.equal(400, (reclaim({ notice_seconds = 60 })))
    advance(3600)
    assert.same({ od }, instance_ids(), "the on-demand instance is never reclaimed")
  end)
end)

describe("kubernetes simulator: binder", function()
  it("binds a pending pod to the fitting node with the most free cpu, and starts it", function()
    ready_node("small", { cpu = "1" })
    ready_node("big", { cpu = "4" })
    local rv = ok("GET", "/api/v1/namespaces/default/pods").metadata.resourceVersion
    pod("web-1")
    local p = get_pod("web-1")
    assert.equal("big", p.spec.nodeName)
    assert.equal("Running", p.status.phase)
    assert.equal("True", condition(p, "PodScheduled").status)
    assert.equal("True", condition(p, "Ready").status)
    -- a watcher from before sees the pod added, then bound
    local _, _, res = call("GET", "/api/v1/namespaces/default/pods?watch=1&resourceVersion=" .. rv)
    local types = {}
    for line in res.body:gmatch("[^\n]+") do types[#types + 1] = json.decode(line).type end
    assert.same({ "ADDED", "MODIFIED" }, types)
  end)

  it("counts the requests of the pods already on a node", function()
    ready_node("only", { cpu = "1" })
    pod("a", { cpu = "600m" })
    pod("b", { cpu = "600m" })
    assert.equal("only", get_pod("a").spec.nodeName)
    local b = get_pod("b")
    assert.is_nil(b.spec.nodeName)
    assert.equal("Pending", b.status.phase)
    local scheduled = condition(b, "PodScheduled")
    assert.same({ "False", "Unschedulable", "0/1 nodes are available: 1 Insufficient cpu." },
      { scheduled.status, scheduled.reason, scheduled.message })
  end)

  it("marks an unschedulable pod once, not on every sync", function()
    pod("lonely")
    assert.equal("no nodes available to schedule pods", condition(get_pod("lonely"), "PodScheduled").message)
    local rv = get_pod("lonely").metadata.resourceVersion
    ok("GET", "/api/v1/nodes")
    ok("GET", "/_sim/state")
    assert.equal(rv, get_pod("lonely").metadata.resourceVersion)
  end)

  it("keeps pods off nodes whose taints they do not tolerate, and off nodes that are not Ready", function()
    ready_node("gpu", { taints = { { key = "dedicated", value = "gpu", effect = "NoSchedule" } } })
    ready_node("down", { ready = "False" })
    ready_node("cordoned", { unschedulable = true })
    pod("plain")
    assert.equal("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had "
      .. "untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable.",
      condition(get_pod("plain"), "PodScheduled").message)
    pod("tolerant", { tolerations = { { key = "dedicated", operator = "Equal", value = "gpu",
      effect = "NoSchedule" } } })
    assert.equal("gpu", get_pod("tolerant").spec.nodeName)
    pod("anything", { tolerations = { { operator = "Exists" } } })
    assert.equal("gpu", get_pod("anything").spec.nodeName)
    pod("any-value", { tolerations = { { key = "dedicated", operator = "Exists" } } })
    assert.equal("gpu", get_pod("any-value").spec.nodeName)
    pod("wrong-value", { tolerations = { { key = "dedicated", value = "tpu", effect = "NoSchedule" } } })
    assert.is_nil(get_pod("wrong-value").spec.nodeName)
  end)

  it("honours nodeSelector and required node affinity", function()
    ready_node("zone-a", { labels = { zone = "a", generation = "7" } })
    ready_node("zone-b", { labels = { zone = "b", generation = "8" }, cpu = "8" })
    pod("selected", { nodeSelector = { zone = "a" } })
    assert.equal("zone-a", get_pod("selected").spec.nodeName)
    local function affinity(exprs)
      return { nodeAffinity = { requiredDuringSchedulingIgnoredDuringExecution = {
        nodeSelectorTerms = { { matchExpressions = exprs } } } } }
    end
    pod("newer", { affinity = affinity { { key = "generation", operator = "Gt", values = { "7" } } } })
    assert.equal("zone-b", get_pod("newer").spec.nodeName)
    pod("not-b", { affinity = affinity { { key = "zone", operator = "NotIn", values = { "b" } } } })
    assert.equal("zone-a", get_pod("not-b").spec.nodeName)
    pod("nowhere", { affinity = affinity { { key = "gpu", operator = "Exists" } } })
    assert.equal("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
      condition(get_pod("nowhere"), "PodScheduled").message)
  end)

  it("binds through the binding subresource, once", function()
    ready_node("n1", { cpu = "1" })
    ok("POST", "/api/v1/namespaces/default/pods", { metadata = { name = "manual" },
      spec = { schedulerName = "my-scheduler", containers = { { name = "app", image = "nginx" } } } })
    assert.is_nil(get_pod("manual").spec.nodeName, "another scheduler's pod is left alone")
    local status, body = call("POST", "/api/v1/namespaces/default/pods/manual/binding",
      { apiVersion = "v1", kind = "Binding", metadata = { name = "manual" }, target = { kind = "Node", name = "n1" } })
    assert.equal(201, status)
    assert.same({ "Status", "Success" }, { body.kind, body.status })
    local p = get_pod("manual")
    assert.same({ "n1", "Running" }, { p.spec.nodeName, p.status.phase })
    status, body = call("POST", "/api/v1/namespaces/default/pods/manual/binding", { target = { name = "n1" } })
    assert.equal(409, status)
    assert.matches('already assigned to node "n1"', body.message)
    assert.equal(404, (call("POST", "/api/v1/namespaces/default/pods/ghost/binding", { target = { name = "n1" } })))
    assert.equal(422, (call("POST", "/api/v1/namespaces/default/pods/manual/binding", { target = {} })))
  end)

  it("runs a pending pod on the node of an instance that comes up", function()
    pod("waiting")
    assert.is_nil(get_pod("waiting").spec.nodeName)
    launch()
    advance(15)
    local p = get_pod("waiting")
    assert.equal(nodes()[1].metadata.name, p.spec.nodeName)
    assert.equal("Running", p.status.phase)
  end)
end)

describe("kubernetes simulator: disruption budgets and eviction", function()
  local PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"

  local function evict(name, query)
    return call("POST", "/api/v1/namespaces/default/pods/" .. name .. "/eviction" .. (query or ""),
      { apiVersion = "policy/v1", kind = "Eviction", metadata = { name = name, namespace = "default" } })
  end

  local function budget(spec)
    spec.selector = spec.selector or { matchLabels = { app = "web" } }
    return ok("POST", PDBS, { metadata = { name = "web" }, spec = spec })
  end

  local function running(n)
    ready_node("n1", { cpu = "16" })
    for i = 1, n do pod("web-" .. i) end
  end

  it("refuses an eviction a minAvailable budget cannot afford, then allows it once another pod runs", function()
    running(2)
    budget { minAvailable = 2 }
    local status, refusal = evict("web-1")
    assert.equal(429, status)
    assert.same({ "Status", "Failure", "TooManyRequests", 429 }, { refusal.kind, refusal.status, refusal.reason,
      refusal.code })
    assert.equal("Cannot evict pod as it would violate the pod's disruption budget.", refusal.message)
    assert.same({ { reason = "DisruptionBudget", message = "The disruption budget web needs 2 healthy pods and has "
      .. "2 currently" } }, refusal.details.causes)
    assert.equal(200, (call("GET", "/api/v1/namespaces/default/pods/web-1")))

    pod("web-3", { nodeSelector = { pool = "later" } })
    assert.equal(429, (evict("web-1")), "a pending pod is not healthy")
    ready_node("n2", { labels = { pool = "later" } })
    assert.equal("Running", get_pod("web-3").status.phase)
    local s = ok("GET", PDBS .. "/web").status
    assert.same({ 3, 2, 1, 3 }, { s.currentHealthy, s.desiredHealthy, s.disruptionsAllowed, s.expectedPods })
    local done
    status, done = evict("web-1")
    assert.equal(201, status)
    assert.same({ "Status", "Success", 201 }, { done.kind, done.status, done.code })
    assert.equal(404, (call("GET", "/api/v1/namespaces/default/pods/web-1")))
    s = ok("GET", PDBS .. "/web").status
    assert.same({ 2, 2, 0, 2, 1 }, { s.currentHealthy, s.desiredHealthy, s.disruptionsAllowed, s.expectedPods,
      s.observedGeneration })
    assert.equal("InsufficientPods", condition(ok("GET", PDBS .. "/web"), "DisruptionAllowed").reason)
  end)

  it("rounds a percentage minAvailable up", function()
    running(3)
    budget { minAvailable = "50%" }
    assert.equal(2, ok("GET", PDBS .. "/web").status.desiredHealthy)
    assert.equal(201, (evict("web-1")))
    assert.equal(201, (evict("web-2")), "50% of the 2 pods left is 1")
    local status, refusal = evict("web-3")
    assert.equal(429, status)
    assert.equal("The disruption budget web needs 1 healthy pods and has 1 currently",
      refusal.details.causes[1].message, "50% of 1 pod, rounded up")
    assert.equal(1, #ok("GET", PDBS).items)
  end)

  it("counts pods that are not healthy against maxUnavailable", function()
    running(2)
    pod("web-3", { nodeSelector = { pool = "none" } })
    budget { maxUnavailable = 1 }
    local s = ok("GET", PDBS .. "/web").status
    assert.same({ 2, 2, 0, 3 }, { s.currentHealthy, s.desiredHealthy, s.disruptionsAllowed, s.expectedPods })
    assert.equal(429, (evict("web-1")))
    assert.equal(201, (evict("web-3")), "a pod that is not running needs no budget")
    assert.equal(201, (evict("web-1")))
  end)

  it("only consults budgets that select the pod", function()
    running(1)
    budget { minAvailable = 5,
      selector = { matchExpressions = { { key = "app", operator = "In", values = { "db" } } } } }
    assert.equal(201, (evict("web-1")))
  end)

  it("honours finalizers, dryRun and a missing pod", function()
    running(1)
    ok("POST", "/api/v1/namespaces/default/pods", { metadata = { name = "kept", finalizers = { "example.com/x" } },
      spec = { containers = { { name = "app", image = "nginx" } } } })
    assert.equal(201, (evict("web-1", "?dryRun=All")))
    assert.equal(200, (call("GET", "/api/v1/namespaces/default/pods/web-1")))
    assert.equal(201, (evict("kept")))
    assert.truthy(get_pod("kept").metadata.deletionTimestamp)
    local status, missing = evict("ghost")
    assert.equal(404, status)
    assert.equal('pods "ghost" not found', missing.message)
    assert.equal(400, (call("POST", "/api/v1/namespaces/default/pods/web-1/eviction",
      { kind = "Eviction", metadata = { name = "other" } })))
    assert.equal(405, (call("GET", "/api/v1/namespaces/default/pods/web-1/eviction")))
  end)

  it("rejects a budget with both minAvailable and maxUnavailable, or a bad percentage", function()
    local status, e = call("POST", PDBS, { metadata = { name = "both" },
      spec = { minAvailable = 1, maxUnavailable = 1 } })
    assert.equal(422, status)
    assert.matches("minAvailable and maxUnavailable cannot be both set", e.message)
    assert.equal(422, (call("POST", PDBS, { metadata = { name = "pct" }, spec = { minAvailable = "150%" } })))
  end)
end)
