/* The CloudProvider against the Alibaba simulator (in-process, real HTTP): GetInstanceTypes for a
 * catalogue of 1,000 types x 8 zones x 2 capacity types (cold, after a class change, and held by the
 * engine), IsDrifted through the Lua
 * drift policy for 10,000 NodeClaims, the cloud API calls List makes for 1,000 instances, and Create
 * through the engine (time and cloud API calls per launch).
 * Prints figures; never fails on time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "contract/shapes.h"
#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "sim/sim.h"
#include "sim_admin.h"

static uv_loop_t loop;
static lp_sim *sim;
static lp_http_client *http;
static lp_script_host *scripts;

static json_t *admin(const char *method, const char *path, const char *body) {
  return sim_admin(&loop, http, sim, "alibaba", method, path, body);
}

static long long total_calls(void) {
  json_t *state = admin("GET", "/_sim/state", NULL);
  long long n = 0;
  const char *action;
  json_t *count;
  json_object_foreach(json_object_get(state, "calls"), action, count) n += json_integer_value(count);
  json_decref(state);
  return n;
}

static long long calls_of(const char *action) {
  json_t *state = admin("GET", "/_sim/state", NULL);
  long long n = json_integer_value(json_object_get(json_object_get(state, "calls"), action));
  json_decref(state);
  return n;
}

static json_t *ctx(void) {
  return json_pack("{s:s, s:s, s:s}", "region", "cn-hangzhou", "cluster_id", "luaprov-sim", "endpoint",
                   lp_sim_url(sim, "alibaba"));
}

static json_t *mapping_sync(const char *function, json_t *args) {
  lp_task_result *r = lp_script_host_call_sync(scripts, "providers.alibaba", function, args);
  json_t *values = r->json ? json_loads(r->json, JSON_DECODE_ANY, NULL) : NULL;
  if (r->error) fprintf(stderr, "%s: %s\n", function, r->error->message);
  lp_task_result_free(r);
  json_t *first = json_incref(json_array_get(values, 0));
  json_decref(values);
  return first;
}

static int pending, failures;
static void count_done(const lp_task_result *r, void *ud) {
  int failed = r->error != NULL || (r->json && strncmp(r->json, "[null", 5) == 0);
  if (failed && failures++ == 0) fprintf(stderr, "call failed: %s\n", r->error ? r->error->message : r->json);
  pending--;
}

int main(void) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5simulatoraccess", 1);
  setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "simulator-secret-do-not-use", 1);
  uv_loop_init(&loop);
  lp_error *err = NULL;
  sim = lp_sim_start(&loop, &(lp_sim_options){.scripts_dir = LUAPROV_SOURCE_DIR}, &err);
  if (!sim) return 1;
  http = lp_http_client_new(&loop, &(lp_http_client_options){.max_per_host = 32}, &err);
  lp_script_host_config cfg = {.loop = &loop,
                               .defaults_dir = LUAPROV_SOURCE_DIR,
                               .modules = lp_contract_modules,
                               .http = http,
                               .limits = {.memory_bytes = 512u << 20}};
  lp_problems problems = {0};
  scripts = lp_script_host_new(&cfg, &problems);
  if (!scripts) return 1;
  lp_cloudprovider *cp =
      lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = &loop,
                                                      .scripts = scripts,
                                                      .cluster_id = "luaprov-sim",
                                                      .endpoint = lp_sim_url(sim, "alibaba")});

  /* 1. GetInstanceTypes over 1,000 types x 8 zones x 2 capacity types */
  json_decref(admin("POST", "/_sim/catalogue", "{\"instance_types\":1000,\"zones\":8}"));
  json_t *nc = json_pack("{s:{s:s}, s:{s:[{s:{s:s}}], s:[{s:{s:s}}], s:[{s:s}]}}", "metadata", "name",
                         "default", "spec", "vSwitchSelectorTerms", "tags", "karpenter.sh/discovery",
                         "luaprov-sim", "securityGroupSelectorTerms", "tags", "karpenter.sh/discovery",
                         "luaprov-sim", "imageSelectorTerms", "alias", "AlibabaCloudLinux3");
  json_object_set_new(nc, "status", mapping_sync("resolve_nodeclass", json_pack("[oO]", ctx(), nc)));
  long long before = total_calls();
  double t0 = lp_clock_monotonic();
  lp_cp_outcome cold = {0};
  lp_cp_get_instance_types(cp, nc, lp_cp_outcome_store, &cold);
  lp_cp_outcome_wait(&loop, &cold);
  double cold_s = lp_clock_monotonic() - t0;
  long long cold_calls = total_calls() - before;
  size_t types = json_array_size(cold.value), offerings = 0, i;
  json_t *type;
  json_array_foreach(cold.value, i, type) offerings += json_array_size(json_object_get(type, "offerings"));
  /* the mapping again, its own caches warm: what a changed node class (a new fingerprint) costs */
  json_object_set_new(json_object_get(nc, "metadata"), "labels", json_pack("{s:s}", "bench", "changed"));
  before = total_calls();
  t0 = lp_clock_monotonic();
  lp_cp_outcome warm = {0};
  lp_cp_get_instance_types(cp, nc, lp_cp_outcome_store, &warm);
  lp_cp_outcome_wait(&loop, &warm);
  double warm_s = lp_clock_monotonic() - t0;
  long long warm_calls = total_calls() - before;
  /* held by the engine: the same class again, answered from memory */
  int held_calls = 10000, held_failures = 0;
  before = total_calls();
  t0 = lp_clock_monotonic();
  for (int k = 0; k < held_calls; k++) {
    lp_cp_outcome held = {0};
    lp_cp_get_instance_types(cp, nc, lp_cp_outcome_store, &held);
    lp_cp_outcome_wait(&loop, &held);
    if (held.error || json_array_size(held.value) != types) held_failures++;
    json_decref(held.value);
    lp_error_free(held.error);
  }
  double held_s = lp_clock_monotonic() - t0;
  long long held_api = total_calls() - before;
  printf("GetInstanceTypes: %zu types, %zu offerings%s\n", types, offerings,
         cold.error || warm.error || held_failures ? " (FAILED, see stderr)" : "");
  if (cold.error) fprintf(stderr, "%s\n", cold.error->message);
  printf("  cold (mapping caches empty)        %10.1f ms  %lld cloud API calls\n", cold_s * 1000, cold_calls);
  printf("  class changed (mapping runs)       %10.1f ms  %lld cloud API calls\n", warm_s * 1000, warm_calls);
  printf("  held by the engine (%d calls) %10.1f us per call  %lld cloud API calls\n", held_calls,
         held_s * 1e6 / held_calls, held_api);
  json_decref(cold.value);
  json_decref(warm.value);
  lp_error_free(cold.error);
  lp_error_free(warm.error);
  json_decref(admin("POST", "/_sim/catalogue", "{}"));

  /* 2. IsDrifted through the Lua policy for 10,000 NodeClaims */
  const char *hash_key = lp_cloudprovider_nodeclass(cp)->hash_annotation;
  const char *version_key = lp_cloudprovider_nodeclass(cp)->hash_version_annotation;
  /* with the uid and resourceVersion every object read from the API server carries */
  json_t *claim = json_pack("{s:{s:s, s:s, s:s, s:{s:s, s:s}}, s:{s:s}}", "metadata", "name", "n", "uid",
                            "6a1f-claim", "resourceVersion", "101", "annotations", hash_key, "h1",
                            version_key, "lp1", "status", "providerID", "cn-hangzhou.i-1");
  json_t *klass =
      json_pack("{s:{s:s, s:s, s:s, s:{s:s, s:s}}, s:{s:[{s:s}], s:[{s:s}], s:[{s:s, s:s}]}}", "metadata",
                "name", "default", "uid", "6a1f-class", "resourceVersion", "7", "annotations", hash_key, "h1",
                version_key, "lp1", "status", "images", "id", "m-1", "securityGroups", "id", "sg-1",
                "vSwitches", "id", "vsw-1", "zoneID", "cn-hangzhou-h");
  json_t *inst = json_pack("{s:s, s:s, s:[s], s:s}", "id", "i-1", "image_id", "m-1", "security_group_ids",
                           "sg-1", "vswitch_id", "vsw-1");
  int n = 10000;
  t0 = lp_clock_monotonic();
  for (int k = 0; k < n; k++) {
    pending++;
    lp_script_host_call(scripts, "policies.drift", "is_drifted", json_pack("[OOO{}]", claim, klass, inst),
                        count_done, NULL);
    if (pending >= 500) uv_run(&loop, UV_RUN_NOWAIT);
  }
  while (pending > 0) uv_run(&loop, UV_RUN_ONCE);
  double drift_s = lp_clock_monotonic() - t0;
  printf("IsDrifted through policies/drift.lua: %d NodeClaims in %.1f ms, %.1f us per call\n", n,
         drift_s * 1000, drift_s * 1e6 / n);
  json_decref(claim);
  json_decref(klass);
  json_decref(inst);

  /* 3. List with 1,000 instances of this cluster */
  int launched = 1000;
  /* the catalogue reset rebuilt the account: resolve the class again (the mapping's create chooses
   * the vSwitch and image from its status) */
  json_object_set_new(nc, "status", mapping_sync("resolve_nodeclass", json_pack("[oO]", ctx(), nc)));
  json_t *status = json_object_get(nc, "status");
  const char *zone =
      json_string_value(json_object_get(json_array_get(json_object_get(status, "vSwitches"), 0), "zoneID"));
  t0 = lp_clock_monotonic();
  for (int k = 0; k < launched; k++) {
    char token[64], name[64];
    snprintf(token, sizeof token, "bench-%d", k);
    snprintf(name, sizeof name, "bench-%d", k);
    json_t *launch = json_pack(
        "{s:{s:{s:s}}, s:O, s:{s:s}, s:[{s:s, s:s, s:s, s:s, s:{s:s, s:[{s:s, s:s, s:[s]}]}}]}", "nodeclaim",
        "metadata", "name", name, "nodeclass", nc, "tags", "kubernetes.io/cluster/luaprov-sim", "owned",
        "offerings", "instance_type", "ecs.g7.large", "zone", zone, "capacity_type", "on-demand",
        "client_token", token, "type", "name", "ecs.g7.large", "requirements", "key", "kubernetes.io/arch",
        "operator", "In", "values", "amd64");
    pending++;
    lp_script_host_call(scripts, "providers.alibaba", "create", json_pack("[oo]", ctx(), launch), count_done,
                        NULL);
    if (pending >= 64) uv_run(&loop, UV_RUN_ONCE);
  }
  while (pending > 0) uv_run(&loop, UV_RUN_ONCE);
  double launch_s = lp_clock_monotonic() - t0;
  long long describe_before = calls_of("DescribeInstances");
  before = total_calls();
  t0 = lp_clock_monotonic();
  lp_cp_outcome listed = {0};
  lp_cp_list(cp, lp_cp_outcome_store, &listed);
  lp_cp_outcome_wait(&loop, &listed);
  double list_s = lp_clock_monotonic() - t0;
  printf("List: %zu NodeClaims for %d instances in %.1f ms: %lld cloud API calls (%lld DescribeInstances)\n",
         json_array_size(listed.value), launched, list_s * 1000, total_calls() - before,
         calls_of("DescribeInstances") - describe_before);
  printf("  (launching them through the mapping took %.1f s, %.1f ms per instance)\n", launch_s,
         launch_s * 1000 / launched);
  if (listed.error) fprintf(stderr, "list: %s\n", listed.error->message);
  if (failures) printf("  (%d calls failed, see stderr)\n", failures);
  json_decref(listed.value);
  lp_error_free(listed.error);

  /* 4. Create through the engine, as the lifecycle controller calls it: offering choice, tags policy,
   * the mapping's launch (its lookup of the NodeClaim's instance, the user data, RunInstances) */
  json_t *annotations = json_pack("{s:s, s:s}", hash_key, "h1", version_key, "lp1");
  json_object_set_new(json_object_get(nc, "metadata"), "annotations", annotations);
  int creates = 200;
  long long run_before = calls_of("RunInstances"), describe_at = calls_of("DescribeInstances");
  before = total_calls();
  int create_failures = 0;
  t0 = lp_clock_monotonic();
  for (int k = 0; k < creates; k++) {
    char name[64];
    snprintf(name, sizeof name, "create-%d", k);
    json_t *claim_k =
        json_pack("{s:{s:s, s:s, s:{s:s}}, s:{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}], s:{s:{s:s}}}}",
                  "metadata", "name", name, "uid", name, "labels", "karpenter.sh/nodepool", "default", "spec",
                  "requirements", "key", "node.kubernetes.io/instance-type", "operator", "In", "values",
                  "ecs.g7.large", "key", "karpenter.sh/capacity-type", "operator", "In", "values",
                  "on-demand", "resources", "requests", "cpu", "1");
    lp_cp_outcome made = {0};
    lp_cp_create(cp, claim_k, nc, lp_cp_outcome_store, &made);
    lp_cp_outcome_wait(&loop, &made);
    if (made.error && create_failures++ == 0) fprintf(stderr, "create: %s\n", made.error->message);
    json_decref(made.value);
    lp_error_free(made.error);
    json_decref(claim_k);
  }
  double create_s = lp_clock_monotonic() - t0;
  long long create_calls = total_calls() - before;
  printf("Create through the engine: %d NodeClaims one after another in %.2f s, %.1f ms each%s\n", creates,
         create_s, create_s * 1000 / creates, create_failures ? " (FAILURES, see stderr)" : "");
  printf("  %.2f cloud API calls per create (%.2f RunInstances, %.2f DescribeInstances)\n",
         (double)create_calls / creates, (double)(calls_of("RunInstances") - run_before) / creates,
         (double)(calls_of("DescribeInstances") - describe_at) / creates);

  json_decref(nc);
  lp_cloudprovider_free(cp);
  lp_script_host_close(scripts, NULL, NULL);
  lp_http_client_close(http, NULL, NULL);
  lp_sim_close(sim, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  lp_cache_registry_clear();
  return 0;
}
