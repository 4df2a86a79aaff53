-- The Bizfly client's HTTP exchange: sends a batch of JSON requests (luaprov.http.request_all, so the
-- pools of a refresh are fetched in parallel inside the engine), turns each answer into a decoded
-- body or an error table, and retries transient failures of idempotent requests with backoff.
--
--   wire.exchange(opts, requests) -> results      results[i] = {status, body, headers} | {error = err}
--   wire.error(fields) -> err                     err = {code, message, method, path, status, request_id, ...}
--   wire.scrub(text, secrets) -> text with every secret replaced by "[redacted]"
--
-- request = {method, url, headers, body (a table, encoded here), idempotent, json (expect a JSON
-- body on success)}. A 401 comes back as a result with status 401 and no error: only the caller knows
-- how to log in again (client.lua). Everything else that is not 2xx becomes an error.
--
-- Two layers retry: luaprov.http itself repeats a GET (or DELETE) up to 3 more times on transport
-- failures, 429 and most 5xx within about a second; the rounds here add a longer backoff for outages
-- that outlast that, cover what the binding does not (a 2xx with a malformed body, a PATCH that is
-- safe to repeat), and stop at a deadline so a refresh stays inside the engine's call budget.
local luaprov = require "luaprov"

local json, log = luaprov.json, luaprov.log
local format = string.format

local M = {}

-- Classes of HTTP status the mapping and the engine branch on.
local function class_of(status)
  if status == 400 or status == 409 or status == 422 then return "InvalidRequest" end
  if status == 401 then return "Auth" end
  if status == 403 then return "Forbidden" end
  if status == 404 then return "NotFound" end
  if status == 429 then return "Throttled" end
  if status >= 500 then return "ServerError" end
  return "HTTP" .. status
end
M.class_of = class_of

--- scrub(text, secrets) -> text with every occurrence of a secret (4 characters or more) replaced.
-- A server that echoes a request (a login error quoting the body) must not leak it into an error.
function M.scrub(text, secrets)
  if type(text) ~= "string" then return text end
  for _, secret in ipairs(secrets or {}) do
    if type(secret) == "string" and #secret >= 4 then
      local first, last = text:find(secret, 1, true)
      while first do
        text = text:sub(1, first - 1) .. "[redacted]" .. text:sub(last + 1)
        first, last = text:find(secret, first + 10, true)
      end
    end
  end
  return text
end

local function snippet(body)
  body = tostring(body or ""):gsub("%c", " ")
  if #body > 160 then body = body:sub(1, 160) .. "..." end
  return body
end

--- path_of(url) -> the URL's path without the query ("/api/kubernetes-engine/_/c1"), for errors.
function M.path_of(url)
  local path = tostring(url):match("^%a[%w+.-]*://[^/?#]*([^?#]*)") or tostring(url)
  if path == "" then path = "/" end
  return path
end

