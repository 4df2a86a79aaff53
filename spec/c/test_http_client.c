/* The HTTP client against the engine's own HTTP server on a loopback port: results and headers,
 * transport errors, retries and Retry-After, cancelling. Large bodies, streaming, concurrency,
 * connection reuse, closing and the synchronous API are in test_http_client_load.c; the loop, server
 * and client every test starts and finishes (env_start / env_finish) are in http_test_support.h. */
#define HTTP_TEST_CLIENT
#include "http_test_support.h"

#include "core/metrics.h"

/* 429 with Retry-After: srv.retry_after on the first call, 200 after. */
static void h_throttle(const lp_http_request *req, lp_http_response *res, void *ud) {
  if (++srv.throttle_calls == 1) {
    lp_http_response_header(res, "Retry-After", srv.retry_after);
    lp_http_respond(res, 429, "text/plain", "slow down", 9);
  } else {
    lp_http_respond(res, 200, "text/plain", "ok", 2);
  }
}

static void add_routes(lp_http_server *s) {
  lp_http_server_route(s, "GET", "/hello", h_hello, NULL);
  lp_http_server_route(s, NULL, "/hang", h_hang, NULL);
  lp_http_server_route(s, NULL, "/flaky", h_flaky, NULL);
  lp_http_server_route(s, "GET", "/throttle", h_throttle, NULL);
}

static void after_ms(env *e, uv_timer_t *t, uint64_t ms, uv_timer_cb cb, void *data) {
  uv_timer_init(&e->loop, t);
  t->data = data;
  uv_timer_start(t, cb, ms, 0);
}

static double counter_value(const char *name, const char *const *labels, const char *const *values) {
  return lp_metric_value(lp_metrics_counter(lp_metrics_default(), name, NULL, labels), values);
}

/* ---- tests ---- */

static void test_success(void) {
  env e;
  env_start(&e, NULL);
  slot s = {0}, no_url = {.e = &e}, ftp = {.e = &e};
  lp_http_header accept = {"Accept", "text/plain"};
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.headers = &accept;
  req.nheaders = 1;
  get(&e, &s, "/hello?x=1", &req);
  lp_http_request_opts bad = LP_HTTP_REQUEST_OPTS_INIT;
  lp_http_client_request(e.client, &bad, on_done, &no_url);
  bad.url = "ftp://127.0.0.1/file";
  lp_http_client_request(e.client, &bad, on_done, &ftp);
  CHECK_INT(s.calls + no_url.calls + ftp.calls, 0); /* never from inside lp_http_client_request */
  CHECK_INT(lp_http_client_in_flight(e.client), 3);
  run_until(&e, &e.done, 3, 5000);
  CHECK_INT(s.calls, 1);
  CHECK(s.r->error == NULL);
  CHECK_INT(s.r->status, 200);
  CHECK_STR(s.r->body, "hello world");
  CHECK_INT(s.r->body_len, 11);
  CHECK_STR(lp_http_result_header(s.r, "X-Test"), "yes");
  CHECK_CONTAINS(lp_http_result_header(s.r, "content-type"), "text/plain");
  int lower = 1;
  for (size_t i = 0; i < s.r->nheaders; i++)
    for (const char *c = s.r->headers[i].name; *c; c++) lower &= !(*c >= 'A' && *c <= 'Z');
  CHECK(lower && s.r->nheaders >= 2);
  CHECK_INT(s.r->attempts, 1);
  CHECK_INT(s.r->http_version, 1);
  CHECK_STR(srv.accept, "text/plain");
  CHECK_CONTAINS(srv.user_agent, "luaprov/");
  CHECK(error_is(no_url.r, "Transport"));
  CHECK(error_is(ftp.r, "Transport")); /* only http and https are allowed */
  CHECK_INT(lp_http_client_in_flight(e.client), 0);
  env_finish(&e);
}

static void test_transport_errors(void) {
  env e;
  env_start(&e, NULL);
  slot once = {.e = &e}, twice = {.e = &e}, refused = {.e = &e};
  char url[256];
  snprintf(url, sizeof url, "http://user:s3cret@127.0.0.1:%d/hang?Signature=abc123", e.port);
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.url = url;
  req.timeout_ms = 200;
  req.max_retries = 0;
  lp_http_client_request(e.client, &req, on_done, &once);
  req.max_retries = 1; /* a timeout is transient: an idempotent request tries again */
  lp_http_client_request(e.client, &req, on_done, &twice);
  char refused_url[128];
  snprintf(refused_url, sizeof refused_url, "http://127.0.0.1:%d/", unused_port(&e.loop));
  req.url = refused_url;
  req.max_retries = 2;
  lp_http_client_request(e.client, &req, on_done, &refused);
  run_until(&e, &e.done, 3, 5000);
  CHECK(error_is(once.r, "Timeout"));
  CHECK_INT(once.r->status, 0);
  CHECK_INT(once.r->attempts, 1);
  CHECK(once.r->elapsed_s >= 0.19 && once.r->elapsed_s < 2);
  char expect[128];
  snprintf(expect, sizeof expect, "GET http://127.0.0.1:%d/hang: ", e.port);
  CHECK_CONTAINS(once.r->error->message, expect);
  CHECK_CONTAINS(once.r->error->message, "imed out"); /* curl's own words follow */
  CHECK(!strstr(once.r->error->message, "abc123") && !strstr(once.r->error->message, "s3cret"));
  CHECK(error_is(twice.r, "Timeout"));
  CHECK_INT(twice.r->attempts, 2);
  CHECK(twice.r->elapsed_s >= 0.39);
  CHECK(error_is(refused.r, "ConnectFailed"));
  CHECK_INT(refused.r->attempts, 3);
  CHECK_CONTAINS(refused.r->error->message, "(after 3 attempts)");
  env_finish(&e);
}

