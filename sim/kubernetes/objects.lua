-- Object verbs of the Kubernetes simulator: create, replace (PUT, and the /status subresource), patch,
-- delete and list, with what the apiserver owns filled in (uid, creationTimestamp, generation,
-- resourceVersion), finalizers honoured and dryRun answered without storing. The simulated
-- controllers (kubelet, binder, disruption) write through insert and write too, so every change goes
-- through store.put and every watcher sees it.
local luaprov = require "luaprov"
local patches = require "sim.kubernetes.patch"
local selectors = require "sim.kubernetes.selectors"
local store = require "sim.kubernetes.store"
local validation = require "sim.kubernetes.validation"
local wire = require "sim.kubernetes.wire"

local json = luaprov.json
local present, array = wire.present, wire.array

local M = {}

local NO_OPTIONS = { dry_run = false, validation = "Ignore", warnings = {} }

local NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
local generated = 0

--- reset(): generated names start over, so a run is reproducible from a reset.
function M.reset() generated = 0 end

local function generate_name(prefix)
  generated = generated + 1
  local n, suffix = generated * 7919 + 104729, {}
  for i = 1, 5 do
    local j = n % #NAME_CHARS + 1
    suffix[i] = NAME_CHARS:sub(j, j)
    n = n // #NAME_CHARS
  end
  return prefix .. table.concat(suffix)
end

--- valid_name(name) -> whether name is a DNS subdomain (RFC 1123), as object names must be.
function M.valid_name(name)
  return type(name) == "string" and #name <= 253 and name:match("^[a-z0-9][-a-z0-9.]*$") ~= nil
    and name:match("[a-z0-9]$") ~= nil and not name:find("%.%.") and not name:find("%-%.")
    and not name:find("%.%-")
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

--- write(res, ns, name, obj, kind, opts) -> what the client gets back: a copy of obj as stored, or
-- for a dry run as it would have been stored.
function M.write(res, ns, name, obj, kind, opts)
  if opts and opts.dry_run then return store.copy(obj) end
  return store.put(res, ns, name, obj, kind)
end

local function name_object(res, md)
  if (not present(md.name) or md.name == "") and present(md.generateName) then
    md.name = generate_name(md.generateName)
  end
  if not present(md.name) or md.name == "" then
    wire.invalid(res, nil, "metadata.name", "Required value: name or generateName is required")
  end
  if not M.valid_name(md.name) then
    wire.invalid(res, tostring(md.name), "metadata.name", "Invalid value: " .. json.encode(md.name) .. ": a "
      .. "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'")
  end
end

--- insert(res, ns, obj[, opts]) -> the stored copy of a new object: named (generateName), checked,
-- and given what the server owns. 409 when the name is taken.
function M.insert(res, ns, obj, opts)
  opts = opts or NO_OPTIONS
  local md = obj.metadata
  md.namespace = res.namespaced and ns or nil
  name_object(res, md)
  validation.check(res, obj, opts)
  if store.get(res, ns, md.name) then wire.already_exists(res, md.name) end
  obj.apiVersion, obj.kind = res.group_version, res.kind
  md.uid = store.next_uid()
  md.creationTimestamp = store.now()
  md.generation = 1
  md.deletionTimestamp, md.deletionGracePeriodSeconds, md.resourceVersion = nil, nil, nil
  if res.crd then obj.status = nil end
  return M.write(res, ns, md.name, obj, "ADDED", opts)
end

function M.create(res, ns, request, opts)
  local obj = wire.body_object(request, res, nil)
  if res.namespaced and present(obj.metadata.namespace) and obj.metadata.namespace ~= ns then
    wire.bad_request("the namespace of the provided object does not match the namespace sent on the request")
  end
  return 201, M.insert(res, ns, obj, opts)
end

local function keep_server_fields(res, current, next_obj)
  local md, cm = next_obj.metadata, current.metadata
  if res.status then next_obj.status = store.copy(current).status end
  md.name, md.namespace, md.uid, md.creationTimestamp = cm.name, cm.namespace, cm.uid, cm.creationTimestamp
  md.deletionTimestamp, md.deletionGracePeriodSeconds = cm.deletionTimestamp, cm.deletionGracePeriodSeconds
  md.generation = cm.generation
  if spec_of(next_obj) ~= spec_of(current) then md.generation = (cm.generation or 1) + 1 end
end

