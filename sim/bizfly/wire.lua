-- The Bizfly API's wire conventions on the server side: JSON answers, errors as {"message": ...}
-- (what gobizfly quotes back to its callers), request
-- bodies, and the identifiers and timestamps the API writes.
--
-- API errors travel as raised tables (wire.fail) so handlers read straight through their checks;
-- init.lua catches them and renders them.
local luaprov = require "luaprov"

local json, crypto = luaprov.json, luaprov.crypto

local M = {}

local ApiError = {}
ApiError.__index = ApiError
ApiError.__tostring = function(e) return ("HTTP %d: %s"):format(e.status, e.message) end

--- fail(status, message): raises an API error; never returns.
function M.fail(status, message)
  error(setmetatable({ status = status, message = message }, ApiError), 0)
end

function M.is_api_error(v)
  return getmetatable(v) == ApiError
end

--- not_found(what): the gateway's 404, worded as gobizfly's sentinel.
function M.not_found(what)
  M.fail(404, "Resource not found: " .. what)
end

--- list(t) -> t tagged as a JSON array, so an empty list encodes as [] and not {}.
function M.list(t)
  t = t or {}
  if getmetatable(t) ~= json.array_mt then setmetatable(t, json.array_mt) end
  return t
end

function M.json_response(status, value, headers)
  local h = { ["content-type"] = "application/json" }
  for k, v in pairs(headers or {}) do h[k] = v end
  return { status = status, headers = h, body = assert(json.encode(value)) }
end

function M.error_response(err)
  return M.json_response(err.status, { message = err.message, code = err.status })
end

--- body_object(request) -> the decoded JSON object of the body, or a 400.
function M.body_object(request)
  local text = type(request.body) == "string" and request.body or ""
  if text == "" then M.fail(400, "The request body is empty; a JSON object is expected.") end
  local ok, value = pcall(json.decode, text)
  if not ok or type(value) ~= "table" or getmetatable(value) == json.array_mt then
    M.fail(400, "The request body is not a JSON object.")
  end
  return value
end

--- hex(seed, n) -> n hex digits derived from seed: deterministic IDs, so a run can be replayed.
function M.hex(seed, n)
  local out = crypto.sha256_hex(seed)
  while #out < n do out = out .. crypto.sha256_hex(out) end
  return out:sub(1, n)
end

--- uuid(seed) -> "8-4-4-4-12" lower-case hex, deterministic.
function M.uuid(seed)
  local h = M.hex("uuid:" .. seed, 32)
  return ("%s-%s-4%s-a%s-%s"):format(h:sub(1, 8), h:sub(9, 12), h:sub(14, 16), h:sub(18, 20), h:sub(21, 32))
end

local ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

--- alnum(seed, n) -> n characters of [a-zA-Z0-9], deterministic ("Cv4N54hV" in node names).
function M.alnum(seed, n)
  local h = M.hex("alnum:" .. seed, n * 2)
  local out = {}
  for i = 1, n do
    local b = tonumber(h:sub(2 * i - 1, 2 * i), 16)
    local k = b % #ALNUM + 1
    out[i] = ALNUM:sub(k, k)
  end
  return table.concat(out)
end

--- timestamp(t) -> "2026-11-30T04:07:22.611000", the API's created_at form (UTC, no zone).
function M.timestamp(t)
  local whole = math.floor(t)
  local micro = math.floor((t - whole) * 1e6)
  return luaprov.time.iso8601(whole):gsub("Z$", "") .. (".%06d"):format(micro)
end

return M
