/* Garbage collection (engine/controller/gc.c) through the real manager, the Alibaba mapping and the
 * simulators over HTTP: an instance launched for no NodeClaim is released once older than the grace
 * period; one whose NodeClaim exists (by name or by providerID) is kept; a registered NodeClaim whose
 * instance was deleted behind its back goes unless its Node is Ready; an unregistered one stays; and a
 * failing instance list deletes nothing and is retried. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/shapes.h"
#include "controller_fixture.h"

#define NODECLAIMS   "/apis/karpenter.sh/v1/nodeclaims"
#define LEAK_GRACE_S 1.5

static ctrl_fixture fx;
static json_t *nodeclass; /* resolved and Ready, for lp_cp_create */
static const lp_controller_def *const gc_only[] = {&lp_gc_controller, NULL};

/* ---- helpers ------------------------------------------------------------------------------ */

static json_t *await(ctrl_fixture *f, lp_cp_outcome *o) {
  lp_cp_outcome_wait(&f->loop, o);
  if (o->error) fprintf(stderr, "  (%s: %s)\n", o->error->code, o->error->message);
  lp_error_free(o->error);
  return o->value;
}

/* Launches an instance for a NodeClaim named name (which is not persisted); returns its provider ID
 * (malloc'd) or NULL. Simulated time moves on so the instance is Running (deletable). */
static char *launch(ctrl_fixture *f, const char *name) {
  char uid[64];
  snprintf(uid, sizeof uid, "uid-%s", name);
  json_t *claim = json_pack(
      "{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}], s:{s:{s:s, s:s}}}}",
      "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name, "uid", uid, "labels",
      "karpenter.sh/nodepool", "default", "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com",
      "kind", "ECSNodeClass", "name", "default", "requirements", "key", "karpenter.sh/capacity-type",
      "operator", "In", "values", "on-demand", "resources", "requests", "cpu", "1", "memory", "2Gi");
  lp_cp_outcome o = {0};
  lp_cp_create(f->cloud, claim, nodeclass, lp_cp_outcome_store, &o);
  json_t *created = await(f, &o);
  json_decref(claim);
  const char *pid = lp_obj_str(created, "status.providerID");
  char *out = pid ? strdup(pid) : NULL;
  json_decref(created);
  CHECK(out != NULL);
  ctrl_advance(f, 30);
  return out;
}

/* Deletes the instance behind the NodeClaim's back, as a spot reclaim or an operator would. */
static void delete_instance(ctrl_fixture *f, const char *provider_id) {
  json_t *claim = json_pack("{s:{s:s}, s:{s:s}}", "metadata", "name", "behind-the-back", "status",
                            "providerID", provider_id);
  lp_cp_outcome o = {0};
  lp_cp_delete(f->cloud, claim, lp_cp_outcome_store, &o);
  json_t *v = await(f, &o);
  CHECK(json_is_true(v));
  json_decref(v);
  json_decref(claim);
}

static int instance_gone(ctrl_fixture *f, const void *ud) {
  return !ctrl_instance_exists(f, ud);
}

/* A NodeClaim with status.providerID (when given) and, when registered, Registered=True. */
static void create_nodeclaim(ctrl_fixture *f, const char *name, const char *provider_id, int registered) {
  char body[1024];
  snprintf(
      body, sizeof body,
      "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodeClaim\",\"metadata\":{\"name\":\"%s\","
      "\"labels\":{\"karpenter.sh/nodepool\":\"default\"}},\"spec\":{\"nodeClassRef\":{\"group\":"
      "\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"name\":\"default\"},\"requirements\":[]}}",
      name);
  long status = 0;
  json_decref(ctrl_kube(f, "POST", NODECLAIMS, body, &status));
  CHECK_INT(status, 201);
  if (!provider_id) return;
  char path[256];
  snprintf(path, sizeof path, NODECLAIMS "/%s/status", name);
  snprintf(body, sizeof body,
           "{\"status\":{\"providerID\":\"%s\",\"conditions\":[{\"type\":\"Launched\",\"status\":\"True\","
           "\"reason\":\"Launched\",\"lastTransitionTime\":\"2026-11-30T04:00:00Z\"}%s]}}",
           provider_id,
           registered ? ",{\"type\":\"Registered\",\"status\":\"True\",\"reason\":\"Registered\","
                        "\"lastTransitionTime\":\"2026-11-30T04:01:00Z\"}"
                      : "");
  json_decref(ctrl_kube(f, "PATCH", path, body, &status));
  CHECK_INT(status, 200);
}

