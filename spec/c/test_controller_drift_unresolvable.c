/* A drift rule no replacement can satisfy (engine/controller/drift_replacement.h, docs/controllers.md
 * "When replacing cannot resolve a drift"): the operator's policies/drift.lua drifts every node for
 * ImageDrift, replacements included. With the drift, disruption, lifecycle and termination controllers
 * running through the real manager, both simulators and the Alibaba mapping, exactly one node is
 * replaced: its replacement drifts for the same reason, gets DriftUnresolvable, a Warning event on it
 * and on its NodePool, and no node of the pool is replaced for ImageDrift after that, whatever the
 * budget allows and however long one waits. A hot reload of a rule the replacements satisfy lets
 * replacing resume. Then the limits of the drift gate: under a budget that lets every node go, the
 * unsatisfiable rule reloaded costs one replacement, not one per node; deleting the flagged replacement
 * does not lift the block (the NodePool's drift-unresolvable.luaprov.io/<reason> record holds it); an
 * edit of the node class or of the NodePool's template does, for exactly one more replacement; a record
 * the API server refuses (403) is told by a Warning on the NodePool; a replacement judged Resolved under
 * the inputs now outranks a record under them.
 *
 * The controllers' wall clock is the test's (ctrl_use_wall_clock): it stands still, and moves an hour
 * at once where the test says so, past the 10 minutes within which the same event is not repeated, so
 * "one event" is the condition's doing and not the deduplication's. Simulated time runs 20 times
 * faster than the wall clock, so instances boot in under a second. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller/drift_replacement.h"
#include "disruption_test_support.h"

static ctrl_fixture f;
static char tree[] = "/tmp/luaprov-drift-unresolvable-XXXXXX";
static double now; /* the controllers' wall clock */

static const lp_controller_def *const no_controllers[] = {NULL};
static const lp_controller_def *const controllers[] = {
    &lp_nodeclass_controller, &lp_nodeclaim_lifecycle_controller, &lp_termination_controller,
    &lp_drift_controller,     &lp_disruption_controller,          NULL};

/* Every node drifted, as "every image older than 30 days" is once the newest image is that old. */
static const char *const policy_always =
    "-- test policy: every node is drifted for ImageDrift, replacements too\n"
    "local M = {}\n"
    "function M.is_drifted(_nodeclaim, _nodeclass, _instance, _ctx)\n"
    "  return 'ImageDrift'\n"
    "end\n"
    "return M\n";

/* The same rule brought back by another edit (scripts of other content: not the inputs of before). */
static const char *const policy_again =
    "-- test policy, reloaded again: every node is drifted for ImageDrift, replacements too\n"
    "local M = {}\n"
    "function M.is_drifted(_nodeclaim, _nodeclass, _instance, _ctx)\n"
    "  return 'ImageDrift'\n"
    "end\n"
    "return M\n";

/* The rule fixed: the nodes made before the fix drift, the replacements made after it conform. */
static const char *const policy_fixed =
    "-- test policy, reloaded: only nodes that are not replacements are drifted\n"
    "local M = {}\n"
    "function M.is_drifted(nodeclaim, _nodeclass, _instance, _ctx)\n"
    "  local annotations = nodeclaim.metadata and nodeclaim.metadata.annotations or {}\n"
    "  if annotations['luaprov.io/replaces'] then return '' end\n"
    "  return 'ImageDrift'\n"
    "end\n"
    "return M\n";

/* ---- the cluster -------------------------------------------------------------------------------- */

/* The fixture, with its script host and CloudProvider replaced by ones over the operator's tree
 * (watched) before the controllers start. */
static void start(void) {
  sim_tree_make(tree);
  sim_tree_write_policy(tree, "drift", policy_always);
  ctrl_fixture_start(&f, no_controllers, NULL);
  ctrl_stop_manager(&f, f.manager);
  lp_cloudprovider_free(f.cloud);
  lp_script_host_close(f.scripts, NULL, NULL);
  f.scripts = sim_tree_scripts(&f.loop, f.http, tree);
  f.cloud = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &f.loop,
                                                            .scripts = f.scripts,
                                                            .cluster_id = "luaprov-sim",
                                                            .endpoint = lp_sim_url(f.sim, "alibaba"),
                                                            .refresh_interval_s = -1});
  lp_controllers_config cfg = ctrl_manager_config(&f, controllers);
  cfg.settings = (lp_ctrl_settings){.drain_requeue_s = 0.3, .terminate_requeue_s = 0.3};
  lp_error *err = NULL;
  f.manager = lp_controllers_start(&cfg, &err);
  if (!f.manager) abort();
  now = lp_clock_wall();
  ctrl_use_wall_clock(&f, &now);
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 20}"));
  ctrl_fixture_apply_defaults(&f);
  if (!ctrl_wait_for(&f, 10, ctrl_nodeclass_has_ready, "default")) abort();
  dt_nodepool(&f, "1");
}

