-- Shared by the simulator specs that launch instances themselves (not through the provider): user
-- data that runs the simulated cluster's ACK attach command (sim.alibaba.attach.script), with the
-- labels, taints and maxPods a test wants, in the shape the provider writes (docs/sim.md): with the
-- runtime the cluster's node pools run, as the provider corrects the script.
--   line(opts) -> the attach command line; text(opts) -> the script; base64(opts) -> RunInstances' UserData
--   opts: cluster (default the account's), labels {k = v}, taints {"k=v:Effect", ...}, max_pods,
--         mime (a MIME multipart archive instead of a plain script)
local luaprov = require "luaprov"
local account = require "sim.alibaba.account"
local attach = require "sim.alibaba.attach"

local M = {}

function M.line(opts)
  opts = opts or {}
  local cluster = opts.cluster or account.CLUSTER
  local labels = { "k8s.aliyun.com=true", "ack.aliyun.com=" .. cluster }
  local extra = {}
  for k, v in pairs(opts.labels or {}) do extra[#extra + 1] = k .. "=" .. v end
  table.sort(extra)
  for _, l in ipairs(extra) do labels[#labels + 1] = l end
  local known = attach.CLUSTERS[cluster]
  local line = assert(attach.script(cluster, false, known and known.runtime), cluster)
    .. " --labels " .. table.concat(labels, ",")
  if opts.max_pods then
    line = line .. " --node-config "
      .. luaprov.crypto.base64_encode(luaprov.json.encode({ kubelet_config = { maxPods = opts.max_pods } }))
  end
  if opts.taints and #opts.taints > 0 then line = line .. " --taints " .. table.concat(opts.taints, ",") end
  return line
end

function M.text(opts)
  local script = "#!/bin/bash\n\n" .. M.line(opts) .. "\n"
  if not (opts and opts.mime) then return script end
  return table.concat({ 'MIME-Version: 1.0', 'Content-Type: multipart/mixed; boundary="//"', '',
    '--//', 'Content-Type: text/cloud-config; charset="us-ascii"', '', '#cloud-config', 'timezone: Asia/Shanghai',
    '--//', 'Content-Type: text/x-shellscript; charset="us-ascii"', '', script, '--//--', '' }, "\n")
end

function M.base64(opts) return luaprov.crypto.base64_encode(M.text(opts)) end

return M
