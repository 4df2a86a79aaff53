/* The provisioner against capacity that exists or is on its way (engine/controller/provisioner*.c;
 * docs/controllers.md): pods that fit a Ready node get no NodeClaim; pods nominated for a NodeClaim
 * that is launching get no second one, and later pods fit into what it launched; a NodeClaim deleted
 * for InsufficientCapacity sends its pods back to planning; and end to end with the lifecycle
 * controller, the simulated kubelet and the binder, a pending pod ends up Running on the node of the
 * NodeClaim it was nominated for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/shapes.h"
#include "controller_fixture.h"
#include "provisioner_test_support.h"

static ctrl_fixture f;

/* ---- capacity that exists: pods of a scheduler the simulator's binder leaves alone --------------- */

/* A pod of the scheduler "custom" (the binder ignores it) marked Unschedulable, as that scheduler
 * would; bound to node when node is not NULL. */
static void custom_pod(const char *name, const char *cpu, const char *node) {
  json_t *extra = json_pack("{s:s}", "schedulerName", "custom");
  if (node) json_object_set_new(extra, "nodeName", json_string(node));
  CHECK_INT(pt_pod(&f, name, cpu, "256Mi", extra), 201);
  if (node) return;
  CHECK_INT(pt_mark_unschedulable(&f, name), 200);
}

/* Node n1: Ready, 4 cores of which a bound pod takes 3. A pending pod of 500m fits there and gets no
 * NodeClaim; one of 2 cores does not and gets one. */
static void test_existing_node(void) {
  CHECK_INT(pt_post(&f, "/api/v1/nodes",
                    json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s}]}}",
                              "apiVersion", "v1", "kind", "Node", "metadata", "name", "n1", "labels",
                              "kubernetes.io/hostname", "n1", "status", "allocatable", "cpu", "4", "memory",
                              "8Gi", "pods", "110", "conditions", "type", "Ready", "status", "True")),
            201);
  custom_pod("resident", "3", "n1");
  double passes = pt_passes(&f);
  custom_pod("fits", "500m", NULL);
  custom_pod("too-big", "2", NULL);
  json_t *claim = pt_claim_of(&f, "too-big");
  CHECK(claim != NULL);
  CHECK_STR(pt_request(claim, "cpu"), "2");
  json_decref(claim);
  CHECK(!pt_is_nominated(&f, "fits"));
  char *failed = pt_event(&f, "fits", "FailedScheduling");
  CHECK(failed == NULL);
  free(failed);
  CHECK_INT(pt_claims(&f, NULL), 1);
  CHECK(pt_passes(&f) - passes >= 1);
  pt_cleanup(&f);
}

/* ---- capacity on its way: the lifecycle controller launches the NodeClaims --------------------- */

static int launched(ctrl_fixture *fx, const void *name) {
  return ctrl_claim_condition(fx, name, "Launched", "True", NULL);
}

/* Pod first's NodeClaim launches (the simulated clock stands still, so no node comes): a 2-core t6
 * with 1.2 GiB allocatable. A pass meanwhile creates no second NodeClaim for it; pod second, small
 * enough for what is left, is nominated for the same NodeClaim; pod third, which would fit only if the
 * nominated pods were not counted, gets a NodeClaim of its own. */
