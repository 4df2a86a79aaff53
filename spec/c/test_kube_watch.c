/* The watch state machine (engine/kube/watch.h) against a fake API server on the engine's HTTP server.
 * One scripted run walks every transition and the fake checks the resourceVersion of each watch:
 *   #1 rv=10: an ADDED event written one byte per write, then MODIFIED and a BOOKMARK in one write,
 *      then a clean end                                   -> rewatch from the bookmark's RV
 *   #2 rv=15: one event, then the connection is dropped   -> backoff, rewatch from that event's RV
 *   #3 rv=16: an ERROR event with code 410                -> relist (the owner lists, RV 200)
 *   #4 rv=200: HTTP 410 on the watch start                -> relist again (RV 300)
 *   #5 rv=300: an ADDED event, on which the owner stops the watch. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "http/server.h"
#include "http/server_internal.h" /* lp_http__conn_close: drop a connection mid-stream */
#include "kube/client.h"
#include "kube/config.h"
#include "kube/watch.h"

static uv_loop_t loop;
static lp_http_server *server;
static lp_kube_config *cfg;
static lp_kube_client *kc;
static lp_kube_watch *watch;

static struct {
  int watches, lists;
  char rvs[8][32];   /* the resourceVersion each watch asked for */
  char events[1024]; /* "TYPE name rv;" as the owner saw them */
  int relists, errors, stopped;
  char last_error[256];
} seen;

/* ---- the fake server ---- */

static const char ev_a[] = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"NodeClaim\",\"metadata\":{\"name\":"
                           "\"a\",\"resourceVersion\":\"11\"}}}\n";
static const char ev_rest[] =
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"12\"}}}\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"NodeClaim\",\"metadata\":{\"resourceVersion\":\"15\"}}}\n";
static const char ev_16[] =
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"16\"}}}\r\n";
static const char ev_gone[] =
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\","
    "\"reason\":\"Expired\",\"message\":\"too old resource version: 16 (180)\",\"code\":410}}\n";
