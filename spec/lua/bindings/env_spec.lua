-- luaprov.env: read-only access to the process environment (script configuration, credentials).
local luaprov = require("luaprov")

describe("luaprov.env", function()
  it("is a function, not a table", function()
    assert.is_function(luaprov.env)
  end)

  it("reads what the process environment holds", function()
    assert.is_string(os.getenv("PATH"))
    assert.equals(os.getenv("PATH"), luaprov.env("PATH"))
  end)

  it("returns nil for a variable that is not set", function()
    assert.is_nil(luaprov.env("LUAPROV_SPEC_SURELY_UNSET_4f1c"))
  end)

  it("raises on names that cannot be variables", function()
    assert.has_error(function() luaprov.env() end)
    assert.has_error(function() luaprov.env({}) end)
    assert.has_error(function() luaprov.env("") end)
    assert.has_error(function() luaprov.env("PATH=x") end)
    assert.has_error(function() luaprov.env("PATH\0X") end)
  end)
end)
