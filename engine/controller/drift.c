/* The drift controller ("nodeclaim.drift"; Karpenter's nodeclaim.disruption drift marker;
 * docs/controllers.md#drift-nodeclaimdrift-and-disruption-disruption): keeps each NodeClaim's Drifted
 * condition current, so the disruption controller (disruption.c) knows which nodes to replace.
 *
 * Skipped: NodeClaims being deleted, of a node class this provider does not serve, without a
 * karpenter.sh/nodepool label or whose NodePool is not cached. A NodeClaim not Launched=True loses its
 * Drifted condition. Otherwise the checks of drift_checks.c run in order (NodePoolDrifted,
 * RequirementsDrifted, InstanceTypeNotFound, then the Lua drift policy's reasons), and the condition
 * is set to True with the first reason found, removed when none is, or left as it is when the policy
 * cannot tell yet (DriftUnknown). The status is written only when it changes; every launched NodeClaim
 * is evaluated again after settings.nodeclass_resync_s (default 300 s, Karpenter's 5 min).
 *
 * A drift replacement drifted for the reason it was made for, under the same node class and scripts
 * and NodePool template (lp_drift_unresolvable), also gets DriftUnresolvable=True with that reason, in the
 * same write, and its NodePool the record drift-unresolvable.luaprov.io/<reason> (lp_drift_record_wanted):
 * the disruption controller then replaces no node of the NodePool for that reason, even once the
 * replacement is gone, unless another replacement made under the same inputs is judged Resolved. A drift
 * replacement judged otherwise gets DriftUnresolvable=False: "Resolved" once it is Initialized and not
 * drifted for its reason, "InputsChanged" when the node class, the template or the scripts changed (a hot
 * reload) since it was made; either lets replacing go on.
 *
 * What enqueues a NodeClaim besides its own changes: a change of its NodePool's spec or annotations
 * (every NodeClaim labelled with the pool), and any change of its node class (by
 * LP_INDEX_NODECLAIM_BY_NODECLASS), so a class edit or a template edit is seen at once.
 *
 * Metrics (lp_env_metrics):
 *   luaprov_drift_evaluations_total{result}   counter, per evaluation of a launched NodeClaim:
 *                                             drifted | not_drifted | unknown | error
 *   luaprov_drift_marked_total{reason}        counter, Drifted set to True (or to another reason)
 *   luaprov_nodeclaims_drifted{nodepool}      gauge, cached NodeClaims with Drifted=True, kept from
 *                                             the cache's changes (whoever wrote them)
 *   luaprov_drift_unresolvable_total{reason}  counter, DriftUnresolvable set to True
 *   luaprov_cache_*{cache="drift_policy"}     the IsDrifted answers kept per NodeClaim
 * Logs (logger controller.nodeclaim.drift, debug): "marking drifted" (nodeclaim, nodepool, reason,
 * message), "removing drifted status condition, not drifted" (nodeclaim, nodepool), "drift not known
 * yet" (nodeclaim, code, error); warn "drift cannot be resolved by replacement, not replacing for this
 * reason" (nodeclaim, nodepool, reason, replaces), info "drift no longer unresolvable, replacing resumes"
 * (nodeclaim, nodepool). Events: Warning DriftUnresolvable on the NodeClaim and on its NodePool, when
 * the condition is set; Warning DriftRecordFailed on the NodePool when the API server refuses the record
 * for good (403, 422). Failures are the framework's "reconcile failed, will retry". */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/drift_internal.h"
#include "controller/drift_replacement.h"
#include "core/log.h"

#define POLICY_CACHE_ENTRIES 100000
#define RELOAD_WATCH_MS      1000

/* A hot reload of the drift policy must not wait for each NodeClaim's next evaluation (minutes away):
 * once a second the script generation is compared, and a new one re-queues every NodeClaim. */
static void enqueue_claim(const char *key, json_t *obj, void *ud) {
  (void)obj;
  lp_controller_enqueue(ud, key);
}

static void reload_tick(uv_timer_t *t) {
  drift_state *st = t->data;
  lp_ctrl_env *env = lp_controller_env(st->c);
  uint64_t generation = lp_cloudprovider_script_generation(lp_env_cloud(env));
  if (generation == st->generation) return;
  st->generation = generation;
  lp_info(lp_controller_logger(st->c), "scripts reloaded, evaluating every nodeclaim again",
          LPF_INT("generation", (long long)generation),
          LPF_INT("nodeclaims", (long long)lp_env_count(env, LP_KIND_NODECLAIM)));
  lp_env_each(env, LP_KIND_NODECLAIM, enqueue_claim, st->c);
}

