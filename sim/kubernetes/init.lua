-- Kubernetes API simulator (first slice): discovery, CRUD, merge patch, the /status subresource,
-- finalizers, list pagination and label selectors, and watch (streamed, with bookmarks and 410 for a
-- resourceVersion older than the event log) for nodes, pods, namespaces, events, leases and the
-- Karpenter CRDs. Errors are Kubernetes Status objects. Unauthenticated; admin paths under /_sim/.
-- Served by `luaprov sim` through handle(request); see docs/sim.md.
local luaprov = require "luaprov"
local clock = require "sim.clock"
local store = require "sim.kubernetes.store"
local discovery = require "sim.kubernetes.discovery"

local json = luaprov.json
local array_mt = json.array_mt

local M = {}

local function present(v) return v ~= nil and v ~= json.null end

local function array(t) return setmetatable(t or {}, array_mt) end

local function respond(status, value)
  return { status = status, headers = { ["content-type"] = "application/json" }, body = json.encode(value) }
end

-- ---- errors ---------------------------------------------------------------------------------

local ApiError = {}

local function status_object(code, reason, message, details)
  return { kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure", message = message,
    reason = reason, details = details, code = code }
end

local function fail(code, reason, message, details)
  error(setmetatable({ status = status_object(code, reason, message, details) }, ApiError), 0)
end

local function details_of(res, name)
  return { name = name, group = res.group ~= "" and res.group or nil, kind = res.name }
end

local function not_found(res, name)
  fail(404, "NotFound", string.format('%s "%s" not found', res.qualified, name), details_of(res, name))
end

local function conflict(res, name)
  fail(409, "Conflict", string.format('Operation cannot be fulfilled on %s "%s": the object has been modified; '
    .. "please apply your changes to the latest version and try again", res.qualified, name), details_of(res, name))
end

local function invalid(res, name, field, problem)
  local kind = res.group == "" and res.kind or (res.kind .. "." .. res.group)
  fail(422, "Invalid", string.format('%s "%s" is invalid: %s: %s', kind, name or "", field, problem), {
    name = name, group = res.group ~= "" and res.group or nil, kind = res.kind,
    causes = array { { reason = "FieldValueInvalid", message = problem, field = field } },
  })
end

local function expired(from, current)
  return status_object(410, "Expired", string.format("too old resource version: %d (%d)", from, current))
end

-- ---- requests -------------------------------------------------------------------------------

