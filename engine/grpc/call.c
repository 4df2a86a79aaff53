/* One gRPC call (one HTTP/2 request stream): its request headers, the length-prefixed request
 * message, its deadline, the handler and the one answer the client gets.
 *
 * Exactly one answer goes out per call, whoever gives it first: the checks on the request, the
 * handler, the deadline, the server closing. `answered` records that; every later attempt is dropped.
 * The call object lives while anything still holds it (see refs in grpc_internal.h), so a handler may
 * keep a call past its cancellation, its deadline, or the server itself, and finish it later. */
#include "grpc/grpc_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

#define PREFIX_BYTES 5 /* compressed flag, then the message length, big-endian */

static const char *const status_names[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

const char *lp_grpc__status_name(int status) {
  return status >= 0 && status < (int)(sizeof status_names / sizeof status_names[0]) ? status_names[status]
                                                                                     : "UNKNOWN";
}

/* ---- lifetime ---- */

lp_grpc_call *lp_grpc__call_new(lp_grpc_conn *c, int32_t stream_id) {
  lp_grpc_call *call = lp_xcalloc(1, sizeof *call);
  call->conn = c;
  call->stream_id = stream_id;
  call->refs = 1;
  call->stream_ref = 1;
  call->loop = c->server->loop;
  call->max_message = c->server->max_message_bytes;
  call->requests = c->server->requests;
  call->duration = c->server->duration;
  call->start = lp_clock_monotonic();
  call->next = c->calls;
  if (c->calls) c->calls->prev = call;
  c->calls = call;
  return call;
}

static void unlink_call(lp_grpc_call *call) {
  lp_grpc_conn *c = call->conn;
  if (!c) return;
  if (call->prev)
    call->prev->next = call->next;
  else
    c->calls = call->next;
  if (call->next) call->next->prev = call->prev;
  call->prev = call->next = NULL;
  call->conn = NULL;
}

static void call_unref(lp_grpc_call *call) {
  if (--call->refs) return;
  unlink_call(call);
  free(call->path);
  free(call->method_label);
  free(call->http_method);
  free(call->content_type);
  free(call->timeout);
  free(call->encoding);
  lp_buf_free(&call->in);
  lp_buf_free(&call->out);
  free(call);
}

static void on_free_handle(uv_handle_t *h) {
  free(h);
}

static void stop_deadline(lp_grpc_call *call) {
  if (!call->deadline_timer) return;
  uv_close((uv_handle_t *)call->deadline_timer, on_free_handle);
  call->deadline_timer = NULL;
}

/* ---- answers ---- */

/* Marks the call answered with status and counts it. Returns 1 when the caller should send the answer
 * (the client can still hear it), 0 when the call was already answered or its stream is gone. */
static int settle(lp_grpc_call *call, int status) {
  if (call->answered) return 0;
  call->answered = 1;
  stop_deadline(call);
  const char *label = call->method_label ? call->method_label : "unknown";
  double seconds = lp_clock_monotonic() - call->start;
  lp_counter_inc(call->requests, LP_LABELS(label, lp_grpc__status_name(status)));
  lp_histogram_observe(call->duration, LP_LABELS(label), seconds);
  lp_debug("engine.grpc", "call answered", LPF_STR("path", call->path),
           LPF_STR("code", lp_grpc__status_name(status)), LPF_NUM("seconds", seconds),
           LPF_STR("remote", call->conn ? call->conn->remote : NULL));
  return call->stream_ref && call->conn;
}

/* grpc-message is percent-encoded: bytes outside printable ASCII, and '%' itself (gRPC's PROTOCOL-HTTP2). */
static char *percent_encode(const char *s) {
  lp_buf b = LP_BUF_INIT;
  lp_buf_reserve(&b, strlen(s));
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p >= 0x20 && *p <= 0x7e && *p != '%')
      lp_buf_putc(&b, (char)*p);
    else
      lp_buf_printf(&b, "%%%02X", *p);
  }
  return lp_buf_take(&b, NULL);
}

