/* The CloudProvider contract (rules CP1-CP9, docs/contracts.md) through the real mapping
 * (providers/alibaba) against the Alibaba simulator over real HTTP (spec/c/cloudprovider_fixture.h):
 * GetInstanceTypes, Create, Get, List, Delete, IsDrifted and RepairPolicies on the default tree, a
 * mapping that breaks a rule, the create contract through a recording mapping, and the background
 * refresh. The policies' answers (drift, tags) are test_cloudprovider_policies.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cloudprovider_fixture.h"
#include "contract/shapes.h"
#include "core/clock.h"

static cp_fixture fx;

/* ---- helpers ------------------------------------------------------------------------------ */

static long long action_calls(const char *action) {
  json_t *state = cpf_admin(&fx, "GET", "/_sim/state", NULL);
  long long count = mapping_sim_calls(state, action);
  json_decref(state);
  return count;
}

static size_t live_instances(void) {
  json_t *state = cpf_admin(&fx, "GET", "/_sim/state", NULL);
  size_t n = 0, i;
  json_t *inst;
  json_array_foreach(json_object_get(state, "instances"), i, inst) {
    const char *status = json_string_value(json_object_get(inst, "Status"));
    if (!status) status = json_string_value(json_object_get(inst, "status"));
    if (!status || (strcmp(status, "Deleted") != 0 && strcmp(status, "deleted") != 0)) n++;
  }
  json_decref(state);
  return n;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_instance_types(void) {
  lp_cp_outcome o = {0};
  const char *code;
  lp_cp_get_instance_types(fx.cp, fx.nodeclass, lp_cp_outcome_store, &o);
  json_t *types = cpf_wait(&fx, &o, &code);
  CHECK(code == NULL);
  CHECK(json_array_size(types) >= 50);
  size_t unavailable = 0, offerings = 0, i, k;
  json_t *type, *offering;
  json_array_foreach(types, i, type) {
    json_array_foreach(json_object_get(type, "offerings"), k, offering) {
      offerings++;
      if (json_is_false(json_object_get(offering, "available"))) unavailable++;
    }
  }
  CHECK(unavailable > 0 && unavailable < offerings); /* sold-out stock stays listed (rule CP4) */
  json_decref(types);
}

static double held_now;
static double held_clock(void *ud) {
  (void)ud;
  return held_now;
}

/* How many times the mapping's instance_types has answered, over every provider of the test. */
static double instance_types_calls(void) {
  lp_metric *calls = lp_metrics_counter(lp_metrics_default(), "luaprov_script_calls_total", "",
                                        LP_LABELS("module", "function", "result"));
  return lp_metric_value(calls, LP_LABELS("providers.alibaba", "instance_types", "ok"));
}

/* A provider of its own, so its held instance types start empty; no background refresh. */
static lp_cloudprovider *unrefreshed_provider(void) {
  return lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &fx.loop,
                                                         .scripts = fx.scripts,
                                                         .cluster_id = "luaprov-sim",
                                                         .endpoint = lp_sim_url(fx.sim, "alibaba"),
                                                         .refresh_interval_s = -1});
}

static json_t *held_types(lp_cloudprovider *cp, const json_t *nodeclass) {
  lp_cp_outcome o = {0};
  const char *code;
  lp_cp_get_instance_types(cp, nodeclass, lp_cp_outcome_store, &o);
  json_t *types = cpf_wait(&fx, &o, &code);
  CHECK(code == NULL);
  return types;
}

/* GetInstanceTypes answers from memory: the mapping runs again only for a changed class, and after a
 * minute in the background; a mark of an unavailable offering shows at once. */
static void test_instance_types_held(void) {
  lp_cloudprovider *cp = unrefreshed_provider();
  held_now = 5000;
  lp_cloudprovider_set_clock(cp, held_clock, NULL);
  double before = instance_types_calls();
  json_t *first = held_types(cp, fx.nodeclass);
  json_t *second = held_types(cp, fx.nodeclass);
  CHECK(instance_types_calls() - before == 1);
  CHECK(first && first == second); /* the same list, not a copy */
  json_decref(second);

  json_t *relabelled = json_deep_copy(fx.nodeclass);
  json_object_set_new(json_object_get(relabelled, "metadata"), "labels", json_pack("{s:s}", "team", "b"));
  json_decref(held_types(cp, relabelled));
  CHECK(instance_types_calls() - before == 2);
  json_t *changed_rv = json_deep_copy(relabelled);
  json_object_set_new(json_object_get(changed_rv, "metadata"), "resourceVersion", json_string("999"));
  json_decref(held_types(cp, changed_rv));
  CHECK(instance_types_calls() - before == 2); /* a new resourceVersion alone changes nothing */

  json_t *type = json_array_get(first, 0);
  json_t *offering = json_array_get(json_object_get(type, "offerings"), 0);
  const char *name = json_string_value(json_object_get(type, "name"));
  const char *zone = json_string_value(json_object_get(offering, "zone"));
  const char *capacity = json_string_value(json_object_get(offering, "capacity_type"));
  lp_cp_mark_unavailable(cp, name, zone, capacity, "test: held types");
  json_t *marked = held_types(cp, changed_rv);
  json_t *marked_offering = json_array_get(json_object_get(json_array_get(marked, 0), "offerings"), 0);
  CHECK(json_is_false(json_object_get(marked_offering, "available")));
  CHECK(instance_types_calls() - before == 2);
  json_decref(marked);

  held_now += 61; /* the held answer is stale: answered, and refreshed behind the caller */
  json_t *stale = held_types(cp, changed_rv);
  CHECK(stale != NULL);
  json_decref(stale);
  for (int i = 0; i < 2000 && instance_types_calls() - before < 3; i++) uv_run(&fx.loop, UV_RUN_ONCE);
  CHECK(instance_types_calls() - before == 3);
  json_decref(held_types(cp, changed_rv));
  CHECK(instance_types_calls() - before == 3);
  json_decref(first);
  json_decref(relabelled);
  json_decref(changed_rv);
  lp_cloudprovider_free(cp);
}

