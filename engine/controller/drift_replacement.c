/* The annotations of a drift replacement and what they tell (drift_replacement.h). */
#include "controller/drift_replacement.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"

static uint64_t fnv1a(uint64_t h, const char *text) {
  for (const char *c = text ? text : ""; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  return h;
}

#define FNV_OFFSET 1469598103934665603ULL

/* FNV-1a of v serialized with sorted keys, continuing from h. */
static uint64_t digest_json(uint64_t h, const json_t *v) {
  char *text = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
  h = fnv1a(h, text);
  free(text);
  return h;
}

/* A copy of v without its numbers, at any depth (new reference). */
static json_t *without_numbers(const json_t *v) {
  if (json_is_object(v)) {
    json_t *out = json_object();
    const char *key;
    json_t *field;
    json_object_foreach((json_t *)v, key, field) if (!json_is_number(field))
        json_object_set_new(out, key, without_numbers(field));
    return out;
  }
  if (json_is_array(v)) {
    json_t *out = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) if (!json_is_number(item))
        json_array_append_new(out, without_numbers(item));
    return out;
  }
  return json_deep_copy(v);
}

/* What of the node class can decide drift: its spec, and its status without the conditions and without
 * counters (numbers such as the free addresses of a subnet, which each launch changes and which say
 * nothing about what a replacement would be). Its resourceVersion would do for the spec, but every
 * status refresh would then count as a change and lift a block once per refresh. */
static uint64_t nodeclass_digest(const json_t *nodeclass) {
  uint64_t h = digest_json(FNV_OFFSET, lp_obj_get(nodeclass, "spec"));
  json_t *status = without_numbers(lp_obj_get(nodeclass, "status"));
  json_object_del(status, "conditions");
  h = digest_json(h, status);
  json_decref(status);
  return h;
}

/* "<node class digest>/<scripts' digest>/<template digest>" (16 hex digits each, malloc'd): what decides
 * drift besides the node itself. All three are digests of content, so they hold across restarts; the
 * template's is of the NodePool's spec.template serialized with sorted keys, requirements included. */
static char *inputs(lp_ctrl_env *env, const json_t *nodeclass, const json_t *nodepool) {
  return lp_xasprintf("%016" PRIx64 "/%016" PRIx64 "/%016" PRIx64,
                      nodeclass ? nodeclass_digest(nodeclass) : 0,
                      lp_cloudprovider_script_digest(lp_env_cloud(env)),
                      digest_json(FNV_OFFSET, lp_obj_get(nodepool, "spec.template")));
}

void lp_drift_stamp_replacement(lp_ctrl_env *env, json_t *replacement, const json_t *candidate,
                                const json_t *nodepool) {
  const char *reason = json_string_value(json_object_get(lp_condition_get(candidate, "Drifted"), "reason"));
  if (!reason) return;
  json_t *annotations = json_object_get(json_object_get(replacement, "metadata"), "annotations");
  char *under = inputs(env, lp_env_nodeclass_of(env, lp_obj_get(replacement, "spec.nodeClassRef")), nodepool);
  json_object_set_new(annotations, LP_REPLACED_FOR_ANNOTATION, json_string(reason));
  json_object_set_new(annotations, LP_REPLACED_UNDER_ANNOTATION, json_string(under));
  free(under);
}

int lp_drift_unresolvable(lp_ctrl_env *env, const json_t *claim, const json_t *nodeclass,
                          const json_t *nodepool, const char *reason) {
  const char *made_for = lp_obj_annotation(claim, LP_REPLACED_FOR_ANNOTATION);
  const char *made_under = lp_obj_annotation(claim, LP_REPLACED_UNDER_ANNOTATION);
  if (!reason || !made_for || !made_under || strcmp(made_for, reason) != 0) return 0;
  char *now = inputs(env, nodeclass, nodepool);
  int same = strcmp(now, made_under) == 0;
  free(now);
  return same;
}

