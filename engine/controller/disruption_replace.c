/* Replacing a drifted or underutilized NodeClaim (or several by one, for multi-node consolidation): the
 * replacement NodeClaim, and the writes of each action the disruption pass decided on
 * (disruption_internal.h).
 *
 * A replacement's writes, in order: the Lua disruption policy asked for every candidate (one veto keeps
 * them all), each candidate's Node tainted karpenter.sh/disrupted:NoSchedule, the replacement created,
 * each candidate marked luaprov.io/replaced-by. An abandoned replacement is deleted, the candidate's
 * Node untainted, its mark dropped; DZ_UNTAINT removes a taint nothing disrupts any more.
 *
 * The replacement is what the NodePool would launch today for the candidate's pods: a name
 * "<nodepool>-<5 random characters>" of our own (lp_env_nodeclaim_name, not generateName: see below),
 * the template's labels (plus karpenter.sh/nodepool) and annotations, the NodePool's current
 * karpenter.sh/nodepool-hash and -hash-version, luaprov.io/replaces=<candidate[,candidate...]>, the
 * provisioner's ownerReference to the NodePool (so deleting the NodePool deletes it too); in spec the
 * template's nodeClassRef, taints, startupTaints, expireAfter and terminationGracePeriod, the
 * candidate's resources.requests, and requirements that are the template's plus those of the
 * candidate's that still agree with them (a zone or instance type its pods narrowed it to). Copying
 * the candidate's spec as it is would launch the drift again: a NodePoolDrifted or RequirementsDrifted
 * node drifted precisely because those fields changed in the template.
 *
 * Writes carry the resourceVersion of the object as the pass saw it; a 409 fails the action and the
 * pass is retried once the cache caught up. A replacement created whose candidate could not be marked
 * is found by its luaprov.io/replaces annotation on the next pass and adopted (DZ_ADOPT), so a restart
 * or a conflict never launches a second one.
 *
 * That needs the cache to show the replacement, and the answer to its create can be lost after the API
 * server stored it (a timeout, a reset connection, a 5xx), while the NodeClaim watch may be reconnecting
 * (an API server restart): a next pass would see neither the replacement nor a mark and launch a second
 * one. So the replacement is recorded on its way (dz_state.on_its_way) under its name before the POST,
 * and until the cache shows it (or the candidate's mark) the candidate counts as being disrupted and is
 * not chosen again. An answer that says nothing (lp_kube_reply_unconfirmed) is followed by one more POST
 * of the same object, which answers AlreadyExists when the first landed; when that one does not tell
 * either, the record stays, and DZ_CHECK_AFTER_S after the POST a pass asks for it by name: found, the
 * candidate is marked with it; not found, it is forgotten and the candidate chosen again. The record is
 * in memory only: a new leader relists every cache before its controllers run, so DZ_ADOPT finds what
 * the old one made. */
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/conditions.h"
#include "controller/disruption_internal.h"
#include "controller/drift_replacement.h"
#include "controller/nodepool.h"
#include "core/log.h"

/* ---- the replacement NodeClaim ---------------------------------------------------------------- */

static json_t *object_copy(const json_t *v) {
  return json_is_object(v) ? json_deep_copy(v) : json_object();
}

/* The template's requirements, preceded by the candidate's that agree with them (and are not one of
 * them already). */
static json_t *requirements_for(const json_t *candidate, const json_t *pool) {
  json_t *out = json_array();
  size_t i, j;
  const json_t *req, *p;
  json_array_foreach(candidate, i, req) {
    int duplicate = 0;
    json_array_foreach(pool, j, p) duplicate |= json_equal(req, p);
    json_t *one = json_pack("[O]", req);
    if (!duplicate && lp_requirements_compatible(one, pool, NULL)) json_array_append(out, (json_t *)req);
    json_decref(one);
  }
  json_array_foreach(pool, j, p) json_array_append(out, (json_t *)p);
  return out;
}