static void stop(void) {
  ctrl_fixture_stop(&f);
  CHECK(sim_tree_remove(tree) == 0);
}

static double launched(void) {
  return ctrl_metric(&f, "luaprov_disruption_replacements_total", LP_LABELS("launched"));
}

/* The name (strdup'd) of the pool's first NodeClaim that match(claim, arg) accepts, or NULL. */
static char *first_claim(int (*match)(const json_t *claim, const char *arg), const char *arg) {
  json_t *items = dt_pool_claims(&f);
  char *name = NULL;
  size_t i;
  json_t *c;
  json_array_foreach(items, i, c) {
    if (!name && match(c, arg)) name = strdup(lp_obj_name(c));
  }
  json_decref(items);
  return name;
}

static int condition_true(const json_t *claim, const char *type) {
  return lp_condition_is(claim, type, "True");
}

/* The name (strdup'd) of the pool's NodeClaim with condition type True, or NULL. */
static char *claim_with(const char *type) {
  return first_claim(condition_true, type);
}

static int has_unresolvable(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  (void)ud;
  char *name = claim_with(LP_DRIFT_UNRESOLVABLE);
  free(name);
  return name != NULL;
}

/* A ctrl_wait_for condition: the NodeClaim named name (a const char *) is gone. */
static int claim_gone(ctrl_fixture *fx, const void *name) {
  (void)fx;
  json_t *c = dt_claim(&f, name);
  json_decref(c);
  return c == NULL;
}

/* A ctrl_wait_for condition: the pool is *(const int *)ud NodeClaims, all Initialized and none Drifted
 * or DriftUnresolvable. */
static int settled_clean(ctrl_fixture *fx, const void *ud) {
  if (!dt_pool_initialized(fx, ud)) return 0;
  json_t *items = dt_pool_claims(&f);
  size_t i, dirty = 0;
  json_t *c;
  json_array_foreach(items, i, c) {
    dirty += lp_condition_get(c, "Drifted") != NULL || lp_condition_is(c, LP_DRIFT_UNRESOLVABLE, "True");
  }
  json_decref(items);
  return dirty == 0;
}

static int reloaded(ctrl_fixture *fx, const void *ud) {
  return lp_script_host_generation_id(fx->scripts) == *(const uint64_t *)ud;
}

#define RECORD LP_DRIFT_RECORD_PREFIX "ImageDrift"

/* The NodePool's record of ImageDrift (strdup'd), or NULL. */
static char *pool_record(void) {
  json_t *pool = ctrl_get(&f, DT_POOLS "/" DT_POOL);
  const char *v = dt_annotation(pool, RECORD);
  char *copy = v ? strdup(v) : NULL;
  json_decref(pool);
  return copy;
}

/* The most replacements launched seen by a waiting condition, and the NodeClaim it waits for. */
static double most_launched;

/* A ctrl_wait_for condition: a NodeClaim other than *(char **)ud is DriftUnresolvable=True (its name
 * then in *(char **)ud, the old one freed); the most replacements launched meanwhile noted. */
static int new_unresolvable(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  char **name = (char **)ud;
  if (launched() > most_launched) most_launched = launched();
  char *seen = claim_with(LP_DRIFT_UNRESOLVABLE);
  if (!seen || (*name && strcmp(seen, *name) == 0)) {
    free(seen);
    return 0;
  }
  free(*name);
  *name = seen;
  return 1;
}

/* Runs the loop for seconds, noting the most replacements launched. */
static void watch_launches(double seconds) {
  double deadline = lp_clock_monotonic() + seconds;
  while (lp_clock_monotonic() < deadline) {
    ctrl_run_for(&f, 0.2);
    if (launched() > most_launched) most_launched = launched();
  }
}

/* ---- the case ----------------------------------------------------------------------------------- */

