/* Garbage collection ("garbagecollection", singleton "gc", every settings.gc_interval_s): compares the
 * cluster's instances (lp_cp_list) with the NodeClaims and cleans up both ways.
 *
 * Leaked instances (the provider's own instance GC, as the AWS provider runs one): an instance no
 * NodeClaim has as status.providerID, and whose karpenter.sh/nodeclaim tag (the listed NodeClaim's
 * name) names no NodeClaim either, or names one that has another providerID (a second instance a
 * repeated create launched before the first one was visible), older than settings.gc_leak_grace_s, is
 * deleted. A launch whose providerID is not persisted yet still counts as owned by its tag. Its age runs from
 * the later of its launch time (the listed NodeClaim's creationTimestamp) and the first list this process saw
 * it in: a restart makes it wait a grace period again, never less. Listed entries with a deletionTimestamp
 * (shutting down) are left alone.
 *
 * Lost NodeClaims (as Karpenter core; docs/controllers.md#garbage-collection-garbagecollection): a
 * NodeClaim Registered=True, not being deleted, whose providerID the list lacks, is deleted unless its
 * Node is Ready=True (the kubelet is alive, so the list is what is wrong). Unregistered ones are left
 * to the registration timeout.
 *
 * A failing list deletes nothing: the error goes to lp_controller_done and the pass is retried with
 * backoff. At most MAX_IN_FLIGHT deletions run at once; a failed deletion fails the pass (retried).
 *
 * Metrics:
 *   luaprov_gc_instances_deleted_total                      counter, leaked instances whose deletion
 *                                                           was triggered
 *   luaprov_nodeclaims_disrupted_total{reason, nodepool}    counter, reason "garbage_collected" here
 * Logs (logger controller.garbagecollection, info): "garbage collecting instance with no nodeclaim"
 * (provider_id, nodeclaim, age_s), "garbage collecting nodeclaim with no cloudprovider representation"
 * (nodeclaim, provider_id, node). */
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "core/log.h"

/* Karpenter deletes 20 lost NodeClaims in parallel; the same bound covers instance deletions. */
#define MAX_IN_FLIGHT 20

typedef struct gc_state {
  json_t *first_seen; /* provider ID -> wall time of the first list that held it */
  lp_metric *instances_deleted, *disrupted;
} gc_state;

static void *state_new(lp_controller *c) {
  gc_state *s = lp_xcalloc(1, sizeof *s);
  lp_metrics *m = lp_env_metrics(lp_controller_env(c));
  s->first_seen = json_object();
  s->instances_deleted = lp_metrics_counter(
      m, "luaprov_gc_instances_deleted_total",
      "Instances with no NodeClaim whose deletion garbage collection triggered.", LP_NO_LABELS);
  s->disrupted = lp_metrics_counter(m, "luaprov_nodeclaims_disrupted_total",
                                    "NodeClaims deleted by the engine, by reason and NodePool.",
                                    LP_LABELS("reason", "nodepool"));
  return s;
}

static void state_free(void *state) {
  gc_state *s = state;
  json_decref(s->first_seen);
  free(s);
}

/* One pass: what to delete, worked off MAX_IN_FLIGHT at a time. */
typedef struct gc_pass {
  lp_controller *c;
  const char *key;
  json_t *instances; /* listed NodeClaims whose instance is to be deleted */
  json_t *claims;    /* cached NodeClaims to delete */
  size_t next_instance, next_claim, in_flight;
  lp_error *err; /* the first failed deletion */
} gc_pass;

typedef struct gc_item {
  gc_pass *p;
  json_t *obj; /* own reference */
} gc_item;

static gc_state *state_of(gc_pass *p) {
  return lp_controller_state(p->c);
}

static void launch_more(gc_pass *p);

static void item_done(gc_item *it, lp_error *err) {
  gc_pass *p = it->p;
  json_decref(it->obj);
  free(it);
  lp_error_keep_first(&p->err, err);
  p->in_flight--;
  launch_more(p);
}

