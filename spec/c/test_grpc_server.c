/* The gRPC server (engine/grpc) against a raw HTTP/2 client, one call at a time on one plaintext
 * connection: unary calls (empty, and large ones past every flow-control window) and PING, request
 * errors (unknown method, content type, compression, bad and oversized message framing, bad
 * grpc-timeout), deadlines, and garbage instead of an HTTP/2 preface. Connections, cancellation,
 * closing and TLS are in test_grpc_server_conn.c; the fixture and the client in grpc_test_support.h. */
#define _GNU_SOURCE
#include <signal.h>

#include "grpc_test_support.h"

/* ---- tests ---- */

static void test_unary_echo_ping_and_large_messages(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *hello = cl_call(&cl, SVC "Echo", "hello", NULL);
  rpc *empty = cl_call(&cl, SVC "Echo", "", NULL);
  /* 3 MiB each way: more than the client's 64 KiB windows and the server's 1 MiB stream window. */
  size_t big_len = 3u << 20;
  char *big = malloc(big_len + 1);
  for (size_t i = 0; i < big_len; i++) big[i] = (char)('a' + i % 26);
  big[big_len] = '\0';
  rpc *large = cl_call(&cl, SVC "Echo", big, "10S");
  nghttp2_submit_ping(cl.s, NGHTTP2_FLAG_NONE, NULL);
  CHECK_INT(cl_wait(&cl, 10000), 0);
  CHECK_INT(hello->http_status, 200);
  CHECK_INT(hello->grpc_status, 0);
  CHECK_STR(reply(hello), "hello");
  CHECK_INT(hello->error_code, NGHTTP2_NO_ERROR);
  CHECK_INT(empty->grpc_status, 0);
  CHECK_STR(reply(empty), "");
  CHECK_INT(large->grpc_status, 0);
  CHECK(reply(large) && strcmp(reply(large), big) == 0);
  CHECK_INT(cl.ping_acks, 1);
  free(big);
  cl_close(&cl);
  fixture_stop(&fx);
}

static void test_request_errors(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  lp_buf compressed = framed(1, 5, "hello", 5), shorter = framed(0, 100, "0123456789", 10),
         longer = framed(0, 2, "0123456789", 10), none = LP_BUF_INIT, half = framed(0, 1, "", 0);
  half.len = 3; /* ends inside the prefix */
  lp_buf oversized = framed(0, (5u << 20), "", 0);
  lp_buf_reserve(&oversized, 5u << 20);
  memset(oversized.data + 5, 'x', 5u << 20);
  oversized.len += 5u << 20;
  rpc *unknown = cl_call(&cl, SVC "Nope", "x", NULL);
  rpc *ctype = cl_call_raw(&cl, SVC "Echo", &longer, NULL, "application/json");
  rpc *comp = cl_call_raw(&cl, SVC "Echo", &compressed, NULL, NULL);
  rpc *short_msg = cl_call_raw(&cl, SVC "Echo", &shorter, NULL, NULL);
  rpc *long_msg = cl_call_raw(&cl, SVC "Echo", &longer, NULL, NULL);
  rpc *no_msg = cl_call_raw(&cl, SVC "Echo", &none, NULL, NULL);
  rpc *half_prefix = cl_call_raw(&cl, SVC "Echo", &half, NULL, NULL);
  rpc *bad_timeout = cl_call(&cl, SVC "Echo", "x", "12x");
  rpc *big = cl_call_raw(&cl, SVC "Echo", &oversized, NULL, NULL);
  CHECK_INT(cl_wait(&cl, 10000), 0);
  CHECK_INT(unknown->http_status, 200);
  CHECK_INT(unknown->grpc_status, LP_GRPC_UNIMPLEMENTED);
  CHECK_STR(unknown->message, "unknown method /test.Svc/Nope");
  CHECK_INT(ctype->http_status, 415);
  CHECK_INT(ctype->grpc_status, LP_GRPC_INVALID_ARGUMENT);
  CHECK_INT(comp->grpc_status, LP_GRPC_UNIMPLEMENTED);
  CHECK_INT(short_msg->grpc_status, LP_GRPC_INTERNAL);
  CHECK_STR(short_msg->message, "request message truncated: 10 of 100 bytes");
  CHECK_INT(long_msg->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(no_msg->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(half_prefix->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(bad_timeout->grpc_status, LP_GRPC_INTERNAL);
  CHECK_INT(big->grpc_status, LP_GRPC_RESOURCE_EXHAUSTED);
  /* answered before the request ended: the rest was refused with RST_STREAM(NO_ERROR) */
  CHECK_INT(big->error_code, NGHTTP2_NO_ERROR);
  CHECK_CONTAINS(big->message, "larger than max (5242880 vs. 4194304)");
  rpc *after = cl_call(&cl, SVC "Echo", "still here", NULL);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(after), "still here");
  CHECK(!cl.dead);
  lp_buf_free(&compressed), lp_buf_free(&shorter), lp_buf_free(&longer), lp_buf_free(&half);
  lp_buf_free(&oversized);
  cl_close(&cl);
  fixture_stop(&fx);
}

static void test_deadline(void) {
  double before = requests_total("Hold", "DEADLINE_EXCEEDED");
  fixture fx;
  fixture_start(&fx, 0, 0);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  double t0 = now_ms();
  rpc *late = cl_call(&cl, SVC "Delay", "300", "50m"); /* the handler answers at 300 ms: dropped */
  rpc *never = cl_call(&cl, SVC "Hold", "x", "30000u");
  CHECK_INT(cl_wait(&cl, 5000), 0);
  double took = now_ms() - t0;
  CHECK_INT(late->grpc_status, LP_GRPC_DEADLINE_EXCEEDED);
  CHECK_INT(never->grpc_status, LP_GRPC_DEADLINE_EXCEEDED);
  CHECK_STR(late->message, "deadline exceeded");
  CHECK(took >= 45 && took < 2000); /* generous: sanitizers and a loaded CI machine */
  double left;
  LOCKED(&fx, left = fx.deadline_left);
  CHECK(left > 0 && left <= 0.05);
  usleep(400 * 1000); /* past the Delay handler's late answer */
  rpc *after = cl_call(&cl, SVC "Delay", "1", "1S");
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(after), "1");
  cl_close(&cl);
  fixture_stop(&fx);
  CHECK_INT(requests_total("Hold", "DEADLINE_EXCEEDED") - before, 1);
}

static void test_garbage_instead_of_a_preface(void) {
  fixture fx;
  fixture_start(&fx, 0, 0);
  int fd = tcp_connect(fx.port);
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\x01\x02\xff garbage";
  CHECK(send(fd, junk, sizeof junk, MSG_NOSIGNAL) > 0);
  struct timeval tv = {3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
  }
  CHECK(n == 0 || errno == ECONNRESET); /* closed by the server, not timed out */
  close(fd);
  client cl;
  CHECK_INT(cl_open(&cl, fx.port, NULL), 0);
  rpc *r = cl_call(&cl, SVC "Echo", "fine", NULL);
  CHECK_INT(cl_wait(&cl, 5000), 0);
  CHECK_STR(reply(r), "fine");
  cl_close(&cl);
  fixture_stop(&fx);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  RUN(test_unary_echo_ping_and_large_messages);
  RUN(test_request_errors);
  RUN(test_deadline);
  RUN(test_garbage_instead_of_a_preface);
  return check_summary();
}
