-- Kubernetes API simulator: enough of an apiserver for the engine's controllers and a stock kubectl.
-- Discovery (legacy and aggregated), OpenAPI v3, Tables for kubectl get, CRUD with merge and
-- strategic merge patch, the /status subresource, finalizers, pagination, selectors, watch with
-- bookmarks and 410, streaming lists (sendInitialEvents), dryRun and fieldValidation,
-- PodDisruptionBudgets with the eviction subresource, pod binding; and a simulated cluster behind it: a
-- kubelet per Alibaba simulator instance, a binder for pending pods, the budgets' status
-- (controllers.lua). Errors are Kubernetes Status objects;
-- unauthenticated; admin paths under /_sim/. Served by `luaprov sim` through handle(request); see
-- docs/sim.md.
--
-- Routing only. The parts: wire (responses, Status errors, parsing), store (objects, resourceVersion,
-- event log, watchers), objects (the verbs), patch, selectors, validation and schemas (fieldValidation),
-- watch, discovery, openapi, tables (with jsonpath), faults, admin; the actors kubelet, binder (with
-- fit, quantity) and disruption (with conditions), run by controllers.
local luaprov = require "luaprov"
local admin = require "sim.kubernetes.admin"
local binder = require "sim.kubernetes.binder"
local controllers = require "sim.kubernetes.controllers"
local discovery = require "sim.kubernetes.discovery"
local disruption = require "sim.kubernetes.disruption"
local faults = require "sim.kubernetes.faults"
local objects = require "sim.kubernetes.objects"
local openapi = require "sim.kubernetes.openapi"
local store = require "sim.kubernetes.store"
local tables = require "sim.kubernetes.tables"
local validation = require "sim.kubernetes.validation"
local watch = require "sim.kubernetes.watch"
local wire = require "sim.kubernetes.wire"

local respond = wire.respond

local M = {}

local VERB_OF = { GET = "get", POST = "create", PUT = "update", PATCH = "patch", DELETE = "delete" }
local ACTIONS = { eviction = disruption.evict, binding = binder.bind }

-- {ns, plural, name, subresource} of the path below /api/v1 or /apis/<group>/<version>.
local function locate(parts)
  if parts[1] == "namespaces" and #parts >= 3 and parts[3] ~= "status" then
    if #parts > 5 then wire.no_route() end
    return parts[2], parts[3], parts[4], parts[5]
  end
  if #parts > 3 then wire.no_route() end
  return nil, parts[1], parts[2], parts[3]
end

local function has_action(res, sub)
  for _, a in ipairs(res.actions or {}) do
    if a.name == sub then return true end
  end
  return false
end

-- the response of a write, with the Warning header of fieldValidation=Warn
local function answer(opts, status, value)
  return respond(status, value, validation.warning_headers(opts))
end

local function serve_collection(request, res, ns, params)
  local method = request.method
  if method == "GET" then
    local watching = params.watch == "1" or params.watch == "true"
    faults.apply(watching and "watch" or "list", res, request)
    if watching then return watch.start(res, ns, params, request) end
    watch.check_options(params, false)
    local status, list = objects.list(res, ns, params)
    local version = tables.wanted(request)
    if version then list = tables.table_of(res, list.items, list.metadata, params, version) end
    return respond(status, list)
  end
  if method ~= "POST" then wire.method_not_allowed() end
  if res.namespaced and not ns then wire.no_route() end
  faults.apply("create", res, request)
  local opts = validation.options(params)
  return answer(opts, objects.create(res, ns, request, opts))
end

local function delete_options(request)
  if (request.body or "") == "" then return nil end
  return wire.body_json(request)
end

