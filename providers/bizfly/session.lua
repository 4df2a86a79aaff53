-- One KaaS client per (endpoint, principal, secret, region), built from the engine's ctx and the
-- environment, so every mapping call of a generation shares one token and one service catalog.
--   session.client(ctx) -> client | nil, err
--   session.reset()     -> forgets every client (specs that change the environment between cases)
--   session.options     -> client options (client.new) every new client gets; specs shorten backoffs
-- The clients live in a module-level table: as long as the script generation, and never in the
-- engine's shared caches, which would hold the tokens beyond a reload and show them in metrics.
local client = require "providers.bizfly.client"
local config = require "providers.bizfly.config"

local M = {}

M.options = {}

local clients = {}

function M.client(ctx)
  local cfg, err = config.from_env(ctx)
  if not cfg then return nil, err end
  local key = config.key(cfg)
  local c = clients[key]
  if not c then
    c = client.new(cfg, M.options)
    clients[key] = c
  end
  return c
end

function M.reset()
  for k in pairs(clients) do clients[k] = nil end
end

return M
