-- luaprov.fs.read: only mounted secrets and the prefixes the operator allows.
local fs = require("luaprov").fs

describe("luaprov.fs.read", function()
  it("refuses paths outside the readable prefixes", function()
    local content, err, code = fs.read("/etc/passwd")
    assert.is_nil(content)
    assert.equals("Forbidden", code)
    assert.truthy(err:find("/etc/passwd is not readable by scripts", 1, true))
  end)

  it("refuses relative paths and parent references even under an allowed prefix", function()
    assert.equals("Forbidden", select(3, fs.read("var/run/secrets/token")))
    assert.equals("Forbidden", select(3, fs.read("/var/run/secrets/../../etc/passwd")))
    assert.equals("Forbidden", select(3, fs.read("/var/run/secretsX/token")))
  end)

  it("reads files under LUAPROV_READABLE_PATHS", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local f = assert(io.open(dir .. "/token", "w"))
    f:write("eyJhbGciOi\0binary")
    f:close()
    local script = string.format([[
      local fs = require("luaprov").fs
      local content = assert(fs.read(%q))
      assert(content == "eyJhbGciOi\0binary", "content")
      local _, _, code = fs.read(%q)
      assert(code == "NotFound", code)
      print("ok")
    ]], dir .. "/token", dir .. "/missing")
    local p = io.popen(string.format("LUAPROV_READABLE_PATHS=/nonexistent:%s lua5.4 -e %q 2>&1", dir, script))
    local out = p:read("a")
    p:close()
    os.execute("rm -rf " .. dir)
    assert.equals("ok\n", out)
  end)

  it("raises on misuse", function()
    assert.has_error(function() fs.read() end)
    assert.has_error(function() fs.read({}) end)
  end)
end)