static void reload_watch_closed(uv_handle_t *h) {
  free(h);
}

/* ---- state and the drifted gauge -------------------------------------------------------------- */

static void *state_new(lp_controller *c) {
  lp_ctrl_env *env = lp_controller_env(c);
  lp_metrics *m = lp_env_metrics(env);
  drift_state *st = lp_xcalloc(1, sizeof *st);
  st->resync_s = lp_env_settings(env)->nodeclass_resync_s;
  st->policy = lp_cache_new("drift_policy", st->resync_s, POLICY_CACHE_ENTRIES, m);
  st->types = json_object();
  st->nodeclasses = lp_cloudprovider_supported_nodeclasses(lp_env_cloud(env));
  st->drifted = json_object();
  st->drifted_per_pool = json_object();
  st->evaluations = lp_metrics_counter(m, "luaprov_drift_evaluations_total",
                                       "Drift evaluations of launched NodeClaims, by result "
                                       "(drifted, not_drifted, unknown, error).",
                                       LP_LABELS("result"));
  st->marked = lp_metrics_counter(m, "luaprov_drift_marked_total",
                                  "NodeClaims marked Drifted=True, by drift reason.", LP_LABELS("reason"));
  st->gauge = lp_metrics_gauge(m, "luaprov_nodeclaims_drifted", "NodeClaims with Drifted=True, by NodePool.",
                               LP_LABELS("nodepool"));
  st->unresolvable = lp_metrics_counter(m, "luaprov_drift_unresolvable_total",
                                        "Drift replacements found drifted for the reason they were made for "
                                        "(DriftUnresolvable set), by drift reason.",
                                        LP_LABELS("reason"));
  st->c = c;
  st->generation = lp_cloudprovider_script_generation(lp_env_cloud(env));
  st->reload_watch = lp_xmalloc(sizeof *st->reload_watch);
  uv_timer_init(lp_env_loop(env), st->reload_watch);
  st->reload_watch->data = st;
  uv_timer_start(st->reload_watch, reload_tick, RELOAD_WATCH_MS, RELOAD_WATCH_MS);
  return st;
}

static void state_free(void *state) {
  drift_state *st = state;
  const char *pool;
  json_t *count;
  /* a standby reports nothing: the leader's gauge is the one that counts */
  json_object_foreach(st->drifted_per_pool, pool, count) lp_gauge_set(st->gauge, LP_LABELS(pool), 0);
  uv_close((uv_handle_t *)st->reload_watch, reload_watch_closed);
  drift_asks_free(st);
  lp_cache_free(st->policy);
  json_decref(st->types);
  json_decref(st->nodeclasses);
  json_decref(st->drifted);
  json_decref(st->drifted_per_pool);
  free(st);
}

static void count_pool(drift_state *st, const char *pool, int delta) {
  json_int_t n = json_integer_value(json_object_get(st->drifted_per_pool, pool)) + delta;
  json_object_set_new(st->drifted_per_pool, pool, json_integer(n));
  lp_gauge_set(st->gauge, LP_LABELS(pool), (double)n);
}

/* Follows one cached NodeClaim's change: the gauge counts each name once, even when the cache is
 * replayed to a controller started again. */
static void track_drifted(drift_state *st, const json_t *old_obj, const json_t *new_obj) {
  const char *name = lp_obj_name(new_obj ? new_obj : old_obj);
  if (!name) return;
  const char *was = json_string_value(json_object_get(st->drifted, name));
  int is = new_obj && lp_condition_is(new_obj, DRIFT_CONDITION, "True");
  const char *pool = new_obj ? lp_obj_label(new_obj, DRIFT_LABEL_POOL) : NULL;
  if (!pool) pool = "";
  if (was && is && strcmp(was, pool) == 0) return;
  if (was) {
    count_pool(st, was, -1);
    json_object_del(st->drifted, name); /* frees was */
  }
  if (is) {
    count_pool(st, pool, +1);
    json_object_set_new(st->drifted, name, json_string(pool));
  }
}

/* ---- watches ------------------------------------------------------------------------------- */

