/* The drift controller at scale: N NodeClaims (default 5,000) of real simulated instances (100 launched
 * through the CloudProvider over the four zones, shared round robin), then drift passes over all of them with
 * the drift controller alone in the manager. The simulators run in a child process, so this process
 * holds only the engine side; cloud API calls are read from the Alibaba simulator's /_sim/state.
 *
 * Passes, each timed from its trigger to its last evaluation (re-evaluations after its own status writes
 * included; the pass is over once a second passes without one):
 *   1. cold: the manager starts; every NodeClaim is evaluated; the Lua policy looks each instance up;
 *   2. the NodePool's template changes: every NodeClaim NodePoolDrifted (static: no cloud call,
 *      a status write each);
 *   3. the change is undone: every condition removed (the policy's answers are cached: no cloud call);
 *   4. the ECSNodeClass's status changes: the cached answers no longer count, every instance is looked
 *      up again.
 * InstanceTypeNotFound is not exercised: it waits for NodeClaims an hour old (its cost is one
 * GetInstanceTypes per ECSNodeClass per 30 minutes). Figures are printed; nothing fails on time.
 *
 * usage: bench_drift [N] */
#include <stdio.h>
#include <stdlib.h>

#include "bench_support.h"
#include "controller/defs.h"
#include "controller/manager.h"
#include "controller/nodepool.h"
#include "core/clock.h"
#include "http/client.h"
#include "kube/config.h"

#define CLAIMS  "/apis/karpenter.sh/v1/nodeclaims"
#define CLASSES "/apis/karpenter.alibabacloud.com/v1alpha1/ecsnodeclasses"
#define POOL    "bench"
/* Launching costs the mapping's CPU (tens of ms each), so the NodeClaims share this many instances: the
 * drift policy still looks an instance up per NodeClaim, only the simulator's instance table is small. */
#define INSTANCES 100

static uv_loop_t loop;
static lp_http_client *http;
static char kube_url[BENCH_URL_MAX], alibaba_url[BENCH_URL_MAX];
static lp_cloudprovider *cloud;
static lp_metrics *metrics;

/* ---- HTTP to the simulators ----------------------------------------------------------------- */

/* METHOD base+path with body (stolen; NULL for none); waits; returns the decoded answer (caller
 * decrefs). A status >= 300 is printed to stderr. */
static json_t *call(const char *base, const char *method, const char *path, json_t *body) {
  long status = 0;
  json_t *v = bench_request(&loop, http, base, method, path, body, &status);
  if (status >= 300) fprintf(stderr, "%s %s: HTTP %ld\n", method, path, status);
  return v;
}

/* Calls the Alibaba simulator answered so far: of action, or in all (action NULL). */
static long long cloud_calls(const char *action) {
  json_t *state = call(alibaba_url, "GET", "/_sim/state", NULL);
  long long n = action ? json_integer_value(json_object_get(json_object_get(state, "calls"), action))
                       : json_integer_value(json_object_get(state, "total_calls"));
  json_decref(state);
  return n;
}

/* ---- seeding -------------------------------------------------------------------------------- */

static json_t *mapping(lp_script_host *scripts, const char *function, json_t *args) {
  lp_task_result *r = lp_script_host_call_sync(scripts, "providers.alibaba", function, args);
  json_t *v = r->json ? json_loads(r->json, JSON_DECODE_ANY, NULL) : NULL;
  if (r->error) fprintf(stderr, "%s: %s\n", function, r->error->message);
  lp_task_result_free(r);
  return v;
}

/* The ECSNodeClass "default", resolved and hashed as the nodeclass controller leaves it, stored. */
static json_t *seed_nodeclass(lp_script_host *scripts) {
  json_t *nc = json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:{s:s}}], s:[{s:{s:s}}], s:[{s:s}]}}", "apiVersion",
                         "karpenter.alibabacloud.com/v1alpha1", "kind", "ECSNodeClass", "metadata", "name",
                         "default", "spec", "vSwitchSelectorTerms", "tags", "karpenter.sh/discovery",
                         "luaprov-sim", "securityGroupSelectorTerms", "tags", "karpenter.sh/discovery",
                         "luaprov-sim", "imageSelectorTerms", "alias", "AlibabaCloudLinux3");
  json_t *ctx = json_pack("{s:s, s:s, s:s}", "region", "cn-hangzhou", "cluster_id", "luaprov-sim", "endpoint",
                          alibaba_url);
  json_t *resolved = mapping(scripts, "resolve_nodeclass", json_pack("[oO]", ctx, nc));
  json_t *status = json_deep_copy(json_array_get(resolved, 0));
  json_decref(resolved);
  json_object_set_new(status, "conditions", json_pack("[{s:s, s:s}]", "type", "Ready", "status", "True"));
  json_t *hash = mapping(scripts, "nodeclass_hash", json_pack("[O]", nc));
  json_object_set_new(
      json_object_get(nc, "metadata"), "annotations",
      json_pack("{s:O, s:O}", "karpenter.k8s.alibabacloud/ecsnodeclass-hash", json_array_get(hash, 0),
                "karpenter.k8s.alibabacloud/ecsnodeclass-hash-version", json_array_get(hash, 1)));
  json_decref(hash);
  json_decref(call(kube_url, "POST", CLASSES, json_incref(nc)));
  json_decref(call(kube_url, "PATCH", CLASSES "/default/status", json_pack("{s:O}", "status", status)));
  json_object_set_new(nc, "status", status);
  return nc;
}

