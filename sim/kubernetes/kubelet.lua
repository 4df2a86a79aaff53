-- The simulated kubelet of every instance the Alibaba simulator runs: a Node registers once its
-- instance is Running and its user data runs a valid ACK attach command (sim.alibaba.attach.parse) or
-- a kubeadm join of the simulated kubeadm cluster (sim.alibaba.kubeadm.parse), with the providerID,
-- capacity and Ready condition a real ACK kubelet posts and the labels, taints and maxPods the command
-- names; an instance without one never joins, and summary() says why. Its
-- conditions turn Unknown once the instance is released or Stopped, as the node lifecycle controller
-- marks a node whose kubelet went silent.
--
-- It never deletes a Node (controllers do), and a Node deleted while its instance runs stays deleted:
-- registration happens once per instance. Both simulators share one script generation, so
-- sim.alibaba.state here is the Alibaba simulator's own instance table.
--
-- There are no timers for Lua handlers: sync() runs before every request and on every watch tick
-- (init.lua), and does nothing unless an instance appeared, went or changed status.
local luaprov = require "luaprov"
local capacity = require "providers.alibaba.capacity"
local clock = require "sim.clock"
local attach = require "sim.alibaba.attach"
local kubeadm = require "sim.alibaba.kubeadm"
local catalogue = require "sim.alibaba.catalogue"
local reclaim = require "sim.alibaba.reclaim"
local state = require "sim.alibaba.state"
local conditions = require "sim.kubernetes.conditions"
local objects = require "sim.kubernetes.objects"
local store = require "sim.kubernetes.store"
local wire = require "sim.kubernetes.wire"

local array = wire.array
local sha256_hex = luaprov.crypto.sha256_hex

local M = {}

M.KUBELET_VERSION = "v1.31.0"
M.MAX_PODS = 110

local NODES = store.find("", "v1", "nodes")

-- instance id -> the name of the Node registered for it, kept after the Node is deleted, or false when
-- a Node with its providerID was there first (a test acting as the kubelet): then the kubelet stays out.
-- node name -> forced Ready status.
-- instance id -> {user_data, parsed} or {user_data, why}: what attach.parse made of its user data (it
-- cannot change while the instance runs; an Alibaba reset may reuse the ID), so a refusal is logged once.
local registered, forced, fingerprint, attachments

function M.reset()
  registered, forced, fingerprint, attachments = {}, {}, nil, {}
end

-- The attach command (or kubeadm join) of inst's user data, or nil when it has none that joins this
-- cluster.
local function attachment(inst)
  local a = attachments[inst.id]
  if not a or a.user_data ~= inst.user_data then
    local parse = kubeadm.joins(inst.user_data) and kubeadm.parse or attach.parse
    local parsed, why = parse(inst.user_data)
    a = { user_data = inst.user_data, parsed = parsed, why = why }
    attachments[inst.id] = a
    if not parsed then
      luaprov.log.warn("simulated kubelet: instance does not join the cluster", { instance_id = inst.id,
        reason = why })
    end
  end
  return a.parsed
end

-- The kubelet names its Node after the host, unless the hostname cannot be an object name; ACK then
-- names it "<region>.<private ip>".
local function node_name(inst)
  local host = type(inst.hostname) == "string" and inst.hostname:lower() or ""
  if objects.valid_name(host) then return host end
  return catalogue.REGION .. "." .. inst.ip
end

-- The attach command's --labels, then the kubelet's own, which describe the machine.
local function labels(inst, name, arch, attached)
  local l = {}
  for k, v in pairs(attached.labels) do l[k] = v end
  l["kubernetes.io/hostname"], l["kubernetes.io/arch"], l["kubernetes.io/os"] = name, arch, "linux"
  l["node.kubernetes.io/instance-type"], l["topology.kubernetes.io/zone"] = inst.type.id, inst.zone
  l["topology.kubernetes.io/region"] = catalogue.REGION
  return l
end

local function max_pods(attached)
  local kubelet = attached.node_config.kubelet_config
  return type(kubelet) == "table" and kubelet.maxPods or M.MAX_PODS
end

