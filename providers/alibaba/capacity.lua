-- Capacity and overhead of one ECS instance type, from its DescribeInstanceTypes entry and the
-- ECSNodeClass: what `instance_types` reports as `capacity` and `overhead` (rule CP8 in
-- docs/contracts.md). Pure functions, no I/O. The formulas are the upstream provider's (worked
-- examples in spec/lua/providers/alibaba/instancetypes_spec.lua); where rule CP8 differs (the
-- exclusive-ENI resource), the rule wins.
--
-- Public:
--   capacity(it, spec, settings)      -> {resource = quantity}   quantities as Kubernetes strings
--   overhead(it, capacity, kubelet)   -> {kube_reserved, system_reserved, eviction_threshold}
--   pods(it, kubelet, cni)            -> integer
--   memory_mib(it, pct)               -> MiB left after the VM memory overhead
--   keep_for_cni(it, cni)             -> false when the CNI cannot run pods on the type
--   quantity_mib(n), quantity_milli(n) -> "15Gi" / "15319Mi", "4" / "3920m"
-- `it` is a catalogue entry (DescribeInstanceTypes field names). `settings` = {cni, vm_overhead_pct}.
-- `spec` is the ECSNodeClass spec as shape.spec gives it, `kubelet` its kubelet settings.
local luaprov = require "luaprov"

local json = luaprov.json
local ceil, floor, min, tointeger = math.ceil, math.floor, math.min, math.tointeger
local format, lower = string.format, string.lower

local M = {}

-- Kubelet's own default, and upstream's KubeletMaxPods: used when the CNI sets no other limit.
M.DEFAULT_PODS = 110
-- Flannel clusters (upstream): 256 pods, the /24 per node that ACK's Flannel hands out.
M.FLANNEL_PODS = 256
-- Upstream's --vm-memory-overhead-percent default: the hypervisor keeps ~6.5 % of the memory.
M.DEFAULT_VM_OVERHEAD_PCT = 0.065
-- Terway in shared-ENI mode needs at least 11 pod IPs on the secondary ENIs (upstream filter).
M.TERWAY_MIN_POD_IPS = 11
M.EXCLUSIVE_ENI = "alibabacloud.com/exclusive-eni"

local function present(v)
  return v ~= nil and v ~= json.null
end

local function int(v)
  if type(v) ~= "number" then v = tonumber(v) end
  if not v then return 0 end
  return tointeger(v) or floor(v)
end

