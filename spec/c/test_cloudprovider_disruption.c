/* lp_cp_can_disrupt, the disruption policy (policies/disruption.lua can_disrupt) the disruption
 * controller asks before a voluntary disruption: the shipped default and a tree without the module
 * allow; an operator's policy vetoes with its why; a raise, an exhausted budget or an answer that is
 * neither true nor false is an error naming the file, line and function; a hot reload changes the
 * answer and a broken one keeps the old; the validator rejects a module without can_disrupt; and
 * luaprov_disruption_policy_evaluations_total counts every answer by generation and result. No cloud
 * call and no simulator: the policy gets everything in its arguments. Reloads are triggered by the
 * test (lp_script_host_reload), not by watching files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "check.h"
#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "core/log.h"
#include "core/metrics.h"
#include "log_capture.h"
#include "sim_admin.h"

static uv_loop_t loop;
static lp_script_host *scripts;
static lp_cloudprovider *cp;
static char tree[] = "/tmp/luaprov-disruption-XXXXXX";

/* What done reported, and how often. */
typedef struct answer {
  int calls;
  int allowed;
  char *why;
  lp_error *err;
} answer;

static void store(int allowed, const char *why, lp_error *err, void *ud) {
  answer *a = ud;
  a->calls++;
  a->allowed = allowed;
  a->why = why ? strdup(why) : NULL;
  a->err = err;
}

static void answer_clear(answer *a) {
  free(a->why);
  lp_error_free(a->err);
  memset(a, 0, sizeof *a);
}

static json_t *claim(void) {
  return json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s}}", "apiVersion", "karpenter.sh/v1", "kind",
                   "NodeClaim", "metadata", "name", "nc-1", "labels", "karpenter.sh/nodepool", "default",
                   "status", "providerID", "cn-hangzhou.i-1");
}

static json_t *pods_of(const char *namespace) {
  return json_pack("[{s:{s:s, s:s}}, {s:{s:s, s:s}}]", "metadata", "name", "web-1", "namespace", "default",
                   "metadata", "name", "pay-1", "namespace", namespace);
}

static json_t *ctx_at(const char *reason, const char *method) {
  return json_pack("{s:s, s:s, s:I, s:s}", "reason", reason, "nodepool", "default", "now",
                   (json_int_t)1796205600, "method", method);
}

/* Asks provider p about the node (node NULL = not registered) and runs the loop until it answers; checks
 * the answer did not come inside the call and came once. */
static void ask_on(lp_cloudprovider *p, const json_t *node, answer *a) {
  json_t *c = claim(), *pods = pods_of("payments"),
         *ctx = ctx_at("Underutilized", "single-node consolidation");
  lp_cp_can_disrupt(p, c, node, pods, ctx, store, a);
  json_decref(c);
  json_decref(pods);
  json_decref(ctx);
  CHECK_INT(a->calls, 0);
  while (!a->calls) uv_run(&loop, UV_RUN_ONCE);
  uv_run(&loop, UV_RUN_NOWAIT); /* a second call would show here */
  CHECK_INT(a->calls, 1);
}

static void ask(answer *a) {
  ask_on(cp, NULL, a);
}

static double evaluations(uint64_t gen, const char *result) {
  char label[24];
  snprintf(label, sizeof label, "%llu", (unsigned long long)gen);
  lp_metric *m = lp_metrics_find(lp_metrics_default(), "luaprov_disruption_policy_evaluations_total");
  return m ? lp_metric_value(m, LP_LABELS(label, result)) : 0;
}

/* Writes the operator's policy and reloads; returns lp_script_host_reload's answer. */
static int install(const char *text) {
  sim_tree_write_policy(tree, "disruption", text);
  lp_problems problems = {0};
  int rc = lp_script_host_reload(scripts, "test", 1, &problems);
  lp_problems_free(&problems);
  return rc;
}

static void test_default_allows(void) {
  uint64_t gen = lp_script_host_generation_id(scripts);
  double before = evaluations(gen, "allowed");
  answer a = {0};
  ask(&a);
  CHECK_INT(a.allowed, 1);
  CHECK(a.why == NULL);
  CHECK(a.err == NULL);
  CHECK_INT(evaluations(gen, "allowed") - before, 1);
  answer_clear(&a);
}

