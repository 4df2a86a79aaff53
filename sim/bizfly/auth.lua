-- Who may call the simulated Bizfly API: the token endpoint (POST /api/token) with its two auth
-- methods, token checks on every KaaS call (X-Auth-Token, one hour of simulated time), revocation
-- (a fault, or DELETE /_sim/tokens), and the service catalog (GET /api/auth/service).
--
-- Known credentials (docs/sim.md): the application credential luaprov-sim-credential /
-- luaprov-sim-secret, and the user ops@example.com / sim-password.
local clock = require "sim.clock"
local luaprov = require "luaprov"
local wire = require "sim.bizfly.wire"

local crypto = luaprov.crypto

local M = {}

M.APP_CREDENTIAL_ID = "luaprov-sim-credential"
M.APP_CREDENTIAL_SECRET = "luaprov-sim-secret"
M.EMAIL = "ops@example.com"
M.PASSWORD = "sim-password"
M.PROJECT_ID = "5c9f0a6e8d7b4e2f9a1c3b5d7e9f1a2b"
M.PROJECT_NAME = "luaprov-sim"
M.TOKEN_TTL = 3600

-- Keystone's words for every refusal, as the real gateway gives no hint which part was wrong.
M.UNAUTHORIZED = "The request you have made requires authentication."

local tokens, issued

function M.reset()
  tokens, issued = {}, 0
end

local function required(body, name)
  local v = body[name]
  if type(v) ~= "string" or v == "" then wire.fail(400, ("%s is required for this auth_method"):format(name)) end
  return v
end

--- issue(request) -> status, body of POST /api/token.
function M.issue(request)
  local body = wire.body_object(request)
  local method = body.auth_method
  local principal
  if method == "application_credential" then
    local id, secret = required(body, "credential_id"), required(body, "credential_secret")
    if id ~= M.APP_CREDENTIAL_ID or secret ~= M.APP_CREDENTIAL_SECRET then wire.fail(401, M.UNAUTHORIZED) end
    principal = "application_credential:" .. id
  elseif method == "password" then
    local user, password = required(body, "username"), required(body, "password")
    if user ~= M.EMAIL or password ~= M.PASSWORD then wire.fail(401, M.UNAUTHORIZED) end
    principal = "user:" .. user
  elseif method == nil then
    wire.fail(400, "auth_method is required (password or application_credential)")
  else
    wire.fail(400, "auth_method must be password or application_credential")
  end
  issued = issued + 1
  -- Fernet tokens start with gAAAAA; the rest only has to be unguessable.
  local token = "gAAAAAB" .. crypto.random_hex(40)
  local expires = clock.now() + M.TOKEN_TTL
  tokens[token] = { expires = expires, principal = principal }
  return 201, { token = token, expires_at = luaprov.time.iso8601(math.floor(expires)):gsub("Z$", ".000000Z"),
    project_id = M.PROJECT_ID, project_name = M.PROJECT_NAME }
end

--- verify(request) -> the caller's principal, or a 401 (missing, unknown, revoked or expired token).
function M.verify(request)
  local token = (request.headers or {})["x-auth-token"]
  local t = type(token) == "string" and tokens[token] or nil
  if not t then wire.fail(401, M.UNAUTHORIZED) end
  if clock.now() >= t.expires then
    tokens[token] = nil
    wire.fail(401, "The token has expired. " .. M.UNAUTHORIZED)
  end
  return t.principal
end

--- revoke_all() -> how many tokens were dropped: every client must log in again.
function M.revoke_all()
  local n = 0
  for k in pairs(tokens) do
    tokens[k] = nil
    n = n + 1
  end
  return n
end

local function service(id, name, code, canonical, region, url)
  return { id = id, name = name, code = code, canonical_name = canonical, region = region, enabled = true,
    icon = "", description = name .. " (simulated)", service_url = url }
end

--- catalog(request) -> body of GET /api/auth/service. URLs point back at this server (its Host
-- header), so a client that follows the catalog stays on the simulator. Region names are mixed on
-- purpose ("HN", "HaNoi", "HCM"), as the real catalog's are.
function M.catalog(request)
  local host = (request.headers or {}).host or "127.0.0.1"
  local base = "http://" .. host
  return { services = wire.list({
    service(1, "Cloud Server", "CS", "cloud_server", "HN", base .. "/iaas-cloud/api"),
    service(2, "Cloud Server", "CS", "cloud_server", "HCM", base .. "/hcm/iaas-cloud/api"),
    service(17, "Kubernetes Engine", "KE", "kubernetes_engine", "HaNoi", base .. "/api/kubernetes-engine"),
    service(18, "Kubernetes Engine", "KE", "kubernetes_engine", "HCM", base .. "/hcm/api/kubernetes-engine"),
    service(21, "Load Balancer", "LB", "load_balancer", "HN", base .. "/api/loadbalancers"),
  }) }
end

--- state() -> what /_sim/state shows: who is known, how many tokens live; never a secret.
function M.state()
  local live, now = 0, clock.now()
  for _, t in pairs(tokens) do
    if now < t.expires then live = live + 1 end
  end
  return { application_credential_id = M.APP_CREDENTIAL_ID, email = M.EMAIL, token_ttl_seconds = M.TOKEN_TTL,
    tokens_issued = issued, tokens_live = live }
end

M.reset()

return M
