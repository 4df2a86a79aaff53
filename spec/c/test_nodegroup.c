/* The NodeGroup contract (rules NG1-NG6, docs/contracts.md) through lp_nodegroups, against a fake
 * mapping written as an operator's script tree (providers/bizfly/init.lua returning canned snapshots
 * and recording every call), so that every rule is checked on exact inputs. test_nodegroup_sim.c runs
 * the real mapping against the Bizfly simulator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "contract/contracts.h"
#include "contract/nodegroup.h"
#include "core/cache.h"
#include "core/log.h"
#include "core/metrics.h"
#include "log_capture.h"

static uv_loop_t loop;
static lp_script_host *scripts;
static lp_nodegroups *ng;
static char tree[64];

/* The fake mapping: state comes from the test (test_load), calls are recorded (test_state). */
static const char fake_mapping[] =
    "local M = { name = 'bizflycloud', gpu_label = 'bke.bizflycloud.vn/gpu-node' }\n"
    "local state = { groups = {}, calls = {} }\n"
    "local function record(call) state.calls[#state.calls + 1] = call end\n"
    "local function group(id)\n"
    "  for _, g in ipairs(state.groups) do if g.id == id then return g end end\n"
    "end\n"
    "function M.test_load(s) state = s; state.calls = {}; M.template_node = (not s.no_template) and "
    "M.real_template or nil; return true end\n"
    "function M.test_state() return state end\n"
    "function M.refresh(ctx)\n"
    "  record { fn = 'refresh', cluster = ctx.cluster or '', endpoint = ctx.endpoint or '' }\n"
    "  if state.fail_refresh then return nil, state.fail_refresh end\n"
    "  if state.raw ~= nil then return state.raw end\n"
    "  return state.groups\n"
    "end\n"
    "function M.set_target_size(ctx, id, n)\n"
    "  record { fn = 'set_target_size', id = id, n = n }\n"
    "  if state.fail_set then return nil, state.fail_set end\n"
    "  group(id).target_size = n\n"
    "  return true\n"
    "end\n"
    "function M.delete_node(ctx, id, node)\n"
    "  record { fn = 'delete_node', id = id, provider_id = node.provider_id, name = node.name,\n"
    "           node_id = node.labels['bke.bizflycloud.vn/node-id'] or '' }\n"
    "  if state.fail_delete == node.provider_id then return nil, { code = 'Throttled', message = 'random "
    "error' } end\n"
    "  local g = group(id)\n"
    "  for i, n in ipairs(g.nodes) do if n.provider_id == node.provider_id then table.remove(g.nodes, i) "
    "break end end\n"
    "  g.target_size = g.target_size - 1\n"
    "  return true\n"
    "end\n"
    "function M.real_template(ctx, id)\n"
    "  record { fn = 'template_node', id = id }\n"
    "  local t = state.templates and state.templates[id]\n"
    "  if not t then return nil, { code = 'NotFound', message = 'pool ' .. id .. ' has no flavor' } end\n"
    "  return t\n"
    "end\n"
    "M.template_node = M.real_template\n"
    "return M\n";

/* Two pools as refresh returns them; pool-b has a node failing to create. */
static const char two_pools[] =
    "{\"groups\": ["
    " {\"id\": \"pool-a\", \"min_size\": 1, \"max_size\": 10, \"target_size\": 3, \"debug\": \"pool-a (min:1 "
    "max:10)\","
    "  \"nodes\": [{\"provider_id\": \"bizflycloud://a1\", \"state\": \"running\"},"
    "             {\"provider_id\": \"bizflycloud://a2\", \"state\": \"running\"},"
    "             {\"provider_id\": \"bizflycloud://a3\", \"state\": \"creating\"}]},"
    " {\"id\": \"pool-b\", \"min_size\": 0, \"max_size\": 5, \"target_size\": 2,"
    "  \"nodes\": [{\"provider_id\": \"bizflycloud://b1\", \"state\": \"running\"},"
    "             {\"provider_id\": \"bizflycloud://b2\", \"state\": \"creating\","
    "              \"error\": {\"class\": \"OutOfResources\", \"code\": \"QuotaExceeded\", \"message\": \"no "
    "quota\"}}]}"
    "]}";

/* ---- helpers ------------------------------------------------------------------------------ */

