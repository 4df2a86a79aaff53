-- The Kubernetes API simulator over real HTTP (`luaprov sim`): discovery, CRUD, conflicts,
-- finalizers, pagination, watch streams (ended by timeoutSeconds) with bookmarks and 410, and the
-- watch ticks that keep the simulated kubelet going when a client only watches.
local luaprov = require "luaprov"
local alibaba = require "sim.alibaba_support"
local attach_support = require "sim.attach_support"

local json = luaprov.json

local function read_all(path)
  local f = io.open(path)
  if not f then return "" end
  local text = f:read("a")
  f:close()
  return text
end

describe("kubernetes simulator", function()
  local pid, out, err, url, cloud

  local function call(method, path, body, ctype)
    local res = assert(luaprov.http.request {
      method = method, url = url .. path, timeout_ms = 10000,
      headers = { ["content-type"] = ctype or "application/json" },
      body = body and (type(body) == "string" and body or json.encode(body)) or nil,
    })
    return res.status, res.body ~= "" and json.decode(res.body) or nil, res.body
  end

  local function watch_lines(path)
    local _, _, text = call("GET", path)
    local events = {}
    for line in text:gmatch("[^\n]+") do events[#events + 1] = json.decode(line) end
    return events
  end

  setup(function()
    local binary = assert(os.getenv("LUAPROV_BINARY_DIR"), "LUAPROV_BINARY_DIR not set") .. "/luaprov"
    out, err = os.tmpname(), os.tmpname()
    local p = io.popen(string.format("%s sim >%s 2>%s & echo $!", binary, out, err))
    pid = p:read("l")
    p:close()
    for _ = 1, 500 do
      local line = read_all(out):match("^[^\n]*\n")
      if line then
        url = json.decode(line).kubernetes
        cloud = { url = json.decode(line).alibaba }
        break
      end
      os.execute("sleep 0.02")
    end
    assert(url, "luaprov sim did not start: " .. read_all(err))
  end)

  teardown(function()
    if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    os.remove(out)
    os.remove(err)
  end)

  before_each(function()
    alibaba.reset(cloud)
    assert.equal(200, (call("POST", "/_sim/reset")))
  end)

  it("serves discovery for the core group and the CRD groups", function()
    local _, api = call("GET", "/api")
    assert.same({ "v1" }, api.versions)
    local _, core = call("GET", "/api/v1")
    local names = {}
    for _, r in ipairs(core.resources) do names[r.name] = r end
    assert.is_false(names.nodes.namespaced)
    assert.is_true(names.pods.namespaced)
    assert.truthy(names["nodes/status"])
    local _, groups = call("GET", "/apis")
    local found = {}
    for _, g in ipairs(groups.groups) do found[g.name] = g.preferredVersion.version end
    assert.equal("v1", found["karpenter.sh"])
    assert.equal("v1alpha1", found["karpenter.k8s.alibabacloud"])
    assert.equal("v1", found["coordination.k8s.io"])
    local _, karpenter = call("GET", "/apis/karpenter.sh/v1")
    assert.equal("NodePool", karpenter.resources[1].kind)
    local _, leases = call("GET", "/apis/coordination.k8s.io/v1")
    assert.is_true(leases.resources[1].namespaced)
    assert.equal(404, (call("GET", "/apis/nope.io/v1")))
  end)

  it("creates, reads, replaces, patches and deletes with Status errors", function()
    local np = "/apis/karpenter.sh/v1/nodepools"
    local status, obj = call("POST", np, { metadata = { name = "general" }, spec = { weight = 1 },
      status = { ignored = true } })
    assert.equal(201, status)
    assert.equal(1, obj.metadata.generation)
    assert.truthy(obj.metadata.uid and obj.metadata.creationTimestamp)
    assert.is_nil(obj.status)
    local st, e = call("POST", np, { metadata = { name = "general" } })
    assert.equal(409, st)
    assert.equal("AlreadyExists", e.reason)
    st, e = call("POST", np, { metadata = {} })
    assert.equal(422, st)
    assert.equal("Invalid", e.reason)
    st, e = call("GET", np .. "/missing")
    assert.equal(404, st)
    assert.same({ "Status", "NotFound", 'nodepools.karpenter.sh "missing" not found' },
      { e.kind, e.reason, e.message })

    -- PUT with a stale resourceVersion conflicts; with the current one it bumps generation
    local stale = obj.metadata.resourceVersion
    local _, patched = call("PATCH", np .. "/general", { spec = { weight = 2 } }, "application/merge-patch+json")
    assert.equal(2, patched.metadata.generation)
    st, e = call("PUT", np .. "/general", { metadata = { name = "general", resourceVersion = stale }, spec = {} })
    assert.equal(409, st)
    assert.equal("Conflict", e.reason)
    -- /status changes status only, and leaves generation alone
    local _, s = call("PATCH", np .. "/general/status", { status = { ready = true }, spec = { weight = 9 } },
      "application/merge-patch+json")
    assert.is_true(s.status.ready)
    assert.equal(2, s.spec.weight)
    assert.equal(2, s.metadata.generation)
    assert.equal(415, (call("PATCH", np .. "/general", "{}", "application/json-patch+json")))

    -- generateName
    local _, gen = call("POST", "/api/v1/namespaces/default/pods", { metadata = { generateName = "web-" } })
    assert.matches("^web%-%w%w%w%w%w$", gen.metadata.name)
    assert.equal("default", gen.metadata.namespace)
    assert.equal(200, (call("DELETE", "/api/v1/namespaces/default/pods/" .. gen.metadata.name)))
    assert.equal(404, (call("GET", "/api/v1/namespaces/default/pods/" .. gen.metadata.name)))
  end)

  it("deletes an object with finalizers only when the last one goes", function()
    local nc = "/apis/karpenter.sh/v1/nodeclaims"
    call("POST", nc, { metadata = { name = "claim", finalizers = { "karpenter.sh/termination" } } })
    local st, obj = call("DELETE", nc .. "/claim")
    assert.equal(200, st)
    assert.truthy(obj.metadata.deletionTimestamp)
    st, obj = call("GET", nc .. "/claim")
    assert.equal(200, st)
    assert.truthy(obj.metadata.deletionTimestamp)
    call("PATCH", nc .. "/claim", { metadata = { finalizers = json.null } }, "application/merge-patch+json")
    assert.equal(404, (call("GET", nc .. "/claim")))
  end)

  it("pages a list with limit and continue, and filters by label", function()
    for i = 1, 5 do
      call("POST", "/api/v1/nodes", { metadata = { name = "node-" .. i, labels = { odd = tostring(i % 2 == 1) } } })
    end
    local seen, path = {}, "/api/v1/nodes?limit=2"
    for _ = 1, 5 do
      local _, list = call("GET", path)
      assert.equal("NodeList", list.kind)
      for _, n in ipairs(list.items) do seen[#seen + 1] = n.metadata.name end
      if not list.metadata.continue then break end
      path = "/api/v1/nodes?limit=2&continue=" .. list.metadata.continue:gsub("[^%w]", function(c)
        return string.format("%%%02X", c:byte())
      end)
    end
    assert.same({ "node-1", "node-2", "node-3", "node-4", "node-5" }, seen)
    local _, odd = call("GET", "/api/v1/nodes?labelSelector=odd%3Dtrue")
    assert.equal(3, #odd.items)
    local _, notin = call("GET", "/api/v1/nodes?labelSelector=odd%20notin%20(true)")
    assert.equal(2, #notin.items)
  end)

  it("streams watch events from a resourceVersion, with bookmarks, until timeoutSeconds", function()
    local np = "/apis/karpenter.sh/v1/nodepools"
    local _, list = call("GET", np)
    local from = list.metadata.resourceVersion
    call("POST", np, { metadata = { name = "a" }, spec = { weight = 1 } })
    call("PATCH", np .. "/a", { spec = { weight = 2 } }, "application/merge-patch+json")
    call("DELETE", np .. "/a")
    local events = watch_lines(np .. "?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=" .. from)
    local types = {}
    for _, e in ipairs(events) do types[#types + 1] = e.type end
    assert.same({ "ADDED", "MODIFIED", "DELETED", "BOOKMARK" }, types)
    assert.equal("a", events[1].object.metadata.name)
    assert.equal(2, events[2].object.spec.weight)

    -- after compaction an old resourceVersion is answered with a 410 ERROR event
    call("POST", "/_sim/faults", { kind = "compact" })
    events = watch_lines(np .. "?watch=1&timeoutSeconds=1&resourceVersion=" .. from)
    assert.equal(1, #events)
    assert.equal("ERROR", events[1].type)
    assert.equal(410, events[1].object.code)
    assert.equal("Expired", events[1].object.reason)
  end)

  it("delivers changes made while a watch is open, and periodic bookmarks", function()
    call("POST", "/_sim/config", { bookmark_seconds = 0.3 })
    local np = "/apis/karpenter.sh/v1/nodepools"
    local tmp = os.tmpname()
    -- a watch in the background (curl keeps reading until timeoutSeconds ends the stream)
    os.execute(string.format("curl -sN '%s%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=2' >%s &", url, np,
      tmp))
    os.execute("sleep 0.5")
    call("POST", np, { metadata = { name = "live" } })
    os.execute("sleep 2")
    local text = read_all(tmp)
    os.remove(tmp)
    local adds, bookmarks = 0, 0
    for line in text:gmatch("[^\n]+") do
      local e = json.decode(line)
      if e.type == "ADDED" and e.object.metadata.name == "live" then adds = adds + 1 end
      if e.type == "BOOKMARK" then bookmarks = bookmarks + 1 end
    end
    assert.equal(1, adds)
    assert.is_true(bookmarks >= 3, text)
  end)

  -- client-go's WatchList: a watch that starts with the state, as a list would, and says where it ends
  local WATCH_LIST = "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"

  local function until_file_has(path, text)
    for _ = 1, 250 do
      if read_all(path):find(text, 1, true) then return true end
      os.execute("sleep 0.02")
    end
    return false
  end

  it("starts a WatchList with the matching objects, then the initial-events-end bookmark, then live events", function()
    local np = "/apis/karpenter.sh/v1/nodepools"
    for name, team in pairs { a = "x", b = "x", c = "y" } do
      call("POST", np, { metadata = { name = name, labels = { team = team } } })
    end
    local _, list = call("GET", np)
    local tmp = os.tmpname()
    local p = io.popen(string.format("curl -sN '%s%s%s&labelSelector=team%%3Dx&timeoutSeconds=10' >%s & echo $!",
      url, np, WATCH_LIST, tmp))
    local curl = p:read("l")
    p:close()
    -- the live change only once the initial events are out: nothing here depends on timing
    assert.is_true(until_file_has(tmp, "k8s.io/initial-events-end"), read_all(tmp))
    call("POST", np, { metadata = { name = "d", labels = { team = "x" } } })
    call("POST", np, { metadata = { name = "e", labels = { team = "y" } } })
    local seen = until_file_has(tmp, '"name":"d"')
    os.execute("kill " .. curl)
    local text = read_all(tmp)
    os.remove(tmp)
    assert.is_true(seen, text)
    local events = {}
    for line in text:gmatch("[^\n]+") do events[#events + 1] = json.decode(line) end
    local got = {}
    for _, e in ipairs(events) do got[#got + 1] = e.type .. " " .. (e.object.metadata.name or "") end
    assert.same({ "ADDED a", "ADDED b", "BOOKMARK ", "ADDED d" }, got)
    local mark = events[3].object
    assert.equal("NodePool", mark.kind)
    assert.equal("karpenter.sh/v1", mark.apiVersion)
    assert.equal(list.metadata.resourceVersion, mark.metadata.resourceVersion)
    assert.same({ ["k8s.io/initial-events-end"] = "true" }, mark.metadata.annotations)
  end)

  it("sends no end bookmark without allowWatchBookmarks, and no initial events with sendInitialEvents=false", function()
    local np = "/apis/karpenter.sh/v1/nodepools"
    call("POST", np, { metadata = { name = "a" } })
    -- as the apiserver: the initial events alone, no bookmark and no error
    local events = watch_lines(np .. "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
      .. "&timeoutSeconds=1")
    assert.equal(1, #events)
    assert.same({ "ADDED", "a" }, { events[1].type, events[1].object.metadata.name })
    -- sendInitialEvents=false: from now on, with the plain bookmark that says where now is
    events = watch_lines(np .. "?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"
      .. "&allowWatchBookmarks=true&timeoutSeconds=1")
    assert.equal(1, #events)
    assert.equal("BOOKMARK", events[1].type)
    assert.is_nil(events[1].object.metadata.annotations)
  end)

  it("refuses the ListOptions the apiserver refuses, in its words", function()
    local np = "/apis/karpenter.sh/v1/nodepools"
    local function refused(query)
      local status, body = call("GET", np .. "?" .. query)
      assert.equal(422, status)
      assert.same({ "Invalid", "meta.k8s.io", "ListOptions" }, { body.reason, body.details.group, body.details.kind })
      return body
    end
    local body = refused("watch=1&sendInitialEvents=true&allowWatchBookmarks=true")
    assert.equal('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires '
      .. "setting resourceVersionMatch to NotOlderThan", body.message)
    assert.same({ { reason = "FieldValueForbidden", field = "resourceVersionMatch",
      message = "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" } },
      body.details.causes)
    body = refused("watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=true")
    assert.equal('ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires '
      .. 'setting resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: "Exact": supported '
      .. 'values: "NotOlderThan"]', body.message)
    assert.equal("FieldValueNotSupported", body.details.causes[2].reason)
    body = refused("watch=1&resourceVersionMatch=NotOlderThan")
    assert.matches("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided", body.message)
    body = refused("sendInitialEvents=true")
    assert.equal('ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is '
      .. "forbidden for list", body.message)
    local status = call("GET", np .. "?watch=1&sendInitialEvents=maybe&resourceVersionMatch=NotOlderThan")
    assert.equal(400, status)
    -- not older than a resourceVersion the server has not reached: a timeout, as the apiserver's
    local _, too_new = call("GET", np .. WATCH_LIST .. "&resourceVersion=999999")
    assert.same({ 504, "Timeout" }, { too_new.code, too_new.reason })
    assert.matches("^Too large resource version: 999999, current: %d+$", too_new.message)
  end)

  it("registers the node of a Running instance while a client only watches", function()
    call("POST", "/_sim/config", { sync_seconds = 0.2 })
    local tmp = os.tmpname()
    os.execute(string.format("curl -sN '%s/api/v1/nodes?watch=1&timeoutSeconds=2' >%s &", url, tmp))
    os.execute("sleep 0.3")
    local launched = alibaba.ok(cloud, "ecs", "RunInstances", { RegionId = "cn-hangzhou", InstanceType = "ecs.g7.large",
      ImageId = "aliyun_3_x64_20G_alibase_20240819.vhd", VSwitchId = "vsw-bp1simh0000001",
      ["SecurityGroupIds.1"] = "sg-bp1sim0nodes00001", UserData = attach_support.base64() })
    alibaba.admin(cloud, "POST", "/_sim/advance", { seconds = 15 })
    os.execute("sleep 2")
    local text = read_all(tmp)
    os.remove(tmp)
    local added
    for line in text:gmatch("[^\n]+") do
      local e = json.decode(line)
      if e.type == "ADDED" then added = e.object end
    end
    assert.truthy(added, text)
    assert.equal("cn-hangzhou." .. launched.InstanceIdSets.InstanceIdSet[1], added.spec.providerID)
  end)

  it("injects faults", function()
    -- (GET is retried by luaprov.http on a 5xx: PATCH is not)
    local _, added = call("POST", "/_sim/faults", { verb = "patch", resource = "nodes", status = 500, count = 1 })
    assert.equal(1, #added.faults, json.encode(added))
    call("POST", "/api/v1/nodes", { metadata = { name = "n" } })
    local st, e = call("PATCH", "/api/v1/nodes/n", {}, "application/merge-patch+json")
    assert.equal(500, st)
    assert.equal("InternalError", e.reason)
    assert.equal(200, (call("GET", "/api/v1/nodes/n")))
    call("POST", "/_sim/faults", { verb = "update", status = 409, count = 1 })
    assert.equal(409, (call("PUT", "/api/v1/nodes/n", { metadata = { name = "n" } })))

    -- a timeout: the create takes effect, its answer comes after the client gave up
    call("POST", "/_sim/faults", { verb = "create", resource = "nodes", kind = "timeout", seconds = 1, count = 1 })
    local res, _, code = luaprov.http.request { method = "POST", url = url .. "/api/v1/nodes", timeout_ms = 200,
      headers = { ["content-type"] = "application/json" }, body = json.encode({ metadata = { name = "late" } }) }
    assert.is_nil(res)
    assert.equal("Timeout", code)
    assert.equal(200, (call("GET", "/api/v1/nodes/late")))
    assert.equal(409, (call("POST", "/api/v1/nodes", { metadata = { name = "late" } })), "a retry: AlreadyExists")
  end)
end)
