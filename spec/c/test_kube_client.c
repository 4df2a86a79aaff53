/* The Kubernetes client (engine/kube/config.h, client.h) against a fake API server built on the engine's
 * own HTTP server, on one loop: kubeconfig and in-cluster config, paths, paginated lists and the 410
 * restart, create/get/delete with preconditions, merge patches and the conflict-retrying update, and
 * the log of denied requests (401/403), for calls and watches alike. The watch's state machine is in
 * test_kube_watch.c. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "core/clock.h"
#include "http/server.h"
#include "core/log.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/watch.h"

static char tmpdir[256];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[16384];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* ---- the fake API server ---- */

static struct {
  int list_calls, gone_once, conflicts_left, nc_rv, patches;
  int deny; /* secrets: answer this status (401, 403) instead of the object */
  char auth[128], ctype[128], body[1024], queries[8][160];
  json_t *cm; /* the one configmap, or NULL */
} fake;

static void reply_json(lp_http_response *res, int code, json_t *obj) {
  char *text = json_dumps(obj, JSON_COMPACT);
  lp_http_respond(res, code, "application/json", text, strlen(text));
  free(text);
  json_decref(obj);
}

static void reply_status(lp_http_response *res, int code, const char *reason, const char *message) {
  reply_json(res, code,
             json_pack("{s:s,s:s,s:s,s:s,s:s,s:i}", "kind", "Status", "apiVersion", "v1", "status", "Failure",
                       "reason", reason, "message", message, "code", code));
}

static json_t *page(const char *cont, int first, int n, const char *rv) {
  json_t *items = json_array();
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%d", first + i);
    json_array_append_new(items, json_pack("{s:{s:s}}", "metadata", "name", name));
  }
  json_t *meta = json_pack("{s:s}", "resourceVersion", rv);
  if (cont) json_object_set_new(meta, "continue", json_string(cont));
  return json_pack("{s:s,s:o,s:o}", "kind", "PodList", "metadata", meta, "items", items);
}

static json_t *nodeclaim(void) {
  char rv[16];
  snprintf(rv, sizeof rv, "%d", fake.nc_rv);
  return json_pack("{s:{s:s,s:s},s:{s:s}}", "metadata", "name", "nc1", "resourceVersion", rv, "status",
                   "phase", "Launched");
}