static void test_retries(void) {
  const char *const by_code[] = {"method", "code", NULL};
  double retries0 = counter_value("luaprov_http_client_retries_total", LP_NO_LABELS, LP_NO_LABELS);
  double get5xx0 = counter_value("luaprov_http_client_requests_total", by_code, LP_LABELS("GET", "5xx"));
  env e;
  env_start(&e, NULL);
  srv.flaky_failures = 2;
  lp_http_result *r = fetch(&e, "/flaky", NULL);
  CHECK(r->error == NULL);
  CHECK_INT(r->status, 200);
  CHECK_STR(r->body, "recovered");
  CHECK_INT(r->attempts, 3);
  CHECK_INT(srv.flaky_calls, 3);
  CHECK(counter_value("luaprov_http_client_retries_total", LP_NO_LABELS, LP_NO_LABELS) - retries0 == 2);
  CHECK(counter_value("luaprov_http_client_requests_total", by_code, LP_LABELS("GET", "5xx")) - get5xx0 == 2);

  srv.flaky_calls = 0;
  srv.flaky_failures = 100;
  lp_http_request_opts req = LP_HTTP_REQUEST_OPTS_INIT;
  req.method = "post";
  req.body = "{}";
  req.body_len = 2;
  r = fetch(&e, "/flaky", &req);
  CHECK_INT(r->status, 503); /* an HTTP error status is a result, not an error */
  CHECK(r->error == NULL);
  CHECK_STR(r->body, "busy");
  CHECK_INT(r->attempts, 1); /* POST is not idempotent */
  CHECK_INT(srv.flaky_calls, 1);
  req.idempotent = 1; /* the caller vouches for it (a client token makes it safe) */
  req.max_retries = 2;
  r = fetch(&e, "/flaky", &req);
  CHECK_INT(r->status, 503);
  CHECK_INT(r->attempts, 3);
  CHECK_INT(srv.flaky_calls, 4);
  env_finish(&e);
}

static void test_retry_after(void) {
  env e;
  env_start(&e, NULL);
  srv.retry_after = "1";
  lp_http_result *r = fetch(&e, "/throttle", NULL);
  CHECK_INT(r->status, 200);
  CHECK_INT(r->attempts, 2);
  CHECK(r->elapsed_s >= 0.99); /* waited as asked, not the 10 ms jitter base */
  env_finish(&e);

  lp_http_client_options capped = {.retry_max_ms = 300};
  env_start(&e, &capped);
  srv.retry_after = "30";
  r = fetch(&e, "/throttle", NULL);
  CHECK_INT(r->status, 200);
  CHECK_INT(r->attempts, 2);
  CHECK(r->elapsed_s >= 0.29 && r->elapsed_s < 2); /* capped at retry_max_ms */
  env_finish(&e);
}

typedef struct canceller {
  uv_timer_t timer;
  lp_http_call *call;
  slot s;
  int calls_right_after;
} canceller;

static void do_cancel(uv_timer_t *t) {
  canceller *k = t->data;
  lp_http_call_cancel(k->call);
  lp_http_call_cancel(k->call); /* twice is harmless */
  k->calls_right_after = k->s.calls;
  uv_close((uv_handle_t *)t, NULL);
}

static void test_cancel(void) {
  env e;
  env_start(&e, NULL);
  srv.retry_after = "2";
  canceller ks[2];
  memset(ks, 0, sizeof ks);
  ks[0].call = get(&e, &ks[0].s, "/hang", NULL);
  /* cancelled while waiting 2 s to retry; also shows a held request does not hold up the host */
  ks[1].call = get(&e, &ks[1].s, "/throttle", NULL);
  for (int i = 0; i < 2; i++) after_ms(&e, &ks[i].timer, 200, do_cancel, &ks[i]);
  run_until(&e, &e.done, 2, 5000);
  for (int i = 0; i < 2; i++) {
    CHECK_INT(ks[i].calls_right_after, 0); /* done runs later, never inside cancel */
    CHECK_INT(ks[i].s.calls, 1);
    CHECK(error_is(ks[i].s.r, "Cancelled"));
    CHECK(ks[i].s.r->elapsed_s < 1);
  }
  CHECK_INT(srv.throttle_calls, 1);
  env_finish(&e);
}

int main(void) {
  RUN(test_success);
  RUN(test_transport_errors);
  RUN(test_retries);
  RUN(test_retry_after);
  RUN(test_cancel);
  return check_summary();
}
