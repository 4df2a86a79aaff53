/* Node repair ("node.health"; Karpenter's node health controller; docs/controllers.md): replaces a
 * Node that the repair policy (policies/repair.lua, rule CP6) calls unhealthy for longer than it
 * tolerates, unless too many Nodes of its NodePool are unhealthy at once.
 *
 * Per Node (the primary kind) that is not being deleted, carries a karpenter.sh/nodepool label and a
 * spec.providerID, and has exactly one NodeClaim with that providerID:
 *   1. the policies whose (condition_type, condition_status) the Node's conditions match are found;
 *      of those, the one whose deadline lastTransitionTime + toleration_seconds comes first counts.
 *      None: nothing to do.
 *   2. deadline ahead: requeue at the deadline ("tolerating").
 *   3. safety valve: of the Nodes labelled with the same NodePool, those matching any policy (however
 *      briefly) are unhealthy; more of them than ceil(20 % of the pool's Nodes) blocks the repair:
 *      Warning event NodeRepairBlocked on the Node, requeue after BLOCKED_REQUEUE_S ("blocked").
 *   4. otherwise the NodeClaim is annotated karpenter.sh/nodeclaim-termination-timestamp = now
 *      (unless a deadline already passed), which makes the termination controller delete pods past
 *      their PodDisruptionBudgets, and deleted unless it is being deleted already ("repaired").
 * lastTransitionTime is compared with the wall clock, as Karpenter compares it with its own.
 *
 * The policy list is asked of the CloudProvider again when the script generation changed (a hot
 * reload of policies/repair.lua) or POLICY_TTL_S passed; reconciles arriving while it is being asked
 * wait for that one answer. Every Node is looked at again every RESYNC_S, so a reload that shortens a
 * toleration reaches Nodes already waiting for a later deadline. An empty list turns repair off
 * (Karpenter does not register the controller then).
 *
 * Metrics (lp_env_metrics):
 *   luaprov_repair_decisions_total{decision}     counter, decision = tolerating | blocked | repaired
 *                                                (repaired once the NodeClaim's deletion or deadline is
 *                                                written)
 *   luaprov_nodeclaims_disrupted_total{reason, nodepool}
 *                                                counter, reason "unhealthy" here (shared family)
 *   luaprov_nodeclaims_unhealthy_disrupted_total{condition, nodepool}
 *                                                counter, condition in snake_case ("ready")
 * Events (on the Node): NodeRepairBlocked (Warning, "more than 20% of nodes are unhealthy in nodepool
 * X"), NodeRepair (Warning, the condition, since when, and the NodeClaim deleted).
 * Logs (logger controller.node.health): info "deleting unhealthy node" (node, nodeclaim, nodepool,
 * condition, status, since), info "node repair blocked" (node, nodeclaim, nodepool, unhealthy, nodes),
 * info "annotated nodeclaim" when only the deadline of an already deleting NodeClaim was brought
 * forward, debug "unhealthy node within toleration" (node, condition, status, remaining_s). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/defs.h"
#include "core/clock.h"
#include "core/log.h"

#define LABEL_NODEPOOL      "karpenter.sh/nodepool"
#define ANNOTATION_DEADLINE "karpenter.sh/nodeclaim-termination-timestamp"

/* Short enough that an operator's reload is felt quickly, long enough that a burst of Node updates
 * costs one script call. */
#define POLICY_TTL_S 5.0
#define RESYNC_S     30.0
/* Karpenter's: a blocked repair is retried after 5 minutes. */
#define BLOCKED_REQUEUE_S 300.0
/* The share of a NodePool's Nodes that may be unhealthy for repair to proceed (rounded up). */
#define UNHEALTHY_SHARE 0.2

/* A reconcile waiting for the policy list. */
typedef struct waiter {
  const char *key; /* the framework's, valid until lp_controller_done */
  struct waiter *next;
} waiter;

typedef struct repair_state {
  lp_controller *c;
  json_t *policies;    /* the last list answered, or NULL */
  double fetched_at;   /* monotonic time of that answer */
  uint64_t generation; /* the script generation that answered */
  int fetching;        /* lp_cp_repair_policies in flight */
  waiter *waiting;     /* reconciles waiting for it */
  lp_metric *decisions, *disrupted, *unhealthy_disrupted;
} repair_state;

/* The policy that makes a Node unhealthy soonest. */
typedef struct verdict {
  const char *type, *status; /* borrowed from the policy list */
  double since, deadline;    /* wall times */
} verdict;

