/* The optional exports of the NodeGroup mapping (docs/contracts.md#mappings): get_options, node_price and
 * pod_price, through lp_nodegroups, against an operator's tree whose providers/bizfly/init.lua wraps
 * the default mapping (refresh replaced by canned groups, the three functions added and recording
 * their calls). The same answers over gRPC: spec/grpc/externalgrpc_test.js. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "contract/contracts.h"
#include "contract/nodegroup.h"
#include "core/cache.h"
#include "core/log.h"

static uv_loop_t loop;
static lp_script_host *scripts;
static lp_nodegroups *ng;
static char tree[64];

static const char mapping[] =
    "local default = require \"defaults.providers.bizfly\"\n"
    "local M = {}\n"
    "for k, v in pairs(default) do M[k] = v end\n"
    "local state = { calls = {} }\n"
    "local function record(call) state.calls[#state.calls + 1] = call end\n"
    "function M.test_state() return state end\n"
    "function M.refresh(_ctx)\n"
    "  record { fn = \"refresh\" }\n"
    "  return state.groups\n"
    "end\n"
    "function M.real_get_options(ctx, id, defaults)\n"
    "  record { fn = \"get_options\", id = id, defaults = defaults, cluster = ctx.cluster }\n"
    "  local r = state.options and state.options[id]\n"
    "  if r == nil then return nil end\n"
    "  if r.fail then return nil, r.fail end\n"
    "  return r.value\n"
    "end\n"
    "local function price(fn, subject, start_time, end_time)\n"
    "  record { fn = fn, subject = subject, start_time = start_time, end_time = end_time }\n"
    "  local p = state.prices and state.prices[subject.name]\n"
    "  if p == \"nan\" then return 0 / 0 end\n"
    "  if type(p) == \"table\" then return nil, p end\n"
    "  return p\n"
    "end\n"
    "function M.real_node_price(_ctx, node, start_time, end_time)\n"
    "  return price(\"node_price\", node, start_time, end_time)\n"
    "end\n"
    "function M.real_pod_price(_ctx, pod, start_time, end_time)\n"
    "  return price(\"pod_price\", pod, start_time, end_time)\n"
    "end\n"
    "function M.test_load(s)\n"
    "  state = s\n"
    "  state.calls = {}\n"
    "  for _, f in ipairs { \"get_options\", \"node_price\", \"pod_price\" } do\n"
    "    M[f] = not (s.absent and s.absent[f]) and M[\"real_\" .. f] or nil\n"
    "  end\n"
    "  return true\n"
    "end\n"
    "M.get_options, M.node_price, M.pod_price = M.real_get_options, M.real_node_price, M.real_pod_price\n"
    "return M\n";

/* ---- helpers ------------------------------------------------------------------------------ */