--- error(fields) -> err. fields: code, method, path, status, detail (the API's message or the
-- transport's), attempts, request_id (the answer's X-Request-Id), plus anything else to carry
-- (transport_code, retryable).
-- message = "<METHOD> <path>: HTTP <status>: <detail> (after N attempts; request ID <id>)": the
-- request ID is what Bizfly's support asks for.
function M.error(fields)
  local parts = { format("%s %s: ", fields.method or "?", fields.path or "?") }
  if fields.status then parts[#parts + 1] = format("HTTP %d: ", fields.status) end
  parts[#parts + 1] = fields.detail or fields.code
  local notes = {}
  if fields.attempts and fields.attempts > 1 then notes[#notes + 1] = format("after %d attempts", fields.attempts) end
  if fields.request_id then notes[#notes + 1] = "request ID " .. fields.request_id end
  if #notes > 0 then parts[#parts + 1] = " (" .. table.concat(notes, "; ") .. ")" end
  local err = { code = fields.code, message = table.concat(parts), method = fields.method, path = fields.path,
    status = fields.status, api_message = fields.api_message, transport_code = fields.transport_code,
    retryable = fields.retryable or false, attempts = fields.attempts, request_id = fields.request_id }
  return err
end

--- request_id(res) -> the X-Request-Id the API answered with, or nil (a gateway that sends none).
function M.request_id(res)
  local id = res and res.headers and res.headers["x-request-id"]
  return type(id) == "string" and id ~= "" and id or nil
end

-- The API's own words from an error body: Bizfly answers {"message": ...} (some gateways "error" or
-- "detail"); anything else is quoted as a snippet.
local function api_message(body)
  local ok, value = pcall(json.decode, body or "")
  if ok and type(value) == "table" then
    for _, k in ipairs({ "message", "error", "detail", "msg" }) do
      local v = value[k]
      if type(v) == "string" and v ~= "" then return v end
      if type(v) == "table" and type(v.message) == "string" then return v.message end
    end
  end
  if body == nil or body == "" then return nil end
  return snippet(body)
end

-- One answer -> result ({status, body, headers}, {status = 401, unauthorized = true} or
-- {fields = <error fields>}), plus whether another round could do better.
local function interpret(req, res, terr, tcode, secrets)
  local method, path = req.method, M.path_of(req.url)
  if not res then
    return { fields = { code = "Transport", method = method, path = path, transport_code = tcode,
      detail = M.scrub(tostring(terr), secrets) .. (tcode and (" [" .. tcode .. "]") or "") } }, req.idempotent
  end
  local status = res.status
  if status >= 200 and status < 300 then
    local text = res.body or ""
    local ok, value = pcall(json.decode, text)
    if ok and value ~= nil then return { status = status, body = value, headers = res.headers } end
    -- PATCH and DELETE answers are ignored upstream: an empty or odd body does not fail those.
    if not req.json then return { status = status, headers = res.headers } end
    local detail = text == "" and "empty body where JSON was expected"
      or ("the body is not JSON: " .. M.scrub(snippet(text), secrets))
    return { fields = { code = "InvalidResponse", method = method, path = path, status = status, detail = detail,
      request_id = M.request_id(res) } }, req.idempotent
  end
  local detail = M.scrub(api_message(res.body), secrets)
  if status == 401 then
    return { status = 401, unauthorized = true, detail = detail, request_id = M.request_id(res) }
  end
  local retry = status == 429 or (status >= 500 and status ~= 501 and req.idempotent) or false
  return { fields = { code = class_of(status), method = method, path = path, status = status,
    detail = detail or ("HTTP " .. status), api_message = detail, retryable = retry, request_id = M.request_id(res) } },
    retry
end

local function encode_request(req, timeout_ms)
  local headers = { accept = "application/json" }
  for k, v in pairs(req.headers or {}) do headers[k] = v end
  local body
  if req.body ~= nil then
    body = type(req.body) == "string" and req.body or assert(json.encode(req.body))
    headers["content-type"] = "application/json"
  end
  return { method = req.method, url = req.url, headers = headers, body = body, timeout_ms = timeout_ms }
end

-- Full jitter below an exponentially growing ceiling: clients that failed together do not come back
-- in step.
local function backoff(opts, round)
  local ceiling = math.min(opts.backoff_cap, opts.backoff_base * 2 ^ (round - 1))
  return math.random() * ceiling
end

--- exchange(opts, requests) -> results, in the order of requests.
-- opts: transport_all (function(list, {concurrency}) -> answers, as luaprov.http.request_all),
-- sleep, monotonic, timeout_ms, max_attempts (rounds), backoff_base / backoff_cap (s), deadline_s
-- (no new round starts past it), concurrency, secrets (strings never to show).
function M.exchange(opts, requests)
  local results, pending = {}, {}
  for i, req in ipairs(requests) do pending[#pending + 1] = { index = i, req = req } end
  local started = opts.monotonic()
  local round = 0
  while #pending > 0 do
    round = round + 1
    local wire_requests = {}
    for k, p in ipairs(pending) do wire_requests[k] = encode_request(p.req, opts.timeout_ms) end
    local t0 = opts.monotonic()
    local answers = opts.transport_all(wire_requests, { concurrency = opts.concurrency })
    local duration_ms = math.floor((opts.monotonic() - t0) * 1000 + 0.5)
    local retry = {}
    for k, p in ipairs(pending) do
      local a = answers[k] or { error = "no answer", code = "Transport" }
      local res = a.status and a or nil
      local result, retryable = interpret(p.req, res, a.error, a.code, opts.secrets)
      log.debug("bizfly call", { method = p.req.method, path = M.path_of(p.req.url), status = res and res.status,
        round = round, duration_ms = duration_ms, outcome = result.fields and result.fields.code or "ok" })
      if result.fields then
        result.fields.attempts = round
        result = { error = M.error(result.fields) }
      end
      results[p.index] = result
      if retryable and round < opts.max_attempts then retry[#retry + 1] = p end
    end
    pending = retry
    if #pending > 0 then
      local wait = backoff(opts, round)
      -- Past the deadline the last answers stand: a refresh must end inside the engine's call budget.
      if opts.monotonic() - started + wait > opts.deadline_s then break end
      opts.sleep(wait)
    end
  end
  return results
end

return M
