-- Discovery documents of the Kubernetes API simulator (sim.kubernetes): the APIResourceList of a
-- group/version and the APIGroupList, built from the simulated resources (sim.kubernetes.store).
local luaprov = require "luaprov"
local store = require "sim.kubernetes.store"

local array_mt = luaprov.json.array_mt

local M = {}

local function array(t) return setmetatable(t or {}, array_mt) end

local VERBS = array { "create", "delete", "get", "list", "patch", "update", "watch" }

function M.resource_list(group, version)
  local out = array()
  for _, r in ipairs(store.RESOURCES) do
    if r.group == group and r.version == version then
      out[#out + 1] = { name = r.name, singularName = r.singular, namespaced = r.namespaced, kind = r.kind,
        verbs = VERBS, shortNames = r.short and array(r.short) or nil,
        categories = r.categories and array(r.categories) or nil }
      if r.status then
        out[#out + 1] = { name = r.name .. "/status", singularName = "", namespaced = r.namespaced, kind = r.kind,
          verbs = array { "get", "patch", "update" } }
      end
    end
  end
  if #out == 0 then return nil end
  return { kind = "APIResourceList", apiVersion = "v1", groupVersion = group == "" and version
    or (group .. "/" .. version), resources = out }
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

return M
