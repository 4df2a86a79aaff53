/* The NodeClaim lifecycle controller ("nodeclaim.lifecycle"; Karpenter's, docs/controllers.md):
 * takes a managed NodeClaim from creation to a Ready node. Per reconcile, in order: add the
 * karpenter.sh/termination finalizer (never launch without it), launch the instance
 * (lifecycle_launch.c), register and initialize its Node (lifecycle_node.c), delete the NodeClaim when
 * launch or registration takes too long, roll Launched, Registered and Initialized into Ready and
 * write the status when it changed. Deleting NodeClaims are the termination controller's.
 *
 * A Node change enqueues the NodeClaim with the Node's providerID, so registration and initialization
 * follow the kubelet. Liveness timers requeue the key, so a timeout fires with no other event.
 *
 * Metrics (the manager's registry), labelled by the NodeClaim's NodePool:
 *   luaprov_nodeclaims_launched_total{nodepool}        Launched became True (counted once stored)
 *   luaprov_nodeclaims_registered_total{nodepool}      Registered became True
 *   luaprov_nodeclaims_initialized_total{nodepool}     Initialized became True
 *   luaprov_nodes_created_total{nodepool}              a Node registered for a NodeClaim
 *   luaprov_nodeclaims_disrupted_total{reason,nodepool} NodeClaims deleted here: insufficient_capacity,
 *                                                      nodeclass_not_ready, launch_timeout,
 *                                                      registration_timeout
 *   luaprov_nodeclaims_startup_duration_seconds{nodepool} histogram, creationTimestamp to Initialized
 * and the launch cache's luaprov_cache_*{cache="nodeclaim_launches"}. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/lifecycle_internal.h"
#include "core/log.h"

/* Karpenter caches a Create result an hour, so a status write lost after a launch never launches twice. */
#define LAUNCH_CACHE_TTL_S   3600.0
#define LAUNCH_CACHE_ENTRIES 10000
/* Node start-up takes tens of seconds to minutes. */
static const double startup_buckets[] = {5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800};

const char *lc_nodepool(const json_t *claim) {
  const char *pool = lp_obj_label(claim, LC_LABEL_NODEPOOL);
  return pool ? pool : "";
}

/* ---- state --------------------------------------------------------------------------------- */

static void *state_new(lp_controller *c) {
  lp_ctrl_env *env = lp_controller_env(c);
  lp_metrics *m = lp_env_metrics(env);
  lc_state *st = lp_xcalloc(1, sizeof *st);
  st->launches = lp_cache_new("nodeclaim_launches", LAUNCH_CACHE_TTL_S, LAUNCH_CACHE_ENTRIES, m);
  st->nodeclasses = lp_cloudprovider_supported_nodeclasses(lp_env_cloud(env));
  st->launched = lp_metrics_counter(m, "luaprov_nodeclaims_launched_total",
                                    "NodeClaims whose instance was launched.", LP_LABELS("nodepool"));
  st->registered = lp_metrics_counter(m, "luaprov_nodeclaims_registered_total",
                                      "NodeClaims whose Node registered.", LP_LABELS("nodepool"));
  st->initialized = lp_metrics_counter(m, "luaprov_nodeclaims_initialized_total",
                                       "NodeClaims whose Node initialized.", LP_LABELS("nodepool"));
  st->nodes_created = lp_metrics_counter(m, "luaprov_nodes_created_total",
                                         "Nodes registered for a NodeClaim.", LP_LABELS("nodepool"));
  st->disrupted =
      lp_metrics_counter(m, "luaprov_nodeclaims_disrupted_total",
                         "NodeClaims deleted by a controller, by reason.", LP_LABELS("reason", "nodepool"));
  st->startup = lp_metrics_histogram(m, "luaprov_nodeclaims_startup_duration_seconds",
                                     "Seconds from a NodeClaim's creation to its Node initialized.",
                                     LP_LABELS("nodepool"), startup_buckets,
                                     sizeof startup_buckets / sizeof startup_buckets[0]);
  return st;
}

