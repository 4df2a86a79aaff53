/* The NodeGroup operations: Refresh keeps the snapshot, the readers answer from it, and the
 * mutations check the Cluster Autoscaler's rules (NG1-NG6, docs/contracts.md) before the mapping
 * touches the cloud. */
#include <stdlib.h>
#include <string.h>

#include "contract/error_table.h"
#include "contract/nodegroup_internal.h"
#include "core/clock.h"
#include "core/error_log.h"
#include "core/log.h"
#include "core/metrics.h"
#include "script/call.h"
#include "script/endpoints.h"

/* ---- operations: start, finish, order ------------------------------------------------------ */

static void kick(uv_idle_t *idle);

void ng_schedule(ng_op *o) {
  lp_nodegroups *ng = o->ng;
  o->next_ready = NULL;
  if (ng->ready_tail)
    ng->ready_tail->next_ready = o;
  else
    ng->ready_head = o;
  ng->ready_tail = o;
  uv_idle_start(ng->kick, kick);
}

static void start(ng_op *o);

static void kick(uv_idle_t *idle) {
  lp_nodegroups *ng = idle->data;
  uv_idle_stop(idle);
  ng_op *o = ng->ready_head;
  ng->ready_head = ng->ready_tail = NULL;
  while (o) {
    ng_op *next = o->next_ready;
    start(o);
    o = next;
  }
}

ng_op *ng_op_new(lp_nodegroups *ng, const char *name, const char *id, op_fn run) {
  ng_op *o = lp_xcalloc(1, sizeof *o);
  o->ng = ng;
  o->name = name;
  o->id = lp_xstrdup(id ? id : "");
  o->run = run;
  ng->in_flight++;
  return o;
}

/* Mutations of one node group wait for each other. */
void ng_enqueue(ng_op *o) {
  lp_nodegroups *ng = o->ng;
  lane *l = ng->lanes;
  while (l && strcmp(l->id, o->id) != 0) l = l->next;
  if (!l) {
    l = lp_xcalloc(1, sizeof *l);
    l->id = lp_xstrdup(o->id);
    l->next = ng->lanes;
    ng->lanes = l;
  }
  o->lane = l;
  if (l->tail) {
    l->tail->next_in_lane = o;
    l->tail = o;
    return;
  }
  l->head = l->tail = o;
  ng_schedule(o);
}

static void leave_lane(ng_op *o) {
  lane *l = o->lane;
  if (!l) return;
  l->head = o->next_in_lane;
  if (l->head) {
    ng_schedule(l->head);
    return;
  }
  lane **p = &o->ng->lanes;
  while (*p != l) p = &(*p)->next;
  *p = l->next;
  free(l->id);
  free(l);
}

void ng_finish(ng_op *o, lp_error *err, json_t *node) {
  lp_nodegroups *ng = o->ng;
  if (o->lane) lp_counter_inc(ng->operations, LP_LABELS(o->name, err ? err->code : "ok"));
  leave_lane(o);
  ng->in_flight--;
  if (o->node_done)
    o->node_done(node, err, o->ud);
  else {
    json_decref(node);
    o->done(err, o->ud);
  }
  json_decref(o->nodes);
  json_decref(o->args);
  free(o->id);
  free(o);
}

lp_ng_group *ng_group_or_fail(ng_op *o) {
  lp_ng_group *g = ng_snapshot_find(o->ng->snapshot, o->id);
  if (!g) ng_finish(o, lp_error_new("NotFound", "NodeGroup \"%s\", not found", o->id), NULL);
  return g;
}

/* "providers/bizfly/init.lua: refresh: <problem> (docs/contracts.md#mappings)"; takes problem. */
lp_error *ng_contract_error(lp_nodegroups *ng, const char *function, char *problem, const char *rule) {
  const char *file = lp_generation_module_file(lp_script_host_current(ng->scripts), ng->mapping);
  lp_error *e =
      lp_error_new("Contract", "%s: %s: %s (%s)", file ? file : ng->mapping, function, problem, rule);
  free(problem);
  return e;
}

/* ---- calling the mapping ----------------------------------------------------------------- */

typedef struct call_ctx {
  ng_call_next next;
  void *ud;
} call_ctx;

/* (nil, {code=, message=}) and (nil, "message") are the mapping's operational failures. */
static void call_done(const lp_task_result *r, void *ud) {
  call_ctx c = *(call_ctx *)ud;
  free(ud);
  if (r->error) {
    c.next(c.ud, NULL, lp_error_copy(r->error), NULL);
    return;
  }
  json_t *values = json_loadb(r->json, r->json_len, JSON_DECODE_ANY, NULL);
  json_t *first = json_array_get(values, 0), *second = json_array_get(values, 1);
  if (json_is_null(first) && second && !json_is_null(second)) {
    lp_error *err = lp_error_from_table(second);
    c.next(c.ud, NULL, err, json_is_object(second) ? second : NULL);
    json_decref(values);
    return;
  }
  c.next(c.ud, values, NULL, NULL);
}

