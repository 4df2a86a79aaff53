-- luaprov.time: the clock and RFC 3339 timestamps (Kubernetes and cloud API times).
local time = require("luaprov").time

describe("luaprov.time", function()
  describe("now and monotonic", function()
    it("returns the system clock as float seconds when no host clock is registered", function()
      local t = time.now()
      assert.equals("float", math.type(t))
      assert.is_true(math.abs(t - os.time()) <= 2)
    end)

    it("never goes backwards on the monotonic clock", function()
      local a = time.monotonic()
      local b = time.monotonic()
      assert.equals("float", math.type(a))
      assert.is_true(b >= a)
    end)
  end)

  describe("iso8601", function()
    local known = {
      { 0, "1970-01-01T00:00:00Z" },
      { 1796008971, "2026-11-30T03:22:51Z" },
      { 1796008971.999, "2026-11-30T03:22:51Z" },
      { 951782400, "2000-02-29T00:00:00Z" },
      { 4107542400, "2100-03-01T00:00:00Z" },
      { -1, "1969-12-31T23:59:59Z" },
      { -0.5, "1969-12-31T23:59:59Z" },
      { -62167219200, "0000-01-01T00:00:00Z" },
      { 253402300799, "9999-12-31T23:59:59Z" },
    }
    for _, case in ipairs(known) do
      it(("writes %s as %s"):format(case[1], case[2]), function()
        assert.equals(case[2], time.iso8601(case[1]))
      end)
    end

    it("defaults to now", function()
      local t = time.parse_iso8601(time.iso8601())
      assert.is_true(math.abs(t - time.now()) <= 2)
    end)

    it("raises on times outside years 0000..9999, NaN and non-numbers", function()
      for _, bad in ipairs({ 253402300800, -62167219201, 0 / 0, math.huge, "soon", {} }) do
        assert.has_error(function() time.iso8601(bad) end)
      end
    end)
  end)

  describe("parse_iso8601", function()
    it("reads a UTC timestamp", function()
      assert.equals(1796008971, time.parse_iso8601("2026-11-30T03:22:51Z"))
      assert.equals("float", math.type(time.parse_iso8601("2026-11-30T03:22:51Z")))
    end)

    it("keeps the fraction of a Kubernetes MicroTime", function()
      local t = time.parse_iso8601("2026-11-30T03:22:51.123456Z")
      assert.is_true(math.abs(t - 1796008971.123456) < 1e-6)
      assert.is_true(math.abs(time.parse_iso8601("2026-11-30T03:22:51.5Z") - 1796008971.5) < 1e-9)
      assert.is_true(math.abs(time.parse_iso8601("2026-11-30T03:22:51.123456789Z") - 1796008971.123456789) < 1e-6)
    end)

    it("applies offsets", function()
      assert.equals(1796008971, time.parse_iso8601("2026-11-30T10:22:51+07:00"))
      assert.equals(1796008971, time.parse_iso8601("2026-11-29T22:22:51-05:00"))
      assert.equals(1796008971, time.parse_iso8601("2026-11-30T03:22:51+00:00"))
      assert.equals(1796008971, time.parse_iso8601("2026-11-30t03:22:51z"))
    end)

    it("reads back what iso8601 writes", function()
      for _, t in ipairs({ 0, 1, 86399, 951782400, 1796008971, 4102444800, -86400 * 365 }) do
        assert.equals(t, time.parse_iso8601(time.iso8601(t)))
      end
    end)

    local invalid = {
      { "", "expected a date" },
      { "2026-11-30", "expected 'T'" },
      { "2026-11-30 03:22:51Z", "expected 'T'" },
      { "2026-11-30T03:22:51", "expected 'Z' or an offset" },
      { "2026-11-30T03:22Z", "expected a time" },
      { "2026-02-29T00:00:00Z", "day out of range" },
      { "2026-13-01T00:00:00Z", "month out of range" },
      { "2026-11-30T24:00:00Z", "time of day out of range" },
      { "2026-11-30T03:22:60Z", "time of day out of range" },
      { "2026-11-30T03:22:51.Z", "expected digits after '.'" },
      { "2026-11-30T03:22:51+0700", "expected an offset" },
      { "2026-11-30T03:22:51+24:00", "offset out of range" },
      { "2026-11-30T03:22:51Z junk", "unexpected text" },
      { "1796008971", "expected a date" },
    }
    for _, case in ipairs(invalid) do
      it(("returns nil, message, InvalidTime for %q"):format(case[1]), function()
        local t, msg, code = time.parse_iso8601(case[1])
        assert.is_nil(t)
        assert.equals("InvalidTime", code)
        assert.matches(case[2], msg, 1, true)
        assert.matches(case[1], msg, 1, true)
      end)
    end

    it("raises on a non-string argument", function()
      assert.has_error(function() time.parse_iso8601() end)
      assert.has_error(function() time.parse_iso8601({}) end)
    end)
  end)
end)

describe("luaprov.time.sleep (outside the engine)", function()

  it("blocks for the given time", function()
    local t0 = time.monotonic()
    time.sleep(0.05)
    assert.is_true(time.monotonic() - t0 >= 0.045)
  end)

  it("refuses negative and absurd durations", function()
    assert.has_error(function() time.sleep(-1) end)
    assert.has_error(function() time.sleep(7200) end)
    assert.has_error(function() time.sleep("x") end)
  end)
end)
