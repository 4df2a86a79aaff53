/* The HTTP server at its limits, against raw TCP clients: size limits, malformed and mutated input,
 * responses finished later and streams, slow readers, many connections, idle timeout and connection
 * cap, and closing the server with responses in progress. The fixture (a server on its own loop
 * thread) and the raw client are in http_test_support.h. */
#define _GNU_SOURCE
#define HTTP_TEST_SERVER
#include "http_test_support.h"

#define FLOOD_BLOCK (256 * 1024)

/* Responses from a job timer (see job_start): /stream writes lines, /flood writes blocks as fast as
 * the server takes them. */
static void stream_tick(uv_timer_t *t) {
  job *j = t->data;
  char line[32];
  int n = snprintf(line, sizeof line, "{\"n\":%d}\n", j->n);
  if (j->n == j->limit || lp_http_stream_write(j->res, line, (size_t)n) < 0) {
    if (j->n != j->limit) LOCKED(j->fx, j->fx->write_failed = 1);
    lp_http_stream_end(j->res);
    job_stop(j);
    return;
  }
  j->n++;
}

static void h_stream(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_stream_begin(res, 200, "application/json");
  job_start(ud, res, stream_tick, 5, strcmp(req->query, "forever") == 0 ? -1 : atoi(req->query));
}

static void flood_tick(uv_timer_t *t) {
  static char block[FLOOD_BLOCK];
  job *j = t->data;
  for (int i = 0; i < 4; i++) {
    if (lp_http_stream_write(j->res, block, sizeof block) < 0) {
      LOCKED(j->fx, j->fx->write_failed = 1);
      lp_http_stream_end(j->res);
      job_stop(j);
      return;
    }
    LOCKED(j->fx, j->fx->flood_bytes += sizeof block);
  }
}

static void h_flood(const lp_http_request *req, lp_http_response *res, void *ud) {
  lp_http_stream_begin(res, 200, "application/octet-stream");
  job_start(ud, res, flood_tick, 1, -1);
}

static void barrier_gone(lp_http_response *res, void *ud) {
  fixture *fx = ud;
  for (int i = 0; i < BARRIER; i++)
    if (fx->held[i] == res) fx->held[i] = NULL;
}

/* Holds every request until BARRIER of them are in flight at once, then answers them all. */
static void h_barrier(const lp_http_request *req, lp_http_response *res, void *ud) {
  fixture *fx = ud;
  lp_http_response_on_close(res, barrier_gone, fx);
  int n;
  LOCKED(fx, fx->held[fx->nheld] = res; n = ++fx->nheld);
  if (n < BARRIER) return;
  for (int i = 0; i < BARRIER; i++)
    if (fx->held[i]) lp_http_respond(fx->held[i], 200, "text/plain", "released\n", 9);
}

static void add_routes(fixture *fx) {
  lp_http_server_route(fx->server, "GET", "/hello", h_hello, fx);
  lp_http_server_route(fx->server, "POST", "/echo", h_echo, fx);
  lp_http_server_route(fx->server, "GET", "/slow", h_slow, fx);
  lp_http_server_route(fx->server, "GET", "/stream", h_stream, fx);
  lp_http_server_route(fx->server, "GET", "/flood", h_flood, fx);
  lp_http_server_route(fx->server, "GET", "/barrier", h_barrier, fx);
  lp_http_server_route(fx->server, "GET", "/big", h_big, fx);
}

/* Polls an int the loop thread writes until it equals want (5 s at most). */
static int wait_for(fixture *fx, const int *field, int want) {
  for (int i = 0; i < 500; i++) {
    int v;
    LOCKED(fx, v = *field);
    if (v == want) return 1;
    usleep(10000);
  }
  return 0;
}

/* Reads and drops everything until the server closes, counting the bytes in *total when given;
 * returns 0 when the server has not closed within the receive timeout. */
