/* grpc_echo_server: the engine's gRPC server serving spec/grpc/echo.proto for an independent client
 * (transport_test.js, @grpc/grpc-js). Request and reply are the same message type, so the server
 * echoes the serialized bytes without knowing protobuf.
 *
 *   grpc_echo_server [--port N] [--tls DIR] [--max-message BYTES]
 *
 * --tls DIR serves mTLS with DIR/server.pem, DIR/server.key and client certificates verified against
 * DIR/ca.pem (spec/grpc/make_certs.sh DIR writes them). Prints {"port": N} on stdout once listening;
 * SIGTERM, SIGINT or stdin closing stop it (exit 0 after a clean close). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/error.h"
#include "core/log.h"
#include "grpc/server.h"

#define SLOW_MS 1500

typedef struct slow_job {
  uv_timer_t timer;
  lp_grpc_call *call;
  uint8_t *message;
  size_t len;
  struct slow_job *next, *prev;
} slow_job;

static uv_loop_t *loop;
static lp_grpc_server *server;
static uv_signal_t sigterm, sigint;
static uv_pipe_t stdin_pipe;
static int stdin_open;
static slow_job *jobs;

static void h_echo(lp_grpc_call *call, const uint8_t *message, size_t len, void *ud) {
  lp_grpc_respond(call, message, len);
}

static void h_fail(lp_grpc_call *call, const uint8_t *message, size_t len, void *ud) {
  /* non-ASCII and '%' travel percent-encoded in grpc-message */
  lp_grpc_fail(call, LP_GRPC_INVALID_ARGUMENT, "bad input: caf\xc3\xa9 100%");
}

static void job_free(uv_handle_t *h) {
  slow_job *j = h->data;
  free(j->message);
  free(j);
}

static void job_finish(slow_job *j) {
  if (j->prev)
    j->prev->next = j->next;
  else
    jobs = j->next;
  if (j->next) j->next->prev = j->prev;
  lp_grpc_respond(j->call, j->message, j->len); /* dropped when the deadline answered first */
  uv_close((uv_handle_t *)&j->timer, job_free);
}

static void slow_tick(uv_timer_t *t) {
  job_finish(t->data);
}

static void h_slow(lp_grpc_call *call, const uint8_t *message, size_t len, void *ud) {
  slow_job *j = calloc(1, sizeof *j);
  j->call = call;
  j->len = len;
  j->message = malloc(len ? len : 1);
  if (len) memcpy(j->message, message, len);
  uv_timer_init(loop, &j->timer);
  j->timer.data = j;
  j->next = jobs;
  if (jobs) jobs->prev = j;
  jobs = j;
  uv_timer_start(&j->timer, slow_tick, SLOW_MS, 0);
}

static void on_closed(void *ud) {
  fprintf(stderr, "grpc_echo_server: closed\n");
}

static void stop(void) {
  if (!server) return;
  lp_grpc_server_close(server, on_closed, NULL); /* answers the slow calls UNAVAILABLE */
  server = NULL;
  while (jobs) job_finish(jobs);
  uv_close((uv_handle_t *)&sigterm, NULL);
  uv_close((uv_handle_t *)&sigint, NULL);
  if (stdin_open) uv_close((uv_handle_t *)&stdin_pipe, NULL);
  stdin_open = 0;
}

static void on_signal(uv_signal_t *s, int signum) {
  stop();
}

static void on_stdin_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char scratch[256];
  *buf = uv_buf_init(scratch, sizeof scratch);
}

static void on_stdin(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  if (nread < 0) stop(); /* the parent went away */
}

static int usage(void) {
  fprintf(stderr, "usage: grpc_echo_server [--port N] [--tls DIR] [--max-message BYTES]\n");
  return 2;
}

int main(int argc, char **argv) {
  lp_grpc_server_options opts = {.host = "127.0.0.1"};
  char cert[4096], key[4096], ca[4096];
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return usage();
    if (!strcmp(argv[i], "--port")) {
      opts.port = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--max-message")) {
      opts.max_message_bytes = (size_t)strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--tls")) {
      const char *dir = argv[++i];
      snprintf(cert, sizeof cert, "%s/server.pem", dir);
      snprintf(key, sizeof key, "%s/server.key", dir);
      snprintf(ca, sizeof ca, "%s/ca.pem", dir);
      opts.cert_file = cert;
      opts.key_file = key;
      opts.ca_file = ca;
    } else {
      return usage();
    }
  }
  const char *level = getenv("LUAPROV_LOG_LEVEL");
  lp_log_level lvl = LP_LOG_INFO;
  if (level) lp_log_parse_level(level, &lvl);
  lp_log_configure(lvl, LP_LOG_FORMAT_AUTO, 2);
  signal(SIGPIPE, SIG_IGN);

  loop = uv_default_loop();
  lp_error *err = NULL;
  server = lp_grpc_server_new(loop, &opts, &err);
  if (server) {
    lp_grpc_server_handle(server, "/luaprov.test.Echo/Echo", h_echo, NULL);
    lp_grpc_server_handle(server, "/luaprov.test.Echo/Slow", h_slow, NULL);
    lp_grpc_server_handle(server, "/luaprov.test.Echo/Fail", h_fail, NULL);
  }
  if (!server || lp_grpc_server_listen(server, &err) < 0) {
    fprintf(stderr, "grpc_echo_server: %s: %s\n", err->code, err->message);
    lp_error_free(err);
    if (server) lp_grpc_server_close(server, NULL, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    return 1;
  }
  uv_signal_init(loop, &sigterm);
  uv_signal_start(&sigterm, on_signal, SIGTERM);
  uv_signal_init(loop, &sigint);
  uv_signal_start(&sigint, on_signal, SIGINT);
  if (uv_pipe_init(loop, &stdin_pipe, 0) == 0 && uv_pipe_open(&stdin_pipe, 0) == 0 &&
      uv_read_start((uv_stream_t *)&stdin_pipe, on_stdin_alloc, on_stdin) == 0)
    stdin_open = 1;
  else
    uv_close((uv_handle_t *)&stdin_pipe, NULL);
  printf("{\"port\": %d}\n", lp_grpc_server_port(server));
  fflush(stdout);
  uv_run(loop, UV_RUN_DEFAULT);
  return uv_loop_close(loop) == 0 ? 0 : 1;
}