/* Callers that miss the same class while the mapping answers it share that one call: its list, or
 * each its own copy of its error. */
static void test_instance_types_one_call_per_miss(void) {
  lp_cloudprovider *cp = unrefreshed_provider();
  double before = instance_types_calls();
  lp_cp_outcome o[3] = {{0}};
  const char *code;
  for (int i = 0; i < 3; i++) lp_cp_get_instance_types(cp, fx.nodeclass, lp_cp_outcome_store, &o[i]);
  json_t *types[3];
  for (int i = 0; i < 3; i++) {
    types[i] = cpf_wait(&fx, &o[i], &code);
    CHECK(code == NULL);
  }
  CHECK(instance_types_calls() - before == 1);
  CHECK(types[0] && types[0] == types[1] && types[1] == types[2]);
  for (int i = 0; i < 3; i++) json_decref(types[i]);

  json_t *broken = json_deep_copy(fx.nodeclass);
  json_object_set_new(json_object_get(broken, "spec"), "systemDisk",
                      json_pack("{s:s}", "volumeSize", "lots"));
  lp_cp_outcome e[2] = {{0}};
  for (int i = 0; i < 2; i++) lp_cp_get_instance_types(cp, broken, lp_cp_outcome_store, &e[i]);
  for (int i = 0; i < 2; i++) {
    cpf_wait(&fx, &e[i], &code);
    CHECK(e[i].error != NULL);
  }
  if (e[0].error && e[1].error) {
    CHECK(e[0].error != e[1].error);
    CHECK_STR(e[0].error->code, "InvalidNodeClass");
    CHECK_STR(e[0].error->message, e[1].error->message);
  }
  for (int i = 0; i < 2; i++) lp_error_free(e[i].error);
  json_decref(broken);
  lp_cloudprovider_free(cp);
}