void ng_call_mapping(lp_nodegroups *ng, const char *function, json_t *args, ng_call_next next, void *ud) {
  call_ctx *c = lp_xmalloc(sizeof *c);
  c->next = next;
  c->ud = ud;
  lp_script_host_call(ng->scripts, ng->mapping, function, args, call_done, c);
}

typedef struct has_args {
  lp_generation *g;
  const char *module, *function;
  int found;
} has_args;

static int read_has_function(lua_State *L) {
  has_args *a = lua_touserdata(L, 1);
  lp_generation_push_module(a->g, a->module);
  if (!lua_istable(L, -1)) return 0;
  lua_pushstring(L, a->function);
  a->found = lua_rawget(L, -2) == LUA_TFUNCTION;
  return 0;
}

/* Whether the mapping in service exports function (optional exports such as template_node). */
int ng_mapping_has(lp_nodegroups *ng, const char *function) {
  has_args a = {lp_script_host_current(ng->scripts), ng->mapping, function, 0};
  lp_error *err = NULL;
  if (lp_script_cpcall(lp_generation_state(a.g), read_has_function, &a, &err) != 0) lp_error_free(err);
  return a.found;
}

/* ---- Refresh ----------------------------------------------------------------------------- */

static void refresh_done(void *ud, json_t *values, lp_error *err, const json_t *failure) {
  lp_nodegroups *ng = ud;
  lp_error *out = NULL;
  const char *result = "ok";
  if (err) {
    int usable = ng->snapshot && lp_clock_monotonic() - ng->snapshot->taken_at <= ng->max_stale_s;
    if (usable && strcmp(err->code, "Cancelled") != 0) {
      result = "stale";
      lp_warn(NG_LOGGER, "refresh failed; the last snapshot keeps serving", LPF_ERROR(err),
              LPF_NUM("snapshot_age_s", lp_clock_monotonic() - ng->snapshot->taken_at));
    } else {
      result = "error";
      out = lp_error_new(err->code, "refresh failed%s: %s",
                         ng->snapshot ? " and the last snapshot is too old" : "", err->message);
      lp_errorlog(NG_LOGGER, "refresh failed", LPF_ERROR(err));
    }
    lp_error_free(err);
  } else {
    char *problem = NULL;
    const char *rule = NULL;
    ng_snapshot *s = ng_snapshot_build(json_array_get(values, 0), &problem, &rule);
    if (!s) {
      result = "error";
      out = ng_contract_error(ng, "refresh", problem, rule);
      lp_errorlog(NG_LOGGER, "refresh broke the NodeGroup contract", LPF_STR("error", out->message));
    } else {
      ng_snapshot_free(ng->snapshot);
      ng->snapshot = s;
      lp_gauge_set(ng->groups_gauge, NULL, (double)s->ngroups);
      lp_gauge_set(ng->instances_gauge, NULL, (double)s->ninstances);
      lp_debug(NG_LOGGER, "refreshed", LPF_INT("node_groups", s->ngroups),
               LPF_INT("instances", s->ninstances));
    }
    json_decref(values);
  }
  lp_counter_inc(ng->refresh_total, LP_LABELS(result));
  lp_histogram_observe(ng->refresh_seconds, NULL, lp_clock_monotonic() - ng->refresh_started);
  ng_op *w = ng->waiters;
  ng->waiters = NULL;
  ng->refreshing = 0;
  /* waiters in arrival order */
  ng_op *ordered = NULL;
  while (w) {
    ng_op *next = w->next_waiter;
    w->next_waiter = ordered;
    ordered = w;
    w = next;
  }
  for (w = ordered; w;) {
    ng_op *next = w->next_waiter;
    if (!w->run)
      ng_finish(w, out ? lp_error_new(out->code, "%s", out->message) : NULL, NULL);
    else if (!ng->snapshot)
      ng_finish(w, lp_error_new(out ? out->code : "Unavailable", "%s", out ? out->message : "no snapshot"),
                NULL);
    else
      start(w); /* with a snapshot now (an old one when this refresh broke the contract) */
    w = next;
  }
  lp_error_free(out);
}

static void join_refresh(ng_op *o) {
  lp_nodegroups *ng = o->ng;
  o->next_waiter = ng->waiters;
  ng->waiters = o;
  if (ng->refreshing) return; /* one refresh at a time; everyone waiting gets its outcome */
  ng->refreshing = 1;
  ng->refresh_started = lp_clock_monotonic();
  ng_call_mapping(ng, "refresh", json_pack("[O]", ng->ctx), refresh_done, ng);
}

/* Runs an operation whose turn has come: refresh ops join the refresh, the others need a snapshot. */
static void start(ng_op *o) {
  if (o->ng->closing) {
    ng_finish(o,
              lp_error_new("Cancelled", "%s of node group %s: the engine is shutting down", o->name, o->id),
              NULL);
    return;
  }
  if (!o->run || (!o->ng->snapshot && !o->no_snapshot)) {
    join_refresh(o);
    return;
  }
  o->run(o);
}

