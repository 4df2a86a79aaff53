-- The simulated account's own resources in cn-hangzhou: its VPCs, vSwitches, security groups and
-- images. Selectors of an ECSNodeClass resolve against these, so they carry the tags a cluster uses
-- (karpenter.sh/discovery=<CLUSTER>) next to resources that must not match (another VPC, an untagged
-- default group, an older image).
--
-- vSwitches track their free addresses: each instance takes one private IP and gives it back on
-- delete, so AvailableIpAddressCount moves the way the vSwitch provider expects.
local catalogue = require "sim.alibaba.catalogue"

local M = {}

M.ACCOUNT_ID = "1234567890123456"
M.CLUSTER = "luaprov-sim"
M.RESOURCE_GROUP = "rg-acfmsim0000001"
M.CREATED = "2024-03-01T08:00:00Z"
-- The owner account of the public images, and the launch templates the account has.
M.PUBLIC_IMAGE_OWNER_ID = "1010101010101010"
M.LAUNCH_TEMPLATE = "lt-bp1sim0nodes00001"

local DISCOVERY = "karpenter.sh/discovery"

-- An IPv4 /20 holds 4096 addresses; the cloud reserves 4 per vSwitch (network, gateway, two more).
local function cidr_size(cidr)
  local bits = tonumber(cidr:match("/(%d+)$"))
  return (1 << (32 - bits)) - 4
end