static void state_free(void *state) {
  lc_state *st = state;
  lp_cache_free(st->launches);
  json_decref(st->nodeclasses);
  free(st);
}

/* ---- watches ------------------------------------------------------------------------------- */

static void enqueue_claim(const char *key, json_t *obj, void *ud) {
  (void)obj;
  lp_controller_enqueue(ud, key);
}

static void enqueue_for_node(lp_controller *c, const json_t *node) {
  const char *pid = lp_obj_str(node, "spec.providerID");
  if (pid && *pid)
    lp_env_index_each(lp_controller_env(c), LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, enqueue_claim, c);
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  if (kind == LP_KIND_NODE) {
    enqueue_for_node(c, new_obj);
    if (old_obj && new_obj &&
        !json_equal(json_object_get(json_object_get(old_obj, "spec"), "providerID"),
                    json_object_get(json_object_get(new_obj, "spec"), "providerID")))
      enqueue_for_node(c, old_obj);
  } else if (kind == LP_KIND_NODECLAIM && !new_obj) {
    /* gone: its launch result can never be needed again */
    const char *uid = lp_obj_uid(old_obj);
    lc_state *st = lp_controller_state(c);
    if (uid) lp_cache_delete(st->launches, uid, strlen(uid));
  }
}

/* ---- writes -------------------------------------------------------------------------------- */

static lp_kube_ref claim_ref(const lc_run *r) {
  lp_kube_ref ref = *lp_kind_ref(LP_KIND_NODECLAIM);
  ref.name = lp_obj_name(r->stored);
  return ref;
}

static void finish(lc_run *r) {
  lp_controller *c = r->c;
  const char *key = r->key;
  lp_error *err = r->err;
  /* an error retries with backoff, which must not postpone a liveness deadline */
  if (err && r->requeue_s > 0) lp_controller_enqueue_after(c, key, r->requeue_s);
  double requeue = r->requeue_s;
  json_decref(r->stored);
  json_decref(r->claim);
  json_decref(r->node);
  free(r);
  lp_controller_done(c, key, err, err ? 0 : requeue);
}

/* Ends the reconcile without an error when the write's answer is a 404: the NodeClaim was deleted
 * before its finalizer was on, so there is nothing left to launch, register or time out. */
static int claim_gone(lc_run *r, const lp_kube_reply *reply, const char *action) {
  if (!lp_controller_gone(r->c, r->key, reply, action)) return 0;
  lp_error_free(r->err);
  r->err = NULL;
  r->requeue_s = 0;
  finish(r);
  return 1;
}

/* The answer of a write of the NodeClaim: it is now what is stored. */
static void claim_written(const lp_kube_reply *reply, void *ud) {
  lc_run *r = ud;
  if (claim_gone(r, reply, "writing metadata")) return;
  if (reply->error) {
    lp_error_keep_first(&r->err, lp_error_new(reply->error->code, "%s", reply->error->message));
    finish(r);
    return;
  }
  json_decref(r->stored);
  r->stored = json_incref(reply->object);
  r->next(r);
}

static const char *const metadata_fields[] = {"finalizers", "labels", "annotations", NULL};

void lc_persist_metadata(lc_run *r, lc_step next) {
  const json_t *want = json_object_get(r->claim, "metadata"), *have = json_object_get(r->stored, "metadata");
  json_t *md = json_object();
  int changed = 0;
  for (size_t i = 0; metadata_fields[i]; i++) {
    json_t *v = json_object_get(want, metadata_fields[i]);
    if (v && !json_equal(v, json_object_get(have, metadata_fields[i]))) {
      json_object_set(md, metadata_fields[i], v);
      changed = 1;
    }
  }
  if (!changed) {
    json_decref(md);
    next(r);
    return;
  }
  r->next = next;
  lp_env_patch(r->env, LP_KIND_NODECLAIM, lp_obj_name(r->stored), lp_obj_resource_version(r->stored), NULL,
               json_pack("{s:o}", "metadata", md), claim_written, r);
}

