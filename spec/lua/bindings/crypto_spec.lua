-- luaprov.crypto: the primitives the cloud request signers build on.
local crypto = require("luaprov").crypto

local function hex(s)
  return crypto.hex_encode(s)
end

local function unhex(s)
  return (s:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end))
end

describe("luaprov.crypto", function()
  describe("sha256_hex", function()
    it("matches the FIPS 180-2 vectors", function()
      assert.equals("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", crypto.sha256_hex(""))
      assert.equals("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", crypto.sha256_hex("abc"))
    end)

    it("hashes binary input, NUL bytes included", function()
      assert.are_not.equal(crypto.sha256_hex("a"), crypto.sha256_hex("a\0"))
    end)

    it("raises on a non-string argument", function()
      assert.has_error(function() crypto.sha256_hex() end)
      assert.has_error(function() crypto.sha256_hex({}) end)
    end)
  end)

  describe("hmac_sha1", function()
    local rfc2202 = {
      { ("\x0b"):rep(20), "Hi There", "b617318655057264e28bc0b6fb378c8ef146be00" },
      { "Jefe", "what do ya want for nothing?", "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79" },
      { ("\xaa"):rep(20), ("\xdd"):rep(50), "125d7342b9ac11cd91a39af48aa17b4f63f175d3" },
      { ("\xaa"):rep(80), "Test Using Larger Than Block-Size Key - Hash Key First",
        "aa4ae5e15272d00e95705637ce8a3b55ed402112" },
    }
    for i, v in ipairs(rfc2202) do
      it(("matches RFC 2202 case %d and returns 20 raw bytes"):format(i), function()
        local mac = crypto.hmac_sha1(v[1], v[2])
        assert.equals(20, #mac)
        assert.equals(v[3], hex(mac))
      end)
    end

    it("composes with base64_encode the way Alibaba's RPC signature needs", function()
      assert.equals("7/zfauXrL6LSdBbV8YTfnCWafHk=",
        crypto.base64_encode(crypto.hmac_sha1("Jefe", "what do ya want for nothing?")))
    end)

    it("raises when the message is missing", function()
      assert.has_error(function() crypto.hmac_sha1("key") end)
    end)
  end)

  describe("hmac_sha256", function()
    local rfc4231 = {
      { ("\x0b"):rep(20), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
      { "Jefe", "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
      { unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), ("\xcd"):rep(50),
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b" },
      { ("\xaa"):rep(131), "Test Using Larger Than Block-Size Key - Hash Key First",
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
    }
    for i, v in ipairs(rfc4231) do
      it(("matches RFC 4231 vector %d and returns 32 raw bytes"):format(i), function()
        local mac = crypto.hmac_sha256(v[1], v[2])
        assert.equals(32, #mac)
        assert.equals(v[3], hex(mac))
      end)
    end

    it("accepts an empty key and message", function()
      assert.equals("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad", hex(crypto.hmac_sha256("", "")))
    end)
  end)

  describe("hex_encode", function()
    it("writes lowercase pairs for every byte", function()
      assert.equals("", crypto.hex_encode(""))
      assert.equals("00ff7f0a", crypto.hex_encode("\0\255\127\n"))
    end)
  end)

  describe("base64", function()
    local rfc4648 = { [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==", fooba = "Zm9vYmE=",
                      foobar = "Zm9vYmFy" }
    for plain, encoded in pairs(rfc4648) do
      it(("matches RFC 4648 for %q"):format(plain), function()
        assert.equals(encoded, crypto.base64_encode(plain))
        assert.equals(plain, crypto.base64_decode(encoded))
      end)
    end

    it("round-trips every byte value and every length", function()
      local all = {}
      for i = 0, 255 do all[#all + 1] = string.char(i) end
      all = table.concat(all)
      for n = 0, #all do
        local s = all:sub(1, n)
        assert.equals(s, crypto.base64_decode(crypto.base64_encode(s)))
      end
    end)

    it("writes no line breaks, however long the input", function()
      assert.is_nil(crypto.base64_encode(("x"):rep(3000)):find("\n"))
    end)

    it("ignores one trailing newline, as at the end of a file", function()
      assert.equals("foo", crypto.base64_decode("Zm9v\n"))
      assert.equals("foo", crypto.base64_decode("Zm9v\r\n"))
    end)

    local invalid = {
      { "Zm9", "length 3 is not a multiple of 4" },
      { "Zg", "length 2 is not a multiple of 4" },
      { "Zm9v\n\n", "length 5" },
      { "Zm9v!A==", "unexpected character at byte 5" },
      { " Zm9v", "length 5" },
      { "Zm 9", "unexpected character at byte 3" },
      { "Zg=a", "unexpected padding at byte 3" },
      { "Z===", "unexpected padding at byte 2" },
      { "Zg==Zm9v", "unexpected padding at byte 3" },
      { "-_-_", "unexpected character at byte 1" },
    }
    for _, case in ipairs(invalid) do
      it(("returns nil, message, InvalidBase64 for %q"):format(case[1]), function()
        local v, msg, code = crypto.base64_decode(case[1])
        assert.is_nil(v)
        assert.equals("InvalidBase64", code)
        assert.matches(case[2], msg, 1, true)
      end)
    end

    it("raises on a non-string argument", function()
      assert.has_error(function() crypto.base64_encode() end)
      assert.has_error(function() crypto.base64_decode(true) end)
    end)
  end)

  describe("random_hex", function()
    it("returns two lowercase hex digits per byte", function()
      for _, n in ipairs({ 1, 16, 1024 }) do
        local s = crypto.random_hex(n)
        assert.equals(2 * n, #s)
        assert.matches("^[0-9a-f]+$", s)
      end
    end)

    it("does not repeat itself", function()
      local seen = {}
      for _ = 1, 1000 do
        local s = crypto.random_hex(16)
        assert.is_nil(seen[s])
        seen[s] = true
      end
    end)

    it("raises on counts outside 1..1024 and on non-integers", function()
      for _, bad in ipairs({ 0, -1, 1025, 1.5, "x", {} }) do
        assert.has_error(function() crypto.random_hex(bad) end)
      end
      assert.has_error(function() crypto.random_hex() end)
    end)
  end)
end)
