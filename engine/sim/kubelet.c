#include "sim/kubelet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "kube/informer.h"
#include "sim/kubelet_pods.h"

#define LOGGER "sim.kubelet"

/* A Node's life as this kubelet sees it. Only LIVE Nodes get heartbeats and pods. */
typedef enum node_state {
  NODE_NEW,     /* its instance runs; not created yet (or the create failed and is tried again) */
  NODE_LIVE,    /* created or adopted; its instance runs */
  NODE_DELETED, /* someone else deleted it while its instance ran: it stays deleted */
  NODE_GONE,    /* its instance went: conditions Unknown, deleted gone_after_seconds later */
  NODE_REMOVED, /* deleted by us after its instance went */
} node_state;

typedef struct sim_node {
  char *instance_id;
  char *name;
  char *uid;        /* the Node's uid once created or adopted (the Lease's owner) */
  char *ip;         /* InternalIP: the pods' hostIP */
  char *ready;      /* the Ready status last posted */
  json_t *desired;  /* the Node the simulator describes, last seen */
  char *want_ready; /* the Ready status it describes */
  char *posted;     /* the conditions last posted, as conditions_key() writes them */
  char *want;       /* the conditions the simulator describes, likewise (a reclaim notice adds one) */
  node_state state;
  int seen;          /* named by the simulator's last answer */
  int busy;          /* a Node request is in flight */
  int lease_busy;    /* a Lease request is in flight */
  double renewed_at; /* wall time of the last Lease renewal (0: never) */
  double gone_at;
} sim_node;

struct lp_sim_kubelet {
  uv_loop_t *loop;
  lp_kube_client *kube;
  lp_http_client *http;
  char *nodes_url;
  double tick_seconds, lease_seconds, gone_after_seconds;
  lp_clock_fn clock;
  void *clock_ud;
  uv_timer_t timer;
  lp_informer *node_informer;
  kubelet_pods *pods;
  sim_node **nodes; /* every instance ever seen Running, in order; never shrinks */
  json_t *by_instance, *by_name;
  char *poll_problem; /* the last failed answer of the simulator, logged once */
  size_t nnodes, cap;
  lp_sim_kubelet_stats stats; /* live_nodes and the pods' counts are filled in when asked */
  int polling;                /* the simulator's answer is awaited */
  int pending;                /* API requests whose done has not run */
  int stopping, parts_open;
  void (*on_stopped)(void *ud);
  void *on_stopped_ud;
};

typedef struct node_call {
  lp_sim_kubelet *k;
  char *instance_id; /* the node is found again by instance: the array may have grown meanwhile */
} node_call;

static double default_clock(void *ud) {
  (void)ud;
  return lp_clock_wall();
}

static double now_of(const lp_sim_kubelet *k) {
  return k->clock(k->clock_ud);
}

/* The node of an instance, or the live one of a name (k->by_instance, k->by_name: key -> index). */
static sim_node *node_at(const lp_sim_kubelet *k, const json_t *index, const char *key) {
  json_t *i = key ? json_object_get(index, key) : NULL;
  return i ? k->nodes[json_integer_value(i)] : NULL;
}
static sim_node *by_instance(const lp_sim_kubelet *k, const char *instance_id) {
  return node_at(k, k->by_instance, instance_id);
}
static sim_node *by_name(const lp_sim_kubelet *k, const char *name) {
  sim_node *n = node_at(k, k->by_name, name);
  return n && n->state != NODE_REMOVED ? n : NULL;
}

static void set_str(char **field, const char *value) {
  char *copy = value ? lp_xstrdup(value) : NULL;
  free(*field);
  *field = copy;
}

static void free_node(sim_node *n) {
  free(n->instance_id);
  free(n->name);
  free(n->uid);
  free(n->ip);
  free(n->ready);
  free(n->want_ready);
  free(n->posted);
  free(n->want);
  json_decref(n->desired);
  free(n);
}

/* ---- shutdown: the timer, the informer, the pods and the HTTP client close; requests return ---- */

static void finish_if_stopped(lp_sim_kubelet *k) {
  if (!k->stopping || k->pending > 0 || k->parts_open > 0 || k->polling) return;
  for (size_t i = 0; i < k->nnodes; i++) free_node(k->nodes[i]);
  free(k->nodes);
  json_decref(k->by_instance);
  json_decref(k->by_name);
  free(k->poll_problem);
  free(k->nodes_url);
  void (*cb)(void *) = k->on_stopped;
  void *ud = k->on_stopped_ud;
  free(k);
  if (cb) cb(ud);
}

