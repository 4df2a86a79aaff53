/* Drift replacements whose create answer is lost (engine/controller/disruption_replace.c), against the
 * Kubernetes simulator's faults: the create is answered too late for the client (a "timeout" fault: the
 * object is stored, the answer lost) or with a 503, while the NodeClaim watch is held back (its rewatch
 * answered seconds late, as while an API server restarts), so that the cache does not show what was
 * stored and a pass, woken by a NodePool change, runs meanwhile.
 *   stored, answer lost        the POST again under the same name answers AlreadyExists: marked with it
 *   stored, both answers lost  the candidate waits, not chosen again; a check by name finds the
 *                              replacement: marked with it
 *   not stored (503 twice)     the candidate waits; the check finds nothing: a new replacement
 *   refused (403)              nothing on its way: the next pass untaints the candidate's Node at once,
 *                              without waiting out DZ_CHECK_AFTER_S on the controllers' clock
 * Each time exactly one replacement is made, the candidate is marked with it and replaced as usual
 * (deleted once the replacement initialized). The manager talks to the API through a client that gives
 * up after 0.5 s; the checks by name wait on the controllers' clock, which the test moves.
 *
 * Simulated time runs 20 times faster than the wall clock, so instances boot in under a second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "disruption_test_support.h"

#define NO_BUDGET  "[{\"nodes\":\"0\"}]"
#define ONE_BUDGET "[{\"nodes\":\"1\"}]"
#define TWO_BUDGET "[{\"nodes\":\"2\"}]" /* as ONE_BUDGET for a pool of one node: wakes a pass */
#define TIMEOUTS(n)                                                                                          \
  "{\"kind\":\"timeout\",\"verb\":\"create\",\"resource\":\"nodeclaims\",\"seconds\":1,\"count\":" #n "}"

static ctrl_fixture f;
static double fake_now = 1000; /* the controllers' monotonic clock */

#define LOST "luaprov_disruption_lost_answers_total"
/* ctrl_metric_reaches's: replacement creations settled with outcome reached n */
#define LOST_REACHES(outcome, n) (&(ctrl_metric_want){LOST, LP_LABELS(outcome), n})

static double lost(const char *outcome) {
  return ctrl_metric(&f, LOST, LP_LABELS(outcome));
}

/* The name of the pool's only NodeClaim (malloc'd), or NULL. */
static char *only_claim(void) {
  json_t *items = dt_pool_claims(&f);
  char *name = json_array_size(items) == 1 ? strdup(lp_obj_name(json_array_get(items, 0))) : NULL;
  json_decref(items);
  return name;
}

/* What the API shows of a candidate's replacement, every loop turn until it is replaced. */
typedef struct follow {
  const char *candidate;
  size_t replacements; /* NodeClaims replacing it now (luaprov.io/replaces) */
  size_t most;         /* ... the most seen at once */
  char *mark;          /* its luaprov.io/replaced-by, once seen (malloc'd) */
} follow;

static void look(follow *w) {
  json_t *items = dt_pool_claims(&f);
  size_t i;
  json_t *c;
  w->replacements = 0;
  json_array_foreach(items, i, c) {
    const char *replaces = dt_annotation(c, DZ_ANNOTATION_REPLACES);
    const char *by = dt_annotation(c, DZ_ANNOTATION_REPLACED_BY);
    w->replacements += replaces && strcmp(replaces, w->candidate) == 0;
    if (strcmp(lp_obj_name(c), w->candidate) == 0 && by && !w->mark) w->mark = strdup(by);
  }
  if (w->replacements > w->most) w->most = w->replacements;
  json_decref(items);
}

/* A ctrl_wait_for condition: the candidate is gone and the pool holds one initialized NodeClaim. */
static int replaced(ctrl_fixture *fx, const void *ud) {
  follow *w = (follow *)ud;
  look(w);
  json_t *gone = dt_claim(fx, w->candidate);
  json_decref(gone);
  return !gone && dt_pool_initialized(fx, &(int){1});
}

