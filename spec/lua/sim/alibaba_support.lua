-- Shared by the Alibaba simulator specs: starts the real `luaprov sim` binary, and sends real signed
-- requests to it (V3 by default, V2 on request) with the provider's own signer.
local luaprov = require "luaprov"
local signer = require "providers.alibaba.signer"

local http, json, crypto = luaprov.http, luaprov.json, luaprov.crypto

local M = {}

M.ACCESS_KEY_ID = "LTAI5simulatoraccess"
M.ACCESS_KEY_SECRET = "simulator-secret-do-not-use"
M.VERSIONS = { ecs = "2014-05-26", vpc = "2016-04-28", sts = "2015-04-01", ram = "2015-05-01" }
M.DEFAULT = { id = M.ACCESS_KEY_ID, secret = M.ACCESS_KEY_SECRET }

local binary = assert(os.getenv("LUAPROV_BINARY_DIR"), "LUAPROV_BINARY_DIR not set") .. "/luaprov"

local function read_all(path)
  local f = io.open(path)
  if not f then return "" end
  local text = f:read("a")
  f:close()
  return text
end

--- start() -> sim {url, pid, stop()}: `luaprov sim` on free ports; its first stdout line names the endpoints.
function M.start()
  local log = os.tmpname()
  local pipe = io.popen(("%s sim --log-format json 2>%s & echo $!"):format(binary, log))
  local pid = pipe:read("l")
  local line = pipe:read("l")
  if not line then
    pipe:close()
    error("luaprov sim did not start: " .. read_all(log))
  end
  local endpoints = assert(json.decode(line), line)
  local sim = { url = assert(endpoints.alibaba, line), pid = pid, log = log }
  function sim.stop()
    os.execute("kill " .. pid .. " 2>/dev/null")
    pipe:close()
    os.remove(log)
  end
  function sim.log_text() return read_all(log) end
  return sim
end

local function decode(res)
  local ok, body = pcall(json.decode, res.body)
  return ok and body or nil
end

--- admin(sim, method, path, body) -> status, decoded JSON body.
function M.admin(sim, method, path, body)
  local res = assert(http.request { method = method, url = sim.url .. path,
    body = body and (type(body) == "string" and body or assert(json.encode(body))) or nil,
    headers = body and { ["content-type"] = "application/json" } or nil })
  return res.status, decode(res), res
end

--- reset(sim): a fresh simulated account before each test.
function M.reset(sim)
  local status = M.admin(sim, "POST", "/_sim/reset")
  assert(status == 200, "reset failed")
end

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

--- call(sim, product, action, params, opts) -> status, decoded body, raw response.
-- opts: scheme ("v3" default, "v2"), cred ({id, secret, token}; default AccessKey), method ("POST" for
-- V3, "GET" for V2), form (V2: params in a form body), tamper (function(request) before sending),
-- timeout_ms, nonce, date.
function M.call(sim, product, action, params, opts)
  opts = opts or {}
  local cred = opts.cred or M.DEFAULT
  params = copy(params)
  local req
  if (opts.scheme or "v3") == "v3" then
    local host = sim.url:match("^https?://([^/]+)")
    local headers = { host = host, ["x-acs-action"] = action, ["x-acs-version"] = M.VERSIONS[product],
      ["x-acs-date"] = opts.date or luaprov.time.iso8601(),
      ["x-acs-signature-nonce"] = opts.nonce or crypto.random_hex(16) }
    if cred.token then headers["x-acs-security-token"] = cred.token end
    local method = opts.method or "POST"
    local signed = { method = method, path = "/", query = params, headers = headers, body = "" }
    headers.authorization = assert(signer.acs3_authorization(signed, cred.id, cred.secret))
    local query = signer.canonical_query(params)
    req = { method = method, url = sim.url .. "/" .. (query ~= "" and ("?" .. query) or ""), headers = headers,
      body = "" }
  else
    local method = opts.method or (opts.form and "POST" or "GET")
    params.Action, params.Version, params.Format = action, M.VERSIONS[product], opts.format or "JSON"
    if cred.id then
      params.AccessKeyId, params.SignatureMethod, params.SignatureVersion = cred.id, "HMAC-SHA1", "1.0"
      params.SignatureNonce = opts.nonce or crypto.random_hex(16)
      params.Timestamp = opts.date or luaprov.time.iso8601()
      if cred.token then params.SecurityToken = cred.token end
      params.Signature = assert(signer.rpc_signature(method, params, cred.secret))
    end
    local query = signer.canonical_query(params)
    if opts.form then
      req = { method = method, url = sim.url .. "/", body = query,
        headers = { ["content-type"] = "application/x-www-form-urlencoded" } }
    else
      req = { method = method, url = sim.url .. "/?" .. query }
    end
  end
  req.timeout_ms = opts.timeout_ms
  if opts.tamper then opts.tamper(req) end
  local res, err, code = http.request(req)
  if not res then return nil, err, code end
  return res.status, decode(res), res
end

--- ok(sim, product, action, params, opts) -> the decoded body of a call that must succeed.
function M.ok(sim, product, action, params, opts)
  local status, body, res = M.call(sim, product, action, params, opts)
  if status ~= 200 then
    error(("%s answered %s: %s"):format(action, tostring(status), res and res.body or tostring(body)), 2)
  end
  return body
end

--- state(sim) -> the decoded /_sim/state.
function M.state(sim)
  local status, body = M.admin(sim, "GET", "/_sim/state")
  assert(status == 200)
  return body
end

--- jwt(claims) -> an unsigned-looking but well-formed JWT (header.payload.signature, base64url).
function M.jwt(claims)
  local function b64url(s)
    return (crypto.base64_encode(s):gsub("%+", "-"):gsub("/", "_"):gsub("=+$", ""))
  end
  return b64url('{"alg":"RS256","kid":"sim"}') .. "." .. b64url(assert(json.encode(claims))) .. "."
    .. b64url("signature-not-checked")
end

return M