/* An operator's tree holding only providers/bizfly/init.lua; dir receives its path. */
static int write_tree(char *dir, size_t cap, const char *mapping) {
  snprintf(dir, cap, "/tmp/luaprov-ng-XXXXXX");
  char path[256];
  if (!mkdtemp(dir)) return -1;
  snprintf(path, sizeof path, "mkdir -p %s/providers/bizfly", dir);
  if (system(path) != 0) return -1;
  snprintf(path, sizeof path, "%s/providers/bizfly/init.lua", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(mapping, f);
  return fclose(f);
}

static json_t *fake(const char *function, json_t *args) {
  lp_task_result *r = lp_script_host_call_sync(scripts, "providers.bizfly", function, args);
  json_t *v = r->json ? json_loads(r->json, JSON_DECODE_ANY, NULL) : NULL;
  if (r->error) fprintf(stderr, "fake %s: %s\n", function, r->error->message);
  lp_task_result_free(r);
  json_t *first = json_incref(json_array_get(v, 0));
  json_decref(v);
  return first;
}

/* Loads a state (JSON text) into the fake mapping and forgets the calls so far. */
static void load(const char *state_json) {
  json_t *state = json_loads(state_json, 0, NULL);
  if (!state) fprintf(stderr, "bad test state: %s\n", state_json);
  json_decref(fake("test_load", json_pack("[o]", state)));
}

/* How many calls of function the fake saw since the last load; *last gets the last one (borrowed
 * from the returned state, which the caller decrefs), when last is not NULL. */
static size_t calls_of(const char *function, json_t **state_out, json_t **last) {
  json_t *state = fake("test_state", NULL);
  size_t n = 0, i;
  json_t *call;
  json_array_foreach(json_object_get(state, "calls"), i, call) {
    if (strcmp(json_string_value(json_object_get(call, "fn")), function) == 0) {
      n++;
      if (last) *last = call;
    }
  }
  if (state_out)
    *state_out = state;
  else
    json_decref(state);
  return n;
}

/* Runs one operation to its end; returns its error code or NULL, and the message in last_message. */
static char last_message[1024];

static const char *outcome_code(lp_ng_outcome *o) {
  static char code[64];
  lp_ng_outcome_wait(&loop, o);
  last_message[0] = 0;
  if (!o->error) return NULL;
  snprintf(code, sizeof code, "%s", o->error->code);
  snprintf(last_message, sizeof last_message, "%s", o->error->message);
  lp_error_free(o->error);
  o->error = NULL;
  return code;
}

static const char *refresh(void) {
  lp_ng_outcome o = {0};
  lp_ng_refresh(ng, lp_ng_outcome_store, &o);
  return outcome_code(&o);
}

typedef void (*resize_fn)(lp_nodegroups *, const char *, int, lp_ng_done_fn, void *);
static const char *resize(resize_fn fn, const char *id, int delta) {
  lp_ng_outcome o = {0};
  fn(ng, id, delta, lp_ng_outcome_store, &o);
  return outcome_code(&o);
}
#define increase(id, delta) resize(lp_ng_increase_size, id, delta)
#define decrease(id, delta) resize(lp_ng_decrease_target_size, id, delta)

static const char *delete_nodes(const char *id, const char *nodes_json) {
  lp_ng_outcome o = {0};
  json_t *nodes = json_loads(nodes_json, 0, NULL);
  lp_ng_delete_nodes(ng, id, nodes, lp_ng_outcome_store, &o);
  json_decref(nodes);
  return outcome_code(&o);
}

static int target_of(const char *id) {
  const lp_ng_group *g = lp_ng_find(ng, id);
  return g ? g->target_size : -1;
}

#define refresh_count(result)                                                                                \
  lp_metric_value(lp_metrics_counter(lp_metrics_default(), "luaprov_nodegroup_refresh_total", NULL,          \
                                     LP_LABELS("result")),                                                   \
                  LP_LABELS(result))

#define gauge(name) lp_metric_value(lp_metrics_find(lp_metrics_default(), name), NULL)

static lp_nodegroups *new_nodegroups(double max_stale_s) {
  lp_nodegroups_config cfg = {&loop,      scripts, NULL, "ke1m4ea3j8w6kkvp", "http://127.0.0.1:9/kaas",
                              max_stale_s};
  return lp_nodegroups_new(&cfg);
}

/* ---- the snapshot: Refresh and the readers ------------------------------------------------ */

static void test_refresh_and_readers(void) {
  load(two_pools);
  CHECK(!lp_ng_has_snapshot(ng));
  CHECK(refresh() == NULL);
  json_t *state, *call = NULL;
  CHECK_INT(calls_of("refresh", &state, &call), 1);
  CHECK_STR(json_string_value(json_object_get(call, "cluster")), "ke1m4ea3j8w6kkvp"); /* ctx */
  CHECK_STR(json_string_value(json_object_get(call, "endpoint")), "http://127.0.0.1:9/kaas");
  json_decref(state);
  CHECK_INT(lp_ng_count(ng), 2);
  /* the gauges count the snapshot: 2 groups, 3 + 2 instances */
  CHECK(gauge("luaprov_nodegroup_groups") == 2);
  CHECK(gauge("luaprov_nodegroup_instances") == 5);
  const lp_ng_group *a = lp_ng_at(ng, 0), *b = lp_ng_find(ng, "pool-b");
  CHECK_STR(a->id, "pool-a");
  CHECK_INT(a->min_size, 1);
  CHECK_INT(a->max_size, 10);
  CHECK_INT(a->target_size, 3);
  CHECK_STR(a->debug, "pool-a (min:1 max:10)");
  CHECK_STR(b->debug, "pool-b (min:0 max:5)"); /* a default when the mapping gives none */
  CHECK_INT(a->ninstances, 3);
  CHECK_INT(a->instances[2].state, LP_NG_CREATING);
  CHECK_INT(b->instances[1].error_class, LP_NG_OUT_OF_RESOURCES);
  CHECK_STR(b->instances[1].error_code, "QuotaExceeded");
  CHECK_STR(b->instances[1].error_message, "no quota");
  CHECK_STR(b->instances[0].error_code, "");
  /* NodeGroupForNode: by providerID; unmanaged nodes have none */
  CHECK(lp_ng_for_node(ng, "bizflycloud://b1") == b);
  CHECK(lp_ng_for_node(ng, "bizflycloud://a3") == lp_ng_find(ng, "pool-a"));
  CHECK(lp_ng_for_node(ng, "bizflycloud://elsewhere") == NULL);
  CHECK(lp_ng_for_node(ng, "") == NULL);
  CHECK(lp_ng_find(ng, "pool-z") == NULL);
  /* the readers never call the mapping */
  for (int i = 0; i < 100; i++) (void)target_of("pool-a");
  CHECK_INT(calls_of("refresh", NULL, NULL), 1);
  CHECK(lp_ng_snapshot_age(ng) >= 0 && lp_ng_snapshot_age(ng) < 5);
  char *name = lp_nodegroups_name(ng), *gpu = lp_nodegroups_gpu_label(ng);
  CHECK_STR(name, "bizflycloud");
  CHECK_STR(gpu, "bke.bizflycloud.vn/gpu-node");
  free(name);
  free(gpu);
  /* a new snapshot replaces the old one wholesale */
  load("{\"groups\": [{\"id\": \"pool-c\", \"min_size\": 0, \"max_size\": 2, \"target_size\": 0, \"nodes\": "
       "{}}]}");
  CHECK(refresh() == NULL);
  CHECK_INT(lp_ng_count(ng), 1);
  CHECK(lp_ng_for_node(ng, "bizflycloud://b1") == NULL);
  CHECK_INT(lp_ng_find(ng, "pool-c")->ninstances, 0);
  CHECK(gauge("luaprov_nodegroup_groups") == 1);
  CHECK(gauge("luaprov_nodegroup_instances") == 0);
  /* an empty cluster is a valid snapshot */
  load("{\"groups\": {}}");
  CHECK(refresh() == NULL);
  CHECK_INT(lp_ng_count(ng), 0);
}

/* Concurrent refreshes share one mapping call; an operation without a snapshot refreshes first. */
static void test_refresh_coalesces(void) {
  lp_nodegroups *fresh = new_nodegroups(0);
  load(two_pools);
  lp_ng_outcome o[3] = {{0}};
  lp_ng_refresh(fresh, lp_ng_outcome_store, &o[0]);
  lp_ng_refresh(fresh, lp_ng_outcome_store, &o[1]);
  lp_ng_increase_size(fresh, "pool-a", 1, lp_ng_outcome_store, &o[2]);
  CHECK(!o[0].done && !o[2].done); /* never inside the call */
  for (int i = 0; i < 3; i++) {
    lp_ng_outcome_wait(&loop, &o[i]);
    CHECK(o[i].error == NULL);
  }
  CHECK_INT(calls_of("refresh", NULL, NULL), 1);
  CHECK_INT(calls_of("set_target_size", NULL, NULL), 1);
  CHECK_INT(lp_ng_find(fresh, "pool-a")->target_size, 4);
  lp_nodegroups_free(fresh);
}

/* Rule NG1: a Bizfly failure during Refresh with a usable snapshot keeps serving it. */
static void test_refresh_failure(void) {
  load(two_pools);
  CHECK(refresh() == NULL);
  double stale_before = refresh_count("stale");
  load("{\"fail_refresh\": {\"code\": \"Unavailable\", \"message\": \"KaaS answered 503\"}, \"groups\": []}");
  CHECK(refresh() == NULL);
  CHECK(refresh_count("stale") == stale_before + 1);
  CHECK_INT(lp_ng_count(ng), 2); /* still the last good snapshot */
  CHECK_INT(target_of("pool-a"), 3);

  /* without a snapshot the failure is Refresh's answer */
  lp_nodegroups *fresh = new_nodegroups(0);
  lp_ng_outcome o = {0};
  lp_ng_refresh(fresh, lp_ng_outcome_store, &o);
  CHECK_STR(outcome_code(&o), "Unavailable");
  CHECK_CONTAINS(last_message, "KaaS answered 503");
  CHECK(!lp_ng_has_snapshot(fresh));
  /* and an operation that needed one fails with it */
  o = (lp_ng_outcome){0};
  lp_ng_increase_size(fresh, "pool-a", 1, lp_ng_outcome_store, &o);
  CHECK_STR(outcome_code(&o), "Unavailable");
  lp_nodegroups_free(fresh);

  /* a snapshot older than max_stale_s is not usable */
  fresh = new_nodegroups(0.05);
  load(two_pools);
  o = (lp_ng_outcome){0};
  lp_ng_refresh(fresh, lp_ng_outcome_store, &o);
  CHECK(outcome_code(&o) == NULL);
  usleep(100 * 1000);
  load("{\"fail_refresh\": {\"code\": \"Throttled\", \"message\": \"slow down\"}, \"groups\": []}");
  o = (lp_ng_outcome){0};
  lp_ng_refresh(fresh, lp_ng_outcome_store, &o);
  CHECK_STR(outcome_code(&o), "Throttled");
  CHECK_CONTAINS(last_message, "the last snapshot is too old");
  lp_nodegroups_free(fresh);
}

/* A mapping that breaks the contract gets an error naming its file and the rule; the old snapshot
 * stays for the readers. */
static void test_refresh_contract(void) {
  static const struct {
    const char *state, *expect, *rule;
  } cases[] = {
      {"{\"raw\": \"pools\"}", "returned something else instead of a list", "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"min_size\": 0, \"max_size\": 1, \"target_size\": 0}]}", "node group 1 has no id string",
       "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 0, \"max_size\": 1, \"target_size\": 0}, {\"id\": \"p\", "
       "\"min_size\": 0, \"max_size\": 1, \"target_size\": 0}]}",
       "node group id 'p' is listed twice", "(docs/contracts.md#nodegroup-rules)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 5, \"max_size\": 3, \"target_size\": 4}]}",
       "node group 1 ('p'): min_size 5 is above max_size 3", "(docs/contracts.md#nodegroup-rules)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": -1, \"max_size\": 3, \"target_size\": 0}]}",
       "min_size is not a whole number >= 0", "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 1.5}]}",
       "target_size is not a whole number >= 0", "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 1, \"nodes\": "
       "[{\"state\": "
       "\"running\"}]}]}",
       "nodes[1] has no provider_id string", "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 1, \"nodes\": "
       "[{\"provider_id\": \"x://1\", \"state\": \"ACTIVE\"}]}]}",
       "node x://1: state 'ACTIVE' is not \"running\", \"creating\" or \"deleting\"",
       "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 1, \"nodes\": "
       "[{\"provider_id\": \"x://1\", \"state\": \"creating\", \"error\": {\"class\": \"Quota\", \"code\": "
       "\"q\"}}]}]}",
       "error.class 'Quota' is not \"OutOfResources\" or \"Other\"", "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 1, \"nodes\": "
       "[{\"provider_id\": \"x://1\", \"state\": \"creating\", \"error\": {\"class\": \"Other\"}}]}]}",
       "error.code is not a non-empty string", "(docs/contracts.md#mappings)"},
      {"{\"raw\": [{\"id\": \"p\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 1, \"nodes\": "
       "[{\"provider_id\": \"x://1\", \"state\": \"running\"}]}, {\"id\": \"q\", \"min_size\": 0, "
       "\"max_size\": "
       "3, \"target_size\": 1, \"nodes\": [{\"provider_id\": \"x://1\", \"state\": \"running\"}]}]}",
       "provider ID x://1 is listed in node groups 'p' and 'q'", "(docs/contracts.md#nodegroup-rules)"},
  };
  load(two_pools);
  CHECK(refresh() == NULL);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    load(cases[i].state);
    const char *code = refresh();
    CHECK(code && strcmp(code, "Contract") == 0);
    CHECK_CONTAINS(last_message, "providers/bizfly/init.lua: refresh: ");
    CHECK_CONTAINS(last_message, cases[i].expect);
    CHECK_CONTAINS(last_message, cases[i].rule);
  }
  CHECK_INT(lp_ng_count(ng), 2); /* the last good snapshot */
  /* a target outside [min, max] is accepted (and logged): the cloud may report one */
  load("{\"groups\": [{\"id\": \"p\", \"min_size\": 2, \"max_size\": 3, \"target_size\": 0}]}");
  CHECK(refresh() == NULL);
  CHECK_INT(target_of("p"), 0);
}

