-- Watch streams: the changes after a resourceVersion (from the store's event log) or ADDED for every
-- object, then live changes as store.put writes them; an initial BOOKMARK and one every
-- bookmark_seconds when asked; one ERROR event with a 410 Status for a resourceVersion older than the
-- log. Every open watch also ticks every sync_seconds, which gives the simulated kubelet and binder a
-- turn (init.lua) while a client only watches.
local luaprov = require "luaprov"
local selectors = require "sim.kubernetes.selectors"
local tables = require "sim.kubernetes.tables"
local store = require "sim.kubernetes.store"
local wire = require "sim.kubernetes.wire"

local M = {}

local function bookmark(res)
  return store.watch_line("BOOKMARK", { kind = res.kind, apiVersion = res.group_version,
    metadata = { resourceVersion = tostring(store.resource_version()) } })
end

local function initial_lines(w, from)
  if from == nil or from == "" or from == "0" then
    local lines = {}
    for _, e in ipairs(store.list(w.res, w.ns)) do
      if w.filter(e.object) then
        lines[#lines + 1] = w.render and w.render("ADDED", e.object) or store.watch_line("ADDED", e.object)
      end
    end
    return lines
  end
  local n = tonumber(from)
  if not n or n ~= math.floor(n) then wire.bad_request("invalid resource version: " .. from) end
  return store.since(w, n), n
end

-- Ticks come every tick_seconds; a bookmark is due every `every` ticks.
local function tick_plan(bookmarks)
  local sync = store.config.sync_seconds
  if not bookmarks then return sync, nil end
  local tick = math.min(sync, store.config.bookmark_seconds)
  return tick, math.max(1, math.floor(store.config.bookmark_seconds / tick + 0.5))
end

-- A client that prints (kubectl get -w) gets each event's object as a one-row Table.
local function table_renderer(res, params, request)
  local version = tables.wanted(request)
  if not version then return nil end
  return function(kind, obj)
    return store.watch_line(kind, tables.table_of(res, { obj }, { resourceVersion = obj.metadata.resourceVersion },
      params, version))
  end
end

--- start(res, ns, params, request) -> the streaming response of a watch.
function M.start(res, ns, params, request)
  local w = { res = res, ns = ns, filter = selectors.filter(params), ticks = 0,
    render = table_renderer(res, params, request) }
  local lines, from = initial_lines(w, params.resourceVersion)
  if not lines then
    -- as the real API: the watch starts, says 410 in an ERROR event, and ends
    return { status = 200, headers = { ["content-type"] = wire.JSON },
      body = store.watch_line("ERROR", wire.expired(from, store.resource_version())) }
  end
  w.bookmarks = params.allowWatchBookmarks == "true" or params.allowWatchBookmarks == "1"
  -- the first bookmark tells a client the current resourceVersion even when nothing changes
  if w.bookmarks then lines[#lines + 1] = bookmark(res) end
  local tick
  tick, w.bookmark_every = tick_plan(w.bookmarks)
  store.add_watcher(request.stream, w)
  local timeout = tonumber(params.timeoutSeconds)
  return { status = 200, headers = { ["content-type"] = wire.JSON }, body = table.concat(lines),
    stream = request.stream, timeout = timeout and timeout > 0 and timeout or nil, tick = tick }
end

--- tick(request): a tick of a watch stream (engine/script/handler.h); writes a bookmark when one is due.
function M.tick(request)
  local w = store.watcher(request.stream)
  if not w then return end
  if not luaprov.stream.open(request.stream) then
    store.remove_watcher(request.stream)
    return
  end
  w.ticks = w.ticks + 1
  if w.bookmark_every and w.ticks % w.bookmark_every == 0 then
    if not luaprov.stream.write(request.stream, bookmark(w.res)) then store.remove_watcher(request.stream) end
  end
end

return M
