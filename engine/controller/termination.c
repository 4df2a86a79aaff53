/* The termination controller: finalizes deleting NodeClaims as Karpenter's NodeClaim lifecycle
 * finalizer and Node termination controller do together (docs/controllers.md).
 *
 * For a NodeClaim being deleted that still has the karpenter.sh/termination finalizer, in order:
 *   1. deadline: with spec.terminationGracePeriod, stamp karpenter.sh/nodeclaim-termination-timestamp
 *      (deletionTimestamp + the period) once, event TerminationGracePeriodExpiring; an existing stamp
 *      (the repair controller may set one) is the deadline;
 *   2. cordon and drain its Nodes (termination_drain.c): Drained=Unknown/Draining while pods remain
 *      (requeue drain_requeue_s, or when the earliest eviction a PDB refused may be tried again),
 *      Drained=True when none do;
 *   3. CloudProvider Delete while status.providerID is set: triggered -> InstanceTerminating=True and
 *      requeue terminate_requeue_s; NodeClaimNotFound -> the instance is gone, go on;
 *   4. remove the Nodes' finalizer and delete them ("deleted node");
 *   5. remove the NodeClaim's finalizer ("deleted nodeclaim").
 * Each step's writes carry the resourceVersion of the object they change; a 409 is returned to the
 * framework, which retries after backoff once the cache caught up. A 404 on the NodeClaim means it was
 * finalized meanwhile (a pass that acted on a cache still showing it): the reconcile ends as a success.
 *
 * A Node deleted by a user (kubectl delete node) while its NodeClaim is not deleting makes this
 * controller delete the NodeClaim, so the sequence above runs. A deleting Node with the finalizer and
 * no NodeClaim at all is reconciled under the key "node/<name>" (NodeClaim names have no '/', so the
 * prefix cannot collide): its finalizer is removed.
 *
 * Changes that wake a NodeClaim besides its own: a change of a Node with its providerID, and a change
 * or deletion of a pod on such a Node while the NodeClaim is deleting (drains advance as pods leave,
 * not only at the requeue).
 *
 * Metrics (lp_env_metrics):
 *   luaprov_pods_evictions_total{result}   counter, result = evicted | blocked (a PDB refused, 429) |
 *                                          deleted (past the deadline) | gone (404) | error
 *   luaprov_nodes_terminated_total{nodepool}              counter, Nodes whose finalizer was removed
 *   luaprov_nodeclaims_terminated_total{nodepool}         counter, NodeClaims whose finalizer was removed
 *   luaprov_nodeclaims_termination_duration_seconds{nodepool}
 *                                          histogram, deletionTimestamp -> finalizer removed
 * Events: TerminationGracePeriodExpiring (Normal), FailedDraining (Warning, at most once a minute per
 * NodeClaim), Evicted (Normal, on the pod). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/termination_internal.h"
#include "core/clock.h"
#include "core/log.h"

#define NODE_KEY_PREFIX "node/"

static const double duration_buckets[] = {1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400};

/* ---- the step machinery --------------------------------------------------------------------- */

static term_op *op_new(lp_controller *c, const char *key, const json_t *claim) {
  term_op *op = lp_xcalloc(1, sizeof *op);
  op->c = c;
  op->env = lp_controller_env(c);
  op->st = lp_controller_state(c);
  op->key = key;
  op->log = lp_controller_logger(c);
  op->claim = claim ? json_deep_copy(claim) : NULL;
  op->nodes = json_array();
  op->now = lp_env_wall(op->env);
  op->deadline = -1;
  op->retry_in = INFINITY;
  return op;
}

void term_batch_open(term_op *op, term_step_fn next) {
  op->pending = 1;
  op->next = next;
}

void term_batch_add(term_op *op) {
  op->pending++;
}

void term_batch_end(term_op *op) {
  if (--op->pending == 0) op->next(op);
}

void term_finish(term_op *op, lp_error *err, double requeue_s) {
  lp_error_keep_first(&op->err, err);
  lp_controller_done(op->c, op->key, op->err, op->err ? 0 : requeue_s);
  json_decref(op->claim);
  json_decref(op->nodes);
  json_decref(op->backoff);
  free(op->blocked);
  free(op);
}

