/* Hot reload of the drift policy under load: 1,000 IsDrifted calls are in flight (each awaits the
 * Alibaba simulator's DescribeInstances over real HTTP) when an operator rewrites policies/drift.lua in
 * a watched tree. Every call must end exactly once, none lost or failed, each answered by one whole
 * generation — the old one or the new one — and luaprov_drift_policy_evaluations_total{generation}
 * must account for every answer; calls started after the swap are answered by the new generation.
 *
 * To make "mid-way" deterministic, the simulator answers the first FAST DescribeInstances calls at once
 * and holds the next STALLED for STALL_S seconds (a "timeout" fault shorter than the mapping's request
 * timeout): with the HTTP client's 16 connections to the simulator all held, no other call can reach
 * the policy until the stall ends, and the reload happens inside it. So exactly FAST answers come from
 * generation 1 and the rest from generation 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "mapping_fixture.h"
#include "sim_admin.h"

#define CALLS   1000
#define LATE    100 /* calls started after the swap, while the first ones are still in flight */
#define FAST    100
#define STALLED 16 /* the HTTP client's connections per host */
#define STALL_S 2

/* Generation 2 marks every answer, so each one tells which generation gave it. */
#define MARK "PolicyReloadedDrift"

static uv_loop_t loop;
static lp_sim *sim;
static lp_http_client *http;
static lp_script_host *scripts;
static lp_cloudprovider *cp;
static char tree[] = "/tmp/luaprov-drift-reload-XXXXXX";

/* One IsDrifted call: how often its callback ran and with what. */
typedef struct slot {
  int calls;
  int errors;
  int marked; /* answered MARK (generation 2); otherwise "" (generation 1) */
} slot;

static slot slots[CALLS + LATE];
static int answered;

static void drift_answer(json_t *value, lp_error *err, void *ud) {
  slot *s = ud;
  s->calls++;
  answered++;
  if (err) {
    s->errors++;
    fprintf(stderr, "IsDrifted %ld: %s: %s\n", (long)(s - slots), err->code, err->message);
  } else if (strcmp(json_string_value(value) ? json_string_value(value) : "?", MARK) == 0) {
    s->marked = 1;
  } else if (strcmp(json_string_value(value) ? json_string_value(value) : "?", "") != 0) {
    s->errors++;
  }
  json_decref(value);
  lp_error_free(err);
}

/* Runs the loop until *counter >= target or timeout_s passes. */
static int run_until(const int *counter, int target, double timeout_s) {
  double deadline = lp_clock_monotonic() + timeout_s;
  while (*counter < target && lp_clock_monotonic() < deadline) uv_run(&loop, UV_RUN_ONCE);
  return *counter >= target;
}

static int generation;

static void run_until_generation(int target, double timeout_s) {
  double deadline = lp_clock_monotonic() + timeout_s;
  while ((generation = (int)lp_script_host_generation_id(scripts)) < target &&
         lp_clock_monotonic() < deadline)
    uv_run(&loop, UV_RUN_ONCE);
}

static double evaluations(int gen, const char *result) {
  char label[24];
  snprintf(label, sizeof label, "%d", gen);
  lp_metric *m = lp_metrics_find(lp_metrics_default(), "luaprov_drift_policy_evaluations_total");
  return m ? lp_metric_value(m, LP_LABELS(label, result)) : 0;
}

/* ---- the operator's tree ------------------------------------------------------------------- */

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "r"), *out = fopen(to, "w");
  if (!in || !out) abort();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  fclose(in);
  fclose(out);
}

/* Generation 1 runs a copy of the shipped policy from the operator's tree, watched. */
static void start(void) {
  if (sim_fixture_start(&loop, "alibaba", &sim, &http, &scripts) != 0) abort();
  lp_script_host_close(scripts, NULL, NULL); /* the defaults-only host: this test runs its own */
  sim_tree_make(tree);
  char path[300];
  snprintf(path, sizeof path, "%s/policies/drift.lua", tree);
  copy_file(LUAPROV_SOURCE_DIR "/policies/drift.lua", path);
  scripts = sim_tree_scripts(&loop, http, tree);
  cp = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &loop,
                                                       .scripts = scripts,
                                                       .cluster_id = "luaprov-sim",
                                                       .endpoint = lp_sim_url(sim, "alibaba"),
                                                       .refresh_interval_s = -1});
}

