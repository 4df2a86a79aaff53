/* The CloudProvider's calls into the operator's policies, each an operator's tree of one policy over the
 * default scripts against the Alibaba simulator (spec/c/cloudprovider_fixture.h): a drift policy without
 * the optional static_drift, drift and tag answers that are not strings (refused with the words and
 * place `luaprov eval` gives), the engine's own tags over whatever the tag policy returns (rule CP7,
 * docs/contracts.md), a memory-limit error and a raise placed at their lines (the raise with its
 * traceback), and repair lists refused with eval's words. Load-time validation's calls are off in these
 * trees, so the run-time checks are the ones that answer. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cloudprovider_fixture.h"
#include "core/metrics.h"

static cp_fixture fx;

/* An operator's tree holding policies/FILE, a CloudProvider over it, and a NodeClaim (on demand, no
 * requests) launched through it. */
typedef struct policy_case {
  char dir[32];
  lp_script_host *scripts;
  lp_cloudprovider *provider;
  json_t *claim;
  lp_cp_outcome launch; /* Create of claim: value (the NodeClaim launched) or error */
} policy_case;

/* Starts a case of policies/FILE with text lua and a NodeClaim named name (uid "uid-NAME"); 0, or -1
 * when the tree did not load (nothing to stop then). */
static int policy_case_start(policy_case *c, const char *file, const char *lua, const char *name) {
  memset(c, 0, sizeof *c);
  c->scripts = cpf_tree_new(&fx, c->dir, "policies", file, lua);
  if (!c->scripts) return -1;
  c->provider = cpf_provider(&fx, c->scripts, 0);
  char uid[96];
  snprintf(uid, sizeof uid, "uid-%s", name);
  c->claim = cpf_nodeclaim(name, uid, CPF_ON_DEMAND_REQ, "{}");
  const char *code;
  lp_cp_create(c->provider, c->claim, fx.nodeclass, lp_cp_outcome_store, &c->launch);
  cpf_wait(&fx, &c->launch, &code);
  return 0;
}

static void policy_case_stop(policy_case *c) {
  json_decref(c->launch.value);
  lp_error_free(c->launch.error);
  json_decref(c->claim);
  lp_cloudprovider_free(c->provider);
  cpf_tree_free(c->scripts, c->dir);
}

/* IsDrifted through the case's provider for the NodeClaim it launched: the reason (caller decrefs), the
 * outcome in d (caller frees d->error). */
static json_t *case_drift(policy_case *c, lp_cp_outcome *d) {
  const char *code;
  lp_cp_is_drifted(c->provider, c->launch.value, fx.nodeclass, lp_cp_outcome_store, d);
  return cpf_wait(&fx, d, &code);
}

/* err is the engine's refusal of policies/FILE's answer, in the words `luaprov eval` gives at the policy's
 * line 2: "DIR/policies/FILE:2: WORDS", a Contract error. */
static void check_refused(const policy_case *c, const lp_error *err, const char *file, const char *words) {
  CHECK(err != NULL);
  if (!err) return;
  char want[512];
  snprintf(want, sizeof want, "%s/policies/%s:2: %s", c->dir, file, words);
  CHECK_STR(err->code, "Contract");
  CHECK_STR(err->message, want);
}

/* A drift policy without the optional static_drift is asked is_drifted only: static_drift is not called,
 * so no error is logged or counted for it (luaprov_script_calls_total{result="error"}). */
static void test_drift_without_static_drift(void) {
  policy_case c;
  if (policy_case_start(&c, "drift.lua",
                        "local M = {}\n"
                        "function M.is_drifted() return 'ImageDrift' end\n"
                        "return M\n",
                        "default-s1") != 0)
    return;
  lp_metric *calls = lp_metrics_counter(lp_metrics_default(), "luaprov_script_calls_total", "",
                                        LP_LABELS("module", "function", "result"));
  const char *const *errors = LP_LABELS("policies.drift", "static_drift", "error");
  const char *const *full = LP_LABELS("policies.drift", "is_drifted", "ok");
  double errors_before = lp_metric_value(calls, errors), full_before = lp_metric_value(calls, full);
  CHECK(c.launch.value != NULL);
  for (int i = 0; c.launch.value && i < 2; i++) { /* the second asks the same generation again */
    lp_cp_outcome d = {0};
    json_t *reason = case_drift(&c, &d);
    CHECK(d.error == NULL);
    CHECK_STR(json_string_value(reason), "ImageDrift");
    json_decref(reason);
    lp_error_free(d.error);
  }
  CHECK(lp_metric_value(calls, errors) == errors_before);
  CHECK(lp_metric_value(calls, full) - full_before == 2);
  policy_case_stop(&c);
}

