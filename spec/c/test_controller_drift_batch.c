/* A drift pass looks instances up in batches (issue 17; engine/controller/drift_checks.c "asking in
 * batches", docs/contracts.md#looking-up-many-instances-at-once): 251 launched NodeClaims (250 over four
 * real simulated instances, one per zone, and one whose instance does not exist) evaluated by the drift
 * controller alone through the real manager, the Alibaba mapping and the Lua drift policy, against both
 * simulators over HTTP. The ECSNodeClass's status leaves out the vSwitch of zone h, so the NodeClaims of
 * that zone's instance drift for VSwitchDrift and the others do not.
 *
 * Everything runs twice: with the mapping as it ships (get_many: DescribeInstances with up to 100
 * InstanceIds), and with an operator's mapping that drops get_many (one get, one DescribeInstances, per
 * NodeClaim, as before batching). Both give the same verdict for every NodeClaim, and the NodeClaim of the
 * missing instance only is left undecided (NodeClaimNotFound); the batched pass makes at most 3
 * DescribeInstances calls where the other makes 251. Then a second pass (the class's status changed, so
 * every answer is asked again) meets one failing DescribeInstances (Forbidden.RAM, once): per instance it
 * fails one reconcile; batched it fails the reconciles of that call's NodeClaims, all with that call's
 * code, action and request ID, and no other; every NodeClaim ends with the verdict of the first pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "controller_fixture.h"
#include "log_capture.h"

#define CLAIMS    "/apis/karpenter.sh/v1/nodeclaims"
#define CLASSES   "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses"
#define POOL      "batch"
#define NCLAIMS   250
#define INSTANCES 4
#define ZONE_OUT  "cn-hangzhou-h" /* its vSwitch is not in the class's status: VSwitchDrift */
#define MISSING   "cn-hangzhou.i-bp1missing000000000"

static const lp_controller_def *const no_controllers[] = {NULL};
static const lp_controller_def *const only_drift[] = {&lp_drift_controller, NULL};

/* The operator's mapping: the shipped one without its optional get_many. */
static const char *const mapping_without_get_many =
    "-- test mapping: the shipped Alibaba mapping without get_many, so every instance is looked up alone\n"
    "local M = {}\n"
    "for k, v in pairs(require \"defaults.providers.alibaba\") do M[k] = v end\n"
    "M.get_many = nil\n"
    "return M\n";

static ctrl_fixture f;

/* What one run saw. */
typedef struct outcome {
  json_t *verdicts;        /* NodeClaim name -> its Drifted reason, "" when it has none */
  long long describes;     /* DescribeInstances calls of the first pass */
  json_t *failures;        /* the second pass's "reconcile failed" log lines */
  double unknown, drifted; /* evaluations of the first pass by result */
} outcome;

static double evaluations(void) {
  static const char *const results[] = {"drifted", "not_drifted", "unknown", "error"};
  double n = 0;
  for (size_t i = 0; i < 4; i++)
    n += ctrl_metric(&f, "luaprov_drift_evaluations_total", LP_LABELS(results[i]));
  return n;
}

static int evaluated(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  return evaluations() >= *(const double *)ud;
}

/* Runs until at least n evaluations happened since from, then none for half a second (a NodeClaim marked
 * drifted is evaluated again after its own write, a failed one after its backoff). */
static void settle(double from, double n) {
  double want = from + n;
  CHECK(ctrl_wait_for(&f, 60, evaluated, &want));
  double seen;
  do {
    seen = evaluations();
    ctrl_run_for(&f, 0.5);
  } while (evaluations() != seen);
}

/* The fixture with its script host and CloudProvider over tree (NULL: the shipped scripts alone). */
static void start(const char *tree) {
  ctrl_fixture_start(&f, no_controllers, NULL);
  ctrl_stop_manager(&f, f.manager);
  f.manager = NULL;
  if (!tree) return;
  lp_cloudprovider_free(f.cloud);
  lp_script_host_close(f.scripts, NULL, NULL);
  f.scripts = sim_tree_scripts(&f.loop, f.http, tree);
  f.cloud = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &f.loop,
                                                            .scripts = f.scripts,
                                                            .cluster_id = "luaprov-sim",
                                                            .endpoint = lp_sim_url(f.sim, "alibaba"),
                                                            .refresh_interval_s = -1});
}