static void test_create_and_rules(void) {
  json_t *claim =
      cpf_nodeclaim("default-a1", "uid-a1", CPF_ON_DEMAND_REQ, "{\"cpu\":\"1\",\"memory\":\"2Gi\"}");
  lp_cp_outcome o = {0};
  const char *code;
  lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &o);
  json_t *created = cpf_wait(&fx, &o, &code);
  CHECK(code == NULL);
  if (created) {
    char *missing = lp_check_nodeclaim_labels(created);
    CHECK(missing == NULL); /* rule 2 */
    free(missing);
    const json_t *labels = json_object_get(json_object_get(created, "metadata"), "labels");
    CHECK_STR(json_string_value(json_object_get(labels, LP_LABEL_CAPACITY_TYPE)), "on-demand");
    const json_t *annotations = json_object_get(json_object_get(created, "metadata"), "annotations");
    CHECK(json_is_string(json_object_get(annotations, LP_ANNOTATION_HASH)));
    CHECK(json_is_string(json_object_get(annotations, LP_ANNOTATION_HASH_VERSION)));
    const char *pid = json_string_value(json_object_get(json_object_get(created, "status"), "providerID"));
    CHECK(pid && strncmp(pid, "cn-hangzhou.i-", 14) == 0);
    CHECK(json_is_object(json_object_get(json_object_get(created, "status"), "allocatable")));
    /* rule 8: pods from DefaultPodsLimit (no kubelet maxPods, no Terway) */
    CHECK_STR(json_string_value(
                  json_object_get(json_object_get(json_object_get(created, "status"), "capacity"), "pods")),
              "110");
    cpf_check_engine_tags(&fx, created, "default-a1"); /* rule 7 */
  }

  /* A retried Create (same NodeClaim UID) returns the same instance instead of launching another. */
  size_t before = live_instances();
  lp_cp_outcome again = {0};
  lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &again);
  json_t *retried = cpf_wait(&fx, &again, &code);
  CHECK(code == NULL);
  CHECK_INT(live_instances(), before);
  if (created && retried)
    CHECK_STR(json_string_value(json_object_get(json_object_get(retried, "status"), "providerID")),
              json_string_value(json_object_get(json_object_get(created, "status"), "providerID")));

  /* Get and List see it; Delete triggers deletion once, then NodeClaimNotFound (rule 3). */
  if (created) {
    const char *pid = json_string_value(json_object_get(json_object_get(created, "status"), "providerID"));
    lp_cp_outcome g = {0};
    lp_cp_get(fx.cp, pid, lp_cp_outcome_store, &g);
    json_t *got = cpf_wait(&fx, &g, &code);
    CHECK(code == NULL && got);
    json_decref(got);
    lp_cp_outcome l = {0};
    lp_cp_list(fx.cp, lp_cp_outcome_store, &l);
    json_t *listed = cpf_wait(&fx, &l, &code);
    CHECK(json_array_size(listed) >= 1);
    json_decref(listed);
    /* ECS refuses to delete an instance that is still initializing: let it reach Running first */
    json_decref(cpf_admin(&fx, "POST", "/_sim/advance", "{\"seconds\":30}"));
    lp_cp_outcome d1 = {0}, d2 = {0};
    lp_cp_delete(fx.cp, created, lp_cp_outcome_store, &d1);
    json_t *deleted = cpf_wait(&fx, &d1, &code);
    CHECK(code == NULL && json_is_true(deleted));
    json_decref(deleted);
    lp_cp_delete(fx.cp, created, lp_cp_outcome_store, &d2);
    cpf_wait(&fx, &d2, &code);
    CHECK(code && strcmp(code, "NodeClaimNotFound") == 0);
    lp_error_free(d2.error);
  }
  json_decref(created);
  json_decref(retried);
  lp_error_free(again.error);
  lp_error_free(o.error);
  json_decref(claim);
}

static void test_not_ready_and_no_capacity(void) {
  const char *code;
  json_t *claim = cpf_nodeclaim("default-b1", "uid-b1", CPF_ON_DEMAND_REQ, "{}");
  json_t *not_ready = json_deep_copy(fx.nodeclass);
  json_object_set_new(json_object_get(not_ready, "status"), "conditions",
                      json_pack("[{s:s, s:s}]", "type", "Ready", "status", "False"));
  lp_cp_outcome o = {0};
  lp_cp_create(fx.cp, claim, not_ready, lp_cp_outcome_store, &o);
  cpf_wait(&fx, &o, &code);
  CHECK(code && strcmp(code, "NodeClassNotReady") == 0);
  lp_error_free(o.error);
  json_decref(not_ready);
  json_decref(claim);

  claim = cpf_nodeclaim(
      "default-b2", "uid-b2",
      "[{\"key\":\"topology.kubernetes.io/zone\",\"operator\":\"In\",\"values\":[\"mars-1a\"]}]", "{}");
  lp_cp_outcome n = {0};
  lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &n);
  cpf_wait(&fx, &n, &code);
  CHECK(code && strcmp(code, "InsufficientCapacity") == 0);
  lp_error_free(n.error);
  json_decref(claim);

  claim = cpf_nodeclaim("default-b3", "uid-b3", CPF_ON_DEMAND_REQ, "{\"cpu\":\"4096\"}");
  lp_cp_outcome big = {0};
  lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &big);
  cpf_wait(&fx, &big, &code);
  CHECK(code && strcmp(code, "InsufficientCapacity") == 0);
  if (big.error) CHECK_CONTAINS(big.error->message, "too small for the requests");
  lp_error_free(big.error);
  json_decref(claim);
}

/* Creates the NodeClaim name (uid "uid-NAME") with requirements through the default provider and checks
 * it launched: the NodeClaim Create answered (caller decrefs; NULL when it failed) and its zone in *zone
 * (borrowed from it). */
static json_t *launched_in(const char *requirements, const char *name, const char **zone) {
  char uid[96];
  snprintf(uid, sizeof uid, "uid-%s", name);
  json_t *claim = cpf_nodeclaim(name, uid, requirements, "{}");
  lp_cp_outcome o = {0};
  const char *code;
  lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &o);
  json_t *created = cpf_wait(&fx, &o, &code);
  CHECK(code == NULL);
  lp_error_free(o.error);
  json_decref(claim);
  *zone = json_string_value(
      json_object_get(json_object_get(json_object_get(created, "metadata"), "labels"), LP_LABEL_ZONE));
  return created;
}

/* NoStock on the cheapest offering falls through to the next one; the offering then shows as
 * unavailable in GetInstanceTypes for the next three minutes. */
