/* The NodeGroup contract (rules NG1-NG6, docs/contracts.md) through the real Bizfly mapping
 * (providers/bizfly) against the Bizfly simulator over real HTTP, all on one loop, and the template
 * Node the externalgrpc service sends, decoded back with protobuf-c. test_nodegroup.c checks every
 * rule on a fake mapping; this file checks that the real mapping and the rules fit together. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/contracts.h"
#include "contract/nodegroup.h"
#include "core/cache.h"
#include "core/log.h"
#include "core/metrics.h"
#include "grpc/externalgrpc.h"
#include "http/client.h"
#include "k8s_core.pb-c.h"
#include "log_capture.h"
#include "sim/sim.h"
#include "sim_admin.h"

/* The simulator's fixture (sim/bizfly/fixture.lua). */
#define GENERAL "66a0f1c2b3d4e5f601a2b3c4" /* min 1, max 5, target 2, 2 nodes */
#define GPU     "66a0f1c2b3d4e5f601a2b3c6" /* min 0, max 4, target 1, tainted */
#define BATCH   "66a0f1c2b3d4e5f601a2b3c7" /* min 0, max 10, target 0 */
#define SYSTEM  "66a0f1c2b3d4e5f601a2b3c5" /* not autoscaled */

static uv_loop_t loop;
static lp_sim *sim;
static lp_http_client *http;
static lp_script_host *scripts;
static lp_nodegroups *ng;

/* The simulator's admin API, answered by the same loop (spec/c/sim_admin.h). */
static json_t *admin(const char *method, const char *path, const char *body) {
  return sim_admin(&loop, http, sim, "bizfly", method, path, body);
}

static json_t *sim_pool(const char *id) {
  json_t *state = admin("GET", "/_sim/state", NULL), *found = NULL;
  size_t i;
  json_t *pool;
  json_array_foreach(json_object_get(json_object_get(state, "cluster"), "pools"), i, pool) {
    if (strcmp(json_string_value(json_object_get(pool, "id")), id) == 0) found = json_incref(pool);
  }
  json_decref(state);
  return found;
}

static long long sim_desired(const char *id) {
  json_t *pool = sim_pool(id);
  long long n = json_integer_value(json_object_get(pool, "desired_size"));
  json_decref(pool);
  return n;
}

static long long sim_calls(const char *operation) {
  json_t *state = admin("GET", "/_sim/state", NULL);
  long long n = json_integer_value(json_object_get(json_object_get(state, "calls"), operation));
  json_decref(state);
  return n;
}

static char message[1024];

static const char *wait_code(lp_ng_outcome *o) {
  static char code[64];
  lp_ng_outcome_wait(&loop, o);
  message[0] = 0;
  if (!o->error) return NULL;
  snprintf(code, sizeof code, "%s", o->error->code);
  snprintf(message, sizeof message, "%s", o->error->message);
  lp_error_free(o->error);
  return code;
}

static const char *refresh(void) {
  lp_ng_outcome o = {0};
  lp_ng_refresh(ng, lp_ng_outcome_store, &o);
  return wait_code(&o);
}