/* ---- IncreaseSize, DecreaseTargetSize ----------------------------------------------------- */

static void test_increase_size(void) {
  load(two_pools);
  CHECK(refresh() == NULL);
  CHECK_STR(increase("pool-a", 0), "InvalidArgument");
  CHECK_STR(last_message, "delta must be positive, have: 0");
  CHECK_STR(increase("pool-a", -1), "InvalidArgument");
  CHECK_STR(last_message, "delta must be positive, have: -1");
  CHECK_STR(increase("pool-a", 8), "FailedPrecondition");
  CHECK_STR(last_message, "size increase is too large. current: 3 desired: 11 max: 10");
  CHECK_STR(increase("pool-z", 1), "NotFound");
  CHECK_STR(last_message, "NodeGroup \"pool-z\", not found");
  CHECK_INT(calls_of("set_target_size", NULL, NULL), 0); /* nothing reached the cloud */
  CHECK(increase("pool-a", 7) == NULL);                  /* up to max exactly */
  json_t *state, *call = NULL;
  CHECK_INT(calls_of("set_target_size", &state, &call), 1);
  CHECK_STR(json_string_value(json_object_get(call, "id")), "pool-a");
  CHECK_INT(json_integer_value(json_object_get(call, "n")), 10);
  json_decref(state);
  CHECK_INT(target_of("pool-a"), 10); /* the snapshot follows without a refresh */
  CHECK_STR(increase("pool-a", 1), "FailedPrecondition");
  CHECK_STR(last_message, "size increase is too large. current: 10 desired: 11 max: 10");
  /* the cloud's refusal is passed through with its code; the target stays */
  load("{\"fail_set\": {\"code\": \"Throttled\", \"message\": \"429 Too Many Requests\"}, \"groups\": []}");
  log_capture_start(LP_LOG_WARN);
  CHECK_STR(increase("pool-b", 1), "Throttled");
  CHECK_STR(increase("pool-b", 9), "FailedPrecondition"); /* the engine's own rule: not warned about */
  json_t *lines = log_capture_stop(NULL);
  CHECK_CONTAINS(last_message, "size increase is too large");
  CHECK_INT(target_of("pool-b"), 2);
  /* a refusal without an API call to name (no method and path): the mapping function stands for it */
  CHECK_INT(json_array_size(lines), 1);
  const json_t *line = log_capture_line(lines, "node group resize failed", 0);
  CHECK_STR(json_string_value(json_object_get(line, "level")), "warn");
  CHECK_STR(json_string_value(json_object_get(line, "node_group")), "pool-b");
  CHECK_STR(json_string_value(json_object_get(line, "rpc")), "NodeGroupIncreaseSize");
  CHECK_STR(json_string_value(json_object_get(line, "action")), "set_target_size");
  CHECK_STR(json_string_value(json_object_get(line, "code")), "Throttled");
  CHECK_STR(json_string_value(json_object_get(line, "error")), "429 Too Many Requests");
  CHECK(json_object_get(line, "request_id") == NULL);
  json_decref(lines);
  CHECK_STR(increase("pool-b", 1), "Throttled");
  CHECK_CONTAINS(last_message,
                 "setting the target size of node group pool-b to 3 failed: 429 Too Many Requests");
}