/* NodePools' status changes often (resources, conditions) and cannot drift a node. */
static int nodepool_changed(const json_t *old_obj, const json_t *new_obj) {
  if (!old_obj || !new_obj) return 1;
  const json_t *om = json_object_get(old_obj, "metadata"), *nm = json_object_get(new_obj, "metadata");
  return !json_equal(json_object_get(old_obj, "spec"), json_object_get(new_obj, "spec")) ||
         !json_equal(json_object_get(om, "annotations"), json_object_get(nm, "annotations"));
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  drift_state *st = lp_controller_state(c);
  lp_ctrl_env *env = lp_controller_env(c);
  const json_t *obj = new_obj ? new_obj : old_obj;
  if (kind == LP_KIND_NODECLAIM) {
    track_drifted(st, old_obj, new_obj);
    const char *uid = lp_obj_uid(obj);
    if (!new_obj && uid) lp_cache_delete(st->policy, uid, strlen(uid));
  } else if (kind == LP_KIND_NODEPOOL && nodepool_changed(old_obj, new_obj) && lp_obj_name(obj)) {
    lp_controller_enqueue_pool_claims(c, lp_obj_name(obj));
  } else if (kind == LP_KIND_NODECLASS && lp_obj_name(obj)) {
    /* by name: the claims of a same-named class in another group are checked again too, for nothing */
    lp_env_index_each(env, LP_INDEX_NODECLAIM_BY_NODECLASS, lp_obj_name(obj), enqueue_claim, c);
  }
}

/* ---- the verdict ---------------------------------------------------------------------------- */

typedef struct drift_write {
  drift_run *r;
  char *reason;  /* NULL when the condition is being removed */
  char *message; /* what the condition says */
  int newly;     /* the write marks it drifted (or with another reason): counted once stored */
  char *stuck;   /* the write sets DriftUnresolvable=True (its message), else NULL: announced once stored */
  int unstuck;   /* the write lifts DriftUnresolvable=True */
  int holds;     /* DriftUnresolvable=True once the write is stored: the NodePool records it */
} drift_write;

static void run_end(drift_run *r, lp_error *err, double requeue_s) {
  lp_controller_done(r->c, r->key, err, err ? 0 : requeue_s);
  json_decref(r->claim);
  json_decref(r->nodepool);
  json_decref(r->nodeclass);
  free(r->record);
  free(r);
}

/* Launched NodeClaims are looked at again; others wait for Launched to change (a NodeClaim event). */
static double requeue_of(const drift_run *r) {
  return lp_condition_is(r->claim, "Launched", "True") ? r->st->resync_s : 0;
}

/* DriftUnresolvable stored: set, a warning (log, and an event on the NodeClaim and on its NodePool, once:
 * the condition is written only when it changes); removed, replacing resumes. */
static void announce_unresolvable(const drift_write *w) {
  drift_run *r = w->r;
  const char *log = lp_controller_logger(r->c), *pool = lp_obj_label(r->claim, DRIFT_LABEL_POOL);
  if (w->stuck) {
    const char *replaces = lp_obj_annotation(r->claim, DRIFT_ANNOTATION_REPLACES);
    lp_warn(log, "drift cannot be resolved by replacement, not replacing for this reason",
            LPF_STR("nodeclaim", r->key), LPF_STR("nodepool", pool), LPF_STR("reason", w->reason),
            LPF_STR("replaces", replaces ? replaces : ""));
    lp_env_event(r->env, r->claim, "Warning", LP_DRIFT_UNRESOLVABLE, "%s", w->stuck);
    lp_env_event(r->env, r->nodepool, "Warning", LP_DRIFT_UNRESOLVABLE, "NodeClaim %s: %s", r->key, w->stuck);
    lp_counter_inc(r->st->unresolvable, LP_LABELS(w->reason));
  } else if (w->unstuck) {
    lp_info(log, "drift no longer unresolvable, replacing resumes", LPF_STR("nodeclaim", r->key),
            LPF_STR("nodepool", pool));
  }
}

/* A refusal that retrying does not change (RBAC without patch on nodepools: 403; an annotation the API
 * server rejects: 422) is also told on the NodePool, where an operator looks: without the record the
 * block no longer survives the flagged replacement. */
static void record_written(const lp_kube_reply *reply, void *ud) {
  drift_run *r = ud;
  lp_error *err = NULL;
  if (reply->error)
    err = lp_error_new(reply->error->code, "drift: recording on nodepool %s that nodeclaim %s is %s: %s",
                       lp_obj_name(r->nodepool), r->key, LP_DRIFT_UNRESOLVABLE, reply->error->message);
  if (reply->error && (reply->status == 403 || reply->status == 422))
    lp_env_event(r->env, r->nodepool, "Warning", "DriftRecordFailed",
                 "cannot write annotation %s (NodeClaim %s is %s): %s; until it is written, replacing is "
                 "blocked only while NodeClaim %s exists",
                 r->record, r->key, LP_DRIFT_UNRESOLVABLE, reply->error->message, r->key);
  run_end(r, err, err ? 0 : requeue_of(r));
}