const char *term_nodepool(const json_t *obj) {
  const char *pool = lp_obj_label(obj, TERM_LABEL_NODEPOOL);
  return pool ? pool : "";
}

static lp_kube_ref claim_ref(const term_op *op) {
  lp_kube_ref ref = *lp_kind_ref(LP_KIND_NODECLAIM);
  ref.name = op->key;
  return ref;
}

/* A merge patch (stolen) of the claim's metadata (or status) carrying its resourceVersion. */
static void patch_claim(term_op *op, const char *subresource, json_t *patch, lp_kube_done_fn done) {
  lp_env_patch(op->env, LP_KIND_NODECLAIM, op->key, lp_obj_resource_version(op->claim), subresource, patch,
               done, op);
}

/* Drops what the controller remembers of the NodeClaim at key (finalized, or gone). */
static void forget(term_state *st, const char *key) {
  json_object_del(st->last_failed_draining, key);
  json_object_del(st->evict_backoff, key);
}

/* Keeps the answer of a write to the claim as op->claim; 0 after ending the reconcile: on an error, or
 * without one when the claim is gone (404: finalized meanwhile, by this reconcile's previous pass or
 * by someone else, so nothing is left to do). */
static int take_claim(term_op *op, const lp_kube_reply *reply, const char *action) {
  if (lp_controller_gone(op->c, op->key, reply, action)) {
    forget(op->st, op->key);
    term_finish(op, NULL, 0);
    return 0;
  }
  if (reply->error) {
    term_finish(
        op,
        lp_error_new(reply->error->code, "%s of nodeclaim %s: %s", action, op->key, reply->error->message),
        0);
    return 0;
  }
  json_decref(op->claim);
  op->claim = json_incref(reply->object);
  return 1;
}

static void condition_written(const lp_kube_reply *reply, void *ud) {
  term_op *op = ud;
  if (take_claim(op, reply, "updating status")) op->next(op);
}

void term_set_condition(term_op *op, const char *type, const char *status, const char *reason,
                        const char *message, term_step_fn next) {
  if (!lp_condition_set(op->claim, type, status, reason, message, op->now)) {
    next(op);
    return;
  }
  op->next = next;
  json_t *conditions = json_object_get(json_object_get(op->claim, "status"), "conditions");
  patch_claim(op, "status", json_pack("{s:{s:O}}", "status", "conditions", conditions), condition_written);
}

/* ---- 5. the NodeClaim's finalizer --------------------------------------------------------------- */

static void released(const lp_kube_reply *reply, void *ud) {
  term_op *op = ud;
  if (!take_claim(op, reply, "removing the finalizer")) return;
  const char *pool = term_nodepool(op->claim);
  double since = lp_rfc3339_parse(lp_obj_str(op->claim, "metadata.deletionTimestamp"));
  double took = since > 0 ? lp_env_wall(op->env) - since : 0;
  if (took < 0) took = 0; /* the API server's clock ahead of ours */
  lp_info(op->log, "deleted nodeclaim", LPF_STR("nodeclaim", op->key),
          LPF_STR("provider_id", lp_obj_str(op->claim, "status.providerID")), LPF_NUM("duration_s", took));
  lp_counter_inc(op->st->claims_terminated, LP_LABELS(pool));
  lp_histogram_observe(op->st->claim_duration, LP_LABELS(pool), took);
  forget(op->st, op->key);
  term_finish(op, NULL, 0);
}

static void release_claim(term_op *op) {
  if (op->err) {
    term_finish(op, NULL, 0);
    return;
  }
  json_t *finalizers = lp_obj_finalizers_with(op->claim, TERM_FINALIZER, 0);
  patch_claim(op, NULL, json_pack("{s:{s:o}}", "metadata", "finalizers", finalizers), released);
}

/* ---- 4. the Nodes ---------------------------------------------------------------------------- */

typedef struct node_call {
  term_op *op;
  json_t *node; /* reference */
} node_call;

static void node_call_end(node_call *nc) {
  term_op *op = nc->op;
  json_decref(nc->node);
  free(nc);
  term_batch_end(op);
}

