-- Alibaba Cloud OpenAPI client for the RPC-style products (ECS, VPC, STS, RAM) and the ROA-style
-- Container Service (cs), with no SDK: builds and signs one request per attempt, sends it through
-- luaprov.http, decodes the JSON answer and turns every failure into one error table the rest of the
-- mapping can branch on.
--
--   client.new{region, endpoint, signature, credentials, timeout_ms, max_attempts, transport, sleep}
--   c:call(product, action, params [, opts]) -> decoded body | nil, err   (product: ecs, vpc, sts, ram)
--   c:roa(product, action, {method, path, query, body} [, opts]) -> value, request_id | nil, err
--   c:paginate(product, action, params, {list, style, page_size}) -> items | nil, err
--   c:call_all(product, action, list_of_params, {concurrency}) -> results (body | {error = err})
--   client.flatten(params [, action]) -> flat wire params (Tag.1.Key, SecurityGroupIds.1, ...)
--   client.json_param(list) -> marks a value to be sent as one JSON text (InstanceIds=["i-1"])
--
-- err = {code, api_code, message, action, request_id, http_status, retryable}. `code` is the class the
-- engine branches on ("Throttled", "NotFound", "InsufficientCapacity", "Auth", "InvalidResponse",
-- "Transport", "Credentials") or else the API's own Code; `message` names the action, the Code, the
-- server's Message and the RequestId, and never holds a secret. Endpoints, signatures and retries
-- for operators: docs/alibaba.md#endpoints-and-wire-format.
local luaprov = require "luaprov"
local util = require "providers.alibaba.util"
local signer = require "providers.alibaba.signer"

local crypto, json, log, time = luaprov.crypto, luaprov.json, luaprov.log, luaprov.time
local format, concat = string.format, table.concat

local M = {}

local EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

-- API version and endpoint prefix per product. Endpoints follow the SDK rule
-- <product>[-vpc].<region>.aliyuncs.com; STS also has a central endpoint for callers with no region.
-- RAM is global: one endpoint whatever the region (and one for the VPC network).
local PRODUCTS = {
  ecs = { version = "2014-05-26", prefix = "ecs" },
  vpc = { version = "2016-04-28", prefix = "vpc" },
  sts = { version = "2015-04-01", prefix = "sts", central = "sts.aliyuncs.com" },
  ram = { version = "2015-05-01", prefix = "ram", global = "ram.aliyuncs.com",
    global_vpc = "ram.vpc-proxy.aliyuncs.com" },
  -- Container Service for Kubernetes (ACK): ROA style (resource paths, JSON bodies), c:roa only.
  cs = { version = "2015-12-15", prefix = "cs", roa = true },
}

-- Parameters that the API takes as one string holding a JSON array, per action. The same
-- name can be a repeat list elsewhere: RunInstances takes SecurityGroupIds.N, DescribeSecurityGroups
-- takes SecurityGroupIds=["sg-1"]. So the table is keyed by action, and json_param() covers the rest.
local JSON_PARAMS = {
  DescribeInstances = { InstanceIds = true, PrivateIpAddresses = true, InnerIpAddresses = true,
    PublicIpAddresses = true, EipAddresses = true },
  DescribeSecurityGroups = { SecurityGroupIds = true },
  DescribeDisks = { DiskIds = true, AdditionalAttributes = true },
  DescribeCapacityReservations = { ["PrivatePoolOptions.Ids"] = true },
}

-- Error classes by API Code. Throttling is classified by Code, never by HTTP
-- status: ECS answers it with 400, 403 or 503 depending on the action.
local THROTTLING = { Throttling = true, ["Throttling.User"] = true, ["Throttling.Api"] = true,
  ["Throttling.Resource"] = true, ServiceUnavailableTemporary = true }