static void h_api(const lp_http_request *req, lp_http_response *res, void *ud) {
  const char *auth = lp_http_request_header(req, "authorization"),
             *ct = lp_http_request_header(req, "content-type");
  snprintf(fake.auth, sizeof fake.auth, "%s", auth ? auth : "");
  snprintf(fake.ctype, sizeof fake.ctype, "%s", ct ? ct : "");
  snprintf(fake.body, sizeof fake.body, "%s", req->body ? req->body : "");
  const char *m = req->method, *p = req->path, *q = req->query;
  if (strcmp(p, "/api/v1/namespaces/default/pods") == 0 && strcmp(m, "GET") == 0) {
    snprintf(fake.queries[fake.list_calls++ % 8], sizeof fake.queries[0], "%s", q);
    if (!strstr(q, "continue="))
      reply_json(res, 200, page("a/1", 0, 2, "700"));
    else if (strstr(q, "continue=a%2F1"))
      reply_json(res, 200, page("a/2", 2, 2, "700"));
    else if (fake.gone_once && !(fake.gone_once = 0))
      reply_status(res, 410, "Expired", "The provided continue parameter is too old");
    else
      reply_json(res, 200, page(NULL, 4, 1, "777"));
  } else if (strcmp(p, "/api/v1/namespaces/default/configmaps") == 0 && strcmp(m, "POST") == 0) {
    if (fake.cm) {
      reply_status(res, 409, "AlreadyExists", "configmaps \"cm1\" already exists");
      return;
    }
    fake.cm = json_loads(req->body, 0, NULL);
    json_object_set_new(json_object_get(fake.cm, "metadata"), "resourceVersion", json_string("1"));
    reply_json(res, 201, json_incref(fake.cm));
  } else if (strcmp(p, "/api/v1/namespaces/default/configmaps/cm1") == 0) {
    if (!fake.cm) {
      reply_status(res, 404, "NotFound", "configmaps \"cm1\" not found");
      return;
    }
    if (strcmp(m, "GET") == 0) {
      reply_json(res, 200, json_incref(fake.cm));
      return;
    }
    json_t *opts = json_loads(req->body, 0, NULL);
    const char *want =
        json_string_value(json_object_get(json_object_get(opts, "preconditions"), "resourceVersion"));
    int clash = want && strcmp(want, "1") != 0;
    json_decref(opts);
    if (clash) {
      reply_status(res, 409, "Conflict", "Precondition failed: UID in precondition");
      return;
    }
    json_decref(fake.cm);
    fake.cm = NULL;
    reply_json(res, 200, json_pack("{s:s,s:s}", "kind", "Status", "status", "Success"));
  } else if (strstr(p, "/secrets")) {
    if (fake.deny == 401)
      reply_status(res, 401, "Unauthorized", "Unauthorized");
    else if (fake.deny)
      reply_status(res, 403, "Forbidden",
                   "secrets is forbidden: User \"system:serviceaccount:kube-system:luaprov\" cannot access "
                   "resource \"secrets\" in API group \"\"");
    else
      reply_json(res, 200, json_pack("{s:{s:s}}", "metadata", "name", "s"));
  } else if (strncmp(p, "/apis/karpenter.sh/v1/nodeclaims/nc1", 36) == 0) {
    if (strcmp(m, "GET") == 0) {
      reply_json(res, 200, nodeclaim());
      return;
    }
    fake.patches++;
    if (fake.conflicts_left > 0) {
      fake.conflicts_left--;
      fake.nc_rv++; /* somebody else wrote meanwhile */
      {
        reply_status(res, 409, "Conflict", "the object has been modified");
        return;
      }
    }
    reply_json(res, 200, nodeclaim());
  } else {
    reply_status(res, 404, "NotFound", "no such path");
  }
}

/* ---- the loop, the client and replies ---- */

static uv_loop_t loop;
static lp_http_server *server;
static lp_kube_config *cfg;
static lp_kube_client *kc;

typedef struct slot {
  int calls;
  long status;
  json_t *obj;
  char code[64], msg[512];
} slot;

static void on_reply(const lp_kube_reply *r, void *ud) {
  slot *s = ud;
  s->calls++;
  s->status = r->status;
  json_decref(s->obj);
  s->obj = json_incref(r->object);
  snprintf(s->code, sizeof s->code, "%s", r->error ? r->error->code : "");
  snprintf(s->msg, sizeof s->msg, "%s", r->error ? r->error->message : "");
}

static void on_deadline(uv_timer_t *t) {
  *(int *)t->data = 1;
}