/* ---- matching -------------------------------------------------------------------------------- */

static int policy_matches(const json_t *node, const json_t *policy) {
  const char *type = json_string_value(json_object_get(policy, "condition_type"));
  const char *status = json_string_value(json_object_get(policy, "condition_status"));
  return type && status && lp_condition_is(node, type, status);
}

/* Fills v with the matching policy of earliest deadline; 0 when none matches. A condition without a
 * lastTransitionTime cannot say how long it has held, so it never starts a repair. */
static int find_verdict(const json_t *node, const json_t *policies, verdict *v) {
  int found = 0;
  size_t i;
  const json_t *p;
  json_array_foreach(policies, i, p) {
    if (!policy_matches(node, p)) continue;
    const char *type = json_string_value(json_object_get(p, "condition_type"));
    double since = lp_condition_since(node, type);
    if (since < 0) continue;
    double deadline = since + json_number_value(json_object_get(p, "toleration_seconds"));
    if (found && deadline >= v->deadline) continue;
    *v = (verdict){type, json_string_value(json_object_get(p, "condition_status")), since, deadline};
    found = 1;
  }
  return found;
}

typedef struct pool_count {
  const char *pool;
  const json_t *policies;
  size_t nodes, unhealthy;
} pool_count;

static void count_node(const char *key, json_t *node, void *ud) {
  (void)key;
  pool_count *pc = ud;
  const char *pool = lp_obj_label(node, LABEL_NODEPOOL);
  if (!pool || strcmp(pool, pc->pool) != 0) return;
  pc->nodes++;
  size_t i;
  const json_t *p;
  json_array_foreach(pc->policies, i, p) {
    if (policy_matches(node, p)) {
      pc->unhealthy++;
      return;
    }
  }
}

/* "MemoryPressure" -> "memory_pressure", as Karpenter labels its unhealthy_disrupted metric. */
static void snake_case(const char *in, char *out, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; in[i] && n + 2 < cap; i++) {
    unsigned char ch = (unsigned char)in[i];
    if (isupper(ch) && i > 0 && n > 0 && out[n - 1] != '_') out[n++] = '_';
    out[n++] = isalnum(ch) ? (char)tolower(ch) : '_';
  }
  out[n] = '\0';
}

/* ---- acting ---------------------------------------------------------------------------------- */

/* The NodeClaim's termination deadline annotation, or NULL. */
static const char *deadline_of(const json_t *claim) {
  return lp_obj_annotation(claim, ANNOTATION_DEADLINE);
}

/* One repair: annotate, then delete, the Node's NodeClaim. */
typedef struct repair_op {
  lp_controller *c;
  const char *key;
  json_t *node;  /* reference */
  json_t *claim; /* reference; replaced by the answer of the annotation patch */
  char *pool, *type, *status;
  double since;
} repair_op;

static void op_end(repair_op *op, lp_error *err) {
  lp_controller_done(op->c, op->key, err, 0);
  json_decref(op->node);
  json_decref(op->claim);
  free(op->pool);
  free(op->type);
  free(op->status);
  free(op);
}

static void claim_deleted(const lp_kube_reply *reply, void *ud) {
  repair_op *op = ud;
  if (reply->error && reply->status != 404) {
    op_end(op, lp_error_new(reply->error->code, "deleting unhealthy nodeclaim %s of node %s: %s",
                            lp_obj_name(op->claim), op->key, reply->error->message));
    return;
  }
  if (reply->error) { /* gone meanwhile: someone else replaced it */
    op_end(op, NULL);
    return;
  }
  repair_state *st = lp_controller_state(op->c);
  char since[LP_RFC3339_SIZE], condition[128];
  lp_clock_rfc3339(op->since, 0, since);
  snake_case(op->type, condition, sizeof condition);
  lp_info(lp_controller_logger(op->c), "deleting unhealthy node", LPF_STR("node", op->key),
          LPF_STR("nodeclaim", lp_obj_name(op->claim)), LPF_STR("nodepool", op->pool),
          LPF_STR("condition", op->type), LPF_STR("status", op->status), LPF_STR("since", since));
  lp_env_event(
      lp_controller_env(op->c), op->node, "Warning", "NodeRepair",
      "Node is unhealthy (%s=%s since %s) past the repair policy's toleration; deleting NodeClaim %s",
      op->type, op->status, since, lp_obj_name(op->claim));
  lp_counter_inc(st->decisions, LP_LABELS("repaired"));
  lp_counter_inc(st->disrupted, LP_LABELS("unhealthy", op->pool));
  lp_counter_inc(st->unhealthy_disrupted, LP_LABELS(condition, op->pool));
  op_end(op, NULL);
}