static void claim_deleted(const lp_kube_reply *reply, void *ud) {
  lc_run *r = ud;
  if (reply->error && strcmp(reply->error->code, "NotFound") != 0)
    lp_error_keep_first(&r->err, lp_error_new(reply->error->code, "%s", reply->error->message));
  else if (!reply->error)
    lp_counter_inc(r->st->disrupted, LP_LABELS(r->disruption, lc_nodepool(r->stored)));
  finish(r);
}

void lc_delete_claim(lc_run *r, const char *reason) {
  lp_kube_ref ref = claim_ref(r);
  r->disruption = reason;
  r->requeue_s = 0; /* the termination controller takes it from here */
  lp_kube_delete(lp_env_kube(r->env), &ref, lp_obj_resource_version(r->stored), claim_deleted, r);
}

/* ---- liveness and status ------------------------------------------------------------------- */

static void requeue_within(lc_run *r, double seconds) {
  if (r->requeue_s <= 0 || seconds < r->requeue_s) r->requeue_s = seconds;
}

/* Seconds left before condition type, not True since its last transition, times out; +inf when it
 * is True or not set (nothing to time). */
static double time_left(const lc_run *r, const char *type, double timeout_s) {
  if (lp_condition_is(r->claim, type, "True")) return INFINITY;
  double since = lp_condition_since(r->claim, type);
  return since < 0 ? INFINITY : since + timeout_s - r->now;
}

/* Deletes the NodeClaim when launch or registration took too long; otherwise asks to be reconciled
 * again at the deadline. Returns non-zero when it deleted (the reconcile then ends there). */
static int liveness(lc_run *r) {
  const lp_ctrl_settings *s = lp_env_settings(r->env);
  const char *reason = NULL;
  double timeout = 0;
  double launch_left = time_left(r, LC_LAUNCHED, s->launch_timeout_s);
  double register_left = lp_condition_is(r->claim, LC_LAUNCHED, "True")
                             ? time_left(r, LC_REGISTERED, s->registration_timeout_s)
                             : INFINITY;
  if (launch_left <= 0) {
    reason = "launch_timeout";
    timeout = s->launch_timeout_s;
  } else if (register_left <= 0) {
    reason = "registration_timeout";
    timeout = s->registration_timeout_s;
  }
  if (!reason) {
    if (isfinite(launch_left)) requeue_within(r, launch_left);
    if (isfinite(register_left)) requeue_within(r, register_left);
    return 0;
  }
  lp_info(lp_controller_logger(r->c), "terminating due to timeout",
          LPF_STR("nodeclaim", lp_obj_name(r->claim)), LPF_STR("reason", reason),
          LPF_NUM("timeout_s", timeout), LPF_STR("provider_id", lp_obj_str(r->claim, "status.providerID")));
  lp_error_free(r->err); /* the launch error that kept it from Launched no longer matters */
  r->err = NULL;
  lc_delete_claim(r, reason);
  return 1;
}