const char *dz_replacement_reason(const json_t *replacement) {
  const char *reason = lp_obj_annotation(replacement, DZ_ANNOTATION_REASON);
  if (reason && strcmp(reason, DZ_REASON_UNDERUTILIZED) == 0) return DZ_REASON_UNDERUTILIZED;
  return DZ_REASON;
}

json_t *dz_replacement_for(const json_t *claim, const json_t *nodepool, const char *name, const json_t *shape,
                           const char *reason, const char *replaces) {
  static const char *const from_template[] = {
      "nodeClassRef", "taints", "startupTaints", "expireAfter", "terminationGracePeriod", NULL};
  const char *pool = lp_obj_name(nodepool);
  const json_t *tmpl = json_object_get(json_object_get(nodepool, "spec"), "template");
  const json_t *tmeta = json_object_get(tmpl, "metadata"), *tspec = json_object_get(tmpl, "spec");
  const json_t *cspec = json_object_get(claim, "spec");

  json_t *labels = object_copy(json_object_get(tmeta, "labels"));
  json_object_set_new(labels, DZ_LABEL_POOL, json_string(pool));
  json_t *annotations = object_copy(json_object_get(tmeta, "annotations"));
  char hash[17];
  lp_nodepool_hash(nodepool, hash);
  json_object_set_new(annotations, LP_NODEPOOL_HASH_ANNOTATION, json_string(hash));
  json_object_set_new(annotations, LP_NODEPOOL_HASH_VERSION_ANNOTATION,
                      json_string(LP_NODEPOOL_HASH_VERSION));
  json_object_set_new(annotations, DZ_ANNOTATION_REPLACES,
                      json_string(replaces ? replaces : lp_obj_name(claim)));
  if (shape && reason) json_object_set_new(annotations, DZ_ANNOTATION_REASON, json_string(reason));

  json_t *spec = json_object();
  for (size_t i = 0; from_template[i]; i++) {
    const json_t *v = json_object_get(tspec, from_template[i]);
    if (v && !json_is_null(v)) json_object_set_new(spec, from_template[i], json_deep_copy(v));
  }
  if (!json_object_get(spec, "nodeClassRef")) /* an invalid template: keep the node's class */
    json_object_set_new(spec, "nodeClassRef", json_deep_copy(json_object_get(cspec, "nodeClassRef")));
  /* a consolidation's replacement is the cheaper shape the simulation found, not the candidate's */
  const json_t *from = shape ? shape : cspec;
  json_object_set_new(
      spec, "requirements",
      requirements_for(json_object_get(from, "requirements"), json_object_get(tspec, "requirements")));
  const json_t *resources = json_object_get(from, "resources");
  if (json_is_object(resources)) json_object_set_new(spec, "resources", json_deep_copy(resources));

  return json_pack("{s:s, s:s, s:{s:s, s:o, s:o, s:[o]}, s:o}", "apiVersion", "karpenter.sh/v1", "kind",
                   "NodeClaim", "metadata", "name", name, "labels", labels, "annotations", annotations,
                   "ownerReferences", lp_obj_owner_ref(nodepool, "karpenter.sh/v1", "NodePool"), "spec",
                   spec);
}

/* ---- writes ----------------------------------------------------------------------------------- */

static lp_kube_ref claim_ref(const json_t *claim) {
  lp_kube_ref ref = *lp_kind_ref(LP_KIND_NODECLAIM);
  ref.name = lp_obj_name(claim);
  return ref;
}

static const char *name_of(const json_t *obj) {
  const char *n = lp_obj_name(obj);
  return n ? n : "";
}

/* Fails the action with the reply's error, worded as "disruption: <what> nodeclaim <name>: ...". */
static void fail(dz_action *a, const lp_kube_reply *reply, const char *what, const json_t *obj) {
  dz_action_done(a, lp_error_new(reply->error->code, "disruption: %s nodeclaim %s: %s", what, name_of(obj),
                                 reply->error->message));
}

