-- The Kubernetes simulator's state: the resource types it serves, the objects, the global
-- resourceVersion counter, the event log the watches replay from, and the open watch streams.
--
-- Objects are kept decoded (plain tables) and copied on the way in and out, so no caller can change
-- stored state by accident. Every change bumps the one global resourceVersion, as etcd's revision does,
-- and is appended to the event log as the exact line a watcher receives. The log keeps the last
-- `event_log` changes; a watch from an older resourceVersion gets 410 Expired.
local luaprov = require "luaprov"

local json = luaprov.json

local M = {}

-- group, version, plural, kind, namespaced, status subresource, short names, categories, and the
-- action subresources (a POST to pods/<name>/eviction) with the kind each takes.
M.RESOURCES = {
  { group = "", version = "v1", name = "namespaces", kind = "Namespace", singular = "namespace",
    namespaced = false, status = true, short = { "ns" } },
  { group = "", version = "v1", name = "nodes", kind = "Node", singular = "node", namespaced = false,
    status = true, short = { "no" } },
  { group = "", version = "v1", name = "pods", kind = "Pod", singular = "pod", namespaced = true,
    status = true, short = { "po" }, categories = { "all" },
    -- POST-only subresources, answered by another kind than the pod's
    actions = { { name = "binding", group = "", version = "v1", kind = "Binding" },
      { name = "eviction", group = "policy", version = "v1", kind = "Eviction" } } },
  { group = "", version = "v1", name = "events", kind = "Event", singular = "event", namespaced = true,
    short = { "ev" } },
  { group = "coordination.k8s.io", version = "v1", name = "leases", kind = "Lease", singular = "lease",
    namespaced = true },
  -- DaemonSets only as objects (no pods are made from them): the provisioner reads their pod templates
  -- for the overhead every new node carries.
  { group = "apps", version = "v1", name = "daemonsets", kind = "DaemonSet", singular = "daemonset",
    namespaced = true, status = true, short = { "ds" }, categories = { "all" } },
  { group = "policy", version = "v1", name = "poddisruptionbudgets", kind = "PodDisruptionBudget",
    singular = "poddisruptionbudget", namespaced = true, status = true, short = { "pdb" } },
  -- Volumes only as objects (nothing provisions or attaches them): the provisioner reads the zone a pod's
  -- claims pin it to.
  { group = "", version = "v1", name = "persistentvolumeclaims", kind = "PersistentVolumeClaim",
    singular = "persistentvolumeclaim", namespaced = true, status = true, short = { "pvc" } },
  { group = "", version = "v1", name = "persistentvolumes", kind = "PersistentVolume", singular = "persistentvolume",
    namespaced = false, status = true, short = { "pv" } },
  { group = "storage.k8s.io", version = "v1", name = "storageclasses", kind = "StorageClass",
    singular = "storageclass", namespaced = false, short = { "sc" } },
  { group = "karpenter.sh", version = "v1", name = "nodepools", kind = "NodePool", singular = "nodepool",
    namespaced = false, status = true, crd = true, categories = { "karpenter" } },
  { group = "karpenter.sh", version = "v1", name = "nodeclaims", kind = "NodeClaim", singular = "nodeclaim",
    namespaced = false, status = true, crd = true, categories = { "karpenter" } },
  -- ECSNodeClass in the group of Alibaba's official Karpenter provider, then in luaprov's earlier group,
  -- each with its own spec schema (schemas.lua, by group and kind). Listed in the order a real API
  -- server's discovery gives CRD groups of equal priority (by name), so `kubectl get ecsnodeclass`
  -- means the official group's here as there.
  { group = "karpenter.alibabacloud.com", version = "v1alpha1", name = "ecsnodeclasses", kind = "ECSNodeClass",
    singular = "ecsnodeclass", namespaced = false, status = true, crd = true, categories = { "karpenter" } },
  { group = "karpenter.k8s.alibabacloud", version = "v1alpha1", name = "ecsnodeclasses", kind = "ECSNodeClass",
    singular = "ecsnodeclass", namespaced = false, status = true, crd = true, categories = { "karpenter" } },
}

for _, r in ipairs(M.RESOURCES) do
  r.group_version = r.group == "" and r.version or (r.group .. "/" .. r.version)
  r.id = r.group_version .. "/" .. r.name
  -- how error messages name it: "nodes", "nodepools.karpenter.sh"
  r.qualified = r.group == "" and r.name or (r.name .. "." .. r.group)
end

--- find(group, version, plural) -> the resource type, or nil.
function M.find(group, version, plural)
  for _, r in ipairs(M.RESOURCES) do
    if r.group == group and r.version == version and r.name == plural then return r end
  end
  return nil
end

local DEFAULT_LOG = 1000

M.config = {}
local objects, rv, uids, log, compacted, watchers, changed_at

function M.copy(value)
  return json.decode(json.encode(value))
end

