/* The provisioner's creations whose answer is lost (engine/controller/provisioner_inflight.c), against
 * the Kubernetes simulator's faults: the create is answered too late for the client (a "timeout"
 * fault: the object is stored, the answer lost) or with a 503, while the NodeClaim watch is held back
 * (its rewatch answered seconds late, as while an API server restarts), so that the cache does not
 * show what was stored.
 *   stored, answer lost        the POST again under the same name answers AlreadyExists: one NodeClaim
 *   stored, both answers lost  it counts as on its way; a check by name finds it: still one
 *   not stored (503 twice)     it counts as on its way; the check finds nothing: a new NodeClaim
 * The manager talks to the API through a client that gives up after 0.5 s; the checks by name wait on
 * the controllers' clock, which the test moves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller_fixture.h"
#include "provisioner_test_support.h"

static ctrl_fixture f;
static double fake_now = 1000; /* the controllers' monotonic clock */

static double fake_clock(void *ud) {
  (void)ud;
  return fake_now;
}

/* Time passes beyond the check of what is on its way, and a pass runs: a new NodePool wakes the
 * provisioner while pods are pending (this one's class does not exist, so it takes none). */
static void later_pass(const char *pool) {
  fake_now += 10;
  CHECK_INT(pt_post(&f, PT_NODEPOOLS,
                    json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[]}}}}", "apiVersion",
                              "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", pool, "spec",
                              "template", "spec", "nodeClassRef", "group", "karpenter.k8s.alibabacloud",
                              "kind", "ECSNodeClass", "name", "none", "requirements")),
            201);
}

static double lost(const char *outcome) {
  return ctrl_metric(&f, "luaprov_provisioner_lost_answers_total", LP_LABELS(outcome));
}

static int lost_at_least(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  const char *const *want = ud; /* {outcome, count} */
  return lost(want[0]) >= atof(want[1]);
}

static size_t cached(void) {
  return lp_env_count(lp_controllers_env(f.manager), LP_KIND_NODECLAIM);
}

static int cached_claims(ctrl_fixture *fx, const void *n) {
  (void)fx;
  return cached() == *(const size_t *)n;
}

/* rule (JSON text) for creates of nodeclaims; with watch_s, the NodeClaim watch is ended and its
 * rewatch answered that many seconds late. */
static void faults(const char *rule, int watch_s) {
  char body[512];
  if (watch_s)
    snprintf(body, sizeof body,
             "[%s,{\"kind\":\"slow\",\"verb\":\"watch\",\"resource\":\"nodeclaims\",\"seconds\":%d,"
             "\"count\":1},{\"kind\":\"drop_watches\"}]",
             rule, watch_s);
  else
    snprintf(body, sizeof body, "%s", rule);
  json_decref(ctrl_admin(&f, "kubernetes", "POST", "/_sim/faults", body));
}

/* The name of the only NodeClaim (malloc'd), or NULL. */
static char *only_claim(void) {
  json_t *list = ctrl_get(&f, PT_CLAIMS);
  json_t *items = json_object_get(list, "items");
  char *name = json_array_size(items) == 1 ? strdup(lp_obj_name(json_array_get(items, 0))) : NULL;
  json_decref(list);
  return name;
}

/* The cache shows the one NodeClaim, and no second one is ever made. */
static void check_one_then_clean(void) {
  size_t one = 1, none = 0;
  CHECK(ctrl_wait_for(&f, 20, cached_claims, &one));
  CHECK_INT(pt_claims(&f, NULL), 1);
  ctrl_run_for(&f, 1.5); /* passes with the cache current: nothing more to do */
  CHECK_INT(pt_claims(&f, NULL), 1);
  json_decref(ctrl_admin(&f, "kubernetes", "DELETE", "/_sim/faults", NULL));
  pt_cleanup(&f);
  CHECK(ctrl_wait_for(&f, 10, cached_claims, &none));
}

static void test_answer_lost_once(void) {
  double exists = lost("exists");
  faults("{\"kind\":\"timeout\",\"verb\":\"create\",\"resource\":\"nodeclaims\",\"seconds\":1,\"count\":1}",
         5);
  CHECK_INT(pt_pod(&f, "lost-1", "250m", "256Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "lost-1"));
  CHECK_INT(lost("exists") - exists, 1); /* the second POST answered AlreadyExists */
  ctrl_run_for(&f, 1.5);                 /* passes come and go while the cache lacks it */
  CHECK_INT(cached(), 0);
  CHECK_INT(pt_claims(&f, NULL), 1);
  check_one_then_clean();
}

static void test_answers_lost_twice(void) {
  char want[32];
  snprintf(want, sizeof want, "%g", lost("exists") + 1);
  faults("{\"kind\":\"timeout\",\"verb\":\"create\",\"resource\":\"nodeclaims\",\"seconds\":1,\"count\":2}",
         6);
  CHECK_INT(pt_pod(&f, "lost-2", "250m", "256Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "lost-2")); /* for the NodeClaim it could not confirm */
  ctrl_run_for(&f, 1);
  CHECK_INT(lost("exists"), atof(want) - 1); /* not settled yet */
  later_pass("poke-2");
  CHECK(ctrl_wait_for(&f, 10, lost_at_least, (const char *const[]){"exists", want})); /* found by name */
  CHECK_INT(cached(), 0);
  CHECK_INT(pt_claims(&f, NULL), 1);
  check_one_then_clean();
}

static void test_not_stored(void) {
  char want[32];
  snprintf(want, sizeof want, "%g", lost("absent") + 1);
  faults("{\"verb\":\"create\",\"resource\":\"nodeclaims\",\"status\":503,\"count\":2}", 0);
  CHECK_INT(pt_pod(&f, "lost-3", "250m", "256Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "lost-3"));
  char *first = pt_nominated(&f, "lost-3");
  ctrl_run_for(&f, 1);
  CHECK_INT(pt_claims(&f, NULL), 0); /* nothing stored, and nothing more created meanwhile */
  later_pass("poke-3");
  CHECK(ctrl_wait_for(&f, 10, lost_at_least, (const char *const[]){"absent", want}));
  size_t one = 1;
  CHECK(ctrl_wait_for(&f, 10, cached_claims, &one)); /* its pod, planned again */
  char *second = only_claim();
  CHECK(first && second && strcmp(first, second) != 0);
  free(first);
  free(second);
  check_one_then_clean();
}

static const lp_controller_def *const controllers[] = {&lp_nodeclass_controller, &lp_provisioner_controller,
                                                       NULL};

int main(void) {
  ctrl_fixture_start(&f, controllers, NULL);
  /* the fixture's manager again, over a client that gives up after 0.5 s */
  ctrl_stop_manager(&f, f.manager);
  lp_error *err = NULL;
  lp_kube_client *impatient =
      lp_kube_client_new(&f.loop, f.kube_config, &(lp_http_client_options){.default_timeout_ms = 500}, &err);
  lp_controllers_config cfg = ctrl_manager_config(&f, controllers);
  cfg.kube = impatient;
  f.manager = lp_controllers_start(&cfg, &err);
  lp_env_set_clock(lp_controllers_env(f.manager), fake_clock, NULL);
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, pt_class_ready, "default"));
  RUN(test_answer_lost_once);
  RUN(test_answers_lost_twice);
  RUN(test_not_stored);
  ctrl_stop_manager(&f, f.manager);
  f.manager = NULL;
  lp_kube_client_close(impatient, NULL, NULL);
  ctrl_fixture_stop(&f);
  return check_summary();
}
