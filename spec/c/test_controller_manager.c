/* The controller manager (engine/controller/manager.h) against the Kubernetes simulator over real HTTP:
 * caches and indices follow the API; a change is reconciled once at its latest version, also across a
 * dropped watch and a 410 relist (nothing missed, nothing reconciled twice); no reconcile starts while a
 * cache relists; with leader election only the holder reconciles, the standby takes over when the
 * leader stops, and a new leader acts only on caches listed after it won (not on what its cut-off
 * watches last delivered). A recording controller stands in for the real ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller_fixture.h"

/* ---- a controller that records what it reconciled ------------------------------------------ */

static ctrl_fixture fx;
static json_t *seen; /* "manager|key|resourceVersion" -> times reconciled */
static lp_ctrl_env *env_a, *env_b;

/* A probe: the first reconcile of probe.key by the manager whose env is probe.env notes whether that
 * manager's cache then held the Node probe.expect. */
static struct {
  lp_ctrl_env *env;
  const char *key, *expect;
  int done, had_it;
} probe;

static void record(lp_controller *c, const char *key) {
  lp_ctrl_env *env = lp_controller_env(c);
  if (env == probe.env && !probe.done && (!probe.key || strcmp(key, probe.key) == 0)) {
    probe.done = 1;
    probe.had_it = lp_env_get(env, LP_KIND_NODE, probe.expect) != NULL;
  }
  json_t *node = lp_env_get(env, LP_KIND_NODE, key);
  const char *who = env == env_b ? "b" : "a";
  char *entry = lp_xasprintf("%s|%s|%s", who, key, node ? lp_obj_resource_version(node) : "gone");
  json_t *n = json_object_get(seen, entry);
  json_object_set_new(seen, entry, json_integer(json_integer_value(n) + 1));
  free(entry);
  lp_controller_done(c, key, NULL, 0);
}

/* A pod named "trigger" makes the recorder look at node-a: a key enqueued by another cache's change. */
static void on_pod(lp_controller *c, lp_kind kind, const json_t *old_obj, const json_t *new_obj) {
  if (kind == LP_KIND_POD && !old_obj && new_obj && strcmp(lp_obj_name(new_obj) ?: "", "trigger") == 0)
    lp_controller_enqueue(c, "node-a");
}

static const lp_controller_def recorder = {
    .name = "recorder", .primary = LP_KIND_NODE, .reconcile = record, .on_change = on_pod};
static const lp_controller_def *const recorder_only[] = {&recorder, NULL};

/* How often manager who reconciled key at its current resourceVersion. */
static long long times(ctrl_fixture *f, const char *who, const char *key) {
  json_t *node = lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODE, key);
  char entry[256];
  snprintf(entry, sizeof entry, "%s|%s|%s", who, key, node ? lp_obj_resource_version(node) : "gone");
  return json_integer_value(json_object_get(seen, entry));
}

static long long total_for(const char *who) {
  long long n = 0;
  const char *k;
  json_t *v;
  json_object_foreach(seen, k, v) {
    if (k[0] == who[0]) n += json_integer_value(v);
  }
  return n;
}

static void create_node(ctrl_fixture *f, const char *name, const char *provider_id) {
  char body[512];
  snprintf(body, sizeof body, "{\"metadata\":{\"name\":\"%s\"},\"spec\":{\"providerID\":\"%s\"}}", name,
           provider_id);
  long status = 0;
  json_decref(ctrl_kube(f, "POST", "/api/v1/nodes", body, &status));
  CHECK_INT(status, 201);
}

static void label_node(ctrl_fixture *f, const char *name, const char *value) {
  char path[256], body[256];
  snprintf(path, sizeof path, "/api/v1/nodes/%s", name);
  snprintf(body, sizeof body, "{\"metadata\":{\"labels\":{\"step\":\"%s\"}}}", value);
  long status = 0;
  json_decref(ctrl_kube(f, "PATCH", path, body, &status));
  CHECK_INT(status, 200);
}

static int synced(ctrl_fixture *f, const void *ud) {
  (void)ud;
  return lp_controllers_synced(f->manager) && lp_controllers_active(f->manager);
}

