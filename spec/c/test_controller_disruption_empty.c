/* Emptiness in the disruption controller (engine/controller/disruption*.c): do-not-disrupt values on
 * their own (pure), then through the real manager and both simulators: an empty Consolidatable node is
 * deleted once its decision held for 15 s on the controllers' clock (the test moves it), within the
 * Empty budget, several in one decision; a node with a reschedulable pod is not empty (a DaemonSet pod
 * does not count); karpenter.sh/do-not-disrupt on a pod holds its node, "true" for good and a duration
 * until it has passed on the controllers' wall clock (the test moves it too). The test writes the
 * Consolidatable condition itself, as the controller watching pods would.
 *
 * Simulated time runs 20 times faster than the wall clock, so instances boot in under a second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/clock.h"
#include "disruption_test_support.h"

#define PODS "/api/v1/namespaces/default/pods"

static ctrl_fixture f;
static double mono = 1000; /* the controllers' monotonic clock */
static double wall;        /* their wall clock */

/* ---- do-not-disrupt alone ---------------------------------------------------------------------- */

/* Whether an object annotated value, started at start, is blocked at now. */
static int held(const char *value, double start, double now, const char *expect_in_why) {
  json_t *obj = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", DZ_ANNOTATION_DO_NOT_DISRUPT, value);
  char *why = dz_do_not_disrupt(obj, "Pod \"default/p\"", start, now);
  if (why && expect_in_why) CHECK(strstr(why, expect_in_why) != NULL);
  int blocked = why != NULL;
  free(why);
  json_decref(obj);
  return blocked;
}

static void test_do_not_disrupt_values(void) {
  CHECK(held("true", 0, 1e9, "Pod \"default/p\""));
  CHECK(held("30m", 1000, 1000 + 29 * 60, "30m"));
  CHECK(!held("30m", 1000, 1000 + 30 * 60, NULL));
  CHECK(held("1h30m", 1000, 1000 + 89 * 60, NULL));
  CHECK(!held("1h30m", 1000, 1000 + 91 * 60, NULL));
  CHECK(held("90s", 1000, 1089, NULL));
  CHECK(!held("90s", 1000, 1090, NULL));
  CHECK(held("90s", -1, 1e9, NULL)); /* no start known: held */
  CHECK(held("false", 0, 1e9, "does not understand"));
  CHECK(held("forever", 0, 1e9, "does not understand"));
  json_t *plain = json_pack("{s:{}}", "metadata");
  CHECK(dz_do_not_disrupt(plain, "Node n", 0, 1) == NULL);
  json_decref(plain);
}

/* ---- the cluster -------------------------------------------------------------------------------- */

/* A pod bound to the NodeClaim's node: owned by a DaemonSet when daemonset, annotated do-not-disrupt
 * with dnd unless NULL. */
static void post_pod(const char *name, const char *claim, int daemonset, const char *dnd) {
  json_t *c = dt_claim(&f, claim);
  const char *node = lp_obj_str(c, "status.nodeName");
  CHECK(node != NULL);
  json_t *pod =
      json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:[{s:s, s:s, s:{s:{s:s}}}]}}", "apiVersion", "v1", "kind",
                "Pod", "metadata", "name", name, "spec", "nodeName", node ? node : "", "containers", "name",
                "app", "image", "nginx", "resources", "requests", "cpu", "100m");
  json_t *meta = json_object_get(pod, "metadata");
  if (daemonset)
    json_object_set_new(meta, "ownerReferences",
                        json_pack("[{s:s, s:s, s:s, s:s}]", "apiVersion", "apps/v1", "kind", "DaemonSet",
                                  "name", "agent", "uid", "ds-uid-1"));
  if (dnd) json_object_set_new(meta, "annotations", json_pack("{s:s}", DZ_ANNOTATION_DO_NOT_DISRUPT, dnd));
  CHECK_INT(ctrl_kube_pack(&f, "POST", PODS, "o", pod), 201);
  json_decref(c);
}

static int pod_cached(ctrl_fixture *fx, const void *key) {
  return lp_env_get(lp_controllers_env(fx->manager), LP_KIND_POD, key) != NULL;
}

/* Posts the NodeClaims (NULL-terminated), waits until the pool holds them all initialized. */
static void claims_up(const char *const *names) {
  int n = 0;
  json_t *before = dt_pool_claims(&f);
  for (; names[n]; n++) dt_post_claim(&f, names[n]);
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){(int)json_array_size(before) + n}));
  json_decref(before);
}