static void instance_deleted(json_t *value, lp_error *err, void *ud) {
  gc_item *it = ud;
  json_decref(value);
  if (err && strcmp(err->code, "NodeClaimNotFound") == 0) { /* gone already: what we wanted */
    lp_error_free(err);
    err = NULL;
  } else if (!err) {
    lp_counter_inc(state_of(it->p)->instances_deleted, NULL);
  }
  item_done(it, err);
}

static void claim_deleted(const lp_kube_reply *reply, void *ud) {
  gc_item *it = ud;
  lp_error *err = NULL;
  if (!reply->error) {
    const json_t *labels = json_object_get(json_object_get(it->obj, "metadata"), "labels");
    const char *nodepool = json_string_value(json_object_get(labels, "karpenter.sh/nodepool"));
    lp_counter_inc(state_of(it->p)->disrupted, LP_LABELS("garbage_collected", nodepool ? nodepool : ""));
  } else if (strcmp(reply->error->code, "NotFound") != 0) {
    err = lp_error_new(reply->error->code, "%s", reply->error->message);
  }
  item_done(it, err);
}

static void delete_instance(gc_pass *p, json_t *listed) {
  gc_item *it = lp_xmalloc(sizeof *it);
  it->p = p;
  it->obj = json_incref(listed);
  lp_cp_delete(lp_env_cloud(lp_controller_env(p->c)), listed, instance_deleted, it);
}

static void delete_claim(gc_pass *p, json_t *claim) {
  gc_item *it = lp_xmalloc(sizeof *it);
  it->p = p;
  it->obj = json_incref(claim);
  char buf[256];
  const char *name = lp_obj_name(claim);
  lp_kube_ref ref = lp_kind_ref_for(LP_KIND_NODECLAIM, name, buf);
  /* the precondition makes a NodeClaim that changed since (its Node became Ready) a Conflict */
  lp_kube_delete(lp_env_kube(lp_controller_env(p->c)), &ref, lp_obj_resource_version(claim), claim_deleted,
                 it);
}

static void launch_more(gc_pass *p) {
  while (p->in_flight < MAX_IN_FLIGHT) {
    if (p->next_instance < json_array_size(p->instances)) {
      p->in_flight++;
      delete_instance(p, json_array_get(p->instances, p->next_instance++));
    } else if (p->next_claim < json_array_size(p->claims)) {
      p->in_flight++;
      delete_claim(p, json_array_get(p->claims, p->next_claim++));
    } else {
      break;
    }
  }
  if (p->in_flight > 0) return;
  double interval = lp_env_settings(lp_controller_env(p->c))->gc_interval_s;
  lp_controller_done(p->c, p->key, p->err, p->err ? 0 : interval);
  json_decref(p->instances);
  json_decref(p->claims);
  free(p);
}

/* ---- deciding ------------------------------------------------------------------------------ */

/* Seconds since the later of the instance's launch and the first list that held it, now being wall
 * time. The later, because a cloud may report launch times to the minute and its clock is not ours:
 * a launch time alone could make a seconds-old instance look past its grace period. A launch time in
 * our future says only that the clocks disagree: the first list is then all there is to go by, rather
 * than waiting for our clock to catch up with the cloud's. */
static double instance_age(gc_state *s, const json_t *listed, const char *provider_id, double now) {
  double created = lp_rfc3339_parse(lp_obj_str(listed, "metadata.creationTimestamp"));
  double seen = json_real_value(json_object_get(s->first_seen, provider_id));
  return now - (created > seen && created <= now ? created : seen);
}

/* Remembers when each listed instance was first seen, forgetting those no longer listed. Returns the
 * listed provider IDs as a set. */
static json_t *note_listed(gc_state *s, const json_t *listed, double now) {
  json_t *ids = json_object();
  size_t i;
  const json_t *claim;
  json_array_foreach(listed, i, claim) {
    const char *pid = lp_obj_str(claim, "status.providerID");
    if (!pid) continue;
    json_object_set_new(ids, pid, json_true());
    if (!json_object_get(s->first_seen, pid)) json_object_set_new(s->first_seen, pid, json_real(now));
  }
  const char *pid;
  json_t *v;
  void *tmp;
  json_object_foreach_safe(s->first_seen, tmp, pid, v) {
    if (!json_object_get(ids, pid)) json_object_del(s->first_seen, pid);
  }
  return ids;
}