/* A tree without policies/disruption.lua (defaults included): allowed, without asking anything. */
static void test_no_module_allows(void) {
  char bare[] = "/tmp/luaprov-disruption-bare-XXXXXX";
  sim_tree_make(bare);
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(
      &(lp_script_host_config){.loop = &loop, .defaults_dir = bare, .modules = lp_contract_modules},
      &problems);
  lp_problems_free(&problems);
  CHECK(h != NULL);
  if (!h) return;
  log_capture_start(LP_LOG_ERROR); /* the provider complains that this tree has no mapping */
  lp_cloudprovider *p =
      lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &loop, .scripts = h, .refresh_interval_s = -1});
  json_decref(log_capture_stop(NULL));
  uint64_t gen = lp_script_host_generation_id(h);
  double before = evaluations(gen, "allowed") + evaluations(gen, "vetoed") + evaluations(gen, "error");
  answer a = {0};
  ask_on(p, NULL, &a);
  CHECK_INT(a.allowed, 1);
  CHECK(a.why == NULL);
  CHECK(a.err == NULL);
  /* no policy, no answer to count */
  CHECK_INT(evaluations(gen, "allowed") + evaluations(gen, "vetoed") + evaluations(gen, "error"), before);
  answer_clear(&a);
  lp_cloudprovider_free(p);
  lp_script_host_close(h, NULL, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(sim_tree_remove(bare) == 0);
}

/* The policy sees the NodeClaim, json.null for an unregistered node, the pods and ctx. */
static void test_veto_with_why(void) {
  CHECK_INT(install("local json = require('luaprov').json\n"
                    "local M = {}\n"
                    "function M.can_disrupt(nodeclaim, node, pods, ctx)\n"
                    "  local nodename = node == json.null and '-' or node.metadata.name\n"
                    "  return false, table.concat({nodeclaim.metadata.name, nodename, #pods,\n"
                    "    pods[2].metadata.namespace, ctx.reason, ctx.nodepool, ctx.now, ctx.method}, ' ')\n"
                    "end\n"
                    "return M\n"),
            1);
  uint64_t gen = lp_script_host_generation_id(scripts);
  answer a = {0};
  log_capture_start(LP_LOG_DEBUG);
  ask(&a);
  json_t *lines = log_capture_stop(NULL);
  CHECK_INT(a.allowed, 0);
  CHECK(a.err == NULL);
  CHECK_STR(a.why, "nc-1 - 2 payments Underutilized default 1796205600 single-node consolidation");
  const json_t *logged = log_capture_line(lines, "disruption policy answered", 0);
  CHECK_STR(json_string_value(json_object_get(logged, "nodeclaim")), "nc-1");
  CHECK_STR(json_string_value(json_object_get(logged, "method")), "single-node consolidation");
  CHECK_STR(json_string_value(json_object_get(logged, "result")), "vetoed");
  CHECK_STR(json_string_value(json_object_get(logged, "why")), a.why);
  CHECK_INT(json_integer_value(json_object_get(logged, "generation")), gen);
  json_decref(lines);
  answer_clear(&a);

  json_t *node = json_pack("{s:{s:s}}", "metadata", "name", "node-1");
  ask_on(cp, node, &a);
  CHECK_CONTAINS(a.why, "nc-1 node-1 2");
  answer_clear(&a);
  json_decref(node);
  CHECK_INT(evaluations(gen, "vetoed"), 2);

  /* false without why: the engine's words */
  CHECK_INT(install("return { can_disrupt = function() return false end }\n"), 1);
  ask(&a);
  CHECK_INT(a.allowed, 0);
  CHECK_STR(a.why, "vetoed by the disruption policy");
  answer_clear(&a);
}

static void check_failure(const char *code, const char *cause, const char *where) {
  uint64_t gen = lp_script_host_generation_id(scripts);
  answer a = {0};
  ask(&a);
  CHECK_INT(a.allowed, 0);
  CHECK(a.why == NULL);
  CHECK(a.err != NULL);
  if (a.err) {
    CHECK_STR(a.err->code, code);
    CHECK_CONTAINS(a.err->message, where);
    CHECK_CONTAINS(a.err->message, "can_disrupt");
    CHECK_CONTAINS(a.err->message, cause);
    CHECK(a.err->file && strstr(a.err->file, "policies/disruption.lua"));
    CHECK(a.err->line > 0); /* placed in the fields, not only in the message */
    if (getenv("LUAPROV_TEST_LOG")) fprintf(stderr, "%s: %s\n", a.err->code, a.err->message);
  }
  CHECK_INT(evaluations(gen, "error"), 1);
  answer_clear(&a);
}

static void test_raise_names_the_line(void) {
  CHECK_INT(install("local M = {}\n"
                    "function M.can_disrupt(_nodeclaim, _node, _pods, _ctx)\n"
                    "  error('no disruption today')\n"
                    "end\n"
                    "return M\n"),
            1);
  check_failure("ScriptError", "policies/disruption.lua:3: no disruption today",
                "policies/disruption.lua:2:");
}

static void test_budget(void) {
  CHECK_INT(install("local M = {}\n"
                    "function M.can_disrupt(_nodeclaim, _node, _pods, _ctx)\n"
                    "  while true do end\n"
                    "end\n"
                    "return M\n"),
            1);
  check_failure("Budget", "instruction budget", "policies/disruption.lua:2:");
}

