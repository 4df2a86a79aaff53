-- attach.parse: the ACK attach command the simulated kubelet needs in an instance's user data before
-- it registers a Node (docs/sim.md#kubernetes-the-simulated-cluster).
local luaprov = require "luaprov"
local attach = require "sim.alibaba.attach"
local support = require "sim.attach_support"

local b64 = luaprov.crypto.base64_encode

local function parse_text(text) return attach.parse(b64(text)) end

describe("attach.parse", function()
  it("reads a plain script: cluster, exactly its labels and taints, in order", function()
    local parsed = assert(attach.parse(support.base64 { labels = { ["karpenter.sh/nodepool"] = "general" },
      taints = { "karpenter.sh/unregistered:NoExecute", "dedicated=gpu:NoSchedule" } }))
    assert.same({ cluster_id = "luaprov-sim", format_disk = false, node_config = {},
      runtime = { name = "containerd", version = "1.6.38" },
      labels = { ["k8s.aliyun.com"] = "true", ["ack.aliyun.com"] = "luaprov-sim",
        ["karpenter.sh/nodepool"] = "general" },
      taints = { { key = "karpenter.sh/unregistered", effect = "NoExecute" },
        { key = "dedicated", value = "gpu", effect = "NoSchedule" } } }, parsed)
  end)

  it("reads the provider's layout: pre and post user data around the attach line", function()
    local text = "#!/bin/bash\n\necho \"Executing preUserData...\"\necho pre\n\n" .. support.line()
      .. "\n\necho \"Executing postUserData...\"\necho post\n"
    assert.equal("luaprov-sim", assert(parse_text(text)).cluster_id)
  end)

  it("takes text that is not base64 as it is", function()
    assert.equal("luaprov-sim", assert(attach.parse(support.text())).cluster_id)
  end)

  it("reads the text/x-shellscript part of a MIME multipart archive", function()
    local parsed = assert(attach.parse(support.base64 { mime = true, taints = { "a=b:PreferNoSchedule" } }))
    assert.same({ { key = "a", value = "b", effect = "PreferNoSchedule" } }, parsed.taints)
  end)

  it("reads maxPods from --node-config, and --format-disk", function()
    local line = support.line { max_pods = 64 }:gsub("%-%-auto%-drain false", "--auto-drain false --format-disk")
    local parsed = assert(parse_text("#!/bin/bash\n" .. line))
    assert.same({ kubelet_config = { maxPods = 64 } }, parsed.node_config)
    assert.is_true(parsed.format_disk)
  end)

  local function refused(text)
    local parsed, why = parse_text(text)
    assert.is_nil(parsed)
    return why
  end

  it("refuses a wrong token and never says the token", function()
    local good = attach.token("luaprov-sim")
    local why = refused("#!/bin/bash\n" .. support.line():gsub(good, ("0"):rep(32)))
    assert.equal("attach command: --openapi-token is not cluster luaprov-sim's", why)
    assert.is_nil(why:find(good, 1, true))
    assert.equal("attach command: no --openapi-token",
      refused("#!/bin/bash\n" .. support.line():gsub("%-%-openapi%-token %x+ ", "")))
  end)

  it("refuses a cluster the account does not have", function()
    assert.equal('attach command: cluster "c-nope" of --labels ack.aliyun.com is not a cluster of the account',
      refused("#!/bin/bash\n" .. support.line():gsub("ack%.aliyun%.com=luaprov%-sim", "ack.aliyun.com=c-nope")))
    assert.equal("attach command: --labels has no ack.aliyun.com=<cluster id>",
      refused("#!/bin/bash\n" .. support.line():gsub(",ack%.aliyun%.com=luaprov%-sim", "")))
  end)

  it("refuses user data without an attach line", function()
    assert.equal("the user data has no ACK attach command (curl .../attach_node.sh | bash -s -- ...)",
      refused("#!/bin/bash\necho hello\n"))
    assert.equal("the user data has no ACK attach command (curl .../attach_node.sh | bash -s -- ...)",
      refused("#!/bin/bash\n# " .. support.line() .. "\n"))
    assert.equal("the user data is neither a shell script (#!) nor a MIME multipart archive",
      refused("#cloud-config\nruncmd: []\n"))
    assert.equal("the MIME archive has no text/x-shellscript part", refused('Content-Type: multipart/mixed; '
      .. 'boundary="//"\n\n--//\nContent-Type: text/cloud-config\n\n#cloud-config\n--//--\n'))
    local nothing = { attach.parse(nil) }
    assert.same({ nil, "the instance has no user data" }, nothing)
  end)

  it("refuses a taint effect kubelet does not know, and malformed taints and labels", function()
    local function with(extra) return refused("#!/bin/bash\n" .. support.line() .. extra) end
    assert.equal('attach command: --taints effect "NoStart" of a is not NoSchedule, PreferNoSchedule or NoExecute',
      with(" --taints a=b:NoStart"))
    assert.equal('attach command: --taints item "a=b" is not key[=value]:Effect', with(" --taints a=b"))
    assert.equal('attach command: --taints key "bad key" is not a valid taint key',
      with(" --taints 'bad key:NoSchedule'"))
    assert.equal('attach command: --labels item "nolabel" is not key=value',
      refused("#!/bin/bash\n" .. support.line():gsub("%-%-labels ", "--labels nolabel,")))
    assert.equal("attach command: --taints given twice", with(" --taints a:NoSchedule --taints b:NoSchedule"))
    assert.equal("attach command: unknown option --bogus", with(" --bogus 1"))
    assert.equal("the user data runs the ACK attach command twice", refused("#!/bin/bash\n" .. support.line() .. "\n"
      .. support.line() .. "\n"))
  end)

  it("refuses kubernetes.io and k8s.io labels a kubelet does not start with, takes its own", function()
    local function labelled(key)
      return attach.parse(support.base64 { labels = { [key] = "x" } })
    end
    local refused_keys = { "node-role.kubernetes.io/worker", "node-restriction.kubernetes.io/team", "example.k8s.io/a" }
    for _, key in ipairs(refused_keys) do
      local parsed, why = labelled(key)
      assert.is_nil(parsed, key)
      assert.equal("attach command: --labels " .. key .. ": the kubelet refuses unknown kubernetes.io and k8s.io "
        .. "labels and does not start", why)
    end
    local taken = { "kubernetes.io/arch", "kubelet.kubernetes.io/role", "x.node.kubernetes.io/y", "example.com/a" }
    for _, key in ipairs(taken) do
      assert.is_table(labelled(key), key)
    end
  end)

  it("refuses a --node-config that is not base64 JSON with a positive integer maxPods", function()
    local function with(config) return refused("#!/bin/bash\n" .. support.line() .. " --node-config " .. config) end
    assert.matches("^attach command: %-%-node%-config is not base64: ", with("not*base64"))
    assert.matches("^attach command: %-%-node%-config is not JSON: ", with(b64("{nope")))
    assert.equal("attach command: --node-config kubelet_config.maxPods must be a positive integer, not 0",
      with(b64('{"kubelet_config":{"maxPods":0}}')))
    assert.equal('attach command: --node-config kubelet_config.maxPods must be a positive integer, not "64"',
      with(b64('{"kubelet_config":{"maxPods":"64"}}')))
  end)

  it("refuses docker on the cluster's Kubernetes 1.31, and runtime flags that do not go together", function()
    local function with(from, to) return refused("#!/bin/bash\n" .. support.line():gsub(from, to)) end
    local RT = "%-%-runtime containerd %-%-runtime%-version 1%.6%.38"
    assert.equal("attach command: --runtime docker on Kubernetes 1.31.1-aliyun.1, which has no dockershim since "
      .. "1.24: the kubelet never starts", with(RT, "--runtime docker --runtime-version 19.03.15"))
    assert.equal("attach command: --runtime and --runtime-version go together", with(RT, "--runtime containerd"))
    assert.equal("attach command: --runtime and --runtime-version go together", with(RT, "--runtime-version 1.6.38"))
    assert.equal('attach command: --runtime "crio" is not containerd, docker or Sandboxed-Container.runv',
      with(RT, "--runtime crio --runtime-version 1.30"))
    assert.same({ name = "Sandboxed-Container.runv", version = "2.1.0" }, assert(parse_text("#!/bin/bash\n"
      .. support.line():gsub(RT, "--runtime Sandboxed-Container.runv --runtime-version 2.1.0"))).runtime)
    assert.is_nil(assert(parse_text("#!/bin/bash\n" .. support.line():gsub(" " .. RT, ""))).runtime)
  end)

  it("refuses another cluster's attach script URL", function()
    assert.matches("^attach command: the attach script is not cluster luaprov%-sim's %(curl ",
      refused("#!/bin/bash\n" .. support.line():gsub("/attach/[^/]+/", "/attach/1.20.0/")))
  end)
end)
