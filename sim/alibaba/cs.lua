-- Container Service for Kubernetes (ACK), ROA style as the real API: resource paths, JSON bodies,
-- errors as {code, message, requestId}, version 2015-12-15. Two actions:
--   DescribeClusterAttachScripts  POST /clusters/{ClusterId}/attachscript: the cluster's attach
--                                 command (sim/alibaba/attach.lua) as a JSON string
--   DescribeClusterNodePools      GET /clusters/{ClusterId}/nodepools: {"nodepools": [...]}
--                                 (sim/alibaba/nodepools.lua)
--   route(call) -> whether the request is one of this API's paths; marks call (roa, product "cs",
--                  action, cluster_id)
--   check(call)  raises what the gateway refuses before the signature is checked
local luaprov = require "luaprov"
local attach = require "sim.alibaba.attach"
local nodepools = require "sim.alibaba.nodepools"
local wire = require "sim.alibaba.wire"

local M = {}

M.VERSION = "2015-12-15"

-- path suffix -> the action and the one method it answers
local PATHS = {
  attachscript = { action = "DescribeClusterAttachScripts", method = "POST" },
  nodepools = { action = "DescribeClusterNodePools", method = "GET" },
}

function M.route(call)
  local id, suffix = call.path:match("^/clusters/([^/]+)/([^/]+)$")
  local known = PATHS[suffix or ""]
  if not known then return false end
  call.roa, call.product, call.action, call.cluster_id = true, "cs", known.action, wire.url_decode(id)
  call.roa_method = known.method
  call.json = true
  return true
end

function M.check(call)
  if call.method ~= call.roa_method then
    wire.fail(404, "InvalidAction.NotFound", "Specified api is not found, please check your url and method.")
  end
  -- The simulator verifies the ACS3 scheme only (the SDKs' default for ROA calls too).
  if call.scheme ~= "v3" then wire.fail(400, "MissingAuthorization", "Authorization is mandatory for this action.") end
  if call.version ~= M.VERSION then wire.fail(400, "InvalidVersion", "Specified parameter Version is not valid.") end
end

local function body_of(call)
  if call.body == "" then return {} end
  local ok, doc = pcall(luaprov.json.decode, call.body)
  if not ok or type(doc) ~= "table" or getmetatable(doc) == luaprov.json.array_mt then
    wire.fail(400, "ErrorParameter", "The request body is not a JSON object.")
  end
  for _, name in ipairs({ "keep_instance_name", "format_disk" }) do
    if doc[name] ~= nil and type(doc[name]) ~= "boolean" then
      wire.fail(400, "ErrorParameter", ("The parameter %s must be true or false."):format(name))
    end
  end
  return doc
end

local function cluster_not_found(call)
  wire.fail(404, "ErrorClusterNotFound", ("The cluster %s is not found."):format(call.cluster_id))
end

function M.DescribeClusterAttachScripts(call)
  local doc = body_of(call)
  local script = attach.script(call.cluster_id, doc.format_disk == true)
  if not script then cluster_not_found(call) end
  return script
end

function M.DescribeClusterNodePools(call)
  local list = nodepools.list(call.cluster_id)
  if not list then cluster_not_found(call) end
  return { nodepools = list }
end

return M
