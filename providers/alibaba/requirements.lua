-- Scheduling requirements of an ECS instance type and of its offerings, with the upstream
-- provider's labels and core Karpenter's well-known ones. Pure functions, no I/O.
--
-- Public:
--   for_type(it, region, offerings) -> {{key, operator, values}} sorted by key
--   for_offering(zone, capacity_type) -> {{key, operator, values}}
--   name_parts(name) -> {category, generation, family, size} (each may be nil)
--   arch(cpu_architecture) -> "amd64" | "arm64"
--
-- Every label the provider knows is defined on every type, with DoesNotExist where the type has no
-- value: core Karpenter's instance types "must define every well-known label", and a label left
-- undefined would let a NodePool requirement on it match any type.
-- Zone, zone ID and capacity type are built from ALL offerings, available or not (rule CP4): what
-- the type is, not what is in stock now; availability lives on the offerings alone.
local luaprov = require "luaprov"
local util = require "providers.alibaba.util"

local json = luaprov.json
local floor, tointeger = math.floor, math.tointeger
local format, lower = string.format, string.lower
local sort = table.sort

local M = {}

local LABEL = "karpenter.k8s.alibabacloud/"
M.ZONE = "topology.kubernetes.io/zone"
M.ZONE_ID = "topology.k8s.alibabacloud/zone-id"
M.CAPACITY_TYPE = "karpenter.sh/capacity-type"
M.INSTANCE_TYPE = "node.kubernetes.io/instance-type"
M.ARCH = "kubernetes.io/arch"
M.OS = "kubernetes.io/os"
M.REGION = "topology.kubernetes.io/region"
M.WINDOWS_BUILD = "node.kubernetes.io/windows-build"
M.INSTANCE_LABELS = {
  category = LABEL .. "instance-category",
  family = LABEL .. "instance-family",
  generation = LABEL .. "instance-generation",
  size = LABEL .. "instance-size",
  cpu = LABEL .. "instance-cpu",
  cpu_model = LABEL .. "instance-cpu-model",
  memory = LABEL .. "instance-memory",
  gpu_name = LABEL .. "instance-gpu-name",
  gpu_manufacturer = LABEL .. "instance-gpu-manufacturer",
  gpu_count = LABEL .. "instance-gpu-count",
  gpu_memory = LABEL .. "instance-gpu-memory",
}

local function present(v)
  return v ~= nil and v ~= json.null and v ~= ""
end

local function array(t)
  return setmetatable(t or {}, json.array_mt)
end

local function req(key, operator, values)
  return { key = key, operator = operator, values = array(values) }
end


-- Numbers as Go's %v prints a float32: "16384", "1.5", never "16384.0".
local function number_text(v)
  v = tonumber(v)
  if not v then return nil end
  local i = tointeger(v) or (v == floor(v) and tointeger(floor(v)))
  if i then return format("%d", i) end
  return (format("%.6g", v))
end

-- CpuArchitecture is "X86" or "ARM" (the docs), "ARM64" in places; anything else runs amd64
-- images, as upstream decides.
function M.arch(cpu_architecture)
  if lower(tostring(cpu_architecture or "")):find("^arm") then return "arm64" end
  return "amd64"
end

-- ecs.<category><generation>[...].<size>: upstream's regex ^ecs\.([a-z]+)(\-[0-9]+tb)?([0-9]+).*
-- written as two Lua patterns (Lua has no optional groups); family and size need exactly three
-- dot-separated parts ("ecs.g7.xlarge"). Worked examples are in instancetypes_spec.lua.
function M.name_parts(name)
  local parts = {}
  local category, generation = name:match("^ecs%.(%l+)%-%d+tb(%d+)")
  if not category then category, generation = name:match("^ecs%.(%l+)(%d+)") end
  parts.category, parts.generation = category, generation
  local a, b, c = name:match("^([^.]+)%.([^.]+)%.([^.]+)$")
  if a then parts.family, parts.size = a .. "." .. b, c end
  return parts
