/* Lease leader election (engine/kube/leader.h) and the client's replace (PUT with a resourceVersion
 * precondition) against a fake API server built on the engine's HTTP server. The fake keeps one Lease in
 * memory, bumps its resourceVersion on every write and answers 409 when a PUT names another one.
 * Timings are short (lease 600 ms, renew deadline 400 ms, retry 100 ms) so every case runs in about a
 * second; the bounds checked leave room for a loaded machine. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "http/server.h"
#include "kube/client.h"
#include "kube/leader.h"

#define NS         "kube-system"
#define LEASE_PATH "/apis/coordination.k8s.io/v1/namespaces/" NS "/leases"
#define NAME_PATH  LEASE_PATH "/" LP_LEADER_DEFAULT_NAME

static char tmpdir[256];

/* ---- the fake API server: one Lease ---- */

static struct {
  json_t *lease; /* or NULL */
  int rv, fail, gets, creates, puts, conflicts, releases;
  char ctype[64];
} fake;

static void reply_json(lp_http_response *res, int code, json_t *obj) {
  char *text = json_dumps(obj, JSON_COMPACT);
  lp_http_respond(res, code, "application/json", text, strlen(text));
  free(text);
  json_decref(obj);
}

static void reply_status(lp_http_response *res, int code, const char *reason, const char *message) {
  reply_json(res, code,
             json_pack("{s:s,s:s,s:s,s:s,s:i}", "kind", "Status", "status", "Failure", "reason", reason,
                       "message", message, "code", code));
}

static json_t *spec(void) {
  return json_object_get(fake.lease, "spec");
}

static const char *spec_str(const char *key) {
  return json_string_value(json_object_get(spec(), key));
}

static long long spec_int(const char *key) {
  return json_integer_value(json_object_get(spec(), key));
}

/* Stores obj (stolen) as the Lease with the next resourceVersion. */
static void store(json_t *obj) {
  char rv[16];
  snprintf(rv, sizeof rv, "%d", ++fake.rv);
  json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion", json_string(rv));
  json_decref(fake.lease);
  fake.lease = obj;
}

static void h_api(const lp_http_request *req, lp_http_response *res, void *ud) {
  const char *m = req->method, *ct = lp_http_request_header(req, "content-type");
  snprintf(fake.ctype, sizeof fake.ctype, "%s", ct ? ct : "");
  if (fake.fail) {
    reply_status(res, 500, "InternalError", "etcdserver: request timed out");
  } else if (strcmp(req->path, LEASE_PATH) == 0 && strcmp(m, "POST") == 0) {
    fake.creates++;
    if (fake.lease) {
      reply_status(res, 409, "AlreadyExists", "leases \"" LP_LEADER_DEFAULT_NAME "\" already exists");
      return;
    }
    store(json_loads(req->body, 0, NULL));
    reply_json(res, 201, json_incref(fake.lease));
  } else if (strcmp(req->path, NAME_PATH) != 0) {
    reply_status(res, 403, "Forbidden", "RBAC allows only " LP_LEADER_DEFAULT_NAME);
  } else if (!fake.lease) {
    reply_status(res, 404, "NotFound", "leases \"" LP_LEADER_DEFAULT_NAME "\" not found");
  } else if (strcmp(m, "GET") == 0) {
    fake.gets++;
    reply_json(res, 200, json_incref(fake.lease));
  } else if (strcmp(m, "PUT") == 0) {
    fake.puts++;
    json_t *obj = json_loads(req->body, 0, NULL);
    const char *want =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    char have[16];
    snprintf(have, sizeof have, "%d", fake.rv);
    if (!want || strcmp(want, have) != 0) {
      fake.conflicts++;
      json_decref(obj);
      reply_status(res, 409, "Conflict",
                   "the object has been modified; please apply your changes to the latest "
                   "version and try again");
      return;
    }
    store(obj);
    if (!*spec_str("holderIdentity") && spec_int("leaseDurationSeconds") == 1) fake.releases++;
    reply_json(res, 200, json_incref(fake.lease));
  } else {
    reply_status(res, 405, "MethodNotAllowed", "no");
  }
}

/* A Lease held by someone else; renew is its renewTime. */
static void preload_foreign(const char *renew) {
  store(json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s,s:i,s:s,s:s,s:i}}", "apiVersion", "coordination.k8s.io/v1",
                  "kind", "Lease", "metadata", "name", LP_LEADER_DEFAULT_NAME, "namespace", NS, "spec",
                  "holderIdentity", "elsewhere_1", "leaseDurationSeconds", 1, "acquireTime",
                  "2026-01-01T00:00:00.000000Z", "renewTime", renew, "leaseTransitions", 3));
}

