/* The drift checks of a launched NodeClaim, in the order of docs/controllers.md (Drift); the
 * first that finds drift decides:
 *   1. static: the NodeClaim's karpenter.sh/nodepool-hash differs from its NodePool's current hash
 *      (lp_nodepool_hash), when the NodeClaim's hash version is this engine's LP_NODEPOOL_HASH_VERSION
 *      and the NodePool does not carry another version (one stamped by Go Karpenter, whose hashes are
 *      not comparable with ours) -> NodePoolDrifted;
 *   2. requirements: a requirement of the NodePool's template that the NodeClaim's labels do not
 *      satisfy, as Karpenter's Compatible without the well-known-label allowance: a label missing for
 *      In, Exists, Gt, Lt, Gte or Lte, present for DoesNotExist, or a value outside the set
 *      -> RequirementsDrifted;
 *   3. instance type not found, for a NodeClaim older than DRIFT_MIN_AGE_FACTOR x resync (1 h): its
 *      node.kubernetes.io/instance-type label missing, the type not among GetInstanceTypes of its
 *      node class, or no offering of it compatible with its zone and capacity-type labels (offerings
 *      out of stock count: they are the type's, only not buyable now) -> InstanceTypeNotFound;
 *      GetInstanceTypes is asked once per node class per DRIFT_TYPES_TTL_FACTOR x resync (30 min),
 *      concurrent reconciles sharing one call;
 *   4. provider: lp_cp_is_drifted, the Lua drift policy (NodeClassDrift, or one of the reasons the
 *      mapping declares in its drift_reasons). Its answer is kept per NodeClaim uid for resync seconds
 *      (5 min) unless the node class changed since (its resourceVersion is part of the entry), so a
 *      node costs at most one instance lookup per period. DriftUnknown (the policy cannot tell yet)
 *      and NodeClaimNotFound (the instance is gone: garbage collection's business) leave the condition
 *      as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "contract/shapes.h"
#include "controller/conditions.h"
#include "controller/drift_internal.h"
#include "controller/nodepool.h"
#include "core/clock.h"
#include "core/log.h"

struct drift_fetch {
  char *nodeclass;
  drift_run *waiters; /* linked through next_waiter */
  drift_fetch *next;
};

static void provider_check(drift_run *r);

/* ---- 1. static ------------------------------------------------------------------------------ */

/* Checks 1 and 2 need only the objects: non-zero when they find drift, with what the condition says in
 * message (cap bytes). */
static int static_found(const json_t *claim, const json_t *nodepool, char *message, size_t cap) {
  const char *have = lp_obj_annotation(claim, LP_NODEPOOL_HASH_ANNOTATION);
  const char *version = lp_obj_annotation(claim, LP_NODEPOOL_HASH_VERSION_ANNOTATION);
  const char *pool_version = lp_obj_annotation(nodepool, LP_NODEPOOL_HASH_VERSION_ANNOTATION);
  if (!have || !version || strcmp(version, LP_NODEPOOL_HASH_VERSION) != 0 ||
      (pool_version && strcmp(pool_version, LP_NODEPOOL_HASH_VERSION) != 0))
    return 0;
  char want[17];
  lp_nodepool_hash(nodepool, want);
  if (strcmp(want, have) == 0) return 0;
  snprintf(message, cap, "NodePool template hash %s differs from the NodeClaim's %s", want, have);
  return 1;
}

static int static_drift(drift_run *r) {
  char message[128];
  if (!static_found(r->claim, r->nodepool, message, sizeof message)) return 0;
  drift_verdict(r, DRIFT_FOUND, "NodePoolDrifted", message, NULL);
  return 1;
}

/* ---- 2. requirements ------------------------------------------------------------------------- */

static int requirements_found(const json_t *claim, const json_t *nodepool, char *message, size_t cap) {
  const json_t *reqs =
      json_object_get(json_object_get(json_object_get(json_object_get(nodepool, "spec"), "template"), "spec"),
                      "requirements");
  size_t i;
  const json_t *req;
  json_array_foreach(reqs, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    if (!key) continue;
    const char *value = lp_obj_label(claim, key);
    if (lp_requirement_allows(req, value)) continue;
    char *values = json_dumps(json_object_get(req, "values"), JSON_COMPACT | JSON_ENCODE_ANY);
    const char *op = json_string_value(json_object_get(req, "operator"));
    snprintf(message, cap, "label %s%s%s does not satisfy the NodePool's requirement %s %s %s", key,
             value ? "=" : " is missing and", value ? value : "", key, op ? op : "?", values ? values : "[]");
    free(values);
    return 1;
  }
  return 0;
}