/* The pool's one node drifts (template gen) while the budget holds it; then the faults, rule (JSON text)
 * with the NodeClaim watch held back watch_s seconds (0: not), and a budget that lets it go. Returns the
 * candidate's name (malloc'd), or NULL when the pool does not hold one NodeClaim (an earlier case
 * failed). */
static char *drift_then_fault(const char *gen, const char *rule, int watch_s) {
  char *candidate = only_claim();
  CHECK(candidate != NULL);
  if (!candidate) return NULL;
  dt_set_budgets(&f, NO_BUDGET);
  dt_set_generation(&f, gen);
  CHECK(ctrl_wait_for(&f, 10, dt_blocked, candidate));
  ctrl_kube_faults(&f, rule, watch_s);
  dt_set_budgets(&f, ONE_BUDGET);
  return candidate;
}

/* The candidate ends replaced by exactly one NodeClaim, the one it was marked with. */
static void check_replaced_once(follow *w) {
  CHECK(ctrl_wait_for(&f, 30, replaced, w));
  CHECK_INT(w->most, 1);
  CHECK_INT(w->replacements, 1);
  char *left = only_claim();
  CHECK(w->mark && left && strcmp(w->mark, left) == 0);
  CHECK(ctrl_has_event(&f, w->candidate, "DisruptionTerminating"));
  free(left);
  free(w->mark);
  json_decref(ctrl_admin(&f, "kubernetes", "DELETE", "/_sim/faults", NULL));
}

static void test_answer_lost_once(void) {
  double want = lost("exists") + 1;
  char *candidate = drift_then_fault("2", TIMEOUTS(1), 5);
  if (!candidate) return;
  follow w = {.candidate = candidate};
  /* the second POST answered AlreadyExists: the first had landed */
  CHECK(ctrl_wait_for(&f, 10, ctrl_metric_reaches, LOST_REACHES("exists", want)));
  ctrl_run_for(&f, 1); /* passes come and go (the NodePool changes) while the cache lacks it */
  dt_set_budgets(&f, TWO_BUDGET);
  ctrl_run_for(&f, 0.5);
  look(&w);
  CHECK_INT(w.replacements, 1);
  CHECK(w.mark != NULL);
  check_replaced_once(&w);
  free(candidate);
}

static void test_answers_lost_twice(void) {
  double want = lost("exists") + 1;
  char *candidate = drift_then_fault("3", TIMEOUTS(2), 10);
  if (!candidate) return;
  follow w = {.candidate = candidate};
  CHECK(ctrl_wait_for(&f, 10, ctrl_kube_faults_used, NULL)); /* both POSTs of it */
  ctrl_run_for(&f, 1);                                       /* the second answer is lost too */
  dt_set_budgets(&f, TWO_BUDGET);                            /* a pass: the candidate is not chosen again */
  ctrl_run_for(&f, 0.5);
  look(&w);
  CHECK_INT(w.replacements, 1);
  CHECK(w.mark == NULL);
  CHECK_INT(lost("exists"), want - 1); /* not settled yet */

  fake_now += DZ_CHECK_AFTER_S + 1; /* the check by name is due: the next pass makes it */
  dt_set_budgets(&f, ONE_BUDGET);
  CHECK(ctrl_wait_for(&f, 5, ctrl_metric_reaches, LOST_REACHES("exists", want)));
  ctrl_run_for(&f, 0.5);
  look(&w);
  CHECK(w.mark != NULL); /* marked with what the check found, the cache still behind */
  CHECK(w.mark && !lp_env_get(lp_controllers_env(f.manager), LP_KIND_NODECLAIM, w.mark));
  check_replaced_once(&w);
  free(candidate);
}