static void wait_for(slot *s) {
  uv_timer_t t;
  int expired = 0;
  uv_timer_init(&loop, &t);
  t.data = &expired;
  uv_timer_start(&t, on_deadline, 5000, 0);
  while (!s->calls && !expired) uv_run(&loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(!expired);
}

static void reset(slot *s) {
  json_decref(s->obj);
  memset(s, 0, sizeof *s);
}

static void setup(void) {
  uv_loop_init(&loop);
  server = lp_http_server_new(&loop, NULL);
  lp_http_server_route(server, NULL, "/api/*", h_api, NULL);
  lp_http_server_route(server, NULL, "/apis/*", h_api, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(server, "127.0.0.1", 0, &err)) abort();
  char path[512], text[1024];
  snprintf(path, sizeof path, "%s/client.yaml", tmpdir);
  snprintf(text, sizeof text,
           "apiVersion: v1\nkind: Config\ncurrent-context: t\ncontexts:\n- name: t\n  context: {cluster: c, "
           "user: u}\n"
           "clusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:%d/'}\nusers:\n- name: u\n  user: "
           "{token: t0k}\n",
           lp_http_server_port(server));
  write_file(path, text);
  cfg = lp_kube_config_load_file(path, &err);
  kc = cfg ? lp_kube_client_new(&loop, cfg, NULL, &err) : NULL;
  if (!kc) abort();
}

static void teardown(void) {
  lp_kube_client_close(kc, NULL, NULL);
  lp_http_server_close(server, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
  lp_kube_config_free(cfg);
  json_decref(fake.cm);
  memset(&fake, 0, sizeof fake);
}

/* ---- config ---- */

static void test_paths(void) {
  char *p = lp_kube_path(NULL, "v1", "pods", "ns", "x", NULL);
  CHECK_STR(p, "/api/v1/namespaces/ns/pods/x");
  free(p);
  p = lp_kube_path("karpenter.sh", "v1", "nodeclaims", NULL, "x", "status");
  CHECK_STR(p, "/apis/karpenter.sh/v1/nodeclaims/x/status");
  free(p);
  p = lp_kube_path("", "v1", "nodes", NULL, NULL, "status"); /* no subresource without a name */
  CHECK_STR(p, "/api/v1/nodes");
  free(p);
  p = lp_kube_path("karpenter.k8s.alibabacloud", "v1alpha1", "ecsnodeclasses", NULL, "default", NULL);
  CHECK_STR(p, "/apis/karpenter.k8s.alibabacloud/v1alpha1/ecsnodeclasses/default");
  free(p);
}

/* Which failed answers leave a write's effect unknown (a create whose answer is lost may be stored). */
static void test_reply_unconfirmed(void) {
  lp_error *e = lp_error_new("Timeout", "no answer");
  CHECK(lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 0, .error = e}));
  CHECK(lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 503, .error = e}));
  CHECK(lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 500, .error = e}));
  CHECK(lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 201, .error = e})); /* unreadable success */
  CHECK(!lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 409, .error = e}));
  CHECK(!lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 429, .error = e}));
  CHECK(!lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 422, .error = e}));
  CHECK(!lp_kube_reply_unconfirmed(&(lp_kube_reply){.status = 201})); /* a success says it all */
  lp_error_free(e);
}

static lp_kube_config *load(const char *name, const char *text, lp_error **err) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  write_file(path, text);
  return lp_kube_config_load_file(path, err);
}

#define HEAD                                                                                                 \
  "current-context: dev\ncontexts:\n- name: dev\n  context: {cluster: c, user: u, namespace: team}\n"        \
  "clusters:\n- name: c\n  cluster:\n    server: https://k.example:6443\n"

static void test_kubeconfig(void) {
  char path[512], want[512];
  snprintf(path, sizeof path, "%s/sub", tmpdir);
  mkdir(path, 0700);
  /* relative CA path, client certificate and key as data (base64 of "CERT\n" and "KEY\n") */
  lp_error *err = NULL;
  lp_kube_config *c =
      load("sub/config",
           HEAD "    certificate-authority: certs/ca.pem\n    insecure-skip-tls-verify: true\n"
                "users:\n- name: u\n  user:\n    client-certificate-data: Q0VSVAo=\n"
                "    client-key-data: |\n      S0VZ\n      Cg==\n",
           &err);
  CHECK(c && !err);
  if (!c) return;
  CHECK_STR(c->server, "https://k.example:6443");
  CHECK_STR(c->namespace, "team");
  CHECK_INT(c->insecure_skip_verify, 1);
  snprintf(want, sizeof want, "%s/sub/certs/ca.pem", tmpdir);
  CHECK_STR(c->ca_file, want);
  CHECK(lp_kube_config_token(c) == NULL);
  CHECK_STR(slurp(c->client_cert_file), "CERT\n");
  CHECK_STR(slurp(c->client_key_file), "KEY\n");
  struct stat st;
  CHECK(stat(c->client_key_file, &st) == 0 && (st.st_mode & 0777) == 0600);
  char key_path[512];
  snprintf(key_path, sizeof key_path, "%s", c->client_key_file);
  lp_kube_config_free(c);
  CHECK(access(key_path, F_OK) != 0); /* temporary files removed */

  /* token from a relative tokenFile */
  snprintf(path, sizeof path, "%s/sub/tok", tmpdir);
  write_file(path, "  s3cret\n");
  c = load("sub/config2", HEAD "users:\n- name: u\n  user: {tokenFile: tok}\n", &err);
  CHECK(c && !err);
  if (c) CHECK_STR(lp_kube_config_token(c), "s3cret");
  lp_kube_config_free(c);
}