/* A merge patch of a candidate's replaced-by annotation (value NULL removes it). */
static void patch_mark(dz_action *a, const json_t *claim, const char *value, lp_kube_done_fn done) {
  lp_env_patch(a->p->env, LP_KIND_NODECLAIM, lp_obj_name(claim), lp_obj_resource_version(claim), NULL,
               json_pack("{s:{s:{s:s?}}}", "metadata", "annotations", DZ_ANNOTATION_REPLACED_BY, value), done,
               a);
}

/* The candidates of an action: DZ_REPLACE's claims (one for drift and single-node consolidation, all of a
 * multi-node one), else its claim alone. */
static size_t nclaims(const dz_action *a) {
  return a->claims ? json_array_size(a->claims) : 1;
}

static json_t *claim_at(const dz_action *a, size_t i) {
  return a->claims ? json_array_get(a->claims, i) : a->claim;
}

/* Ends the action without an error when the candidate's write answered 404: it was deleted meanwhile,
 * so it needs no mark (a replacement already made stays, as capacity). */
static int candidate_gone(dz_action *a, const lp_kube_reply *reply, const char *action) {
  if (!lp_controller_gone(a->p->c, a->p->key, reply, action)) return 0;
  dz_action_done(a, NULL);
  return 1;
}

const char *dz_metric_reason(const char *reason) {
  if (!reason) return DZ_METRIC_REASON;
  if (strcmp(reason, DZ_REASON_EMPTY) == 0) return "empty";
  if (strcmp(reason, DZ_REASON_UNDERUTILIZED) == 0) return "underutilized";
  return DZ_METRIC_REASON;
}

/* A candidate marked replaced-by its replacement: the events and the log line. */
static void announce(dz_action *a, const json_t *claim) {
  const char *log = lp_controller_logger(a->p->c), *name = name_of(claim);
  const char *replacement = name_of(a->replacement), *pool = lp_obj_label(claim, DZ_LABEL_POOL);
  const char *reason = a->reason ? a->reason : dz_replacement_reason(a->replacement);
  if (a->kind == DZ_REPLACE) {
    lp_env_event(a->p->env, claim, "Normal", "Disrupted",
                 "Disrupting NodeClaim: %s/Replace with NodeClaim %s", reason, replacement);
    lp_env_event(a->p->env, claim, "Normal", "DisruptionLaunching", "Launching NodeClaim %s: %s", replacement,
                 reason);
    lp_info(log, "disrupting nodeclaim(s) via replace", LPF_STR("reason", dz_metric_reason(reason)),
            LPF_STR("nodeclaim", name), LPF_STR("nodepool", pool), LPF_STR("replacement", replacement));
  } else {
    lp_info(log, "resuming the replacement of a nodeclaim", LPF_STR("reason", dz_metric_reason(reason)),
            LPF_STR("nodeclaim", name), LPF_STR("nodepool", pool), LPF_STR("replacement", replacement));
  }
}

/* One candidate after the other is marked; a candidate deleted meanwhile needs no mark. The decision
 * counts once, when at least one of its candidates was marked. */
static void marked(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  json_t *claim = claim_at(a, a->step);
  if (!lp_controller_gone(a->p->c, a->p->key, reply, "marking the candidate as replaced")) {
    if (reply->error) {
      fail(a, reply, "marking as replaced by the new", claim);
      return;
    }
    a->marked++;
    announce(a, claim);
  }
  if (++a->step < nclaims(a)) {
    patch_mark(a, claim_at(a, a->step), lp_obj_name(a->replacement), marked);
    return;
  }
  if (a->kind == DZ_REPLACE && a->marked > 0) {
    const char *reason = a->reason ? a->reason : dz_replacement_reason(a->replacement);
    lp_counter_inc(a->p->st->replacements, LP_LABELS("launched"));
    lp_counter_inc(a->p->st->decisions,
                   LP_LABELS("replace", dz_metric_reason(reason), a->type ? a->type : ""));
  }
  dz_action_done(a, NULL);
}