/* The engine refuses a drift answer that is not a string with the words and place `luaprov eval` gives:
 * the policy's file:line and a hint. */
static void test_drift_answer_not_a_string(void) {
  policy_case c;
  if (policy_case_start(&c, "drift.lua",
                        "local M = {}\n"
                        "function M.is_drifted() return { reason = 'ImageDrift' } end\n"
                        "return M\n",
                        "default-t1") != 0)
    return;
  CHECK(c.launch.value != NULL);
  if (c.launch.value) {
    lp_cp_outcome d = {0};
    json_decref(case_drift(&c, &d));
    check_refused(&c, d.error, "drift.lua",
                  "is_drifted returned a table {\"reason\":\"ImageDrift\"}, not a string; return a drift "
                  "reason such as \"NodeClassDrift\", or \"\" when the node has not drifted");
    lp_error_free(d.error);
  }
  policy_case_stop(&c);
}

/* Rule CP7: the engine's and the mapping's own tags go over the tag policy's, whatever it returns: a
 * policy answering {} and one overriding the cluster tag both launch instances that carry them all. */
static void check_launch_keeps_own_tags(const char *policy, const char *name) {
  policy_case c;
  if (policy_case_start(&c, "tags.lua", policy, name) != 0) return;
  CHECK(c.launch.error == NULL);
  cpf_check_engine_tags(&fx, c.launch.value, name);
  policy_case_stop(&c);
}

static void test_tag_policy_cannot_drop_engine_tags(void) {
  check_launch_keeps_own_tags("return { build_instance_tags = function() return {} end }\n", "default-tag0");
  check_launch_keeps_own_tags("return { build_instance_tags = function(_, _, ctx) return {\n"
                              "  ['kubernetes.io/cluster/' .. ctx.cluster_id] = 'shared',\n"
                              "  ['karpenter.sh/nodeclaim'] = 'other', ['ecs:ecs-cluster-id'] = 'x',\n"
                              "  team = 'a' } end }\n",
                              "default-tag1");
}

/* The engine refuses a tag value that is not a string with the words and place `luaprov eval` gives. */
static void test_tag_answer_not_a_string(void) {
  policy_case c;
  if (policy_case_start(&c, "tags.lua",
                        "local M = {}\n"
                        "function M.build_instance_tags() return { team = 7 } end\n"
                        "return M\n",
                        "default-tn") != 0)
    return;
  check_refused(
      &c, c.launch.error, "tags.lua",
      "build_instance_tags returned tag 'team' = 7, a number; tag values must be strings (wrap it in "
      "tostring())");
  policy_case_stop(&c);
}

/* A drift policy that allocates without end stops at the generation's memory cap with the error naming
 * the line whose allocation was refused, as the instruction budget's does, and the cap. */
static void test_drift_memory_limit(void) {
  policy_case c;
  fx.tree_limits = (lp_script_limits){.memory_bytes = 24u << 20};
  int started = policy_case_start(&c, "drift.lua",
                                  "local M = {}\n"
                                  "function M.is_drifted()\n"
                                  "  local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end\n"
                                  "end\n"
                                  "return M\n",
                                  "default-m1");
  fx.tree_limits = (lp_script_limits){0};
  if (started != 0) return;
  CHECK(c.launch.value != NULL);
  if (c.launch.value) {
    lp_cp_outcome d = {0};
    json_decref(case_drift(&c, &d));
    CHECK(d.error != NULL);
    if (d.error) {
      char want[512], file[64];
      snprintf(file, sizeof file, "%s/policies/drift.lua", c.dir);
      snprintf(want, sizeof want, "%s:3: memory limit of 24576 KiB for the script generation exceeded", file);
      CHECK_STR(d.error->code, "Memory");
      CHECK_STR(d.error->message, want);
      CHECK_STR(d.error->file, file);
      CHECK_INT(d.error->line, 3);
    }
    lp_error_free(d.error);
  }
  policy_case_stop(&c);
}