static void check_error(const char *name, const char *text, const char *needle) {
  lp_error *err = NULL;
  lp_kube_config *c = load(name, text, &err);
  CHECK(c == NULL);
  CHECK(err != NULL);
  if (!err) return;
  CHECK_STR(err->code, "InvalidConfig");
  CHECK_CONTAINS(err->message, name); /* the file */
  CHECK_CONTAINS(err->message, needle);
  lp_error_free(err);
}

static void test_kubeconfig_errors(void) {
  check_error("e1", "clusters: []\n", "no current-context");
  check_error("e2", "current-context: x\ncontexts: []\n", "\"x\" names no entry in contexts");
  check_error("e3", "current-context: dev\ncontexts:\n- name: dev\n  context: {user: u}\n", "has no cluster");
  check_error("e4",
              "current-context: dev\ncontexts:\n- name: dev\n  context: {cluster: c}\nclusters:\n- name: c\n"
              "  cluster: {insecure-skip-tls-verify: true}\n",
              "cluster \"c\" has no server");
  check_error("e5", HEAD "users: []\n", "user \"u\" not found");
  check_error("e6", HEAD "users:\n- name: u\n  user: {client-certificate-data: Q0VSVAo=}\n",
              "client-certificate without client-key");
  check_error("e7", HEAD "users:\n- name: u\n  user: {client-certificate-data: '@@', client-key: k}\n",
              "client-certificate-data is not valid base64");
  check_error("e8", HEAD "users:\n- name: u\n  user: {tokenFile: nope}\n", "nope");
  lp_error *err = NULL;
  CHECK(lp_kube_config_load_file("/nonexistent/kubeconfig", &err) == NULL);
  if (err) CHECK_STR(err->code, "NotFound");
  lp_error_free(err);
}

static void test_in_cluster(void) {
  char sa[400], tok[512];
  snprintf(sa, sizeof sa, "%s/sa", tmpdir);
  mkdir(sa, 0700);
  snprintf(tok, sizeof tok, "%s/token", sa);
  write_file(tok, "one\n");
  char p[600];
  snprintf(p, sizeof p, "%s/ca.crt", sa);
  write_file(p, "PEM");
  snprintf(p, sizeof p, "%s/namespace", sa);
  write_file(p, "karpenter\n");
  lp_error *err = NULL;
  unsetenv("KUBERNETES_SERVICE_HOST");
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  CHECK(lp_kube_config_in_cluster(sa, &err) == NULL);
  if (err) CHECK_CONTAINS(err->message, "KUBERNETES_SERVICE_HOST");
  lp_error_free(err);
  err = NULL;
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  lp_kube_config *c = lp_kube_config_in_cluster(sa, &err);
  CHECK(c && !err);
  if (!c) return;
  CHECK_STR(c->server, "https://[fd00::1]:443");
  snprintf(p, sizeof p, "%s/ca.crt", sa);
  CHECK_STR(c->ca_file, p);
  CHECK_STR(c->namespace, "karpenter");
  double now = lp_clock_monotonic();
  CHECK_STR(lp_kube_config_token_at(c, now), "one");
  /* the kubelet rotates the token: a new content and a new mtime */
  write_file(tok, "two\n");
  struct timespec later[2] = {{.tv_sec = time(NULL) + 100}, {.tv_sec = time(NULL) + 100}};
  utimensat(AT_FDCWD, tok, later, 0);
  CHECK_STR(lp_kube_config_token_at(c, now + 1), "one"); /* not re-checked within a minute */
  CHECK_STR(lp_kube_config_token_at(c, now + 61), "two");
  write_file(tok, "three\n"); /* same second: mtime unchanged only if the clock did not move; set it back */
  utimensat(AT_FDCWD, tok, later, 0);
  CHECK_STR(lp_kube_config_token_at(c, now + 200), "two"); /* same mtime: not re-read */
  lp_kube_config_free(c);
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
}

