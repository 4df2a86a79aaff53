/* CloudProvider IsDrifted (rule CP5, docs/contracts.md): the drift policy's static check first, and
 * only when it finds nothing the instance fetched through the mapping for the full policy. For many
 * NodeClaims at once (lp_cp_is_drifted_many), the instances are looked up together: the mapping's optional
 * get_many, LP_CP_LOOKUP_MAX IDs a call (docs/contracts.md#looking-up-many-instances-at-once).
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

/* The full policy with the instance function (get or get_many) answered, values [instance]. */
static void drift_instance(op *o, const char *function, json_t *values, lp_error *err) {
  json_t *instance = cp_got_instance(o, function, values, err);
  if (!instance) return;
  cp_call(o, "policies.drift", "is_drifted",
          json_pack("[OOOO]", o->nodeclaim, o->nodeclass, instance, o->cp->ctx), drift_done);
  json_decref(values);
}

static void drift_instance_done(op *o, json_t *values, lp_error *err) {
  drift_instance(o, "get", values, err);
}

static void wait_for_instance(op *o, const char *id);

static void drift_with_id(op *o, const char *id) {
  if (o->many)
    wait_for_instance(o, id);
  else
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

static void drift_start(op *o, const json_t *nodeclaim, const json_t *nodeclass) {
  lp_cloudprovider *cp = o->cp;
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

void lp_cp_is_drifted(lp_cloudprovider *cp, const json_t *nodeclaim, const json_t *nodeclass,
                      lp_cp_done_fn done, void *ud) {
  drift_start(cp_op_new(cp, done, ud), nodeclaim, nodeclass);
}

/* ---- many NodeClaims, their instances looked up together ---------------------------------- */

size_t lp_cloudprovider_lookup_batch(lp_cloudprovider *cp) {
  uint64_t generation = lp_script_host_generation_id(cp->scripts);
  if (cp->get_many_generation != generation) {
    cp->get_many_generation = generation;
    cp->has_get_many = lp_script_host_module_has_function(cp->scripts, cp->mapping, "get_many");
  }
  return cp->has_get_many ? LP_CP_LOOKUP_MAX : 1;
}

/* One lp_cp_is_drifted_many: its NodeClaims' operations run on their own until they need their instance;
 * once none is left undecided, the instances of those waiting are looked up together. */
struct drift_many {
  lp_cloudprovider *cp;
  lp_cp_each_fn done;
  void *ud;
  size_t total, answered;
  size_t undecided; /* operations neither answered nor waiting for their instance */
  op **waiting;     /* the operations waiting for their instance, not looked up yet */
  size_t nwaiting;
};

/* An operation's ud: which item it answers. */
typedef struct many_item {
  struct drift_many *m;
  size_t index;
  int waits; /* it reached wait_for_instance */
} many_item;

/* One get_many call and the operations whose instances it describes. */
typedef struct many_call {
  op **ops;
  size_t n;
} many_call;

static void many_call_free(many_call *call) {
  free(call->ops);
  free(call);
}

/* get_many answered: each operation goes on with its own instance, or fails as its own get would. */
static void looked_up(const lp_task_result *r, void *ud) {
  many_call *call = ud;
  json_t *values;
  lp_error *err = cp_task_outcome(r, &values, NULL);
  json_t *list = json_array_get(values, 0);
  if (json_is_object(list) && json_object_size(list) == 0) list = NULL; /* an empty Lua table */
  if (!err && list && !json_is_array(list))
    err = cp_contract_error(call->ops[0], call->ops[0]->cp->mapping, "get_many",
                            lp_xstrdup("did not return a list"), "docs/contracts.md#mappings");
  json_t *by_id = json_object();
  size_t i;
  json_t *instance;
  json_array_foreach(list, i, instance) {
    const char *id = json_string_value(json_object_get(instance, "id"));
    if (id) json_object_set(by_id, id, instance);
  }
  for (size_t k = 0; k < call->n; k++) {
    op *o = call->ops[k];
    o->generation = r->generation;
    json_t *found = err ? NULL : json_object_get(by_id, o->instance_id);
    if (found)
      drift_instance(o, "get_many", json_pack("[O]", found), NULL);
    else
      drift_instance(
          o, "get_many", NULL,
          err ? lp_error_copy(err)
              : lp_error_new("NotFound", "instance %s not in the get_many answer", o->instance_id));
  }
  json_decref(by_id);
  json_decref(values);
  lp_error_free(err);
  many_call_free(call);
}

/* Looks up the instances of the waiting operations once no operation can still join them: get_many calls
 * of at most LP_CP_LOOKUP_MAX distinct IDs (operations of one ID share it), or each one's get. */
static void look_up_waiting(struct drift_many *m) {
  if (m->undecided || !m->nwaiting) return;
  lp_cloudprovider *cp = m->cp;
  size_t n = m->nwaiting;
  m->nwaiting = 0;
  if (lp_cloudprovider_lookup_batch(cp) == 1 || cp->shut_down) { /* cp_call fails them when shut down */
    for (size_t k = 0; k < n; k++)
      cp_call(m->waiting[k], cp->mapping, "get", json_pack("[Os]", cp->ctx, m->waiting[k]->instance_id),
              drift_instance_done);
    return;
  }
  for (size_t first = 0; first < n;) {
    many_call *call = lp_xcalloc(1, sizeof *call);
    call->ops = lp_xcalloc(n - first, sizeof *call->ops);
    json_t *ids = json_array(), *seen = json_object();
    for (; first < n; first++) {
      op *o = m->waiting[first];
      if (!json_object_get(seen, o->instance_id)) {
        if (json_array_size(ids) == LP_CP_LOOKUP_MAX) break;
        json_object_set_new(seen, o->instance_id, json_true());
        json_array_append_new(ids, json_string(o->instance_id));
      }
      call->ops[call->n++] = o;
    }
    json_decref(seen);
    lp_script_host_call(cp->scripts, cp->mapping, "get_many", json_pack("[Oo]", cp->ctx, ids), looked_up,
                        call);
  }
}

static void wait_for_instance(op *o, const char *id) {
  many_item *item = o->ud;
  struct drift_many *m = o->many;
  o->instance_id = lp_xstrdup(id);
  item->waits = 1;
  m->waiting[m->nwaiting++] = o;
  m->undecided--;
  look_up_waiting(m);
}

static void item_done(json_t *value, lp_error *err, void *ud) {
  many_item *item = ud;
  struct drift_many *m = item->m;
  if (!item->waits) m->undecided--;
  m->done(item->index, value, err, m->ud);
  free(item);
  if (++m->answered == m->total) {
    free(m->waiting);
    free(m);
    return;
  }
  look_up_waiting(m);
}

void lp_cp_is_drifted_many(lp_cloudprovider *cp, const json_t *items, lp_cp_each_fn done, void *ud) {
  size_t n = json_array_size(items);
  if (!n) return;
  struct drift_many *m = lp_xcalloc(1, sizeof *m);
  m->cp = cp;
  m->done = done;
  m->ud = ud;
  m->total = m->undecided = n;
  m->waiting = lp_xcalloc(n, sizeof *m->waiting);
  for (size_t i = 0; i < n; i++) {
    many_item *item = lp_xcalloc(1, sizeof *item);
    item->m = m;
    item->index = i;
    op *o = cp_op_new(cp, item_done, item);
    o->many = m;
    const json_t *pair = json_array_get(items, i);
    drift_start(o, json_array_get(pair, 0), json_array_get(pair, 1));
  }
}
