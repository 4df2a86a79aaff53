-- The Lua side of fuzz_provider_decoders (README.md): one call per case, each answering the
-- mapping's requests with the input as the HTTP body of the response its decoder parses. A Lua
-- error is an acceptable outcome (the C side catches it); a C crash or a hang is a finding.
local luaprov = require "luaprov"
local alibaba = require "providers.alibaba.client"
local instances = require "providers.alibaba.instances"
local bizfly = require "providers.bizfly.client"
local pools = require "providers.bizfly.pools"

local json = luaprov.json

local function no_sleep() end
local function fixed_clock() return 1700000000 end

local function alibaba_client(status, body)
  return alibaba.new({
    region = "cn-hangzhou", endpoint = "http://ecs.invalid", max_attempts = 2, sleep = no_sleep,
    clock = fixed_clock, credentials = { access_key_id = "id", access_key_secret = "secret" },
    transport = function() return { status = status, headers = { ["x-acs-request-id"] = "r-1" }, body = body } end,
  })
end

local LOGIN = '{"token":"tok-1","expires_at":"2099-01-01T00:00:00.000000Z"}'
local CATALOG = json.encode({ services = { { canonical_name = "kubernetes_engine", region = "HN",
  service_url = "http://kaas.invalid/api/kubernetes-engine/" } } })
local BIZFLY_CFG = { auth_method = "application_credential", credential_id = "id-1", credential_secret = "s3cret",
  region = "HaNoi", region_name = "HN", api_url = "http://api.invalid" }

-- which: "token", "catalog" or "kaas": the request whose answer is the input; the others succeed.
local function bizfly_client(which, status, body)
  return bizfly.new(BIZFLY_CFG, {
    sleep = no_sleep, max_attempts = 2, monotonic = function() return 0 end, now = fixed_clock,
    transport = function(req)
      local kind = req.url:find("/api/token$") and "token" or req.url:find("/api/auth/service$") and "catalog"
        or "kaas"
      if kind == which then return { status = status, headers = { ["x-request-id"] = "q-1" }, body = body } end
      if kind == "token" then return { status = 201, headers = {}, body = LOGIN } end
      if kind == "catalog" then return { status = 200, headers = {}, body = CATALOG } end
      return { status = 200, headers = {}, body = '{"id":"p1","nodes":[]}' }
    end,
  })
end

local cases = {
  -- Alibaba RPC answer, then each listed instance through the mapping's instance decoder.
  function(status, body)
    local res = alibaba_client(status, body):call("ecs", "DescribeInstances", { RegionId = "cn-hangzhou" })
    local list = type(res) == "table" and type(res.Instances) == "table" and res.Instances.Instance
    if type(list) == "table" then
      for _, api in ipairs(list) do
        if type(api) == "table" then instances.to_instance(api) end
      end
    end
  end,
  -- Alibaba pagination over the same answer (NextToken that never ends stops at max_pages).
  function(status, body)
    alibaba_client(status, body):paginate("ecs", "DescribeInstances", { RegionId = "cn-hangzhou" },
      { list = "Instances.Instance", max_pages = 5 })
  end,
  -- Alibaba ROA answer (any JSON value, or text).
  function(status, body)
    alibaba_client(status, body):roa("cs", "DescribeClusterAttachScripts",
      { method = "POST", path = "/clusters/c-1/attachscript", body = {} })
  end,
  -- Bizfly login answer.
  function(status, body) bizfly_client("token", status, body):get_cluster("c1") end,
  -- Bizfly service catalog.
  function(status, body) bizfly_client("catalog", status, body):get_cluster("c1") end,
  -- Bizfly cluster listing, then the pools the autoscaler manages.
  function(status, body)
    local cluster = bizfly_client("kaas", status, body):get_cluster("c1")
    for _, p in ipairs(pools.autoscaled(cluster)) do pools.group(p, p) end
  end,
  -- Bizfly pool detail, then its snapshot entry and a node lookup.
  function(status, body)
    local detail = bizfly_client("kaas", status, body):get_pool("c1", "p1")
    if type(detail) == "table" then
      pools.group({ id = "p1", min_size = 0, max_size = 3 }, detail)
      pools.find_node(detail, pools.PROVIDER_PREFIX .. "n1")
    end
  end,
}

local STATUSES = { 200, 201, 204, 400, 401, 403, 404, 409, 429, 500, 503 }

--- run(selector, status_selector, body): selector picks the case, status_selector the HTTP status.
return function(selector, status_selector, body)
  local case = cases[selector % #cases + 1]
  case(STATUSES[status_selector % #STATUSES + 1], body)
end
