-- The Bizfly KaaS client: configuration from the upstream environment variables, login with both
-- auth methods, the service catalog, re-login after a 401, retries, and errors that say what failed
-- without showing a secret. Against `luaprov sim` over real HTTP, plus a recording transport where
-- the exact bytes matter.
local luaprov = require "luaprov"
local client = require "providers.bizfly.client"
local config = require "providers.bizfly.config"
local session = require "providers.bizfly.session"
local h = require "spec.fixtures.bizfly.harness"

local json = luaprov.json

local function assert_no_secret(err)
  local text = json.encode(err)
  for _, s in ipairs({ h.PASSWORD, h.APP_CREDENTIAL_SECRET, "gAAAAAB" }) do
    assert.is_nil(text:find(s, 1, true), "the error shows a secret: " .. text)
  end
end

describe("bizfly config", function()
  after_each(h.restore_env)

  it("reads the application credential method and defaults to region HN and the public API", function()
    h.use_env(h.APP_ENV)
    local cfg = assert(config.from_env({}))
    assert.equals("application_credential", cfg.auth_method)
    assert.equals("HaNoi", cfg.region)
    assert.equals("https://manage.bizflycloud.vn", cfg.api_url)
  end)

  it("normalises region names as gobizfly does", function()
    assert.equals("HaNoi", config.normalise_region("hn"))
    assert.equals("HaNoi", config.normalise_region("HaNoi"))
    assert.equals("HoChiMinh", config.normalise_region("HCM"))
    assert.equals("HoChiMinh", config.normalise_region("hochiminh"))
    assert.equals("VC-HaNoi", config.normalise_region("VC-HANOI"))
    assert.is_nil(config.normalise_region("Singapore"))
  end)

  it("refuses an unknown region, a missing secret and an unknown method with the variable to set", function()
    h.use_env(h.with(h.APP_ENV, { BIZFLYCLOUD_REGION = "Mars" }))
    local cfg, err = config.from_env({})
    assert.is_nil(cfg)
    assert.equals("InvalidConfig", err.code)
    assert.matches("BIZFLYCLOUD_REGION", err.message)

    h.use_env(h.with(h.APP_ENV, { BIZFLYCLOUD_APP_CREDENTIAL_SECRET = false }))
    cfg, err = config.from_env({})
    assert.is_nil(cfg)
    assert.matches("application credential secret", err.message)

    h.use_env(h.with(h.PASSWORD_ENV, { BIZFLYCLOUD_PASSWORD = false }))
    cfg, err = config.from_env({})
    assert.is_nil(cfg)
    assert.matches("password variable", err.message)

    h.use_env(h.with(h.APP_ENV, { BIZFLYCLOUD_AUTH_METHOD = "token" }))
    cfg, err = config.from_env({})
    assert.is_nil(cfg)
    assert.matches("application_credential or password", err.message)

    h.use_env({})
    cfg, err = config.from_env({})
    assert.is_nil(cfg)
    assert.matches("no Bizfly credentials", err.message)
  end)

  it("infers the method from the credentials when BIZFLYCLOUD_AUTH_METHOD is not set", function()
    h.use_env(h.with(h.PASSWORD_ENV, { BIZFLYCLOUD_AUTH_METHOD = false }))
    assert.equals("password", assert(config.from_env({})).auth_method)
  end)

  it("takes the endpoint from ctx, then LUAPROV_BIZFLY_ENDPOINT, then BIZFLYCLOUD_API_URL, without /api", function()
    h.use_env(h.with(h.APP_ENV, { BIZFLYCLOUD_API_URL = "https://staging.bizflycloud.vn/api/",
      LUAPROV_BIZFLY_ENDPOINT = "http://127.0.0.1:9/" }))
    assert.equals("http://127.0.0.1:8", assert(config.from_env({ endpoint = "http://127.0.0.1:8" })).api_url)
    assert.equals("http://127.0.0.1:9", assert(config.from_env({})).api_url)
    h.use_env(h.with(h.APP_ENV, { BIZFLYCLOUD_API_URL = "https://staging.bizflycloud.vn/api/" }))
    assert.equals("https://staging.bizflycloud.vn", assert(config.from_env({})).api_url)
  end)

  it("takes the cluster from ctx.cluster, else CLUSTER_NAME", function()
    h.use_env({ CLUSTER_NAME = "ke1m4ea3j8w6kkvp" })
    assert.equals("c1", config.cluster({ cluster = "c1" }))
    assert.equals("ke1m4ea3j8w6kkvp", config.cluster({}))
    h.use_env({})
    local id, err = config.cluster({})
    assert.is_nil(id)
    assert.matches("CLUSTER_NAME", err.message)
  end)
end)

