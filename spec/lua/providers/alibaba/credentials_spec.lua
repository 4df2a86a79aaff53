-- Alibaba credential chain: source order, RRSA and ECS RAM-role flows, refresh before expiry and
-- the errors, first with an injected environment, clock and transport, then against the Alibaba
-- simulator over real HTTP (subprocesses where the real environment and luaprov.fs must be used).
local credentials = require "providers.alibaba.credentials"
local luaprov = require "luaprov"
local json, time = luaprov.json, luaprov.time

local function env_of(vars)
  return function(name) return vars[name] end
end

local function decode_component(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function form(s)
  local out = {}
  for pair in (s or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    out[decode_component(k)] = decode_component(v)
  end
  return out
end

-- Fake STS and metadata service: issues numbered credentials valid for `life` seconds of `clock`.
local function fake_cloud(clock, life)
  local f = { calls = {}, sts = 0, imds = 0 }
  f.transport = function(req)
    f.calls[#f.calls + 1] = req
    local function answer(status, body)
      return { status = status, headers = {}, body = type(body) == "table" and json.encode(body) or body }
    end
    if req.url:find("Action=AssumeRoleWithOIDC", 1, true) then
      f.sts = f.sts + 1
      f.last_form = form(req.body)
      if f.last_form.OIDCToken ~= "jwt-token" then
        return answer(400, { Code = "InvalidParameter.OIDCToken", Message = "bad token", RequestId = "sts-bad" })
      end
      return answer(200, { RequestId = "sts-" .. f.sts, Credentials = { AccessKeyId = "STS.id" .. f.sts,
        AccessKeySecret = "sts-secret-" .. f.sts, SecurityToken = "sts-token-" .. f.sts,
        Expiration = time.iso8601(clock() + life) } })
    end
    if req.url:find("/latest/api/token$") then
      assert.equals("PUT", req.method)
      return answer(200, "imds-session-token")
    end
    if req.url:find("/security%-credentials/$") then return answer(200, "node-role\n") end
    if req.url:find("/security%-credentials/node%-role$") then
      assert.equals("imds-session-token", req.headers["X-aliyun-ecs-metadata-token"])
      f.imds = f.imds + 1
      return answer(200, { Code = "Success", AccessKeyId = "STS.role" .. f.imds, AccessKeySecret = "role-secret",
        SecurityToken = "role-token", Expiration = time.iso8601(clock() + life), LastUpdated = "x" })
    end
    return nil, "no route to " .. req.url, "ConnectFailed"
  end
  return f
end

local RRSA = {
  ALIBABA_CLOUD_ROLE_ARN = "acs:ram::123:role/karpenter",
  ALIBABA_CLOUD_OIDC_PROVIDER_ARN = "acs:ram::123:oidc-provider/ack-rrsa-c1",
  ALIBABA_CLOUD_OIDC_TOKEN_FILE = "/var/run/secrets/ack.alibabacloud.com/rrsa-tokens/token",
}

describe("alibaba credentials", function()
  local now, clock
  before_each(function()
    now = 1800000000
    clock = function() return now end
  end)

  local function chain(vars, cloud, extra)
    local opts = { env = env_of(vars), clock = clock, cache = {}, transport = cloud and cloud.transport,
      sleep = function() end,
      endpoint = "http://sim.invalid:1", read_file = function(path)
        if path == RRSA.ALIBABA_CLOUD_OIDC_TOKEN_FILE then return "jwt-token\n" end
        return nil, path .. " is not readable by scripts", "Forbidden"
      end }
    for k, v in pairs(extra or {}) do opts[k] = v end
    return credentials.chain(opts)
  end

  it("prefers the environment AccessKey, with an optional STS token", function()
    local vars = { ALIBABA_CLOUD_ACCESS_KEY_ID = "id", ALIBABA_CLOUD_ACCESS_KEY_SECRET = "sec" }
    for k, v in pairs(RRSA) do vars[k] = v end
    local c = assert(chain(vars):get())
    assert.same({ access_key_id = "id", access_key_secret = "sec", source = "env" }, c)
    vars.ALIBABA_CLOUD_SECURITY_TOKEN = "tok"
    assert.equals("tok", chain(vars):get().security_token)
  end)

  it("names the missing half of an AccessKey or of RRSA", function()
    local _, err = chain({ ALIBABA_CLOUD_ACCESS_KEY_ID = "id" }):get()
    assert.equals("Credentials", err.code)
    assert.equals("ALIBABA_CLOUD_ACCESS_KEY_ID is set but ALIBABA_CLOUD_ACCESS_KEY_SECRET is not", err.message)
    _, err = chain({ ALIBABA_CLOUD_ROLE_ARN = "r" }):get()
    assert.matches("ALIBABA_CLOUD_OIDC_PROVIDER_ARN, ALIBABA_CLOUD_OIDC_TOKEN_FILE not set", err.message)
  end)

  it("exchanges the OIDC token with an anonymous AssumeRoleWithOIDC and caches the result", function()
    local cloud = fake_cloud(clock, 3600)
    local p = chain(RRSA, cloud)
    local c = assert(p:get())
    assert.equals("STS.id1", c.access_key_id)
    assert.equals("sts-token-1", c.security_token)
    assert.equals("rrsa", c.source)
    assert.equals(RRSA.ALIBABA_CLOUD_ROLE_ARN, cloud.last_form.RoleArn)
    assert.equals(RRSA.ALIBABA_CLOUD_OIDC_PROVIDER_ARN, cloud.last_form.OIDCProviderArn)
    assert.equals("jwt-token", cloud.last_form.OIDCToken)
    assert.matches("^luaprov%-", cloud.last_form.RoleSessionName)
    assert.equals("3600", cloud.last_form.DurationSeconds)
    assert.is_nil(cloud.calls[1].headers.Authorization)
    assert.equals("http://sim.invalid:1/", cloud.calls[1].url:match("^[^?]*"))
    now = now + 3000
    assert.equals("STS.id1", p:get().access_key_id)
    assert.equals(1, cloud.sts)
  end)

  it("refreshes 5 minutes before expiry, and keeps the old keys while a refresh fails", function()
    local cloud = fake_cloud(clock, 3600)
    local p = chain(RRSA, cloud)
    assert.equals("STS.id1", p:get().access_key_id)
    now = now + 3600 - 301
    assert.equals("STS.id1", p:get().access_key_id)
    now = now + 2
    assert.equals("STS.id2", p:get().access_key_id)
    assert.equals(2, cloud.sts)
    local down = function() return nil, "down", "ConnectFailed" end
    local broken = chain(RRSA, cloud, { cache = p.cache, transport = down })
    now = now + 3600 - 200
    assert.equals("STS.id2", broken:get().access_key_id)
    now = now + 300
    local _, err = broken:get()
    assert.equals("Transport", err.code)
    assert.matches("^RRSA: AssumeRoleWithOIDC: Transport", err.message)
  end)

  it("reports an STS refusal with its code and request id, and an unreadable token file", function()
    local cloud = fake_cloud(clock, 3600)
    local p = chain(RRSA, cloud, { read_file = function() return "other-token" end })
    local _, err = p:get()
    assert.equals("InvalidParameter.OIDCToken", err.code)
    assert.equals("sts-bad", err.request_id)
    assert.matches("RequestId sts%-bad", err.message)
    _, err = chain(RRSA, cloud, { read_file = function(path) return nil, path .. " is not readable", "Forbidden" end })
      :get()
    assert.equals("Credentials", err.code)
    assert.matches("LUAPROV_READABLE_PATHS", err.message)
  end)

  it("reads the ECS RAM role from the metadata service with an IMDSv2 token", function()
    local cloud = fake_cloud(clock, 21600)
    local p = chain({ LUAPROV_ALIBABA_METADATA_ENDPOINT = "http://meta.invalid/" }, cloud)
    local c = assert(p:get())
    assert.equals("STS.role1", c.access_key_id)
    assert.equals("role-token", c.security_token)
    assert.equals("ecs_ram_role", c.source)
    assert.equals("http://meta.invalid/latest/api/token", cloud.calls[1].url)
    assert.equals("21600", cloud.calls[1].headers["X-aliyun-ecs-metadata-token-ttl-seconds"])
    assert.equals(1, cloud.imds)
    p:get()
    assert.equals(1, cloud.imds)
    now = now + 21600
    assert.equals("STS.role2", p:get().access_key_id)
  end)

  it("uses the configured role name without discovering it", function()
    local cloud = fake_cloud(clock, 3600)
    local vars = { LUAPROV_ALIBABA_METADATA_ENDPOINT = "http://meta.invalid", ALIBABA_CLOUD_ECS_METADATA = "node-role" }
    assert(chain(vars, cloud):get())
    for _, req in ipairs(cloud.calls) do assert.is_nil(req.url:find("/security%-credentials/$")) end
  end)

  it("says which variables to set when no source is configured, and asks the metadata service once", function()
    local calls = 0
    local p = chain({}, nil, { transport = function() calls = calls + 1; return nil, "connect timeout", "Timeout" end })
    local _, err = p:get()
    assert.equals("Credentials", err.code)
    assert.matches("^no Alibaba Cloud credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET",
      err.message)
    assert.matches("ALIBABA_CLOUD_OIDC_TOKEN_FILE", err.message)
    local before = calls
    assert.equals(err.message, select(2, p:get()).message)
    assert.equals(before, calls)
    _, err = chain({ ALIBABA_CLOUD_ECS_METADATA_DISABLED = "true" }):get()
    assert.matches("^no Alibaba Cloud credentials", err.message)
  end)

  it("static providers hand out their keys", function()
    assert.equals("k", credentials.static({ access_key_id = "k", access_key_secret = "s" }):get().access_key_id)
  end)
end)

describe("alibaba credentials against the simulator", function()
  local simulator = dofile((os.getenv("LUAPROV_SOURCE_DIR") or ".") .. "/spec/fixtures/alibaba/simulator.lua")
  local client = require "providers.alibaba.client"
  local account = require "sim.alibaba.account"
  local role_arn = "acs:ram::" .. account.ACCOUNT_ID .. ":role/karpenter"
  local provider_arn = "acs:ram::" .. account.ACCOUNT_ID .. ":oidc-provider/ack-rrsa-c1"
  local sim, token

  setup(function()
    sim = simulator.start()
    token = simulator.oidc_token()
  end)
  teardown(function() if sim then sim:stop() end end)
  before_each(function() sim:reset() end)

  local function rrsa_env()
    return { ALIBABA_CLOUD_ROLE_ARN = role_arn, ALIBABA_CLOUD_OIDC_PROVIDER_ARN = provider_arn,
      ALIBABA_CLOUD_OIDC_TOKEN_FILE = "/var/run/secrets/ack.alibabacloud.com/rrsa-tokens/token" }
  end

  -- A chain against the simulator with a private cache and a clock that can be moved with the sim's.
  local function sim_chain(vars, offset)
    return credentials.chain { env = env_of(vars), endpoint = sim.url, cache = {}, sleep = function() end,
      read_file = function() return token .. "\n" end,
      clock = function() return time.now() + (offset and offset[1] or 0) end }
  end

  local function whoami(provider, scheme)
    local c = client.new { region = "cn-hangzhou", endpoint = sim.url, credentials = provider, signature = scheme }
    return c:call("sts", "GetCallerIdentity", {})
  end

  it("RRSA: exchanges the OIDC token and signs V3 and V2 calls with the STS triple", function()
    local p = sim_chain(rrsa_env())
    for _, scheme in ipairs({ "v3", "v2" }) do
      local me = assert(whoami(p, scheme))
      assert.equals("AssumedRoleUser", me.IdentityType)
      assert.matches(":assumed%-role/karpenter/luaprov%-", me.Arn)
    end
    assert.matches("^STS%.", p:get().access_key_id)
    assert.equals(1, sim:state().calls.AssumeRoleWithOIDC)
  end)

  it("ECS RAM role: reads the role's credentials from the metadata paths", function()
    local p = sim_chain({ LUAPROV_ALIBABA_METADATA_ENDPOINT = sim.url })
    local me = assert(whoami(p))
    assert.matches(":assumed%-role/luaprov%-sim%-node/ecs%-instance$", me.Arn)
    assert.equals("ecs_ram_role", p:get().source)
  end)

  it("refreshes the STS credentials before they expire in simulated time", function()
    local offset = { 0 }
    local p = sim_chain(rrsa_env(), offset)
    local first = assert(p:get()).access_key_id
    assert(whoami(p))
    -- 3400 s later: 200 s left, inside the 5 minute margin.
    sim:advance(3400)
    offset[1] = 3400
    assert(whoami(p))
    local second = p:get().access_key_id
    assert.are_not.equal(first, second)
    assert.equals(2, sim:state().calls.AssumeRoleWithOIDC)
    -- Past the first credential's expiry: the refreshed one still works, with no further exchange.
    sim:advance(400)
    offset[1] = 3800
    assert(whoami(p))
    assert.equals(2, sim:state().calls.AssumeRoleWithOIDC)
  end)

  it("exchanges again once when the server says the token expired (clocks apart)", function()
    local p = sim_chain(rrsa_env())
    assert(whoami(p))
    sim:advance(3700)
    assert(whoami(p))
    assert.equals(2, sim:state().calls.AssumeRoleWithOIDC)
    assert.equals(1, sim:state().errors.GetCallerIdentity)
  end)

  it("reports a refused exchange with the STS code and RequestId", function()
    local p = credentials.chain { env = env_of(rrsa_env()), endpoint = sim.url, cache = {},
      read_file = function() return "not-a-jwt" end }
    local _, err = whoami(p)
    assert.equals("Auth", err.code)
    assert.equals("AuthenticationFail.OIDCToken.Invalid", err.api_code)
    assert.is_string(err.request_id)
    assert.truthy(err.message:find(
      "GetCallerIdentity: credentials: RRSA: AssumeRoleWithOIDC: Auth (AuthenticationFail.OIDCToken.Invalid)", 1, true))
  end)

  describe("in a subprocess with the real environment", function()
    local dir
    before_each(function()
      dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. dir))
      local f = assert(io.open(dir .. "/token", "w"))
      f:write(token)
      f:close()
    end)
    after_each(function() os.execute("rm -rf " .. dir) end)

    -- Calls through session.client as the mapping does, prints the secrets it used on stdout (so the
    -- test knows what must not appear) and lets luaprov.log write debug lines to stderr.
    local SCRIPT = [[
      local luaprov = require "luaprov"
      local session = require "providers.alibaba.session"
      local c = assert(session.client { region = "cn-hangzhou", cluster_id = "c-1" })
      assert(session.client { region = "cn-hangzhou" } == c, "one client per region, endpoint and scheme")
      local me = assert(c:call("sts", "GetCallerIdentity", {}))
      assert(c:call("ecs", "DescribeRegions", {}))
      local _, err = c:call("ecs", "DeleteInstance", { InstanceId = "i-bp1gone" })
      local creds = assert(c.credentials:get())
      print(luaprov.json.encode { arn = me.Arn, secret = creds.access_key_secret, token = creds.security_token,
        error = err.message, signature = c.signature })
    ]]

    local function run(env)
      local stdout, stderr, ok = simulator.run_lua(SCRIPT, simulator.env(env))
      assert(ok, stdout .. stderr)
      return assert(json.decode(stdout)), stderr
    end

    it("RRSA reads the token file through luaprov.fs under LUAPROV_READABLE_PATHS", function()
      for _, scheme in ipairs({ "v3", "v2" }) do
        local out, stderr = run {
          LUAPROV_ALIBABA_ENDPOINT = sim.url, LUAPROV_ALIBABA_SIGNATURE = scheme, LUAPROV_READABLE_PATHS = dir,
          LUAPROV_LOG_LEVEL = "debug", LUAPROV_LOG_FORMAT = "json",
          ALIBABA_CLOUD_ROLE_ARN = role_arn, ALIBABA_CLOUD_OIDC_PROVIDER_ARN = provider_arn,
          ALIBABA_CLOUD_OIDC_TOKEN_FILE = dir .. "/token",
        }
        assert.equals(scheme, out.signature)
        assert.matches(":assumed%-role/karpenter/", out.arn)
        assert.matches("^DeleteInstance: NotFound", out.error)
        -- Debug lines name the action, attempt and request id ...
        assert.truthy(stderr:find('"msg":"alibaba call"', 1, true))
        assert.truthy(stderr:find('"action":"GetCallerIdentity"', 1, true))
        assert.truthy(stderr:find('"request_id":"', 1, true))
        assert.truthy(stderr:find('"attempt":1', 1, true))
        -- ... and no line holds a secret, the STS token, or the OIDC token.
        for _, secret in ipairs({ out.secret, out.token, token }) do
          assert.is_nil(stderr:find(secret, 1, true))
          assert.is_nil(out.error:find(secret, 1, true))
        end
      end
    end)

    it("environment AccessKeys never reach the log", function()
      local out, stderr = run {
        LUAPROV_ALIBABA_ENDPOINT = sim.url, LUAPROV_LOG_LEVEL = "debug",
        ALIBABA_CLOUD_ACCESS_KEY_ID = "LTAI5simulatoraccess",
        ALIBABA_CLOUD_ACCESS_KEY_SECRET = "simulator-secret-do-not-use",
      }
      assert.matches(":user/luaprov%-sim$", out.arn)
      assert.truthy(stderr:find("alibaba call", 1, true))
      assert.is_nil(stderr:find("simulator-secret-do-not-use", 1, true))
    end)

    it("without LUAPROV_READABLE_PATHS the token file is refused with a hint", function()
      local script = [[
        local session = require "providers.alibaba.session"
        local c = assert(session.client { region = "cn-hangzhou" })
        local _, err = c:call("ecs", "DescribeRegions", {})
        print(err.code .. " " .. err.message)
      ]]
      local stdout = simulator.run_lua(script, simulator.env {
        LUAPROV_ALIBABA_ENDPOINT = sim.url, LUAPROV_READABLE_PATHS = false,
        ALIBABA_CLOUD_ROLE_ARN = role_arn, ALIBABA_CLOUD_OIDC_PROVIDER_ARN = provider_arn,
        ALIBABA_CLOUD_OIDC_TOKEN_FILE = dir .. "/token",
      })
      assert.matches("^Credentials DescribeRegions: credentials: RRSA: cannot read the OIDC token file", stdout)
      assert.matches("LUAPROV_READABLE_PATHS", stdout)
    end)
  end)
end)