/* ---- the loop, the client, candidates ---- */

static uv_loop_t loop;
static lp_http_server *server;
static lp_kube_config *cfg;
static lp_kube_client *kc;

typedef struct cand {
  lp_leader *le;
  lp_metrics *m;
  int started, stopped, done, new_leaders;
  double started_at, stopped_at;
} cand;

static void on_started(lp_leader *le, void *ud) {
  cand *c = ud;
  c->started++;
  c->started_at = lp_clock_monotonic();
}

static void on_stopped(lp_leader *le, void *ud) {
  cand *c = ud;
  c->stopped++;
  c->stopped_at = lp_clock_monotonic();
}

static void on_new_leader(lp_leader *le, const char *holder, void *ud) {
  ((cand *)ud)->new_leaders++;
}

static void on_done(void *ud) {
  ((cand *)ud)->done = 1;
}

static void on_tick(uv_timer_t *t) {}

static void on_expire(uv_timer_t *t) {
  *(int *)t->data = 1;
}

/* Runs the loop until pred(arg) holds (checked at least every 5 ms) or ms pass; returns pred's last value
 * (1 when pred is NULL). */
static int run_until(int (*pred)(const void *), const void *arg, unsigned ms) {
  static uv_timer_t tick, limit;
  int expired = 0;
  uv_timer_init(&loop, &tick);
  uv_timer_start(&tick, on_tick, 5, 5);
  uv_timer_init(&loop, &limit);
  limit.data = &expired;
  uv_timer_start(&limit, on_expire, ms, 0);
  while (!(pred && pred(arg)) && !expired) uv_run(&loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&tick, NULL);
  uv_close((uv_handle_t *)&limit, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  return pred ? pred(arg) : 1;
}

static int leading(const void *p) {
  const cand *c = p;
  return c->le && lp_leader_is_leader(c->le);
}

static int stopped(const void *p) {
  const cand *c = p;
  return c->stopped > 0;
}

static int finished(const void *p) {
  const cand *c = p;
  return c->done;
}

static void start(cand *c, unsigned duration, unsigned deadline, unsigned retry) {
  memset(c, 0, sizeof *c);
  c->m = lp_metrics_new();
  lp_leader_opts o = {.namespace = NS,
                      .lease_duration_ms = duration,
                      .renew_deadline_ms = deadline,
                      .retry_period_ms = retry,
                      .metrics = c->m,
                      .on_started_leading = on_started,
                      .on_stopped_leading = on_stopped,
                      .on_new_leader = on_new_leader,
                      .ud = c};
  lp_error *err = NULL;
  c->le = lp_leader_start(kc, &o, &err);
  CHECK(c->le && !err);
  lp_error_free(err);
}

static void stop(cand *c, int release) {
  if (!c->le) return;
  lp_leader_stop(c->le, release, on_done, c);
  c->le = NULL;
  CHECK(run_until(finished, c, 3000));
}

static double metric(const cand *c, const char *name) {
  return lp_metric_value(strstr(name, "total") ? lp_metrics_counter(c->m, name, NULL, LP_NO_LABELS)
                                               : lp_metrics_gauge(c->m, name, NULL, LP_NO_LABELS),
                         NULL);
}

static void setup(void) {
  uv_loop_init(&loop);
  server = lp_http_server_new(&loop, NULL);
  lp_http_server_route(server, NULL, "/apis/*", h_api, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(server, "127.0.0.1", 0, &err)) abort();
  char path[512], text[1024];
  snprintf(path, sizeof path, "%s/config.yaml", tmpdir);
  snprintf(
      text, sizeof text,
      "current-context: t\ncontexts:\n- name: t\n  context: {cluster: c, user: u}\nclusters:\n- name: c\n"
      "  cluster: {server: 'http://127.0.0.1:%d'}\nusers:\n- name: u\n  user: {token: t0k}\n",
      lp_http_server_port(server));
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
  cfg = lp_kube_config_load_file(path, &err);
  /* as the controller should: no HTTP retries and a timeout below the renew deadline */
  lp_http_client_options http = {.max_retries = -1, .default_timeout_ms = 300};
  kc = cfg ? lp_kube_client_new(&loop, cfg, &http, &err) : NULL;
  if (!kc) abort();
}

static void teardown(cand *a, cand *b) {
  cand *cs[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    if (!cs[i]) continue;
    stop(cs[i], 0);
    lp_metrics_free(cs[i]->m);
  }
  lp_kube_client_close(kc, NULL, NULL);
  lp_http_server_close(server, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
  lp_kube_config_free(cfg);
  json_decref(fake.lease);
  memset(&fake, 0, sizeof fake);
}

/* ---- replace and option validation ---- */

typedef struct slot {
  int calls;
  json_t *obj;
  char code[64], msg[512];
} slot;

static void on_reply(const lp_kube_reply *r, void *ud) {
  slot *s = ud;
  s->calls++;
  json_decref(s->obj);
  s->obj = json_incref(r->object);
  snprintf(s->code, sizeof s->code, "%s", r->error ? r->error->code : "");
  snprintf(s->msg, sizeof s->msg, "%s", r->error ? r->error->message : "");
}

static int replied(const void *p) {
  return ((const slot *)p)->calls > 0;
}

static void test_replace_and_options(void) {
  setup();
  preload_foreign("2026-01-01T00:00:00.000000Z"); /* resourceVersion 1 */
  lp_kube_ref ref = {"coordination.k8s.io", "v1", "leases", NS, LP_LEADER_DEFAULT_NAME};
  json_t *obj = json_deep_copy(fake.lease);
  json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion", json_string("0"));
  slot s = {0};
  lp_kube_replace(kc, &ref, obj, on_reply, &s);
  CHECK(run_until(replied, &s, 3000));
  CHECK_STR(s.code, "Conflict"); /* delivered as is: no retry */
  CHECK_CONTAINS(s.msg, "PUT " NAME_PATH " (" LP_LEADER_DEFAULT_NAME "): 409 Conflict: the object has been");
  CHECK_INT(fake.puts, 1);
  json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion", json_string("1"));
  json_object_set_new(json_object_get(obj, "spec"), "holderIdentity", json_string("me"));
  memset(&s, 0, sizeof s);
  lp_kube_replace(kc, &ref, obj, on_reply, &s);
  CHECK(run_until(replied, &s, 3000));
  CHECK_STR(s.code, "");
  CHECK_STR(fake.ctype, "application/json");
  CHECK_STR(json_string_value(json_object_get(json_object_get(s.obj, "metadata"), "resourceVersion")), "2");
  CHECK_STR(spec_str("holderIdentity"), "me");
  json_decref(s.obj);
  json_decref(obj);

  struct {
    const char *ns;
    unsigned d, r, p;
    const char *msg;
  } bad[] = {{NULL, 0, 0, 0, "namespace"},
             {NS, 400, 400, 100, "lease duration 400 ms must exceed renew deadline 400 ms"},
             {NS, 600, 120, 100, "renew deadline 120 ms must exceed 1.2 x retry period 100 ms"},
             {NS, 0, 0, 9000, "1.2 x retry period 9000 ms"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lp_leader_opts o = {.namespace = bad[i].ns,
                        .lease_duration_ms = bad[i].d,
                        .renew_deadline_ms = bad[i].r,
                        .retry_period_ms = bad[i].p};
    lp_error *err = NULL;
    CHECK(lp_leader_start(kc, &o, &err) == NULL);
    CHECK_STR(err ? err->code : NULL, "InvalidConfig");
    CHECK_CONTAINS(err ? err->message : NULL, bad[i].msg);
    lp_error_free(err);
  }
  teardown(NULL, NULL);
}

/* ---- election ---- */

static void test_single_candidate_acquires(void) {
  setup();
  char logpath[512];
  snprintf(logpath, sizeof logpath, "%s/leader.log", tmpdir);
  int logfd = open(logpath, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  lp_log_configure(LP_LOG_INFO, LP_LOG_FORMAT_JSON, logfd);
  cand a;
  start(&a, 600, 400, 100);
  CHECK_INT(a.started, 0); /* never from inside lp_leader_start */
  CHECK(run_until(leading, &a, 3000));
  CHECK_INT(a.started, 1);
  CHECK_INT(fake.creates, 1);
  CHECK_STR(spec_str("holderIdentity"), lp_leader_identity(a.le));
  CHECK_INT(spec_int("leaseTransitions"), 0);
  CHECK_INT(spec_int("leaseDurationSeconds"), 1); /* 600 ms rounded up */
  const char *acquire = spec_str("acquireTime");
  CHECK(acquire && strlen(acquire) == 27 && acquire[10] == 'T' && acquire[19] == '.' && acquire[26] == 'Z');
  char *first_acquire = strdup(acquire ? acquire : "");
  CHECK_STR(spec_str("renewTime"), first_acquire);
  /* hostname_<16 hex> */
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const char *id = lp_leader_identity(a.le);
  CHECK(strncmp(id, host, strlen(host)) == 0 && id[strlen(host)] == '_');
  CHECK_INT(strlen(id), strlen(host) + 17);
  CHECK_INT(strspn(id + strlen(host) + 1, "0123456789abcdef"), 16);
  CHECK_STR(lp_leader_holder(a.le), id);
  CHECK_INT(a.new_leaders, 1);
  CHECK_INT(metric(&a, "luaprov_leader"), 1);
  CHECK_INT(metric(&a, "luaprov_leader_transitions_total"), 1);
  CHECK(lp_leader_healthy(a.le));
  CHECK(lp_leader_healthy_at(a.le, lp_clock_monotonic() + 20.5));  /* 0.6 s + 20 s slack */
  CHECK(!lp_leader_healthy_at(a.le, lp_clock_monotonic() + 20.7)); /* a wedged renew loop */
  /* renewals every retry period keep acquireTime and leaseTransitions */
  int puts = fake.puts;
  run_until(NULL, NULL, 500);
  CHECK(leading(&a));
  CHECK(fake.puts - puts >= 3);
  CHECK_STR(spec_str("acquireTime"), first_acquire);
  CHECK(strcmp(spec_str("renewTime"), first_acquire) > 0);
  CHECK_INT(spec_int("leaseTransitions"), 0);
  CHECK_INT(fake.conflicts, 0);
  free(first_acquire);
  /* stop without release: on_stopped_leading inside stop, the Lease stays ours */
  lp_leader_stop(a.le, 0, on_done, &a);
  CHECK_INT(a.stopped, 1);
  CHECK_INT(metric(&a, "luaprov_leader"), 0);
  CHECK_INT(metric(&a, "luaprov_leader_transitions_total"), 2);
  CHECK_INT(a.done, 0);
  a.le = NULL;
  CHECK(run_until(finished, &a, 3000));
  CHECK_INT(fake.releases, 0);
  lp_log_configure(LP_LOG_INFO, LP_LOG_FORMAT_AUTO, 2);
  close(logfd);
  char text[4096] = "";
  FILE *f = fopen(logpath, "r");
  if (f) {
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
  }
  CHECK_CONTAINS(text, "\"logger\":\"engine.kube.leader\",\"msg\":\"started leading\",\"lease\":\"" NS
                       "/" LP_LEADER_DEFAULT_NAME "\",\"identity\":\"");
  CHECK_CONTAINS(text, "\"msg\":\"stopped leading\"");
  CHECK_CONTAINS(text, "\"reason\":\"stopped\"");
  teardown(&a, NULL);
}

/* Starts a and b on the same fake; returns the leader through *l and the other through *o. */
static void elect(cand *a, cand *b, unsigned duration, unsigned deadline, cand **l, cand **o) {
  start(a, duration, deadline, 100);
  start(b, duration, deadline, 100);
  run_until(NULL, NULL, 800);
  CHECK_INT(leading(a) + leading(b), 1);
  CHECK_INT(a->started + b->started, 1);
  *l = leading(a) ? a : b;
  *o = *l == a ? b : a;
  CHECK_STR(spec_str("holderIdentity"), lp_leader_identity((*l)->le));
  CHECK_STR(lp_leader_holder((*o)->le), lp_leader_identity((*l)->le));
  CHECK_INT(fake.creates, 2); /* both found no Lease; the second create got AlreadyExists */
  CHECK_INT(spec_int("leaseTransitions"), 0);
  CHECK(lp_leader_healthy((*o)->le));
}

static void test_two_candidates_one_leader(void) {
  setup();
  cand a, b, *l, *o;
  elect(&a, &b, 600, 400, &l, &o);
  run_until(NULL, NULL, 700); /* longer than the lease: renewals keep the other out */
  CHECK(leading(l) && !leading(o));
  CHECK_INT(o->started, 0);
  CHECK_INT(metric(o, "luaprov_leader"), 0);
  CHECK_INT(metric(o, "luaprov_leader_transitions_total"), 0);
  teardown(&a, &b);
}

static void test_takeover_after_expiry(void) {
  setup();
  cand a, b, *l, *o;
  elect(&a, &b, 600, 400, &l, &o);
  double t0 = lp_clock_monotonic();
  stop(l, 0);
  CHECK(run_until(leading, o, 3000));
  /* the other last saw the Lease change at most 2.2 retry periods before the stop */
  double took = o->started_at - t0;
  CHECK(took >= 0.35);
  CHECK(took < 1.5);
  CHECK_STR(spec_str("holderIdentity"), lp_leader_identity(o->le));
  CHECK_INT(spec_int("leaseTransitions"), 1);
  CHECK_INT(fake.releases, 0);
  teardown(&a, &b);
}

static void test_release_hands_over_at_once(void) {
  setup();
  cand a, b, *l, *o;
  elect(&a, &b, 1500, 1000, &l, &o); /* a long lease: only the release explains a quick takeover */
  double t0 = lp_clock_monotonic();
  stop(l, 1);
  CHECK_INT(fake.releases, 1);
  CHECK(run_until(leading, o, 3000));
  CHECK(o->started_at - t0 < 0.8);
  CHECK_STR(spec_str("holderIdentity"), lp_leader_identity(o->le));
  CHECK_INT(spec_int("leaseTransitions"), 1);
  CHECK_INT(spec_int("leaseDurationSeconds"), 2);
  teardown(&a, &b);
}

static void test_failing_renewals_stop_leading(void) {
  setup();
  cand a;
  start(&a, 600, 400, 100);
  CHECK(run_until(leading, &a, 3000));
  run_until(NULL, NULL, 150);
  double t0 = lp_clock_monotonic();
  fake.fail = 1;
  CHECK(run_until(stopped, &a, 3000));
  double took = a.stopped_at - t0;
  CHECK(took >= 0.25); /* the last renewal succeeded at most one retry period before */
  CHECK(took <= 0.6);  /* renew deadline 0.4 s */
  CHECK(!leading(&a));
  CHECK_INT(a.stopped, 1);
  CHECK_INT(metric(&a, "luaprov_leader"), 0);
  CHECK(lp_leader_healthy(a.le));
  /* the API server recovers: the Lease still names us, so we lead again without a transition */
  fake.fail = 0;
  CHECK(run_until(leading, &a, 3000));
  CHECK_INT(a.started, 2);
  CHECK_INT(spec_int("leaseTransitions"), 0);
  teardown(&a, NULL);
}

static void bump(const char *renew) {
  json_t *obj = json_deep_copy(fake.lease);
  json_object_set_new(json_object_get(obj, "spec"), "renewTime", json_string(renew));
  store(obj);
}

static void on_foreign_renew(uv_timer_t *t) {
  static int n;
  char renew[40];
  snprintf(renew, sizeof renew, "2026-01-01T00:00:%02d.000000Z", ++n % 60);
  bump(renew);
}

static void test_foreign_holder_uses_our_clock(void) {
  setup();
  preload_foreign("2026-01-01T00:00:00.000000Z");
  uv_timer_t renewer;
  uv_timer_init(&loop, &renewer);
  uv_timer_start(&renewer, on_foreign_renew, 100, 100);
  cand a;
  start(&a, 600, 400, 100);
  run_until(NULL, NULL, 1200); /* the holder keeps renewing: its record changes, we stay out */
  CHECK(!leading(&a));
  CHECK_STR(lp_leader_holder(a.le), "elsewhere_1");
  CHECK_INT(a.new_leaders, 1);
  CHECK_INT(fake.puts, 0);
  /* It stops, its last renewTime far in the past (its clock is behind). Comparing renewTime with our
   * clock would take over at once; we wait lease_duration from when we saw the record change. */
  uv_close((uv_handle_t *)&renewer, NULL);
  bump("2001-01-01T00:00:00.000000Z");
  double t1 = lp_clock_monotonic();
  CHECK(run_until(leading, &a, 3000));
  double took = a.started_at - t1;
  CHECK(took >= 0.6);
  CHECK(took < 1.5);
  CHECK_STR(spec_str("holderIdentity"), lp_leader_identity(a.le));
  CHECK_INT(spec_int("leaseTransitions"), 4);
  CHECK(strcmp(spec_str("acquireTime"), "2026-01-01T00:00:00.000000Z") > 0);
  CHECK_INT(a.new_leaders, 2);
  teardown(&a, NULL);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/luaprov-leader-test-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) return 1;
  RUN(test_replace_and_options);
  RUN(test_single_candidate_acquires);
  RUN(test_two_candidates_one_leader);
  RUN(test_takeover_after_expiry);
  RUN(test_release_hands_over_at_once);
  RUN(test_failing_renewals_stop_leading);
  RUN(test_foreign_holder_uses_our_clock);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return check_summary();
}
