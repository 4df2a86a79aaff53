/* The node class status controller ("nodeclass"): resolves each class (the resource of the mapping's
 * node class descriptor, lp_cloudprovider_nodeclass, in its group and in each alias group: its keys
 * name the group, controller.h "node classes") through the mapping (lp_cp_resolve_nodeclass)
 * into its status (whatever the mapping resolves, and its conditions), stamps the descriptor's hash
 * annotations that static drift compares, and holds a deleted class (the descriptor's finalizer) until
 * no NodeClaim references it. As the upstream providers' nodeclass controllers do.
 *
 * Ready is the engine's roll-up of the conditions the mapping reports (conditions.h: the first False
 * one gives its reason and message, so the mapping's "nothing matched the selector" reaches the
 * NodePool's NodeClassReady), or the mapping's own Ready when it reports no other condition; a mapping
 * that reports none leaves Ready Unknown (ReadyNotReported): readiness is the mapping's to say. A
 * cloud API failure is a condition Unknown (the mapping keeps what it resolved before); a failure of
 * the call itself (script error, budget, Contract) sets Ready Unknown (transient) or False with the
 * error code as reason. Both are retried with the workqueue's backoff.
 *
 * A class resolved at its current generation less than settings.nodeclass_resync_s ago and Ready is
 * not resolved again when only its status or a NodeClaim changed, so our own status write does not
 * cost a second round of cloud calls.
 *
 * Metrics:
 *   luaprov_nodeclass_ready{nodeclass}                 gauge, 1 while Ready=True, else 0
 *   luaprov_nodeclass_resolutions_total{result}        counter, success | error (the call failed or a
 *                                                      cloud API failure left a condition Unknown)
 * Events: WaitingOnNodeClaimTermination (Normal) on a deleted class NodeClaims still reference.
 * Logs (logger controller.nodeclass): "resolved nodeclass" (debug), "nodeclass not ready" (warn) and
 * "nodeclass ready" (info) when Ready changes, "waiting on nodeclaim termination" (debug),
 * "removed nodeclass finalizer" (info). */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "core/clock.h"
#include "core/log.h"

/* A class that is not Ready is looked at again this often (upstream: 15 s for an empty selector
 * result), so fixing the cloud side (tagging a resource) is noticed without a spec edit. */
#define NOT_READY_REQUEUE_S 30.0
/* NodeClaims named in the WaitingOnNodeClaimTermination event, then "and N other(s)" (Karpenter's). */
#define NAMES_SHOWN 5

typedef struct nc_state {
  json_t *resolved; /* key -> {uid, generation, at (monotonic)}: the last resolution written in full */
  lp_metric *ready, *resolutions;
} nc_state;

static void *state_new(lp_controller *c) {
  nc_state *s = lp_xcalloc(1, sizeof *s);
  lp_metrics *m = lp_env_metrics(lp_controller_env(c));
  s->resolved = json_object();
  s->ready = lp_metrics_gauge(m, "luaprov_nodeclass_ready", "1 while the node class is Ready=True, else 0.",
                              LP_LABELS("nodeclass"));
  s->resolutions =
      lp_metrics_counter(m, "luaprov_nodeclass_resolutions_total",
                         "Node class resolutions by result (success, error).", LP_LABELS("result"));
  return s;
}

static void state_free(void *state) {
  nc_state *s = state;
  json_decref(s->resolved);
  free(s);
}

/* ---- one reconcile of a live class --------------------------------------------------------- */

typedef struct pass {
  lp_controller *c;
  const char *key;
  char *label;     /* how messages name it (lp_env_nodeclass_label) */
  json_t *cached;  /* the object as the cache had it (own reference) */
  json_t *desired; /* a copy carrying the new status */
  char *hash, *hash_version;
  char *resource_version; /* of the last write, the precondition of the next */
  lp_error *failure;      /* resolution failure, reported once the status is written (backoff) */
} pass;

static nc_state *state_of(pass *p) {
  return lp_controller_state(p->c);
}

static void pass_end(pass *p, lp_error *err, double requeue_after_s) {
  lp_controller_done(p->c, p->key, err, requeue_after_s);
  json_decref(p->cached);
  json_decref(p->desired);
  free(p->label);
  free(p->hash);
  free(p->hash_version);
  free(p->resource_version);
  lp_error_free(p->failure);
  free(p);
}