--- replace(res, ns, name, current, next_obj, subresource, opts) -> 200, the object: stores next_obj in
-- place of current (update, patch), keeping what the server owns; a stale resourceVersion is 409,
-- and the last finalizer leaving an object being deleted deletes it.
function M.replace(res, ns, name, current, next_obj, subresource, opts)
  opts = opts or NO_OPTIONS
  if type(next_obj.metadata) ~= "table" then next_obj.metadata = {} end
  local md = next_obj.metadata
  if present(md.name) and md.name ~= name then
    wire.bad_request("the name of the object (" .. tostring(md.name) .. ") does not match the name on the URL ("
      .. name .. ")")
  end
  if present(md.resourceVersion) and md.resourceVersion ~= "" and md.resourceVersion
    ~= current.metadata.resourceVersion then
    wire.conflict(res, name)
  end
  local merged
  if subresource == "status" then
    merged = store.copy(current)
    merged.status = next_obj.status
  else
    merged = next_obj
    keep_server_fields(res, current, merged)
  end
  merged.apiVersion, merged.kind = res.group_version, res.kind
  validation.check(res, merged, opts)
  merged.metadata.resourceVersion = current.metadata.resourceVersion
  if json.encode(merged) == json.encode(current) then return 200, store.copy(current) end
  if present(merged.metadata.deletionTimestamp) and not has_finalizers(merged) then
    return 200, M.write(res, ns, name, merged, "DELETED", opts)
  end
  return 200, M.write(res, ns, name, merged, "MODIFIED", opts)
end

function M.patch(res, ns, name, current, request, subresource, opts)
  local ctype = wire.media_type(request)
  local apply
  if ctype == "application/merge-patch+json" then
    apply = patches.merge
  elseif ctype == "application/strategic-merge-patch+json" and not res.crd then
    apply = patches.strategic
  else
    wire.fail(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media "
      .. "types include: application/merge-patch+json"
      .. (res.crd and "" or ", application/strategic-merge-patch+json"))
  end
  local ok, p = pcall(json.decode, request.body or "")
  if not ok or not wire.is_object(p) then wire.bad_request("the patch is not a JSON object") end
  local next_obj = apply(store.copy(current), p)
  if type(next_obj.metadata) ~= "table" then wire.invalid(res, name, "metadata", "must be an object") end
  -- a resourceVersion in the patch is a precondition; none means "whatever is current"
  if not (type(p.metadata) == "table" and present(p.metadata.resourceVersion)) then
    next_obj.metadata.resourceVersion = nil
  end
  return M.replace(res, ns, name, current, next_obj, subresource, opts)
end

local function check_preconditions(res, name, current, delete_options)
  local pre = type(delete_options) == "table" and delete_options.preconditions
  if type(pre) ~= "table" then return end
  local md = current.metadata
  if present(pre.uid) and pre.uid ~= md.uid then
    wire.conflict(res, name, string.format("Precondition failed: UID in precondition: %s, UID in object meta: %s",
      pre.uid, md.uid))
  end
  if present(pre.resourceVersion) and pre.resourceVersion ~= md.resourceVersion then
    wire.conflict(res, name, string.format("Precondition failed: ResourceVersion in precondition: %s, "
      .. "ResourceVersion in object meta: %s", pre.resourceVersion, md.resourceVersion))
  end
end

--- delete(res, ns, name, current[, opts, delete_options]) -> 200, the object: gone, or marked with
-- deletionTimestamp while finalizers remain.
function M.delete(res, ns, name, current, opts, delete_options)
  check_preconditions(res, name, current, delete_options)
  if has_finalizers(current) then
    if present(current.metadata.deletionTimestamp) then return 200, store.copy(current) end
    local obj = store.copy(current)
    obj.metadata.deletionTimestamp = store.now()
    obj.metadata.deletionGracePeriodSeconds = 0
    return 200, M.write(res, ns, name, obj, "MODIFIED", opts)
  end
  return 200, M.write(res, ns, name, store.copy(current), "DELETED", opts)
end

function M.list(res, ns, params)
  local filter = selectors.filter(params)
  local limit = tonumber(params.limit) or 0
  local after = params.continue ~= nil and params.continue ~= "" and params.continue or nil
  if after then
    after = luaprov.crypto.base64_decode(after)
    if not after then wire.bad_request("continue key is not valid") end
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

return M
