-- The Alibaba OpenAPI wire format on the server side: parsing RPC requests (V2 query/form, V3 headers),
-- reading typed parameters, paginating, and writing success and error responses (JSON, or XML where
-- a V2 client did not ask for JSON, as the real gateway defaults to).
--
-- API errors travel as raised tables (wire.fail) so that action code reads straight through its
-- validations; init.lua catches them and renders them with the request's RequestId and format.
local luaprov = require "luaprov"

local json, crypto = luaprov.json, luaprov.crypto
local array_mt = json.array_mt

local M = {}

M.PRODUCTS = { ["2014-05-26"] = "ecs", ["2016-04-28"] = "vpc", ["2015-04-01"] = "sts", ["2015-05-01"] = "ram" }
M.HOSTS = { ecs = "ecs.cn-hangzhou.aliyuncs.com", vpc = "vpc.cn-hangzhou.aliyuncs.com", sts = "sts.aliyuncs.com",
  ram = "ram.aliyuncs.com" }
local PRODUCT_NAMES = { ecs = "Ecs", vpc = "Vpc", sts = "Sts", ram = "Ram" }

-- Parameters every RPC request may carry that are not part of what the call asks for; idempotency
-- compares what remains.
M.COMMON_PARAMS = {
  Action = true, Version = true, Format = true, AccessKeyId = true, Signature = true, SignatureMethod = true,
  SignatureVersion = true, SignatureNonce = true, SignatureType = true, Timestamp = true, SecurityToken = true,
  ClientToken = true,
}

local ApiError = {}
ApiError.__index = ApiError
ApiError.__tostring = function(e) return e.code .. ": " .. e.message end

--- fail(status, code, message[, headers]): raises an API error; never returns.
function M.fail(status, code, message, headers)
  error(setmetatable({ status = status, code = code, message = message, headers = headers }, ApiError), 0)
end

--- is_api_error(v) -> whether v was raised by fail.
function M.is_api_error(v)
  return getmetatable(v) == ApiError
end

-- Common error shapes, with the gateway's own wording.
function M.missing(name)
  M.fail(400, "MissingParameter",
    ('The input parameter "%s" that is mandatory for processing this request is not supplied.'):format(name))
end

function M.invalid(name, why)
  M.fail(400, "InvalidParameter", ('The specified parameter "%s" is not valid.%s'):format(name,
    why and (" " .. why) or ""))
end

--- list(t) -> t tagged as a JSON array, so an empty list encodes as [] and not {}.
function M.list(t)
  t = t or {}
  if getmetatable(t) ~= array_mt then setmetatable(t, array_mt) end
  return t
end

-- Percent-decoding as form decoders do ("+" is a space); a stray "%" stays literal.
local function decode_hex(h) return string.char(tonumber(h, 16)) end
local function url_decode(s)
  s = s:gsub("%+", " ")
  return (s:gsub("%%(%x%x)", decode_hex))
end
M.url_decode = url_decode

--- parse_query(s) -> map of decoded names to decoded values (a repeated name keeps its last value).
function M.parse_query(s)
  local out = {}
  if not s or s == "" then return out end
  for pair in s:gmatch("[^&]+") do
    local eq = pair:find("=", 1, true)
    local k, v = pair, ""
    if eq then k, v = pair:sub(1, eq - 1), pair:sub(eq + 1) end
    k = url_decode(k)
    if k ~= "" then out[k] = url_decode(v) end
  end
  return out
end

local function uuid()
  local h = crypto.random_hex(16):upper()
  return ("%s-%s-%s-%s-%s"):format(h:sub(1, 8), h:sub(9, 12), h:sub(13, 16), h:sub(17, 20), h:sub(21, 32))
end
M.uuid = uuid

