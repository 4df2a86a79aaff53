-- The simulated BKE cluster: its worker pools, their nodes and how those live in simulated time, the
-- project's capacity, and the JSON the KaaS API answers with (gobizfly's
-- FullCluster, WorkerPoolWithNodes, PoolNode).
--
-- Node lifecycle (sim/clock.lua time): a new node is PROVISIONING, then ACTIVE after ACTIVE_AFTER
-- seconds; a creation that hits the quota or a stock-out is ERROR after FAIL_AFTER seconds, with the
-- cloud's status_reason; a deleted node is DELETING, then gone after DELETE_AFTER seconds. A pool's
-- desired_size always counts its nodes that are not being deleted, failed ones included, as an
-- autoscaling group does.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local faults = require "sim.bizfly.faults"
local flavors = require "sim.bizfly.flavors"
local wire = require "sim.bizfly.wire"

local json = luaprov.json

local M = {}

M.ACTIVE_AFTER = 30
M.FAIL_AFTER = 10
M.DELETE_AFTER = 20
M.MAX_DESIRED = 1000

local STATUSES = { PROVISIONING = true, ACTIVE = true, ERROR = true, DELETING = true, WARNING = true,
  RECOVERING = true, UPDATING = true }

-- cluster = {fields, pools (ordered), pool_by_id, created}; nodes_by_id indexes every node.
local cluster, nodes_by_id, capacity, created_count, ip_count, deleting_count

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = type(v) == "table" and copy(v) or v end
  return out
end

