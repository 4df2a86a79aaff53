/* Helpers for the provisioner's tests (spec/c/test_controller_provisioner*.c), on top of the controller
 * fixture: pending pods, NodePools, the NodeClaims the provisioner computed (found through the
 * Nominated event it records on each pod) and cleaning up between cases. Header-only: each test is
 * its own executable. */
#ifndef LUAPROV_SPEC_PROVISIONER_TEST_SUPPORT_H
#define LUAPROV_SPEC_PROVISIONER_TEST_SUPPORT_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider.h"
#include "contract/requirements.h"
#include "controller_fixture.h"

#define PT_PODS       "/api/v1/namespaces/default/pods"
#define PT_CLAIMS     "/apis/karpenter.sh/v1/nodeclaims"
#define PT_NODEPOOLS  "/apis/karpenter.sh/v1/nodepools"
#define PT_DAEMONSETS "/apis/apps/v1/namespaces/default/daemonsets"
#define PT_NOMINATED  "Pod should schedule on: nodeclaim/"

static inline long pt_post(ctrl_fixture *f, const char *path, json_t *obj) {
  char *body = json_dumps(obj, JSON_COMPACT);
  long status = 0;
  json_decref(ctrl_kube(f, "POST", path, body, &status));
  free(body);
  json_decref(obj);
  return status;
}

/* A pod in namespace default with one container requesting cpu and memory; spec_extra (stolen, may
 * be NULL) is merged into its spec (nodeSelector, affinity, tolerations, schedulerName, ...). */
static inline long pt_pod(ctrl_fixture *f, const char *name, const char *cpu, const char *memory,
                          json_t *spec_extra) {
  json_t *pod =
      json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:[{s:s, s:s, s:{s:{s:s, s:s}}}]}}", "apiVersion", "v1", "kind",
                "Pod", "metadata", "name", name, "namespace", "default", "spec", "containers", "name", "app",
                "image", "nginx", "resources", "requests", "cpu", cpu, "memory", memory);
  if (spec_extra) json_object_update(json_object_get(pod, "spec"), spec_extra);
  json_decref(spec_extra);
  return pt_post(f, PT_PODS, pod);
}

/* A NodePool on the ECSNodeClass "default" with weight (0: none); template_extra (stolen, may be NULL)
 * is merged into spec.template.spec, metadata (may be NULL) is spec.template.metadata, limits (may be
 * NULL) spec.limits. */
static inline long pt_nodepool(ctrl_fixture *f, const char *name, int weight, json_t *template_extra,
                               json_t *metadata, json_t *limits) {
  json_t *pool = json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}}}",
                           "apiVersion", "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", name,
                           "spec", "template", "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com",
                           "kind", "ECSNodeClass", "name", "default", "requirements", "key",
                           "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand");
  json_t *spec = json_object_get(pool, "spec");
  json_t *tmpl = json_object_get(spec, "template");
  if (weight) json_object_set_new(spec, "weight", json_integer(weight));
  if (template_extra) json_object_update(json_object_get(tmpl, "spec"), template_extra);
  json_decref(template_extra);
  if (metadata) json_object_set_new(tmpl, "metadata", metadata);
  if (limits) json_object_set_new(spec, "limits", limits);
  return pt_post(f, PT_NODEPOOLS, pool);
}

/* The message of the newest Event with reason about the pod (or object) name, malloc'd, or NULL. */
static inline char *pt_event(ctrl_fixture *f, const char *name, const char *reason) {
  json_t *list = ctrl_get(f, "/api/v1/namespaces/default/events");
  char *found = NULL;
  size_t i;
  json_t *ev;
  json_array_foreach(json_object_get(list, "items"), i, ev) {
    const char *who = lp_obj_str(ev, "involvedObject.name");
    const char *why = json_string_value(json_object_get(ev, "reason"));
    if (!who || !why || strcmp(who, name) != 0 || strcmp(why, reason) != 0) continue;
    free(found);
    found = strdup(json_string_value(json_object_get(ev, "message")) ?: "");
  }
  json_decref(list);
  return found;
}

/* The NodeClaim the pod was nominated for (malloc'd name), or NULL. */
static inline char *pt_nominated(ctrl_fixture *f, const char *pod) {
  char *msg = pt_event(f, pod, "Nominated");
  char *name = msg && strncmp(msg, PT_NOMINATED, strlen(PT_NOMINATED)) == 0
                   ? strdup(msg + strlen(PT_NOMINATED))
                   : NULL;
  free(msg);
  return name;
}

static inline int pt_is_nominated(ctrl_fixture *f, const void *pod) {
  char *name = pt_nominated(f, pod);
  free(name);
  return name != NULL;
}

/* Waits up to 10 s for the pod's nomination; the NodeClaim (caller decrefs), or NULL. */
static inline json_t *pt_claim_of(ctrl_fixture *f, const char *pod) {
  if (!ctrl_wait_for(f, 10, pt_is_nominated, pod)) return NULL;
  char *name = pt_nominated(f, pod);
  char path[256];
  snprintf(path, sizeof path, PT_CLAIMS "/%s", name);
  free(name);
  return ctrl_get(f, path);
}

/* The values of the claim's requirement on key (borrowed), or NULL. */
static inline const json_t *pt_values(const json_t *claim, const char *key) {
  size_t i;
  const json_t *req;
  json_array_foreach(json_object_get(json_object_get(claim, "spec"), "requirements"), i, req) {
    if (strcmp(json_string_value(json_object_get(req, "key")) ?: "", key) == 0)
      return json_object_get(req, "values");
  }
  return NULL;
}

