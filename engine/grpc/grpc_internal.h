/* Shared between the gRPC server's files; not part of the public API.
 *   server.c  the listener, routes, metrics, lp_grpc_server_close
 *   conn.c    one TCP connection: reads, the bounded write queue, lingering close
 *   tls.c     the OpenSSL context (mTLS, ALPN h2) and the memory-BIO pump of a connection
 *   h2.c      the nghttp2 session: its callbacks turn streams into calls
 *   call.c    one gRPC call: headers, framing, deadline, dispatch, answers and trailers
 *
 * Who may free what: a connection is freed by its handles' close callbacks only; a call is freed when
 * its last reference goes (see lp_grpc_call). Nothing is freed inside an nghttp2 callback that
 * nghttp2 could still hand the same pointer to: stream user data is cleared first. */
#ifndef LUAPROV_GRPC_INTERNAL_H
#define LUAPROV_GRPC_INTERNAL_H

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/metrics.h"
#include "grpc/server.h"

/* Output bytes handed to uv_write and not yet written above which the connection stops pulling frames
 * from nghttp2 and stops reading: a client that sends requests without reading the answers stalls
 * instead of growing the engine's memory. */
#define LP_GRPC_WRITE_HIGH_WATER (1024u * 1024)
/* Request header bytes (names and values) accepted per stream, and advertised as
 * SETTINGS_MAX_HEADER_LIST_SIZE. The CA sends a few hundred. */
#define LP_GRPC_MAX_HEADER_BYTES (16u * 1024)
#define LP_GRPC_MAX_CONNECTIONS  1024u

typedef enum {
  LP_GRPC_CONN_OPEN,    /* TLS handshake or HTTP/2 in progress */
  LP_GRPC_CONN_LINGER,  /* output flushed and write side shut down; input discarded until EOF */
  LP_GRPC_CONN_CLOSING, /* uv_close called; freed when both handles report closed */
} lp_grpc_conn_state;

typedef struct lp_grpc_route {
  char *path;
  char *label; /* the method label of metrics: the path's last segment */
  lp_grpc_handler handler;
  void *ud;
} lp_grpc_route;

typedef struct lp_grpc_conn lp_grpc_conn;

struct lp_grpc_call {
  lp_grpc_conn *conn; /* NULL once detached: the connection closed */
  int32_t stream_id;
  /* References: the nghttp2 stream (until it closes or the connection goes), the handler (from
   * dispatch until it finishes), the ready queue (between the request's end and dispatch). */
  int refs;
  unsigned stream_ref : 1, handler_ref : 1, queued : 1;
  unsigned answered : 1;  /* the client has its answer (or the call is over): later finishes are dropped */
  unsigned validated : 1; /* request headers accepted: a handler exists */
  unsigned have_prefix : 1;
  lp_grpc_handler handler;
  void *ud;
  char *path;
  char *method_label; /* copied: a call may outlive the server's routes */
  char *http_method, *content_type, *timeout, *encoding;
  size_t header_bytes;
  size_t max_message;
  uint32_t message_len; /* from the length prefix */
  lp_buf in;            /* request bytes: the 5-byte prefix, then the message */
  lp_buf out;           /* response bytes read by the data provider: prefix, then message */
  size_t out_off;
  uv_loop_t *loop;
  uv_timer_t *deadline_timer; /* heap-allocated so that closing it never delays freeing the call */
  double start, deadline;
  lp_metric *requests, *duration;
  struct lp_grpc_call *prev, *next; /* the connection's calls */
  struct lp_grpc_call *ready_next;
};

struct lp_grpc_conn {
  lp_grpc_server *server;
  struct lp_grpc_conn *prev, *next;
  uv_tcp_t tcp;
  uv_timer_t timer; /* handshake timeout, then the lingering-close timeout */
  uv_shutdown_t shutdown;
  lp_grpc_conn_state state;
  int handles_open;
  int reading;
  int in_recv;     /* inside nghttp2_session_mem_recv: no mem_send now, the reader flushes after */
  int batch;       /* a caller up the stack flushes once at its end: kicks are deferred to it */
  int flushing;    /* inside conn flush: nested kicks are picked up by its loop */
  int established; /* the client's SETTINGS arrived: the handshake timer is off */
  int h2_dead;     /* nghttp2 failed fatally (bad preface, flood): nothing more is pulled from it */
  size_t queued;   /* bytes handed to uv_write and not yet completed */
  size_t received; /* bytes read so far, to tell a probe that sent nothing from a failed handshake */
  lp_buf out;      /* bytes for the network gathered during one flush, written as one uv_write */
  nghttp2_session *h2;
  SSL *ssl; /* NULL for h2c; owns rbio (network to OpenSSL) and wbio (OpenSSL to network) */
  BIO *rbio, *wbio;
  int tls_ready;  /* handshake done and h2 negotiated */
  int tls_failed; /* a fatal TLS error: no close_notify may follow */
  lp_grpc_call *calls;
  lp_grpc_call *ready_head, *ready_tail;
  char remote[64];
};