/* ---- API calls ---- */

static const lp_kube_ref pods = {.version = "v1", .resource = "pods", .namespace = "default"};
static const lp_kube_ref cm1 = {
    .version = "v1", .resource = "configmaps", .namespace = "default", .name = "cm1"};
static const lp_kube_ref nc1 = {
    .group = "karpenter.sh", .version = "v1", .resource = "nodeclaims", .name = "nc1"};

static void test_list_pages(void) {
  setup();
  slot s = {0};
  lp_kube_list(kc, &pods, "labelSelector=app%3Dx", on_reply, &s);
  wait_for(&s);
  CHECK_STR(s.code, "");
  CHECK_INT(fake.list_calls, 3);
  CHECK_STR(fake.queries[0], "limit=500&labelSelector=app%3Dx");
  CHECK_STR(fake.queries[1], "limit=500&continue=a%2F1&labelSelector=app%3Dx");
  CHECK_STR(fake.auth, "Bearer t0k");
  CHECK_INT(json_array_size(json_object_get(s.obj, "items")), 5);
  CHECK_STR(json_string_value(json_object_get(json_object_get(s.obj, "metadata"), "resourceVersion")), "777");
  /* 410 on a continue token: the list starts over once, without duplicates */
  reset(&s);
  fake.list_calls = 0;
  fake.gone_once = 1;
  lp_kube_list(kc, &pods, NULL, on_reply, &s);
  wait_for(&s);
  CHECK_STR(s.code, "");
  CHECK_INT(fake.list_calls, 6);
  CHECK_STR(fake.queries[3], "limit=500");
  CHECK_INT(json_array_size(json_object_get(s.obj, "items")), 5);
  reset(&s);
  teardown();
}

static void test_create_get_delete(void) {
  setup();
  slot s = {0};
  json_t *obj = json_pack("{s:s,s:s,s:{s:s},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap", "metadata",
                          "name", "cm1", "data", "k", "v");
  lp_kube_create(kc, &cm1, obj, on_reply, &s);
  wait_for(&s);
  CHECK_INT(s.status, 201);
  CHECK_STR(fake.ctype, "application/json");
  CHECK_STR(json_string_value(json_object_get(json_object_get(s.obj, "metadata"), "resourceVersion")), "1");
  reset(&s);
  lp_kube_create(kc, &cm1, obj, on_reply, &s);
  wait_for(&s);
  CHECK_STR(s.code, "AlreadyExists");
  CHECK_INT(s.status, 409);
  CHECK(s.obj == NULL);
  CHECK_CONTAINS(
      s.msg, "POST /api/v1/namespaces/default/configmaps (cm1): 409 Conflict: configmaps \"cm1\" already");
  json_decref(obj);
  reset(&s);
  lp_kube_get(kc, &cm1, on_reply, &s);
  wait_for(&s);
  CHECK_STR(json_string_value(json_object_get(json_object_get(s.obj, "data"), "k")), "v");
  reset(&s);
  lp_kube_delete(kc, &cm1, "9", on_reply, &s); /* stale precondition */
  wait_for(&s);
  CHECK_STR(s.code, "Conflict");
  CHECK_CONTAINS(fake.body, "\"preconditions\":{\"resourceVersion\":\"9\"}");
  reset(&s);
  lp_kube_delete(kc, &cm1, "1", on_reply, &s);
  wait_for(&s);
  CHECK_STR(s.code, "");
  CHECK_INT(s.status, 200);
  reset(&s);
  lp_kube_get(kc, &cm1, on_reply, &s);
  wait_for(&s);
  CHECK_STR(s.code, "NotFound");
  CHECK_INT(s.status, 404);
  CHECK_CONTAINS(s.msg, "GET /api/v1/namespaces/default/configmaps/cm1 (cm1): 404 Not Found: configmaps");
  reset(&s);
  teardown();
}

