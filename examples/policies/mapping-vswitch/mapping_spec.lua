-- examples/policies/mapping-vswitch: preferred vSwitches first, the shipped order otherwise.
local kit = require "luaprov.testkit"
local mapping = require "providers.alibaba"
local default = require "defaults.providers.alibaba"

local ANNOTATION = mapping.PREFERENCE_ANNOTATION

-- What the shipped resolve_nodeclass would answer (most free IPs first), without calling the cloud.
local function shipped_status()
  return kit.nodeclass { status = { vSwitches = {
    { id = "vsw-big", zoneID = "cn-hangzhou-h" }, { id = "vsw-mid", zoneID = "cn-hangzhou-h" },
    { id = "vsw-i", zoneID = "cn-hangzhou-i" }, { id = "vsw-small", zoneID = "cn-hangzhou-h" } } } }.status
end

local function ids(status)
  local out = {}
  for i, v in ipairs(status.vSwitches) do out[i] = v.id end
  return out
end

describe("mapping-vswitch", function()
  before_each(function()
    kit.stub(default, "resolve_nodeclass", function() return shipped_status() end)
  end)

  it("puts the annotated vSwitches first, in the annotation's order", function()
    local class = kit.nodeclass { metadata = { annotations = { [ANNOTATION] = "vsw-small, vsw-i" } } }
    assert.same({ "vsw-small", "vsw-i", "vsw-big", "vsw-mid" }, ids(mapping.resolve_nodeclass({}, class)))
  end)

  it("keeps the shipped order without the annotation, or for IDs that are not resolved", function()
    assert.same({ "vsw-big", "vsw-mid", "vsw-i", "vsw-small" }, ids(mapping.resolve_nodeclass({}, kit.nodeclass())))
    local class = kit.nodeclass { metadata = { annotations = { [ANNOTATION] = "vsw-gone" } } }
    assert.same({ "vsw-big", "vsw-mid", "vsw-i", "vsw-small" }, ids(mapping.resolve_nodeclass({}, class)))
  end)

  it("keeps every other export of the shipped mapping", function()
    for _, name in ipairs({ "name", "instance_types", "create", "delete", "get", "list", "provider_id",
      "parse_provider_id", "nodeclass_hash" }) do
      assert.equals(default[name], rawget(mapping, name), name)
    end
  end)
end)