/* Non-zero when values (a JSON array) holds exactly a, or exactly a and b (b not NULL), in any order. */
static inline int pt_values_are(const json_t *values, const char *a, const char *b) {
  size_t n = json_array_size(values);
  if (n != (b ? 2u : 1u)) return 0;
  for (size_t i = 0; i < n; i++) {
    const char *v = json_string_value(json_array_get(values, i));
    if (!v || (strcmp(v, a) != 0 && (!b || strcmp(v, b) != 0))) return 0;
  }
  return 1;
}

/* Marks the pod name Unschedulable, as a scheduler that could not place it would; the HTTP status. */
static inline long pt_mark_unschedulable(ctrl_fixture *f, const char *name) {
  char path[256];
  snprintf(path, sizeof path, PT_PODS "/%s/status", name);
  return ctrl_kube_pack(f, "PATCH", path, "{s:{s:[{s:s, s:s, s:s}]}}", "status", "conditions", "type",
                        "PodScheduled", "status", "False", "reason", "Unschedulable");
}

/* A NodeClaim's request of resource, as stored ("1500m"), borrowed. */
static inline const char *pt_request(const json_t *claim, const char *resource) {
  const json_t *requests =
      json_object_get(json_object_get(json_object_get(claim, "spec"), "resources"), "requests");
  return json_string_value(json_object_get(requests, resource));
}

/* NodeClaims not being deleted, of nodepool (NULL: any). */
static inline size_t pt_claims(ctrl_fixture *f, const char *nodepool) {
  json_t *list = ctrl_get(f, PT_CLAIMS);
  size_t n = 0, i;
  json_t *claim;
  json_array_foreach(json_object_get(list, "items"), i, claim) {
    const char *pool = json_string_value(json_object_get(
        json_object_get(json_object_get(claim, "metadata"), "labels"), "karpenter.sh/nodepool"));
    n += !lp_obj_deleting(claim) && (!nodepool || (pool && strcmp(pool, nodepool) == 0));
  }
  json_decref(list);
  return n;
}

/* The provisioner's passes so far (reconciles ended, whatever the result). */
static inline double pt_passes(ctrl_fixture *f) {
  static const char *const results[] = {"success", "error", "requeue"};
  double n = 0;
  for (size_t i = 0; i < 3; i++)
    n += ctrl_metric(f, "luaprov_controller_reconciles_total", LP_LABELS("provisioner", results[i]));
  return n;
}

static inline void pt_delete_all(ctrl_fixture *f, const char *collection, const char *keep) {
  json_t *list = ctrl_get(f, collection);
  size_t i;
  json_t *obj;
  json_array_foreach(json_object_get(list, "items"), i, obj) {
    const char *name = lp_obj_name(obj);
    if (!name || (keep && strcmp(name, keep) == 0)) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", collection, name);
    ctrl_kube_pack(f, "DELETE", path, NULL);
  }
  json_decref(list);
}

/* A PersistentVolume pv whose node affinity requires zone, and the claim (namespace default) bound to it. */
static inline void pt_bound_volume(ctrl_fixture *f, const char *pv, const char *claim, const char *zone) {
  CHECK_INT(pt_post(f, "/api/v1/persistentvolumes",
                    json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:[{s:[{s:s, s:s, s:[s]}]}]}}}}", "apiVersion",
                              "v1", "kind", "PersistentVolume", "metadata", "name", pv, "spec",
                              "nodeAffinity", "required", "nodeSelectorTerms", "matchExpressions", "key",
                              LP_LABEL_ZONE, "operator", "In", "values", zone)),
            201);
  CHECK_INT(pt_post(f, "/api/v1/namespaces/default/persistentvolumeclaims",
                    json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind",
                              "PersistentVolumeClaim", "metadata", "name", claim, "spec", "volumeName", pv)),
            201);
}

/* Pods, NodeClaims, DaemonSets and every NodePool but "default" deleted; the manager's caches given a
 * moment to see it. */
static inline void pt_cleanup(ctrl_fixture *f) {
  pt_delete_all(f, PT_PODS, NULL);
  pt_delete_all(f, PT_CLAIMS, NULL);
  pt_delete_all(f, PT_DAEMONSETS, NULL);
  pt_delete_all(f, PT_NODEPOOLS, "default");
  pt_delete_all(f, "/api/v1/nodes", NULL);
  ctrl_run_for(f, 0.3);
}

static inline int pt_class_ready(ctrl_fixture *f, const void *name) {
  return lp_condition_is(lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODECLASS, name), "Ready",
                         "True");
}

/* The instance types of the ECSNodeClass "default" as the provisioner sees them (caller decrefs). */
static inline json_t *pt_instance_types(ctrl_fixture *f) {
  lp_cp_outcome o = {0};
  lp_cp_get_instance_types(f->cloud, lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODECLASS, "default"),
                           lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&f->loop, &o);
  lp_error_free(o.error);
  return o.value;
}

/* The capacity of resource of the instance type name in types (a quantity parsed), or -1. */
static inline double pt_type_capacity(const json_t *types, const char *name, const char *resource) {
  size_t i;
  const json_t *t;
  json_array_foreach(types, i, t) {
    if (strcmp(json_string_value(json_object_get(t, "name")) ?: "", name) != 0) continue;
    double q = -1;
    lp_quantity_parse(json_string_value(json_object_get(json_object_get(t, "capacity"), resource)), &q);
    return q;
  }
  return -1;
}

#endif