static void test_unsatisfiable_rule(void) {
  dt_post_claim(&f, "web-a");
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){1}));
  dt_post_claim(&f, "web-b");

  /* one of them is replaced; its replacement drifts for ImageDrift again and says so */
  CHECK(ctrl_wait_for(&f, 60, has_unresolvable, NULL));
  char *stuck = claim_with(LP_DRIFT_UNRESOLVABLE);
  CHECK(stuck != NULL);
  json_t *c = dt_claim(&f, stuck);
  const char *replaced = dt_annotation(c, DZ_ANNOTATION_REPLACES);
  CHECK(replaced != NULL);
  char *old = strdup(replaced ? replaced : "?");
  const char *other = strcmp(old, "web-a") == 0 ? "web-b" : "web-a";
  CHECK_STR(dt_annotation(c, LP_REPLACED_FOR_ANNOTATION), "ImageDrift");
  CHECK(dt_annotation(c, LP_REPLACED_UNDER_ANNOTATION) != NULL);
  CHECK(ctrl_claim_condition(&f, stuck, "Drifted", "True", "ImageDrift"));
  CHECK(ctrl_claim_condition(&f, stuck, LP_DRIFT_UNRESOLVABLE, "True", "ImageDrift"));
  char want[256];
  snprintf(want, sizeof want,
           "replacement of %s drifted for the same reason (ImageDrift): replacing would loop, so no node of "
           "NodePool " DT_POOL " is replaced for ImageDrift; fix the drift policy or the node class",
           old);
  CHECK_STR(lp_obj_str(lp_condition_get(c, LP_DRIFT_UNRESOLVABLE), "message"), want);
  json_decref(c);
  CHECK(ctrl_wait_for(&f, 30, claim_gone, old));
  CHECK(ctrl_has_event_message(&f, stuck, LP_DRIFT_UNRESOLVABLE, want));
  CHECK(ctrl_has_event_message(&f, DT_POOL, LP_DRIFT_UNRESOLVABLE, want));

  /* a budget that lets every node go, an hour later: nothing more is replaced, the event is not repeated */
  dt_set_budgets(&f, "[{\"nodes\":\"100%\"}]");
  ctrl_run_for(&f, 3);
  now += 3600;
  dt_set_budgets(&f, "[{\"nodes\":\"90%\"}]"); /* a pass, and every NodeClaim of the pool evaluated again */
  ctrl_run_for(&f, 3);
  CHECK_INT(launched(), 1);
  CHECK_INT(ctrl_metric(&f, "luaprov_drift_unresolvable_total", LP_LABELS("ImageDrift")), 1);
  CHECK_INT(ctrl_count_events(&f, stuck, LP_DRIFT_UNRESOLVABLE, NULL), 1);
  CHECK_INT(ctrl_count_events(&f, DT_POOL, LP_DRIFT_UNRESOLVABLE, NULL), 1);
  json_t *items = dt_pool_claims(&f);
  CHECK_INT(json_array_size(items), 2);
  json_decref(items);
  c = dt_claim(&f, other);
  CHECK(c && !lp_obj_deleting(c) && !dt_annotation(c, DZ_ANNOTATION_REPLACED_BY));
  CHECK(lp_condition_is(c, "Drifted", "True"));
  CHECK(!lp_condition_is(c, LP_DRIFT_UNRESOLVABLE, "True")); /* not a replacement: only held back */
  json_decref(c);
  CHECK(ctrl_has_event_message(&f, other, "DisruptionBlocked", "cannot be resolved by replacement"));

  /* the rule fixed and reloaded: the replacement is no longer drifted, the other node is replaced (the
   * clock back with the API server's, whose creationTimestamps a replacement's registration timeout is
   * measured from) */
  now = lp_clock_wall();
  sim_tree_write_policy(tree, "drift", policy_fixed);
  CHECK(ctrl_wait_for(&f, 10, reloaded, &(uint64_t){2}));
  CHECK(ctrl_wait_for(&f, 60, settled_clean, &(int){2}));
  CHECK(claim_gone(&f, other));
  CHECK_INT(launched(), 2);
  free(old);
  free(stuck);
}

/* Every node may go, and the unsatisfiable rule comes back: one replacement is made and judged, the
 * other node waits for it (DisruptionBlocked "waits for ... to be judged"), then is held for good. */
static char *flagged; /* the replacement DriftUnresolvable now */

