-- luaprov.json: the JSON <-> Lua mapping documented in bindings/json.h.
local json = require("luaprov").json

local function nodeclaim()
  return {
    apiVersion = "karpenter.sh/v1",
    kind = "NodeClaim",
    metadata = {
      name = "default-x7k2p",
      labels = { ["karpenter.sh/nodepool"] = "default", ["kubernetes.io/arch"] = "amd64" },
      annotations = {},
      finalizers = setmetatable({ "karpenter.sh/termination" }, json.array_mt),
      resourceVersion = "73812",
      generation = 1,
    },
    spec = {
      nodeClassRef = { group = "karpenter.alibabacloud.com", kind = "ECSNodeClass", name = "default" },
      requirements = {
        { key = "node.kubernetes.io/instance-type", operator = "In", values = { "ecs.g7.large", "ecs.g7.xlarge" } },
        { key = "karpenter.sh/capacity-type", operator = "In", values = { "spot" } },
      },
      taints = setmetatable({}, json.array_mt),
      resources = { requests = { cpu = "1500m", memory = "3Gi", pods = 12 } },
    },
    status = {
      allocatable = { cpu = 1.5 },
      providerID = "alibabacloud://cn-hangzhou.i-bp1abc",
      conditions = json.null,
    },
  }
end

local function roundtrip(v)
  local text = assert(json.encode(v))
  return assert(json.decode(text)), text
end

local function nest(depth, leaf)
  local v = leaf
  for _ = 1, depth do v = { v } end
  return v
end

