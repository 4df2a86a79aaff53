-- The Kubernetes simulator's wire format: JSON responses, Status errors raised as Lua errors and turned
-- into responses by init.handle, and request parsing (query strings, paths, JSON bodies, media types).
local luaprov = require "luaprov"

local json = luaprov.json

local M = {}

M.JSON = "application/json"

function M.present(v) return v ~= nil and v ~= json.null end

--- array(t) -> t marked as a JSON array (the mark is protected: a table is marked once).
function M.array(t)
  if getmetatable(t) == json.array_mt then return t end
  return setmetatable(t or {}, json.array_mt)
end

function M.is_array(v) return type(v) == "table" and getmetatable(v) == json.array_mt end

function M.is_object(v) return type(v) == "table" and getmetatable(v) ~= json.array_mt end

--- respond(status, value[, headers]) -> a handler response carrying value as JSON.
function M.respond(status, value, headers)
  local h = { ["content-type"] = M.JSON }
  for k, v in pairs(headers or {}) do h[k] = v end
  return { status = status, headers = h, body = json.encode(value) }
end

-- ---- Status errors --------------------------------------------------------------------------

local ApiError = {}

function M.status_object(code, reason, message, details)
  return { kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure", message = message,
    reason = reason, details = details, code = code }
end

--- success(code[, details]) -> the Status a subresource action (eviction, binding) answers.
function M.success(code, details)
  return { kind = "Status", apiVersion = "v1", metadata = {}, status = "Success", code = code, details = details }
end

--- fail(code, reason, message[, details]): raises the Status; init.handle answers it.
function M.fail(code, reason, message, details)
  error(setmetatable({ status = M.status_object(code, reason, message, details) }, ApiError), 0)
end

--- status_of(err) -> the Status object when err was raised by fail, else nil.
function M.status_of(err)
  if type(err) == "table" and getmetatable(err) == ApiError then return err.status end
  return nil
end

function M.bad_request(message) M.fail(400, "BadRequest", message) end

function M.no_route() M.fail(404, "NotFound", "the server could not find the requested resource") end

function M.method_not_allowed()
  M.fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
end

local function details_of(res, name)
  return { name = name, group = res.group ~= "" and res.group or nil, kind = res.name }
end

function M.not_found(res, name)
  M.fail(404, "NotFound", string.format('%s "%s" not found', res.qualified, name), details_of(res, name))
end

function M.already_exists(res, name)
  M.fail(409, "AlreadyExists", string.format('%s "%s" already exists', res.qualified, name), details_of(res, name))
end

function M.conflict(res, name, why)
  M.fail(409, "Conflict", string.format('Operation cannot be fulfilled on %s "%s": %s', res.qualified, name,
    why or "the object has been modified; please apply your changes to the latest version and try again"),
    details_of(res, name))
end

--- invalid(res, name, field, problem): 422 Invalid, with the field as the one cause.
function M.invalid(res, name, field, problem)
  local kind = res.group == "" and res.kind or (res.kind .. "." .. res.group)
  M.fail(422, "Invalid", string.format('%s "%s" is invalid: %s: %s', kind, name or "", field, problem), {
    name = name, group = res.group ~= "" and res.group or nil, kind = res.kind,
    causes = M.array { { reason = "FieldValueInvalid", message = problem, field = field } },
  })
end

--- invalid_options(errors): 422 Invalid for a request's ListOptions, as the apiserver words it.
-- errors = {{field, reason ("FieldValueForbidden", "FieldValueNotSupported"), body}}, body the error's
-- text after the field ("Forbidden: ...", 'Unsupported value: "Exact": supported values: ...').
function M.invalid_options(errors)
  local texts, causes = {}, M.array()
  for i, e in ipairs(errors) do
    texts[i] = e.field .. ": " .. e.body
    causes[i] = { reason = e.reason, message = e.body, field = e.field }
  end
  local all = #texts == 1 and texts[1] or ("[" .. table.concat(texts, ", ") .. "]")
  M.fail(422, "Invalid", 'ListOptions.meta.k8s.io "" is invalid: ' .. all,
    { group = "meta.k8s.io", kind = "ListOptions", causes = causes })
end

--- too_large(wanted, current): 504, the apiserver's answer when it has not reached a resourceVersion
-- a read must not be older than (after waiting up to 3 s for it; the simulator answers at once).
function M.too_large(wanted, current)
  M.fail(504, "Timeout", string.format("Too large resource version: %d, current: %d", wanted, current), {
    causes = M.array { { reason = "ResourceVersionTooLarge", message = "Too large resource version" } },
    retryAfterSeconds = 1 })
end

function M.expired(from, current)
  return M.status_object(410, "Expired", string.format("too old resource version: %d (%d)", from, current))
end

-- ---- requests -------------------------------------------------------------------------------

function M.unescape(s)
  return (s:gsub("+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

function M.parse_query(query)
  local params = {}
  for pair in (query or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    params[M.unescape(k)] = M.unescape(v)
  end
  return params
end

function M.split_path(path)
  local parts = {}
  for p in path:gmatch("[^/]+") do parts[#parts + 1] = M.unescape(p) end
  return parts
end

--- body_json(request) -> the decoded JSON object of the body; 400 when it is not one.
function M.body_json(request)
  local ok, value = pcall(json.decode, request.body or "")
  if not ok or not M.is_object(value) then
    M.bad_request("the body of the request was in an unknown format - accepted media types include: "
      .. "application/json, application/yaml")
  end
  return value
end

--- body_object(request, res, name) -> the decoded object, with a metadata table.
function M.body_object(request, res, name)
  local value = M.body_json(request)
  if type(value.metadata) ~= "table" then
    if M.present(value.metadata) then M.invalid(res, name, "metadata", "must be an object") end
    value.metadata = {}
  end
  return value
end

--- media_type(request) -> the content-type without parameters ("application/merge-patch+json").
function M.media_type(request)
  return ((request.headers or {})["content-type"] or ""):match("^%s*([^;%s]+)") or ""
end

--- accepts(request, as, g, versions) -> the first version v in the Accept header's ranges such as
-- `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList` that is in the set versions,
-- or nil: the client's order is its preference.
function M.accepts(request, as, g, versions)
  for range in ((request.headers or {}).accept or ""):gmatch("[^,]+") do
    local params = {}
    for k, v in range:gmatch(";%s*(%w+)%s*=%s*([^;%s]+)") do params[k] = v end
    if params.as == as and params.g == g and versions[params.v] then return params.v end
  end
  return nil
end

return M
