-- The Kubernetes simulator's admin paths under /_sim/ (JSON in and out, errors {"error": ...}):
-- state for assertions, reset, settings, fault rules, the shared simulated clock, and the kubelet's
-- forced node conditions (for repair tests), and the Nodes an external kubelet posts. See docs/sim.md.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local rules = require "sim.rules"
local controllers = require "sim.kubernetes.controllers"
local faults = require "sim.kubernetes.faults"
local kubelet = require "sim.kubernetes.kubelet"
local objects = require "sim.kubernetes.objects"
local store = require "sim.kubernetes.store"
local wire = require "sim.kubernetes.wire"

local array = wire.array

local M = {}

local admin = rules.admin({ json = luaprov.json, faults = faults, objects_only = true,
  wire = { list = array, json_response = wire.respond } })
local reply, bad, body_json = admin.reply, admin.bad, admin.body_json

local function get_state()
  local counts = {}
  for _, r in ipairs(store.RESOURCES) do counts[r.qualified] = store.count(r) end
  return reply(200, { resource_version = store.resource_version(), compacted = store.compacted(),
    objects = counts, watches = store.watcher_count(), config = store.config, faults = admin.fault_list(),
    kubelet = kubelet.summary(), time = clock.state() })
end

local function post_reset()
  store.reset()
  faults.reset()
  objects.reset()
  controllers.reset()
  return reply(200, { resource_version = store.resource_version() })
end

local SETTINGS = { "bookmark_seconds", "event_log", "sync_seconds" }

local function post_config(body)
  for _, k in ipairs(SETTINGS) do
    if body[k] ~= nil then
      if type(body[k]) ~= "number" or body[k] <= 0 then return bad(k .. " must be > 0") end
    end
  end
  if body.actors ~= nil and type(body.actors) ~= "boolean" then return bad("actors must be true or false") end
  for _, k in ipairs(SETTINGS) do store.config[k] = body[k] or store.config[k] end
  if body.actors ~= nil then store.config.actors = body.actors end
  return reply(200, store.config)
end

local function post_advance(body)
  local seconds = body.seconds
  if type(seconds) ~= "number" or seconds < 0 or seconds ~= seconds or seconds == math.huge then
    return bad("seconds must be a number >= 0")
  end
  clock.advance(seconds)
  controllers.sync()
  return reply(200, clock.state())
end

local function post_kubelet(body)
  local node, err = kubelet.force(body.node, body.ready)
  if not node then return reply(err:find("^no node") and 404 or 400, { error = err }) end
  return reply(200, node)
end

local POSTS = { ["/_sim/config"] = post_config, ["/_sim/advance"] = post_advance, ["/_sim/kubelet"] = post_kubelet }

--- handle(request) -> the response of an admin path.
function M.handle(request)
  local path, method = request.path, request.method
  if path == "/_sim/state" and method == "GET" then return get_state() end
  if path == "/_sim/kubelet/nodes" and method == "GET" then return reply(200, kubelet.external()) end
  if path == "/_sim/reset" and method == "POST" then return post_reset() end
  local post = POSTS[path]
  if post and method == "POST" then
    local body, err = body_json(request, false)
    if not body then return bad(err) end
    return post(body)
  end
  return admin.handle_faults(request) or reply(404, { error = "no admin path " .. method .. " " .. path })
end

return M