end

-- "NVIDIA A10" -> "nvidia-a10"; "NVIDIA T4*2" -> "nvidia-t4-2" (upstream's lower-kebab).
local function gpu_name(spec)
  return (lower(spec):gsub("[%s/%*]", "-"))
end

-- The physical CPU vendor; a model naming neither (Yitian, Ampere) leaves the label undefined
-- rather than upstream's empty-string value, which no selector could use.
local function cpu_model(model)
  if not present(model) then return nil end
  model = tostring(model)
  if model:find("AMD", 1, true) then return "amd" end
  if model:find("Intel", 1, true) then return "intel" end
  return nil
end

-- Values in first-seen order without repeats: offerings come zone by zone in sorted order and
-- on-demand before spot, so first-seen order is already the sorted order.
local function distinct(offerings, field)
  local seen, list = {}, {}
  for _, o in ipairs(offerings) do
    local v = o[field]
    if not seen[v] then
      seen[v] = true
      list[#list + 1] = v
    end
  end
  return list
end

function M.for_offering(zone, capacity_type)
  return array {
    req(M.CAPACITY_TYPE, "In", { capacity_type }),
    req(M.ZONE, "In", { zone }),
    req(M.ZONE_ID, "In", { zone }),
  }
end

-- Every key a type defines, sorted once: a thousand types times a sort with a Lua comparator
-- would cost millions of the call's instruction budget.
local KEYS = { M.INSTANCE_TYPE, M.ARCH, M.OS, M.REGION, M.WINDOWS_BUILD, M.ZONE, M.ZONE_ID, M.CAPACITY_TYPE }
for _, key in pairs(M.INSTANCE_LABELS) do KEYS[#KEYS + 1] = key end
sort(KEYS, util.byte_less)

function M.for_type(it, region, offerings)
  local name = it.InstanceTypeId
  local parts = M.name_parts(name)
  local model = cpu_model(it.PhysicalProcessorModel)
  local values = {
    [M.INSTANCE_TYPE] = { name },
    [M.ARCH] = { M.arch(it.CpuArchitecture) },
    [M.OS] = { "linux" },
    [M.REGION] = { region },
    [M.INSTANCE_LABELS.cpu] = { number_text(it.CpuCoreCount) },
    [M.INSTANCE_LABELS.memory] = { number_text((tonumber(it.MemorySize) or 0) * 1024) },
    [M.INSTANCE_LABELS.category] = parts.category and { parts.category },
    [M.INSTANCE_LABELS.generation] = parts.generation and { parts.generation },
    [M.INSTANCE_LABELS.family] = parts.family and { parts.family },
    [M.INSTANCE_LABELS.size] = parts.size and { parts.size },
    [M.INSTANCE_LABELS.cpu_model] = model and { model },
    [M.ZONE] = distinct(offerings, "zone"),
    [M.ZONE_ID] = distinct(offerings, "zone"),
    [M.CAPACITY_TYPE] = distinct(offerings, "capacity_type"),
  }
  local gpus = tonumber(it.GPUAmount) or 0
  if gpus > 0 and present(it.GPUSpec) then
    local spec = tostring(it.GPUSpec)
    values[M.INSTANCE_LABELS.gpu_name] = { gpu_name(spec) }
    values[M.INSTANCE_LABELS.gpu_manufacturer] = { spec:match("^%s*(%S+)") }
    values[M.INSTANCE_LABELS.gpu_count] = { number_text(gpus) }
    values[M.INSTANCE_LABELS.gpu_memory] = present(it.GPUMemorySize) and { number_text(it.GPUMemorySize) } or nil
  end
  local list = array()
  for i, key in ipairs(KEYS) do
    local v = values[key]
    if v and #v > 0 then
      list[i] = req(key, "In", v)
    else
      list[i] = req(key, "DoesNotExist", {})
    end
  end
  return list
end

return M