static const char *ready_status(const json_t *obj) {
  const char *s = json_string_value(json_object_get(lp_condition_get(obj, "Ready"), "status"));
  return s ? s : "";
}

/* A failing cloud call words its message with a new request ID on every attempt: keeping the first
 * while status and reason stay the same saves a status write per retry (and the watch event that would
 * start the next retry at once, defeating the backoff). The retries' own IDs are in the error log. */
static void set_condition(json_t *obj, const char *type, const char *status, const char *reason,
                          const char *message, double now) {
  const json_t *old = lp_condition_get(obj, type);
  const char *old_status = json_string_value(json_object_get(old, "status"));
  const char *old_reason = json_string_value(json_object_get(old, "reason"));
  if (strcmp(status, "Unknown") == 0 && old_status && strcmp(old_status, status) == 0 && old_reason &&
      reason && strcmp(old_reason, reason) == 0)
    message = json_string_value(json_object_get(old, "message"));
  lp_condition_set(obj, type, status, reason, message, now);
}

static const lp_nodeclass_desc *desc_of(lp_controller *c) {
  return lp_env_nodeclass(lp_controller_env(c));
}

/* Writes the mapping's status into p->desired; notes a condition left Unknown by a cloud API failure
 * as p->failure. */
static void apply_status(pass *p, json_t *status, double now) {
  json_t *desired_status = json_object_get(p->desired, "status");
  if (!json_is_object(desired_status)) {
    desired_status = json_object();
    json_object_set_new(p->desired, "status", desired_status);
  }
  const char *field;
  json_t *value;
  json_object_foreach(status, field, value) {
    if (strcmp(field, "conditions") != 0) json_object_set(desired_status, field, value);
  }
  json_t *conditions = json_object_get(status, "conditions");
  size_t n = json_array_size(conditions), ndeps = 0, i;
  const char **deps = lp_xcalloc(n + 1, sizeof *deps);
  const json_t *mapping_ready = NULL, *cond;
  json_array_foreach(conditions, i, cond) {
    const char *type = json_string_value(json_object_get(cond, "type"));
    const char *st = json_string_value(json_object_get(cond, "status"));
    const char *message = json_string_value(json_object_get(cond, "message"));
    if (strcmp(type, "Ready") == 0) {
      mapping_ready = cond;
      continue;
    }
    deps[ndeps++] = type;
    set_condition(p->desired, type, st, json_string_value(json_object_get(cond, "reason")), message, now);
    if (strcmp(st, "Unknown") == 0 && !p->failure)
      p->failure = lp_error_new("NodeClassNotResolved", "%s: %s: %s", p->label, type,
                                message ? message : "(no message)");
  }
  if (ndeps > 0)
    lp_condition_rollup_ready(p->desired, deps, now);
  else if (mapping_ready)
    set_condition(p->desired, "Ready", json_string_value(json_object_get(mapping_ready, "status")),
                  json_string_value(json_object_get(mapping_ready, "reason")),
                  json_string_value(json_object_get(mapping_ready, "message")), now);
  else
    lp_condition_set(p->desired, "Ready", "Unknown", "ReadyNotReported",
                     "the mapping's resolve_nodeclass reported no conditions, so readiness is not known "
                     "(docs/contracts.md#mappings)",
                     now);
  free(deps);
}

static int transient(const char *code) {
  static const char *const codes[] = {"Throttled",     "Transport",          "Timeout",
                                      "Cancelled",     "ShuttingDown",       "InvalidResponse",
                                      "InternalError", "ServiceUnavailable", NULL};
  for (const char *const *c = codes; *c; c++)
    if (strcmp(code, *c) == 0) return 1;
  return 0;
}

/* The resolution itself failed: Ready carries the error code (made a valid condition reason: letters,
 * digits, '_', ',' and ':') and the message; the lists stay as they were. */
