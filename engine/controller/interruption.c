/* Spot interruption ("node.interruption"; Karpenter's interruption controller, fed by a Node condition
 * instead of a queue; docs/controllers.md): a spot Node whose instance the cloud announced it will
 * reclaim is replaced before the reclaim.
 *
 * Which Node conditions announce an interruption is the mapping's to say
 * (lp_cloudprovider_interruption_conditions). Per Node (the
 * primary kind) labelled karpenter.sh/capacity-type=spot with one of those conditions True:
 *   1. its NodeClaim is the one whose status.providerID is the Node's spec.providerID, else the one
 *      whose status.nodeName is the Node's name; none: nothing to do;
 *   2. once per NodeClaim and process (its uid, remembered HANDLED_TTL_S on the controllers' clock,
 *      lp_env_monotonic): the offering (the Node's instance type and zone, "spot") is marked
 *      unavailable for the unavailable-offerings TTL so the provisioner does not launch the
 *      replacement into the capacity being reclaimed;
 *   3. once per NodeClaim, across restarts: a Warning event TerminatingOnInterruption is published on
 *      the NodeClaim and on the Node and the interruption counted, unless the NodeClaim carries the
 *      annotation luaprov.io/interrupted, which is then written (=<condition>; a one-way mark, patched
 *      without a resourceVersion precondition) before the NodeClaim is deleted. A restarted engine
 *      over a NodeClaim still draining marks the offering again but announces nothing; a failed patch
 *      is retried with the workqueue's backoff, the memory of step 2 keeping the events from repeating;
 *   4. the NodeClaim is deleted unless it is being deleted already. The termination controller then
 *      taints the Node karpenter.sh/disrupted:NoSchedule and drains it through the Eviction API; the
 *      evicted pods go pending and the provisioner launches their replacement.
 * A failed delete is retried with the workqueue's backoff; the events are not repeated for it.
 *
 * Metrics (lp_env_metrics):
 *   luaprov_interruptions_total{reason}      counter, reason = the condition type, per NodeClaim handled
 *   luaprov_nodeclaims_disrupted_total{reason, nodepool}
 *                                            counter, reason "interrupted" (shared family)
 * Events: TerminatingOnInterruption (Warning) on the NodeClaim and the Node.
 * Logs (logger controller.node.interruption): info "terminating on interruption" (node, nodeclaim,
 * nodepool, condition, instance_type, zone, message). */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "core/log.h"

#define LABEL_CAPACITY_TYPE "karpenter.sh/capacity-type"
#define LABEL_NODEPOOL      "karpenter.sh/nodepool"
#define LABEL_INSTANCE_TYPE "node.kubernetes.io/instance-type"
#define LABEL_ZONE          "topology.kubernetes.io/zone"
#define REASON              "TerminatingOnInterruption"
#define ANNOTATION_HANDLED  "luaprov.io/interrupted"

/* Longer than any notice a cloud gives: a NodeClaim still around after that is looked at afresh. */
#define HANDLED_TTL_S 3600.0

typedef struct interruption_state {
  json_t *handled; /* NodeClaim uid -> lp_env_monotonic when its offering was marked (and announced) */
  lp_metric *interruptions, *disrupted;
} interruption_state;

/* The first of the mapping's interruption conditions that is True on node, or NULL. */
static const char *interrupted_by(const json_t *node, const json_t *types) {
  size_t i;
  const json_t *t;
  json_array_foreach(types, i, t) {
    const char *type = json_string_value(t);
    if (type && lp_condition_is(node, type, "True")) return type;
  }
  return NULL;
}

typedef struct by_node_name {
  const char *name;
  json_t *claim;
} by_node_name;

static void match_node_name(const char *key, json_t *claim, void *ud) {
  (void)key;
  by_node_name *m = ud;
  const char *name = lp_obj_str(claim, "status.nodeName");
  if (!m->claim && name && strcmp(name, m->name) == 0) m->claim = claim;
}

static json_t *claim_of(lp_ctrl_env *env, const json_t *node) {
  const char *pid = lp_obj_str(node, "spec.providerID");
  json_t *claim = pid && *pid ? lp_env_index_first(env, LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, NULL) : NULL;
  if (claim) return claim;
  by_node_name m = {lp_obj_name(node), NULL};
  lp_env_each(env, LP_KIND_NODECLAIM, match_node_name, &m);
  return m.claim;
}

/* A label of the Node, else of its NodeClaim. */
static const char *label_of(const json_t *node, const json_t *claim, const char *key) {
  const char *v = lp_obj_label(node, key);
  return v ? v : lp_obj_label(claim, key);
}

typedef struct claim_op {
  lp_controller *c;
  const char *key;
  char *claim;
  int deleting; /* the NodeClaim was being deleted already */
} claim_op;

static void op_end(claim_op *op, lp_error *err) {
  lp_controller_done(op->c, op->key, err, 0);
  free(op->claim);
  free(op);
}

static void claim_deleted(const lp_kube_reply *reply, void *ud) {
  claim_op *op = ud;
  lp_error *err = NULL;
  if (reply->error && reply->status != 404) /* 404: gone meanwhile, which is what we wanted */
    err = lp_error_new(reply->error->code, "deleting interrupted nodeclaim %s of node %s: %s", op->claim,
                       op->key, reply->error->message);
  op_end(op, err);
}

static void delete_claim(claim_op *op) {
  char *buf = lp_xmalloc(strlen(op->claim) + 1);
  lp_kube_ref ref = lp_kind_ref_for(LP_KIND_NODECLAIM, op->claim, buf);
  lp_kube_delete(lp_env_kube(lp_controller_env(op->c)), &ref, NULL, claim_deleted, op);
  free(buf);
}