static int requirements_drift(drift_run *r) {
  char message[512];
  if (!requirements_found(r->claim, r->nodepool, message, sizeof message)) return 0;
  drift_verdict(r, DRIFT_FOUND, "RequirementsDrifted", message, NULL);
  return 1;
}

/* ---- 3. instance type not found -------------------------------------------------------------- */

/* The cached index of the node class's types (name -> [[zone, capacity type]...]), or NULL when
 * absent or stale. */
static const json_t *types_cached(drift_state *st, const char *nodeclass) {
  const json_t *entry = json_object_get(st->types, nodeclass);
  if (!entry) return NULL;
  double at = json_real_value(json_object_get(entry, "at"));
  if (lp_clock_monotonic() - at >= st->resync_s * DRIFT_TYPES_TTL_FACTOR) return NULL;
  return json_object_get(entry, "types");
}

static json_t *index_types(const json_t *types) {
  json_t *index = json_object();
  size_t i, j;
  const json_t *type, *offering;
  json_array_foreach(types, i, type) {
    const char *name = json_string_value(json_object_get(type, "name"));
    if (!name) continue;
    json_t *offers = json_array();
    json_array_foreach(json_object_get(type, "offerings"), j, offering) {
      json_array_append_new(offers, json_pack("[OO]", json_object_get(offering, "zone"),
                                              json_object_get(offering, "capacity_type")));
    }
    json_object_set_new(index, name, offers);
  }
  return index;
}

static int label_matches(const json_t *offered, const char *label) {
  return !label || (json_is_string(offered) && strcmp(json_string_value(offered), label) == 0);
}

static void check_type(drift_run *r, const json_t *index) {
  const char *name = lp_obj_label(r->claim, LP_LABEL_INSTANCE_TYPE);
  const char *zone = lp_obj_label(r->claim, LP_LABEL_ZONE);
  const char *capacity = lp_obj_label(r->claim, LP_LABEL_CAPACITY_TYPE);
  const json_t *offers = name ? json_object_get(index, name) : NULL;
  char message[512];
  if (!name) {
    snprintf(message, sizeof message, "the NodeClaim has no %s label", LP_LABEL_INSTANCE_TYPE);
  } else if (!offers) {
    snprintf(message, sizeof message, "instance type %s is not among the instance types of %s %s", name,
             lp_env_nodeclass(r->env)->kind, lp_obj_name(r->nodeclass));
  } else {
    size_t i;
    const json_t *o;
    json_array_foreach(offers, i, o) {
      if (label_matches(json_array_get(o, 0), zone) && label_matches(json_array_get(o, 1), capacity)) {
        provider_check(r);
        return;
      }
    }
    snprintf(message, sizeof message, "instance type %s has no offering in zone %s for capacity type %s",
             name, zone ? zone : "(any)", capacity ? capacity : "(any)");
  }
  drift_verdict(r, DRIFT_FOUND, "InstanceTypeNotFound", message, NULL);
}

static void types_fetched(json_t *value, lp_error *err, void *ud) {
  drift_fetch *f = ud;
  drift_state *st = f->waiters->st;
  for (drift_fetch **p = &st->fetches; *p; p = &(*p)->next) {
    if (*p == f) {
      *p = f->next;
      break;
    }
  }
  json_t *index = NULL;
  if (!err) {
    index = index_types(value);
    json_object_set_new(st->types, f->nodeclass,
                        json_pack("{s:f, s:O}", "at", lp_clock_monotonic(), "types", index));
  }
  drift_run *w = f->waiters;
  while (w) {
    drift_run *next = w->next_waiter;
    if (err)
      drift_verdict(w, DRIFT_UNKNOWN, NULL, NULL,
                    lp_error_new(err->code, "drift: GetInstanceTypes of %s %s: %s",
                                 lp_env_nodeclass(w->env)->kind, f->nodeclass, err->message));
    else
      check_type(w, index);
    w = next;
  }
  json_decref(index);
  json_decref(value);
  lp_error_free(err);
  free(f->nodeclass);
  free(f);
}

