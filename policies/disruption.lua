-- Disruption policy: asked by the disruption controller before it voluntarily disrupts a node
-- (emptiness, consolidation, drift; docs/contracts.md#policies). It never sees forced disruption
-- (expiry, interruption, repair, deletion). The engine asks it for every candidate node, so it must be
-- cheap and must not call the cloud: everything it needs is in its arguments.
--
--   can_disrupt(nodeclaim, node, pods, ctx) -> true | false, why
--
-- nodeclaim and node are the objects as the API server holds them (node is luaprov.json.null while the
-- node has not registered), pods the list of the pods bound to the node, and ctx
--   { reason = "Empty" | "Underutilized" | "Drifted", nodepool = "<name>", now = <epoch seconds>,
--     method = "emptiness" | "drift" | "multi-node consolidation" | "single-node consolidation" }
-- ctx.now is wall-clock time: os.date("*t", ctx.now) gives the local hour.
--
-- true lets the disruption go ahead. false keeps the node, and the engine records why (an event on the
-- NodeClaim); it asks again on a later pass. Raising, running out of budget or returning anything else
-- also keeps the node, and the error names this file.
--
-- The default allows everything, as Karpenter does. To never consolidate a node that runs a pod of
-- namespace payments between 09:00 and 18:00 (local time), replace the function below with:
--
--   M.can_disrupt = M.protect_namespace("payments", 9, 18)
--
-- or build on it in a policy of your own (policies/disruption.lua in your script tree):
--
--   local default = require "defaults.policies.disruption"
--   local M = {}
--   local payments = default.protect_namespace("payments", 9, 18)
--   function M.can_disrupt(nodeclaim, node, pods, ctx)
--     if ctx.nodepool == "batch" then return true end
--     return payments(nodeclaim, node, pods, ctx)
--   end
--   return M
local M = {}

-- The reasons that mean consolidation (the cluster is cheaper without the node) rather than drift.
M.CONSOLIDATION_REASONS = { Empty = true, Underutilized = true }

-- The first pod of namespace in pods, or nil.
function M.pod_in_namespace(pods, namespace)
  for _, pod in ipairs(pods or {}) do
    local metadata = type(pod) == "table" and pod.metadata
    if metadata and metadata.namespace == namespace then return pod end
  end
  return nil
end

-- Whether the local hour of epoch seconds now is in [from_hour, to_hour).
function M.within_hours(now, from_hour, to_hour)
  local hour = os.date("*t", math.floor(now)).hour
  return hour >= from_hour and hour < to_hour
end

-- A can_disrupt that vetoes consolidating a node running a pod of namespace while the local time is
-- between from_hour:00 and to_hour:00; drift and every other node go ahead.
function M.protect_namespace(namespace, from_hour, to_hour)
  return function(_nodeclaim, _node, pods, ctx)
    if not M.CONSOLIDATION_REASONS[ctx.reason] then return true end
    local pod = M.pod_in_namespace(pods, namespace)
    if not pod or not M.within_hours(ctx.now, from_hour, to_hour) then return true end
    return false,
      string.format(
        "the node runs pod %s/%s and %s nodes are not consolidated between %02d:00 and %02d:00",
        namespace,
        pod.metadata.name or "?",
        namespace,
        from_hour,
        to_hour
      )
  end
end

function M.can_disrupt(_nodeclaim, _node, _pods, _ctx)
  return true
end

return M