static int client_drain_to_close(client *cl, size_t *total) {
  char buf[4096];
  for (;;) {
    ssize_t got = recv(cl->fd, buf, sizeof buf, 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return 1;
    if (got < 0) return 0;
    if (total) *total += (size_t)got;
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- tests ---- */

static void test_size_limits(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  /* Content-Length over max_body_bytes is refused before any body byte is read. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 100000\r\n\r\n"), 413);
  CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* A client that sends the refused body anyway still reads its 413, then sees the connection end. */
  static char chunk[100000];
  memset(chunk, 'x', sizeof chunk);
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, "POST /echo HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
  client_send_n(&cl, chunk, sizeof chunk);
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 413);
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* A chunked body is counted as it arrives. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 2; i++) {
    client_send(&cl, "9c40\r\n");
    client_send_n(&cl, chunk, 40000);
    client_send(&cl, "\r\n");
  }
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 413);
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* Headers: 3000 bytes pass, 8000 bytes are 431. */
  char req[9000];
  memset(chunk, 'h', 8000);
  CHECK_INT(client_open(&cl, fx.port), 0);
  snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nX-Big: %.3000s\r\n\r\n", chunk);
  CHECK_INT(client_call(&cl, req), 200);
  snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nX-Big: %.8000s\r\n\r\n", chunk);
  CHECK_INT(client_call(&cl, req), 431);
  CHECK(client_closed(&cl));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_malformed_requests_get_400(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  static const char *const garbage[] = {
      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n", /* a TLS ClientHello */
      "GET /hello HTTP/9.9.9\r\n\r\n",
      "GET /hello HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GET /hello HTTP/1.1\r\nBad Header\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
    client cl;
    CHECK_INT(client_open(&cl, fx.port), 0);
    CHECK_INT(client_call(&cl, garbage[i]), 400);
    CHECK_CONTAINS(headers(&cl), "Connection: close\r\n");
    CHECK(client_closed(&cl));
    client_close(&cl);
  }
  /* A good request followed by garbage on one connection: the first is answered, then 400. */
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, GET("/hello") "\x01\x02\x03\r\n\r\n");
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 200);
  CHECK_INT(client_read(&cl, NULL), 0);
  CHECK_INT(cl.status, 400);
  CHECK(client_closed(&cl));
  client_close(&cl);
  /* and the server goes on serving */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  client_close(&cl);
  fixture_stop(&fx);
}

/* Mutated requests (bytes flipped, inserted, cut short), each on its own connection that the client
 * then half-closes: the server must answer or close every one, and still serve afterwards. Run under
 * the sanitizers this is the "nothing a client sends can crash the server" check. */
