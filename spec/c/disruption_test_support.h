/* Helpers for the disruption controller's tests (spec/c/test_controller_disruption*.c), on top of the
 * controller fixture: the NodePool "web" whose nodes they drift (its budgets, its template's "gen"
 * label) and its NodeClaims. Header-only: each test is its own executable. */
#ifndef LUAPROV_SPEC_DISRUPTION_TEST_SUPPORT_H
#define LUAPROV_SPEC_DISRUPTION_TEST_SUPPORT_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller/disruption_internal.h"
#include "controller/nodepool.h"
#include "controller_fixture.h"

#define DT_CLAIMS "/apis/karpenter.sh/v1/nodeclaims"
#define DT_POOLS  "/apis/karpenter.sh/v1/nodepools"
#define DT_POOL   "web"

/* The NodePool DT_POOL on the ECSNodeClass "default", template label gen=1, one Drifted budget of
 * nodes (e.g. "1"). */
static inline void dt_nodepool(ctrl_fixture *f, const char *nodes) {
  CHECK_INT(
      ctrl_kube_pack(f, "POST", DT_POOLS,
                     "{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}, "
                     "s:{s:[{s:s}]}}}",
                     "apiVersion", "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", DT_POOL, "spec",
                     "template", "metadata", "labels", "gen", "1", "spec", "nodeClassRef", "group",
                     "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default", "requirements",
                     "key", "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand",
                     "disruption", "budgets", "nodes", nodes),
      201);
}

/* Merge-patches the object at path with body (stolen). */
static inline void dt_patch_pool_path(ctrl_fixture *f, const char *path, json_t *body) {
  char *text = json_dumps(body, JSON_COMPACT);
  long status = 0;
  json_decref(ctrl_kube(f, "PATCH", path, text, &status));
  CHECK_INT(status, 200);
  free(text);
  json_decref(body);
}

/* Merge-patches the NodePool with body (stolen). */
static inline void dt_patch_pool(ctrl_fixture *f, json_t *body) {
  dt_patch_pool_path(f, DT_POOLS "/" DT_POOL, body);
}

/* spec.disruption.budgets (JSON text); a change of the NodePool starts a disruption pass at once. */
static inline void dt_set_budgets(ctrl_fixture *f, const char *budgets) {
  dt_patch_pool(f, json_pack("{s:{s:{s:o}}}", "spec", "disruption", "budgets", json_loads(budgets, 0, NULL)));
}

/* A new template "gen" label: every NodeClaim made before drifts (NodePoolDrifted). */
static inline void dt_set_generation(ctrl_fixture *f, const char *gen) {
  dt_patch_pool(f, json_pack("{s:{s:{s:{s:{s:s}}}}}", "spec", "template", "metadata", "labels", "gen", gen));
}

/* Whether the Node named name carries karpenter.sh/disrupted:NoSchedule (0 when it is gone). */
static inline int dt_node_tainted(ctrl_fixture *f, const char *name) {
  char path[256];
  snprintf(path, sizeof path, "/api/v1/nodes/%s", name ? name : "");
  json_t *node = ctrl_get(f, path);
  int tainted = node && dz_node_disrupted(node);
  json_decref(node);
  return tainted;
}

/* A NodeClaim as the provisioner makes them: the template's labels and the pool's current hash; its
 * requirements also hold extra (a requirement object, stolen) unless NULL. */
static inline void dt_post_claim_with(ctrl_fixture *f, const char *name, json_t *extra) {
  json_t *pool = ctrl_get(f, DT_POOLS "/" DT_POOL);
  char hash[17];
  lp_nodepool_hash(pool, hash);
  const char *gen = lp_obj_str(pool, "spec.template.metadata.labels.gen");
  json_t *claim =
      json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}, s:{s:s, s:s}}, s:{s:{s:s, s:s, s:s}, "
                "s:[{s:s, s:s, s:[s]}], s:{s:{s:s}}}}",
                "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name, "labels",
                "karpenter.sh/nodepool", DT_POOL, "gen", gen, "annotations", LP_NODEPOOL_HASH_ANNOTATION,
                hash, LP_NODEPOOL_HASH_VERSION_ANNOTATION, LP_NODEPOOL_HASH_VERSION, "spec", "nodeClassRef",
                "group", "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default",
                "requirements", "key", "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand",
                "resources", "requests", "cpu", "1");
  if (extra) json_array_append_new(json_object_get(json_object_get(claim, "spec"), "requirements"), extra);
  CHECK_INT(ctrl_kube_pack(f, "POST", DT_CLAIMS, "o", claim), 201);
  json_decref(pool);
}