void lp_ng_refresh(lp_nodegroups *ng, lp_ng_done_fn done, void *ud) {
  ng_op *o = ng_op_new(ng, "Refresh", NULL, NULL);
  o->done = done;
  o->ud = ud;
  ng_schedule(o);
}

/* ---- readers ----------------------------------------------------------------------------- */

int lp_ng_has_snapshot(const lp_nodegroups *ng) {
  return ng->snapshot != NULL;
}

double lp_ng_snapshot_age(const lp_nodegroups *ng) {
  return ng->snapshot ? lp_clock_monotonic() - ng->snapshot->taken_at : -1;
}

size_t lp_ng_count(const lp_nodegroups *ng) {
  return ng->snapshot ? ng->snapshot->ngroups : 0;
}

const lp_ng_group *lp_ng_at(const lp_nodegroups *ng, size_t i) {
  return ng->snapshot && i < ng->snapshot->ngroups ? &ng->snapshot->groups[i] : NULL;
}

const lp_ng_group *lp_ng_find(const lp_nodegroups *ng, const char *id) {
  return ng_snapshot_find(ng->snapshot, id);
}

const lp_ng_group *lp_ng_for_node(const lp_nodegroups *ng, const char *provider_id) {
  return ng_snapshot_owner(ng->snapshot, provider_id);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

lp_nodegroups *lp_nodegroups_new(const lp_nodegroups_config *cfg) {
  lp_nodegroups *ng = lp_xcalloc(1, sizeof *ng);
  ng->loop = cfg->loop;
  ng->scripts = cfg->scripts;
  ng->mapping = lp_xstrdup(cfg->mapping ? cfg->mapping : "providers.bizfly");
  ng->max_stale_s = cfg->max_stale_s > 0 ? cfg->max_stale_s : 300;
  ng->ctx = json_object();
  const char *cluster = cfg->cluster ? cfg->cluster : getenv("CLUSTER_NAME");
  if (cluster && *cluster) json_object_set_new(ng->ctx, "cluster", json_string(cluster));
  if (cfg->endpoint && *cfg->endpoint) json_object_set_new(ng->ctx, "endpoint", json_string(cfg->endpoint));
  lp_endpoints_allow_configured(cfg->endpoint); /* the mapping may reach what it is pointed at */
  ng->kick = lp_xcalloc(1, sizeof *ng->kick);
  uv_idle_init(ng->loop, ng->kick);
  ng->kick->data = ng;
  lp_metrics *m = lp_metrics_default();
  ng->refresh_total = lp_metrics_counter(m, "luaprov_nodegroup_refresh_total",
                                         "NodeGroup refreshes: ok, stale (failed, the last snapshot kept "
                                         "serving) or error.",
                                         LP_LABELS("result"));
  ng->refresh_seconds =
      lp_metrics_histogram(m, "luaprov_nodegroup_refresh_seconds",
                           "Time the NodeGroup mapping's refresh took.", LP_NO_LABELS, NULL, 0);
  ng->groups_gauge =
      lp_metrics_gauge(m, "luaprov_nodegroup_groups", "Node groups in the last snapshot.", LP_NO_LABELS);
  ng->instances_gauge =
      lp_metrics_gauge(m, "luaprov_nodegroup_instances", "Instances in the last snapshot.", LP_NO_LABELS);
  ng->operations = lp_metrics_counter(m, "luaprov_nodegroup_operations_total",
                                      "NodeGroup size changes and deletions by outcome (ok or error code).",
                                      LP_LABELS("operation", "result"));
  return ng;
}

void lp_nodegroups_shutdown(lp_nodegroups *ng) {
  ng->closing = 1;
}

size_t lp_nodegroups_in_flight(const lp_nodegroups *ng) {
  return ng->in_flight;
}

static void kick_closed(uv_handle_t *h) {
  free(h);
}

void lp_nodegroups_free(lp_nodegroups *ng) {
  if (!ng) return;
  uv_close((uv_handle_t *)ng->kick, kick_closed);
  ng_snapshot_free(ng->snapshot);
  json_decref(ng->ctx);
  free(ng->mapping);
  free(ng);
}

char *lp_nodegroups_name(lp_nodegroups *ng) {
  char *s = lp_script_host_module_string(ng->scripts, ng->mapping, "name");
  return s ? s : lp_xstrdup("");
}

char *lp_nodegroups_gpu_label(lp_nodegroups *ng) {
  char *s = lp_script_host_module_string(ng->scripts, ng->mapping, "gpu_label");
  return s ? s : lp_xstrdup("");
}

void lp_ng_outcome_store(lp_error *err, void *ud) {
  lp_ng_outcome *out = ud;
  out->error = err;
  out->done = 1;
}

void lp_ng_outcome_node(json_t *node, lp_error *err, void *ud) {
  lp_ng_outcome *out = ud;
  out->node = node;
  out->error = err;
  out->done = 1;
}

void lp_ng_outcome_wait(uv_loop_t *loop, lp_ng_outcome *outcome) {
  while (!outcome->done) uv_run(loop, UV_RUN_ONCE);
}
