/* The controller manager at scale: N NodeClaims and N Nodes (default 5,000 each) in the simulated
 * Kubernetes API, then the manager's informers list and watch them.
 *
 * Figures: time from start to caches synced; resident memory and CPU the caches cost (the simulator
 * runs in a child process, so this process holds only the engine side); reconciles per second of the
 * framework (a controller that reads its object from the cache and ends), for every NodeClaim at
 * once and again after a resync; and the same with the real lifecycle controller on NodeClaims that
 * are launched, registered and initialized (the steady state: read, compare, no write).
 *
 * usage: bench_controllers [N] */
#include <stdio.h>
#include <stdlib.h>

#include "bench_support.h"
#include "controller/defs.h"
#include "controller/manager.h"
#include "core/clock.h"
#include "http/client.h"
#include "kube/config.h"

static uv_loop_t loop;
static lp_http_client *http;
static char kube_url[BENCH_URL_MAX];
static size_t reconciled;

/* ---- seeding ------------------------------------------------------------------------------- */

static size_t n_objects;

/* NodeClaims launched, registered and initialized, their Nodes Ready: the steady state. */
static int claim_request(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req) {
  (void)s;
  if (step > 0) return 0;
  req->method = "POST";
  snprintf(req->path, sizeof req->path, "/apis/karpenter.sh/v1/nodeclaims");
  req->body = lp_xasprintf(
      "{\"apiVersion\":\"karpenter.sh/v1\",\"kind\":\"NodeClaim\",\"metadata\":{\"name\":\"claim-%05zu\","
      "\"finalizers\":[\"karpenter.sh/termination\"],\"labels\":{\"karpenter.sh/nodepool\":\"default\","
      "\"node.kubernetes.io/instance-type\":\"ecs.g7.large\",\"topology.kubernetes.io/zone\":"
      "\"cn-hangzhou-h\",\"karpenter.sh/capacity-type\":\"on-demand\"}},\"spec\":{\"nodeClassRef\":{"
      "\"group\":\"karpenter.alibabacloud.com\",\"kind\":\"ECSNodeClass\",\"name\":\"default\"},"
      "\"requirements\":[{\"key\":\"karpenter.sh/capacity-type\",\"operator\":\"In\",\"values\":"
      "[\"on-demand\"]}],\"resources\":{\"requests\":{\"cpu\":\"1\"}}}}",
      i);
  return 1;
}

static int claim_status_request(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req) {
  (void)s;
  if (step > 0) return 0;
  req->method = "PATCH";
  snprintf(req->path, sizeof req->path, "/apis/karpenter.sh/v1/nodeclaims/claim-%05zu/status", i);
  char ts[LP_RFC3339_SIZE];
  lp_clock_rfc3339(lp_clock_wall(), 0, ts);
  req->body = lp_xasprintf(
      "{\"status\":{\"providerID\":\"cn-hangzhou.i-bench%05zu\",\"nodeName\":\"node-%05zu\",\"imageID\":"
      "\"aliyun_3_x64\",\"capacity\":{\"cpu\":\"2\",\"memory\":\"8Gi\",\"pods\":\"110\"},\"allocatable\":{"
      "\"cpu\":\"1930m\",\"memory\":\"7Gi\",\"pods\":\"110\"},\"conditions\":["
      "{\"type\":\"Launched\",\"status\":\"True\",\"reason\":\"Launched\",\"message\":\"\","
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Registered\",\"status\":\"True\",\"reason\":\"Registered\",\"message\":\"\","
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Initialized\",\"status\":\"True\",\"reason\":\"Initialized\",\"message\":\"\","
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"Ready\",\"message\":\"\",\"lastTransitionTime\":"
      "\"%s\"}]}}",
      i, i, ts, ts, ts, ts);
  return 1;
}

