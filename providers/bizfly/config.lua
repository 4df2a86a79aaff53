-- The Bizfly client's settings: the environment variables the upstream Cluster Autoscaler provider
-- reads (docs/bizfly.md#bizfly-settings), the engine's ctx, and LUAPROV_BIZFLY_ENDPOINT.
--
--   config.from_env(ctx) -> cfg | nil, err        cfg = {auth_method, email, password, credential_id,
--                                                  credential_secret, region, region_name, api_url,
--                                                  tenant_id}
--   config.cluster(ctx) -> cluster uid | nil, err  ctx.cluster, else CLUSTER_NAME
--   config.normalise_region(name) -> "HaNoi" | "HoChiMinh" | "VC-HaNoi" | nil
--
-- Read at call time (luaprov.env), so an operator who fixes a variable and restarts gets the fix, and
-- specs can swap luaprov.env. Secrets are only copied into cfg; nothing here logs them.
local luaprov = require "luaprov"

local M = {}

M.DEFAULT_API_URL = "https://manage.bizflycloud.vn"
M.DEFAULT_REGION = "HN"

-- Current gobizfly's utils.ParseRegionName, case-insensitive. The service catalog itself mixes "HN",
-- "HaNoi" and "hn", so both sides of the comparison go through this table.
local REGIONS = {
  hn = "HaNoi", hanoi = "HaNoi",
  hcm = "HoChiMinh", hochiminh = "HoChiMinh",
  ["vc-hanoi"] = "VC-HaNoi",
}

local METHODS = { password = true, application_credential = true }

local function setting(value)
  if value == nil or value == "" then return nil end
  return value
end

local function env(name)
  return setting(luaprov.env(name))
end

local function invalid(message)
  return nil, { code = "InvalidConfig", message = message }
end

--- normalise_region(name) -> the canonical region name, or nil when the name is unknown.
function M.normalise_region(name)
  if type(name) ~= "string" then return nil end
  return REGIONS[name:lower()]
end

-- "https://manage.bizflycloud.vn/api/" -> "https://manage.bizflycloud.vn": the token and catalog
-- paths are written with their /api prefix, and current gobizfly accepts the URL with or without it.
local function base_url(url)
  url = url:gsub("/+$", "")
  url = url:gsub("/api$", "")
  return url
end

--- from_env(ctx) -> cfg, or nil, {code = "InvalidConfig", message}.
-- The endpoint is ctx.endpoint, else LUAPROV_BIZFLY_ENDPOINT (the simulator, a private gateway), else
-- BIZFLYCLOUD_API_URL, else the public API. Without BIZFLYCLOUD_AUTH_METHOD the method follows the
-- credentials given (an application credential first); upstream skips validation for an unknown
-- method, here it is an error, because every call would fail later with a less useful message.
function M.from_env(ctx)
  ctx = type(ctx) == "table" and ctx or {}
  local cfg = {
    email = env("BIZFLYCLOUD_EMAIL"),
    password = env("BIZFLYCLOUD_PASSWORD"),
    credential_id = env("BIZFLYCLOUD_APP_CREDENTIAL_ID"),
    credential_secret = env("BIZFLYCLOUD_APP_CREDENTIAL_SECRET"),
    tenant_id = env("BIZFLYCLOUD_TENANT_ID"),
  }
  local method = env("BIZFLYCLOUD_AUTH_METHOD")
  if not method then
    method = cfg.credential_id and "application_credential" or (cfg.email and "password") or nil
  end
  if not method then
    return invalid("no Bizfly credentials: set BIZFLYCLOUD_AUTH_METHOD=application_credential with "
      .. "BIZFLYCLOUD_APP_CREDENTIAL_ID and BIZFLYCLOUD_APP_CREDENTIAL_SECRET, or "
      .. "BIZFLYCLOUD_AUTH_METHOD=password with BIZFLYCLOUD_EMAIL and BIZFLYCLOUD_PASSWORD")
  end
  if not METHODS[method] then
    return invalid(("BIZFLYCLOUD_AUTH_METHOD must be application_credential or password, not %q"):format(method))
  end
  cfg.auth_method = method
  -- The upstream messages, so an operator searching for them finds the upstream docs too.
  if method == "password" then
    if not cfg.email then return invalid("you have to provide username variable (BIZFLYCLOUD_EMAIL)") end
    if not cfg.password then return invalid("you have to provide password variable (BIZFLYCLOUD_PASSWORD)") end
  else
    if not cfg.credential_id then
      return invalid("you have to provide application credential ID (BIZFLYCLOUD_APP_CREDENTIAL_ID)")
    end
    if not cfg.credential_secret then
      return invalid("you have to provide application credential secret (BIZFLYCLOUD_APP_CREDENTIAL_SECRET)")
    end
  end

  cfg.region_name = env("BIZFLYCLOUD_REGION") or M.DEFAULT_REGION
  cfg.region = M.normalise_region(cfg.region_name)
  if not cfg.region then
    return invalid(("BIZFLYCLOUD_REGION %q is not a Bizfly region (HN or HaNoi, HCM or HoChiMinh, VC-HaNoi)")
      :format(cfg.region_name))
  end

  local url = setting(ctx.endpoint) or env("LUAPROV_BIZFLY_ENDPOINT") or env("BIZFLYCLOUD_API_URL")
    or M.DEFAULT_API_URL
  if type(url) ~= "string" or not url:find("^https?://[^/?#]+") then
    return invalid(("Bizfly endpoint %q is not an http(s) URL"):format(tostring(url)))
  end
  cfg.api_url = base_url(url)
  return cfg
end

--- cluster(ctx) -> the BKE cluster UID (upstream reads it from CLUSTER_NAME, although it is the UID).
function M.cluster(ctx)
  local id = type(ctx) == "table" and (setting(ctx.cluster) or setting(ctx.cluster_id)) or nil
  id = id or env("CLUSTER_NAME")
  if type(id) ~= "string" then
    return invalid("no Bizfly cluster: ctx.cluster is empty and CLUSTER_NAME (the cluster UID) is not set")
  end
  return id
end

--- key(cfg) -> a string naming the client cfg needs: one per endpoint, principal, secret and region.
-- The secret enters only as a digest, so a rotated secret gets a new client (and a new token) while
-- the key itself stays safe to hold in a table.
function M.key(cfg)
  local secret = cfg.credential_secret or cfg.password or ""
  return table.concat({ cfg.api_url, cfg.auth_method, cfg.credential_id or cfg.email or "", cfg.region,
    cfg.tenant_id or "", luaprov.crypto.sha256_hex(secret) }, "\0")
end

return M
