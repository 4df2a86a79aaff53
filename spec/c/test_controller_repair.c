/* Node repair (engine/controller/repair.c, docs/controllers.md) with the controllers it works with —
 * ECSNodeClass status, NodeClaim lifecycle and termination — through the real manager, the Alibaba
 * mapping and both simulators over HTTP. NodeClaims are launched by the lifecycle controller, their
 * instances made Running through the Alibaba simulator's admin path, and the simulated kubelet
 * registers their Nodes; a test then holds a Node's Ready condition with POST /_sim/kubelet.
 *
 * The repair policy is an operator's policies/repair.lua in a temporary tree the script host watches:
 * Ready=False tolerated TOLERATION_S, Ready=Unknown an hour, so cases run in seconds; one case rewrites
 * it and the reload takes effect. Simulated time is never advanced: the kubelet stamps
 * lastTransitionTime with the simulated clock, the controller compares it with the wall clock, and
 * the two agree only while nobody moves the simulated one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/contracts.h"
#include "controller_fixture.h"

#define CLAIM_PATH   "/apis/karpenter.sh/v1/nodeclaims/"
#define NODE_PATH    "/api/v1/nodes/"
#define DEADLINE     "karpenter.sh/nodeclaim-termination-timestamp"
#define NODES        5
#define TOLERATION_S 2

static ctrl_fixture fx;
static char tree[] = "/tmp/luaprov-repair-XXXXXX";

static const lp_controller_def *const no_controllers[] = {NULL};
static const lp_controller_def *const controllers[] = {&lp_repair_controller, &lp_nodeclass_controller,
                                                       &lp_nodeclaim_lifecycle_controller,
                                                       &lp_termination_controller, NULL};

/* The NodeClaims and their Nodes: 1..NODES at the start, NODES + 1 the replacement of a repaired one. */
static char claim_names[NODES + 2][32], node_names[NODES + 2][128];

/* ---- the operator's tree ------------------------------------------------------------------- */

static const char *const policy_both =
    "-- test policy: NotReady is repaired after a short toleration, Unknown only after an hour\n"
    "local M = {}\n"
    "function M.policies(_ctx)\n"
    "  return {\n"
    "    { condition_type = 'Ready', condition_status = 'False', toleration_seconds = 2 },\n"
    "    { condition_type = 'Ready', condition_status = 'Unknown', toleration_seconds = 3600 },\n"
    "  }\n"
    "end\n"
    "return M\n";

static const char *const policy_unknown_only =
    "-- test policy, reloaded: NotReady is no longer a reason to repair\n"
    "local M = {}\n"
    "function M.policies(_ctx)\n"
    "  return { { condition_type = 'Ready', condition_status = 'Unknown', toleration_seconds = 3600 } }\n"
    "end\n"
    "return M\n";

static int nodeclass_ready(ctrl_fixture *f, const void *ud) {
  (void)ud;
  return lp_condition_is(lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODECLASS, "default"), "Ready",
                         "True");
}

/* The fixture, with its script host and CloudProvider replaced by ones over the operator's tree
 * (watched) before the controllers start. */
static void start(void) {
  sim_tree_make(tree);
  sim_tree_write_policy(tree, "repair", policy_both);

  ctrl_fixture_start(&fx, no_controllers, NULL);
  ctrl_stop_manager(&fx, fx.manager);
  lp_cloudprovider_free(fx.cloud);
  lp_script_host_close(fx.scripts, NULL, NULL);
  fx.scripts = sim_tree_scripts(&fx.loop, fx.http, tree);
  fx.cloud = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &fx.loop,
                                                             .scripts = fx.scripts,
                                                             .cluster_id = "luaprov-sim",
                                                             .endpoint = lp_sim_url(fx.sim, "alibaba"),
                                                             .refresh_interval_s = -1});
  lp_controllers_config cfg = ctrl_manager_config(&fx, controllers);
  cfg.settings = (lp_ctrl_settings){.drain_requeue_s = 0.3, .terminate_requeue_s = 0.3};
  lp_error *err = NULL;
  fx.manager = lp_controllers_start(&cfg, &err);
  if (!fx.manager) abort();
  ctrl_fixture_apply_defaults(&fx);
  /* a NodeClaim of a class that is not Ready yet is deleted, as Karpenter does */
  if (!ctrl_wait_for(&fx, 10, nodeclass_ready, NULL)) abort();
}