/* The cached node has the label step=value and was reconciled at that version. */
static int reconciled_at(ctrl_fixture *f, const void *ud) {
  const char *const *kv = ud;
  json_t *node = lp_env_get(lp_controllers_env(f->manager), LP_KIND_NODE, kv[0]);
  const char *step = lp_obj_str(node, "metadata.labels.step");
  return step && strcmp(step, kv[1]) == 0 && times(f, "a", kv[0]) >= 1;
}

/* ---- caches, indices, one reconcile per change --------------------------------------------- */

static void count_key(const char *key, json_t *obj, void *ud) {
  (void)key;
  (void)obj;
  ++*(int *)ud;
}

static void test_caches_and_indices(void) {
  ctrl_fixture *f = &fx;
  CHECK(ctrl_wait_for(f, 10, synced, NULL));
  lp_ctrl_env *env = lp_controllers_env(f->manager);
  create_node(f, "node-a", "cn-hangzhou.i-a");
  create_node(f, "node-b", "cn-hangzhou.i-b");
  long status = 0;
  json_decref(ctrl_kube(
      f, "POST", "/api/v1/namespaces/default/pods",
      "{\"metadata\":{\"name\":\"web\"},\"spec\":{\"nodeName\":\"node-a\",\"containers\":[]}}", &status));
  CHECK_INT(status, 201);
  ctrl_run_for(f, 1.0);
  CHECK_INT(times(f, "a", "node-a"), 1);
  CHECK_INT(times(f, "a", "node-b"), 1);

  size_t n = 0;
  json_t *node = lp_env_index_first(env, LP_INDEX_NODE_BY_PROVIDER_ID, "cn-hangzhou.i-b", &n);
  CHECK_INT(n, 1);
  CHECK_STR(lp_obj_name(node), "node-b");
  int pods = 0;
  CHECK_INT(lp_env_index_each(env, LP_INDEX_POD_BY_NODE, "node-a", count_key, &pods), 1);
  CHECK_INT(pods, 1);
  CHECK(lp_env_get(env, LP_KIND_POD, "default/web") != NULL);

  /* the provider ID moves: the index follows */
  json_decref(ctrl_kube(f, "PATCH", "/api/v1/nodes/node-b", "{\"spec\":{\"providerID\":\"cn-hangzhou.i-c\"}}",
                        &status));
  ctrl_run_for(f, 0.5);
  CHECK(lp_env_index_first(env, LP_INDEX_NODE_BY_PROVIDER_ID, "cn-hangzhou.i-b", NULL) == NULL);
  CHECK_STR(lp_obj_name(lp_env_index_first(env, LP_INDEX_NODE_BY_PROVIDER_ID, "cn-hangzhou.i-c", NULL)),
            "node-b");
  CHECK_INT(times(f, "a", "node-b"), 1);

  /* delete: gone from the cache and the index, reconciled as gone */
  json_decref(ctrl_kube(f, "DELETE", "/api/v1/namespaces/default/pods/web", NULL, &status));
  ctrl_run_for(f, 0.5);
  CHECK_INT(lp_env_index_each(env, LP_INDEX_POD_BY_NODE, "node-a", NULL, NULL), 0);
  CHECK(lp_env_get(env, LP_KIND_POD, "default/web") == NULL);
  CHECK(ctrl_metric(f, "luaprov_controller_reconciles_total", LP_LABELS("recorder", "success")) >= 3);
  CHECK_INT(ctrl_metric(f, "luaprov_caches_synced", NULL), 1);
}

/* ---- dropped watches and 410: nothing missed, nothing twice --------------------------------- */