static void node_deleted(const lp_kube_reply *reply, void *ud) {
  node_call *nc = ud;
  term_op *op = nc->op;
  if (reply->error && reply->status != 404) {
    lp_error_keep_first(&op->err, lp_error_new(reply->error->code, "deleting node %s: %s",
                                               lp_obj_name(nc->node), reply->error->message));
  } else {
    lp_info(op->log, "deleted node", LPF_STR("nodeclaim", op->claim ? op->key : NULL),
            LPF_STR("node", lp_obj_name(nc->node)),
            LPF_STR("provider_id", lp_obj_str(nc->node, "spec.providerID")));
    lp_counter_inc(op->st->nodes_terminated, LP_LABELS(term_nodepool(op->claim ? op->claim : nc->node)));
  }
  node_call_end(nc);
}

static void delete_node(node_call *nc) {
  lp_kube_ref ref = *lp_kind_ref(LP_KIND_NODE);
  ref.name = lp_obj_name(nc->node);
  lp_kube_delete(lp_env_kube(nc->op->env), &ref, NULL, node_deleted, nc);
}

static void node_released(const lp_kube_reply *reply, void *ud) {
  node_call *nc = ud;
  if (reply->error && reply->status != 404) {
    lp_error_keep_first(&nc->op->err,
                        lp_error_new(reply->error->code, "removing the finalizer of node %s: %s",
                                     lp_obj_name(nc->node), reply->error->message));
    node_call_end(nc);
    return;
  }
  delete_node(nc); /* a deleting Node is gone already without its finalizer (404 then); others go now */
}

/* Removes the termination finalizer from every Node of op and deletes them, then runs next. */
static void delete_nodes(term_op *op, term_step_fn next) {
  term_batch_open(op, next);
  size_t i;
  json_t *node;
  json_array_foreach(op->nodes, i, node) {
    node_call *nc = lp_xcalloc(1, sizeof *nc);
    nc->op = op;
    nc->node = json_incref(node);
    term_batch_add(op);
    if (!lp_obj_has_finalizer(node, TERM_FINALIZER)) {
      delete_node(nc);
      continue;
    }
    lp_env_patch(
        op->env, LP_KIND_NODE, lp_obj_name(node), lp_obj_resource_version(node), NULL,
        json_pack("{s:{s:o}}", "metadata", "finalizers", lp_obj_finalizers_with(node, TERM_FINALIZER, 0)),
        node_released, nc);
  }
  term_batch_end(op);
}

/* ---- 3. the instance ------------------------------------------------------------------------- */

static void requeue_terminating(term_op *op) {
  term_finish(op, NULL, lp_env_settings(op->env)->terminate_requeue_s);
}

static void instance_deleted(json_t *value, lp_error *err, void *ud) {
  term_op *op = ud;
  json_decref(value);
  if (!err) {
    lp_debug(op->log, "instance termination triggered", LPF_STR("nodeclaim", op->key),
             LPF_STR("provider_id", lp_obj_str(op->claim, "status.providerID")));
    term_set_condition(op, "InstanceTerminating", "True", NULL, NULL, requeue_terminating);
  } else if (strcmp(err->code, "NodeClaimNotFound") == 0) {
    lp_error_free(err);
    delete_nodes(op, release_claim);
  } else {
    term_finish(op,
                lp_error_new(err->code, "deleting the instance of nodeclaim %s (%s): %s", op->key,
                             lp_obj_str(op->claim, "status.providerID"), err->message),
                0);
    lp_error_free(err);
  }
}

static void terminate_instance(term_op *op) {
  const char *pid = lp_obj_str(op->claim, "status.providerID");
  if (!pid || !*pid) { /* never launched: no instance to delete, and no Node can carry its providerID */
    delete_nodes(op, release_claim);
    return;
  }
  lp_cp_delete(lp_env_cloud(op->env), op->claim, instance_deleted, op);
}

/* ---- 1-2. deadline, then drain --------------------------------------------------------------- */

static void collect_node(const char *key, json_t *node, void *ud) {
  (void)key;
  json_array_append(ud, node);
}

static void drain(term_op *op) {
  const char *pid = lp_obj_str(op->claim, "status.providerID");
  if (pid && *pid) lp_env_index_each(op->env, LP_INDEX_NODE_BY_PROVIDER_ID, pid, collect_node, op->nodes);
  term_drain(op, terminate_instance);
}

