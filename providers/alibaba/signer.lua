-- Alibaba Cloud OpenAPI request signing, with no SDK: the RPC signature ("V2": HMAC-SHA1,
-- SignatureVersion 1.0) and the ACS3-HMAC-SHA256 Authorization header ("V3").
-- Pure functions over strings: no clock, no nonce, no I/O. The client picks Timestamp/x-acs-date and
-- the nonce, so the official doc vectors (fixed dates and nonces) can be replayed byte for byte.
--
-- Sources: Alibaba's "Request syntax and signature method V2 for RPC APIs" and "V3 request structure
-- and signature" pages, checked against alibabacloud-go/openapi-util (GetRPCSignature,
-- GetAuthorization, GetEncodePath) and aliyun-python-sdk-core's rpc_signature_composer.
--
-- Public:
--   rpc_signature(method, params, secret)          -> signature (base64), string_to_sign
--   acs3_authorization(req, access_key_id, secret) -> Authorization value, canonical_request
--   percent_encode(s)                              -> s encoded as both schemes want it
--   canonical_query(params)                        -> the sorted, encoded query both schemes sign
-- The second results are for debugging SignatureDoesNotMatch: the server's message quotes its own
-- string to sign, and comparing the two tells a wrong secret from a wrong canonical form.
--
-- Parameter tables are flat maps of wire names to values: lists and structs are flattened by the
-- caller first (InstanceId.1, Tag.1.Key, SystemDisk.Size; JSON-array parameters such as InstanceIds
-- are one string holding the JSON text). A value is a string or an integer (written in decimal);
-- anything else raises, because tostring of a float ("1e+15", "2.0") or of a table would be signed
-- and sent as garbage. Misuse raises; an OpenSSL failure returns nil, message, "CryptoError".
local luaprov = require "luaprov"

local crypto = luaprov.crypto
local byte, format, gsub, lower, upper = string.byte, string.format, string.gsub, string.lower, string.upper
local concat, sort = table.concat, table.sort

local M = {}

-- RFC 3986 unreserved characters stay literal; every other byte of the UTF-8 text becomes %XY with
-- uppercase hex. So space is %20 (never "+"), "*" is %2A, "~" stays, "/" is %2F: the rules the SDKs
-- reach by patching their form encoders ("+"->%20, "*"->%2A, %7E->"~").
local RESERVED = "[^A-Za-z0-9%-%._~]"
local RESERVED_IN_PATH = "[^A-Za-z0-9%-%._~/]"

-- Byte -> escape, built once, so encoding is one gsub with a table and no Lua callback per byte.
local ESCAPES = {}
for b = 0, 255 do
  local c = string.char(b)
  if c:find(RESERVED) then ESCAPES[c] = format("%%%02X", b) end
end

local function percent_encode(s)
  return (gsub(s, RESERVED, ESCAPES))
end

-- Both schemes sort by key in byte order (Tag.10.Key before Tag.2.Key). The raw names are sorted,
-- then encoded, as the Go and Python SDKs do; for names of unreserved characters (all real ones)
-- that equals sorting the encoded names. Lua's "<" on strings goes
-- through strcoll, which follows the process locale; comparing bytes keeps the order independent
-- of whatever locale the host process has set.
local function byte_less(a, b)
  local n = #a < #b and #a or #b
  for i = 1, n do
    local x, y = byte(a, i), byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Headers are trimmed before signing (the server trims what it receives). ASCII whitespace only,
-- scanned by hand: a "^%s*(.-)%s*$" pattern is quadratic on long blank runs.
local function is_space(b)
  return b == 32 or (b >= 9 and b <= 13)
end

local function trim(s)
  local first, last = 1, #s
  while first <= last and is_space(byte(s, first)) do first = first + 1 end
  while last >= first and is_space(byte(s, last)) do last = last - 1 end
  return s:sub(first, last)
end

local function describe(v)
  local t = math.type(v) or type(v)
  if t == "float" then return format("float %s (format it as text yourself)", tostring(v)) end
  if t == "table" then return "table (flatten lists and structs as Name.1, Name.1.Key, ... first)" end
  return t
end

-- Checks one argument; `level` is the caller's frame as seen from the public function, so the error
-- names the line that passed the bad value, not a line of this file.
local function need(ok, level, fn, fmt, ...)
  if not ok then error(format("signer.%s: " .. fmt, fn, ...), level + 1) end
end