static int mutations;

static json_t *set_ready(const json_t *current, void *ud, lp_error **err) {
  mutations++;
  return json_pack("{s:{s:s}}", "status", "phase", "Ready");
}

static void test_patch_and_conflict_retry(void) {
  setup();
  slot s = {0};
  json_t *patch = json_pack("{s:{s:i}}", "spec", "x", 1);
  lp_kube_merge_patch(kc, &nc1, NULL, patch, on_reply, &s);
  wait_for(&s);
  json_decref(patch);
  CHECK_STR(s.code, "");
  CHECK_STR(fake.ctype, "application/merge-patch+json");
  CHECK_STR(fake.body, "{\"spec\":{\"x\":1}}");
  /* two conflicts, then success: mutate re-runs on a fresh GET each time */
  reset(&s);
  fake.nc_rv = 10;
  fake.conflicts_left = 2;
  fake.patches = 0;
  lp_kube_update(kc, &nc1, "status", set_ready, on_reply, &s);
  wait_for(&s);
  CHECK_STR(s.code, "");
  CHECK_INT(mutations, 3);
  CHECK_INT(fake.patches, 3);
  CHECK_STR(fake.ctype, "application/merge-patch+json");
  CHECK_STR(fake.body, "{\"status\":{\"phase\":\"Ready\"},\"metadata\":{\"resourceVersion\":\"12\"}}");
  /* always conflicting: gives up after 5 attempts with the Conflict */
  reset(&s);
  mutations = 0;
  fake.conflicts_left = 100;
  lp_kube_update(kc, &nc1, "status", set_ready, on_reply, &s);
  wait_for(&s);
  CHECK_INT(mutations, LP_KUBE_UPDATE_ATTEMPTS);
  CHECK_STR(s.code, "Conflict");
  CHECK_CONTAINS(s.msg,
                 "PATCH /apis/karpenter.sh/v1/nodeclaims/nc1/status (nc1): 409 Conflict: the object has");
  reset(&s);
  teardown();
}

/* ---- denied requests ---- */

static int watch_errors;

static void count_watch_error(lp_kube_watch *w, const lp_error *err, void *ud) {
  (void)w;
  (void)err;
  (void)ud;
  watch_errors++;
}

static int logfd = -1;
static char logpath[512];

