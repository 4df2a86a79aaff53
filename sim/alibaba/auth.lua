-- Who may call: the credential store, signature verification for both schemes, replay protection,
-- and the credential issuers (STS AssumeRoleWithOIDC / AssumeRole / GetCallerIdentity and the ECS
-- metadata service's RAM-role paths).
--
-- Signatures are recomputed with providers.alibaba.signer, the client's own signer, so a mismatch
-- between them shows up here first; the error quotes the server's string to sign as the real gateway
-- does, which is what clients compare to tell a wrong secret from a wrong canonical form.
-- Timestamps are checked against the engine's clock (what clients sign with); token lifetimes against
-- simulated time (sim.clock), so tests can expire a token by advancing the clock.
local luaprov = require "luaprov"
local signer = require "providers.alibaba.signer"
local clock = require "sim.clock"
local account = require "sim.alibaba.account"
local catalogue = require "sim.alibaba.catalogue"
local wire = require "sim.alibaba.wire"

local crypto, json = luaprov.crypto, luaprov.json

local M = {}

M.DEFAULT_ACCESS_KEY_ID = "LTAI5simulatoraccess"
M.DEFAULT_ACCESS_KEY_SECRET = "simulator-secret-do-not-use"
M.METADATA_ROLE = "luaprov-sim-node"

local WINDOW = 15 * 60           -- seconds a Timestamp / x-acs-date may be off the server's clock
local DEFAULT_DURATION = 3600

local credentials, nonces, nonce_count, metadata_creds, metadata_tokens, issued

local function default_key()
  return { secret = M.DEFAULT_ACCESS_KEY_SECRET, kind = "ak",
    identity = { type = "RAMUser", user_id = "203456789012345678", name = "luaprov-sim",
      arn = ("acs:ram::%s:user/luaprov-sim"):format(account.ACCOUNT_ID) } }
end

--- reset(): only the default AccessKey is known; issued credentials and seen nonces are forgotten.
function M.reset()
  credentials = { [M.DEFAULT_ACCESS_KEY_ID] = default_key() }
  nonces, nonce_count, metadata_creds, metadata_tokens, issued = {}, 0, nil, {}, 0
end

-- Temporary credentials look like Alibaba's: an "STS." key id, a 44-character secret, a long token.
local ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
local function random_alnum(n)
  local hex = crypto.random_hex(n)
  local out = {}
  for i = 1, n do
    local b = tonumber(hex:sub(2 * i - 1, 2 * i), 16) % #ALNUM + 1
    out[i] = ALNUM:sub(b, b)
  end
  return table.concat(out)
end

local function issue(identity, duration)
  local id = "STS." .. random_alnum(25)
  local expires = clock.now() + duration
  local cred = { secret = random_alnum(44), kind = "sts", token = "CAIS" .. random_alnum(340), expires = expires,
    identity = identity }
  credentials[id] = cred
  issued = issued + 1
  return id, cred
end

local function iso(t) return wire.iso_time(t) end

-- Replay protection: a nonce may be used once per AccessKey while its timestamp could still pass the
-- window check; older entries are dropped every 1000 insertions so the table stays bounded.
local function use_nonce(key_id, nonce)
  local k = key_id .. "\0" .. nonce
  local now = luaprov.time.now()
  local seen = nonces[k]
  if seen and seen > now then
    wire.fail(400, "SignatureNonceUsed", "Specified signature nonce was used already.")
  end
  nonces[k] = now + 2 * WINDOW
  nonce_count = nonce_count + 1
  if nonce_count % 1000 == 0 then
    for key, expiry in pairs(nonces) do
      if expiry <= now then nonces[key] = nil end
    end
  end
end

local function check_time(value, name)
  local t = luaprov.time.parse_iso8601(value)
  if not t or not value:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$") then
    wire.fail(400, "InvalidTimeStamp.Format", "Specified time stamp or date value is not well formatted.")
  end
  if math.abs(t - luaprov.time.now()) > WINDOW then
    wire.fail(400, "InvalidTimeStamp.Expired", "Specified time stamp or date value is expired.")
  end
  return name
end

local function lookup(key_id)
  local cred = credentials[key_id]
  if not cred then wire.fail(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.") end
  return cred
end

-- STS credentials need their token, unexpired in simulated time.
local function check_token(cred, token)
  if cred.kind ~= "sts" then return end
  if token == nil or token == "" then
    wire.fail(400, "MissingSecurityToken", "SecurityToken is mandatory for this action.")
  end
  if token ~= cred.token then
    wire.fail(400, "InvalidSecurityToken.MismatchWithAccessKey", "Specified SecurityToken mismatch with the AccessKey.")
  end
  if clock.now() >= cred.expires then
    wire.fail(400, "InvalidSecurityToken.Expired", "Specified SecurityToken is expired.")
  end
end

local function mandatory(p, name)
  local v = p[name]
  if v == nil or v == "" then wire.fail(400, "Missing" .. name, name .. " is mandatory for this action.") end
  return v
end

local function verify_v2(call)
  local p = call.params
  local key_id = mandatory(p, "AccessKeyId")
  local signature = mandatory(p, "Signature")
  local method = mandatory(p, "SignatureMethod")
  mandatory(p, "SignatureVersion")
  local nonce = mandatory(p, "SignatureNonce")
  check_time(mandatory(p, "Timestamp"))
  if method ~= "HMAC-SHA1" then
    wire.fail(400, "InvalidSignatureMethod", "Specified signature method is not supported.")
  end
  if p.SignatureVersion ~= "1.0" then
    wire.fail(400, "InvalidSignatureVersion", "Specified signature version is not supported.")
  end
  local cred = lookup(key_id)
  check_token(cred, p.SecurityToken)
  local ok, expected, string_to_sign = pcall(signer.rpc_signature, call.method, p, cred.secret)
  if not ok or not expected then wire.fail(500, "InternalError", "The request processing has failed due to "
    .. "some unknown error, exception or failure.") end
  if expected ~= signature then
    wire.fail(400, "SignatureDoesNotMatch",
      "Specified signature is not matched with our calculation. server string to sign is:" .. string_to_sign)
  end
  use_nonce(key_id, nonce)
  return key_id, cred
end

local function incomplete()
  wire.fail(400, "IncompleteSignature", "The request signature does not conform to Aliyun standards.")
end

-- Authorization: ACS3-HMAC-SHA256 Credential=<id>,SignedHeaders=<a;b>,Signature=<hex>
local function parse_authorization(value)
  local algorithm, rest = value:match("^(%S+) (.*)$")
  if algorithm ~= "ACS3-HMAC-SHA256" then incomplete() end
  local fields = {}
  for part in rest:gmatch("[^,]+") do
    local k, v = part:match("^%s*([%w]+)=(.*)$")
    if k then fields[k] = v end
  end
  if not fields.Credential or not fields.SignedHeaders or not fields.Signature then incomplete() end
  return fields.Credential, fields.SignedHeaders, fields.Signature
end

local function verify_v3(call)
  local h = call.headers
  local auth = h.authorization
  if not auth or auth == "" then
    wire.fail(400, "MissingAuthorization", "Authorization is mandatory for this action.")
  end
  local key_id, signed_headers, signature = parse_authorization(auth)
  for _, name in ipairs({ "x-acs-date", "x-acs-signature-nonce", "x-acs-content-sha256" }) do
    if not h[name] or h[name] == "" then wire.missing(name) end
  end
  check_time(h["x-acs-date"])
  if h["x-acs-content-sha256"] ~= crypto.sha256_hex(call.body) then
    wire.fail(400, "SignatureDoesNotMatch", "Specified signature is not matched with our calculation. "
      .. "x-acs-content-sha256 is not the SHA-256 of the request body.")
  end
  local cred = lookup(key_id)
  check_token(cred, h["x-acs-security-token"])
  -- Rebuild the request from exactly the headers the client says it signed.
  local headers = {}
  for name in signed_headers:gmatch("[^;]+") do
    if h[name] == nil then incomplete() end
    headers[name] = h[name]
  end
  if not headers.host then incomplete() end
  local req = { method = call.method, path = (call.path:gsub("%%(%x%x)", function(x)
    return string.char(tonumber(x, 16)) end)), query = call.query, headers = headers, body = call.body }
  local ok, expected, canonical = pcall(signer.acs3_authorization, req, key_id, cred.secret)
  if not ok or not expected then incomplete() end
  local got = expected:match("Signature=(%x+)$")
  local want_headers = expected:match("SignedHeaders=([^,]+)")
  if got ~= signature or want_headers ~= signed_headers then
    local hashed = crypto.sha256_hex(canonical)
    wire.fail(400, "SignatureDoesNotMatch", "Specified signature is not matched with our calculation. "
      .. "server string to sign is:ACS3-HMAC-SHA256\n" .. hashed)
  end
  use_nonce(key_id, h["x-acs-signature-nonce"])
  return key_id, cred
end

-- Actions that need no signature: STS's OIDC exchange is anonymous by design (the OIDC token is the
-- proof), exactly as credentials-go calls it.
local ANONYMOUS = { sts = { AssumeRoleWithOIDC = true } }

--- verify(call) -> sets call.access_key_id and call.identity, or raises the API's error.
function M.verify(call)
  local key_id, cred
  if call.scheme == "v3" then
    key_id, cred = verify_v3(call)
  elseif call.scheme == "v2" then
    key_id, cred = verify_v2(call)
  elseif ANONYMOUS[call.product or ""] and ANONYMOUS[call.product][call.action or ""] then
    return
  else
    mandatory(call.params, "AccessKeyId")
  end
  call.access_key_id = key_id
  call.identity = cred.identity
end

-- base64url without padding, as JWTs encode, to standard base64 for luaprov.crypto.
local function b64url_json(s)
  if not s or not s:match("^[%w%-_]+$") then return nil end
  s = s:gsub("-", "+"):gsub("_", "/")
  s = s .. ("="):rep((4 - #s % 4) % 4)
  local raw = crypto.base64_decode(s)
  if not raw then return nil end
  local ok, v = pcall(json.decode, raw)
  if ok and type(v) == "table" then return v end
  return nil
end

local ROLE_ARN = "^acs:ram::(%d+):role/([%w%.@_%-]+)$"

local function role_from(p)
  local arn = wire.required(p, "RoleArn")
  local uid, name = arn:match(ROLE_ARN)
  if not uid then wire.fail(400, "InvalidParameter.RoleArn", "The parameter RoleArn is wrongly formed.") end
  if uid ~= account.ACCOUNT_ID then
    wire.fail(404, "EntityNotExist.Role", "The role not exists: " .. arn .. ".")
  end
  return arn, name
end

local function session_name(p, default)
  local name = wire.str(p, "RoleSessionName", default)
  if #name < 2 or #name > 64 or not name:match("^[%w%.@_%-]+$") then
    wire.fail(400, "InvalidParameter.RoleSessionName", "The parameter RoleSessionName is wrongly formed.")
  end
  return name
end

-- RAM role ids are 19-digit numbers, stable per role name.
local function role_id_of(name)
  return ("3%018d"):format(catalogue.hash(name))
end

local function assumed(arn, role_name, session, duration)
  local role_id = role_id_of(role_name)
  local identity = { type = "AssumedRoleUser", role_id = role_id, role_name = role_name, session = session,
    arn = ("acs:ram::%s:assumed-role/%s/%s"):format(account.ACCOUNT_ID, role_name, session) }
  local id, cred = issue(identity, duration)
  return {
    Credentials = { AccessKeyId = id, AccessKeySecret = cred.secret, SecurityToken = cred.token,
      Expiration = iso(cred.expires) },
    AssumedRoleUser = { AssumedRoleId = role_id .. ":" .. session, Arn = identity.arn },
  }, arn
end

--- AssumeRoleWithOIDC: any well-formed JWT and a role of the simulated account.
function M.AssumeRoleWithOIDC(call)
  local p = call.params
  local provider = wire.required(p, "OIDCProviderArn")
  if not provider:match("^acs:ram::%d+:oidc%-provider/[%w%.@_%-]+$") then
    wire.fail(400, "InvalidParameter.OIDCProviderArn", "The parameter OIDCProviderArn is wrongly formed.")
  end
  local token = wire.required(p, "OIDCToken")
  local head, payload = token:match("^([^.]+)%.([^.]+)%.[^.]*$")
  local claims = payload and b64url_json(head) and b64url_json(payload)
  if #token < 4 or #token > 20000 or not claims then
    wire.fail(400, "AuthenticationFail.OIDCToken.Invalid", "The OIDC token is invalid: it is not a JWT "
      .. "(three base64url parts whose header and payload are JSON objects).")
  end
  local arn, role_name = role_from(p)
  local duration = wire.int(p, "DurationSeconds", DEFAULT_DURATION, 900, 43200)
  local body = assumed(arn, role_name, session_name(p, "luaprov-" .. math.floor(clock.now())), duration)
  local function claim(k) return type(claims[k]) == "string" and claims[k] or "" end
  local aud = claims.aud
  if type(aud) == "table" then aud = table.concat(aud, ",") end
  body.OIDCTokenInfo = { Subject = claim("sub"), Issuer = claim("iss"), ClientIds = type(aud) == "string" and aud or "",
    ExpirationTime = math.type(claims.exp) and iso(claims.exp) or "",
    IssuanceTime = math.type(claims.iat) and iso(claims.iat) or "", VerificationInfo = "Success" }
  return body
end

--- AssumeRole (signed): any role of the simulated account.
function M.AssumeRole(call)
  local p = call.params
  local arn, role_name = role_from(p)
  local duration = wire.int(p, "DurationSeconds", DEFAULT_DURATION, 900, 43200)
  return (assumed(arn, role_name, session_name(p, "luaprov-session"), duration))
end

--- GetCallerIdentity: who signed the request.
function M.GetCallerIdentity(call)
  local id = call.identity
  local body = { AccountId = account.ACCOUNT_ID, Arn = id.arn, IdentityType = id.type }
  if id.type == "AssumedRoleUser" then
    body.RoleId = id.role_id
    body.PrincipalId = id.role_id .. ":" .. id.session
  else
    body.UserId = id.user_id
    body.PrincipalId = id.user_id
  end
  return body
end

--- metadata(request) -> response for /latest/... (the ECS metadata service, IMDSv1 and v2).
-- Credentials are refreshed when less than 15 simulated minutes remain, like the real service's
-- rotation ahead of expiry.
function M.metadata(request)
  local path = request.path
  if path == "/latest/api/token" then
    if request.method ~= "PUT" then return wire.plain(405, "method not allowed") end
    local ttl = tonumber(request.headers["x-aliyun-ecs-metadata-token-ttl-seconds"] or "")
    if not ttl or ttl < 1 or ttl > 21600 then return wire.plain(400, "invalid ttl") end
    local token = crypto.random_hex(24)
    metadata_tokens[token] = clock.now() + ttl
    return wire.plain(200, token)
  end
  if request.method ~= "GET" then return wire.plain(405, "method not allowed") end
  local token = request.headers["x-aliyun-ecs-metadata-token"]
  if token and not (metadata_tokens[token] and metadata_tokens[token] > clock.now()) then
    return wire.plain(401, "Unauthorized")
  end
  if path == "/latest/meta-data/region-id" then return wire.plain(200, catalogue.REGION) end
  if path == "/latest/meta-data/ram/security-credentials/" or path == "/latest/meta-data/ram/security-credentials" then
    return wire.plain(200, M.METADATA_ROLE)
  end
  local role = path:match("^/latest/meta%-data/ram/security%-credentials/(.+)$")
  if role ~= M.METADATA_ROLE then return wire.plain(404, "Not Found") end
  local now = clock.now()
  if not metadata_creds or metadata_creds.cred.expires - now < 15 * 60 then
    local role_id = role_id_of(role)
    local id, cred = issue({ type = "AssumedRoleUser", role_id = role_id, role_name = role, session = "ecs-instance",
      arn = ("acs:ram::%s:assumed-role/%s/ecs-instance"):format(account.ACCOUNT_ID, role) }, 6 * 3600)
    metadata_creds = { id = id, cred = cred, updated = now }
  end
  return wire.json_response(200, { Code = "Success", AccessKeyId = metadata_creds.id,
    AccessKeySecret = metadata_creds.cred.secret, SecurityToken = metadata_creds.cred.token,
    Expiration = iso(metadata_creds.cred.expires), LastUpdated = iso(metadata_creds.updated) })
end

--- state() -> plain table for /_sim/state (no secrets).
function M.state()
  local live = 0
  local now = clock.now()
  for _, c in pairs(credentials) do
    if c.kind == "sts" and c.expires > now then live = live + 1 end
  end
  return { default_access_key_id = M.DEFAULT_ACCESS_KEY_ID, sts_issued = issued, sts_live = live }
end

M.reset()

return M