static int node_request(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req) {
  (void)s;
  if (step > 0) return 0;
  req->method = "POST";
  snprintf(req->path, sizeof req->path, "/api/v1/nodes");
  req->body = lp_xasprintf(
      "{\"metadata\":{\"name\":\"node-%05zu\",\"finalizers\":[\"karpenter.sh/termination\"],\"labels\":{"
      "\"karpenter.sh/nodepool\":\"default\",\"karpenter.sh/registered\":\"true\","
      "\"karpenter.sh/initialized\":\"true\",\"kubernetes.io/arch\":\"amd64\",\"kubernetes.io/os\":"
      "\"linux\",\"node.kubernetes.io/instance-type\":\"ecs.g7.large\",\"topology.kubernetes.io/zone\":"
      "\"cn-hangzhou-h\",\"karpenter.sh/capacity-type\":\"on-demand\"}},"
      "\"spec\":{\"providerID\":\"cn-hangzhou.i-bench%05zu\"}}",
      i, i);
  return 1;
}

static int node_status_request(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req) {
  (void)s;
  if (step > 0) return 0;
  req->method = "PATCH";
  snprintf(req->path, sizeof req->path, "/api/v1/nodes/node-%05zu/status", i);
  req->body = lp_xasprintf(
      "{\"status\":{\"capacity\":{\"cpu\":\"2\",\"memory\":\"8Gi\",\"pods\":\"110\"},\"allocatable\":{"
      "\"cpu\":\"1930m\",\"memory\":\"7Gi\",\"pods\":\"110\"},\"conditions\":[{\"type\":\"Ready\","
      "\"status\":\"True\",\"reason\":\"KubeletReady\"}]}}");
  return 1;
}

static double seed(const char *what, bench_seed_fn request) {
  bench_seeding s = {.http = http, .base_url = kube_url, .request = request, .total = n_objects};
  double dt = bench_seed(&loop, &s);
  if (s.failed) fprintf(stderr, "%s: %zu requests failed\n", what, s.failed);
  return dt;
}

/* ---- measuring ----------------------------------------------------------------------------- */

static void count_reconcile(lp_controller *c, const char *key) {
  json_t *claim = lp_env_get(lp_controller_env(c), LP_KIND_NODECLAIM, key);
  if (claim && lp_obj_name(claim)) reconciled++;
  lp_controller_done(c, key, NULL, 0);
}

static const lp_controller_def counter = {
    .name = "bench", .primary = LP_KIND_NODECLAIM, .reconcile = count_reconcile};

/* Starts a manager with controllers, waits for synced, returns it; prints sync figures when asked. */
static lp_controllers *start_manager(lp_kube_client *kc, lp_cloudprovider *cp,
                                     const lp_controller_def *const *defs, lp_metrics *metrics, int report) {
  long rss0 = bench_rss_kib();
  double heap0 = bench_heap_mib(0), cpu0 = bench_cpu_seconds(), t0 = lp_clock_monotonic();
  lp_controllers *m = bench_start_manager(&loop, kc, cp, defs, metrics);
  while (!lp_controllers_synced(m)) uv_run(&loop, UV_RUN_ONCE);
  double sync_s = lp_clock_monotonic() - t0;
  if (report) {
    long rss1 = bench_rss_kib();
    printf("start to caches synced:    %.2f s (%zu objects listed, 500 per page)\n", sync_s, 2 * n_objects);
    printf("CPU during the sync:       %.2f s\n", bench_cpu_seconds() - cpu0);
    printf("resident memory:           %.1f MiB before, %.1f MiB synced: %.1f MiB for the caches "
           "(%.1f KiB per object)\n",
           rss0 / 1024.0, rss1 / 1024.0, (rss1 - rss0) / 1024.0, (double)(rss1 - rss0) / (2.0 * n_objects));
    double heap1 = bench_heap_mib(0);
    printf("heap in use:               %.1f MiB before, %.1f MiB synced: %.1f MiB (%.1f KiB per object)\n",
           heap0, heap1, heap1 - heap0, (heap1 - heap0) * 1024 / (2.0 * n_objects));
  }
  return m;
}

