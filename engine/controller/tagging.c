/* Instance tagging after registration ("nodeclaim.tagging"; Karpenter's nodeclaim tagging controller;
 * docs/controllers.md): once a NodeClaim's Node registered, the CloudProvider's optional registered
 * hook is told the Node's name (lp_cp_registered; a mapping may tag the instance
 * Name=<node name>), once per NodeClaim.
 *
 * Per NodeClaim (the primary kind) not being deleted, with Registered=True, status.nodeName and
 * status.providerID, and without the annotation luaprov.io/instance-tagged="true":
 *   1. a NodeClaim whose last attempt failed less than RETRY_S ago waits for the rest of it (a burst
 *      of updates of the NodeClaim costs no cloud call);
 *   2. the hook is called; on success the NodeClaim is annotated luaprov.io/instance-tagged="true",
 *      so neither a later reconcile nor a restart of the engine calls it again; a mapping without the
 *      hook leaves the NodeClaim as it is;
 *   3. a failure is logged as a warning (with the mapping's message: its action and request ID) and
 *      tried again after RETRY_S. Registration never waits for any of this.
 *
 * Metrics (lp_env_metrics): luaprov_instance_tagging_total{result} counter, result = tagged | failed.
 * Logs (logger controller.nodeclaim.tagging): info "instance tagged" (nodeclaim, node, provider_id),
 * warning "instance tagging failed" (nodeclaim, node, provider_id, code, error, retry_in_s). */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "core/cache.h"
#include "core/log.h"

#define ANNOTATION_TAGGED "luaprov.io/instance-tagged"

/* How long a failed NodeClaim waits before the next attempt. */
#define RETRY_S 30.0

typedef struct tagging_state {
  lp_cache *failed; /* NodeClaim uid -> "1" for RETRY_S after a failed attempt */
  lp_metric *results;
} tagging_state;

typedef struct tag_op {
  lp_controller *c;
  const char *key;
  json_t *claim; /* reference */
} tag_op;

static void op_end(tag_op *op, lp_error *err, double requeue_s) {
  lp_controller_done(op->c, op->key, err, requeue_s);
  json_decref(op->claim);
  free(op);
}

static void annotated(const lp_kube_reply *reply, void *ud) {
  tag_op *op = ud;
  if (lp_controller_gone(op->c, op->key, reply, "annotating the instance as tagged")) {
    op_end(op, NULL, 0);
    return;
  }
  /* a conflict retries the reconcile; the tags are set again, which changes nothing */
  op_end(op,
         reply->error ? lp_error_new(reply->error->code, "annotating nodeclaim %s as tagged: %s", op->key,
                                     reply->error->message)
                      : NULL,
         0);
}

static void tagged(json_t *value, lp_error *err, void *ud) {
  tag_op *op = ud;
  tagging_state *st = lp_controller_state(op->c);
  const char *node = lp_obj_str(op->claim, "status.nodeName");
  const char *pid = lp_obj_str(op->claim, "status.providerID");
  if (err) {
    const char *uid = lp_obj_uid(op->claim) ? lp_obj_uid(op->claim) : op->key;
    lp_cache_set(st->failed, uid, strlen(uid), "1", 1, 0);
    lp_counter_inc(st->results, LP_LABELS("failed"));
    lp_warn(lp_controller_logger(op->c), "instance tagging failed", LPF_STR("nodeclaim", op->key),
            LPF_STR("node", node), LPF_STR("provider_id", pid), LPF_STR("code", err->code),
            LPF_STR("error", err->message), LPF_NUM("retry_in_s", RETRY_S));
    lp_error_free(err);
    op_end(op, NULL, RETRY_S + 1); /* after the failure is forgotten */
    return;
  }
  int implemented = json_is_true(value);
  json_decref(value);
  if (!implemented) { /* the mapping has no registered hook */
    op_end(op, NULL, 0);
    return;
  }
  lp_counter_inc(st->results, LP_LABELS("tagged"));
  lp_info(lp_controller_logger(op->c), "instance tagged", LPF_STR("nodeclaim", op->key),
          LPF_STR("node", node), LPF_STR("provider_id", pid));
  lp_env_patch(lp_controller_env(op->c), LP_KIND_NODECLAIM, op->key, lp_obj_resource_version(op->claim), NULL,
               json_pack("{s:{s:{s:s}}}", "metadata", "annotations", ANNOTATION_TAGGED, "true"), annotated,
               op);
}

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  tagging_state *st = lp_controller_state(c);
  json_t *claim = lp_env_get(env, LP_KIND_NODECLAIM, key);
  const char *node = claim ? lp_obj_str(claim, "status.nodeName") : NULL;
  const char *pid = claim ? lp_obj_str(claim, "status.providerID") : NULL;
  const char *done = claim ? lp_obj_annotation(claim, ANNOTATION_TAGGED) : NULL;
  if (!node || !*node || !pid || !*pid || lp_obj_deleting(claim) ||
      !lp_condition_is(claim, "Registered", "True") || (done && strcmp(done, "true") == 0)) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  const char *uid = lp_obj_uid(claim) ? lp_obj_uid(claim) : key;
  if (lp_cache_get(st->failed, uid, strlen(uid), NULL)) { /* the requeue of the failure comes */
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  tag_op *op = lp_xcalloc(1, sizeof *op);
  op->c = c;
  op->key = key;
  op->claim = json_incref(claim);
  lp_cp_registered(lp_env_cloud(env), pid, node, tagged, op);
}

static void *state_new(lp_controller *c) {
  tagging_state *st = lp_xcalloc(1, sizeof *st);
  st->failed = lp_cache_new("instance-tagging-failures", RETRY_S, 100000, NULL);
  st->results = lp_metrics_counter(lp_env_metrics(lp_controller_env(c)), "luaprov_instance_tagging_total",
                                   "Calls of the mapping's registered hook (instance tagging) by result.",
                                   LP_LABELS("result"));
  return st;
}

static void state_free(void *state) {
  tagging_state *st = state;
  lp_cache_free(st->failed);
  free(st);
}

const lp_controller_def lp_tagging_controller = {
    .name = "nodeclaim.tagging",
    .primary = LP_KIND_NODECLAIM,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