static void instance_type_check(drift_run *r) {
  double created = lp_rfc3339_parse(lp_obj_str(r->claim, "metadata.creationTimestamp"));
  if (!r->nodeclass || created < 0 || r->now - created < r->st->resync_s * DRIFT_MIN_AGE_FACTOR) {
    provider_check(r);
    return;
  }
  const char *nodeclass = lp_obj_name(r->nodeclass);
  const json_t *index = types_cached(r->st, nodeclass);
  if (index) {
    check_type(r, index);
    return;
  }
  drift_fetch *f = r->st->fetches;
  while (f && strcmp(f->nodeclass, nodeclass) != 0) f = f->next;
  if (f) {
    r->next_waiter = f->waiters;
    f->waiters = r;
    return;
  }
  f = lp_xcalloc(1, sizeof *f);
  f->nodeclass = lp_xstrdup(nodeclass);
  f->waiters = r;
  f->next = r->st->fetches;
  r->st->fetches = f;
  lp_cp_get_instance_types(lp_env_cloud(r->env), r->nodeclass, types_fetched, f);
}

/* ---- 4. the provider's drift policy ---------------------------------------------------------- */

/* "<node class resourceVersion>\n<script generation>\n": the prefix a cached answer must have to be
 * used, so a changed class or a reloaded policy is asked again. */
static char *prefix_of(lp_ctrl_env *env, const json_t *nodeclass) {
  const char *rv = lp_obj_resource_version(nodeclass);
  return lp_xasprintf("%s\n%llu\n", rv ? rv : "",
                      (unsigned long long)lp_cloudprovider_script_generation(lp_env_cloud(env)));
}

static char *policy_prefix(const drift_run *r) {
  return prefix_of(r->env, r->nodeclass);
}

/* Non-zero when the policy's answer for uid is cached under prefix. */
static int answer_cached(const drift_state *st, const char *uid, const char *prefix) {
  const char *hit = uid ? lp_cache_get(st->policy, uid, strlen(uid), NULL) : NULL;
  return hit && strncmp(hit, prefix, strlen(prefix)) == 0;
}

static void policy_verdict(drift_run *r, const char *reason) {
  if (!*reason) {
    drift_verdict(r, DRIFT_CLEAN, NULL, NULL, NULL);
    return;
  }
  char message[256];
  snprintf(message, sizeof message, "the drift policy reports %s against %s %s", reason,
           lp_env_nodeclass(r->env)->kind, lp_obj_name(r->nodeclass));
  drift_verdict(r, DRIFT_FOUND, reason, message, NULL);
}

static void policy_answered(json_t *value, lp_error *err, void *ud) {
  drift_run *r = ud;
  if (err && (strcmp(err->code, "DriftUnknown") == 0 || strcmp(err->code, "NodeClaimNotFound") == 0)) {
    lp_debug(lp_controller_logger(r->c), "drift not known yet", LPF_STR("nodeclaim", r->key),
             LPF_STR("code", err->code), LPF_STR("error", err->message));
    lp_error_free(err);
    drift_verdict(r, DRIFT_UNKNOWN, NULL, NULL, NULL);
    return;
  }
  if (err) {
    lp_error *e = lp_error_new(err->code, "drift: IsDrifted of nodeclaim %s: %s", r->key, err->message);
    lp_error_inherit(e, err); /* the policy error's position and traceback, for the log line */
    lp_error_free(err);
    drift_verdict(r, DRIFT_UNKNOWN, NULL, NULL, e);
    return;
  }
  const char *reason = json_string_value(value);
  char *prefix = policy_prefix(r);
  char *entry = lp_xasprintf("%s%s", prefix, reason ? reason : "");
  const char *uid = lp_obj_uid(r->claim);
  if (uid) lp_cache_set(r->st->policy, uid, strlen(uid), entry, strlen(entry), 0);
  free(entry);
  free(prefix);
  policy_verdict(r, reason ? reason : "");
  json_decref(value);
}