static void test_neither_true_nor_false(void) {
  CHECK_INT(install("local M = {}\n"
                    "function M.can_disrupt() return 'yes' end\n"
                    "return M\n"),
            1);
  check_failure("Contract",
                "policies/disruption.lua:2: can_disrupt returned \"yes\", which is neither true nor false",
                "policies/disruption.lua:2:");
  CHECK_INT(install("local M = {}\n\n"
                    "function M.can_disrupt() return nil, 'cannot tell' end\n"
                    "return M\n"),
            1);
  check_failure("Contract", "policies/disruption.lua:3: can_disrupt returned nil, \"cannot tell\"",
                "policies/disruption.lua:3:");
  CHECK_INT(
      install(
          "return { can_disrupt = function() return nil, { code = 'Throttled', message = 'later' } end }\n"),
      1);
  check_failure("Contract", "returned nil, \"later\"", "policies/disruption.lua:1:");
  CHECK_INT(install("return { can_disrupt = function() end }\n"), 1);
  check_failure("Contract", "returned nothing", "policies/disruption.lua:1:");
}

/* A reload's generation answers from then on; one that does not load leaves the last in service. */
static void test_hot_reload(void) {
  CHECK_INT(install("return { can_disrupt = function() return true end }\n"), 1);
  uint64_t first = lp_script_host_generation_id(scripts);
  answer a = {0};
  ask(&a);
  CHECK_INT(a.allowed, 1);
  answer_clear(&a);

  CHECK_INT(install("return { can_disrupt = function() return false, 'second edition' end }\n"), 1);
  uint64_t second = lp_script_host_generation_id(scripts);
  CHECK_INT(second, first + 1);
  ask(&a);
  CHECK_INT(a.allowed, 0);
  CHECK_STR(a.why, "second edition");
  answer_clear(&a);

  log_capture_start(LP_LOG_ERROR);
  CHECK_INT(install("return { can_disrupt = function() return true end\n"), -1); /* a syntax error */
  json_t *lines = log_capture_stop(NULL);
  CHECK(log_capture_line(lines, "script reload rejected, previous generation stays in service", 0) != NULL);
  json_decref(lines);
  CHECK_INT(lp_script_host_generation_id(scripts), second);
  ask(&a);
  CHECK_INT(a.allowed, 0);
  CHECK_STR(a.why, "second edition");
  answer_clear(&a);

  CHECK_INT(evaluations(first, "allowed"), 1);
  CHECK_INT(evaluations(first, "vetoed"), 0);
  CHECK_INT(evaluations(second, "vetoed"), 2);
  CHECK_INT(evaluations(second, "allowed"), 0);
}

/* The contract is checked at load: a module without can_disrupt is not served. */
static void test_validator(void) {
  uint64_t gen = lp_script_host_generation_id(scripts);
  sim_tree_write_policy(tree, "disruption",
                        "local M = {}\n"
                        "function M.can_disrupted() return true end\n"
                        "return M\n");
  lp_problems problems = {0};
  log_capture_start(LP_LOG_ERROR); /* the rejection is logged too */
  CHECK_INT(lp_script_host_reload(scripts, "test", 1, &problems), -1);
  json_decref(log_capture_stop(NULL));
  char *text = lp_problems_render(&problems);
  CHECK_CONTAINS(text, "policies/disruption.lua:2:");
  CHECK_CONTAINS(text, "the disruption policy must export function 'can_disrupt'");
  CHECK_CONTAINS(text, "did you mean can_disrupt?");
  free(text);
  lp_problems_free(&problems);
  CHECK_INT(lp_script_host_generation_id(scripts), gen);
}

int main(void) {
  lp_log_configure(getenv("LUAPROV_TEST_LOG") ? LP_LOG_DEBUG : LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  uv_loop_init(&loop);
  sim_tree_make(tree);
  lp_problems problems = {0};
  /* a small budget, so the endless loop ends quickly */
  scripts = lp_script_host_new(&(lp_script_host_config){.loop = &loop,
                                                        .scripts_dir = tree,
                                                        .defaults_dir = LUAPROV_SOURCE_DIR,
                                                        .modules = lp_contract_modules,
                                                        .limits = {.call_instructions = 1000000},
                                                        /* the trees below reach the run-time checks */
                                                        .no_policy_calls = 1},
                               &problems);
  lp_problems_free(&problems);
  if (!scripts) abort();
  cp = lp_cloudprovider_new(
      &(lp_cloudprovider_config){.loop = &loop, .scripts = scripts, .refresh_interval_s = -1});
  RUN(test_default_allows);
  RUN(test_no_module_allows);
  RUN(test_veto_with_why);
  RUN(test_raise_names_the_line);
  RUN(test_budget);
  RUN(test_neither_true_nor_false);
  RUN(test_hot_reload);
  RUN(test_validator);
  lp_cloudprovider_free(cp);
  lp_script_host_close(scripts, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  CHECK(sim_tree_remove(tree) == 0);
  return check_summary();
}
