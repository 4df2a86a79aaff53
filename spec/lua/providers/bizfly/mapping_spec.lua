-- The Bizfly NodeGroup mapping (docs/contracts.md#mappings): refresh snapshots, target sizes, node
-- deletion by label and by provider ID, template nodes, and failures that leave the engine its last
-- snapshot. Against `luaprov sim` over real HTTP; the status table is checked directly.
local luaprov = require "luaprov"
local bizfly = require "providers.bizfly"
local pools = require "providers.bizfly.pools"
local session = require "providers.bizfly.session"
local h = require "spec.fixtures.bizfly.harness"

local json = luaprov.json

local function states(group)
  local count = {}
  for _, n in ipairs(group.nodes) do count[n.state] = (count[n.state] or 0) + 1 end
  return count
end

describe("bizfly mapping exports", function()
  it("names the provider and the GPU label as upstream", function()
    assert.equals("bizflycloud", bizfly.name)
    assert.equals("bke.bizflycloud.vn/gpu-node", bizfly.gpu_label)
    for _, f in ipairs({ "refresh", "set_target_size", "delete_node", "template_node" }) do
      assert.is_function(rawget(bizfly, f))
    end
  end)
end)

describe("bizfly node status", function()
  local function status(s, reason, extra)
    local node = { id = "n1", physical_id = "p1", status = s, status_reason = reason }
    for k, v in pairs(extra or {}) do node[k] = v end
    return pools.node_status(node)
  end

  it("maps both upstream's names and the live API's", function()
    assert.equals("running", status("ACTIVE"))
    assert.equals("running", status("running"))
    assert.equals("creating", status("provisioning"))
    assert.equals("creating", status("PROVISIONING"))
    assert.equals("deleting", status("draining"))
    assert.equals("deleting", status("DELETING"))
    assert.equals("creating", status("ACTIVE", nil, { id = "" }))
  end)

  it("reports failed creations as creating with an error, OutOfResources for quota and stock", function()
    local state, err = status("ERROR", "Failed in creating server: Quota exceeded for instances: Requested 1")
    assert.equals("creating", state)
    assert.same({ class = "OutOfResources", code = "quota-exceeded-bizflycloud",
      message = "Failed in creating server: Quota exceeded for instances: Requested 1" }, err)
    state, err = status("ERROR", "No valid host was found. There are not enough hosts available.")
    assert.equals("creating", state)
    assert.equals("OutOfResources", err.class)
    assert.equals("out-of-stock-bizflycloud", err.code)
    state, err = status("error", "image not bootable")
    assert.equals("creating", state)
    assert.same({ class = "Other", code = "no-code-bizflycloud", message = "image not bootable" }, err)
  end)

  it("keeps a node in a status nobody knows running, without an error", function()
    local state, err = status("HIBERNATING")
    assert.equals("running", state)
    assert.is_nil(err)
  end)

  it("names a node by its server, or by its pool-node id when no server exists", function()
    assert.equals("bizflycloud://p1", pools.provider_id({ id = "n1", physical_id = "p1" }))
    assert.equals("bizflycloud://n1", pools.provider_id({ id = "n1", physical_id = "" }))
    assert.is_nil(pools.provider_id({ id = "", physical_id = "" }))
  end)
end)

describe("bizfly mapping against the simulator", function()
  local sim, ctx

  setup(function()
    sim = h.start_sim()
    ctx = sim.ctx
    h.fast_retries()
  end)
  teardown(function()
    if sim then sim:stop() end
    session.options = {}
  end)
  before_each(function()
    sim:reset()
    h.use_env(h.APP_ENV)
  end)
  after_each(h.restore_env)

  it("snapshots only the autoscaled pools, with sizes, provider IDs and states", function()
    local snapshot = assert(bizfly.refresh(ctx))
    assert.equals(json.array_mt, getmetatable(snapshot))
    assert.equals(3, #snapshot)
    assert.is_nil(h.group(snapshot, h.POOLS.system))
    assert.is_nil(h.group(snapshot, h.POOLS.legacy))

    local general = h.group(snapshot, h.POOLS.general)
    assert.same({ 1, 5, 2 }, { general.min_size, general.max_size, general.target_size })
    assert.matches("pool%-general", general.debug)
    local sim_nodes = sim:pool(h.POOLS.general).nodes
    assert.equals(2, #general.nodes)
    for i, n in ipairs(general.nodes) do
      assert.equals("bizflycloud://" .. sim_nodes[i].physical_id, n.provider_id)
      assert.equals("running", n.state)
      assert.is_nil(n.error)
    end

    local gpu = h.group(snapshot, h.POOLS.gpu)
    assert.same({ 0, 4, 1 }, { gpu.min_size, gpu.max_size, gpu.target_size })
    local batch = h.group(snapshot, h.POOLS.batch)
    assert.same({ 0, 10, 0 }, { batch.min_size, batch.max_size, batch.target_size })
    -- An empty node list must stay a JSON list for the engine.
    assert.matches('"nodes":%[%]', json.encode(batch))
  end)

  it("costs one GET of the cluster and one per autoscaled pool", function()
    assert(bizfly.refresh(ctx))
    local calls = sim:state().calls
    assert.equals(1, calls.get_cluster)
    assert.equals(3, calls.get_pool)
  end)

  it("works with the password method and CLUSTER_NAME / LUAPROV_BIZFLY_ENDPOINT instead of ctx", function()
    h.use_env(h.with(h.PASSWORD_ENV, { CLUSTER_NAME = h.CLUSTER, LUAPROV_BIZFLY_ENDPOINT = sim.url }))
    local snapshot = assert(bizfly.refresh({}))
    assert.equals(3, #snapshot)
  end)

  it("sets the target size; new nodes are creating, then running", function()
    assert.is_true(bizfly.set_target_size(ctx, h.POOLS.general, 4))
    assert.equals(4, sim:pool(h.POOLS.general).desired_size)
    local general = h.group(assert(bizfly.refresh(ctx)), h.POOLS.general)
    assert.equals(4, general.target_size)
    assert.same({ running = 2, creating = 2 }, states(general))
    sim:advance(31)
    general = h.group(assert(bizfly.refresh(ctx)), h.POOLS.general)
    assert.same({ running = 4 }, states(general))
  end)

  it("sets the target size to 0, and the nodes go deleting, then away", function()
    assert.is_true(bizfly.set_target_size(ctx, h.POOLS.gpu, 0))
    local gpu = h.group(assert(bizfly.refresh(ctx)), h.POOLS.gpu)
    assert.equals(0, gpu.target_size)
    assert.same({ deleting = 1 }, states(gpu))
    sim:advance(21)
    gpu = h.group(assert(bizfly.refresh(ctx)), h.POOLS.gpu)
    assert.equals(0, #gpu.nodes)
  end)

  it("returns the API's refusal of a size below the pool's minimum, and refuses a bad size itself", function()
    local ok, err = bizfly.set_target_size(ctx, h.POOLS.general, 0)
    assert.is_nil(ok)
    assert.equals("InvalidRequest", err.code)
    assert.equals(400, err.status)
    assert.equals("PATCH", err.method)
    assert.matches(h.POOLS.general, err.path)
    assert.matches("min_size 1", err.message)
    ok, err = bizfly.set_target_size(ctx, h.POOLS.general, -1)
    assert.is_nil(ok)
    assert.equals("InvalidArgument", err.code)
  end)

  it("reports a stock-out as creating with an OutOfResources error", function()
    -- The GPU flavor has stock for 2 nodes: of 3, one cannot be created.
    assert.is_true(bizfly.set_target_size(ctx, h.POOLS.gpu, 3))
    sim:advance(11)
    local gpu = h.group(assert(bizfly.refresh(ctx)), h.POOLS.gpu)
    assert.equals(3, gpu.target_size)
    local failed = {}
    for _, n in ipairs(gpu.nodes) do
      if n.error then failed[#failed + 1] = n end
    end
    assert.equals(1, #failed)
    assert.equals("creating", failed[1].state)
    assert.equals("OutOfResources", failed[1].error.class)
    assert.equals("out-of-stock-bizflycloud", failed[1].error.code)
    assert.matches("No valid host was found", failed[1].error.message)
  end)

  it("reports a quota refusal on a node without a server, and deletes it by provider ID", function()
    sim:admin("POST", "/_sim/capacity", { nodes = 7 })   -- 6 nodes run: room for one more
    assert.is_true(bizfly.set_target_size(ctx, h.POOLS.batch, 3))
    sim:advance(11)
    local batch = h.group(assert(bizfly.refresh(ctx)), h.POOLS.batch)
    local failed = {}
    for _, n in ipairs(batch.nodes) do
      if n.error then failed[#failed + 1] = n end
    end
    assert.equals(2, #failed)
    assert.equals("quota-exceeded-bizflycloud", failed[1].error.code)
    assert.equals("OutOfResources", failed[1].error.class)
    -- The autoscaler cleans it up through a fake node: no labels, the instance id as provider ID.
    local sim_node
    for _, n in ipairs(sim:pool(h.POOLS.batch).nodes) do
      if failed[1].provider_id == "bizflycloud://" .. n.id then sim_node = n end
    end
    assert.is_table(sim_node, "a failed node is named by its pool-node id")
    assert.equals("", sim_node.physical_id)
    assert.is_true(bizfly.delete_node(ctx, h.POOLS.batch, { provider_id = failed[1].provider_id,
      name = failed[1].provider_id }))
    assert.equals(2, sim:pool(h.POOLS.batch).desired_size)
  end)

  it("deletes a node by its node-id label", function()
    local node = sim:pool(h.POOLS.general).nodes[1]
    local before = sim:state().calls.get_pool or 0
    assert.is_true(bizfly.delete_node(ctx, h.POOLS.general, { provider_id = "bizflycloud://" .. node.physical_id,
      name = node.name, labels = { ["bke.bizflycloud.vn/node-id"] = node.id } }))
    local pool = sim:pool(h.POOLS.general)
    assert.equals(1, pool.desired_size)
    assert.equals("DELETING", pool.nodes[1].status)
    -- The label names the node: no need to read the pool.
    assert.equals(before, sim:state().calls.get_pool or 0)
  end)

  it("deletes a node without labels by matching its provider ID in the pool", function()
    local node = sim:pool(h.POOLS.gpu).nodes[1]
    assert.is_true(bizfly.delete_node(ctx, h.POOLS.gpu, { provider_id = "bizflycloud://" .. node.physical_id,
      name = node.name }))
    assert.equals("DELETING", sim:pool(h.POOLS.gpu).nodes[1].status)
    assert.equals(0, sim:pool(h.POOLS.gpu).desired_size)
  end)

  it("says NotFound for a node that is not in the pool", function()
    local ok, err = bizfly.delete_node(ctx, h.POOLS.general, { provider_id = "bizflycloud://not-here",
      name = "stranger", labels = {} })
    assert.is_nil(ok)
    assert.equals("NotFound", err.code)
    assert.matches("not in worker pool", err.message)
  end)

  it("builds the template of a pool from its flavor, labels and taints", function()
    local t = assert(bizfly.template_node(ctx, h.POOLS.general))
    assert.same({ cpu = "4", memory = "8Gi", pods = "110", ["ephemeral-storage"] = "40Gi" }, t.capacity)
    assert.equals("3920m", t.allocatable.cpu)
    assert.equals("110", t.allocatable.pods)
    assert.equals("general", t.labels.workload)
    assert.equals("nix.4c_8g", t.labels["node.kubernetes.io/instance-type"])
    assert.equals("HN1", t.labels["topology.kubernetes.io/zone"])
    assert.equals("linux", t.labels["kubernetes.io/os"])
    assert.is_nil(t.labels["bke.bizflycloud.vn/gpu-node"])
    assert.equals(0, #t.taints)
    assert.matches('"taints":%[%]', json.encode(t))
  end)

  it("marks a GPU pool's template with the GPU label and resource, and keeps its taint", function()
    local t = assert(bizfly.template_node(ctx, h.POOLS.gpu))
    assert.equals("nvidia-tesla-t4", t.labels["bke.bizflycloud.vn/gpu-node"])
    assert.equals("1", t.capacity["nvidia.com/gpu"])
    assert.equals("1", t.allocatable["nvidia.com/gpu"])
    assert.equals("32Gi", t.capacity.memory)
    assert.same({ { key = "nvidia.com/gpu", value = "present", effect = "NoSchedule" } }, t.taints)
    local batch = assert(bizfly.template_node(ctx, h.POOLS.batch))
    assert.equals("3", batch.capacity.cpu)
    assert.equals("6Gi", batch.capacity.memory)
    assert.equals(2, #batch.taints)
  end)

  it("answers NotFound for a flavor it cannot size, and for a pool that does not exist", function()
    local t, err = bizfly.template_node(ctx, h.POOLS.legacy)
    assert.is_nil(t)
    assert.equals("NotFound", err.code)
    assert.matches("bm.custom%-48", err.message)
    t, err = bizfly.template_node(ctx, "000000000000000000000000")
    assert.is_nil(t)
    assert.equals("NotFound", err.code)
  end)

  it("fails the whole refresh when a pool GET keeps failing (the engine keeps its last snapshot)", function()
    sim:fault({ operation = "get_pool", kind = "5xx" })
    local snapshot, err = bizfly.refresh(ctx)
    assert.is_nil(snapshot)
    assert.equals("ServerError", err.code)
    assert.equals(500, err.status)
    assert.equals("GET", err.method)
    assert.matches("^/api/kubernetes%-engine/_/" .. h.CLUSTER .. "/", err.path)
    assert.matches("Internal Server Error", err.message)
  end)

  it("fails the refresh when the cluster cannot be read, and recovers once it can", function()
    sim:fault({ operation = "get_cluster", kind = "error", status = 403, message = "You are not allowed", count = 2 })
    local snapshot, err = bizfly.refresh(ctx)
    assert.is_nil(snapshot)
    assert.equals("Forbidden", err.code)
    assert.equals(403, err.status)
    assert.matches("You are not allowed", err.message)
    -- The 403 is not retried: one call used one rule, so the next refresh still fails, then works.
    assert.is_nil((bizfly.refresh(ctx)))
    assert.equals(3, #assert(bizfly.refresh(ctx)))
  end)

  it("survives a revoked token in the middle of a refresh", function()
    assert(bizfly.refresh(ctx))
    sim:fault({ operation = "get_pool", kind = "unauthorized", count = 1 })
    assert.equals(3, #assert(bizfly.refresh(ctx)))
  end)

  it("returns the configuration error when credentials are missing", function()
    h.use_env({})
    local snapshot, err = bizfly.refresh(ctx)
    assert.is_nil(snapshot)
    assert.equals("InvalidConfig", err.code)
  end)

  it("reports a node whose status the admin forced to WARNING as running", function()
    local node = sim:pool(h.POOLS.general).nodes[2]
    sim:admin("POST", "/_sim/nodes/" .. node.id, { status = "WARNING", status_reason = "health check degraded" })
    local general = h.group(assert(bizfly.refresh(ctx)), h.POOLS.general)
    assert.equals("running", general.nodes[2].state)
  end)
end)