/* Ends the run once the NodePool records what DriftUnresolvable=True for reason (NULL: none) shows. */
static void end_recorded(drift_run *r, const char *reason, lp_error *err, double requeue_s) {
  char *value =
      !err && reason ? lp_drift_record_wanted(r->env, r->claim, r->nodeclass, r->nodepool, reason) : NULL;
  if (!value) {
    run_end(r, err, requeue_s);
    return;
  }
  r->record = lp_xasprintf(LP_DRIFT_RECORD_PREFIX "%s", reason);
  lp_env_annotate(r->env, LP_KIND_NODEPOOL, lp_obj_name(r->nodepool), r->record, value, record_written, r);
  free(value);
}

static void condition_written(const lp_kube_reply *reply, void *ud) {
  drift_write *w = ud;
  drift_run *r = w->r;
  lp_error *err = NULL;
  const char *log = lp_controller_logger(r->c), *pool = lp_obj_label(r->claim, DRIFT_LABEL_POOL);
  double requeue = requeue_of(r);
  int stored = 0;
  if (lp_controller_gone(r->c, r->key, reply, "updating the Drifted condition")) {
    requeue = 0; /* deleted meanwhile: nothing is left to mark */
  } else if (reply->error) {
    err = lp_error_new(reply->error->code, "drift: updating the Drifted condition of nodeclaim %s: %s",
                       r->key, reply->error->message);
  } else {
    stored = 1;
    if (w->reason) {
      lp_debug(log, "marking drifted", LPF_STR("nodeclaim", r->key), LPF_STR("nodepool", pool),
               LPF_STR("reason", w->reason), LPF_STR("message", w->message));
      if (w->newly) lp_counter_inc(r->st->marked, LP_LABELS(w->reason));
    } else {
      lp_debug(log, "removing drifted status condition, not drifted", LPF_STR("nodeclaim", r->key),
               LPF_STR("nodepool", pool));
    }
    announce_unresolvable(w);
  }
  char *reason = w->reason;
  int holds = w->holds && stored;
  free(w->message);
  free(w->stuck);
  free(w);
  end_recorded(r, holds ? reason : NULL, err, requeue);
  free(reason);
}

static const char *const result_of[] = {
    [DRIFT_CLEAN] = "not_drifted", [DRIFT_FOUND] = "drifted", [DRIFT_UNKNOWN] = "unknown"};

/* What DriftUnresolvable says (malloc'd): which node the replacement replaced, why replacing stops. */
static char *unresolvable_message(const drift_run *r, const char *reason) {
  const char *replaces = lp_obj_annotation(r->claim, DRIFT_ANNOTATION_REPLACES);
  const char *pool = lp_obj_label(r->claim, DRIFT_LABEL_POOL);
  return lp_xasprintf("replacement of %s drifted for the same reason (%s): replacing would loop, so no node "
                      "of NodePool %s is replaced for %s; fix the drift policy or the node class",
                      replaces ? replaces : "?", reason, pool ? pool : "?", reason);
}

/* DriftUnresolvable on want when the NodeClaim is not shown unresolvable: a drift replacement is judged
 * (False) once it is Initialized and not drifted for its reason, or made under other inputs; any other
 * NodeClaim has none, nor has a replacement not judged yet. Non-zero when want changed. */
static int judge(const drift_run *r, json_t *want, drift_outcome outcome, const char *reason, int was_stuck) {
  const char *made_for = lp_drift_replaced_for(r->claim);
  if (!made_for || (!was_stuck && !lp_condition_is(r->claim, "Initialized", "True")))
    return lp_condition_clear(want, LP_DRIFT_UNRESOLVABLE);
  const char *replaces = lp_obj_annotation(r->claim, DRIFT_ANNOTATION_REPLACES);
  int same = outcome == DRIFT_FOUND && reason && strcmp(reason, made_for) == 0;
  char *message =
      same ? lp_xasprintf("replacement of %s was made before the node class, the NodePool template or the "
                          "scripts changed; the next replacement for %s is judged again",
                          replaces ? replaces : "?", made_for)
           : lp_xasprintf("replacement of %s is not drifted for %s: replacing resolves it",
                          replaces ? replaces : "?", made_for);
  int changed = lp_condition_set(want, LP_DRIFT_UNRESOLVABLE, "False",
                                 same ? LP_DRIFT_INPUTS_CHANGED : LP_DRIFT_RESOLVED, message, r->now);
  free(message);
  return changed;
}

