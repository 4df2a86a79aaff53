/* The HTTP/2 side of a connection: one nghttp2 server session per connection, fed with the bytes
 * conn.c reads (after TLS) and drained by conn.c's flush. nghttp2 does the protocol: the preface,
 * SETTINGS and their acknowledgement, PING answers, flow control with automatic WINDOW_UPDATE,
 * HPACK, stream states, MAX_CONCURRENT_STREAMS, GOAWAY, and the flood and rapid-reset limits.
 * Its callbacks map each request stream to a call (stream user data) and report headers, data,
 * ends and resets to call.c. No callback runs a handler or frees a connection. */
#include "grpc/grpc_internal.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"

/* A gRPC message of several MiB should not wait for a window update every 64 KiB. */
#define STREAM_WINDOW     (1u << 20)
#define CONNECTION_WINDOW (16u << 20)

#define NV(name, value, vlen)                                                                                \
  { (uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, (vlen), NGHTTP2_NV_FLAG_NONE }
#define NVS(name, value) NV(name, value, strlen(value))

static lp_grpc_call *stream_call(nghttp2_session *s, int32_t id) {
  return id > 0 ? nghttp2_session_get_stream_user_data(s, id) : NULL;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  lp_grpc_conn *c = ud;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  lp_grpc_call *call = lp_grpc__call_new(c, f->hd.stream_id);
  nghttp2_session_set_stream_user_data(s, f->hd.stream_id, call);
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0; /* trailers */
  lp_grpc_call *call = stream_call(s, f->hd.stream_id);
  if (!call) return 0;
  /* The temporal failure makes nghttp2 reset just this stream. */
  return lp_grpc__call_header(call, name, nlen, value, vlen) < 0 ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  lp_grpc_conn *c = ud;
  lp_grpc_call *call = stream_call(s, f->hd.stream_id);
  switch (f->hd.type) {
  case NGHTTP2_HEADERS:
  case NGHTTP2_DATA:
    if (call && f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
      lp_grpc__call_headers_done(call);
    /* The request ends with its HEADERS, its last DATA or its trailers. */
    if (call && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) lp_grpc__call_request_end(call);
    break;
  case NGHTTP2_RST_STREAM:
    if (call) lp_grpc__call_cancelled(call);
    break;
  case NGHTTP2_SETTINGS:
    if (!(f->hd.flags & NGHTTP2_FLAG_ACK)) lp_grpc__conn_established(c);
    break;
  case NGHTTP2_GOAWAY:
    lp_debug("engine.grpc", "GOAWAY from the client", LPF_STR("remote", c->remote),
             LPF_INT("error_code", f->goaway.error_code));
    break;
  default:
    break;
  }
  return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud) {
  lp_grpc_call *call = stream_call(s, id);
  if (call) lp_grpc__call_data(call, data, len);
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *ud) {
  lp_grpc_call *call = stream_call(s, id);
  if (!call) return 0;
  nghttp2_session_set_stream_user_data(s, id, NULL);
  lp_grpc__call_stream_closed(call, error_code);
  return 0;
}

/* An answer sent before the request ended (an error found in its headers or first bytes): per RFC
 * 7540 §8.1 the rest of the request is refused with RST_STREAM(NO_ERROR) so that the client stops
 * sending and the stream closes. */
static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM) && stream_call(s, f->hd.stream_id) &&
      !nghttp2_session_get_stream_remote_close(s, f->hd.stream_id))
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
  return 0;
}

static int on_error(nghttp2_session *s, int code, const char *msg, size_t len, void *ud) {
  lp_grpc_conn *c = ud;
  lp_debug("engine.grpc", "HTTP/2 protocol error", LPF_STR("remote", c->remote), LPF_STR("error", msg));
  return 0;
}

int lp_grpc__h2_start(lp_grpc_conn *c) {
  nghttp2_session_callbacks *cbs;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return -1;
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
  nghttp2_session_callbacks_set_error_callback2(cbs, on_error);
  int rc = nghttp2_session_server_new(&c->h2, cbs, c);
  nghttp2_session_callbacks_del(cbs);
  if (rc != 0) return -1;
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, c->server->max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, LP_GRPC_MAX_HEADER_BYTES},
  };
  if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
      nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, CONNECTION_WINDOW) != 0)
    return -1;
  return 0;
}

int lp_grpc__h2_feed(lp_grpc_conn *c, const uint8_t *data, size_t len) {
  c->in_recv = 1;
  ssize_t n = nghttp2_session_mem_recv(c->h2, data, len);
  c->in_recv = 0;
  if (n < 0) {
    /* Protocol errors nghttp2 answers itself with GOAWAY return 0; what arrives here is fatal. */
    lp_debug("engine.grpc",
             n == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? "not an HTTP/2 client: bad connection preface"
                                               : "HTTP/2 session failed",
             LPF_STR("remote", c->remote), LPF_STR("error", nghttp2_strerror((int)n)));
    return -1;
  }
  return 0;
}

int lp_grpc__h2_submit_trailers_only(lp_grpc_call *call, int http_status, int status, const char *message) {
  char hs[8], gs[8];
  snprintf(hs, sizeof hs, "%d", http_status);
  snprintf(gs, sizeof gs, "%d", status);
  nghttp2_nv nva[] = {NVS(":status", hs), NVS("content-type", "application/grpc"), NVS("grpc-status", gs),
                      NVS("grpc-message", message)};
  size_t n = sizeof nva / sizeof nva[0] - (*message ? 0 : 1);
  return nghttp2_submit_response(call->conn->h2, call->stream_id, nva, n, NULL);
}

/* Hands out the framed response message; at its end the trailers follow with grpc-status 0. */
static ssize_t read_message(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                            nghttp2_data_source *src, void *ud) {
  lp_grpc_call *call = src->ptr;
  size_t n = call->out.len - call->out_off;
  if (n > length) n = length;
  memcpy(buf, call->out.data + call->out_off, n);
  call->out_off += n;
  if (call->out_off == call->out.len) {
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv trailers[] = {NVS("grpc-status", "0")};
    if (nghttp2_submit_trailer(s, id, trailers, 1) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return (ssize_t)n;
}

int lp_grpc__h2_submit_message(lp_grpc_call *call) {
  nghttp2_nv nva[] = {NVS(":status", "200"), NVS("content-type", "application/grpc")};
  nghttp2_data_provider prd = {.source.ptr = call, .read_callback = read_message};
  return nghttp2_submit_response(call->conn->h2, call->stream_id, nva, 2, &prd);
}

void lp_grpc__h2_goaway(lp_grpc_conn *c) {
  if (c->h2_dead) return;
  nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->h2),
                        NGHTTP2_NO_ERROR, NULL, 0);
}