/* The Node the simulated kubelet registered for the instance, once the manager's cache has it. */
static int node_cached(ctrl_fixture *f, const void *provider_id) {
  return lp_env_index_first(lp_controllers_env(f->manager), LP_INDEX_NODE_BY_PROVIDER_ID, provider_id,
                            NULL) != NULL;
}

static const char *kubelet_node(ctrl_fixture *f, const char *provider_id) {
  CHECK(ctrl_wait_for(f, 5, node_cached, provider_id));
  return lp_obj_name(
      lp_env_index_first(lp_controllers_env(f->manager), LP_INDEX_NODE_BY_PROVIDER_ID, provider_id, NULL));
}

static long nodeclaim_status(ctrl_fixture *f, const char *name) {
  char path[256];
  snprintf(path, sizeof path, NODECLAIMS "/%s", name);
  long status = 0;
  json_decref(ctrl_kube(f, "GET", path, NULL, &status));
  return status;
}

static int nodeclaim_gone(ctrl_fixture *f, const void *ud) {
  return nodeclaim_status(f, ud) == 404;
}

/* The manager's cache has a NodeClaim with this providerID. */
static int nodeclaim_cached(ctrl_fixture *f, const void *provider_id) {
  return lp_env_index_first(lp_controllers_env(f->manager), LP_INDEX_NODECLAIM_BY_PROVIDER_ID, provider_id,
                            NULL) != NULL;
}

static double gc_passes(ctrl_fixture *f, const char *result) {
  return ctrl_metric(f, "luaprov_controller_reconciles_total", LP_LABELS("garbagecollection", result));
}

/* ---- leaked instances --------------------------------------------------------------------- */

static void test_leaked_instance_released(void) {
  ctrl_fixture *f = &fx;
  double deleted = ctrl_metric(f, "luaprov_gc_instances_deleted_total", NULL);
  char *pid = launch(f, "leaked-1");
  if (!pid) return;
  /* within the grace period it stays: the launch may not have persisted its NodeClaim yet */
  ctrl_run_for(f, 0.5);
  CHECK(ctrl_instance_exists(f, pid));
  CHECK(ctrl_wait_for(f, 10, instance_gone, pid));
  CHECK_INT(ctrl_metric(f, "luaprov_gc_instances_deleted_total", NULL), deleted + 1);
  free(pid);
}

static void test_owned_instances_kept(void) {
  ctrl_fixture *f = &fx;
  /* by name: the NodeClaim exists, its providerID not written yet */
  create_nodeclaim(f, "owned-by-name", NULL, 0);
  char *by_name = launch(f, "owned-by-name");
  /* by providerID: the NodeClaim has another name than the instance's tag */
  char *by_id = launch(f, "tagged-otherwise");
  if (!by_name || !by_id) return;
  create_nodeclaim(f, "owned-by-id", by_id, 0);
  double passes = gc_passes(f, "requeue");
  ctrl_run_for(f, LEAK_GRACE_S + 2);
  CHECK(gc_passes(f, "requeue") >= passes + 2);
  CHECK(ctrl_instance_exists(f, by_name));
  CHECK(ctrl_instance_exists(f, by_id));
  free(by_name);
  free(by_id);
}

/* A second instance launched for a NodeClaim that already has another one (a repeated create after a
 * lost answer, with another offering): its tag names a live NodeClaim, but not as that one's instance. */
static void test_second_instance_of_a_nodeclaim_released(void) {
  ctrl_fixture *f = &fx;
  char *second = launch(f, "twice-launched");
  char *first = launch(f, "twice-launched-first");
  if (!second || !first) return;
  create_nodeclaim(f, "twice-launched", first, 0);
  CHECK(ctrl_wait_for(f, 10, instance_gone, second));
  CHECK(ctrl_instance_exists(f, first));
  free(second);
  free(first);
}

/* ---- lost NodeClaims ---------------------------------------------------------------------- */