static void wait_reconciled(size_t want, double timeout_s) {
  double deadline = lp_clock_monotonic() + timeout_s;
  while (reconciled < want && lp_clock_monotonic() < deadline) uv_run(&loop, UV_RUN_ONCE);
}

int main(int argc, char **argv) {
  n_objects = argc > 1 ? (size_t)atol(argv[1]) : 5000;
  pid_t sim_pid = bench_start(&loop, &http, kube_url, NULL);

  printf("seeding %zu NodeClaims and %zu Nodes (launched, registered, initialized) into the simulator...\n",
         n_objects, n_objects);
  double seeded_s = seed("nodeclaims", claim_request) + seed("nodeclaim status", claim_status_request) +
                    seed("nodes", node_request) + seed("node status", node_status_request);
  printf("seeding took %.1f s (%.0f writes/s to the Lua simulator)\n", seeded_s, 4 * n_objects / seeded_s);

  lp_kube_config *kcfg = NULL;
  lp_kube_client *kc = bench_kube_client(&loop, kube_url, &kcfg);
  lp_metrics *metrics = lp_metrics_new();

  /* 1: the framework alone */
  const lp_controller_def *const only_counter[] = {&counter, NULL};
  lp_controllers *m = start_manager(kc, NULL, only_counter, metrics, 1);
  double t0 = lp_clock_monotonic();
  wait_reconciled(n_objects, 120);
  double dt = lp_clock_monotonic() - t0;
  printf("framework reconciles:      %zu in %.3f s = %.0f reconciles/s (every NodeClaim queued at start)\n",
         reconciled, dt, reconciled / dt);
  bench_stop_manager(&loop, m);

  /* 2: the lifecycle controller in the steady state: every NodeClaim read, compared, nothing written */
  lp_script_host *scripts = NULL;
  lp_cloudprovider *cp = bench_cloudprovider(&loop, http, "bench", NULL, &scripts);
  const lp_controller_def *const only_lifecycle[] = {&lp_nodeclaim_lifecycle_controller, NULL};
  /* pass 1 brings the seeded objects in line (owner references, labels: writes); pass 2, after a
   * restart of the manager, is the steady state: every NodeClaim read and compared, nothing written */
  uv_timer_t tick; /* wakes the loop so the quiet second is noticed */
  bench_ticker_start(&loop, &tick);
  for (int pass = 1; pass <= 2; pass++) {
    lp_metrics *pm = lp_metrics_new();
    m = start_manager(kc, cp, only_lifecycle, pm, 0);
    lp_metric *reconciles = lp_metrics_find(pm, "luaprov_controller_reconciles_total");
    t0 = lp_clock_monotonic();
    double total = 0, last_change = t0;
    while (lp_clock_monotonic() - last_change < 1.0 && lp_clock_monotonic() - t0 < 300) {
      double now_total = lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "success")) +
                         lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "requeue")) +
                         lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "error"));
      if (now_total != total) {
        total = now_total;
        last_change = lp_clock_monotonic();
      }
      uv_run(&loop, UV_RUN_ONCE);
    }
    dt = last_change - t0;
    printf("lifecycle reconciles, %s: %.0f in %.3f s = %.0f reconciles/s (%.0f ended in error)\n",
           pass == 1 ? "first pass (writes owner refs, labels)" : "steady state (reads only)   ", total, dt,
           total / dt, lp_metric_value(reconciles, LP_LABELS("nodeclaim.lifecycle", "error")));
    bench_stop_manager(&loop, m);
    lp_metrics_free(pm);
  }
  uv_close((uv_handle_t *)&tick, NULL);

  bench_close(&loop, cp, scripts, kc, kcfg, http);
  lp_metrics_free(metrics);
  bench_stop_simulators(sim_pid);
  return 0;
}