static void test_mutated_requests_never_crash(void) {
  static const char *const seeds[] = {
      "GET /hello?x=1 HTTP/1.1\r\nHost: t\r\nX-Probe: a\r\n\r\n",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello" GET("/stream?2"),
  };
  fixture fx;
  fixture_start(&fx, NULL);
  unsigned seed = 12345;
  int closed = 0, runs = 300;
  for (int i = 0; i < runs; i++) {
    char req[256];
    size_t n = strlen(seeds[i % 3]);
    memcpy(req, seeds[i % 3], n);
    for (int edits = 1 + i % 4; edits > 0; edits--) {
      seed = seed * 1103515245u + 12345u;
      size_t at = (seed >> 8) % n;
      char byte = (char)(seed >> 20);
      if (seed % 3 == 0) {
        req[at] = byte;
      } else if (seed % 3 == 1 && n < sizeof req) {
        memmove(req + at + 1, req + at, n - at);
        req[at] = byte;
        n++;
      } else {
        n = at + 1;
      }
    }
    client cl;
    CHECK_INT(client_open(&cl, fx.port), 0);
    client_send_n(&cl, req, n);
    shutdown(cl.fd, SHUT_WR);
    closed += client_drain_to_close(&cl, NULL);
    client_close(&cl);
  }
  CHECK_INT(closed, runs);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/hello")), 200);
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_async_response_from_timer(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  double t0 = now_s();
  CHECK_INT(client_call(&cl, GET("/slow")), 200);
  CHECK(now_s() - t0 >= 0.035);
  CHECK_STR(body(&cl), "slow\n");
  CHECK_CONTAINS(headers(&cl), "Content-Length: 5\r\n");
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_chunked_streams(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, GET("/stream?5")), 200);
  CHECK_CONTAINS(headers(&cl), "Transfer-Encoding: chunked\r\n");
  CHECK_CONTAINS(headers(&cl), "Content-Type: application/json\r\n");
  CHECK(strstr(headers(&cl), "Content-Length") == NULL);
  CHECK_INT(cl.chunks, 5);
  CHECK_STR(body(&cl), "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n{\"n\":4}\n");
  CHECK_INT(client_call(&cl, GET("/hello")), 200); /* the stream ended cleanly: keep-alive */
  client_close(&cl);
  /* HTTP/1.0 has no chunks: the body runs to the close. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, "GET /stream?2 HTTP/1.0\r\n\r\n"), 200);
  CHECK(strstr(headers(&cl), "Transfer-Encoding") == NULL);
  CHECK_STR(body(&cl), "{\"n\":0}\n{\"n\":1}\n");
  client_close(&cl);
  /* A client that leaves mid-stream: on_close fires and the handler stops. */
  CHECK_INT(client_open(&cl, fx.port), 0);
  client_send(&cl, GET("/stream?forever"));
  CHECK_INT(client_read(&cl, "{\"n\":3}\n"), 0);
  client_close(&cl);
  CHECK(wait_for(&fx, &fx.closes, 1));
  LOCKED(&fx, CHECK_INT(fx.write_failed, 0));
  fixture_stop(&fx);
}

static void test_slow_reader_is_dropped(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client cl;
  CHECK_INT(client_open_family(&cl, AF_INET, fx.port, 4096), 0);
  client_send(&cl, GET("/flood"));
  CHECK(wait_for(&fx, &fx.write_failed, 1));
  /* more than the queue cap was accepted before the drop, so the cap, not the client, ended it */
  LOCKED(&fx, CHECK(fx.flood_bytes >= ((size_t)8 << 20) - FLOOD_BLOCK); CHECK_INT(fx.closes, 0));
  client_close(&cl);
  fixture_stop(&fx);
}

static void test_many_connections(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  int ok = 0;
  for (int i = 0; i < 200; i++) {
    client cl;
    if (client_open(&cl, fx.port) == 0 && client_call(&cl, GET("/hello")) == 200) ok++;
    client_close(&cl);
  }
  CHECK_INT(ok, 200);
  static client cls[BARRIER];
  for (int i = 0; i < BARRIER; i++) CHECK_INT(client_open(&cls[i], fx.port), 0);
  for (int i = 0; i < BARRIER; i++) client_send(&cls[i], GET("/barrier"));
  ok = 0;
  for (int i = 0; i < BARRIER; i++) {
    if (client_read(&cls[i], NULL) == 0 && cls[i].status == 200 && !strcmp(body(&cls[i]), "released\n")) ok++;
    client_close(&cls[i]);
  }
  CHECK_INT(ok, BARRIER); /* every answer needed all BARRIER requests in flight at once */
  fixture_stop(&fx);
}

