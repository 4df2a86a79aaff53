-- Discovery documents of the Kubernetes API simulator, built from the simulated resources
-- (sim.kubernetes.store): the legacy ones (APIVersions, APIGroupList, APIGroup, APIResourceList) and
-- the aggregated APIGroupDiscoveryList that kubectl and client-go ask for first (Accept
-- `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`), which saves them one request
-- per group/version.
local store = require "sim.kubernetes.store"
local wire = require "sim.kubernetes.wire"

local array = wire.array

local M = {}

M.AGGREGATED_VERSIONS = { v2 = true, v2beta1 = true }

local VERBS = array { "create", "delete", "get", "list", "patch", "update", "watch" }
local STATUS_VERBS = array { "get", "patch", "update" }

local function optional_array(t) return t and array(t) or nil end

function M.resource_list(group, version)
  local out = array()
  for _, r in ipairs(store.RESOURCES) do
    if r.group == group and r.version == version then
      out[#out + 1] = { name = r.name, singularName = r.singular, namespaced = r.namespaced, kind = r.kind,
        verbs = VERBS, shortNames = optional_array(r.short), categories = optional_array(r.categories) }
      if r.status then
        out[#out + 1] = { name = r.name .. "/status", singularName = "", namespaced = r.namespaced, kind = r.kind,
          verbs = STATUS_VERBS }
      end
      for _, a in ipairs(r.actions or {}) do
        out[#out + 1] = { name = r.name .. "/" .. a.name, singularName = "", namespaced = r.namespaced,
          group = a.group, version = a.version, kind = a.kind, verbs = array { "create" } }
      end
    end
  end
  if #out == 0 then return nil end
  return { kind = "APIResourceList", apiVersion = "v1", groupVersion = group == "" and version
    or (group .. "/" .. version), resources = out }
end

function M.versions(request)
  return { kind = "APIVersions", versions = array { "v1" }, serverAddressByClientCIDRs = array {
    { clientCIDR = "0.0.0.0/0", serverAddress = (request.headers or {}).host or "127.0.0.1" } } }
end

function M.group_list()
  local groups, seen = array(), {}
  for _, r in ipairs(store.RESOURCES) do
    if r.group ~= "" and not seen[r.group] then
      seen[r.group] = true
      local gv = { groupVersion = r.group_version, version = r.version }
      groups[#groups + 1] = { name = r.group, versions = array { gv }, preferredVersion = gv }
    end
  end
  return { kind = "APIGroupList", apiVersion = "v1", groups = groups }
end

--- group(name) -> the APIGroup document, or nil.
function M.group(name)
  for _, g in ipairs(M.group_list().groups) do
    if g.name == name then
      return { kind = "APIGroup", apiVersion = "v1", name = g.name, versions = g.versions,
        preferredVersion = g.preferredVersion }
    end
  end
  return nil
end

-- ---- aggregated discovery --------------------------------------------------------------------

local function kind_of(group, version, kind) return { group = group, version = version, kind = kind } end

local function aggregated_resource(r)
  local subs = array()
  if r.status then
    subs[#subs + 1] = { subresource = "status", responseKind = kind_of(r.group, r.version, r.kind),
      verbs = STATUS_VERBS }
  end
  for _, a in ipairs(r.actions or {}) do
    subs[#subs + 1] = { subresource = a.name, responseKind = kind_of(a.group, a.version, a.kind),
      verbs = array { "create" } }
  end
  return { resource = r.name, responseKind = kind_of(r.group, r.version, r.kind),
    scope = r.namespaced and "Namespaced" or "Cluster", singularResource = r.singular, verbs = VERBS,
    shortNames = optional_array(r.short), categories = optional_array(r.categories),
    subresources = #subs > 0 and subs or nil }
end

--- aggregated(legacy, version) -> the APIGroupDiscoveryList of /api (legacy: the core group) or of
-- /apis (every other group), in apidiscovery.k8s.io/<version>.
function M.aggregated(legacy, version)
  local items, by_group = array(), {}
  for _, r in ipairs(store.RESOURCES) do
    if (r.group == "") == legacy then
      local item = by_group[r.group]
      if not item then
        item = { metadata = { name = r.group ~= "" and r.group or nil },
          versions = array { { version = r.version, resources = array(), freshness = "Current" } } }
        by_group[r.group] = item
        items[#items + 1] = item
      end
      local resources = item.versions[1].resources
      resources[#resources + 1] = aggregated_resource(r)
    end
  end
  return { kind = "APIGroupDiscoveryList", apiVersion = "apidiscovery.k8s.io/" .. version, metadata = {},
    items = items }
end

--- content_type(version) -> the media type an aggregated document is answered with.
function M.content_type(version)
  return "application/json;g=apidiscovery.k8s.io;v=" .. version .. ";as=APIGroupDiscoveryList"
end

return M
