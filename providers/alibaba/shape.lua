-- One shape for every ECSNodeClass: the official Alibaba provider's field names, whichever shape the
-- object was written in. luaprov's earlier fields (kubeletConfiguration, systemDisk.volumeSize,
-- dataDisks[].volumeSize with dataDiskCategories, the spot-price-limit annotation) are read as the
-- official ones they stand for, defaults are filled in, and every other module reads only the result.
-- docs/alibaba.md#the-ecsnodeclass has the field table.
--
--   normalize(nodeclass) -> copy | nil, err
--     copy: the same object with `spec` replaced by the normalized spec (metadata and status shared,
--     not copied). err = {code = "InvalidNodeClass", message} names the field that cannot be read.
--   spec(nodeclass) -> the normalized spec | nil, err
--
-- The normalized spec (absent fields stay absent unless a default is listed):
--   clusterID, clusterName, clusterEndpoint, role, userData, tags, launchTemplateID   as written
--   vSwitchSelectorTerms, securityGroupSelectorTerms, imageSelectorTerms             as written
--   vSwitchSelectionPolicy   "cheapest" (default) | "balanced"
--   systemDisk   {categories = {...} (tried in order), size = GiB, performanceLevel, encrypted, kmsKeyID}
--   dataDisks    {{category, size = GiB, device, performanceLevel, encrypted, kmsKeyID, snapshotID,
--                  deleteWithInstance (default true)}}
--   spotStrategy, spotPriceLimit   ("SpotWithPriceLimit" when only a limit is given)
--   kubelet      the KubeletConfiguration fields
--   metadataOptions {httpTokens, httpPutResponseHopLimit, httpEndpoint}, only when written
--   capacityReservationSelectorTerms, capacityReservationPreference ("open" when terms are given)
--   keyPairName, password, passwordInherit, resourceGroupId, formatDataDisk       luaprov's own
local util = require "providers.alibaba.util"

local M = {}

-- Tried in this order when the class names no system disk category.
M.DEFAULT_SYSTEM_DISK_CATEGORIES = { "cloud_essd", "cloud_ssd", "cloud_efficiency", "cloud" }
-- ACK's and the official provider's default system disk.
M.DEFAULT_SYSTEM_DISK_GIB = 40
-- ECS's smallest data disk; smaller sizes are raised to it.
M.MIN_DATA_DISK_GIB = 20
M.DEFAULT_DATA_DISK_CATEGORY = "cloud_essd"
-- luaprov's earlier way to set a spot price limit, still read when spec.spotPriceLimit is absent.
M.SPOT_PRICE_LIMIT_ANNOTATION = "luaprov.io/spot-price-limit"

-- Copied as they are.
local AS_WRITTEN = {
  "clusterID", "clusterName", "clusterEndpoint", "role", "userData", "tags", "launchTemplateID",
  "vSwitchSelectorTerms", "securityGroupSelectorTerms", "imageSelectorTerms", "spotStrategy",
  "keyPairName", "password", "passwordInherit", "resourceGroupId", "formatDataDisk",
  "capacityReservationSelectorTerms",
}

local field, class_name = util.field, util.class_name

local array = util.array