-- Params table -> "k1=v1&k2=v2" over the byte-sorted keys, key and value each encoded once; an empty
-- value gives "k=". `skip` names a key left out (the RPC scheme never signs Signature itself).
local function build_query(params, skip, fn, level)
  local keys, values = {}, {}
  for k, v in pairs(params) do
    need(type(k) == "string", level + 1, fn, "parameter names must be strings, got %s %s (a list? "
      .. "flatten it as Name.1, Name.2, ...)", type(k), tostring(k))
    if k ~= skip then
      if type(v) == "string" then
        values[k] = v
      elseif math.type(v) == "integer" then
        values[k] = format("%d", v)
      else
        need(false, level + 1, fn, "parameter '%s' must be a string or an integer, got %s", k, describe(v))
      end
      keys[#keys + 1] = k
    end
  end
  sort(keys, byte_less)
  local parts = {}
  for i, k in ipairs(keys) do
    parts[i] = percent_encode(k) .. "=" .. percent_encode(values[k])
  end
  return concat(parts, "&")
end

--- percent_encode(s) -> s with every byte but A-Z a-z 0-9 - _ . ~ written as %XY.
-- Use it for anything put in a URL the signature covers (query names and values; the base64
-- Signature of the RPC scheme, whose "+", "/", "=" must become %2B, %2F, %3D).
function M.percent_encode(s)
  need(type(s) == "string", 2, "percent_encode", "argument must be a string, got %s", type(s))
  return percent_encode(s)
end

--- canonical_query(params) -> the canonical query string: byte-sorted keys, key=value encoded once,
-- joined with "&" ("" for no params). It is what both schemes sign, so a client that sends exactly
-- this string as the URL query (plus "&Signature=" .. percent_encode(sig) for RPC) cannot drift
-- from what was signed.
function M.canonical_query(params)
  need(type(params) == "table", 2, "canonical_query", "params must be a table, got %s", type(params))
  -- Not a tail call: error levels count this frame.
  local query = build_query(params, nil, "canonical_query", 2)
  return query
end

--- rpc_signature(method, params, secret) -> signature, string_to_sign | nil, message, "CryptoError"
-- The RPC ("V2", SignatureMethod HMAC-SHA1, SignatureVersion 1.0) signature of `params`: every
-- common and business parameter that will be sent (query, plus form-body parameters for a POST
-- form), flattened. A "Signature" entry is ignored, so a table can be signed again.
--   StringToSign = METHOD "&" enc("/") "&" enc(canonical query)      -- encoded a second time
--   Signature    = base64(HMAC-SHA1(secret .. "&", StringToSign))
-- `method` is upper-cased, as luaprov.http.request does before sending: the signed method must be
-- the one on the wire.
function M.rpc_signature(method, params, secret)
  need(type(method) == "string" and method ~= "", 2, "rpc_signature", "method must be a non-empty string, got %s",
    type(method))
  need(type(params) == "table", 2, "rpc_signature", "params must be a table, got %s", type(params))
  need(type(secret) == "string", 2, "rpc_signature", "secret must be a string, got %s", type(secret))

  local query = build_query(params, "Signature", "rpc_signature", 2)
  -- The canonical query is encoded again as a whole ("=" -> %3D, "&" -> %26, "%3A" -> "%253A"),
  -- and the resource path is always "/" for RPC APIs, hence the literal %2F.
  local string_to_sign = upper(method) .. "&" .. percent_encode("/") .. "&" .. percent_encode(query)
  -- The key is the secret with a literal "&" appended (a legacy of an empty token-secret slot).
  local mac, err, code = crypto.hmac_sha1(secret .. "&", string_to_sign)
  if not mac then return nil, err, code end
  return crypto.base64_encode(mac), string_to_sign
end

-- The headers ACS3 signs: host, content-type and every x-acs-*. Others (accept, user-agent,
-- content-length) may be rewritten by proxies and HTTP stacks, so they stay out of the signature.
local function is_signed_header(name)
  return name == "host" or name == "content-type" or name:sub(1, 6) == "x-acs-"
end

--- acs3_authorization(req, access_key_id, secret) -> authorization, canonical_request
--                                                   | nil, message, "CryptoError"
-- The value of the Authorization header of the ACS3-HMAC-SHA256 ("V3") scheme for
--   req = { method = "POST", path = "/" (default), query = { flat params } (optional),
--           headers = { host = ..., ["x-acs-action"] = ..., ... }, body = string (optional) }
-- Header names may be in any case; host, content-type and x-acs-* are signed (lower-cased, values
-- trimmed, sorted; a name given twice in different cases gets its sorted values joined by ",").
-- `host` is required. `path` is the raw, unencoded path: it is encoded here with the query rules
-- except that "/" stays ("/" for RPC APIs such as ECS and VPC).
--
-- Side effect: when req.headers has no x-acs-content-sha256 (in any case), this function computes
-- it as the lowercase hex SHA-256 of req.body ("" when nil) and stores it in
-- req.headers["x-acs-content-sha256"], because the server checks the header it receives against
-- the body and the signature: send req.headers as they are after this call. A header the caller set
-- is trusted as is and doubles as the hashed payload.
--
--   CanonicalRequest = METHOD \n path \n query \n (name:value\n)* \n signed;names \n payload-hash
--   Signature        = hex(HMAC-SHA256(secret, "ACS3-HMAC-SHA256\n" .. hex(SHA-256(CanonicalRequest))))
function M.acs3_authorization(req, access_key_id, secret)
  local fn = "acs3_authorization"
  need(type(req) == "table", 2, fn, "req must be a table, got %s", type(req))
  need(type(req.method) == "string" and req.method ~= "", 2, fn, "req.method must be a non-empty string, got %s",
    type(req.method))
  need(req.path == nil or type(req.path) == "string", 2, fn, "req.path must be a string, got %s", type(req.path))
  need(req.query == nil or type(req.query) == "table", 2, fn, "req.query must be a table, got %s", type(req.query))
  need(type(req.headers) == "table", 2, fn, "req.headers must be a table, got %s", type(req.headers))
  need(req.body == nil or type(req.body) == "string", 2, fn, "req.body must be a string, got %s", type(req.body))
  need(type(access_key_id) == "string", 2, fn, "access_key_id must be a string, got %s", type(access_key_id))
  need(type(secret) == "string", 2, fn, "secret must be a string, got %s", type(secret))

  local path = req.path
  if path == nil or path == "" then path = "/" end
  local query = req.query and build_query(req.query, nil, fn, 2) or ""

  -- Collect the signed headers by lower-cased name; everything is validated before req.headers
  -- is touched, so a call that raises leaves the request as it was.
  local names, values = {}, {}
  for name, value in pairs(req.headers) do
    need(type(name) == "string", 2, fn, "header names must be strings, got %s", type(name))
    local lname = lower(name)
    if is_signed_header(lname) then
      if type(value) ~= "string" then
        need(false, 2, fn, "header '%s' must be a string, got %s", name, describe(value))
      end
      local list = values[lname]
      if not list then
        list = {}
        values[lname] = list
        names[#names + 1] = lname
      end
      list[#list + 1] = trim(value)
    end
  end
  need(values.host ~= nil, 2, fn, "req.headers.host is required (it is signed)")

  if not values["x-acs-content-sha256"] then
    local digest, err, code = crypto.sha256_hex(req.body or "")
    if not digest then return nil, err, code end
    req.headers["x-acs-content-sha256"] = digest
    values["x-acs-content-sha256"] = { digest }
    names[#names + 1] = "x-acs-content-sha256"
  end

  sort(names, byte_less)
  local lines = {}
  for i, name in ipairs(names) do
    local list = values[name]
    sort(list, byte_less)
    lines[i] = name .. ":" .. concat(list, ",") .. "\n"
  end
  local signed_headers = concat(names, ";")

  -- The header block ends with "\n" and the join adds another, leaving the blank line the
  -- scheme expects before the signed-header list.
  local canonical_request = concat({
    upper(req.method),
    (gsub(path, RESERVED_IN_PATH, ESCAPES)),
    query,
    concat(lines),
    signed_headers,
    concat(values["x-acs-content-sha256"], ","),
  }, "\n")

  local hashed, err, code = crypto.sha256_hex(canonical_request)
  if not hashed then return nil, err, code end
  -- Unlike the RPC scheme, the key is the bare secret and the output is lowercase hex.
  local mac
  mac, err, code = crypto.hmac_sha256(secret, "ACS3-HMAC-SHA256\n" .. hashed)
  if not mac then return nil, err, code end

  return "ACS3-HMAC-SHA256 Credential=" .. access_key_id .. ",SignedHeaders=" .. signed_headers
    .. ",Signature=" .. crypto.hex_encode(mac), canonical_request
end

return M