static void annotated(const lp_kube_reply *reply, void *ud) {
  claim_op *op = ud;
  if (reply->error && reply->status != 404) {
    op_end(op, lp_error_new(reply->error->code, "annotating interrupted nodeclaim %s of node %s: %s",
                            op->claim, op->key, reply->error->message));
    return;
  }
  if (reply->error || op->deleting) /* 404: gone meanwhile */
    op_end(op, NULL);
  else
    delete_claim(op);
}

/* Non-zero when the NodeClaim of uid was handled less than HANDLED_TTL_S ago; otherwise remembers it
 * as handled now, forgetting what is older than that. */
static int handled_before(interruption_state *st, lp_ctrl_env *env, const char *uid) {
  double now = lp_env_monotonic(env);
  json_t *at = json_object_get(st->handled, uid);
  if (at && now - json_real_value(at) < HANDLED_TTL_S) return 1;
  const char *k;
  json_t *v;
  void *tmp;
  json_object_foreach_safe(st->handled, tmp, k, v) {
    if (now - json_real_value(v) >= HANDLED_TTL_S) json_object_del(st->handled, k);
  }
  json_object_set_new(st->handled, uid, json_real(now));
  return 0;
}

/* Marks the offering unavailable; unless stored (the NodeClaim's annotation says a process announced it
 * already) also publishes the events and counts. */
static void announce(lp_controller *c, const json_t *node, const json_t *claim, const char *condition,
                     int stored) {
  lp_ctrl_env *env = lp_controller_env(c);
  interruption_state *st = lp_controller_state(c);
  const char *type = label_of(node, claim, LABEL_INSTANCE_TYPE);
  const char *zone = label_of(node, claim, LABEL_ZONE);
  const char *pool = label_of(node, claim, LABEL_NODEPOOL);
  const json_t *cond = lp_condition_get(node, condition);
  const char *message = json_string_value(json_object_get(cond, "message"));
  if (type && zone) lp_cp_mark_unavailable(lp_env_cloud(env), type, zone, "spot", condition);
  if (stored) return;
  lp_info(lp_controller_logger(c), "terminating on interruption", LPF_STR("node", lp_obj_name(node)),
          LPF_STR("nodeclaim", lp_obj_name(claim)), LPF_STR("nodepool", pool ? pool : ""),
          LPF_STR("condition", condition), LPF_STR("instance_type", type ? type : ""),
          LPF_STR("zone", zone ? zone : ""), LPF_STR("message", message ? message : ""));
  static const char fmt[] = "Interruption announced by node condition %s%s%s; terminating NodeClaim %s";
  const char *sep = message && *message ? ": " : "";
  lp_env_event(env, claim, "Warning", REASON, fmt, condition, sep, message ? message : "",
               lp_obj_name(claim));
  lp_env_event(env, node, "Warning", REASON, fmt, condition, sep, message ? message : "", lp_obj_name(claim));
  lp_counter_inc(st->interruptions, LP_LABELS(condition));
  if (!lp_obj_deleting(claim)) lp_counter_inc(st->disrupted, LP_LABELS("interrupted", pool ? pool : ""));
}

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  interruption_state *st = lp_controller_state(c);
  json_t *node = lp_env_get(env, LP_KIND_NODE, key);
  const char *capacity = node ? lp_obj_label(node, LABEL_CAPACITY_TYPE) : NULL;
  if (!capacity || strcmp(capacity, "spot") != 0) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  json_t *types = lp_cloudprovider_interruption_conditions(lp_env_cloud(env));
  const char *condition = interrupted_by(node, types);
  json_t *claim = condition ? claim_of(env, node) : NULL;
  if (!claim) {
    json_decref(types);
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  const char *uid = lp_obj_uid(claim) ? lp_obj_uid(claim) : lp_obj_name(claim);
  int stored = lp_obj_annotation(claim, ANNOTATION_HANDLED) != NULL;
  if (!handled_before(st, env, uid)) announce(c, node, claim, condition, stored);
  claim_op *op = lp_xcalloc(1, sizeof *op);
  op->c = c;
  op->key = key;
  op->claim = lp_xstrdup(lp_obj_name(claim));
  op->deleting = lp_obj_deleting(claim);
  if (!stored)
    lp_env_annotate(env, LP_KIND_NODECLAIM, op->claim, ANNOTATION_HANDLED, condition, annotated, op);
  else if (!op->deleting)
    delete_claim(op);
  else
    op_end(op, NULL);
  json_decref(types);
}

static void *state_new(lp_controller *c) {
  lp_metrics *m = lp_env_metrics(lp_controller_env(c));
  interruption_state *st = lp_xcalloc(1, sizeof *st);
  st->handled = json_object();
  st->interruptions =
      lp_metrics_counter(m, "luaprov_interruptions_total",
                         "Interrupted NodeClaims terminated ahead of the reclaim, by the Node condition that "
                         "announced it.",
                         LP_LABELS("reason"));
  st->disrupted = lp_metrics_counter(m, "luaprov_nodeclaims_disrupted_total",
                                     "NodeClaims deleted by the engine, by reason and NodePool.",
                                     LP_LABELS("reason", "nodepool"));
  return st;
}

static void state_free(void *state) {
  interruption_state *st = state;
  json_decref(st->handled);
  free(st);
}

const lp_controller_def lp_interruption_controller = {
    .name = "node.interruption",
    .primary = LP_KIND_NODE,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
