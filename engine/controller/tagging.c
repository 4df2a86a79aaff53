/* Instance tagging after registration ("nodeclaim.tagging"; Karpenter's nodeclaim tagging controller;
 * docs/controllers.md): once a NodeClaim's Node registered, the CloudProvider's optional registered
 * hook is told the Node's name (lp_cp_registered; a mapping may tag the instance
 * Name=<node name>), once per NodeClaim.
 *
 * Per NodeClaim (the primary kind) not being deleted, with Registered=True, status.nodeName and
 * status.providerID, and without the annotation luaprov.io/instance-tagged="true":
 *   1. a NodeClaim whose last attempt failed less than RETRY_S ago (on the controllers' clock,
 *      lp_env_monotonic) waits for the rest of it (a burst of updates of the NodeClaim costs no cloud
 *      call);
 *   2. the hook is called; on success the NodeClaim is annotated luaprov.io/instance-tagged="true",
 *      so neither a later reconcile nor a restart of the engine calls it again; a mapping without the
 *      hook leaves the NodeClaim as it is. The annotation only ever goes one way, so it is patched
 *      without a resourceVersion precondition (lp_env_annotate): the lifecycle controller writing the
 *      NodeClaim meanwhile cannot make it conflict. Until the patch landed the controller remembers
 *      "tagged, annotation pending": a failed patch is retried (with the workqueue's backoff) as a
 *      patch only, the hook is not called again;
 *   3. a failure of the hook is logged as a warning (with the mapping's message: its action and
 *      request ID) and tried again after RETRY_S. Registration never waits for any of this.
 * What is remembered is per NodeClaim key (with its uid, so a new NodeClaim of the same name starts
 * afresh) and forgotten once the cache shows the NodeClaim annotated, being deleted or gone.
 *
 * Metrics (lp_env_metrics): luaprov_instance_tagging_total{result} counter, result = tagged | failed.
 * Logs (logger controller.nodeclaim.tagging): info "instance tagged" (nodeclaim, node, provider_id),
 * warning "instance tagging failed" (nodeclaim, node, provider_id, code, error, retry_in_s). */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "core/log.h"

#define ANNOTATION_TAGGED "luaprov.io/instance-tagged"

/* How long a failed NodeClaim waits before the next attempt. */
#define RETRY_S 30.0

typedef struct tagging_state {
  /* NodeClaim key -> {"uid": its uid, "failed_at": lp_env_monotonic of the last failed hook call} or
   * {"uid", "tagged": true}: the hook succeeded, the annotation is not stored yet, or
   * {"uid", "annotated": true}: stored, the cache does not show it yet */
  json_t *memo;
  lp_metric *results;
} tagging_state;

typedef struct tag_op {
  lp_controller *c;
  const char *key;
  json_t *claim; /* reference */
} tag_op;

static const char *uid_of(const json_t *claim, const char *key) {
  return lp_obj_uid(claim) ? lp_obj_uid(claim) : key;
}

static void remember(tagging_state *st, const char *key, const json_t *claim, const char *field, json_t *v) {
  json_object_set_new(st->memo, key, json_pack("{s:s, s:o}", "uid", uid_of(claim, key), field, v));
}

static void op_end(tag_op *op, lp_error *err, double requeue_s) {
  lp_controller_done(op->c, op->key, err, requeue_s);
  json_decref(op->claim);
  free(op);
}

static void annotated(const lp_kube_reply *reply, void *ud) {
  tag_op *op = ud;
  tagging_state *st = lp_controller_state(op->c);
  if (lp_controller_gone(op->c, op->key, reply, "annotating the instance as tagged")) {
    json_object_del(st->memo, op->key);
    op_end(op, NULL, 0);
    return;
  }
  /* stored: until the cache shows it, a reconcile (the NodeClaim changed meanwhile) must not tag again;
   * a failure keeps "tagged": the retry patches again and calls no hook */
  if (!reply->error) remember(st, op->key, op->claim, "annotated", json_true());
  op_end(op,
         reply->error ? lp_error_new(reply->error->code, "annotating nodeclaim %s as tagged: %s", op->key,
                                     reply->error->message)
                      : NULL,
         0);
}

