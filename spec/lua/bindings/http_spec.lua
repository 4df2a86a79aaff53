-- luaprov.http under plain lua5.4 (synchronous), against a real luaprov engine serving /healthz.
local luaprov = require("luaprov")
local http = luaprov.http

local binary = assert(os.getenv("LUAPROV_BINARY_DIR"), "LUAPROV_BINARY_DIR not set") .. "/luaprov"

local function read_all(path)
  local f = io.open(path)
  if not f then return "" end
  local text = f:read("a")
  f:close()
  return text
end

describe("luaprov.http.request (synchronous, outside the engine)", function()
  local log, pid, base

  setup(function()
    log = os.tmpname()
    local p = io.popen(string.format("%s run --metrics-addr 127.0.0.1:0 --log-format json 2>%s & echo $!", binary, log))
    pid = p:read("l")
    p:close()
    for _ = 1, 200 do
      local addr = read_all(log):match('"msg":"engine started".-"metrics_addr":"([^"]+)"')
      if addr then
        base = "http://" .. addr
        return
      end
      os.execute("sleep 0.02")
    end
    error("engine did not start: " .. read_all(log))
  end)

  teardown(function()
    if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    os.remove(log)
  end)

  it("returns status, lower-case headers and body", function()
    local res = assert(http.request { url = base .. "/healthz" })
    assert.equals(200, res.status)
    assert.equals("ok\n", res.body)
    assert.equals("text/plain; charset=utf-8", res.headers["content-type"])
  end)

  it("treats an HTTP error status as a response, not a failure", function()
    local res, err = http.request { url = base .. "/no/such/path" }
    assert.is_nil(err)
    assert.equals(404, res.status)
    local post = assert(http.request { method = "POST", url = base .. "/healthz", body = "x" })
    assert.equals(405, post.status)
  end)

  it("sends request headers", function()
    local res = assert(http.request { url = base .. "/metrics", headers = { accept = "text/plain" } })
    assert.equals(200, res.status)
    assert.truthy(res.body:find("luaprov_build_info", 1, true))
  end)

  it("returns nil, message, ConnectFailed when nothing listens", function()
    local res, err, code = http.request { url = "http://127.0.0.1:1/", timeout_ms = 2000 }
    assert.is_nil(res)
    assert.equals("ConnectFailed", code)
    assert.is_string(err)
  end)

  it("runs a list of requests and answers in order (one after the other outside the engine)", function()
    local results = http.request_all({
      { url = base .. "/healthz" },
      { url = base .. "/no/such/path" },
      { url = "http://127.0.0.1:1/", timeout_ms = 2000 },
    }, { concurrency = 2 })
    assert.equals(3, #results)
    assert.equals(200, results[1].status)
    assert.equals("ok\n", results[1].body)
    assert.equals(404, results[2].status)
    assert.equals("ConnectFailed", results[3].code)
    assert.is_string(results[3].error)
    assert.same({}, http.request_all({}))
    assert.has_error(function() http.request_all({ { method = "GET" } }) end,
      "luaprov.http.request_all: field 'url' is required")
    assert.has_error(function() http.request_all({}, { concurrency = 0 }) end)
  end)

  it("raises on misuse", function()
    assert.has_error(function() http.request() end)
    assert.has_error(function() http.request {} end, "luaprov.http.request: field 'url' is required")
    assert.has_error(function() http.request { url = base, headers = "x" } end)
    assert.has_error(function() http.request { url = base, timeout_ms = 1.5 } end)
    assert.has_error(function() http.request { url = base, body = {} } end)
    -- fields are read raw: an __index cannot supply them
    assert.has_error(function() http.request(setmetatable({}, { __index = { url = base } })) end,
      "luaprov.http.request: field 'url' is required")
  end)
end)
