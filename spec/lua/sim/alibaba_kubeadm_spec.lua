-- kubeadm.parse: the kubeadm join the simulated kubelet needs in an instance's user data before it
-- registers a Node of the simulated kubeadm cluster (docs/sim.md#what-a-node-needs-to-join), read from
-- the user data the provider writes for cluster type Kubeadm (providers/alibaba/bootstrap.lua).
local luaprov = require "luaprov"
local bootstrap = require "providers.alibaba.bootstrap"
local mapping = require "providers.alibaba"
local kubeadm = require "sim.alibaba.kubeadm"
local support = require "sim.attach_support"

local b64 = luaprov.crypto.base64_encode

local CTX = { cluster_type = "Kubeadm", kubeadm_token = kubeadm.TOKEN, kubeadm_ca_cert_hash = kubeadm.CA_CERT_HASH }

-- The provider's user data for a NodeClaim with labels and taints and a class with maxPods.
local function user_data(opts)
  opts = opts or {}
  local ctx = {}
  for k, v in pairs(CTX) do ctx[k] = v end
  for k, v in pairs(opts.ctx or {}) do ctx[k] = v end
  local nodeclaim = { metadata = { labels = { ["karpenter.sh/nodepool"] = "general", team = "web",
    ["node-role.kubernetes.io/worker"] = "" } },
    spec = { taints = { { key = "dedicated", value = "web", effect = "NoSchedule" } } } }
  local spec = { clusterEndpoint = opts.endpoint or "https://" .. kubeadm.API_SERVER,
    kubelet = opts.kubelet or { maxPods = 42 }, userData = opts.user }
  return assert(bootstrap.user_data(ctx, nodeclaim, { spec = spec }, "spot"))
end

local function refused(text)
  local parsed, why = kubeadm.parse(b64(text))
  assert.is_nil(parsed)
  assert.is_string(why)
  assert.is_nil(why:find(kubeadm.TOKEN, 1, true), "the reason never holds the token")
  return why
end

describe("kubeadm.parse", function()
  it("reads the provider's user data: the labels the kubelet takes, the taints in order, maxPods", function()
    local text = user_data()
    assert.is_true(kubeadm.joins(b64(text)))
    assert.same({
      labels = { ["karpenter.sh/capacity-type"] = "spot", ["karpenter.sh/nodepool"] = "general", team = "web" },
      taints = { { key = "dedicated", value = "web", effect = "NoSchedule" },
        { key = "karpenter.sh/unregistered", effect = "NoExecute" } },
      node_config = { kubelet_config = { maxPods = 42 } },
    }, assert(kubeadm.parse(b64(text))))
  end)

  it("reads it inside a MIME archive and around the separator, as text or base64", function()
    local mime = table.concat({ "MIME-Version: 1.0", 'Content-Type: multipart/mixed; boundary="b"', "", "--b",
      "Content-Type: text/cloud-config", "", "#cloud-config", "--b", "Content-Type: text/x-shellscript", "",
      "#!/bin/bash", "echo user", "--b--", "" }, "\n")
    for _, user in ipairs({ mime, "echo pre\n#===USERDATA_SEPARATOR===\necho post\n" }) do
      local text = user_data { user = user }
      assert.equal(42, assert(kubeadm.parse(b64(text))).node_config.kubelet_config.maxPods)
      assert.equal(42, assert(kubeadm.parse(text)).node_config.kubelet_config.maxPods)
    end
  end)

  it("without kubelet settings: the cluster's kubelet configuration (no patch of the class)", function()
    local parsed = assert(kubeadm.parse(b64(user_data { kubelet = {} })))
    assert.same({ kubelet_config = {} }, parsed.node_config)
  end)

  it("an ACK attach command is not a kubeadm join", function()
    assert.is_false(kubeadm.joins(support.base64()))
    assert.equal("the user data runs no kubeadm join", select(2, kubeadm.parse(support.base64())))
  end)

  it("refuses a wrong token, never saying it", function()
    local why = refused(user_data { ctx = { kubeadm_token = "abcdef.0123456789abcdef" } })
    assert.equal("kubeadm join: discovery.bootstrapToken.token is not a bootstrap token of the cluster", why)
  end)

  it("refuses a CA hash that does not pin the cluster's CA", function()
    local why = refused(user_data { ctx = { kubeadm_ca_cert_hash = "sha256:" .. ("ab"):rep(32) } })
    assert.equal("kubeadm join: discovery.bootstrapToken.caCertHashes does not pin the cluster's CA ("
      .. kubeadm.CA_CERT_HASH .. "): kubeadm refuses the API server", why)
  end)

  it("refuses another API server", function()
    local why = refused(user_data { endpoint = "10.0.0.1" })
    assert.equal('kubeadm join: discovery.bootstrapToken.apiServerEndpoint "10.0.0.1:6443" is not the simulated '
      .. "cluster's API server (" .. kubeadm.API_SERVER .. ")", why)
  end)

  it("refuses what a kubelet or kubeadm would not take", function()
    local good = user_data()
    local cases = {
      { good:gsub('"value": "karpenter', '"value": "node-role.kubernetes.io/x=,karpenter'),
        "kubeadm join: kubeletExtraArgs node-labels node-role.kubernetes.io/x: the kubelet refuses unknown "
        .. "kubernetes.io and k8s.io labels and does not start" },
      { good:gsub('"effect": "NoSchedule"', '"effect": "Never"'),
        'kubeadm join: nodeRegistration.taints[0] effect "Never" of dedicated is not NoSchedule, PreferNoSchedule '
        .. "or NoExecute" },
      { good:gsub("v1beta4", "v1beta2"), 'kubeadm join: apiVersion "kubeadm.k8s.io/v1beta2" is not '
        .. "kubeadm.k8s.io/v1beta4 or v1beta3" },
      { good:gsub('"maxPods":42', '"maxPods":0'),
        "kubeadm join: the kubelet configuration's maxPods must be a positive integer, not 0" },
      { good:gsub("kubeadm join %-%-config %S+", "kubeadm join --config /tmp/other.json"),
        "kubeadm join: no heredoc before kubeadm join writes /tmp/other.json" },
      { good:gsub("kubeadm join %-%-config %S+", "kubeadm join 10.0.0.1:6443 --token x"),
        'kubeadm join: arguments "10.0.0.1:6443 --token x": the simulated kubelet reads `kubeadm join --config '
        .. "FILE` only" },
      { good .. "kubeadm join --config /etc/kubernetes/luaprov/kubeadm-join.json\n",
        "the user data runs kubeadm join twice" },
    }
    for i, case in ipairs(cases) do
      assert.equal(case[2], refused(case[1]), "case " .. i)
    end
  end)

  it("takes a v1beta3 JoinConfiguration (kubeletExtraArgs a map) too", function()
    local text = user_data():gsub("v1beta4", "v1beta3")
      :gsub('%[%s*{%s*"name": "node%-labels",%s*"value": ("[^"]*")%s*}%s*%]', '{"node-labels": %1}')
    assert.equal("general", assert(kubeadm.parse(b64(text))).labels["karpenter.sh/nodepool"])
  end)

  it("is the cluster the provider joins under --sim: its token variable and its hash setting", function()
    local sim = {}
    for _, s in ipairs(mapping.settings) do sim[s.name] = s.sim end
    assert.equal(kubeadm.TOKEN, mapping.sim.env.LUAPROV_KUBEADM_TOKEN)
    assert.equal(kubeadm.CA_CERT_HASH, sim["kubeadm-ca-cert-hash"])
    assert.is_nil(sim["kubeadm-token"], "the token is no setting: the engine logs settings")
  end)
end)