static void stop(void) {
  ctrl_fixture_stop(&fx);
  CHECK(sim_tree_remove(tree) == 0);
}

/* ---- the cluster ---------------------------------------------------------------------------- */

static json_t *get_claim(int i) {
  char path[128];
  snprintf(path, sizeof path, CLAIM_PATH "%s", claim_names[i]);
  return ctrl_get(&fx, path);
}

static int claim_initialized(ctrl_fixture *f, const void *ud) {
  (void)f;
  json_t *c = get_claim(*(const int *)ud);
  int ok = lp_condition_is(c, "Initialized", "True");
  json_decref(c);
  return ok;
}

static int claim_has_provider_id(ctrl_fixture *f, const void *ud) {
  (void)f;
  json_t *c = get_claim(*(const int *)ud);
  int ok = lp_obj_str(c, "status.providerID") != NULL;
  json_decref(c);
  return ok;
}

/* NodeClaim i of NodePool "default" launched by the lifecycle controller, its instance Running, its
 * Node registered by the simulated kubelet and initialized; node_names[i] names the Node. */
static void launch(int i) {
  snprintf(claim_names[i], sizeof claim_names[i], "nc-%d", i);
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/apis/karpenter.sh/v1/nodeclaims",
                           "{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}",
                           "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name",
                           claim_names[i], "labels", "karpenter.sh/nodepool", "default", "spec",
                           "nodeClassRef", "group", "karpenter.alibabacloud.com", "kind", "ECSNodeClass",
                           "name", "default", "requirements", "key", "karpenter.sh/capacity-type", "operator",
                           "In", "values", "on-demand"),
            201);
  if (!ctrl_wait_for(&fx, 15, claim_has_provider_id, &i)) {
    fprintf(stderr, "%s never launched\n", claim_names[i]);
    abort();
  }
  json_t *c = get_claim(i);
  const char *pid = lp_obj_str(c, "status.providerID");
  char path[256];
  /* skip the boot instead of moving simulated time (see the top of this file) */
  snprintf(path, sizeof path, "/_sim/instances/%s", strchr(pid, '.') + 1);
  json_decref(ctrl_admin(&fx, "alibaba", "POST", path, "{\"status\":\"Running\"}"));
  if (!ctrl_wait_for(&fx, 15, claim_initialized, &i)) {
    fprintf(stderr, "%s never initialized\n", claim_names[i]);
    abort();
  }
  json_decref(c);
  c = get_claim(i);
  snprintf(node_names[i], sizeof node_names[i], "%s", lp_obj_str(c, "status.nodeName"));
  json_decref(c);
}

/* Holds Node i's Ready condition at ready ("true", "false", "\"Unknown\"", or "null" to let go). */
static void force_ready(int i, const char *ready) {
  char body[256];
  snprintf(body, sizeof body, "{\"node\": \"%s\", \"ready\": %s}", node_names[i], ready);
  json_decref(ctrl_admin(&fx, "kubernetes", "POST", "/_sim/kubelet", body));
}

static int node_ready_cached(ctrl_fixture *f, const void *ud) {
  json_t *node = lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODE, node_names[*(const int *)ud]);
  return lp_condition_is(node, "Ready", "True");
}

/* Gives Node i back to its kubelet (Ready=True again) and waits until the controllers see it. */
static void heal(int i) {
  force_ready(i, "null");
  CHECK(ctrl_wait_for(&fx, 10, node_ready_cached, &i));
}

static int claim_deleting(int i) {
  json_t *c = get_claim(i);
  int deleting = !c || lp_obj_deleting(c);
  json_decref(c);
  return deleting;
}

static int path_gone(ctrl_fixture *f, const void *path) {
  json_t *obj = ctrl_get(f, path);
  json_decref(obj);
  return obj == NULL;
}

static double decisions(const char *decision) {
  return ctrl_metric(&fx, "luaprov_repair_decisions_total", LP_LABELS(decision));
}

typedef struct at_least {
  const char *decision;
  double n;
} at_least;

static int decisions_at_least(ctrl_fixture *f, const void *ud) {
  (void)f;
  const at_least *a = ud;
  return decisions(a->decision) >= a->n;
}

static int evictions_more(ctrl_fixture *f, const void *than) {
  return ctrl_metric(f, "luaprov_pods_evictions_total", LP_LABELS("blocked")) > *(const double *)than;
}

