/* The informer (engine/kube/informer.h) against a fake API server on the engine's HTTP server, pods in
 * namespace "default" with a label selector. One scripted run:
 *   list   three pages (a b | c d | e), resourceVersion 100      -> five adds, then synced
 *   watch  rv=100: ADDED f, MODIFIED a, DELETED b, ERROR 410     -> add, update, delete; relist
 *   relist a (same), c (changed), d (same), f (same); e is gone  -> update c, delete e; nothing re-added
 *   watch  rv=200: ADDED g, on which the owner stops the informer.
 * Then a forced relist (lp_informer_relist) of configmaps whose watch never says anything: the
 * difference is reported, the watch starts again from the new list, and the informer is current only
 * once a list begun after the request is in (a request during a list in flight costs one more list).
 * The fake checks the query of every request; the test checks handlers, store, synced and metrics. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "http/server.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"

static uv_loop_t loop;
static lp_http_server *server;
static lp_kube_config *cfg;
static lp_kube_client *kc;
static lp_informer *inf;
static lp_metrics *metrics;

static struct {
  int lists, pages, watches;
  char watch_rvs[4][16];
  char events[1024]; /* "op name rv;" as handlers saw them */
  int synced_calls, synced_at_first_watch_event, stopped;
  int bad_query;
  int untrimmed; /* objects handed over still carrying managedFields or kubectl's last-applied copy */
} seen;

/* ---- the fake API server ---- */

/* Every pod carries the bookkeeping the informer drops before storing. */
static json_t *pod(const char *name, const char *rv, const char *phase) {
  return json_pack("{s:{s:s,s:s,s:s,s:{s:s},s:[{s:s}],s:{s:s}},s:{s:s}}", "metadata", "name", name,
                   "namespace", "default", "resourceVersion", rv, "labels", "app", "web", "managedFields",
                   "manager", "kubectl", "annotations", "kubectl.kubernetes.io/last-applied-configuration",
                   "{\"huge\":true}", "status", "phase", phase);
}

