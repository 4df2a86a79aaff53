-- luaprov.log: one JSON line per call on stderr, through the engine's logger.
local json = require("luaprov").json

-- Runs a Lua snippet in a fresh lua5.4 with luaprov loaded and returns what it wrote to stderr.
local function stderr_of(snippet, env)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write("local luaprov = require 'luaprov'\n", snippet)
  f:close()
  local p = io.popen(string.format("%s lua5.4 %s 2>&1 >/dev/null", env or "", script))
  local out = p:read("a")
  p:close()
  os.remove(script)
  return out
end

describe("luaprov.log", function()
  it("writes ts, level, logger, msg and the fields in key order", function()
    local line = stderr_of("luaprov.log.info('node checked', { zone = 'h', count = 3, ok = true, ratio = 0.5 })")
    assert.matches('^{"ts":"%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ","level":"info","logger":"script",'
      .. '"msg":"node checked","count":3,"ok":true,"ratio":0%.5,"zone":"h"}\n$', line)
  end)

  it("writes nested tables as JSON", function()
    local line = stderr_of("luaprov.log.warn('drift', { node = { name = 'n1', taints = {} } })")
    local decoded = assert(json.decode(line))
    assert.equals("warn", decoded.level)
    assert.same({ name = "n1", taints = {} }, decoded.node)
  end)

  it("redacts fields that name credentials", function()
    local line = stderr_of("luaprov.log.error('auth failed', { password = 'hunter2', access_key_secret = 'abc',"
      .. " user = 'ops' })")
    assert.falsy(line:find("hunter2", 1, true))
    assert.falsy(line:find('"abc"', 1, true))
    assert.truthy(line:find('"user":"ops"', 1, true))
    assert.truthy(line:find('"password":"[redacted]"', 1, true))
  end)

  it("redacts credentials nested inside table fields", function()
    local line = stderr_of("luaprov.log.info('call', { request = { headers = { Authorization = 'Bearer SECRET123',"
      .. " accept = 'json' }, list = { { token = 'T0P' } } } })")
    assert.falsy(line:find("SECRET123", 1, true))
    assert.falsy(line:find("T0P", 1, true))
    assert.truthy(line:find('"accept":"json"', 1, true))
    assert.truthy(line:find('"Authorization":"[redacted]"', 1, true))
  end)

  it("honours the level set by LUAPROV_LOG_LEVEL", function()
    local snippet = "luaprov.log.debug('debug-line') luaprov.log.info('info-line') luaprov.log.warn('warn-line')"
    local warn = stderr_of(snippet, "LUAPROV_LOG_LEVEL=warn")
    assert.falsy(warn:find("info-line", 1, true))
    assert.truthy(warn:find("warn-line", 1, true))
    local debug = stderr_of(snippet, "LUAPROV_LOG_LEVEL=debug")
    assert.truthy(debug:find("debug-line", 1, true))
  end)

  it("writes text lines when LUAPROV_LOG_FORMAT=text", function()
    local out = stderr_of("luaprov.log.info('plain', { zone = 'h' })", "LUAPROV_LOG_FORMAT=text")
    assert.falsy(out:find("{", 1, true))
    assert.truthy(out:find("plain", 1, true))
    assert.truthy(out:find("zone=h", 1, true))
  end)

  it("raises on misuse", function()
    local log = require("luaprov").log
    assert.has_error(function() log.info() end)
    assert.has_error(function() log.info("x", "not a table") end)
    assert.has_error(function() log.info("x", { [1] = "positional" }) end)
  end)
end)