static void test_nostock_fall_through(void) {
  const char *reqs =
      "[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]},"
      "{\"key\":\"node.kubernetes.io/instance-type\",\"operator\":\"In\",\"values\":[\"ecs.g7.large\"]}]";
  /* learn which zone is cheapest first, by launching once */
  const char *zone1;
  json_t *c1 = launched_in(reqs, "default-c1", &zone1);
  char rule[256];
  snprintf(rule, sizeof rule, "{\"kind\":\"nostock\",\"zone\":\"%s\",\"instance_type\":\"ecs.g7.large\"}",
           zone1 ? zone1 : "?");
  json_decref(cpf_admin(&fx, "POST", "/_sim/faults", rule));

  const char *zone2;
  json_t *c2 = launched_in(reqs, "default-c2", &zone2);
  CHECK(zone1 && zone2 && strcmp(zone1, zone2) != 0);
  json_decref(cpf_admin(&fx, "DELETE", "/_sim/faults", NULL));
  json_decref(c1);
  json_decref(c2);
}

static void test_throttling_and_garbage(void) {
  const char *code;
  json_decref(cpf_admin(&fx, "POST", "/_sim/faults",
                        "{\"action\":\"RunInstances\",\"kind\":\"throttle\",\"count\":2}"));
  json_t *claim = cpf_nodeclaim("default-d1", "uid-d1", CPF_ON_DEMAND_REQ, "{}");
  lp_cp_outcome o = {0};
  lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &o);
  json_t *created = cpf_wait(&fx, &o, &code);
  CHECK(code == NULL); /* throttling is retried with backoff */
  json_decref(cpf_admin(&fx, "DELETE", "/_sim/faults", NULL));

  json_decref(cpf_admin(&fx, "POST", "/_sim/faults",
                        "{\"action\":\"DescribeInstances\",\"kind\":\"malformed\",\"count\":5}"));
  lp_cp_outcome g = {0};
  lp_cp_get(fx.cp,
            json_string_value(json_object_get(json_object_get(created, "status"), "providerID"))
                ?: "cn-hangzhou.i-x",
            lp_cp_outcome_store, &g);
  cpf_wait(&fx, &g, &code);
  CHECK(g.error != NULL);
  if (g.error) {
    CHECK_STR(g.error->code, "InvalidResponse");
    CHECK_CONTAINS(g.error->message, "DescribeInstances");
  }
  lp_error_free(g.error);
  json_decref(cpf_admin(&fx, "DELETE", "/_sim/faults", NULL));
  json_decref(created);
  json_decref(claim);
}