/* A drift policy that raises gives the engine an error placed at the raise, with its Lua traceback (what
 * the log lines about it write under "traceback"). */
static void test_drift_raise_traceback(void) {
  policy_case c;
  if (policy_case_start(&c, "drift.lua",
                        "local M = {}\n"
                        "local function image_of(instance) return instance.image.id end\n"
                        "function M.is_drifted(_, _, instance) local id = image_of(instance) return id end\n"
                        "return M\n",
                        "default-r1") != 0)
    return;
  CHECK(c.launch.value != NULL);
  if (c.launch.value) {
    lp_cp_outcome d = {0};
    json_decref(case_drift(&c, &d));
    const lp_error *e = d.error;
    CHECK(e != NULL);
    if (e) {
      char file[64], frame[128];
      snprintf(file, sizeof file, "%s/policies/drift.lua", c.dir);
      CHECK_STR(e->code, "ScriptError");
      CHECK_STR(e->file, file);
      CHECK_INT(e->line, 2);
      CHECK(e->traceback && strncmp(e->traceback, "stack traceback:\n", 17) == 0);
      snprintf(frame, sizeof frame, "%s:2: in upvalue 'image_of'", file);
      CHECK(e->traceback && strstr(e->traceback, frame));
      snprintf(frame, sizeof frame, "%s:3: in function", file);
      CHECK(e->traceback && strstr(e->traceback, frame));
    }
    lp_error_free(d.error);
  }
  policy_case_stop(&c);
}

/* The engine refuses a repair list it cannot use with eval's and check's sentence, at the policy's
 * file:line (in the message and in the error's fields). The policy answers well for the ctx of load-time
 * validation ({}) and wrongly for the engine's, which has a cluster_id. */
static void repair_answer_says(const char *answer, const char *want_problem) {
  char dir[32], lua[256];
  snprintf(lua, sizeof lua,
           "local M = {}\nfunction M.policies(ctx)\n  return ctx.cluster_id and %s or {}\nend\nreturn M\n",
           answer);
  lp_script_host *h = cpf_tree_new(&fx, dir, "policies", "repair.lua", lua);
  if (!h) return;
  lp_cloudprovider *wrong = cpf_provider(&fx, h, 0);
  const char *code;
  lp_cp_outcome r = {0};
  lp_cp_repair_policies(wrong, lp_cp_outcome_store, &r);
  json_decref(cpf_wait(&fx, &r, &code));
  CHECK(r.error != NULL);
  if (r.error) {
    char want[512], file[64];
    snprintf(file, sizeof file, "%s/policies/repair.lua", dir);
    snprintf(want, sizeof want, "%s:2: %s", file, want_problem);
    CHECK_STR(r.error->code, "Contract");
    CHECK_STR(r.error->message, want);
    CHECK_STR(r.error->file, file);
    CHECK_INT(r.error->line, 2);
  }
  lp_error_free(r.error);
  lp_cloudprovider_free(wrong);
  cpf_tree_free(h, dir);
}

static void test_repair_answer_problems(void) {
  repair_answer_says("'Ready'", "policies(ctx) must return a list of {condition_type, condition_status, "
                                "toleration_seconds}, not a string");
  repair_answer_says("{ { condition_type = 'Ready', condition_status = 'false', toleration_seconds = 60 } }",
                     "policies(ctx)[1].condition_status is \"false\"; it must be \"True\", \"False\" or "
                     "\"Unknown\" (did you mean \"False\"?)");
  repair_answer_says(
      "{ { condition_type = 'Ready', condition_status = 'False', toleration_second = 60 } }",
      "policies(ctx)[1] has unknown field 'toleration_second'; did you mean 'toleration_seconds'?");
}

int main(void) {
  if (cpf_start(&fx) != 0) return 1;
  RUN(test_drift_without_static_drift);
  RUN(test_drift_answer_not_a_string);
  RUN(test_tag_policy_cannot_drop_engine_tags);
  RUN(test_tag_answer_not_a_string);
  RUN(test_drift_memory_limit);
  RUN(test_drift_raise_traceback);
  RUN(test_repair_answer_problems);
  cpf_stop(&fx);
  return check_summary();
}