static void apply_failure(pass *p, lp_error *err, double now) {
  char reason[128];
  size_t n = 0;
  for (const char *s = err->code; *s && n + 1 < sizeof reason; s++) {
    int ok = (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
             (n > 0 && ((*s >= '0' && *s <= '9') || *s == '_' || *s == ',' || *s == ':'));
    reason[n++] = ok ? *s : '_';
  }
  reason[n] = '\0';
  char *message = lp_xasprintf("resolving %s: %s", p->label, err->message);
  set_condition(p->desired, "Ready", transient(err->code) ? "Unknown" : "False", n ? reason : "Error",
                message, now);
  p->failure = lp_error_new(err->code, "%s", message);
  free(message);
}

static void report(pass *p) {
  nc_state *s = state_of(p);
  const char *logger = lp_controller_logger(p->c);
  const char *before = ready_status(p->cached), *after = ready_status(p->desired);
  const json_t *ready = lp_condition_get(p->desired, "Ready");
  if (strcmp(before, after) != 0) {
    if (strcmp(after, "True") == 0)
      lp_info(logger, "nodeclass ready", LPF_STR("nodeclass", p->key));
    else
      lp_warn(logger, "nodeclass not ready", LPF_STR("nodeclass", p->key), LPF_STR("status", after),
              LPF_STR("reason", json_string_value(json_object_get(ready, "reason"))),
              LPF_STR("message", json_string_value(json_object_get(ready, "message"))));
  }
  lp_gauge_set(s->ready, LP_LABELS(p->key), strcmp(after, "True") == 0 ? 1 : 0);
}

static void finish(pass *p, lp_error *write_err) {
  if (write_err) {
    pass_end(p, write_err, 0);
    return;
  }
  report(p);
  if (p->failure) {
    lp_error *failure = p->failure;
    p->failure = NULL;
    pass_end(p, failure, 0);
    return;
  }
  double resync = lp_env_settings(lp_controller_env(p->c))->nodeclass_resync_s;
  int ready = strcmp(ready_status(p->desired), "True") == 0;
  if (ready) {
    json_t *generation = json_object_get(json_object_get(p->desired, "metadata"), "generation");
    json_object_set_new(state_of(p)->resolved, p->key,
                        json_pack("{s:s?, s:O?, s:f}", "uid", lp_obj_uid(p->cached), "generation", generation,
                                  "at", lp_clock_monotonic()));
  } else {
    json_object_del(state_of(p)->resolved, p->key);
  }
  pass_end(p, NULL, (ready || resync < NOT_READY_REQUEUE_S) ? resync : NOT_READY_REQUEUE_S);
}

/* Ends the pass without an error when the write's answer is a 404: the node class was deleted
 * meanwhile, so nothing is left to resolve (its deletion is reconciled on its own). */
static int class_gone(pass *p, const lp_kube_reply *reply, const char *action) {
  if (!lp_controller_gone(p->c, p->key, reply, action)) return 0;
  pass_end(p, NULL, 0);
  return 1;
}

static void status_written(const lp_kube_reply *reply, void *ud) {
  pass *p = ud;
  if (class_gone(p, reply, "writing status")) return;
  finish(p, reply->error ? lp_error_new(reply->error->code, "%s", reply->error->message) : NULL);
}

static void write_status(pass *p) {
  json_t *status = json_object_get(p->desired, "status");
  if (json_equal(status, json_object_get(p->cached, "status"))) {
    finish(p, NULL);
    return;
  }
  lp_env_patch(lp_controller_env(p->c), LP_KIND_NODECLASS, p->key, p->resource_version, "status",
               json_pack("{s:O}", "status", status), status_written, p);
}

static void metadata_written(const lp_kube_reply *reply, void *ud) {
  pass *p = ud;
  if (class_gone(p, reply, "writing the finalizer and hash annotations")) return;
  if (reply->error) {
    finish(p, lp_error_new(reply->error->code, "%s", reply->error->message));
    return;
  }
  free(p->resource_version);
  p->resource_version = lp_xstrdup(lp_obj_resource_version(reply->object));
  write_status(p);
}

/* The finalizer and the hash annotations, when the cached object lacks them. */
static void write_metadata(pass *p) {
  const lp_nodeclass_desc *d = desc_of(p->c);
  json_t *md = json_object();
  if (!lp_obj_has_finalizer(p->cached, d->finalizer))
    json_object_set_new(md, "finalizers", lp_obj_finalizers_with(p->cached, d->finalizer, 1));
  const char *hash = lp_obj_annotation(p->cached, d->hash_annotation);
  const char *version = lp_obj_annotation(p->cached, d->hash_version_annotation);
  if (!hash || strcmp(hash, p->hash) != 0 || !version || strcmp(version, p->hash_version) != 0)
    json_object_set_new(
        md, "annotations",
        json_pack("{s:s, s:s}", d->hash_annotation, p->hash, d->hash_version_annotation, p->hash_version));
  if (json_object_size(md) == 0) {
    json_decref(md);
    write_status(p);
    return;
  }
  lp_env_patch(lp_controller_env(p->c), LP_KIND_NODECLASS, p->key, p->resource_version, NULL,
               json_pack("{s:o}", "metadata", md), metadata_written, p);
}

static void resolved(json_t *value, lp_error *err, void *ud) {
  pass *p = ud;
  double now = lp_env_wall(lp_controller_env(p->c));
  if (err)
    apply_failure(p, err, now);
  else
    apply_status(p, value, now);
  lp_counter_inc(state_of(p)->resolutions, LP_LABELS(p->failure ? "error" : "success"));
  if (!err)
    lp_debug(lp_controller_logger(p->c), "resolved nodeclass", LPF_STR("nodeclass", p->key),
             LPF_INT("status_fields", json_object_size(value)), LPF_STR("ready", ready_status(p->desired)));
  json_decref(value);
  lp_error_free(err);
  write_metadata(p);
}

static void hashed(json_t *value, lp_error *err, void *ud) {
  pass *p = ud;
  if (err) {
    pass_end(p, err, 0);
    return;
  }
  p->hash = lp_xstrdup(json_string_value(json_object_get(value, "hash")));
  p->hash_version = lp_xstrdup(json_string_value(json_object_get(value, "version")));
  json_decref(value);
  lp_cp_resolve_nodeclass(lp_env_cloud(lp_controller_env(p->c)), p->cached, resolved, p);
}

/* Resolved at this uid and generation less than a resync ago, Ready, with the finalizer and hash: only
 * status or NodeClaims changed since. *remaining gets the time left until the resync. */
static int recently_resolved(lp_controller *c, const char *key, const json_t *obj, double *remaining) {
  const json_t *last = json_object_get(((nc_state *)lp_controller_state(c))->resolved, key);
  const json_t *md = json_object_get(obj, "metadata");
  const lp_nodeclass_desc *d = desc_of(c);
  if (!last || !lp_obj_has_finalizer(obj, d->finalizer) || !lp_condition_is(obj, "Ready", "True") ||
      !json_object_get(json_object_get(md, "annotations"), d->hash_annotation))
    return 0;
  const char *uid = json_string_value(json_object_get(last, "uid")), *obj_uid = lp_obj_uid(obj);
  if (!uid || !obj_uid || strcmp(uid, obj_uid) != 0 ||
      !json_equal(json_object_get(last, "generation"), json_object_get(md, "generation")))
    return 0;
  double age = lp_clock_monotonic() - json_real_value(json_object_get(last, "at"));
  *remaining = lp_env_settings(lp_controller_env(c))->nodeclass_resync_s - age;
  return *remaining > 0;
}

/* ---- a deleted class ----------------------------------------------------------------------- */

typedef struct names {
  const char **v;
  size_t n, cap;
} names;

static void add_name(const char *key, json_t *obj, void *ud) {
  (void)obj;
  names *ns = ud;
  if (ns->n == ns->cap) {
    ns->cap = ns->cap ? 2 * ns->cap : 8;
    ns->v = lp_xrealloc(ns->v, ns->cap * sizeof *ns->v);
  }
  ns->v[ns->n++] = key;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "a, b, c, d, e and 3 other(s)" */
static char *first_names(names *ns) {
  qsort(ns->v, ns->n, sizeof *ns->v, by_name);
  size_t shown = ns->n < NAMES_SHOWN ? ns->n : NAMES_SHOWN, len = 32;
  for (size_t i = 0; i < shown; i++) len += strlen(ns->v[i]) + 2;
  char *out = lp_xcalloc(1, len);
  for (size_t i = 0; i < shown; i++) {
    if (i) strcat(out, ", ");
    strcat(out, ns->v[i]);
  }
  if (ns->n > shown) snprintf(out + strlen(out), len - strlen(out), " and %zu other(s)", ns->n - shown);
  return out;
}

/* The NodeClaims referencing one class: the index holds those of its name in every group. */
typedef struct claims_of {
  lp_ctrl_env *env;
  const char *key; /* the class's */
  names *ns;
} claims_of;

static void add_claim_of(const char *key, json_t *claim, void *ud) {
  claims_of *co = ud;
  char *class_key = lp_env_nodeclass_key(co->env, lp_obj_get(claim, "spec.nodeClassRef"));
  if (class_key && strcmp(class_key, co->key) == 0) add_name(key, claim, co->ns);
  free(class_key);
}

typedef struct removal {
  lp_controller *c;
  const char *key;
} removal;

static void finalizer_removed(const lp_kube_reply *reply, void *ud) {
  removal *r = ud;
  lp_error *err = NULL;
  if (reply->error && strcmp(reply->error->code, "NotFound") != 0)
    err = lp_error_new(reply->error->code, "%s", reply->error->message);
  else
    lp_info(lp_controller_logger(r->c), "removed nodeclass finalizer", LPF_STR("nodeclass", r->key));
  lp_controller_done(r->c, r->key, err, 0);
  free(r);
}

static void finalize(lp_controller *c, const char *key, const json_t *obj) {
  lp_ctrl_env *env = lp_controller_env(c);
  const char *finalizer = desc_of(c)->finalizer;
  json_object_del(((nc_state *)lp_controller_state(c))->resolved, key);
  if (!lp_obj_has_finalizer(obj, finalizer)) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  names ns = {0};
  claims_of claims = {env, key, &ns};
  lp_env_index_each(env, LP_INDEX_NODECLAIM_BY_NODECLASS, lp_nodeclass_key_name(key), add_claim_of, &claims);
  if (ns.n > 0) {
    /* no requeue: each NodeClaim's deletion enqueues this class (on_change) */
    char *list = first_names(&ns);
    lp_env_event(env, obj, "Normal", "WaitingOnNodeClaimTermination",
                 "Waiting on NodeClaim termination for %s", list);
    lp_debug(lp_controller_logger(c), "waiting on nodeclaim termination", LPF_STR("nodeclass", key),
             LPF_STR("nodeclaims", list));
    free(list);
    free(ns.v);
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  removal *r = lp_xmalloc(sizeof *r);
  r->c = c;
  r->key = key;
  lp_env_patch(env, LP_KIND_NODECLASS, key, lp_obj_resource_version(obj), NULL,
               json_pack("{s:{s:o}}", "metadata", "finalizers", lp_obj_finalizers_with(obj, finalizer, 0)),
               finalizer_removed, r);
}

/* ---- the controller ------------------------------------------------------------------------ */

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  nc_state *s = lp_controller_state(c);
  json_t *obj = lp_env_get(env, LP_KIND_NODECLASS, key);
  if (!obj) { /* gone (its finalizer was removed), or a NodeClaim names a class that never was */
    json_object_del(s->resolved, key);
    if (lp_metric_value(s->ready, LP_LABELS(key)) != 0) lp_gauge_set(s->ready, LP_LABELS(key), 0);
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  if (lp_obj_deleting(obj)) {
    finalize(c, key, obj);
    return;
  }
  double remaining;
  if (recently_resolved(c, key, obj, &remaining)) {
    lp_controller_done(c, key, NULL, remaining);
    return;
  }
  pass *p = lp_xcalloc(1, sizeof *p);
  p->c = c;
  p->key = key;
  p->label = lp_env_nodeclass_label(env, key);
  p->cached = json_incref(obj);
  p->desired = json_deep_copy(obj);
  p->resource_version = lp_xstrdup(lp_obj_resource_version(obj));
  lp_cp_nodeclass_hash(lp_env_cloud(env), obj, hashed, p);
}

/* A NodeClaim appearing or going: the class it references (by group and name) may be waiting for its
 * last one. */
static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  if (kind != LP_KIND_NODECLAIM || (old_obj && new_obj)) return;
  char *key = lp_env_nodeclass_key(lp_controller_env(c),
                                   lp_obj_get(old_obj ? old_obj : new_obj, "spec.nodeClassRef"));
  if (key) lp_controller_enqueue(c, key);
  free(key);
}

/* resync_s stays 0: the period is a setting, so each reconcile asks for the next one itself. */
const lp_controller_def lp_nodeclass_controller = {
    .name = "nodeclass",
    .primary = LP_KIND_NODECLASS,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