static void test_decrease_target_size(void) {
  load(
      "{\"groups\": [{\"id\": \"pool-a\", \"min_size\": 1, \"max_size\": 10, \"target_size\": 6, \"nodes\": ["
      "{\"provider_id\": \"bizflycloud://a1\", \"state\": \"running\"},"
      "{\"provider_id\": \"bizflycloud://a2\", \"state\": \"creating\"},"
      "{\"provider_id\": \"bizflycloud://a3\", \"state\": \"deleting\"}]},"
      "{\"id\": \"pool-e\", \"min_size\": 2, \"max_size\": 5, \"target_size\": 3, \"nodes\": {}}]}");
  CHECK(refresh() == NULL);
  CHECK_STR(decrease("pool-a", 1), "InvalidArgument");
  CHECK_STR(last_message, "delta must be negative, have: 1");
  CHECK_STR(decrease("pool-a", 0), "InvalidArgument");
  CHECK_STR(last_message, "delta must be negative, have: 0");
  /* never below the instances that exist (a deleting one does not count) */
  CHECK_STR(decrease("pool-a", -5), "FailedPrecondition");
  CHECK_STR(last_message, "attempt to delete existing nodes targetSize:6 delta:-5 existingNodes: 2");
  /* nor below min */
  CHECK_STR(decrease("pool-e", -2), "FailedPrecondition");
  CHECK_STR(last_message, "size decrease is too small. current: 3 desired: 1 min: 2");
  CHECK_STR(decrease("pool-x", -1), "NotFound");
  CHECK_INT(calls_of("set_target_size", NULL, NULL), 0);
  CHECK(decrease("pool-a", -4) == NULL); /* down to the 2 live instances exactly */
  CHECK_INT(target_of("pool-a"), 2);
  CHECK(decrease("pool-e", -1) == NULL);
  CHECK_INT(target_of("pool-e"), 2);
  CHECK_INT(calls_of("set_target_size", NULL, NULL), 2);
}