describe("bizfly client on the wire", function()
  -- A recording transport playing a tiny Bizfly: enough to see the exact requests.
  local function recorder()
    local rec = { requests = {} }
    rec.transport = function(req)
      rec.requests[#rec.requests + 1] = req
      if req.url:find("/api/token$") then
        return { status = 201, headers = {}, body = '{"token":"tok-1","expires_at":"2099-01-01T00:00:00.000000Z"}' }
      end
      if req.url:find("/api/auth/service$") then
        return { status = 200, headers = {}, body = json.encode({ services = { { canonical_name = "kubernetes_engine",
          region = "HN", service_url = "http://kaas.invalid/api/kubernetes-engine/" } } }) }
      end
      return { status = 200, headers = {}, body = "" }
    end
    return rec
  end

  local cfg = { auth_method = "application_credential", credential_id = "id-1", credential_secret = "s3cret-value",
    region = "HaNoi", region_name = "HN", api_url = "http://api.invalid" }

  it("logs in, reads the catalog, then sends desired_size 0 with the token", function()
    local rec = recorder()
    local c = client.new(cfg, { transport = rec.transport, sleep = function() end })
    assert.is_true(c:set_desired_size("c1", "p1", 0))
    assert.equals(3, #rec.requests)
    local login = rec.requests[1]
    assert.equals("POST", login.method)
    assert.equals("http://api.invalid/api/token", login.url)
    assert.same({ auth_method = "application_credential", credential_id = "id-1", credential_secret = "s3cret-value" },
      json.decode(login.body))
    assert.equals("http://api.invalid/api/auth/service", rec.requests[2].url)
    local patch = rec.requests[3]
    assert.equals("PATCH", patch.method)
    assert.equals("http://kaas.invalid/api/kubernetes-engine/_/c1/p1", patch.url)
    assert.equals('{"desired_size":0}', patch.body)
    assert.equals("tok-1", patch.headers["x-auth-token"])
    assert.equals("application/json", patch.headers["content-type"])
  end)

  it("escapes path segments so an id cannot reach another resource", function()
    local rec = recorder()
    local c = client.new(cfg, { transport = rec.transport, sleep = function() end })
    c:delete_pool_node("c1", "p1", "../x?y")
    assert.equals("http://kaas.invalid/api/kubernetes-engine/_/c1/p1/..%2Fx%3Fy", rec.requests[3].url)
  end)

  it("refuses a negative or fractional desired size (misuse raises)", function()
    local c = client.new(cfg, { transport = recorder().transport })
    assert.has_error(function() c:set_desired_size("c1", "p1", -1) end)
    assert.has_error(function() c:set_desired_size("c1", "p1", 1.5) end)
  end)

  it("calls an answer that is JSON but not an object an InvalidResponse, naming the full path", function()
    local rec = recorder()
    local inner = rec.transport
    local c = client.new(cfg, { sleep = function() end, transport = function(req)
      if req.url:find("/_/") then return { status = 200, headers = {}, body = "[1, 2]" } end
      return inner(req)
    end })
    local body, err = c:get_cluster("c1")
    assert.is_nil(body)
    assert.equals("InvalidResponse", err.code)
    assert.equals("/api/kubernetes-engine/_/c1", err.path)
    assert.equals(200, err.status)
  end)

  it("reports a transport failure with the method, the path and the binding's code, after its rounds", function()
    local slept = 0
    local c = client.new(cfg, { sleep = function() slept = slept + 1 end, max_attempts = 3,
      transport = function() return nil, "GET http://x: connection refused", "ConnectFailed" end })
    local body, err = c:get_cluster("c1")
    assert.is_nil(body)
    assert.equals("Transport", err.code)
    assert.equals("POST", err.method)
    assert.equals("/api/token", err.path)
    assert.equals("ConnectFailed", err.transport_code)
    assert.equals(3, err.attempts)
    assert.equals(2, slept)
    assert.matches("after 3 attempts", err.message)
  end)
end)

describe("bizfly client against the simulator", function()
  local sim

  setup(function()
    sim = h.start_sim()
    h.fast_retries()
  end)
  teardown(function()
    if sim then sim:stop() end
    session.options = {}
  end)
  before_each(function() sim:reset() end)
  after_each(h.restore_env)

  local function new_client(env, ctx)
    h.use_env(env)
    return assert(session.client(ctx or sim.ctx))
  end

  it("logs in with an application credential and reads the cluster", function()
    local c = new_client(h.APP_ENV)
    local cluster = assert(c:get_cluster(h.CLUSTER))
    assert.equals(h.CLUSTER, cluster.uid)
    assert.equals(5, #cluster.worker_pools)
    local state = sim:state()
    assert.equals(1, state.calls.token)
    assert.equals(1, state.calls.catalog)
    assert.equals(1, state.credentials.tokens_issued)
  end)

  it("logs in with a password and reads a pool with its nodes", function()
    local c = new_client(h.PASSWORD_ENV)
    local pool = assert(c:get_pool(h.CLUSTER, h.POOLS.general))
    assert.equals("pool-general", pool.name)
    assert.equals(2, #pool.nodes)
    assert.equals("ACTIVE", pool.nodes[1].status)
  end)

  it("keeps one token for many calls", function()
    local c = new_client(h.APP_ENV)
    for _ = 1, 3 do assert(c:get_cluster(h.CLUSTER)) end
    local results = c:get_pools(h.CLUSTER, { h.POOLS.general, h.POOLS.gpu, h.POOLS.batch })
    assert.equals(3, #results)
    for _, r in ipairs(results) do assert.is_table(r.pool) end
    local state = sim:state()
    assert.equals(1, state.calls.token)
    assert.equals(3, state.calls.get_cluster)
    assert.equals(3, state.calls.get_pool)
  end)

  it("finds the region's service in the catalog: HCM has no such cluster", function()
    local c = new_client(h.with(h.APP_ENV, { BIZFLYCLOUD_REGION = "hcm" }))
    local cluster, err = c:get_cluster(h.CLUSTER)
    assert.is_nil(cluster)
    assert.equals("NotFound", err.code)
    assert.equals(404, err.status)
    assert.equals("GET", err.method)
    assert.equals("/hcm/api/kubernetes-engine/_/" .. h.CLUSTER, err.path)
    assert.matches("Resource not found", err.message)
  end)

  it("refuses wrong credentials with the principal, never the secret", function()
    local c = new_client(h.with(h.APP_ENV, { BIZFLYCLOUD_APP_CREDENTIAL_SECRET = "wrong-secret-value" }))
    local cluster, err = c:get_cluster(h.CLUSTER)
    assert.is_nil(cluster)
    assert.equals("Auth", err.code)
    assert.equals(401, err.status)
    assert.equals("POST", err.method)
    assert.equals("/api/token", err.path)
    assert.matches("luaprov%-sim%-credential", err.message)
    assert.matches("requires authentication", err.message)
    assert.is_nil(err.message:find("wrong-secret-value", 1, true))
  end)

  it("redacts a secret the server echoes back", function()
    sim:fault({ operation = "token", kind = "error", status = 400, count = 1,
      message = "bad login body: password=" .. h.PASSWORD })
    local c = new_client(h.PASSWORD_ENV)
    local _, err = c:get_cluster(h.CLUSTER)
    assert.equals("InvalidRequest", err.code)
    assert.equals(400, err.status)
    assert.matches("%[redacted%]", err.message)
    assert_no_secret(err)
  end)

  it("logs in again once after a 401 (token revoked) and then succeeds", function()
    local c = new_client(h.APP_ENV)
    assert(c:get_cluster(h.CLUSTER))
    sim:fault({ operation = "get_pool", kind = "unauthorized", count = 1 })
    local pool = assert(c:get_pool(h.CLUSTER, h.POOLS.gpu))
    assert.equals("pool-gpu-t4", pool.name)
    local state = sim:state()
    assert.equals(2, state.calls.token)
    assert.equals(2, state.calls.get_pool)
    assert.equals(1, state.errors.get_pool)
  end)

  it("logs in again when the token expired in simulated time", function()
    local c = new_client(h.PASSWORD_ENV)
    assert(c:get_cluster(h.CLUSTER))
    sim:advance(3700)
    assert(c:get_cluster(h.CLUSTER))
    assert.equals(2, sim:state().calls.token)
  end)

  it("gives up with Auth when the new token is refused too", function()
    local c = new_client(h.APP_ENV)
    sim:fault({ operation = "get_cluster", kind = "unauthorized", count = 2 })
    local cluster, err = c:get_cluster(h.CLUSTER)
    assert.is_nil(cluster)
    assert.equals("Auth", err.code)
    assert.equals(401, err.status)
    assert.equals("GET", err.method)
    assert.equals("/api/kubernetes-engine/_/" .. h.CLUSTER, err.path)
    assert_no_secret(err)
  end)

  it("carries method, path, status and the API's message for a missing pool", function()
    local c = new_client(h.APP_ENV)
    local pool, err = c:get_pool(h.CLUSTER, "000000000000000000000000")
    assert.is_nil(pool)
    assert.equals("NotFound", err.code)
    assert.equals(404, err.status)
    assert.equals("GET", err.method)
    assert.equals("/api/kubernetes-engine/_/" .. h.CLUSTER .. "/000000000000000000000000", err.path)
    assert.matches("Resource not found: worker pool 000000000000000000000000", err.message)
    assert.matches("Resource not found", err.api_message)
  end)

  it("retries a malformed answer to a GET and a 5xx to the desired-size PATCH", function()
    local c = new_client(h.APP_ENV)
    sim:fault({ operation = "get_cluster", kind = "malformed", count = 1 })
    assert(c:get_cluster(h.CLUSTER))
    sim:fault({ operation = "update_pool", kind = "5xx", count = 1 })
    assert.is_true(c:set_desired_size(h.CLUSTER, h.POOLS.general, 3))
    local state = sim:state()
    assert.equals(2, state.calls.get_cluster)
    assert.equals(2, state.calls.update_pool)
    assert.equals(3, sim:pool(h.POOLS.general).desired_size)
  end)

  it("rides out a late answer (timeout) on a GET", function()
    h.use_env(h.APP_ENV)
    local cfg = assert(config.from_env(sim.ctx))
    local c = client.new(cfg, { timeout_ms = 300, backoff_base = 0.01, max_attempts = 2 })
    sim:fault({ operation = "get_cluster", kind = "timeout", seconds = 1, count = 1 })
    assert(c:get_cluster(h.CLUSTER))
  end)

  it("fails after its rounds on a lasting 5xx, saying how many attempts", function()
    local c = new_client(h.APP_ENV)
    sim:fault({ operation = "get_cluster", kind = "5xx", status = 503 })
    local cluster, err = c:get_cluster(h.CLUSTER)
    assert.is_nil(cluster)
    assert.equals("ServerError", err.code)
    assert.equals(503, err.status)
    assert.equals(2, err.attempts)
    assert.matches("^GET /api/kubernetes%-engine/_/" .. h.CLUSTER .. ": HTTP 503: Service Unavailable", err.message)
  end)

  it("deletes a pool node, and says NotFound for one that is not there", function()
    local c = new_client(h.APP_ENV)
    local node = sim:pool(h.POOLS.general).nodes[1]
    assert.is_true(c:delete_pool_node(h.CLUSTER, h.POOLS.general, node.id))
    assert.equals("DELETING", sim:pool(h.POOLS.general).nodes[1].status)
    local ok, err = c:delete_pool_node(h.CLUSTER, h.POOLS.general, "no-such-node")
    assert.is_nil(ok)
    assert.equals("NotFound", err.code)
    assert.equals("DELETE", err.method)
  end)

  it("reports the server's refusal of an out-of-range size", function()
    local c = new_client(h.APP_ENV)
    local ok, err = c:set_desired_size(h.CLUSTER, h.POOLS.general, 9)
    assert.is_nil(ok)
    assert.equals("InvalidRequest", err.code)
    assert.equals(400, err.status)
    assert.equals("PATCH", err.method)
    assert.matches("desired_size 9 must be between min_size 1 and max_size 5", err.message)
  end)

  it("carries the request ID the API answered, in the error and at the end of its message", function()
    local c = new_client(h.APP_ENV)
    sim:fault({ operation = "update_pool", kind = "error", status = 409, message = "pool is being upgraded",
      count = 1 })
    local ok, err = c:set_desired_size(h.CLUSTER, h.POOLS.general, 3)
    assert.is_nil(ok)
    local id = sim:state().last_request_id
    assert.matches("^req%-", id)
    assert.equals(id, err.request_id)
    assert.equals("PATCH /api/kubernetes-engine/_/" .. h.CLUSTER .. "/" .. h.POOLS.general
      .. ": HTTP 409: pool is being upgraded (request ID " .. id .. ")", err.message)
    -- after retries, the last answer's
    sim:fault({ operation = "get_cluster", kind = "5xx", status = 503 })
    local _, lasting = c:get_cluster(h.CLUSTER)
    assert.matches(" %(after 2 attempts; request ID " .. sim:state().last_request_id:gsub("%-", "%%-") .. "%)$",
      lasting.message)
  end)
end)