static void deadline_stamped(const lp_kube_reply *reply, void *ud) {
  term_op *op = ud;
  if (!take_claim(op, reply, "annotating the termination deadline")) return;
  const char *stamp = lp_obj_annotation(op->claim, TERM_ANNOTATION_DEADLINE);
  lp_info(op->log, "annotated nodeclaim", LPF_STR("nodeclaim", op->key), LPF_STR("deadline", stamp));
  lp_env_event(op->env, op->claim, "Normal", "TerminationGracePeriodExpiring",
               "All pods will be deleted by %s", stamp ? stamp : "?");
  drain(op);
}

static void find_deadline(term_op *op) {
  const char *stamp = lp_obj_annotation(op->claim, TERM_ANNOTATION_DEADLINE);
  const char *grace = lp_obj_str(op->claim, "spec.terminationGracePeriod");
  if (stamp) {
    op->deadline = lp_rfc3339_parse(stamp);
    if (op->deadline < 0)
      lp_warn(op->log, "ignoring an unparsable termination deadline", LPF_STR("nodeclaim", op->key),
              LPF_STR("deadline", stamp));
    drain(op);
    return;
  }
  double seconds = lp_duration_parse(grace);
  double deleted = lp_rfc3339_parse(lp_obj_str(op->claim, "metadata.deletionTimestamp"));
  if (!grace || seconds < 0 || deleted < 0) {
    if (grace && seconds < 0)
      lp_warn(op->log, "ignoring an unparsable terminationGracePeriod", LPF_STR("nodeclaim", op->key),
              LPF_STR("terminationGracePeriod", grace));
    drain(op);
    return;
  }
  op->deadline = deleted + seconds;
  char when[LP_RFC3339_SIZE];
  lp_clock_rfc3339(op->deadline, 0, when);
  patch_claim(op, NULL, json_pack("{s:{s:{s:s}}}", "metadata", "annotations", TERM_ANNOTATION_DEADLINE, when),
              deadline_stamped);
}

/* ---- Nodes deleted by users ----------------------------------------------------------------- */

static void claim_deleted(const lp_kube_reply *reply, void *ud) {
  term_op *op = ud;
  if (reply->error && reply->status != 404)
    lp_error_keep_first(&op->err, lp_error_new(reply->error->code, "deleting nodeclaim %s: %s", op->key,
                                               reply->error->message));
  term_finish(op, NULL, 0);
}

static void find_deleting_node(const char *key, json_t *node, void *ud) {
  (void)key;
  if (lp_obj_deleting(node) && !*(const json_t **)ud) *(const json_t **)ud = node;
}

/* A NodeClaim not being deleted: delete it when one of its Nodes is (the user deleted the Node). */
static void follow_node(lp_controller *c, const char *key, const json_t *claim) {
  const char *pid = lp_obj_str(claim, "status.providerID");
  const json_t *node = NULL;
  if (pid && *pid)
    lp_env_index_each(lp_controller_env(c), LP_INDEX_NODE_BY_PROVIDER_ID, pid, find_deleting_node, &node);
  if (!node) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  term_op *op = op_new(c, key, claim);
  lp_info(op->log, "deleting nodeclaim, its node is being deleted", LPF_STR("nodeclaim", key),
          LPF_STR("node", lp_obj_name(node)), LPF_STR("provider_id", pid));
  lp_kube_ref ref = claim_ref(op);
  lp_kube_delete(lp_env_kube(op->env), &ref, lp_obj_resource_version(claim), claim_deleted, op);
}

static void finish_ok(term_op *op) {
  term_finish(op, NULL, 0);
}

/* key "node/<name>": a deleting Node with the finalizer whose NodeClaim does not exist. */
static void release_orphan_node(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  json_t *node = lp_env_get(env, LP_KIND_NODE, key + strlen(NODE_KEY_PREFIX));
  const char *pid = node ? lp_obj_str(node, "spec.providerID") : NULL;
  size_t claims = 0;
  if (pid && *pid) lp_env_index_first(env, LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, &claims);
  if (!node || !lp_obj_deleting(node) || !lp_obj_has_finalizer(node, TERM_FINALIZER) || claims > 0) {
    lp_controller_done(c, key, NULL, 0); /* gone, not ours, or its NodeClaim's reconcile handles it */
    return;
  }
  term_op *op = op_new(c, key, NULL);
  json_array_append(op->nodes, node);
  delete_nodes(op, finish_ok);
}

