/* Response framing for the HTTP server: status line and headers, Content-Length or chunked bodies,
 * and the write queue every byte leaves through. */
#include "http/server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"

typedef struct write_req {
  uv_write_t req; /* first: the callback casts back */
  lp_http_conn *conn;
  size_t len;
  char data[];
} write_req;

/* Misusing a response (answering twice, adding headers after the status) is a programming error in
 * the engine, not something a client can cause; failing loudly finds it in the first test run. */
static void misuse(const char *what) {
  lp_errorlog("engine.http", "response misuse", LPF_STR("what", what));
  abort();
}

static void on_write(uv_write_t *req, int status) {
  write_req *w = (write_req *)req;
  lp_http_conn *c = w->conn;
  int was_high = c->queued >= LP_HTTP_WRITE_HIGH_WATER;
  c->queued -= w->len;
  c->wrote = 1;
  free(w);
  if (status < 0)
    lp_http__conn_close(c);
  else if (was_high && c->queued < LP_HTTP_WRITE_HIGH_WATER)
    lp_http__conn_drained(c);
}

int lp_http__conn_write(lp_http_conn *c, const uv_buf_t *bufs, unsigned nbufs) {
  if (c->state != LP_CONN_OPEN) return -1;
  size_t len = 0;
  for (unsigned i = 0; i < nbufs; i++) len += bufs[i].len;
  write_req *w = lp_xmalloc(sizeof *w + len);
  w->conn = c;
  w->len = len;
  size_t off = 0;
  for (unsigned i = 0; i < nbufs; i++) {
    if (bufs[i].len) memcpy(w->data + off, bufs[i].base, bufs[i].len);
    off += bufs[i].len;
  }
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write) < 0) {
    free(w);
    lp_http__conn_close(c);
    return -1;
  }
  c->queued += len;
  return 0;
}

lp_http_response *lp_http__response_new(lp_http_conn *c) {
  lp_http_response *res = lp_xcalloc(1, sizeof *res);
  const http_parser *p = &c->parser;
  res->conn = c;
  res->http11 = p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1);
  /* An upgrade request would switch protocols after this message; we do not, so the rest of the
   * connection cannot be trusted to be HTTP. */
  res->keep_alive = http_should_keep_alive(p) && !p->upgrade;
  res->head_only = p->method == HTTP_HEAD;
  c->res = res;
  return res;
}

static void response_free(lp_http_response *res) {
  lp_buf_free(&res->headers);
  free(res);
}

static void finish(lp_http_response *res) {
  lp_http_conn *c = res->conn;
  int keep_alive = res->keep_alive;
  c->res = NULL;
  response_free(res);
  lp_http__conn_response_done(c, keep_alive);
}

void lp_http__response_abandon(lp_http_response *res) {
  res->conn = NULL;
  if (res->on_close) res->on_close(res, res->on_close_ud);
  response_free(res);
}

static int has_crlf(const char *s) {
  return strpbrk(s, "\r\n") != NULL;
}

