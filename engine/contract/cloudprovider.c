/* The CloudProvider operations: each calls the mapping (and policies) as script tasks, checks what
 * comes back, and assembles the answer Karpenter expects. Here: the plumbing every operation shares,
 * the lifecycle, GetInstanceTypes, Delete, Get, List and RepairPolicies; Create is
 * cloudprovider_create.c, IsDrifted cloudprovider_drift.c, the disruption policy
 * cloudprovider_disruption.c.
 *
 * Metrics (lp_metrics_default): luaprov_cloudprovider_launches_total{result} (cloudprovider_create.c),
 * luaprov_drift_policy_evaluations_total{generation, result} (cloudprovider_drift.c),
 * luaprov_disruption_policy_evaluations_total{generation, result} (cloudprovider_disruption.c). */
#include "contract/cloudprovider_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/contracts.h"
#include "contract/error_table.h"
#include "contract/settings.h"
#include "contract/shapes.h"
#include "core/cache.h"
#include "core/log.h"
#include "script/endpoints.h"

/* ---- plumbing ------------------------------------------------------------------------------ */

op *cp_op_new(lp_cloudprovider *cp, lp_cp_done_fn done, void *ud) {
  op *o = lp_xcalloc(1, sizeof *o);
  o->cp = cp;
  o->done = done;
  o->ud = ud;
  return o;
}

static void op_free(op *o) {
  json_decref(o->nodeclaim);
  json_decref(o->nodeclass);
  json_decref(o->candidates);
  json_decref(o->allowed);
  json_decref(o->tags);
  json_decref(o->chosen_type);
  json_decref(o->instance);
  json_decref(o->error_detail);
  free(o->provider_id);
  free(o->instance_id);
  free(o);
}

void cp_finish(op *o, json_t *value, lp_error *err) {
  o->done(value, err, o->ud);
  op_free(o);
}

static void deferred_closed(uv_handle_t *h) {
  op *o = h->data;
  free(h);
  cp_finish(o, o->value, o->error);
}

static void deferred_fire(uv_timer_t *t) {
  uv_close((uv_handle_t *)t, deferred_closed);
}

void cp_finish_soon(op *o, json_t *value, lp_error *err) {
  o->value = value;
  cp_fail_soon(o, err);
}

/* Reports err after the current call returns: done never runs inside an lp_cp_* call. */
void cp_fail_soon(op *o, lp_error *err) {
  o->error = err;
  o->defer = lp_xmalloc(sizeof *o->defer);
  uv_timer_init(o->cp->loop, o->defer);
  o->defer->data = o;
  uv_timer_start(o->defer, deferred_fire, 0, 0);
}

/* "<mapping file>: instance_types: <problem> (rule CP4 in docs/contracts.md)" */
lp_error *cp_contract_error(op *o, const char *module, const char *function, char *problem,
                            const char *rule) {
  const char *file = lp_generation_module_file(lp_script_host_current(o->cp->scripts), module);
  lp_error *e = lp_error_new("Contract", "%s: %s: %s (%s)", file ? file : module, function, problem, rule);
  free(problem);
  return e;
}

typedef struct call_ctx {
  op *o;
  step_fn next;
} call_ctx;

lp_error *cp_task_outcome(const lp_task_result *r, json_t **values, json_t **detail) {
  *values = NULL;
  if (r->error) return lp_error_copy(r->error);
  json_error_t jerr;
  json_t *all = json_loads(r->json, JSON_DECODE_ANY, &jerr);
  /* (nil, {code=, message=}) or (nil, "message"): the mapping's operational failure */
  json_t *first = json_array_get(all, 0), *second = json_array_get(all, 1);
  if (json_is_null(first) && second && !json_is_null(second)) {
    lp_error *err = lp_error_from_table(second);
    if (detail) *detail = json_incref(second);
    json_decref(all);
    return err;
  }
  *values = all;
  return NULL;
}

static void call_done(const lp_task_result *r, void *ud) {
  call_ctx *c = ud;
  op *o = c->o;
  step_fn next = c->next;
  free(c);
  o->generation = r->generation;
  json_t *values, *detail = NULL;
  lp_error *err = cp_task_outcome(r, &values, &detail);
  if (detail) {
    json_decref(o->error_detail);
    o->error_detail = detail; /* for steps that read more of it */
  }
  next(o, values, err);
}