static void test_nominated_while_launching(void) {
  CHECK_INT(pt_pod(&f, "first", "1", "512Mi", NULL), 201);
  json_t *claim = pt_claim_of(&f, "first");
  CHECK(claim != NULL);
  char *name = strdup(claim ? lp_obj_name(claim) : "?");
  json_decref(claim);
  CHECK(ctrl_wait_for(&f, 10, launched, name));

  double passes = pt_passes(&f);
  /* a NodePool change runs a pass while "first" is pending */
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", PT_NODEPOOLS "/default", "{s:{s:i}}", "spec", "weight", 5), 200);
  ctrl_run_for(&f, 1.8);
  CHECK(pt_passes(&f) - passes >= 1);
  CHECK_INT(pt_claims(&f, NULL), 1);

  CHECK_INT(pt_pod(&f, "second", "250m", "256Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "second"));
  char *second = pt_nominated(&f, "second");
  CHECK_STR(second, name);
  free(second);
  CHECK_INT(pt_claims(&f, NULL), 1);

  CHECK_INT(pt_pod(&f, "third", "1", "128Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "third"));
  char *third = pt_nominated(&f, "third");
  CHECK(third && strcmp(third, name) != 0);
  free(third);
  CHECK_INT(pt_claims(&f, NULL), 2);
  free(name);
}

/* Non-zero when every pod of the test runs on the node of a NodeClaim the provisioner created. */
static int all_running(ctrl_fixture *fx, const void *ud) {
  (void)ud;
  static const char *const pods[] = {"first", "second", "third"};
  int ok = 1;
  for (size_t i = 0; i < 3 && ok; i++) {
    char path[128];
    snprintf(path, sizeof path, PT_PODS "/%s", pods[i]);
    json_t *pod = ctrl_get(fx, path);
    const char *node = lp_obj_str(pod, "spec.nodeName");
    json_t *claims = ctrl_get(fx, PT_CLAIMS);
    int on_claim = 0;
    size_t k;
    json_t *c;
    json_array_foreach(json_object_get(claims, "items"), k, c) {
      on_claim |= node && strcmp(lp_obj_str(c, "status.nodeName") ?: "", node) == 0 &&
                  lp_condition_is(c, "Initialized", "True");
    }
    ok = pt_is_nominated(fx, pods[i]) && on_claim &&
         strcmp(lp_obj_str(pod, "status.phase") ?: "", "Running") == 0;
    json_decref(claims);
    json_decref(pod);
  }
  return ok;
}

/* Time moves: the instances run, the kubelet registers their nodes, the lifecycle controller
 * initializes them and the binder puts the pods on them (wherever it likes: nominations are Karpenter's
 * plan, not the scheduler's); nothing new is provisioned. */
static void test_end_to_end(void) {
  ctrl_advance(&f, 30);
  CHECK(ctrl_wait_for(&f, 20, all_running, NULL));
  ctrl_run_for(&f, 1.2);
  CHECK_INT(pt_claims(&f, NULL), 2);
  CHECK_INT(ctrl_metric(&f, "luaprov_provisioner_pods_pending", NULL), 0);
}

static int failed_for_stock(ctrl_fixture *fx, const void *pod) {
  char *msg = pt_event(fx, pod, "FailedScheduling");
  int ok = msg && strstr(msg, "without an available offering") != NULL;
  free(msg);
  return ok;
}

/* Every offering out of stock: Create fails, the lifecycle controller deletes the NodeClaim, the
 * provisioner plans the pod again and now finds no available offering for it. */
static void test_insufficient_capacity_replans(void) {
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/faults", "{\"kind\":\"nostock\"}"));
  CHECK_INT(pt_pod(&f, "unlucky", "500m", "512Mi",
                   json_pack("{s:{s:s}}", "nodeSelector", LP_LABEL_INSTANCE_TYPE, "ecs.g7.xlarge")),
            201);
  CHECK(ctrl_wait_for(&f, 15, failed_for_stock, "unlucky"));
  CHECK(ctrl_has_event(&f, "unlucky", "Nominated")); /* the first plan, before the launch failed */
  CHECK_INT(pt_claims(&f, NULL), 2);                 /* the end-to-end test's, nothing new */
  CHECK_INT(ctrl_metric(&f, "luaprov_provisioner_unschedulable_pods", NULL), 1);
  json_decref(ctrl_admin(&f, "alibaba", "DELETE", "/_sim/faults", NULL));
}

/* The manager keeps these lists for as long as it runs. */
static const lp_controller_def *const provisioning[] = {&lp_nodeclass_controller, &lp_provisioner_controller,
                                                        NULL};
static const lp_controller_def *const launching[] = {
    &lp_nodeclass_controller, &lp_nodeclaim_lifecycle_controller, &lp_provisioner_controller, NULL};

static void start(const lp_controller_def *const *controllers) {
  ctrl_fixture_start(&f, controllers, NULL);
  /* frozen: instances boot only when a test advances the clock */
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 0}"));
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, pt_class_ready, "default"));
}

int main(void) {
  start(provisioning);
  RUN(test_existing_node);
  ctrl_fixture_stop(&f);

  start(launching);
  RUN(test_nominated_while_launching);
  RUN(test_end_to_end);
  RUN(test_insufficient_capacity_replans); /* last: the provider remembers the sold-out offerings */
  ctrl_fixture_stop(&f);
  return check_summary();
}