static int write_tree(char *dir, size_t cap, const char *text) {
  snprintf(dir, cap, "/tmp/luaprov-ngopt-XXXXXX");
  char path[256];
  if (!mkdtemp(dir)) return -1;
  snprintf(path, sizeof path, "mkdir -p %s/providers/bizfly", dir);
  if (system(path) != 0) return -1;
  snprintf(path, sizeof path, "%s/providers/bizfly/init.lua", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
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

static void load(const char *state_json) {
  json_t *state = json_loads(state_json, 0, NULL);
  if (!state) fprintf(stderr, "bad test state: %s\n", state_json);
  json_decref(fake("test_load", json_pack("[o]", state)));
}

/* The last call of function since the last load (a new reference, or NULL) and how many there were. */
static json_t *last_call(const char *function, size_t *count) {
  json_t *state = fake("test_state", NULL), *last = NULL;
  size_t i, n = 0;
  json_t *call;
  json_array_foreach(json_object_get(state, "calls"), i, call) {
    if (strcmp(json_string_value(json_object_get(call, "fn")), function) == 0) {
      n++;
      last = call;
    }
  }
  json_incref(last);
  json_decref(state);
  if (count) *count = n;
  return last;
}

static char last_message[1024];

/* Waits for the outcome: its value (the caller decrefs) and *code (NULL when it succeeded). */
static json_t *wait_value(lp_ng_outcome *o, const char **code) {
  static char text[64];
  lp_ng_outcome_wait(&loop, o);
  last_message[0] = 0;
  *code = NULL;
  if (o->error) {
    snprintf(text, sizeof text, "%s", o->error->code);
    snprintf(last_message, sizeof last_message, "%s", o->error->message);
    lp_error_free(o->error);
    *code = text;
  }
  return o->node;
}

static const char *refresh(void) {
  lp_ng_outcome o = {0};
  const char *code;
  lp_ng_refresh(ng, lp_ng_outcome_store, &o);
  json_decref(wait_value(&o, &code));
  return code;
}

static json_t *options_of(const char *id, const char *defaults_json, const char **code) {
  lp_ng_outcome o = {0};
  json_t *defaults = json_loads(defaults_json, 0, NULL);
  lp_ng_get_options(ng, id, defaults, lp_ng_outcome_node, &o);
  json_decref(defaults);
  return wait_value(&o, code);
}

static double price_of(const char *function, const char *subject_json, const char **code) {
  lp_ng_outcome o = {0};
  json_t *subject = json_loads(subject_json, 0, NULL);
  if (strcmp(function, "node_price") == 0)
    lp_ng_node_price(ng, subject, "2026-01-02T03:00:00Z", "2026-01-02T04:00:00Z", lp_ng_outcome_node, &o);
  else
    lp_ng_pod_price(ng, subject, "2026-01-02T03:00:00Z", NULL, lp_ng_outcome_node, &o);
  json_decref(subject);
  json_t *v = wait_value(&o, code);
  double price = *code ? -1 : json_real_value(v);
  CHECK(*code || json_is_real(v));
  json_decref(v);
  return price;
}

static double num(const json_t *object, const char *key) {
  return json_number_value(json_object_get(object, key));
}

#define POOLS                                                                                                \
  "\"groups\": [{\"id\": \"pool-a\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 0}, {\"id\": "       \
  "\"pool-b\", \"min_size\": 0, \"max_size\": 3, \"target_size\": 0}]"

static const char ca_defaults[] =
    "{\"scale_down_utilization_threshold\": 0.5, \"scale_down_gpu_utilization_threshold\": 0.5, "
    "\"scale_down_unneeded_time\": 600, \"scale_down_unready_time\": 1200, \"max_node_provision_time\": 900, "
    "\"zero_or_max_node_scaling\": false}";

/* ---- GetOptions --------------------------------------------------------------------------- */

static void test_get_options(void) {
  load("{" POOLS ", \"options\": {\"pool-a\": {\"value\": {\"scale_down_utilization_threshold\": 0.3, "
       "\"scale_down_unneeded_time\": 120, \"max_node_provision_time\": 1800.5, "
       "\"ignore_daemon_sets_utilization\": true}}, \"pool-b\": {\"value\": {}}}}");
  const char *code;
  json_t *o = options_of("pool-a", ca_defaults, &code);
  CHECK(code == NULL);
  CHECK(num(o, "scale_down_utilization_threshold") == 0.3);     /* overridden */
  CHECK(num(o, "scale_down_gpu_utilization_threshold") == 0.5); /* the default */
  CHECK(num(o, "scale_down_unneeded_time") == 120);
  CHECK(num(o, "scale_down_unready_time") == 1200);
  CHECK(num(o, "max_node_provision_time") == 1800.5);
  CHECK(json_is_true(json_object_get(o, "ignore_daemon_sets_utilization")));
  CHECK(json_is_false(json_object_get(o, "zero_or_max_node_scaling")));
  CHECK_INT(json_object_size(o), 7);
  json_decref(o);
  /* the mapping saw the group, ctx and every default (missing ones as zero) */
  json_t *call = last_call("get_options", NULL);
  CHECK_STR(json_string_value(json_object_get(call, "id")), "pool-a");
  CHECK_STR(json_string_value(json_object_get(call, "cluster")), "ke1m4ea3j8w6kkvp");
  const json_t *seen = json_object_get(call, "defaults");
  CHECK(num(seen, "max_node_provision_time") == 900);
  CHECK(json_is_false(json_object_get(seen, "ignore_daemon_sets_utilization")));
  CHECK_INT(json_object_size(seen), 7);
  json_decref(call);
  /* an empty table: the defaults as they came */
  o = options_of("pool-b", ca_defaults, &code);
  CHECK(code == NULL);
  CHECK(num(o, "scale_down_unneeded_time") == 600);
  json_decref(o);
  /* no defaults: refused before the mapping is asked, as merging over nothing would zero the
   * options the mapping does not override */
  lp_ng_outcome none = {0};
  lp_ng_get_options(ng, "pool-a", NULL, lp_ng_outcome_node, &none);
  CHECK(wait_value(&none, &code) == NULL);
  CHECK_STR(code, "InvalidArgument");
  CHECK_STR(last_message, "NodeGroupGetOptions: defaults is required (the autoscaler's options for node "
                          "group pool-a, which the overrides are merged over)");
  /* an unknown group, before the mapping is asked */
  size_t n;
  json_decref(options_of("pool-z", ca_defaults, &code));
  CHECK_STR(code, "NotFound");
  json_decref(last_call("get_options", &n));
  CHECK_INT(n, 2);
}

static void test_get_options_nil_and_errors(void) {
  load("{" POOLS ", \"options\": {\"pool-b\": {\"fail\": {\"code\": \"Throttled\", \"message\": \"slow "
       "down\"}}}}");
  const char *code;
  CHECK(options_of("pool-a", ca_defaults, &code) == NULL); /* nil: the autoscaler's own options */
  CHECK_STR(code, "Unimplemented");
  options_of("pool-b", ca_defaults, &code);
  CHECK_STR(code, "Throttled");
  CHECK_CONTAINS(last_message, "options of node group pool-b: slow down");
  /* absent: Unimplemented without a call */
  load("{" POOLS ", \"absent\": {\"get_options\": true}}");
  options_of("pool-a", ca_defaults, &code);
  CHECK_STR(code, "Unimplemented");
  CHECK_CONTAINS(last_message, "has no get_options");
  /* an unknown group is NotFound all the same: the autoscaler must not take it for a group of ours */
  CHECK(lp_ng_has_snapshot(ng));
  options_of("pool-z", ca_defaults, &code);
  CHECK_STR(code, "NotFound");
  CHECK_STR(last_message, "NodeGroup \"pool-z\", not found");
  size_t n;
  json_decref(last_call("get_options", &n));
  CHECK_INT(n, 0);
}

static void test_get_options_contract(void) {
  static const struct {
    const char *value, *message;
  } cases[] = {
      {"{\"scale_down_utilization_threshold\": 1.5}",
       "scale_down_utilization_threshold must be between 0 and 1, not 1.5"},
      {"{\"scale_down_gpu_utilization_threshold\": -0.1}",
       "scale_down_gpu_utilization_threshold must be between 0 and 1"},
      {"{\"scale_down_unneeded_time\": \"10m\"}", "scale_down_unneeded_time must be a number, not a string"},
      {"{\"scale_down_unready_time\": -5}",
       "scale_down_unready_time must be a number of seconds between 0 and"},
      {"{\"max_node_provision_time\": 1e12}", "max_node_provision_time must be a number of seconds"},
      {"{\"zero_or_max_node_scaling\": 1}", "zero_or_max_node_scaling must be a boolean, not a number"},
      {"{\"scale_down_unneeded\": 60}", "'scale_down_unneeded' is not a NodeGroupAutoscalingOptions field"},
      {"\"fast\"", "node group pool-a: returned a string, not a table of options"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char state[512];
    snprintf(state, sizeof state, "{" POOLS ", \"options\": {\"pool-a\": {\"value\": %s}}}", cases[i].value);
    load(state);
    const char *code;
    CHECK(options_of("pool-a", ca_defaults, &code) == NULL);
    CHECK_STR(code, "Contract");
    CHECK_CONTAINS(last_message, "providers/bizfly/init.lua: get_options: ");
    CHECK_CONTAINS(last_message, cases[i].message);
    CHECK_CONTAINS(last_message, "(docs/contracts.md#mappings)");
  }
}

/* ---- Pricing ------------------------------------------------------------------------------ */

static const char node_a[] = "{\"name\": \"node-a\", \"provider_id\": \"bizflycloud://a\", \"labels\": "
                             "{\"node.kubernetes.io/instance-type\": \"nix.2c_2g\"}, \"annotations\": {}}";

static void test_node_price(void) {
  /* no snapshot needed: a fresh nodegroups never refreshes for a price */
  lp_nodegroups_config cfg = {&loop, scripts, NULL, "ke1m4ea3j8w6kkvp", NULL, 0};
  lp_nodegroups *fresh = lp_nodegroups_new(&cfg);
  lp_nodegroups *saved = ng;
  ng = fresh;
  load("{" POOLS ", \"prices\": {\"node-a\": 0.25, \"node-b\": -1, \"node-c\": \"cheap\", \"node-d\": "
       "{\"code\": \"Transport\", \"message\": \"no price list\"}, \"node-e\": \"nan\", \"node-f\": 0}}");
  const char *code;
  CHECK(price_of("node_price", node_a, &code) == 0.25);
  CHECK(code == NULL);
  size_t n;
  json_t *call = last_call("node_price", &n);
  CHECK_INT(n, 1);
  const json_t *node = json_object_get(call, "subject");
  CHECK_STR(json_string_value(json_object_get(node, "provider_id")), "bizflycloud://a");
  CHECK_STR(
      json_string_value(json_object_get(json_object_get(node, "labels"), "node.kubernetes.io/instance-type")),
      "nix.2c_2g");
  CHECK_STR(json_string_value(json_object_get(call, "start_time")), "2026-01-02T03:00:00Z");
  CHECK_STR(json_string_value(json_object_get(call, "end_time")), "2026-01-02T04:00:00Z");
  json_decref(call);
  json_decref(last_call("refresh", &n));
  CHECK_INT(n, 0);
  CHECK(!lp_ng_has_snapshot(ng));
  CHECK(price_of("node_price", "{\"name\": \"node-f\"}", &code) == 0);
  CHECK(code == NULL);
  price_of("node_price", "{\"name\": \"node-b\"}", &code);
  CHECK_STR(code, "Contract");
  CHECK_CONTAINS(last_message, "providers/bizfly/init.lua: node_price: node-b: price -1 is not a finite "
                               "number >= 0 (docs/contracts.md#mappings)");
  price_of("node_price", "{\"name\": \"node-c\"}", &code);
  CHECK_STR(code, "Contract");
  CHECK_CONTAINS(last_message, "node-c: returned a string, not a price");
  price_of("node_price", "{\"name\": \"node-d\"}", &code);
  CHECK_STR(code, "Transport");
  CHECK_CONTAINS(last_message, "node_price of node-d: no price list");
  price_of("node_price", "{\"name\": \"node-e\"}", &code); /* NaN cannot even leave Lua */
  CHECK(code != NULL);
  price_of("node_price", "{\"name\": \"node-z\"}", &code); /* nil: no price for this node */
  CHECK_STR(code, "Unimplemented");
  load("{\"absent\": {\"node_price\": true, \"get_options\": true}}");
  price_of("node_price", node_a, &code);
  CHECK_STR(code, "Unimplemented");
  CHECK_CONTAINS(last_message, "has no node_price");
  json_decref(last_call("node_price", &n));
  CHECK_INT(n, 0);
  /* nor does GetOptions without get_options: UNIMPLEMENTED even when no refresh has worked yet */
  json_decref(options_of("pool-a", ca_defaults, &code));
  CHECK_STR(code, "Unimplemented");
  json_decref(last_call("refresh", &n));
  CHECK_INT(n, 0);
  ng = saved;
  lp_nodegroups_free(fresh);
}

static void test_pod_price(void) {
  load("{\"prices\": {\"web\": 0.0125, \"bad\": -0.5}}");
  const char *code;
  CHECK(price_of("pod_price", "{\"name\": \"web\", \"namespace\": \"shop\", \"requests\": {\"cpu\": 0.5}}",
                 &code) == 0.0125);
  CHECK(code == NULL);
  json_t *call = last_call("pod_price", NULL);
  CHECK_STR(json_string_value(json_object_get(json_object_get(call, "subject"), "namespace")), "shop");
  CHECK(num(json_object_get(json_object_get(call, "subject"), "requests"), "cpu") == 0.5);
  CHECK(json_is_null(json_object_get(call, "end_time"))); /* an absent time arrives as json.null */
  json_decref(call);
  price_of("pod_price", "{\"name\": \"bad\"}", &code);
  CHECK_STR(code, "Contract");
  CHECK_CONTAINS(last_message, "pod_price: bad: price -0.5 is not a finite number >= 0");
  load("{\"absent\": {\"pod_price\": true}}");
  price_of("pod_price", "{\"name\": \"web\"}", &code);
  CHECK_STR(code, "Unimplemented");
}

/* ---- the contract at load ----------------------------------------------------------------- */

static void test_contract_at_load(void) {
  char bad[64];
  CHECK(write_tree(bad, sizeof bad,
                   "local default = require \"defaults.providers.bizfly\"\n"
                   "local M = {}\n"
                   "for k, v in pairs(default) do M[k] = v end\n"
                   "M.get_options = { scale_down_unneeded_time = 60 }\n"
                   "M.pod_price = 0.5\n"
                   "return M\n") == 0);
  lp_script_host_config cfg = {
      .loop = &loop, .scripts_dir = bad, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules};
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  CHECK(h == NULL);
  char *text = lp_problems_render(&problems);
  CHECK_CONTAINS(text, "'get_options' of the NodeGroup mapping must be a function, not a table");
  CHECK_CONTAINS(text, "'pod_price' of the NodeGroup mapping must be a function, not a number");
  free(text);
  lp_problems_free(&problems);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", bad);
  CHECK(system(rm) == 0);
}

int main(void) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  uv_loop_init(&loop);
  if (write_tree(tree, sizeof tree, mapping) != 0) return 1;
  lp_script_host_config cfg = {
      .loop = &loop, .scripts_dir = tree, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules};
  lp_problems problems = {0};
  scripts = lp_script_host_new(&cfg, &problems);
  if (!scripts) {
    fprintf(stderr, "%s", lp_problems_render(&problems));
    return 1;
  }
  lp_nodegroups_config ng_cfg = {&loop, scripts, NULL, "ke1m4ea3j8w6kkvp", "http://127.0.0.1:9/kaas", 0};
  ng = lp_nodegroups_new(&ng_cfg);
  load("{" POOLS "}");
  CHECK(refresh() == NULL);

  RUN(test_get_options);
  RUN(test_get_options_nil_and_errors);
  RUN(test_get_options_contract);
  RUN(test_node_price);
  RUN(test_pod_price);
  RUN(test_contract_at_load);

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
