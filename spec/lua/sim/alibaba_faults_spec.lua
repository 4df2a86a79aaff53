-- The Alibaba simulator's admin paths: each fault kind (throttling, 5xx, timeouts, malformed bodies,
-- out-of-stock offerings), simulated time, state and call counts, reset, the scaled catalogue, and
-- out-of-band instance changes; plus the handler's robustness against garbage requests.
local luaprov = require "luaprov"
local s = require "sim.alibaba_support"

local R = "cn-hangzhou"

describe("alibaba simulator: faults and admin paths", function()
  local sim

  setup(function() sim = s.start() end)
  teardown(function() if sim then sim.stop() end end)
  before_each(function() s.reset(sim) end)

  local function fault(rule)
    local status, body = s.admin(sim, "POST", "/_sim/faults", rule)
    assert.equals(200, status, body and body.error)
    return body
  end

  local function run(extra, opts)
    local p = { RegionId = R, InstanceType = "ecs.g7.large", ImageId = "aliyun_3_x64_20G_alibase_20240819.vhd",
      VSwitchId = "vsw-bp1simi0000001", ["SecurityGroupIds.1"] = "sg-bp1sim0nodes00001" }
    for k, v in pairs(extra or {}) do p[k] = v end
    return s.call(sim, "ecs", "RunInstances", p, opts)
  end

  it("throttles an action a given number of times, with the real code and rate-limit hint", function()
    fault({ action = "RunInstances", code = "Throttling.User", count = 2 })
    for _ = 1, 2 do
      local status, err, res = run()
      assert.equals(400, status)
      assert.equals("Throttling.User", err.Code)
      assert.equals("Request was denied due to user flow control.", err.Message)
      assert.matches("^Limit:", res.headers["x-ratelimit-user-api"])
    end
    assert.equals(200, (run()))
    local st = s.state(sim)
    assert.equals(3, st.calls.RunInstances)
    assert.equals(2, st.errors.RunInstances)
    assert.equals(1, #st.instances)
    assert.same({}, st.faults)
  end)

  it("fails any action with a 5xx, and lets skipped calls through first", function()
    fault({ action = "*", kind = "5xx", count = 1 })
    local status, err = s.call(sim, "ecs", "DescribeRegions", { RegionId = R })
    assert.equals(500, status)
    assert.equals("InternalError", err.Code)
    fault({ kind = "5xx", status = 503, product = "vpc", skip = 1, count = 1 })
    assert.equals(200, (s.call(sim, "vpc", "DescribeVSwitches", { RegionId = R })))
    assert.equals(200, (s.call(sim, "ecs", "DescribeRegions", { RegionId = R })))  -- other product: untouched
    status, err = s.call(sim, "vpc", "DescribeVSwitches", { RegionId = R })
    assert.equals(503, status)
    assert.equals("ServiceUnavailable", err.Code)
  end)

  it("answers any API error code asked for, with the real status where known", function()
    fault({ action = "RunInstances", code = "QuotaExceed.ElasticQuota" })
    local status, err = run()
    assert.equals(403, status)
    assert.equals("QuotaExceed.ElasticQuota", err.Code)
    status, err = run()
    assert.equals(403, status)
    assert.equals("QuotaExceed.ElasticQuota", err.Code)  -- no count: until cleared
    assert.equals(200, (s.admin(sim, "DELETE", "/_sim/faults")))
    assert.equals(200, (run()))
  end)

  it("delays an answer after acting, so a retried create with its ClientToken launches one instance", function()
    fault({ action = "RunInstances", kind = "timeout", seconds = 1.5, count = 1 })
    local started = luaprov.time.monotonic()
    local status, _, code = run({ ClientToken = "retry-me" }, { timeout_ms = 300 })
    assert.is_nil(status)
    assert.equals("Timeout", code)
    assert.is_true(luaprov.time.monotonic() - started < 1.4)
    local again, body = run({ ClientToken = "retry-me" })
    assert.equals(200, again)
    local st = s.state(sim)
    assert.equals(1, #st.instances)
    assert.equals(st.instances[1].id, body.InstanceIdSets.InstanceIdSet[1])
    assert.equals(2, st.calls.RunInstances)
  end)

  it("answers a malformed body once", function()
    fault({ kind = "malformed", action = "DescribeInstanceTypes", count = 1 })
    local status, body, res = s.call(sim, "ecs", "DescribeInstanceTypes", {})
    assert.equals(200, status)
    assert.is_nil(body)
    assert.is_nil((luaprov.json.decode(res.body)))
    status, body = s.call(sim, "ecs", "DescribeInstanceTypes", {})
    assert.equals(200, status)
    assert.is_true(#body.InstanceTypes.InstanceType > 0)
    fault({ kind = "malformed", body = "<html>gateway</html>", count = 1 })
    local _, _, raw = s.call(sim, "ecs", "DescribeRegions", { RegionId = R })
    assert.equals("<html>gateway</html>", raw.body)
  end)

  it("sells out a (zone, type, capacity type) until the faults are cleared", function()
    fault({ kind = "nostock", zone = "cn-hangzhou-i", instance_type = "ecs.g7.large", capacity_type = "spot" })
    local function status_in_i(spot)
      local body = s.ok(sim, "ecs", "DescribeAvailableResource", { RegionId = R, DestinationResource = "InstanceType",
        InstanceType = "ecs.g7.large", ZoneId = "cn-hangzhou-i", SpotStrategy = spot })
      return body.AvailableZones.AvailableZone[1].AvailableResources.AvailableResource[1].SupportedResources
        .SupportedResource[1].Status
    end
    assert.equals("SoldOut", status_in_i("SpotAsPriceGo"))
    assert.equals("Available", status_in_i("NoSpot"))
    local status, err = run({ SpotStrategy = "SpotAsPriceGo" })
    assert.equals(403, status)
    assert.equals("OperationDenied.NoStock", err.Code)
    assert.equals(200, (run()))
    -- a whole zone
    fault({ kind = "nostock", zone = "cn-hangzhou-k" })
    local body = s.ok(sim, "ecs", "DescribeAvailableResource", { RegionId = R, DestinationResource = "InstanceType",
      ZoneId = "cn-hangzhou-k" })
    assert.equals("WithoutStock", body.AvailableZones.AvailableZone[1].StatusCategory)
    s.admin(sim, "DELETE", "/_sim/faults")
    assert.equals("Available", status_in_i("SpotAsPriceGo"))
  end)

  it("lists, removes and validates fault rules", function()
    local added = fault({ { code = "Throttling", action = "DescribeZones" }, { kind = "timeout", seconds = 1 } })
    assert.equals(2, #added.faults)
    assert.equals(200, (s.admin(sim, "DELETE", "/_sim/faults/" .. added.added[1].id)))
    local _, listed = s.admin(sim, "GET", "/_sim/faults")
    assert.equals(1, #listed.faults)
    for _, bad in ipairs({ { kind = "wobble" }, { kind = "error" }, { kind = "timeout", seconds = 90 },
      { kind = "nostock", zone = "cn-hangzhou-z" }, { count = 0, code = "X" }, "not json" }) do
      local status, body = s.admin(sim, "POST", "/_sim/faults", bad)
      assert.equals(400, status)
      assert.is_string(body.error)
    end
    assert.equals(404, (s.admin(sim, "DELETE", "/_sim/faults/999")))
  end)

  it("advances simulated time and changes its speed", function()
    local _, before = s.admin(sim, "GET", "/_sim/clock")
    local status, after = s.admin(sim, "POST", "/_sim/advance", { seconds = 3600 })
    assert.equals(200, status)
    assert.near(before.epoch + 3600, after.epoch, 2)
    assert.is_true(after.offset_seconds >= 3599)
    assert.equals(400, (s.admin(sim, "POST", "/_sim/advance", { seconds = -1 })))
    assert.equals(400, (s.admin(sim, "POST", "/_sim/advance", {})))
    status, after = s.admin(sim, "POST", "/_sim/clock", { speed = 0 })
    assert.equals(200, status)
    assert.equals(0, after.speed)
    local _, frozen = s.admin(sim, "GET", "/_sim/clock")
    assert.equals(after.epoch, frozen.epoch)
  end)

  it("moves an instance out of band (stopped node, spot reclaim)", function()
    local _, body = run()
    local id = body.InstanceIdSets.InstanceIdSet[1]
    local status, res = s.admin(sim, "POST", "/_sim/instances/" .. id, { status = "Stopped" })
    assert.equals(200, status)
    assert.equals("Stopped", res.status)
    local inst = s.ok(sim, "ecs", "DescribeInstances", { RegionId = R }).Instances.Instance[1]
    assert.equals("Stopped", inst.Status)
    s.ok(sim, "ecs", "DeleteInstance", { InstanceId = id })  -- a stopped instance needs no Force
    _, body = run()
    id = body.InstanceIdSets.InstanceIdSet[1]
    assert.equals(200, (s.admin(sim, "DELETE", "/_sim/instances/" .. id)))
    assert.equals(0, s.ok(sim, "ecs", "DescribeInstances", { RegionId = R }).TotalCount)
    assert.equals(404, (s.admin(sim, "POST", "/_sim/instances/i-none", { status = "Stopped" })))
  end)

  it("serves the user data an instance was launched with, decoded", function()
    local _, body = run({ UserData = luaprov.crypto.base64_encode("#!/bin/bash\necho hi\n") })
    local id = body.InstanceIdSets.InstanceIdSet[1]
    local status, res = s.admin(sim, "GET", "/_sim/instances/" .. id .. "/user-data")
    assert.equals(200, status)
    assert.same({ id = id, user_data = "#!/bin/bash\necho hi\n" }, res)
    _, body = run()
    status, res = s.admin(sim, "GET", "/_sim/instances/" .. body.InstanceIdSets.InstanceIdSet[1] .. "/user-data")
    assert.equals(200, status)
    assert.equals("", res.user_data)
    assert.equals(404, (s.admin(sim, "GET", "/_sim/instances/i-none/user-data")))
  end)

  it("scales the catalogue deterministically for benchmarks, and resets it", function()
    local status, summary = s.admin(sim, "POST", "/_sim/catalogue", { instance_types = 1000, zones = 8 })
    assert.equals(200, status)
    assert.same({ 1000, 8 }, { summary.instance_types, #summary.zones })
    assert.is_true(summary.arm_types > 0 and summary.gpu_types > 0 and summary.sold_out_count > 0)
    local count, token = 0, nil
    repeat
      local body = s.ok(sim, "ecs", "DescribeInstanceTypes", { MaxResults = "100", NextToken = token })
      count = count + #body.InstanceTypes.InstanceType
      token = body.NextToken
    until token == ""
    assert.equals(1000, count)
    local zones = s.ok(sim, "ecs", "DescribeAvailableResource", { RegionId = R, DestinationResource = "InstanceType" })
    assert.equals(8, #zones.AvailableZones.AvailableZone)
    local vsw = s.ok(sim, "vpc", "DescribeVSwitches", { RegionId = R, PageSize = "50",
      ["Tag.1.Key"] = "karpenter.sh/discovery" })
    assert.equals(8, vsw.TotalCount)
    local _, again = s.admin(sim, "POST", "/_sim/catalogue", { instance_types = 1000, zones = 8 })
    assert.same(summary, again)
    assert.equals(400, (s.admin(sim, "POST", "/_sim/catalogue", { instance_types = 0 })))
    s.reset(sim)
    local st = s.state(sim)
    assert.equals(4, #st.catalogue.zones)
    assert.is_true(st.catalogue.instance_types >= 50)
  end)

  it("describes the default catalogue in /_sim/state", function()
    local st = s.state(sim)
    assert.is_true(st.catalogue.instance_types >= 50)
    assert.equals(4, #st.catalogue.zones)
    assert.is_true(st.catalogue.arm_types >= 5 and st.catalogue.gpu_types >= 5)
    assert.is_true(#st.catalogue.sold_out >= 1)
    assert.equals("LTAI5simulatoraccess", st.credentials.default_access_key_id)
    assert.equals(404, (s.admin(sim, "GET", "/_sim/nothing")))
  end)

  it("answers garbage with API errors, never a crash", function()
    local http = luaprov.http
    local cases = {
      { method = "POST", url = sim.url .. "/" },
      { method = "GET", url = sim.url .. "/?%zz=%&&==&Action" },
      { method = "POST", url = sim.url .. "/?Action=DescribeRegions&Version=2014-05-26&Format=JSON",
        headers = { ["content-type"] = "application/x-www-form-urlencoded" }, body = "%%%&&=\1\2" },
      { method = "POST", url = sim.url .. "/", headers = { authorization = "ACS3-HMAC-SHA256 Credential=,Signature=",
        ["x-acs-action"] = "DescribeRegions", ["x-acs-version"] = "2014-05-26" } },
      { method = "POST", url = sim.url .. "/", headers = { ["x-acs-action"] = "RunInstances",
        ["x-acs-version"] = "2014-05-26", authorization = ("x"):rep(5000) } },
    }
    for _, req in ipairs(cases) do
      local res = assert(http.request(req))
      assert.is_true(res.status >= 400 and res.status < 500, req.url .. " answered " .. res.status)
      local body = luaprov.json.decode(res.body)
      if body then assert.is_string(body.Code) else assert.truthy(res.body:find("<Code>", 1, true)) end
    end
    -- A signed request with a nonsense parameter value still gets an API error.
    local status, err = s.call(sim, "ecs", "DescribeInstances", { RegionId = R, MaxResults = "lots" })
    assert.equals(400, status)
    assert.equals("InvalidParameter", err.Code)
  end)
end)

describe("alibaba simulator: handle(request) in process", function()
  local handler = require "sim.alibaba"

  it("answers thousands of garbage requests with a response, never an error and never a 500", function()
    math.randomseed(7)
    local pieces = { "Action=", "RunInstances", "DescribeInstances", "Version=", "2014-05-26", "2016-04-28",
      "2015-04-01", "&", "=", "%", "%zz", "%41", "+", "AccessKeyId=LTAI5simulatoraccess", "Signature=x",
      "Tag.1.Key=", "Tag.1.Value", "InstanceIds=[", '"', "]", "Format=JSON", "MaxResults=-1", "NextToken=zz",
      "DestinationResource=InstanceType", "\0", "\255", "RegionId=cn-hangzhou", "OIDCToken=a.b.c",
      "RoleArn=acs:ram::1234567890123456:role/x", "OIDCProviderArn=acs:ram::1:oidc-provider/x", "{", "}" }
    local function junk(n)
      local t = {}
      for i = 1, n do t[i] = pieces[math.random(#pieces)] end
      return table.concat(t)
    end
    local paths = { "/", "/", "/", "/_sim/faults", "/_sim/state", "/_sim/advance", "/_sim/instances/x",
      "/latest/meta-data/ram/security-credentials/", "/latest/api/token", "/nowhere" }
    local methods = { "GET", "POST", "PUT", "DELETE" }
    for i = 1, 2000 do
      local req = { service = "alibaba", method = methods[math.random(#methods)], path = paths[math.random(#paths)],
        query = junk(math.random(0, 12)), headers = {}, body = junk(math.random(0, 8)), remote = "127.0.0.1" }
      if math.random() < 0.3 then req.headers["content-type"] = "application/x-www-form-urlencoded" end
      if math.random() < 0.3 then
        req.headers["x-acs-action"] = pieces[math.random(#pieces)]
        req.headers["x-acs-version"] = "2014-05-26"
        req.headers.authorization = "ACS3-HMAC-SHA256 " .. junk(3)
      end
      local ok, res = pcall(handler.handle, req)
      assert.is_true(ok, tostring(res))
      assert.is_true(math.type(res.status) == "integer" and res.status < 500 and type(res.body) == "string",
        ("request %d: %s %s?%s -> %s"):format(i, req.method, req.path, req.query, res.status))
    end
  end)
end)
