/* The provisioner's NodeClaims on their way (provisioner_internal.h): created by this controller, not
 * in the cache yet. Each is recorded under the name the pass chose for it before it is POSTed, and
 * counts as capacity for the pods nominated for it (and against its pool's limits) until the informer
 * shows it (on_change drops it then) or a check by name finds it gone.
 *
 * Why a chosen name: an answer can be lost after the API server stored the object (a timeout, a reset
 * connection, a 5xx from a proxy). With generateName the object would be unknown and the next pass,
 * seeing the pods still pending and the cache without it, would create a second NodeClaim for them. A
 * name of our own can be asked for (GET), and a POST of it again answers AlreadyExists instead of
 * making another. */
#include <stdlib.h>
#include <string.h>

#include "controller/provisioner_internal.h"
#include "core/error.h"
#include "core/log.h"

/* An entry the cache has not shown this long after its creation (or its last check) is asked for by
 * name: the informer's watch normally shows a NodeClaim within a second. */
#define CHECK_AFTER_S 5.0

static int on_its_way(const char *name, void *ud) {
  return json_object_get(ud, name) != NULL;
}

char *pv_claim_name(pv_pass *p, const char *pool) {
  return lp_env_nodeclaim_name(p->env, pool, on_its_way, p->st->created);
}

static void set_entry(pv_pass *p, const char *name, const json_t *claim, int unconfirmed) {
  json_object_set_new(
      p->st->created, name,
      json_pack("{s:O, s:f, s:b}", "claim", claim, "at", p->started, "unconfirmed", unconfirmed));
}

void pv_inflight_add(pv_pass *p, const char *name, json_t *obj) {
  set_entry(p, name, obj, 1);
}

/* A creation whose first answer was lost has been settled: outcome exists (it had landed), created
 * (the retry made it) or absent (it never landed). */
static void settled(pv_pass *p, const char *name, const char *outcome) {
  lp_counter_inc(p->st->lost_answers, LP_LABELS(outcome));
  lp_info(lp_controller_logger(p->c), "nodeclaim creation settled", LPF_STR("nodeclaim", name),
          LPF_STR("outcome", outcome));
}

pv_outcome pv_inflight_answer(pv_pass *p, const char *name, const lp_kube_reply *reply, int retried) {
  json_t *entry = json_object_get(p->st->created, name);
  int exists = reply->error && strcmp(reply->error->code, "AlreadyExists") == 0;
  if (!reply->error || exists) {
    /* the cache may have shown it already, which dropped the entry: then it needs none */
    if (entry && exists) json_object_set_new(entry, "unconfirmed", json_false());
    if (entry && !exists && reply->object) set_entry(p, name, reply->object, 0);
    if (retried) settled(p, name, exists ? "exists" : "created");
    return PV_STORED;
  }
  /* A refusal of the first POST settles it. A refusal of the second does not: the first, whose answer
   * was lost, may have landed (a 429 from a throttled API server says nothing about it), so it stays on
   * its way until the cache or the check by name says. */
  if (!retried && !lp_kube_reply_unconfirmed(reply)) {
    json_object_del(p->st->created, name);
    return PV_REFUSED;
  }
  lp_warn(lp_controller_logger(p->c),
          retried ? "nodeclaim creation unanswered again: it counts as on its way until the cache shows it "
                    "or a check by name settles it"
                  : "nodeclaim creation unanswered, trying again with the same name",
          LPF_STR("nodeclaim", name), LPF_STR("code", reply->error->code),
          LPF_STR("error", reply->error->message));
  return PV_UNCONFIRMED;
}

/* ---- checks by name ------------------------------------------------------------------------- */

typedef struct check {
  pv_pass *p;
  char *name;
  void (*next)(pv_pass *p);
} check;

static void checked(const lp_kube_reply *reply, void *ud) {
  check *k = ud;
  pv_pass *p = k->p;
  json_t *entry = json_object_get(p->st->created, k->name);
  int was_unconfirmed = json_is_true(json_object_get(entry, "unconfirmed"));
  if (!reply->error) {
    /* it exists: keep counting it, from its current state, until the cache catches up */
    if (entry) set_entry(p, k->name, reply->object, 0);
    if (was_unconfirmed) settled(p, k->name, "exists");
    lp_debug(lp_controller_logger(p->c), "nodeclaim exists, the cache has not shown it yet",
             LPF_STR("nodeclaim", k->name));
  } else if (strcmp(reply->error->code, "NotFound") == 0) {
    /* never landed, or deleted without the cache seeing it: either way its pods need a new plan */
    json_object_del(p->st->created, k->name);
    if (was_unconfirmed) settled(p, k->name, "absent");
  } else {
    lp_error_keep_first(&p->err, lp_error_new(reply->error->code, "checking nodeclaim %s: %s", k->name,
                                              reply->error->message));
  }
  void (*next)(pv_pass *) = k->next;
  free(k->name);
  free(k);
  if (--p->checking == 0) next(p);
}

void pv_inflight_check(pv_pass *p, void (*next)(pv_pass *p)) {
  p->checking = 1; /* this call's own, so that answers arriving now cannot end it early */
  const char *name;
  json_t *entry;
  json_object_foreach(p->st->created, name, entry) {
    if (p->started - json_real_value(json_object_get(entry, "at")) < CHECK_AFTER_S) continue;
    check *k = lp_xmalloc(sizeof *k);
    k->p = p;
    k->name = lp_xstrdup(name);
    k->next = next;
    p->checking++;
    lp_kube_ref ref = *lp_kind_ref(LP_KIND_NODECLAIM);
    ref.name = k->name;
    lp_kube_get(lp_env_kube(p->env), &ref, checked, k);
  }
  if (--p->checking == 0) next(p);
}

double pv_inflight_requeue_s(const pv_pass *p) {
  return json_object_size(p->st->created) ? CHECK_AFTER_S : 0;
}
