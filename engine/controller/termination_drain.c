/* Cordon and drain for the termination controller (termination_internal.h): the Nodes of a deleting
 * NodeClaim get spec.unschedulable and the karpenter.sh/disrupted:NoSchedule taint, then their pods are
 * evicted through the Eviction API, which honours PodDisruptionBudgets. A refusal is a 429 and the pod
 * backs off on its own, as client-go's per-item rate limiter and Karpenter's eviction queue do: its
 * next eviction waits drain_requeue_s, then twice as long after each refusal up to 30 s, however often
 * the pass runs meanwhile (every pod change wakes it); an eviction that succeeds, or the pod being
 * gone, starts it afresh. When only backoffs hold the drain, the NodeClaim is reconciled again when the
 * earliest one is due; otherwise every drain_requeue_s. Pods a node's own lifecycle handles are left alone:
 * DaemonSet pods (the DaemonSet controller would put them back; upstream Karpenter skips them as they
 * tolerate the taint), mirror pods (the kubelet owns them) and finished pods. Pods annotated
 * karpenter.sh/do-not-disrupt=true wait for the termination deadline; once it passed, every pod still
 * there is deleted directly, PDB or not, because the instance is going away anyway. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/termination_internal.h"
#include "core/log.h"

#define TAINT_DISRUPTED           "karpenter.sh/disrupted"
#define ANNOTATION_MIRROR         "kubernetes.io/config.mirror"
#define ANNOTATION_DO_NOT_DISRUPT "karpenter.sh/do-not-disrupt"
#define FAILED_DRAINING_EVERY_S   60.0
/* A pod still terminating this long after its deletionTimestamp (which already includes its grace
 * period) is stuck, e.g. on a finalizer or a dead kubelet: upstream stops waiting for it after a minute. */
#define STUCK_TERMINATING_S 60.0
/* The longest wait between two evictions of one pod a PodDisruptionBudget keeps refusing. */
#define EVICT_BACKOFF_MAX_S 30.0

/* A pod evicted or deleted, while its request is in flight. */
typedef struct pod_call {
  term_op *op;
  json_t *pod;      /* reference */
  char *key;        /* the pod's cache key, "namespace/name" */
  const char *node; /* the Node's name, owned by op->nodes */
} pod_call;

static const char *meta_str(const json_t *obj, const char *field) {
  return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}

/* ---- cordon -------------------------------------------------------------------------------- */

static int has_disrupted_taint(const json_t *node) {
  size_t i;
  json_t *taint;
  json_array_foreach(json_object_get(json_object_get(node, "spec"), "taints"), i, taint) {
    const char *key = json_string_value(json_object_get(taint, "key"));
    const char *effect = json_string_value(json_object_get(taint, "effect"));
    if (key && effect && strcmp(key, TAINT_DISRUPTED) == 0 && strcmp(effect, "NoSchedule") == 0) return 1;
  }
  return 0;
}

static void cordoned(const lp_kube_reply *reply, void *ud) {
  term_op *op = ud;
  /* a Node deleted meanwhile needs no cordon */
  if (reply->error && !lp_controller_gone(op->c, op->key, reply, "cordoning a node"))
    lp_error_keep_first(&op->err, lp_error_new(reply->error->code, "cordoning node for nodeclaim %s: %s",
                                               op->key, reply->error->message));
  term_batch_end(op);
}

static void cordon(term_op *op, const json_t *node) {
  const json_t *spec = json_object_get(node, "spec");
  int has_taint = has_disrupted_taint(node);
  if (json_is_true(json_object_get(spec, "unschedulable")) && has_taint) return;
  /* a merge patch replaces the whole list: send the Node's taints plus ours, guarded by its
   * resourceVersion so a taint someone adds meanwhile is not lost (409, then retried) */
  json_t *taints = json_is_array(json_object_get(spec, "taints"))
                       ? json_deep_copy(json_object_get(spec, "taints"))
                       : json_array();
  if (!has_taint)
    json_array_append_new(taints, json_pack("{s:s, s:s}", "key", TAINT_DISRUPTED, "effect", "NoSchedule"));
  term_batch_add(op);
  lp_env_patch(op->env, LP_KIND_NODE, lp_obj_name(node), lp_obj_resource_version(node), NULL,
               json_pack("{s:{s:b, s:o}}", "spec", "unschedulable", 1, "taints", taints), cordoned, op);
  lp_info(op->log, "tainted node", LPF_STR("nodeclaim", op->key), LPF_STR("node", lp_obj_name(node)),
          LPF_STR("taint", TAINT_DISRUPTED ":NoSchedule"));
}

/* ---- drain --------------------------------------------------------------------------------- */

static int owned_by_daemonset(const json_t *pod) {
  size_t i;
  json_t *owner;
  json_array_foreach(json_object_get(json_object_get(pod, "metadata"), "ownerReferences"), i, owner) {
    const char *kind = json_string_value(json_object_get(owner, "kind"));
    if (kind && strcmp(kind, "DaemonSet") == 0) return 1;
  }
  return 0;
}