static void test_idle_timeout_and_max_connections(void) {
  fixture fx;
  lp_http_server_options opts = default_opts;
  opts.idle_timeout_ms = 100;
  fixture_start(&fx, &opts);
  client a, b, c;
  CHECK_INT(client_open(&a, fx.port), 0);
  CHECK_INT(client_call(&a, GET("/hello")), 200);
  double t0 = now_s();
  CHECK(client_closed(&a));
  double idle = now_s() - t0;
  CHECK(idle >= 0.08 && idle < 2.0);
  client_close(&a);
  /* A client that never reads its last response is dropped all the same, before it is delivered. */
  CHECK_INT(client_open_family(&a, AF_INET, fx.port, 4096), 0);
  client_send(&a, "GET /big?huge HTTP/1.1\r\nConnection: close\r\n\r\n");
  usleep(500000);
  size_t got = 0;
  CHECK(client_drain_to_close(&a, &got));
  CHECK(got > 0 && got < HUGE_BYTES);
  client_close(&a);
  fixture_stop(&fx);

  opts = default_opts;
  opts.max_connections = 2;
  fixture_start(&fx, &opts);
  CHECK_INT(client_open(&a, fx.port), 0);
  CHECK_INT(client_open(&b, fx.port), 0);
  CHECK_INT(client_call(&a, GET("/hello")), 200);
  CHECK_INT(client_call(&b, GET("/hello")), 200);
  CHECK_INT(client_open(&c, fx.port), 0); /* accepted by the kernel, closed by the server */
  CHECK(client_closed(&c));
  client_close(&c);
  CHECK_INT(client_call(&a, GET("/hello")), 200); /* the two admitted ones are unaffected */
  client_close(&a);
  client_close(&b);
  fixture_stop(&fx);
}

static void test_server_close_ends_streams_and_waits(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  client stream, slow, idle;
  CHECK_INT(client_open(&stream, fx.port), 0);
  CHECK_INT(client_open(&slow, fx.port), 0);
  CHECK_INT(client_open(&idle, fx.port), 0);
  CHECK_INT(client_call(&idle, GET("/hello")), 200);
  client_send(&stream, GET("/stream?forever"));
  CHECK_INT(client_read(&stream, "{\"n\":1}\n"), 0);
  client_send(&slow, GET("/slow"));
  CHECK(wait_for(&fx, &fx.slow_started, 1));
  uv_async_send(&fx.wake);
  /* the stream gets its last chunk and a clean end; its handler heard of it through on_close */
  CHECK_INT(client_read(&stream, NULL), 0);
  CHECK(client_closed(&stream));
  /* the pending response is still answered, then its connection closes */
  CHECK_INT(client_read(&slow, NULL), 0);
  CHECK_STR(body(&slow), "slow\n");
  CHECK_CONTAINS(headers(&slow), "Connection: close\r\n");
  CHECK(client_closed(&slow));
  CHECK(client_closed(&idle));
  client_close(&stream);
  client_close(&slow);
  client_close(&idle);
  fixture_join(&fx);
  CHECK_INT(fx.closes, 1);
}

/* Trailer fields of a chunked request arrive after the request was laid out: they must not be appended
 * to the buffer its path and header views point into (the append may move it). Run under ASan this
 * fails on the read of the moved path and headers. */
static void test_trailers_leave_the_request_intact(void) {
  fixture fx;
  fixture_start(&fx, NULL);
  char trailer[2100];
  memset(trailer, 't', 2000);
  trailer[2000] = '\0';
  char req[3000];
  snprintf(req, sizeof req,
           "GET /hello?q=1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-Probe: head\r\n\r\n"
           "5\r\nhello\r\n0\r\nX-Trailer: %s\r\nX-Probe: trailer\r\n\r\n",
           trailer);
  client cl;
  CHECK_INT(client_open(&cl, fx.port), 0);
  CHECK_INT(client_call(&cl, req), 200);
  char seen[512];
  LOCKED(&fx, snprintf(seen, sizeof seen, "%s", fx.seen));
  CHECK_STR(seen, "GET /hello [q=1] /hello?q=1 head");
  CHECK_INT(client_call(&cl, GET("/hello")), 200); /* the connection goes on serving */
  client_close(&cl);
  fixture_stop(&fx);
}