/* Launches one instance per zone through Create: the NodeClaims the CloudProvider answered. */
static json_t *launch(const json_t *nodeclass) {
  static const char *const zones[INSTANCES] = {"cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j",
                                               "cn-hangzhou-k"};
  json_t *out = json_array();
  for (size_t i = 0; i < INSTANCES; i++) {
    char name[32];
    snprintf(name, sizeof name, "instance-%zu", i);
    json_t *claim = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}, "
                              "{s:s, s:s, s:[s]}], s:{s:{s:s}}}}",
                              "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name,
                              "uid", name, "labels", "karpenter.sh/nodepool", POOL, "spec", "nodeClassRef",
                              "group", "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name",
                              "default", "requirements", "key", "karpenter.sh/capacity-type", "operator",
                              "In", "values", "on-demand", "key", "topology.kubernetes.io/zone", "operator",
                              "In", "values", zones[i], "resources", "requests", "cpu", "1");
    lp_cp_outcome o = {0};
    lp_cp_create(f.cloud, claim, nodeclass, lp_cp_outcome_store, &o);
    lp_cp_outcome_wait(&f.loop, &o);
    json_decref(claim);
    if (o.error) fprintf(stderr, "launch %s: %s\n", name, o.error->message);
    CHECK(o.value != NULL);
    json_array_append_new(out, o.value);
    lp_error_free(o.error);
  }
  return out;
}

/* Stores NodeClaim name as launched (Launched=True), a copy of launched with provider_id. */
static void store_claim(const char *name, const json_t *launched, const char *provider_id) {
  json_t *claim = json_deep_copy(launched);
  json_t *status = json_object_get(claim, "status");
  json_incref(status);
  json_object_del(claim, "status");
  json_t *md = json_object_get(claim, "metadata");
  json_object_del(md, "uid");
  json_object_set_new(md, "name", json_string(name));
  char *body = json_dumps(claim, JSON_COMPACT);
  long code = 0;
  json_decref(ctrl_kube(&f, "POST", CLAIMS, body, &code));
  CHECK_INT(code, 201);
  free(body);
  json_decref(claim);
  json_object_set_new(status, "providerID", json_string(provider_id));
  json_object_set_new(status, "conditions",
                      json_pack("[{s:s, s:s, s:s, s:s, s:s}]", "type", "Launched", "status", "True", "reason",
                                "Launched", "message", "", "lastTransitionTime", "2026-01-01T00:00:00Z"));
  char path[256];
  snprintf(path, sizeof path, CLAIMS "/%s/status", name);
  json_t *patch = json_pack("{s:o}", "status", status);
  body = json_dumps(patch, JSON_COMPACT);
  json_decref(ctrl_kube(&f, "PATCH", path, body, &code));
  CHECK_INT(code, 200);
  free(body);
  json_decref(patch);
}

/* The ECSNodeClass "default" stored resolved, its status without zone h's vSwitch; the NodePool; the
 * NodeClaims. */
static void seed(void) {
  json_t *nodeclass = mapping_resolved_nodeclass(f.scripts, f.sim);
  json_t *launched = launch(nodeclass);
  json_t *status = json_deep_copy(json_object_get(nodeclass, "status"));
  json_t *kept = json_array();
  size_t i;
  json_t *vswitch;
  json_array_foreach(json_object_get(status, "vSwitches"), i, vswitch) {
    if (strcmp(json_string_value(json_object_get(vswitch, "zoneID")), ZONE_OUT) != 0)
      json_array_append(kept, vswitch);
  }
  CHECK_INT(json_array_size(kept), json_array_size(json_object_get(status, "vSwitches")) - 1);
  json_object_set_new(status, "vSwitches", kept);
  json_object_del(nodeclass, "status");
  CHECK_INT(ctrl_kube_pack(&f, "POST", CLASSES, "O", nodeclass), 201);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", CLASSES "/default/status", "{s:o}", "status", status), 200);
  CHECK_INT(ctrl_kube_pack(&f, "POST", "/apis/karpenter.sh/v1/nodepools",
                           "{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}}}",
                           "apiVersion", "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", POOL,
                           "spec", "template", "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com",
                           "kind", "ECSNodeClass", "name", "default", "requirements", "key",
                           "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand"),
            201);
  for (size_t k = 0; k < NCLAIMS; k++) {
    char name[32];
    snprintf(name, sizeof name, "claim-%03zu", k);
    const json_t *of = json_array_get(launched, k % INSTANCES);
    store_claim(name, of, lp_obj_str(of, "status.providerID"));
    if (k == NCLAIMS / 2) store_claim("claim-missing", of, MISSING); /* inside a batch, not first */
  }
  json_decref(launched);
  json_decref(nodeclass);
}

