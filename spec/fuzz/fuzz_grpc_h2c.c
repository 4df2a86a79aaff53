/* fuzz_grpc_h2c: the gRPC server's HTTP/2 and gRPC framing in plaintext h2c (engine/grpc/conn.c, h2.c,
 * call.c; README.md). One libuv loop holds the server on a loopback port for the whole run; each input
 * is the bytes of one TCP connection (fuzz_tcp_client.h): the client preface, frames, HPACK headers,
 * length-prefixed messages. The methods answer at once (Echo), fail (Fail) or answer from a zero timer,
 * when the call may be cancelled or reset already (Later). A crash, a sanitizer report or a connection
 * the server never closes (libFuzzer's -timeout) is a finding. The call path the seeds use is
 * /fuzz.Svc/<method>. */
#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include "core/log.h"
#include "fuzz_tcp_client.h"
#include "grpc/server.h"

static uv_loop_t *loop;
static int port;

static void h_echo(lp_grpc_call *call, const uint8_t *message, size_t len, void *ud) {
  lp_grpc_respond(call, message, len);
}

static void h_fail(lp_grpc_call *call, const uint8_t *message, size_t len, void *ud) {
  lp_grpc_fail(call, LP_GRPC_FAILED_PRECONDITION, "refused: 100% sure\r\n");
}

typedef struct later {
  uv_timer_t timer;
  lp_grpc_call *call;
} later;

static void later_free(uv_handle_t *h) {
  free(h->data);
}

static void later_tick(uv_timer_t *t) {
  later *l = t->data;
  static const uint8_t reply[] = {0x0a, 0x02, 'o', 'k'};
  lp_grpc_respond(l->call, reply, sizeof reply); /* ignored when the call is over already */
  uv_close((uv_handle_t *)&l->timer, later_free);
}

static void h_later(lp_grpc_call *call, const uint8_t *message, size_t len, void *ud) {
  later *l = calloc(1, sizeof *l);
  if (!l) abort();
  l->call = call;
  uv_timer_init(loop, &l->timer);
  l->timer.data = l;
  uv_timer_start(&l->timer, later_tick, 0, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  loop = uv_default_loop();
  lp_error *err = NULL;
  lp_grpc_server_options opts = {.max_message_bytes = 64 * 1024, .max_concurrent_streams = 8};
  lp_grpc_server *s = lp_grpc_server_new(loop, &opts, &err);
  if (!s) abort();
  lp_grpc_server_handle(s, "/fuzz.Svc/Echo", h_echo, NULL);
  lp_grpc_server_handle(s, "/fuzz.Svc/Fail", h_fail, NULL);
  lp_grpc_server_handle(s, "/fuzz.Svc/Later", h_later, NULL);
  if (lp_grpc_server_listen(s, &err)) {
    fprintf(stderr, "fuzz_grpc_h2c: %s\n", err->message);
    abort();
  }
  port = lp_grpc_server_port(s);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_client_run(loop, port, data, size);
  return 0;
}
