/* The disruption policy (docs/contracts.md#policies): policies/disruption.lua's
 * can_disrupt(nodeclaim, node, pods, ctx), asked before the disruption controller voluntarily disrupts
 * a node (emptiness, consolidation, drift). It answers true (go ahead) or false and why (keep the node
 * for now). The module is optional: without it every disruption goes ahead, as in Karpenter. Anything
 * else the call gives (a raise, an exhausted budget, nil, a string) is an error naming the script file,
 * the line where can_disrupt is defined and the function; the caller treats it as a veto.
 *
 * Metric (lp_metrics_default): luaprov_disruption_policy_evaluations_total{generation, result}: every
 * answer of the policy, by the script generation that gave it (a hot reload shows as a new generation
 * label) and result = allowed | vetoed | error. A tree without the module gives no answers to count.
 * Debug log "disruption policy answered" (nodeclaim, method, result, why or code and error,
 * generation). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider_internal.h"
#include "contract/contracts.h"
#include "core/error_log.h"
#include "core/log.h"

#define MODULE   "policies.disruption"
#define FUNCTION "can_disrupt"
#define VETOED   "vetoed by the disruption policy"

void cp_disruption_init(lp_cloudprovider *cp) {
  cp->disruption_evaluations = cp_policy_evaluations("disruption", "allowed, vetoed, error");
}

/* The caller's callback, and what the operation carries for the debug log. */
typedef struct ask {
  void (*done)(int allowed, const char *why, lp_error *err, void *ud);
  void *ud;
  char *method;
} ask;

/* The operation's value is {"allowed": bool, "why": string?}; an error means not allowed. */
static void deliver(json_t *value, lp_error *err, void *ud) {
  ask *a = ud;
  int allowed = !err && json_is_true(json_object_get(value, "allowed"));
  a->done(allowed, err ? NULL : json_string_value(json_object_get(value, "why")), err, a->ud);
  json_decref(value);
  free(a->method);
  free(a);
}

static void answered(op *o, const char *result, const char *why, const lp_error *err) {
  char generation[24];
  snprintf(generation, sizeof generation, "%" PRIu64, o->generation);
  lp_counter_inc(o->cp->disruption_evaluations, LP_LABELS(generation, result));
  const char *claim = json_string_value(json_object_get(json_object_get(o->nodeclaim, "metadata"), "name"));
  const char *method = ((ask *)o->ud)->method;
  if (err)
    lp_debug(LOGGER, "disruption policy answered", LPF_STR("nodeclaim", claim), LPF_STR("method", method),
             LPF_STR("result", result), LPF_ERROR(err), LPF_INT("generation", (long long)o->generation));
  else
    lp_debug(LOGGER, "disruption policy answered", LPF_STR("nodeclaim", claim), LPF_STR("method", method),
             LPF_STR("result", result), LPF_STR("why", why), LPF_INT("generation", (long long)o->generation));
}

/* A raise or an exhausted budget: "<file>:<line>: can_disrupt: <message>", at the line where the function
 * is defined (the message carries the line it was raised at after this prefix), keeping the raise's
 * own position and traceback in the error's fields. */
static lp_error *raise_error(op *o, const lp_error *err) {
  char *file = NULL;
  int line = lp_contract_function_line(lp_script_host_current(o->cp->scripts), MODULE, FUNCTION, &file);
  lp_error *e;
  if (file && line)
    e = lp_error_new(err->code, "%s:%d: %s: %s", file, line, FUNCTION, err->message);
  else
    e = lp_error_new(err->code, "%s: %s: %s", file ? file : MODULE, FUNCTION, err->message);
  free(file);
  return lp_error_inherit(e, err);
}

/* An answer that is not one (anything but true or false): eval's sentence at the function's
 * file:line, as the drift and tag answers are (lp_policy_answer_error). */
static lp_error *answer_error(op *o, const char *problem) {
  return lp_policy_answer_error(lp_script_host_current(o->cp->scripts), MODULE, FUNCTION, problem);
}

static void failed(op *o, lp_error *e) {
  answered(o, "error", NULL, e);
  cp_finish(o, NULL, e);
}

static void can_disrupt_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    /* (nil, message) arrives as an error with the message (cp_call keeps the second value as
     * error_detail): still not an answer */
    lp_error *e;
    if (o->error_detail) {
      char *what = lp_xasprintf("%s returned nil, \"%s\" instead of true or false; return true to allow the "
                                "disruption, or false and why to veto it (docs/contracts.md#policies)",
                                FUNCTION, err->message);
      e = answer_error(o, what);
      free(what);
    } else {
      e = raise_error(o, err);
    }
    lp_error_free(err);
    failed(o, e);
    return;
  }
  json_t *first = json_array_get(values, 0), *second = json_array_get(values, 1);
  if (json_is_true(first)) {
    answered(o, "allowed", NULL, NULL);
    json_decref(values);
    cp_finish(o, json_pack("{s:b}", "allowed", 1), NULL);
    return;
  }
  if (json_is_false(first)) {
    const char *why = json_string_value(second);
    if (!why || !*why) why = VETOED;
    answered(o, "vetoed", why, NULL);
    json_t *out = json_pack("{s:b, s:s}", "allowed", 0, "why", why);
    json_decref(values);
    cp_finish(o, out, NULL);
    return;
  }
  char *what = lp_can_disrupt_answer_problem(first);
  json_decref(values);
  lp_error *e = answer_error(o, what);
  free(what);
  failed(o, e);
}

void lp_cp_can_disrupt(lp_cloudprovider *cp, const json_t *nodeclaim, const json_t *node, const json_t *pods,
                       const json_t *ctx, void (*done)(int allowed, const char *why, lp_error *err, void *ud),
                       void *ud) {
  ask *a = lp_xcalloc(1, sizeof *a);
  a->done = done;
  a->ud = ud;
  const char *method = json_string_value(json_object_get(ctx, "method"));
  a->method = method ? lp_xstrdup(method) : NULL;
  op *o = cp_op_new(cp, deliver, a);
  o->nodeclaim = json_deep_copy(nodeclaim);
  if (!lp_generation_module_file(lp_script_host_current(cp->scripts), MODULE)) {
    o->value = json_pack("{s:b}", "allowed", 1); /* no policy: Karpenter's behaviour */
    cp_fail_soon(o, NULL);
    return;
  }
  /* an unregistered node is json.null to the script, as absent values are elsewhere */
  json_t *no_pods = pods ? NULL : json_array(), *no_ctx = ctx ? NULL : json_object();
  json_t *args =
      json_pack("[OOOO]", o->nodeclaim, node ? node : json_null(), pods ? pods : no_pods, ctx ? ctx : no_ctx);
  json_decref(no_pods);
  json_decref(no_ctx);
  cp_call(o, MODULE, FUNCTION, args, can_disrupt_done);
}
