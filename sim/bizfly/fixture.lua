-- What the simulated Bizfly account holds at start: one BKE cluster whose worker pools cover the cases
-- the autoscaler mapping must handle (the cluster, pool and node shapes gobizfly reads), and a
-- generator of large synthetic clusters for benchmarks (POST /_sim/cluster {"pools": 50, "nodes": 2000}).
--
--   fixture.default() -> spec      spec = {cluster = {...}, pools = {...}, capacity = {nodes, flavors}}
--   fixture.generate(pools, nodes) -> spec
-- cluster.lua turns a spec into live state (pools at their desired size, nodes ACTIVE).
local flavors = require "sim.bizfly.flavors"
local wire = require "sim.bizfly.wire"

local M = {}

M.CLUSTER_UID = "bkesimluaprov001"
M.SHOOT_ID = "x7d2k9sm41qpz0ab"

M.POOL_GENERAL = "66a0f1c2b3d4e5f601a2b3c4"
M.POOL_SYSTEM = "66a0f1c2b3d4e5f601a2b3c5"
M.POOL_GPU = "66a0f1c2b3d4e5f601a2b3c6"
M.POOL_BATCH = "66a0f1c2b3d4e5f601a2b3c7"
M.POOL_LEGACY = "66a0f1c2b3d4e5f601a2b3c8"

local function cluster_fields(name)
  return {
    uid = M.CLUSTER_UID,
    name = name,
    version = { id = "5f7d3a1cb0d4a1e2f3a4b5c6", name = "v1.29.13", description = "Kubernetes 1.29",
      kubernetes_version = "v1.29.13" },
    private_network_id = wire.uuid("network"),
    private_subnet_id = wire.uuid("subnet"),
    auto_upgrade = false,
    tags = { "luaprov-sim" },
    provision_type = "standard",
    access_mode = "public",
    cni_plugin = "kube-router",
    created_by = "ops@example.com",
    shoot_id = M.SHOOT_ID,
  }
end

-- A pool as the listing shows it; cluster.lua adds the ids, statuses and nodes.
local function pool(fields)
  local p = {
    version = "v1.29.13", profile_type = "premium", volume_type = "PREMIUM-SSD1", volume_size = 40,
    availability_zone = "HN1", tags = {}, labels = {}, taints = {}, provision_type = "standard",
    network_plan = "free_datatransfer", billing_plan = "on_demand", enable_autoscaling = true, min_size = 0,
  }
  for k, v in pairs(fields) do p[k] = v end
  return p
end

--- default() -> the cluster `luaprov sim` starts with (docs/sim.md lists it):
-- three autoscaled pools (general, a tainted GPU pool whose flavor has stock for 2 nodes, a tainted
-- batch pool at zero), and two that are not (system, and legacy on a flavor nobody documents).
function M.default()
  return {
    cluster = cluster_fields("luaprov-sim"),
    pools = {
      pool { id = M.POOL_GENERAL, name = "pool-general", flavor = "nix.4c_8g", min_size = 1, max_size = 5,
        desired_size = 2, labels = { workload = "general", ["bke.bizflycloud.vn/pool-name"] = "pool-general" } },
      pool { id = M.POOL_SYSTEM, name = "pool-system", flavor = "nix.2c_4g", enable_autoscaling = false,
        min_size = 2, max_size = 2, desired_size = 2, labels = { workload = "system" } },
      pool { id = M.POOL_GPU, name = "pool-gpu-t4", flavor = "nix.8c_32g_1gpu", volume_size = 100, min_size = 0,
        max_size = 4, desired_size = 1, labels = { workload = "gpu" },
        taints = { { key = "nvidia.com/gpu", value = "present", effect = "NoSchedule" } } },
      pool { id = M.POOL_BATCH, name = "pool-batch", flavor = "3c_6g_enterprise", profile_type = "enterprise",
        volume_type = "ENTERPRISE-SSD1", volume_size = 60, availability_zone = "HN2", min_size = 0, max_size = 10,
        desired_size = 0, labels = { workload = "batch" },
        taints = { { key = "dedicated", value = "batch", effect = "NoSchedule" },
          { key = "preemptible", value = "true", effect = "PreferNoSchedule" } } },
      pool { id = M.POOL_LEGACY, name = "pool-legacy", flavor = "bm.custom-48", profile_type = "enterprise",
        volume_type = "ENTERPRISE-HDD1", volume_size = 200, enable_autoscaling = false, min_size = 1, max_size = 1,
        desired_size = 1, labels = { workload = "legacy" } },
    },
    -- The project's quota and the stock of scarce flavors: growing past them fails node creations.
    capacity = { nodes = 40, flavors = { ["nix.8c_32g_1gpu"] = 2 } },
  }
end

--- generate(n_pools, n_nodes) -> a synthetic cluster: every pool autoscaled, nodes spread evenly
-- (the first pools take the remainder), all ACTIVE, room to double; the same sizes give the same
-- cluster. The quota leaves room to scale every pool to its max.
function M.generate(n_pools, n_nodes)
  local pools = {}
  local per, extra = n_nodes // n_pools, n_nodes % n_pools
  for i = 1, n_pools do
    local desired = per + (i <= extra and 1 or 0)
    local name = ("pool-%03d"):format(i)
    pools[i] = pool { id = wire.hex("pool:" .. i, 24), name = name,
      flavor = flavors.GENERAL[(i - 1) % #flavors.GENERAL + 1], min_size = 0,
      max_size = math.max(2, 2 * desired), desired_size = desired,
      availability_zone = i % 2 == 1 and "HN1" or "HN2", labels = { workload = "bench", pool = name } }
  end
  return {
    cluster = cluster_fields(("luaprov-sim-%dx%d"):format(n_pools, n_nodes)),
    pools = pools,
    capacity = { nodes = math.max(40, 2 * n_nodes + 2 * n_pools), flavors = {} },
  }
end

return M