static json_t *nodepool(const char *team) {
  return json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}}}",
                   "apiVersion", "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", POOL, "spec",
                   "template", "metadata", "labels", "team", team, "spec", "nodeClassRef", "group",
                   "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default", "requirements",
                   "key", "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand");
}

/* Launches one instance per zone in turn through Create: the NodeClaims the CloudProvider returned. */
static json_t *launch_instances(const json_t *nodeclass, size_t count) {
  static const char *const zones[] = {"cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j", "cn-hangzhou-k"};
  json_t *out = json_array();
  for (size_t i = 0; i < count; i++) {
    char name[32];
    snprintf(name, sizeof name, "instance-%03zu", i);
    json_t *claim = json_pack(
        "{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}], "
        "s:{s:{s:s}}}}",
        "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name, "uid", name, "labels",
        "karpenter.sh/nodepool", POOL, "spec", "nodeClassRef", "group", "karpenter.alibabacloud.com", "kind",
        "ECSNodeClass", "name", "default", "requirements", "key", "karpenter.sh/capacity-type", "operator",
        "In", "values", "on-demand", "key", "topology.kubernetes.io/zone", "operator", "In", "values",
        zones[i % 4], "resources", "requests", "cpu", "1");
    lp_cp_outcome o = {0};
    lp_cp_create(cloud, claim, nodeclass, lp_cp_outcome_store, &o);
    lp_cp_outcome_wait(&loop, &o);
    json_decref(claim);
    if (o.error) {
      fprintf(stderr, "launch %s: %s\n", name, o.error->message);
      lp_error_free(o.error);
      continue;
    }
    json_array_append_new(out, o.value);
  }
  return out;
}

/* Stores NodeClaims claim-00000.. as launched (Launched=True), each a copy of a launched one: step 0
 * creates the NodeClaim, step 1 writes its status. */
typedef struct seeding {
  const json_t *launched;
  char hash[17];
} seeding;

static int claim_request(bench_seeding *bs, size_t i, unsigned step, bench_seed_request *req) {
  const seeding *s = bs->ud;
  const json_t *launched = json_array_get(s->launched, i % json_array_size(s->launched));
  char name[32];
  snprintf(name, sizeof name, "claim-%05zu", i);
  if (step == 0) {
    json_t *claim = json_deep_copy(launched);
    json_object_del(claim, "status");
    json_t *md = json_object_get(claim, "metadata");
    json_object_del(md, "uid");
    json_object_set_new(md, "name", json_string(name));
    json_t *annotations = json_object_get(md, "annotations");
    if (!annotations) json_object_set_new(md, "annotations", annotations = json_object());
    json_object_set_new(annotations, LP_NODEPOOL_HASH_ANNOTATION, json_string(s->hash));
    json_object_set_new(annotations, LP_NODEPOOL_HASH_VERSION_ANNOTATION,
                        json_string(LP_NODEPOOL_HASH_VERSION));
    json_object_set_new(json_object_get(md, "labels"), "team", json_string("a"));
    req->method = "POST";
    snprintf(req->path, sizeof req->path, CLAIMS);
    req->body = json_dumps(claim, JSON_COMPACT);
    json_decref(claim);
    return 1;
  }
  if (step > 1) return 0;
  char ts[LP_RFC3339_SIZE];
  lp_clock_rfc3339(lp_clock_wall(), 0, ts);
  json_t *status = json_deep_copy(json_object_get(launched, "status"));
  json_object_set_new(status, "conditions",
                      json_pack("[{s:s, s:s, s:s, s:s, s:s}]", "type", "Launched", "status", "True", "reason",
                                "Launched", "message", "", "lastTransitionTime", ts));
  json_t *patch = json_pack("{s:o}", "status", status);
  req->method = "PATCH";
  snprintf(req->path, sizeof req->path, CLAIMS "/%s/status", name);
  req->body = json_dumps(patch, JSON_COMPACT);
  json_decref(patch);
  return 1;
}

/* ---- measuring ------------------------------------------------------------------------------ */

static double metric(const char *name, const char *label) {
  lp_metric *m = lp_metrics_find(metrics, name);
  return m ? lp_metric_value(m, label ? LP_LABELS(label) : NULL) : 0;
}