static inline void dt_post_claim(ctrl_fixture *f, const char *name) {
  dt_post_claim_with(f, name, NULL);
}

/* The NodeClaim named name from the API (caller decrefs), or NULL. */
static inline json_t *dt_claim(ctrl_fixture *f, const char *name) {
  char path[256];
  snprintf(path, sizeof path, DT_CLAIMS "/%s", name);
  return ctrl_get(f, path);
}

/* The pool's NodeClaims from the API, a new array. */
static inline json_t *dt_pool_claims(ctrl_fixture *f) {
  json_t *list = ctrl_get(f, DT_CLAIMS "?labelSelector=karpenter.sh%2Fnodepool%3D" DT_POOL);
  json_t *items = json_incref(json_object_get(list, "items"));
  json_decref(list);
  return items;
}

static inline const char *dt_annotation(const json_t *obj, const char *key) {
  return json_string_value(
      json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), key));
}

/* A ctrl_wait_for condition: every NodeClaim of the pool Initialized, and *(const int *)ud of them. */
static inline int dt_pool_initialized(ctrl_fixture *f, const void *ud) {
  json_t *items = dt_pool_claims(f);
  size_t i, ready = 0;
  json_t *c;
  json_array_foreach(items, i, c) ready += lp_condition_is(c, "Initialized", "True");
  int ok = json_array_size(items) == (size_t) * (const int *)ud && ready == json_array_size(items);
  json_decref(items);
  return ok;
}

/* A ctrl_wait_for condition: the NodeClaim named name (a const char *) is NodePoolDrifted and a
 * disruption pass held it back (DisruptionBlocked): the controller's cache shows it drifted. */
static inline int dt_blocked(ctrl_fixture *f, const void *name) {
  return ctrl_has_event(f, name, "DisruptionBlocked") &&
         ctrl_claim_condition(f, name, "Drifted", "True", "NodePoolDrifted");
}

/* Writes Consolidatable=True into the NodeClaim's status, as the controller that watches its pods does
 * once consolidateAfter passed without a pod event. */
static inline void dt_mark_consolidatable(ctrl_fixture *f, const char *name) {
  json_t *claim = dt_claim(f, name);
  CHECK(claim != NULL);
  json_t *conditions = json_deep_copy(lp_obj_get(claim, "status.conditions"));
  if (!json_is_array(conditions)) {
    json_decref(conditions);
    conditions = json_array();
  }
  json_array_append_new(conditions, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "Consolidatable", "status",
                                              "True", "reason", "Consolidatable", "message", "",
                                              "lastTransitionTime", "2026-01-01T00:00:00Z"));
  char path[256];
  snprintf(path, sizeof path, DT_CLAIMS "/%s/status", name);
  json_t *body = json_pack("{s:{s:o}}", "status", "conditions", conditions);
  char *text = json_dumps(body, JSON_COMPACT);
  long status = 0;
  json_decref(ctrl_kube(f, "PATCH", path, text, &status));
  CHECK_INT(status, 200);
  free(text);
  json_decref(body);
  json_decref(claim);
}

/* A ctrl_wait_for condition: the controller's cache shows the NodeClaim named name (a const char *)
 * Consolidatable=True. */
static inline int dt_consolidatable_cached(ctrl_fixture *f, const void *name) {
  return lp_condition_is(lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODECLAIM, name),
                         "Consolidatable", "True");
}

/* Two (object, reason) pairs dt_has_events waits for. */
typedef struct dt_events {
  const char *name1, *reason1, *name2, *reason2;
} dt_events;

/* A ctrl_wait_for condition: both Events of ud (a dt_events) are recorded. */
static inline int dt_has_events(ctrl_fixture *f, const void *ud) {
  const dt_events *e = ud;
  return ctrl_has_event(f, e->name1, e->reason1) && ctrl_has_event(f, e->name2, e->reason2);
}

#endif