void cp_call(op *o, const char *module, const char *function, json_t *args, step_fn next) {
  if (o->cp->shut_down) {
    json_decref(args);
    cp_fail_soon(
        o, lp_error_new("ShuttingDown", "%s.%s not called: the engine is shutting down", module, function));
    return;
  }
  call_ctx *c = lp_xmalloc(sizeof *c);
  c->o = o;
  c->next = next;
  lp_script_host_call(o->cp->scripts, module, function, args, call_done, c);
}

lp_metric *cp_policy_evaluations(const char *policy, const char *results) {
  char name[96], help[256];
  snprintf(name, sizeof name, "luaprov_%s_policy_evaluations_total", policy);
  snprintf(help, sizeof help,
           "Answers of the %s policy by the script generation that gave them and result (%s).", policy,
           results);
  return lp_metrics_counter(lp_metrics_default(), name, help, LP_LABELS("generation", "result"));
}

json_t *cp_ctx_args1(lp_cloudprovider *cp, json_t *a) {
  return json_pack("[Oo]", cp->ctx, a);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static void destroy(lp_cloudprovider *cp);
static void call_instance_types(lp_cloudprovider *cp, const json_t *nodeclass, int refresh,
                                lp_cp_done_fn done, void *ud);

/* The end of a background refresh of one class's instance types (types_done stored the answer). */
static void refresh_done(json_t *value, lp_error *err, void *ud) {
  lp_cloudprovider *cp = ud;
  if (err)
    lp_warn(LOGGER, "background instance-type refresh failed", LPF_STR("code", err->code),
            LPF_STR("error", err->message));
  json_decref(value);
  lp_error_free(err);
  if (--cp->refreshing == 0 && cp->freed) destroy(cp);
}

static void refresh_in_background(lp_cloudprovider *cp, const json_t *nodeclass) {
  cp->refreshing++;
  call_instance_types(cp, nodeclass, 1, refresh_done, cp);
}

static void refresh_tick(uv_timer_t *t) {
  lp_cloudprovider *cp = t->data;
  const char *name;
  json_t *nodeclass;
  json_object_foreach(cp->known_classes, name, nodeclass) refresh_in_background(cp, nodeclass);
}

/* "apiVersion name": a class of the same name in an alias group (nodeclass_desc.h) is another one. */
static char *class_key_of(const json_t *nodeclass) {
  const char *name = json_string_value(json_object_get(json_object_get(nodeclass, "metadata"), "name"));
  const char *api_version = json_string_value(json_object_get(nodeclass, "apiVersion"));
  return lp_xasprintf("%s %s", api_version ? api_version : "", name ? name : "");
}

/* Remembers the class for the background refresh. */
static void remember_class(lp_cloudprovider *cp, const char *key, const json_t *nodeclass) {
  if (!json_string_value(json_object_get(json_object_get(nodeclass, "metadata"), "name"))) return;
  /* every call passes the class: copy it only when it changed since the last one */
  json_t *known = json_object_get(cp->known_classes, key);
  if (!known || !json_equal(known, (json_t *)nodeclass))
    json_object_set_new(cp->known_classes, key, json_deep_copy(nodeclass));
}

/* What the mapping exports besides functions, read once: the node class descriptor (pinned, so a
 * reload cannot change it; one with a problem is not pinned, lp_nodeclass_desc_pin), the drift
 * reasons, and the settings that fill ctx when the caller passed no values. The script host validated
 * them at load (contracts.c); a mapping loaded without that validation gets "" fields, and the error is
 * logged here. */
static void read_exports(lp_cloudprovider *cp, const lp_cloudprovider_config *cfg) {
  cp->nodeclass_json = lp_script_host_module_json(cp->scripts, cp->mapping, "nodeclass");
  char *problem = lp_nodeclass_desc_problem(cp->nodeclass_json);
  if (problem) {
    lp_errorlog(LOGGER, "the CloudProvider mapping exports no usable node class",
                LPF_STR("module", cp->mapping), LPF_STR("error", problem),
                LPF_STR("rule", "docs/contracts.md#the-node-class-descriptor"));
    free(problem);
  }
  if (!cp->nodeclass_json) cp->nodeclass_json = json_object();
  lp_nodeclass_desc_from_json(cp->nodeclass_json, &cp->desc);
  lp_nodeclass_desc_pin(cp->nodeclass_json);
  cp->drift_reasons = lp_script_host_module_json(cp->scripts, cp->mapping, "drift_reasons");
  if (!json_is_array(cp->drift_reasons)) {
    json_decref(cp->drift_reasons);
    cp->drift_reasons = json_array();
  }
  json_t *settings = NULL;
  if (!cfg->settings) {
    json_t *declared = lp_script_host_module_json(cp->scripts, cp->mapping, "settings");
    settings = lp_settings_resolve(declared, NULL, LP_SETTINGS_SIM_FIRST, &problem);
    free(problem);
    json_decref(declared);
  }
  cp->ctx = json_deep_copy(cfg->settings ? cfg->settings : settings);
  if (!cp->ctx) cp->ctx = json_object();
  json_decref(settings);
  json_object_set_new(cp->ctx, "cluster_id", json_string(cfg->cluster_id ? cfg->cluster_id : "luaprov"));
}

lp_cloudprovider *lp_cloudprovider_new(const lp_cloudprovider_config *cfg) {
  lp_cloudprovider *cp = lp_xcalloc(1, sizeof *cp);
  cp->loop = cfg->loop;
  cp->scripts = cfg->scripts;
  cp->mapping = lp_xstrdup(cfg->mapping ? cfg->mapping : LUAPROV_CLOUDPROVIDER_MAPPING);
  read_exports(cp, cfg);
  if (cfg->endpoint) json_object_set_new(cp->ctx, "endpoint", json_string(cfg->endpoint));
  lp_endpoints_allow_configured(cfg->endpoint); /* the mapping may reach what it is pointed at */
  cp->unavailable =
      lp_cache_new("unavailable-offerings", cfg->unavailable_ttl_s > 0 ? cfg->unavailable_ttl_s : 180, 100000,
                   lp_metrics_default());
  cp->max_launch_attempts = cfg->max_launch_attempts ? cfg->max_launch_attempts : 10;
  cp->launches = lp_metrics_counter(lp_metrics_default(), "luaprov_cloudprovider_launches_total",
                                    "Instance launch attempts by outcome.", LP_LABELS("result"));
  cp->types = lp_types_cache_new(cp->unavailable, cfg->types_max_age_s > 0 ? cfg->types_max_age_s : 60);
  cp_drift_init(cp);
  cp_disruption_init(cp);
  cp->known_classes = json_object();
  double interval = cfg->refresh_interval_s == 0 ? 20 * 60 : cfg->refresh_interval_s;
  if (interval > 0 && cp->loop) {
    cp->refresh_timer = lp_xmalloc(sizeof *cp->refresh_timer);
    uv_timer_init(cp->loop, cp->refresh_timer);
    cp->refresh_timer->data = cp;
    uint64_t ms = (uint64_t)(interval * 1000.0);
    uv_timer_start(cp->refresh_timer, refresh_tick, ms ? ms : 1, ms ? ms : 1);
    uv_unref((uv_handle_t *)cp->refresh_timer); /* never keeps the process alive by itself */
  }
  return cp;
}

static void destroy(lp_cloudprovider *cp) {
  free(cp->mapping);
  free(cp->name);
  json_decref(cp->ctx);
  lp_nodeclass_desc_unpin(cp->nodeclass_json);
  lp_nodeclass_desc_release(&cp->desc);
  json_decref(cp->nodeclass_json);
  json_decref(cp->drift_reasons);
  lp_types_cache_free(cp->types);
  lp_cache_free(cp->unavailable);
  json_decref(cp->known_classes);
  free(cp);
}

static void timer_closed(uv_handle_t *h) {
  free(h);
}

void lp_cloudprovider_shutdown(lp_cloudprovider *cp) {
  cp->shut_down = 1;
  if (cp->refresh_timer) {
    uv_close((uv_handle_t *)cp->refresh_timer, timer_closed);
    cp->refresh_timer = NULL;
  }
}

void lp_cloudprovider_free(lp_cloudprovider *cp) {
  if (!cp) return;
  lp_cloudprovider_shutdown(cp);
  cp->freed = 1;
  if (cp->refreshing == 0) destroy(cp);
}

void lp_cloudprovider_set_clock(lp_cloudprovider *cp, lp_clock_fn clock, void *ud) {
  lp_cache_set_clock(cp->unavailable, clock, ud); /* the held types read the same clock */
}

uint64_t lp_cloudprovider_script_generation(const lp_cloudprovider *cp) {
  return lp_script_host_generation_id(cp->scripts);
}

uint64_t lp_cloudprovider_script_digest(const lp_cloudprovider *cp) {
  return lp_generation_digest(lp_script_host_current(cp->scripts));
}

const char *lp_cloudprovider_name(lp_cloudprovider *cp) {
  free(cp->name); /* re-read: a reload may have changed it */
  cp->name = lp_script_host_module_string(cp->scripts, cp->mapping, "name");
  return cp->name ? cp->name : "";
}

json_t *lp_cloudprovider_supported_nodeclasses(const lp_cloudprovider *cp) {
  const lp_nodeclass_desc *d = &cp->desc;
  json_t *out = json_array();
  for (size_t i = 0; i <= d->naliases; i++)
    json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "group", i ? d->aliases[i - 1] : d->group,
                                         "version", d->version, "kind", d->kind));
  return out;
}