/* Marks the action's candidates with its replacement, the first first. */
static void mark_all(dz_action *a) {
  a->step = 0;
  patch_mark(a, claim_at(a, 0), lp_obj_name(a->replacement), marked);
}

/* ---- replacements on their way ------------------------------------------------------------------ */

void dz_forget_arrived(dz_pass *p) {
  const char *candidate;
  json_t *entry;
  void *tmp;
  json_object_foreach_safe(p->st->on_its_way, tmp, candidate, entry) {
    json_t *claim = lp_env_get(p->env, LP_KIND_NODECLAIM, candidate);
    const char *replacement = json_string_value(json_object_get(entry, "replacement"));
    if (!claim || lp_obj_deleting(claim) || lp_obj_annotation(claim, DZ_ANNOTATION_REPLACED_BY) ||
        lp_env_get(p->env, LP_KIND_NODECLAIM, replacement))
      json_object_del(p->st->on_its_way, candidate);
  }
}

void dz_gate_on_its_way(dz_pass *p, lp_drift_gate *gate) {
  const char *name;
  json_t *way;
  json_object_foreach(p->st->on_its_way, name, way) {
    const json_t *claim = lp_env_get(p->env, LP_KIND_NODECLAIM, name);
    const char *pool = lp_obj_label(claim, DZ_LABEL_POOL), *reason = lp_obj_str(way, "for");
    if (pool && reason) lp_drift_gate_launched(gate, pool, reason, lp_obj_str(way, "replacement"), name);
  }
}

/* lp_env_nodeclaim_name's taken: name is the replacement of an entry of ud (dz_state.on_its_way). */
static int name_on_its_way(const char *name, void *ud) {
  const char *candidate;
  json_t *entry;
  json_object_foreach((json_t *)ud, candidate, entry) {
    if (strcmp(json_string_value(json_object_get(entry, "replacement")), name) == 0) return 1;
  }
  return 0;
}

/* A creation whose first answer was lost has been settled: outcome exists (it had landed), created (the
 * retry made it) or absent (it never landed, or was deleted unseen). */
static void settled(dz_action *a, const char *replacement, const char *outcome) {
  lp_counter_inc(a->p->st->lost_answers, LP_LABELS(outcome));
  lp_info(lp_controller_logger(a->p->c), "replacement creation settled",
          LPF_STR("nodeclaim", name_of(a->claim)), LPF_STR("replacement", replacement),
          LPF_STR("outcome", outcome));
}

static void post_replacement(dz_action *a);

/* The replacement is stored (created, or AlreadyExists after an answer that said nothing: the first POST
 * had landed), refused, or unconfirmed: an answer that says nothing of it is followed by one more POST
 * of the same object; when that one does not tell either, the candidate stays on its way
 * (dz_state.on_its_way) and a later pass settles it. */
