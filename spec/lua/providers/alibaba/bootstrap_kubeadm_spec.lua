-- The user data of cluster type Kubeadm (providers/alibaba/bootstrap.lua, kubeadm.lua): the exact
-- JoinConfiguration and KubeletConfiguration patch the script writes, the NodeClaim's labels and
-- taints, spec.clusterEndpoint's forms, the merge with spec.userData, the bootstrap token
-- (LUAPROV_KUBEADM_TOKEN, or ctx.kubeadm_token as here), the kubeadm-ca-cert-hash setting and every
-- error, none of which names the token. No API call: the contexts have no endpoint.
local bootstrap = require "providers.alibaba.bootstrap"
local kubeadm = require "providers.alibaba.kubeadm"
local mime = require "providers.alibaba.mime"

local simulator = dofile((os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/alibaba/simulator.lua")

local TOKEN = "abc123.0123456789abcdef"
local HASH = "sha256:" .. ("0f"):rep(32)

local function ctx_with(extra)
  local ctx = { region = "cn-hangzhou", cluster_id = "unused", cluster_type = "Kubeadm", kubeadm_token = TOKEN,
    kubeadm_ca_cert_hash = HASH }
  for k, v in pairs(extra or {}) do ctx[k] = v end
  return ctx
end

local NODECLAIM = {
  metadata = { labels = { ["karpenter.sh/nodepool"] = "default", ["node.kubernetes.io/instance-type"] = "ecs.g7.large",
    ["node-role.kubernetes.io/worker"] = "", team = "web" } },
  spec = {
    taints = { { key = "dedicated", value = "gpu", effect = "NoSchedule" } },
    startupTaints = { { key = "example.com/init", effect = "NoExecute" } },
  },
}

-- The commands for NODECLAIM (spot) with the class's kubelet settings patch (nil: none), on endpoint.
local function commands(endpoint, patch)
  local out = {
    "# kubeadm join (luaprov, cluster type Kubeadm)",
    "mkdir -p /etc/kubernetes/luaprov/patches",
    "chmod 700 /etc/kubernetes/luaprov",
    'LUAPROV_UMASK="$(umask)"',
    "umask 077",
    "cat > /etc/kubernetes/luaprov/kubeadm-join.json <<'LUAPROV_JOIN_CONFIGURATION'",
    "{",
    '  "apiVersion": "kubeadm.k8s.io/v1beta4",',
    '  "kind": "JoinConfiguration",',
    '  "discovery": {',
    '    "bootstrapToken": {',
    '      "apiServerEndpoint": "' .. endpoint .. '",',
    '      "token": "' .. TOKEN .. '",',
    '      "caCertHashes": [',
    '        "' .. HASH .. '"',
    "      ]",
    "    }",
    "  },",
    '  "nodeRegistration": {',
    '    "kubeletExtraArgs": [',
    "      {",
    '        "name": "node-labels",',
    '        "value": "karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default,'
      .. 'node.kubernetes.io/instance-type=ecs.g7.large,team=web"',
    "      }",
    "    ],",
    '    "taints": [',
    "      {",
    '        "key": "dedicated",',
    '        "value": "gpu",',
    '        "effect": "NoSchedule"',
    "      },",
    "      {",
    '        "key": "example.com/init",',
    '        "effect": "NoExecute"',
    "      },",
    "      {",
    '        "key": "karpenter.sh/unregistered",',
    '        "effect": "NoExecute"',
    "      }",
    "    ]",
    "  },",
    '  "patches": {',
    '    "directory": "/etc/kubernetes/luaprov/patches"',
    "  }",
    "}",
    "LUAPROV_JOIN_CONFIGURATION",
  }
  if patch then
    out[#out + 1] = "cat > /etc/kubernetes/luaprov/patches/kubeletconfiguration0+merge.json "
      .. "<<'LUAPROV_KUBELET_CONFIGURATION'"
    out[#out + 1] = patch
    out[#out + 1] = "LUAPROV_KUBELET_CONFIGURATION"
  end
  for _, line in ipairs({
    "LUAPROV_IMDS_TOKEN=\"$(curl -fsS --retry 5 -X PUT -H 'X-aliyun-ecs-metadata-token-ttl-seconds: 300' "
      .. 'http://100.100.100.200/latest/api/token)"',
    'luaprov_metadata() { curl -fsS --retry 5 -H "X-aliyun-ecs-metadata-token: $LUAPROV_IMDS_TOKEN" '
      .. '"http://100.100.100.200/latest/meta-data/$1"; }',
    'LUAPROV_PROVIDER_ID="$(luaprov_metadata region-id).$(luaprov_metadata instance-id)"',
    "printf '{\"providerID\":\"%s\"}\\n' \"$LUAPROV_PROVIDER_ID\" > "
      .. "/etc/kubernetes/luaprov/patches/kubeletconfiguration1+merge.json",
    'umask "$LUAPROV_UMASK"',
    "kubeadm join --config /etc/kubernetes/luaprov/kubeadm-join.json",
  }) do
    out[#out + 1] = line
  end
  return table.concat(out, "\n") .. "\n"
end

local function bash_parses(text)
  local file = os.tmpname()
  local f = assert(io.open(file, "w"))
  f:write(text)
  f:close()
  local ok = os.execute("bash -n " .. file)
  os.remove(file)
  return ok
end

local function refused(ctx, nodeclaim, spec, code, message)
  local text, err = bootstrap.user_data(ctx, nodeclaim, { spec = spec }, "spot")
  assert.is_nil(text)
  assert.equals(code, err.code)
  if message:sub(1, 1) == "^" then assert.matches(message, err.message) else assert.equals(message, err.message) end
  assert.is_nil(err.message:find(TOKEN, 1, true), "no token in the message")
  return err
end

describe("alibaba bootstrap: cluster type Kubeadm", function()
  it("writes the JoinConfiguration, the kubelet settings patch and the providerID, then joins", function()
    local spec = { clusterEndpoint = "https://10.0.0.10:6443",
      kubelet = { maxPods = 42, systemReserved = { cpu = "100m", memory = "200Mi" }, cpuCFSQuota = false } }
    local text = assert(bootstrap.user_data(ctx_with(), NODECLAIM, { spec = spec }, "spot"))
    assert.equals("#!/bin/bash\n\n" .. commands("10.0.0.10:6443",
      '{"cpuCFSQuota":false,"maxPods":42,"systemReserved":{"cpu":"100m","memory":"200Mi"}}'), text)
    assert.is_true(bash_parses(text))
  end)

  it("the earlier kubeletConfiguration field too; no patch of the class without kubelet settings", function()
    local text = assert(bootstrap.user_data(ctx_with(), NODECLAIM,
      { spec = { clusterEndpoint = "10.0.0.10", kubeletConfiguration = { maxPods = 20 } } }, "spot"))
    assert.equals("#!/bin/bash\n\n" .. commands("10.0.0.10:6443", '{"maxPods":20}'), text)
    text = assert(bootstrap.user_data(ctx_with(), NODECLAIM, { spec = { clusterEndpoint = "10.0.0.10" } }, "spot"))
    assert.equals("#!/bin/bash\n\n" .. commands("10.0.0.10:6443"), text)
  end)

  it("adds the unregistered taint only when the NodeClaim does not have it", function()
    local nodeclaim = { spec = { startupTaints = { { key = "karpenter.sh/unregistered", effect = "NoExecute" } } } }
    local text = assert(bootstrap.user_data(ctx_with(), nodeclaim, { spec = { clusterEndpoint = "h" } }, "spot"))
    assert.equals(1, select(2, text:gsub("karpenter%.sh/unregistered", "")))
  end)

  it("takes https://host:port, host:port, host and IPv6 endpoints, 6443 by default", function()
    local forms = { ["https://api.example.com:8443"] = "api.example.com:8443", ["api.example.com"] =
      "api.example.com:6443", ["https://api.example.com/"] = "api.example.com:6443", ["10.1.2.3:443"] = "10.1.2.3:443",
      ["https://[fd00::1]:6443"] = "[fd00::1]:6443", ["[fd00::1]"] = "[fd00::1]:6443" }
    for given, want in pairs(forms) do
      assert.equals(want, kubeadm.endpoint { clusterEndpoint = given }, given)
      local text = assert(bootstrap.user_data(ctx_with(), {}, { spec = { clusterEndpoint = given } }, "on-demand"))
      assert.matches('"apiServerEndpoint": "' .. want:gsub("%p", "%%%0") .. '"', text, 1, given)
    end
  end)

  it("merges spec.userData around the separator line", function()
    local spec = { clusterEndpoint = "10.0.0.10:6443", userData = " echo pre\n#===USERDATA_SEPARATOR===\necho post\n" }
    local text = assert(bootstrap.user_data(ctx_with(), NODECLAIM, { spec = spec }, "spot"))
    assert.equals('#!/bin/bash\n\necho "Executing preUserData..."\necho pre\n' .. commands("10.0.0.10:6443")
      .. '\necho "Executing postUserData..."\necho post\n', text)
    assert.is_true(bash_parses(text))
  end)

  it("merges a MIME spec.userData: the join script as a part after the stage=pre scripts", function()
    local user = table.concat({ "MIME-Version: 1.0", 'Content-Type: multipart/mixed; boundary="b"', "", "--b",
      "Content-Type: text/cloud-config", "", "fqdn: n1", "--b", "Content-Type: text/x-shellscript; stage=pre", "",
      "#!/bin/bash", "echo pre", "--b--", "" }, "\n")
    local text = assert(bootstrap.user_data(ctx_with(), NODECLAIM,
      { spec = { clusterEndpoint = "10.0.0.10:6443", userData = user } }, "spot"))
    local parts = assert(mime.parse(text))
    assert.equals(3, #parts)
    assert.equals("#!/bin/bash\necho pre", parts[1].content)
    assert.same({ content_type = 'text/x-shellscript; charset="us-ascii"',
      content = "#!/bin/bash\n" .. commands("10.0.0.10:6443") }, parts[2])
    assert.equals("fqdn: n1", parts[3].content)
  end)

  it("Custom and ACKManaged are untouched by the kubeadm settings; cluster_type accepts Kubeadm", function()
    assert.equals("Kubeadm", bootstrap.cluster_type { cluster_type = "Kubeadm" })
    assert.equals("echo x", bootstrap.user_data(ctx_with { cluster_type = "Custom" }, NODECLAIM,
      { spec = { userData = "echo x" } }, "spot"))
    local _, err = bootstrap.cluster_type { cluster_type = "kubeadm" }
    assert.equals('cluster type "kubeadm" is not ACKManaged, Kubeadm or Custom (ctx.cluster_type, '
      .. "LUAPROV_ALIBABA_CLUSTER_TYPE)", err.message)
  end)

  describe("refuses", function()
    it("a class without spec.clusterEndpoint, or one that is not an API server address", function()
      refused(ctx_with(), NODECLAIM, {}, "InvalidNodeClass", "ECSNodeClass spec.clusterEndpoint is not set: cluster "
        .. "type Kubeadm needs the API server nodes join (https://host:port or host:port)")
      for _, bad in ipairs({ "http://10.0.0.1:6443", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:06443",
        "https://h/api", "a b", "h:", "-h", "h..x", "[zz]:6443", "$(reboot)" }) do
        refused(ctx_with(), NODECLAIM, { clusterEndpoint = bad }, "InvalidNodeClass", ("ECSNodeClass "
          .. "spec.clusterEndpoint %q is not https://host[:port] or host[:port] (the API server nodes join)")
          :format(bad))
      end
      refused(ctx_with(), NODECLAIM, { clusterEndpoint = 6443 }, "InvalidNodeClass",
        "^ECSNodeClass spec%.clusterEndpoint")
    end)

    it("a missing or malformed token, naming its variable, never the token", function()
      local spec = { clusterEndpoint = "h" }
      refused(ctx_with { kubeadm_token = false }, NODECLAIM, spec, "InvalidConfig", "the kubeadm bootstrap token is "
        .. "not set: set LUAPROV_KUBEADM_TOKEN (cluster type Kubeadm)")
      for _, bad in ipairs({ "ABC123.0123456789abcdef", "abc12.0123456789abcdef", "abc123.0123456789abcde",
        "abc1230123456789abcdef", "abc123.0123456789abcdef\n", "abc123.0123456789abcdeff",
        "abc123-0123456789abcdef" }) do
        local err = refused(ctx_with { kubeadm_token = bad }, NODECLAIM, spec, "InvalidConfig", "LUAPROV_KUBEADM_TOKEN "
          .. "is not a kubeadm bootstrap token: want 6 and 16 characters a-z, 0-9 joined by a dot, as `kubeadm token "
          .. "create` prints")
        assert.is_nil(err.message:find(bad, 1, true))
        assert.is_nil(err.message:find("0123456789", 1, true))
      end
    end)

    it("a missing or malformed CA certificate hash, naming the setting", function()
      local spec = { clusterEndpoint = "h" }
      refused(ctx_with { kubeadm_ca_cert_hash = false }, NODECLAIM, spec, "InvalidConfig", "the kubeadm CA "
        .. "certificate hash is not set: pass --kubeadm-ca-cert-hash or set LUAPROV_KUBEADM_CA_CERT_HASH (cluster "
        .. "type Kubeadm)")
      for _, bad in ipairs({ ("0f"):rep(32), "sha256:" .. ("0f"):rep(31), "sha1:" .. ("0f"):rep(32),
        "sha256:" .. ("0g"):rep(32) }) do
        refused(ctx_with { kubeadm_ca_cert_hash = bad }, NODECLAIM, spec, "InvalidConfig", ("the kubeadm-ca-cert-hash "
          .. "setting (LUAPROV_KUBEADM_CA_CERT_HASH) %q is not sha256:<64 hex digits>, the hash of the cluster CA's "
          .. "public key (`kubeadm token create --print-join-command` prints it)"):format(bad))
      end
    end)

    it("labels, taints and kubelet settings as for ACKManaged, naming kubeadm", function()
      local spec = { clusterEndpoint = "h" }
      refused(ctx_with(), { metadata = { labels = { team = "a b" } } }, spec, "InvalidNodeClaim",
        "NodeClaim label team=\"a b\" cannot be passed to kubeadm (at most 63 letters, digits, '.', '_', '-')")
      refused(ctx_with(), { spec = { taints = { { key = "k", value = "x\"y", effect = "NoSchedule" } } } }, spec,
        "InvalidNodeClaim", "^NodeClaim spec%.taints%[0%] %(k%): value .* cannot be passed to kubeadm")
      refused(ctx_with(), { spec = { startupTaints = { { key = "k", effect = "Never" } } } }, spec, "InvalidNodeClaim",
        "^NodeClaim spec%.startupTaints%[0%] %(k%): effect \"Never\"")
      refused(ctx_with(), {}, { clusterEndpoint = "h", kubelet = { maxPods = 0 } }, "InvalidNodeClass",
        "ECSNodeClass spec.kubelet.maxPods is 0, not a positive integer")
      refused(ctx_with(), {}, { clusterEndpoint = "h", userData = "MIME-Version: 1.0\nbroken" }, "InvalidNodeClass",
        "^ECSNodeClass spec%.userData: ")
    end)
  end)

  describe("check (UserDataReady)", function()
    it("reports a class without a usable clusterEndpoint and settings it cannot join with", function()
      assert.is_nil(bootstrap.check(ctx_with(), { spec = { clusterEndpoint = "h" } }))
      assert.matches("^ECSNodeClass spec%.clusterEndpoint is not set", bootstrap.check(ctx_with(), { spec = {} }))
      assert.matches("^ECSNodeClass spec%.clusterEndpoint \"ftp://h\" is not",
        bootstrap.check(ctx_with(), { spec = { clusterEndpoint = "ftp://h" } }))
      local why = bootstrap.check(ctx_with { kubeadm_token = "x" .. TOKEN }, { spec = { clusterEndpoint = "h" } })
      assert.matches("^LUAPROV_KUBEADM_TOKEN is not a kubeadm bootstrap token", why)
      assert.is_nil(why:find(TOKEN, 1, true))
      assert.matches("^ECSNodeClass spec%.userData: ", bootstrap.check(ctx_with(),
        { spec = { clusterEndpoint = "h", userData = "Content-Type: text/plain\n\nx" } }))
      assert.is_nil(bootstrap.check(ctx_with { cluster_type = "Custom" }, { spec = {} }))
    end)
  end)

  it("reads LUAPROV_KUBEADM_TOKEN and LUAPROV_KUBEADM_CA_CERT_HASH when ctx has no settings", function()
    local script = [[
      local kubeadm = require "providers.alibaba.kubeadm"
      local creds, err = kubeadm.credentials({})
      io.write(creds and (creds.token .. " " .. creds.ca_cert_hash) or err.message)
    ]]
    local out, err, ok = simulator.run_lua(script, simulator.env { LUAPROV_KUBEADM_TOKEN = TOKEN,
      LUAPROV_KUBEADM_CA_CERT_HASH = HASH:upper():gsub("^SHA256", "sha256") })
    assert.is_true(ok, err)
    assert.equals(TOKEN .. " " .. HASH, out)
    out, err, ok = simulator.run_lua(script, simulator.env { LUAPROV_KUBEADM_TOKEN = false,
      LUAPROV_KUBEADM_CA_CERT_HASH = false })
    assert.is_true(ok, err)
    assert.matches("^the kubeadm bootstrap token is not set", out)
  end)
end)