const lp_nodeclass_desc *lp_cloudprovider_nodeclass(const lp_cloudprovider *cp) {
  return &cp->desc;
}

const json_t *lp_cloudprovider_drift_reasons(const lp_cloudprovider *cp) {
  return cp->drift_reasons;
}

void lp_cp_outcome_store(json_t *value, lp_error *err, void *ud) {
  lp_cp_outcome *out = ud;
  out->value = value;
  out->error = err;
  out->done = 1;
}

void lp_cp_outcome_wait(uv_loop_t *loop, lp_cp_outcome *outcome) {
  while (!outcome->done) uv_run(loop, UV_RUN_ONCE);
}

/* ---- GetInstanceTypes -------------------------------------------------------------------- */

void cp_offering_key(char *out, size_t cap, const char *type, const json_t *offering) {
  snprintf(out, cap, "%s|%s|%s", type, json_string_value(json_object_get(offering, "zone")),
           json_string_value(json_object_get(offering, "capacity_type")));
}

/* Checks rule CP4 on every type; NULL when they all pass. */
static lp_error *checked_types(op *o, json_t *types) {
  if (!json_is_array(types) && !(json_is_object(types) && json_object_size(types) == 0))
    return cp_contract_error(o, o->cp->mapping, "instance_types", lp_xstrdup("did not return a list"),
                             "docs/contracts.md#mappings");
  size_t i;
  json_t *type;
  json_array_foreach(types, i, type) {
    char *problem = lp_check_instance_type(type);
    if (problem)
      return cp_contract_error(o, o->cp->mapping, "instance_types", problem, "rule CP4 in docs/contracts.md");
  }
  return NULL;
}

