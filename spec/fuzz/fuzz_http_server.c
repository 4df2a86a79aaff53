/* fuzz_http_server: the HTTP/1 server's request path (engine/http/server.c; README.md).
 *
 * One libuv loop holds the server on a loopback port for the whole run. Each input is the bytes of one
 * TCP connection from a client on the same loop (fuzz_tcp_client.h), usually several pipelined
 * requests. The routes cover the ways
 * a handler answers: at once, echoing the body, streaming chunks, and later from a timer (a response
 * still pending when the client goes).
 *
 * A crash, a sanitizer report or a connection the server never closes (libFuzzer's -timeout) is a
 * finding. The header and idle deadlines are short so a request the server waits on ends quickly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "fuzz_tcp_client.h"
#include "http/server.h"

static uv_loop_t *loop;
static int port;

static void h_hello(const lp_http_request *req, lp_http_response *res, void *ud) {
  const char *probe = lp_http_request_header(req, "x-probe");
  lp_http_response_header(res, "X-Probe", probe ? probe : "-");
  lp_http_respond(res, 200, "text/plain", "hello\n", 6);
}

static void h_echo(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_respond(res, 200, "application/octet-stream", req->body, req->body_len);
}

static void h_stream(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_stream_begin(res, 200, "application/json");
  (void)lp_http_stream_write(res, req->path, strlen(req->path));
  (void)lp_http_stream_write(res, req->query, strlen(req->query));
  lp_http_stream_end(res);
}

/* Answered from a zero timer: the client may have gone by then. */
typedef struct later {
  uv_timer_t timer;
  lp_http_response *res;
} later;

static void later_free(uv_handle_t *h) {
  free(h->data);
}

static void later_gone(lp_http_response *res, void *ud) {
  later *l = ud;
  l->res = NULL;
  uv_close((uv_handle_t *)&l->timer, later_free);
}

static void later_tick(uv_timer_t *t) {
  later *l = t->data;
  lp_http_response *res = l->res;
  lp_http_response_on_close(res, NULL, NULL);
  uv_close((uv_handle_t *)&l->timer, later_free);
  lp_http_respond(res, 204, NULL, NULL, 0);
}

static void h_later(const lp_http_request *req, lp_http_response *res, void *ud) {
  later *l = calloc(1, sizeof *l);
  if (!l) abort();
  l->res = res;
  uv_timer_init(loop, &l->timer);
  l->timer.data = l;
  lp_http_response_on_close(res, later_gone, l);
  uv_timer_start(&l->timer, later_tick, 0, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  loop = uv_default_loop();
  lp_http_server_options opts = {.max_header_bytes = 4096,
                                 .max_body_bytes = 65536,
                                 .idle_timeout_ms = 500,
                                 .header_timeout_ms = 500,
                                 .max_connections = 8};
  lp_http_server *s = lp_http_server_new(loop, &opts);
  lp_http_server_route(s, "GET", "/", h_hello, NULL);
  lp_http_server_route(s, "POST", "/echo", h_echo, NULL);
  lp_http_server_route(s, NULL, "/later", h_later, NULL);
  lp_http_server_route(s, "GET", "/api/*", h_stream, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(s, "127.0.0.1", 0, &err)) {
    fprintf(stderr, "fuzz_http_server: %s\n", err->message);
    abort();
  }
  port = lp_http_server_port(s);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_client_run(loop, port, data, size);
  return 0;
}
