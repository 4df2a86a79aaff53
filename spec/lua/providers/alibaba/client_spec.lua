-- Alibaba OpenAPI client: the wire form of both signature schemes, parameter flattening, endpoints,
-- error classes and retries against canned answers (an injected transport), then the same client
-- against the Alibaba simulator over real HTTP (helper: spec/fixtures/alibaba/simulator.lua).
local client = require "providers.alibaba.client"
local signer = require "providers.alibaba.signer"
local luaprov = require "luaprov"
local json = luaprov.json

local AK, SK, TOKEN = "LTAI-test-id", "test-secret-value", "sts-token+/=value"

local function decode_component(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- "a=1&b=x%20y" -> {a = "1", b = "x y"}
local function parse_query(url)
  local out = {}
  local query = url:match("%?(.*)$") or ""
  for pair in query:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    out[decode_component(k)] = decode_component(v)
  end
  return out
end

-- A transport that records requests and answers from a script of responses (the last repeats).
local function scripted(responses)
  local t = { requests = {} }
  t.fn = function(req)
    t.requests[#t.requests + 1] = req
    local r = responses[math.min(#t.requests, #responses)]
    if type(r) == "function" then return r(req) end
    if r.fail then return nil, r.fail, r.code end
    return { status = r.status or 200, headers = {}, body = type(r.body) == "table" and json.encode(r.body) or r.body }
  end
  return t
end

-- A canned API error answer.
local function api_error(status, code, message, request_id)
  return { status = status, body = { Code = code, Message = message, RequestId = request_id } }
end

local function new_client(transport, extra)
  local sleeps = {}
  local cfg = {
    region = "cn-hangzhou", endpoint = "http://127.0.0.1:9/", transport = transport.fn,
    credentials = { access_key_id = AK, access_key_secret = SK },
    sleep = function(s) sleeps[#sleeps + 1] = s end,
  }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return client.new(cfg), sleeps
end

describe("alibaba client", function()
  describe("flatten", function()
    it("writes structs as Parent.Child and lists as Name.N, 1-based", function()
      local flat = client.flatten({
        RegionId = "cn-hangzhou",
        SystemDisk = { Category = "cloud_essd", Size = 40 },
        SecurityGroupIds = { "sg-1", "sg-2" },
        Tag = { { Key = "a", Value = "1" }, { Key = "b", Value = "" } },
        DataDisk = { { Size = 100, DeleteWithInstance = true } },
        Force = false,
      }, "RunInstances")
      assert.same({
        RegionId = "cn-hangzhou", ["SystemDisk.Category"] = "cloud_essd", ["SystemDisk.Size"] = "40",
        ["SecurityGroupIds.1"] = "sg-1", ["SecurityGroupIds.2"] = "sg-2",
        ["Tag.1.Key"] = "a", ["Tag.1.Value"] = "1", ["Tag.2.Key"] = "b", ["Tag.2.Value"] = "",
        ["DataDisk.1.Size"] = "100", ["DataDisk.1.DeleteWithInstance"] = "true", Force = "false",
      }, flat)
    end)

    it("sends JSON-typed parameters of an action as one JSON array text", function()
      assert.same({ InstanceIds = '["i-1","i-2"]', RegionId = "r" },
        client.flatten({ InstanceIds = { "i-1", "i-2" }, RegionId = "r" }, "DescribeInstances"))
      assert.same({ SecurityGroupIds = '["sg-1"]' },
        client.flatten({ SecurityGroupIds = { "sg-1" } }, "DescribeSecurityGroups"))
      assert.same({ InstanceIds = "[]" }, client.flatten({ InstanceIds = {} }, "DescribeInstances"))
      assert.same({ Ids = '["a"]' }, client.flatten({ Ids = client.json_param({ "a" }) }, "Anything"))
    end)

    it("passes flat keys and ready-made JSON strings through", function()
      assert.same({ ["Tag.1.Key"] = "k", InstanceIds = '["i-9"]' },
        client.flatten({ ["Tag.1.Key"] = "k", InstanceIds = '["i-9"]' }, "DescribeInstances"))
    end)

    it("writes integral floats as integers and keeps price digits", function()
      assert.same({ Size = "40", SpotPriceLimit = "0.125" }, client.flatten({ Size = 40.0, SpotPriceLimit = 0.125 }))
    end)

    it("raises on values that cannot go on the wire", function()
      assert.has_error(function() client.flatten({ F = print }) end)
      assert.has_error(function() client.flatten({ [1] = "x" }) end)
    end)
  end)

  describe("endpoints", function()
    it("uses the public regional endpoints per product", function()
      local c = client.new { region = "cn-beijing", network = "" }
      assert.equals("https://ecs.cn-beijing.aliyuncs.com/", c:endpoint_url("ecs"))
      assert.equals("https://vpc.cn-beijing.aliyuncs.com/", c:endpoint_url("vpc"))
      assert.equals("https://sts.cn-beijing.aliyuncs.com/", c:endpoint_url("sts"))
    end)

    it("uses the VPC endpoints on the vpc network, and central STS without a region", function()
      assert.equals("https://ecs-vpc.cn-beijing.aliyuncs.com/", client.new({ region = "cn-beijing", network = "vpc" })
        :endpoint_url("ecs"))
      assert.equals("https://sts.aliyuncs.com/", client.new({ network = "" }):endpoint_url("sts"))
    end)

    it("sends every product to one override URL", function()
      local c = client.new { region = "cn-beijing", endpoint = "http://127.0.0.1:4000" }
      assert.equals("http://127.0.0.1:4000", c:endpoint_url("ecs"))
      assert.equals("http://127.0.0.1:4000", c:endpoint_url("sts"))
      assert.equals("http://127.0.0.1:4000", c:endpoint_url("ram"))
    end)

    it("uses RAM's global endpoint whatever the region, and its VPC one on the vpc network", function()
      assert.equals("https://ram.aliyuncs.com/",
        client.new({ region = "cn-beijing", network = "" }):endpoint_url("ram"))
      assert.equals("https://ram.aliyuncs.com/", client.new({ network = "" }):endpoint_url("ram"))
      assert.equals("https://ram.vpc-proxy.aliyuncs.com/",
        client.new({ region = "cn-beijing", network = "vpc" }):endpoint_url("ram"))
    end)

    it("calls RAM as an RPC product with its own API version", function()
      local t = scripted { { body = { RequestId = "r-ram", Role = { RoleName = "KarpenterNodeRole" } } } }
      local body = assert(new_client(t):call("ram", "GetRole", { RoleName = "KarpenterNodeRole" }))
      assert.equals("KarpenterNodeRole", body.Role.RoleName)
      assert.equals("GetRole", t.requests[1].headers["x-acs-action"])
      assert.equals("2015-05-01", t.requests[1].headers["x-acs-version"])
      assert.equals("http://127.0.0.1:9/?RoleName=KarpenterNodeRole", t.requests[1].url)
    end)

    it("refuses a bad configuration", function()
      assert.has_error(function() client.new { signature = "v4" } end)
      assert.has_error(function() client.new { endpoint = "ftp://x" } end)
      assert.has_error(function() client.new({ region = "r" }):call("oss", "X", {}) end)
    end)
  end)

  describe("wire form", function()
    it("V3: POST / with the params in the query and a verifiable ACS3 Authorization", function()
      local t = scripted { { body = { RequestId = "r-1", Regions = {} } } }
      local c = new_client(t, { credentials = { access_key_id = AK, access_key_secret = SK, security_token = TOKEN } })
      local body = assert(c:call("ecs", "DescribeRegions", { RegionId = "cn-hangzhou", Tag = { { Key = "a b" } } }))
      assert.equals("r-1", body.RequestId)
      local req = t.requests[1]
      assert.equals("POST", req.method)
      assert.equals("", req.body)
      assert.equals("http://127.0.0.1:9/?RegionId=cn-hangzhou&Tag.1.Key=a%20b", req.url)
      local h = req.headers
      assert.equals("127.0.0.1:9", h.host)
      assert.equals("DescribeRegions", h["x-acs-action"])
      assert.equals("2014-05-26", h["x-acs-version"])
      assert.equals(TOKEN, h["x-acs-security-token"])
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", h["x-acs-date"])
      assert.matches("^%x+$", h["x-acs-signature-nonce"])
      -- The server's view: recompute the signature from what was sent.
      local headers = {}
      for k, v in pairs(h) do if k ~= "Authorization" then headers[k] = v end end
      local expected = signer.acs3_authorization({ method = "POST", path = "/", query = parse_query(req.url),
        headers = headers, body = "" }, AK, SK)
      assert.equals(expected, h.Authorization)
      assert.matches("^ACS3%-HMAC%-SHA256 Credential=LTAI%-test%-id,SignedHeaders=host;", h.Authorization)
    end)

    it("V2: common parameters and a verifiable Signature in the query", function()
      local t = scripted { { body = { RequestId = "r-2" } } }
      local c = new_client(t, { signature = "v2",
        credentials = { access_key_id = AK, access_key_secret = SK, security_token = TOKEN } })
      assert(c:call("vpc", "DescribeVSwitches", { RegionId = "cn-hangzhou", PageSize = 50 }))
      local req = t.requests[1]
      assert.equals("POST", req.method)
      local q = parse_query(req.url)
      assert.equals("DescribeVSwitches", q.Action)
      assert.equals("2016-04-28", q.Version)
      assert.equals("JSON", q.Format)
      assert.equals(AK, q.AccessKeyId)
      assert.equals("HMAC-SHA1", q.SignatureMethod)
      assert.equals("1.0", q.SignatureVersion)
      assert.equals(TOKEN, q.SecurityToken)
      assert.equals("50", q.PageSize)
      assert.equals(signer.rpc_signature("POST", q, SK), q.Signature)
      assert.is_nil(req.headers.Authorization)
    end)

    it("changes nonce and date on every attempt", function()
      local t = scripted { { status = 503, body = { Code = "ServiceUnavailable", RequestId = "a" } },
        { body = { RequestId = "b" } } }
      local c = new_client(t)
      assert(c:call("ecs", "DescribeZones", {}))
      local first, second = t.requests[1].headers, t.requests[2].headers
      assert.are_not.equal(first["x-acs-signature-nonce"], second["x-acs-signature-nonce"])
    end)

    it("anonymous calls carry no signature and send the params as a form body", function()
      local t = scripted { { body = { RequestId = "s", Credentials = {} } } }
      local c = new_client(t, { credentials = nil })
      assert(c:call("sts", "AssumeRoleWithOIDC", { RoleArn = "acs:ram::1:role/r", OIDCToken = "a.b.c" },
        { anonymous = true }))
      local req = t.requests[1]
      local q = parse_query(req.url)
      assert.equals("AssumeRoleWithOIDC", q.Action)
      assert.equals("2015-04-01", q.Version)
      assert.is_nil(q.Signature)
      assert.is_nil(q.AccessKeyId)
      assert.is_nil(req.headers.Authorization)
      assert.equals("application/x-www-form-urlencoded", req.headers["content-type"])
      assert.equals("OIDCToken=a.b.c&RoleArn=acs%3Aram%3A%3A1%3Arole%2Fr", req.body)
    end)
  end)

  describe("ROA calls", function()
    local PATH = "/clusters/c-1/attachscript"

    it("send the method, the resource path and a JSON body whose SHA-256 is signed, even for v2 clients", function()
      local t = scripted { { body = '"curl x | bash"' } }
      local c = new_client(t, { signature = "v2", endpoint = "http://127.0.0.1:9/gw/",
        credentials = { access_key_id = AK, access_key_secret = SK, security_token = TOKEN } })
      local value = c:roa("cs", "DescribeClusterAttachScripts", { method = "post", path = PATH,
        body = { format_disk = true } })
      assert.equals("curl x | bash", value)
      local req = t.requests[1]
      assert.equals("POST", req.method)
      assert.equals("http://127.0.0.1:9/gw" .. PATH, req.url)
      assert.equals('{"format_disk":true}', req.body)
      local h = req.headers
      assert.equals("application/json", h["content-type"])
      assert.equals("2015-12-15", h["x-acs-version"])
      assert.equals("DescribeClusterAttachScripts", h["x-acs-action"])
      assert.equals(luaprov.crypto.sha256_hex(req.body), h["x-acs-content-sha256"])
      local headers = {}
      for k, v in pairs(h) do if k ~= "Authorization" then headers[k] = v end end
      local expected = signer.acs3_authorization({ method = "POST", path = "/gw" .. PATH, headers = headers,
        body = req.body }, AK, SK)
      assert.equals(expected, h.Authorization)
      assert.matches("content%-type;host;x%-acs%-action", h.Authorization)
    end)

    it("go to cs.<region>.aliyuncs.com without an endpoint", function()
      local t = scripted { { body = '"s"' } }
      local c = new_client(t, { endpoint = false })
      c.endpoint = nil
      assert(c:roa("cs", "DescribeClusterAttachScripts", { path = PATH }))
      assert.equals("https://cs.cn-hangzhou.aliyuncs.com" .. PATH, t.requests[1].url)
    end)

    it("answer any JSON value, or the text when it is not JSON, with the request ID header", function()
      local t = scripted { function() return { status = 200, headers = { ["x-acs-request-id"] = "H-1" },
        body = "plain text\r\n" } end }
      local value, request_id = new_client(t):roa("cs", "DescribeClusterAttachScripts", { path = PATH })
      assert.equals("plain text\r\n", value)
      assert.equals("H-1", request_id)
    end)

    it("read ROA errors (code, message, requestId) and classify them as RPC ones", function()
      local t = scripted { { status = 404, body = { code = "ErrorClusterNotFound", message = "no such cluster",
        requestId = "R-404" } } }
      local value, err = new_client(t):roa("cs", "DescribeClusterAttachScripts", { path = PATH })
      assert.is_nil(value)
      assert.equals("ErrorClusterNotFound", err.code)
      assert.equals("R-404", err.request_id)
      assert.equals(404, err.http_status)
      assert.equals("DescribeClusterAttachScripts: ErrorClusterNotFound: no such cluster (RequestId R-404, HTTP 404)",
        err.message)
      t = scripted { function() return { status = 400, headers = { ["x-acs-request-id"] = "H-2" },
        body = json.encode { code = "Throttling.User", message = "slow" } } end }
      local c = new_client(t, { max_attempts = 2 })
      local _, err2 = c:roa("cs", "DescribeClusterAttachScripts", { path = PATH })
      assert.equals("Throttled", err2.code)
      assert.equals("H-2", err2.request_id)
      assert.equals(2, #t.requests)
    end)

    it("are refused for RPC products, and RPC calls for ROA ones", function()
      local c = new_client(scripted { { body = {} } })
      assert.has_error(function() c:roa("ecs", "DescribeRegions", { path = "/" }) end)
      assert.has_error(function() c:call("cs", "DescribeClusterAttachScripts", {}) end)
      assert.has_error(function() c:roa("cs", "DescribeClusterAttachScripts", { path = "clusters" }) end)
    end)
  end)

  describe("errors and retries", function()
    it("retries throttling with bounded full-jitter backoff, then succeeds", function()
      local throttled = { status = 400, body = { Code = "Throttling.User", Message = "slow down", RequestId = "t" } }
      local t = scripted { throttled, throttled, { body = { RequestId = "ok" } } }
      local c, sleeps = new_client(t, { backoff_base = 0.2, backoff_cap = 5 })
      local body = assert(c:call("ecs", "RunInstances", { Amount = 1 }))
      assert.equals("ok", body.RequestId)
      assert.equals(3, #t.requests)
      assert.equals(2, #sleeps)
      assert.is_true(sleeps[1] >= 0 and sleeps[1] <= 0.2)
      assert.is_true(sleeps[2] >= 0 and sleeps[2] <= 0.4)
    end)

    it("gives up after max_attempts with code Throttled and every detail in the message", function()
      local t = scripted { api_error(400, "Throttling", "Request was denied", "R-9") }
      local c = new_client(t, { max_attempts = 3 })
      local body, err = c:call("ecs", "DescribeInstances", {})
      assert.is_nil(body)
      assert.equals(3, #t.requests)
      assert.equals("Throttled", err.code)
      assert.equals("Throttling", err.api_code)
      assert.equals("R-9", err.request_id)
      assert.equals(400, err.http_status)
      assert.equals("DescribeInstances", err.action)
      assert.is_true(err.retryable)
      assert.equals("DescribeInstances: Throttled (Throttling): Request was denied "
        .. "(RequestId R-9, HTTP 400, after 3 attempts)", err.message)
    end)

    it("retries 5xx and lost answers for reads and ClientToken calls, not for other mutations", function()
      local t = scripted { { status = 500, body = { Code = "InternalError", RequestId = "x" } } }
      local c = new_client(t)
      local _, err = c:call("ecs", "DeleteInstances", { InstanceId = { "i-1" } })
      assert.equals(1, #t.requests)
      assert.equals("InternalError", err.code)
      assert.is_false(err.retryable)

      t = scripted { { status = 502, body = "<html>bad gateway</html>" }, { body = { RequestId = "y" } } }
      assert(new_client(t):call("ecs", "RunInstances", { ClientToken = "tok" }))
      assert.equals(2, #t.requests)

      t = scripted { { fail = "POST http://127.0.0.1:9/: reset", code = "Transport" }, { body = { RequestId = "z" } } }
      assert(new_client(t):call("ecs", "DescribeInstances", {}))
      assert.equals(2, #t.requests)

      t = scripted { { fail = "POST http://127.0.0.1:9/: timed out", code = "Timeout" } }
      local _, terr = new_client(t):call("ecs", "StopInstance", { InstanceId = "i-1" })
      assert.equals(1, #t.requests)
      assert.equals("Transport", terr.code)
      assert.matches("StopInstance: Transport: .*timed out %[Timeout%]", terr.message)
    end)

    it("maps NoStock-class codes to InsufficientCapacity without retrying", function()
      for _, code in ipairs({ "OperationDenied.NoStock", "Zone.NotOnSale", "InvalidResourceType.NotSupported" }) do
        local t = scripted { { status = 403, body = { Code = code, Message = "sold out", RequestId = "n" } } }
        local _, err = new_client(t):call("ecs", "RunInstances", { ClientToken = "c" })
        assert.equals(1, #t.requests)
        assert.equals("InsufficientCapacity", err.code)
        assert.equals(code, err.api_code)
      end
    end)

    it("maps InvalidInstanceId.NotFound to NotFound and auth codes to Auth", function()
      local t = scripted { api_error(404, "InvalidInstanceId.NotFound", "gone", "q") }
      local _, err = new_client(t):call("ecs", "DeleteInstance", { InstanceId = "i-1" })
      assert.equals("NotFound", err.code)
      for _, code in ipairs({ "SignatureDoesNotMatch", "InvalidAccessKeyId.NotFound", "Forbidden.RAM",
        "InvalidSecurityToken.Malformed" }) do
        t = scripted { { status = 400, body = { Code = code, Message = "no", RequestId = "a-1" } } }
        local _, aerr = new_client(t):call("ecs", "DescribeRegions", {})
        assert.equals("Auth", aerr.code, code)
        assert.equals(1, #t.requests)
        assert.matches("RequestId a%-1", aerr.message)
      end
    end)

    it("keeps other API codes as they are", function()
      local t = scripted { api_error(400, "InvalidParameter.Mismatch", "m", "p") }
      local _, err = new_client(t):call("ecs", "RunInstances", {})
      assert.equals("InvalidParameter.Mismatch", err.code)
    end)

    it("reports a body that is not JSON as InvalidResponse naming the action and HTTP status", function()
      local t = scripted { { status = 200, body = "{not json" } }
      local _, err = new_client(t, { max_attempts = 2 }):call("ecs", "DescribeInstances", {})
      assert.equals("InvalidResponse", err.code)
      assert.equals(200, err.http_status)
      assert.matches("^DescribeInstances: InvalidResponse: .*HTTP 200", err.message)
      t = scripted { { status = 200, body = "[1,2]" } }
      assert.equals("InvalidResponse", select(2, new_client(t):call("ecs", "RunInstances", {})).code)
    end)

    it("never puts the secret or the token in an error, even when the server quotes them", function()
      local quoted = "Specified signature is not matched with our calculation. server string to sign is:POST&%2F&"
        .. signer.percent_encode(signer.percent_encode("SecurityToken=" .. TOKEN)) .. " key " .. SK
      local t = scripted { api_error(400, "SignatureDoesNotMatch", quoted, "s") }
      local c = new_client(t, { signature = "v2",
        credentials = { access_key_id = AK, access_key_secret = SK, security_token = TOKEN } })
      local _, err = c:call("ecs", "DescribeRegions", {})
      assert.equals("Auth", err.code)
      assert.is_nil(err.message:find(SK, 1, true))
      assert.is_nil(err.message:find(TOKEN, 1, true))
      assert.is_nil(err.message:find(signer.percent_encode(signer.percent_encode(TOKEN)), 1, true))
      assert.truthy(err.message:find("[redacted]", 1, true))
    end)

    it("refreshes credentials once when the server says the token expired", function()
      local invalidated = 0
      local provider = {
        get = function() return { access_key_id = AK, access_key_secret = SK, security_token = "t" .. invalidated } end,
        invalidate = function() invalidated = invalidated + 1 end,
      }
      local t = scripted { { status = 400, body = { Code = "InvalidSecurityToken.Expired", RequestId = "e" } },
        { body = { RequestId = "ok" } } }
      assert(new_client(t, { credentials = provider }):call("ecs", "DescribeRegions", {}))
      assert.equals(1, invalidated)
      assert.equals("t1", t.requests[2].headers["x-acs-security-token"])
    end)

    it("passes a credentials failure through with its class", function()
      local provider = { get = function()
        return nil, { code = "Credentials", message = "no Alibaba Cloud credentials" }
      end }
      local t = scripted { { body = {} } }
      local _, err = new_client(t, { credentials = provider }):call("ecs", "DescribeRegions", {})
      assert.equals(0, #t.requests)
      assert.equals("Credentials", err.code)
      assert.matches("^DescribeRegions: credentials: no Alibaba Cloud credentials", err.message)
    end)
  end)

  describe("paginate", function()
    local function pages(style)
      return function(req)
        local q = parse_query(req.url)
        local n = style == "NextToken" and tonumber((q.NextToken or "t0"):match("%d+")) + 1 or tonumber(q.PageNumber)
        local size = tonumber(q.MaxResults or q.PageSize)
        local items = {}
        for i = (n - 1) * size + 1, math.min(n * size, 25) do items[#items + 1] = { Id = i } end
        return { status = 200, headers = {}, body = json.encode({ RequestId = "p" .. n, TotalCount = 25,
          NextToken = (style == "NextToken" and n * size < 25) and ("t" .. n) or "",
          Things = { Thing = setmetatable(items, json.array_mt) } }) }
      end
    end

    it("follows NextToken until it is empty", function()
      local t = scripted { pages("NextToken") }
      local items = assert(new_client(t):paginate("ecs", "DescribeThings", { RegionId = "r" },
        { list = "Things.Thing", style = "NextToken", page_size = 10 }))
      assert.equals(25, #items)
      assert.equals(25, items[25].Id)
      assert.equals(3, #t.requests)
      assert.equals("t2", parse_query(t.requests[3].url).NextToken)
    end)

    it("walks PageNumber until TotalCount is reached", function()
      local t = scripted { pages("PageNumber") }
      local items = assert(new_client(t):paginate("vpc", "DescribeThings", {},
        { list = "Things.Thing", style = "PageNumber", page_size = 10 }))
      assert.equals(25, #items)
      assert.equals(3, #t.requests)
    end)

    it("returns an empty array for no items and stops on a repeated token", function()
      local t = scripted { { body = { RequestId = "e" } } }
      local items = assert(new_client(t):paginate("ecs", "DescribeThings", {}, { list = "Things.Thing" }))
      assert.equals("[]", json.encode(items))
      t = scripted { { body = { RequestId = "l", NextToken = "same", Things = { Thing = { { Id = 1 } } } } } }
      local _, err = new_client(t):paginate("ecs", "DescribeThings", {}, { list = "Things.Thing" })
      assert.equals("InvalidResponse", err.code)
    end)
  end)
end)

describe("alibaba client against the simulator", function()
  local simulator = dofile((os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/alibaba/simulator.lua")
  local auth = require "sim.alibaba.auth"
  local sim

  setup(function() sim = simulator.start() end)
  teardown(function() if sim then sim:stop() end end)
  before_each(function() sim:reset() end)

  local function sim_client(extra)
    local cfg = { region = "cn-hangzhou", endpoint = sim.url, backoff_base = 0.01,
      credentials = { access_key_id = auth.DEFAULT_ACCESS_KEY_ID, access_key_secret = auth.DEFAULT_ACCESS_KEY_SECRET } }
    for k, v in pairs(extra or {}) do cfg[k] = v end
    return client.new(cfg)
  end

  it("calls ECS, VPC and STS with V3 and V2 signatures", function()
    for _, scheme in ipairs({ "v3", "v2" }) do
      local c = sim_client { signature = scheme }
      local regions = assert(c:call("ecs", "DescribeRegions", {}))
      assert.equals("cn-hangzhou", regions.Regions.Region[1].RegionId)
      assert.is_string(regions.RequestId)
      local vswitches = assert(c:call("vpc", "DescribeVSwitches", { RegionId = "cn-hangzhou", PageSize = 50 }))
      assert.is_true(#vswitches.VSwitches.VSwitch > 0)
      local me = assert(c:call("sts", "GetCallerIdentity", {}))
      assert.matches(":user/", me.Arn)
    end
  end)

  it("paginates with NextToken and with PageNumber, with the calls the page sizes imply", function()
    local c = sim_client()
    local all = assert(c:paginate("ecs", "DescribeInstanceTypes", {},
      { list = "InstanceTypes.InstanceType", style = "NextToken", page_size = 100 }))
    local calls = sim:state().calls.DescribeInstanceTypes
    local small = assert(c:paginate("ecs", "DescribeInstanceTypes", {},
      { list = "InstanceTypes.InstanceType", style = "NextToken", page_size = 10 }))
    assert.is_true(#all > 10)
    assert.equals(#all, #small)
    assert.equals(all[#all].InstanceTypeId, small[#small].InstanceTypeId)
    assert.equals(math.ceil(#all / 10), sim:state().calls.DescribeInstanceTypes - calls)

    local images = assert(c:paginate("ecs", "DescribeImages", { RegionId = "cn-hangzhou" },
      { list = "Images.Image", style = "PageNumber", page_size = 2 }))
    assert.is_true(#images >= 3)
    assert.equals(math.ceil(#images / 2), sim:state().calls.DescribeImages)
  end)

  it("retries throttling until it passes", function()
    sim:fault { action = "DescribeRegions", kind = "throttle", count = 2 }
    assert(sim_client():call("ecs", "DescribeRegions", {}))
    assert.equals(3, sim:state().calls.DescribeRegions)
  end)

  it("retries a 5xx, and gives up after max_attempts with the last RequestId", function()
    sim:fault { action = "DescribeZones", kind = "5xx", status = 503, count = 1 }
    assert(sim_client():call("ecs", "DescribeZones", { RegionId = "cn-hangzhou" }))
    assert.equals(2, sim:state().calls.DescribeZones)

    sim:fault { action = "DescribeZones", kind = "5xx" }
    local _, err = sim_client({ max_attempts = 3 }):call("ecs", "DescribeZones", { RegionId = "cn-hangzhou" })
    assert.equals("InternalError", err.code)
    assert.equals(500, err.http_status)
    assert.is_string(err.request_id)
    assert.truthy(err.message:find("RequestId " .. err.request_id, 1, true))
    assert.equals(5, sim:state().calls.DescribeZones)
  end)

  it("reports a malformed body as InvalidResponse naming the action and the HTTP status", function()
    sim:fault { action = "DescribeRegions", kind = "malformed" }
    local _, err = sim_client({ max_attempts = 2 }):call("ecs", "DescribeRegions", {})
    assert.equals("InvalidResponse", err.code)
    assert.equals("DescribeRegions", err.action)
    assert.equals(200, err.http_status)
    assert.matches("^DescribeRegions: InvalidResponse: .*HTTP 200", err.message)
  end)

  it("maps a released instance to NotFound", function()
    local _, err = sim_client():call("ecs", "DeleteInstance", { InstanceId = "i-bp1doesnotexist0000" })
    assert.equals("NotFound", err.code)
    assert.equals("InvalidInstanceId.NotFound", err.api_code)
    assert.equals(404, err.http_status)
  end)

  it("reports a wrong secret as Auth with the RequestId, and never echoes the secret", function()
    for _, scheme in ipairs({ "v3", "v2" }) do
      local c = sim_client { signature = scheme,
        credentials = { access_key_id = auth.DEFAULT_ACCESS_KEY_ID, access_key_secret = "wrong-secret-value" } }
      local _, err = c:call("ecs", "DescribeRegions", {})
      assert.equals("Auth", err.code, scheme)
      assert.equals("SignatureDoesNotMatch", err.api_code)
      assert.is_string(err.request_id)
      assert.truthy(err.message:find("DescribeRegions: Auth (SignatureDoesNotMatch): ", 1, true))
      assert.truthy(err.message:find("RequestId " .. err.request_id, 1, true))
      assert.is_nil(err.message:find("wrong-secret-value", 1, true))
      assert.equals(scheme == "v3" and 1 or 2, sim:state().calls.DescribeRegions) -- not retried
    end
  end)

  it("throttled fault rules keep serving other actions", function()
    sim:fault { action = "DescribeRegions", kind = "throttle" }
    local _, err = sim_client({ max_attempts = 2 }):call("ecs", "DescribeRegions", {})
    assert.equals("Throttled", err.code)
    assert(sim_client():call("ecs", "DescribeZones", { RegionId = "cn-hangzhou" }))
  end)
end)
