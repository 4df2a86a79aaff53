/* The gRPC server (engine/grpc) against a raw HTTP/2 client, across connections and call lifetimes:
 * many concurrent calls and connections, a client cancelling a call, closing the server with calls
 * in flight, mutual TLS (accepted and refused handshakes), and configuration errors. Certificates
 * come from spec/grpc/make_certs.sh into a temporary directory. Single-connection calls and request
 * errors are in test_grpc_server.c; the fixture and the client in grpc_test_support.h. */
#define _GNU_SOURCE
#include <signal.h>

#include "grpc_test_support.h"

/* The number of calls the server holds (Hold handler) and has not finished. */
static int held(fixture *fx) {
  int n;
  LOCKED(fx, n = fx->nheld);
  return n;
}

/* Pumps until the server holds n calls. */
static void cl_wait_held(client *cl, fixture *fx, int n) {
  double end = now_ms() + 5000;
  while (held(fx) < n && now_ms() < end) cl_pump(cl, 10);
  CHECK_INT(held(fx), n);
}

/* ---- tests ---- */

static void test_concurrent_calls_and_connections(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  char msgs[100][16];
  rpc *r[100];
  for (int i = 0; i < 100; i++) { /* the server's MAX_CONCURRENT_STREAMS, all at once */
    snprintf(msgs[i], sizeof msgs[i], "20:%d", i);
    r[i] = cl_call(&cl, SVC "Delay", msgs[i], "10S");
  }
  CHECK_INT(cl_wait(&cl, 10000), 0);
  int ok = 0;
  for (int i = 0; i < 100; i++) ok += r[i]->grpc_status == 0 && reply(r[i]) && !strcmp(reply(r[i]), msgs[i]);
  CHECK_INT(ok, 100);
  cl_close(&cl);
  /* 8 connections with 10 calls each, pumped in turn */
  static client many[8];
  for (int c = 0; c < 8; c++) {
    CHECK_INT(cl_open(&many[c], fx.port, NULL), 0);
    for (int i = 0; i < 10; i++) cl_call(&many[c], SVC "Delay", "10", "10S");
  }
  int done = 0;
  for (double end = now_ms() + 10000; done < 8 && now_ms() < end;) {
    done = 0;
    for (int c = 0; c < 8; c++) cl_pump(&many[c], 1), done += cl_all_closed(&many[c]);
  }
  ok = 0;
  for (int c = 0; c < 8; c++) {
    for (int i = 0; i < 10; i++) ok += many[c].rpcs[i].grpc_status == 0;
    cl_close(&many[c]);
  }
  CHECK_INT(ok, 80);
  fixture_stop(&fx);
}

static void test_client_cancel(void) {
  double before = requests_total("Hold", "CANCELLED");
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *r = cl_call(&cl, SVC "Hold", "x", NULL);
  cl_wait_held(&cl, &fx, 1);
  nghttp2_submit_rst_stream(cl.s, NGHTTP2_FLAG_NONE, r->id, NGHTTP2_CANCEL);
  CHECK_INT(cl_wait(&cl, 2000), 0);
  CHECK_INT(r->grpc_status, -1);
  CHECK_INT(r->error_code, NGHTTP2_CANCEL);
  cl_pump(&cl, 50);
  fixture_request(&fx, 0); /* the handler finishes now: ignored */
  rpc *after = cl_call(&cl, SVC "Echo", "alive", NULL);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(after), "alive");
  CHECK_INT(held(&fx), 0);
  cl_close(&cl);
  fixture_stop(&fx);
  CHECK_INT(requests_total("Hold", "CANCELLED") - before, 1);
}

static void test_server_close_with_calls_in_flight(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *r[3];
  for (int i = 0; i < 3; i++) r[i] = cl_call(&cl, SVC "Hold", "x", "10S");
  cl_wait_held(&cl, &fx, 3);
  fixture_request(&fx, 1);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  for (int i = 0; i < 3; i++) CHECK_INT(r[i]->grpc_status, LP_GRPC_UNAVAILABLE);
  CHECK(cl.goaway);
  cl_close(&cl);     /* else the server lingers for the client's EOF */
  fixture_join(&fx); /* the held calls outlive the server and are finished after it */
}

static int tls_call(int port, const tls_opts *t, rpc *out) {
  client cl;
  int rc = cl_open(&cl, port, t);
  if (rc == 0) {
    rpc *r = cl_call(&cl, SVC "Echo", "secret", NULL);
    cl_wait(&cl, 5000);
    out->grpc_status = r->grpc_status;
    snprintf(out->message, sizeof out->message, "%s", reply(r) ? reply(r) : "");
    rc = cl.dead ? -1 : 0;
  }
  cl_close(&cl);
  return rc;
}

static void test_mtls(void) {
  fixture fx;
  fixture_start(&fx, 1, 0);
  rpc r = {.grpc_status = -1};
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", "client"}, &r), 0);
  CHECK_INT(r.grpc_status, 0);
  CHECK_STR(r.message, "secret");
  r.grpc_status = -1;
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", NULL}, &r), -1); /* no client certificate */
  CHECK_INT(r.grpc_status, -1);
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", "other-client"}, &r), -1); /* signed by another CA */
  CHECK_INT(r.grpc_status, -1);
  CHECK_INT(tls_call(fx.port, &(tls_opts){"other-ca", "client"}, &r), -1); /* client distrusts server */
  CHECK_INT(r.grpc_status, -1);
  client cl; /* plaintext HTTP/2 to a TLS port */
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  cl_call(&cl, SVC "Echo", "x", NULL);
  cl_wait(&cl, 5000);
  CHECK(cl.dead);
  cl_close(&cl);
  CHECK_INT(tls_call(fx.port, &(tls_opts){"ca", "client"}, &r), 0); /* still serving */
  CHECK_INT(r.grpc_status, 0);
  fixture_stop(&fx);
}

static void test_configuration_errors(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_error *err = NULL;
  CHECK(lp_grpc_server_new(&loop, &(lp_grpc_server_options){.cert_file = "x.pem"}, &err) == NULL);
  CHECK_STR(err ? err->code : NULL, "Config");
  lp_error_free(err), err = NULL;
  char ca[300];
  snprintf(ca, sizeof ca, "%s/ca.pem", certs);
  lp_grpc_server_options o = {.cert_file = "/nonexistent/server.pem", .key_file = "k", .ca_file = ca};
  CHECK(lp_grpc_server_new(&loop, &o, &err) == NULL);
  CHECK_STR(err ? err->code : NULL, "TLS");
  CHECK_CONTAINS(err ? err->message : NULL, "/nonexistent/server.pem");
  lp_error_free(err), err = NULL;
  lp_grpc_server *s = lp_grpc_server_new(&loop, &(lp_grpc_server_options){.host = "not-an-ip"}, &err);
  CHECK_INT(lp_grpc_server_listen(s, &err), -1);
  CHECK_STR(err ? err->code : NULL, "Listen");
  lp_error_free(err);
  lp_grpc_server_close(s, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT(uv_loop_close(&loop), 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  snprintf(certs, sizeof certs, "%s/luaprov-grpc-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  CHECK(mkdtemp(certs) != NULL);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "sh '%s/spec/grpc/make_certs.sh' '%s'", LUAPROV_SOURCE_DIR, certs);
  CHECK_INT(system(cmd), 0);
  RUN(test_concurrent_calls_and_connections);
  RUN(test_client_cancel);
  RUN(test_server_close_with_calls_in_flight);
  RUN(test_mtls);
  RUN(test_configuration_errors);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", certs);
  CHECK_INT(system(cmd), 0);
  return check_summary();
}