-- Capacity as the guest sees it (the hypervisor keeps part of the memory) and allocatable minus
-- ACK's kube-reserved: the provider's own formulas, so a node holds what Karpenter predicted.
local function resources(inst, pods)
  local t = inst.type
  local it = { CpuCoreCount = t.cpu, MemorySize = t.memory }
  local mib, cpu_milli = capacity.memory_mib(it), t.cpu * 1000
  local disk_ki = (inst.system_disk and inst.system_disk.size or 40) * 1024 * 1024
  local cap = { cpu = tostring(t.cpu), memory = mib * 1024 .. "Ki", pods = tostring(pods),
    ["ephemeral-storage"] = disk_ki .. "Ki" }
  if t.gpu > 0 then cap["nvidia.com/gpu"] = tostring(t.gpu) end
  local alloc = {}
  for k, v in pairs(cap) do alloc[k] = v end
  alloc.cpu = capacity.quantity_milli(cpu_milli - capacity.cpu_overhead_milli(cpu_milli))
  alloc.memory = (mib - capacity.memory_overhead_mib(t.memory * 1024, pods)) * 1024 .. "Ki"
  return cap, alloc
end

-- What the kubelet says of itself and the node lifecycle controller says of a silent kubelet.
local HEALTHY = {
  { "Ready", "True", "KubeletReady", "kubelet is posting ready status" },
  { "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available" },
  { "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure" },
  { "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available" },
}
local NOT_READY = { "Ready", "False", "KubeletNotReady", "container runtime network not ready: NetworkReady=false "
  .. "reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized" }
local SILENT = "Kubelet stopped posting node status."

local function condition_rows(ready)
  if ready == "True" then return HEALTHY end
  if ready == "False" then return { NOT_READY } end
  local rows = {}
  for i, row in ipairs(HEALTHY) do rows[i] = { row[1], "Unknown", "NodeStatusUnknown", SILENT } end
  return rows
end

-- Returns whether node changed.
local function post_conditions(node, ready, now)
  local changed = false
  for _, row in ipairs(condition_rows(ready)) do
    local cond = { type = row[1], status = row[2], reason = row[3], message = row[4], lastHeartbeatTime = now }
    if conditions.set(node, cond, now) then changed = true end
  end
  return changed
end

-- A reclaim notice of the instance (sim/alibaba/reclaim.lua) as ACK shows it: the condition
-- InstanceExpired=True on its Node. Returns whether node changed.
local function post_notice(node, inst, now)
  local cond = reclaim.condition(inst)
  if not cond then return false end
  cond.lastHeartbeatTime = now
  return conditions.set(node, cond, now)
end

local function node_object(inst, name, now, attached)
  local arch = inst.type.arch == "ARM" and "arm64" or "amd64"
  local cap, alloc = resources(inst, max_pods(attached))
  local machine = sha256_hex("machine:" .. inst.id)
  local node = {
    apiVersion = "v1", kind = "Node",
    metadata = { name = name, labels = labels(inst, name, arch, attached), annotations = {
      ["node.alpha.kubernetes.io/ttl"] = "0", ["volumes.kubernetes.io/controller-managed-attach-detach"] = "true" } },
    spec = { providerID = catalogue.REGION .. "." .. inst.id },
    status = {
      capacity = cap, allocatable = alloc,
      addresses = array { { type = "InternalIP", address = inst.ip }, { type = "Hostname", address = name } },
      daemonEndpoints = { kubeletEndpoint = { Port = 10250 } },
      nodeInfo = { kubeletVersion = M.KUBELET_VERSION, kubeProxyVersion = M.KUBELET_VERSION, architecture = arch,
        operatingSystem = "linux", containerRuntimeVersion = "containerd://1.6.34",
        osImage = "Alibaba Cloud Linux 3.2104 U11 (OpenAnolis Edition)",
        kernelVersion = "5.10.134-17.3.al8." .. (arch == "arm64" and "aarch64" or "x86_64"),
        machineID = machine:sub(1, 32), systemUUID = machine:sub(33, 64),
        bootID = sha256_hex("boot:" .. inst.id):sub(1, 32) },
    },
  }
  -- the kubelet registers with the attach command's --taints (--register-with-taints)
  if #attached.taints > 0 then
    node.spec.taints = array()
    for i, t in ipairs(attached.taints) do node.spec.taints[i] = { key = t.key, value = t.value, effect = t.effect } end
  end
  post_conditions(node, "True", now)
  post_notice(node, inst, now)
  return node
end

-- Applies post(node, now) (which returns whether it changed node) to a copy of the Node name, and
-- stores the copy when it changed.
local function rewrite(name, post)
  local current = store.get(NODES, nil, name)
  if not current then return end
  local node = store.copy(current)
  if post(node, store.now()) then store.put(NODES, nil, name, node, "MODIFIED") end
end

-- Writes the node's conditions for ready ("True", "False", "Unknown") unless they say so already.
local function report(name, ready)
  rewrite(name, function(node, now) return post_conditions(node, ready, now) end)
end

-- Writes the reclaim notice of inst on the Node name unless it shows it already.
local function report_notice(name, inst)
  rewrite(name, function(node, now) return post_notice(node, inst, now) end)
