/* Shared between server.c (listener, connections, request parsing, routing) and server_response.c
 * (response framing and writes). Not part of the public API. */
#ifndef LUAPROV_HTTP_SERVER_INTERNAL_H
#define LUAPROV_HTTP_SERVER_INTERNAL_H

#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "http/server.h"

/* A client that stops reading while a stream keeps writing is dropped once this much is queued,
 * so a stalled watcher cannot grow the engine's memory without bound. */
#define LP_HTTP_MAX_QUEUED_BYTES (8u * 1024 * 1024)
/* Pipelined requests are not parsed while this much output waits: a client that sends requests
 * without reading the answers stalls instead of filling memory with them. */
#define LP_HTTP_WRITE_HIGH_WATER (1024u * 1024)

typedef enum {
  LP_CONN_OPEN,    /* reading requests, writing responses */
  LP_CONN_LINGER,  /* write side shut down; input is drained and discarded until EOF or a timeout */
  LP_CONN_CLOSING, /* uv_close called; freed when both handles report closed */
} lp_conn_state;

typedef struct lp_http_route {
  char *method; /* NULL = any */
  char *path;   /* without the trailing "*" for prefix routes */
  size_t path_len;
  int prefix;
  lp_http_handler handler;
  void *ud;
} lp_http_route;

typedef struct lp_http_header_offsets {
  size_t name, value; /* offsets into conn->head; value 0 = no value seen */
} lp_http_header_offsets;

typedef struct lp_http_conn {
  lp_http_server *server;
  struct lp_http_conn *prev, *next;
  uv_tcp_t tcp;
  uv_timer_t timer; /* idle keep-alive timeout, then the lingering-close timeout */
  uv_shutdown_t shutdown;
  lp_conn_state state;
  int handles_open;
  int reading;
  int peer_eof;
  int processing; /* conn_process is on the stack: finishing a response must not re-enter it */
  size_t queued;  /* bytes handed to uv_write and not yet completed */
  int wrote;      /* a write completed since the idle timer last fired */
  http_parser parser;
  lp_buf in; /* received bytes; [in_off, in.len) not yet parsed */
  size_t in_off;
  /* The request being parsed: target, header names and values, NUL-separated, then path and query. */
  lp_buf head;
  lp_http_header_offsets *hoff;
  size_t nhoff, hoff_cap;
  int last_cb;              /* which data callback ran last, to know when a header name or value ends */
  int in_trailers;          /* headers are complete: further fields are a chunked body's trailer */
  uint64_t header_deadline; /* loop time by which the headers must be complete; 0 = not reading any */
  size_t header_bytes;      /* request line and headers as counted against max_header_bytes */
  int reject_status;        /* 413 or 431 when a parser callback refused the request */
  lp_buf body;
  lp_http_header_view *views;
  lp_http_request req;
  lp_http_response *res; /* the response in progress; at most one per connection */
  char remote[64];
} lp_http_conn;

struct lp_http_response {
  lp_http_conn *conn; /* NULL once the connection has closed */
  lp_buf headers;     /* "Name: value\r\n" lines added by the handler */
  int head_only;      /* HEAD request: framing headers as for GET, no body */
  int http11;
  int keep_alive;
  int started;  /* status line sent */
  int chunked;  /* streaming with chunk framing (HTTP/1.1 clients) */
  int streamed; /* lp_http_stream_begin was called */
  void (*on_close)(lp_http_response *res, void *ud);
  void *on_close_ud;
};

struct lp_http_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  lp_http_server_options opts;
  char *server_header;
  lp_http_route *routes;
  size_t nroutes;
  lp_http_conn *conns;
  unsigned nconns;
  int port;
  int closing;
  int listener_closed;
  void (*on_closed)(void *ud);
  void *on_closed_ud;
};

/* server.c */
void lp_http__conn_close(lp_http_conn *c);
void lp_http__conn_end(lp_http_conn *c);
/* The connection's current response has been finished (and freed): go on with the next request. */
void lp_http__conn_response_done(lp_http_conn *c, int keep_alive);
/* Queued output fell below LP_HTTP_WRITE_HIGH_WATER: parsing may resume. */
void lp_http__conn_drained(lp_http_conn *c);

/* server_response.c */
lp_http_response *lp_http__response_new(lp_http_conn *c);
/* Copies the buffers into one write request; returns -1 when the connection is no longer open. */
int lp_http__conn_write(lp_http_conn *c, const uv_buf_t *bufs, unsigned nbufs);
/* Sends the last chunk of a chunked stream (nothing for HEAD or HTTP/1.0 streams). */
void lp_http__stream_terminate(lp_http_response *res);
/* The connection is gone before res finished: runs its on_close callback and frees it. */
void lp_http__response_abandon(lp_http_response *res);

#endif