static const char ev_b[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\",\"resourceVersion\":\"301\"}}}\n";

typedef struct stream {
  uv_timer_t timer;
  lp_http_response *res; /* NULL once finished or gone */
  size_t pos;
  int step;
} stream;

static stream s1, s2, s5;

static void on_gone(lp_http_response *res, void *ud) {
  ((stream *)ud)->res = NULL;
}

/* #1: one byte per tick, then the rest and a clean end. */
static void tick1(uv_timer_t *t) {
  if (!s1.res) return (void)uv_timer_stop(t);
  if (s1.pos < sizeof ev_a - 1) {
    lp_http_stream_write(s1.res, ev_a + s1.pos++, 1);
    return;
  }
  uv_timer_stop(t);
  lp_http_stream_write(s1.res, ev_rest, sizeof ev_rest - 1);
  lp_http_stream_end(s1.res);
  s1.res = NULL;
}

/* #2: after the event has gone out, close the TCP connection without the last chunk. */
static void drop2(uv_timer_t *t) {
  if (s2.res && s2.res->conn) lp_http__conn_close(s2.res->conn);
}

static void begin(stream *s, lp_http_response *res) {
  s->res = res;
  lp_http_response_on_close(res, on_gone, s);
  lp_http_stream_begin(res, 200, "application/json");
}

static void h_api(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (!strstr(req->query, "watch=1")) { /* the owner's relist */
    const char *rv = ++seen.lists == 1 ? "200" : "300";
    char body[128];
    snprintf(body, sizeof body,
             "{\"kind\":\"NodeClaimList\",\"metadata\":{\"resourceVersion\":\"%s\"},\"items\":[]}", rv);
    lp_http_respond(res, 200, "application/json", body, strlen(body));
    return;
  }
  const char *rv = strstr(req->query, "resourceVersion=");
  int n = seen.watches++;
  snprintf(seen.rvs[n % 8], sizeof seen.rvs[0], "%.*s", rv ? (int)strcspn(rv + 16, "&") : 0,
           rv ? rv + 16 : "");
  CHECK(strstr(req->query, "allowWatchBookmarks=true&timeoutSeconds=7") != NULL);
  switch (n) {
  case 0:
    begin(&s1, res);
    uv_timer_start(&s1.timer, tick1, 1, 1);
    break;
  case 1:
    begin(&s2, res);
    lp_http_stream_write(res, ev_16, sizeof ev_16 - 1);
    uv_timer_start(&s2.timer, drop2, 50, 0);
    break;
  case 2:
    lp_http_stream_begin(res, 200, "application/json");
    lp_http_stream_write(res, ev_gone, sizeof ev_gone - 1);
    lp_http_stream_end(res);
    break;
  case 3: {
    const char *st = "{\"kind\":\"Status\",\"reason\":\"Expired\",\"message\":\"too old\",\"code\":410}";
    lp_http_respond(res, 410, "application/json", st, strlen(st));
    break;
  }
  default:
    begin(&s5, res);
    lp_http_stream_write(res, ev_b, sizeof ev_b - 1);
    break;
  }
}

/* ---- the owner ---- */

static void on_event(lp_kube_watch *w, const char *type, json_t *obj, void *ud) {
  json_t *meta = json_object_get(obj, "metadata");
  size_t len = strlen(seen.events);
  snprintf(seen.events + len, sizeof seen.events - len, "%s %s %s;", type,
           json_string_value(json_object_get(meta, "name")),
           json_string_value(json_object_get(meta, "resourceVersion")));
  if (strcmp(json_string_value(json_object_get(meta, "name")), "b") == 0) {
    lp_kube_watch_stop(w);
    seen.stopped = 1;
  }
}

static void on_listed(const lp_kube_reply *r, void *ud) {
  CHECK(r->error == NULL);
  CHECK_INT(lp_kube_watch_get_state(watch), LP_KUBE_RELIST);
  if (r->object)
    lp_kube_watch_resume(
        watch, json_string_value(json_object_get(json_object_get(r->object, "metadata"), "resourceVersion")));
}

static const lp_kube_ref nodeclaims = {.group = "karpenter.sh", .version = "v1", .resource = "nodeclaims"};

static void on_relist(lp_kube_watch *w, void *ud) {
  seen.relists++;
  CHECK_STR(lp_kube_watch_resource_version(w), "");
  lp_kube_list(kc, &nodeclaims, NULL, on_listed, NULL);
}

static void on_error(lp_kube_watch *w, const lp_error *err, void *ud) {
  seen.errors++;
  snprintf(seen.last_error, sizeof seen.last_error, "%s: %s", err->code, err->message);
}

static void on_deadline(uv_timer_t *t) {
  *(int *)t->data = 1;
}

static void test_watch_script(void) {
  char dir[] = "/tmp/luaprov-kube-watch-XXXXXX", path[64], text[512];
  if (!mkdtemp(dir)) abort();
  uv_loop_init(&loop);
  uv_timer_init(&loop, &s1.timer);
  uv_timer_init(&loop, &s2.timer);
  server = lp_http_server_new(&loop, NULL);
  lp_http_server_route(server, "GET", "/apis/*", h_api, NULL);
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

  lp_kube_watch_opts opts = {.timeout_seconds = 7, .backoff_initial_ms = 20, .backoff_max_ms = 100};
  lp_kube_watch_handlers h = {.on_event = on_event, .on_relist = on_relist, .on_error = on_error};
  watch = lp_kube_watch_start(kc, &nodeclaims, "10", &opts, &h);
  CHECK_INT(lp_kube_watch_get_state(watch), LP_KUBE_WATCHING);
  uv_timer_t deadline;
  int expired = 0;
  uv_timer_init(&loop, &deadline);
  deadline.data = &expired;
  uv_timer_start(&deadline, on_deadline, 10000, 0);
  while (!seen.stopped && !expired) uv_run(&loop, UV_RUN_ONCE);
  CHECK(!expired);

  CHECK_INT(seen.watches, 5);
  CHECK_STR(seen.rvs[0], "10");
  CHECK_STR(seen.rvs[1], "15"); /* the bookmark's */
  CHECK_STR(seen.rvs[2], "16"); /* the last event before the drop */
  CHECK_STR(seen.rvs[3], "200");
  CHECK_STR(seen.rvs[4], "300");
  CHECK_STR(seen.events, "ADDED a 11;MODIFIED a 12;MODIFIED a 16;ADDED b 301;");
  CHECK_INT(seen.relists, 2);
  CHECK_INT(seen.lists, 2);
  CHECK_INT(seen.errors, 1); /* the drop */
  CHECK_CONTAINS(seen.last_error, "/apis/karpenter.sh/v1/nodeclaims");

  uv_close((uv_handle_t *)&deadline, NULL);
  uv_close((uv_handle_t *)&s1.timer, NULL);
  uv_close((uv_handle_t *)&s2.timer, NULL);
  lp_kube_client_close(kc, NULL, NULL);
  lp_http_server_close(server, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
  lp_kube_config_free(cfg);
}

int main(void) {
  RUN(test_watch_script);
  return check_summary();
}
