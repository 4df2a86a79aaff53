-- luaprov.testkit: builders, loaders, a fake HTTP transport, a frozen clock and contract assertions
-- for busted specs of luaprov scripts (testkit/README.md). Runs under plain lua5.4 with luaprov.so;
-- inside busted every stub is reverted after each test, elsewhere call kit.reset().
local builders = require "luaprov.testkit.builders"
local merge = require "luaprov.testkit.merge"
local stubs = require "luaprov.testkit.stubs"
local assertions = require "luaprov.testkit.assertions"

local M = {}

M.nodeclaim, M.nodeclass, M.nodepool = builders.nodeclaim, builders.nodeclass, builders.nodepool
M.node, M.instance, M.bizfly_pool, M.ctx = builders.node, builders.instance, builders.bizfly_pool, builders.ctx
M.pod, M.disruption_ctx = builders.pod, builders.disruption_ctx
M.defaults = builders.defaults
M.HASH_ANNOTATION, M.HASH_VERSION_ANNOTATION = builders.HASH_ANNOTATION, builders.HASH_VERSION_ANNOTATION

M.NONE, M.list, M.copy, M.merge = merge.NONE, merge.list, merge.copy, merge.merge
M.load = require("luaprov.testkit.load").load
M.http = require "luaprov.testkit.http"
M.clock = require "luaprov.testkit.clock"
M.stub = stubs.stub
M.reset = stubs.reset
M.evaluate_drift = assertions.evaluate
M.check_repair_policies = assertions.check_repair_policies

--- use_defaults(root): under plain Lua, make require "defaults.<module>" load <root>/<module>.lua, as
--- the engine's sandbox does (root defaults to $LUAPROV_SOURCE_DIR, else the current directory).
function M.use_defaults(root)
  root = root or os.getenv("LUAPROV_SOURCE_DIR") or "."
  local function searcher(name)
    local module = name:match("^defaults%.(.+)$")
    if not module then return nil end
    local rel = module:gsub("%.", "/")
    for _, path in ipairs({ root .. "/" .. rel .. ".lua", root .. "/" .. rel .. "/init.lua" }) do
      local f = io.open(path, "r")
      if f then
        f:close()
        return function() return dofile(path) end, path
      end
    end
    return ("\n\tno default module '%s' under %s"):format(module, root)
  end
  for _, s in ipairs(package.searchers) do
    if s == M._defaults_searcher then return end
  end
  M._defaults_searcher = searcher
  table.insert(package.searchers, 2, searcher)
end

-- luassert extensions, and the after-each reset when running inside busted.
local has_luassert, luassert = pcall(require, "luassert")
local has_say, say = pcall(require, "say")
if has_luassert and has_say then assertions.register(luassert, say) end

local has_busted, busted = pcall(require, "busted")
if has_busted and type(busted) == "table" and type(busted.subscribe) == "function" then
  busted.subscribe({ "test", "end" }, function()
    stubs.reset()
    return nil, true
  end)
end

M.use_defaults()

return M