const char *lp_drift_replaced_for(const json_t *claim) {
  return lp_obj_annotation(claim, LP_REPLACED_FOR_ANNOTATION);
}

/* The "under" of a NodePool record's value (a JSON object text), malloc'd, or NULL when unreadable. */
static char *record_under(const char *value) {
  json_t *v = value ? json_loads(value, 0, NULL) : NULL;
  const char *under = json_string_value(json_object_get(v, "under"));
  char *copy = under ? lp_xstrdup(under) : NULL;
  json_decref(v);
  return copy;
}

char *lp_drift_record_wanted(lp_ctrl_env *env, const json_t *claim, const json_t *nodeclass,
                             const json_t *nodepool, const char *reason) {
  char *key = lp_xasprintf(LP_DRIFT_RECORD_PREFIX "%s", reason);
  char *had = record_under(lp_obj_annotation(nodepool, key));
  char *now = inputs(env, nodeclass, nodepool);
  char *value = NULL;
  if (!had || strcmp(had, now) != 0) {
    json_t *v = json_pack("{s:s, s:s}", "under", now, "nodeclaim", lp_obj_name(claim));
    value = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(v);
  }
  free(key);
  free(had);
  free(now);
  return value;
}

/* ---- the gate ---------------------------------------------------------------------------------- */

/* What a (NodePool, reason) is in the gate, weakest first: a stronger one is not overwritten. A
 * replacement judged Resolved under the inputs now (PROVEN) shows that replacing resolves the drift, so
 * it outranks the NodePool's record (RECORDED), which may come from another replacement under the same
 * inputs (a policy that looks at more than them); a NodeClaim DriftUnresolvable=True (HELD) still
 * outranks it. */
enum { FREE = 0, PROBING, RECORDED, PROVEN, HELD };

struct lp_drift_gate {
  lp_ctrl_env *env;
  json_t *pools;  /* NodePool -> {reason -> {"rank": FREE..HELD, "why": the DisruptionBlocked text, or null
                   * when replacing may go on (FREE, PROVEN)}} */
  json_t *inputs; /* NodePool -> the inputs that hold now for its replacements */
};

/* The inputs now for a new replacement of pool (its template's node class), borrowed from the gate. */
static const char *pool_inputs(lp_drift_gate *g, const char *pool) {
  const char *have = json_string_value(json_object_get(g->inputs, pool));
  if (have) return have;
  const json_t *nodepool = lp_env_get(g->env, LP_KIND_NODEPOOL, pool);
  const json_t *nodeclass =
      nodepool ? lp_env_nodeclass_of(g->env, lp_obj_get(nodepool, "spec.template.spec.nodeClassRef")) : NULL;
  char *now = inputs(g->env, nodeclass, nodepool);
  json_object_set_new(g->inputs, pool, json_string(now));
  free(now);
  return json_string_value(json_object_get(g->inputs, pool));
}

static json_t *entry(lp_drift_gate *g, const char *pool, const char *reason) {
  json_t *reasons = json_object_get(g->pools, pool);
  if (!reasons) json_object_set_new(g->pools, pool, reasons = json_object());
  json_t *e = json_object_get(reasons, reason);
  if (!e) json_object_set_new(reasons, reason, e = json_pack("{s:i}", "rank", FREE));
  return e;
}

/* Sets (pool, reason) to rank with why (malloc'd, taken; NULL for PROVEN) unless it is stronger already. */
static void rank(lp_drift_gate *g, const char *pool, const char *reason, int r, char *why) {
  json_t *e = entry(g, pool, reason);
  if (json_integer_value(json_object_get(e, "rank")) < r) {
    json_object_set_new(e, "rank", json_integer(r));
    json_object_set_new(e, "why", why ? json_string(why) : json_null());
  }
  free(why);
}

