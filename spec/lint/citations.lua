-- Every citation in the repository resolves: a path to a Markdown file (`docs/contracts.md`,
-- `controllers.md#tuning-run---config`) names a file the repository holds, and its anchor a heading
-- or an explicit anchor of that file; a contract rule (CP4, NG6) is one docs/contracts.md defines.
-- Documents outside the repository are not cited at all. Usage: lua5.4 citations.lua <repo root>
-- Prints one line per broken citation (file:line: what) and exits 1 when there is any.

local root = assert(arg[1], "usage: citations.lua <repo root>")

-- Folders that hold no source of the project: build trees, downloaded tools and modules.
local SKIPPED_DIRS = { [".git"] = true, [".cache"] = true, node_modules = true }
local function skipped_dir(name)
  return SKIPPED_DIRS[name] or name:match("^build") ~= nil
end

local TEXT_EXTENSIONS = {
  md = true, c = true, h = true, lua = true, sh = true, js = true, yaml = true, yml = true,
  txt = true, ["in"] = true, json = true, proto = true, rockspec = true,
}
local function is_text(name)
  if name == "Makefile" or name == "CMakeLists.txt" then return true end
  local ext = name:match("%.([%w]+)$")
  return ext ~= nil and TEXT_EXTENSIONS[ext] == true
end

-- Paths of the repository's text files, relative to root, found with find(1) so that a tree without
-- .git (an unpacked tarball) is checked the same way.
local function text_files()
  local files = {}
  local pipe = assert(io.popen("cd '" .. root .. "' && find . -type d \\( -name .git -o -name .cache -o "
    .. "-name node_modules -o -name 'build*' \\) -prune -o -type f -print"))
  for path in pipe:lines() do
    path = path:gsub("^%./", "")
    local ok = not path:match("^spec/fixtures/citations/") -- the checker's own sample of broken ones
    for dir in path:gmatch("([^/]+)/") do
      if skipped_dir(dir) then ok = false end
    end
    if ok and is_text(path:match("[^/]+$")) then files[#files + 1] = path end
  end
  pipe:close()
  table.sort(files)
  return files
end

local function read(path)
  local f = io.open(root .. "/" .. path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- The anchor a heading gets when Markdown is rendered: lower case, punctuation other than '-' and
-- '_' dropped, each space a '-'; a repeated heading gets -1, -2, ...
local function slug(heading)
  local s = heading:lower():gsub("`", "")
  s = s:gsub("%[([^%]]*)%]%([^)]*%)", "%1") -- a link in a heading keeps its text
  s = s:gsub("[^%w%s_-]", ""):gsub("%s", "-")
  return s
end

local anchors_of = {}
local function anchors(path)
  if anchors_of[path] then return anchors_of[path] end
  local set, seen, fenced = {}, {}, false
  for line in (read(path) or ""):gmatch("[^\n]*") do
    if line:match("^%s*```") then fenced = not fenced end
    local heading = not fenced and line:match("^#+%s+(.-)%s*#*%s*$")
    if heading then
      local s = slug(heading)
      local n = seen[s]
      seen[s] = (n or -1) + 1
      set[n and (s .. "-" .. (n + 1)) or s] = true
    end
    for id in line:gmatch("<a%s+[%w]+%s*=%s*\"([^\"]+)\"") do set[id] = true end
  end
  anchors_of[path] = set
  return set
end

local function exists(path)
  local f = io.open(root .. "/" .. path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- "a/./b/../c" -> "a/c"; nil when it climbs out of the repository.
local function normalized(path)
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then
      if #parts == 0 then return nil end
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return table.concat(parts, "/")
end

-- A cited path is read relative to the citing file, then to the root, then to docs/ (prose says
-- "controllers.md" for docs/controllers.md).
local function resolve(citing, cited)
  local dir = citing:match("^(.*)/[^/]*$") or ""
  for _, base in ipairs({ dir, "", "docs" }) do
    local candidate = normalized((base ~= "" and (base .. "/") or "") .. cited)
    if candidate and exists(candidate) then return candidate end
  end
  return nil
end

local rules = {}
for id in (read("docs/contracts.md") or ""):gmatch("%*%*(%u%u%d+)%.%*%*") do rules[id] = true end

-- Names of documents that live outside the repository; spelled in pieces so that this file does not
-- match itself.
local OUTSIDE = { "SP" .. "EC §", "SP" .. "EC%.md", "engineering" .. "_anchors", "shared/" .. "reference",
  "%.%./" .. "shared" }

local problems = {}
local function problem(path, n, fmt, ...)
  problems[#problems + 1] = string.format("%s:%d: " .. fmt, path, n, ...)
end

local function check_line(path, n, line)
  for _, pattern in ipairs(OUTSIDE) do
    if line:find(pattern) then
      problem(path, n, "cites a document outside the repository")
      break
    end
  end
  line = line:gsub("%a[%w+.-]*://[^%s)>\"'`]+", "") -- URLs point elsewhere by design
  line = line:gsub("%$%{?[%w_]+%}?/", "") -- a shell variable before a path names the root
  for cited, anchor in line:gmatch("([%w_./-]*[%w_-]%.md)(#?[%w_-]*)") do
    local target = resolve(path, cited)
    if not target then
      problem(path, n, "cites %s, which the repository does not hold", cited)
    elseif anchor ~= "" and anchor ~= "#" and not anchors(target)[anchor:sub(2)] then
      problem(path, n, "cites %s%s: %s has no heading with that anchor", cited, anchor, target)
    end
  end
  for id in line:gmatch("%f[%w](%u%u%d+)%f[^%w]") do
    if (id:match("^CP") or id:match("^NG")) and not rules[id] then
      problem(path, n, "cites rule %s, which docs/contracts.md does not define", id)
    end
  end
  -- A Markdown link to an anchor of the same page: [text](#anchor).
  if path:match("%.md$") then
    for anchor in line:gmatch("%]%(#([%w_-]+)%)") do
      if not anchors(path)[anchor] then problem(path, n, "links #%s, a heading this page does not have", anchor) end
    end
  end
end

local files = text_files()
for _, path in ipairs(files) do
  local n = 0
  for line in (read(path) or ""):gmatch("([^\n]*)\n?") do
    n = n + 1
    check_line(path, n, line)
  end
end

for _, p in ipairs(problems) do print(p) end
if #problems > 0 then
  print(string.format("%d broken citation(s) in %d files checked", #problems, #files))
  os.exit(1)
end
print(string.format("every citation resolves (%d files checked)", #files))