static void part_closed(void *ud) {
  lp_sim_kubelet *k = ud;
  k->parts_open--;
  finish_if_stopped(k);
}

static void timer_closed(uv_handle_t *h) {
  part_closed(h->data);
}

/* ---- API calls about one node ---- */

static node_call *node_call_new(lp_sim_kubelet *k, const sim_node *n) {
  node_call *call = lp_xcalloc(1, sizeof *call);
  call->k = k;
  call->instance_id = lp_xstrdup(n->instance_id);
  k->pending++;
  return call;
}

/* Ends a call: returns its node (NULL once stopping or when it is no longer known) and frees call. */
static sim_node *node_call_end(node_call *call, lp_sim_kubelet **k_out) {
  lp_sim_kubelet *k = call->k;
  k->pending--;
  sim_node *n = k->stopping ? NULL : by_instance(k, call->instance_id);
  free(call->instance_id);
  free(call);
  *k_out = k;
  return n;
}

static int is_code(const lp_kube_reply *r, const char *code) {
  return r->error && strcmp(r->error->code, code) == 0;
}

static void warn_failed(const char *what, const sim_node *n, const lp_kube_reply *r) {
  if (is_code(r, "Cancelled")) return;
  lp_warn(LOGGER, what, LPF_STR("node", n ? n->name : ""), LPF_STR("instance_id", n ? n->instance_id : ""),
          LPF_STR("code", r->error->code), LPF_STR("error", r->error->message));
}

static lp_kube_ref node_ref(const sim_node *n) {
  return (lp_kube_ref){.version = "v1", .resource = "nodes", .name = n->name};
}

static void became_live(sim_node *n, const json_t *node) {
  set_str(&n->uid, json_string_value(json_object_get(json_object_get(node, "metadata"), "uid")));
  set_str(&n->ready, n->want_ready);
  set_str(&n->posted, n->want);
  n->state = NODE_LIVE;
  n->renewed_at = 0;
}

static void status_posted(const lp_kube_reply *r, void *ud);

/* The Node's status from the simulator's description: what a kubelet posts on every update. */
static void post_status(lp_sim_kubelet *k, sim_node *n) {
  json_t *patch = json_pack("{s:O}", "status", json_object_get(n->desired, "status"));
  lp_kube_ref ref = node_ref(n);
  n->busy = 1;
  lp_kube_merge_patch(k->kube, &ref, "status", patch, status_posted, node_call_new(k, n));
  json_decref(patch);
}

static void status_posted(const lp_kube_reply *r, void *ud) {
  lp_sim_kubelet *k;
  sim_node *n = node_call_end(ud, &k);
  if (n) {
    n->busy = 0;
    if (r->error) {
      warn_failed("cannot post a node's status", n, r);
      if (is_code(r, "NotFound") && n->state == NODE_LIVE) n->state = NODE_DELETED;
    } else if (n->state == NODE_NEW || n->state == NODE_LIVE) {
      if (n->state == NODE_NEW)
        lp_info(LOGGER, "node adopted", LPF_STR("node", n->name), LPF_STR("instance_id", n->instance_id));
      became_live(n, r->object);
    }
  }
  finish_if_stopped(k);
}

static void node_created(const lp_kube_reply *r, void *ud) {
  lp_sim_kubelet *k;
  sim_node *n = node_call_end(ud, &k);
  if (n) {
    n->busy = 0;
    if (!r->error) {
      became_live(n, r->object);
      k->stats.registered++;
      lp_info(LOGGER, "node registered", LPF_STR("node", n->name), LPF_STR("instance_id", n->instance_id),
              LPF_STR("uid", n->uid));
    } else if (is_code(r, "AlreadyExists")) {
      post_status(k, n); /* a Node of that name is there (a restart of this kubelet): take it over */
    } else {
      warn_failed("cannot register a node", n, r);
    }
  }
  finish_if_stopped(k);
}

static void register_node(lp_sim_kubelet *k, sim_node *n) {
  lp_kube_ref ref = {.version = "v1", .resource = "nodes"};
  n->busy = 1;
  lp_kube_create(k->kube, &ref, n->desired, node_created, node_call_new(k, n));
}