static void replacement_created(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  const char *log = lp_controller_logger(a->p->c), *candidate = name_of(a->claim);
  int exists = a->retried && reply->error && strcmp(reply->error->code, "AlreadyExists") == 0;
  if (!reply->error || exists) {
    if (a->retried) settled(a, name_of(a->replacement), exists ? "exists" : "created");
    if (!exists) {
      json_decref(a->replacement);
      a->replacement = json_incref(reply->object);
    }
    mark_all(a);
    return;
  }
  if (!a->retried && !lp_kube_reply_unconfirmed(reply)) { /* refused: nothing was stored */
    for (size_t i = 0; i < nclaims(a); i++) {
      /* no replacement on its way: the next pass removes the taints at once */
      json_object_del(a->p->st->on_its_way, name_of(claim_at(a, i)));
      json_object_del(a->p->st->tainted, name_of(claim_at(a, i)));
    }
    fail(a, reply, "creating the replacement of", a->claim);
    return;
  }
  if (!a->retried) {
    lp_warn(log, "replacement creation unanswered, trying again with the same name",
            LPF_STR("nodeclaim", candidate), LPF_STR("replacement", name_of(a->replacement)),
            LPF_STR("code", reply->error->code), LPF_STR("error", reply->error->message));
    a->retried = 1;
    post_replacement(a);
    return;
  }
  /* whatever the retry answered, the first POST may have landed */
  for (size_t i = 0; i < nclaims(a); i++)
    json_object_set_new(json_object_get(a->p->st->on_its_way, name_of(claim_at(a, i))), "unanswered",
                        json_true());
  lp_warn(log,
          "replacement creation unconfirmed again: its candidate counts as being disrupted until the cache "
          "shows the replacement or a check by name settles it",
          LPF_STR("nodeclaim", candidate), LPF_STR("replacement", name_of(a->replacement)),
          LPF_STR("code", reply->error->code), LPF_STR("error", reply->error->message));
  dz_action_done(a, NULL);
}

static void post_replacement(dz_action *a) {
  lp_kube_create(lp_env_kube(a->p->env), lp_kind_ref(LP_KIND_NODECLAIM), a->replacement, replacement_created,
                 a);
}

/* Not generateName but a name of our own, recorded before the POST: when its answer is lost, the next
 * pass (its cache perhaps without the stored replacement, as while a watch reconnects) must neither
 * choose the candidate again nor forget the replacement. */
static void replace(dz_action *a) {
  dz_state *st = a->p->st;
  char *name = lp_env_nodeclaim_name(a->p->env, lp_obj_name(a->nodepool), name_on_its_way, st->on_its_way);
  size_t len = 1;
  for (size_t i = 0; i < nclaims(a); i++) len += strlen(name_of(claim_at(a, i))) + 1;
  char *replaces = lp_xcalloc(1, len);
  for (size_t i = 0; i < nclaims(a); i++) {
    if (i) strcat(replaces, ",");
    strcat(replaces, name_of(claim_at(a, i)));
    json_object_set_new(
        st->on_its_way, name_of(claim_at(a, i)),
        json_pack("{s:s, s:f, s:b, s:s*}", "replacement", name, "at", a->p->mono, "unanswered", 0, "for",
                  a->shape ? NULL : lp_obj_str(lp_condition_get(a->claim, DZ_REASON), "reason")));
  }
  a->replacement = dz_replacement_for(a->claim, a->nodepool, name, a->shape, a->reason, replaces);
  if (!a->shape)
    lp_drift_stamp_replacement(a->p->env, a->replacement, a->claim, a->nodepool); /* drift's: what for */
  free(replaces);
  free(name);
  post_replacement(a);
}

static void replacement_checked(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  json_t *entry = json_object_get(a->p->st->on_its_way, name_of(a->claim));
  int unanswered = json_is_true(json_object_get(entry, "unanswered"));
  if (reply->error && reply->status != 404) {
    fail(a, reply, "checking the replacement of", a->claim);
    return;
  }
  if (reply->error || lp_obj_deleting(reply->object)) {
    /* never landed, or deleted before the cache saw it: the candidate may be chosen again, at once */
    if (unanswered) settled(a, json_string_value(json_object_get(entry, "replacement")), "absent");
    json_object_del(a->p->st->on_its_way, name_of(a->claim));
    lp_controller_enqueue(a->p->c, a->p->key);
    dz_action_done(a, NULL);
    return;
  }
  /* stored, and the cache is behind: the candidate is marked with it as a restart would adopt it */
  if (unanswered) settled(a, lp_obj_name(reply->object), "exists");
  json_object_set_new(entry, "at", json_real(a->p->mono));
  json_object_set_new(entry, "unanswered", json_false());
  a->replacement = json_incref(reply->object);
  mark_all(a);
}

