-- Where the Alibaba Cloud keys come from: the default chain of credentials-go, reduced to the three
-- sources a Kubernetes controller uses (docs/alibaba.md#credentials), tried in this order:
--   1. environment AccessKey: ALIBABA_CLOUD_ACCESS_KEY_ID + ALIBABA_CLOUD_ACCESS_KEY_SECRET
--      (+ ALIBABA_CLOUD_SECURITY_TOKEN);
--   2. RRSA: ALIBABA_CLOUD_ROLE_ARN + ALIBABA_CLOUD_OIDC_PROVIDER_ARN + ALIBABA_CLOUD_OIDC_TOKEN_FILE,
--      exchanged with STS AssumeRoleWithOIDC (anonymous);
--   3. the ECS RAM role of the instance, from the metadata service (http://100.100.100.200, or
--      LUAPROV_ALIBABA_METADATA_ENDPOINT), role ALIBABA_CLOUD_ECS_METADATA or discovered; off with
--      ALIBABA_CLOUD_ECS_METADATA_DISABLED=true.
--
--   credentials.chain(opts) -> provider;  provider:get() -> creds | nil, err;  provider:invalidate()
--   credentials.static{access_key_id, access_key_secret, security_token} -> provider
-- creds = {access_key_id, access_key_secret, security_token, expiration (epoch s or nil), source}.
--
-- Temporary credentials are kept in a module-level table (it lives as long as the script
-- generation, and keeps secrets out of the engine's shared caches and their metrics) and fetched
-- again a margin before they expire. No secret is ever logged or put in an error message.
local luaprov = require "luaprov"
local client = require "providers.alibaba.client"

local json, log, time = luaprov.json, luaprov.log, luaprov.time
local format = string.format

local M = {}

local REFRESH_MARGIN_S = 300
local METADATA_DEFAULT = "http://100.100.100.200"
-- Outside ECS the metadata address does not answer; remember that for a minute so each call does
-- not wait for the connect timeout again.
local METADATA_MISS_TTL_S = 60

-- Credentials by source key, shared by every provider of this generation.
local shared_cache = {}

local HOW_TO = "set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET (optionally "
  .. "ALIBABA_CLOUD_SECURITY_TOKEN), or ALIBABA_CLOUD_ROLE_ARN, ALIBABA_CLOUD_OIDC_PROVIDER_ARN and "
  .. "ALIBABA_CLOUD_OIDC_TOKEN_FILE (RRSA), or run on ECS with a RAM role (ALIBABA_CLOUD_ECS_METADATA)"

local function cred_error(message, fields)
  local err = { code = "Credentials", message = message }
  for k, v in pairs(fields or {}) do err[k] = v end
  return err
end

local function present(v)
  return v ~= nil and v ~= ""
end

local function trim(s)
  return (s:gsub("^[ \t\r\n]+", ""):gsub("[ \t\r\n]+$", ""))
end

local function parse_expiration(text)
  if type(text) ~= "string" then return nil end
  return time.parse_iso8601(text)
end

-- Validates the triple a source returned and stamps where it came from.
local function make_creds(source, id, secret, token, expiration_text)
  if not (present(id) and present(secret)) or (token ~= nil and type(token) ~= "string") then
    return nil, cred_error(source .. ": the answer holds no AccessKeyId/AccessKeySecret", { code = "InvalidResponse" })
  end
  local expiration
  if expiration_text ~= nil then
    expiration = parse_expiration(expiration_text)
    if not expiration then
      return nil, cred_error(source .. ": unreadable Expiration " .. format("%q", tostring(expiration_text)),
        { code = "InvalidResponse" })
    end
  end
  return { access_key_id = id, access_key_secret = secret, security_token = present(token) and token or nil,
    expiration = expiration, source = source }
end

-- RRSA: exchange the projected service-account token for STS credentials. The kubelet rotates the
-- token file, so it is read again on every exchange.
local function fetch_rrsa(self, cfg)
  local token, err, code = self.read_file(cfg.token_file)
  if not token then
    local hint = code == "Forbidden" and "; add its directory to LUAPROV_READABLE_PATHS" or ""
    return nil, cred_error(format("RRSA: cannot read the OIDC token file %s: %s%s", cfg.token_file,
      tostring(err), hint))
  end
  token = trim(token)
  if token == "" then return nil, cred_error("RRSA: the OIDC token file " .. cfg.token_file .. " is empty") end
  local sts = client.new {
    region = cfg.sts_region, endpoint = cfg.sts_endpoint, network = cfg.network, transport = self.transport,
    sleep = self.sleep, clock = self.clock, max_attempts = 3, timeout_ms = 5000,
  }
  local body, cerr = sts:call("sts", "AssumeRoleWithOIDC", {
    RoleArn = cfg.role_arn, OIDCProviderArn = cfg.provider_arn, OIDCToken = token,
    RoleSessionName = cfg.session_name, DurationSeconds = self.duration_s,
  }, { anonymous = true, idempotent = true })
  if not body then
    local e = {}
    for k, v in pairs(cerr) do e[k] = v end
    e.message = "RRSA: " .. cerr.message
    return nil, e
  end
  local c = type(body.Credentials) == "table" and body.Credentials or {}
  return make_creds("rrsa", c.AccessKeyId, c.AccessKeySecret, c.SecurityToken, c.Expiration or "")
end

local function metadata_get(self, url, headers, method)
  local res, err, code = self.transport { method = method or "GET", url = url, headers = headers, timeout_ms = 2000 }
  if not res then return nil, format("%s [%s]", tostring(err), tostring(code)) end
  if res.status ~= 200 then return nil, format("HTTP %d from %s", res.status, url) end
  return res.body
end

-- ECS RAM role: IMDSv2 token when the service gives one (IMDSv1 otherwise, unless disabled), the
-- role name, then the role's credentials.
local function fetch_metadata(self, cfg)
  local headers = {}
  local token, terr = metadata_get(self, cfg.base .. "/latest/api/token",
    { ["X-aliyun-ecs-metadata-token-ttl-seconds"] = "21600" }, "PUT")
  if token then
    headers["X-aliyun-ecs-metadata-token"] = trim(token)
  elseif cfg.imdsv1_disabled then
    return nil, cred_error("ECS metadata: no IMDSv2 token and IMDSv1 is disabled: " .. terr)
  end
  local role = cfg.role
  if not present(role) then
    local listing, lerr = metadata_get(self, cfg.base .. "/latest/meta-data/ram/security-credentials/", headers)
    if not listing then return nil, cred_error("ECS metadata: cannot discover the RAM role: " .. lerr) end
    role = trim(listing):match("^[^\r\n]*")
    if not present(role) then return nil, cred_error("ECS metadata: the instance has no RAM role attached") end
  end
  local body, berr = metadata_get(self, cfg.base .. "/latest/meta-data/ram/security-credentials/" .. role, headers)
  if not body then
    return nil, cred_error("ECS metadata: cannot read the credentials of role " .. role .. ": " .. berr)
  end
  local ok, doc = pcall(json.decode, body)
  if not ok or type(doc) ~= "table" then
    return nil, cred_error("ECS metadata: the credentials of role " .. role .. " are not JSON",
      { code = "InvalidResponse" })
  end
  if doc.Code ~= "Success" then
    return nil, cred_error(format("ECS metadata: role %s answered Code %s", role, tostring(doc.Code)))
  end
  return make_creds("ecs_ram_role", doc.AccessKeyId, doc.AccessKeySecret, doc.SecurityToken, doc.Expiration or "")
end

-- Serves a temporary credential from the cache until `margin` before it expires (half its life
-- when it lives shorter than twice the margin), fetching a new one otherwise. A failed refresh
-- keeps serving a credential that has not expired yet: one STS hiccup must not stop the engine.
local function temporary(self, key, source, fetch)
  local now = self.clock()
  local cached = self.cache[key]
  if cached and cached.refresh_at and now < cached.refresh_at then return cached.creds end
  local fresh, err = fetch()
  if not fresh then
    if cached and cached.creds.expiration and now < cached.creds.expiration then
      log.warn("alibaba credentials refresh failed; using the current ones", { source = source, error = err.message })
      return cached.creds
    end
    return nil, err
  end
  local life = (fresh.expiration or now) - now
  local margin = math.min(self.margin_s, life / 2)
  self.cache[key] = { creds = fresh, refresh_at = fresh.expiration and fresh.expiration - margin or now }
  log.info("alibaba credentials refreshed", { source = source,
    expires_at = fresh.expiration and time.iso8601(fresh.expiration) or nil })
  return fresh
end

local function all_or_none(env, names)
  local set, missing = 0, {}
  for _, n in ipairs(names) do
    if present(env(n)) then set = set + 1 else missing[#missing + 1] = n end
  end
  return set == #names, set > 0 and set < #names and missing or nil
end

local Provider = {}
Provider.__index = Provider

--- provider:get() -> creds | nil, err  (err = {code, message, ...}; code "Credentials" when no
-- source is usable, or the STS error's class such as "Auth")
function Provider:get()
  local env = self.env
  local id, secret = env("ALIBABA_CLOUD_ACCESS_KEY_ID"), env("ALIBABA_CLOUD_ACCESS_KEY_SECRET")
  if present(id) or present(secret) then
    if not (present(id) and present(secret)) then
      local set, unset = "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
      if not present(id) then set, unset = unset, set end
      return nil, cred_error(set .. " is set but " .. unset .. " is not")
    end
    return make_creds("env", id, secret, env("ALIBABA_CLOUD_SECURITY_TOKEN"))
  end

  local rrsa_names = { "ALIBABA_CLOUD_ROLE_ARN", "ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALIBABA_CLOUD_OIDC_TOKEN_FILE" }
  local rrsa, missing = all_or_none(env, rrsa_names)
  if missing then
    return nil, cred_error("RRSA is half configured: " .. table.concat(missing, ", ") .. " not set")
  end
  if rrsa then
    local sts_endpoint = self.endpoint
    local explicit = env("ALIBABA_CLOUD_STS_ENDPOINT")
    if not sts_endpoint and present(explicit) then
      sts_endpoint = explicit:find("^https?://") and explicit or "https://" .. explicit
    end
    local vpc = env("ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED") == "true" or env("ALIBABA_CLOUD_NETWORK") == "vpc"
    local cfg = {
      role_arn = env(rrsa_names[1]), provider_arn = env(rrsa_names[2]), token_file = env(rrsa_names[3]),
      session_name = env("ALIBABA_CLOUD_ROLE_SESSION_NAME"), sts_endpoint = sts_endpoint,
      sts_region = env("ALIBABA_CLOUD_STS_REGION") or self.region, network = vpc and "vpc" or "",
    }
    if not present(cfg.session_name) then cfg.session_name = format("luaprov-%d", math.floor(self.clock())) end
    local key = table.concat({ "rrsa", cfg.role_arn, cfg.provider_arn, cfg.token_file,
      cfg.sts_endpoint or "", cfg.sts_region or "", cfg.network }, "\0")
    return temporary(self, key, "rrsa", function() return fetch_rrsa(self, cfg) end)
  end

  if env("ALIBABA_CLOUD_ECS_METADATA_DISABLED") == "true" then
    return nil, cred_error("no Alibaba Cloud credentials: " .. HOW_TO)
  end
  local base = env("LUAPROV_ALIBABA_METADATA_ENDPOINT")
  local role = env("ALIBABA_CLOUD_ECS_METADATA")
  local explicit = present(base) or present(role)
  base = (present(base) and base or METADATA_DEFAULT):gsub("/+$", "")
  local cfg = { base = base, role = role, imdsv1_disabled = env("ALIBABA_CLOUD_IMDSV1_DISABLED") == "true" }
  local key = table.concat({ "ecs", base, role or "" }, "\0")
  local miss = self.cache["miss\0" .. key]
  if miss and self.clock() < miss.until_t then return nil, miss.err end
  local creds, err = temporary(self, key, "ecs_ram_role", function() return fetch_metadata(self, cfg) end)
  if creds then return creds end
  if not explicit then
    -- Nothing pointed at the metadata service: the real problem is that no source is configured.
    err = cred_error("no Alibaba Cloud credentials: " .. HOW_TO .. " (the ECS metadata service did not "
      .. "help: " .. err.message .. ")")
    self.cache["miss\0" .. key] = { until_t = self.clock() + METADATA_MISS_TTL_S, err = err }
  end
  return nil, err
end

--- provider:invalidate() -> forgets cached temporary credentials (the server said they expired).
function Provider:invalidate()
  for k in pairs(self.cache) do self.cache[k] = nil end
end

--- chain(opts) -> provider. opts (all optional): region (for the regional STS endpoint), endpoint
-- (one URL for every product, STS included: the simulator), margin_s (refresh margin, 300), and
-- for tests env (function(name) -> value), read_file, transport, sleep, clock, cache (a table; a
-- private one isolates a test from the shared cache).
function M.chain(opts)
  opts = opts or {}
  local endpoint = opts.endpoint
  if endpoint == "" then endpoint = nil end
  return setmetatable({
    region = opts.region,
    endpoint = endpoint,
    margin_s = opts.margin_s or REFRESH_MARGIN_S,
    duration_s = opts.duration_s or 3600,
    env = opts.env or luaprov.env,
    read_file = opts.read_file or luaprov.fs.read,
    transport = opts.transport or luaprov.http.request,
    sleep = opts.sleep,
    clock = opts.clock or time.now,
    cache = opts.cache or shared_cache,
  }, Provider)
end

--- static{access_key_id, access_key_secret, security_token} -> provider returning those keys.
function M.static(keys)
  local creds = { access_key_id = keys.access_key_id, access_key_secret = keys.access_key_secret,
    security_token = keys.security_token, source = "static" }
  return { get = function() return creds end }
end

return M