local function strings(v)
  local out = array()
  if type(v) == "table" then
    for _, s in ipairs(v) do
      if type(s) == "string" and s ~= "" then out[#out + 1] = s end
    end
  end
  return out
end

-- A Kubernetes quantity ("40Gi", "100G", "21474836480") in GiB, rounded up; nil when unreadable.
local UNITS = { [""] = 1, k = 1e3, M = 1e6, G = 1e9, T = 1e12, Ki = 1024, Mi = 1024 ^ 2, Gi = 1024 ^ 3,
  Ti = 1024 ^ 4 }
local function gib(quantity)
  if math.type(quantity) == "integer" then return quantity end
  if type(quantity) ~= "string" then return nil end
  local number, unit = quantity:match("^%s*(%d+%.?%d*)%s*(%a*)%s*$")
  local scale = UNITS[unit or ""]
  if not number or not scale then return nil end
  return math.ceil(tonumber(number) * scale / 1024 ^ 3 - 1e-9)
end

-- A whole number of GiB given as a number (the official `size`).
local function whole(n)
  if type(n) ~= "number" then return nil end
  return math.tointeger(n) or math.ceil(n)
end

-- Both names of one setting given: the reader cannot tell which the operator meant.
local function both(official, alias)
  return ("spec.%s and spec.%s (its earlier name) are both set: keep %s"):format(official, alias, official)
end

local function system_disk(spec)
  local disk = field(spec, "systemDisk") or {}
  local categories = strings(field(disk, "categories"))
  if #categories == 0 and type(field(disk, "category")) == "string" and disk.category ~= "" then
    categories = array { disk.category }
  end
  if #categories == 0 then categories = array { table.unpack(M.DEFAULT_SYSTEM_DISK_CATEGORIES) } end
  local size = M.DEFAULT_SYSTEM_DISK_GIB
  if field(disk, "volumeSize") then
    if field(disk, "size") then return nil, both("systemDisk.size", "systemDisk.volumeSize") end
    size = gib(disk.volumeSize)
    if not size then
      return nil, ("spec.systemDisk.volumeSize %q is not a quantity"):format(tostring(disk.volumeSize))
    end
  elseif field(disk, "size") then
    size = whole(disk.size)
    if not size then return nil, ("spec.systemDisk.size %q is not a number of GiB"):format(tostring(disk.size)) end
  end
  return {
    categories = categories, size = size, performanceLevel = field(disk, "performanceLevel"),
    encrypted = field(disk, "encrypted"), kmsKeyID = field(disk, "kmsKeyID"),
  }
end

local function data_disks(spec)
  local disks = field(spec, "dataDisks")
  if not disks then return nil end
  local default_category = strings(field(spec, "dataDiskCategories"))[1] or M.DEFAULT_DATA_DISK_CATEGORY
  local out = array()
  for i, d in ipairs(disks) do
    local size
    if field(d, "volumeSize") then
      if field(d, "size") then
        return nil, both(("dataDisks[%d].size"):format(i), ("dataDisks[%d].volumeSize"):format(i))
      end
      size = gib(d.volumeSize)
      if not size then
        return nil, ("spec.dataDisks[%d].volumeSize %q is not a quantity"):format(i, tostring(d.volumeSize))
      end
    else
      size = whole(field(d, "size"))
      if not size then return nil, ("spec.dataDisks[%d] needs a size in GiB"):format(i) end
    end
    local delete = field(d, "deleteWithInstance")
    out[i] = {
      category = field(d, "category") or default_category, size = math.max(size, M.MIN_DATA_DISK_GIB),
      device = field(d, "device"), performanceLevel = field(d, "performanceLevel"),
      encrypted = field(d, "encrypted"), kmsKeyID = field(d, "kmsKeyID"), snapshotID = field(d, "snapshotID"),
      deleteWithInstance = delete == nil and true or delete,
    }
  end
  return out
end

-- spotPriceLimit, else the annotation; a limit without a strategy means SpotWithPriceLimit.
local function spot(nodeclass, spec, out)
  local limit = field(spec, "spotPriceLimit")
  if limit == nil then
    local text = field(field(field(nodeclass, "metadata"), "annotations"), M.SPOT_PRICE_LIMIT_ANNOTATION)
    if text ~= nil then
      limit = type(text) == "string" and text:match("^%s*%d+%.?%d*%s*$") and tonumber(text)
      if not limit or limit <= 0 then
        return ("annotation %s: %q is not a price (a decimal number of USD per hour, e.g. \"0.25\")")
          :format(M.SPOT_PRICE_LIMIT_ANNOTATION, tostring(text))
      end
    end
  elseif type(limit) ~= "number" or limit <= 0 then
    return ("spec.spotPriceLimit %s is not a positive price"):format(tostring(limit))
  end
  out.spotPriceLimit = limit
  if out.spotStrategy == nil and limit then out.spotStrategy = "SpotWithPriceLimit" end
  if out.spotStrategy == "SpotWithPriceLimit" and not limit then
    return "spec.spotStrategy SpotWithPriceLimit needs spec.spotPriceLimit"
  end
  if out.spotStrategy ~= nil and out.spotStrategy ~= "SpotAsPriceGo" and out.spotStrategy ~= "SpotWithPriceLimit" then
    return ("spec.spotStrategy %q is not SpotAsPriceGo or SpotWithPriceLimit"):format(tostring(out.spotStrategy))
  end
  return nil
end

-- The metadata options with the CRD's defaults filled in, so a class written without the CRD (luaprov
-- eval, a raw JSON file) launches the same instance; nil when the class sets none.
local function metadata_options(spec)
  local m = field(spec, "metadataOptions")
  if not m then return nil end
  local out = { httpTokens = field(m, "httpTokens") or "optional", httpEndpoint = field(m, "httpEndpoint") or "enabled",
    httpPutResponseHopLimit = field(m, "httpPutResponseHopLimit") or 1 }
  if out.httpTokens ~= "optional" and out.httpTokens ~= "required" then
    return nil, ("spec.metadataOptions.httpTokens %q is not optional or required"):format(tostring(out.httpTokens))
  end
  if out.httpEndpoint ~= "enabled" and out.httpEndpoint ~= "disabled" then
    return nil, ("spec.metadataOptions.httpEndpoint %q is not enabled or disabled"):format(tostring(out.httpEndpoint))
  end
  local hops = math.type(out.httpPutResponseHopLimit) and math.tointeger(out.httpPutResponseHopLimit)
  if not hops or hops < 1 or hops > 64 then
    return nil, ("spec.metadataOptions.httpPutResponseHopLimit %s is not a whole number from 1 to 64")
      :format(tostring(out.httpPutResponseHopLimit))
  end
  out.httpPutResponseHopLimit = hops
  return out
