/* The consolidation simulation at scale (engine/controller/disruption_simulate.c): N initialized
 * NodeClaims with Ready Nodes (default 500) of 8 cores, each running P bound pods (default 10, so 5,000)
 * (one of 4 cores, the rest small), spread over the zones that sell the nodes' type, against a synthetic
 * Alibaba catalogue of T instance types (default 500) in 4 zones, one NodePool. The pods are 20
 * Deployments (label app); 5 of them spread over zones (maxSkew 1, DoNotSchedule), 2 keep one replica a
 * node (required pod anti-affinity on the hostname), 1 prefers to spread over hostnames
 * (ScheduleAnyway). The simulators run in a child process, so this process holds only the engine.
 *
 * Figures: the snapshot (dz_sim_new to ready: the instance types through the mapping, cold, then the
 * caches read once), CPU seconds and heap; one dz_simulate of a single candidate (mean of 100); a
 * multi-node binary search over the 100 emptiest candidates (the ~7 calls Karpenter's multi-node
 * consolidation makes); single-node consolidation over every node, one call each (its worst case:
 * nothing consolidates); and a whole pass of the three, in CPU seconds (target: under 1 s).
 *
 * usage: bench_consolidation [NODES] [PODS_PER_NODE] [INSTANCE_TYPES] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_support.h"
#include "controller/conditions.h"
#include "controller/defs.h"
#include "controller/disruption_simulate.h"
#include "controller/manager.h"
#include "simulate_test_support.h"
#include "core/clock.h"

#define TYPE "ecs.g7.2xlarge"

static uv_loop_t loop;
static lp_http_client *http;
static char kube_url[BENCH_URL_MAX], alibaba_url[BENCH_URL_MAX];
static size_t pods_per_node = 10;
#define MAX_ZONES 4
static const char *zones[MAX_ZONES]; /* those that sell TYPE on demand */
static size_t nzones;

/* Node i's zone: consecutive groups of 4 nodes (one of each load) share one. */
static const char *zone_of(size_t node) {
  return zones[(node / 4) % nzones];
}

/* ---- seeding ------------------------------------------------------------------------------- */

static int node_request(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req) {
  (void)s;
  char name[32], pid[64];
  snprintf(name, sizeof name, "node-%04zu", i);
  snprintf(pid, sizeof pid, "ecs://luaprov-sim/%s", name);
  json_t *labels =
      json_pack("{s:s, s:s, s:s, s:s, s:s}", "karpenter.sh/nodepool", "default",
                "node.kubernetes.io/instance-type", TYPE, "topology.kubernetes.io/zone", zone_of(i),
                "karpenter.sh/capacity-type", "on-demand", "kubernetes.io/hostname", name);
  json_t *body = NULL;
  if (step == 0) {
    req->method = "POST";
    snprintf(req->path, sizeof req->path, "/apis/karpenter.sh/v1/nodeclaims");
    body = json_pack("{s:s, s:s, s:{s:s, s:O}, s:{s:{s:s, s:s, s:s}, s:[]}}", "apiVersion", "karpenter.sh/v1",
                     "kind", "NodeClaim", "metadata", "name", name, "labels", labels, "spec", "nodeClassRef",
                     "group", "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default",
                     "requirements");
  } else if (step == 1) {
    req->method = "PATCH";
    snprintf(req->path, sizeof req->path, "/apis/karpenter.sh/v1/nodeclaims/%s/status", name);
    body = json_pack("{s:{s:s, s:s, s:{s:s, s:s}, s:[{s:s, s:s}]}}", "status", "providerID", pid, "nodeName",
                     name, "allocatable", "cpu", "7800m", "memory", "29Gi", "conditions", "type",
                     "Initialized", "status", "True");
  } else if (step == 2) {
    req->method = "POST";
    snprintf(req->path, sizeof req->path, "/api/v1/nodes");
    body = json_pack("{s:s, s:s, s:{s:s, s:O}, s:{s:s}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s}]}}", "apiVersion",
                     "v1", "kind", "Node", "metadata", "name", name, "labels", labels, "spec", "providerID",
                     pid, "status", "allocatable", "cpu", "7800m", "memory", "29Gi", "pods", "110",
                     "conditions", "type", "Ready", "status", "True");
  }
  json_decref(labels);
  if (!body) return 0;
  req->body = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  return 1;
}

/* The topology of app a's pods: apps 0-4 spread over zones (maxSkew 1, DoNotSchedule), apps 18 and 19
 * one replica a node (required anti-affinity on the hostname), app 17 prefers one a node (a hostname
 * spread, ScheduleAnyway). Sets it into spec. */
static void topology(json_t *spec, size_t a, const char *app) {
  const char *key = a < 5 ? "topology.kubernetes.io/zone" : "kubernetes.io/hostname";
  if (a < 5 || a == 17)
    json_object_set_new(spec, "topologySpreadConstraints",
                        json_pack("[{s:i, s:s, s:s, s:{s:{s:s}}}]", "maxSkew", 1, "topologyKey", key,
                                  "whenUnsatisfiable", a < 5 ? "DoNotSchedule" : "ScheduleAnyway",
                                  "labelSelector", "matchLabels", "app", app));
  if (a >= 18)
    json_object_set_new(spec, "affinity",
                        json_pack("{s:{s:[{s:s, s:{s:{s:s}}}]}}", "podAntiAffinity",
                                  "requiredDuringSchedulingIgnoredDuringExecution", "topologyKey", key,
                                  "labelSelector", "matchLabels", "app", app));
}

