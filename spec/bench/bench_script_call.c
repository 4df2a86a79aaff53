/* Cost of one C -> Lua policy call with a small table argument, through the whole script host path
 * (coroutine, JSON arguments pushed as Lua tables, results encoded back, done callback), compared with
 * a bare lua_pcall on the same state as the floor; then the shipped drift policy (policies/drift.lua)
 * on a NodeClaim, an ECSNodeClass and an instance, the call IsDrifted makes, with the two Kubernetes
 * objects carrying metadata.uid and resourceVersion as the informers' objects do, and without them.
 * Prints figures; never fails on time. */
#include <jansson.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "script/host.h"

static const char policy[] = "local M = {}\n"
                             "function M.is_drifted(claim, class, instance)\n"
                             "  if claim.metadata.annotations.hash ~= class.metadata.annotations.hash then\n"
                             "    return 'NodeClassDrift'\n"
                             "  end\n"
                             "  if instance.image_id ~= class.status.image then return 'ImageDrift' end\n"
                             "  return ''\n"
                             "end\n"
                             "return M\n";

static const lp_module_spec modules[] = {{"policies.bench", "bench", 1, NULL}, {NULL, NULL, 0, NULL}};

static json_t *small_args(void) {
  return json_pack("[{s:{s:{s:s}}}, {s:{s:{s:s}}, s:{s:s}}, {s:s, s:s}]", "metadata", "annotations", "hash",
                   "abc", "metadata", "annotations", "hash", "abc", "status", "image", "m-1", "image_id",
                   "m-1", "zone", "cn-hangzhou-h");
}

/* {metadata = {annotations = {hash = "abc"}}, status = {image = "m-1"} (with_status)} */
static void push_object(lua_State *L, int with_status) {
  lua_createtable(L, 0, 2);
  lua_createtable(L, 0, 1);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "abc");
  lua_setfield(L, -2, "hash");
  lua_setfield(L, -2, "annotations");
  lua_setfield(L, -2, "metadata");
  if (with_status) {
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "m-1");
    lua_setfield(L, -2, "image");
    lua_setfield(L, -2, "status");
  }
}

/* The objects of bench_cloudprovider's IsDrifted figure, a NodeClaim and its ECSNodeClass (with_identity:
 * with the uid and resourceVersion every object read from the API server has), and an instance. */
static void drift_objects(int with_identity, json_t **claim, json_t **klass, json_t **inst) {
  const char *hash = "karpenter.k8s.alibabacloud/ecsnodeclass-hash";
  const char *version = "karpenter.k8s.alibabacloud/ecsnodeclass-hash-version";
  *claim = json_pack("{s:{s:s, s:{s:s, s:s}}, s:{s:s}}", "metadata", "name", "n", "annotations", hash, "h1",
                     version, "lp1", "status", "providerID", "cn-hangzhou.i-1");
  *klass = json_pack("{s:{s:s, s:{s:s, s:s}}, s:{s:[{s:s}], s:[{s:s}], s:[{s:s, s:s}]}}", "metadata", "name",
                     "default", "annotations", hash, "h1", version, "lp1", "status", "images", "id", "m-1",
                     "securityGroups", "id", "sg-1", "vSwitches", "id", "vsw-1", "zoneID", "cn-hangzhou-h");
  if (with_identity) {
    json_t *m = json_object_get(*claim, "metadata");
    json_object_set_new(m, "uid", json_string("6a1f-claim"));
    json_object_set_new(m, "resourceVersion", json_string("101"));
    m = json_object_get(*klass, "metadata");
    json_object_set_new(m, "uid", json_string("6a1f-class"));
    json_object_set_new(m, "resourceVersion", json_string("7"));
  }
  *inst = json_pack("{s:s, s:s, s:[s], s:s}", "id", "i-1", "image_id", "m-1", "security_group_ids", "sg-1",
                    "vswitch_id", "vsw-1");
}

static int pending;
static void count_done(const lp_task_result *r, void *ud) {
  if (r->error) fprintf(stderr, "call failed: %s\n", r->error->message);
  pending--;
}

/* n pipelined calls of policies/drift.lua's is_drifted, as bench_cloudprovider makes them; ns per call. */
static double drift_ns(lp_script_host *h, uv_loop_t *loop, int n, int with_identity) {
  json_t *claim, *klass, *inst;
  drift_objects(with_identity, &claim, &klass, &inst);
  double t0 = lp_clock_monotonic();
  for (int i = 0; i < n; i++) {
    pending++;
    lp_script_host_call(h, "policies.drift", "is_drifted", json_pack("[OOO{}]", claim, klass, inst),
                        count_done, NULL);
    if (pending >= 500) uv_run(loop, UV_RUN_NOWAIT);
  }
  while (pending > 0) uv_run(loop, UV_RUN_ONCE);
  double ns = (lp_clock_monotonic() - t0) * 1e9 / n;
  json_decref(claim);
  json_decref(klass);
  json_decref(inst);
  return ns;
}