/* Every NodeClaim's Drifted reason ("" for none). */
static json_t *verdicts(void) {
  json_t *list = ctrl_get(&f, CLAIMS);
  json_t *out = json_object();
  size_t i;
  json_t *claim;
  json_array_foreach(json_object_get(list, "items"), i, claim) {
    const json_t *drifted = lp_condition_get(claim, "Drifted");
    const char *reason = json_string_value(json_object_get(drifted, "reason"));
    json_object_set_new(out, lp_obj_name(claim), json_string(reason ? reason : ""));
  }
  json_decref(list);
  return out;
}

static outcome run(const char *tree) {
  outcome out = {0};
  start(tree);
  seed();
  long long describes0 = ctrl_alibaba_calls(&f, "DescribeInstances");
  lp_controllers_config cfg = ctrl_manager_config(&f, only_drift);
  cfg.settings = (lp_ctrl_settings){.nodeclass_resync_s = 3600}; /* one evaluation each, no resync */
  lp_error *err = NULL;
  f.manager = lp_controllers_start(&cfg, &err);
  if (!f.manager) abort();
  settle(0, NCLAIMS + 1);
  out.describes = ctrl_alibaba_calls(&f, "DescribeInstances") - describes0;
  out.unknown = ctrl_metric(&f, "luaprov_drift_evaluations_total", LP_LABELS("unknown"));
  out.drifted = ctrl_metric(&f, "luaprov_drift_evaluations_total", LP_LABELS("drifted"));
  out.verdicts = verdicts();

  /* second pass: every answer asked again, the first DescribeInstances refused */
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/faults",
                         "{\"action\": \"DescribeInstances\", \"code\": \"Forbidden.RAM\", \"count\": 1}"));
  log_capture_start(LP_LOG_ERROR);
  CHECK_INT(ctrl_kube_pack(&f, "PATCH", CLASSES "/default/status", "{s:{s:s}}", "status", "note", "again"),
            200);
  settle(evaluations(), NCLAIMS + 1);
  json_t *lines = log_capture_stop(NULL);
  out.failures = json_array();
  const json_t *line;
  for (size_t n = 0; (line = log_capture_line(lines, "reconcile failed, will retry", n)); n++)
    json_array_append(out.failures, (json_t *)line);
  json_decref(lines);
  json_t *again = verdicts();
  CHECK(json_equal(again, out.verdicts));
  json_decref(again);
  ctrl_fixture_stop(&f);
  return out;
}

static void check_refused(const json_t *failures, size_t min, size_t max, const char *code) {
  CHECK(json_array_size(failures) >= min && json_array_size(failures) <= max);
  const char *request_id = json_string_value(json_object_get(json_array_get(failures, 0), "request_id"));
  CHECK(request_id != NULL);
  size_t i;
  json_t *line;
  json_array_foreach(failures, i, line) {
    CHECK_STR(json_string_value(json_object_get(line, "code")), code);
    CHECK_STR(json_string_value(json_object_get(line, "action")), "DescribeInstances");
    CHECK_STR(json_string_value(json_object_get(line, "request_id")), request_id ? request_id : "?");
    CHECK(strstr(json_string_value(json_object_get(line, "key")), "claim-") != NULL);
  }
}

/* Makes tree (a mkdtemp template) a script tree whose Alibaba mapping is mapping. */
static int mapping_tree(char *tree, const char *mapping) {
  sim_tree_make(tree);
  char dir[300];
  snprintf(dir, sizeof dir, "%s/providers", tree);
  CHECK(mkdir(dir, 0700) == 0);
  snprintf(dir, sizeof dir, "%s/providers/alibaba", tree);
  CHECK(mkdir(dir, 0700) == 0);
  char path[340];
  snprintf(path, sizeof path, "%s/init.lua", dir);
  FILE *file = fopen(path, "w");
  CHECK(file != NULL);
  if (!file) return 0;
  fputs(mapping, file);
  fclose(file);
  return 1;
}