/* The mapping answered for o->nodeclass: a checked list replaces the class's entry (under the
 * generation that computed it) and is answered with the unavailable offerings laid over it. */
static void types_done(op *o, json_t *values, lp_error *err) {
  char *key = class_key_of(o->nodeclass);
  json_t *types = err ? NULL : json_incref(json_array_get(values, 0));
  json_decref(values);
  if (json_is_object(types)) { /* an empty Lua table arrives as {} */
    json_decref(types);
    types = json_array();
  }
  if (!err) err = checked_types(o, types);
  if (err) {
    json_decref(types);
    if (o->refresh) lp_types_cache_refresh_failed(o->cp->types, key);
    free(key);
    cp_finish(o, NULL, err);
    return;
  }
  json_t *view =
      lp_types_cache_put(o->cp->types, key, lp_types_fingerprint(o->nodeclass), o->generation, types);
  free(key);
  cp_finish(o, view, NULL);
}

static void call_instance_types(lp_cloudprovider *cp, const json_t *nodeclass, int refresh,
                                lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  o->nodeclass = json_deep_copy(nodeclass);
  o->refresh = refresh;
  cp_call(o, cp->mapping, "instance_types", cp_ctx_args1(cp, json_incref(o->nodeclass)), types_done);
}

/* A miss being answered by the mapping. Callers that miss the same class under the same inputs
 * meanwhile join it instead of running the mapping again, so a burst of Creates after a class change
 * costs one call. */