/* 1 when the server has ended the connection, without waiting for it. */
static int ended_now(client *cl) {
  char c;
  ssize_t got = recv(cl->fd, &c, 1, MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* A server with slots connections and a header deadline of 300 ms, far inside the 10 s idle timeout. */
static void start_with_header_deadline(fixture *fx, unsigned slots) {
  lp_http_server_options opts = default_opts;
  opts.max_connections = slots;
  opts.header_timeout_ms = 300;
  fixture_start(fx, &opts);
}

/* Clients that send their headers a byte at a time keep resetting the idle timer; the header deadline
 * ends them all the same, so they cannot hold every connection slot. The idle timeout (10 s) is far
 * beyond the trickle, so only the deadline can end these connections. */
static void test_header_deadline_ends_trickling_clients(void) {
  enum { TRICKLERS = 3 };
  fixture fx;
  start_with_header_deadline(&fx, TRICKLERS);
  client slow[TRICKLERS];
  for (int i = 0; i < TRICKLERS; i++) {
    CHECK_INT(client_open(&slow[i], fx.port), 0);
    client_send(&slow[i], "GET /hello HTTP/1.1\r\nX-Slow: ");
  }
  client late;
  CHECK_INT(client_open(&late, fx.port), 0); /* over the cap: closed at once */
  CHECK(client_closed(&late));
  client_close(&late);
  int ended = 0;
  for (int tick = 0; tick < 400 && ended < TRICKLERS; tick++) { /* 400 bytes each at most */
    ended = 0;
    for (int i = 0; i < TRICKLERS; i++) {
      if (ended_now(&slow[i])) {
        ended++;
        continue;
      }
      client_send_n(&slow[i], "x", 1);
    }
    usleep(20000);
  }
  CHECK_INT(ended, TRICKLERS);
  for (int i = 0; i < TRICKLERS; i++) client_close(&slow[i]);
  CHECK_INT(client_open(&late, fx.port), 0); /* the slots are free again */
  CHECK_INT(client_call(&late, GET("/hello")), 200);
  /* A keep-alive connection waiting between requests is not under the deadline. */
  usleep(400000);
  CHECK_INT(client_call(&late, GET("/hello")), 200);
  client_close(&late);
  fixture_stop(&fx);
}

/* A client that connects and sends nothing holds a slot as surely as a trickler: the first request's
 * deadline runs from the accept, so silent clients are ended long before the 10 s idle timeout. */
static void test_header_deadline_ends_silent_clients(void) {
  enum { SILENT = 2 };
  fixture fx;
  start_with_header_deadline(&fx, SILENT);
  client quiet[SILENT];
  for (int i = 0; i < SILENT; i++) CHECK_INT(client_open(&quiet[i], fx.port), 0);
  int ended = 0;
  for (int tick = 0; tick < 250 && ended < SILENT; tick++) { /* 5 s at most, half the idle timeout */
    ended = 0;
    for (int i = 0; i < SILENT; i++) ended += ended_now(&quiet[i]);
    usleep(20000);
  }
  CHECK_INT(ended, SILENT);
  for (int i = 0; i < SILENT; i++) client_close(&quiet[i]);
  client late;
  CHECK_INT(client_open(&late, fx.port), 0); /* the slots are free again */
  CHECK_INT(client_call(&late, GET("/hello")), 200);
  client_close(&late);
  fixture_stop(&fx);
}

int main(void) {
  for (size_t i = 0; i < sizeof big_body; i++) big_body[i] = (char)('a' + i % 26);
  RUN(test_size_limits);
  RUN(test_malformed_requests_get_400);
  RUN(test_mutated_requests_never_crash);
  RUN(test_async_response_from_timer);
  RUN(test_chunked_streams);
  RUN(test_slow_reader_is_dropped);
  RUN(test_many_connections);
  RUN(test_idle_timeout_and_max_connections);
  RUN(test_server_close_ends_streams_and_waits);
  RUN(test_trailers_leave_the_request_intact);
  RUN(test_header_deadline_ends_trickling_clients);
  RUN(test_header_deadline_ends_silent_clients);
  return check_summary();
}