static void reset(void) {
  json_decref(admin("POST", "/_sim/reset", NULL));
  CHECK(refresh() == NULL);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_refresh(void) {
  reset();
  CHECK_INT(lp_ng_count(ng), 3);
  CHECK(lp_ng_find(ng, SYSTEM) == NULL); /* autoscaling disabled: not a node group */
  const lp_ng_group *g = lp_ng_find(ng, GENERAL);
  CHECK(g && g->min_size == 1 && g->max_size == 5 && g->target_size == 2 && g->ninstances == 2);
  if (!g) return;
  CHECK(strncmp(g->instances[0].provider_id, "bizflycloud://", 14) == 0);
  CHECK_INT(g->instances[0].state, LP_NG_RUNNING);
  CHECK(lp_ng_for_node(ng, g->instances[1].provider_id) == g);
}

static void test_resize(void) {
  reset();
  lp_ng_outcome o = {0};
  lp_ng_increase_size(ng, GENERAL, 4, lp_ng_outcome_store, &o);
  CHECK_STR(wait_code(&o), "FailedPrecondition");
  CHECK_STR(message, "size increase is too large. current: 2 desired: 6 max: 5");
  CHECK_INT(sim_calls("update_pool"), 0);
  o = (lp_ng_outcome){0};
  lp_ng_increase_size(ng, BATCH, 3, lp_ng_outcome_store, &o);
  CHECK(wait_code(&o) == NULL);
  CHECK_INT(sim_desired(BATCH), 3);
  CHECK_INT(lp_ng_find(ng, BATCH)->target_size, 3);
  o = (lp_ng_outcome){0};
  lp_ng_decrease_target_size(ng, BATCH, -3, lp_ng_outcome_store, &o); /* down to 0: sent explicitly */
  CHECK(wait_code(&o) == NULL);
  CHECK_INT(sim_desired(BATCH), 0);
}

static void test_delete(void) {
  reset();
  const lp_ng_group *g = lp_ng_find(ng, GENERAL), *gpu = lp_ng_find(ng, GPU);
  char general_pid[128], gpu_pid[128];
  snprintf(general_pid, sizeof general_pid, "%s", g->instances[0].provider_id);
  snprintf(gpu_pid, sizeof gpu_pid, "%s", gpu->instances[0].provider_id);
  /* another group's node: refused, nothing deleted */
  json_t *nodes = json_pack("[{s:s, s:s}, {s:s, s:s}]", "provider_id", general_pid, "name", "a",
                            "provider_id", gpu_pid, "name", "b");
  lp_ng_outcome o = {0};
  lp_ng_delete_nodes(ng, GENERAL, nodes, lp_ng_outcome_store, &o);
  json_decref(nodes);
  CHECK_STR(wait_code(&o), "FailedPrecondition");
  CHECK_INT(sim_calls("delete_node"), 0);
  /* the autoscaler's fake node for an instance: no labels, name = providerID */
  nodes = json_pack("[{s:s, s:s}]", "provider_id", general_pid, "name", general_pid);
  o = (lp_ng_outcome){0};
  lp_ng_delete_nodes(ng, GENERAL, nodes, lp_ng_outcome_store, &o);
  json_decref(nodes);
  CHECK(wait_code(&o) == NULL);
  CHECK_INT(sim_calls("delete_node"), 1);
  CHECK_INT(sim_desired(GENERAL), 1);
  CHECK_INT(lp_ng_find(ng, GENERAL)->target_size, 1);
  /* asked again before the next refresh: already being deleted, nothing to do, target unchanged */
  nodes = json_pack("[{s:s, s:s}]", "provider_id", general_pid, "name", general_pid);
  o = (lp_ng_outcome){0};
  lp_ng_delete_nodes(ng, GENERAL, nodes, lp_ng_outcome_store, &o);
  json_decref(nodes);
  CHECK(wait_code(&o) == NULL);
  CHECK_INT(sim_calls("delete_node"), 1);
  CHECK_INT(lp_ng_find(ng, GENERAL)->target_size, 1);
}

/* Rule NG1: a Bizfly failure during Refresh with a usable snapshot keeps serving it. */
static void test_stale(void) {
  reset();
  lp_metric *m =
      lp_metrics_counter(lp_metrics_default(), "luaprov_nodegroup_refresh_total", NULL, LP_LABELS("result"));
  double before = lp_metric_value(m, LP_LABELS("stale"));
  json_decref(admin("POST", "/_sim/faults",
                    "{\"operation\": \"get_cluster\", \"kind\": \"error\", \"status\": 403}"));
  CHECK(refresh() == NULL);
  CHECK(lp_metric_value(m, LP_LABELS("stale")) == before + 1);
  CHECK_INT(lp_ng_count(ng), 3);
  /* without a snapshot the same failure is the answer */
  lp_nodegroups *fresh = lp_nodegroups_new(&(lp_nodegroups_config){.loop = &loop,
                                                                   .scripts = scripts,
                                                                   .cluster = "bkesimluaprov001",
                                                                   .endpoint = lp_sim_url(sim, "bizfly")});
  lp_ng_outcome o = {0};
  lp_ng_refresh(fresh, lp_ng_outcome_store, &o);
  const char *code = wait_code(&o);
  CHECK(code != NULL);
  CHECK_CONTAINS(message, "refresh failed");
  lp_nodegroups_free(fresh);
}

static const char *sim_last_request_id(void) {
  static char id[128];
  json_t *state = admin("GET", "/_sim/state", NULL);
  const char *v = json_string_value(json_object_get(state, "last_request_id"));
  snprintf(id, sizeof id, "%s", v ? v : "");
  json_decref(state);
  return id;
}

static const char *field(const json_t *line, const char *key) {
  return json_string_value(json_object_get(line, key));
}

/* Bizfly refusing a resize or a deletion: one warning per RPC that an operator can take to Bizfly's
 * support (the pool, the RPC, the API call, its request ID), and no credential in any line. */
static void test_refusals_logged(void) {
  reset();
  const lp_ng_group *g = lp_ng_find(ng, GENERAL);
  char pid[128];
  snprintf(pid, sizeof pid, "%s", g->instances[0].provider_id);
  json_t *pool = sim_pool(GENERAL);
  char node_id[64];
  snprintf(node_id, sizeof node_id, "%s",
           json_string_value(json_object_get(json_array_get(json_object_get(pool, "nodes"), 0), "id")));
  json_decref(pool);
  char request_ids[3][128];
  log_capture_start(LP_LOG_WARN);

  json_decref(admin("POST", "/_sim/faults",
                    "{\"operation\": \"update_pool\", \"kind\": \"error\", \"status\": 409, \"message\": "
                    "\"pool is being upgraded\", \"count\": 2}"));
  lp_ng_outcome o = {0};
  lp_ng_increase_size(ng, GENERAL, 1, lp_ng_outcome_store, &o);
  CHECK_STR(wait_code(&o), "InvalidRequest");
  snprintf(request_ids[0], sizeof request_ids[0], "%s", sim_last_request_id());
  CHECK_CONTAINS(message, request_ids[0]); /* the autoscaler's log has it too */
  o = (lp_ng_outcome){0};
  lp_ng_decrease_target_size(ng, BATCH, -1, lp_ng_outcome_store, &o); /* below 0: the engine's own rule */
  CHECK_STR(wait_code(&o), "FailedPrecondition");
  o = (lp_ng_outcome){0};
  lp_ng_increase_size(ng, BATCH, 2, lp_ng_outcome_store, &o);
  CHECK_STR(wait_code(&o), "InvalidRequest");
  snprintf(request_ids[1], sizeof request_ids[1], "%s", sim_last_request_id());
  json_decref(admin("POST", "/_sim/faults",
                    "{\"operation\": \"delete_node\", \"kind\": \"error\", \"status\": 400, \"message\": "
                    "\"node is being drained\", \"count\": 1}"));
  json_t *nodes = json_pack("[{s:s, s:s}]", "provider_id", pid, "name", pid);
  o = (lp_ng_outcome){0};
  lp_ng_delete_nodes(ng, GENERAL, nodes, lp_ng_outcome_store, &o);
  json_decref(nodes);
  CHECK_STR(wait_code(&o), "InvalidRequest");
  snprintf(request_ids[2], sizeof request_ids[2], "%s", sim_last_request_id());

  char *text = NULL;
  json_t *lines = log_capture_stop(&text);
  char pool_path[160], node_path[240];
  snprintf(pool_path, sizeof pool_path, "PATCH /api/kubernetes-engine/_/bkesimluaprov001/%s", GENERAL);
  const json_t *first = log_capture_line(lines, "node group resize failed", 0);
  CHECK(first != NULL);
  CHECK_STR(field(first, "level"), "warn");
  CHECK_STR(field(first, "node_group"), GENERAL);
  CHECK_STR(field(first, "rpc"), "NodeGroupIncreaseSize");
  CHECK_STR(field(first, "action"), pool_path);
  CHECK_INT(json_integer_value(json_object_get(first, "status")), 409);
  CHECK_STR(field(first, "request_id"), request_ids[0]);
  CHECK_STR(field(first, "code"), "InvalidRequest");
  CHECK_CONTAINS(field(first, "error"), "pool is being upgraded");
  CHECK_INT(json_integer_value(json_object_get(first, "target_size")), 3);
  /* the engine's own refusal is the autoscaler's to log: no warning for it */
  const json_t *second = log_capture_line(lines, "node group resize failed", 1);
  CHECK_STR(field(second, "node_group"), BATCH);
  CHECK_STR(field(second, "rpc"), "NodeGroupIncreaseSize");
  CHECK_STR(field(second, "request_id"), request_ids[1]);
  const json_t *third = log_capture_line(lines, "node group resize failed", 2);
  snprintf(node_path, sizeof node_path, "DELETE /api/kubernetes-engine/_/bkesimluaprov001/%s/%s", GENERAL,
           node_id);
  CHECK_STR(field(third, "rpc"), "NodeGroupDeleteNodes");
  CHECK_STR(field(third, "node_group"), GENERAL);
  CHECK_STR(field(third, "action"), node_path);
  CHECK_STR(field(third, "request_id"), request_ids[2]);
  CHECK_STR(field(third, "provider_id"), pid);
  CHECK_INT(json_integer_value(json_object_get(third, "deleted")), 0);
  CHECK(log_capture_line(lines, "node group resize failed", 3) == NULL);
  CHECK(strncmp(request_ids[0], "req-", 4) == 0 && strcmp(request_ids[0], request_ids[1]) != 0);
  CHECK(text && strstr(text, "luaprov-sim-secret") == NULL);
  CHECK(text && strstr(text, "gAAAAAB") == NULL); /* the simulator's tokens */
  free(text);
  json_decref(lines);
}

static const char *label(const K8s__Io__Api__Core__V1__Node *n, const char *key) {
  for (size_t i = 0; i < n->metadata->n_labels; i++)
    if (strcmp(n->metadata->labels[i]->key, key) == 0) return n->metadata->labels[i]->value;
  return NULL;
}

static const char *quantity(K8s__Io__Api__Core__V1__NodeStatus__CapacityEntry **list, size_t n,
                            const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(list[i]->key, key) == 0) return list[i]->value->string;
  return NULL;
}