/* Non-zero for pods that never have to leave: they end with the node, or are not the drain's to move. */
static int stays(const json_t *pod) {
  const char *phase = lp_obj_str(pod, "status.phase");
  if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) return 1;
  return owned_by_daemonset(pod) || lp_obj_annotation(pod, ANNOTATION_MIRROR) != NULL;
}

static void count_eviction(term_op *op, const char *result) {
  lp_counter_inc(op->st->evictions, LP_LABELS(result));
}

static void pod_call_end(pod_call *pc) {
  term_op *op = pc->op;
  json_decref(pc->pod);
  free(pc->key);
  free(pc);
  term_batch_end(op);
}

/* ---- eviction backoff ------------------------------------------------------------------------ */

/* A waiting pod whose next eviction is due in seconds. */
static void held_back(term_op *op, double seconds) {
  op->backed_off++;
  if (seconds < op->retry_in) op->retry_in = seconds;
}

/* The backoff the last pass left for the pod at key, or NULL; one of an earlier pod of that name (another
 * uid) is not this pod's. */
static json_t *last_backoff(const term_op *op, const char *key, const json_t *pod) {
  json_t *last = json_object_get(json_object_get(op->st->evict_backoff, op->key), key);
  const char *uid = lp_obj_uid(pod), *was = json_string_value(json_object_get(last, "uid"));
  return last && uid && was && strcmp(uid, was) == 0 ? last : NULL;
}

/* A PodDisruptionBudget refused the eviction: the next one waits twice as long as the last (the first
 * drain_requeue_s), up to EVICT_BACKOFF_MAX_S. */
static void back_off(pod_call *pc) {
  term_op *op = pc->op;
  double first = lp_env_settings(op->env)->drain_requeue_s;
  const json_t *last = json_object_get(op->backoff, pc->key);
  double delay =
      last ? fmin(2 * json_real_value(json_object_get(last, "delay")), EVICT_BACKOFF_MAX_S) : first;
  if (delay < first) delay = first; /* a drain_requeue_s set above the cap */
  json_object_set_new(op->backoff, pc->key,
                      json_pack("{s:s?, s:f, s:f}", "uid", lp_obj_uid(pc->pod), "delay", delay, "at",
                                lp_env_monotonic(op->env) + delay));
  held_back(op, delay);
}

/* Keeps the pass's backoffs for the next one: only pods it still saw waiting have one, so a pod that
 * was evicted or has gone starts afresh. */
static void keep_backoffs(term_op *op) {
  if (json_object_size(op->backoff) > 0)
    json_object_set(op->st->evict_backoff, op->key, op->backoff);
  else
    json_object_del(op->st->evict_backoff, op->key);
}

static void evicted(const lp_kube_reply *reply, void *ud) {
  pod_call *pc = ud;
  term_op *op = pc->op;
  const char *ns = meta_str(pc->pod, "namespace"), *name = lp_obj_name(pc->pod);
  if (!reply->error || reply->status == 404) json_object_del(op->backoff, pc->key);
  if (!reply->error) {
    count_eviction(op, "evicted");
    lp_info(op->log, "evicted pod", LPF_STR("nodeclaim", op->key), LPF_STR("node", pc->node),
            LPF_STR("namespace", ns), LPF_STR("pod", name));
    lp_env_event(op->env, pc->pod, "Normal", "Evicted", "Evicted pod: draining node %s", pc->node);
  } else if (reply->status == 404) {
    count_eviction(op, "gone");
  } else if (reply->status == 429) {
    /* a PodDisruptionBudget allows no disruption now: try again after a while */
    count_eviction(op, "blocked");
    back_off(pc);
    lp_debug(op->log, "eviction refused", LPF_STR("nodeclaim", op->key), LPF_STR("namespace", ns),
             LPF_STR("pod", name), LPF_STR("error", reply->error->message));
    if (!op->blocked)
      op->blocked = lp_xasprintf("%s/%s: %s", ns ? ns : "", name ? name : "", reply->error->message);
  } else {
    count_eviction(op, "error");
    lp_error_keep_first(&op->err,
                        lp_error_new(reply->error->code, "evicting pod %s/%s from node %s: %s", ns ? ns : "",
                                     name ? name : "", pc->node, reply->error->message));
  }
  pod_call_end(pc);
}

static void pod_deleted(const lp_kube_reply *reply, void *ud) {
  pod_call *pc = ud;
  term_op *op = pc->op;
  const char *ns = meta_str(pc->pod, "namespace"), *name = lp_obj_name(pc->pod);
  if (!reply->error || reply->status == 404) {
    count_eviction(op, reply->error ? "gone" : "deleted");
    if (!reply->error)
      lp_info(op->log, "deleted pod, termination grace period elapsed", LPF_STR("nodeclaim", op->key),
              LPF_STR("node", pc->node), LPF_STR("namespace", ns), LPF_STR("pod", name));
  } else {
    count_eviction(op, "error");
    lp_error_keep_first(&op->err,
                        lp_error_new(reply->error->code, "deleting pod %s/%s from node %s: %s", ns ? ns : "",
                                     name ? name : "", pc->node, reply->error->message));
  }
  pod_call_end(pc);
}

