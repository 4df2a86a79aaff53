-- testkit stubs: kit.http, kit.clock and kit.stub are reverted after every test (busted hook) and by
-- kit.reset(); the tests below run in file order, each checking that the previous one left nothing.
local kit = require "luaprov.testkit"
local luaprov = require "luaprov"

local real_request, real_request_all, real_now = luaprov.http.request, luaprov.http.request_all, luaprov.time.now
local target = { value = "real" }

describe("testkit isolation", function()
  it("installs a fake transport, a frozen clock and a stub", function()
    kit.http.on { method = "GET", url_match = "^https://ecs%.", json = { ok = true } }
    kit.clock.freeze("2026-11-30T03:00:00Z")
    kit.stub(target, "value", "stubbed")
    assert.are_not.equal(real_request, luaprov.http.request)
    assert.equals("stubbed", target.value)
    assert.equals(1796007600, luaprov.time.now())
  end)

  it("finds none of them in the next test", function()
    assert.equals(real_request, luaprov.http.request)
    assert.equals(real_request_all, luaprov.http.request_all)
    assert.equals(real_now, luaprov.time.now)
    assert.equals("real", target.value)
    assert.same({}, kit.http.requests())
    assert.is_false(kit.clock.is_frozen())
  end)

  it("reverts by hand with kit.reset(), newest stub first", function()
    kit.stub(target, "value", "one")
    kit.stub(target, "value", "two")
    kit.reset()
    assert.equals("real", target.value)
    assert.equals(real_now, luaprov.time.now)
  end)
end)

describe("kit.clock", function()
  it("freezes now() and the default time of iso8601, and advances", function()
    local t = kit.clock.freeze("2026-11-30T03:00:00Z")
    assert.equals(t, luaprov.time.now())
    assert.equals("2026-11-30T03:00:00Z", luaprov.time.iso8601())
    assert.equals("1970-01-01T00:00:00Z", luaprov.time.iso8601(0))
    kit.clock.advance(90)
    assert.equals("2026-11-30T03:01:30Z", luaprov.time.iso8601())
    assert.equals(t + 90, kit.clock.now())
  end)

  it("advance() alone freezes at the real time first", function()
    local before = real_now()
    local t = kit.clock.advance(3600)
    assert.is_true(t >= before + 3600 and t < before + 3660)
  end)
end)

describe("kit.http", function()
  it("answers by method and URL pattern, newest route first, and records every request", function()
    kit.http.on { url_match = "/DescribeImages", json = { Images = {} } }
    kit.http.on { method = "POST", url_match = "/DescribeImages", status = 503, body = "busy" }
    local res = luaprov.http.request { url = "https://ecs.example/DescribeImages" }
    assert.equals(200, res.status)
    assert.equals("application/json", res.headers["content-type"])
    res = luaprov.http.request { method = "post", url = "https://ecs.example/DescribeImages", body = '{"a":1}' }
    assert.equals(503, res.status)
    kit.http.assert_requested { method = "POST", url_match = "DescribeImages", times = 1 }
    kit.http.assert_requested { url_match = "DescribeImages", times = 2 }
    assert.equals(1, kit.http.requests { method = "POST" }[1].json.a)
  end)

  it("serves a list of responses in turn, failures, functions and request_all", function()
    kit.http.on { url = "https://a/", responses = { { status = 500 }, { error = "reset", code = "Transport" } } }
    kit.http.on { match = function(req) return req.url:find("/echo", 1, true) ~= nil end,
      respond = function(req) return { status = 200, headers = {}, body = req.body } end }
    assert.equals(500, luaprov.http.request { url = "https://a/" }.status)
    local res, err, code = luaprov.http.request { url = "https://a/" }
    assert.same({ nil, "reset", "Transport" }, { res, err, code })
    local all = luaprov.http.request_all { { url = "https://a/" }, { url = "https://b/echo", body = "hi" } }
    assert.same({ error = "reset", code = "Transport" }, all[1])
    assert.equals("hi", all[2].body)
  end)

  it("fails loudly, naming the request and the routes, when nothing matches", function()
    kit.http.on { method = "GET", url_match = "^https://ecs" }
    local ok, err = pcall(luaprov.http.request, { method = "DELETE", url = "https://vpc.example/x" })
    assert.is_false(ok)
    assert.matches("no fake response for DELETE https://vpc.example/x", err, 1, true)
    assert.matches("GET ^https://ecs", err, 1, true)
    assert.equals(1, #kit.http.unmatched())
    ok, err = pcall(kit.http.assert_requested, { url_match = "^https://ecs" })
    assert.is_false(ok)
    assert.matches("requests made:\n  DELETE https://vpc.example/x", err, 1, true)
    kit.http.assert_not_requested { url_match = "^https://ecs" }
  end)

  it("refuses every request after install() alone", function()
    kit.http.install()
    assert.has_error(function() luaprov.http.request { url = "https://a/" } end)
  end)
end)