/* The real mapping's template, as the externalgrpc service encodes it, decoded with protobuf-c. */
static void test_template_bytes(void) {
  reset();
  lp_ng_outcome o = {0};
  lp_ng_template_node(ng, GPU, lp_ng_outcome_node, &o);
  lp_ng_outcome_wait(&loop, &o);
  CHECK(o.error == NULL);
  if (!o.node) return;
  size_t len;
  uint8_t *bytes = lp_externalgrpc_node_bytes(o.node, &len);
  json_decref(o.node);
  K8s__Io__Api__Core__V1__Node *n = k8s__io__api__core__v1__node__unpack(NULL, len, bytes);
  free(bytes);
  CHECK(n != NULL && n->metadata && n->spec && n->status);
  if (!n) return;
  CHECK_STR(n->metadata->name, "template-" GPU);
  CHECK_STR(label(n, "kubernetes.io/os"), "linux");
  CHECK_STR(label(n, "kubernetes.io/hostname"), "template-" GPU);
  CHECK(label(n, "bke.bizflycloud.vn/gpu-node") != NULL);
  CHECK_INT(n->spec->n_taints, 1);
  if (n->spec->n_taints) {
    CHECK_STR(n->spec->taints[0]->key, "nvidia.com/gpu");
    CHECK_STR(n->spec->taints[0]->effect, "NoSchedule");
  }
  CHECK(quantity(n->status->capacity, n->status->n_capacity, "cpu") != NULL);
  CHECK(quantity(n->status->capacity, n->status->n_capacity, "memory") != NULL);
  CHECK(quantity((K8s__Io__Api__Core__V1__NodeStatus__CapacityEntry **)n->status->allocatable,
                 n->status->n_allocatable, "pods") != NULL);
  CHECK_INT(n->status->n_conditions, 1);
  if (n->status->n_conditions) {
    CHECK_STR(n->status->conditions[0]->type, "Ready");
    CHECK_STR(n->status->conditions[0]->status, "True");
    CHECK(n->status->conditions[0]->lasttransitiontime &&
          n->status->conditions[0]->lasttransitiontime->seconds > 0);
  }
  k8s__io__api__core__v1__node__free_unpacked(n, NULL);
}