void drift_verdict(drift_run *r, drift_outcome outcome, const char *reason, const char *message,
                   lp_error *err) {
  int launched = lp_condition_is(r->claim, "Launched", "True");
  if (launched) lp_counter_inc(r->st->evaluations, LP_LABELS(err ? "error" : result_of[outcome]));
  if (err || outcome == DRIFT_UNKNOWN) {
    run_end(r, err, requeue_of(r));
    return;
  }
  json_t *want = json_deep_copy(r->claim);
  int changed = outcome == DRIFT_FOUND
                    ? lp_condition_set(want, DRIFT_CONDITION, "True", reason, message, r->now)
                    : lp_condition_clear(want, DRIFT_CONDITION);
  char *stuck =
      outcome == DRIFT_FOUND && lp_drift_unresolvable(r->env, r->claim, r->nodeclass, r->nodepool, reason)
          ? unresolvable_message(r, reason)
          : NULL;
  int was_stuck = lp_condition_is(r->claim, LP_DRIFT_UNRESOLVABLE, "True");
  int stuck_changed = stuck ? lp_condition_set(want, LP_DRIFT_UNRESOLVABLE, "True", reason, stuck, r->now)
                            : judge(r, want, outcome, reason, was_stuck);
  if (!changed && !stuck_changed) {
    json_decref(want);
    end_recorded(r, stuck ? reason : NULL, NULL, requeue_of(r));
    free(stuck);
    return;
  }
  drift_write *w = lp_xcalloc(1, sizeof *w);
  w->r = r;
  w->holds = stuck != NULL;
  if (stuck && !was_stuck)
    w->stuck = stuck; /* the reason cannot change while it holds: it is made_for */
  else
    free(stuck);
  w->unstuck = !stuck && was_stuck;
  if (outcome == DRIFT_FOUND) {
    const json_t *old = lp_condition_get(r->claim, DRIFT_CONDITION);
    const char *old_reason = json_string_value(json_object_get(old, "reason"));
    w->newly =
        !lp_condition_is(r->claim, DRIFT_CONDITION, "True") || !old_reason || strcmp(old_reason, reason);
    w->reason = lp_xstrdup(reason);
    w->message = lp_xstrdup(message ? message : "");
  }
  lp_env_patch(r->env, LP_KIND_NODECLAIM, r->key, lp_obj_resource_version(r->claim), "status",
               json_pack("{s:{s:O}}", "status", "conditions",
                         json_object_get(json_object_get(want, "status"), "conditions")),
               condition_written, w);
  json_decref(want);
}

/* ---- reconcile ----------------------------------------------------------------------------- */

json_t *drift_nodepool_of(drift_state *st, lp_ctrl_env *env, const json_t *claim) {
  const char *pool = claim ? lp_obj_label(claim, DRIFT_LABEL_POOL) : NULL;
  json_t *nodepool = pool ? lp_env_get(env, LP_KIND_NODEPOOL, pool) : NULL;
  if (!nodepool || lp_obj_deleting(claim) ||
      !lp_nodeclass_ref_supported(st->nodeclasses, lp_obj_get(claim, "spec.nodeClassRef")))
    return NULL;
  return nodepool;
}

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  drift_state *st = lp_controller_state(c);
  json_t *claim = lp_env_get(env, LP_KIND_NODECLAIM, key);
  json_t *nodepool = drift_nodepool_of(st, env, claim);
  if (!nodepool) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  drift_run *r = lp_xcalloc(1, sizeof *r);
  r->c = c;
  r->env = env;
  r->st = st;
  r->key = key;
  r->now = lp_env_wall(env);
  r->claim = json_incref(claim);
  r->nodepool = json_incref(nodepool);
  r->nodeclass = json_incref(lp_env_nodeclass_of(env, lp_obj_get(claim, "spec.nodeClassRef")));
  if (!lp_condition_is(claim, "Launched", "True"))
    drift_verdict(r, DRIFT_CLEAN, NULL, NULL, NULL);
  else
    drift_check(r);
}

const lp_controller_def lp_drift_controller = {
    .name = "nodeclaim.drift",
    .primary = LP_KIND_NODECLAIM,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
