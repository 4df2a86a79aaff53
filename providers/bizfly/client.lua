-- Bizfly Kubernetes Engine (KaaS) client: the four calls the Cluster Autoscaler needs, with the login
-- in front of them and the re-login behind a 401, as gobizfly calls them.
--
--   client.new(cfg[, opts]) -> client                 cfg from config.from_env
--   c:get_cluster(cluster) -> FullCluster | nil, err             GET    {svc}/_/{cluster}
--   c:get_pool(cluster, pool) -> WorkerPoolWithNodes | nil, err  GET    {svc}/_/{cluster}/{pool}
--   c:get_pools(cluster, pools) -> list of {pool = ...} | {error = err}   (in parallel)
--   c:update_pool(cluster, pool, fields) -> true | nil, err      PATCH  {svc}/_/{cluster}/{pool}
--   c:set_desired_size(cluster, pool, n) -> true | nil, err      PATCH  {"desired_size": n}, 0 included
--   c:delete_pool_node(cluster, pool, node) -> true | nil, err   DELETE {svc}/_/{cluster}/{pool}/{node}
--   c:logout()                                                   forget the token (tests, rotation)
--
-- err = {code, message, method, path, status, api_message, attempts, request_id} (wire.lua); code is
-- "NotFound", "Auth", "Forbidden", "InvalidRequest", "Throttled", "ServerError", "InvalidResponse",
-- "Transport". The message names the method, the path, the HTTP status, the API's message and the
-- request ID the API answered (X-Request-Id), and never a password, secret or token.
local luaprov = require "luaprov"
local auth = require "providers.bizfly.auth"
local wire = require "providers.bizfly.wire"

local json, time = luaprov.json, luaprov.time

local M = {}
M.__index = M