static void test_watch_drop_and_relist(void) {
  ctrl_fixture *f = &fx;
  label_node(f, "node-a", "1");
  CHECK(ctrl_wait_for(f, 5, reconciled_at, (const char *const[]){"node-a", "1"}));
  long long before = total_for("a");

  /* the watch drops; a change made while it reconnects still arrives, once */
  json_decref(ctrl_admin(f, "kubernetes", "POST", "/_sim/faults", "{\"kind\":\"drop_watches\"}"));
  label_node(f, "node-a", "2");
  CHECK(ctrl_wait_for(f, 10, reconciled_at, (const char *const[]){"node-a", "2"}));
  CHECK_INT(times(f, "a", "node-a"), 1);

  /* the watch drops, a change it did not see is compacted away: resuming from its last version gets
   * 410 Gone, the informer relists and reports only what changed. The failed first rewatch holds the
   * watch in backoff long enough for both changes to happen unseen. */
  json_decref(ctrl_admin(f, "kubernetes", "POST", "/_sim/faults",
                         "[{\"verb\":\"watch\",\"resource\":\"nodes\",\"status\":500,\"count\":1},"
                         "{\"kind\":\"drop_watches\"}]"));
  label_node(f, "node-a", "3");
  json_decref(ctrl_admin(f, "kubernetes", "POST", "/_sim/faults", "{\"kind\":\"compact\"}"));
  label_node(f, "node-a", "4");
  CHECK(ctrl_wait_for(f, 10, reconciled_at, (const char *const[]){"node-a", "4"}));
  ctrl_run_for(f, 0.5);
  CHECK_INT(times(f, "a", "node-a"), 1);
  CHECK_INT(times(f, "a", "node-b"), 1); /* unchanged objects are not reconciled again */
  /* node-a at versions 2 and 4 at most, plus possibly 3 when its event beat the drop */
  long long added = total_for("a") - before;
  CHECK(added >= 2 && added <= 3);
  CHECK(ctrl_metric(f, "luaprov_informer_relists_total", LP_LABELS("nodes")) >= 1);
}

/* ---- no reconcile while a cache relists ----------------------------------------------------- */

static int probed(ctrl_fixture *f, const void *ud) {
  (void)f;
  (void)ud;
  return probe.done;
}

static int relisting_nodes(ctrl_fixture *f, const void *before) {
  return ctrl_metric(f, "luaprov_informer_relists_total", LP_LABELS("nodes")) > *(const double *)before;
}

/* The Node cache relists slowly (its watch fell behind a compaction while node-relisted was created);
 * meanwhile a pod enqueues node-a. Its reconcile waits until the relist is in: it sees node-relisted. */
static void test_paused_while_relisting(void) {
  ctrl_fixture *f = &fx;
  double relists = ctrl_metric(f, "luaprov_informer_relists_total", LP_LABELS("nodes"));
  json_decref(ctrl_admin(f, "kubernetes", "POST", "/_sim/faults",
                         "[{\"verb\":\"watch\",\"resource\":\"nodes\",\"status\":500,\"count\":1},"
                         "{\"kind\":\"slow\",\"verb\":\"list\",\"resource\":\"nodes\",\"seconds\":2,"
                         "\"count\":1},{\"kind\":\"drop_watches\"}]"));
  create_node(f, "node-relisted", "cn-hangzhou.i-relisted");
  json_decref(ctrl_admin(f, "kubernetes", "POST", "/_sim/faults", "{\"kind\":\"compact\"}"));
  CHECK(ctrl_wait_for(f, 10, relisting_nodes, &relists));
  CHECK(!lp_controllers_active(f->manager));
  CHECK_INT(ctrl_metric(f, "luaprov_caches_synced", NULL), 0);
  probe = (typeof(probe)){.env = lp_controllers_env(f->manager), .key = "node-a", .expect = "node-relisted"};
  long status = 0;
  json_decref(ctrl_kube(f, "POST", "/api/v1/namespaces/default/pods",
                        "{\"metadata\":{\"name\":\"trigger\"},\"spec\":{\"containers\":[]}}", &status));
  CHECK_INT(status, 201);
  CHECK(ctrl_wait_for(f, 10, probed, NULL));
  CHECK(probe.had_it);
  CHECK(lp_controllers_active(f->manager));
  CHECK_INT(ctrl_metric(f, "luaprov_caches_synced", NULL), 1);
  probe = (typeof(probe)){0};
  json_decref(ctrl_kube(f, "DELETE", "/api/v1/namespaces/default/pods/trigger", NULL, &status));
}

/* ---- leader election: one acts, the other takes over --------------------------------------- */

static int a_leads(ctrl_fixture *f, const void *ud) {
  (void)f;
  return lp_controllers_active((const lp_controllers *)ud);
}