static void check(dz_action *a) {
  json_t *entry = json_object_get(a->p->st->on_its_way, name_of(a->claim));
  lp_kube_ref ref = *lp_kind_ref(LP_KIND_NODECLAIM);
  ref.name = json_string_value(json_object_get(entry, "replacement"));
  lp_kube_get(lp_env_kube(a->p->env), &ref, replacement_checked, a);
}

/* ---- the karpenter.sh/disrupted taint ------------------------------------------------------------ */

int dz_node_disrupted(const json_t *node) {
  size_t i;
  json_t *t;
  json_array_foreach(lp_obj_get(node, "spec.taints"), i, t) {
    const char *key = json_string_value(json_object_get(t, "key"));
    const char *effect = json_string_value(json_object_get(t, "effect"));
    if (key && effect && strcmp(key, DZ_TAINT_DISRUPTED) == 0 && strcmp(effect, "NoSchedule") == 0) return 1;
  }
  return 0;
}

static void taint_patched(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  /* a Node deleted meanwhile needs no taint; any other failure leaves the candidate alone */
  if (reply->error && reply->status != 404) {
    dz_action_done(a, lp_error_new(reply->error->code, "disruption: %s the node of nodeclaim %s: %s",
                                   a->taint_on ? "tainting" : "untainting", name_of(a->tainting),
                                   reply->error->message));
    return;
  }
  a->then(a);
}

/* Puts (on) or removes karpenter.sh/disrupted:NoSchedule on claim's Node, then next(a); a Node not cached,
 * or already so, needs no write. A merge patch replaces the list: the Node's taints with ours added or
 * left out, guarded by its resourceVersion. */
static void set_taint(dz_action *a, const json_t *claim, int on, void (*next)(dz_action *a)) {
  const char *node_name = lp_obj_str(claim, "status.nodeName");
  json_t *node = node_name ? lp_env_get(a->p->env, LP_KIND_NODE, node_name) : NULL;
  if (on) json_object_set_new(a->p->st->tainted, name_of(claim), json_real(a->p->mono));
  if (!node || dz_node_disrupted(node) == on) {
    next(a);
    return;
  }
  json_t *taints = json_array();
  size_t i;
  json_t *t;
  json_array_foreach(lp_obj_get(node, "spec.taints"), i, t) {
    const char *key = json_string_value(json_object_get(t, "key"));
    if (on || !key || strcmp(key, DZ_TAINT_DISRUPTED) != 0) json_array_append(taints, t);
  }
  if (on)
    json_array_append_new(taints, json_pack("{s:s, s:s}", "key", DZ_TAINT_DISRUPTED, "effect", "NoSchedule"));
  a->then = next;
  a->tainting = claim;
  a->taint_on = on;
  lp_env_patch(a->p->env, LP_KIND_NODE, node_name, lp_obj_resource_version(node), NULL,
               json_pack("{s:{s:o}}", "spec", "taints", taints), taint_patched, a);
}

/* ---- the other writes ---------------------------------------------------------------------------- */

static void candidate_deleted(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  if (reply->error && reply->status != 404) {
    fail(a, reply, "deleting the replaced", a->claim);
    return;
  }
  if (!reply->error) {
    const char *pool = lp_obj_label(a->claim, DZ_LABEL_POOL);
    const char *reason = dz_replacement_reason(a->replacement);
    lp_counter_inc(a->p->st->disrupted, LP_LABELS(dz_metric_reason(reason), pool ? pool : ""));
    lp_env_event(a->p->env, a->claim, "Normal", "DisruptionTerminating",
                 "Disrupting NodeClaim: %s (replaced by %s)", reason, name_of(a->replacement));
    lp_info(lp_controller_logger(a->p->c), "deleting replaced nodeclaim, its replacement is initialized",
            LPF_STR("reason", dz_metric_reason(reason)), LPF_STR("nodeclaim", name_of(a->claim)),
            LPF_STR("nodepool", pool), LPF_STR("replacement", name_of(a->replacement)));
  }
  dz_action_done(a, NULL);
}