/* A trailers-only answer. Submitting from inside nghttp2's callbacks is allowed; the kick is then
 * deferred to the reader. */
static void answer(lp_grpc_call *call, int http_status, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void answer(lp_grpc_call *call, int http_status, int status, const char *fmt, ...) {
  if (!settle(call, status)) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  char *encoded = percent_encode(text);
  lp_grpc_conn *c = call->conn;
  lp_grpc__h2_submit_trailers_only(call, http_status, status, encoded);
  free(encoded);
  lp_grpc__conn_kick(c); /* may close the stream and drop its reference: call is not used after */
}

static void on_deadline(uv_timer_t *t) {
  lp_grpc_call *call = t->data;
  answer(call, 200, LP_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
}

/* ---- the request ---- */

static void keep(char **slot, const uint8_t *value, size_t len) {
  free(*slot);
  *slot = lp_xstrndup((const char *)value, len);
}

static int named(const uint8_t *name, size_t nlen, const char *want) {
  return nlen == strlen(want) && memcmp(name, want, nlen) == 0; /* HTTP/2 header names are lower case */
}

int lp_grpc__call_header(lp_grpc_call *call, const uint8_t *name, size_t nlen, const uint8_t *value,
                         size_t vlen) {
  /* Counted as SETTINGS_MAX_HEADER_LIST_SIZE counts: with 32 bytes of overhead per field. */
  call->header_bytes += nlen + vlen + 32;
  if (call->header_bytes > LP_GRPC_MAX_HEADER_BYTES) {
    settle(call, LP_GRPC_INTERNAL);
    return -1;
  }
  if (named(name, nlen, ":path"))
    keep(&call->path, value, vlen);
  else if (named(name, nlen, ":method"))
    keep(&call->http_method, value, vlen);
  else if (named(name, nlen, "content-type"))
    keep(&call->content_type, value, vlen);
  else if (named(name, nlen, "grpc-timeout"))
    keep(&call->timeout, value, vlen);
  else if (named(name, nlen, "grpc-encoding"))
    keep(&call->encoding, value, vlen);
  return 0;
}

/* "application/grpc", optionally followed by "+proto" (or another codec name) or parameters. */
static int grpc_content_type(const char *ct) {
  static const char base[] = "application/grpc";
  size_t n = sizeof base - 1;
  return ct && !strncasecmp(ct, base, n) && (ct[n] == '\0' || ct[n] == '+' || ct[n] == ';');
}

/* grpc-timeout: 1 to 8 digits and a unit (Hours, Minutes, Seconds, milli-, micro-, nanoseconds).
 * Returns the timeout in seconds, or -1 when malformed. */
static double parse_timeout(const char *s) {
  size_t n = strlen(s);
  if (n < 2 || n > 9) return -1;
  double v = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  switch (s[n - 1]) {
  case 'H':
    return v * 3600;
  case 'M':
    return v * 60;
  case 'S':
    return v;
  case 'm':
    return v / 1e3;
  case 'u':
    return v / 1e6;
  case 'n':
    return v / 1e9;
  default:
    return -1;
  }
}

void lp_grpc__call_headers_done(lp_grpc_call *call) {
  if (call->answered) return;
  const lp_grpc_route *r = call->path ? lp_grpc__route_find(call->conn->server, call->path) : NULL;
  if (r) call->method_label = lp_xstrdup(r->label);
  if (!call->http_method || strcmp(call->http_method, "POST") != 0) {
    answer(call, 405, LP_GRPC_INTERNAL, "HTTP method %s not allowed: gRPC uses POST",
           call->http_method ? call->http_method : "(none)");
    return;
  }
  if (!grpc_content_type(call->content_type)) {
    answer(call, 415, LP_GRPC_INVALID_ARGUMENT, "invalid gRPC request content-type \"%s\"",
           call->content_type ? call->content_type : "");
    return;
  }
  if (!r) {
    answer(call, 200, LP_GRPC_UNIMPLEMENTED, "unknown method %s", call->path ? call->path : "(none)");
    return;
  }
  if (call->timeout) {
    double seconds = parse_timeout(call->timeout);
    if (seconds < 0) {
      answer(call, 200, LP_GRPC_INTERNAL, "malformed grpc-timeout \"%s\"", call->timeout);
      return;
    }
    call->deadline = call->start + seconds;
    call->deadline_timer = lp_xmalloc(sizeof *call->deadline_timer);
    uv_timer_init(call->loop, call->deadline_timer);
    call->deadline_timer->data = call;
    uv_timer_start(call->deadline_timer, on_deadline, (uint64_t)ceil(seconds * 1000), 0);
  }
  call->handler = r->handler;
  call->ud = r->ud;
  call->validated = 1;
}

void lp_grpc__call_data(lp_grpc_call *call, const uint8_t *data, size_t len) {
  if (call->answered || !call->validated) return; /* answered early: the rest is discarded */
  if (!call->have_prefix) {
    size_t take = PREFIX_BYTES - call->in.len;
    if (take > len) take = len;
    lp_buf_append(&call->in, data, take);
    data += take;
    len -= take;
    if (call->in.len < PREFIX_BYTES) return;
    const uint8_t *p = (const uint8_t *)call->in.data;
    call->have_prefix = 1;
    call->message_len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    if (p[0] == 1) {
      answer(call, 200, LP_GRPC_UNIMPLEMENTED, "compressed messages are not supported (grpc-encoding %s)",
             call->encoding ? call->encoding : "none");
      return;
    }
    if (p[0] != 0) {
      answer(call, 200, LP_GRPC_INTERNAL, "invalid message flags 0x%02x", p[0]);
      return;
    }
    if (call->message_len > call->max_message) {
      answer(call, 200, LP_GRPC_RESOURCE_EXHAUSTED, "received message larger than max (%u vs. %zu)",
             (unsigned)call->message_len, call->max_message);
      return;
    }
  }
  if (len > PREFIX_BYTES + (size_t)call->message_len - call->in.len) {
    answer(call, 200, LP_GRPC_INTERNAL, "more than one request message for a unary method");
    return;
  }
  lp_buf_append(&call->in, data, len);
}

void lp_grpc__call_request_end(lp_grpc_call *call) {
  if (call->answered || !call->validated) return;
  if (!call->have_prefix) {
    answer(call, 200, LP_GRPC_INTERNAL, "%s",
           call->in.len ? "request ended inside a message prefix" : "no request message for a unary method");
    return;
  }
  if (call->in.len < PREFIX_BYTES + (size_t)call->message_len) {
    answer(call, 200, LP_GRPC_INTERNAL, "request message truncated: %zu of %u bytes",
           call->in.len - PREFIX_BYTES, (unsigned)call->message_len);
    return;
  }
  lp_grpc_conn *c = call->conn;
  call->queued = 1;
  call->refs++;
  call->ready_next = NULL;
  if (c->ready_tail)
    c->ready_tail->ready_next = call;
  else
    c->ready_head = call;
  c->ready_tail = call;
}

void lp_grpc__call_cancelled(lp_grpc_call *call) {
  if (!call->answered) lp_debug("engine.grpc", "call cancelled by the client", LPF_STR("path", call->path));
  settle(call, LP_GRPC_CANCELLED);
}

void lp_grpc__call_stream_closed(lp_grpc_call *call, uint32_t error_code) {
  /* Not answered and not reset by the client: nghttp2 reset it (a malformed request, or a stream
   * refused over MAX_CONCURRENT_STREAMS). */
  settle(call, error_code == NGHTTP2_CANCEL ? LP_GRPC_CANCELLED : LP_GRPC_INTERNAL);
  if (!call->stream_ref) return;
  call->stream_ref = 0;
  call_unref(call);
}

void lp_grpc__call_dispatch_ready(lp_grpc_conn *c) {
  while (c->state == LP_GRPC_CONN_OPEN && c->ready_head) {
    lp_grpc_call *call = c->ready_head;
    c->ready_head = call->ready_next;
    if (!c->ready_head) c->ready_tail = NULL;
    call->queued = 0; /* its reference now keeps it alive across the handler */
    if (!call->answered) {
      call->handler_ref = 1;
      call->refs++;
      call->handler(call, (const uint8_t *)call->in.data + PREFIX_BYTES, call->message_len, call->ud);
    }
    lp_buf_free(&call->in); /* the message is valid during the handler only */
    call_unref(call);
  }
}

void lp_grpc__call_fail_all(lp_grpc_conn *c, int status, const char *message) {
  c->batch++; /* one flush for all, by the caller: none may free a call this loop still visits */
  for (lp_grpc_call *call = c->calls; call; call = call->next)
    if (!call->answered) answer(call, 200, status, "%s", message);
  c->batch--;
}

void lp_grpc__call_detach_all(lp_grpc_conn *c) {
  while (c->ready_head) {
    lp_grpc_call *call = c->ready_head;
    c->ready_head = call->ready_next;
    call->queued = 0;
    call_unref(call); /* the stream still holds it */
  }
  c->ready_tail = NULL;
  while (c->calls) {
    lp_grpc_call *call = c->calls;
    if (!call->answered)
      lp_debug("engine.grpc", "call lost with its connection", LPF_STR("path", call->path));
    settle(call, LP_GRPC_CANCELLED);
    if (call->stream_ref && c->h2) nghttp2_session_set_stream_user_data(c->h2, call->stream_id, NULL);
    int had_stream = call->stream_ref;
    call->stream_ref = 0;
    unlink_call(call);
    if (had_stream) call_unref(call);
  }
}

/* ---- the handler's side ---- */

/* Finishing a call twice, or one never handed to a handler, is a bug in the engine, not something a
 * client can cause: failing loudly finds it in the first test run. */
static void handler_done(lp_grpc_call *call, const char *what) {
  if (!call->handler_ref) {
    lp_errorlog("engine.grpc", "call finished twice", LPF_STR("path", call->path), LPF_STR("by", what));
    abort();
  }
  call->handler_ref = 0;
  call_unref(call);
}

void lp_grpc_respond(lp_grpc_call *call, const uint8_t *message, size_t len) {
  if (call->handler_ref && len > UINT32_MAX) {
    lp_grpc_fail(call, LP_GRPC_RESOURCE_EXHAUSTED, "response message larger than 4 GiB");
    return;
  }
  if (call->handler_ref && settle(call, LP_GRPC_OK)) {
    uint8_t prefix[PREFIX_BYTES] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                                    (uint8_t)len};
    lp_buf_reserve(&call->out, PREFIX_BYTES + len);
    lp_buf_append(&call->out, prefix, PREFIX_BYTES);
    lp_buf_append(&call->out, message, len);
    lp_grpc__h2_submit_message(call);
    lp_grpc__conn_kick(call->conn); /* the handler's reference keeps call alive through this */
  }
  handler_done(call, "lp_grpc_respond");
}

void lp_grpc_fail(lp_grpc_call *call, int status, const char *message) {
  if (status <= LP_GRPC_OK || status > 16) status = LP_GRPC_UNKNOWN;
  if (call->handler_ref) answer(call, 200, status, "%s", message ? message : "");
  handler_done(call, "lp_grpc_fail");
}

double lp_grpc_call_deadline(const lp_grpc_call *call) {
  return call->deadline;
}

const char *lp_grpc_call_path(const lp_grpc_call *call) {
  return call->path ? call->path : "";
}
