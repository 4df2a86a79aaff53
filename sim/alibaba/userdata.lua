-- The shell scripts an instance's boot would run from its user data, as cloud-init finds them: the
-- user data is base64 (as RunInstances takes it and the simulator keeps it) or already text; it is
-- either one script starting with "#!" or a MIME multipart archive whose text/x-shellscript parts
-- are scripts (a part may be base64 with Content-Transfer-Encoding: base64).
--   scripts(user_data) -> {text, ...} | nil, why
local luaprov = require "luaprov"

local base64_decode = luaprov.crypto.base64_decode

local M = {}

-- Header lines up to the first empty line -> {lowercase name -> value}, the rest of the text.
local function split_headers(text)
  local headers, pos = {}, 1
  while true do
    local line_end = text:find("\n", pos, true)
    local line = text:sub(pos, (line_end or #text + 1) - 1):gsub("\r$", "")
    pos = line_end and line_end + 1 or #text + 1
    if line == "" then break end
    local name, value = line:match("^([%w%-]+):%s*(.-)%s*$")
    if name then headers[name:lower()] = value end
    if not line_end then break end
  end
  return headers, text:sub(pos)
end

-- The boundary parameter of a multipart Content-Type, quoted or not.
local function boundary_of(content_type)
  return content_type:match('[Bb]oundary="([^"]*)"') or content_type:match("[Bb]oundary=([^;%s]+)")
end

-- The bodies between "--boundary" lines, up to "--boundary--".
local function parts(body, boundary)
  local out, current = {}, nil
  local open, close = "--" .. boundary, "--" .. boundary .. "--"
  for line in (body .. "\n"):gmatch("([^\n]*)\n") do
    local bare = line:gsub("\r$", "")
    if bare == close then
      if current then out[#out + 1] = table.concat(current, "\n") end
      return out
    elseif bare == open then
      if current then out[#out + 1] = table.concat(current, "\n") end
      current = {}
    elseif current then
      current[#current + 1] = bare
    end
  end
  if current then out[#out + 1] = table.concat(current, "\n") end
  return out
end

local function mime_scripts(text, content_type)
  local boundary = boundary_of(content_type)
  if not boundary or boundary == "" then return nil, "the MIME archive's Content-Type has no boundary" end
  local scripts = {}
  for i, part in ipairs(parts(select(2, split_headers(text)), boundary)) do
    local headers, body = split_headers(part)
    if (headers["content-type"] or ""):lower():match("^text/x%-shellscript") then
      if (headers["content-transfer-encoding"] or ""):lower() == "base64" then
        local decoded = base64_decode((body:gsub("%s", "")))
        if not decoded then return nil, ("MIME part %d is not valid base64"):format(i) end
        body = decoded
      end
      scripts[#scripts + 1] = body
    end
  end
  if #scripts == 0 then return nil, "the MIME archive has no text/x-shellscript part" end
  return scripts
end

function M.scripts(user_data)
  if type(user_data) ~= "string" or user_data == "" then return nil, "the instance has no user data" end
  local text = base64_decode(user_data) or user_data
  if text:sub(1, 2) == "#!" then return { text } end
  local headers = split_headers(text)
  local content_type = headers["content-type"] or ""
  if content_type:lower():match("^multipart/") then return mime_scripts(text, content_type) end
  return nil, "the user data is neither a shell script (#!) nor a MIME multipart archive"
end

return M