static void find_leaked(gc_pass *p, json_t *listed, double now) {
  lp_ctrl_env *env = lp_controller_env(p->c);
  double grace = lp_env_settings(env)->gc_leak_grace_s;
  size_t i;
  json_t *claim;
  json_array_foreach(listed, i, claim) {
    const char *pid = lp_obj_str(claim, "status.providerID"), *name = lp_obj_name(claim);
    if (!pid || lp_obj_deleting(claim) ||
        lp_env_index_first(env, LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, NULL))
      continue;
    /* The tag's NodeClaim owns the instance while it has no providerID yet; once it has another one
     * this instance is a second launch for it (a repeated create whose first answer was lost) */
    const json_t *owner = name ? lp_env_get(env, LP_KIND_NODECLAIM, name) : NULL;
    if (owner && !lp_obj_str(owner, "status.providerID")) continue;
    double age = instance_age(state_of(p), claim, pid, now);
    if (age < grace) continue;
    lp_info(lp_controller_logger(p->c), "garbage collecting instance with no nodeclaim",
            LPF_STR("provider_id", pid), LPF_STR("nodeclaim", name), LPF_NUM("age_s", age));
    json_array_append(p->instances, claim);
  }
}

typedef struct lost_scan {
  gc_pass *p;
  json_t *listed_ids;
} lost_scan;

/* Counts Ready Nodes: when two Nodes claim one providerID, either being Ready keeps the NodeClaim. */
static void note_ready(const char *key, json_t *node, void *ud) {
  (void)key;
  if (lp_condition_is(node, "Ready", "True")) ++*(int *)ud;
}

static void check_lost(const char *key, json_t *claim, void *ud) {
  lost_scan *scan = ud;
  lp_ctrl_env *env = lp_controller_env(scan->p->c);
  const char *pid = lp_obj_str(claim, "status.providerID");
  if (!pid || !*pid || lp_obj_deleting(claim) || !lp_condition_is(claim, "Registered", "True") ||
      json_object_get(scan->listed_ids, pid))
    return;
  int ready = 0;
  lp_env_index_each(env, LP_INDEX_NODE_BY_PROVIDER_ID, pid, note_ready, &ready);
  if (ready) return; /* a kubelet is alive */
  json_t *node = lp_env_index_first(env, LP_INDEX_NODE_BY_PROVIDER_ID, pid, NULL);
  lp_info(lp_controller_logger(scan->p->c),
          "garbage collecting nodeclaim with no cloudprovider representation", LPF_STR("nodeclaim", key),
          LPF_STR("provider_id", pid), LPF_STR("node", node ? lp_obj_name(node) : NULL));
  json_array_append(scan->p->claims, claim);
}

static void listed(json_t *value, lp_error *err, void *ud) {
  gc_pass *p = ud;
  if (err) {
    lp_error *e =
        lp_error_new(err->code, "garbage collection: listing the cluster's instances: %s", err->message);
    lp_error_free(err);
    p->err = e;
    launch_more(p); /* nothing to delete: ends the pass with the error */
    return;
  }
  double now = lp_env_wall(lp_controller_env(p->c));
  json_t *ids = note_listed(state_of(p), value, now);
  find_leaked(p, value, now);
  lost_scan scan = {p, ids};
  lp_env_each(lp_controller_env(p->c), LP_KIND_NODECLAIM, check_lost, &scan);
  json_decref(ids);
  json_decref(value);
  launch_more(p);
}

static void reconcile(lp_controller *c, const char *key) {
  gc_pass *p = lp_xcalloc(1, sizeof *p);
  p->c = c;
  p->key = key;
  p->instances = json_array();
  p->claims = json_array();
  lp_cp_list(lp_env_cloud(lp_controller_env(c)), listed, p);
}

/* resync_s stays 0: the period is a setting, so each pass asks for the next one itself. */
const lp_controller_def lp_gc_controller = {
    .name = "garbagecollection",
    .primary = LP_KIND_NONE,
    .singleton_key = "gc",
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
