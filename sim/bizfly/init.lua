-- Bizfly Cloud simulator: the token endpoint, the service catalog and the Kubernetes Engine (KaaS)
-- API that providers/bizfly calls, plus the admin paths under /_sim/. Served by `luaprov sim` on its
-- own port as "bizfly", through handle(request).
--
-- Routing only; the parts are: wire (answers, errors, ids), auth (credentials, tokens, catalog),
-- kaas (the API paths), cluster and fixture (what exists and how nodes live), flavors, faults,
-- calls (counts), admin (/_sim/).
--
-- handle never raises: bad input gets the API's error, and a bug answers 500 with the cause logged,
-- the way the real gateway hides its internals.
local luaprov = require "luaprov"
local admin = require "sim.bizfly.admin"
local auth = require "sim.bizfly.auth"
local calls = require "sim.bizfly.calls"
local cluster = require "sim.bizfly.cluster"
local faults = require "sim.bizfly.faults"
local fixture = require "sim.bizfly.fixture"
local kaas = require "sim.bizfly.kaas"
local wire = require "sim.bizfly.wire"

local M = {}

-- Where the catalog says each region's Kubernetes Engine lives (auth.catalog).
local SERVICES = {
  { prefix = "/api/kubernetes-engine", region = "HaNoi" },
  { prefix = "/hcm/api/kubernetes-engine", region = "HoChiMinh" },
}

local function catalog(request)
  return 200, auth.catalog(request)
end

-- request -> operation, handler(request) -> status, body; needs a token. Unknown paths answer 404.
local function resolve(request)
  local path, method = request.path, request.method
  if path == "/api/token" then
    if method ~= "POST" then wire.fail(405, "Method Not Allowed: use POST /api/token") end
    return "token", auth.issue, false
  end
  if path == "/api/auth/service" then
    if method ~= "GET" then wire.fail(405, "Method Not Allowed: use GET /api/auth/service") end
    return "catalog", catalog, false
  end
  for _, s in ipairs(SERVICES) do
    local n = #s.prefix
    if path:sub(1, n) == s.prefix and (path:sub(n + 1, n + 1) == "/" or #path == n) then
      local operation, handler = kaas.route(method, path:sub(n + 1))
      if operation then
        return operation, function(req) return handler(req, s.region) end, true
      end
      break
    end
  end
  wire.not_found(method .. " " .. path)
end

-- The gateway's order: which API, who is calling (the token), the gateway's own refusals (fault
-- rules standing in for outages and revocations), then the operation.
local function serve(request, applied)
  local operation, handler, needs_token = resolve(request)
  applied.operation = operation
  if needs_token then auth.verify(request) end
  local rule = faults.take(operation)
  applied.rule = rule
  if rule and rule.kind == "unauthorized" then
    auth.revoke_all()
    wire.fail(401, auth.UNAUTHORIZED)
  elseif rule and (rule.kind == "error" or rule.kind == "5xx") then
    wire.fail(rule.status, rule.message)
  end
  local status, body = handler(request)
  return wire.json_response(status, body)
end

local function api(request)
  local applied = {}
  local ok, res = pcall(serve, request, applied)
  if not ok then
    if not wire.is_api_error(res) then
      luaprov.log.error("bizfly simulator call failed", { path = request.path, method = request.method,
        error = tostring(res) })
      res = { status = 500, message = "Internal Server Error" }
    end
    res = wire.error_response(res)
  end
  res.headers["x-request-id"] = calls.count(applied.operation, res.status >= 400)
  local rule = applied.rule
  if rule and rule.kind == "malformed" then
    res.body = rule.body or res.body:sub(1, #res.body // 2)
  elseif rule and rule.kind == "timeout" then
    -- Answer late, after the call took effect: the client gives up, and a retry must cope.
    luaprov.time.sleep(rule.seconds)
  end
  return res
end

--- handle(request) -> response. The engine's entry point (engine/script/handler.h).
function M.handle(request)
  if type(request) ~= "table" then request = {} end
  request.path = type(request.path) == "string" and request.path or "/"
  request.method = type(request.method) == "string" and request.method:upper() or "GET"
  request.headers = type(request.headers) == "table" and request.headers or {}
  local path = request.path
  if path:sub(1, 6) == "/_sim/" or path == "/_sim" then
    local ok, res = pcall(admin.handle, request)
    if ok then return res end
    luaprov.log.error("bizfly simulator admin path failed", { path = path, error = tostring(res) })
    return wire.json_response(500, { error = tostring(res) })
  end
  return api(request)
end

cluster.load(fixture.default())

return M
