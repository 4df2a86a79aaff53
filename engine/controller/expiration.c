/* Expiration ("nodeclaim.expiration"; Karpenter's; docs/controllers.md#expiration-nodeclaimexpiration):
 * deletes a NodeClaim once its spec.expireAfter has passed since its creation, so nodes are recycled
 * (fresh software, no long-lived state) however busy they are.
 *
 * Expiration is forceful: it ignores the NodePool's disruption budgets and karpenter.sh/do-not-disrupt.
 * Only the deletion is ours; the termination controller then cordons and drains the node (pods move
 * through the Eviction API, within spec.terminationGracePeriod when the NodeClaim has one) and the
 * provisioner plans new capacity for the pods that become pending.
 *
 * Per NodeClaim (the primary kind) that is not being deleted and carries spec.expireAfter other than
 * "Never": expiry = metadata.creationTimestamp + expireAfter, on the controllers' wall clock
 * (lp_env_wall). Past expiry: deleted. Before: requeued at expiry. An expireAfter that is not a
 * duration is reported once per value (Warning event InvalidExpireAfter on the NodeClaim) and the
 * NodeClaim is left alone: guessing a lifetime could delete every node at once.
 *
 * Metrics (lp_env_metrics): luaprov_nodeclaims_disrupted_total{reason="expired", nodepool}, counted
 * once the delete is accepted.
 * Events (on the NodeClaim): Normal Disrupted ("Expiring NodeClaim: expireAfter <d> passed since its
 * creation"), Warning InvalidExpireAfter.
 * Logs (logger controller.nodeclaim.expiration, info): "disrupting nodeclaim(s) via delete" (reason
 * expired, nodeclaim, nodepool, expire_after, expired_at). */
#include <stdlib.h>
#include <string.h>

#include "controller/defs.h"
#include "core/clock.h"
#include "core/log.h"

#define LABEL_NODEPOOL "karpenter.sh/nodepool"
/* The shortest requeue before an expiry: a NodeClaim is looked at again when it expires (a far timer on
 * the workqueue costs nothing, and its own changes enqueue it anyway), but never sooner than this, so a
 * clock a little behind the API server's does not spin. */
#define MIN_REQUEUE_S 1.0

typedef struct expiration_state {
  lp_metric *disrupted; /* luaprov_nodeclaims_disrupted_total{reason, nodepool} */
} expiration_state;

static void *state_new(lp_controller *c) {
  expiration_state *st = lp_xcalloc(1, sizeof *st);
  st->disrupted =
      lp_metrics_counter(lp_env_metrics(lp_controller_env(c)), "luaprov_nodeclaims_disrupted_total",
                         "NodeClaims deleted by a controller, by reason.", LP_LABELS("reason", "nodepool"));
  return st;
}

static void state_free(void *state) {
  free(state);
}

typedef struct expire_op {
  lp_controller *c;
  const char *key;
  char *nodepool;
} expire_op;

static void deleted(const lp_kube_reply *reply, void *ud) {
  expire_op *op = ud;
  lp_error *err = NULL;
  if (lp_controller_gone(op->c, op->key, reply, "deleting the expired nodeclaim")) {
    /* gone meanwhile: nothing left to expire */
  } else if (reply->error) {
    err = lp_error_new(reply->error->code, "expiration: deleting nodeclaim %s: %s", op->key,
                       reply->error->message);
  } else {
    expiration_state *st = lp_controller_state(op->c);
    lp_counter_inc(st->disrupted, LP_LABELS("expired", op->nodepool));
  }
  lp_controller_done(op->c, op->key, err, 0);
  free(op->nodepool);
  free(op);
}

static void expire(lp_controller *c, const char *key, const json_t *claim, const char *expire_after,
                   double expired_at) {
  lp_ctrl_env *env = lp_controller_env(c);
  const char *pool = lp_obj_label(claim, LABEL_NODEPOOL);
  char at[LP_RFC3339_SIZE];
  lp_clock_rfc3339(expired_at, 0, at);
  lp_info(lp_controller_logger(c), "disrupting nodeclaim(s) via delete", LPF_STR("reason", "expired"),
          LPF_STR("nodeclaim", key), LPF_STR("nodepool", pool), LPF_STR("expire_after", expire_after),
          LPF_STR("expired_at", at));
  lp_env_event(env, claim, "Normal", "Disrupted",
               "Expiring NodeClaim: expireAfter %s passed since its creation", expire_after);
  expire_op *op = lp_xcalloc(1, sizeof *op);
  op->c = c;
  op->key = key;
  op->nodepool = lp_xstrdup(pool ? pool : "");
  char *buf = lp_xmalloc(strlen(key) + 1);
  lp_kube_ref ref = lp_kind_ref_for(LP_KIND_NODECLAIM, key, buf);
  lp_kube_delete(lp_env_kube(env), &ref, lp_obj_resource_version(claim), deleted, op);
  free(buf);
}

static void reconcile(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  json_t *claim = lp_env_get(env, LP_KIND_NODECLAIM, key);
  const char *expire_after = claim ? lp_obj_str(claim, "spec.expireAfter") : NULL;
  if (!claim || lp_obj_deleting(claim) || !expire_after || strcmp(expire_after, "Never") == 0) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  double lifetime = lp_duration_parse(expire_after);
  double created = lp_rfc3339_parse(lp_obj_str(claim, "metadata.creationTimestamp"));
  if (lifetime < 0 || created < 0) {
    if (lifetime < 0)
      lp_env_event(
          env, claim, "Warning", "InvalidExpireAfter",
          "spec.expireAfter %s is not a duration (like 720h) or Never; the NodeClaim does not expire",
          expire_after);
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  double left = created + lifetime - lp_env_wall(env);
  if (left > 0) {
    lp_controller_done(c, key, NULL, left > MIN_REQUEUE_S ? left : MIN_REQUEUE_S);
    return;
  }
  expire(c, key, claim, expire_after, created + lifetime);
}

const lp_controller_def lp_expiration_controller = {
    .name = "nodeclaim.expiration",
    .primary = LP_KIND_NODECLAIM,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