struct types_flight {
  struct types_flight *next;
  lp_cloudprovider *cp;
  char *key;
  uint64_t fingerprint, generation;
  size_t n, cap;
  struct types_waiter {
    lp_cp_done_fn done;
    void *ud;
  } * waiters;
};

static void flight_join(struct types_flight *f, lp_cp_done_fn done, void *ud) {
  if (f->n == f->cap) {
    f->cap = f->cap ? 2 * f->cap : 4;
    f->waiters = lp_xrealloc(f->waiters, f->cap * sizeof *f->waiters);
  }
  f->waiters[f->n++] = (struct types_waiter){done, ud};
}

/* Every waiter gets the answer (the shared list, or its own copy of the error). The flight leaves the
 * list before any waiter runs, so a waiter that asks again starts a call of its own. */
static void flight_done(json_t *value, lp_error *err, void *ud) {
  struct types_flight *f = ud, **link = &f->cp->types_flights;
  while (*link != f) link = &(*link)->next;
  *link = f->next;
  for (size_t i = 0; i < f->n; i++) {
    int last = i + 1 == f->n;
    f->waiters[i].done(last ? value : json_incref(value), last || !err ? err : lp_error_copy(err),
                       f->waiters[i].ud);
  }
  free(f->waiters);
  free(f->key);
  free(f);
}

static void answer_miss(lp_cloudprovider *cp, const json_t *nodeclass, char *key, uint64_t fingerprint,
                        uint64_t generation, lp_cp_done_fn done, void *ud) {
  for (struct types_flight *f = cp->types_flights; f; f = f->next)
    if (f->fingerprint == fingerprint && f->generation == generation && strcmp(f->key, key) == 0) {
      flight_join(f, done, ud);
      free(key);
      return;
    }
  struct types_flight *f = lp_xmalloc(sizeof *f);
  *f = (struct types_flight){
      .next = cp->types_flights, .cp = cp, .key = key, .fingerprint = fingerprint, .generation = generation};
  cp->types_flights = f;
  flight_join(f, done, ud);
  call_instance_types(cp, nodeclass, 0, flight_done, f);
}

void lp_cp_get_instance_types(lp_cloudprovider *cp, const json_t *nodeclass, lp_cp_done_fn done, void *ud) {
  char *key = class_key_of(nodeclass);
  remember_class(cp, key, nodeclass);
  json_t *types;
  uint64_t fingerprint = lp_types_fingerprint(nodeclass);
  uint64_t generation = lp_script_host_generation_id(cp->scripts);
  lp_types_state state = lp_types_cache_get(cp->types, key, fingerprint, generation, &types);
  if (state == LP_TYPES_MISS) {
    answer_miss(cp, nodeclass, key, fingerprint, generation, done, ud);
    return;
  }
  free(key);
  if (state == LP_TYPES_STALE) refresh_in_background(cp, nodeclass); /* this caller is answered now */
  cp_finish_soon(cp_op_new(cp, done, ud), types, NULL);
}

/* ---- Delete, Get, List ------------------------------------------------------------------- */

const char *cp_provider_id_of(const json_t *nodeclaim) {
  return json_string_value(json_object_get(json_object_get(nodeclaim, "status"), "providerID"));
}

static void delete_done(op *o, json_t *values, lp_error *err) {
  if (err && strcmp(err->code, "NotFound") == 0) {
    lp_error *gone =
        lp_error_new("NodeClaimNotFound", "instance %s of NodeClaim %s is already gone", o->provider_id,
                     json_string_value(json_object_get(json_object_get(o->nodeclaim, "metadata"), "name")));
    lp_error_free(err);
    cp_finish(o, NULL, gone);
    return;
  }
  json_decref(values);
  if (!err) lp_info(LOGGER, "instance deletion triggered", LPF_STR("provider_id", o->provider_id));
  cp_finish(o, err ? NULL : json_true(), err);
}

