-- OpenAPI v3 of the Kubernetes simulator: GET /openapi/v3 lists one document per group/version, and
-- each document (/openapi/v3/api/v1, /openapi/v3/apis/<group>/<version>) has the paths and operations
-- of its resources and the schemas of their kinds (schemas.lua).
--
-- kubectl reads these to decide how to validate: when the PATCH operation of a kind carries
-- `x-kubernetes-group-version-kind` and a `fieldValidation` query parameter, it leaves validation to
-- the server (fieldValidation=Strict) instead of failing for want of a schema to validate with.
-- The documents never change while the simulator runs, so each is built once.
local luaprov = require "luaprov"
local schemas = require "sim.kubernetes.schemas"
local store = require "sim.kubernetes.store"
local wire = require "sim.kubernetes.wire"

local json = luaprov.json
local array = wire.array

local M = {}

local META = "io.k8s.apimachinery.pkg.apis.meta.v1."

local function ref(name) return { ["$ref"] = "#/components/schemas/" .. name } end

local function query(name, type_name, description)
  return { name = name, ["in"] = "query", description = description, schema = { type = type_name or "string" } }
end

local function path_param(name)
  return { name = name, ["in"] = "path", required = true, schema = { type = "string" } }
end

local WRITE_PARAMS = {
  query("dryRun", "string", "When present, indicates that modifications should not be persisted."),
  query("fieldManager", "string", "A name associated with the actor or entity that is making these changes."),
  query("fieldValidation", "string", "How the server treats unknown or duplicate fields: Ignore, Warn or Strict."),
}
local LIST_PARAMS = { "allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit",
  "resourceVersion", "timeoutSeconds", "watch" }

local function params(list) return array(list) end

local function json_body(schema_name)
  return { content = { ["application/json"] = { schema = ref(schema_name) } } }
end

local function response(schema_name, code)
  return { [code or "200"] = { description = "OK", content = { ["application/json"] = { schema = ref(schema_name) } } },
    ["401"] = { description = "Unauthorized" } }
end

local function operation(id, action, gvk, schema_name, extra)
  extra = extra or {}
  return { operationId = id, ["x-kubernetes-action"] = action, ["x-kubernetes-group-version-kind"] = gvk,
    responses = response(schema_name, extra.code), parameters = extra.parameters, requestBody = extra.body }
end

-- Only merge patch is listed, though built-in kinds take strategic merge patch too: for a kind whose
-- PATCH lists it, kubectl apply computes the strategic patch from these schemas, which are too
-- permissive for that ("unable to find api field"), instead of from its compiled-in types.
local function patch_body()
  return { content = { ["application/merge-patch+json"] = { schema = ref(META .. "Patch") } }, required = true }
end

local function camel(s) return (s:gsub("^%l", string.upper):gsub("[%.%-](%w)", string.upper)) end

-- operationIds as the apiserver spells them: patchCoreV1Node, patchKarpenterShV1NodePoolStatus
local function op_id(verb, res, suffix)
  return verb .. (res.group == "" and "Core" or camel(res.group)) .. camel(res.version) .. camel(res.kind)
    .. (suffix and camel(suffix) or "")
end

local function write_ops(res, gvk, schema_name, subresource)
  return {
    get = operation(op_id("read", res, subresource), "get", gvk, schema_name),
    put = operation(op_id("replace", res, subresource), "put", gvk, schema_name,
      { parameters = params(WRITE_PARAMS), body = json_body(schema_name) }),
    patch = operation(op_id("patch", res, subresource), "patch", gvk, schema_name,
      { parameters = params { WRITE_PARAMS[1], WRITE_PARAMS[2], WRITE_PARAMS[3], query("force", "boolean") },
        body = patch_body() }),
  }
end

local function collection_ops(res, gvk, schema_name)
  local list_params = array()
  for i, p in ipairs(LIST_PARAMS) do list_params[i] = query(p) end
  return {
    get = operation(op_id("list", res), "list", gvk, schemas.name(res.group, res.version, res.kind .. "List"),
      { parameters = list_params }),
    post = operation(op_id("create", res), "post", gvk, schema_name,
      { parameters = params(WRITE_PARAMS), body = json_body(schema_name), code = "201" }),
  }
end

local function add_resource_paths(paths, res)
  local prefix = "/" .. (res.group == "" and "api/" or "apis/" .. res.group .. "/") .. res.version
  local scope = res.namespaced and (prefix .. "/namespaces/{namespace}/") or (prefix .. "/")
  local scope_params = res.namespaced and { path_param("namespace") } or {}
  local gvk = { group = res.group, version = res.version, kind = res.kind }
  local schema_name = schemas.name(res.group, res.version, res.kind)

  local collection = collection_ops(res, gvk, schema_name)
  collection.parameters = params(scope_params)
  paths[scope .. res.name] = collection

  local item = write_ops(res, gvk, schema_name)
  item.delete = operation(op_id("delete", res), "delete", gvk, META .. "Status",
    { parameters = params(WRITE_PARAMS), body = json_body(META .. "DeleteOptions") })
  item.parameters = params { path_param("name"), scope_params[1] }
  paths[scope .. res.name .. "/{name}"] = item

  if res.status then
    local status = write_ops(res, gvk, schema_name, "status")
    status.parameters = item.parameters
    paths[scope .. res.name .. "/{name}/status"] = status
  end
  for _, a in ipairs(res.actions or {}) do
    local action_gvk = { group = a.group, version = a.version, kind = a.kind }
    local body_schema = schemas.name(a.group, a.version, a.kind)
    paths[scope .. res.name .. "/{name}/" .. a.name] = {
      post = operation(op_id("create", res, a.name), "post", action_gvk, body_schema,
        { parameters = params(WRITE_PARAMS), body = json_body(body_schema), code = "201" }),
      parameters = item.parameters,
    }
  end
end

local function build_document(group, version)
  local resources = {}
  for _, r in ipairs(store.RESOURCES) do
    if r.group == group and r.version == version then resources[#resources + 1] = r end
  end
  local paths = {}
  for _, r in ipairs(resources) do add_resource_paths(paths, r) end
  local components = schemas.components(resources)
  components[META .. "Patch"] = { type = "object",
    description = "The body of a PATCH request, in the format its content type names." }
  return { openapi = "3.0.0", info = { title = "Kubernetes", version = "v1.31.0-luaprov-sim" }, paths = paths,
    components = { schemas = components } }
end

local function gv_path(r) return r.group == "" and ("api/" .. r.version) or ("apis/" .. r.group .. "/" .. r.version) end

local documents

local function build_all()
  local built = {}
  for _, r in ipairs(store.RESOURCES) do
    local key = gv_path(r)
    if not built[key] then
      local text = json.encode(build_document(r.group, r.version))
      built[key] = { text = text, hash = luaprov.crypto.sha256_hex(text):upper() }
    end
  end
  documents = built
end

--- root() -> the /openapi/v3 discovery document: each group/version's serverRelativeURL, whose hash
-- changes when the document does (clients cache by it).
function M.root()
  if not documents then build_all() end
  local paths = {}
  for key, doc in pairs(documents) do
    paths[key] = { serverRelativeURL = "/openapi/v3/" .. key .. "?hash=" .. doc.hash }
  end
  return { paths = paths }
end

--- document(gv) -> the JSON text of the document of "api/v1" or "apis/<group>/<version>", or nil.
function M.document(gv)
  if not documents then build_all() end
  local doc = documents[gv]
  return doc and doc.text or nil
end

return M
