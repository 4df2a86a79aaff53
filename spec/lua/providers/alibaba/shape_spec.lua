-- providers/alibaba/shape.lua: both spellings of an ECSNodeClass read as one (docs/alibaba.md#the-ecsnodeclass),
-- the defaults it fills in, and the problems it names.
local shape = require "providers.alibaba.shape"
local json = require("luaprov").json

local function class(spec, annotations)
  return { metadata = { name = "default", annotations = annotations }, spec = spec }
end

local function spec_of(spec, annotations)
  return assert(shape.spec(class(spec, annotations)))
end

local function problem_of(spec, annotations)
  local out, problem = shape.spec(class(spec, annotations))
  assert.is_nil(out)
  return problem
end

describe("shape.spec", function()
  it("fills the defaults of a class that names no disks, spot, kubelet or metadata", function()
    local s = spec_of {}
    assert.same({ categories = { "cloud_essd", "cloud_ssd", "cloud_efficiency", "cloud" }, size = 40 }, s.systemDisk)
    assert.equals("cheapest", s.vSwitchSelectionPolicy)
    assert.is_nil(s.dataDisks)
    assert.is_nil(s.spotStrategy)
    assert.is_nil(s.kubelet)
    assert.is_nil(s.metadataOptions)
    assert.is_nil(s.capacityReservationPreference)
  end)

  it("reads the official system disk: one category, a size in GiB, level, encryption", function()
    local s = spec_of { systemDisk = { category = "cloud_auto", size = 80, performanceLevel = "PL1", encrypted = true,
      kmsKeyID = "key-1" } }
    assert.same({ categories = { "cloud_auto" }, size = 80, performanceLevel = "PL1", encrypted = true,
      kmsKeyID = "key-1" }, s.systemDisk)
  end)

  it("reads luaprov's earlier system disk: categories to fall through and a volumeSize quantity", function()
    local s = spec_of { systemDisk = { categories = { "cloud_auto", "cloud_essd" }, volumeSize = "100G" } }
    assert.same({ "cloud_auto", "cloud_essd" }, s.systemDisk.categories)
    assert.equals(94, s.systemDisk.size) -- 100 GB rounded up to GiB
    -- categories, luaprov's own field, wins over the single category the official CRD defaults
    s = spec_of { systemDisk = { categories = { "cloud_ssd" }, category = "cloud_essd" } }
    assert.same({ "cloud_ssd" }, s.systemDisk.categories)
  end)

  it("reads the official data disks, deleteWithInstance true unless set", function()
    local s = spec_of { dataDisks = { { category = "cloud_essd", size = 120, performanceLevel = "PL0" },
      { category = "cloud_auto", size = 10, snapshotID = "s-1", deleteWithInstance = false, device = "/dev/xvdc",
        encrypted = true, kmsKeyID = "key-2" } } }
    assert.same({ { category = "cloud_essd", size = 120, performanceLevel = "PL0", deleteWithInstance = true },
      { category = "cloud_auto", size = 20, snapshotID = "s-1", deleteWithInstance = false, device = "/dev/xvdc",
        encrypted = true, kmsKeyID = "key-2" } }, s.dataDisks)
  end)

  it("reads luaprov's earlier data disks: volumeSize, and the first of dataDiskCategories for all", function()
    local s = spec_of { dataDisks = { { volumeSize = "100Gi", device = "/dev/xvdb" }, { volumeSize = "1Ti" } },
      dataDiskCategories = { "cloud_auto", "cloud_essd" } }
    assert.same({ { category = "cloud_auto", size = 100, device = "/dev/xvdb", deleteWithInstance = true },
      { category = "cloud_auto", size = 1024, deleteWithInstance = true } }, s.dataDisks)
    assert.equals("cloud_essd", spec_of({ dataDisks = { { volumeSize = "50Gi" } } }).dataDisks[1].category)
  end)

  it("reads kubelet, or its earlier name kubeletConfiguration", function()
    assert.same({ maxPods = 64 }, spec_of({ kubelet = { maxPods = 64 } }).kubelet)
    assert.same({ maxPods = 32 }, spec_of({ kubeletConfiguration = { maxPods = 32 } }).kubelet)
  end)

  it("takes the spot strategy and limit, else the annotation; a bare limit means SpotWithPriceLimit", function()
    local s = spec_of { spotStrategy = "SpotAsPriceGo" }
    assert.equals("SpotAsPriceGo", s.spotStrategy)
    assert.is_nil(s.spotPriceLimit)
    s = spec_of({ spotPriceLimit = 0.5 }, { [shape.SPOT_PRICE_LIMIT_ANNOTATION] = "2" })
    assert.same({ "SpotWithPriceLimit", 0.5 }, { s.spotStrategy, s.spotPriceLimit })
    s = spec_of({}, { [shape.SPOT_PRICE_LIMIT_ANNOTATION] = "2.5" })
    assert.same({ "SpotWithPriceLimit", 2.5 }, { s.spotStrategy, s.spotPriceLimit })
  end)

  it("fills the metadata options' defaults when the class sets any", function()
    assert.same({ httpTokens = "required", httpEndpoint = "enabled", httpPutResponseHopLimit = 1 },
      spec_of({ metadataOptions = { httpTokens = "required" } }).metadataOptions)
    assert.same({ httpTokens = "optional", httpEndpoint = "disabled", httpPutResponseHopLimit = 3 },
      spec_of({ metadataOptions = { httpEndpoint = "disabled", httpPutResponseHopLimit = 3.0 } }).metadataOptions)
  end)

  it("defaults the capacity reservation preference to open when terms are given", function()
    local terms = { { id = "cr-1" } }
    assert.equals("open", spec_of({ capacityReservationSelectorTerms = terms }).capacityReservationPreference)
    assert.equals("none", spec_of({ capacityReservationSelectorTerms = { { id = "cr-1" } },
      capacityReservationPreference = "none" }).capacityReservationPreference)
  end)

  it("copies the rest as written", function()
    local written = { clusterID = "c-1", clusterName = "prod", clusterEndpoint = "https://10.0.0.1:6443",
      role = "KarpenterNodeRole", userData = "echo hi", tags = { team = "a" }, launchTemplateID = "lt-1",
      keyPairName = "kp", password = "Passw0rd!", passwordInherit = false, resourceGroupId = "rg-1",
      formatDataDisk = true, vSwitchSelectorTerms = { { id = "vsw-1", zoneID = "cn-hangzhou-h" } },
      imageSelectorTerms = { { imageFamily = "acs:x", imageOwnerAlias = "system" } } }
    local s = spec_of(written)
    for k, v in pairs(written) do assert.same(v, s[k], k) end
  end)

  it("treats JSON null as absent", function()
    local s = spec_of { systemDisk = json.null, kubelet = json.null, dataDisks = json.null, role = json.null }
    assert.equals(40, s.systemDisk.size)
    assert.is_nil(s.kubelet)
    assert.is_nil(s.role)
  end)

  it("is idempotent: a normalized class normalizes to itself", function()
    local once = assert(shape.normalize(class({ systemDisk = { volumeSize = "60Gi" },
      dataDisks = { { volumeSize = "5Gi" } },
      kubeletConfiguration = { maxPods = 20 }, metadataOptions = { httpTokens = "required" } },
      { [shape.SPOT_PRICE_LIMIT_ANNOTATION] = "1" })))
    local twice = assert(shape.normalize(once))
    assert.same(once.spec, twice.spec)
  end)

  it("names the field it cannot read", function()
    assert.matches("spec.kubelet and spec.kubeletConfiguration (its earlier name) are both set: keep kubelet",
      problem_of { kubelet = {}, kubeletConfiguration = {} }, 1, true)
    assert.matches("spec.systemDisk.size and spec.systemDisk.volumeSize", problem_of { systemDisk = { size = 40,
      volumeSize = "40Gi" } }, 1, true)
    assert.matches('spec.systemDisk.volumeSize "lots" is not a quantity',
      problem_of { systemDisk = { volumeSize = "lots" } }, 1, true)
    assert.matches("spec.dataDisks[2] needs a size in GiB",
      problem_of { dataDisks = { { size = 20 }, { category = "cloud_essd" } } }, 1, true)
    assert.matches("spec.spotStrategy SpotWithPriceLimit needs spec.spotPriceLimit",
      problem_of { spotStrategy = "SpotWithPriceLimit" }, 1, true)
    assert.matches('spec.spotStrategy "Cheap" is not', problem_of { spotStrategy = "Cheap" }, 1, true)
    assert.matches("spec.spotPriceLimit -1 is not a positive price", problem_of { spotPriceLimit = -1 }, 1, true)
    local bad_annotation = { [shape.SPOT_PRICE_LIMIT_ANNOTATION] = "x" }
    assert.matches("luaprov.io/spot-price-limit", problem_of({}, bad_annotation), 1, true)
    assert.matches("httpTokens", problem_of { metadataOptions = { httpTokens = "sometimes" } }, 1, true)
    assert.matches("httpPutResponseHopLimit 65", problem_of { metadataOptions = { httpPutResponseHopLimit = 65 } },
      1, true)
    assert.matches('spec.capacityReservationPreference "always" is not open or target or none',
      problem_of { capacityReservationPreference = "always" }, 1, true)
    assert.matches('spec.vSwitchSelectionPolicy "random"', problem_of { vSwitchSelectionPolicy = "random" }, 1, true)
  end)

  it("normalize wraps the problem in an InvalidNodeClass error naming the class", function()
    local out, err = shape.normalize(class { spotStrategy = "Cheap" })
    assert.is_nil(out)
    assert.equals("InvalidNodeClass", err.code)
    assert.matches("^ECSNodeClass default: spec.spotStrategy", err.message)
  end)
end)