/* parse_provider_id(s) -> {instance_id, ...}; then the operation's own call. */
void cp_parsed_for(op *o, json_t *values, lp_error *err, cp_with_id_fn then) {
  if (err) {
    cp_finish(o, NULL,
              lp_error_new("NodeClaimNotFound", "provider ID %s cannot be parsed: %s", o->provider_id,
                           err->message));
    lp_error_free(err);
    return;
  }
  const char *id = json_string_value(json_object_get(json_array_get(values, 0), "instance_id"));
  if (!id || !*id) {
    json_decref(values);
    cp_finish(o, NULL,
              cp_contract_error(o, o->cp->mapping, "parse_provider_id",
                                lp_xstrdup("did not return a table with an instance_id"),
                                "docs/contracts.md#mappings"));
    return;
  }
  then(o, id);
  json_decref(values);
}

static void delete_with_id(op *o, const char *id) {
  cp_call(o, o->cp->mapping, "delete", json_pack("[Os]", o->cp->ctx, id), delete_done);
}
static void delete_parsed(op *o, json_t *values, lp_error *err) {
  cp_parsed_for(o, values, err, delete_with_id);
}

void lp_cp_delete(lp_cloudprovider *cp, const json_t *nodeclaim, lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  o->nodeclaim = json_deep_copy(nodeclaim);
  const char *pid = cp_provider_id_of(nodeclaim);
  if (!pid || !*pid) {
    cp_fail_soon(
        o, lp_error_new("NodeClaimNotFound", "NodeClaim %s has no status.providerID: nothing was launched",
                        json_string_value(json_object_get(json_object_get(nodeclaim, "metadata"), "name"))));
    return;
  }
  o->provider_id = lp_xstrdup(pid);
  cp_call(o, cp->mapping, "parse_provider_id", json_pack("[s]", pid), delete_parsed);
}

/* The instance a mapping `get` (or `get_many`) returned, checked against the instance shape. */
json_t *cp_got_instance(op *o, const char *function, json_t *values, lp_error *err) {
  if (err) {
    if (strcmp(err->code, "NotFound") == 0) {
      lp_error *gone = lp_error_new("NodeClaimNotFound", "instance %s not found", o->provider_id);
      lp_error_free(err);
      err = gone;
    }
    cp_finish(o, NULL, err);
    return NULL;
  }
  json_t *instance = json_array_get(values, 0);
  char *problem = lp_check_instance(instance);
  if (problem) {
    json_decref(values);
    cp_finish(
        o, NULL,
        cp_contract_error(o, o->cp->mapping, function, problem, "docs/contracts.md#the-instance-shape"));
    return NULL;
  }
  return instance;
}

static void get_done(op *o, json_t *values, lp_error *err) {
  json_t *instance = cp_got_instance(o, "get", values, err);
  if (!instance) return;
  if (strcmp(json_string_value(json_object_get(instance, "state")), "terminated") == 0) {
    json_decref(values);
    cp_finish(o, NULL, lp_error_new("NodeClaimNotFound", "instance %s is terminated", o->provider_id));
    return;
  }
  json_t *claim = lp_nodeclaim_for_instance(NULL, instance, NULL, o->provider_id);
  json_decref(values);
  cp_finish(o, claim, NULL);
}

static void instance_done(op *o, json_t *values, lp_error *err) {
  json_t *instance = cp_got_instance(o, "get", values, err);
  if (!instance) return;
  json_incref(instance);
  json_decref(values);
  cp_finish(o, instance, NULL);
}

/* Get and GetInstance: parse_provider_id(provider_id), the mapping's get with the instance ID, then
 * o->got with get's answer (get_done or instance_done). */
static void get_with_id(op *o, const char *id) {
  cp_call(o, o->cp->mapping, "get", json_pack("[Os]", o->cp->ctx, id), o->got);
}
static void get_parsed(op *o, json_t *values, lp_error *err) {
  cp_parsed_for(o, values, err, get_with_id);
}
static void get_then(lp_cloudprovider *cp, const char *provider_id, step_fn got, lp_cp_done_fn done,
                     void *ud) {
  op *o = cp_op_new(cp, done, ud);
  o->provider_id = lp_xstrdup(provider_id);
  o->got = got;
  cp_call(o, cp->mapping, "parse_provider_id", json_pack("[s]", provider_id), get_parsed);
}

void lp_cp_get(lp_cloudprovider *cp, const char *provider_id, lp_cp_done_fn done, void *ud) {
  get_then(cp, provider_id, get_done, done, ud);
}