static void test_not_stored(void) {
  double want = lost("absent") + 1;
  char *candidate = drift_then_fault(
      "4", "{\"verb\":\"create\",\"resource\":\"nodeclaims\",\"status\":503,\"count\":2}", 0);
  if (!candidate) return;
  follow w = {.candidate = candidate};
  CHECK(ctrl_wait_for(&f, 10, ctrl_kube_faults_used, NULL));
  dt_set_budgets(&f, TWO_BUDGET);
  ctrl_run_for(&f, 1);
  look(&w);
  CHECK_INT(w.replacements, 0); /* nothing stored, and nothing more created meanwhile */

  fake_now += DZ_CHECK_AFTER_S + 1;
  dt_set_budgets(&f, ONE_BUDGET);
  CHECK(ctrl_wait_for(&f, 5, ctrl_metric_reaches, LOST_REACHES("absent", want)));
  check_replaced_once(&w); /* by a replacement made after the check */
  free(candidate);
}

/* A ctrl_wait_for condition: the Kubernetes simulator's first fault rule fired at least once. */
static int fault_fired(ctrl_fixture *fx, const void *ud) {
  (void)ud;
  return ctrl_kube_fault_fired(fx) >= 1;
}

/* A ctrl_wait_for condition: the candidate (a const char *) is neither being deleted nor marked, and its
 * Node is there without the karpenter.sh/disrupted taint. */
static int candidate_untainted(ctrl_fixture *fx, const void *name) {
  json_t *c = dt_claim(fx, name);
  const char *node_name = lp_obj_str(c, "status.nodeName");
  char path[256];
  snprintf(path, sizeof path, "/api/v1/nodes/%s", node_name ? node_name : "");
  json_t *node = node_name ? ctrl_get(fx, path) : NULL;
  int ok = c && !lp_obj_deleting(c) && !dt_annotation(c, DZ_ANNOTATION_REPLACED_BY) && node &&
           !dz_node_disrupted(node);
  json_decref(node);
  json_decref(c);
  return ok;
}

/* Every create of the replacement refused (403: nothing stored, nothing on its way): the Node tainted
 * for it is untainted by the next pass, the controllers' clock standing still (a refused create is not
 * a lost answer to wait out); once creates pass again, the candidate is replaced once as usual. */
static void test_refused(void) {
  char *candidate =
      drift_then_fault("5", "{\"verb\":\"create\",\"resource\":\"nodeclaims\",\"status\":403}", 0);
  if (!candidate) return;
  follow w = {.candidate = candidate};
  CHECK(ctrl_wait_for(&f, 10, fault_fired, NULL)); /* its Node was tainted before the create */
  dt_set_budgets(&f, NO_BUDGET);                   /* no new attempt taints it again */
  CHECK(ctrl_wait_for(&f, 10, candidate_untainted, candidate));
  look(&w);
  CHECK_INT(w.replacements, 0);

  json_decref(ctrl_admin(&f, "kubernetes", "DELETE", "/_sim/faults", NULL));
  dt_set_budgets(&f, ONE_BUDGET);
  check_replaced_once(&w);
  free(candidate);
}

static const lp_controller_def *const controllers[] = {
    &lp_nodeclass_controller, &lp_nodeclaim_lifecycle_controller, &lp_termination_controller,
    &lp_drift_controller,     &lp_disruption_controller,          NULL};

int main(void) {
  lp_ctrl_settings settings = {.drain_requeue_s = 0.3, .terminate_requeue_s = 0.3};
  ctrl_fixture_start(&f, controllers, &settings);
  ctrl_restart_impatient(&f, controllers, &settings, 500, &fake_now);
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 20}"));
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, ctrl_nodeclass_has_ready, "default"));
  dt_nodepool(&f, "0");
  dt_post_claim(&f, "web-a");
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){1}));
  RUN(test_answer_lost_once);
  RUN(test_answers_lost_twice);
  RUN(test_not_stored);
  RUN(test_refused);
  ctrl_fixture_stop(&f);
  return check_summary();
}