/* A node that failed to create: "creating" with an error the autoscaler acts on
 * (docs/bizfly.md#what-each-call-does). */
static void test_failed_node(void) {
  reset();
  json_t *pool = sim_pool(GENERAL);
  const char *node_id =
      json_string_value(json_object_get(json_array_get(json_object_get(pool, "nodes"), 0), "id"));
  char path[160];
  snprintf(path, sizeof path, "/_sim/nodes/%s", node_id);
  json_decref(
      admin("POST", path, "{\"status\": \"ERROR\", \"status_reason\": \"Quota exceeded for instances\"}"));
  json_decref(pool);
  CHECK(refresh() == NULL);
  const lp_ng_group *g = lp_ng_find(ng, GENERAL);
  int errors = 0;
  for (size_t i = 0; g && i < g->ninstances; i++) {
    if (g->instances[i].error_class == LP_NG_NO_ERROR) continue;
    errors++;
    CHECK_INT(g->instances[i].state, LP_NG_CREATING);
    CHECK_INT(g->instances[i].error_class, LP_NG_OUT_OF_RESOURCES);
  }
  CHECK_INT(errors, 1);
}

int main(void) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  setenv("BIZFLYCLOUD_AUTH_METHOD", "application_credential", 1);
  setenv("BIZFLYCLOUD_APP_CREDENTIAL_ID", "luaprov-sim-credential", 1);
  setenv("BIZFLYCLOUD_APP_CREDENTIAL_SECRET", "luaprov-sim-secret", 1);
  if (sim_fixture_start(&loop, "bizfly", &sim, &http, &scripts) != 0) return 1;
  json_t *summary = admin("GET", "/_sim/cluster", NULL);
  ng =
      lp_nodegroups_new(&(lp_nodegroups_config){.loop = &loop,
                                                .scripts = scripts,
                                                .cluster = json_string_value(json_object_get(summary, "uid")),
                                                .endpoint = lp_sim_url(sim, "bizfly")});
  json_decref(summary);

  RUN(test_refresh);
  RUN(test_resize);
  RUN(test_delete);
  RUN(test_stale);
  RUN(test_refusals_logged);
  RUN(test_template_bytes);
  RUN(test_failed_node);

  lp_nodegroups_free(ng);
  lp_script_host_close(scripts, NULL, NULL);
  lp_http_client_close(http, NULL, NULL);
  lp_sim_close(sim, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  lp_cache_registry_clear();
  return check_summary();
}