/* ---- DeleteNodes -------------------------------------------------------------------------- */

static void test_delete_nodes(void) {
  load(two_pools);
  CHECK(refresh() == NULL);
  /* a node of another group, or one luaprov does not manage: refused, nothing deleted */
  CHECK_STR(delete_nodes("pool-a", "[{\"provider_id\": \"bizflycloud://a1\", \"name\": \"n-a1\"},"
                                   " {\"provider_id\": \"bizflycloud://b1\", \"name\": \"n-b1\"}]"),
            "FailedPrecondition");
  CHECK_STR(last_message,
            "node n-b1 (provider ID bizflycloud://b1) belongs to node group pool-b, not pool-a");
  CHECK_STR(delete_nodes("pool-a", "[{\"provider_id\": \"bizflycloud://zz\", \"name\": \"n-zz\"}]"),
            "FailedPrecondition");
  CHECK_STR(last_message, "node n-zz (provider ID bizflycloud://zz) is not in node group pool-a");
  CHECK_STR(delete_nodes("pool-a", "[{\"name\": \"n-none\"}]"), "InvalidArgument");
  CHECK_CONTAINS(last_message, "node n-none has no providerID");
  CHECK_STR(delete_nodes("pool-q", "[{\"provider_id\": \"bizflycloud://a1\"}]"), "NotFound");
  CHECK_INT(calls_of("delete_node", NULL, NULL), 0);

  /* a node with the node-id label, and a fake node for an unregistered instance (no labels at all,
   * name = providerID) matched by providerID; one by one, the target following */
  CHECK(delete_nodes("pool-a",
                     "[{\"provider_id\": \"bizflycloud://a1\", \"name\": \"n-a1\", \"labels\": "
                     "{\"bke.bizflycloud.vn/node-id\": \"node-uuid-1\"}},"
                     " {\"provider_id\": \"bizflycloud://a3\", \"name\": \"bizflycloud://a3\"},"
                     " {\"provider_id\": \"bizflycloud://a3\", \"name\": \"bizflycloud://a3\"}]") == NULL);
  json_t *state;
  CHECK_INT(calls_of("delete_node", &state, NULL), 2); /* the duplicate is deleted once */
  json_t *calls = json_object_get(state, "calls");     /* refresh, then the deletions */
  CHECK_STR(json_string_value(json_object_get(json_array_get(calls, 1), "node_id")), "node-uuid-1");
  CHECK_STR(json_string_value(json_object_get(json_array_get(calls, 1), "id")), "pool-a");
  CHECK_STR(json_string_value(json_object_get(json_array_get(calls, 2), "provider_id")), "bizflycloud://a3");
  CHECK_STR(json_string_value(json_object_get(json_array_get(calls, 2), "node_id")), "");
  json_decref(state);
  CHECK_INT(target_of("pool-a"), 1);
  const lp_ng_group *a = lp_ng_find(ng, "pool-a");
  CHECK_INT(a->instances[0].state, LP_NG_DELETING); /* until the next refresh drops it */

  /* the first failure stops the run: earlier deletions stay, later nodes are not attempted */
  load("{\"fail_delete\": \"bizflycloud://b2\", \"groups\": [{\"id\": \"pool-b\", \"min_size\": 0, "
       "\"max_size\": 5, \"target_size\": 3, \"nodes\": [{\"provider_id\": \"bizflycloud://b1\", \"state\": "
       "\"running\"}, {\"provider_id\": \"bizflycloud://b2\", \"state\": \"running\"}, {\"provider_id\": "
       "\"bizflycloud://b3\", \"state\": \"running\"}]}]}");
  CHECK(refresh() == NULL);
  log_capture_start(LP_LOG_WARN);
  CHECK_STR(delete_nodes("pool-b", "[{\"provider_id\": \"bizflycloud://b1\", \"name\": \"n1\"},"
                                   " {\"provider_id\": \"bizflycloud://b2\", \"name\": \"n2\"},"
                                   " {\"provider_id\": \"bizflycloud://b3\", \"name\": \"n3\"}]"),
            "Throttled");
  json_t *lines = log_capture_stop(NULL);
  const json_t *line = log_capture_line(lines, "node group resize failed", 0);
  CHECK_STR(json_string_value(json_object_get(line, "rpc")), "NodeGroupDeleteNodes");
  CHECK_STR(json_string_value(json_object_get(line, "action")), "delete_node");
  CHECK_STR(json_string_value(json_object_get(line, "node")), "n2");
  CHECK_STR(json_string_value(json_object_get(line, "provider_id")), "bizflycloud://b2");
  CHECK_INT(json_integer_value(json_object_get(line, "deleted")), 1);
  json_decref(lines);
  CHECK_STR(last_message,
            "deleting node n2 (provider ID bizflycloud://b2) of node group pool-b failed: random "
            "error (1 of 3 nodes deleted)");
  CHECK_INT(calls_of("delete_node", NULL, NULL), 2);
  CHECK_INT(target_of("pool-b"), 2);
}