static void consolidatable(const char *const *names) {
  for (int i = 0; names[i]; i++) dt_mark_consolidatable(&f, names[i]);
  for (int i = 0; names[i]; i++) CHECK(ctrl_wait_for(&f, 5, dt_consolidatable_cached, names[i]));
}

static int eligible_is(ctrl_fixture *fx, const void *ud);

static int budget_is(ctrl_fixture *fx, const void *ud) {
  return ctrl_metric(fx, "luaprov_disruption_budgets_allowed", LP_LABELS(DT_POOL)) == *(const double *)ud;
}

/* Marks them all Consolidatable while a budget of 0 holds them, then lets the next decision take all n
 * nodes of the pool at once (budget 100%). */
static void consolidatable_together(const char *const *names, int n) {
  dt_set_budgets(&f, "[{\"nodes\":\"0\"}]");
  consolidatable(names);
  CHECK(ctrl_wait_for(&f, 15, eligible_is, &(double){n}));
  dt_set_budgets(&f, "[{\"nodes\":\"100%\"}]");
  /* the pass that sees the new budget decides: the gauge is set in it, before the methods run */
  CHECK(ctrl_wait_for(&f, 5, ctrl_metric_reaches,
                      &(ctrl_metric_want){"luaprov_disruption_budgets_allowed", LP_LABELS(DT_POOL), n}));
}

static int eligible_is(ctrl_fixture *fx, const void *ud) {
  return ctrl_metric(fx, "luaprov_voluntary_disruption_eligible_nodes", LP_LABELS("empty")) ==
         *(const double *)ud;
}

#define WAIT_ELIGIBLE(v) CHECK(ctrl_wait_for(&f, 15, eligible_is, &(double){v}))

static int claim_gone(ctrl_fixture *fx, const void *name) {
  json_t *c = dt_claim(fx, name);
  json_decref(c);
  return c == NULL;
}

static int claim_untouched(const char *name) {
  json_t *c = dt_claim(&f, name);
  int ok = c && !lp_obj_deleting(c);
  json_decref(c);
  return ok;
}

static double decisions(void) {
  return ctrl_metric(&f, "luaprov_voluntary_disruption_decisions_total",
                     LP_LABELS("delete", "empty", "empty"));
}

static double disrupted(void) {
  return ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("empty", DT_POOL));
}

/* ---- cases ------------------------------------------------------------------------------------ */

/* An empty Consolidatable node: decided at once, deleted only once the decision held 15 s. */
static void test_empty_after_validation(void) {
  claims_up((const char *[]){"web-a", NULL});
  WAIT_ELIGIBLE(0); /* not Consolidatable yet */
  consolidatable((const char *[]){"web-a", NULL});
  WAIT_ELIGIBLE(1);
  ctrl_run_for(&f, 1.5); /* passes run, the decision waits */
  CHECK(claim_untouched("web-a"));
  mono += 14;
  ctrl_run_for(&f, 1.5);
  CHECK(claim_untouched("web-a"));
  CHECK_INT(decisions(), 0);
  mono += 2;
  CHECK(ctrl_wait_for(&f, 20, claim_gone, "web-a"));
  CHECK_INT(decisions(), 1);
  CHECK_INT(disrupted(), 1);
  CHECK(ctrl_has_event(&f, "web-a", "Disrupted"));
  CHECK(ctrl_has_event(&f, "web-a", "DisruptionTerminating"));
}

/* WhenEmpty: a node with a pod to move is not empty and stays, one whose only pod is a DaemonSet's
 * goes. */
static void test_pods_to_move(void) {
  dt_patch_pool(&f, json_pack("{s:{s:{s:s}}}", "spec", "disruption", "consolidationPolicy", "WhenEmpty"));
  claims_up((const char *[]){"web-b", "web-c", NULL});
  post_pod("p-b", "web-b", 0, NULL);
  post_pod("ds-c", "web-c", 1, NULL);
  CHECK(ctrl_wait_for(&f, 5, pod_cached, "default/p-b"));
  CHECK(ctrl_wait_for(&f, 5, pod_cached, "default/ds-c"));
  consolidatable((const char *[]){"web-b", "web-c", NULL});
  WAIT_ELIGIBLE(1);
  mono += 16;
  CHECK(ctrl_wait_for(&f, 20, claim_gone, "web-c"));
  mono += 16;
  ctrl_run_for(&f, 2);
  CHECK(claim_untouched("web-b"));
  CHECK_INT(ctrl_metric(&f, "luaprov_voluntary_disruption_eligible_nodes", LP_LABELS("empty")), 0);
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", PODS "/p-b", NULL), 200);
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", DT_CLAIMS "/web-b", NULL), 200);
  CHECK(ctrl_wait_for(&f, 20, claim_gone, "web-b"));
  dt_patch_pool(&f, json_pack("{s:{s:{s:n}}}", "spec", "disruption", "consolidationPolicy"));
}

