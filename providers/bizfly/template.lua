-- What a new node of a worker pool will look like, for the autoscaler's scale-from-zero
-- (TemplateNodeInfo; upstream leaves it unimplemented): capacity from the pool's
-- flavor, allocatable after the kubelet's reservations, the pool's labels and taints, the well-known
-- labels every node gets, and the GPU label on GPU flavors.
--
--   template.flavor(pool) -> {name, cpu, memory_mib, gpus, gpu_model} | nil when not understood
--   template.build(pool) -> {labels, taints, capacity, allocatable} | nil, {code = "NotFound", message}
local luaprov = require "luaprov"

local json = luaprov.json

local M = {}

M.GPU_LABEL = "bke.bizflycloud.vn/gpu-node"
M.GPU_RESOURCE = "nvidia.com/gpu"
M.DEFAULT_PODS = 110
-- Bizfly's worker images are x86_64 Linux.
M.ARCH, M.OS = "amd64", "linux"

local EFFECTS = { NoSchedule = true, PreferNoSchedule = true, NoExecute = true }

local function present(v)
  return v ~= nil and v ~= json.null
end

local function positive_int(v)
  local n = math.tointeger(v)
  if n and n > 0 then return n end
  return nil
end

-- The flavor_detail.gpu shape is not documented (the answers seen so far held only null): accept a
-- count, a model name, or an object with either.
local function gpu_of(detail_gpu, name, category)
  local count, model
  if type(detail_gpu) == "number" then
    count = positive_int(detail_gpu)
  elseif type(detail_gpu) == "string" and detail_gpu ~= "" then
    model = detail_gpu
  elseif type(detail_gpu) == "table" then
    count = positive_int(detail_gpu.count or detail_gpu.quantity or detail_gpu.number)
    for _, k in ipairs({ "model", "type", "name" }) do
      if type(detail_gpu[k]) == "string" and detail_gpu[k] ~= "" then model = detail_gpu[k] break end
    end
    count = count or 1
  end
  -- Names like "nix.8c_32g_1gpu": the count is written before "gpu".
  local lower = name:lower()
  local from_name = positive_int(tonumber(lower:match("(%d+)x?gpu")))
  count = count or from_name or ((model or lower:find("gpu", 1, true) or category == "gpu") and 1) or 0
  return count, model
end

--- flavor(pool) -> what the pool's flavor gives a node, from flavor_detail when the API sends it,
-- else from the name ("nix.4c_8g", "3c_6g_enterprise": <vCPUs>c_<GiB>g). nil when neither says.
function M.flavor(pool)
  local name = type(pool.flavor) == "string" and pool.flavor or ""
  local detail = type(pool.flavor_detail) == "table" and pool.flavor_detail or {}
  local cpu, memory_mib = positive_int(detail.vcpus), positive_int(detail.ram)
  if not (cpu and memory_mib) then
    local c, g = name:match("(%d+)c_(%d+)g")
    cpu, memory_mib = positive_int(tonumber(c)), g and positive_int(tonumber(g) * 1024)
  end
  if not (cpu and memory_mib) then return nil end
  local gpus, model = gpu_of(present(detail.gpu) and detail.gpu or nil, name, detail.category)
  return { name = name, cpu = cpu, memory_mib = memory_mib, gpus = gpus, gpu_model = model }
end

-- The kubelet reservations GKE documents (and AKS resembles): a sliding share per CPU core and per
-- GiB of memory, plus the 100 MiB hard-eviction threshold. Bizfly publishes none; an estimate that
-- errs on the side of less allocatable keeps the autoscaler from promising room a node lacks.
local function reserved_millicores(cpu)
  local m = 60                                            -- 6% of the first core
  if cpu > 1 then m = m + 10 end                          -- 1% of the second
  if cpu > 2 then m = m + 5 * (math.min(cpu, 4) - 2) end  -- 0.5% of cores 3-4
  if cpu > 4 then m = m + 2.5 * (cpu - 4) end             -- 0.25% above 4
  return math.ceil(m)
end

local function reserved_memory_mib(mib)
  if mib < 1024 then return 255 end
  local gib, r = mib / 1024, 0
  local steps = { { 4, 0.25 }, { 4, 0.20 }, { 8, 0.10 }, { 112, 0.06 }, { math.huge, 0.02 } }
  for _, s in ipairs(steps) do
    local part = math.min(gib, s[1])
    r = r + part * s[2]
    gib = gib - part
    if gib <= 0 then break end
  end
  return math.ceil(r * 1024)
end

local function mib_quantity(mib)
  if mib % 1024 == 0 then return ("%dGi"):format(mib // 1024) end
  return ("%dMi"):format(mib)
end

local function slug(s)
  return (s:lower():gsub("[^%w]+", "-"):gsub("^%-+", ""):gsub("%-+$", ""))
end

local function taints_of(pool)
  local out = setmetatable({}, json.array_mt)
  if type(pool.taints) ~= "table" then return out end
  for _, t in ipairs(pool.taints) do
    if type(t) == "table" and type(t.key) == "string" and t.key ~= "" and EFFECTS[t.effect] then
      out[#out + 1] = { key = t.key, value = type(t.value) == "string" and t.value or "", effect = t.effect }
    end
  end
  return out
end

--- build(pool) -> the template of a new node of `pool` (a worker-pool detail or listing).
function M.build(pool)
  local f = M.flavor(pool)
  if not f then
    return nil, { code = "NotFound", message = ("flavor %q of worker pool %s is not known: neither flavor_detail nor "
      .. "a <cpu>c_<mem>g name says its size"):format(tostring(pool.flavor), tostring(pool.id)) }
  end
  local labels = {}
  if type(pool.labels) == "table" then
    for k, v in pairs(pool.labels) do
      if type(k) == "string" and type(v) == "string" then labels[k] = v end
    end
  end
  labels["kubernetes.io/os"] = M.OS
  labels["kubernetes.io/arch"] = M.ARCH
  labels["node.kubernetes.io/instance-type"] = f.name
  if type(pool.availability_zone) == "string" and pool.availability_zone ~= "" then
    labels["topology.kubernetes.io/zone"] = pool.availability_zone
  end
  if f.gpus > 0 and not labels[M.GPU_LABEL] then
    -- The autoscaler reads the value as the GPU type (GetNodeGpuConfig).
    labels[M.GPU_LABEL] = f.gpu_model and slug(f.gpu_model) or "true"
  end

  local volume_gib = positive_int(pool.volume_size)
  local capacity = {
    cpu = tostring(f.cpu),
    memory = mib_quantity(f.memory_mib),
    pods = tostring(M.DEFAULT_PODS),
  }
  local allocatable = {
    cpu = ("%dm"):format(f.cpu * 1000 - reserved_millicores(f.cpu)),
    memory = ("%dMi"):format(f.memory_mib - reserved_memory_mib(f.memory_mib) - 100),
    pods = tostring(M.DEFAULT_PODS),
  }
  if volume_gib then
    capacity["ephemeral-storage"] = ("%dGi"):format(volume_gib)
    -- The kubelet evicts below 10% free on the node filesystem.
    allocatable["ephemeral-storage"] = ("%dMi"):format(volume_gib * 1024 * 9 // 10)
  end
  if f.gpus > 0 then
    capacity[M.GPU_RESOURCE] = tostring(f.gpus)
    allocatable[M.GPU_RESOURCE] = tostring(f.gpus)
  end
  return { labels = labels, taints = taints_of(pool), capacity = capacity, allocatable = allocatable }
end

return M