/* Reconciles of the drift controller that ended in an error (409s on a stale cache among them). */
static double failed_reconciles(void) {
  lp_metric *m = lp_metrics_find(metrics, "luaprov_controller_reconciles_total");
  return m ? lp_metric_value(m, LP_LABELS("nodeclaim.drift", "error")) : 0;
}

static double evaluations(void) {
  static const char *const results[] = {"drifted", "not_drifted", "unknown", "error"};
  double n = 0;
  for (size_t i = 0; i < 4; i++) n += metric("luaprov_drift_evaluations_total", results[i]);
  return n;
}

/* A pass: trigger (NULL for the start itself), then the loop runs until, evaluations having begun, none
 * happened for a second; the figures cover the trigger to the last evaluation, re-evaluations after the
 * pass's own status writes included. */
typedef struct pass {
  const char *what;
  const char *method, *path; /* the change that starts it, sent to the Kubernetes simulator */
  json_t *body;              /* stolen */
} pass;

static void run_pass(const pass *p, lp_controllers **m, lp_kube_client *kube) {
  long long calls0 = cloud_calls(NULL), describes0 = cloud_calls("DescribeInstances");
  double evaluated0 = evaluations(), failed0 = failed_reconciles(), t0 = lp_clock_monotonic();
  if (p->path) {
    json_decref(call(kube_url, p->method, p->path, p->body));
  } else {
    static const lp_controller_def *const only_drift[] = {&lp_drift_controller, NULL};
    *m = bench_start_manager(&loop, kube, cloud, only_drift, metrics);
  }
  uv_timer_t tick; /* wakes the loop so a quiet second is noticed */
  bench_ticker_start(&loop, &tick);
  double seen = evaluated0, last_change = t0;
  while ((seen == evaluated0 || lp_clock_monotonic() - last_change < 1.0) &&
         lp_clock_monotonic() - t0 < 600) {
    uv_run(&loop, UV_RUN_ONCE);
    if (evaluations() != seen) {
      seen = evaluations();
      last_change = lp_clock_monotonic();
    }
  }
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  double dt = last_change - t0, evaluated = seen - evaluated0;
  printf("%-40s %6.2f s %6.0f evaluations (%5.0f/s) %5.0f drifted %6lld cloud calls (%lld DescribeInstances) "
         "%.0f retried\n",
         p->what, dt, evaluated, evaluated / dt, metric("luaprov_nodeclaims_drifted", POOL),
         cloud_calls(NULL) - calls0, cloud_calls("DescribeInstances") - describes0,
         failed_reconciles() - failed0);
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? (size_t)atol(argv[1]) : 5000;
  pid_t sim_pid = bench_start(&loop, &http, kube_url, alibaba_url);
  lp_script_host *scripts = NULL;
  cloud = bench_cloudprovider(&loop, http, "luaprov-sim", alibaba_url, &scripts);

  size_t ninstances = n < INSTANCES ? n : INSTANCES;
  printf("launching %zu instances through the CloudProvider, storing %zu NodeClaims of them...\n", ninstances,
         n);
  double t0 = lp_clock_monotonic();
  json_t *nodeclass = seed_nodeclass(scripts);
  json_t *launched = launch_instances(nodeclass, ninstances);
  seeding seeds = {.launched = launched};
  bench_seeding s = {.http = http,
                     .base_url = kube_url,
                     .request = claim_request,
                     .ud = &seeds,
                     .total = json_array_size(launched) ? n : 0};
  json_t *pool = nodepool("a");
  lp_nodepool_hash(pool, seeds.hash);
  json_decref(call(kube_url, "POST", "/apis/karpenter.sh/v1/nodepools", pool));
  bench_seed(&loop, &s);
  printf("seeding took %.1f s (%zu failed)\n\n", lp_clock_monotonic() - t0, s.failed);
  n = s.total - s.failed;
  json_decref(launched);

  lp_kube_config *kcfg = NULL;
  lp_kube_client *kube = bench_kube_client(&loop, kube_url, &kcfg);
  metrics = lp_metrics_new();
  printf("drift passes over %zu NodeClaims (10 reconciles at once, the manager's default):\n", n);
  lp_controllers *m = NULL;
  const pass passes[] = {
      {"1. cold start (caches synced, evaluated)", NULL, NULL, NULL},
      {"2. NodePool template changed", "PATCH", "/apis/karpenter.sh/v1/nodepools/" POOL, nodepool("b")},
      {"3. change undone", "PATCH", "/apis/karpenter.sh/v1/nodepools/" POOL, nodepool("a")},
      {"4. ECSNodeClass status changed", "PATCH", CLASSES "/default/status",
       json_pack("{s:{s:s}}", "status", "note", "x")},
  };
  for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) run_pass(&passes[i], &m, kube);

  bench_stop_manager(&loop, m);
  json_decref(nodeclass);
  bench_close(&loop, cloud, scripts, kube, kcfg, http);
  lp_metrics_free(metrics);
  bench_stop_simulators(sim_pid);
  return 0;
}