static void test_drift_and_repair(void) {
  const char *code;
  json_t *claim = cpf_nodeclaim("default-e1", "uid-e1", CPF_ON_DEMAND_REQ, "{}");
  lp_cp_outcome o = {0};
  lp_cp_create(fx.cp, claim, fx.nodeclass, lp_cp_outcome_store, &o);
  json_t *created = cpf_wait(&fx, &o, &code);
  if (!created) return;

  lp_cp_outcome d = {0};
  lp_cp_is_drifted(fx.cp, created, fx.nodeclass, lp_cp_outcome_store, &d);
  json_t *reason = cpf_wait(&fx, &d, &code);
  CHECK_STR(json_string_value(reason), "");
  json_decref(reason);

  /* The class now resolves to another image: ImageDrift. */
  json_t *changed = json_deep_copy(fx.nodeclass);
  json_t *images = json_object_get(json_object_get(changed, "status"), "images");
  json_object_set_new(json_array_get(images, 0), "id", json_string("m-newer"));
  for (size_t i = 1; i < json_array_size(images); i++)
    json_object_set_new(json_array_get(images, i), "id", json_string("m-newer-arm"));
  lp_cp_outcome d2 = {0};
  lp_cp_is_drifted(fx.cp, created, changed, lp_cp_outcome_store, &d2);
  reason = cpf_wait(&fx, &d2, &code);
  CHECK_STR(json_string_value(reason), "ImageDrift");
  json_decref(reason);

  /* NodeClassDrift comes from the hashes alone: no cloud call is made for it. */
  json_object_set_new(json_object_get(json_object_get(changed, "metadata"), "annotations"),
                      LP_ANNOTATION_HASH, json_string("different"));
  long long calls = action_calls("DescribeInstances");
  lp_cp_outcome d3 = {0};
  lp_cp_is_drifted(fx.cp, created, changed, lp_cp_outcome_store, &d3);
  reason = cpf_wait(&fx, &d3, &code);
  CHECK_STR(json_string_value(reason), "NodeClassDrift");
  CHECK_INT(action_calls("DescribeInstances"), calls);
  json_decref(reason);
  json_decref(changed);

  lp_cp_outcome r = {0};
  lp_cp_repair_policies(fx.cp, lp_cp_outcome_store, &r);
  json_t *policies = cpf_wait(&fx, &r, &code);
  char *text = json_dumps(policies, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(text,
            "[{\"condition_status\":\"False\",\"condition_type\":\"Ready\",\"toleration_seconds\":1800},"
            "{\"condition_status\":\"Unknown\",\"condition_type\":\"Ready\",\"toleration_seconds\":1800}]");
  free(text);
  json_decref(policies);
  CHECK_STR(lp_cloudprovider_name(fx.cp), "alibabacloud");
  json_decref(created);
  json_decref(claim);
}

/* An operator's tree whose providers/alibaba/init.lua is init_lua (cpf_tree_new). */
static lp_script_host *operator_scripts_new(char *dir, const char *init_lua) {
  return cpf_tree_new(&fx, dir, "providers/alibaba", "init.lua", init_lua);
}

/* A mapping that breaks a rule gets an error naming its file and the rule: an operator's tree wraps
 * the default mapping and drops one offering of every type. */
static void test_contract_violation(void) {
  char dir[32];
  lp_script_host *operator_scripts =
      operator_scripts_new(dir, "local default = require 'defaults.providers.alibaba'\n"
                                "local M = setmetatable({}, { __index = default })\n"
                                "for k, v in pairs(default) do M[k] = v end\n"
                                "function M.instance_types(ctx, nodeclass)\n"
                                "  local types, err = default.instance_types(ctx, nodeclass)\n"
                                "  if not types then return nil, err end\n"
                                "  for _, t in ipairs(types) do table.remove(t.offerings) end\n"
                                "  return types\n"
                                "end\n"
                                "return M\n");
  if (!operator_scripts) return;
  lp_cloudprovider *broken = cpf_provider(&fx, operator_scripts, 0);
  lp_cp_outcome o = {0};
  const char *code;
  lp_cp_get_instance_types(broken, fx.nodeclass, lp_cp_outcome_store, &o);
  cpf_wait(&fx, &o, &code);
  CHECK(code && strcmp(code, "Contract") == 0);
  if (o.error) {
    CHECK_CONTAINS(o.error->message, "providers/alibaba/init.lua: instance_types: ");
    CHECK_CONTAINS(o.error->message, "(rule CP4 in docs/contracts.md)");
  }
  lp_error_free(o.error);
  lp_cloudprovider_free(broken);
  cpf_tree_free(operator_scripts, dir);
}

/* ---- the create contract (docs/contracts.md#create) through a recording mapping ------------- */

/* The default mapping with a create that records what the engine handed it (seen(name) answers the
 * offerings of each call for the NodeClaim named name) and behaves by the NodeClaim's name: "ice-"
 * reports the 1st and 3rd offerings out of stock on the first call, "twice-" reports the first
 * offering of its first call on every call, "none-" answers InsufficientCapacity without offerings,
 * "quota-" another error, "stray-" returns an instance in a zone it was not handed ("adoptstray-"
 * the same, marked adopted); anything else launches through the default create. */
static const char RECORDING_MAPPING[] =
    "local default = require 'defaults.providers.alibaba'\n"
    "local M = {}\n"
    "for k, v in pairs(default) do M[k] = v end\n"
    "local seen, reported = {}, {}\n"
    "local function key(o) return { instance_type = o.instance_type, zone = o.zone, capacity_type = "
    "o.capacity_type } end\n"
    "function M.create(ctx, launch)\n"
    "  local name = launch.nodeclaim.metadata.name\n"
    "  seen[name] = seen[name] or {}\n"
    "  local handed = {}\n"
    "  for i, o in ipairs(launch.offerings) do\n"
    "    handed[i] = { instance_type = o.instance_type, zone = o.zone, capacity_type = o.capacity_type,\n"
    "      price = o.price, client_token = o.client_token, type_name = o.type and o.type.name }\n"
    "  end\n"
    "  table.insert(seen[name], handed)\n"
    "  local mode = name:match('^(%a+)%-')\n"
    "  local first = launch.offerings[1]\n"
    "  if mode == 'ice' and #seen[name] == 1 then\n"
    "    return nil, { code = 'InsufficientCapacity', message = 'sold out (recording mapping)',\n"
    "      offerings = { key(first), key(launch.offerings[3]) } }\n"
    "  elseif mode == 'twice' then\n"
    "    reported[name] = reported[name] or key(first)\n"
    "    return nil, { code = 'InsufficientCapacity', message = 'sold out again (recording mapping)',\n"
    "      offerings = { reported[name] } }\n"
    "  elseif mode == 'none' then\n"
    "    return nil, { code = 'InsufficientCapacity', message = 'no vSwitch anywhere (recording mapping)' }\n"
    "  elseif mode == 'quota' then\n"
    "    return nil, { code = 'QuotaExceed.ElasticQuota', message = 'quota (recording mapping)',\n"
    "      offerings = { key(first) } }\n"
    "  end\n"
    "  local inst, err = default.create(ctx, launch)\n"
    "  if inst and (mode == 'stray' or mode == 'adoptstray') then inst.zone = 'cn-hangzhou-z' end\n"
    "  if inst and mode == 'adoptstray' then inst.adopted = true end\n"
    "  return inst, err\n"
    "end\n"
    "function M.seen(name) return seen[name] or {} end\n"
    "return M\n";

#define THREE_TYPES_REQ                                                                                      \
  "[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":[\"on-demand\"]},"                \
  "{\"key\":\"node.kubernetes.io/instance-type\",\"operator\":\"In\",\"values\":[\"ecs.g7.large\","          \
  "\"ecs.c7.large\",\"ecs.g7.xlarge\"]}]"

static lp_script_host *recording_scripts;
static lp_cloudprovider *recording;
enum { RECORDING_MAX_ATTEMPTS = 6 };

/* The offerings of each create call the recording mapping saw for NodeClaim name; caller decrefs. */
static json_t *recorded(const char *name) {
  json_t *values = mapping_call(recording_scripts, "seen", json_pack("[s]", name));
  json_t *calls = json_incref(json_array_get(values, 0));
  json_decref(values);
  if (json_is_object(calls)) { /* an empty Lua table */
    json_decref(calls);
    calls = json_array();
  }
  return calls;
}

/* "type|zone|capacity_type" of an offering as create was handed it. */
static void handed_key(char *out, size_t cap, const json_t *item) {
  snprintf(out, cap, "%s|%s|%s", json_string_value(json_object_get(item, "instance_type")),
           json_string_value(json_object_get(item, "zone")),
           json_string_value(json_object_get(item, "capacity_type")));
}

/* GetInstanceTypes through the recording provider, as a set "type|zone|capacity_type" -> available
 * (true/false) of the on-demand offerings of the three types of THREE_TYPES_REQ. */
static json_t *three_type_offerings(void) {
  lp_cp_outcome o = {0};
  const char *code;
  lp_cp_get_instance_types(recording, fx.nodeclass, lp_cp_outcome_store, &o);
  json_t *types = cpf_wait(&fx, &o, &code);
  json_t *out = json_object();
  size_t i, k;
  json_t *type, *offering;
  json_array_foreach(types, i, type) {
    const char *name = json_string_value(json_object_get(type, "name"));
    if (strcmp(name, "ecs.g7.large") != 0 && strcmp(name, "ecs.c7.large") != 0 &&
        strcmp(name, "ecs.g7.xlarge") != 0)
      continue;
    json_array_foreach(json_object_get(type, "offerings"), k, offering) {
      if (strcmp(json_string_value(json_object_get(offering, "capacity_type")), "on-demand") != 0) continue;
      char key[256];
      snprintf(key, sizeof key, "%s|%s|on-demand", name,
               json_string_value(json_object_get(offering, "zone")));
      json_object_set(out, key, json_object_get(offering, "available"));
    }
  }
  json_decref(types);
  lp_error_free(o.error);
  return out;
}

static size_t count_unavailable(const json_t *offerings) {
  size_t n = 0;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)offerings, key, v) n += json_is_false(v);
  return n;
}

