-- The Alibaba simulator's gate: both signature schemes verified with the provider's signer, the real
-- error codes for bad signatures, unknown keys, replays and stale timestamps, and the credentials STS
-- and the metadata service hand out (valid for an hour of simulated time).
local luaprov = require "luaprov"
local signer = require "providers.alibaba.signer"
local s = require "sim.alibaba_support"

local REGION = { RegionId = "cn-hangzhou" }
local ROLE = "acs:ram::1234567890123456:role/karpenter"
local PROVIDER = "acs:ram::1234567890123456:oidc-provider/ack-rrsa-c-sim"

describe("alibaba simulator: authentication", function()
  local sim

  setup(function() sim = s.start() end)
  teardown(function() if sim then sim.stop() end end)
  before_each(function() s.reset(sim) end)

  local function oidc(params)
    local p = { RoleArn = ROLE, OIDCProviderArn = PROVIDER, RoleSessionName = "karpenter",
      OIDCToken = s.jwt({ iss = "https://oidc-ack.cn-hangzhou.aliyuncs.com/c-sim", aud = "sts.aliyuncs.com",
        sub = "system:serviceaccount:karpenter:karpenter", exp = 4102444800, iat = 1700000000 }) }
    for k, v in pairs(params or {}) do p[k] = v end
    -- Anonymous, as credentials-go calls it: Action/Version in the query, the rest in a form body.
    return s.call(sim, "sts", "AssumeRoleWithOIDC", p, { scheme = "v2", cred = {}, form = true })
  end

  describe("signatures", function()
    it("accepts a V3 (ACS3-HMAC-SHA256) request", function()
      local body = s.ok(sim, "ecs", "DescribeRegions", REGION)
      assert.equals("cn-hangzhou", body.Regions.Region[1].RegionId)
      assert.matches("^%x+%-%x+%-%x+%-%x+%-%x+$", body.RequestId)
    end)

    it("accepts a V2 (HMAC-SHA1) request in the query, by GET and by POST, and in a form body", function()
      s.ok(sim, "ecs", "DescribeRegions", REGION, { scheme = "v2" })
      s.ok(sim, "ecs", "DescribeRegions", REGION, { scheme = "v2", method = "POST" })
      s.ok(sim, "ecs", "DescribeRegions", REGION, { scheme = "v2", form = true })
    end)

    it("answers SignatureDoesNotMatch (400) with the server's V2 string to sign", function()
      local params = { RegionId = "cn-hangzhou", Action = "DescribeRegions", Version = "2014-05-26", Format = "JSON",
        AccessKeyId = s.ACCESS_KEY_ID, SignatureMethod = "HMAC-SHA1", SignatureVersion = "1.0",
        SignatureNonce = luaprov.crypto.random_hex(16), Timestamp = luaprov.time.iso8601() }
      local _, string_to_sign = signer.rpc_signature("GET", params, "wrong-secret")
      local status, body = s.call(sim, "ecs", "DescribeRegions", REGION, { scheme = "v2", nonce = params.SignatureNonce,
        date = params.Timestamp, cred = { id = s.ACCESS_KEY_ID, secret = "wrong-secret" } })
      assert.equals(400, status)
      assert.equals("SignatureDoesNotMatch", body.Code)
      -- Same canonical form, different secret: the strings to sign agree (how SDKs diagnose a bad secret).
      assert.equals("Specified signature is not matched with our calculation. server string to sign is:"
        .. string_to_sign, body.Message)
      assert.equals("ecs.cn-hangzhou.aliyuncs.com", body.HostId)
      assert.truthy(body.Recommend:find("SignatureDoesNotMatch", 1, true))
    end)

    it("answers SignatureDoesNotMatch for a V3 request with a wrong secret or a changed query", function()
      local status, body = s.call(sim, "ecs", "DescribeRegions", REGION,
        { cred = { id = s.ACCESS_KEY_ID, secret = "nope" } })
      assert.equals(400, status)
      assert.equals("SignatureDoesNotMatch", body.Code)
      assert.matches("server string to sign is:ACS3%-HMAC%-SHA256\n%x+$", body.Message)
      status, body = s.call(sim, "ecs", "DescribeRegions", REGION,
        { tamper = function(req) req.url = req.url .. "&AcceptLanguage=en-US" end })
      assert.equals(400, status)
      assert.equals("SignatureDoesNotMatch", body.Code)
    end)

    it("answers InvalidAccessKeyId.NotFound (404) for an unknown key", function()
      for _, scheme in ipairs({ "v3", "v2" }) do
        local status, body = s.call(sim, "ecs", "DescribeRegions", REGION,
          { scheme = scheme, cred = { id = "LTAI5unknown", secret = "x" } })
        assert.equals(404, status)
        assert.equals("InvalidAccessKeyId.NotFound", body.Code)
        assert.equals("Specified access key is not found.", body.Message)
      end
    end)

    it("answers SignatureNonceUsed for a replayed nonce, in both schemes", function()
      for _, scheme in ipairs({ "v3", "v2" }) do
        local nonce = luaprov.crypto.random_hex(16)
        s.ok(sim, "ecs", "DescribeRegions", REGION, { scheme = scheme, nonce = nonce })
        local status, body = s.call(sim, "ecs", "DescribeRegions", REGION, { scheme = scheme, nonce = nonce })
        assert.equals(400, status)
        assert.equals("SignatureNonceUsed", body.Code)
        assert.equals("Specified signature nonce was used already.", body.Message)
      end
    end)

    it("refuses a timestamp more than 15 minutes off, and a malformed one", function()
      local stale = luaprov.time.iso8601(luaprov.time.now() - 16 * 60)
      for _, scheme in ipairs({ "v3", "v2" }) do
        local status, body = s.call(sim, "ecs", "DescribeRegions", REGION, { scheme = scheme, date = stale })
        assert.equals(400, status)
        assert.equals("InvalidTimeStamp.Expired", body.Code)
      end
      local status, body = s.call(sim, "ecs", "DescribeRegions", REGION, { date = "2026-01-01 00:00:00" })
      assert.equals(400, status)
      assert.equals("InvalidTimeStamp.Format", body.Code)
    end)

    it("answers MissingAccessKeyId for an unsigned call, and IncompleteSignature for a mangled header", function()
      local status, body = s.call(sim, "ecs", "DescribeRegions", REGION, { scheme = "v2", cred = {} })
      assert.equals(400, status)
      assert.equals("MissingAccessKeyId", body.Code)
      assert.equals("AccessKeyId is mandatory for this action.", body.Message)
      status, body = s.call(sim, "ecs", "DescribeRegions", REGION,
        { tamper = function(req) req.headers.authorization = "ACS3-HMAC-SHA256 garbage" end })
      assert.equals(400, status)
      assert.equals("IncompleteSignature", body.Code)
    end)

    it("names unknown actions and versions with the gateway's codes", function()
      local status, body = s.call(sim, "ecs", "CreateAutoProvisioningGroup", REGION)
      assert.equals(404, status)
      assert.equals("InvalidAction.NotFound", body.Code)
      assert.equals("Specified api is not found, please check your url and method.", body.Message)
      status, body = s.call(sim, "ecs", "DescribeRegions", REGION,
        { tamper = function(req) req.headers["x-acs-version"] = "2099-01-01" end })
      assert.equals(400, status)
      assert.equals("InvalidVersion", body.Code)
    end)

    it("answers XML to a V2 client that did not ask for JSON, as the real default", function()
      local status, _, res = s.call(sim, "ecs", "DescribeRegions", REGION, { scheme = "v2", format = "XML" })
      assert.equals(200, status)
      assert.matches("^text/xml", res.headers["content-type"])
      assert.truthy(res.body:find("<DescribeRegionsResponse><Regions><Region>", 1, true))
      status, _, res = s.call(sim, "ecs", "DescribeRegions", REGION,
        { scheme = "v2", cred = { id = "LTAI5unknown", secret = "x" }, format = "XML" })
      assert.equals(404, status)
      assert.truthy(res.body:find("<Error>.*<Code>InvalidAccessKeyId.NotFound</Code>"))
    end)
  end)

  describe("STS", function()
    it("exchanges a well-formed OIDC token for credentials valid one simulated hour", function()
      local status, body = oidc()
      assert.equals(200, status)
      local c = body.Credentials
      assert.matches("^STS%.", c.AccessKeyId)
      assert.is_true(#c.AccessKeySecret > 20 and #c.SecurityToken > 100)
      local expires = assert(luaprov.time.parse_iso8601(c.Expiration))
      local _, st = s.admin(sim, "GET", "/_sim/state")
      assert.near(st.time.epoch + 3600, expires, 5)
      assert.equals("acs:ram::1234567890123456:assumed-role/karpenter/karpenter", body.AssumedRoleUser.Arn)
      assert.equals("system:serviceaccount:karpenter:karpenter", body.OIDCTokenInfo.Subject)
    end)

    it("lets the temporary credentials sign V3 and V2 calls, and tells who they are", function()
      local _, body = oidc()
      local c = body.Credentials
      local cred = { id = c.AccessKeyId, secret = c.AccessKeySecret, token = c.SecurityToken }
      s.ok(sim, "ecs", "DescribeRegions", REGION, { cred = cred })
      s.ok(sim, "vpc", "DescribeVSwitches", REGION, { cred = cred, scheme = "v2" })
      local who = s.ok(sim, "sts", "GetCallerIdentity", {}, { cred = cred })
      assert.equals("AssumedRoleUser", who.IdentityType)
      assert.equals("1234567890123456", who.AccountId)
      assert.matches(":karpenter$", who.PrincipalId)
      who = s.ok(sim, "sts", "GetCallerIdentity", {})
      assert.equals("RAMUser", who.IdentityType)
    end)

    it("requires the matching token, and expires it after an hour of simulated time", function()
      local _, body = oidc({ DurationSeconds = "3600" })
      local c = body.Credentials
      local status, err = s.call(sim, "ecs", "DescribeRegions", REGION,
        { cred = { id = c.AccessKeyId, secret = c.AccessKeySecret } })
      assert.equals(400, status)
      assert.equals("MissingSecurityToken", err.Code)
      status, err = s.call(sim, "ecs", "DescribeRegions", REGION,
        { cred = { id = c.AccessKeyId, secret = c.AccessKeySecret, token = "CAISwrong" } })
      assert.equals(400, status)
      assert.equals("InvalidSecurityToken.MismatchWithAccessKey", err.Code)
      assert.equals(200, (s.admin(sim, "POST", "/_sim/advance", { seconds = 3601 })))
      status, err = s.call(sim, "ecs", "DescribeRegions", REGION,
        { cred = { id = c.AccessKeyId, secret = c.AccessKeySecret, token = c.SecurityToken } })
      assert.equals(400, status)
      assert.equals("InvalidSecurityToken.Expired", err.Code)
      assert.equals("Specified SecurityToken is expired.", err.Message)
    end)

    it("refuses a token that is not a JWT, a role of another account, and missing parameters", function()
      local status, body = oidc({ OIDCToken = "not-a-jwt" })
      assert.equals(400, status)
      assert.equals("AuthenticationFail.OIDCToken.Invalid", body.Code)
      status, body = oidc({ RoleArn = "acs:ram::999:role/karpenter" })
      assert.equals(404, status)
      assert.equals("EntityNotExist.Role", body.Code)
      status, body = oidc({ RoleArn = "" })
      assert.equals(400, status)
      assert.equals("MissingParameter", body.Code)
      assert.matches('"RoleArn"', body.Message)
    end)

    it("serves AssumeRole to a signed caller", function()
      local body = s.ok(sim, "sts", "AssumeRole", { RoleArn = ROLE, RoleSessionName = "ops" })
      assert.matches("^STS%.", body.Credentials.AccessKeyId)
    end)
  end)

  describe("ECS metadata RAM role", function()
    it("names the role and serves its credentials, which sign API calls", function()
      local res = assert(luaprov.http.request { url = sim.url .. "/latest/meta-data/ram/security-credentials/" })
      assert.equals(200, res.status)
      local role = res.body
      assert.equals("luaprov-sim-node", role)
      res = assert(luaprov.http.request { url = sim.url .. "/latest/meta-data/ram/security-credentials/" .. role })
      local c = assert(luaprov.json.decode(res.body))
      assert.equals("Success", c.Code)
      assert.truthy(luaprov.time.parse_iso8601(c.Expiration))
      assert.truthy(luaprov.time.parse_iso8601(c.LastUpdated))
      s.ok(sim, "ecs", "DescribeRegions", REGION,
        { cred = { id = c.AccessKeyId, secret = c.AccessKeySecret, token = c.SecurityToken } })
      res = assert(luaprov.http.request { url = sim.url .. "/latest/meta-data/ram/security-credentials/other" })
      assert.equals(404, res.status)
    end)

    it("supports IMDSv2 session tokens", function()
      local res = assert(luaprov.http.request { method = "PUT", url = sim.url .. "/latest/api/token",
        headers = { ["X-aliyun-ecs-metadata-token-ttl-seconds"] = "21600" } })
      assert.equals(200, res.status)
      local token = res.body
      res = assert(luaprov.http.request { url = sim.url .. "/latest/meta-data/ram/security-credentials/",
        headers = { ["X-aliyun-ecs-metadata-token"] = token } })
      assert.equals(200, res.status)
      res = assert(luaprov.http.request { url = sim.url .. "/latest/meta-data/region-id",
        headers = { ["X-aliyun-ecs-metadata-token"] = "forged" } })
      assert.equals(401, res.status)
    end)
  end)
end)