--- parse(request) -> call: what the handler needs to authenticate and dispatch an RPC request.
--   call = {method, path, headers, body, query, form, params, scheme ("v3" | "v2" | "none"),
--           action, version, product ("ecs" | "vpc" | "sts" | "ram" | nil), json (bool), request_id}
-- `params` merges the query and a form body: both are business parameters in either scheme.
function M.parse(request)
  local headers = type(request.headers) == "table" and request.headers or {}
  local body = type(request.body) == "string" and request.body or ""
  local query = M.parse_query(type(request.query) == "string" and request.query or "")
  local form = {}
  local ctype = headers["content-type"] or ""
  if body ~= "" and ctype:lower():find("application/x-www-form-urlencoded", 1, true) then
    form = M.parse_query(body)
  end
  local params = {}
  for k, v in pairs(query) do params[k] = v end
  for k, v in pairs(form) do params[k] = v end

  local call = {
    method = type(request.method) == "string" and request.method:upper() or "GET",
    path = type(request.path) == "string" and request.path or "/",
    headers = headers, body = body, query = query, form = form, params = params, request_id = uuid(),
  }
  local auth = headers.authorization
  if (auth and auth:find("^ACS3%-")) or headers["x-acs-action"] then
    call.scheme = "v3"
    call.action = headers["x-acs-action"] or params.Action
    call.version = headers["x-acs-version"] or params.Version
    call.json = true  -- V3 clients send no Format and get JSON
  else
    call.scheme = (params.AccessKeyId or params.Signature) and "v2" or "none"
    call.action = params.Action
    call.version = params.Version
    -- The RPC gateway answers XML unless Format=JSON (any case) is asked for.
    call.json = params.Format ~= nil and params.Format:upper() == "JSON"
  end
  call.product = call.version and M.PRODUCTS[call.version] or nil
  return call
end

-- Typed parameter readers. `p` is call.params. Each raises the API's error on a bad value.

function M.str(p, name, default)
  local v = p[name]
  if v == nil or v == "" then return default end
  return v
end

function M.required(p, name)
  local v = p[name]
  if v == nil or v == "" then M.missing(name) end
  return v
end

function M.int(p, name, default, min, max)
  local v = p[name]
  if v == nil or v == "" then return default end
  local n = v:match("^%s*(-?%d+)%s*$") and math.tointeger(tonumber(v))
  if not n then M.invalid(name, "It must be an integer.") end
  if (min and n < min) or (max and n > max) then
    M.invalid(name, ("It must be between %s and %s."):format(min or "-", max or "-"))
  end
  return n
end

function M.number(p, name, default)
  local v = p[name]
  if v == nil or v == "" then return default end
  local n = tonumber(v)
  if not n or n ~= n then M.invalid(name, "It must be a number.") end
  return n
end

function M.bool(p, name, default)
  local v = p[name]
  if v == nil or v == "" then return default end
  v = v:lower()
  if v == "true" then return true elseif v == "false" then return false end
  M.invalid(name, "It must be true or false.")
end

--- one_of(p, name, default, allowed...) -> the value if it is one of `allowed`.
function M.one_of(p, name, default, ...)
  local v = p[name]
  if v == nil or v == "" then return default end
  for i = 1, select("#", ...) do
    if v == select(i, ...) then return v end
  end
  M.invalid(name)
end

