/* The engine's own instance tags (rule CP7 in docs/contracts.md#policies): the tags the engine adds
 * after the tags policy, whatever the policy returned. A policy may add tags; it cannot remove or
 * override these: garbage collection finds the cluster's instances by kubernetes.io/cluster/<id>=owned
 * and a repeated create finds its instance by karpenter.sh/nodeclaim. */
#ifndef LUAPROV_CONTRACT_ENGINE_TAGS_H
#define LUAPROV_CONTRACT_ENGINE_TAGS_H

#include <jansson.h>

/* {kubernetes.io/cluster/<cluster_id>: "owned", karpenter.sh/nodepool: the NodeClaim's nodepool label
 * (or ""), karpenter.sh/nodeclaim: its name}. Returns a new reference. */
json_t *lp_engine_tags(const json_t *nodeclaim, const char *cluster_id);

/* The policy's tags (a map, or an empty array for an empty Lua table, or NULL) with the engine's tags
 * set over them. Returns a new reference. */
json_t *lp_tags_with_engine(const json_t *policy_tags, const json_t *nodeclaim, const char *cluster_id);

#endif
