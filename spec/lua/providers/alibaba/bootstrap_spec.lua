-- The user data of a launch (providers/alibaba/bootstrap.lua): the ACK attach command with the
-- node's labels, kubelet settings and taints, the separator and MIME forms of spec.userData, the
-- Custom passthrough, the 6-hour cache of the attach script and every failure of
-- DescribeClusterAttachScripts, against the Alibaba simulator over real HTTP.
local bootstrap = require "providers.alibaba.bootstrap"
local attachscript = require "providers.alibaba.attachscript"
local client = require "providers.alibaba.client"
local credentials = require "providers.alibaba.credentials"
local mime = require "providers.alibaba.mime"
local session = require "providers.alibaba.session"
local signer = require "providers.alibaba.signer"
local attach = require "sim.alibaba.attach"
local auth = require "sim.alibaba.auth"
local luaprov = require "luaprov"

local simulator = dofile((os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/alibaba/simulator.lua")

local CLUSTER = "luaprov-sim"
-- The attach script as the provider writes it: ACK's answer with the runtime of the cluster's default
-- node pool (sim/alibaba/nodepools.lua) in place of the docker the simulated ACK names.
local CONTAINERD = { name = "containerd", version = "1.6.38" }
local SCRIPT = attach.script(CLUSTER, false, CONTAINERD)
-- base64 of {"kubelet_config":{"maxPods":64}} and of {"kubelet_config":{}}, computed outside Lua.
local CONFIG_64 = "eyJrdWJlbGV0X2NvbmZpZyI6eyJtYXhQb2RzIjo2NH19"
local CONFIG_EMPTY = "eyJrdWJlbGV0X2NvbmZpZyI6e319"

describe("alibaba bootstrap", function()
  local sim, ctx, c
  local now = 1800000000
  local real_clock = attachscript.clock

  setup(function()
    sim = simulator.start()
    ctx = { region = "cn-hangzhou", cluster_id = CLUSTER, endpoint = sim.url }
    c = assert(session.client(ctx))
    c.credentials = credentials.static { access_key_id = auth.DEFAULT_ACCESS_KEY_ID,
      access_key_secret = auth.DEFAULT_ACCESS_KEY_SECRET }
    c.backoff_base = 0.01
    attachscript.clock = function() return now end
  end)
  teardown(function()
    attachscript.clock = real_clock
    if sim then sim:stop() end
    session.reset()
  end)
  before_each(function()
    sim:reset()
    -- Every test starts with a cold cache: the entries of the one before are older than 6 hours.
    now = now + 10 * attachscript.TTL
  end)

  local function cs_calls() return sim:state().calls.DescribeClusterAttachScripts or 0 end

  local function ctx_with(extra)
    local out = {}
    for k, v in pairs(ctx) do out[k] = v end
    for k, v in pairs(extra or {}) do out[k] = v end
    return out
  end

  local NODECLAIM = {
    metadata = { labels = { ["node.kubernetes.io/instance-type"] = "ecs.g7.large",
      ["karpenter.sh/nodepool"] = "default" } },
    spec = {
      taints = { { key = "dedicated", value = "gpu", effect = "NoSchedule" } },
      startupTaints = { { key = "example.com/init", effect = "NoExecute" } },
    },
  }

  describe("ACKManaged", function()
    it("runs the attach command between the parts before and after the separator", function()
      local nodeclass = { spec = { userData = "  echo pre\n#===USERDATA_SEPARATOR===\n\necho post\n\n",
        kubeletConfiguration = { maxPods = 64 } } }
      local text = assert(bootstrap.user_data(ctx, NODECLAIM, nodeclass, "spot"))
      assert.equals("#!/bin/bash\n\n"
        .. 'echo "Executing preUserData..."\necho pre\n'
        .. SCRIPT .. " --labels k8s.aliyun.com=true,ack.aliyun.com=luaprov-sim,karpenter.sh/capacity-type=spot,"
        .. "karpenter.sh/nodepool=default,node.kubernetes.io/instance-type=ecs.g7.large"
        .. " --node-config " .. CONFIG_64
        .. " --taints dedicated=gpu:NoSchedule,example.com/init:NoExecute,karpenter.sh/unregistered:NoExecute\n"
        .. '\necho "Executing postUserData..."\necho post\n', text)
      assert.equals(1, cs_calls())
    end)

    it("leaves out the kubernetes.io and k8s.io labels a kubelet refuses to start with", function()
      local nodeclaim = { metadata = { labels = { ["node-restriction.kubernetes.io/team"] = "a",
        ["node-role.kubernetes.io/worker"] = "", ["example.k8s.io/x"] = "y", ["kubernetes.io/arch"] = "amd64",
        ["kubelet.kubernetes.io/role"] = "pool", ["x.node.kubernetes.io/y"] = "z", ["example.com/team"] = "b" } } }
      local text = assert(bootstrap.user_data(ctx, nodeclaim, { spec = {} }, "spot"))
      assert.matches(" %-%-labels k8s%.aliyun%.com=true,ack%.aliyun%.com=luaprov%-sim,example%.com/team=b,"
        .. "karpenter%.sh/capacity%-type=spot,kubelet%.kubernetes%.io/role=pool,kubernetes%.io/arch=amd64,"
        .. "x%.node%.kubernetes%.io/y=z %-%-node%-config ", text)
      local refused = { "node-restriction.kubernetes.io/team", "node-role.kubernetes.io/worker", "example.k8s.io/x" }
      for _, key in ipairs(refused) do
        assert.is_false(bootstrap.kubelet_accepts(key), key)
      end
    end)

    it("without user data or maxPods: the command alone, an empty kubelet config", function()
      local text = assert(bootstrap.user_data(ctx, { metadata = {} }, { spec = {} }, "on-demand"))
      assert.equals("#!/bin/bash\n\n" .. SCRIPT
        .. " --labels k8s.aliyun.com=true,ack.aliyun.com=luaprov-sim,karpenter.sh/capacity-type=on-demand"
        .. " --node-config " .. CONFIG_EMPTY .. " --taints karpenter.sh/unregistered:NoExecute\n", text)
    end)

    it("user data without a separator runs after the command", function()
      local text = assert(bootstrap.user_data(ctx, {}, { spec = { userData = "echo after\n" } }, "spot"))
      assert.matches("%-%-taints karpenter%.sh/unregistered:NoExecute\n\necho \"Executing postUserData%.%.%.\"\n"
        .. "echo after\n$", text)
      assert.not_matches("preUserData", text)
    end)

    it("adds the unregistered taint only when the NodeClaim does not have it", function()
      local nodeclaim = { spec = { startupTaints = { { key = "karpenter.sh/unregistered", effect = "NoExecute" } } } }
      local text = assert(bootstrap.user_data(ctx, nodeclaim, { spec = {} }, "spot"))
      assert.matches(" %-%-taints karpenter%.sh/unregistered:NoExecute\n", text)
      assert.equals(1, select(2, text:gsub("karpenter%.sh/unregistered", "")))
    end)

    it("asks for disk formatting when the node class says so", function()
      local text = assert(bootstrap.user_data(ctx, {}, { spec = { formatDataDisk = true } }, "spot"))
      assert.equals(1, select(2, text:find(attach.script(CLUSTER, true, CONTAINERD), 1, true)) and 1)
      assert.matches("%-%-format%-disk %-%-labels", text)
    end)

    it("merges a MIME multi-part user data: the bootstrap part after the stage=pre scripts", function()
      local user = table.concat({ "MIME-Version: 1.0", 'Content-Type: multipart/mixed; boundary="==b=="', "",
        "--==b==", "Content-Type: text/cloud-config", "", "fqdn: n1", "", "--==b==",
        "Content-Type: text/x-shellscript; stage=pre", "", "#!/bin/bash", "echo pre", "", "--==b==--", "" }, "\r\n")
      local text = assert(bootstrap.user_data(ctx, {}, { spec = { userData = user } }, "spot"))
      local parts = assert(mime.parse(text))
      assert.equals(3, #parts)
      assert.same({ content_type = "text/x-shellscript; stage=pre", content = "#!/bin/bash\necho pre\n" }, parts[1])
      assert.equals('text/x-shellscript; charset="us-ascii"', parts[2].content_type)
      assert.equals("#!/bin/bash\n" .. SCRIPT .. " --labels k8s.aliyun.com=true,ack.aliyun.com=luaprov-sim,"
        .. "karpenter.sh/capacity-type=spot --node-config " .. CONFIG_EMPTY
        .. " --taints karpenter.sh/unregistered:NoExecute\n", parts[2].content)
      assert.same({ content_type = "text/cloud-config", content = "fqdn: n1\n" }, parts[3])
      assert.matches('^MIME%-Version: 1%.0\nContent%-Type: multipart/mixed; boundary="//"\n\n%-%-//\n', text)
      assert.is_nil(text:find("\r", 1, true))
    end)

    it("a MIME user data that does not parse is the node class's error, before any call", function()
      local text, err = bootstrap.user_data(ctx, {}, { spec = { userData = "MIME-Version: 1.0\nInvalid-Content" } },
        "spot")
      assert.is_nil(text)
      assert.equals("InvalidNodeClass", err.code)
      assert.matches("spec%.userData", err.message)
      assert.equals(0, cs_calls())
    end)

    describe("refuses what would break the command line", function()
      local function refused(nodeclaim, nodeclass, code, pattern)
        local text, err = bootstrap.user_data(ctx, nodeclaim, nodeclass or { spec = {} }, "spot")
        assert.is_nil(text)
        assert.equals(code, err.code)
        assert.matches(pattern, err.message)
        assert.equals(0, cs_calls())
      end

      it("a label value with a space, a quote or a comma", function()
        for _, bad in ipairs({ "a b", "a'b", 'a"b', "a,b", "a;b", "$(x)" }) do
          refused({ metadata = { labels = { team = bad } } }, nil, "InvalidNodeClaim", "label team=")
        end
      end)

      it("a bad label key", function()
        refused({ metadata = { labels = { ["a b"] = "x" } } }, nil, "InvalidNodeClaim", 'label key "a b"')
      end)

      it("a taint key, value or effect that is not Kubernetes'", function()
        refused({ spec = { taints = { { key = "k", value = "x y", effect = "NoSchedule" } } } }, nil,
          "InvalidNodeClaim", "spec%.taints%[0%] %(k%): value")
        refused({ spec = { startupTaints = { { key = "k,j", effect = "NoSchedule" } } } }, nil,
          "InvalidNodeClaim", "spec%.startupTaints%[0%]: key")
        refused({ spec = { taints = { { key = "k", effect = "Sometimes" } } } }, nil, "InvalidNodeClaim", "effect")
      end)

      it("a maxPods that is not a positive integer", function()
        refused({}, { spec = { kubeletConfiguration = { maxPods = 1.5 } } }, "InvalidNodeClass", "maxPods")
        refused({}, { spec = { kubeletConfiguration = { maxPods = "64" } } }, "InvalidNodeClass", "maxPods")
      end)

      it("a capacity type that is not spot or on-demand, a cluster ID that is not one", function()
        local text, err = bootstrap.user_data(ctx, {}, { spec = {} }, "reserved")
        assert.is_nil(text)
        assert.equals("InvalidArgument", err.code)
        text, err = bootstrap.user_data(ctx_with { cluster_id = "c 1" }, {}, { spec = {} }, "spot")
        assert.is_nil(text)
        assert.equals("InvalidConfig", err.code)
      end)
    end)
  end)

  describe("Custom", function()
    it("passes spec.userData through unchanged, with no call", function()
      local user = "#!/bin/bash\n#===USERDATA_SEPARATOR===\nkubeadm join ...\n"
      assert.equals(user, bootstrap.user_data(ctx_with { cluster_type = "Custom" }, NODECLAIM,
        { spec = { userData = user } }, "spot"))
      assert.equals("", bootstrap.user_data(ctx_with { cluster_type = "Custom" }, NODECLAIM, { spec = {} }, "spot"))
      assert.equals(0, cs_calls())
    end)

    it("refuses an unknown cluster type", function()
      local text, err = bootstrap.user_data(ctx_with { cluster_type = "Serverless" }, {}, { spec = {} }, "spot")
      assert.is_nil(text)
      assert.equals("InvalidConfig", err.code)
      assert.matches("Serverless", err.message)
    end)

    it("reads LUAPROV_ALIBABA_CLUSTER_TYPE when ctx has no cluster type", function()
      local script = [[
        local bootstrap = require "providers.alibaba.bootstrap"
        io.write(bootstrap.cluster_type({}), " ", bootstrap.cluster_type({ cluster_type = "ACKManaged" }))
      ]]
      local out, err, ok = simulator.run_lua(script, simulator.env { LUAPROV_ALIBABA_CLUSTER_TYPE = "Custom" })
      assert.is_true(ok, err)
      assert.equals("Custom ACKManaged", out)
      out, err, ok = simulator.run_lua(script, simulator.env { LUAPROV_ALIBABA_CLUSTER_TYPE = false })
      assert.is_true(ok, err)
      assert.equals("ACKManaged ACKManaged", out)
    end)
  end)

  describe("the attach script cache", function()
    it("keeps the script 6 hours per cluster, then asks again", function()
      assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot"))
      assert(bootstrap.user_data(ctx, NODECLAIM, { spec = { userData = "echo x" } }, "on-demand"))
      assert.equals(1, cs_calls())
      now = now + attachscript.TTL - 1
      assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot"))
      assert.equals(1, cs_calls())
      now = now + 1
      assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot"))
      assert.equals(2, cs_calls())
    end)

    it("keeps the script with and without disk formatting apart", function()
      local plain = assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot"))
      local formatted = assert(bootstrap.user_data(ctx, {}, { spec = { formatDataDisk = true } }, "spot"))
      assert.not_equals(plain, formatted)
      assert.equals(2, cs_calls())
    end)
  end)

  describe("a failing DescribeClusterAttachScripts", function()
    local function failed(pattern_code, api_code, status)
      local text, err = bootstrap.user_data(ctx, {}, { spec = {} }, "spot")
      assert.is_nil(text)
      assert.equals(pattern_code, err.code)
      assert.equals(api_code, err.api_code)
      assert.equals(status, err.http_status)
      assert.equals("DescribeClusterAttachScripts", err.action)
      assert.matches("^[%x%-]+$", err.request_id)
      assert.matches("DescribeClusterAttachScripts", err.message)
      assert.matches("RequestId " .. err.request_id:gsub("%-", "%%-"), err.message)
      assert.matches("ACK cluster luaprov%-sim", err.message)
      assert.not_equals("InsufficientCapacity", err.code)
      return err
    end

    it("403: the API's refusal, classified Auth", function()
      sim:fault { action = "DescribeClusterAttachScripts", code = "Forbidden.RAM" }
      failed("Auth", "Forbidden.RAM", 403)
      assert.equals(1, cs_calls())
    end)

    it("throttled on every attempt: Throttled after the client's retries", function()
      sim:fault { action = "DescribeClusterAttachScripts", kind = "throttle" }
      local err = failed("Throttled", "Throttling.User", 400)
      assert.matches("after 4 attempts", err.message)
      assert.equals(4, cs_calls())
    end)

    it("an unknown cluster: 404 ErrorClusterNotFound", function()
      ctx.cluster_id = "c-unknown"
      local text, err = bootstrap.user_data(ctx, {}, { spec = {} }, "spot")
      ctx.cluster_id = CLUSTER
      assert.is_nil(text)
      assert.equals("ErrorClusterNotFound", err.code)
      assert.equals(404, err.http_status)
      assert.equals("DescribeClusterAttachScripts", err.action)
      assert.matches("c%-unknown is not found", err.message)
      assert.matches("RequestId " .. err.request_id:gsub("%-", "%%-"), err.message)
    end)

    it("spec.clusterID names the cluster whose attach script runs, over the engine's cluster", function()
      ctx.cluster_id = "c-engine-cluster-unknown"
      local text = bootstrap.user_data(ctx, { metadata = {} }, { spec = { clusterID = CLUSTER } }, "on-demand")
      local _, err = bootstrap.user_data(ctx, { metadata = {} }, { spec = { clusterID = "c-unknown" } }, "on-demand")
      ctx.cluster_id = CLUSTER
      assert.matches("ack.aliyun.com=" .. CLUSTER:gsub("%-", "%%-"), assert(text))
      assert.matches("c%-unknown is not found", err.message)
      -- an empty clusterID (the upstream example's "") means the engine's cluster
      assert(bootstrap.user_data(ctx, { metadata = {} }, { spec = { clusterID = "" } }, "on-demand"))
    end)

    it("a capacity code from the Container Service is not InsufficientCapacity", function()
      sim:fault { action = "DescribeClusterAttachScripts", code = "OperationDenied.NoStock" }
      failed("OperationDenied.NoStock", "OperationDenied.NoStock", 403)
    end)

    it("a 5xx is retried", function()
      sim:fault { action = "DescribeClusterAttachScripts", kind = "5xx", count = 1 }
      assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot"))
      assert.equals(2, cs_calls())
    end)

    it("an empty script is an error, and is not cached", function()
      sim:fault { action = "DescribeClusterAttachScripts", kind = "malformed", body = '""', count = 1 }
      local text, err = bootstrap.user_data(ctx, {}, { spec = {} }, "spot")
      assert.is_nil(text)
      assert.equals("InvalidResponse", err.code)
      assert.matches("empty", err.message)
      assert.matches("RequestId [%x%-]+", err.message)
      assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot"))
      assert.equals(2, cs_calls())
    end)

    it("a script answered as plain text with CRLF line ends is used as one line", function()
      sim:fault { action = "DescribeClusterAttachScripts", kind = "malformed", body = "curl x | bash -s --\r\n a\r\n" }
      local text = assert(bootstrap.user_data(ctx, {}, { spec = {} }, "spot"))
      assert.matches("^#!/bin/bash\n\ncurl x | bash %-s %-%- a %-%-labels ", text)
    end)
  end)

  describe("the simulator's Container Service", function()
    local function signed(secret, body, tamper)
      local host = sim.url:match("^https?://([^/]+)")
      local path = "/clusters/" .. CLUSTER .. "/attachscript"
      local headers = { host = host, ["x-acs-action"] = "DescribeClusterAttachScripts",
        ["x-acs-version"] = "2015-12-15", ["x-acs-date"] = luaprov.time.iso8601(),
        ["x-acs-signature-nonce"] = luaprov.crypto.random_hex(16), ["content-type"] = "application/json" }
      headers.authorization = assert(signer.acs3_authorization({ method = "POST", path = path, headers = headers,
        body = body }, auth.DEFAULT_ACCESS_KEY_ID, secret))
      local req = { method = "POST", url = sim.url .. path, headers = headers, body = body }
      if tamper then tamper(req) end
      return assert(luaprov.http.request(req))
    end

    it("answers a signed call with the script as a JSON string and the request ID header", function()
      local res = signed(auth.DEFAULT_ACCESS_KEY_SECRET, '{"keep_instance_name":true,"format_disk":true}')
      assert.equals(200, res.status)
      assert.equals(attach.script(CLUSTER, true), luaprov.json.decode(res.body))
      assert.matches("^[%x%-]+$", res.headers["x-acs-request-id"])
    end)

    it("refuses a wrong secret, a body changed after signing and an unsigned call", function()
      local res = signed("not-the-secret", "{}")
      assert.equals(400, res.status)
      local body = luaprov.json.decode(res.body)
      assert.equals("SignatureDoesNotMatch", body.code)
      assert.equals(res.headers["x-acs-request-id"], body.requestId)
      res = signed(auth.DEFAULT_ACCESS_KEY_SECRET, '{"format_disk":false}',
        function(req) req.body = '{"format_disk":true}' end)
      assert.equals(400, res.status)
      assert.equals("SignatureDoesNotMatch", luaprov.json.decode(res.body).code)
      res = assert(luaprov.http.request { method = "POST", url = sim.url .. "/clusters/" .. CLUSTER .. "/attachscript",
        headers = { ["x-acs-version"] = "2015-12-15" }, body = "{}" })
      assert.equals("MissingAuthorization", luaprov.json.decode(res.body).code)
      assert.equals(3, sim:state().errors.DescribeClusterAttachScripts)
    end)

    it("the client's wrong credentials come back as Auth with the API's code", function()
      local bad = client.new { region = "cn-hangzhou", endpoint = sim.url,
        credentials = { access_key_id = auth.DEFAULT_ACCESS_KEY_ID, access_key_secret = "wrong-secret-value" } }
      local value, err = bad:roa("cs", "DescribeClusterAttachScripts",
        { method = "POST", path = "/clusters/" .. CLUSTER .. "/attachscript", body = { format_disk = false } })
      assert.is_nil(value)
      assert.equals("Auth", err.code)
      assert.equals("SignatureDoesNotMatch", err.api_code)
      assert.is_nil(err.message:find("wrong-secret-value", 1, true))
    end)
  end)
end)