/* replacement: its name, or NULL when not named yet (then candidate's, the node it replaces). */
static char *probing_why(const char *pool, const char *reason, const char *replacement,
                         const char *candidate) {
  return lp_xasprintf("Drift reason %s in NodePool %s waits for %s%s to be judged: one replacement at a time "
                      "until one shows that replacing resolves the drift",
                      reason, pool, replacement ? "replacement " : "the replacement of ",
                      replacement ? replacement : candidate);
}

static void gate_claim(const char *key, json_t *claim, void *ud) {
  lp_drift_gate *g = ud;
  const char *pool = lp_obj_label(claim, "karpenter.sh/nodepool");
  if (!pool || lp_obj_deleting(claim)) return;
  const json_t *cond = lp_condition_get(claim, LP_DRIFT_UNRESOLVABLE);
  const char *status = lp_obj_str(cond, "status"), *reason = lp_obj_str(cond, "reason");
  if (status && reason && strcmp(status, "True") == 0)
    rank(g, pool, reason, HELD,
         lp_xasprintf("Drift reason %s cannot be resolved by replacement in NodePool %s (NodeClaim %s is %s)",
                      reason, pool, key, LP_DRIFT_UNRESOLVABLE));
  const char *made_for = lp_drift_replaced_for(claim);
  const char *made_under = lp_obj_annotation(claim, LP_REPLACED_UNDER_ANNOTATION);
  if (!made_for) return;
  if (!cond)
    rank(g, pool, made_for, PROBING, probing_why(pool, made_for, key, NULL));
  else if (status && strcmp(status, "False") == 0 && reason && strcmp(reason, LP_DRIFT_RESOLVED) == 0 &&
           made_under && strcmp(made_under, pool_inputs(g, pool)) == 0)
    rank(g, pool, made_for, PROVEN, NULL);
}

static void gate_pool(const char *key, json_t *nodepool, void *ud) {
  lp_drift_gate *g = ud;
  const char *name;
  json_t *value;
  json_object_foreach(json_object_get(json_object_get(nodepool, "metadata"), "annotations"), name, value) {
    size_t n = strlen(LP_DRIFT_RECORD_PREFIX);
    if (strncmp(name, LP_DRIFT_RECORD_PREFIX, n) != 0 || !name[n]) continue;
    char *under = record_under(json_string_value(value));
    if (under && strcmp(under, pool_inputs(g, key)) == 0) {
      json_t *v = json_loads(json_string_value(value), 0, NULL);
      const char *by = json_string_value(json_object_get(v, "nodeclaim"));
      rank(
          g, key, name + n, RECORDED,
          lp_xasprintf("Drift reason %s cannot be resolved by replacement in NodePool %s (its annotation %s: "
                       "replacement %s was %s under the node class, template and scripts in use)",
                       name + n, key, name, by ? by : "?", LP_DRIFT_UNRESOLVABLE));
      json_decref(v);
    }
    free(under);
  }
}

lp_drift_gate *lp_drift_gate_new(lp_ctrl_env *env) {
  lp_drift_gate *g = lp_xcalloc(1, sizeof *g);
  g->env = env;
  g->pools = json_object();
  g->inputs = json_object();
  lp_env_each(env, LP_KIND_NODECLAIM, gate_claim, g);
  lp_env_each(env, LP_KIND_NODEPOOL, gate_pool, g);
  return g;
}

void lp_drift_gate_free(lp_drift_gate *g) {
  if (!g) return;
  json_decref(g->pools);
  json_decref(g->inputs);
  free(g);
}

const char *lp_drift_gate_why(lp_drift_gate *g, const char *pool, const char *reason) {
  if (!pool || !reason) return NULL;
  return json_string_value(json_object_get(json_object_get(json_object_get(g->pools, pool), reason), "why"));
}

void lp_drift_gate_launched(lp_drift_gate *g, const char *pool, const char *reason, const char *replacement,
                            const char *candidate) {
  rank(g, pool, reason, PROBING, probing_why(pool, reason, replacement, candidate));
}
