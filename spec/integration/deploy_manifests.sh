#!/usr/bin/env bash
# The manifests of examples/deploy: every YAML document parses (lyaml, Debian's lua-yaml); the CRDs
# are structural with a status subresource; RBAC grants no wildcard and no Secrets; the Deployment
# runs --leader-elect with both probes on the metrics port, requests and a non-root, read-only
# container; the ConfigMap's scripts, laid out as the Deployment mounts them, pass `luaprov check`;
# the kustomization lists every file. With kubectl on PATH: `kubectl kustomize` builds it and, when
# a cluster answers, `kubectl apply --dry-run=client` accepts it.
source "$(dirname "$0")/lib.sh"
SRC="${LUAPROV_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
DEPLOY="$SRC/examples/deploy"
[[ -d "$DEPLOY" ]] || fail "no $DEPLOY"
lua5.4 -e 'require "lyaml"' 2>/dev/null || fail "lyaml missing: install the Debian package lua-yaml (tools/install-deps.sh test)"

cat >"$WORK/check.lua" <<'LUA'
local lyaml = require "lyaml"
local deploy, tree = arg[1], arg[2]
local files = {}
for i = 3, #arg do files[#files + 1] = arg[i] end

local problems = {}
local function problem(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end
local function isnull(v) return v == nil or v == lyaml.null end
local function list(v) return type(v) == "table" and v or {} end
local function contains(t, x)
  for _, v in ipairs(list(t)) do if v == x then return true end end
  return false
end

-- ---- every document of every file parses ----------------------------------------------------
local objects, by_file, kustomization = {}, {}, nil
for _, rel in ipairs(files) do
  local f = assert(io.open(deploy .. "/" .. rel, "rb"))
  local text = f:read("a")
  f:close()
  local ok, docs = pcall(lyaml.load, text, { all = true })
  if not ok then
    problem("%s: does not parse: %s", rel, tostring(docs))
  else
    by_file[rel] = 0
    for i, doc in ipairs(docs) do
      if isnull(doc) then
        problem("%s: document %d is empty", rel, i)
      elseif type(doc) ~= "table" or type(doc.kind) ~= "string" or type(doc.apiVersion) ~= "string" then
        problem("%s: document %d has no apiVersion/kind", rel, i)
      elseif doc.kind == "Kustomization" then
        kustomization = doc
      else
        if type(doc.metadata) ~= "table" or type(doc.metadata.name) ~= "string" then
          problem("%s: %s document %d has no metadata.name", rel, doc.kind, i)
        end
        doc._file = rel
        objects[#objects + 1] = doc
        by_file[rel] = by_file[rel] + 1
      end
    end
  end
end
local function find(kind, name)
  for _, o in ipairs(objects) do
    if o.kind == kind and (not name or (o.metadata or {}).name == name) then return o end
  end
end
local function all(kind)
  local out = {}
  for _, o in ipairs(objects) do if o.kind == kind then out[#out + 1] = o end end
  return out
end

-- ---- CRDs: structural schemas, subresources, printer columns, CEL rules ----------------------
local rules_seen = {}
local function structural(node, path, crd)
  if type(node) ~= "table" then
    problem("%s: %s is not a schema", crd, path)
    return
  end
  local typed = type(node.type) == "string" or node["x-kubernetes-int-or-string"] == true
    or node["x-kubernetes-preserve-unknown-fields"] == true
  if not typed then problem("%s: %s has no type", crd, path) end
  for _, v in ipairs(list(node["x-kubernetes-validations"])) do
    if type(v.rule) ~= "string" or v.rule == "" then problem("%s: %s: a validation without a rule", crd, path) end
    if type(v.message) ~= "string" or v.message == "" then problem("%s: %s: rule %s has no message", crd, path, tostring(v.rule)) end
    rules_seen[crd] = rules_seen[crd] or {}
    table.insert(rules_seen[crd], { path = path, rule = tostring(v.rule) })
  end
  if node.type == "object" then
    local props = type(node.properties) == "table" and node.properties or {}
    for _, r in ipairs(list(node.required)) do
      if not props[r] then problem("%s: %s requires %s, which it does not define", crd, path, r) end
    end
    for name, sub in pairs(props) do structural(sub, path .. "." .. name, crd) end
    if type(node.additionalProperties) == "table" then
      if node.properties then problem("%s: %s has both properties and additionalProperties", crd, path) end
      structural(node.additionalProperties, path .. ".*", crd)
    end
  elseif node.type == "array" then
    if type(node.items) ~= "table" then
      problem("%s: %s is an array without items", crd, path)
    else
      structural(node.items, path .. "[]", crd)
      if node["x-kubernetes-list-type"] == "map" then
        for _, k in ipairs(list(node["x-kubernetes-list-map-keys"])) do
          if not contains(node.items.required, k) then problem("%s: %s: list-map key %s is not required", crd, path, k) end
        end
      end
    end
  elseif node.properties or node.items then
    problem("%s: %s has properties or items but type %s", crd, path, tostring(node.type))
  end
  for _, branch in ipairs(list(node.anyOf)) do
    if branch.properties or branch.items then problem("%s: %s: anyOf branches may not define fields", crd, path) end
  end
end

local expected_crds = {
  ["nodepools.karpenter.sh"] = { version = "v1", scale = true },
  ["nodeclaims.karpenter.sh"] = { version = "v1" },
  ["ecsnodeclasses.karpenter.alibabacloud.com"] = { version = "v1alpha1" },
  -- luaprov's earlier group, still served
  ["ecsnodeclasses.karpenter.k8s.alibabacloud"] = { version = "v1alpha1", deprecated = true },
}
for name, want in pairs(expected_crds) do
  if not find("CustomResourceDefinition", name) then problem("no CRD %s", name) end
end
for _, crd in ipairs(all("CustomResourceDefinition")) do
  local name, spec = crd.metadata.name, crd.spec or {}
  local want = expected_crds[name]
  if crd.apiVersion ~= "apiextensions.k8s.io/v1" then problem("%s: apiVersion %s", name, crd.apiVersion) end
  if not want then problem("unexpected CRD %s", name) else
    if spec.scope ~= "Cluster" then problem("%s: scope %s, want Cluster", name, tostring(spec.scope)) end
    if (spec.names or {}).plural .. "." .. tostring(spec.group) ~= name then problem("%s: name is not plural.group", name) end
    local storage = 0
    for _, v in ipairs(list(spec.versions)) do
      if v.storage then storage = storage + 1 end
      if v.name == want.version and not (v.served and v.storage) then problem("%s: %s not served+storage", name, v.name) end
      if (v.deprecated == true) ~= (want.deprecated == true) then
        problem("%s/%s: deprecated is %s, want %s", name, v.name, tostring(v.deprecated), tostring(want.deprecated == true))
      end
      local schema = (v.schema or {}).openAPIV3Schema
      if type(schema) ~= "table" or schema.type ~= "object" then
        problem("%s/%s: the root schema is not type: object", name, v.name)
      else
        structural(schema, "", name)
        local meta = (schema.properties or {}).metadata
        if meta and (meta.properties and next(meta.properties)) then
          for k in pairs(meta.properties) do
            if k ~= "name" and k ~= "generateName" then problem("%s: metadata.%s may not be specified", name, k) end
          end
        end
        if not ((schema.properties or {}).status) then problem("%s/%s: no status schema", name, v.name) end
      end
      local sub = v.subresources or {}
      if isnull(sub.status) and type(sub.status) ~= "table" then problem("%s/%s: no status subresource", name, v.name) end
      if want.scale then
        local sc = sub.scale or {}
        if sc.specReplicasPath ~= ".spec.replicas" or sc.statusReplicasPath ~= ".status.nodes" then
          problem("%s/%s: scale subresource must map .spec.replicas/.status.nodes", name, v.name)
        end
      end
      local cols = list(v.additionalPrinterColumns)
      if #cols == 0 then problem("%s/%s: no printer columns", name, v.name) end
      for _, c in ipairs(cols) do
        if type(c.name) ~= "string" or type(c.type) ~= "string" or type(c.jsonPath) ~= "string" then
          problem("%s/%s: a printer column needs name, type and jsonPath", name, v.name)
        end
      end
      if not contains((function() local t = {} for _, c in ipairs(cols) do t[#t + 1] = c.name end return t end)(), "Ready") then
        problem("%s/%s: no Ready printer column", name, v.name)
      end
    end
    if storage ~= 1 then problem("%s: %d storage versions", name, storage) end
  end
end
local function has_rule(crd, needle, path_prefix)
  for _, r in ipairs(rules_seen[crd] or {}) do
    if r.rule:find(needle, 1, true) and (not path_prefix or r.path:sub(1, #path_prefix) == path_prefix) then return true end
  end
  return false
end
local ecs = "ecsnodeclasses.karpenter.k8s.alibabacloud"
for _, key in ipairs({ "''", "ecs:ecs-cluster-name", "kubernetes.io/cluster", "karpenter.sh/nodepool",
  "karpenter.sh/nodeclaim", "karpenter.k8s.alibabacloud/ecsnodeclass" }) do
  if not has_rule(ecs, key, ".spec.tags") then problem("%s: no CEL rule restricting tag key %s", ecs, key) end
end
for _, terms in ipairs({ "vSwitchSelectorTerms", "securityGroupSelectorTerms", "imageSelectorTerms" }) do
  if not has_rule(ecs, "has(self.", ".spec." .. terms .. "[]") then problem("%s: %s items need an at-least-one rule", ecs, terms) end
end
if not has_rule("nodeclaims.karpenter.sh", "self == oldSelf", ".spec") then problem("NodeClaim spec is not immutable") end
if not has_rule("nodepools.karpenter.sh", "karpenter.sh/nodepool", ".spec.template.metadata.labels") then
  problem("NodePool template labels do not restrict karpenter.sh/nodepool")
end

-- ---- RBAC: no wildcard, no Secrets ----------------------------------------------------------
local sa = find("ServiceAccount", "luaprov")
if not sa or sa.metadata.namespace ~= "luaprov" then problem("no ServiceAccount luaprov in namespace luaprov") end
local roles = {}
for _, kind in ipairs({ "ClusterRole", "Role" }) do
  for _, role in ipairs(all(kind)) do
    roles[kind .. "/" .. role.metadata.name] = role
    for i, rule in ipairs(list(role.rules)) do
      local where = string.format("%s %s rule %d", kind, role.metadata.name, i)
      for _, field in ipairs({ "verbs", "resources", "apiGroups" }) do
        for _, v in ipairs(list(rule[field])) do
          if type(v) == "string" and v:find("*", 1, true) then problem("%s: wildcard in %s", where, field) end
        end
      end
      if #list(rule.verbs) == 0 then problem("%s: no verbs", where) end
      for _, v in ipairs(list(rule.verbs)) do
        if v == "escalate" or v == "bind" or v == "impersonate" then problem("%s: grants %s", where, v) end
      end
      for _, r in ipairs(list(rule.resources)) do
        if r == "secrets" or r:match("^secrets/") then problem("%s: grants secrets", where) end
      end
      if rule.nonResourceURLs then problem("%s: grants nonResourceURLs", where) end
    end
  end
end
local cr = find("ClusterRole", "luaprov")
local function grants(role, group, resource, verb)
  for _, rule in ipairs(list(role and role.rules)) do
    if contains(rule.apiGroups, group) and contains(rule.resources, resource) and contains(rule.verbs, verb) then return true end
  end
  return false
end
for _, g in ipairs({
  { "", "nodes", "delete" }, { "", "pods", "watch" }, { "", "pods", "delete" }, { "", "pods/eviction", "create" },
  { "", "events", "create" },
  { "karpenter.sh", "nodeclaims", "create" }, { "karpenter.sh", "nodeclaims/status", "patch" },
  { "karpenter.sh", "nodepools", "watch" }, { "karpenter.sh", "nodepools/status", "patch" },
  { "karpenter.k8s.alibabacloud", "ecsnodeclasses/status", "patch" },
  { "karpenter.alibabacloud.com", "ecsnodeclasses", "watch" }, { "karpenter.alibabacloud.com", "ecsnodeclasses", "patch" },
  { "karpenter.alibabacloud.com", "ecsnodeclasses/status", "patch" },
}) do
  if not grants(cr, g[1], g[2], g[3]) then problem("ClusterRole luaprov does not grant %s %s/%s", g[3], g[1], g[2]) end
end
-- pods are deleted (termination past the grace period), never created or changed
for _, v in ipairs({ "create", "update", "patch" }) do
  if grants(cr, "", "pods", v) then problem("ClusterRole luaprov may %s pods", v) end
end
if grants(cr, "karpenter.sh", "nodepools", "update") then problem("ClusterRole luaprov may edit NodePool specs") end
local lease = nil
for _, role in ipairs(all("Role")) do
  if grants(role, "coordination.k8s.io", "leases", "update") then lease = role end
end
if not lease then
  problem("no namespaced Role for the leader-election Lease")
elseif lease.metadata.namespace ~= "luaprov" then
  problem("the Lease Role is not in namespace luaprov")
end
if grants(cr, "coordination.k8s.io", "leases", "update") then problem("Leases granted cluster-wide") end
for _, kind in ipairs({ "ClusterRoleBinding", "RoleBinding" }) do
  for _, b in ipairs(all(kind)) do
    local ref = b.roleRef or {}
    if not roles[tostring(ref.kind) .. "/" .. tostring(ref.name)] then
      problem("%s %s refers to a missing %s %s", kind, b.metadata.name, tostring(ref.kind), tostring(ref.name))
    end
    for _, s in ipairs(list(b.subjects)) do
      if s.kind ~= "ServiceAccount" or s.name ~= "luaprov" or s.namespace ~= "luaprov" then
        problem("%s %s binds something other than luaprov/luaprov", kind, b.metadata.name)
      end
    end
  end
end

-- ---- Deployment -----------------------------------------------------------------------------
local dep = find("Deployment", "luaprov")
local pod = dep and dep.spec and dep.spec.template and dep.spec.template.spec
local scripts_dir, scripts_items, pod_labels = nil, {}, {}
if not pod then
  problem("no Deployment luaprov")
else
  pod_labels = (dep.spec.template.metadata or {}).labels or {}
  if (tonumber(dep.spec.replicas) or 1) < 2 then problem("Deployment: fewer than 2 replicas") end
  if pod.serviceAccountName ~= "luaprov" then problem("Deployment: serviceAccountName is not luaprov") end
  if not ((pod.affinity or {}).podAntiAffinity) then problem("Deployment: no pod anti-affinity") end
  local psc = pod.securityContext or {}
  local c = list(pod.containers)[1] or {}
  local csc = c.securityContext or {}
  local args = list(c.args)
  local function arg_value(flag)
    for i, a in ipairs(args) do
      if a == flag then return args[i + 1] end
      if type(a) == "string" and a:sub(1, #flag + 1) == flag .. "=" then return a:sub(#flag + 2) end
    end
  end
  if args[1] ~= "run" then problem("Deployment: args do not start with run") end
  if not contains(args, "--leader-elect") then problem("Deployment: no --leader-elect") end
  if arg_value("--kubeconfig") then problem("Deployment: --kubeconfig set (in-cluster config expected)") end
  scripts_dir = arg_value("--scripts")
  if not scripts_dir then problem("Deployment: no --scripts") end
  local maddr = arg_value("--metrics-addr") or ""
  local mport = tonumber(maddr:match(":(%d+)$"))
  if not mport or maddr:match("^127%.") then problem("Deployment: --metrics-addr %s is not reachable by probes", maddr) end
  local port_name
  for _, p in ipairs(list(c.ports)) do
    if p.containerPort == mport then port_name = p.name end
  end
  if not port_name then problem("Deployment: no containerPort for the metrics port %s", tostring(mport)) end
  for probe, path in pairs({ livenessProbe = "/healthz", readinessProbe = "/readyz" }) do
    local get = (c[probe] or {}).httpGet or {}
    if get.path ~= path then problem("Deployment: %s path is %s, want %s", probe, tostring(get.path), path) end
    if get.port ~= mport and (get.port ~= port_name or not port_name) then
      problem("Deployment: %s is not on the metrics port", probe)
    end
  end
  local req = (c.resources or {}).requests or {}
  if not req.cpu or not req.memory then problem("Deployment: no cpu/memory requests") end
  if not ((c.resources or {}).limits or {}).memory then problem("Deployment: no memory limit") end
  if not (psc.runAsNonRoot == true or csc.runAsNonRoot == true) then problem("Deployment: not runAsNonRoot") end
  if csc.readOnlyRootFilesystem ~= true then problem("Deployment: root filesystem not read-only") end
  if csc.allowPrivilegeEscalation ~= false then problem("Deployment: allowPrivilegeEscalation not false") end
  if not contains(((csc.capabilities or {}).drop), "ALL") then problem("Deployment: capabilities not dropped") end
  local seccomp = (csc.seccompProfile or psc.seccompProfile or {}).type
  if seccomp ~= "RuntimeDefault" then problem("Deployment: seccompProfile is not RuntimeDefault") end
  -- the scripts: a ConfigMap volume mounted at --scripts, its keys placed by items:
  local mount
  for _, m in ipairs(list(c.volumeMounts)) do if m.mountPath == scripts_dir then mount = m end end
  if not mount then problem("Deployment: nothing mounted at --scripts %s", tostring(scripts_dir)) end
  local vol
  for _, v in ipairs(list(pod.volumes)) do if mount and v.name == mount.name then vol = v end end
  if not (vol and vol.configMap and vol.configMap.name == "luaprov-scripts") then
    problem("Deployment: the scripts volume is not the ConfigMap luaprov-scripts")
  else
    scripts_items = list(vol.configMap.items)
    if #scripts_items == 0 then problem("Deployment: the scripts volume has no items: mapping") end
  end
  local envs = {}
  for _, e in ipairs(list(c.env)) do envs[e.name] = e end
  for _, e in ipairs({ "CLUSTER_ID", "ALIBABA_CLOUD_REGION_ID" }) do
    if not envs[e] then problem("Deployment: no env %s", e) end
  end
  local token = envs.ALIBABA_CLOUD_OIDC_TOKEN_FILE and envs.ALIBABA_CLOUD_OIDC_TOKEN_FILE.value
  if token then
    if not token:match("^/var/run/secrets/") then problem("Deployment: the OIDC token is outside /var/run/secrets/") end
    local mounted = false
    for _, m in ipairs(list(c.volumeMounts)) do
      if token:sub(1, #m.mountPath + 1) == m.mountPath .. "/" then mounted = true end
    end
    if not mounted then problem("Deployment: nothing mounted at the OIDC token path %s", token) end
  end
end
local function selects(selector, labels)
  if type(selector) ~= "table" or next(selector) == nil then return false end
  for k, v in pairs(selector) do if labels[k] ~= v then return false end end
  return true
end
local svc = all("Service")[1]
if not svc or not selects((svc.spec or {}).selector, pod_labels) then problem("no Service selecting the luaprov pods") end
local pdb = find("PodDisruptionBudget")
if not pdb or not selects(((pdb.spec or {}).selector or {}).matchLabels, pod_labels) then
  problem("no PodDisruptionBudget selecting the luaprov pods")
end
if not find("Namespace", "luaprov") then problem("no Namespace luaprov") end
for _, o in ipairs(objects) do
  local namespaced = o.kind ~= "Namespace" and o.kind ~= "CustomResourceDefinition" and o.kind ~= "ClusterRole"
    and o.kind ~= "ClusterRoleBinding"
  if namespaced and o.metadata.namespace ~= "luaprov" then problem("%s %s is not in namespace luaprov", o.kind, o.metadata.name) end
end

-- ---- the ConfigMap's scripts, laid out as the Deployment mounts them --------------------------
local cm = find("ConfigMap", "luaprov-scripts")
local written = 0
if not cm then
  problem("no ConfigMap luaprov-scripts")
else
  local data = cm.data or {}
  local mapped = {}
  for _, item in ipairs(scripts_items) do
    mapped[item.key] = true
    if type(data[item.key]) ~= "string" then
      problem("ConfigMap luaprov-scripts has no key %s (mapped to %s)", tostring(item.key), tostring(item.path))
    elseif type(item.path) ~= "string" or item.path:find("..", 1, true) or item.path:sub(1, 1) == "/" then
      problem("items: bad path %s", tostring(item.path))
    else
      assert(os.execute(string.format("mkdir -p '%s/%s'", tree, item.path:match("^(.*)/") or ".")))
      local f = assert(io.open(tree .. "/" .. item.path, "wb"))
      f:write(data[item.key])
      f:close()
      written = written + 1
    end
  end
  for key in pairs(data) do
    if key:find("/", 1, true) then problem("ConfigMap key %s contains '/'", key) end
    if key:match("%.lua$") and not mapped[key] then problem("ConfigMap key %s is not mapped by the Deployment's items:", key) end
  end
end
if written == 0 then problem("no script laid out from the ConfigMap") end

-- ---- the kustomization lists every file -----------------------------------------------------
if not kustomization then
  problem("no kustomization.yaml")
else
  local listed = {}
  for _, r in ipairs(list(kustomization.resources)) do
    listed[r] = true
    if not by_file[r] then problem("kustomization lists %s, which is not a manifest here", r) end
  end
  for rel, n in pairs(by_file) do
    if n > 0 and not listed[rel] then problem("kustomization does not list %s", rel) end
  end
  if kustomization.namespace ~= "luaprov" then problem("kustomization namespace is not luaprov") end
  local labelled = (kustomization.commonLabels or {})["app.kubernetes.io/name"] == "luaprov"
  for _, l in ipairs(list(kustomization.labels)) do
    if (l.pairs or {})["app.kubernetes.io/name"] == "luaprov" then labelled = true end
  end
  if not labelled then problem("kustomization does not label everything app.kubernetes.io/name=luaprov") end
end

if #problems > 0 then
  for _, p in ipairs(problems) do io.stderr:write("  ", p, "\n") end
  os.exit(1)
end
print(string.format("%d files, %d objects, %d scripts: ok", #files, #objects, written))
LUA

mapfile -t FILES < <(cd "$DEPLOY" && find . -name '*.yaml' -o -name '*.yml' | sed 's|^\./||' | sort)
[[ ${#FILES[@]} -gt 0 ]] || fail "no YAML under $DEPLOY"
mkdir -p "$WORK/tree"
OUT="$(lua5.4 "$WORK/check.lua" "$DEPLOY" "$WORK/tree" "${FILES[@]}" 2>&1)" || fail "manifests:
$OUT"
echo "manifests: $OUT"

# The scripts exactly as the pod sees them.
CHECK="$("$LUAPROV" check "$WORK/tree" 2>&1)" || fail "luaprov check of the ConfigMap's scripts:
$CHECK"
echo "scripts: $CHECK"

# A broken script in the same layout is caught (the check above is not vacuous).
find "$WORK/tree" -name '*.lua' -print -quit | xargs -r sh -c 'echo "this is not Lua" >>"$1"' sh
if "$LUAPROV" check "$WORK/tree" >/dev/null 2>&1; then fail "luaprov check accepted a broken script"; fi

if ! command -v kubectl >/dev/null; then
  echo "kubectl not on PATH: skipping kustomize build and apply --dry-run=client"
else
  BUILT="$(kubectl kustomize "$DEPLOY" 2>"$WORK/kustomize.err")" || fail "kubectl kustomize: $(cat "$WORK/kustomize.err")"
  COUNT="$(grep -c '^kind: ' <<<"$BUILT")"
  EXPECTED="$(sed -n 's/.* files, \([0-9]*\) objects,.*/\1/p' <<<"$OUT")"
  [[ "$COUNT" == "$EXPECTED" ]] || fail "kubectl kustomize built $COUNT objects, the files hold $EXPECTED"
  grep -q 'app.kubernetes.io/name: luaprov' <<<"$BUILT" || fail "kustomize output lacks the common label"
  echo "kustomize: $COUNT objects"
  if kubectl version --request-timeout=5s >/dev/null 2>&1; then
    kubectl apply --dry-run=client -k "$DEPLOY" -o name >"$WORK/apply.out" 2>&1 \
      || fail "kubectl apply --dry-run=client: $(cat "$WORK/apply.out")"
    [[ "$(wc -l <"$WORK/apply.out")" -ge "$EXPECTED" ]] || fail "apply --dry-run named: $(cat "$WORK/apply.out")"
    echo "kubectl apply --dry-run=client: ok"
  else
    echo "no cluster answers kubectl: skipping apply --dry-run=client (kubectl kustomize passed)"
  fi
fi
echo "deploy manifests: ok"
