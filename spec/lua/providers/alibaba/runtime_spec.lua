-- The container runtime of the ACK attach script (providers/alibaba/runtime.lua): the node pool that
-- wins and the rewrite of --runtime/--runtime-version, then, against the Alibaba simulator over real
-- HTTP, the corrected script in the user data, a failing DescribeClusterNodePools (script kept, a
-- warning, the launch goes on) and the 6-hour cache of the corrected script. The simulated ACK names
-- docker on Kubernetes 1.31 and the simulated kubelet refuses it, so a node joins only when the
-- rewrite happened.
local luaprov = require "luaprov"
local attachscript = require "providers.alibaba.attachscript"
local bootstrap = require "providers.alibaba.bootstrap"
local launch = require "providers.alibaba.launch"
local nodeclass = require "providers.alibaba.nodeclass"
local runtime = require "providers.alibaba.runtime"
local session = require "providers.alibaba.session"
local attach = require "sim.alibaba.attach"

local json = luaprov.json

local function pool(name, is_default, healthy, rt, version)
  return { nodepool_info = { name = name, nodepool_id = "np-" .. name, is_default = is_default },
    status = { healthy_nodes = healthy }, kubernetes_config = { runtime = rt, runtime_version = version } }
end

describe("alibaba attach script runtime", function()
  describe("pick", function()
    it("takes the default pool first, whatever its healthy nodes", function()
      assert.same({ "containerd", "1.6.38" }, { runtime.pick {
        pool("big", false, 40, "Sandboxed-Container.runv", "2.1.0"), pool("default", true, 1, "containerd", "1.6.38"),
        pool("other", false, 7, "containerd", "1.5.13") } })
    end)

    it("without a default pool: the most healthy nodes, ties in the API's order", function()
      assert.same({ "containerd", "1.7.1" }, { runtime.pick {
        pool("a", false, 2, "containerd", "1.6.20"), pool("b", false, 5, "containerd", "1.7.1"),
        pool("c", nil, 5, "containerd", "1.7.2") } })
      assert.same({ "containerd", "1.6.20" }, { runtime.pick {
        pool("a", false, nil, "containerd", "1.6.20"), pool("b", false, nil, "containerd", "1.7.1") } })
    end)

    it("no pools, or a winner without a plain runtime and version: nil and why", function()
      assert.same({ nil, "the cluster has no node pools" }, { runtime.pick(json.decode("[]")) })
      assert.same({ nil, "the cluster has no node pools" }, { runtime.pick(nil) })
      local _, why = runtime.pick { pool("default", true, 3, nil, "1.6.38"), pool("x", false, 9, "containerd", "1") }
      assert.equals("node pool default has no usable kubernetes_config.runtime and runtime_version", why)
      assert.is_nil(runtime.pick { pool("default", true, 3, "containerd", "") })
      assert.is_nil(runtime.pick { pool("default", true, 3, "containerd; reboot", "1.6.38") })
      assert.is_nil(runtime.pick { pool("default", true, 3, "containerd", "1.6 --x") })
      assert.matches("node pool #1 ", select(2, runtime.pick { { kubernetes_config = {} } }))
    end)
  end)

  describe("rewrite", function()
    it("replaces the runtime flags, blanks of any length around them", function()
      assert.same({ "bash -s -- --ess true --runtime containerd --runtime-version 1.6.38 --format-disk", 1 },
        { runtime.rewrite("bash -s -- --ess true  --runtime docker\t--runtime-version   19.03.15 --format-disk",
          "containerd", "1.6.38") })
    end)

    it("leaves a script without them alone, and takes % in a value literally", function()
      assert.same({ "bash -s -- --ess true", 0 }, { runtime.rewrite("bash -s -- --ess true", "containerd", "1") })
      assert.same({ "x --runtime containerd --runtime-version 1%0", 1 },
        { runtime.rewrite("x --runtime docker --runtime-version 1", "containerd", "1%0") })
    end)

    it("needs both flags in that order", function()
      assert.same({ "x --runtime docker", 0 }, { runtime.rewrite("x --runtime docker", "containerd", "1") })
      assert.same({ "x --runtime-version 1 --runtime docker", 0 },
        { runtime.rewrite("x --runtime-version 1 --runtime docker", "containerd", "1") })
    end)
  end)

  describe("against the simulator", function()
    local simulator = dofile((os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/alibaba/simulator.lua")
    local sim, ctx, c
    local now = 1800000000
    local real_clock = attachscript.clock
    local DOCKER = " --runtime docker --runtime-version 19.03.15"
    local CONTAINERD = " --runtime containerd --runtime-version 1.6.38"

    setup(function()
      sim = simulator.start()
      ctx, c = sim:session("luaprov-sim")
      attachscript.clock = function() return now end
    end)
    teardown(function()
      attachscript.clock = real_clock
      if sim then sim:stop() end
      session.reset()
    end)
    before_each(function()
      sim:reset()
      now = now + 10 * attachscript.TTL -- a cold cache: the entries of the test before are too old
    end)

    local function calls()
      local n = sim:state().calls
      return { script = n.DescribeClusterAttachScripts or 0, pools = n.DescribeClusterNodePools or 0 }
    end

    local function user_data() return assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot")) end

    local function plain(s) return (s:gsub("%p", "%%%0")) end

    -- The warnings logged while fn runs.
    local function warnings_of(fn)
      local out, warn = {}, luaprov.log.warn
      luaprov.log.warn = function(msg, fields) out[#out + 1] = { msg = msg, fields = fields } end
      local ok, err = pcall(fn)
      luaprov.log.warn = warn
      assert(ok, err)
      return out
    end

    it("the simulated ACK names docker, and the kubelet refuses it on Kubernetes 1.31", function()
      local answered = attach.script("luaprov-sim", false)
      assert.matches(plain(DOCKER), answered)
      local parsed, why = attach.parse(luaprov.crypto.base64_encode("#!/bin/bash\n" .. answered
        .. " --labels k8s.aliyun.com=true,ack.aliyun.com=luaprov-sim\n"))
      assert.is_nil(parsed)
      assert.equals("attach command: --runtime docker on Kubernetes 1.31.1-aliyun.1, which has no dockershim since"
        .. " 1.24: the kubelet never starts", why)
    end)

    it("writes the default node pool's runtime into the user data, which the kubelet accepts", function()
      sim:nodepools { pool("gpu", false, 12, "Sandboxed-Container.runv", "2.1.0"),
        pool("default-nodepool", true, 2, "containerd", "1.6.38") }
      local text = user_data()
      assert.matches("%-%-auto%-drain false" .. plain(CONTAINERD) .. " %-%-labels ", text)
      assert.is_nil(text:find("docker", 1, true))
      local parsed = assert(attach.parse(luaprov.crypto.base64_encode(text)))
      assert.same({ name = "containerd", version = "1.6.38" }, parsed.runtime)
      assert.same({ script = 1, pools = 1 }, calls())
    end)

    it("without a default pool, the runtime of the pool with the most healthy nodes", function()
      sim:nodepools { pool("small", false, 1, "containerd", "1.6.20"), pool("large", false, 9, "containerd", "1.7.1"),
        pool("mid", false, 4, "Sandboxed-Container.runv", "2.1.0") }
      assert.matches(" %-%-runtime containerd %-%-runtime%-version 1%.7%.1 %-%-labels ", user_data())
    end)

    it("a failing DescribeClusterNodePools: the script as answered, a warning without the token", function()
      sim:fault { action = "DescribeClusterNodePools", code = "Forbidden.RAM" }
      local text
      local warnings = warnings_of(function() text = user_data() end)
      assert.matches(plain(DOCKER) .. " %-%-labels ", text)
      assert.equals(1, #warnings)
      local w = warnings[1]
      assert.matches("runtime is kept", w.msg)
      assert.equals("DescribeClusterNodePools", w.fields.action)
      assert.equals("luaprov-sim", w.fields.cluster_id)
      assert.equals("Auth", w.fields.code)
      assert.equals("Forbidden.RAM", w.fields.api_code)
      assert.matches("^[%x%-]+$", w.fields.request_id)
      assert.is_nil(json.encode(w):find(attach.token("luaprov-sim"), 1, true))
      assert.same({ script = 1, pools = 1 }, calls())
    end)

    it("after a failed node pool call, the next launch asks the node pools again, not the script", function()
      sim:fault { action = "DescribeClusterNodePools", code = "Forbidden.RAM", count = 1 }
      warnings_of(function() assert.matches(plain(DOCKER), user_data()) end)
      assert.same({ script = 1, pools = 1 }, calls())
      assert.matches(plain(CONTAINERD), user_data())
      assert.same({ script = 1, pools = 2 }, calls())
      assert.matches(plain(CONTAINERD), user_data())
      assert.same({ script = 1, pools = 2 }, calls(), "settled: cached")
    end)

    it("node pools without a runtime: the script as answered, a warning, and no call again", function()
      sim:nodepools(json.decode("[]"))
      local warnings = warnings_of(function() assert.matches(plain(DOCKER), user_data()) end)
      assert.equals(1, #warnings)
      assert.equals("NoNodePoolRuntime", warnings[1].fields.code)
      assert.equals("the cluster has no node pools", warnings[1].fields.error)
      user_data()
      assert.same({ script = 1, pools = 1 }, calls())
    end)

    it("caches the corrected script 6 hours: one call of each", function()
      assert.matches(plain(CONTAINERD), user_data())
      sim:nodepools { pool("default-nodepool", true, 3, "containerd", "1.7.9") }
      now = now + attachscript.TTL - 1
      assert.matches(plain(CONTAINERD), user_data())
      assert.same({ script = 1, pools = 1 }, calls())
      now = now + 1
      assert.matches(" %-%-runtime containerd %-%-runtime%-version 1%.7%.9 ", user_data())
      assert.same({ script = 2, pools = 2 }, calls())
    end)

    it("the simulator's DescribeClusterNodePools: GET only, 404 for another cluster, pools checked", function()
      local function pools(method, cluster)
        local path = "/clusters/" .. cluster .. "/nodepools"
        return c:roa("cs", "DescribeClusterNodePools", { method = method, path = path })
      end
      local value = assert(pools("GET", "luaprov-sim"))
      assert.equals(1, #value.nodepools)
      assert.is_true(value.nodepools[1].nodepool_info.is_default)
      assert.equals("containerd", value.nodepools[1].kubernetes_config.runtime)
      local _, err = pools("POST", "luaprov-sim")
      assert.equals("InvalidAction.NotFound", err.api_code)
      _, err = pools("GET", "c-other")
      assert.equals("ErrorClusterNotFound", err.api_code)
      assert.equals(404, err.http_status)
      local res = assert(luaprov.http.request { method = "POST", url = sim.url .. "/_sim/nodepools",
        headers = { ["content-type"] = "application/json" }, body = '{"nodepools": [1]}' })
      assert.equals(400, res.status)
      assert.matches("nodepools%[0%] is not an object", res.body)
    end)

    describe("a launch", function()
      local AMD64 = { { key = "kubernetes.io/arch", operator = "In", values = { "amd64" } } }

      -- The cluster forgets the Nodes of the test before (instance IDs repeat after an Alibaba reset).
      before_each(function()
        local res = assert(luaprov.http.request { method = "POST", url = sim.kubernetes .. "/_sim/reset", body = "{}",
          headers = { ["content-type"] = "application/json" } })
        assert.equals(200, res.status)
      end)

      local function class()
        local nc = { metadata = { name = "default" }, spec = {
          vSwitchSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
          securityGroupSelectorTerms = { { tags = { ["karpenter.sh/discovery"] = "luaprov-sim" } } },
          imageSelectorTerms = { { alias = "AlibabaCloudLinux3" } },
        } }
        nc.status = nodeclass.resolve(ctx, nc)
        return nc
      end

      local function create(token)
        return assert(launch.create(ctx, { nodeclass = class(),
          nodeclaim = { metadata = { name = "default-" .. token, uid = "uid-" .. token } },
          tags = { ["kubernetes.io/cluster/luaprov-sim"] = "owned" },
          offerings = { { instance_type = "ecs.g7.large", zone = "cn-hangzhou-h", capacity_type = "on-demand",
            client_token = token, price = 0.1, type = { name = "ecs.g7.large", requirements = AMD64 } } } }))
      end

      -- The simulated kubelet's view of an instance: its Node's name, or why it has none.
      local function kubelet(id)
        local res = assert(luaprov.http.request { method = "GET", url = sim.kubernetes .. "/api/v1/nodes" })
        for _, node in ipairs(json.decode(res.body).items) do
          if node.spec.providerID == "cn-hangzhou." .. id then return node.metadata.name end
        end
        res = assert(luaprov.http.request { method = "GET", url = sim.kubernetes .. "/_sim/state" })
        for _, n in ipairs(json.decode(res.body).kubelet.nodes) do
          if n.instance_id == id then return nil, n.not_registered end
        end
      end

      it("with the corrected runtime joins the cluster", function()
        local inst = create("rt-ok")
        sim:advance(20)
        assert.is_string((kubelet(inst.id)))
      end)

      it("goes on when DescribeClusterNodePools fails, and its node then never starts", function()
        sim:fault { action = "DescribeClusterNodePools", code = "Forbidden.RAM" }
        local inst
        warnings_of(function() inst = create("rt-denied") end)
        assert.matches("^i%-", inst.id)
        sim:advance(20)
        local name, why = kubelet(inst.id)
        assert.is_nil(name)
        assert.matches("%-%-runtime docker on Kubernetes 1%.31", why)
      end)
    end)
  end)
end)