-- Sorted 1-based indices N of the names "<prefix>.N<suffix>" present in p.
local function indices(p, prefix, suffix)
  local seen, out = {}, {}
  local plen = #prefix + 1
  for k in pairs(p) do
    if k:sub(1, plen) == prefix .. "." then
      local n = k:sub(plen + 1):match("^(%d+)" .. (suffix or ""):gsub("%p", "%%%0") .. "$")
      n = n and tonumber(n)
      if n and n >= 1 and not seen[n] then
        seen[n] = true
        out[#out + 1] = n
      end
    end
  end
  table.sort(out)
  return out
end

--- repeated(p, name, max) -> values of name.1, name.2, ... in N order (gaps are allowed, as the API does).
function M.repeated(p, name, max)
  local out = {}
  for _, n in ipairs(indices(p, name)) do
    local v = p[name .. "." .. n]
    if v ~= "" then out[#out + 1] = v end
  end
  if max and #out > max then M.invalid(name, ("At most %d values are allowed."):format(max)) end
  return out
end

--- tags(p, prefix, max) -> list of {key, value}: value nil when only the key was given (a filter for
-- "has this key"). From <prefix>.N.Key / <prefix>.N.Value.
function M.tags(p, prefix, max)
  prefix = prefix or "Tag"
  local out, seen = {}, {}
  local ns = {}
  for _, n in ipairs(indices(p, prefix, ".Key")) do seen[n] = true ns[#ns + 1] = n end
  for _, n in ipairs(indices(p, prefix, ".Value")) do
    if not seen[n] then M.missing(prefix .. "." .. n .. ".Key") end
  end
  for _, n in ipairs(ns) do
    local key = p[prefix .. "." .. n .. ".Key"]
    if key == "" then M.missing(prefix .. "." .. n .. ".Key") end
    out[#out + 1] = { key = key, value = p[prefix .. "." .. n .. ".Value"] }
  end
  if max and #out > max then
    M.fail(400, "InvalidTagCount", ("The specified tags are beyond the permitted range of %d."):format(max))
  end
  return out
end

--- json_array(p, name, max, code) -> the strings of a JSON-array parameter (InstanceIds=["i-1","i-2"]).
function M.json_array(p, name, max, code)
  local v = p[name]
  if v == nil or v == "" then return nil end
  local ok, arr = pcall(json.decode, v)
  local bad = not ok or type(arr) ~= "table" or (next(arr) ~= nil and #arr == 0)
  if not bad then
    for _, s in ipairs(arr) do
      if type(s) ~= "string" then bad = true break end
    end
  end
  if bad then
    M.fail(400, code or "InvalidParameter", ('The specified parameter "%s" is not valid. It must be a JSON array '
      .. 'of strings, e.g. ["a","b"].'):format(name))
  end
  if max and #arr > max then
    M.fail(400, code or "InvalidParameter", ('The specified parameter "%s" holds %d values; at most %d are '
      .. 'allowed.'):format(name, #arr, max))
  end
  local out = {}
  for i, s in ipairs(arr) do out[i] = s end
  return out
end

--- match_tags(have, filters) -> whether `have` ({key = value}) satisfies every filter {key, value?}.
function M.match_tags(have, filters)
  for _, f in ipairs(filters) do
    local v = have[f.key]
    if v == nil or (f.value ~= nil and v ~= f.value) then return false end
  end
  return true
end

-- Pagination. Tokens are opaque to clients but stable under inserts and deletes: a token names the
-- key of the last item returned, and the next page starts after it (items come sorted by key).

local function encode_token(key)
  return crypto.hex_encode(key)
end

local function decode_token(token)
  if #token % 2 ~= 0 or not token:match("^%x+$") then return nil end
  return (token:gsub("%x%x", decode_hex))
end

--- page_by_token(items, p, key_of, default, max) -> page, next_token ("" on the last page).
-- Reads MaxResults and NextToken; MaxResults above `max` is clamped as the API does.
function M.page_by_token(items, p, key_of, default, max, min)
  local size = M.int(p, "MaxResults", default, 1, nil)
  if size > max then size = max end
  if min and size < min then size = min end
  local start = 1
  local token = p.NextToken
  if token and token ~= "" then
    local after = decode_token(token)
    if not after then
      M.fail(400, "InvalidNextToken.Malformed", "The specified parameter NextToken is not valid.")
    end
    start = #items + 1
    for i, item in ipairs(items) do
      if key_of(item) > after then start = i break end
    end
  end
  local page = {}
  for i = start, math.min(start + size - 1, #items) do page[#page + 1] = items[i] end
  local next_token = ""
  if start + size - 1 < #items and #page > 0 then next_token = encode_token(key_of(page[#page])) end
  return page, next_token
end

--- page_by_number(items, p, default, max) -> page, page_number, page_size (PageNumber 1-based).
function M.page_by_number(items, p, default, max)
  local number = M.int(p, "PageNumber", 1, 1, nil)
  local size = M.int(p, "PageSize", default, 1, max)
  local page = {}
  local first = (number - 1) * size + 1
  for i = first, math.min(first + size - 1, #items) do page[#page + 1] = items[i] end
  return page, number, size
end

-- XML, for V2 callers that did not ask for JSON: <Action>Response root, one element per key, and a
-- list repeats its own key (the JSON wrappers already carry the plural/singular pair).
local XML_ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&apos;" }

local function xml_value(v)
  if type(v) == "string" then return (v:gsub("[&<>\"']", XML_ESCAPES)) end
  if type(v) == "boolean" then return tostring(v) end
  if type(v) == "number" then return json.encode(v) end
  return ""
end

local function xml_element(out, name, v)
  if type(v) == "table" and (getmetatable(v) == array_mt or (#v > 0 and next(v, #v) == nil)) then
    for _, item in ipairs(v) do xml_element(out, name, item) end
    return
  end
  out[#out + 1] = "<" .. name .. ">"
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do xml_element(out, k, v[k]) end
  else
    out[#out + 1] = xml_value(v)
  end
  out[#out + 1] = "</" .. name .. ">"
end

local function render(call, status, root, body, headers)
  headers = headers or {}
  headers["x-acs-request-id"] = call.request_id
  local text
  if call.json then
    headers["content-type"] = "application/json;charset=utf-8"
    text = assert(json.encode(body))
  else
    headers["content-type"] = "text/xml;charset=utf-8"
    local out = { '<?xml version="1.0" encoding="UTF-8"?>' }
    xml_element(out, root, body)
    text = table.concat(out)
  end
  return { status = status, headers = headers, body = text }
end

--- ok(call, body) -> 200 response; RequestId is added.
function M.ok(call, body)
  local out = {}  -- a copy: remembered answers (ClientToken) are returned again with a new RequestId
  for k, v in pairs(body) do out[k] = v end
  out.RequestId = call.request_id
  return render(call, 200, (call.action or "") .. "Response", out)
end

--- roa_ok(call, value) -> 200 response of a ROA action: value as JSON (a bare JSON string for a
-- script), the RequestId in the x-acs-request-id header.
function M.roa_ok(call, value)
  return { status = 200, body = assert(json.encode(value)),
    headers = { ["x-acs-request-id"] = call.request_id, ["content-type"] = "application/json;charset=utf-8" } }
end

--- error_response(call, err) -> the response for an API error raised by fail: RPC's
-- {Code, Message, RequestId, HostId, Recommend}, or ROA's {code, message, requestId}.
function M.error_response(call, err)
  if call.roa then
    local headers = { ["x-acs-request-id"] = call.request_id, ["content-type"] = "application/json;charset=utf-8" }
    for k, v in pairs(err.headers or {}) do headers[k] = v end
    return { status = err.status, headers = headers,
      body = assert(json.encode({ code = err.code, message = err.message, requestId = call.request_id })) }
  end
  local host = M.HOSTS[call.product or "ecs"]
  local body = {
    RequestId = call.request_id, HostId = host, Code = err.code, Message = err.message,
    Recommend = ("https://api.aliyun.com/troubleshoot?q=%s&product=%s&requestId=%s"):format(err.code,
      PRODUCT_NAMES[call.product or "ecs"], call.request_id),
  }
  local headers = {}
  for k, v in pairs(err.headers or {}) do headers[k] = v end
  return render(call, err.status, "Error", body, headers)
end

--- plain(status, body, content_type) -> a response for the non-API paths (admin, metadata).
function M.plain(status, body, content_type)
  return { status = status, headers = { ["content-type"] = content_type or "text/plain;charset=utf-8" }, body = body }
end

--- json_response(status, value) -> a JSON response for the admin and metadata paths.
function M.json_response(status, value)
  return { status = status, headers = { ["content-type"] = "application/json" }, body = assert(json.encode(value)) }
end

-- Time formats of the API: most fields are RFC 3339 to the second; instance times to the minute.
function M.iso_time(t) return luaprov.time.iso8601(t) end
function M.minute_time(t) return luaprov.time.iso8601(t):sub(1, 16) .. "Z" end

return M
