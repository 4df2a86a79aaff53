/* The node requirements of a pod's volumes (volume_topology.h). */
#include <stdlib.h>
#include <string.h>

#include "controller/nodepool.h"
#include "controller/volume_topology.h"
#include "core/error.h"

#define DEFAULT_CLASS_ANNOTATION "storageclass.kubernetes.io/is-default-class"

static void add_expressions(json_t *out, const json_t *expressions, const char *values_field) {
  size_t i;
  const json_t *expr;
  json_array_foreach(expressions, i, expr) {
    const char *key = json_string_value(json_object_get(expr, "key"));
    const json_t *values = json_object_get(expr, values_field);
    const json_t *op = json_object_get(expr, "operator");
    if (!key) continue;
    json_array_append_new(out,
                          json_pack("{s:s, s:s, s:o}", "key", lp_label_normalized(key), "operator",
                                    json_is_string(op) ? json_string_value(op) : "In", "values",
                                    json_is_array(values) ? json_incref((json_t *)values) : json_array()));
  }
}

typedef struct default_class {
  json_t *found;
} default_class;

static void find_default(const char *key, json_t *sc, void *ud) {
  (void)key;
  default_class *d = ud;
  const char *v = lp_obj_annotation(sc, DEFAULT_CLASS_ANNOTATION);
  if (!d->found && v && strcmp(v, "true") == 0) d->found = sc;
}

/* Adds the allowedTopologies of the class an unbound claim's spec names (or the default class). */
static int class_requirements(lp_ctrl_env *env, const json_t *claim_spec, const char *claim, json_t *out,
                              char **why) {
  const json_t *named = json_object_get(claim_spec, "storageClassName");
  const char *class_name = json_string_value(named);
  json_t *sc = NULL;
  if (class_name && *class_name) {
    sc = lp_env_get(env, LP_KIND_STORAGECLASS, class_name);
    if (!sc) {
      *why = lp_xasprintf("storageclass %s of claim %s not found", class_name, claim);
      return 1;
    }
  } else if (!named || json_is_null(named)) {
    default_class d = {NULL};
    lp_env_each(env, LP_KIND_STORAGECLASS, find_default, &d);
    sc = d.found;
  }
  /* storageClassName "" asks for no class at all: a volume bound by hand, no topology to add */
  if (sc)
    add_expressions(
        out,
        json_object_get(json_array_get(json_object_get(sc, "allowedTopologies"), 0), "matchLabelExpressions"),
        "values");
  return 0;
}

/* Adds the requirements of the claim ns/name (template: a generic ephemeral volume's claim spec, used
 * while its claim is not made yet; may be NULL); returns non-zero, with *why set, when something is
 * missing. */
static int claim_requirements(lp_ctrl_env *env, const char *ns, const char *name, const json_t *template,
                              json_t *out, char **why) {
  char *key = lp_xasprintf("%s/%s", ns, name);
  json_t *pvc = lp_env_get(env, LP_KIND_PVC, key);
  int missing = 0;
  if (!pvc && template) {
    missing = class_requirements(env, template, key, out, why);
  } else if (!pvc) {
    *why = lp_xasprintf("persistentvolumeclaim %s not found", key);
    missing = 1;
  } else {
    const char *volume = lp_obj_str(pvc, "spec.volumeName");
    json_t *pv = volume && *volume ? lp_env_get(env, LP_KIND_PV, volume) : NULL;
    if (volume && *volume && !pv) {
      *why = lp_xasprintf("persistentvolume %s of claim %s not found", volume, key);
      missing = 1;
    } else if (pv) {
      const json_t *terms = lp_obj_get(pv, "spec.nodeAffinity.required.nodeSelectorTerms");
      add_expressions(out, json_object_get(json_array_get(terms, 0), "matchExpressions"), "values");
    } else {
      missing = class_requirements(env, json_object_get(pvc, "spec"), key, out, why);
    }
  }
  free(key);
  return missing;
}

json_t *lp_volume_requirements(lp_ctrl_env *env, const json_t *pod, char **why) {
  *why = NULL;
  const char *ns = lp_obj_str(pod, "metadata.namespace");
  const char *pod_name = lp_obj_name(pod);
  if (!ns || !*ns) ns = "default";
  json_t *out = json_array();
  size_t i;
  const json_t *volume;
  json_array_foreach(lp_obj_get(pod, "spec.volumes"), i, volume) {
    const char *claim = lp_obj_str(volume, "persistentVolumeClaim.claimName");
    const json_t *template = lp_obj_get(volume, "ephemeral.volumeClaimTemplate.spec");
    char *ephemeral = NULL;
    if (!claim && template && pod_name)
      claim = ephemeral = lp_xasprintf("%s-%s", pod_name, lp_obj_str(volume, "name") ?: "");
    int missing = claim && claim_requirements(env, ns, claim, template, out, why);
    free(ephemeral);
    if (missing) {
      json_decref(out);
      return NULL;
    }
  }
  if (json_array_size(out) == 0) {
    json_decref(out);
    return NULL;
  }
  return out;
}
