-- Tag policy: the tags every launched ECS instance carries (rule CP7 in docs/contracts.md). The
-- ECSNodeClass's own spec.tags come first and the engine's tags win over them: garbage collection finds
-- the cluster's instances by `kubernetes.io/cluster/<cluster-id>=owned`, so no class may change those.
local M = {}

local function labels(object)
  return (object and object.metadata and object.metadata.labels) or {}
end

function M.engine_tags(nodeclaim, nodeclass, ctx)
  return {
    ["kubernetes.io/cluster/" .. ctx.cluster_id] = "owned",
    ["karpenter.sh/nodepool"] = labels(nodeclaim)["karpenter.sh/nodepool"] or "",
    ["karpenter.sh/nodeclaim"] = nodeclaim.metadata.name,
    ["karpenter.k8s.alibabacloud/ecsnodeclass"] = nodeclass.metadata.name,
    ["ecs:ecs-cluster-id"] = ctx.cluster_id,
  }
end

function M.build_instance_tags(nodeclaim, nodeclass, ctx)
  local tags = {}
  for key, value in pairs((nodeclass.spec and nodeclass.spec.tags) or {}) do tags[key] = value end
  for key, value in pairs(M.engine_tags(nodeclaim, nodeclass, ctx)) do tags[key] = value end
  return tags
end

return M