local TRANSIENT = { InternalError = true, ServiceUnavailable = true, UnknownError = true }
-- The offering cannot launch now: the engine marks (type, zone, capacity type) unavailable and
-- tries the next one, so vSwitch exhaustion belongs here too (another zone may have addresses).
local CAPACITY = {
  ["OperationDenied.NoStock"] = true, ["InvalidResourceType.NotSupported"] = true,
  ["Zone.NotOnSale"] = true, ["Zone.NotOpen"] = true, ["InvalidInstanceType.ZoneNotSupported"] = true,
  ["InstanceType.Offline"] = true, ["InvalidInstanceType.PhasedOut"] = true,
  ["InvalidVSwitchId.IpNotEnough"] = true, ["QuotaExceeded.PrivateIpAddress"] = true,
}
-- Only codes that say "the instance itself is gone". InvalidImageId.NotFound and friends are
-- parameter errors of a launch, not a missing target, and keep their Code.
local NOT_FOUND = {
  ["InvalidInstanceId.NotFound"] = true, ["InvalidInstanceId.NotExist"] = true,
  ["InvalidInstance.NotFound"] = true, ["InvalidResourceId.NotFound"] = true,
}
local AUTH_PREFIXES = { "SignatureDoesNotMatch", "IncompleteSignature", "InvalidAccessKeyId", "InvalidSecurityToken",
  "InvalidAccessKeySecret", "InvalidTimeStamp", "Forbidden", "NoPermission", "AuthenticationFail",
  "InvalidAuthorization", "MissingSecurityToken" }

-- Actions that only read: safe to repeat after a 5xx or a lost answer. Mutations are repeated only
-- when they carry a ClientToken (the server then returns the first result) or the caller says so.
local function is_read_action(action)
  return action:find("^Describe") or action:find("^List") or action:find("^Get") or action:find("^Query")
end

