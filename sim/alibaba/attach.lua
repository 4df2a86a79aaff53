-- The ACK attach script of the simulated account's clusters: what the Container Service's
-- DescribeClusterAttachScripts answers for a cluster, and the token that ties a node to it. The
-- simulated kubelet registers a Node only for an instance whose user data runs this script for a
-- cluster the account has (see parse, added with the kubelet's check).
--   CLUSTERS                      cluster ID -> {kubernetes_version}
--   token(cluster_id) -> the --openapi-token of the cluster's attach command
--   script(cluster_id, format_disk) -> the one-line attach command, or nil when there is no such cluster
local luaprov = require "luaprov"
local account = require "sim.alibaba.account"
local catalogue = require "sim.alibaba.catalogue"

local M = {}

M.CLUSTERS = { [account.CLUSTER] = { kubernetes_version = "1.31.1-aliyun.1" } }

function M.token(cluster_id)
  return luaprov.crypto.sha256_hex("luaprov-sim attach " .. cluster_id):sub(1, 32)
end

function M.script(cluster_id, format_disk)
  local cluster = M.CLUSTERS[cluster_id]
  if not cluster then return nil end
  local region = catalogue.REGION
  return ("curl -fsSL http://aliacs-k8s-%s.oss-%s.aliyuncs.com/public/pkg/run/attach/%s/attach_node.sh"
    .. " | bash -s -- --openapi-token %s --ess true --auto-drain false%s")
    :format(region, region, cluster.kubernetes_version, M.token(cluster_id), format_disk and " --format-disk" or "")
end

return M