static void test_one_replacement_per_reason(void) {
  dt_set_budgets(&f, "[{\"nodes\":\"100%\"}]");
  double before = launched();
  most_launched = before;
  sim_tree_write_policy(tree, "drift", policy_again);
  CHECK(ctrl_wait_for(&f, 10, reloaded, &(uint64_t){3}));
  flagged = claim_with(LP_DRIFT_UNRESOLVABLE); /* none: the reload lifted the one before */
  CHECK(flagged == NULL);
  CHECK(ctrl_wait_for(&f, 60, new_unresolvable, &flagged));
  watch_launches(3);
  CHECK_INT(most_launched, before + 1);
  CHECK_INT(launched(), before + 1);
  json_t *items = dt_pool_claims(&f);
  size_t i, waited = 0;
  json_t *c;
  json_array_foreach(items, i, c) {
    waited += ctrl_has_event_message(&f, lp_obj_name(c), "DisruptionBlocked",
                                     "Drift reason ImageDrift in NodePool " DT_POOL " waits for ");
  }
  json_decref(items);
  CHECK(waited >= 1); /* the node not chosen first waited for the first replacement's verdict */
  char *record = pool_record();
  CHECK(record != NULL);
  CHECK_CONTAINS(record, flagged);
  free(record);
}

/* The flagged replacement deleted: no new one is made, the NodePool's record holds the block. */
static void test_block_survives_deleting_the_replacement(void) {
  double before = launched();
  most_launched = before;
  char path[256];
  snprintf(path, sizeof path, DT_CLAIMS "/%s", flagged);
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", path, NULL), 200);
  CHECK(ctrl_wait_for(&f, 30, claim_gone, flagged));
  watch_launches(12); /* more than a pass interval */
  CHECK_INT(most_launched, before);
  json_t *items = dt_pool_claims(&f);
  CHECK_INT(json_array_size(items), 1);
  const char *left = lp_obj_name(json_array_get(items, 0));
  CHECK(left &&
        ctrl_has_event_message(&f, left, "DisruptionBlocked", "(its annotation " RECORD ": replacement "));
  json_decref(items);
}

/* A status write that changes only counters (a subnet's free addresses change with every launch) or
 * conditions is not a change of what decides drift: the block holds. */
static void test_status_counters_keep_the_block(void) {
  double before = launched();
  most_launched = before;
  CHECK_INT(ctrl_kube_pack(&f, "PATCH",
                           "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses/default/status",
                           "{s:{s:i}}", "status", "freeAddressesProbe", 4711),
            200);
  watch_launches(12); /* more than a pass interval */
  CHECK_INT(most_launched, before);
}

/* A ctrl_wait_for condition: the NodePool's record names the NodeClaim *(char **)ud. */
static int recorded(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  char *record = pool_record();
  int by = record && strstr(record, *(char *const *)ud) != NULL;
  free(record);
  return by;
}

static int record_failed(ctrl_fixture *fx, const void *ud) {
  (void)ud;
  return ctrl_has_event(fx, DT_POOL, "DriftRecordFailed");
}

#define FORBIDDEN "nodepools.karpenter.sh \"" DT_POOL "\" is forbidden: cannot patch resource \"nodepools\""

/* An edit of the node class lifts the block for exactly one more replacement, which is flagged again.
 * The API server refuses the record at first (RBAC without patch on nodepools): a Warning on the
 * NodePool says so, and the record is written once the patch is allowed (the reconcile's retry). */
static void test_nodeclass_change_lifts_the_block(void) {
  double before = launched();
  most_launched = before;
  json_t *rule = json_pack("{s:s, s:s, s:i, s:s}", "verb", "patch", "resource", "nodepools", "status", 403,
                           "message", FORBIDDEN);
  char *text = json_dumps(rule, JSON_COMPACT);
  ctrl_kube_faults(&f, text, 0);
  free(text);
  json_decref(rule);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses/default",
                           "{s:{s:{s:s}}}", "spec", "tags", "team", "edited"),
            200);
  CHECK(ctrl_wait_for(&f, 60, new_unresolvable, &flagged));
  CHECK(ctrl_wait_for(&f, 30, record_failed, NULL));
  char want[512];
  snprintf(want, sizeof want,
           "cannot write annotation " RECORD " (NodeClaim %s is " LP_DRIFT_UNRESOLVABLE "): ", flagged);
  CHECK(ctrl_has_event_message(&f, DT_POOL, "DriftRecordFailed", want));
  snprintf(want, sizeof want, "; until it is written, replacing is blocked only while NodeClaim %s exists",
           flagged);
  CHECK(ctrl_has_event_message(&f, DT_POOL, "DriftRecordFailed", want));
  CHECK(ctrl_has_event_message(&f, DT_POOL, "DriftRecordFailed", FORBIDDEN));
  CHECK(!recorded(&f, &flagged));
  json_decref(ctrl_admin(&f, "kubernetes", "DELETE", "/_sim/faults", NULL));
  watch_launches(12);
  CHECK_INT(most_launched, before + 1);
  CHECK_INT(launched(), before + 1);
  CHECK(ctrl_wait_for(&f, 60, recorded, &flagged)); /* recorded again, under the class as it is now */
}