end

-- The value of an enumerated field, or the problem.
local function one_of(spec, name, default, allowed)
  local v = field(spec, name)
  if v == nil then return default end
  for _, a in ipairs(allowed) do
    if v == a then return v end
  end
  return nil, ("spec.%s %q is not %s"):format(name, tostring(v), table.concat(allowed, " or "))
end

function M.spec(nodeclass)
  local spec = field(nodeclass, "spec") or {}
  local out = {}
  for _, k in ipairs(AS_WRITTEN) do out[k] = field(spec, k) end
  local problem
  out.vSwitchSelectionPolicy, problem = one_of(spec, "vSwitchSelectionPolicy", "cheapest", { "cheapest", "balanced" })
  if problem then return nil, problem end
  out.systemDisk, problem = system_disk(spec)
  if problem then return nil, problem end
  out.dataDisks, problem = data_disks(spec)
  if problem then return nil, problem end
  problem = spot(nodeclass, spec, out)
  if problem then return nil, problem end
  if field(spec, "kubelet") and field(spec, "kubeletConfiguration") then
    return nil, both("kubelet", "kubeletConfiguration")
  end
  out.kubelet = field(spec, "kubelet") or field(spec, "kubeletConfiguration")
  out.metadataOptions, problem = metadata_options(spec)
  if problem then return nil, problem end
  out.capacityReservationPreference, problem = one_of(spec, "capacityReservationPreference",
    out.capacityReservationSelectorTerms and "open" or nil, { "open", "target", "none" })
  if problem then return nil, problem end
  return out
end

function M.normalize(nodeclass)
  if type(nodeclass) ~= "table" then
    return nil, { code = "InvalidNodeClass", message = "the node class is not an object" }
  end
  local spec, problem = M.spec(nodeclass)
  if not spec then
    return nil, { code = "InvalidNodeClass", message = ("ECSNodeClass %s: %s"):format(class_name(nodeclass), problem) }
  end
  local copy = {}
  for k, v in pairs(nodeclass) do copy[k] = v end
  copy.spec = spec
  return copy
end

return M