static const lp_module_spec drift_modules[] = {{"policies.drift", "drift policy", 1, NULL},
                                               {NULL, NULL, 0, NULL}};

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200000;
  lp_log_configure(LP_LOG_WARN, LP_LOG_FORMAT_JSON, 2);
  char tree[] = "/tmp/luaprov-bench-XXXXXX";
  if (!mkdtemp(tree)) return 1;
  char path[128];
  snprintf(path, sizeof path, "%s/policies", tree);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/policies/bench.lua", tree);
  FILE *f = fopen(path, "w");
  fputs(policy, f);
  fclose(f);

  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_script_host_config cfg = {.loop = &loop, .defaults_dir = tree, .modules = modules};
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  if (!h) return 1;

  /* Warm up, and check the answer once. */
  lp_task_result *r = lp_script_host_call_sync(h, "policies.bench", "is_drifted", small_args());
  printf("result: %s\n", r->json);
  lp_task_result_free(r);

  /* 1. Through the host, many calls in flight, completions delivered by the loop. */
  double t0 = lp_clock_monotonic();
  for (int i = 0; i < n; i++) {
    pending++;
    lp_script_host_call(h, "policies.bench", "is_drifted", small_args(), count_done, NULL);
    if (pending >= 1000) uv_run(&loop, UV_RUN_NOWAIT);
  }
  while (pending > 0) uv_run(&loop, UV_RUN_ONCE);
  double host_ns = (lp_clock_monotonic() - t0) * 1e9 / n;

  /* 2. One call at a time, waiting for each (what a synchronous caller sees). */
  int m = n / 10;
  t0 = lp_clock_monotonic();
  for (int i = 0; i < m; i++)
    lp_task_result_free(lp_script_host_call_sync(h, "policies.bench", "is_drifted", small_args()));
  double sync_ns = (lp_clock_monotonic() - t0) * 1e9 / m;

  /* 3. The floor: the same function called with lua_pcall on tables built in place. */
  lua_State *L = lp_generation_state(lp_script_host_current(h));
  int raw_errors = 0;
  t0 = lp_clock_monotonic();
  for (int i = 0; i < n; i++) {
    lp_generation_push_module(lp_script_host_current(h), "policies.bench");
    lua_getfield(L, -1, "is_drifted");
    lua_remove(L, -2);
    push_object(L, 0);
    push_object(L, 1);
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "m-1");
    lua_setfield(L, -2, "image_id");
    lua_pushliteral(L, "cn-hangzhou-h");
    lua_setfield(L, -2, "zone");
    raw_errors += lua_pcall(L, 3, 1, 0) != LUA_OK;
    lua_pop(L, 1);
  }
  double raw_ns = (lp_clock_monotonic() - t0) * 1e9 / n;

  printf("script call, small table argument (%d calls)\n", n);
  printf("  host call, pipelined         %8.0f ns/call  (%.0f calls/s)\n", host_ns, 1e9 / host_ns);
  printf("  host call, one at a time     %8.0f ns/call\n", sync_ns);
  printf("  bare lua_pcall (floor)       %8.0f ns/call%s\n", raw_ns, raw_errors ? "  (CALLS FAILED)" : "");
  printf("  generation heap              %8zu bytes\n", lp_generation_memory(lp_script_host_current(h)));

  lp_script_host_close(h, NULL, NULL);

  /* 4. The drift policy as IsDrifted calls it. */
  cfg.defaults_dir = LUAPROV_SOURCE_DIR;
  cfg.modules = drift_modules;
  h = lp_script_host_new(&cfg, &problems);
  if (!h) return 1;
  int d = n / 4;
  drift_ns(h, &loop, 1000, 1); /* warm up */
  double fresh_ns = drift_ns(h, &loop, d, 0);
  double known_ns = drift_ns(h, &loop, d, 1);
  printf("drift policy is_drifted (policies/drift.lua, %d calls)\n", d);
  printf("  objects without uid/resourceVersion %8.0f ns/call\n", fresh_ns);
  printf("  objects with uid/resourceVersion    %8.0f ns/call\n", known_ns);
  lp_script_host_close(h, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  remove(path);
  snprintf(path, sizeof path, "%s/policies", tree);
  rmdir(path);
  rmdir(tree);
  lp_cache_registry_clear();
  return 0;
}