void lp_cp_get_instance(lp_cloudprovider *cp, const char *provider_id, lp_cp_done_fn done, void *ud) {
  get_then(cp, provider_id, instance_done, done, ud);
}

/* Listing builds a NodeClaim per instance; the provider IDs come from the mapping's provider_id,
 * called for all instances at once (each is a short task; none awaits anything). */
typedef struct list_item {
  op *o;
  size_t index;
} list_item;

static void list_id_done(const lp_task_result *r, void *ud) {
  list_item *item = ud;
  op *o = item->o;
  json_t *values = r->json ? json_loads(r->json, JSON_DECODE_ANY, NULL) : NULL;
  const char *pid = json_string_value(json_array_get(values, 0));
  if (pid && *pid) {
    json_t *instance = json_array_get(o->instance, item->index);
    json_array_set_new(o->candidates, item->index, lp_nodeclaim_for_instance(NULL, instance, NULL, pid));
  } else if (!o->error) {
    o->error = r->error
                   ? lp_error_new(r->error->code, "%s", r->error->message)
                   : cp_contract_error(o, o->cp->mapping, "provider_id",
                                       lp_xstrdup("did not return a string"), "docs/contracts.md#mappings");
  }
  json_decref(values);
  free(item);
  if (--o->next_candidate > 0) return; /* counts the calls still running */
  if (o->error) {
    lp_error *e = o->error;
    o->error = NULL;
    cp_finish(o, NULL, e);
  } else {
    json_t *claims = o->candidates;
    o->candidates = NULL;
    cp_finish(o, claims, NULL);
  }
}

static void list_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  json_t *instances = json_array_get(values, 0);
  if (json_is_object(instances) && json_object_size(instances) == 0) instances = NULL; /* empty table */
  json_t *live = json_array();
  size_t i;
  json_t *instance;
  json_array_foreach(instances, i, instance) {
    char *problem = lp_check_instance(instance);
    if (problem) {
      json_decref(live);
      json_decref(values);
      cp_finish(
          o, NULL,
          cp_contract_error(o, o->cp->mapping, "list", problem, "docs/contracts.md#the-instance-shape"));
      return;
    }
    if (strcmp(json_string_value(json_object_get(instance, "state")), "terminated") != 0)
      json_array_append(live, instance);
  }
  json_decref(values);
  o->instance = live;
  size_t n = json_array_size(live);
  o->candidates = json_array(); /* the NodeClaims, in instance order */
  for (size_t k = 0; k < n; k++) json_array_append_new(o->candidates, json_null());
  if (n == 0) {
    json_t *claims = o->candidates;
    o->candidates = NULL;
    cp_finish(o, claims, NULL);
    return;
  }
  o->next_candidate = n;
  for (size_t k = 0; k < n; k++) {
    list_item *item = lp_xmalloc(sizeof *item);
    item->o = o;
    item->index = k;
    lp_script_host_call(o->cp->scripts, o->cp->mapping, "provider_id",
                        json_pack("[O]", json_array_get(live, k)), list_id_done, item);
  }
}

void lp_cp_list(lp_cloudprovider *cp, lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  cp_call(o, cp->mapping, "list", json_pack("[O]", cp->ctx), list_done);
}

/* ---- RepairPolicies --------------------------------------------------------------------- */

static void repair_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  json_t *list = json_array_get(values, 0);
  /* the check and the words of `luaprov eval` and load-time validation, at the policy's file:line */
  char *problem = lp_repair_answer_problem(list);
  if (problem) {
    json_decref(values);
    lp_error *e = lp_policy_answer_error(lp_script_host_current(o->cp->scripts), "policies.repair",
                                         "policies", problem);
    free(problem);
    cp_finish(o, NULL, e);
    return;
  }
  json_t *out = json_is_array(list) ? json_incref(list) : json_array();
  json_decref(values);
  cp_finish(o, out, NULL);
}

void lp_cp_repair_policies(lp_cloudprovider *cp, lp_cp_done_fn done, void *ud) {
  op *o = cp_op_new(cp, done, ud);
  cp_call(o, "policies.repair", "policies", json_pack("[O]", cp->ctx), repair_done);
}