static void note_untrimmed(const json_t *obj) {
  const json_t *md = json_object_get(obj, "metadata");
  if (json_object_get(md, "managedFields") ||
      json_object_get(json_object_get(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration"))
    seen.untrimmed++;
}

static void reply_json(lp_http_response *res, json_t *obj) {
  char *text = json_dumps(obj, JSON_COMPACT);
  lp_http_respond(res, 200, "application/json", text, strlen(text));
  free(text);
  json_decref(obj);
}

static json_t *list_of(const char *rv, const char *cont, json_t *items) {
  json_t *meta = json_pack("{s:s}", "resourceVersion", rv);
  if (cont) json_object_set_new(meta, "continue", json_string(cont));
  return json_pack("{s:s,s:o,s:o}", "kind", "PodList", "metadata", meta, "items", items);
}

static void h_list(const lp_http_request *req, lp_http_response *res) {
  seen.pages++;
  if (!strstr(req->query, "continue=")) seen.lists++;
  if (seen.lists == 1) {
    if (!strstr(req->query, "continue="))
      reply_json(
          res, list_of("100", "p2", json_pack("[o,o]", pod("a", "1", "Pending"), pod("b", "2", "Pending"))));
    else if (strstr(req->query, "continue=p2"))
      reply_json(
          res, list_of("100", "p3", json_pack("[o,o]", pod("c", "3", "Pending"), pod("d", "4", "Pending"))));
    else
      reply_json(res, list_of("100", NULL, json_pack("[o]", pod("e", "5", "Pending"))));
    return;
  }
  /* the relist after 410: b was deleted by the watch, e vanished meanwhile, c changed */
  reply_json(res, list_of("200", NULL,
                          json_pack("[o,o,o,o]", pod("a", "102", "Running"), pod("c", "150", "Running"),
                                    pod("d", "4", "Pending"), pod("f", "101", "Pending"))));
}

static const char watch1[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"f\",\"namespace\":\"default\","
    "\"resourceVersion\":\"101\",\"managedFields\":[{\"manager\":\"kubectl\"}]},\"status\":{\"phase\":"
    "\"Pending\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"namespace\":\"default\","
    "\"resourceVersion\":\"102\"},\"status\":{\"phase\":\"Running\"}}}\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"102\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"b\",\"namespace\":\"default\","
    "\"resourceVersion\":\"103\"},\"status\":{\"phase\":\"Pending\"}}}\n"
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Expired\","
    "\"message\":\"too old resource version: 103 (180)\",\"code\":410}}\n";
static const char watch2[] = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"g\",\"namespace\":"
                             "\"default\",\"resourceVersion\":\"201\"}}}\n";

static void h_api(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (!strstr(req->query, "labelSelector=app%3Dweb")) seen.bad_query++;
  if (!strstr(req->query, "watch=1")) {
    h_list(req, res);
    return;
  }
  const char *rv = strstr(req->query, "resourceVersion=");
  int n = seen.watches++;
  snprintf(seen.watch_rvs[n % 4], sizeof seen.watch_rvs[0], "%.*s", rv ? (int)strcspn(rv + 16, "&") : 0,
           rv ? rv + 16 : "");
  lp_http_stream_begin(res, 200, "application/json");
  if (n == 0) {
    lp_http_stream_write(res, watch1, sizeof watch1 - 1);
    lp_http_stream_end(res);
  } else {
    lp_http_stream_write(res, watch2, sizeof watch2 - 1); /* left open: the stop cancels it */
  }
}

/* Cluster-scoped nodes: the first list fails with a 500, the retry succeeds. */
static int node_lists;

static void h_nodes(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (strstr(req->query, "watch=1")) {
    lp_http_stream_begin(res, 200, "application/json"); /* left open */
    return;
  }
  if (node_lists++ == 0) {
    const char *st = "{\"kind\":\"Status\",\"reason\":\"InternalError\",\"message\":\"etcd\",\"code\":500}";
    lp_http_respond(res, 500, "application/json", st, strlen(st));
    return;
  }
  reply_json(
      res,
      list_of("9", NULL, json_pack("[{s:{s:s,s:s}}]", "metadata", "name", "node-1", "resourceVersion", "8")));
}

/* Configmaps: each list is one version further (x stays, y goes, z comes); watches stay silent. */
static struct {
  int lists, watches;
  char watch_rvs[4][16];
  char events[256];
} cm;

static void h_configmaps(const lp_http_request *req, lp_http_response *res, void *ud) {
  (void)ud;
  if (strstr(req->query, "watch=1")) {
    const char *rv = strstr(req->query, "resourceVersion=");
    snprintf(cm.watch_rvs[cm.watches++ % 4], sizeof cm.watch_rvs[0], "%.*s",
             rv ? (int)strcspn(rv + 16, "&") : 0, rv ? rv + 16 : "");
    lp_http_stream_begin(res, 200, "application/json"); /* left open */
    return;
  }
  char rv[16];
  snprintf(rv, sizeof rv, "%d", ++cm.lists * 10);
  json_t *items = json_pack("[{s:{s:s,s:s,s:s}}]", "metadata", "name", "x", "namespace", "default",
                            "resourceVersion", "1");
  json_array_append_new(items,
                        json_pack("{s:{s:s,s:s,s:s}}", "metadata", "name", cm.lists == 1 ? "y" : "z",
                                  "namespace", "default", "resourceVersion", cm.lists == 1 ? "2" : "3"));
  reply_json(res, list_of(rv, NULL, items));
}

/* ---- the owner ---- */

static void note(const char *op, json_t *obj) {
  json_t *meta = json_object_get(obj, "metadata");
  size_t len = strlen(seen.events);
  snprintf(seen.events + len, sizeof seen.events - len, "%s %s %s;", op,
           json_string_value(json_object_get(meta, "name")),
           json_string_value(json_object_get(meta, "resourceVersion")));
}

static char store_at_g[256];

static void collect(const char *key, json_t *obj, void *ud) {
  char *out = ud;
  size_t len = strlen(out);
  snprintf(out + len, 256 - len, "%s=%s ", key,
           json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion")));
}

static void on_add(lp_informer *i, json_t *obj, void *ud) {
  if (!seen.synced_at_first_watch_event && seen.watches)
    seen.synced_at_first_watch_event = lp_informer_synced(i);
  note("add", obj);
  note_untrimmed(obj);
  char *key = lp_informer_key(obj);
  CHECK(lp_informer_get(i, key) == obj); /* the store holds the new state first */
  if (strcmp(key, "default/g") == 0) {   /* the relist's store, plus g */
    lp_informer_list(i, collect, store_at_g);
    CHECK(lp_informer_synced(i));
    CHECK(lp_informer_get(i, "default/b") == NULL);
    CHECK(lp_informer_get(i, "default/e") == NULL);
    json_t *c = lp_informer_get(i, "default/c");
    CHECK_STR(json_string_value(json_object_get(json_object_get(c, "status"), "phase")), "Running");
    lp_informer_stop(i);
    seen.stopped = 1;
  }
  free(key);
}

static void on_update(lp_informer *i, json_t *old_obj, json_t *new_obj, void *ud) {
  note("update", old_obj);
  note_untrimmed(new_obj);
  size_t len = strlen(seen.events);
  snprintf(seen.events + len - 1, sizeof seen.events - len + 1, "->%s;",
           json_string_value(json_object_get(json_object_get(new_obj, "metadata"), "resourceVersion")));
}

static void on_delete(lp_informer *i, json_t *obj, void *ud) {
  note("delete", obj);
  char *key = lp_informer_key(obj);
  CHECK(lp_informer_get(i, key) == NULL);
  free(key);
}

static void on_synced(lp_informer *i, void *ud) {
  seen.synced_calls++;
  CHECK_INT(lp_informer_size(i), 5);
  size_t len = strlen(seen.events);
  snprintf(seen.events + len, sizeof seen.events - len, "synced;");
}

static double metric(const char *series) {
  char *text = lp_metrics_render(metrics, NULL);
  const char *at = strstr(text, series);
  double v = at ? atof(at + strlen(series)) : -1;
  free(text);
  return v;
}

static void on_deadline(uv_timer_t *t) {
  *(int *)t->data = 1;
}

/* A loop, the fake server (routes on it) and a client for it. */
static void env_start(void) {
  char dir[] = "/tmp/luaprov-kube-informer-XXXXXX", path[64], text[512];
  if (!mkdtemp(dir)) abort();
  uv_loop_init(&loop);
  server = lp_http_server_new(&loop, NULL);
  lp_http_server_route(server, "GET", "/api/v1/namespaces/default/pods", h_api, NULL);
  lp_http_server_route(server, "GET", "/api/v1/nodes", h_nodes, NULL);
  lp_http_server_route(server, "GET", "/api/v1/namespaces/default/configmaps", h_configmaps, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(server, "127.0.0.1", 0, &err)) abort();
  snprintf(path, sizeof path, "%s/config", dir);
  snprintf(text, sizeof text,
           "{\"current-context\":\"t\",\"contexts\":[{\"name\":\"t\",\"context\":{\"cluster\":\"c\"}}],"
           "\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"http://127.0.0.1:%d\"}}]}",
           lp_http_server_port(server));
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  cfg = lp_kube_config_load_file(path, &err);
  kc = cfg ? lp_kube_client_new(&loop, cfg, NULL, &err) : NULL;
  if (!kc) abort();
  remove(path);
  remove(dir);
  metrics = lp_metrics_new();
}

static void env_finish(void) {
  lp_kube_client_close(kc, NULL, NULL);
  lp_http_server_close(server, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
  lp_kube_config_free(cfg);
  lp_metrics_free(metrics);
}

static void test_informer_script(void) {
  env_start();

  lp_kube_ref pods = {.version = "v1", .resource = "pods", .namespace = "default"};
  lp_informer_opts opts = {.label_selector = "app=web", .metrics = metrics};
  opts.watch.timeout_seconds = 7;
  lp_informer_handlers h = {
      .on_add = on_add, .on_update = on_update, .on_delete = on_delete, .on_synced = on_synced};
  inf = lp_informer_start(kc, &pods, &opts, &h);
  CHECK(!lp_informer_synced(inf));
  CHECK_INT(lp_informer_size(inf), 0);

  uv_timer_t deadline;
  int expired = 0;
  uv_timer_init(&loop, &deadline);
  deadline.data = &expired;
  uv_timer_start(&deadline, on_deadline, 10000, 0);
  while (!seen.stopped && !expired) uv_run(&loop, UV_RUN_ONCE);
  CHECK(!expired);

  CHECK_STR(seen.events, "add a 1;add b 2;add c 3;add d 4;add e 5;synced;" /* the first list */
                         "add f 101;update a 1->102;delete b 103;"         /* the watch */
                         "update c 3->150;delete e 5;"                     /* the relist's difference */
                         "add g 201;");
  CHECK_INT(seen.synced_calls, 1);
  CHECK(seen.synced_at_first_watch_event);
  CHECK_INT(seen.lists, 2);
  CHECK_INT(seen.pages, 4);
  CHECK_INT(seen.watches, 2);
  CHECK_STR(seen.watch_rvs[0], "100");
  CHECK_STR(seen.watch_rvs[1], "200");
  CHECK_INT(seen.bad_query, 0);
  CHECK_INT(seen.untrimmed, 0);
  CHECK_STR(store_at_g, "default/a=102 default/c=150 default/d=4 default/f=101 default/g=201 ");

  CHECK(metric("luaprov_informer_relists_total{resource=\"pods\"} ") == 1);
  CHECK(metric("luaprov_informer_events_total{resource=\"pods\",type=\"add\"} ") == 7);
  CHECK(metric("luaprov_informer_events_total{resource=\"pods\",type=\"update\"} ") == 2);
  CHECK(metric("luaprov_informer_events_total{resource=\"pods\",type=\"delete\"} ") == 2);
  CHECK(metric("luaprov_informer_objects{resource=\"pods\"} ") == 0); /* stopped: its objects are gone */

  uv_close((uv_handle_t *)&deadline, NULL);
  env_finish();
}

/* Keys follow client-go; the objects gauge follows the store while the informer runs. */
static void test_keys(void) {
  json_t *a = json_pack("{s:{s:s,s:s}}", "metadata", "name", "x", "namespace", "ns");
  json_t *b = json_pack("{s:{s:s}}", "metadata", "name", "node-1");
  json_t *c = json_pack("{s:{}}", "metadata");
  char *ka = lp_informer_key(a), *kb = lp_informer_key(b);
  CHECK_STR(ka, "ns/x");
  CHECK_STR(kb, "node-1");
  CHECK(lp_informer_key(c) == NULL);
  free(ka);
  free(kb);
  json_decref(a);
  json_decref(b);
  json_decref(c);
}

static void stop_when_synced(lp_informer *i, void *ud) {
  CHECK(lp_informer_get(i, "node-1") != NULL); /* cluster-scoped: the name is the key */
  CHECK(metric("luaprov_informer_objects{resource=\"nodes\"} ") == 1);
  lp_informer_stop(i);
  *(int *)ud = 1;
}

/* A failed list is retried after the backoff; stopping from on_synced leaves no watch; stopping with a
 * list in flight frees the informer once the client's close cancels the list (ASan checks both). */
static void test_list_retry_and_stop(void) {
  env_start();
  lp_kube_ref nodes = {.version = "v1", .resource = "nodes"};
  lp_informer_opts opts = {.metrics = metrics};
  opts.watch.backoff_initial_ms = 10;
  int done = 0;
  lp_informer_handlers h = {.on_synced = stop_when_synced, .ud = &done};
  lp_informer_start(kc, &nodes, &opts, &h);
  while (!done) uv_run(&loop, UV_RUN_ONCE);
  CHECK_INT(node_lists, 2);
  CHECK(metric("luaprov_informer_objects{resource=\"nodes\"} ") == 0);
  lp_informer *in_flight = lp_informer_start(kc, &nodes, &opts, &h);
  lp_informer_stop(in_flight);
  env_finish();
  CHECK_INT(done, 1);
}

static void cm_note(const char *what, json_t *obj) {
  size_t len = strlen(cm.events);
  const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
  snprintf(cm.events + len, sizeof cm.events - len, "%s %s;", what, name ? name : "?");
}
static void cm_add(lp_informer *i, json_t *obj, void *ud) {
  (void)ud;
  (void)i;
  cm_note("add", obj);
}
static void cm_delete(lp_informer *i, json_t *obj, void *ud) {
  (void)ud;
  (void)i;
  cm_note("delete", obj);
}
static void cm_current(lp_informer *i, int current, void *ud) {
  (void)ud;
  CHECK_INT(lp_informer_current(i), current);
  size_t len = strlen(cm.events);
  snprintf(cm.events + len, sizeof cm.events - len, "current=%d;", current);
}

static int cm_events_end_with(const char *tail) {
  size_t n = strlen(cm.events), k = strlen(tail);
  return n >= k && strcmp(cm.events + n - k, tail) == 0;
}

static void run_until_current(lp_informer *i) {
  for (int n = 0; n < 100000 && !lp_informer_current(i); n++) uv_run(&loop, UV_RUN_ONCE);
}

static void test_forced_relist(void) {
  env_start();
  lp_kube_ref configmaps = {.version = "v1", .resource = "configmaps", .namespace = "default"};
  lp_informer_opts opts = {.metrics = metrics};
  lp_informer_handlers h = {.on_add = cm_add, .on_delete = cm_delete, .on_current = cm_current};
  lp_informer *i = lp_informer_start(kc, &configmaps, &opts, &h);
  run_until_current(i);
  CHECK_STR(cm.events, "add x;add y;current=1;");
  while (cm.watches < 1) uv_run(&loop, UV_RUN_ONCE);

  /* the watch is silent (cut off, say): a relist finds what it missed */
  lp_informer_relist(i);
  CHECK(!lp_informer_current(i));
  CHECK(cm_events_end_with("current=0;"));
  run_until_current(i);
  CHECK_STR(cm.events, "add x;add y;current=1;current=0;add z;delete y;current=1;");
  CHECK_INT(cm.lists, 2);
  while (cm.watches < 2) uv_run(&loop, UV_RUN_ONCE);
  CHECK_STR(cm.watch_rvs[1], "20"); /* a new watch, from the new list */

  /* asked again while that list is in flight: current only after one more */
  lp_informer_relist(i);
  lp_informer_relist(i);
  run_until_current(i);
  CHECK_INT(cm.lists, 4);
  while (cm.watches < 3) uv_run(&loop, UV_RUN_ONCE);
  CHECK_STR(cm.watch_rvs[2], "40");
  CHECK(cm_events_end_with("current=1;current=0;current=1;"));
  CHECK(lp_informer_get(i, "default/z") != NULL && lp_informer_get(i, "default/y") == NULL);
  CHECK(metric("luaprov_informer_relists_total{resource=\"configmaps\"} ") <= 0); /* no 410 */
  lp_informer_stop(i);
  env_finish();
}

int main(void) {
  RUN(test_keys);
  RUN(test_informer_script);
  RUN(test_list_retry_and_stop);
  RUN(test_forced_relist);
  return check_summary();
}
