/* The provisioner's creations whose answer is lost (engine/controller/provisioner_inflight.c), against
 * the Kubernetes simulator's faults: the create is answered too late for the client (a "timeout"
 * fault: the object is stored, the answer lost) or with a 503, while the NodeClaim watch is held back
 * (its rewatch answered seconds late, as while an API server restarts), so that the cache does not
 * show what was stored.
 *   stored, answer lost        the POST again under the same name answers AlreadyExists: one NodeClaim
 *   stored, both answers lost  it counts as on its way; a check by name finds it: still one
 *   stored, then a 429         the same: a refused second POST says nothing of the first
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

/* Time passes beyond the check of what is on its way, and a pass runs: a new NodePool wakes the
 * provisioner while pods are pending (this one's class does not exist, so it takes none). */
static void later_pass(const char *pool) {
  fake_now += 10;
  CHECK_INT(pt_post(&f, PT_NODEPOOLS,
                    json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[]}}}}", "apiVersion",
                              "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", pool, "spec",
                              "template", "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com",
                              "kind", "ECSNodeClass", "name", "none", "requirements")),
            201);
}

#define LOST "luaprov_provisioner_lost_answers_total"
/* ctrl_metric_reaches's: creations settled with outcome reached n */
#define LOST_REACHES(outcome, n) (&(ctrl_metric_want){LOST, LP_LABELS(outcome), n})

static double lost(const char *outcome) {
  return ctrl_metric(&f, LOST, LP_LABELS(outcome));
}

static size_t cached(void) {
  return lp_env_count(lp_controllers_env(f.manager), LP_KIND_NODECLAIM);
}

static int cached_claims(ctrl_fixture *fx, const void *n) {
  (void)fx;
  return cached() == *(const size_t *)n;
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
  ctrl_kube_faults(
      &f, "{\"kind\":\"timeout\",\"verb\":\"create\",\"resource\":\"nodeclaims\",\"seconds\":1,\"count\":1}",
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
  double want = lost("exists") + 1;
  ctrl_kube_faults(
      &f, "{\"kind\":\"timeout\",\"verb\":\"create\",\"resource\":\"nodeclaims\",\"seconds\":1,\"count\":2}",
      6);
  CHECK_INT(pt_pod(&f, "lost-2", "250m", "256Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "lost-2")); /* for the NodeClaim it could not confirm */
  ctrl_run_for(&f, 1);
  CHECK_INT(lost("exists"), want - 1); /* not settled yet */
  later_pass("poke-2");
  CHECK(ctrl_wait_for(&f, 10, ctrl_metric_reaches, LOST_REACHES("exists", want))); /* found by name */
  CHECK_INT(cached(), 0);
  CHECK_INT(pt_claims(&f, NULL), 1);
  check_one_then_clean();
}

/* Stored, its answer lost, and the POST again throttled (429): it still counts as on its way, and the
 * check by name finds it. */
static void test_lost_then_throttled(void) {
  double want = lost("exists") + 1;
  ctrl_kube_faults(&f,
                   "{\"kind\":\"timeout\",\"verb\":\"create\",\"resource\":\"nodeclaims\",\"seconds\":1,"
                   "\"count\":1},{\"verb\":\"create\",\"resource\":\"nodeclaims\",\"status\":429,"
                   "\"count\":1}",
                   6);
  CHECK_INT(pt_pod(&f, "lost-4", "250m", "256Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "lost-4"));
  ctrl_run_for(&f, 1);
  CHECK_INT(pt_claims(&f, NULL), 1); /* the first POST's, and no other */
  later_pass("poke-4");
  CHECK(ctrl_wait_for(&f, 10, ctrl_metric_reaches, LOST_REACHES("exists", want)));
  CHECK_INT(pt_claims(&f, NULL), 1);
  check_one_then_clean();
}

static void test_not_stored(void) {
  double want = lost("absent") + 1;
  ctrl_kube_faults(&f, "{\"verb\":\"create\",\"resource\":\"nodeclaims\",\"status\":503,\"count\":2}", 0);
  CHECK_INT(pt_pod(&f, "lost-3", "250m", "256Mi", NULL), 201);
  CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, "lost-3"));
  char *first = pt_nominated(&f, "lost-3");
  ctrl_run_for(&f, 1);
  CHECK_INT(pt_claims(&f, NULL), 0); /* nothing stored, and nothing more created meanwhile */
  later_pass("poke-3");
  CHECK(ctrl_wait_for(&f, 10, ctrl_metric_reaches, LOST_REACHES("absent", want)));
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
  ctrl_restart_impatient(&f, controllers, NULL, 500, &fake_now);
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, pt_class_ready, "default"));
  RUN(test_answer_lost_once);
  RUN(test_answers_lost_twice);
  RUN(test_lost_then_throttled);
  RUN(test_not_stored);
  ctrl_fixture_stop(&f);
  return check_summary();
}