local function unescape(s)
  return (s:gsub("+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function parse_query(query)
  local params = {}
  for pair in (query or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    params[unescape(k)] = unescape(v)
  end
  return params
end

local function body_object(request, res, name)
  local ok, value = pcall(json.decode, request.body or "")
  if not ok or type(value) ~= "table" then
    fail(400, "BadRequest", "the body of the request was in an unknown format - accepted media types include: "
      .. "application/json, application/yaml")
  end
  if type(value.metadata) ~= "table" then
    if value.metadata ~= nil then invalid(res, name, "metadata", "must be an object") end
    value.metadata = {}
  end
  return value
end

-- Label selectors: a=b, a==b, a!=b, a, !a, a in (x,y), a notin (x,y), comma-separated.
local function parse_selector(text)
  local terms = {}
  if not text or text == "" then return terms end
  local rest = text
  while rest ~= "" do
    local term, tail = rest:match("^%s*([^,(]-%s*%b())%s*,?(.*)$")
    if not term then term, tail = rest:match("^%s*([^,]*),?(.*)$") end
    rest = tail
    local k, op, values = term:match("^%s*([%w%./_-]+)%s+(n?o?t?in)%s*%((.*)%)%s*$")
    if k and (op == "in" or op == "notin") then
      local set = {}
      for v in values:gmatch("[^,%s]+") do set[v] = true end
      terms[#terms + 1] = { key = k, op = op, set = set }
    else
      local a, o, b = term:match("^%s*([%w%./_-]+)%s*([!=]=?)%s*([%w%./_-]*)%s*$")
      if a then
        terms[#terms + 1] = { key = a, op = o == "!=" and "!=" or "=", value = b }
      elseif term:match("^%s*!%s*[%w%./_-]+%s*$") then
        terms[#terms + 1] = { key = term:match("[%w%./_-]+"), op = "!" }
      elseif term:match("^%s*[%w%./_-]+%s*$") then
        terms[#terms + 1] = { key = term:match("[%w%./_-]+"), op = "exists" }
      elseif term:match("%S") then
        fail(400, "BadRequest", "unable to parse requirement: " .. term)
      end
    end
  end
  return terms
end

local function selector_matches(terms, labels)
  labels = type(labels) == "table" and labels or {}
  for _, t in ipairs(terms) do
    local v = labels[t.key]
    if t.op == "=" and v ~= t.value then return false end
    if t.op == "!=" and v == t.value then return false end
    if t.op == "exists" and v == nil then return false end
    if t.op == "!" and v ~= nil then return false end
    if t.op == "in" and not (v and t.set[v]) then return false end
    if t.op == "notin" and v and t.set[v] then return false end
  end
  return true
end

-- fieldSelector: metadata.name and metadata.namespace only.
local function parse_fields(text)
  local want = {}
  for term in (text or ""):gmatch("[^,]+") do
    local k, v = term:match("^%s*([%w%.]+)%s*==?%s*(.-)%s*$")
    if k ~= "metadata.name" and k ~= "metadata.namespace" then
      fail(400, "BadRequest", 'field label not supported: ' .. (k or term))
    end
    want[k] = v
  end
  return want
end

local function make_filter(params)
  local terms = parse_selector(params.labelSelector)
  local fields = parse_fields(params.fieldSelector)
  return function(obj)
    local md = obj.metadata
    if fields["metadata.name"] and md.name ~= fields["metadata.name"] then return false end
    if fields["metadata.namespace"] and (md.namespace or "") ~= fields["metadata.namespace"] then return false end
    return selector_matches(terms, md.labels)
  end
end

-- ---- faults ---------------------------------------------------------------------------------

local faults, next_fault = {}, 0

local function take_fault(verb, res)
  for i, rule in ipairs(faults) do
    if (rule.verb == nil or rule.verb == "*" or rule.verb == verb)
      and (rule.resource == nil or rule.resource == "*" or rule.resource == res.name) then
      if (rule.skip or 0) > 0 then
        rule.skip = rule.skip - 1
      else
        if rule.count then
          rule.count = rule.count - 1
          if rule.count <= 0 then table.remove(faults, i) end
        end
        return rule
      end
    end
  end
  return nil
end

local FAULT_STATUS = {
  [409] = { "Conflict", "Operation cannot be fulfilled: the object has been modified; please apply your "
    .. "changes to the latest version and try again" },
  [410] = { "Expired", "The provided continue parameter is too old to display a consistent list result." },
  [429] = { "TooManyRequests", "Too many requests, please try again later." },
  [500] = { "InternalError", "Internal error occurred: injected by the simulator" },
  [503] = { "ServiceUnavailable", "The server is currently unable to handle the request" },
}

local function apply_fault(verb, res)
  local rule = take_fault(verb, res)
  if not rule then return end
  if rule.kind == "slow" then
    luaprov.time.sleep(rule.seconds or 1)
    return
  end
  local code = rule.status or 500
  local known = FAULT_STATUS[code] or FAULT_STATUS[500]
  fail(code, known[1], rule.message or known[2])
end

-- ---- objects --------------------------------------------------------------------------------

local NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
local generated = 0

local function generate_name(prefix)
  for _ = 1, 100 do
    generated = generated + 1
    local n, suffix = generated * 7919 + 104729, {}
    for i = 1, 5 do
      local j = n % #NAME_CHARS + 1
      suffix[i] = NAME_CHARS:sub(j, j)
      n = n // #NAME_CHARS
    end
    local name = prefix .. table.concat(suffix)
    if #name <= 253 then return name end
  end
  return prefix
end

local function valid_name(name)
  return #name <= 253 and name:match("^[a-z0-9][-a-z0-9.]*$") ~= nil and name:match("[a-z0-9]$") ~= nil
end

-- Everything but metadata and status: a change bumps metadata.generation.
local function spec_of(obj)
  local t = {}
  for k, v in pairs(obj) do
    if k ~= "metadata" and k ~= "status" and k ~= "apiVersion" and k ~= "kind" then t[k] = v end
  end
  return json.encode(t)
end

local function has_finalizers(obj)
  return type(obj.metadata.finalizers) == "table" and #obj.metadata.finalizers > 0
end

local function create(res, ns, request)
  local obj = body_object(request, res, nil)
  local md = obj.metadata
  if res.namespaced then
    if present(md.namespace) and md.namespace ~= ns then
      fail(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
    end
    md.namespace = ns
  else
    md.namespace = nil
  end
  if (not present(md.name) or md.name == "") and present(md.generateName) then
    md.name = generate_name(md.generateName)
  end
  if not present(md.name) or md.name == "" then
    invalid(res, nil, "metadata.name", "Required value: name or generateName is required")
  end
  if type(md.name) ~= "string" or not valid_name(md.name) then
    invalid(res, tostring(md.name), "metadata.name", "Invalid value: " .. json.encode(md.name) .. ": a lowercase "
      .. "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'")
  end
  if store.get(res, ns, md.name) then
    fail(409, "AlreadyExists", string.format('%s "%s" already exists', res.qualified, md.name),
      details_of(res, md.name))
  end
  obj.apiVersion, obj.kind = res.group_version, res.kind
  md.uid = store.next_uid()
  md.creationTimestamp = store.now()
  md.generation = 1
  md.deletionTimestamp, md.resourceVersion = nil, nil
  if res.crd then obj.status = nil end
  return 201, store.put(res, ns, md.name, obj, "ADDED")
end

-- Stores next in place of current (update, patch): keeps what the server owns, checks the
-- resourceVersion, bumps generation on a spec change, deletes when the last finalizer goes.
local function replace(res, ns, name, current, next_obj, subresource)
  local md = next_obj.metadata
  if type(md) ~= "table" then
    md = {}
    next_obj.metadata = md
  end
  if present(md.name) and md.name ~= name then
    fail(400, "BadRequest", "the name of the object (" .. tostring(md.name)
      .. ") does not match the name on the URL (" .. name .. ")")
  end
  if present(md.resourceVersion) and md.resourceVersion ~= "" and md.resourceVersion
    ~= current.metadata.resourceVersion then
    conflict(res, name)
  end
  local merged
  if subresource == "status" then
    merged = store.copy(current)
    merged.status = next_obj.status
  else
    merged = next_obj
    if res.status then merged.status = store.copy(current).status end
    local cm = current.metadata
    md.name, md.namespace, md.uid, md.creationTimestamp = cm.name, cm.namespace, cm.uid, cm.creationTimestamp
    md.deletionTimestamp, md.deletionGracePeriodSeconds = cm.deletionTimestamp, cm.deletionGracePeriodSeconds
    md.generation = cm.generation
    if spec_of(merged) ~= spec_of(current) then md.generation = (cm.generation or 1) + 1 end
  end
  merged.apiVersion, merged.kind = res.group_version, res.kind
  merged.metadata.resourceVersion = current.metadata.resourceVersion
  if json.encode(merged) == json.encode(current) then return 200, store.copy(current) end
  if present(merged.metadata.deletionTimestamp) and not has_finalizers(merged) then
    return 200, store.put(res, ns, name, merged, "DELETED")
  end
  return 200, store.put(res, ns, name, merged, "MODIFIED")
end

-- RFC 7386 JSON merge patch.
local function merge_patch(target, patch)
  if type(patch) ~= "table" or getmetatable(patch) == array_mt then return patch end
  if type(target) ~= "table" or getmetatable(target) == array_mt then target = {} end
  for k, v in pairs(patch) do
    if v == json.null then target[k] = nil else target[k] = merge_patch(target[k], v) end
  end
  return target
end

local function patch(res, ns, name, current, request, subresource)
  local ctype = (request.headers["content-type"] or ""):match("^[^;%s]+") or ""
  if ctype ~= "application/merge-patch+json" and not (ctype == "application/strategic-merge-patch+json"
      and not res.crd) then
    fail(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types "
      .. "include: application/merge-patch+json" .. (res.crd and "" or ", application/strategic-merge-patch+json"))
  end
  local ok, p = pcall(json.decode, request.body or "")
  if not ok or type(p) ~= "table" then fail(400, "BadRequest", "the patch is not a JSON object") end
  local next_obj = merge_patch(store.copy(current), p)
  -- a resourceVersion in the patch is a precondition; none means "whatever is current"
  if not (type(p.metadata) == "table" and present(p.metadata.resourceVersion)) then
    next_obj.metadata.resourceVersion = nil
  end
  return replace(res, ns, name, current, next_obj, subresource)
end

local function delete(res, ns, name, current)
  if has_finalizers(current) then
    if present(current.metadata.deletionTimestamp) then return 200, store.copy(current) end
    local obj = store.copy(current)
    obj.metadata.deletionTimestamp = store.now()
    obj.metadata.deletionGracePeriodSeconds = 0
    return 200, store.put(res, ns, name, obj, "MODIFIED")
  end
  return 200, store.put(res, ns, name, store.copy(current), "DELETED")
end

local function list(res, ns, params)
  local filter = make_filter(params)
  local limit = tonumber(params.limit) or 0
  local after = params.continue ~= nil and params.continue ~= "" and params.continue or nil
  if after then
    local decoded = luaprov.crypto.base64_decode(after)
    if not decoded then fail(400, "BadRequest", "continue key is not valid") end
    after = decoded
  end
  local items, next_key, remaining = array(), nil, 0
  for _, e in ipairs(store.list(res, ns)) do
    if (not after or e.key > after) and filter(e.object) then
      if limit > 0 and #items >= limit then
        remaining = remaining + 1
      else
        items[#items + 1] = e.object
        next_key = e.key
      end
    end
  end
  local meta = { resourceVersion = tostring(store.resource_version()) }
  if remaining > 0 then
    meta.continue = luaprov.crypto.base64_encode(next_key)
    meta.remainingItemCount = remaining
  end
  return 200, { kind = res.kind .. "List", apiVersion = res.group_version, metadata = meta, items = items }
end

local function watch(res, ns, params, request)
  local w = { res = res, ns = ns, filter = make_filter(params) }
  local from = params.resourceVersion
  local lines
  if from == nil or from == "" or from == "0" then
    lines = {}
    for _, e in ipairs(store.list(res, ns)) do
      if w.filter(e.object) then lines[#lines + 1] = store.watch_line("ADDED", e.object) end
    end
  else
    local n = tonumber(from)
    if not n or n ~= math.floor(n) then
      fail(400, "BadRequest", "invalid resource version: " .. from)
    end
    lines = store.since(w, n)
    if not lines then
      -- as the real API: the watch starts, says 410 in an ERROR event, and ends
      return { status = 200, headers = { ["content-type"] = "application/json" },
        body = store.watch_line("ERROR", expired(n, store.resource_version())) }
    end
  end
  local bookmarks = params.allowWatchBookmarks == "true" or params.allowWatchBookmarks == "1"
  w.bookmarks = bookmarks
  if bookmarks then
    -- one at once, so a client learns the current resourceVersion even when nothing changes
    lines[#lines + 1] = store.watch_line("BOOKMARK", { kind = res.kind, apiVersion = res.group_version,
      metadata = { resourceVersion = tostring(store.resource_version()) } })
  end
  store.add_watcher(request.stream, w)
  local timeout = tonumber(params.timeoutSeconds)
  return { status = 200, headers = { ["content-type"] = "application/json" }, body = table.concat(lines),
    stream = request.stream, timeout = timeout and timeout > 0 and timeout or nil,
    tick = bookmarks and store.config.bookmark_seconds or nil }
end

-- A tick of a watch stream (engine/script/handler.h): a bookmark when the client asked for them.
local function tick(request)
  local w = store.watcher(request.stream)
  if not w then return { status = 200 } end
  if not luaprov.stream.open(request.stream) then
    store.remove_watcher(request.stream)
  elseif w.bookmarks then
    local line = store.watch_line("BOOKMARK", { kind = w.res.kind, apiVersion = w.res.group_version,
      metadata = { resourceVersion = tostring(store.resource_version()) } })
    if not luaprov.stream.write(request.stream, line) then store.remove_watcher(request.stream) end
  end
  return { status = 200 }
end

local VERB_OF = { GET = "get", POST = "create", PUT = "update", PATCH = "patch", DELETE = "delete" }

local function serve_resource(request, group, version, parts)
  local ns, plural, name, sub
  if parts[1] == "namespaces" and #parts >= 3 and parts[3] ~= "status" then
    ns, plural, name, sub = parts[2], parts[3], parts[4], parts[5]
  else
    plural, name, sub = parts[1], parts[2], parts[3]
  end
  local res = store.find(group, version, plural or "")
  if not res or #parts > (ns and 5 or 3) then
    fail(404, "NotFound", "the server could not find the requested resource")
  end
  if ns and not res.namespaced then fail(404, "NotFound", "the server could not find the requested resource") end
  if sub ~= nil and (sub ~= "status" or not res.status) then
    fail(404, "NotFound", "the server could not find the requested resource")
  end
  local params = parse_query(request.query)
  local method = request.method == "HEAD" and "GET" or request.method
  local verb = VERB_OF[method]
  if not verb then fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource") end
  if name == nil then
    if method == "GET" then
      local watching = params.watch == "1" or params.watch == "true"
      apply_fault(watching and "watch" or "list", res)
      if watching then return watch(res, ns, params, request) end
      return respond(list(res, ns, params))
    end
    if method == "POST" then
      if res.namespaced and not ns then fail(404, "NotFound", "the server could not find the requested resource") end
      apply_fault("create", res)
      return respond(create(res, ns, request))
    end
    fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
  end
  if res.namespaced and not ns then fail(404, "NotFound", "the server could not find the requested resource") end
  if method == "POST" then
    fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
  end
  apply_fault(verb, res)
  local current = store.get(res, ns, name)
  if not current then not_found(res, name) end
  if method == "GET" then return respond(200, current) end
  if method == "PUT" then return respond(replace(res, ns, name, current, body_object(request, res, name), sub)) end
  if method == "PATCH" then return respond(patch(res, ns, name, current, request, sub)) end
  return respond(delete(res, ns, name, current))
end

local function split(path)
  local parts = {}
  for p in path:gmatch("[^/]+") do parts[#parts + 1] = unescape(p) end
  return parts
end

local function api(request)
  local path = request.path
  local parts = split(path)
  if path == "/version" then
    return respond(200, { major = "1", minor = "31", gitVersion = "v1.31.0-luaprov-sim", platform = "linux/amd64" })
  end
  if parts[1] == "api" then
    if #parts == 1 then
      return respond(200, { kind = "APIVersions", versions = array { "v1" }, serverAddressByClientCIDRs = array {
        { clientCIDR = "0.0.0.0/0", serverAddress = request.headers.host or "127.0.0.1" } } })
    end
    if parts[2] ~= "v1" then fail(404, "NotFound", "the server could not find the requested resource") end
    if #parts == 2 then return respond(200, discovery.resource_list("", "v1")) end
    return serve_resource(request, "", "v1", { table.unpack(parts, 3) })
  end
  if parts[1] == "apis" then
    if #parts == 1 then return respond(200, discovery.group_list()) end
    if #parts == 2 then
      for _, g in ipairs(discovery.group_list().groups) do
        if g.name == parts[2] then return respond(200, { kind = "APIGroup", apiVersion = "v1", name = g.name,
          versions = g.versions, preferredVersion = g.preferredVersion }) end
      end
      fail(404, "NotFound", "the server could not find the requested resource")
    end
    if #parts == 3 then
      local list_of = discovery.resource_list(parts[2], parts[3])
      if not list_of then fail(404, "NotFound", "the server could not find the requested resource") end
      return respond(200, list_of)
    end
    return serve_resource(request, parts[2], parts[3], { table.unpack(parts, 4) })
  end
  fail(404, "NotFound", "the server could not find the requested resource")
end

-- ---- admin ----------------------------------------------------------------------------------

local function admin(request)
  local path, method = request.path, request.method
  local body = {}
  if request.body and request.body ~= "" then
    local ok, value = pcall(json.decode, request.body)
    if not ok or type(value) ~= "table" then return respond(400, { error = "the body is not JSON" }) end
    body = value
  end
  if path == "/_sim/state" and method == "GET" then
    local counts = {}
    for _, r in ipairs(store.RESOURCES) do counts[r.qualified] = store.count(r) end
    return respond(200, { resource_version = store.resource_version(), compacted = store.compacted(),
      objects = counts, watches = store.watcher_count(), config = store.config,
      faults = array({ table.unpack(faults) }),
      time = clock.state() })
  end
  if path == "/_sim/reset" and method == "POST" then
    store.reset()
    faults = {}
    return respond(200, { resource_version = store.resource_version() })
  end
  if path == "/_sim/config" and method == "POST" then
    for _, k in ipairs { "bookmark_seconds", "event_log" } do
      if body[k] ~= nil then
        if type(body[k]) ~= "number" or body[k] <= 0 then return respond(400, { error = k .. " must be > 0" }) end
        store.config[k] = body[k]
      end
    end
    return respond(200, store.config)
  end
  if path == "/_sim/faults" then
    if method == "GET" then return respond(200, { faults = array({ table.unpack(faults) }) }) end
    if method == "DELETE" then
      faults = {}
      return respond(200, { faults = array() })
    end
    if method == "POST" then
      local rules = getmetatable(body) == array_mt and body or { body }
      local added = array()
      for _, rule in ipairs(rules) do
        local kind = rule.kind or "error"
        if kind == "drop_watches" then
          added[#added + 1] = { kind = kind, dropped = store.drop_watches() }
        elseif kind == "compact" then
          store.compact()
          added[#added + 1] = { kind = kind, compacted = store.compacted() }
        elseif kind == "error" or kind == "slow" then
          next_fault = next_fault + 1
          rule.id, rule.kind = next_fault, kind
          faults[#faults + 1] = rule
          added[#added + 1] = rule
        else
          return respond(400, { error = "unknown fault kind " .. tostring(kind) })
        end
      end
      return respond(200, { added = added, faults = array({ table.unpack(faults) }) })
    end
  end
  return respond(404, { error = "no admin path " .. method .. " " .. path })
end

--- handle(request) -> response. The engine's entry point (engine/script/handler.h).
function M.handle(request)
  if request.method == "TICK" then return tick(request) end
  local path = request.path or "/"
  local ok, res = pcall(function()
    if path:sub(1, 6) == "/_sim/" then return admin(request) end
    return api(request)
  end)
  if ok then return res end
  if type(res) == "table" and getmetatable(res) == ApiError then return respond(res.status.code, res.status) end
  luaprov.log.error("kubernetes simulator failed", { path = path, error = tostring(res) })
  return respond(500, status_object(500, "InternalError", "Internal error occurred: " .. tostring(res)))
end

return M