--- reset(): no objects but the namespaces every cluster has; the log and the watches are dropped.
function M.reset()
  for id in pairs(watchers or {}) do luaprov.stream.close(id) end
  objects, rv, uids, log, compacted, watchers, changed_at = {}, 0, 0, {}, 0, {}, {}
  M.config = { bookmark_seconds = 60, event_log = DEFAULT_LOG, sync_seconds = 1, actors = true }
  for _, ns in ipairs { "default", "kube-system", "kube-node-lease" } do
    M.put(M.find("", "v1", "namespaces"), "", ns, {
      apiVersion = "v1", kind = "Namespace",
      metadata = { name = ns, uid = M.next_uid(), creationTimestamp = M.now(), generation = 1 },
      spec = { finalizers = { "kubernetes" } }, status = { phase = "Active" },
    }, "ADDED")
  end
end

function M.resource_version() return rv end

--- last_change(res) -> the resourceVersion of the last change to any object of res (0: none yet), so
-- the simulated cluster's actors skip work when what they read did not change.
function M.last_change(res) return changed_at[res.id] or 0 end
function M.compacted() return compacted end

local function key(ns, name) return (ns or "") .. "/" .. name end

--- get(res, ns, name) -> the stored object (do not modify), or nil.
function M.get(res, ns, name)
  local by = objects[res.id]
  return by and by[key(ns, name)] or nil
end

--- list(res, ns) -> the stored objects of res (in ns, or every namespace when ns is nil), sorted by
-- namespace and name, with their keys.
function M.list(res, ns)
  local out = {}
  for k, obj in pairs(objects[res.id] or {}) do
    if ns == nil or (obj.metadata.namespace or "") == ns then out[#out + 1] = { key = k, object = obj } end
  end
  table.sort(out, function(a, b) return a.key < b.key end)
  return out
end

function M.next_uid()
  uids = uids + 1
  return string.format("5a1e0000-0000-4000-8000-%012x", uids)
end

function M.count(res)
  local n = 0
  for _ in pairs(objects[res.id] or {}) do n = n + 1 end
  return n
end

local function watch_line(kind, obj)
  return json.encode { type = kind, object = obj } .. "\n"
end
M.watch_line = watch_line

--- matches(w, res, obj) -> whether watcher w wants a change of obj.
local function matches(w, res, obj)
  if w.res ~= res then return false end
  if w.ns and (obj.metadata.namespace or "") ~= w.ns then return false end
  return w.filter(obj)
end

--- put(res, ns, name, obj, kind): stores obj (nil deletes) under a new resourceVersion and tells the
-- watchers. kind is ADDED, MODIFIED or DELETED. Returns a copy of what was stored (or deleted).
function M.put(res, ns, name, obj, kind)
  rv = rv + 1
  changed_at[res.id] = rv
  obj.metadata.resourceVersion = tostring(rv)
  local by = objects[res.id]
  if not by then
    by = {}
    objects[res.id] = by
  end
  by[key(ns, name)] = kind ~= "DELETED" and obj or nil
  local line = watch_line(kind, obj)
  log[#log + 1] = { rv = rv, res = res, type = kind, object = obj, line = line }
  local keep = M.config.event_log or DEFAULT_LOG
  if #log > keep then
    local drop = #log - keep
    compacted = log[drop].rv
    table.move(log, drop + 1, #log, 1)
    for i = #log - drop + 1, #log do log[i] = nil end
  end
  for id, w in pairs(watchers) do
    if matches(w, res, obj) and not luaprov.stream.write(id, w.render and w.render(kind, obj) or line) then
      watchers[id] = nil
    end
  end
  return M.copy(obj)
end

--- compact(): every resourceVersion up to now becomes too old to watch from (an etcd compaction).
function M.compact()
  compacted = rv
  log = {}
end

--- since(w, from) -> the lines of the changes after resourceVersion from that w wants, or nil when
-- from is older than the log. A watcher with render(type, object) -> line gets its own lines (tables).
function M.since(w, from)
  if from < compacted then return nil end
  local out = {}
  for _, e in ipairs(log) do
    if e.rv > from and matches(w, e.res, e.object) then
      out[#out + 1] = w.render and w.render(e.type, e.object) or e.line
    end
  end
  return out
end

function M.add_watcher(id, w) watchers[id] = w end
function M.watcher(id) return watchers[id] end
function M.remove_watcher(id) watchers[id] = nil end

function M.watcher_count()
  local n = 0
  for id in pairs(watchers) do
    if luaprov.stream.open(id) then n = n + 1 else watchers[id] = nil end
  end
  return n
end

--- drop_watches(): ends every watch stream, as an apiserver restart does.
function M.drop_watches()
  local n = 0
  for id in pairs(watchers) do
    if luaprov.stream.close(id) then n = n + 1 end
  end
  watchers = {}
  return n
end

--- now() -> the time the API server stamps on objects (creationTimestamp, deletionTimestamp, condition
-- transitions): the engine's clock, not simulated time. Controllers compare these stamps with their
-- own clock, as against a real API server; simulated time only moves what the clouds decide
-- (instance boot, token expiry), so advancing it never puts Kubernetes timestamps in the future.
function M.now() return luaprov.time.iso8601() end

M.reset()

return M