/* Mutations of one group run in order, each from the target the previous one left; another group
 * is not held up. */
static void test_mutations_in_order(void) {
  load(two_pools);
  CHECK(refresh() == NULL);
  lp_ng_outcome o[4] = {{0}};
  lp_ng_increase_size(ng, "pool-a", 4, lp_ng_outcome_store, &o[0]);
  lp_ng_increase_size(ng, "pool-a", 3, lp_ng_outcome_store, &o[1]);
  lp_ng_increase_size(ng, "pool-a", 1, lp_ng_outcome_store, &o[2]); /* 3+4+3 = 10 = max: this one fails */
  lp_ng_increase_size(ng, "pool-b", 1, lp_ng_outcome_store, &o[3]);
  lp_ng_outcome_wait(&loop, &o[3]);
  CHECK(o[3].error == NULL);
  CHECK(!o[2].done);
  for (int i = 0; i < 3; i++) lp_ng_outcome_wait(&loop, &o[i]);
  CHECK(o[0].error == NULL && o[1].error == NULL);
  CHECK(o[2].error &&
        strcmp(o[2].error->message, "size increase is too large. current: 10 desired: 11 max: 10") == 0);
  lp_error_free(o[2].error);
  CHECK_INT(target_of("pool-a"), 10);
  CHECK_INT(target_of("pool-b"), 3);
}