local function ip_at(cidr, offset)
  local a, b, c, d = cidr:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)/")
  local n = ((tonumber(a) << 24) | (tonumber(b) << 16) | (tonumber(c) << 8) | tonumber(d)) + offset
  return ("%d.%d.%d.%d"):format((n >> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255)
end

local resources

local function vswitch(id, vpc, zone, cidr, name, tags, opts)
  opts = opts or {}
  local v = { id = id, vpc = vpc, zone = zone, cidr = cidr, name = name, tags = tags or {}, is_default = false,
    description = opts.description or "", capacity = cidr_size(cidr), used = opts.used or 0,
    next_ip = 3 + (opts.used or 0),
    free_ips = {} }
  resources.vswitches[#resources.vswitches + 1] = v
  resources.vswitch_by_id[id] = v
  return v
end

local function security_group(id, vpc, name, tags, description)
  local g = { id = id, vpc = vpc, name = name, tags = tags or {}, description = description or "" }
  resources.security_groups[#resources.security_groups + 1] = g
  resources.security_group_by_id[id] = g
  return g
end

local function image(id, spec)
  spec.id = id
  spec.tags = spec.tags or {}
  -- DescribeImages' ImageOwnerId: the account that owns the image (ours for our own images).
  spec.owner_id = spec.owner_id or (spec.owner == "self" and M.ACCOUNT_ID or M.PUBLIC_IMAGE_OWNER_ID)
  resources.images[#resources.images + 1] = spec
  resources.image_by_id[id] = spec
  return spec
end

--- reset(): the default resources, with one tagged vSwitch per catalogue zone.
function M.reset()
  resources = { vpcs = {}, vswitches = {}, vswitch_by_id = {}, security_groups = {}, security_group_by_id = {},
    images = {}, image_by_id = {}, launch_templates = { [M.LAUNCH_TEMPLATE] = { name = "luaprov-sim-nodes" } } }
  local tagged = { [DISCOVERY] = M.CLUSTER }
  resources.vpcs = {
    { id = "vpc-bp1sim0cluster0001", name = "luaprov-sim-vpc", cidr = "172.16.0.0/12", tags = tagged },
    { id = "vpc-bp1sim0other00001", name = "other-team-vpc", cidr = "10.0.0.0/8", tags = { team = "other" } },
  }
  local main, other = resources.vpcs[1].id, resources.vpcs[2].id
  -- One /20 per zone of the cluster VPC, tagged for discovery; the third octet steps by 16 per zone.
  for i, z in ipairs(catalogue.zones()) do
    vswitch("vsw-bp1sim" .. z.letter .. "0000001", main, z.id, ("172.16.%d.0/20"):format(((i - 1) * 16) % 256),
      "luaprov-sim-" .. z.letter, { [DISCOVERY] = M.CLUSTER, ["kubernetes.io/role"] = "node" })
  end
  local zones = catalogue.zones()
  -- A nearly full, untagged second vSwitch in the first zone: selectors by id may pick it, tags do not.
  vswitch("vsw-bp1sim" .. zones[1].letter .. "0000002", main, zones[1].id, "172.31.0.0/24", "luaprov-sim-small", {},
    { used = 200, description = "nearly full" })
  -- Same tags, other VPC: a tag-only selector spans VPCs (the provider applies no VpcId filter).
  vswitch("vsw-bp1sim" .. zones[2 <= #zones and 2 or 1].letter .. "0000003", other,
    zones[2 <= #zones and 2 or 1].id, "10.1.0.0/16", "other-team", { team = "other" })

  security_group("sg-bp1sim0nodes00001", main, "luaprov-sim-nodes", { [DISCOVERY] = M.CLUSTER },
    "Nodes of the simulated cluster")
  security_group("sg-bp1sim0extra00001", main, "luaprov-sim-extra", { [DISCOVERY] = M.CLUSTER, role = "extra" },
    "Extra rules for GPU nodes")
  security_group("sg-bp1sim0default001", main, "default", {}, "System created security group.")
  security_group("sg-bp1sim0other00001", other, "other-team", { team = "other" }, "Another team's group")

  local alinux = "Alibaba Cloud Linux  3.2104 LTS 64位"
  image("aliyun_3_x64_20G_alibase_20240819.vhd", { name = "aliyun_3_x64_20G_alibase_20240819.vhd",
    family = "acs:alibaba_cloud_linux_3_2104_lts_x64", version = "3.2104 LTS", owner = "system",
    arch = "x86_64", os_type = "linux", os_name = alinux, os_name_en = "Alibaba Cloud Linux  3.2104 LTS 64 bit",
    platform = "Aliyun", size = 20, created = "2024-08-19T07:11:32Z", nvme = "supported" })
  image("aliyun_3_arm64_20G_alibase_20240819.vhd", { name = "aliyun_3_arm64_20G_alibase_20240819.vhd",
    family = "acs:alibaba_cloud_linux_3_2104_lts_arm64", version = "3.2104 LTS", owner = "system",
    arch = "arm64", os_type = "linux", os_name = alinux .. " ARM版",
    os_name_en = "Alibaba Cloud Linux  3.2104 LTS 64 bit ARM Edition", platform = "Aliyun", size = 20,
    created = "2024-08-19T07:30:05Z", nvme = "supported", boot_mode = "UEFI" })
  image("aliyun_3_x64_20G_alibase_20230727.vhd", { name = "aliyun_3_x64_20G_alibase_20230727.vhd",
    family = "acs:alibaba_cloud_linux_3_2104_lts_x64", version = "3.2104 LTS", owner = "system",
    arch = "x86_64", os_type = "linux", os_name = alinux, os_name_en = "Alibaba Cloud Linux  3.2104 LTS 64 bit",
    platform = "Aliyun", size = 20, created = "2023-07-27T06:02:44Z", nvme = "supported" })
  -- The image Alibaba's own provider's example ECSNodeClasses name.
  image("aliyun_3_x64_20G_container_optimized_alibase_20250629.vhd", {
    name = "aliyun_3_x64_20G_container_optimized_alibase_20250629.vhd",
    family = "acs:alibaba_cloud_linux_3_2104_lts_container_optimized_x64", version = "3.2104 LTS", owner = "system",
    arch = "x86_64", os_type = "linux", os_name = alinux .. " 容器优化版",
    os_name_en = "Alibaba Cloud Linux  3.2104 LTS 64 bit Container Optimized", platform = "Aliyun", size = 20,
    created = "2025-06-29T05:20:11Z", nvme = "supported" })
  image("ubuntu_22_04_x64_20G_alibase_20240508.vhd", { name = "ubuntu_22_04_x64_20G_alibase_20240508.vhd",
    family = "acs:ubuntu_22_04_x64", version = "22.04", owner = "system", arch = "x86_64", os_type = "linux",
    os_name = "Ubuntu  22.04 64位", os_name_en = "Ubuntu  22.04 64 bit", platform = "Ubuntu", size = 20,
    created = "2024-05-08T03:12:09Z", nvme = "supported" })
  image("m-bp1sim0custom00001", { name = "luaprov-sim-node-2024", family = "", version = "", owner = "self",
    arch = "x86_64", os_type = "linux", os_name = alinux, os_name_en = "Alibaba Cloud Linux  3.2104 LTS 64 bit",
    platform = "Aliyun", size = 40, created = "2024-09-02T10:00:00Z", nvme = "supported",
    tags = { [DISCOVERY] = M.CLUSTER } })
end

function M.vpcs() return resources.vpcs end
function M.vswitches() return resources.vswitches end
function M.vswitch(id) return resources.vswitch_by_id[id] end
function M.security_groups() return resources.security_groups end
function M.security_group(id) return resources.security_group_by_id[id] end
function M.images() return resources.images end
function M.image(id) return resources.image_by_id[id] end
function M.launch_template(id) return resources.launch_templates[id] end

--- available_ips(vswitch) -> free addresses now.
function M.available_ips(v)
  return v.capacity - v.used
end

--- take_ip(vswitch) -> an address, or nil when the vSwitch is full. Released addresses are reused first.
function M.take_ip(v)
  if v.used >= v.capacity then return nil end
  v.used = v.used + 1
  local ip = table.remove(v.free_ips)
  if ip then return ip end
  ip = ip_at(v.cidr, v.next_ip)
  v.next_ip = v.next_ip + 1
  return ip
end

function M.release_ip(v, ip)
  v.used = v.used - 1
  v.free_ips[#v.free_ips + 1] = ip
end

M.reset()

return M
