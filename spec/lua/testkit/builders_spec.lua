-- testkit builders and kit.load: consistent defaults, deep-merged overrides, kubectl files.
local kit = require "luaprov.testkit"
local json = require("luaprov").json

local fixtures = (os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/eval/"

describe("testkit builders", function()
  it("build objects that agree with each other", function()
    local claim, class, inst = kit.nodeclaim(), kit.nodeclass(), kit.instance()
    assert.equals(claim.metadata.annotations[kit.HASH_ANNOTATION], class.metadata.annotations[kit.HASH_ANNOTATION])
    assert.equals(class.status.images[1].id, inst.image_id)
    assert.equals(class.status.vSwitches[1].id, inst.vswitch_id)
    assert.equals("ECSNodeClass", class.kind)
    assert.equals(claim.spec.nodeClassRef.name, class.metadata.name)
    assert.equals(kit.nodepool().metadata.name, claim.metadata.labels["karpenter.sh/nodepool"])
    assert.equals(claim.status.providerID, kit.node().spec.providerID)
  end)

  it("deep-merge overrides: maps merge, lists replace, kit.NONE removes", function()
    local claim = kit.nodeclaim { metadata = { labels = { team = "ml" }, annotations = kit.NONE } }
    assert.equals("ml", claim.metadata.labels.team)
    assert.equals("default", claim.metadata.labels["karpenter.sh/nodepool"])
    assert.is_nil(claim.metadata.annotations)
    local inst = kit.instance { security_group_ids = { "sg-x" } }
    assert.same({ "sg-x" }, inst.security_group_ids)
    assert.equals(json.array_mt, getmetatable(inst.security_group_ids))
    assert.equals("[]", json.encode(kit.nodeclass { status = { images = kit.list() } }.status.images))
  end)

  it("never share tables between two built objects or with the overrides", function()
    local labels = { a = "1" }
    local one, two = kit.nodeclaim { metadata = { labels = labels } }, kit.nodeclaim()
    one.metadata.labels.b = "2"
    assert.is_nil(two.metadata.labels.b)
    assert.is_nil(labels.b)
  end)

  it("build a Bizfly pool the NodeGroup mapping reads", function()
    local pools = require "providers.bizfly.pools"
    local pool = kit.bizfly_pool { id = "pool-gpu", desired_size = 2, max_size = 3 }
    local group = pools.group(pool, pool)
    assert.same({ "pool-gpu", 1, 3, 2 }, { group.id, group.min_size, group.max_size, group.target_size })
    assert.equals("bizflycloud://srv-1", group.nodes[1].provider_id)
    assert.equals("running", group.nodes[1].state)
  end)

  it("build a pod on the default node and the disruption policy's ctx", function()
    local pod = kit.pod { metadata = { namespace = "payments" } }
    assert.same({ "web-0", "payments" }, { pod.metadata.name, pod.metadata.namespace })
    assert.equals(kit.node().metadata.name, pod.spec.nodeName)
    local ctx = kit.disruption_ctx { reason = "Drifted", method = "drift" }
    assert.same({ "Drifted", "drift", "default" }, { ctx.reason, ctx.method, ctx.nodepool })
    assert.equals(12, os.date("*t", ctx.now).hour)
  end)

  it("refuse overrides that are not a table", function()
    assert.has_error(function() kit.instance("i-1") end)
  end)
end)

describe("kit.load", function()
  it("reads kubectl -o yaml and -o json into the engine's shape", function()
    local claim = kit.load(fixtures .. "nodeclaim.yaml")
    assert.equals("default-x7k2p", claim.metadata.name)
    assert.equals(json.array_mt, getmetatable(claim.spec.requirements))
    assert.equals("ECSNodeClass", kit.load(fixtures .. "nodeclass.json").kind)
  end)

  it("gives the items of a List kind and every document of a YAML stream", function()
    local dir = os.tmpname()
    local f = assert(io.open(dir, "w"))
    f:write('{"apiVersion":"v1","kind":"NodeList","items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}')
    f:close()
    local items = kit.load(dir)
    assert.same({ "a", "b" }, { items[1].metadata.name, items[2].metadata.name })
    f = assert(io.open(dir, "w"))
    f:write("kind: Node\nmetadata: {name: a, labels: null}\n---\nkind: Node\nmetadata: {name: b}\n")
    f:close()
    items = kit.load(dir)
    assert.equals(2, #items)
    assert.equals(json.null, items[1].metadata.labels)
    os.remove(dir)
  end)

  it("names the file when it cannot be read", function()
    assert.has_error(function() kit.load("/nonexistent/x.yaml") end)
    local ok, err = pcall(kit.load, "/nonexistent/x.yaml")
    assert.is_false(ok)
    assert.matches("kit.load: /nonexistent/x.yaml", err, 1, true)
  end)
end)
