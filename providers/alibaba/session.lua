-- One OpenAPI client per (region, endpoint, signature scheme), built from the engine's ctx and the
-- environment, so every mapping call of a generation shares its credentials cache and settings.
--   session.client(ctx) -> client | nil, err
-- ctx = {region, cluster_id, endpoint}. ctx.endpoint, else LUAPROV_ALIBABA_ENDPOINT, sends every
-- product to one URL (the simulator, a private gateway); LUAPROV_ALIBABA_SIGNATURE picks "v3"
-- (default) or "v2". Credentials come from the chain in credentials.lua.
local luaprov = require "luaprov"
local client = require "providers.alibaba.client"
local credentials = require "providers.alibaba.credentials"

local M = {}

-- Lives as long as the generation: a reload builds fresh clients from the new code.
local clients = {}

local function setting(value)
  if value == nil or value == "" then return nil end
  return value
end

--- client(ctx) -> the cached client for ctx, or nil, {code = "InvalidConfig", message}.
function M.client(ctx)
  ctx = ctx or {}
  local region = setting(ctx.region) or setting(luaprov.env("ALIBABA_CLOUD_REGION_ID"))
  if not region then
    return nil, { code = "InvalidConfig", message = "no Alibaba Cloud region: ctx.region is empty and "
      .. "ALIBABA_CLOUD_REGION_ID is not set" }
  end
  local endpoint = setting(ctx.endpoint) or setting(luaprov.env("LUAPROV_ALIBABA_ENDPOINT"))
  if endpoint and not endpoint:find("^https?://[^/?#]+") then
    return nil, { code = "InvalidConfig", message = ("Alibaba endpoint %q is not an http(s) URL"):format(endpoint) }
  end
  local scheme = (setting(luaprov.env("LUAPROV_ALIBABA_SIGNATURE")) or "v3"):lower()
  if scheme ~= "v3" and scheme ~= "v2" then
    return nil, { code = "InvalidConfig",
      message = ("LUAPROV_ALIBABA_SIGNATURE must be v3 or v2, not %q"):format(scheme) }
  end
  local key = table.concat({ region, endpoint or "", scheme }, "\0")
  local c = clients[key]
  if not c then
    c = client.new {
      region = region,
      endpoint = endpoint,
      signature = scheme,
      credentials = credentials.chain { region = region, endpoint = endpoint },
    }
    clients[key] = c
  end
  return c
end

--- reset() -> forgets every client (specs that change the environment between cases).
function M.reset()
  for k in pairs(clients) do clients[k] = nil end
end

return M
