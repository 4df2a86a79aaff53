/* The engine's own instance tags, set after the tags policy (engine_tags.h). */
#include "contract/engine_tags.h"

#include <stdlib.h>

#include "core/error.h"

static const char *string_at(const json_t *object, const char *a, const char *b) {
  const json_t *v = json_object_get(json_object_get(object, a), b);
  return json_is_string(v) ? json_string_value(v) : "";
}

json_t *lp_engine_tags(const json_t *nodeclaim, const char *cluster_id) {
  char *owned = lp_xasprintf("kubernetes.io/cluster/%s", cluster_id && *cluster_id ? cluster_id : "luaprov");
  const json_t *labels = json_object_get(json_object_get(nodeclaim, "metadata"), "labels");
  const json_t *pool = json_object_get(labels, "karpenter.sh/nodepool");
  json_t *tags = json_pack("{s:s, s:s, s:s}", owned, "owned", "karpenter.sh/nodepool",
                           json_is_string(pool) ? json_string_value(pool) : "", "karpenter.sh/nodeclaim",
                           string_at(nodeclaim, "metadata", "name"));
  free(owned);
  return tags;
}

json_t *lp_tags_with_engine(const json_t *policy_tags, const json_t *nodeclaim, const char *cluster_id) {
  json_t *out = json_is_object(policy_tags) ? json_deep_copy(policy_tags) : json_object();
  json_t *engine = lp_engine_tags(nodeclaim, cluster_id);
  json_object_update(out, engine);
  json_decref(engine);
  return out;
}