/* ---- the controller ------------------------------------------------------------------------- */

static void reconcile(lp_controller *c, const char *key) {
  if (strncmp(key, NODE_KEY_PREFIX, strlen(NODE_KEY_PREFIX)) == 0) {
    release_orphan_node(c, key);
    return;
  }
  json_t *claim = lp_env_get(lp_controller_env(c), LP_KIND_NODECLAIM, key);
  if (!claim) {
    forget(lp_controller_state(c), key);
    lp_controller_done(c, key, NULL, 0);
  } else if (!lp_obj_deleting(claim)) {
    follow_node(c, key, claim);
  } else if (!lp_obj_has_finalizer(claim, TERM_FINALIZER)) {
    lp_controller_done(c, key, NULL, 0);
  } else {
    find_deadline(op_new(c, key, claim));
  }
}

typedef struct wake {
  lp_controller *c;
  int all; /* enqueue claims that are not deleting too */
} wake;

static void wake_claim(const char *key, json_t *claim, void *ud) {
  wake *w = ud;
  if (w->all || lp_obj_deleting(claim)) lp_controller_enqueue(w->c, key);
}

/* Enqueues the NodeClaims with provider_id (only deleting ones unless all); returns how many exist. */
static size_t wake_claims(lp_controller *c, const char *provider_id, int all) {
  if (!provider_id || !*provider_id) return 0;
  wake w = {c, all};
  return lp_env_index_each(lp_controller_env(c), LP_INDEX_NODECLAIM_BY_PROVIDER_ID, provider_id, wake_claim,
                           &w);
}

static void on_change(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  const json_t *obj = new_obj ? new_obj : old_obj;
  if (kind == LP_KIND_NODE) {
    int going = !new_obj || lp_obj_deleting(new_obj);
    size_t claims = wake_claims(c, lp_obj_str(obj, "spec.providerID"), going);
    if (claims == 0 && new_obj && lp_obj_deleting(new_obj) && lp_obj_has_finalizer(new_obj, TERM_FINALIZER)) {
      char *key = lp_xasprintf(NODE_KEY_PREFIX "%s", lp_obj_name(new_obj));
      lp_controller_enqueue(c, key);
      free(key);
    }
  } else if (kind == LP_KIND_POD) {
    const char *node_name = lp_obj_str(obj, "spec.nodeName");
    json_t *node = node_name ? lp_env_get(lp_controller_env(c), LP_KIND_NODE, node_name) : NULL;
    if (node) wake_claims(c, lp_obj_str(node, "spec.providerID"), 0);
  }
}

static void *state_new(lp_controller *c) {
  lp_metrics *m = lp_env_metrics(lp_controller_env(c));
  term_state *st = lp_xcalloc(1, sizeof *st);
  st->last_failed_draining = json_object();
  st->evict_backoff = json_object();
  st->evictions = lp_metrics_counter(
      m, "luaprov_pods_evictions_total",
      "Pod evictions (and deletions past the deadline) by node termination, by result.", LP_LABELS("result"));
  st->nodes_terminated =
      lp_metrics_counter(m, "luaprov_nodes_terminated_total",
                         "Nodes whose termination finalizer was removed.", LP_LABELS("nodepool"));
  st->claims_terminated =
      lp_metrics_counter(m, "luaprov_nodeclaims_terminated_total",
                         "NodeClaims whose termination finalizer was removed.", LP_LABELS("nodepool"));
  st->claim_duration = lp_metrics_histogram(
      m, "luaprov_nodeclaims_termination_duration_seconds",
      "Time from a NodeClaim's deletionTimestamp to the removal of its finalizer.", LP_LABELS("nodepool"),
      duration_buckets, sizeof duration_buckets / sizeof duration_buckets[0]);
  return st;
}

static void state_free(void *state) {
  term_state *st = state;
  json_decref(st->last_failed_draining);
  json_decref(st->evict_backoff);
  free(st);
}

const lp_controller_def lp_termination_controller = {
    .name = "termination",
    .primary = LP_KIND_NODECLAIM,
    .on_change = on_change,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