/* ---- TemplateNodeInfo --------------------------------------------------------------------- */

static json_t *template_of(const char *id, const char **code) {
  lp_ng_outcome o = {0};
  lp_ng_template_node(ng, id, lp_ng_outcome_node, &o);
  json_t *node = NULL;
  lp_ng_outcome_wait(&loop, &o);
  node = o.node;
  *code = outcome_code(&o);
  return node;
}

static void test_template_node(void) {
  load("{\"groups\": [{\"id\": \"pool-a\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 0}, {\"id\": "
       "\"pool-g\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 0}, {\"id\": \"pool-x\", "
       "\"min_size\": 0, "
       "\"max_size\": 3, \"target_size\": 0}],"
       "\"templates\": {\"pool-a\": {\"labels\": {\"bke.bizflycloud.vn/pool-name\": \"pool-a\", "
       "\"node.kubernetes.io/instance-type\": \"nix.2c_2g\"}, \"taints\": [{\"key\": \"dedicated\", "
       "\"value\": "
       "\"ml\", \"effect\": \"NoSchedule\"}], \"capacity\": {\"cpu\": \"2\", \"memory\": \"2Gi\", \"pods\": "
       "110}},"
       "\"pool-x\": {\"capacity\": {\"cpu\": \"two\"}}}}");
  CHECK(refresh() == NULL);
  const char *code;
  json_t *node = template_of("pool-a", &code);
  CHECK(code == NULL);
  const json_t *md = json_object_get(node, "metadata"), *labels = json_object_get(md, "labels");
  CHECK_STR(json_string_value(json_object_get(md, "name")), "template-pool-a");
  CHECK_STR(json_string_value(json_object_get(labels, "kubernetes.io/os")), "linux");
  CHECK_STR(json_string_value(json_object_get(labels, "kubernetes.io/arch")), "amd64");
  CHECK_STR(json_string_value(json_object_get(labels, "kubernetes.io/hostname")), "template-pool-a");
  CHECK_STR(json_string_value(json_object_get(labels, "bke.bizflycloud.vn/pool-name")), "pool-a");
  const json_t *taint = json_array_get(json_object_get(json_object_get(node, "spec"), "taints"), 0);
  CHECK_STR(json_string_value(json_object_get(taint, "effect")), "NoSchedule");
  const json_t *status = json_object_get(node, "status");
  CHECK_STR(json_string_value(json_object_get(json_object_get(status, "capacity"), "pods")), "110");
  CHECK_STR(json_string_value(json_object_get(json_object_get(status, "allocatable"), "memory")), "2Gi");
  const json_t *ready = json_array_get(json_object_get(status, "conditions"), 0);
  CHECK_STR(json_string_value(json_object_get(ready, "type")), "Ready");
  CHECK_STR(json_string_value(json_object_get(ready, "status")), "True");
  json_decref(node);
  /* NotFound from the mapping, an unknown group, a broken template */
  CHECK(template_of("pool-g", &code) == NULL);
  CHECK_STR(code, "Unimplemented");
  CHECK_CONTAINS(last_message, "pool pool-g has no flavor");
  template_of("pool-q", &code);
  CHECK_STR(code, "NotFound");
  template_of("pool-x", &code);
  CHECK_STR(code, "Contract");
  CHECK_CONTAINS(last_message,
                 "providers/bizfly/init.lua: template_node: capacity.cpu: 'two' is not a Kubernetes "
                 "quantity (docs/contracts.md#mappings)");
  /* a mapping without template_node */
  load("{\"no_template\": true, \"groups\": [{\"id\": \"pool-a\", \"min_size\": 0, \"max_size\": 3, "
       "\"target_size\": 0}]}");
  CHECK(refresh() == NULL);
  template_of("pool-a", &code);
  CHECK_STR(code, "Unimplemented");
  CHECK_INT(calls_of("template_node", NULL, NULL), 0);
}