static void annotate(tag_op *op) {
  lp_env_annotate(lp_controller_env(op->c), LP_KIND_NODECLAIM, op->key, ANNOTATION_TAGGED, "true", annotated,
                  op);
}

static void tagged(json_t *value, lp_error *err, void *ud) {
  tag_op *op = ud;
  tagging_state *st = lp_controller_state(op->c);
  const char *node = lp_obj_str(op->claim, "status.nodeName");
  const char *pid = lp_obj_str(op->claim, "status.providerID");
  if (err) {
    remember(st, op->key, op->claim, "failed_at", json_real(lp_env_monotonic(lp_controller_env(op->c))));
    lp_counter_inc(st->results, LP_LABELS("failed"));
    lp_warn(lp_controller_logger(op->c), "instance tagging failed", LPF_STR("nodeclaim", op->key),
            LPF_STR("node", node), LPF_STR("provider_id", pid), LPF_STR("code", err->code),
            LPF_STR("error", err->message), LPF_NUM("retry_in_s", RETRY_S));
    lp_error_free(err);
    op_end(op, NULL, RETRY_S);
    return;
  }
  int implemented = json_is_true(value);
  json_decref(value);
  if (!implemented) { /* the mapping has no registered hook */
    json_object_del(st->memo, op->key);
    op_end(op, NULL, 0);
    return;
  }
  lp_counter_inc(st->results, LP_LABELS("tagged"));
  lp_info(lp_controller_logger(op->c), "instance tagged", LPF_STR("nodeclaim", op->key),
          LPF_STR("node", node), LPF_STR("provider_id", pid));
  remember(st, op->key, op->claim, "tagged", json_true());
  annotate(op);
}

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  tagging_state *st = lp_controller_state(c);
  json_t *claim = lp_env_get(env, LP_KIND_NODECLAIM, key);
  const char *done = claim ? lp_obj_annotation(claim, ANNOTATION_TAGGED) : NULL;
  if (!claim || lp_obj_deleting(claim) || (done && strcmp(done, "true") == 0)) {
    json_object_del(st->memo, key); /* nothing more to do for it */
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  const char *node = lp_obj_str(claim, "status.nodeName");
  const char *pid = lp_obj_str(claim, "status.providerID");
  if (!node || !*node || !pid || !*pid || !lp_condition_is(claim, "Registered", "True")) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  json_t *memo = json_object_get(st->memo, key);
  const char *memo_uid = json_string_value(json_object_get(memo, "uid"));
  if (memo && (!memo_uid || strcmp(memo_uid, uid_of(claim, key)) != 0)) { /* another NodeClaim of that name */
    json_object_del(st->memo, key);
    memo = NULL;
  }
  if (json_is_true(json_object_get(memo, "annotated"))) { /* its watch event comes */
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  json_t *failed_at = json_object_get(memo, "failed_at");
  double wait = failed_at ? json_real_value(failed_at) + RETRY_S - lp_env_monotonic(env) : 0;
  if (wait > 0) { /* the requeue of the failure comes; an update meanwhile costs no call */
    lp_controller_done(c, key, NULL, wait);
    return;
  }
  tag_op *op = lp_xcalloc(1, sizeof *op);
  op->c = c;
  op->key = key;
  op->claim = json_incref(claim);
  if (json_is_true(json_object_get(memo, "tagged")))
    annotate(op); /* tagged already: only the annotation is missing */
  else
    lp_cp_registered(lp_env_cloud(env), pid, node, tagged, op);
}

static void *state_new(lp_controller *c) {
  tagging_state *st = lp_xcalloc(1, sizeof *st);
  st->memo = json_object();
  st->results = lp_metrics_counter(lp_env_metrics(lp_controller_env(c)), "luaprov_instance_tagging_total",
                                   "Calls of the mapping's registered hook (instance tagging) by result.",
                                   LP_LABELS("result"));
  return st;
}

static void state_free(void *state) {
  tagging_state *st = state;
  json_decref(st->memo);
  free(st);
}

const lp_controller_def lp_tagging_controller = {
    .name = "nodeclaim.tagging",
    .primary = LP_KIND_NODECLAIM,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
