/* The annotations of a drift replacement and what they tell (drift_replacement.h). */
#include "controller/drift_replacement.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"

/* "<node class resourceVersion>/<scripts' digest, 16 hex digits>" (malloc'd): what decides a Lua drift
 * reason besides the node itself. The class is only rewritten when it changes, and the digest is of the
 * files' content, so both hold across restarts. */
static char *inputs(lp_ctrl_env *env, const json_t *nodeclass) {
  const char *rv = nodeclass ? lp_obj_resource_version(nodeclass) : NULL;
  return lp_xasprintf("%s/%016" PRIx64, rv ? rv : "", lp_cloudprovider_script_digest(lp_env_cloud(env)));
}

void lp_drift_stamp_replacement(lp_ctrl_env *env, json_t *replacement, const json_t *candidate) {
  const char *reason = json_string_value(json_object_get(lp_condition_get(candidate, "Drifted"), "reason"));
  if (!reason) return;
  json_t *annotations = json_object_get(json_object_get(replacement, "metadata"), "annotations");
  char *under = inputs(env, lp_env_nodeclass_of(env, lp_obj_get(replacement, "spec.nodeClassRef")));
  json_object_set_new(annotations, LP_REPLACED_FOR_ANNOTATION, json_string(reason));
  json_object_set_new(annotations, LP_REPLACED_UNDER_ANNOTATION, json_string(under));
  free(under);
}

int lp_drift_unresolvable(lp_ctrl_env *env, const json_t *claim, const json_t *nodeclass,
                          const char *reason) {
  const char *made_for = lp_obj_annotation(claim, LP_REPLACED_FOR_ANNOTATION);
  const char *made_under = lp_obj_annotation(claim, LP_REPLACED_UNDER_ANNOTATION);
  if (!reason || !made_for || !made_under || strcmp(made_for, reason) != 0) return 0;
  char *now = inputs(env, nodeclass);
  int same = strcmp(now, made_under) == 0;
  free(now);
  return same;
}