local function serve_object(request, res, ns, name, sub, params)
  local method = request.method
  if sub and has_action(res, sub) then
    if method ~= "POST" then wire.method_not_allowed() end
    faults.apply("create", res, request)
    return ACTIONS[sub](ns, name, request, params)
  end
  if sub ~= nil and (sub ~= "status" or not res.status) then wire.no_route() end
  if method == "POST" then wire.method_not_allowed() end
  faults.apply(VERB_OF[method], res, request)
  local current = store.get(res, ns, name)
  if not current then wire.not_found(res, name) end
  if method == "GET" then
    local version = tables.wanted(request)
    if not version then return respond(200, current) end
    return respond(200, tables.table_of(res, { current }, { resourceVersion = current.metadata.resourceVersion },
      params, version))
  end
  if method == "DELETE" then
    local body = delete_options(request)
    return respond(objects.delete(res, ns, name, current, validation.options(params, body), body))
  end
  local opts = validation.options(params)
  if method == "PUT" then
    return answer(opts, objects.replace(res, ns, name, current, wire.body_object(request, res, name), sub, opts))
  end
  return answer(opts, objects.patch(res, ns, name, current, request, sub, opts))
end

local function serve_resource(request, group, version, parts)
  local ns, plural, name, sub = locate(parts)
  local res = store.find(group, version, plural or "")
  if not res or (ns and not res.namespaced) then wire.no_route() end
  if request.method == "HEAD" then request.method = "GET" end
  if not VERB_OF[request.method] then wire.method_not_allowed() end
  local params = wire.parse_query(request.query)
  if name == nil then return serve_collection(request, res, ns, params) end
  if res.namespaced and not ns then wire.no_route() end
  return serve_object(request, res, ns, name, sub, params)
end

-- /api and /apis answer the aggregated APIGroupDiscoveryList when the client asks for it first.
local function discovery_root(request, legacy)
  local version = wire.accepts(request, "APIGroupDiscoveryList", "apidiscovery.k8s.io", discovery.AGGREGATED_VERSIONS)
  if version then
    return respond(200, discovery.aggregated(legacy, version), { ["content-type"] = discovery.content_type(version) })
  end
  return respond(200, legacy and discovery.versions(request) or discovery.group_list())
end

local function serve_openapi(parts)
  if #parts == 2 then return respond(200, openapi.root()) end
  local text = openapi.document(table.concat(parts, "/", 3))
  if not text then wire.no_route() end
  return { status = 200, headers = { ["content-type"] = wire.JSON }, body = text }
end

local function serve_core(request, parts)
  if #parts == 1 then return discovery_root(request, true) end
  if parts[2] ~= "v1" then wire.no_route() end
  if #parts == 2 then return respond(200, discovery.resource_list("", "v1")) end
  return serve_resource(request, "", "v1", { table.unpack(parts, 3) })
end

local function serve_groups(request, parts)
  if #parts == 1 then return discovery_root(request, false) end
  if #parts == 2 then return respond(200, discovery.group(parts[2]) or wire.no_route()) end
  if #parts == 3 then return respond(200, discovery.resource_list(parts[2], parts[3]) or wire.no_route()) end
  return serve_resource(request, parts[2], parts[3], { table.unpack(parts, 4) })
end

local function api(request)
  local parts = wire.split_path(request.path)
  if request.path == "/version" then
    return respond(200, { major = "1", minor = "31", gitVersion = "v1.31.0-luaprov-sim", platform = "linux/amd64" })
  end
  if parts[1] == "api" then return serve_core(request, parts) end
  if parts[1] == "apis" then return serve_groups(request, parts) end
  if parts[1] == "openapi" and parts[2] == "v3" then return serve_openapi(parts) end
  wire.no_route()
end

--- handle(request) -> response. The engine's entry point (engine/script/handler.h).
function M.handle(request)
  controllers.sync()
  if request.method == "TICK" then
    watch.tick(request)
    return { status = 200 }
  end
  local path = request.path or "/"
  local ok, res = pcall(function()
    if path:sub(1, 6) == "/_sim/" then return admin.handle(request) end
    return api(request)
  end)
  -- a timeout fault: the call took effect; its answer comes too late for the client
  if request.answer_late then luaprov.time.sleep(request.answer_late) end
  if ok then return res end
  local status = wire.status_of(res)
  if status then return respond(status.code, status) end
  luaprov.log.error("kubernetes simulator failed", { path = path, error = tostring(res) })
  return respond(500, wire.status_object(500, "InternalError", "Internal error occurred: " .. tostring(res)))
end

return M
