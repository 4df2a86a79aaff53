-- MIME multi-part user data, merged as cloud-init reads it: the ECSNodeClass's multipart document
-- is parsed, the bootstrap script becomes one more part, shell scripts of stage "pre" are moved to
-- the front, and the whole is written again with one fixed boundary. Pure functions over strings.
--
--   is_mime(text) -> whether text (trimmed) starts with a MIME-Version: or Content-Type: header
--   parse(text) -> parts | nil, message      parts = {{content_type = "...", content = "..."}}
--   order(parts) -> parts: stage=pre shell scripts first, the rest after, each group in its order
--   serialize(parts) -> text | nil, message  boundary "//", "\n" line ends
--   merge(bootstrap, text) -> text | nil, message   the bootstrap part first, then the user's, ordered
--
-- Rules (docs/alibaba.md#how-a-node-joins-the-cluster-bootstrap): every "\r" is dropped; the
-- boundary comes from the top-level Content-Type (multipart/*); the line break before a delimiter
-- belongs to the delimiter, so a part's content is exactly the text between its blank line and that
-- line break; a part keeps its Content-Type verbatim (text/plain when it has none). A part in a
-- transfer encoding other than 7bit/8bit/binary is refused: only Content-Type is written back, and
-- base64 text under a plain header would run as garbage.
local M = {}

local BOUNDARY = "//"

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

function M.is_mime(text)
  if type(text) ~= "string" then return false end
  local head = trim(text):sub(1, 13):lower()
  return head == "mime-version:" or head == "content-type:"
end

-- "type/subtype; a=1; b=\"x y\"" -> "type/subtype" (lower case), {a = "1", b = "x y"} (names lower
-- case), or nil when the media type is not token/token.
local TOKEN = "[!#$%%&'*+%-.^_`|~%w]+"
function M.media_type(value)
  if type(value) ~= "string" then return nil end
  local media, rest = value:match("^%s*(" .. TOKEN .. "/" .. TOKEN .. ")%s*(.*)$")
  if not media then return nil end
  local params = {}
  while rest ~= "" do
    local name, after = rest:match("^;%s*(" .. TOKEN .. ")%s*=%s*(.*)$")
    if not name then
      if rest:match("^;%s*$") then break end
      return nil
    end
    local v, tail = after:match('^"([^"]*)"%s*(.*)$')
    if not v then v, tail = after:match("^(" .. TOKEN .. ")%s*(.*)$") end
    if not v then return nil end
    params[name:lower()] = v
    rest = tail
  end
  return media:lower(), params
end

-- Header lines ("Name: value", continuation lines start with a blank) -> {lower name = value}.
local function headers_of(lines, where)
  local headers, last = {}, nil
  for _, line in ipairs(lines) do
    if line:match("^[ \t]") and last then
      headers[last] = headers[last] .. " " .. trim(line)
    else
      local name, value = line:match("^([!-9;-~]+):[ \t]*(.-)[ \t]*$")
      if not name then return nil, ("%s: line %q is not a header (Name: value)"):format(where, line) end
      last = name:lower()
      headers[last] = value
    end
  end
  return headers
end

-- Splits "headers \n\n body" at the first empty line.
local function split_head(text, where)
  local lines, pos = {}, 1
  while true do
    local eol = text:find("\n", pos, true)
    local line = text:sub(pos, (eol or #text + 1) - 1)
    if line == "" then
      local headers, err = headers_of(lines, where)
      if not headers then return nil, err end
      return headers, eol and text:sub(eol + 1) or ""
    end
    lines[#lines + 1] = line
    if not eol then return nil, where .. ": the headers do not end with an empty line" end
    pos = eol + 1
  end
end

function M.parse(text)
  if type(text) ~= "string" then return nil, "the user data is not a string" end
  text = text:gsub("\r", "")
  text = text:gsub("^%s+", "")
  local headers, body = split_head(text, "MIME user data")
  if not headers then return nil, body end
  local ctype = headers["content-type"]
  if not ctype then return nil, "MIME user data: no Content-Type header" end
  local media, params = M.media_type(ctype)
  if not media or not media:find("^multipart/") then
    return nil, ("MIME user data: Content-Type %q is not multipart/..."):format(ctype)
  end
  local boundary = params.boundary
  if not boundary or boundary == "" then
    return nil, ("MIME user data: Content-Type %q has no boundary"):format(ctype)
  end
  local open, close = "--" .. boundary, "--" .. boundary .. "--"
  -- Walk the lines: delimiter lines cut the body into parts (the preamble and the epilogue go).
  local parts, current, closed = {}, nil, false
  local function finish()
    if not current then return true end
    local chunk = table.concat(current, "\n")
    -- A part without headers starts with the empty line that ends its (empty) header block.
    local part_headers, content = split_head(chunk, "MIME part " .. (#parts + 1))
    if not part_headers then return nil, content end
    local cte = (part_headers["content-transfer-encoding"] or "7bit"):lower()
    if cte ~= "7bit" and cte ~= "8bit" and cte ~= "binary" then
      return nil, ("MIME part %d: Content-Transfer-Encoding %s is not supported; give the part as plain "
        .. "text"):format(#parts + 1, cte)
    end
    parts[#parts + 1] = { content_type = part_headers["content-type"] or "text/plain", content = content }
    return true
  end
  for line in (body .. "\n"):gmatch("([^\n]*)\n") do
    local bare = line:gsub("[ \t]+$", "")
    if bare == close or bare == open then
      local ok, err = finish()
      if not ok then return nil, err end
      if bare == close then
        closed = true
        break
      end
      current = {}
    elseif current then
      current[#current + 1] = line
    end
  end
  if not current and not closed then
    return nil, ("MIME user data: no part starts with the boundary line %q"):format(open)
  end
  if not closed then return nil, ("MIME user data: the closing boundary line %q is missing"):format(close) end
  return parts
end

local function is_pre(part)
  local media, params = M.media_type(part.content_type)
  return media == "text/x-shellscript" and params.stage == "pre"
end

function M.order(parts)
  local pre, rest = {}, {}
  for _, part in ipairs(parts) do
    local list = is_pre(part) and pre or rest
    list[#list + 1] = part
  end
  for _, part in ipairs(rest) do pre[#pre + 1] = part end
  return pre
end

function M.serialize(parts)
  local out = { 'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="' .. BOUNDARY .. '"\n\n' }
  for i, part in ipairs(parts) do
    local ctype, content = part.content_type:gsub("[\r\n]", ""), part.content:gsub("\r", "")
    for line in (content .. "\n"):gmatch("([^\n]*)\n") do
      if line:sub(1, #BOUNDARY + 2) == "--" .. BOUNDARY then
        return nil, ("MIME part %d (%s): a line starts with the boundary %q"):format(i, ctype, "--" .. BOUNDARY)
      end
    end
    out[#out + 1] = "--" .. BOUNDARY .. "\nContent-Type: " .. ctype .. "\n\n" .. content .. "\n"
  end
  out[#out + 1] = "--" .. BOUNDARY .. "--\n"
  return table.concat(out)
end

function M.merge(bootstrap, text)
  local parts, err = M.parse(text)
  if not parts then return nil, err end
  table.insert(parts, 1, { content_type = 'text/x-shellscript; charset="us-ascii"', content = bootstrap })
  return M.serialize(M.order(parts))
end

return M
