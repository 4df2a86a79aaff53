-- Bizfly authentication: exchanges the configured credentials for a token (POST {API_URL}/api/token),
-- then finds the Kubernetes Engine URL for the region in the service catalog
-- (GET {API_URL}/api/auth/service), as current gobizfly does. The catalog is read again at every
-- login, so a moved service is found after a 401.
--
--   auth.login(cfg, send) -> session | nil, err
--       send(requests) -> results (wire.exchange bound to the client's options)
--       session = {token, expires_at (epoch s, or nil when the API gave none), service_url}
--   auth.usable(session, now) -> whether a session may still be used (false close to its expiry)
--   auth.headers(cfg, session) -> the headers every KaaS call carries
--   auth.secrets(cfg, session) -> the strings no error or log line may show
local luaprov = require "luaprov"
local config = require "providers.bizfly.config"
local wire = require "providers.bizfly.wire"

local time = luaprov.time

local M = {}

M.TOKEN_PATH = "/api/token"
M.CATALOG_PATH = "/api/auth/service"
M.SERVICE = "kubernetes_engine"
-- Log in again this long before the announced expiry, so a call never leaves with a token that dies
-- on the way. (A token the server expires earlier still gets the 401 path.)
M.EXPIRY_MARGIN_S = 120

--- secrets(cfg[, session]) -> list of strings to redact wherever text from the server is shown.
function M.secrets(cfg, session)
  return { cfg.password, cfg.credential_secret, session and session.token }
end

--- headers(cfg, session) -> request headers. The tenant headers are the vendored client's.
function M.headers(cfg, session)
  local h = { ["x-auth-token"] = session.token }
  if cfg.email then h["x-tenant-name"] = cfg.email end
  if cfg.tenant_id then h["x-tenant-id"] = cfg.tenant_id end
  return h
end

function M.usable(session, now)
  if not session or not session.token or not session.service_url then return false end
  return session.expires_at == nil or now < session.expires_at - M.EXPIRY_MARGIN_S
end

local function token_body(cfg)
  if cfg.auth_method == "password" then
    return { auth_method = "password", username = cfg.email, password = cfg.password }
  end
  return { auth_method = "application_credential", credential_id = cfg.credential_id,
    credential_secret = cfg.credential_secret }
end

-- Who is logging in, for messages: the principal, never its secret.
local function principal(cfg)
  if cfg.auth_method == "password" then return "user " .. cfg.email end
  return "application credential " .. cfg.credential_id
end

local function failed(result, hint)
  if result.error then
    local err = result.error
    if err.code == "Auth" or err.code == "Forbidden" then err.message = err.message .. "; " .. hint end
    return nil, err
  end
  return nil, wire.error { code = "Auth", method = result.method, path = result.path, status = 401,
    detail = (result.detail or "unauthorized") .. "; " .. hint, api_message = result.detail }
end

local function get_token(cfg, send)
  local url = cfg.api_url .. M.TOKEN_PATH
  -- Asking for another token is harmless, so a lost answer may be asked again.
  local result = send({ { method = "POST", url = url, body = token_body(cfg), json = true, idempotent = true } })[1]
  if result.unauthorized then
    result.method, result.path = "POST", M.TOKEN_PATH
    return failed(result, ("the %s was refused (BIZFLYCLOUD_AUTH_METHOD=%s)"):format(principal(cfg), cfg.auth_method))
  end
  if result.error then return failed(result, "logging in as " .. principal(cfg)) end
  local body = result.body
  local token = type(body) == "table" and body.token or nil
  if type(token) ~= "string" or token == "" then
    token = result.headers and result.headers["x-subject-token"]
  end
  if type(token) ~= "string" or token == "" then
    return nil, wire.error { code = "InvalidResponse", method = "POST", path = wire.path_of(url),
      status = result.status, detail = "the token answer has no token" }
  end
  -- gobizfly's fixtures say expires_at, its current struct expire_at.
  local expires = type(body) == "table" and (body.expires_at or body.expire_at) or nil
  local expires_at = type(expires) == "string" and time.parse_iso8601(expires) or nil
  return { token = token, expires_at = expires_at }
end

local function find_service(cfg, services)
  local seen = {}
  for _, s in ipairs(type(services) == "table" and services or {}) do
    if type(s) == "table" and s.canonical_name == M.SERVICE and s.enabled ~= false then
      local region = config.normalise_region(s.region)
      seen[#seen + 1] = tostring(s.region)
      if region == cfg.region and type(s.service_url) == "string" and s.service_url:find("^https?://") then
        return (s.service_url:gsub("/+$", ""))
      end
    end
  end
  return nil, seen
end

local function get_service_url(cfg, send, session)
  local url = cfg.api_url .. M.CATALOG_PATH
  local result = send({ { method = "GET", url = url, headers = M.headers(cfg, session), json = true,
    idempotent = true } })[1]
  if result.unauthorized then
    result.method, result.path = "GET", M.CATALOG_PATH
    return failed(result, "the token just issued to the " .. principal(cfg) .. " was refused by the catalog")
  end
  if result.error then return nil, result.error end
  local services = type(result.body) == "table" and result.body.services or nil
  local service_url, seen = find_service(cfg, services)
  if not service_url then
    return nil, wire.error { code = "NotFound", method = "GET", path = M.CATALOG_PATH, status = result.status,
      detail = ("the service catalog has no %s service for region %s (BIZFLYCLOUD_REGION=%s); it lists it for: %s")
        :format(M.SERVICE, cfg.region, cfg.region_name, #seen > 0 and table.concat(seen, ", ") or "no region") }
  end
  return service_url
end

--- login(cfg, send) -> session | nil, err. err.code: "Auth" (credentials refused), "NotFound" (no
-- Kubernetes Engine in the region), "InvalidResponse", "Transport", "ServerError", ...
function M.login(cfg, send)
  local session, err = get_token(cfg, send)
  if not session then return nil, err end
  local service_url
  service_url, err = get_service_url(cfg, send, session)
  if not service_url then return nil, err end
  session.service_url = service_url
  luaprov.log.info("bizfly login", { auth_method = cfg.auth_method, region = cfg.region, service_url = service_url,
    expires_at = session.expires_at and time.iso8601(session.expires_at) or nil })
  return session
end

return M