/* Creates the NodeClaim name (THREE_TYPES_REQ) through the recording mapping and waits: o holds the
 * outcome (the caller frees o->value and o->error), and the answer is the offerings of each create
 * call the mapping saw (caller decrefs). */
static json_t *recorded_create(const char *name, lp_cp_outcome *o) {
  char uid[96];
  snprintf(uid, sizeof uid, "uid-%s", name);
  json_t *claim = cpf_nodeclaim(name, uid, THREE_TYPES_REQ, "{}");
  const char *code;
  lp_cp_create(recording, claim, fx.nodeclass, lp_cp_outcome_store, o);
  cpf_wait(&fx, o, &code);
  json_decref(claim);
  return recorded(name);
}

/* Create hands the allowed offerings only (the NodeClaim's types, on-demand, available), cheapest
 * first, at most max_launch_attempts, each with its price, client token and type object. */
static void test_create_hands_allowed_offerings_cheapest_first(void) {
  lp_cp_outcome o = {0};
  json_t *calls = recorded_create("order-a1", &o);
  CHECK(o.error == NULL);
  CHECK_INT(json_array_size(calls), 1);
  json_t *handed = json_array_get(calls, 0);
  json_t *offerings = three_type_offerings();
  size_t available = json_object_size(offerings) - count_unavailable(offerings);
  CHECK_INT(json_array_size(handed), available < RECORDING_MAX_ATTEMPTS ? available : RECORDING_MAX_ATTEMPTS);
  double last = 0;
  size_t i;
  json_t *item;
  json_array_foreach(handed, i, item) {
    char key[256];
    handed_key(key, sizeof key, item);
    CHECK(json_is_true(json_object_get(offerings, key))); /* one of the three types, on-demand, available */
    double price = json_number_value(json_object_get(item, "price"));
    CHECK(json_is_number(json_object_get(item, "price")) && price >= last);
    last = price;
    CHECK_STR(json_string_value(json_object_get(item, "type_name")),
              json_string_value(json_object_get(item, "instance_type")));
    CHECK_INT(strlen(json_string_value(json_object_get(item, "client_token")) ?: ""), 48);
  }
  json_decref(offerings);
  json_decref(calls);
  json_decref(o.value);
  lp_error_free(o.error);
}