local function has_prefix(s, prefixes)
  for _, p in ipairs(prefixes) do
    if s:sub(1, #p) == p then return true end
  end
  return false
end

local function classify(api_code)
  if THROTTLING[api_code] or api_code:find("^Throttling") then return "Throttled" end
  if CAPACITY[api_code] then return "InsufficientCapacity" end
  if has_prefix(api_code, AUTH_PREFIXES) then return "Auth" end
  if NOT_FOUND[api_code] then return "NotFound" end
  return api_code
end

local JSON_MARK = {}

--- json_param(value) -> a marker telling flatten() to send value as one JSON text.
function M.json_param(value)
  return { [JSON_MARK] = value }
end

local function as_json_array(list)
  local copy = setmetatable({}, json.array_mt)
  for i, v in ipairs(list) do copy[i] = v end
  return copy
end


local function scalar(name, v)
  local t = math.type(v) or type(v)
  if t == "string" then return v end
  if t == "integer" then return format("%d", v) end
  if t == "boolean" then return v and "true" or "false" end
  if t == "float" then
    -- Integral floats come from JSON round trips (a size of 40.0); prices keep their digits.
    if v == math.floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then return format("%d", math.floor(v)) end
    return format("%.10g", v)
  end
  error(format("alibaba client: parameter '%s' has a %s value", name, t), 0)
end

local function flatten_into(out, name, value, json_names)
  if type(value) ~= "table" then
    out[name] = scalar(name, value)
    return
  end
  local marked = value[JSON_MARK]
  if marked ~= nil or json_names[name] then
    if marked == nil then marked = value end
    if type(marked) == "string" then
      out[name] = marked
      return
    end
    -- An empty table is an empty list here ("[]"), never an empty object.
    if type(marked) == "table" and (next(marked) == nil or util.is_list(marked)) then marked = as_json_array(marked) end
    local text, err = json.encode(marked)
    if not text then error(format("alibaba client: parameter '%s': %s", name, err), 0) end
    out[name] = text
    return
  end
  if util.is_list(value) then
    -- Repeat lists are 1-based on the wire: InstanceId.1, Tag.1.Key.
    for i, v in ipairs(value) do flatten_into(out, name .. "." .. i, v, json_names) end
  else
    for k, v in pairs(value) do
      if type(k) ~= "string" then
        error(format("alibaba client: parameter '%s' mixes list and struct keys", name), 0)
      end
      flatten_into(out, name .. "." .. k, v, json_names)
    end
  end
end

--- flatten(params [, action]) -> flat map of wire names to strings.
-- Nested tables become Parent.Child, lists Name.N (1-based), JSON-typed parameters of `action`
-- (or values wrapped with json_param) one JSON text. Keys that are already flat pass through.
function M.flatten(params, action)
  local out = {}
  local json_names = JSON_PARAMS[action or ""] or {}
  for k, v in pairs(params or {}) do
    if type(k) ~= "string" then error("alibaba client: parameter names must be strings", 2) end
    flatten_into(out, k, v, json_names)
  end
  return out
end

-- "http://127.0.0.1:4000/gw/" -> scheme "http", authority "127.0.0.1:4000", path "/gw/".
local function split_url(url)
  local scheme, authority, path = tostring(url):match("^(https?)://([^/?#]+)([^?#]*)$")
  if not scheme then return nil end
  if path == "" or path:sub(-1) ~= "/" then path = path .. "/" end
  return scheme, authority, path
end

local function endpoint_for(self, product)
  if self.endpoint then return self.endpoint end
  local spec = PRODUCTS[product]
  if spec.global then return "https://" .. (self.network == "vpc" and spec.global_vpc or spec.global) .. "/" end
  local suffix = self.network == "vpc" and "-vpc" or ""
  if not self.region or self.region == "" then
    if spec.central then return "https://" .. spec.central .. "/" end
    error(format("alibaba client: product '%s' needs a region", product), 3)
  end
  return format("https://%s%s.%s.aliyuncs.com/", spec.prefix, suffix, self.region)
end

-- Replaces every form a secret may take in a server message: the SignatureDoesNotMatch message
-- quotes the server's string to sign, which holds the STS token once (V3 header) or encoded twice
-- (V2 query).
local function scrub(text, creds)
  if type(text) ~= "string" or not creds then return text end
  for _, secret in ipairs({ creds.access_key_secret, creds.security_token }) do
    if type(secret) == "string" and #secret >= 4 then
      local once = signer.percent_encode(secret)
      for _, form in ipairs({ secret, once, signer.percent_encode(once) }) do
        local first, last = text:find(form, 1, true)
        while first do
          text = text:sub(1, first - 1) .. "[redacted]" .. text:sub(last + 1)
          first, last = text:find(form, first + 10, true)
        end
      end
    end
  end
  return text
end

local function make_error(fields)
  if fields.credentials then
    -- The provider's message already names its own action, Code and RequestId (an STS refusal).
    return { code = fields.code, api_code = fields.api_code, message = fields.action .. ": credentials: "
      .. fields.detail, action = fields.action, request_id = fields.request_id, http_status = fields.http_status,
      retryable = false }
  end
  local parts = { fields.action, ": ", fields.code }
  if fields.api_code and fields.api_code ~= fields.code then parts[#parts + 1] = " (" .. fields.api_code .. ")" end
  parts[#parts + 1] = ": " .. (fields.detail or "")
  local tail = {}
  tail[#tail + 1] = "RequestId " .. (fields.request_id or "none")
  if fields.http_status then tail[#tail + 1] = "HTTP " .. fields.http_status end
  if fields.attempts and fields.attempts > 1 then tail[#tail + 1] = "after " .. fields.attempts .. " attempts" end
  parts[#parts + 1] = " (" .. concat(tail, ", ") .. ")"
  return {
    code = fields.code,
    api_code = fields.api_code,
    message = concat(parts),
    action = fields.action,
    request_id = fields.request_id,
    http_status = fields.http_status,
    retryable = fields.retryable or false,
  }
end

-- The RPC ("V2") form: common parameters beside the business ones, all in the query, signed with
-- HMAC-SHA1. POST with an empty body, as the V3 path, so the HTTP layer never repeats it on its own.
local function build_v2(self, spec, action, flat, creds, url)
  local params = {}
  for k, v in pairs(flat) do params[k] = v end
  params.Action, params.Version, params.Format = action, spec.version, "JSON"
  params.AccessKeyId = creds.access_key_id
  params.SignatureMethod, params.SignatureVersion = "HMAC-SHA1", "1.0"
  params.SignatureNonce = crypto.random_hex(16)
  params.Timestamp = time.iso8601(self.clock())
  if creds.security_token then params.SecurityToken = creds.security_token end
  local signature, err = signer.rpc_signature("POST", params, creds.access_key_secret)
  if not signature then return nil, err end
  return {
    method = "POST",
    url = url .. "?" .. signer.canonical_query(params) .. "&Signature=" .. signer.percent_encode(signature),
    headers = { accept = "application/json" },
    body = "",
  }
end

-- The ACS3 ("V3") form: action and version in x-acs-* headers, the signature in Authorization.
-- RPC: POST to the endpoint's path with the business parameters in the query and no body.
-- ROA: `roa.method` to the endpoint's path joined with `roa.path`, a JSON body whose SHA-256 goes in
-- x-acs-content-sha256 (the signer computes it when the body is not empty).
local function build_v3(self, spec, action, flat, creds, url, authority, path, roa)
  local method, body = "POST", ""
  local headers = {
    host = authority,
    ["x-acs-action"] = action,
    ["x-acs-version"] = spec.version,
    ["x-acs-date"] = time.iso8601(self.clock()),
    ["x-acs-signature-nonce"] = crypto.random_hex(16),
    accept = "application/json",
  }
  if roa then
    method, body = roa.method, roa.body
    url = url:gsub("/$", "") .. roa.path
    path = path:gsub("/$", "") .. roa.path
    if body ~= "" then headers["content-type"] = "application/json" end
  end
  if body == "" then headers["x-acs-content-sha256"] = EMPTY_SHA256 end
  if creds.security_token then headers["x-acs-security-token"] = creds.security_token end
  local authorization, err = signer.acs3_authorization(
    { method = method, path = path, query = flat, headers = headers, body = body },
    creds.access_key_id, creds.access_key_secret)
  if not authorization then return nil, err end
  headers.Authorization = authorization
  local query = signer.canonical_query(flat)
  return { method = method, url = query == "" and url or url .. "?" .. query, headers = headers, body = body }
end

-- Anonymous STS calls (AssumeRoleWithOIDC): no signature at all; the common parameters in the
-- query and the business ones as a form body, as credentials-go sends them.
local function build_anonymous(self, spec, action, flat, url)
  local query = signer.canonical_query({
    Action = action, Version = spec.version, Format = "JSON", Timestamp = time.iso8601(self.clock()),
    SignatureNonce = crypto.random_hex(16),
  })
  return {
    method = "POST",
    url = url .. "?" .. query,
    headers = { accept = "application/json", ["content-type"] = "application/x-www-form-urlencoded" },
    body = signer.canonical_query(flat),
  }
end

local function get_credentials(self)
  local provider = self.credentials
  if provider == nil then return nil, "no credentials provider configured" end
  if type(provider) == "function" then return provider() end
  if type(provider.get) == "function" then return provider:get() end
  return provider
end

local function json_object(body)
  local ok, value = pcall(json.decode, body or "")
  if ok and type(value) == "table" and not util.is_list(value) then return value end
  return nil
end

local function snippet(body)
  body = tostring(body or "")
  body = body:gsub("[%c]", " ")
  if #body > 120 then body = body:sub(1, 120) .. "..." end
  return body
end

-- The request for one attempt (signed with fresh credentials), or nil plus the fields of an error.
-- `roa` ({method, path, body}) makes it a ROA request; ROA calls are always signed with ACS3 (the
-- RPC HMAC-SHA1 scheme does not cover paths and bodies).
local function prepare(self, product, action, flat, opts, roa)
  local spec = PRODUCTS[product]
  local scheme, authority, path = split_url(endpoint_for(self, product))
  local url = scheme .. "://" .. authority .. path

  local creds, request, err
  if opts.anonymous then
    request = build_anonymous(self, spec, action, flat, url)
  else
    creds, err = get_credentials(self)
    if not creds then
      -- The provider's own error (an STS refusal, a missing variable) keeps its class and ids.
      if type(err) ~= "table" then err = { message = tostring(err) } end
      return nil, { action = action, code = err.code or "Credentials", api_code = err.api_code,
        request_id = err.request_id, http_status = err.http_status, credentials = true,
        detail = tostring(err.message or err.code) }
    end
    if self.signature == "v2" and not roa then
      request, err = build_v2(self, spec, action, flat, creds, url)
    else
      request, err = build_v3(self, spec, action, flat, creds, url, authority, path, roa)
    end
    if not request then return nil, { action = action, code = "CryptoError", detail = tostring(err) } end
  end
  request.timeout_ms = opts.timeout_ms or self.timeout_ms
  return request, nil, creds
end

-- A ROA answer is any JSON value (DescribeClusterAttachScripts answers a JSON string), or text.
local function roa_value(body)
  local ok, value = pcall(json.decode, body or "")
  if ok and value ~= nil then return value end
  return body or ""
end

-- What one answer means: the decoded body (for `roa`, any JSON value or the raw text) plus the
-- request ID, or nil plus the fields of an error (see make_error) whose `retryable` says whether
-- another attempt could do better. The request ID is the body's, else the x-acs-request-id header.
local function interpret(product, action, res, terr, tcode, creds, n, idempotent, duration_ms, roa)
  if not res then
    log.debug("alibaba call", { product = product, action = action, attempt = n, duration_ms = duration_ms,
      outcome = tcode or "Transport" })
    return nil, { action = action, code = "Transport", retryable = idempotent,
      detail = scrub(tostring(terr), creds) .. (tcode and " [" .. tcode .. "]" or "") }
  end

  local status = res.status
  local body = json_object(res.body)
  local request_id = body and (body.RequestId or body.requestId)
  if type(request_id) ~= "string" then request_id = type(res.headers) == "table" and res.headers["x-acs-request-id"] end
  if type(request_id) ~= "string" or request_id == "" then request_id = nil end
  local api_code = body and (body.Code or body.code)
  if type(api_code) ~= "string" or api_code == "" then api_code = nil end
  log.debug("alibaba call", { product = product, action = action, attempt = n, duration_ms = duration_ms,
    http_status = status, request_id = request_id, api_code = api_code })

  if status >= 200 and status < 300 then
    if roa then return roa_value(res.body), request_id end
    if body then return body, request_id end
    return nil, { action = action, code = "InvalidResponse", http_status = status, retryable = idempotent,
      detail = "the response body is not a JSON object: " .. scrub(snippet(res.body), creds) }
  end
  if not body then
    -- A gateway's HTML 502 is still a server failure worth another attempt.
    return nil, { action = action, code = "InvalidResponse", http_status = status,
      retryable = status >= 500 and idempotent,
      detail = "HTTP " .. status .. " with a body that is not a JSON error: " .. scrub(snippet(res.body), creds) }
  end
  api_code = api_code or ("HTTP" .. status)
  local message = body.Message or body.message
  if type(message) ~= "string" then message = "" end
  local code = classify(api_code)
  local retryable = code == "Throttled" or ((TRANSIENT[api_code] or status >= 500) and idempotent) or false
  return nil, { action = action, code = code, api_code = api_code, http_status = status,
    request_id = request_id, detail = scrub(message, creds), retryable = retryable }
end

-- One attempt: the decoded body and its request ID, or nil plus the fields of an error; then the
-- credentials it used.
local function attempt(self, product, action, flat, opts, n, idempotent, roa)
  local request, fields, creds = prepare(self, product, action, flat, opts, roa)
  if not request then return nil, fields end
  local started = time.monotonic()
  local res, terr, tcode = self.transport(request)
  local duration_ms = math.floor((time.monotonic() - started) * 1000 + 0.5)
  local body, info = interpret(product, action, res, terr, tcode, creds, n, idempotent, duration_ms, roa)
  return body, info, creds
end

-- Full jitter (a uniform wait below an exponentially growing ceiling) spreads out clients that
-- were throttled together, so they do not come back in step.
local function backoff(self, n)
  local ceiling = math.min(self.backoff_cap, self.backoff_base * 2 ^ (n - 1))
  return math.random() * ceiling
end

-- Attempts until an answer, a failure that another attempt cannot fix, or max_attempts.
local function run(self, product, action, flat, opts, idempotent, roa)
  local max_attempts = opts.max_attempts or self.max_attempts
  local refreshed = false
  local n = 0
  while true do
    n = n + 1
    local body, fields, creds = attempt(self, product, action, flat, opts, n, idempotent, roa)
    if body then return body, fields end
    -- An expired STS token is refreshed once, outside the attempt count: the provider's clock and
    -- the server's may disagree by more than the refresh margin.
    local expired = fields.api_code and fields.api_code:find("^InvalidSecurityToken%.Expired")
    if expired and not refreshed and creds and type(self.credentials) == "table"
        and type(self.credentials.invalidate) == "function" then
      refreshed = true
      self.credentials:invalidate()
      n = n - 1
    elseif not fields.retryable or n >= max_attempts then
      fields.attempts = n
      return nil, make_error(fields)
    else
      self.sleep(backoff(self, n))
    end
  end
end

local function rpc_product(product, level)
  local spec = PRODUCTS[product]
  if not spec then error(format("alibaba client: unknown product '%s'", tostring(product)), level + 1) end
  if spec.roa then error(format("alibaba client: product '%s' is ROA style; use c:roa", product), level + 1) end
end

--- c:call(product, action, params [, opts]) -> decoded JSON body | nil, err
-- opts: anonymous (unsigned STS call, params as a form body), idempotent (repeat after a 5xx or a
-- lost answer although the action mutates), timeout_ms, max_attempts.
function M:call(product, action, params, opts)
  rpc_product(product, 2)
  if type(action) ~= "string" or action == "" then error("alibaba client: action must be a non-empty string", 2) end
  opts = opts or {}
  local flat = M.flatten(params, action)
  local idempotent = opts.idempotent or is_read_action(action) or flat.ClientToken ~= nil or false
  local body, err = run(self, product, action, flat, opts, idempotent)
  if not body then return nil, err end
  return body
end

--- c:roa(product, action, req [, opts]) -> value, request_id | nil, err
-- One call of a ROA-style API (Container Service): req = {method = "POST", path = "/clusters/c-1/...",
-- query = {flat params} (optional), body = table (sent as JSON) or string (optional)}. Always signed
-- with ACS3, the body's SHA-256 in x-acs-content-sha256. The answer is the decoded JSON value (an
-- object, or a bare JSON string) or, when it is not JSON, the raw text. Errors are call()'s: the
-- body's `code`, `message` and `requestId` (or the x-acs-request-id header), classified the same way.
-- opts as call()'s (anonymous aside).
function M:roa(product, action, req, opts)
  local spec = PRODUCTS[product]
  if not (spec and spec.roa) then
    error(format("alibaba client: product '%s' is not ROA style", tostring(product)), 2)
  end
  if type(action) ~= "string" or action == "" then error("alibaba client: action must be a non-empty string", 2) end
  if type(req) ~= "table" or type(req.path) ~= "string" or req.path:sub(1, 1) ~= "/" then
    error("alibaba client: roa needs req.path starting with '/'", 2)
  end
  opts = opts or {}
  local body = req.body or ""
  if type(body) == "table" then
    local text, err = json.encode(body)
    if not text then error("alibaba client: roa body: " .. tostring(err), 2) end
    body = text
  end
  local roa = { method = (req.method or "POST"):upper(), path = req.path, body = body }
  local flat = M.flatten(req.query, action)
  local idempotent = opts.idempotent or is_read_action(action) or false
  return run(self, product, action, flat, { timeout_ms = opts.timeout_ms, max_attempts = opts.max_attempts },
    idempotent, roa)
end

--- c:call_all(product, action, list_of_params [, opts]) -> results
-- The same action for many parameter sets, up to opts.concurrency (default 8) requests in flight
-- (luaprov.http.request_all). results[i] is the decoded body, or {error = err} with err as call()
-- returns it. Retryable failures are retried together after a backoff, up to max_attempts rounds.
function M:call_all(product, action, list, opts)
  rpc_product(product, 2)
  opts = opts or {}
  local results, pending = {}, {}
  for i, params in ipairs(list) do pending[#pending + 1] = { index = i, flat = M.flatten(params, action) } end
  local max_attempts = opts.max_attempts or self.max_attempts
  local n = 0
  while #pending > 0 do
    n = n + 1
    local requests, sent, creds_of = {}, {}, {}
    for _, p in ipairs(pending) do
      local request, fields, creds = prepare(self, product, action, p.flat, opts)
      if request then
        requests[#requests + 1] = request
        sent[#sent + 1] = p
        creds_of[#sent] = creds
      else
        fields.attempts = n
        results[p.index] = { error = make_error(fields) }
      end
    end
    local started = time.monotonic()
    local answers = self.transport_all(requests, { concurrency = opts.concurrency or 8 })
    local duration_ms = math.floor((time.monotonic() - started) * 1000 + 0.5)
    local retry = {}
    for k, p in ipairs(sent) do
      local a = answers[k] or { error = "no answer", code = "Transport" }
      local res = a.status and a or nil
      local idempotent = opts.idempotent or is_read_action(action) or p.flat.ClientToken ~= nil or false
      local body, fields = interpret(product, action, res, a.error, a.code, creds_of[k], n, idempotent, duration_ms)
      if body then
        results[p.index] = body
      elseif fields.retryable and n < max_attempts then
        retry[#retry + 1] = p
      else
        fields.attempts = n
        results[p.index] = { error = make_error(fields) }
      end
    end
    pending = retry
    if #pending > 0 then self.sleep(backoff(self, n)) end
  end
  return results
end

local function dig(body, path)
  local node = body
  for part in path:gmatch("[^.]+") do
    if type(node) ~= "table" then return nil end
    node = node[part]
  end
  return node
end

local function non_empty(v)
  return type(v) == "string" and v ~= "" or (math.type(v) == "integer")
end

--- c:paginate(product, action, params, {list, style, page_size, max_pages, size_param, call_opts})
--   -> items, pages | nil, err
-- Follows NextToken (page size in MaxResults, or size_param) or PageNumber (PageSize) until the
-- last page and returns every item found at `list` (a dotted path such as "Instances.Instance"),
-- as a JSON array. call_opts go to every call.
function M:paginate(product, action, params, opts)
  opts = opts or {}
  if type(opts.list) ~= "string" then error("alibaba client: paginate needs opts.list", 2) end
  local style = opts.style or "NextToken"
  if style ~= "NextToken" and style ~= "PageNumber" then
    error("alibaba client: paginate style must be NextToken or PageNumber", 2)
  end
  local page_size = opts.page_size or (style == "NextToken" and 100 or 50)
  local max_pages = opts.max_pages or 1000
  local items = setmetatable({}, json.array_mt)
  local query = {}
  for k, v in pairs(params or {}) do query[k] = v end
  local seen_tokens = {}
  for page = 1, max_pages do
    if style == "NextToken" then
      query[opts.size_param or "MaxResults"] = page_size
    else
      query.PageSize, query.PageNumber = page_size, page
    end
    local body, err = self:call(product, action, query, opts.call_opts)
    if not body then return nil, err end
    local list = dig(body, opts.list)
    local count = 0
    if type(list) == "table" then
      for _, item in ipairs(list) do
        items[#items + 1] = item
        count = count + 1
      end
    end
    if style == "NextToken" then
      local token = body.NextToken
      if not non_empty(token) or count == 0 then return items, page end
      token = tostring(token)
      -- A server that hands back the same token would loop forever; stop with what we have.
      if seen_tokens[token] then
        return nil, make_error { action = action, code = "InvalidResponse", request_id = body.RequestId,
          detail = "NextToken repeats: " .. snippet(token) }
      end
      seen_tokens[token] = true
      query.NextToken = token
    else
      local total = math.tointeger(body.TotalCount)
      if count == 0 or count < page_size or (total and #items >= total) then return items, page end
    end
  end
  return nil, make_error { action = action, code = "InvalidResponse",
    detail = format("more than %d pages; stopping", max_pages) }
end

-- A test transport (one request at a time) serving call_all like luaprov.http.request_all.
local function one_by_one(transport)
  return function(requests)
    local out = {}
    for i, request in ipairs(requests) do
      local res, err, code = transport(request)
      out[i] = res or { error = err, code = code }
    end
    return out
  end
end

--- client.new(config) -> client
-- config: region, endpoint (one URL for every product, e.g. the simulator; else the public
-- regional endpoints, or the VPC ones when network == "vpc" / ALIBABA_CLOUD_NETWORK=vpc),
-- signature ("v3" default, or "v2"), credentials (a provider with :get() -> {access_key_id,
-- access_key_secret, security_token}, a function returning that, or the table itself),
-- timeout_ms (per attempt, 10 s), max_attempts (4), and for tests transport (function(request) ->
-- response | nil, message, code), sleep, clock, backoff_base / backoff_cap (seconds).
function M.new(config)
  config = config or {}
  local signature = config.signature or "v3"
  if signature ~= "v3" and signature ~= "v2" then
    error(format("alibaba client: signature must be \"v3\" or \"v2\", not %q", tostring(signature)), 2)
  end
  local endpoint = config.endpoint
  if endpoint == "" then endpoint = nil end
  if endpoint and not split_url(endpoint) then
    error(format("alibaba client: endpoint %q is not an http(s) URL", endpoint), 2)
  end
  local self = {
    region = config.region,
    endpoint = endpoint,
    network = config.network or luaprov.env("ALIBABA_CLOUD_NETWORK"),
    signature = signature,
    credentials = config.credentials,
    timeout_ms = config.timeout_ms or 10000,
    max_attempts = config.max_attempts or 4,
    transport = config.transport or luaprov.http.request,
    transport_all = config.transport_all or (config.transport and one_by_one(config.transport))
      or luaprov.http.request_all,
    sleep = config.sleep or time.sleep,
    clock = config.clock or time.now,
    backoff_base = config.backoff_base or 0.2,
    backoff_cap = config.backoff_cap or 5,
  }
  return setmetatable(self, { __index = M })
end

--- c:endpoint_url(product) -> the URL a product's calls go to (for logs and tests).
function M.endpoint_url(self, product)
  if not PRODUCTS[product] then error(format("alibaba client: unknown product '%s'", tostring(product)), 2) end
  return endpoint_for(self, product)
end

return M
