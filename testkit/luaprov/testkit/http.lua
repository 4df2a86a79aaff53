-- kit.http: a fake transport. The first on{...} of a test replaces luaprov.http.request and
-- request_all; every request is recorded; a request no route matches raises an error naming it and
-- the routes there are. reset() (after each test under busted) restores the real functions.
local luaprov = require "luaprov"
local stubs = require "luaprov.testkit.stubs"

local json = luaprov.json

local M = {}

local routes, requests, unmatched, installed = {}, {}, {}, false

local function describe_route(r)
  return ("%s %s"):format(r.method or "*", r.url and ("= " .. r.url) or r.url_match or "<function>")
end

local function describe_request(req)
  return ("%s %s"):format(req.method, req.url)
end

local function route_matches(r, req)
  if r.times and r.used >= r.times then return false end
  if r.method and r.method:upper() ~= req.method then return false end
  if r.url and r.url ~= req.url then return false end
  if r.url_match and not req.url:find(r.url_match) then return false end
  if r.body_match and not (req.body or ""):find(r.body_match) then return false end
  if r.match and not r.match(req) then return false end
  return true
end

local function as_response(spec)
  local res = { status = spec.status or 200, headers = {}, body = spec.body or "" }
  for k, v in pairs(spec.headers or {}) do res.headers[k:lower()] = v end
  if spec.json ~= nil then
    res.body = assert(json.encode(spec.json))
    res.headers["content-type"] = res.headers["content-type"] or "application/json"
  end
  return res
end

-- One answer of a route: a function's result, the next of a list, or the route's own fields.
local function answer(r, req)
  r.used = r.used + 1
  if r.respond then return r.respond(req) end
  local spec = r
  if r.responses then spec = r.responses[math.min(r.used, #r.responses)] end
  if spec.error then return nil, spec.error, spec.code or "Transport" end
  return as_response(spec)
end

local function fake_request(req)
  if type(req) ~= "table" then error("luaprov.http.request: expected a table", 2) end
  if type(req.url) ~= "string" then error("luaprov.http.request: field 'url' is required", 2) end
  local recorded = { method = (req.method or "GET"):upper(), url = req.url, headers = req.headers or {},
    body = req.body, timeout_ms = req.timeout_ms }
  if recorded.body then recorded.json = json.decode(recorded.body) end
  requests[#requests + 1] = recorded
  -- Newest routes first, so a test can override what a before_each set up.
  for i = #routes, 1, -1 do
    if route_matches(routes[i], recorded) then return answer(routes[i], recorded) end
  end
  unmatched[#unmatched + 1] = recorded
  local known = {}
  for _, r in ipairs(routes) do known[#known + 1] = "  " .. describe_route(r) end
  error(("kit.http: no fake response for %s\nroutes:\n%s"):format(describe_request(recorded),
    #known > 0 and table.concat(known, "\n") or "  (none)"), 2)
end

local function fake_request_all(list, _opts)
  local out = setmetatable({}, json.array_mt)
  for i, req in ipairs(list) do
    local ok, res, err, code = pcall(fake_request, req)
    if not ok then error(res, 2) end
    out[i] = res or { error = err, code = code }
  end
  return out
end

--- install(): swap in the fake transport (on{} does it; call it alone to refuse every request).
function M.install()
  if installed then return end
  installed = true
  stubs.stub(luaprov.http, "request", fake_request)
  stubs.stub(luaprov.http, "request_all", fake_request_all)
end

--- on{method=, url=|url_match=, body_match=, match=fn(req), times=n,
---    status=, headers=, body=, json= | error=, code= | responses={...} | respond=fn(req)}
function M.on(route)
  assert(type(route) == "table", "kit.http.on: expected a table")
  assert(route.url or route.url_match or route.match, "kit.http.on: give url, url_match or match")
  local r = {}
  for k, v in pairs(route) do r[k] = v end
  r.used = 0
  routes[#routes + 1] = r
  M.install()
  return r
end

--- requests([filter]) -> the recorded requests {method, url, headers, body, json}, optionally only
--- those matching filter = {method=, url=, url_match=, body_match=}.
function M.requests(filter)
  local out = {}
  for _, req in ipairs(requests) do
    if not filter or route_matches({ method = filter.method, url = filter.url, url_match = filter.url_match,
      body_match = filter.body_match, match = filter.match, used = 0 }, req) then
      out[#out + 1] = req
    end
  end
  return out
end

function M.unmatched()
  return unmatched
end

local function listing()
  if #requests == 0 then return "  (no request was made)" end
  local lines = {}
  for i, req in ipairs(requests) do lines[i] = "  " .. describe_request(req) end
  return table.concat(lines, "\n")
end

--- assert_requested{method=, url=|url_match=, body_match=, times=}: at least one matching request
--- (exactly `times` when given); raises naming every request made otherwise.
function M.assert_requested(filter)
  local got = #M.requests(filter)
  local ok = (filter.times == nil and got > 0) or got == filter.times
  if not ok then
    local want = filter.times and ("%d time(s)"):format(filter.times) or "at least once"
    error(("kit.http: expected %s to be requested %s, it was %d time(s); requests made:\n%s"):format(
      describe_route(filter), want, got, listing()), 2)
  end
  return got
end

function M.assert_not_requested(filter)
  filter = { method = filter.method, url = filter.url, url_match = filter.url_match, times = 0 }
  return M.assert_requested(filter)
end

stubs.on_reset(function()
  routes, requests, unmatched, installed = {}, {}, {}, false
end)

return M