static void unmarked(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  if (candidate_gone(a, reply, "removing the candidate's replaced-by mark")) return;
  if (reply->error) {
    fail(a, reply, "removing the replaced-by mark of", a->claim);
    return;
  }
  lp_counter_inc(a->p->st->replacements, LP_LABELS("failed"));
  json_object_set_new(a->p->st->failed, name_of(a->claim), json_real(a->p->now));
  lp_env_event(a->p->env, a->claim, "Normal", "DisruptionBlocked", "Replacement failed, will retry: %s",
               a->why);
  lp_info(lp_controller_logger(a->p->c), "replacement failed, will retry",
          LPF_STR("nodeclaim", name_of(a->claim)), LPF_STR("nodepool", lp_obj_label(a->claim, DZ_LABEL_POOL)),
          LPF_STR("error", a->why));
  dz_action_done(a, NULL);
}

/* The failed replacement is gone: the candidate's Node untainted, then its mark dropped. */
static void unmark(dz_action *a) {
  patch_mark(a, a->claim, NULL, unmarked);
}

static void replacement_deleted(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  if (reply->error && reply->status != 404) {
    fail(a, reply, "deleting the failed replacement", a->replacement);
    return;
  }
  set_taint(a, a->claim, 0, unmark);
}

static void abandon(dz_action *a) {
  if (!a->replacement || lp_obj_deleting(a->replacement)) {
    set_taint(a, a->claim, 0, unmark);
    return;
  }
  lp_kube_ref ref = claim_ref(a->replacement);
  lp_kube_delete(lp_env_kube(a->p->env), &ref, lp_obj_resource_version(a->replacement), replacement_deleted,
                 a);
}

/* ---- a validated delete, a stale taint ----------------------------------------------------------- */

static void disrupted_deleted(const lp_kube_reply *reply, void *ud) {
  dz_action *a = ud;
  if (candidate_gone(a, reply, "deleting the disrupted candidate")) return;
  if (reply->error) {
    fail(a, reply, "deleting the disrupted", a->claim);
    return;
  }
  const char *pool = lp_obj_label(a->claim, DZ_LABEL_POOL);
  a->disrupted = 1;
  lp_counter_inc(a->p->st->disrupted, LP_LABELS(dz_metric_reason(a->reason), pool ? pool : ""));
  lp_env_event(a->p->env, a->claim, "Normal", "Disrupted", "Disrupting NodeClaim: %s/Delete", a->reason);
  lp_env_event(a->p->env, a->claim, "Normal", "DisruptionTerminating", "Disrupting NodeClaim: %s", a->reason);
  dz_action_done(a, NULL);
}

/* Deletes the candidate (its Node tainted first); the termination controller drains it. */
static void delete_disrupted(dz_action *a) {
  lp_kube_ref ref = claim_ref(a->claim);
  lp_kube_delete(lp_env_kube(a->p->env), &ref, lp_obj_resource_version(a->claim), disrupted_deleted, a);
}

static void untainted(dz_action *a) {
  lp_info(lp_controller_logger(a->p->c), "stale disruption taint removed",
          LPF_STR("nodeclaim", name_of(a->claim)), LPF_STR("node", lp_obj_str(a->claim, "status.nodeName")));
  dz_action_done(a, NULL);
}

/* Taints the Node of each candidate of a replacement, one after the other, then creates the replacement. */
static void taint_then_replace(dz_action *a) {
  if (a->step < nclaims(a)) {
    json_t *claim = claim_at(a, a->step++);
    set_taint(a, claim, 1, taint_then_replace);
    return;
  }
  a->step = 0;
  replace(a);
}

/* ---- the Lua veto ------------------------------------------------------------------------------ */

static void start(dz_action *a);