-- Binary quantities the way Kubernetes canonicalises them: the largest suffix that is exact.
function M.quantity_mib(mib)
  mib = int(mib)
  if mib ~= 0 and mib % 1024 == 0 then return format("%dGi", mib // 1024) end
  return format("%dMi", mib)
end

function M.quantity_milli(milli)
  milli = int(milli)
  if milli % 1000 == 0 then return format("%d", milli // 1000) end
  return format("%dm", milli)
end

-- The CNI decides how pods get addresses, so how many fit (upstream's GetClusterCNI: ACK
-- reports "terway-eniip", "terway-eni", "Flannel", ...). Upstream reads it from the ACK cluster;
-- here it comes from settings (see instancetypes.lua for where).
local function cni_kind(cni)
  local c = lower(cni or "")
  if c == "terway-eni" then return "terway-exclusive" end
  if c:find("^terway") then return "terway" end
  if c == "flannel" then return "flannel" end
  return "other"
end

-- Shared-ENI Terway gives each pod a secondary IP of a secondary ENI: a type whose secondary ENIs
-- hold fewer than 11 IPs cannot run a useful node and upstream leaves it out.
function M.keep_for_cni(it, cni)
  if cni_kind(cni) ~= "terway" then return true end
  return (int(it.EniQuantity) - 1) * int(it.EniPrivateIpAddressQuantity) >= M.TERWAY_MIN_POD_IPS
end

-- kubelet maxPods wins; else the CNI's limit; then podsPerCore caps it, as upstream does.
-- The "+3" of the Terway formulas counts the host-network pods that need no pod IP.
function M.pods(it, kubelet, cni)
  kubelet = present(kubelet) and kubelet or {}
  local count
  if present(kubelet.maxPods) then
    count = int(kubelet.maxPods)
  else
    local kind = cni_kind(cni)
    if kind == "terway" then
      count = (int(it.EniQuantity) - 1) * int(it.EniPrivateIpAddressQuantity) + 3
    elseif kind == "terway-exclusive" then
      count = int(it.EniQuantity) - 1 + 3
    elseif kind == "flannel" then
      count = M.FLANNEL_PODS
    else
      count = M.DEFAULT_PODS
    end
  end
  local per_core = present(kubelet.podsPerCore) and int(kubelet.podsPerCore) or 0
  if per_core > 0 then count = min(per_core * int(it.CpuCoreCount), count) end
  if count < 0 then count = 0 end
  return count
end

-- MemorySize is GiB as a float (0.5, 1.5, 16). Work in whole MiB: every real size is a whole number
-- of MiB, and integer arithmetic keeps ceil() from tipping over on float noise (1000 * 0.065).
local function raw_mib(it)
  return floor((tonumber(it.MemorySize) or 0) * 1024 + 0.5)
end

-- Memory left after the hypervisor's share: M - ceil(M * pct), in MiB, as upstream computes it.
function M.memory_mib(it, pct)
  local mib = raw_mib(it)
  if mib == 0 then return 0 end
  pct = pct or M.DEFAULT_VM_OVERHEAD_PCT
  local per_mille = pct * 1000
  local overhead
  if per_mille == floor(per_mille) then
    overhead = (mib * int(per_mille) + 999) // 1000
  else
    overhead = ceil(mib * pct - 1e-9)
  end
  return mib - overhead
end


-- The GPU vendor is the first word of GPUSpec ("NVIDIA T4", "AMD Radeon Pro V520").
local function gpu_vendor(it)
  if int(it.GPUAmount) <= 0 or not present(it.GPUSpec) then return nil end
  return lower(tostring(it.GPUSpec):match("^%s*(%S+)") or "")
end

-- The system disk is the node's ephemeral storage.
function M.capacity(it, spec, settings)
  settings = settings or {}
  local cap = {
    cpu = format("%d", int(it.CpuCoreCount)),
    memory = M.quantity_mib(M.memory_mib(it, settings.vm_overhead_pct)),
    pods = format("%d", M.pods(it, spec.kubelet, settings.cni)),
    ["ephemeral-storage"] = format("%dGi", spec.systemDisk.size),
  }
  local vendor = gpu_vendor(it)
  if vendor == "nvidia" then
    cap["nvidia.com/gpu"] = format("%d", int(it.GPUAmount))
  elseif vendor == "amd" then
    cap["amd.com/gpu"] = format("%d", int(it.GPUAmount))
  end
  -- Rule CP8: one exclusive ENI per pod on the secondary ENIs, so ENIs - 1 (the primary ENI
  -- stays with the node). A type with a single ENI (or none reported) cannot run exclusive-ENI
  -- pods, so it gets no such resource rather than upstream's 0 or -1.
  local enis = int(it.EniQuantity) - 1
  if enis > 0 then cap[M.EXCLUSIVE_ENI] = format("%d", enis) end
  return cap
end

-- CPU reserved for kubelet and the runtime, in millicores (ACK's reservation policy, as upstream
-- applies it): 60m for the first core, +10m at 2, +5m at 3, +5m at 4, then 0.25 % of the rest.
function M.cpu_overhead_milli(cpu_milli)
  local m = 0
  if cpu_milli >= 1000 then m = m + 60 end
  if cpu_milli >= 2000 then m = m + 10 end
  if cpu_milli >= 3000 then m = m + 5 end
  if cpu_milli >= 4000 then m = m + 5 end
  if cpu_milli > 4000 then m = m + (cpu_milli - 4000) * 25 // 10000 end
  return m
end

-- Memory reserved, in MiB: min(11 MiB per pod + 255, a quarter of the raw memory) + 200. The raw
-- MemorySize (before the VM overhead) is upstream's; the +200 is its measured correction.
function M.memory_overhead_mib(raw, pods)
  local per_pods = 11 * pods + 255
  local quarter = raw * 0.25
  return floor(min(per_pods, quarter)) + 200
end

-- A quantity ("100Mi", "1G", "1.5Gi", "512") in bytes; nil when unreadable.
local BYTES = { [""] = 1, k = 1e3, M = 1e6, G = 1e9, T = 1e12, Ki = 1024, Mi = 1024 ^ 2, Gi = 1024 ^ 3,
  Ti = 1024 ^ 4 }
local function bytes(q)
  local number, unit = tostring(q):match("^%s*(%d+%.?%d*)%s*(%a*)%s*$")
  local scale = BYTES[unit or ""]
  if not number or not scale then return nil end
  return tonumber(number) * scale
end

-- An eviction signal's threshold in MiB: a quantity, or a percentage of the resource's capacity.
local function threshold_mib(value, capacity_mib)
  local pct = type(value) == "string" and value:match("^%s*(%d+%.?%d*)%%%s*$")
  if pct then return ceil(capacity_mib * tonumber(pct) / 100 - 1e-9) end
  local b = bytes(value)
  return b and ceil(b / 1024 ^ 2 - 1e-9) or nil
end

-- What the kubelet keeps back before evicting, per resource: the larger of the hard and soft
-- thresholds of memory.available (memory) and nodefs.available (ephemeral-storage).
local function eviction_threshold(kubelet, cap)
  local out = {}
  local signals = { { "memory.available", "memory" }, { "nodefs.available", "ephemeral-storage" } }
  for _, s in ipairs(signals) do
    local signal, resource = s[1], s[2]
    local capacity_mib = (bytes(cap[resource] or "") or 0) / 1024 ^ 2
    local most
    for _, set in ipairs({ kubelet.evictionHard, kubelet.evictionSoft }) do
      local v = type(set) == "table" and set[signal] or nil
      local mib = v and threshold_mib(v, capacity_mib)
      if mib and (not most or mib > most) then most = mib end
    end
    if most then out[resource] = M.quantity_mib(most) end
  end
  return out
end

local function strings_map(t)
  local out = {}
  if type(t) == "table" then
    for k, v in pairs(t) do
      if type(k) == "string" and type(v) == "string" then out[k] = v end
    end
  end
  return out
end

-- ACK's reservation policy goes in kube-reserved, as upstream does; the class's kubelet settings,
-- which the bootstrap hands the node (bootstrap.lua, --node-config), replace it resource by resource
-- (kubeReserved), and add system-reserved and the eviction thresholds, so allocatable is what the
-- kubelet will report.
function M.overhead(it, cap, kubelet)
  kubelet = type(kubelet) == "table" and kubelet or {}
  local pods = int(cap.pods)
  local kube_reserved = {
    cpu = M.quantity_milli(M.cpu_overhead_milli(int(it.CpuCoreCount) * 1000)),
    memory = M.quantity_mib(M.memory_overhead_mib(raw_mib(it), pods)),
  }
  for k, v in pairs(strings_map(kubelet.kubeReserved)) do kube_reserved[k] = v end
  return {
    kube_reserved = kube_reserved,
    system_reserved = strings_map(kubelet.systemReserved),
    eviction_threshold = eviction_threshold(kubelet, cap),
  }
end

return M