static void delete_claim(repair_op *op) {
  char buf[256];
  lp_kube_ref ref = lp_kind_ref_for(LP_KIND_NODECLAIM, lp_obj_name(op->claim), buf);
  lp_kube_delete(lp_env_kube(lp_controller_env(op->c)), &ref, lp_obj_resource_version(op->claim),
                 claim_deleted, op);
}

static void claim_annotated(const lp_kube_reply *reply, void *ud) {
  repair_op *op = ud;
  if (lp_controller_gone(op->c, op->key, reply, "annotating the termination deadline")) {
    op_end(op, NULL); /* gone meanwhile: someone else replaced it */
    return;
  }
  if (reply->error) {
    op_end(op, lp_error_new(reply->error->code, "annotating the termination deadline of nodeclaim %s: %s",
                            lp_obj_name(op->claim), reply->error->message));
    return;
  }
  json_decref(op->claim);
  op->claim = json_incref(reply->object);
  if (!lp_obj_deleting(op->claim)) {
    delete_claim(op);
    return;
  }
  lp_info(lp_controller_logger(op->c), "annotated nodeclaim", LPF_STR("node", op->key),
          LPF_STR("nodeclaim", lp_obj_name(op->claim)), LPF_STR("deadline", deadline_of(op->claim)));
  lp_counter_inc(((repair_state *)lp_controller_state(op->c))->decisions, LP_LABELS("repaired"));
  op_end(op, NULL);
}

/* Non-zero when claim already has a termination deadline that passed: forcing it again changes nothing. */
static int deadline_passed(const json_t *claim, double now) {
  const char *stamp = deadline_of(claim);
  double t = stamp ? lp_rfc3339_parse(stamp) : -1;
  return t >= 0 && t <= now;
}