/* InsufficientCapacity naming two offerings: exactly those are marked unavailable, and create is
 * called again with all the others, the one between them too. */
static void test_create_out_of_stock_marks_and_retries(void) {
  json_t *before = three_type_offerings();
  lp_cp_outcome o = {0};
  json_t *calls = recorded_create("ice-b1", &o);
  CHECK(o.error == NULL && o.value);
  CHECK_INT(json_array_size(calls), 2);
  json_t *first = json_array_get(calls, 0), *second = json_array_get(calls, 1);
  CHECK(json_array_size(first) >= 4);
  /* the second call is the first without its 1st and 3rd offerings, in the same order */
  CHECK_INT(json_array_size(second), json_array_size(first) - 2);
  for (size_t i = 0, k = 0; i < json_array_size(first); i++) {
    if (i == 0 || i == 2) continue;
    char want[256], got[256];
    handed_key(want, sizeof want, json_array_get(first, i));
    handed_key(got, sizeof got, json_array_get(second, k++));
    CHECK_STR(got, want);
  }
  json_t *after = three_type_offerings();
  CHECK_INT(count_unavailable(after), count_unavailable(before) + 2);
  char k1[256], k2[256], k3[256];
  handed_key(k1, sizeof k1, json_array_get(first, 0));
  handed_key(k2, sizeof k2, json_array_get(first, 1));
  handed_key(k3, sizeof k3, json_array_get(first, 2));
  CHECK(json_is_false(json_object_get(after, k1)));
  CHECK(json_is_true(json_object_get(after, k2))); /* not reported: not marked */
  CHECK(json_is_false(json_object_get(after, k3)));
  json_decref(before);
  json_decref(after);
  json_decref(calls);
  json_decref(o.value);
  lp_error_free(o.error);
}

/* An offering reported out of stock again after it was removed was not handed: a Contract error
 * (rule CP9), so a mapping that reports nothing new cannot keep Create going. */
static void test_create_out_of_stock_reported_twice(void) {
  lp_cp_outcome o = {0};
  json_t *calls = recorded_create("twice-b2", &o);
  CHECK(o.error && strcmp(o.error->code, "Contract") == 0);
  if (o.error) {
    CHECK_CONTAINS(o.error->message, "out of stock, which is not one of the");
    CHECK_CONTAINS(o.error->message, "(rule CP9 in docs/contracts.md)");
  }
  CHECK_INT(json_array_size(calls), 2);
  json_decref(calls);
  lp_error_free(o.error);
}

/* InsufficientCapacity without offerings: the mapping could launch none; create is not called again. */
static void test_create_none_launchable(void) {
  lp_cp_outcome o = {0};
  json_t *calls = recorded_create("none-c1", &o);
  CHECK(o.error && strcmp(o.error->code, "InsufficientCapacity") == 0);
  if (o.error) CHECK_CONTAINS(o.error->message, "no vSwitch anywhere (recording mapping)");
  CHECK_INT(json_array_size(calls), 1);
  json_decref(calls);
  lp_error_free(o.error);
}

/* Another error is a CreateError naming the NodeClaim, and marks nothing, even with offerings. */
static void test_create_other_error(void) {
  json_t *before = three_type_offerings();
  lp_cp_outcome o = {0};
  json_t *calls = recorded_create("quota-d1", &o);
  CHECK(o.error && strcmp(o.error->code, "CreateError") == 0);
  if (o.error)
    CHECK_STR(o.error->message,
              "launching NodeClaim quota-d1 failed: QuotaExceed.ElasticQuota: quota (recording mapping)");
  json_t *after = three_type_offerings();
  CHECK_INT(count_unavailable(after), count_unavailable(before));
  CHECK_INT(json_array_size(calls), 1);
  json_decref(calls);
  json_decref(before);
  json_decref(after);
  lp_error_free(o.error);
}

/* An instance in an offering create was not handed is a Contract error naming the script and rule. */
static void test_create_stray_instance(void) {
  lp_cp_outcome o = {0};
  json_decref(recorded_create("stray-e1", &o));
  CHECK(o.error && strcmp(o.error->code, "Contract") == 0);
  if (o.error) {
    CHECK_CONTAINS(o.error->message, "providers/alibaba/init.lua: create: instance i-");
    CHECK_CONTAINS(o.error->message, "in cn-hangzhou-z (on-demand), which is not one of the");
    CHECK_CONTAINS(o.error->message, "(rule CP9 in docs/contracts.md)");
  }
  lp_error_free(o.error);
}