end

local function registered_elsewhere(provider_id)
  for _, e in ipairs(store.list(NODES)) do
    if type(e.object.spec) == "table" and e.object.spec.providerID == provider_id then return true end
  end
  return false
end

local function register(inst)
  if registered_elsewhere(catalogue.REGION .. "." .. inst.id) then
    registered[inst.id] = false
    return
  end
  local attached = attachment(inst)
  if not attached then return end  -- never joins: no valid attach command
  local name = node_name(inst)
  registered[inst.id] = name
  if store.get(NODES, nil, name) then
    report(name, forced[name] or "True")  -- a Node of that name exists: this kubelet takes it over
  else
    objects.insert(NODES, nil, node_object(inst, name, store.now(), attached))
  end
end

local function observe()
  reclaim.sweep()
  local now = clock.now()
  local instances, statuses, parts = state.list(), {}, {}
  for i, inst in ipairs(instances) do
    statuses[inst.id] = state.status(inst, now)
    parts[i] = inst.id .. "=" .. statuses[inst.id] .. (inst.reclaim_at and "!" .. inst.reclaim_at or "")
  end
  return instances, statuses, table.concat(parts, ",")
end

--- sync(): registers the Nodes of newly Running instances and reports the readiness of known ones.
function M.sync()
  local instances, statuses, seen = observe()
  if seen == fingerprint then return end
  fingerprint = seen
  for _, inst in ipairs(instances) do
    if statuses[inst.id] == "Running" then
      local name = registered[inst.id]
      if name == nil then
        register(inst)
      elseif name and not forced[name] then
        report(name, "True")
      end
      if registered[inst.id] then report_notice(registered[inst.id], inst) end
    end
  end
  local silent = {}
  for id, name in pairs(registered) do
    local status = statuses[id]
    if name and (status == nil or status == "Stopped") and not forced[name] then silent[#silent + 1] = name end
  end
  table.sort(silent)
  for _, name in ipairs(silent) do report(name, "Unknown") end
end

local FORCED_VALUES = { [true] = "True", [false] = "False", Unknown = "Unknown" }

--- force(name, ready) -> the node | nil, message: holds the node's Ready condition at ready (true,
-- false or "Unknown") whatever its instance does; ready = json null gives it back to the lifecycle.
function M.force(name, ready)
  if type(name) ~= "string" or not store.get(NODES, nil, name) then return nil, "no node " .. tostring(name) end
  if not wire.present(ready) then
    forced[name], fingerprint = nil, nil
    M.sync()
    return store.get(NODES, nil, name)
  end
  local value = FORCED_VALUES[ready]
  if not value then return nil, 'ready must be true, false, "Unknown" or null' end
  forced[name] = value
  report(name, value)
  return store.get(NODES, nil, name)
end

--- external() -> the Nodes a kubelet would register in another API server (luaprov sim
-- --kubelet-kubeconfig): {instance_id, ready, node} for each Running instance whose user data runs a
-- valid attach command, node its Node object with the conditions of ready ("True", or what force()
-- holds for its name). Reads the clouds only; the simulator's own store is not touched.
function M.external()
  local now, stamp = clock.now(), store.now()
  local nodes = array()
  for _, inst in ipairs(state.list()) do
    local attached = state.status(inst, now) == "Running" and attachment(inst)
    if attached then
      local name = node_name(inst)
      local ready = forced[name] or "True"
      local node = node_object(inst, name, stamp, attached)
      if ready ~= "True" then
        node.status.conditions = nil
        post_conditions(node, ready, stamp)
      end
      nodes[#nodes + 1] = { instance_id = inst.id, ready = ready, node = node }
    end
  end
  table.sort(nodes, function(a, b) return a.instance_id < b.instance_id end)
  return { nodes = nodes }
end

--- summary() -> what /_sim/state shows: each instance the kubelet has seen Running, its node (or
-- registered_elsewhere, or not_registered: why its user data does not join the cluster), and the
-- forced conditions.
function M.summary()
  local nodes = array()
  for id, name in pairs(registered) do
    local node = name and store.get(NODES, nil, name)
    nodes[#nodes + 1] = { instance_id = id, node = name or nil, exists = node ~= nil, registered_elsewhere = not name,
      ready = node and conditions.status(node, "Ready") or nil, forced = name and forced[name] or nil }
  end
  for id, a in pairs(attachments) do
    if not a.parsed and registered[id] == nil then
      nodes[#nodes + 1] = { instance_id = id, exists = false, not_registered = a.why }
    end
  end
  table.sort(nodes, function(a, b) return a.instance_id < b.instance_id end)
  return { nodes = nodes }
end

M.reset()

return M
