/* The Consolidatable marker ("nodeclaim.consolidatable"; Karpenter's pod-events and consolidatable
 * controllers; docs/controllers.md#consolidatable-nodeclaimconsolidatable): keeps each NodeClaim's
 * status.lastPodEventTime and its Consolidatable condition, which the disruption controller's emptiness
 * and consolidation methods require. A node is worth consolidating only once its pods have settled:
 * consolidateAfter is how long nothing may have happened to them.
 *
 * Pod events: a pod bound to the NodeClaim's node (spec.nodeName set), a pod on it that finished
 * (phase Succeeded or Failed) or that is deleted. The time of the latest is written to the NodeClaim's
 * status.lastPodEventTime, at most once per POD_EVENT_WRITE_S per NodeClaim (a Deployment rolling
 * 50 pods costs a few writes, not 50). A pod already bound when the cache first shows it is not an event
 * (the cache replays every pod at start: a restart must not reset every node's consolidateAfter).
 *
 * Per NodeClaim (the primary kind) that is not being deleted, of a cached NodePool (label
 * karpenter.sh/nodepool) whose spec.disruption.consolidateAfter is a duration (absent counts as the
 * CRD's default 0s; "Never" turns consolidation off) and not a static NodePool (spec.replicas):
 *   Consolidatable=True once Initialized=True and now >= max(lastPodEventTime, the Initialized
 *   condition's lastTransitionTime) + consolidateAfter; before that, the condition is removed and the
 *   NodeClaim requeued for the moment it becomes true. Otherwise (not initialized, Never, no NodePool)
 *   the condition is removed. Wall time is the controllers' (lp_env_wall), so tests move it.
 * A NodePool whose disruption settings change enqueues its NodeClaims.
 *
 * Logs (logger controller.nodeclaim.consolidatable, debug): "marking consolidatable" (nodeclaim,
 * nodepool), "removing consolidatable status condition" (nodeclaim, nodepool, why). A failed write is
 * the framework's "reconcile failed, will retry". */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "core/clock.h"
#include "core/log.h"

#define CONDITION      "Consolidatable"
#define LABEL_NODEPOOL "karpenter.sh/nodepool"
/* Karpenter's pod-events controller writes at most this often per NodeClaim. */
#define POD_EVENT_WRITE_S 5.0

typedef struct marker_state {
  json_t *pod_events; /* NodeClaim name -> wall time of its latest pod event not written yet */
} marker_state;

static void *state_new(lp_controller *c) {
  (void)c;
  marker_state *st = lp_xcalloc(1, sizeof *st);
  st->pod_events = json_object();
  return st;
}

static void state_free(void *state) {
  marker_state *st = state;
  json_decref(st->pod_events);
  free(st);
}

/* ---- watches ------------------------------------------------------------------------------- */