/* IMF-fixdate with fixed English names: strftime's %a and %b follow the process locale. */
static void put_date(lp_buf *b) {
  static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  lp_buf_printf(b, "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n", days[tm.tm_wday], tm.tm_mday,
                months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* framing: the Content-Length or Transfer-Encoding line, or "" */
static void put_head(lp_http_response *res, lp_buf *b, int status, const char *content_type,
                     const char *framing) {
  lp_http_conn *c = res->conn;
  if (c->server->closing) res->keep_alive = 0;
  lp_buf_printf(b, "HTTP/1.1 %d %s\r\n", status, lp_http_status_text(status));
  put_date(b);
  lp_buf_printf(b, "Server: %s\r\n", c->server->server_header);
  if (content_type && !has_crlf(content_type)) lp_buf_printf(b, "Content-Type: %s\r\n", content_type);
  if (res->headers.len) lp_buf_append(b, res->headers.data, res->headers.len);
  lp_buf_puts(b, framing);
  if (!res->keep_alive)
    lp_buf_puts(b, "Connection: close\r\n");
  else if (!res->http11)
    lp_buf_puts(b, "Connection: keep-alive\r\n");
  lp_buf_puts(b, "\r\n");
}

void lp_http_response_header(lp_http_response *res, const char *name, const char *value) {
  if (!res->conn) return;
  if (res->started) misuse("lp_http_response_header after the status was sent");
  /* A CR or LF would let a value smuggle headers of its own into the response. */
  if (has_crlf(name) || has_crlf(value)) return;
  lp_buf_printf(&res->headers, "%s: %s\r\n", name, value);
}

void lp_http_respond(lp_http_response *res, int status, const char *content_type, const void *body,
                     size_t len) {
  lp_http_conn *c = res->conn;
  if (!c) return; /* inside on_close: the caller frees res */
  if (res->started) misuse("lp_http_respond on a response already started");
  res->started = 1;
  if (c->state == LP_CONN_OPEN) {
    int has_body = status >= 200 && status != 204 && status != 304;
    char framing[48] = "";
    if (has_body) snprintf(framing, sizeof framing, "Content-Length: %zu\r\n", len);
    lp_buf head = LP_BUF_INIT;
    put_head(res, &head, status, content_type, framing);
    uv_buf_t bufs[2] = {uv_buf_init(head.data, (unsigned)head.len), uv_buf_init((char *)body, (unsigned)len)};
    lp_http__conn_write(c, bufs, has_body && !res->head_only ? 2 : 1);
    lp_buf_free(&head);
  }
  finish(res);
}

void lp_http_stream_begin(lp_http_response *res, int status, const char *content_type) {
  lp_http_conn *c = res->conn;
  if (!c) return;
  if (res->started) misuse("lp_http_stream_begin on a response already started");
  res->started = res->streamed = 1;
  /* HTTP/1.0 has no chunked encoding: the body simply runs until the connection closes. */
  res->chunked = res->http11;
  if (!res->chunked) res->keep_alive = 0;
  if (c->state != LP_CONN_OPEN) return;
  lp_buf head = LP_BUF_INIT;
  put_head(res, &head, status, content_type, res->chunked ? "Transfer-Encoding: chunked\r\n" : "");
  uv_buf_t buf = uv_buf_init(head.data, (unsigned)head.len);
  lp_http__conn_write(c, &buf, 1);
  lp_buf_free(&head);
}

int lp_http_stream_write(lp_http_response *res, const void *data, size_t len) {
  lp_http_conn *c = res->conn;
  if (!c || c->state != LP_CONN_OPEN) return -1;
  if (!res->streamed) misuse("lp_http_stream_write before lp_http_stream_begin");
  /* A zero-length chunk would be read as the end of the body. */
  if (len == 0 || res->head_only) return 0;
  if (c->queued + len > LP_HTTP_MAX_QUEUED_BYTES) {
    lp_http__conn_close(c);
    return -1;
  }
  char size[24];
  int n = res->chunked ? snprintf(size, sizeof size, "%zx\r\n", len) : 0;
  uv_buf_t bufs[3] = {uv_buf_init(size, (unsigned)n), uv_buf_init((char *)data, (unsigned)len),
                      uv_buf_init("\r\n", res->chunked ? 2 : 0)};
  return lp_http__conn_write(c, bufs, 3);
}

void lp_http__stream_terminate(lp_http_response *res) {
  if (!res->chunked || res->head_only) return;
  uv_buf_t buf = uv_buf_init("0\r\n\r\n", 5);
  lp_http__conn_write(res->conn, &buf, 1);
}

void lp_http_stream_end(lp_http_response *res) {
  if (!res->conn) return;
  if (!res->streamed) misuse("lp_http_stream_end before lp_http_stream_begin");
  lp_http__stream_terminate(res);
  finish(res);
}

void lp_http_response_on_close(lp_http_response *res, void (*cb)(lp_http_response *res, void *ud), void *ud) {
  res->on_close = cb;
  res->on_close_ud = ud;
}

const char *lp_http_request_header(const lp_http_request *req, const char *name) {
  for (size_t i = 0; i < req->nheaders; i++)
    if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
  return NULL;
}

const char *lp_http_status_text(int status) {
  switch (status) {
#define LP_STATUS_TEXT(num, name, string)                                                                    \
  case num:                                                                                                  \
    return #string;
    HTTP_STATUS_MAP(LP_STATUS_TEXT)
#undef LP_STATUS_TEXT
  default:
    return "Unknown";
  }
}
