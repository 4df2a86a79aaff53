-- The simulated cluster's own actors, run lazily: the kubelet (nodes of the Alibaba simulator's
-- instances), the binder (pending pods onto nodes) and the disruption controller (budget status).
-- Lua handlers have no timers, so init.lua calls sync() before serving every request and on every
-- watch tick; a client that polls or watches (the engine renews its Lease every ~2 s) keeps the
-- cluster moving.
--
-- Cheap when nothing changed: the kubelet compares a fingerprint of the instances, and the binder and
-- the disruption controller work only when the resources they read changed since they last ran.
local luaprov = require "luaprov"
local binder = require "sim.kubernetes.binder"
local disruption = require "sim.kubernetes.disruption"
local kubelet = require "sim.kubernetes.kubelet"
local store = require "sim.kubernetes.store"

local M = {}

function M.reset()
  kubelet.reset()
  binder.reset()
  disruption.reset()
end

local function run()
  kubelet.sync()
  binder.sync()
  disruption.sync()
end

--- sync(): one turn of every actor, unless the settings turned them off (actors = false: a bare API
-- server, as another simulator's kubelet posts to in tests). A failing actor is logged and does not
-- fail the request that gave it the turn.
function M.sync()
  if not store.config.actors then return end
  local ok, err = pcall(run)
  if not ok then luaprov.log.error("kubernetes simulator: cluster sync failed", { error = tostring(err) }) end
end

return M
