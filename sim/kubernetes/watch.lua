-- Watch streams: the changes after a resourceVersion (from the store's event log) or ADDED for every
-- object, then live changes as store.put writes them; an initial BOOKMARK and one every
-- bookmark_seconds when asked; one ERROR event with a 410 Status for a resourceVersion older than the
-- log. A streaming list (sendInitialEvents=true, client-go's WatchList) opens with ADDED for every
-- object and, when bookmarks are allowed, a BOOKMARK annotated k8s.io/initial-events-end at the
-- current resourceVersion: where the client's cache is complete. The ListOptions of a list or watch
-- are checked as the apiserver checks them (check_options). Every open watch also ticks every
-- sync_seconds, which gives the simulated kubelet and binder a turn (init.lua) while a client only
-- watches.
local luaprov = require "luaprov"
local selectors = require "sim.kubernetes.selectors"
local tables = require "sim.kubernetes.tables"
local store = require "sim.kubernetes.store"
local wire = require "sim.kubernetes.wire"

local M = {}

local NOT_OLDER_THAN = "NotOlderThan"
local INITIAL_EVENTS_END = { ["k8s.io/initial-events-end"] = "true" }

local function bookmark(res, annotations)
  return store.watch_line("BOOKMARK", { kind = res.kind, apiVersion = res.group_version,
    metadata = { resourceVersion = tostring(store.resource_version()), annotations = annotations } })
end

-- A boolean query parameter as the apiserver decodes one (strconv.ParseBool); nil when absent.
local BOOLEANS = { ["1"] = true, t = true, T = true, TRUE = true, ["true"] = true, True = true,
  ["0"] = false, f = false, F = false, FALSE = false, ["false"] = false, False = false }

local function flag(params, name)
  local v = params[name]
  if v == nil then return nil end
  if BOOLEANS[v] == nil then wire.bad_request(('strconv.ParseBool: parsing "%s": invalid syntax'):format(v)) end
  return BOOLEANS[v]
end

--- check_options(params, watching) -> sendInitialEvents (true, false or nil when absent): the
-- ListOptions of a list or a watch checked as the apiserver's validation checks them, every problem
-- named in one 422 Invalid. A watch that sends initial events must match NotOlderThan; bookmarks are
-- not required (without them the initial events simply have no end marker, as on the apiserver).
function M.check_options(params, watching)
  local send = flag(params, "sendInitialEvents")
  local match, rv = params.resourceVersionMatch or "", params.resourceVersion or ""
  local continue = params["continue"] or ""
  local errors = {}
  local function forbidden(field, detail)
    errors[#errors + 1] = { field = field, reason = "FieldValueForbidden", body = "Forbidden: " .. detail }
  end
  local function match_forbidden(detail) forbidden("resourceVersionMatch", detail) end
  local function unsupported(supported)
    errors[#errors + 1] = { field = "resourceVersionMatch", reason = "FieldValueNotSupported",
      body = ('Unsupported value: "%s": supported values: %s'):format(match, supported) }
  end
  if watching then
    if send ~= nil and match ~= NOT_OLDER_THAN then
      match_forbidden("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    end
    if match ~= "" then
      if send == nil then
        match_forbidden("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
      end
      if match ~= NOT_OLDER_THAN then unsupported('"NotOlderThan"') end
      if continue ~= "" then match_forbidden("resourceVersionMatch is forbidden when continue is provided") end
    end
  else
    if match ~= "" then
      if rv == "" then match_forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided") end
      if continue ~= "" then match_forbidden("resourceVersionMatch is forbidden when continue is provided") end
      if match ~= "Exact" and match ~= NOT_OLDER_THAN then unsupported('"Exact", "NotOlderThan", ""') end
      if match == "Exact" and rv == "0" then
        match_forbidden('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
      end
    end
    if send ~= nil then forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list") end
  end
  if #errors > 0 then wire.invalid_options(errors) end
  return send
end

-- The resourceVersion a watch starts from: nil for none ("" or "0": the current state), else the
-- number; 400 for anything else.
local function start_version(from)
  if from == nil or from == "" or from == "0" then return nil end
  local n = tonumber(from)
  if not n or n ~= math.floor(n) then wire.bad_request("invalid resource version: " .. from) end
  return n
end

local function added_lines(w)
  local lines = {}
  for _, e in ipairs(store.list(w.res, w.ns)) do
    if w.filter(e.object) then
      lines[#lines + 1] = w.render and w.render("ADDED", e.object) or store.watch_line("ADDED", e.object)
    end
  end
  return lines
end

-- The lines a watch opens with, or nil when its resourceVersion is older than the log; and that
-- resourceVersion. send is sendInitialEvents (nil: a plain watch).
local function initial_lines(w, params, send)
  local from = start_version(params.resourceVersion)
  if send then
    -- NotOlderThan (checked): the current state will do, unless from is ahead of it
    local now = store.resource_version()
    if from and from > now then wire.too_large(from, now) end
    local lines = added_lines(w)
    if w.bookmarks then lines[#lines + 1] = bookmark(w.res, INITIAL_EVENTS_END) end
    return lines
  end
  if from then return store.since(w, from), from end
  -- without a resourceVersion a plain watch starts with the state, sendInitialEvents=false from now
  return send == nil and added_lines(w) or {}
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
  local send = M.check_options(params, true)
  local w = { res = res, ns = ns, filter = selectors.filter(params), ticks = 0,
    render = table_renderer(res, params, request), bookmarks = flag(params, "allowWatchBookmarks") == true }
  local lines, from = initial_lines(w, params, send)
  if not lines then
    -- as the real API: the watch starts, says 410 in an ERROR event, and ends
    return { status = 200, headers = { ["content-type"] = wire.JSON },
      body = store.watch_line("ERROR", wire.expired(from, store.resource_version())) }
  end
  -- the first bookmark tells a client the current resourceVersion even when nothing changes (a
  -- streaming list's end-of-initial-events bookmark already did)
  if w.bookmarks and not send then lines[#lines + 1] = bookmark(res) end
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