/* What the budget test watches every loop turn. */
typedef struct watch {
  const char *const *names;
  int most; /* most of them being deleted at once */
  int left; /* still there */
} watch;

static int fewer(ctrl_fixture *fx, const void *ud) {
  watch *w = (watch *)ud;
  int deleting = 0, left = 0;
  for (int i = 0; w->names[i]; i++) {
    json_t *c = dt_claim(fx, w->names[i]);
    left += c != NULL;
    deleting += c && lp_obj_deleting(c);
    json_decref(c);
  }
  if (deleting > w->most) w->most = deleting;
  int done = left < w->left;
  w->left = left;
  return done;
}

/* An Empty budget of 1 lets one empty node go per decision; 100% lets two go in one. */
static void test_budget(void) {
  /* consolidation (reason Underutilized) would take empty nodes too: held off here */
  dt_set_budgets(
      &f, "[{\"nodes\":\"1\",\"reasons\":[\"Empty\"]}, {\"nodes\":\"0\",\"reasons\":[\"Underutilized\"]}]");
  const char *names[] = {"web-d", "web-e", "web-f", NULL};
  claims_up(names);
  consolidatable(names);
  WAIT_ELIGIBLE(3);
  double d0 = decisions(), x0 = disrupted();
  watch w = {names, 0, 3};
  for (int round = 0; round < 3; round++) {
    mono += 16;
    CHECK(ctrl_wait_for(&f, 20, fewer, &w));
    CHECK_INT(w.left, 2 - round);
  }
  CHECK_INT(w.most, 1);
  CHECK_INT(decisions() - d0, 3);
  CHECK_INT(disrupted() - x0, 3);

  const char *two[] = {"web-g", "web-h", NULL};
  claims_up(two);
  d0 = decisions();
  consolidatable_together(two, 2);
  mono += 16;
  CHECK(ctrl_wait_for(&f, 20, claim_gone, "web-g"));
  CHECK(ctrl_wait_for(&f, 20, claim_gone, "web-h"));
  CHECK_INT(decisions() - d0, 1);
  CHECK(ctrl_has_event(&f, "web-g", "DisruptionBlocked")); /* while the budget was 0 */
}

/* The RFC 3339 start of the pod at path (status.startTime, else creationTimestamp) as epoch seconds. */
static double pod_started(const char *path) {
  json_t *pod = ctrl_get(&f, path);
  const char *t = lp_obj_str(pod, "status.startTime");
  double at = lp_rfc3339_parse(t ? t : lp_obj_str(pod, "metadata.creationTimestamp"));
  json_decref(pod);
  return at;
}

static int pod_started_cond(ctrl_fixture *fx, const void *path) {
  (void)fx;
  return pod_started(path) > 0;
}

/* karpenter.sh/do-not-disrupt on a (DaemonSet) pod: "true" holds its node; "30m" holds it until 30 min
 * after the pod started. */
static void test_do_not_disrupt_pod(void) {
  claims_up((const char *[]){"web-i", "web-j", NULL});
  post_pod("ds-i", "web-i", 1, "true");
  post_pod("ds-j", "web-j", 1, "30m");
  CHECK(ctrl_wait_for(&f, 10, pod_started_cond, PODS "/ds-j"));
  wall = pod_started(PODS "/ds-j") + 10 * 60;
  CHECK(ctrl_wait_for(&f, 5, pod_cached, "default/ds-i"));
  CHECK(ctrl_wait_for(&f, 5, pod_cached, "default/ds-j"));
  consolidatable((const char *[]){"web-i", "web-j", NULL});
  mono += 16;
  ctrl_run_for(&f, 2);
  CHECK(claim_untouched("web-i"));
  CHECK(claim_untouched("web-j"));
  CHECK(ctrl_has_event(&f, "web-i", "DisruptionBlocked"));
  CHECK(ctrl_has_event(&f, "web-j", "DisruptionBlocked"));
  CHECK_INT(ctrl_metric(&f, "luaprov_voluntary_disruption_eligible_nodes", LP_LABELS("empty")), 0);

  wall += 21 * 60; /* 31 min after the pod started */
  WAIT_ELIGIBLE(1);
  mono += 16;
  CHECK(ctrl_wait_for(&f, 20, claim_gone, "web-j"));
  CHECK(claim_untouched("web-i"));
}