/* ---- 4b. asking in batches ------------------------------------------------------------------ */

/* When the mapping looks instances up many at once (lp_cloudprovider_lookup_batch > 1), a reconcile that
 * must ask the policy asks for the NodeClaims waiting next in the queue too, those that will have to ask as
 * well, up to the batch (lp_cp_is_drifted_many): a cold pass over N NodeClaims costs N / 100 lookups, not N.
 * Each answer is the one lp_cp_is_drifted gives for its NodeClaim, taken by that NodeClaim's reconcile as
 * if it had asked itself (the same verdict, cache entry, logs and metrics), unless the node class or the
 * scripts changed since it was asked (the prefix): then that reconcile asks again. The reconcile that
 * asked ends only after the last answer of its batch, so no batch outlives the reconciles (state_free). An
 * answer no reconcile takes (a NodeClaim a check before the policy found drifted, or deleted) is dropped
 * after resync seconds. */
struct drift_ask {
  char *uid;
  char *prefix; /* prefix_of the NodeClaim's node class when asked */
  double at;    /* lp_env_monotonic when asked */
  int answered;
  json_t *value; /* the answer, once answered (owned until taken) */
  lp_error *err;
  drift_run *waiter; /* a reconcile of the NodeClaim waiting for the answer, or NULL */
  drift_ask *next;
};

/* One lp_cp_is_drifted_many: asks[0] is its leader's, the reconcile that asked (its waiter). */
typedef struct drift_batch {
  drift_state *st;
  drift_run *leader;
  drift_ask **asks;
  size_t n, answered;
} drift_batch;

static void ask_batched(drift_run *r);

static drift_ask *ask_find(drift_state *st, const char *uid) {
  drift_ask *a = st->asks;
  while (a && strcmp(a->uid, uid) != 0) a = a->next;
  return a;
}

static void ask_free(drift_state *st, drift_ask *a) {
  for (drift_ask **p = &st->asks; *p; p = &(*p)->next) {
    if (*p == a) {
      *p = a->next;
      break;
    }
  }
  json_decref(a->value);
  lp_error_free(a->err);
  free(a->uid);
  free(a->prefix);
  free(a);
}

void drift_asks_free(drift_state *st) {
  while (st->asks) ask_free(st, st->asks);
}

/* r takes its answer a (answered), as from lp_cp_is_drifted; one asked under other inputs is asked again. */
static void take(drift_run *r, drift_ask *a) {
  char *prefix = policy_prefix(r);
  int same = strcmp(prefix, a->prefix) == 0;
  free(prefix);
  json_t *value = a->value;
  lp_error *err = a->err;
  a->value = NULL;
  a->err = NULL;
  ask_free(r->st, a);
  if (same) {
    policy_answered(value, err, r);
    return;
  }
  json_decref(value);
  lp_error_free(err);
  ask_batched(r);
}

static void batch_answered(size_t index, json_t *value, lp_error *err, void *ud) {
  drift_batch *b = ud;
  drift_ask *a = b->asks[index];
  a->answered = 1;
  a->value = value;
  a->err = err;
  if (index > 0 && a->waiter) take(a->waiter, a);
  if (++b->answered < b->n) return;
  drift_run *leader = b->leader;
  drift_ask *own = b->asks[0];
  free(b->asks);
  free(b);
  take(leader, own);
}

/* What a reconcile gathers for its batch. */
typedef struct gathering {
  drift_run *r;
  json_t *items;  /* [[nodeclaim, nodeclass], ...] for lp_cp_is_drifted_many */
  drift_batch *b; /* asks[0..n) filled as items are */
  size_t max;
} gathering;

static drift_ask *ask_new(drift_batch *b, const char *uid, const json_t *nodeclass) {
  drift_ask *a = lp_xcalloc(1, sizeof *a);
  a->uid = lp_xstrdup(uid);
  a->prefix = prefix_of(b->leader->env, nodeclass);
  a->at = lp_env_monotonic(b->leader->env);
  a->next = b->st->asks;
  b->st->asks = a;
  b->asks[b->n++] = a;
  return a;
}