/* Conditions Unknown, as the node lifecycle controller writes them for a kubelet gone silent. */
static void post_unknown(lp_sim_kubelet *k, sim_node *n) {
  json_t *conditions = json_array();
  size_t i;
  json_t *c;
  char now[LP_RFC3339_SIZE];
  lp_clock_rfc3339(now_of(k), 0, now);
  json_array_foreach(json_object_get(json_object_get(n->desired, "status"), "conditions"), i, c) {
    json_t *copy = json_deep_copy(c);
    json_object_set_new(copy, "status", json_string("Unknown"));
    json_object_set_new(copy, "reason", json_string("NodeStatusUnknown"));
    json_object_set_new(copy, "message", json_string("Kubelet stopped posting node status."));
    json_object_set_new(copy, "lastTransitionTime", json_string(now));
    json_array_append_new(conditions, copy);
  }
  json_t *status = json_object_get(n->desired, "status");
  json_object_set_new(status, "conditions", conditions);
  set_str(&n->want_ready, "Unknown");
  post_status(k, n);
}

static void node_deleted(const lp_kube_reply *r, void *ud) {
  lp_sim_kubelet *k;
  sim_node *n = node_call_end(ud, &k);
  if (n) {
    n->busy = 0;
    if (!r->error || is_code(r, "NotFound")) {
      n->state = NODE_REMOVED;
      k->stats.nodes_removed++;
      lp_info(LOGGER, "node of a vanished instance deleted", LPF_STR("node", n->name),
              LPF_STR("instance_id", n->instance_id));
    } else {
      warn_failed("cannot delete the node of a vanished instance", n, r);
    }
  }
  finish_if_stopped(k);
}

/* ---- Leases: kube-node-lease/<node>, owned by the Node, renewed every lease_seconds / 4 ---- */

static void lease_done(const lp_kube_reply *r, void *ud);

static json_t *lease_spec(const lp_sim_kubelet *k, const sim_node *n, const char *now) {
  return json_pack("{s:s,s:i,s:s}", "holderIdentity", n->name, "leaseDurationSeconds", (int)k->lease_seconds,
                   "renewTime", now);
}

static void renew_lease(lp_sim_kubelet *k, sim_node *n, int create) {
  char now[LP_RFC3339_SIZE];
  lp_clock_rfc3339(now_of(k), 1, now);
  lp_kube_ref ref = {.group = "coordination.k8s.io",
                     .version = "v1",
                     .resource = "leases",
                     .namespace = "kube-node-lease",
                     .name = n->name};
  node_call *call = node_call_new(k, n);
  n->lease_busy = 1;
  if (create) {
    json_t *lease = json_pack(
        "{s:s,s:s,s:{s:s,s:s,s:[{s:s,s:s,s:s,s:s}]},s:o}", "apiVersion", "coordination.k8s.io/v1", "kind",
        "Lease", "metadata", "name", n->name, "namespace", "kube-node-lease", "ownerReferences", "apiVersion",
        "v1", "kind", "Node", "name", n->name, "uid", n->uid ? n->uid : "", "spec", lease_spec(k, n, now));
    lp_kube_create(k->kube, &ref, lease, lease_done, call);
    json_decref(lease);
  } else {
    json_t *patch = json_pack("{s:o}", "spec", lease_spec(k, n, now));
    lp_kube_merge_patch(k->kube, &ref, NULL, patch, lease_done, call);
    json_decref(patch);
  }
}

static void lease_done(const lp_kube_reply *r, void *ud) {
  lp_sim_kubelet *k;
  sim_node *n = node_call_end(ud, &k);
  if (n) {
    n->lease_busy = 0;
    if (!r->error) {
      n->renewed_at = now_of(k);
      k->stats.lease_renewals++;
    } else if (is_code(r, "NotFound") && n->state == NODE_LIVE) {
      renew_lease(k, n, 1);
    } else {
      warn_failed("cannot renew a node's lease", n, r);
    }
  }
  finish_if_stopped(k);
}

/* ---- the tick: ask the simulator, then bring each Node one step closer ---- */

static void step(lp_sim_kubelet *k, sim_node *n, json_t *live) {
  double now = now_of(k);
  if (n->seen) {
    if (n->state == NODE_NEW && !n->busy) register_node(k, n);
    if (n->state != NODE_LIVE) return;
    if (!n->busy &&
        (!n->ready || strcmp(n->ready, n->want_ready) != 0 || strcmp(n->posted ?: "", n->want ?: "")))
      post_status(k, n);
    if (!n->lease_busy && now - n->renewed_at >= k->lease_seconds / 4) renew_lease(k, n, 0);
    if (n->ip) json_object_set_new(live, n->name, json_pack("{s:s}", "ip", n->ip));
    return;
  }
  if (n->state == NODE_LIVE && !n->busy) {
    n->state = NODE_GONE;
    n->gone_at = now;
    set_str(&n->ready, NULL); /* should the instance come back, its conditions are posted again */
    lp_info(LOGGER, "instance gone: node not ready", LPF_STR("node", n->name),
            LPF_STR("instance_id", n->instance_id));
    post_unknown(k, n);
  } else if (n->state == NODE_NEW) {
    n->state = NODE_REMOVED; /* it went before it ever registered */
  } else if (n->state == NODE_GONE && !n->busy && now - n->gone_at >= k->gone_after_seconds) {
    lp_kube_ref ref = node_ref(n);
    n->busy = 1;
    lp_kube_delete(k->kube, &ref, NULL, node_deleted, node_call_new(k, n));
  }
}

