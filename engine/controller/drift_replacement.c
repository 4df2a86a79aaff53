/* The annotations of a drift replacement and what they tell (drift_replacement.h). */
#include "controller/drift_replacement.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"

/* FNV-1a over the NodePool's spec.template serialized with sorted keys: its requirements count too. */
static uint64_t template_digest(const json_t *nodepool) {
  char *text =
      json_dumps(lp_obj_get(nodepool, "spec.template"), JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  uint64_t h = 1469598103934665603ULL;
  for (const char *c = text ? text : ""; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  free(text);
  return h;
}

/* "<node class resourceVersion>/<scripts' digest>/<template digest>" (digests 16 hex digits, malloc'd):
 * what decides drift besides the node itself. The class is only rewritten when it changes, and the
 * digests are of content, so all three hold across restarts. */
static char *inputs(lp_ctrl_env *env, const json_t *nodeclass, const json_t *nodepool) {
  const char *rv = nodeclass ? lp_obj_resource_version(nodeclass) : NULL;
  return lp_xasprintf("%s/%016" PRIx64 "/%016" PRIx64, rv ? rv : "",
                      lp_cloudprovider_script_digest(lp_env_cloud(env)), template_digest(nodepool));
}

void lp_drift_stamp_replacement(lp_ctrl_env *env, json_t *replacement, const json_t *candidate,
                                const json_t *nodepool) {
  const char *reason = json_string_value(json_object_get(lp_condition_get(candidate, "Drifted"), "reason"));
  if (!reason) return;
  json_t *annotations = json_object_get(json_object_get(replacement, "metadata"), "annotations");
  char *under = inputs(env, lp_env_nodeclass_of(env, lp_obj_get(replacement, "spec.nodeClassRef")), nodepool);
  json_object_set_new(annotations, LP_REPLACED_FOR_ANNOTATION, json_string(reason));
  json_object_set_new(annotations, LP_REPLACED_UNDER_ANNOTATION, json_string(under));
  free(under);
}

int lp_drift_unresolvable(lp_ctrl_env *env, const json_t *claim, const json_t *nodeclass,
                          const json_t *nodepool, const char *reason) {
  const char *made_for = lp_obj_annotation(claim, LP_REPLACED_FOR_ANNOTATION);
  const char *made_under = lp_obj_annotation(claim, LP_REPLACED_UNDER_ANNOTATION);
  if (!reason || !made_for || !made_under || strcmp(made_for, reason) != 0) return 0;
  char *now = inputs(env, nodeclass, nodepool);
  int same = strcmp(now, made_under) == 0;
  free(now);
  return same;
}