/* Forces the termination of claim; ends the reconcile. */
static void repair(lp_controller *c, const char *key, json_t *node, json_t *claim, const char *pool,
                   const verdict *v, double now) {
  int stamp = !deadline_passed(claim, now);
  if (!stamp && lp_obj_deleting(claim)) { /* forced already: the termination controller has it */
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  repair_op *op = lp_xcalloc(1, sizeof *op);
  op->c = c;
  op->key = key;
  op->node = json_incref(node);
  op->claim = json_incref(claim);
  op->pool = lp_xstrdup(pool);
  op->type = lp_xstrdup(v->type);
  op->status = lp_xstrdup(v->status);
  op->since = v->since;
  if (!stamp) {
    delete_claim(op);
    return;
  }
  char when[LP_RFC3339_SIZE];
  lp_clock_rfc3339(now, 0, when);
  lp_env_patch(lp_controller_env(c), LP_KIND_NODECLAIM, lp_obj_name(claim), lp_obj_resource_version(claim),
               NULL, json_pack("{s:{s:{s:s}}}", "metadata", "annotations", ANNOTATION_DEADLINE, when),
               claim_annotated, op);
}

/* ---- deciding -------------------------------------------------------------------------------- */

static void evaluate(lp_controller *c, const char *key, const json_t *policies) {
  lp_ctrl_env *env = lp_controller_env(c);
  repair_state *st = lp_controller_state(c);
  json_t *node = lp_env_get(env, LP_KIND_NODE, key);
  const char *pool = node ? lp_obj_label(node, LABEL_NODEPOOL) : NULL;
  const char *pid = node ? lp_obj_str(node, "spec.providerID") : NULL;
  size_t claims = 0;
  json_t *claim =
      pid && *pid ? lp_env_index_first(env, LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, &claims) : NULL;
  verdict v;
  /* not ours, or ambiguous (two NodeClaims for one instance): Karpenter leaves those alone too */
  if (!node || lp_obj_deleting(node) || !pool || !claim || claims != 1 || !find_verdict(node, policies, &v)) {
    lp_controller_done(c, key, NULL, 0);
    return;
  }
  double now = lp_env_wall(env);
  if (now < v.deadline) {
    lp_counter_inc(st->decisions, LP_LABELS("tolerating"));
    lp_debug(lp_controller_logger(c), "unhealthy node within toleration", LPF_STR("node", key),
             LPF_STR("condition", v.type), LPF_STR("status", v.status),
             LPF_NUM("remaining_s", v.deadline - now));
    lp_controller_done(c, key, NULL, v.deadline - now);
    return;
  }
  pool_count pc = {pool, policies, 0, 0};
  lp_env_each(env, LP_KIND_NODE, count_node, &pc);
  size_t allowed = (size_t)ceil(UNHEALTHY_SHARE * (double)pc.nodes);
  if (pc.unhealthy > allowed) {
    lp_counter_inc(st->decisions, LP_LABELS("blocked"));
    lp_info(lp_controller_logger(c), "node repair blocked", LPF_STR("node", key),
            LPF_STR("nodeclaim", lp_obj_name(claim)), LPF_STR("nodepool", pool),
            LPF_INT("unhealthy", (long long)pc.unhealthy), LPF_INT("nodes", (long long)pc.nodes));
    lp_env_event(env, node, "Warning", "NodeRepairBlocked",
                 "more than %.0f%% of nodes are unhealthy in nodepool %s", UNHEALTHY_SHARE * 100, pool);
    lp_controller_done(c, key, NULL, BLOCKED_REQUEUE_S);
    return;
  }
  repair(c, key, node, claim, pool, &v, now);
}

typedef struct asking {
  repair_state *st;
  uint64_t generation; /* in service when the question was asked */
} asking;

static void policies_answered(json_t *value, lp_error *err, void *ud) {
  asking *a = ud;
  repair_state *st = a->st;
  st->fetching = 0;
  if (!err) {
    json_decref(st->policies);
    st->policies = value;
    st->fetched_at = lp_clock_monotonic();
    st->generation = a->generation;
  }
  free(a);
  waiter *w = st->waiting;
  st->waiting = NULL; /* a reconcile ending below may start the next one at once */
  while (w) {
    waiter *next = w->next;
    if (err) /* the wrapper keeps the policy error's position and traceback for the log line */
      lp_controller_done(
          st->c, w->key,
          lp_error_inherit(
              lp_error_new(err->code, "reading the repair policies for node %s: %s", w->key, err->message),
              err),
          0);
    else
      evaluate(st->c, w->key, st->policies);
    free(w);
    w = next;
  }
  lp_error_free(err);
}

static void reconcile(lp_controller *c, const char *key) {
  repair_state *st = lp_controller_state(c);
  lp_cloudprovider *cloud = lp_env_cloud(lp_controller_env(c));
  uint64_t generation = lp_cloudprovider_script_generation(cloud);
  if (st->policies && st->generation == generation && lp_clock_monotonic() - st->fetched_at < POLICY_TTL_S) {
    evaluate(c, key, st->policies);
    return;
  }
  waiter *w = lp_xmalloc(sizeof *w);
  w->key = key;
  w->next = st->waiting;
  st->waiting = w;
  if (st->fetching) return;
  st->fetching = 1;
  asking *a = lp_xmalloc(sizeof *a);
  a->st = st;
  a->generation = generation;
  lp_cp_repair_policies(cloud, policies_answered, a);
}

static void *state_new(lp_controller *c) {
  lp_metrics *m = lp_env_metrics(lp_controller_env(c));
  repair_state *st = lp_xcalloc(1, sizeof *st);
  st->c = c;
  st->decisions = lp_metrics_counter(
      m, "luaprov_repair_decisions_total",
      "Node repair decisions about unhealthy Nodes: tolerating, blocked, repaired.", LP_LABELS("decision"));
  st->disrupted = lp_metrics_counter(m, "luaprov_nodeclaims_disrupted_total",
                                     "NodeClaims deleted by the engine, by reason and NodePool.",
                                     LP_LABELS("reason", "nodepool"));
  st->unhealthy_disrupted = lp_metrics_counter(
      m, "luaprov_nodeclaims_unhealthy_disrupted_total",
      "NodeClaims deleted by node repair, by the unhealthy condition (snake_case) and NodePool.",
      LP_LABELS("condition", "nodepool"));
  return st;
}

/* Runs after the last reconcile ended, so no policy request is in flight and nobody waits. */
static void state_free(void *state) {
  repair_state *st = state;
  json_decref(st->policies);
  free(st);
}

const lp_controller_def lp_repair_controller = {
    .name = "node.health",
    .primary = LP_KIND_NODE,
    .resync_s = RESYNC_S,
    .reconcile = reconcile,
    .state_new = state_new,
    .state_free = state_free,
};