static const char *internal_ip(const json_t *node) {
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(json_object_get(node, "status"), "addresses"), i, a) {
    const char *type = json_string_value(json_object_get(a, "type"));
    if (type && strcmp(type, "InternalIP") == 0) return json_string_value(json_object_get(a, "address"));
  }
  return NULL;
}

/* "type=status:reason;..." of the Node's conditions: what changes them, without the timestamps the
 * simulator stamps on every answer. Caller frees. */
static char *conditions_key(const json_t *node) {
  json_t *parts = json_array();
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(json_object_get(node, "status"), "conditions"), i, c) {
    json_array_append_new(parts, json_pack("[s?s?s?]", json_string_value(json_object_get(c, "type")),
                                           json_string_value(json_object_get(c, "status")),
                                           json_string_value(json_object_get(c, "reason"))));
  }
  char *key = json_dumps(parts, JSON_COMPACT);
  json_decref(parts);
  return key;
}

static void learn(lp_sim_kubelet *k, const json_t *entry) {
  const char *id = json_string_value(json_object_get(entry, "instance_id"));
  json_t *node = json_object_get(entry, "node");
  const char *name = json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
  const char *ready = json_string_value(json_object_get(entry, "ready"));
  if (!id || !name || !ready) return;
  sim_node *n = by_instance(k, id);
  if (!n) {
    if (k->nnodes == k->cap) {
      k->cap = k->cap ? k->cap * 2 : 16;
      k->nodes = lp_xrealloc(k->nodes, k->cap * sizeof *k->nodes);
    }
    n = lp_xcalloc(1, sizeof *n);
    n->instance_id = lp_xstrdup(id);
    n->name = lp_xstrdup(name);
    n->state = NODE_NEW;
    json_object_set_new(k->by_instance, id, json_integer((json_int_t)k->nnodes));
    json_object_set_new(k->by_name, name, json_integer((json_int_t)k->nnodes));
    k->nodes[k->nnodes++] = n;
  }
  n->seen = 1;
  if (n->state == NODE_REMOVED) return; /* registration happens once per instance */
  if (n->state == NODE_GONE) {
    n->state = NODE_LIVE; /* a stopped instance started again before its Node was deleted */
    lp_info(LOGGER, "instance back: node ready again", LPF_STR("node", n->name), LPF_STR("instance_id", id));
  }
  json_decref(n->desired);
  n->desired = json_incref(node);
  set_str(&n->want_ready, ready);
  free(n->want);
  n->want = conditions_key(node);
  set_str(&n->ip, internal_ip(node));
}

static void nodes_answered(lp_http_result *r, void *ud) {
  lp_sim_kubelet *k = ud;
  k->polling = 0;
  if (k->stopping) {
    lp_http_result_free(r);
    finish_if_stopped(k);
    return;
  }
  json_error_t jerr;
  json_t *body = r->error || r->status != 200 ? NULL : json_loadb(r->body, r->body_len, 0, &jerr);
  json_t *entries = json_object_get(body, "nodes");
  if (!json_is_array(entries)) {
    /* asked every tick: say it once, and again only when the answer changes */
    char *problem = lp_xasprintf("%ld %s", r->status, r->error ? r->error->message : r->body);
    if (!k->poll_problem || strcmp(k->poll_problem, problem) != 0)
      lp_warn(LOGGER, "the simulator did not describe its nodes", LPF_STR("url", k->nodes_url),
              LPF_INT("status", r->status), LPF_STR("error", r->error ? r->error->message : r->body));
    free(k->poll_problem);
    k->poll_problem = problem;
  } else {
    if (k->poll_problem) lp_info(LOGGER, "the simulator answers again", LPF_STR("url", k->nodes_url));
    free(k->poll_problem);
    k->poll_problem = NULL;
    for (size_t i = 0; i < k->nnodes; i++) k->nodes[i]->seen = 0;
    size_t i;
    json_t *entry;
    json_array_foreach(entries, i, entry) learn(k, entry);
    json_t *live = json_object();
    for (size_t j = 0; j < k->nnodes; j++) step(k, k->nodes[j], live);
    kubelet_pods_sync(k->pods, live);
    json_decref(live);
  }
  json_decref(body);
  lp_http_result_free(r);
}

