/* The HTTP server against raw TCP clients: requests and headers, routing, keep-alive and pipelining,
 * request bodies, listen addresses. Limits, malformed input, streaming and closing are in
 * test_http_server_limits.c; the fixture (a server on its own loop thread) and the raw client are in
 * http_test_support.h. Stopping a fixture closes the server and asserts that on_closed ran and that
 * the loop has no handle left. */
#define _GNU_SOURCE
#define HTTP_TEST_SERVER
#include "http_test_support.h"

static void h_path(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_respond(res, 200, NULL, req->path, strlen(req->path));
}

static void add_routes(fixture *fx) {
  lp_http_server_route(fx->server, "GET", "/hello", h_hello, fx);
  lp_http_server_route(fx->server, "POST", "/echo", h_echo, fx);
  lp_http_server_route(fx->server, "GET", "/slow", h_slow, fx);
  lp_http_server_route(fx->server, "GET", "/big", h_big, fx);
  lp_http_server_route(fx->server, NULL, "/api/*", h_path, fx);
}

/* ---- tests ---- */

static void test_get_returns_body_and_headers(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /hello?x=1&y=2 HTTP/1.1\r\nHost: t\r\nX-Probe: abc\r\n\r\n"), 200);
  CHECK_STR(body(&cl), "hello\n");
  CHECK_CONTAINS(headers(&cl), "Content-Length: 6\r\n");
  CHECK_CONTAINS(headers(&cl), "Content-Type: text/plain\r\n");
  CHECK_CONTAINS(headers(&cl), "Server: luaprov-test\r\n");
  CHECK_CONTAINS(headers(&cl), "X-Test: yes\r\n");
  CHECK(strstr(headers(&cl), "Connection:") == NULL); /* keep-alive is HTTP/1.1's default */
  const char *date = strstr(headers(&cl), "Date: ");
  struct tm tm = {0};
  CHECK(date && strptime(date + 6, "%a, %d %b %Y %H:%M:%S GMT", &tm) != NULL);
  CHECK(labs((long)(timegm(&tm) - time(NULL))) <= 2);
  LOCKED(&fx, CHECK_STR(fx.seen, "GET /hello [x=1&y=2] /hello?x=1&y=2 abc");
         CHECK(strncmp(fx.remote, "127.0.0.1:", 10) == 0));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_routing_404_405_and_prefix(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/nope")), 404);
  CHECK_STR(body(&cl), "Not Found\n");
  CHECK_INT(client_call(&cl, "DELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n"), 405);
  CHECK_CONTAINS(headers(&cl), "Allow: GET\r\n");
  CHECK_INT(client_call(&cl, "PUT /api/v1/x?q HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 200);
  CHECK_STR(body(&cl), "/api/v1/x");
  CHECK_INT(client_call(&cl, GET("/api")), 200);
  CHECK_STR(body(&cl), "/api");
  CHECK_INT(client_call(&cl, GET("/apix")), 404);
  /* HEAD answers through the GET route with its length and no body: the next response parses. */
  CHECK_INT(client_call(&cl, "HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Content-Length: 6\r\n");
  CHECK_INT(cl.body.len, 0);
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  CHECK_STR(body(&cl), "hello\n");
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_keep_alive_pipelining_and_close(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  char first[64];
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  LOCKED(&fx, snprintf(first, sizeof first, "%s", fx.remote));
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  LOCKED(&fx, CHECK_STR(fx.remote, first)); /* same client port: the same connection */
  /* Three requests in one write, the first answered late: answers come back in request order. */
  client_send(&cl, GET("/slow") GET("/hello") "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "slow\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "hello\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "abc");
  /* More pipelined input than the server buffers behind a pending response (it stops reading, then
   * resumes): three 60 000-byte bodies queued behind /slow all come back intact. */
  static char big[60001];
  memset(big, 'p', sizeof big - 1);
  client_send(&cl, GET("/slow"));
  for (int i = 0; i < 3; i++) {
    client_send(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 60000\r\n\r\n");
    client_send(&cl, big);
  }
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_STR(body(&cl), "slow\n");
  for (int i = 0; i < 3; i++) {
    CHECK_INT(client_read(&cl, NULL), 0);
    CHECK_STR(body(&cl), big);
  }
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
  CHECK(client_closed(&cl));
  client_close(&cl);

  /* HTTP/1.0 closes after one response unless it asks to keep the connection. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.0\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
  CHECK(client_closed(&cl));
  client_close(&cl);
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 200);
  CHECK_CONTAINS(headers(&cl), "Connection: keep-alive\r\n");
  CHECK_INT(client_call(&cl, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 200);
  client_close(&cl);
  fixture_stop(&fx);
}

/* A client that pipelines requests without reading the answers stalls the connection: the server
 * stops parsing once about a megabyte waits to be written, and resumes as the client reads. */
static void test_pipelining_without_reading_is_bounded(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open_family(&cl, AF_INET, fx.port, 4096), 0);
  for (int i = 0; i < 40; i++) client_send(&cl, GET("/big"));
  usleep(200000);
  LOCKED(&fx, CHECK(fx.big_served >= 1 && fx.big_served <= 20));
  int ok = 0;
  for (int i = 0; i < 40; i++)
    if (client_read(&cl, NULL) == 0 && cl.status == 200 && cl.body.len == BIG_BYTES &&
        memcmp(cl.body.data, big_body, BIG_BYTES) == 0)
      ok++;
  CHECK_INT(ok, 40);
  LOCKED(&fx, CHECK_INT(fx.big_served, 40));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_request_bodies(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world"), 200);
  CHECK_STR(body(&cl), "hello world");
  CHECK_INT(client_call(&cl, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "6\r\nchunk \r\n7\r\nencoded\r\n0\r\n\r\n"),
            200);
  CHECK_STR(body(&cl), "chunk encoded");
  /* Expect: 100-continue is answered before the body is sent. */
  client_send(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 100);
  CHECK_INT(client_call(&cl, "ping"), 200);
  CHECK_STR(body(&cl), "ping");
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_listen_addresses(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_error *err = NULL;
  lp_http_server *s = lp_http_server_new(&loop, NULL);
  CHECK_INT(lp_http_server_listen(s, "not-an-address", 0, &err), -1);
  CHECK(err && strcmp(err->code, "Listen") == 0);
  lp_error_free(err);
  err = NULL;
  CHECK_INT(lp_http_server_listen(s, "localhost", 0, &err), 0);
  int port = lp_http_server_port(s);
  CHECK(port > 0);
  lp_http_server *taken = lp_http_server_new(&loop, NULL);
  CHECK_INT(lp_http_server_listen(taken, "127.0.0.1", port, &err), -1);
  CHECK(err && strcmp(err->code, "Listen") == 0 && strstr(err->message, "address already in use"));
  lp_error_free(err);
  err = NULL;
  lp_http_server *v6 = lp_http_server_new(&loop, NULL);
  if (lp_http_server_listen(v6, "[::1]", 0, &err) == 0) {
    CHECK(lp_http_server_port(v6) > 0);
  } else {
    fprintf(stderr, "     (no IPv6 loopback here: %s)\n", err->message);
    lp_error_free(err);
  }
  lp_http_server_close(s, NULL, NULL);
  lp_http_server_close(taken, NULL, NULL);
  lp_http_server_close(v6, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
}

static void test_ipv6_request(void) {
  fixture fx;
  if (fixture_start_at(&fx, NULL, "::1") == 0) {
    client cl;
    CHECK_INT(client_open_family(&cl, AF_INET6, fx.port, 0), 0);
    CHECK_INT(client_call(&cl, GET("/hello")), 200);
    LOCKED(&fx, CHECK(strncmp(fx.remote, "[::1]:", 6) == 0));
    client_close(&cl);
  } else {
    fprintf(stderr, "     (no IPv6 loopback here: skipped)\n");
  }
  fixture_stop(&fx);
}

static void test_status_text(void) {
  CHECK_STR(lp_http_status_text(200), "OK");
  CHECK_STR(lp_http_status_text(404), "Not Found");
  CHECK_STR(lp_http_status_text(431), "Request Header Fields Too Large");
  CHECK_STR(lp_http_status_text(599), "Unknown");
}

int main(void) {
  for (size_t i = 0; i < sizeof big_body; i++) big_body[i] = (char)('a' + i % 26);
  RUN(test_get_returns_body_and_headers);
  RUN(test_routing_404_405_and_prefix);
  RUN(test_keep_alive_pipelining_and_close);
  RUN(test_pipelining_without_reading_is_bounded);
  RUN(test_request_bodies);
  RUN(test_listen_addresses);
  RUN(test_ipv6_request);
  RUN(test_status_text);
  return check_summary();
}