/* Pod i, bound to node i / pods_per_node: the node's first pod asks for 4 cores, which fit on no other
 * node (so every single-node simulation needs a replacement), the others for the cpu of k % 4 (node k:
 * 4.9, 5.8, 6.7 or 7.15 of its 7.8 cores with 10 pods); memory drawn from a set, every 10th pod pinned
 * to its node's zone; app i % 20, with that app's topology (the replicas of an app are on distinct
 * nodes, evenly over the zones). A scheduler of its own: the simulator's binder leaves it alone. */
static int pod_request(bench_seeding *s, size_t i, unsigned step, bench_seed_request *req) {
  (void)s;
  if (step > 0) return 0;
  static const char *const cpus[] = {"100m", "200m", "300m", "350m"};
  static const char *const mems[] = {"128Mi", "256Mi", "512Mi", "1Gi", "2Gi"};
  unsigned long x = (unsigned long)i * 2654435761ul + 42;
  size_t node = i / pods_per_node;
  char name[32], node_name[32];
  snprintf(name, sizeof name, "pod-%05zu", i);
  snprintf(node_name, sizeof node_name, "node-%04zu", node);
  char app[16];
  snprintf(app, sizeof app, "app-%02zu", i % 20);
  const char *cpu = i % pods_per_node == 0 ? "4" : cpus[node % 4];
  json_t *p = json_pack(
      "{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:s, s:s, s:[{s:s, s:s, s:{s:{s:s, s:s}}}]}, s:{s:s}}",
      "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "namespace", "default", "labels", "app",
      app, "spec", "schedulerName", "custom", "nodeName", node_name, "containers", "name", "app", "image",
      "app", "resources", "requests", "cpu", cpu, "memory", mems[(x >> 7) % 5], "status", "phase", "Running");
  if (i % 10 == 0)
    json_object_set_new(json_object_get(p, "spec"), "nodeSelector",
                        json_pack("{s:s}", "topology.kubernetes.io/zone", zone_of(node)));
  topology(json_object_get(p, "spec"), i % 20, app);
  req->method = "POST";
  snprintf(req->path, sizeof req->path, "/api/v1/namespaces/default/pods");
  req->body = json_dumps(p, JSON_COMPACT);
  json_decref(p);
  return 1;
}

/* ---- the engine side ------------------------------------------------------------------------ */

static dz_sim *sim;

/* The zones of TYPE's available on-demand offerings into zones (static storage kept in types). */
static void pick_zones(const json_t *types) {
  size_t i, k;
  const json_t *t, *o;
  json_array_foreach(types, i, t) {
    if (strcmp(json_string_value(json_object_get(t, "name")) ?: "", TYPE) != 0) continue;
    json_array_foreach(json_object_get(t, "offerings"), k, o) {
      if (nzones < MAX_ZONES && json_is_true(json_object_get(o, "available")) &&
          strcmp(json_string_value(json_object_get(o, "capacity_type")) ?: "", "on-demand") == 0)
        zones[nzones++] = json_string_value(json_object_get(o, "zone"));
    }
  }
}

typedef struct tally {
  size_t calls, feasible, replaced;
} tally;

static void run(json_t *const *cands, size_t n, tally *t) {
  dz_sim_result r;
  dz_simulate(sim, cands, n, 0, &r);
  t->calls++;
  t->feasible += r.feasible;
  t->replaced += r.replacement != NULL;
  dz_sim_result_free(&r);
}

/* Karpenter's multi-node consolidation: the largest prefix of cands that is feasible. */
static size_t binary_search(json_t *const *cands, size_t n, tally *t) {
  size_t lo = 1, hi = n, best = 0;
  while (lo <= hi) {
    size_t mid = (lo + hi) / 2;
    dz_sim_result r;
    dz_simulate(sim, cands, mid, 0, &r);
    t->calls++;
    if (r.feasible) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
    dz_sim_result_free(&r);
  }
  return best;
}