-- 10.20.0.2 upwards, skipping .0/.1/.255 of each /24.
local function next_ip()
  ip_count = ip_count + 1
  local n = ip_count - 1
  return ("10.%d.%d.%d"):format(20 + (n // 63500) % 200, (n // 250) % 254, n % 250 + 2)
end

local function add_node(pool, created, failure)
  created_count = created_count + 1
  local seed = cluster.fields.uid .. ":" .. created_count
  local node = { id = wire.uuid("node:" .. seed), pool = pool, created = created, failure = failure,
    name = ("%s-%s-node-%s"):format(pool.name, cluster.fields.shoot_id, wire.alnum(seed, 8)) }
  -- A quota refusal happens before any server exists; a stock-out leaves a server in ERROR.
  if not (failure and failure.kind == "quota") then
    node.physical_id = wire.uuid("server:" .. seed)
    node.ip = next_ip()
  end
  pool.nodes[#pool.nodes + 1] = node
  nodes_by_id[node.id] = node
  return node
end

--- load(spec): the cluster of a fixture spec (fixture.lua), every pool at its desired size with
-- nodes that have been ACTIVE for a day.
function M.load(spec)
  created_count, ip_count, deleting_count = 0, 0, 0
  nodes_by_id = {}
  local now = clock.now()
  cluster = { fields = copy(spec.cluster), pools = {}, pool_by_id = {}, created = now - 30 * 86400 }
  capacity = { nodes = spec.capacity.nodes, flavors = copy(spec.capacity.flavors) }
  for i, p in ipairs(spec.pools) do
    local pool = copy(p)
    pool.nodes, pool.created = {}, cluster.created + i * 60
    pool.launch_config_id, pool.autoscaling_group_id = wire.uuid("lc:" .. p.id), wire.uuid("asg:" .. p.id)
    cluster.pools[i], cluster.pool_by_id[p.id] = pool, pool
    for _ = 1, p.desired_size do add_node(pool, now - 86400, nil) end
  end
end

--- status(node[, now]) -> status, status_reason.
function M.status(node, now)
  if node.forced then return node.forced.status, node.forced.reason end
  if node.deleting_since then return "DELETING", "Deletion in progress" end
  local age = (now or clock.now()) - node.created
  if node.failure then
    if age >= M.FAIL_AFTER then return "ERROR", node.failure.reason end
    return "PROVISIONING", "Creation in progress"
  end
  if age >= M.ACTIVE_AFTER then return "ACTIVE", "Creation succeeded" end
  return "PROVISIONING", "Creation in progress"
end

--- sweep([now]): forgets nodes whose deletion has finished. Cheap when nothing is being deleted.
function M.sweep(now)
  if deleting_count == 0 then return end
  now = now or clock.now()
  for _, pool in ipairs(cluster.pools) do
    local kept = {}
    for _, n in ipairs(pool.nodes) do
      if n.deleting_since and now - n.deleting_since >= M.DELETE_AFTER then
        nodes_by_id[n.id] = nil
        deleting_count = deleting_count - 1
      else
        kept[#kept + 1] = n
      end
    end
    pool.nodes = kept
  end
end

local function mark_deleting(node, now)
  node.deleting_since = now
  node.forced = nil
  deleting_count = deleting_count + 1
end

-- Nodes that hold a server against the quota: everything but failed creations.
local function used(flavor)
  local n = 0
  for _, pool in ipairs(cluster.pools) do
    if flavor == nil or pool.flavor == flavor then
      for _, node in ipairs(pool.nodes) do
        if not node.failure then n = n + 1 end
      end
    end
  end
  return n
end

-- counts = {total, flavor}: servers held now, overall and of the pool's flavor (kept up to date by
-- the caller, so growing a pool costs one pass over the cluster, not one per new node).
local function creation_failure(pool, counts)
  local kind, rule = faults.creation_failure(pool.flavor)
  if kind == "quota" then
    return { kind = "quota", reason = rule.message or ("Failed in creating server: Quota exceeded for cores: "
      .. "Requested %d, but already used all cores of the project's quota."):format(flavors.vcpus(pool.flavor)) }
  elseif kind == "nostock" then
    return { kind = "nostock", reason = rule.message
      or "Failed in creating server: No valid host was found. There are not enough hosts available." }
  end
  if capacity.nodes and counts.total >= capacity.nodes then
    return { kind = "quota", reason = ("Failed in creating server: Quota exceeded for instances: Requested 1, "
      .. "but already used %d of %d instances."):format(counts.total, capacity.nodes) }
  end
  local stock = capacity.flavors[pool.flavor]
  if stock and counts.flavor >= stock then
    return { kind = "nostock", reason = ("Failed in creating server: No valid host was found. There are not "
      .. "enough hosts available for flavor %s."):format(pool.flavor) }
  end
  return nil
end

local function live_nodes(pool)
  local out = {}
  for _, n in ipairs(pool.nodes) do
    if not n.deleting_since then out[#out + 1] = n end
  end
  return out
end

-- Which nodes go first when a pool shrinks: failed ones, then those still provisioning, then the
-- newest (the scale-in policy of an autoscaling group that keeps its oldest, proven nodes).
local function shrink_order(now)
  local function rank(n)
    local status = M.status(n, now)
    if n.failure or status == "ERROR" then return 0 end
    if status == "PROVISIONING" then return 1 end
    return 2
  end
  return function(a, b)
    local ra, rb = rank(a), rank(b)
    if ra ~= rb then return ra < rb end
    return a.created > b.created
  end
end

--- set_desired(pool, n): grows (new nodes, some failing past the capacity) or shrinks the pool.
function M.set_desired(pool, n)
  local now = clock.now()
  local live = live_nodes(pool)
  if n > #live then
    local counts = { total = used(), flavor = used(pool.flavor) }
    for _ = 1, n - #live do
      local failure = creation_failure(pool, counts)
      add_node(pool, now, failure)
      -- A stock-out leaves a server in ERROR, but it holds no capacity.
      if not failure then counts.total, counts.flavor = counts.total + 1, counts.flavor + 1 end
    end
  elseif n < #live then
    table.sort(live, shrink_order(now))
    for i = 1, #live - n do mark_deleting(live[i], now) end
  end
  pool.desired_size = n
end

local function check_int(fields, name)
  local v = fields[name]
  if v == nil then return nil end
  if math.type(v) ~= "integer" or v < 0 or v > M.MAX_DESIRED then
    wire.fail(400, ("%s must be an integer between 0 and %d"):format(name, M.MAX_DESIRED))
  end
  return v
end

--- update(pool, fields): PATCH of a worker pool (UpdateWorkerPoolRequest). An update that changes
-- nothing is refused, which catches clients that drop a desired_size of 0 (upstream's omitempty).
function M.update(pool, fields)
  local desired, min, max = check_int(fields, "desired_size"), check_int(fields, "min_size"),
    check_int(fields, "max_size")
  local autoscaling = fields.enable_autoscaling
  if autoscaling ~= nil and type(autoscaling) ~= "boolean" then
    wire.fail(400, "enable_autoscaling must be a boolean")
  end
  local labels, taints = fields.labels, fields.taints
  if labels ~= nil and (type(labels) ~= "table" or getmetatable(labels) == json.array_mt) then
    wire.fail(400, "labels must be an object")
  end
  if taints ~= nil and type(taints) ~= "table" then wire.fail(400, "taints must be a list") end
  if desired == nil and min == nil and max == nil and autoscaling == nil and labels == nil and taints == nil then
    wire.fail(400, "Nothing to update: give desired_size, min_size, max_size, enable_autoscaling, labels or taints")
  end
  local new_min, new_max = min or pool.min_size, max or pool.max_size
  local new_auto = autoscaling
  if new_auto == nil then new_auto = pool.enable_autoscaling end
  local new_desired = desired or pool.desired_size
  if new_auto then
    if new_min > new_max then
      wire.fail(400, ("min_size %d must not be greater than max_size %d"):format(new_min, new_max))
    end
    if new_desired < new_min or new_desired > new_max then
      wire.fail(400, ("desired_size %d must be between min_size %d and max_size %d"):format(new_desired, new_min,
        new_max))
    end
  end
  pool.min_size, pool.max_size, pool.enable_autoscaling = new_min, new_max, new_auto
  if labels then pool.labels = copy(labels) end
  if taints then pool.taints = copy(taints) end
  if new_desired ~= pool.desired_size or desired ~= nil then M.set_desired(pool, new_desired) end
end

--- delete_node(pool, node_id): DELETE of one pool node; the pool's desired size drops by one.
function M.delete_node(pool, node_id)
  M.sweep()
  local node = nodes_by_id[node_id]
  if not node or node.pool ~= pool then
    wire.not_found(("node %s in worker pool %s"):format(node_id, pool.id))
  end
  if node.deleting_since then return "already being deleted" end
  if pool.enable_autoscaling and pool.desired_size - 1 < pool.min_size then
    wire.fail(400, ("Cannot delete node %s: worker pool %s would have %d nodes, below its min_size %d")
      :format(node_id, pool.name, pool.desired_size - 1, pool.min_size))
  end
  mark_deleting(node, clock.now())
  pool.desired_size = math.max(0, pool.desired_size - 1)
  return "deleting"
end

function M.uid()
  return cluster.fields.uid
end

function M.pool(id)
  return cluster.pool_by_id[id]
end

function M.node(id)
  return nodes_by_id[id]
end

--- force(node, status, reason): an admin override of a node's status (nil returns to the lifecycle).
function M.force(node, status, reason)
  if status == nil then
    node.forced = nil
    return true
  end
  if not STATUSES[status] then return nil, "unknown status" end
  node.forced = { status = status, reason = reason or ("Forced to " .. status) }
  return true
end
M.STATUSES = STATUSES

function M.set_capacity(nodes, flavor_limits)
  capacity.nodes = nodes
  capacity.flavors = copy(flavor_limits)
end

function M.capacity()
  return { nodes = capacity.nodes, used = used(), flavors = capacity.flavors }
end

local function node_json(n, now)
  local status, reason = M.status(n, now)
  return { id = n.id, name = n.name, physical_id = n.physical_id or "", status = status, status_reason = reason,
    ip_addresses = wire.list({ n.ip }) }
end

local function taints_json(taints)
  local out = wire.list({})
  for i, t in ipairs(taints or {}) do out[i] = { key = t.key, value = t.value, effect = t.effect } end
  return out
end

--- pool_json(pool[, with_nodes]) -> the ExtendedWorkerPool (listing) or WorkerPoolWithNodes (detail).
function M.pool_json(pool, with_nodes, now)
  now = now or clock.now()
  local out = {
    id = pool.id, name = pool.name, version = pool.version, flavor = pool.flavor,
    flavor_detail = flavors.detail(pool.flavor), profile_type = pool.profile_type, volume_type = pool.volume_type,
    volume_size = pool.volume_size, availability_zone = pool.availability_zone, desired_size = pool.desired_size,
    enable_autoscaling = pool.enable_autoscaling, min_size = pool.min_size, max_size = pool.max_size,
    tags = wire.list(copy(pool.tags)), taints = taints_json(pool.taints), labels = copy(pool.labels),
    provision_type = pool.provision_type, network_plan = pool.network_plan, billing_plan = pool.billing_plan,
    provision_status = "PROVISIONED", launch_config_id = pool.launch_config_id,
    autoscaling_group_id = pool.autoscaling_group_id, created_at = wire.timestamp(pool.created),
    shoot_id = cluster.fields.shoot_id, auto_repair = false, everywhere_nodes = wire.list({}),
  }
  if with_nodes then
    local nodes = wire.list({})
    for i, n in ipairs(pool.nodes) do nodes[i] = node_json(n, now) end
    out.nodes = nodes
  end
  return out
end

--- cluster_json([with_pools]) -> FullCluster (with worker_pools and stat) or the Cluster of a listing.
function M.cluster_json(with_pools)
  local now = clock.now()
  local f = cluster.fields
  local out = {
    uid = f.uid, name = f.name, version = f.version, private_network_id = f.private_network_id,
    private_subnet_id = f.private_subnet_id, auto_upgrade = f.auto_upgrade, tags = wire.list(copy(f.tags)),
    provision_status = "PROVISIONED", cluster_status = "PROVISIONED", created_at = wire.timestamp(cluster.created),
    created_by = f.created_by, worker_pools_count = #cluster.pools, provision_type = f.provision_type,
    access_mode = f.access_mode, cni_plugin = f.cni_plugin,
  }
  if with_pools then
    local pools, cpu, memory = wire.list({}), 0, 0
    for i, p in ipairs(cluster.pools) do
      pools[i] = M.pool_json(p, false, now)
      local d = flavors.detail(p.flavor)
      if d then
        cpu, memory = cpu + d.vcpus * p.desired_size, memory + d.ram * p.desired_size // 1024
      end
    end
    out.worker_pools = pools
    out.stat = { worker_pools = #cluster.pools, total_cpu = cpu, total_memory = memory }
  end
  return out
end

--- summary() -> plain table for /_sim/state: every pool with its nodes' statuses.
function M.summary()
  M.sweep()
  local now = clock.now()
  local pools, total = wire.list({}), 0
  for i, p in ipairs(cluster.pools) do
    local nodes = wire.list({})
    for k, n in ipairs(p.nodes) do
      local status, reason = M.status(n, now)
      nodes[k] = { id = n.id, name = n.name, physical_id = n.physical_id or "", status = status,
        status_reason = reason }
    end
    total = total + #nodes
    pools[i] = { id = p.id, name = p.name, flavor = p.flavor, enable_autoscaling = p.enable_autoscaling,
      min_size = p.min_size, max_size = p.max_size, desired_size = p.desired_size, nodes = nodes }
  end
  return { uid = cluster.fields.uid, name = cluster.fields.name, pools = pools, nodes = total }
end

return M