/* Sends the eviction (or, past the deadline, the deletion) of the pod at key. */
static void move_pod(term_op *op, const char *key, json_t *pod, const char *node, int force) {
  pod_call *pc = lp_xcalloc(1, sizeof *pc);
  pc->op = op;
  pc->pod = json_incref(pod);
  pc->key = lp_xstrdup(key);
  pc->node = node;
  lp_kube_client *kube = lp_env_kube(op->env);
  lp_kube_ref ref = *lp_kind_ref(LP_KIND_POD);
  ref.namespace = meta_str(pod, "namespace");
  term_batch_add(op);
  if (force) {
    ref.name = lp_obj_name(pod);
    lp_kube_delete(kube, &ref, NULL, pod_deleted, pc);
    return;
  }
  /* POST .../pods/{name}/eviction: the client posts to a collection, so name the subresource as one */
  char *resource = lp_xasprintf("pods/%s/eviction", lp_obj_name(pod));
  ref.resource = resource;
  json_t *eviction = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "policy/v1", "kind", "Eviction",
                               "metadata", "name", lp_obj_name(pod), "namespace", ref.namespace);
  lp_kube_create(kube, &ref, eviction, evicted, pc);
  json_decref(eviction);
  free(resource);
}

typedef struct node_visit {
  term_op *op;
  const char *node;
  int past_deadline;
} node_visit;

static void visit_pod(const char *key, json_t *pod, void *ud) {
  node_visit *v = ud;
  if (stays(pod)) return;
  if (lp_obj_deleting(pod)) {
    /* on its way out: wait for it, unless the deadline passed or it is stuck */
    double since = lp_rfc3339_parse(meta_str(pod, "deletionTimestamp"));
    if (!v->past_deadline && !(since > 0 && v->op->now - since > STUCK_TERMINATING_S)) v->op->waiting++;
    return;
  }
  v->op->waiting++;
  const char *dnd = lp_obj_annotation(pod, ANNOTATION_DO_NOT_DISRUPT);
  if (!v->past_deadline && dnd && strcmp(dnd, "true") == 0) return;
  json_t *last = v->past_deadline ? NULL : last_backoff(v->op, key, pod);
  if (last) {
    json_object_set(v->op->backoff, key, last);
    double due = json_real_value(json_object_get(last, "at")) - lp_env_monotonic(v->op->env);
    if (due > 0) {
      held_back(v->op, due);
      return;
    }
  }
  move_pod(v->op, key, pod, v->node, v->past_deadline);
}

/* Once a minute per NodeClaim at most: what a PDB refused, at info level and as a Warning event. */
static void report_blocked(term_op *op) {
  if (!op->blocked) return;
  double now = lp_env_monotonic(op->env);
  json_t *last = json_object_get(op->st->last_failed_draining, op->key);
  if (last && now - json_real_value(last) < FAILED_DRAINING_EVERY_S) return;
  json_object_set_new(op->st->last_failed_draining, op->key, json_real(now));
  lp_info(op->log, "eviction blocked by a disruption budget, retrying", LPF_STR("nodeclaim", op->key),
          LPF_INT("waiting", op->waiting), LPF_STR("error", op->blocked));
  lp_env_event(op->env, op->claim, "Warning", "FailedDraining",
               "Failed to drain node, %zu pods are waiting to be evicted: %s", op->waiting, op->blocked);
}

/* Pods remain: look again every drain_requeue_s, or, when backoffs alone hold them, once the earliest
 * is due; never after the termination deadline, when every pod is deleted. */
static void requeue_drain(term_op *op) {
  double every = lp_env_settings(op->env)->drain_requeue_s;
  double in = op->waiting > op->backed_off ? fmin(every, op->retry_in) : op->retry_in;
  if (op->deadline > op->now) in = fmin(in, op->deadline - op->now);
  term_finish(op, NULL, in);
}

static void drained(term_op *op) {
  keep_backoffs(op);
  if (op->err) {
    term_finish(op, NULL, 0);
    return;
  }
  report_blocked(op);
  if (op->waiting > 0)
    term_set_condition(op, "Drained", "Unknown", "Draining", "Draining", requeue_drain);
  else if (json_array_size(op->nodes) > 0)
    term_set_condition(op, "Drained", "True", NULL, NULL, op->then);
  else
    op->then(op);
}

static void drain_pods(term_op *op) {
  if (op->err) {
    term_finish(op, NULL, 0);
    return;
  }
  node_visit v = {.op = op, .past_deadline = op->deadline >= 0 && op->now >= op->deadline};
  op->backoff = json_object();
  term_batch_open(op, drained);
  size_t i;
  json_t *node;
  json_array_foreach(op->nodes, i, node) {
    v.node = lp_obj_name(node);
    if (v.node) lp_env_index_each(op->env, LP_INDEX_POD_BY_NODE, v.node, visit_pod, &v);
  }
  term_batch_end(op);
}

void term_drain(term_op *op, term_step_fn next) {
  op->then = next;
  term_batch_open(op, drain_pods);
  size_t i;
  json_t *node;
  json_array_foreach(op->nodes, i, node) cordon(op, node);
  term_batch_end(op);
}