static void on_tick(uv_timer_t *t) {
  lp_sim_kubelet *k = t->data;
  if (k->polling) return;
  k->polling = 1;
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.url = k->nodes_url;
  lp_http_client_request(k->http, &req, nodes_answered, k);
}

/* Someone deleted a Node: Karpenter's termination, or kubectl delete node. */
static void node_gone_remotely(lp_informer *inf, json_t *obj, void *ud) {
  (void)inf;
  lp_sim_kubelet *k = ud;
  sim_node *n = by_name(k, json_string_value(json_object_get(json_object_get(obj, "metadata"), "name")));
  if (!n) return;
  const char *uid = json_string_value(json_object_get(json_object_get(obj, "metadata"), "uid"));
  if (n->uid && uid && strcmp(n->uid, uid) != 0) return; /* an older Node of that name */
  if (n->state == NODE_LIVE) {
    n->state = NODE_DELETED;
    lp_info(LOGGER, "node deleted; its instance still runs", LPF_STR("node", n->name),
            LPF_STR("instance_id", n->instance_id));
  } else if (n->state == NODE_GONE) {
    n->state = NODE_REMOVED;
  }
}

lp_sim_kubelet *lp_sim_kubelet_start(uv_loop_t *loop, const lp_sim_kubelet_options *opts, lp_error **err) {
  if (!opts->simulator_url || !opts->kube) {
    lp_error_set(err, "InvalidArgument", "the simulated kubelet needs the simulator's URL and an API server");
    return NULL;
  }
  lp_http_client *http = lp_http_client_new(loop, &(lp_http_client_options){.max_retries = -1}, err);
  if (!http) return NULL;
  lp_sim_kubelet *k = lp_xcalloc(1, sizeof *k);
  k->loop = loop;
  k->kube = opts->kube;
  k->http = http;
  k->nodes_url = lp_xasprintf("%s/_sim/kubelet/nodes", opts->simulator_url);
  k->by_instance = json_object();
  k->by_name = json_object();
  k->tick_seconds = opts->tick_seconds > 0 ? opts->tick_seconds : 1;
  k->lease_seconds = opts->lease_seconds > 0 ? opts->lease_seconds : 40;
  k->gone_after_seconds = opts->gone_after_seconds > 0 ? opts->gone_after_seconds : 30;
  k->clock = opts->clock ? opts->clock : default_clock;
  k->clock_ud = opts->clock_ud;
  lp_kube_ref nodes = {.version = "v1", .resource = "nodes"};
  k->node_informer = lp_informer_start(k->kube, &nodes, NULL,
                                       &(lp_informer_handlers){.on_delete = node_gone_remotely, .ud = k});
  k->pods = kubelet_pods_start(k->kube, k->clock, k->clock_ud);
  uv_timer_init(loop, &k->timer);
  k->timer.data = k;
  uint64_t every = (uint64_t)(k->tick_seconds * 1000);
  uv_timer_start(&k->timer, on_tick, 0, every ? every : 1);
  lp_info(LOGGER, "simulated kubelet started", LPF_STR("simulator", opts->simulator_url),
          LPF_NUM("lease_seconds", k->lease_seconds), LPF_NUM("gone_after_seconds", k->gone_after_seconds));
  return k;
}

lp_sim_kubelet_stats lp_sim_kubelet_stats_get(const lp_sim_kubelet *k) {
  lp_sim_kubelet_stats stats = k->stats;
  for (size_t i = 0; i < k->nnodes; i++) stats.live_nodes += k->nodes[i]->state == NODE_LIVE;
  kubelet_pods_counts(k->pods, &stats.pods_started, &stats.pods_removed);
  return stats;
}

void lp_sim_kubelet_stop(lp_sim_kubelet *k, void (*on_stopped)(void *ud), void *ud) {
  k->stopping = 1;
  k->on_stopped = on_stopped;
  k->on_stopped_ud = ud;
  k->parts_open = 3;
  uv_timer_stop(&k->timer);
  uv_close((uv_handle_t *)&k->timer, timer_closed);
  lp_informer_stop(k->node_informer);
  kubelet_pods_stop(k->pods, part_closed, k);
  lp_http_client_close(k->http, part_closed, k);
}