describe("luaprov.json", function()
  describe("round trips", function()
    it("keeps a Kubernetes object's shape, values and number types", function()
      local obj = nodeclaim()
      local back = roundtrip(obj)
      assert.same(obj, back)
      assert.equals("integer", math.type(back.metadata.generation))
      assert.equals("integer", math.type(back.spec.resources.requests.pods))
      assert.equals("float", math.type(back.status.allocatable.cpu))
      assert.equals(json.null, back.status.conditions)
    end)

    it("re-encodes a decoded document to the same bytes", function()
      local _, text = roundtrip(nodeclaim())
      assert.equals(text, json.encode(json.decode(text)))
    end)

    it("decodes any value at the top level", function()
      assert.equals(5, json.decode("5"))
      assert.equals("integer", math.type(json.decode("5")))
      assert.equals(1.5, json.decode(" 1.5 "))
      assert.is_true(json.decode("true"))
      assert.equals("s", json.decode('"s"'))
      assert.equals(json.null, json.decode("null"))
    end)

    it("keeps 64-bit integers exact and floats round-trippable", function()
      for _, n in ipairs({ math.maxinteger, math.mininteger, 2 ^ 53 // 1 + 1, -7 }) do
        assert.equals(n, json.decode(json.encode(n)))
        assert.equals("integer", math.type(json.decode(json.encode(n))))
      end
      assert.equals("0.1", json.encode(0.1))
      for _, x in ipairs({ 1 / 3, -2.5e-300, 1e300, 123456.789 }) do
        assert.equals(x, json.decode(json.encode(x)))
      end
    end)

    it("writes integral floats without a fraction, as Go expects for int fields", function()
      assert.equals("2", json.encode(4 / 2))
      assert.equals("[3]", json.encode({ 3.0 }))
    end)

    it("writes negative zero as 0, so values that compare equal encode to the same bytes", function()
      assert.equals(0, -0.0)
      assert.equals(json.encode(0), json.encode(-0.0))
      assert.equals('{"a":[0,0]}', json.encode({ a = { -0.0, 0.0 } }))
    end)

    it("keeps strings byte for byte, NUL bytes included", function()
      local s = "a\0b\"\\\n\t\1é"
      assert.equals('"a\\u0000b\\"\\\\\\n\\t\\u0001é"', json.encode(s))
      assert.equals(s, json.decode(json.encode(s)))
    end)

    it("handles documents of a megabyte and more", function()
      local items = {}
      for i = 1, 8000 do
        items[i] = { metadata = { name = ("node-%05d"):format(i), uid = ("%032x"):format(i) },
                     status = { capacity = { cpu = i % 64, memory = "16Gi" }, ready = i % 2 == 0 } }
      end
      local text = assert(json.encode({ kind = "List", items = items }))
      assert.is_true(#text > 1024 * 1024)
      local back = assert(json.decode(text))
      assert.equals(8000, #back.items)
      assert.same(items[4321], back.items[4321])
    end)
  end)

  describe("arrays and objects", function()
    it("keeps an empty array an array and an empty object an object", function()
      assert.equals("[]", json.encode(json.decode("[]")))
      assert.equals("{}", json.encode(json.decode("{}")))
      assert.equals('{"a":[],"b":{}}', json.encode(json.decode('{"b":{},"a":[]}')))
    end)

    it("encodes an untagged empty table as an object and a tagged one as an array", function()
      assert.equals("{}", json.encode({}))
      assert.equals("[]", json.encode(setmetatable({}, json.array_mt)))
    end)

    it("encodes a plain sequence as an array", function()
      assert.equals('[1,"two",[3]]', json.encode({ 1, "two", { 3 } }))
    end)

    it("tags decoded arrays with a protected array_mt", function()
      local arr = json.decode("[1,2]")
      assert.equals(json.array_mt, getmetatable(arr))
      assert.equals("luaprov.json.array", json.array_mt.__name)
      assert.has_error(function() setmetatable(arr, nil) end)
      assert.is_nil(getmetatable(json.decode("{}")))
    end)

    it("sorts object keys bytewise so equal tables give equal bytes", function()
      local a, b = {}, {}
      local keys = { "zeta", "Alpha", "alpha", "a", "ab", "b", "_x", "é", "10", "9" }
      for i = 1, #keys do a[keys[i]] = i end
      for i = #keys, 1, -1 do b[keys[i]] = i end
      local text = json.encode(a)
      assert.equals(text, json.encode(b))
      assert.equals('{"10":9,"9":10,"Alpha":2,"_x":7,"a":4,"ab":5,"alpha":3,"b":6,"zeta":1,"é":8}', text)
    end)

    it("allows one table to appear twice when it is not its own ancestor", function()
      local shared = { x = 1 }
      assert.equals('{"a":{"x":1},"b":{"x":1}}', json.encode({ a = shared, b = shared }))
    end)
  end)

  describe("null", function()
    it("is one light userdata shared by decode and the module", function()
      assert.equals("userdata", type(json.null))
      assert.equals(json.null, json.decode("[null]")[1])
      assert.equals(require("luaprov").json.null, json.null)
    end)

    it("keeps keys whose value is null", function()
      local obj = json.decode('{"deletionTimestamp":null}')
      assert.equals(json.null, obj.deletionTimestamp)
      assert.equals('{"deletionTimestamp":null}', json.encode(obj))
    end)

    it("encodes nil at the top level as null", function()
      assert.equals("null", json.encode(nil))
    end)
  end)

  describe("unicode", function()
    it("decodes \\u escapes to UTF-8, surrogate pairs included", function()
      assert.equals("é", json.decode('"\\u00e9"'))
      assert.equals("\u{1F600}", json.decode('"\\ud83d\\ude00"'))
      assert.equals("\u{20AC}x", json.decode('"\\u20acx"'))
    end)

    it("refuses a lone surrogate", function()
      local v, msg, code = json.decode('"\\ud800"')
      assert.is_nil(v)
      assert.equals("InvalidJSON", code)
      assert.matches("Unicode", msg)
    end)

    it("writes UTF-8 through and replaces invalid bytes with U+FFFD", function()
      assert.equals('"日本"', json.encode("日本"))
      assert.equals('"a\u{FFFD}b"', json.encode("a\255b"))
    end)
  end)

  describe("invalid JSON", function()
    local cases = {
      { "", "line 1, column 0" },
      { '{"a":1,}', "line 1, column 8" },
      { '{\n  "a": 1,\n  "b": tru\n}', "line 3" },
      { "[1,2", "end of file" },
      { "[1] x", "end of file expected" },
      { "99999999999999999999", "too big integer" },
    }
    for _, case in ipairs(cases) do
      it(("returns nil, message, InvalidJSON for %q"):format(case[1]), function()
        local v, msg, code = json.decode(case[1])
        assert.is_nil(v)
        assert.equals("InvalidJSON", code)
        assert.matches(case[2], msg, 1, true)
      end)
    end

    it("accepts 128 levels of nesting and refuses 129", function()
      assert.is_table(json.decode(("["):rep(128) .. ("]"):rep(128)))
      local v, msg, code = json.decode(("["):rep(129) .. ("]"):rep(129))
      assert.is_nil(v)
      assert.equals("InvalidJSON", code)
      assert.matches("deeper than 128", msg)
    end)

    it("raises on a non-string argument", function()
      assert.has_error(function() json.decode() end)
      assert.has_error(function() json.decode({}) end)
    end)
  end)

  describe("values that cannot be encoded", function()
    local function refuses(v, expected)
      local text, msg, code = json.encode(v)
      assert.is_nil(text)
      assert.equals("InvalidValue", code)
      assert.equals(expected, msg)
    end

    it("names the path of a function", function()
      refuses({ metadata = { labels = { x = print } } }, "cannot encode function at metadata.labels.x")
    end)

    it("writes array indices 1-based and odd keys quoted, as a script indexes them", function()
      refuses({ spec = { taints = { { key = "a" }, { key = print } } } },
        "cannot encode function at spec.taints[2].key")
      refuses({ metadata = { labels = { ["kubernetes.io/os"] = io.stdout } } },
        'cannot encode userdata at metadata.labels["kubernetes.io/os"]')
    end)

    it("refuses cycles", function()
      local t = { spec = {} }
      t.spec.owner = t
      refuses(t, "cannot encode a cycle (a table that contains itself) at spec.owner")
    end)

    it("refuses sparse arrays", function()
      refuses({ items = { [1] = "a", [3] = "c" } }, "cannot encode a sparse array (integer keys with holes) at items")
    end)

    it("refuses NaN and infinities", function()
      refuses({ cpu = 0 / 0 }, "cannot encode NaN at cpu")
      refuses({ 1, math.huge }, "cannot encode inf at [2]")
      refuses(-math.huge, "cannot encode -inf")
    end)

    it("refuses mixed, boolean and fractional keys", function()
      refuses({ 1, a = 2 }, "cannot encode a table with mixed string and number keys")
      refuses({ [true] = 1 }, "cannot encode a table with a boolean key")
      refuses({ [1.5] = 1 }, "cannot encode a table with a non-positive or fractional number key")
      refuses({ [0] = 1 }, "cannot encode a table with a non-positive or fractional number key")
      refuses(setmetatable({ a = 1 }, json.array_mt), "cannot encode an array with string keys")
    end)

    it("refuses coroutines and nesting deeper than 128", function()
      refuses(coroutine.create(print), "cannot encode thread")
      assert.equals(("["):rep(128) .. ("]"):rep(128), json.encode(nest(127, setmetatable({}, json.array_mt))))
      local text, msg, code = json.encode(nest(128, {}))
      assert.is_nil(text)
      assert.equals("InvalidValue", code)
      assert.matches("deeper than 128", msg)
    end)

    it("raises when called without a value", function()
      assert.has_error(function() json.encode() end)
    end)
  end)
end)