/* ---- shutdown ----------------------------------------------------------------------------- */

static void test_shutdown(void) {
  lp_nodegroups *closing = new_nodegroups(0);
  load(two_pools);
  lp_ng_outcome o = {0};
  lp_ng_refresh(closing, lp_ng_outcome_store, &o);
  CHECK(outcome_code(&o) == NULL);
  lp_nodegroups_shutdown(closing);
  o = (lp_ng_outcome){0};
  lp_ng_increase_size(closing, "pool-a", 1, lp_ng_outcome_store, &o);
  CHECK_STR(outcome_code(&o), "Cancelled");
  CHECK_INT(lp_nodegroups_in_flight(closing), 0);
  CHECK_INT(calls_of("set_target_size", NULL, NULL), 0);
  lp_nodegroups_free(closing);
}

int main(void) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  uv_loop_init(&loop);
  if (write_tree(tree, sizeof tree, fake_mapping) != 0) return 1;
  lp_script_host_config cfg = {
      .loop = &loop, .scripts_dir = tree, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules};
  lp_problems problems = {0};
  scripts = lp_script_host_new(&cfg, &problems);
  if (!scripts) {
    fprintf(stderr, "%s", lp_problems_render(&problems));
    return 1;
  }
  ng = new_nodegroups(0);

  RUN(test_refresh_and_readers);
  RUN(test_refresh_coalesces);
  RUN(test_refresh_failure);
  RUN(test_refresh_contract);
  RUN(test_increase_size);
  RUN(test_decrease_target_size);
  RUN(test_delete_nodes);
  RUN(test_mutations_in_order);
  RUN(test_template_node);
  RUN(test_shutdown);

  lp_nodegroups_free(ng);
  lp_script_host_close(scripts, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", tree);
  CHECK(system(rm) == 0);
  lp_cache_registry_clear();
  return check_summary();
}
