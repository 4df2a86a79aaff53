/* The CloudProvider's calls into the operator's policies, each an operator's tree of one policy over the
 * default scripts against the Alibaba simulator (spec/c/cloudprovider_fixture.h): a drift policy without
 * the optional static_drift, drift and tag answers that are not strings (refused with the words and
 * place `luaprov eval` gives), and the engine's own tags over whatever the tag policy returns (rule CP7,
 * docs/contracts.md). Load-time validation's calls are off in these trees, so the run-time checks are
 * the ones that answer. */
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

int main(void) {
  if (cpf_start(&fx) != 0) return 1;
  RUN(test_drift_without_static_drift);
  RUN(test_drift_answer_not_a_string);
  RUN(test_tag_policy_cannot_drop_engine_tags);
  RUN(test_tag_answer_not_a_string);
  cpf_stop(&fx);
  return check_summary();
}