static void annotate(const char *claim, const char *key, const char *value) {
  char path[256];
  snprintf(path, sizeof path, DT_CLAIMS "/%s", claim);
  dt_patch_pool_path(&f, path, json_pack("{s:{s:{s:s?}}}", "metadata", "annotations", key, value));
}

/* The operator's disruption policy (the tree's policies/disruption.lua) vetoes one node and fails on
 * another: both stay, with a DisruptionBlocked event naming the policy's why and a Warning
 * DisruptionPolicyFailed; once the veto is lifted the node goes. */
static void test_veto(void) {
  claims_up((const char *[]){"web-k", "web-l", NULL});
  annotate("web-k", "test/veto", "yes");
  annotate("web-l", "test/raise", "yes");
  consolidatable_together((const char *[]){"web-k", "web-l", NULL}, 2);
  double d0 = decisions();
  mono += 16;
  CHECK(ctrl_wait_for(&f, 10, dt_has_events,
                      &(dt_events){"web-k", "DisruptionBlocked", "web-l", "DisruptionPolicyFailed"}));
  ctrl_run_for(&f, 1);
  CHECK(claim_untouched("web-k"));
  CHECK(claim_untouched("web-l"));
  CHECK_INT(decisions() - d0, 0); /* a decision the policy kept whole is not one acted on */
  CHECK(ctrl_has_event_message(&f, "web-k", "DisruptionBlocked", "kept by the test policy for emptiness"));
  CHECK(ctrl_has_event_message(&f, "web-l", "DisruptionPolicyFailed", "the test policy raised"));

  annotate("web-k", "test/veto", NULL);
  dt_set_budgets(&f, "[{\"nodes\":\"0\"}]");
  CHECK(ctrl_wait_for(&f, 5, budget_is, &(double){0}));
  dt_set_budgets(&f, "[{\"nodes\":\"100%\"}]"); /* a pass at once: a new decision */
  CHECK(ctrl_wait_for(&f, 5, budget_is, &(double){3}));
  mono += 16;
  CHECK(ctrl_wait_for(&f, 20, claim_gone, "web-k"));
  CHECK(claim_untouched("web-l"));
  CHECK_INT(decisions() - d0, 1); /* web-k alone: web-l's policy still fails */
}

static const char *const POLICY =
    "local M = {}\n"
    "function M.can_disrupt(nodeclaim, node, pods, ctx)\n"
    "  local a = nodeclaim.metadata.annotations or {}\n"
    "  if a['test/veto'] then return false, 'kept by the test policy for ' .. ctx.method end\n"
    "  if a['test/raise'] then error('the test policy raised') end\n"
    "  return true\n"
    "end\n"
    "return M\n";

static const lp_controller_def *const controllers[] = {
    &lp_nodeclass_controller, &lp_nodeclaim_lifecycle_controller, &lp_termination_controller,
    &lp_disruption_controller, NULL};

int main(void) {
  RUN(test_do_not_disrupt_values);

  char tree[] = "/tmp/luaprov-disruption-veto-XXXXXX";
  sim_tree_make(tree);
  sim_tree_write_policy(tree, "disruption", POLICY);
  ctrl_fixture_start_tree(&f, controllers,
                          &(lp_ctrl_settings){.drain_requeue_s = 0.3, .terminate_requeue_s = 0.3}, tree);
  lp_env_set_clock(lp_controllers_env(f.manager), ctrl_clock_at, &mono);
  wall = lp_clock_wall();
  ctrl_use_wall_clock(&f, &wall);
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 20}"));
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, ctrl_nodeclass_has_ready, "default"));
  dt_nodepool(&f, "100%");
  RUN(test_empty_after_validation);
  RUN(test_pods_to_move);
  RUN(test_budget);
  RUN(test_do_not_disrupt_pod);
  RUN(test_veto);
  ctrl_fixture_stop(&f);
  return check_summary();
}