/* A create repeated for a NodeClaim whose instance is in an offering no longer handed (marked out of
 * stock since) gets that instance back, adopted (rule CP9), and launches no second one; an adopted
 * instance in an offering the NodeClaim does not allow is still a Contract error. */
static void test_create_adopts_launched_instance(void) {
  lp_cp_outcome first = {0};
  json_decref(recorded_create("adopt-f1", &first));
  CHECK(first.error == NULL && first.value);
  const json_t *labels = json_object_get(json_object_get(first.value, "metadata"), "labels");
  const char *type = json_string_value(json_object_get(labels, "node.kubernetes.io/instance-type"));
  const char *zone = json_string_value(json_object_get(labels, "topology.kubernetes.io/zone"));
  size_t live = live_instances();
  if (type && zone) lp_cp_mark_unavailable(recording, type, zone, "on-demand", "test: no longer handed");
  lp_cp_outcome again = {0};
  json_t *calls = recorded_create("adopt-f1", &again);
  CHECK(again.error == NULL && again.value);
  if (first.value && again.value)
    CHECK_STR(json_string_value(json_object_get(json_object_get(again.value, "status"), "providerID")),
              json_string_value(json_object_get(json_object_get(first.value, "status"), "providerID")));
  CHECK_INT(live_instances(), live);
  char unhanded[256];
  snprintf(unhanded, sizeof unhanded, "%s|%s|on-demand", type ? type : "", zone ? zone : "");
  size_t i;
  json_t *item;
  json_array_foreach(json_array_get(calls, json_array_size(calls) - 1), i, item) {
    char key[256];
    handed_key(key, sizeof key, item);
    CHECK(strcmp(key, unhanded) != 0);
  }
  json_decref(calls);
  json_decref(first.value);
  json_decref(again.value);
  lp_error_free(first.error);
  lp_error_free(again.error);

  lp_cp_outcome stray = {0};
  json_decref(recorded_create("adoptstray-f2", &stray));
  CHECK(stray.error && strcmp(stray.error->code, "Contract") == 0);
  if (stray.error) {
    CHECK_CONTAINS(stray.error->message, "in cn-hangzhou-z (on-demand), which is not one of the");
    CHECK_CONTAINS(stray.error->message,
                   "nor (adopted) an offering NodeClaim adoptstray-f2 allows with the tag "
                   "karpenter.sh/nodeclaim=adoptstray-f2");
  }
  lp_error_free(stray.error);
}

/* Instance types of every ECSNodeClass seen are refreshed in the background, with no caller. */
static void test_background_refresh(void) {
  lp_cloudprovider *quick =
      lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &fx.loop,
                                                      .scripts = fx.scripts,
                                                      .cluster_id = "luaprov-sim",
                                                      .endpoint = lp_sim_url(fx.sim, "alibaba"),
                                                      .refresh_interval_s = 0.1});
  lp_cp_outcome o = {0};
  const char *code;
  lp_cp_get_instance_types(quick, fx.nodeclass, lp_cp_outcome_store, &o);
  json_decref(cpf_wait(&fx, &o, &code));
  double before = instance_types_calls();
  double until = lp_clock_monotonic() + 0.35;
  while (lp_clock_monotonic() < until) uv_run(&fx.loop, UV_RUN_NOWAIT);
  CHECK(instance_types_calls() - before >= 2); /* refreshed at least twice by itself */
  lp_cloudprovider_free(quick);                /* with a refresh possibly in flight: it finishes on its own */
  uv_run(&fx.loop, UV_RUN_NOWAIT);
}

int main(void) {
  if (cpf_start(&fx) != 0) return 1;

  RUN(test_instance_types);
  RUN(test_instance_types_held);
  RUN(test_instance_types_one_call_per_miss);
  RUN(test_create_and_rules);
  RUN(test_not_ready_and_no_capacity);
  RUN(test_nostock_fall_through);
  RUN(test_throttling_and_garbage);
  RUN(test_drift_and_repair);
  RUN(test_contract_violation);
  char recording_dir[32];
  recording_scripts = operator_scripts_new(recording_dir, RECORDING_MAPPING);
  if (recording_scripts) {
    recording = cpf_provider(&fx, recording_scripts, RECORDING_MAX_ATTEMPTS);
    RUN(test_create_hands_allowed_offerings_cheapest_first);
    RUN(test_create_out_of_stock_marks_and_retries);
    RUN(test_create_out_of_stock_reported_twice);
    RUN(test_create_none_launchable);
    RUN(test_create_other_error);
    RUN(test_create_stray_instance);
    RUN(test_create_adopts_launched_instance);
    lp_cloudprovider_free(recording);
    cpf_tree_free(recording_scripts, recording_dir);
  }
  RUN(test_background_refresh);

  cpf_stop(&fx);
  return check_summary();
}
