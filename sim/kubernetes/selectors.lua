-- Selectors in their three shapes: the labelSelector/fieldSelector strings of a LIST or WATCH, the
-- LabelSelector objects of a PodDisruptionBudget (matchLabels + matchExpressions), and the node
-- selector requirements of a pod's node affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt).
local wire = require "sim.kubernetes.wire"

local present = wire.present

local M = {}

local KEY = "[%w%./_-]+"

local function parse_set_term(term)
  local k, op, values = term:match("^%s*(" .. KEY .. ")%s+(n?o?t?in)%s*%((.*)%)%s*$")
  if not k or (op ~= "in" and op ~= "notin") then return nil end
  local set = {}
  for v in values:gmatch("[^,%s]+") do set[v] = true end
  return { key = k, op = op, set = set }
end

local function parse_term(term)
  local set_term = parse_set_term(term)
  if set_term then return set_term end
  local a, o, b = term:match("^%s*(" .. KEY .. ")%s*([!=]=?)%s*([%w%./_-]*)%s*$")
  if a then return { key = a, op = o == "!=" and "!=" or "=", value = b } end
  if term:match("^%s*!%s*" .. KEY .. "%s*$") then return { key = term:match(KEY), op = "!" } end
  if term:match("^%s*" .. KEY .. "%s*$") then return { key = term:match(KEY), op = "exists" } end
  if term:match("%S") then wire.bad_request("unable to parse requirement: " .. term) end
  return nil
end

--- parse_labels(text) -> terms of a labelSelector string: a=b, a==b, a!=b, a, !a, a in (x,y),
-- a notin (x,y), comma-separated. 400 on a term it cannot read.
function M.parse_labels(text)
  local terms = {}
  local rest = text or ""
  while rest ~= "" do
    -- a set term's parentheses hold commas, so it is cut out whole before splitting on commas
    local term, tail = rest:match("^%s*([^,(]-%s*%b())%s*,?(.*)$")
    if not term then term, tail = rest:match("^%s*([^,]*),?(.*)$") end
    rest = tail
    terms[#terms + 1] = parse_term(term)
  end
  return terms
end

function M.labels_match(terms, labels)
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

-- fieldSelector: the fields an apiserver lets clients select on, for the kinds the simulator serves
-- (kubectl describe lists a pod's events by involvedObject, kubectl drain a node's pods by spec.nodeName).
local FIELDS = {}
for _, path in ipairs { "metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName",
  "status.phase", "status.podIP", "involvedObject.kind", "involvedObject.namespace",
  "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
  "involvedObject.fieldPath", "reason", "type", "reportingComponent" } do
  FIELDS[path] = function(obj)
    local v = obj
    for key in path:gmatch("[^.]+") do v = type(v) == "table" and v[key] or nil end
    return v
  end
end

local function parse_fields(text)
  local terms = {}
  for term in (text or ""):gmatch("[^,]+") do
    local k, op, v = term:match("^%s*([%w%.]+)%s*([!=]=?)%s*(.-)%s*$")
    if not FIELDS[k or ""] then wire.bad_request("field label not supported: " .. (k or term)) end
    terms[#terms + 1] = { get = FIELDS[k], negate = op == "!=", value = v }
  end
  return terms
end

local function fields_match(terms, obj)
  for _, t in ipairs(terms) do
    local v = t.get(obj)
    v = present(v) and type(v) ~= "table" and tostring(v) or ""
    if (v == t.value) == t.negate then return false end
  end
  return true
end

--- filter(params) -> function(obj) -> whether obj passes the request's labelSelector and fieldSelector.
function M.filter(params)
  local labels = M.parse_labels(params.labelSelector)
  local fields = parse_fields(params.fieldSelector)
  return function(obj)
    return fields_match(fields, obj) and M.labels_match(labels, obj.metadata.labels)
  end
end

-- ---- objects ------------------------------------------------------------------------------

local function contains(values, v)
  if type(values) ~= "table" then return false end
  for _, x in ipairs(values) do
    if x == v then return true end
  end
  return false
end

--- requirement_matches(req, value) -> whether a {key, operator, values} requirement holds for the
-- label value (nil when the label is absent). Gt and Lt compare integers, as the scheduler does.
function M.requirement_matches(req, value)
  local op = req.operator
  if op == "In" then return value ~= nil and contains(req.values, value) end
  if op == "NotIn" then return value == nil or not contains(req.values, value) end
  if op == "Exists" then return value ~= nil end
  if op == "DoesNotExist" then return value == nil end
  if op == "Gt" or op == "Lt" then
    local have = tonumber(value)
    local want = type(req.values) == "table" and tonumber(req.values[1])
    if not have or not want then return false end
    if op == "Gt" then return have > want end
    return have < want
  end
  return false
end

--- selector_matches(selector, labels) -> whether a LabelSelector object selects labels. An empty
-- selector selects everything; an absent one (nil or null) nothing, as for PodDisruptionBudgets.
function M.selector_matches(selector, labels)
  if not present(selector) or type(selector) ~= "table" then return false end
  labels = type(labels) == "table" and labels or {}
  for k, v in pairs(type(selector.matchLabels) == "table" and selector.matchLabels or {}) do
    if labels[k] ~= v then return false end
  end
  for _, req in ipairs(type(selector.matchExpressions) == "table" and selector.matchExpressions or {}) do
    if type(req) ~= "table" or not M.requirement_matches(req, labels[req.key]) then return false end
  end
  return true
end

return M