struct lp_grpc_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  char *host;
  int port;
  size_t max_message_bytes;
  unsigned max_concurrent_streams;
  SSL_CTX *tls; /* NULL for h2c */
  lp_grpc_route *routes;
  size_t nroutes;
  lp_grpc_conn *conns;
  unsigned nconns;
  int closing;
  int listener_closed;
  void (*on_closed)(void *ud);
  void *on_closed_ud;
  lp_metric *requests, *duration;
  char read_buf[64 * 1024]; /* every read is consumed before the next: one buffer serves all */
};

/* server.c */
const lp_grpc_route *lp_grpc__route_find(const lp_grpc_server *s, const char *path);
/* Unlinks a connection about to be freed; then lp_grpc__server_maybe_free finishes a closing server. */
void lp_grpc__server_conn_gone(lp_grpc_server *s, lp_grpc_conn *c);
void lp_grpc__server_maybe_free(lp_grpc_server *s);

/* conn.c */
void lp_grpc__conn_accept(lp_grpc_server *s);
/* Writes what nghttp2 (and OpenSSL) have to send, up to the high-water mark; safe to call anywhere
 * outside nghttp2's receive path (there it only notes that a flush is due). */
void lp_grpc__conn_kick(lp_grpc_conn *c);
/* Flushes everything pending, shuts the write side down and closes once the peer is done. */
void lp_grpc__conn_end(lp_grpc_conn *c);
void lp_grpc__conn_close(lp_grpc_conn *c);
/* The client's SETTINGS frame arrived: the connection is no longer subject to the handshake timeout. */
void lp_grpc__conn_established(lp_grpc_conn *c);
/* Appends bytes ready for the network to the connection's pending output. */
void lp_grpc__conn_output(lp_grpc_conn *c, const void *data, size_t len);

/* tls.c */
SSL_CTX *lp_grpc__tls_context(const lp_grpc_server_options *opts, lp_error **err);
void lp_grpc__tls_attach(lp_grpc_conn *c);
/* Feeds network bytes; handshakes, then hands decrypted bytes to lp_grpc__h2_feed. */
void lp_grpc__tls_feed(lp_grpc_conn *c, const char *data, size_t len);
/* Encrypts application bytes; with data NULL only moves OpenSSL's pending output (handshake
 * messages, alerts, tickets) to the connection's output. */
void lp_grpc__tls_write(lp_grpc_conn *c, const uint8_t *data, size_t len);
void lp_grpc__tls_shutdown(lp_grpc_conn *c);

/* h2.c */
int lp_grpc__h2_start(lp_grpc_conn *c);
/* Feeds plaintext HTTP/2 bytes. Returns 0, or -1 when the connection must end. */
int lp_grpc__h2_feed(lp_grpc_conn *c, const uint8_t *data, size_t len);
/* Answers on the call's stream (which must still exist): HEADERS with the status and END_STREAM, or
 * HEADERS, the framed message in call->out, then trailers with grpc-status 0. message is encoded. */
int lp_grpc__h2_submit_trailers_only(lp_grpc_call *call, int http_status, int status, const char *message);
int lp_grpc__h2_submit_message(lp_grpc_call *call);
/* Sends GOAWAY (no new streams; those already open are answered). */
void lp_grpc__h2_goaway(lp_grpc_conn *c);

/* call.c */
lp_grpc_call *lp_grpc__call_new(lp_grpc_conn *c, int32_t stream_id);
/* Returns 0, or -1 when the stream must be reset (the call has been answered). */
int lp_grpc__call_header(lp_grpc_call *call, const uint8_t *name, size_t nlen, const uint8_t *value,
                         size_t vlen);
void lp_grpc__call_headers_done(lp_grpc_call *call);
void lp_grpc__call_data(lp_grpc_call *call, const uint8_t *data, size_t len);
void lp_grpc__call_request_end(lp_grpc_call *call);
void lp_grpc__call_cancelled(lp_grpc_call *call);
void lp_grpc__call_stream_closed(lp_grpc_call *call, uint32_t error_code);
/* Answers every call of the connection still waiting with status (when the client can still hear it). */
void lp_grpc__call_fail_all(lp_grpc_conn *c, int status, const char *message);
/* The connection is going: every call loses its stream; calls a handler holds stay until finished. */
void lp_grpc__call_detach_all(lp_grpc_conn *c);
/* Runs the handlers of the calls whose request is complete. */
void lp_grpc__call_dispatch_ready(lp_grpc_conn *c);
const char *lp_grpc__status_name(int status);

#endif