/* ---- cases ---------------------------------------------------------------------------------- */

/* Ready=Unknown is tolerated an hour: the controller waits (and says so), nothing is deleted. */
static void test_within_toleration(void) {
  force_ready(1, "\"Unknown\"");
  CHECK(ctrl_wait_for(&fx, 10, decisions_at_least, &(at_least){"tolerating", 1}));
  ctrl_run_for(&fx, TOLERATION_S + 1.5);
  CHECK(!claim_deleting(1));
  CHECK_INT(decisions("repaired"), 0);
  CHECK_INT(decisions("blocked"), 0);
  heal(1);
}

/* A pod on Node i that the PodDisruptionBudget "guarded" (made with the first one) never lets go. */
static void guarded_pod(const char *name, int i) {
  char path[256];
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/api/v1/namespaces/default/pods",
                           "{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:s, s:[{s:s, s:s}]}}", "apiVersion", "v1",
                           "kind", "Pod", "metadata", "name", name, "namespace", "default", "labels", "app",
                           "guarded", "spec", "nodeName", node_names[i], "containers", "name", "app", "image",
                           "registry.example/app:1"),
            201);
  snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s/status", name);
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:s, s:[{s:s, s:s}]}}", "status", "phase", "Running",
                           "conditions", "type", "Ready", "status", "True"),
            200);
  static int budget;
  if (budget++) return;
  CHECK_INT(ctrl_kube_pack(&fx, "POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                           "{s:s, s:s, s:{s:s}, s:{s:i, s:{s:{s:s}}}}", "apiVersion", "policy/v1", "kind",
                           "PodDisruptionBudget", "metadata", "name", "guarded", "spec", "minAvailable", 1,
                           "selector", "matchLabels", "app", "guarded"),
            201);
}

/* A finalizer of the test's own besides the termination controller's (held) or none left (not held):
 * a finalized NodeClaim stays readable until the test lets it go. */
static void hold_claim(int i, int held) {
  char path[128];
  snprintf(path, sizeof path, CLAIM_PATH "%s", claim_names[i]);
  if (held)
    CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:[s, s]}}", "metadata", "finalizers",
                             "karpenter.sh/termination", "example.com/hold"),
              200);
  else
    CHECK_INT(ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:[]}}", "metadata", "finalizers"), 200);
}

static int only_held(ctrl_fixture *f, const void *ud) {
  (void)f;
  json_t *c = get_claim(*(const int *)ud);
  int ok = c && !lp_obj_has_finalizer(c, "karpenter.sh/termination");
  json_decref(c);
  return ok;
}

/* Node i's NodeClaim, its termination deadline (wall time; < 0 when none), when it was deleted. */
static double claim_deadline(int i) {
  json_t *c = get_claim(i);
  const char *stamp = json_string_value(
      json_object_get(json_object_get(json_object_get(c, "metadata"), "annotations"), DEADLINE));
  double t = stamp ? lp_rfc3339_parse(stamp) : -1;
  json_decref(c);
  return t;
}

/* Forces Node i NotReady and waits until its NodeClaim is finalized (pods gone, Node gone, instance
 * released, held by the test); returns the wall times the Node was forced and the claim seen done. */
static void force_until_finalized(int i, const char *pod, double *forced, double *seen) {
  json_t *c = get_claim(i);
  char *pid = strdup(lp_obj_str(c, "status.providerID"));
  json_decref(c);
  *forced = lp_clock_wall();
  force_ready(i, "false");
  CHECK(ctrl_wait_for(&fx, 15, only_held, &i));
  *seen = lp_clock_wall();
  CHECK(*seen - *forced >= TOLERATION_S - 1); /* lastTransitionTime has whole seconds */
  CHECK(claim_deleting(i));
  char path[256];
  snprintf(path, sizeof path, NODE_PATH "%s", node_names[i]);
  CHECK(path_gone(&fx, path));
  snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s", pod);
  CHECK(path_gone(&fx, path)); /* past the deadline, the budget did not hold it */
  CHECK(!ctrl_instance_exists(&fx, pid));
  free(pid);
}

/* 1 of 5 Nodes NotReady past its toleration (ceil(20% of 5) = 1 may be): its NodeClaim is stamped with
 * a termination deadline of now and deleted, so the termination controller deletes a pod a
 * PodDisruptionBudget protects, and the Node and its instance go. */
