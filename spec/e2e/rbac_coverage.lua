-- What examples/deploy/rbac.yaml grants luaprov, against what luaprov did over the whole e2e suite.
-- usage: lua5.4 rbac_coverage.lua RBAC_YAML FAILURE_PATHS AUDIT_LOG...
-- Prints one line per problem and exits 1 when any: a request the API server refused (401, 403), a
-- grant (API group, resource[/subresource], verb) that no request used unless FAILURE_PATHS names it
-- (rbac_failure_paths.txt: grants only a failure needs), or an entry there that is not granted.
-- Audit lines are the API server's JSON (audit.k8s.io/v1 Event), one per request luaprov's
-- ServiceAccount made.
local lyaml = require "lyaml"
local cjson = require "cjson"

local function read(path)
  local f = assert(io.open(path, "r"))
  local text = f:read("a")
  f:close()
  return text
end

local function key(group, resource, verb)
  return (group == "" and "core" or group) .. " " .. resource .. " " .. verb
end

local granted, order = {}, {}
for _, doc in ipairs(lyaml.load(read(arg[1]), { all = true })) do
  if doc.kind == "ClusterRole" or doc.kind == "Role" then
    for _, rule in ipairs(doc.rules or {}) do
      for _, group in ipairs(rule.apiGroups or {}) do
        for _, resource in ipairs(rule.resources or {}) do
          for _, verb in ipairs(rule.verbs or {}) do
            local k = key(group, resource, verb)
            if not granted[k] then order[#order + 1] = k end
            granted[k] = true
          end
        end
      end
    end
  end
end

local failure_paths = {}
for line in read(arg[2]):gmatch("[^\n]+") do
  local group, resource, verb = line:match("^([^#%s]%S*) (%S+) (%S+)\t")
  if group then failure_paths[key(group == "core" and "" or group, resource, verb)] = true end
end

local used, problems, requests = {}, {}, 0
for i = 3, #arg do
  for line in read(arg[i]):gmatch("[^\n]+") do
    local event = cjson.decode(line)
    local ref = event.objectRef or {}
    local resource = ref.resource or event.requestURI
    if ref.subresource then resource = resource .. "/" .. ref.subresource end
    local k = key(ref.apiGroup or "", resource, event.verb)
    requests = requests + 1
    local code = event.responseStatus and event.responseStatus.code
    if code == 401 or code == 403 then
      problems[#problems + 1] = ("refused %d: %s %s (%s)"):format(code, event.verb, event.requestURI, k)
    end
    used[k] = (used[k] or 0) + 1
  end
end

for _, k in ipairs(order) do
  if not used[k] and not failure_paths[k] then problems[#problems + 1] = "granted but never used: " .. k end
end
for k in pairs(failure_paths) do
  if not granted[k] then problems[#problems + 1] = "a failure path of a grant that is not there: " .. k end
end
for k, n in pairs(used) do
  if not granted[k] then
    problems[#problems + 1] = ("used %d times without a grant of its own: %s"):format(n, k)
  end
end
table.sort(problems)
for _, p in ipairs(problems) do print(p) end
io.stderr:write(("%d requests in %d audit logs, %d grants, %d problems\n"):format(requests, #arg - 2, #order,
  #problems))
os.exit(#problems == 0 and 0 or 1)