/* Two managers campaigning for the Lease: *leader (identity first) once it leads, then *standby. */
static void start_pair(ctrl_fixture *f, const char *first, const char *second, lp_controllers **leader,
                       lp_controllers **standby) {
  lp_controllers_config cfg = ctrl_manager_config(f, recorder_only);
  cfg.leader_elect = 1;
  cfg.leader_namespace = "kube-system";
  lp_error *err = NULL;
  cfg.leader_identity = first;
  *leader = lp_controllers_start(&cfg, &err);
  CHECK(ctrl_wait_for(f, 10, a_leads, *leader));
  cfg.leader_identity = second;
  *standby = lp_controllers_start(&cfg, &err);
}

static void test_leader_election(void) {
  ctrl_fixture *f = &fx;
  lp_controllers *a, *b;
  start_pair(f, "engine-a", "engine-b", &a, &b);
  env_a = lp_controllers_env(a);
  env_b = lp_controllers_env(b);
  json_object_clear(seen);
  create_node(f, "node-c", "cn-hangzhou.i-cc");
  ctrl_run_for(f, 3);
  CHECK(lp_controllers_synced(b));
  CHECK(!lp_controllers_active(b));
  CHECK(total_for("a") >= 1);
  CHECK_INT(total_for("b"), 0);

  /* the leader stops and releases the Lease: b takes over at its next attempt and reconciles all */
  int stopped = 0;
  lp_controllers_stop(a, ctrl_set_flag, &stopped);
  CHECK(ctrl_wait_for(f, 10, a_leads, b));
  CHECK(stopped);
  ctrl_run_for(f, 0.5);
  CHECK(total_for("b") >= 3); /* node-a, node-b, node-c */
  long status = 0;
  json_t *lease = ctrl_kube(f, "GET",
                            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/"
                            "luaprov-leader-election",
                            NULL, &status);
  CHECK_INT(status, 200);
  CHECK_STR(lp_obj_str(lease, "spec.holderIdentity"), "engine-b");
  json_decref(lease);
  ctrl_stop_manager(f, b);
}

/* The standby's Node watch is cut off (every rewatch fails) while node-unseen is created; then the
 * leader stops. The standby wins the Lease with a cache that lacks node-unseen: it must list again
 * before its first reconcile. */
static void test_new_leader_relists(void) {
  ctrl_fixture *f = &fx;
  lp_controllers *c, *d;
  start_pair(f, "engine-c", "engine-d", &c, &d);
  while (!lp_controllers_synced(d)) uv_run(&f->loop, UV_RUN_ONCE);
  json_decref(
      ctrl_admin(f, "kubernetes", "POST", "/_sim/faults",
                 "[{\"verb\":\"watch\",\"resource\":\"nodes\",\"status\":500},{\"kind\":\"drop_watches\"}]"));
  create_node(f, "node-unseen", "cn-hangzhou.i-unseen");
  ctrl_run_for(f, 0.5);
  CHECK(lp_env_get(lp_controllers_env(d), LP_KIND_NODE, "node-unseen") == NULL); /* the watch is down */

  probe = (typeof(probe)){.env = lp_controllers_env(d), .expect = "node-unseen"};
  int stopped = 0;
  lp_controllers_stop(c, ctrl_set_flag, &stopped);
  CHECK(ctrl_wait_for(f, 10, a_leads, d));
  CHECK(ctrl_wait_for(f, 5, probed, NULL));
  CHECK(probe.had_it); /* its first reconcile already saw what only a new list could show */
  CHECK(stopped);
  probe = (typeof(probe)){0};
  json_decref(ctrl_admin(f, "kubernetes", "DELETE", "/_sim/faults", NULL));
  ctrl_stop_manager(f, d);
}

int main(void) {
  seen = json_object();
  ctrl_fixture_start(&fx, recorder_only, NULL);
  env_a = lp_controllers_env(fx.manager);
  RUN(test_caches_and_indices);
  RUN(test_watch_drop_and_relist);
  RUN(test_paused_while_relisting);
  RUN(test_leader_election);
  RUN(test_new_leader_relists);
  ctrl_fixture_stop(&fx);
  json_decref(seen);
  return check_summary();
}