static void test_repaired(void) {
  guarded_pod("guarded-1", 1);
  hold_claim(1, 1);
  double forced, seen;
  force_until_finalized(1, "guarded-1", &forced, &seen);
  double deadline = claim_deadline(1);
  CHECK(deadline >= forced + TOLERATION_S - 1 && deadline <= seen + 1);
  CHECK(ctrl_has_event(&fx, node_names[1], "NodeRepair"));
  CHECK_INT(ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS("deleted")), 1);
  CHECK_INT(decisions("repaired"), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_disrupted_total", LP_LABELS("unhealthy", "default")), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_unhealthy_disrupted_total", LP_LABELS("ready", "default")),
            1);
  hold_claim(1, 0);
}

/* 2 of 5 Nodes NotReady: more than ceil(20% of 5) = 1, so neither is repaired; both report why. */
static void test_blocked(void) {
  launch(NODES + 1); /* the replacement of the repaired one: 5 Nodes again */
  force_ready(2, "false");
  force_ready(3, "false");
  CHECK(ctrl_wait_for(&fx, 10, decisions_at_least, &(at_least){"blocked", 2}));
  ctrl_run_for(&fx, 1);
  CHECK(!claim_deleting(2));
  CHECK(!claim_deleting(3));
  CHECK(ctrl_has_event(&fx, node_names[2], "NodeRepairBlocked"));
  CHECK(ctrl_has_event(&fx, node_names[3], "NodeRepairBlocked"));
  CHECK_INT(decisions("repaired"), 1);
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_disrupted_total", LP_LABELS("unhealthy", "default")), 1);
  heal(2);
  heal(3);
}

static double evictions(const char *result) {
  return ctrl_metric(&fx, "luaprov_pods_evictions_total", LP_LABELS(result));
}

/* A NodeClaim being deleted whose drain a PodDisruptionBudget blocks (no grace period: no deadline)
 * goes NotReady: repair only stamps the deadline, and the drain completes past it. */
static void test_deleting_claim_forced(void) {
  guarded_pod("guarded-4", 4);
  hold_claim(4, 1);
  double blocked = evictions("blocked");
  char path[128];
  snprintf(path, sizeof path, CLAIM_PATH "%s", claim_names[4]);
  CHECK_INT(ctrl_kube_pack(&fx, "DELETE", path, NULL), 200);
  CHECK(ctrl_wait_for(&fx, 10, evictions_more, &blocked));
  CHECK(claim_deadline(4) < 0);
  double forced, seen;
  force_until_finalized(4, "guarded-4", &forced, &seen);
  double deadline = claim_deadline(4);
  CHECK(deadline >= forced + TOLERATION_S - 1 && deadline <= seen + 1);
  CHECK_INT(decisions("repaired"), 2);
  CHECK_INT(evictions("deleted"), 2);
  /* it was being deleted already: not counted as a disruption by repair */
  CHECK_INT(ctrl_metric(&fx, "luaprov_nodeclaims_disrupted_total", LP_LABELS("unhealthy", "default")), 1);
  hold_claim(4, 0);
}

static int reloaded(ctrl_fixture *f, const void *ud) {
  (void)ud;
  return lp_script_host_generation_id(f->scripts) == 2;
}

/* The policy reloaded without the Ready=False entry: a NotReady Node is left alone from then on. */
static void test_policy_reloaded(void) {
  sim_tree_write_policy(tree, "repair", policy_unknown_only);
  CHECK(ctrl_wait_for(&fx, 10, reloaded, NULL));
  ctrl_run_for(&fx, 5.5); /* the controller asks for the policies again at most every 5 s */
  double before[3] = {decisions("tolerating"), decisions("blocked"), decisions("repaired")};
  force_ready(5, "false");
  ctrl_run_for(&fx, TOLERATION_S + 2);
  CHECK(!claim_deleting(5));
  CHECK_INT(decisions("tolerating"), before[0]);
  CHECK_INT(decisions("blocked"), before[1]);
  CHECK_INT(decisions("repaired"), before[2]);
}

int main(void) {
  start();
  for (int i = 1; i <= NODES; i++) launch(i);
  RUN(test_within_toleration);
  RUN(test_repaired);
  RUN(test_blocked);
  RUN(test_deleting_claim_forced);
  RUN(test_policy_reloaded);
  stop();
  return check_summary();
}