static void test_batched_as_per_instance(void) {
  char tree[] = "/tmp/luaprov-drift-batch-XXXXXX";
  if (!mapping_tree(tree, mapping_without_get_many)) return;

  outcome one = run(tree);
  outcome many = run(NULL);

  /* before batching: one DescribeInstances per NodeClaim; now one per 100 */
  CHECK_INT(one.describes, NCLAIMS + 1);
  CHECK(many.describes >= 1 && many.describes <= (NCLAIMS + 1 + 99) / 100);
  printf("DescribeInstances of a cold pass over %d NodeClaims: %lld per instance, %lld batched\n",
         NCLAIMS + 1, one.describes, many.describes);

  /* the same verdicts: zone h's NodeClaims VSwitchDrift, the missing instance's none (not known) */
  CHECK(json_equal(one.verdicts, many.verdicts));
  CHECK_INT(json_object_size(many.verdicts), NCLAIMS + 1);
  size_t drifted = 0;
  const char *name;
  json_t *reason;
  json_object_foreach(many.verdicts, name, reason) {
    if (strcmp(json_string_value(reason), "VSwitchDrift") == 0)
      drifted++;
    else
      CHECK_STR(json_string_value(reason), "");
  }
  CHECK_INT(drifted, (NCLAIMS + INSTANCES - 1) / INSTANCES);
  CHECK_STR(json_string_value(json_object_get(many.verdicts, "claim-missing")), "");
  CHECK_INT(many.unknown, 1);
  CHECK_INT(one.unknown, 1);
  CHECK_INT(many.drifted, one.drifted); /* each drifted one twice: marking it, and after its write */

  /* a refused lookup: one NodeClaim per instance; batched, the NodeClaims of that call, with its error */
  check_refused(one.failures, 1, 1, "Auth");
  check_refused(many.failures, 2, 100, "Auth");

  json_decref(one.verdicts);
  json_decref(many.verdicts);
  json_decref(one.failures);
  json_decref(many.failures);
  CHECK(sim_tree_remove(tree) == 0);
}

/* A get_many that answers something other than a list fails the evaluations of its call's NodeClaims
 * with a Contract error naming it, and decides none of them. */
static const char *const mapping_get_many_not_a_list =
    "-- test mapping: the shipped Alibaba mapping whose get_many answers a string\n"
    "local M = {}\n"
    "for k, v in pairs(require \"defaults.providers.alibaba\") do M[k] = v end\n"
    "function M.get_many() return \"not a list\" end\n"
    "return M\n";

static void test_get_many_not_a_list(void) {
  char tree[] = "/tmp/luaprov-drift-batch-XXXXXX";
  if (!mapping_tree(tree, mapping_get_many_not_a_list)) return;
  start(tree);
  seed();
  lp_controllers_config cfg = ctrl_manager_config(&f, only_drift);
  cfg.settings = (lp_ctrl_settings){.nodeclass_resync_s = 3600};
  lp_error *err = NULL;
  log_capture_start(LP_LOG_ERROR);
  f.manager = lp_controllers_start(&cfg, &err);
  if (!f.manager) abort();
  settle(0, NCLAIMS + 1);
  json_t *lines = log_capture_stop(NULL);
  const json_t *line = log_capture_line(lines, "reconcile failed, will retry", 0);
  CHECK(line != NULL);
  CHECK_STR(json_string_value(json_object_get(line, "code")), "Contract");
  CHECK_CONTAINS(json_string_value(json_object_get(line, "error")), "get_many: did not return a list");
  CHECK_INT(ctrl_metric(&f, "luaprov_drift_evaluations_total", LP_LABELS("drifted")), 0);
  json_t *decided = verdicts();
  const char *name;
  json_t *reason;
  json_object_foreach(decided, name, reason) CHECK_STR(json_string_value(reason), "");
  json_decref(decided);
  json_decref(lines);
  ctrl_fixture_stop(&f);
  CHECK(sim_tree_remove(tree) == 0);
}

int main(void) {
  RUN(test_batched_as_per_instance);
  RUN(test_get_many_not_a_list);
  return check_summary();
}