/* An edit of the NodePool's template lifts it too (the NodePool's static hash, which NodePoolDrifted
 * compares, is not written here: only ImageDrift drifts): exactly one more replacement, made from the new
 * template, flagged again. */
static void test_template_change_lifts_the_block(void) {
  double before = launched();
  most_launched = before;
  dt_set_generation(&f, "2");
  CHECK(ctrl_wait_for(&f, 90, new_unresolvable, &flagged));
  watch_launches(12);
  CHECK_INT(most_launched, before + 1);
  CHECK_INT(launched(), before + 1);
  json_t *c = dt_claim(&f, flagged);
  CHECK_STR(dt_annotation(c, LP_REPLACED_FOR_ANNOTATION), "ImageDrift");
  CHECK_STR(lp_obj_label(c, "gen"), "2");
  json_decref(c);
  free(flagged);
}

static int replaces(const json_t *claim, const char *old) {
  const char *replaced = dt_annotation(claim, DZ_ANNOTATION_REPLACES);
  return replaced && strcmp(replaced, old) == 0;
}

/* The name (strdup'd) of the NodeClaim that replaces the one named old, or NULL. */
static char *replacement_of(const char *old) {
  return first_claim(replaces, old);
}

/* A ctrl_wait_for condition: the NodeClaim named name (a const char *) is DriftUnresolvable=False,
 * Resolved. */
static int judged_resolved(ctrl_fixture *fx, const void *name) {
  return name && ctrl_claim_condition(fx, name, LP_DRIFT_UNRESOLVABLE, "False", LP_DRIFT_RESOLVED);
}

/* A replacement judged Resolved under the inputs that hold now lifts the block of a NodePool record made
 * under the same inputs: the record may come from another replacement flagged by a policy that looks at
 * more than the inputs, and the Resolved one shows that replacing does resolve the drift. Here the rule
 * is fixed (the replacements conform), a node is replaced and its replacement judged Resolved, then a
 * record under the same inputs is written as another replacement's verdict would be: a node drifted next
 * is still replaced. */
static void test_resolved_replacement_outranks_the_record(void) {
  sim_tree_write_policy(tree, "drift", policy_fixed);
  CHECK(ctrl_wait_for(&f, 10, reloaded, &(uint64_t){4}));
  double before = launched();
  dt_post_claim(&f, "web-c");
  CHECK(ctrl_wait_for(&f, 60, claim_gone, "web-c"));
  char *proof = replacement_of("web-c");
  CHECK(proof != NULL);
  CHECK(ctrl_wait_for(&f, 30, judged_resolved, proof));
  json_t *c = dt_claim(&f, proof);
  json_t *record = json_pack("{s:s, s:s}", "nodeclaim", "web-flagged", "under",
                             dt_annotation(c, LP_REPLACED_UNDER_ANNOTATION));
  char *value = json_dumps(record, JSON_COMPACT | JSON_SORT_KEYS);
  dt_patch_pool(&f, json_pack("{s:{s:{s:s}}}", "metadata", "annotations", RECORD, value));
  free(value);
  json_decref(record);
  json_decref(c);

  dt_post_claim(&f, "web-d");
  CHECK(ctrl_wait_for(&f, 60, claim_gone, "web-d"));
  CHECK(!ctrl_has_event_message(&f, "web-d", "DisruptionBlocked", "(its annotation " RECORD));
  CHECK_INT(launched(), before + 2);
  free(proof);
}

int main(void) {
  start();
  RUN(test_unsatisfiable_rule);
  RUN(test_one_replacement_per_reason);
  RUN(test_block_survives_deleting_the_replacement);
  RUN(test_status_counters_keep_the_block);
  RUN(test_nodeclass_change_lifts_the_block);
  RUN(test_template_change_lifts_the_block);
  RUN(test_resolved_replacement_outranks_the_record);
  stop();
  return check_summary();
}