/* Sends this test's log lines (info and up) to a file read by logged(). */
static void capture_log(void) {
  snprintf(logpath, sizeof logpath, "%s/denied.log", tmpdir);
  logfd = open(logpath, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  lp_log_configure(LP_LOG_INFO, LP_LOG_FORMAT_JSON, logfd);
}

static void release_log(void) {
  lp_log_configure(LP_LOG_INFO, LP_LOG_FORMAT_AUTO, 2);
  close(logfd);
}

/* How many log lines so far contain needle. */
static int logged(const char *needle) {
  int n = 0;
  for (const char *at = slurp(logpath); at && (at = strstr(at, needle)); at += strlen(needle)) n++;
  return n;
}

#define DENIED "\"msg\":\"API request denied\""

static void call(const char *method, const lp_kube_ref *ref) {
  slot s = {0};
  json_t *patch = json_pack("{s:{s:s}}", "data", "k", "v");
  if (strcmp(method, "GET") == 0)
    lp_kube_get(kc, ref, on_reply, &s);
  else if (strcmp(method, "LIST") == 0)
    lp_kube_list(kc, ref, NULL, on_reply, &s);
  else
    lp_kube_merge_patch(kc, ref, NULL, patch, on_reply, &s);
  wait_for(&s);
  json_decref(patch);
  CHECK_INT(s.status, fake.deny ? fake.deny : 200);
  reset(&s);
}

static void test_denied_logged_once_per_cause(void) {
  setup();
  capture_log();
  const lp_kube_ref secret_a = {.version = "v1", .resource = "secrets", .namespace = "default", .name = "a"};
  const lp_kube_ref secret_b = {.version = "v1", .resource = "secrets", .namespace = "other", .name = "b"};
  const lp_kube_ref secrets = {.version = "v1", .resource = "secrets", .namespace = "default"};
  fake.deny = 403;
  for (int i = 0; i < 5; i++) call("GET", &secret_a);
  call("GET", &secret_b); /* another object of the same resource: the same cause */
  CHECK_INT(logged(DENIED), 1);
  CHECK_CONTAINS(slurp(logpath), "\"level\":\"warn\",\"logger\":\"engine.kube\"," DENIED
                                 ",\"verb\":\"get\",\"path\":\"/api/v1/namespaces/default/secrets/a\","
                                 "\"status\":403,\"reason\":\"Forbidden\",\"message\":\"secrets is "
                                 "forbidden: User \\\"system:serviceaccount:kube-system:luaprov\\\" cannot");
  CHECK_CONTAINS(slurp(logpath), "examples/deploy/rbac.yaml");
  /* another verb, another path, another status: one line each */
  call("LIST", &secrets);
  call("LIST", &secrets);
  CHECK_INT(logged(DENIED), 2);
  CHECK_INT(logged("\"verb\":\"list\",\"path\":\"/api/v1/namespaces/default/secrets\""), 1);
  call("PATCH", &secret_a);
  CHECK_INT(logged("\"verb\":\"patch\""), 1);
  fake.deny = 401;
  call("GET", &secret_a);
  call("GET", &secret_a);
  CHECK_INT(logged("\"status\":401"), 1);
  CHECK_INT(logged(DENIED), 4);
  /* once allowed, a denial that comes back is news again */
  fake.deny = 0;
  call("GET", &secret_a);
  fake.deny = 403;
  call("GET", &secret_a);
  CHECK_INT(logged(DENIED), 5);
  /* a watch retrying its denied request logs the denial once, its retries at debug level only */
  lp_kube_watch_opts opts = {.backoff_initial_ms = 2, .backoff_max_ms = 4};
  lp_kube_watch_handlers h = {.on_error = count_watch_error}; /* a denied watch sees no event */
  watch_errors = 0;
  lp_kube_watch *w = lp_kube_watch_start(kc, &secrets, "1", &opts, &h);
  uv_timer_t t;
  int expired = 0;
  uv_timer_init(&loop, &t);
  t.data = &expired;
  uv_timer_start(&t, on_deadline, 5000, 0);
  while (watch_errors < 10 && !expired) uv_run(&loop, UV_RUN_ONCE);
  lp_kube_watch_stop(w);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(!expired);
  CHECK_INT(logged("\"verb\":\"watch\",\"path\":\"/api/v1/namespaces/default/secrets\""), 1);
  CHECK_INT(logged("watch failed"), 0);
  CHECK_INT(logged(DENIED), 6);
  /* never the credentials */
  CHECK_INT(logged("t0k"), 0);
  CHECK_INT(logged("Bearer"), 0);
  release_log();
  teardown();
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/luaprov-kube-test-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) return 1;
  RUN(test_paths);
  RUN(test_reply_unconfirmed);
  RUN(test_kubeconfig);
  RUN(test_kubeconfig_errors);
  RUN(test_in_cluster);
  RUN(test_list_pages);
  RUN(test_create_get_delete);
  RUN(test_patch_and_conflict_retry);
  RUN(test_denied_logged_once_per_cause);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return check_summary();
}