-- Path segments are IDs, but an ID with a "/" or "?" must not walk to another resource.
local function escape(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

local function one_by_one(transport)
  return function(requests)
    local out = {}
    for i, r in ipairs(requests) do
      local res, err, code = transport(r)
      out[i] = res or { error = err, code = code }
    end
    return out
  end
end

--- new(cfg[, opts]) -> client. opts (all optional): timeout_ms (per attempt, 10 000), max_attempts
-- (rounds for transient failures of idempotent calls, 3), backoff_base / backoff_cap (seconds, 0.5 / 5),
-- deadline_s (no retry round starts after this many seconds, 20), concurrency (parallel GETs, 8); for
-- tests transport (one request -> response | nil, message, code) or transport_all, sleep, monotonic,
-- now.
function M.new(cfg, opts)
  opts = opts or {}
  local self = setmetatable({ cfg = cfg, session = nil }, M)
  self.now = opts.now or time.now
  self.wire = {
    transport_all = opts.transport_all or (opts.transport and one_by_one(opts.transport))
      or luaprov.http.request_all,
    sleep = opts.sleep or time.sleep,
    monotonic = opts.monotonic or time.monotonic,
    timeout_ms = opts.timeout_ms or 10000,
    max_attempts = opts.max_attempts or 3,
    backoff_base = opts.backoff_base or 0.5,
    backoff_cap = opts.backoff_cap or 5,
    deadline_s = opts.deadline_s or 20,
    concurrency = opts.concurrency or 8,
    secrets = auth.secrets(cfg),
  }
  return self
end

local function send(self, requests)
  return wire.exchange(self.wire, requests)
end

--- c:token_session() -> the current login, logging in first when there is none or it is near expiry.
function M:token_session()
  if auth.usable(self.session, self.now()) then return self.session end
  local session, err = auth.login(self.cfg, function(requests) return send(self, requests) end)
  if not session then return nil, err end
  self.session = session
  self.wire.secrets = auth.secrets(self.cfg, session)
  return session
end

function M:logout()
  self.session = nil
end

local function build(self, session, spec)
  return { method = spec.method, url = session.service_url .. spec.path, headers = auth.headers(self.cfg, session),
    body = spec.body, json = spec.json, idempotent = spec.idempotent }
end

local function unauthorized_error(req, result)
  return wire.error { code = "Auth", method = req.method, path = wire.path_of(req.url), status = 401,
    api_message = result.detail, request_id = result.request_id,
    detail = (result.detail or "unauthorized") .. "; refused again right after a new login" }
end

--- c:call_all(specs) -> results. spec = {method, path (below the service URL), body, json,
-- idempotent}; result = {status, body, path (the URL's path)} | {error = err}. A 401 (token expired or revoked) logs in
-- again once and repeats those calls with the new token, whatever the method: the server refused
-- them before doing anything.
function M:call_all(specs)
  local results = {}
  local session, err = self:token_session()
  if not session then
    for i = 1, #specs do results[i] = { error = err } end
    return results
  end
  local requests = {}
  for i, spec in ipairs(specs) do requests[i] = build(self, session, spec) end
  local answers = send(self, requests)
  local again = {}
  for i, a in ipairs(answers) do
    a.path = wire.path_of(requests[i].url)
    if a.unauthorized then again[#again + 1] = i else results[i] = a end
  end
  if #again == 0 then return results end

  -- Another task may have logged in while this one waited; only a token still current is dropped.
  if self.session == session then self.session = nil end
  luaprov.log.info("bizfly token refused; logging in again", { calls = #again })
  session, err = self:token_session()
  local retry = {}
  for k, i in ipairs(again) do
    if not session then results[i] = { error = err } else retry[k] = build(self, session, specs[i]) end
  end
  if not session then return results end
  answers = send(self, retry)
  for k, i in ipairs(again) do
    local a = answers[k]
    a.path = wire.path_of(retry[k].url)
    results[i] = a.unauthorized and { error = unauthorized_error(retry[k], a) } or a
  end
  return results
end

--- c:call(spec) -> result.body (or true when the answer has none) | nil, err
function M:call(spec)
  local r = self:call_all({ spec })[1]
  if r.error then return nil, r.error end
  if r.body == nil then return true end
  return r.body
end

-- A result whose body must be a JSON object -> the object, or nil, InvalidResponse.
local function object(r, what, spec)
  if r.error then return nil, r.error end
  if type(r.body) ~= "table" or getmetatable(r.body) == json.array_mt then
    return nil, wire.error { code = "InvalidResponse", method = spec.method, path = r.path or spec.path,
      status = r.status, detail = what .. " is not a JSON object" }
  end
  return r.body
end

local function pool_path(cluster, pool)
  return "/_/" .. escape(cluster) .. "/" .. escape(pool)
end

function M:get_cluster(cluster)
  local spec = { method = "GET", path = "/_/" .. escape(cluster), json = true, idempotent = true }
  return object(self:call_all({ spec })[1], "the cluster", spec)
end

function M:get_pool(cluster, pool)
  local spec = { method = "GET", path = pool_path(cluster, pool), json = true, idempotent = true }
  return object(self:call_all({ spec })[1], "the worker pool", spec)
end

--- c:get_pools(cluster, pool_ids) -> list, in order, of {pool = WorkerPoolWithNodes} or {error = err}.
-- One request per pool, up to opts.concurrency at once inside the engine.
function M:get_pools(cluster, pool_ids)
  local specs = {}
  for i, id in ipairs(pool_ids) do
    specs[i] = { method = "GET", path = pool_path(cluster, id), json = true, idempotent = true }
  end
  local out = {}
  for i, r in ipairs(self:call_all(specs)) do
    local pool, err = object(r, "the worker pool", specs[i])
    out[i] = pool and { pool = pool } or { error = err }
  end
  return out
end

--- c:update_pool(cluster, pool, fields) -> true | nil, err. fields are sent as given (desired_size,
-- enable_autoscaling, min_size, max_size, labels, taints); the answer's body is ignored, as upstream.
-- Repeating an update that sets absolute values is harmless, so transient failures are retried.
function M:update_pool(cluster, pool, fields)
  local _, err = self:call { method = "PATCH", path = pool_path(cluster, pool), body = fields, idempotent = true }
  if err then return nil, err end
  return true
end

--- c:set_desired_size(cluster, pool, n) -> true | nil, err. Always sends the number: upstream's
-- omitempty struct turned a decrease to 0 into a no-op `{}`.
function M:set_desired_size(cluster, pool, n)
  if math.type(n) ~= "integer" or n < 0 then
    error("bizfly client: desired size must be an integer >= 0, got " .. tostring(n), 2)
  end
  return self:update_pool(cluster, pool, { desired_size = n })
end

--- c:delete_pool_node(cluster, pool, node_id) -> true | nil, err. Not repeated by this client: after a
-- lost answer the node may already be going, and the caller decides (a second DELETE answers 404).
function M:delete_pool_node(cluster, pool, node_id)
  local _, err = self:call { method = "DELETE", path = pool_path(cluster, pool) .. "/" .. escape(node_id),
    idempotent = false }
  if err then return nil, err end
  return true
end

return M