/* Logs and counts what the write just stored: each condition that became True. */
static void record_transitions(lc_run *r, const json_t *before) {
  const json_t *claim = r->stored;
  const char *log = lp_controller_logger(r->c), *name = lp_obj_name(claim);
  const char *const *pool = LP_LABELS(lc_nodepool(claim));
  if (!lp_condition_is(before, LC_LAUNCHED, "True") && lp_condition_is(claim, LC_LAUNCHED, "True")) {
    lp_counter_inc(r->st->launched, pool);
    lp_info(log, "launched nodeclaim", LPF_STR("nodeclaim", name),
            LPF_STR("provider_id", lp_obj_str(claim, "status.providerID")),
            LPF_STR("instance_type", lp_obj_label(claim, "node.kubernetes.io/instance-type")),
            LPF_STR("zone", lp_obj_label(claim, "topology.kubernetes.io/zone")),
            LPF_STR("capacity_type", lp_obj_label(claim, "karpenter.sh/capacity-type")));
  }
  if (!lp_condition_is(before, LC_REGISTERED, "True") && lp_condition_is(claim, LC_REGISTERED, "True")) {
    lp_counter_inc(r->st->registered, pool);
    lp_counter_inc(r->st->nodes_created, pool);
    lp_info(log, "registered nodeclaim", LPF_STR("nodeclaim", name),
            LPF_STR("node", lp_obj_str(claim, "status.nodeName")),
            LPF_STR("provider_id", lp_obj_str(claim, "status.providerID")));
  }
  if (!lp_condition_is(before, LC_INITIALIZED, "True") && lp_condition_is(claim, LC_INITIALIZED, "True")) {
    lp_counter_inc(r->st->initialized, pool);
    double created = lp_rfc3339_parse(lp_obj_str(claim, "metadata.creationTimestamp") ?: "");
    if (created >= 0) lp_histogram_observe(r->st->startup, pool, fmax(0, r->now - created));
    lp_info(log, "initialized nodeclaim", LPF_STR("nodeclaim", name),
            LPF_STR("node", lp_obj_str(claim, "status.nodeName")));
  }
}

static void status_written(const lp_kube_reply *reply, void *ud) {
  lc_run *r = ud;
  if (claim_gone(r, reply, "writing status")) return;
  json_t *before = json_incref(r->stored);
  if (reply->error) {
    lp_error_keep_first(&r->err, lp_error_new(reply->error->code, "%s", reply->error->message));
  } else {
    json_decref(r->stored);
    r->stored = json_incref(reply->object);
    record_transitions(r, before);
  }
  json_decref(before);
  finish(r);
}

static const char *const ready_dependents[] = {LC_LAUNCHED, LC_REGISTERED, LC_INITIALIZED, NULL};

void lc_node_done(lc_run *r) {
  if (liveness(r)) return;
  lp_condition_rollup_ready(r->claim, ready_dependents, r->now);
  json_t *status = json_object_get(r->claim, "status");
  if (!status || json_equal(status, json_object_get(r->stored, "status"))) {
    finish(r);
    return;
  }
  lp_env_patch(r->env, LP_KIND_NODECLAIM, lp_obj_name(r->stored), lp_obj_resource_version(r->stored),
               "status", json_pack("{s:O}", "status", status), status_written, r);
}

void lc_launch_done(lc_run *r) {
  lc_persist_metadata(r, lc_register);
}

/* ---- reconcile ----------------------------------------------------------------------------- */

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  lc_state *st = lp_controller_state(c);
  json_t *cached = lp_env_get(env, LP_KIND_NODECLAIM, key);
  /* a deleting NodeClaim is the termination controller's to finalize */
  if (!cached || lp_obj_deleting(cached) ||
      !lp_nodeclass_ref_supported(st->nodeclasses, lp_obj_get(cached, "spec.nodeClassRef"))) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  lc_run *r = lp_xcalloc(1, sizeof *r);
  r->c = c;
  r->env = env;
  r->st = st;
  r->key = key;
  r->now = lp_env_wall(env);
  r->stored = json_incref(cached);
  r->claim = json_deep_copy(cached);
  if (!lp_obj_has_finalizer(cached, LC_FINALIZER))
    json_object_set_new(json_object_get(r->claim, "metadata"), "finalizers",
                        lp_obj_finalizers_with(cached, LC_FINALIZER, 1));
  lc_persist_metadata(r, lc_launch);
}

const lp_controller_def lp_nodeclaim_lifecycle_controller = {
    .name = "nodeclaim.lifecycle",
    .primary = LP_KIND_NODECLAIM,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
