/* CloudProvider IsDrifted (rule CP5, docs/contracts.md): the drift policy's static check first, and
 * only when it finds nothing the instance fetched through the mapping for the full policy.
 *
 * Metric (lp_metrics_default): luaprov_drift_policy_evaluations_total{generation, result}: every answer
 * of the drift policy, by the script generation that gave it (a hot reload shows as a new generation
 * label) and result = drifted | not_drifted | unknown | error. Debug log "drift policy answered"
 * (provider_id, nodeclaim, result, reason, generation). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider_internal.h"
#include "contract/contracts.h"
#include "contract/shapes.h"
#include "core/error_log.h"
#include "core/log.h"

void cp_drift_init(lp_cloudprovider *cp) {
  cp->drift_evaluations = cp_policy_evaluations("drift", "drifted, not_drifted, unknown, error");
}

/* Counts an answer of the drift policy under the generation that gave it: during a hot reload under
 * load, the metric shows how many answers each generation gave, and the debug log says which one
 * answered for a node. */
static void drift_answered(op *o, const char *result, const char *reason, const lp_error *err) {
  char generation[24];
  snprintf(generation, sizeof generation, "%" PRIu64, o->generation);
  lp_counter_inc(o->cp->drift_evaluations, LP_LABELS(generation, result));
  const char *claim = json_string_value(json_object_get(json_object_get(o->nodeclaim, "metadata"), "name"));
  if (err)
    lp_debug(LOGGER, "drift policy answered", LPF_STR("provider_id", o->provider_id),
             LPF_STR("nodeclaim", claim), LPF_STR("result", result), LPF_ERROR(err),
             LPF_INT("generation", (long long)o->generation));
  else
    lp_debug(LOGGER, "drift policy answered", LPF_STR("provider_id", o->provider_id),
             LPF_STR("nodeclaim", claim), LPF_STR("result", result), LPF_STR("reason", reason),
             LPF_INT("generation", (long long)o->generation));
}

static void drift_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    if (strcmp(err->code, "Error") == 0) { /* nil, message: not known yet */
      lp_error *unknown = lp_error_new("DriftUnknown", "%s", err->message);
      lp_error_free(err);
      err = unknown;
    }
    drift_answered(o, strcmp(err->code, "DriftUnknown") == 0 ? "unknown" : "error", NULL, err);
    cp_finish(o, NULL, err);
    return;
  }
  json_t *reason = json_array_get(values, 0);
  /* the check and the words `luaprov eval` uses: "" or CamelCase, not one typo from a known reason */
  char *problem = lp_drift_answer_problem("is_drifted", reason, o->cp->drift_reasons);
  if (problem) {
    json_decref(values);
    drift_answered(o, "error", NULL, NULL);
    lp_error *e = lp_policy_answer_error(lp_script_host_current(o->cp->scripts), "policies.drift",
                                         "is_drifted", problem);
    free(problem);
    cp_finish(o, NULL, e);
    return;
  }
  const char *r = json_is_null(reason) || !reason ? "" : json_string_value(reason);
  drift_answered(o, *r ? "drifted" : "not_drifted", r, NULL);
  json_t *out = json_string(r);
  json_decref(values);
  cp_finish(o, out, NULL);
}

static void drift_instance_done(op *o, json_t *values, lp_error *err) {
  json_t *instance = cp_got_instance(o, values, err);
  if (!instance) return;
  cp_call(o, "policies.drift", "is_drifted",
          json_pack("[OOOO]", o->nodeclaim, o->nodeclass, instance, o->cp->ctx), drift_done);
  json_decref(values);
}

static void drift_with_id(op *o, const char *id) {
  cp_call(o, o->cp->mapping, "get", json_pack("[Os]", o->cp->ctx, id), drift_instance_done);
}
static void drift_parsed(op *o, json_t *values, lp_error *err) {
  cp_parsed_for(o, values, err, drift_with_id);
}

/* NodeClassDrift needs no API call (rule CP5): the policy's static check runs first, and only
 * when it finds nothing is the instance fetched for the full policy. */
static void static_drift_done(op *o, json_t *values, lp_error *err) {
  const char *reason = values ? json_string_value(json_array_get(values, 0)) : NULL;
  if (!err && reason && *reason) {
    drift_done(o, values, NULL);
    return;
  }
  json_decref(values);
  if (err) {
    drift_answered(o, "error", NULL, err);
    cp_finish(o, NULL, err);
    return;
  }
  cp_call(o, o->cp->mapping, "parse_provider_id", json_pack("[s]", o->provider_id), drift_parsed);
}

void lp_cp_is_drifted(lp_cloudprovider *cp, const json_t *nodeclaim, const json_t *nodeclass,
                      lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  o->nodeclaim = json_deep_copy(nodeclaim);
  o->nodeclass = json_deep_copy(nodeclass);
  const char *pid = cp_provider_id_of(nodeclaim);
  if (!pid || !*pid) {
    cp_fail_soon(
        o, lp_error_new("NodeClaimNotFound", "NodeClaim %s has no status.providerID",
                        json_string_value(json_object_get(json_object_get(nodeclaim, "metadata"), "name"))));
    return;
  }
  o->provider_id = lp_xstrdup(pid);
  /* static_drift is optional: a policy without it is not called for it (no error, no count) */
  uint64_t generation = lp_script_host_generation_id(cp->scripts);
  if (cp->static_drift_generation != generation) {
    cp->static_drift_generation = generation;
    cp->has_static_drift = lp_script_host_module_has_function(cp->scripts, "policies.drift", "static_drift");
  }
  if (!cp->has_static_drift) {
    static_drift_done(o, NULL, NULL);
    return;
  }
  cp_call(o, "policies.drift", "static_drift", json_pack("[OO]", o->nodeclaim, o->nodeclass),
          static_drift_done);
}