static void collect_pod(const char *key, json_t *pod, void *ud) {
  (void)key;
  json_array_append(ud, pod);
}

static void ask_policy(dz_action *a);

/* The policy's answer for the candidate a->step: every candidate of the action must be allowed, a veto or
 * a failure on one keeps them all. */
static void vetted(int allowed, const char *why, lp_error *err, void *ud) {
  dz_action *a = ud;
  json_t *claim = claim_at(a, a->step);
  const char *log = lp_controller_logger(a->p->c), *name = name_of(claim);
  if (err) { /* fail closed: a policy that cannot answer keeps the node */
    lp_env_event(a->p->env, claim, "Warning", "DisruptionPolicyFailed", "%s", err->message);
    lp_warn(log, "disruption policy failed, nodeclaim not disrupted", LPF_STR("nodeclaim", name),
            LPF_STR("method", a->method), LPF_STR("error", err->message));
    lp_error_free(err);
    dz_action_done(a, NULL);
    return;
  }
  if (!allowed) {
    lp_env_event(a->p->env, claim, "Normal", "DisruptionBlocked", "Disruption policy: %s",
                 why && *why ? why : "vetoed");
    lp_info(log, "disruption policy vetoed, nodeclaim not disrupted", LPF_STR("nodeclaim", name),
            LPF_STR("method", a->method), LPF_STR("why", why ? why : ""));
    dz_action_done(a, NULL);
    return;
  }
  if (++a->step < nclaims(a)) {
    ask_policy(a);
    return;
  }
  a->step = 0;
  start(a);
}

/* A voluntary disruption (DZ_REPLACE, DZ_DELETE) asks the Lua disruption policy first
 * (lp_cp_can_disrupt): the NodeClaim, its Node (null when not cached), the pods bound to it, and
 * {reason, nodepool, now, method}. */
static void ask_policy(dz_action *a) {
  lp_ctrl_env *env = a->p->env;
  json_t *claim = claim_at(a, a->step);
  const char *node_name = lp_obj_str(claim, "status.nodeName");
  json_t *node = node_name ? lp_env_get(env, LP_KIND_NODE, node_name) : NULL;
  json_t *pods = json_array();
  if (node_name) lp_env_index_each(env, LP_INDEX_POD_BY_NODE, node_name, collect_pod, pods);
  const char *pool = lp_obj_label(claim, DZ_LABEL_POOL);
  json_t *ctx = json_pack("{s:s, s:s, s:f, s:s}", "reason", a->reason ? a->reason : DZ_REASON, "nodepool",
                          pool ? pool : "", "now", a->p->now, "method", a->method);
  json_t *null_node = json_null();
  lp_cp_can_disrupt(lp_env_cloud(env), claim, node ? node : null_node, pods, ctx, vetted, a);
  json_decref(null_node);
  json_decref(pods);
  json_decref(ctx);
}

void dz_act(dz_action *a) {
  if (a->kind == DZ_REPLACE || a->kind == DZ_DELETE) {
    if (!a->method) a->method = "drift";
    a->step = 0;
    ask_policy(a);
  } else {
    start(a);
  }
}

static void start(dz_action *a) {
  switch (a->kind) {
  case DZ_REPLACE:
    taint_then_replace(a);
    break;
  case DZ_ADOPT:
    mark_all(a);
    break;
  case DZ_DELETE_OLD: {
    lp_kube_ref ref = claim_ref(a->claim);
    lp_kube_delete(lp_env_kube(a->p->env), &ref, lp_obj_resource_version(a->claim), candidate_deleted, a);
    break;
  }
  case DZ_ABANDON:
    abandon(a);
    break;
  case DZ_CHECK:
    check(a);
    break;
  case DZ_DELETE:
    set_taint(a, a->claim, 1, delete_disrupted);
    break;
  case DZ_UNTAINT:
    set_taint(a, a->claim, 0, untainted);
    break;
  }
}