static void stop(void) {
  lp_cloudprovider_free(cp);
  sim_fixture_stop(&loop, sim, http, scripts);
  CHECK(sim_tree_remove(tree) == 0);
}

/* A NodeClaim launched on the simulated account with nodeclass: the shipped policy finds it not
 * drifted. */
static json_t *launched_claim(const json_t *nodeclass) {
  json_t *claim =
      json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}",
                "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", "nc-drift", "uid",
                "nc-drift-uid", "labels", "karpenter.sh/nodepool", "default", "spec", "nodeClassRef", "group",
                "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default", "requirements",
                "key", "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand");
  lp_cp_outcome o = {0};
  lp_cp_create(cp, claim, nodeclass, lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&loop, &o);
  json_decref(claim);
  if (o.error) {
    fprintf(stderr, "launch: %s\n", o.error->message);
    abort();
  }
  return o.value;
}

/* ---- the case -------------------------------------------------------------------------------- */

static void test_reload_under_load(void) {
  json_t *nodeclass = mapping_resolved_nodeclass(scripts, sim);
  json_t *claim = launched_claim(nodeclass);
  int first = (int)lp_script_host_generation_id(scripts);
  double before_old = evaluations(first, "not_drifted"), before_new = evaluations(first + 1, "drifted");

  char fault[160];
  snprintf(fault, sizeof fault,
           "{\"action\":\"DescribeInstances\",\"kind\":\"timeout\",\"seconds\":%d,\"skip\":%d,\"count\":%d}",
           STALL_S, FAST, STALLED);
  json_decref(sim_admin(&loop, http, sim, "alibaba", "POST", "/_sim/faults", fault));
  for (int i = 0; i < CALLS; i++) lp_cp_is_drifted(cp, claim, nodeclass, drift_answer, &slots[i]);

  /* the first answers are in, the rest wait behind the stalled connections: replace the policy */
  CHECK(run_until(&answered, FAST, 20));
  CHECK_INT(answered, FAST);
  sim_tree_write_policy(
      tree, "drift",
      "-- The drift policy, second edition: every node drifted, with a reason that marks the\n"
      "-- generation that said so.\n"
      "local default = require 'defaults.policies.drift'\n"
      "local M = {}\n"
      "for k, v in pairs(default) do M[k] = v end\n"
      "function M.is_drifted(_nodeclaim, _nodeclass, _instance, _ctx)\n"
      "  return '" MARK "'\n"
      "end\n"
      "return M\n");
  run_until_generation(first + 1, STALL_S);
  CHECK_INT(generation, first + 1);
  CHECK(answered < CALLS); /* the reload happened with calls in flight */

  /* calls started now, behind the ones in flight, are the new generation's */
  for (int i = CALLS; i < CALLS + LATE; i++) lp_cp_is_drifted(cp, claim, nodeclass, drift_answer, &slots[i]);
  CHECK(run_until(&answered, CALLS + LATE, 60));
  uv_run(&loop, UV_RUN_NOWAIT); /* a callback running twice would show here */

  int once = 0, errors = 0, marked = 0, late_marked = 0;
  for (int i = 0; i < CALLS + LATE; i++) {
    once += slots[i].calls == 1;
    errors += slots[i].errors;
    marked += slots[i].marked;
    if (i >= CALLS) late_marked += slots[i].marked;
  }
  CHECK_INT(answered, CALLS + LATE);
  CHECK_INT(once, CALLS + LATE);
  CHECK_INT(errors, 0);
  CHECK_INT(marked, CALLS + LATE - FAST); /* generation 1 answered exactly the calls before the stall */
  CHECK_INT(late_marked, LATE);

  /* the metric accounts for every answer under the generation that gave it */
  CHECK_INT(evaluations(first, "not_drifted") - before_old, FAST);
  CHECK_INT(evaluations(first + 1, "drifted") - before_new, CALLS + LATE - FAST);
  CHECK_INT(evaluations(first, "drifted") + evaluations(first + 1, "not_drifted"), 0);
  CHECK_INT(evaluations(first, "error") + evaluations(first + 1, "error"), 0);
  json_decref(sim_admin(&loop, http, sim, "alibaba", "DELETE", "/_sim/faults", NULL));
  json_decref(claim);
  json_decref(nodeclass);
}

int main(void) {
  lp_log_configure(getenv("LUAPROV_TEST_LOG") ? LP_LOG_DEBUG : LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  start();
  RUN(test_reload_under_load);
  stop();
  return check_summary();
}