/* Adds the NodeClaim of key, waiting in the queue, when it will ask the policy as the gathering reconcile
 * does: evaluated, Launched, its node class cached, passing checks 1 and 2, no answer cached or asked.
 * Check 3 is left out: it runs for NodeClaims older than an hour only, and one it finds drifted only
 * leaves its answer untaken. Stops at max. */
static int gather(const char *key, void *ud) {
  gathering *g = ud;
  drift_state *st = g->r->st;
  lp_ctrl_env *env = g->r->env;
  const json_t *claim = lp_env_get(env, LP_KIND_NODECLAIM, key);
  const json_t *nodepool = drift_nodepool_of(st, env, claim);
  const json_t *nodeclass =
      nodepool ? lp_env_nodeclass_of(env, lp_obj_get(claim, "spec.nodeClassRef")) : NULL;
  const char *uid = lp_obj_uid(claim), *pid = lp_obj_str(claim, "status.providerID");
  char message[512];
  if (!nodeclass || !uid || !pid || !*pid || !lp_condition_is(claim, "Launched", "True") ||
      ask_find(st, uid) || static_found(claim, nodepool, message, sizeof message) ||
      requirements_found(claim, nodepool, message, sizeof message))
    return 1;
  char *prefix = prefix_of(env, nodeclass);
  int cached = answer_cached(st, uid, prefix);
  free(prefix);
  if (cached) return 1;
  ask_new(g->b, uid, nodeclass);
  json_array_append_new(g->items, json_pack("[OO]", claim, nodeclass));
  return json_array_size(g->items) < g->max;
}

/* Drops the answers nobody took within resync seconds. */
static void sweep(drift_state *st, double now) {
  for (drift_ask *a = st->asks, *next; a; a = next) {
    next = a->next;
    if (a->answered && !a->waiter && now - a->at >= st->resync_s) ask_free(st, a);
  }
}

/* r's answer: taken when a batch brought it, awaited when one is bringing it, else asked with the
 * NodeClaims waiting next. */
static void ask_batched(drift_run *r) {
  drift_state *st = r->st;
  const char *uid = lp_obj_uid(r->claim);
  drift_ask *a = ask_find(st, uid);
  if (a && a->answered) {
    take(r, a);
    return;
  }
  if (a) {
    a->waiter = r;
    return;
  }
  sweep(st, lp_env_monotonic(r->env));
  size_t max = lp_cloudprovider_lookup_batch(lp_env_cloud(r->env));
  drift_batch *b = lp_xcalloc(1, sizeof *b);
  b->st = st;
  b->leader = r;
  b->asks = lp_xcalloc(max, sizeof *b->asks);
  ask_new(b, uid, r->nodeclass)->waiter = r; /* taken when the batch ends; never swept before */
  gathering g = {.r = r, .items = json_pack("[[OO]]", r->claim, r->nodeclass), .b = b, .max = max};
  if (max > 1) lp_controller_each_waiting(r->c, gather, &g);
  lp_cp_is_drifted_many(lp_env_cloud(r->env), g.items, batch_answered, b);
  json_decref(g.items);
}

static void provider_check(drift_run *r) {
  if (!r->nodeclass) { /* nothing to compare the instance with until the class is cached again */
    drift_verdict(r, DRIFT_UNKNOWN, NULL, NULL, NULL);
    return;
  }
  const char *uid = lp_obj_uid(r->claim);
  const char *hit = uid ? lp_cache_get(r->st->policy, uid, strlen(uid), NULL) : NULL;
  char *prefix = policy_prefix(r);
  size_t n = strlen(prefix);
  if (hit && strncmp(hit, prefix, n) == 0) {
    char *reason = lp_xstrdup(hit + n); /* the verdict may write the cache */
    free(prefix);
    policy_verdict(r, reason);
    free(reason);
    return;
  }
  free(prefix);
  if (uid && lp_cloudprovider_lookup_batch(lp_env_cloud(r->env)) > 1)
    ask_batched(r);
  else
    lp_cp_is_drifted(lp_env_cloud(r->env), r->claim, r->nodeclass, policy_answered, r);
}

void drift_check(drift_run *r) {
  if (static_drift(r) || requirements_drift(r)) return;
  instance_type_check(r);
}