int main(int argc, char **argv) {
  size_t n_nodes = argc > 1 ? (size_t)atol(argv[1]) : 500;
  pods_per_node = argc > 2 ? (size_t)atol(argv[2]) : 10;
  int n_types = argc > 3 ? atoi(argv[3]) : 500;
  pid_t sim_pid = bench_start(&loop, &http, kube_url, alibaba_url);

  bench_catalogue_and_pool(&loop, http, kube_url, alibaba_url, n_types);

  lp_script_host *scripts = NULL;
  lp_cloudprovider *cp = bench_cloudprovider(&loop, http, "luaprov-sim", alibaba_url, &scripts);
  lp_kube_config *kcfg = NULL;
  lp_kube_client *kc = bench_kube_client(&loop, kube_url, &kcfg);

  static const lp_controller_def *const defs[] = {&lp_nodeclass_controller, &sp_probe_def, NULL};
  lp_metrics *metrics = lp_metrics_new();
  lp_controllers *m = bench_start_manager(&loop, kc, cp, defs, metrics);
  lp_ctrl_env *env = lp_controllers_env(m);
  double deadline = lp_clock_monotonic() + 60;
  while (lp_clock_monotonic() < deadline &&
         !lp_condition_is(lp_env_get(env, LP_KIND_NODECLASS, "default"), "Ready", "True"))
    uv_run(&loop, UV_RUN_ONCE);
  lp_cp_outcome o = {0};
  lp_cp_get_instance_types(cp, lp_env_get(env, LP_KIND_NODECLASS, "default"), lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&loop, &o);
  lp_error_free(o.error);
  pick_zones(o.value);
  printf("nodes in %zu zones\n", nzones);
  if (!nzones) {
    fprintf(stderr, "no on-demand offering of %s\n", TYPE);
    return 1;
  }

  double t0 = lp_clock_monotonic();
  bench_seeding s = {.http = http, .base_url = kube_url, .request = node_request, .total = n_nodes};
  bench_seed(&loop, &s);
  printf("seeded %zu NodeClaims with Nodes in %.1f s\n", n_nodes, lp_clock_monotonic() - t0);
  bench_seeding sp = {
      .http = http, .base_url = kube_url, .request = pod_request, .total = n_nodes * pods_per_node};
  bench_seed(&loop, &sp);
  printf("seeded %zu NodeClaims with Nodes and %zu bound pods in %.1f s (%zu failed)\n", n_nodes,
         n_nodes * pods_per_node, lp_clock_monotonic() - t0, s.failed + sp.failed);
  while (lp_clock_monotonic() < deadline + 120 && (lp_env_count(env, LP_KIND_POD) < n_nodes * pods_per_node ||
                                                   lp_env_count(env, LP_KIND_NODE) < n_nodes || !sp_probe))
    uv_run(&loop, UV_RUN_ONCE);
  for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT); /* the last status patches */

  double heap0 = bench_heap_mib(1), cpu0 = bench_cpu_seconds();
  t0 = lp_clock_monotonic();
  sim = sp_snapshot(&loop, NULL);
  double snap_s = lp_clock_monotonic() - t0, snap_cpu = bench_cpu_seconds() - cpu0;
  printf("snapshot (cold: instance types listed through the mapping): %.3f s, CPU %.3f s, heap +%.1f MiB\n",
         snap_s, snap_cpu, bench_heap_mib(1) - heap0);
  if (!sim) return 1;

  /* the candidates: every NodeClaim, emptiest first (Karpenter orders by disruption cost) */
  json_t **cands = calloc(n_nodes + 1, sizeof *cands);
  size_t nc = 0;
  for (size_t load = 0; load < 4; load++)
    for (size_t i = load; i < n_nodes; i += 4) {
      char name[32];
      snprintf(name, sizeof name, "node-%04zu", i);
      cands[nc] = lp_env_get(env, LP_KIND_NODECLAIM, name);
      if (!cands[nc++]) {
        fprintf(stderr, "%s is not cached\n", name);
        return 1;
      }
    }

  tally one = {0};
  cpu0 = bench_cpu_seconds();
  for (int i = 0; i < 100; i++) run(&cands[n_nodes - 1], 1, &one);
  double one_cpu = (bench_cpu_seconds() - cpu0) / 100;
  printf("one dz_simulate, 1 candidate (its 4-core pod needs a new node): %.3f ms CPU (mean of 100; %s)\n",
         one_cpu * 1000,
         one.replaced   ? "replace"
         : one.feasible ? "delete"
                        : "not feasible");

  tally multi = {0};
  size_t n_multi = n_nodes < 100 ? n_nodes : 100;
  cpu0 = bench_cpu_seconds();
  size_t best = binary_search(cands, n_multi, &multi);
  double multi_cpu = bench_cpu_seconds() - cpu0;
  printf("multi-node binary search over %zu candidates: %zu calls, %.3f s CPU; largest feasible prefix %zu\n",
         n_multi, multi.calls, multi_cpu, best);

  tally single = {0};
  cpu0 = bench_cpu_seconds();
  for (size_t i = 0; i < n_nodes; i++) run(&cands[i], 1, &single);
  double single_cpu = bench_cpu_seconds() - cpu0;
  printf("single-node over all %zu nodes: %.3f s CPU (%.3f ms a call); %zu delete, %zu replace, %zu not "
         "feasible\n",
         n_nodes, single_cpu, single_cpu * 1000 / (double)n_nodes, single.feasible - single.replaced,
         single.replaced, single.calls - single.feasible);
  printf("a whole pass (snapshot + multi-node + single-node worst case): %.3f s CPU (target <= 1 s)\n",
         snap_cpu + multi_cpu + single_cpu);

  free(cands);
  dz_sim_free(sim);
  json_decref(o.value);
  bench_stop_manager(&loop, m);
  bench_close(&loop, cp, scripts, kc, kcfg, http);
  lp_metrics_free(metrics);
  bench_stop_simulators(sim_pid);
  return 0;
}