static int terminal(const json_t *pod) {
  const char *phase = lp_obj_str(pod, "status.phase");
  return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

static const char *node_of(const json_t *pod) {
  const char *name = pod ? lp_obj_str(pod, "spec.nodeName") : NULL;
  return name && *name ? name : NULL;
}

/* The node whose pods changed in a way that counts as a pod event, or NULL. */
static const char *pod_event_node(const json_t *old_pod, const json_t *new_pod) {
  if (!old_pod) return NULL; /* first seen: a replay at start, or a pod not bound yet */
  const char *was = node_of(old_pod), *is = node_of(new_pod);
  if (!was && is) return is;                                  /* bound */
  if (was && !new_pod) return terminal(old_pod) ? NULL : was; /* deleted (a finished one counted already) */
  if (was && !terminal(old_pod) && terminal(new_pod)) return was; /* finished */
  return NULL;
}

static void note_pod_event(lp_controller *c, const char *node_name) {
  lp_ctrl_env *env = lp_controller_env(c);
  const char *pid = lp_obj_str(lp_env_get(env, LP_KIND_NODE, node_name), "spec.providerID");
  json_t *claim = pid && *pid ? lp_env_index_first(env, LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, NULL) : NULL;
  const char *name = lp_obj_name(claim);
  if (!name) return;
  marker_state *st = lp_controller_state(c);
  json_object_set_new(st->pod_events, name, json_real(lp_env_wall(env)));
  lp_controller_enqueue(c, name);
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  if (kind == LP_KIND_POD) {
    const char *node = pod_event_node(old_obj, new_obj);
    if (node) note_pod_event(c, node);
  } else if (kind == LP_KIND_NODEPOOL) {
    const json_t *obj = new_obj ? new_obj : old_obj;
    if (old_obj && new_obj &&
        json_equal(lp_obj_get(old_obj, "spec.disruption"), lp_obj_get(new_obj, "spec.disruption")) &&
        json_equal(lp_obj_get(old_obj, "spec.replicas"), lp_obj_get(new_obj, "spec.replicas")))
      return;
    lp_controller_enqueue_pool_claims(c, lp_obj_name(obj));
  } else if (kind == LP_KIND_NODECLAIM && !new_obj && lp_obj_name(old_obj)) {
    json_object_del(((marker_state *)lp_controller_state(c))->pod_events, lp_obj_name(old_obj));
  }
}

/* ---- reconcile ----------------------------------------------------------------------------- */

/* consolidateAfter of the claim's NodePool in seconds; < 0 when consolidation is off for it (why set). */
static double consolidate_after(lp_ctrl_env *env, const json_t *claim, const char **why) {
  const char *pool = lp_obj_label(claim, LABEL_NODEPOOL);
  json_t *nodepool = pool ? lp_env_get(env, LP_KIND_NODEPOOL, pool) : NULL;
  if (!nodepool) return *why = "its NodePool is not known", -1;
  if (lp_obj_get(nodepool, "spec.replicas")) return *why = "its NodePool is static", -1;
  const char *after = lp_obj_str(nodepool, "spec.disruption.consolidateAfter");
  if (!after) return 0; /* the CRD's default */
  if (strcmp(after, "Never") == 0) return *why = "consolidateAfter is Never", -1;
  double s = lp_duration_parse(after);
  if (s < 0) *why = "consolidateAfter is not a duration";
  return s;
}

typedef struct mark_op {
  lp_controller *c;
  const char *key;
  double written; /* the pod event time written, or < 0 */
  double requeue_s;
} mark_op;

static void status_written(const lp_kube_reply *reply, void *ud) {
  mark_op *op = ud;
  lp_error *err = NULL;
  if (lp_controller_gone(op->c, op->key, reply, "updating the Consolidatable condition")) {
    op->requeue_s = 0;
  } else if (reply->error) {
    err = lp_error_new(reply->error->code, "consolidatable: updating the status of nodeclaim %s: %s", op->key,
                       reply->error->message);
  } else if (op->written >= 0) {
    marker_state *st = lp_controller_state(op->c);
    json_t *pending = json_object_get(st->pod_events, op->key);
    /* a later event may have come while the write was on its way: that one is written next time */
    if (pending && json_real_value(pending) <= op->written) json_object_del(st->pod_events, op->key);
  }
  lp_controller_done(op->c, op->key, err, err ? 0 : op->requeue_s);
  free(op);
}

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  marker_state *st = lp_controller_state(c);
  json_t *claim = lp_env_get(env, LP_KIND_NODECLAIM, key);
  if (!claim || lp_obj_deleting(claim)) {
    json_object_del(st->pod_events, key);
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  double now = lp_env_wall(env);
  json_t *want = json_deep_copy(claim);
  json_t *status = json_object_get(want, "status");
  double stored = lp_rfc3339_parse(lp_obj_str(claim, "status.lastPodEventTime"));
  json_t *pending = json_object_get(st->pod_events, key);
  double event = stored, written = -1, requeue = 0;
  if (pending) {
    double at = json_real_value(pending);
    if (at > event) event = at;
    if (stored < 0 || at - stored >= POD_EVENT_WRITE_S) {
      char ts[LP_RFC3339_SIZE];
      lp_clock_rfc3339(at, 0, ts);
      if (!status) json_object_set_new(want, "status", status = json_object());
      json_object_set_new(status, "lastPodEventTime", json_string(ts));
      written = at;
    } else {
      json_object_del(st->pod_events, key); /* within the write interval of the stored one */
    }
  }
  const char *why = NULL;
  double after = consolidate_after(env, claim, &why);
  int changed = written >= 0;
  if (after >= 0 && !lp_condition_is(claim, "Initialized", "True")) why = "not initialized";
  if (!why) {
    double since = lp_condition_since(claim, "Initialized");
    if (event > since) since = event;
    double left = since + after - now;
    if (left <= 0)
      changed |= lp_condition_set(want, CONDITION, "True", NULL, NULL, now);
    else {
      changed |= lp_condition_clear(want, CONDITION);
      requeue = left;
      why = "consolidateAfter has not passed since the last pod event";
    }
  } else {
    changed |= lp_condition_clear(want, CONDITION);
  }
  if (!changed) {
    json_decref(want);
    lp_controller_done(c, key, NULL, requeue);
    return;
  }
  const char *pool = lp_obj_label(claim, LABEL_NODEPOOL);
  if (lp_condition_is(want, CONDITION, "True") && !lp_condition_is(claim, CONDITION, "True"))
    lp_debug(lp_controller_logger(c), "marking consolidatable", LPF_STR("nodeclaim", key),
             LPF_STR("nodepool", pool));
  else if (lp_condition_get(claim, CONDITION) && !lp_condition_get(want, CONDITION))
    lp_debug(lp_controller_logger(c), "removing consolidatable status condition", LPF_STR("nodeclaim", key),
             LPF_STR("nodepool", pool), LPF_STR("why", why));
  mark_op *op = lp_xcalloc(1, sizeof *op);
  op->c = c;
  op->key = key;
  op->written = written;
  op->requeue_s = requeue;
  status = json_object_get(want, "status");
  json_t *conditions = json_object_get(status, "conditions");
  json_t *patch_status = json_object();
  json_object_set_new(patch_status, "conditions", conditions ? json_incref(conditions) : json_array());
  if (written >= 0)
    json_object_set(patch_status, "lastPodEventTime", json_object_get(status, "lastPodEventTime"));
  lp_env_patch(env, LP_KIND_NODECLAIM, key, lp_obj_resource_version(claim), "status",
               json_pack("{s:o}", "status", patch_status), status_written, op);
  json_decref(want);
}

const lp_controller_def lp_consolidatable_controller = {
    .name = "nodeclaim.consolidatable",
    .primary = LP_KIND_NODECLAIM,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