static void test_lost_nodeclaims(void) {
  ctrl_fixture *f = &fx;
  char *not_ready = launch(f, "lost-node-not-ready");
  char *no_node = launch(f, "lost-no-node");
  char *node_ready = launch(f, "lost-node-ready");
  if (!not_ready || !no_node || !node_ready) return;
  create_nodeclaim(f, "lost-node-not-ready", not_ready, 1);
  create_nodeclaim(f, "lost-no-node", no_node, 1);
  create_nodeclaim(f, "lost-node-ready", node_ready, 1);
  create_nodeclaim(f, "lost-unregistered", "cn-hangzhou.i-neverregistered", 0);
  /* the simulated kubelet registered a Node per instance; one goes, one stays Ready whatever happens */
  char path[256], body[256];
  long status = 0;
  snprintf(path, sizeof path, "/api/v1/nodes/%s", kubelet_node(f, no_node));
  json_decref(ctrl_kube(f, "DELETE", path, NULL, &status));
  CHECK_INT(status, 200);
  snprintf(body, sizeof body, "{\"node\": \"%s\", \"ready\": true}", kubelet_node(f, node_ready));
  json_decref(ctrl_admin(f, "kubernetes", "POST", "/_sim/kubelet", body));
  const char *not_ready_node = kubelet_node(f, not_ready);
  CHECK(lp_condition_is(lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODE, not_ready_node), "Ready",
                        "True"));
  /* while the instances are listed every NodeClaim stays */
  ctrl_run_for(f, 1.0);
  CHECK_INT(nodeclaim_status(f, "lost-node-not-ready"), 200);
  CHECK_INT(nodeclaim_status(f, "lost-no-node"), 200);

  double disrupted =
      ctrl_metric(f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("garbage_collected", "default"));
  delete_instance(f, not_ready); /* its kubelet goes silent: Ready turns Unknown */
  delete_instance(f, no_node);
  delete_instance(f, node_ready);
  CHECK(ctrl_wait_for(f, 10, nodeclaim_gone, "lost-node-not-ready"));
  CHECK(ctrl_wait_for(f, 10, nodeclaim_gone, "lost-no-node"));
  ctrl_run_for(f, 1.0);
  CHECK_INT(nodeclaim_status(f, "lost-node-ready"), 200);   /* the kubelet is alive */
  CHECK_INT(nodeclaim_status(f, "lost-unregistered"), 200); /* the registration timeout's job */
  CHECK_INT(ctrl_metric(f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("garbage_collected", "default")),
            disrupted + 2);
  free(not_ready);
  free(no_node);
  free(node_ready);
}

/* ---- a failing list ----------------------------------------------------------------------- */

static void test_list_failing(void) {
  ctrl_fixture *f = &fx;
  char *pid = launch(f, "list-fails");
  if (!pid) return;
  /* registered, its Node gone: deleted if a failed list were taken for an empty one */
  create_nodeclaim(f, "list-fails", pid, 1);
  char path[256];
  long status = 0;
  snprintf(path, sizeof path, "/api/v1/nodes/%s", kubelet_node(f, pid));
  json_decref(ctrl_kube(f, "DELETE", path, NULL, &status));
  CHECK_INT(status, 200);
  CHECK(ctrl_wait_for(f, 5, nodeclaim_cached, pid));
  ctrl_run_for(f, 1.0);
  CHECK_INT(nodeclaim_status(f, "list-fails"), 200);
  json_decref(ctrl_admin(f, "alibaba", "POST", "/_sim/faults",
                         "{\"action\":\"DescribeInstances\",\"code\":\"Forbidden.RAM\"}"));
  double errors = gc_passes(f, "error");
  ctrl_run_for(f, 2.0);
  CHECK(gc_passes(f, "error") >= errors + 2); /* retried */
  CHECK_INT(nodeclaim_status(f, "list-fails"), 200);
  CHECK(ctrl_instance_exists(f, pid));

  json_decref(ctrl_admin(f, "alibaba", "DELETE", "/_sim/faults", NULL));
  double passes = gc_passes(f, "requeue");
  ctrl_run_for(f, 2.0);
  CHECK(gc_passes(f, "requeue") > passes);
  CHECK_INT(nodeclaim_status(f, "list-fails"), 200);
  free(pid);
}

int main(void) {
  lp_ctrl_settings settings = {.gc_interval_s = 0.5, .gc_leak_grace_s = LEAK_GRACE_S};
  ctrl_fixture_start(&fx, gc_only, &settings);
  nodeclass = mapping_resolved_nodeclass(fx.scripts, fx.sim);
  RUN(test_leaked_instance_released);
  RUN(test_second_instance_of_a_nodeclaim_released);
  RUN(test_owned_instances_kept);
  RUN(test_lost_nodeclaims);
  RUN(test_list_failing);
  json_decref(nodeclass);
  ctrl_fixture_stop(&fx);
  return check_summary();
}
