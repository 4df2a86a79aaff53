/* The Consolidatable marker and expiration (engine/controller/consolidatable.c, expiration.c), through
 * the real manager and both simulators: the lifecycle controller launches and initializes the
 * NodeClaims, the simulated kubelet registers their Nodes, and the test moves the controllers' wall
 * clock (ctrl_use_wall_clock) past consolidateAfter and expireAfter instead of waiting for them. A
 * moved clock wakes no timer, so after each move the test touches the NodeClaim (a label), which
 * enqueues it as any change of it does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "disruption_test_support.h"

#define PODS "/api/v1/namespaces/default/pods"

static ctrl_fixture f;
static double wall; /* the controllers' wall clock */

static void touch(const char *claim) {
  static int n;
  char path[256], value[16];
  snprintf(path, sizeof path, DT_CLAIMS "/%s", claim);
  snprintf(value, sizeof value, "%d", ++n);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", path, "{s:{s:{s:s}}}", "metadata", "labels", "touched", value), 200);
}

static void set_consolidate_after(const char *after) {
  dt_patch_pool(&f, json_pack("{s:{s:{s:s}}}", "spec", "disruption", "consolidateAfter", after));
}

typedef struct want_condition {
  const char *claim;
  int present; /* Consolidatable=True wanted, or absent */
} want_condition;

static int consolidatable_is(ctrl_fixture *fx, const void *ud) {
  const want_condition *w = ud;
  json_t *claim = dt_claim(fx, w->claim);
  int ok = claim && (w->present ? lp_condition_is(claim, "Consolidatable", "True")
                                : lp_condition_get(claim, "Consolidatable") == NULL);
  json_decref(claim);
  return ok;
}

#define WAIT_CONSOLIDATABLE(claim, yes)                                                                      \
  CHECK(ctrl_wait_for(&f, 10, consolidatable_is, &(want_condition){(claim), (yes)}))

static int pod_event_after(ctrl_fixture *fx, const void *ud) {
  const double *since = ud;
  json_t *claim = dt_claim(fx, "web-a");
  double at = lp_rfc3339_parse(lp_obj_str(claim, "status.lastPodEventTime"));
  json_decref(claim);
  return at >= *since - 1; /* the timestamp keeps whole seconds */
}

/* A pending pod, which the simulated binder binds to the only node there is (a bind is a pod event; a
 * pod created bound is not, as the cache's replay at start is not). */
static void post_pod(const char *name) {
  CHECK_INT(ctrl_kube_pack(&f, "POST", PODS, "{s:s, s:s, s:{s:s}, s:{s:[{s:s, s:s}]}}", "apiVersion", "v1",
                           "kind", "Pod", "metadata", "name", name, "spec", "containers", "name", "app",
                           "image", "nginx"),
            201);
}

/* consolidateAfter counts from initialization, then from the last pod event; Never removes the
 * condition. */
static void test_consolidatable(void) {
  set_consolidate_after("30s");
  dt_post_claim(&f, "web-a");
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){1}));
  touch("web-a");
  ctrl_run_for(&f, 0.5);
  WAIT_CONSOLIDATABLE("web-a", 0); /* initialized just now */
  wall += 31;
  touch("web-a");
  WAIT_CONSOLIDATABLE("web-a", 1);

  /* a pod lands on the node: a pod event, and 30 s of quiet needed again */
  double bound_at = wall;
  post_pod("p-1");
  CHECK(ctrl_wait_for(&f, 10, pod_event_after, &bound_at));
  WAIT_CONSOLIDATABLE("web-a", 0);
  wall += 20;
  touch("web-a");
  ctrl_run_for(&f, 0.5);
  WAIT_CONSOLIDATABLE("web-a", 0);
  wall += 11;
  touch("web-a");
  WAIT_CONSOLIDATABLE("web-a", 1);

  /* the pod goes: another event */
  double deleted_at = wall;
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", PODS "/p-1", NULL), 200);
  CHECK(ctrl_wait_for(&f, 10, pod_event_after, &deleted_at));
  WAIT_CONSOLIDATABLE("web-a", 0);
  wall += 31;
  touch("web-a");
  WAIT_CONSOLIDATABLE("web-a", 1);

  set_consolidate_after("Never"); /* a NodePool change reaches its NodeClaims */
  WAIT_CONSOLIDATABLE("web-a", 0);
  set_consolidate_after("0s");
  WAIT_CONSOLIDATABLE("web-a", 1);
}

/* ---- expiration ------------------------------------------------------------------------------- */

static void post_expiring_claim(const char *name, const char *expire_after) {
  dt_post_claim(&f, name);
  char path[256];
  snprintf(path, sizeof path, DT_CLAIMS "/%s", name);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", path, "{s:{s:s}}", "spec", "expireAfter", expire_after), 200);
}

static int deleting_or_gone(ctrl_fixture *fx, const void *name) {
  json_t *claim = dt_claim(fx, name);
  int ok = !claim || lp_obj_deleting(claim);
  json_decref(claim);
  return ok;
}

/* expireAfter passed: the NodeClaim is deleted whatever its budgets say; Never and an unreadable value
 * keep theirs. */
static void test_expiration(void) {
  dt_set_budgets(&f, "[{\"nodes\":\"0\"}]"); /* expiration is forceful: budgets do not hold it */
  post_expiring_claim("web-x", "1h");
  post_expiring_claim("web-n", "Never");
  post_expiring_claim("web-bad", "soon");
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){4}));
  touch("web-x");
  ctrl_run_for(&f, 0.5);
  CHECK(!deleting_or_gone(&f, "web-x"));
  CHECK(ctrl_has_event(&f, "web-bad", "InvalidExpireAfter"));

  wall += 3601;
  touch("web-x");
  touch("web-n");
  touch("web-bad");
  CHECK(ctrl_wait_for(&f, 10, deleting_or_gone, "web-x"));
  CHECK(ctrl_has_event(&f, "web-x", "Disrupted"));
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("expired", DT_POOL)), 1);
  ctrl_run_for(&f, 0.5);
  CHECK(!deleting_or_gone(&f, "web-n"));
  CHECK(!deleting_or_gone(&f, "web-bad"));
  CHECK(!deleting_or_gone(&f, "web-a"));
}

static const lp_controller_def *const controllers[] = {
    &lp_nodeclass_controller,      &lp_nodeclaim_lifecycle_controller, &lp_termination_controller,
    &lp_consolidatable_controller, &lp_expiration_controller,          NULL};

int main(void) {
  ctrl_fixture_start(&f, controllers,
                     &(lp_ctrl_settings){.drain_requeue_s = 0.3, .terminate_requeue_s = 0.3});
  wall = lp_clock_wall();
  ctrl_use_wall_clock(&f, &wall);
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 20}"));
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, ctrl_nodeclass_has_ready, "default"));
  dt_nodepool(&f, "1");
  RUN(test_consolidatable);
  RUN(test_expiration);
  ctrl_fixture_stop(&f);
  return check_summary();
}
