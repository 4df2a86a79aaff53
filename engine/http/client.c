/* The asynchronous client: one curl multi handle per client, driven by the libuv loop in the shape of
 * curl's docs/examples/multi-uv.c. What each request does on its easy handle (options, callbacks,
 * retry policy) lives in client_sync.c, shared with the synchronous path; this file only moves
 * exchanges through the multi handle and the loop.
 *
 * Reentrancy is the hard part. curl forbids curl_multi_* from inside its callbacks, and user code
 * (done, on_data) may call back into this client. So: curl callbacks only touch libuv handles;
 * cancel and close only mark state and arm a timer, and the work happens in that timer's callback;
 * done runs only from loop callbacks, after the client's bookkeeping is consistent. */
#include "http/client.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/metrics.h"
#include "http/client_internal.h"

typedef struct sock_ctx {
  uv_poll_t poll;
  curl_socket_t fd;
  lp_http_client *client;
  struct sock_ctx *prev, *next;
  int closing;
  int events; /* what poll is started with; 0 = stopped */
  int owned;  /* a connection socket from on_open_socket: curl closes it through on_close_socket */
  int parked; /* curl stopped watching it between transfers: an idle kept-alive connection */
} sock_ctx;

typedef enum { CALL_RUNNING, CALL_WAITING, CALL_DONE } call_state;

struct lp_http_call {
  lp_http_client *client;
  lp_http_call *prev, *next;
  lp_http_exchange ex;
  CURL *easy; /* kept across attempts so its options need setting once; from the client's idle ones */
  int in_multi;
  int finish_pending; /* failed before any transfer: the timer delivers the result */
  call_state state;
  uv_timer_t timer; /* backoff between attempts; also defers results that must not be synchronous */
  lp_http_done_fn done;
  void *ud;
};

struct lp_http_client {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer; /* curl's timeout; during close, the close step */
  lp_http_settings settings;
  lp_http_call *calls; /* every call whose done has not run */
  size_t in_flight;
  sock_ctx *socks;
  /* Easy handles of finished calls, reset, for the next calls: a new handle per request cost an
   * allocation of curl's handle and buffers and a teardown each time. At most max_per_host, the
   * concurrency a client usually sees. */
  CURL **idle;
  unsigned nidle;
  unsigned open_handles; /* uv handles not yet closed: the client is freed when this reaches 0 */
  int closing;
  void (*on_closed)(void *ud);
  void *closed_ud;
  lp_metric *requests, *duration, *retries;
};

static void maybe_free(lp_http_client *c) {
  if (!c->closing || c->open_handles > 0) return;
  void (*cb)(void *) = c->on_closed;
  void *ud = c->closed_ud;
  lp_http_settings_free(&c->settings);
  free(c);
  if (cb) cb(ud);
}

static void on_handle_closed(uv_handle_t *h) {
  lp_http_client *c = h->data;
  c->open_handles--;
  maybe_free(c);
}

/* ---- sockets: one uv_poll per curl socket, found again through curl_multi_assign ----
 *
 * curl drops a kept-alive connection's socket (CURL_POLL_REMOVE) when its transfer ends and announces
 * it again for the next one. Closing the poll there and making a new one per request cost a uv_poll
 * init (an ioctl), two epoll_ctl and a handle close per request. Connection sockets are therefore
 * opened and closed through curl's socket callbacks (on_open_socket, on_close_socket): their poll
 * lives as long as the descriptor, "parked" while curl does not watch it (unreferenced, so an idle
 * connection does not keep the loop alive) and closed before curl closes the descriptor, as libuv
 * requires. Other sockets curl announces (a resolver's) keep one poll per announcement. */

static void on_sock_closed(uv_handle_t *h) {
  sock_ctx *s = h->data;
  lp_http_client *c = s->client;
  free(s);
  c->open_handles--;
  maybe_free(c);
}

static void sock_close(sock_ctx *s) {
  if (s->closing) return;
  s->closing = 1;
  lp_http_client *c = s->client;
  if (s->prev)
    s->prev->next = s->next;
  else
    c->socks = s->next;
  if (s->next) s->next->prev = s->prev;
  /* uv_close stops polling at once, before curl closes the descriptor, as libuv requires */
  uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

static sock_ctx *sock_new(lp_http_client *c, curl_socket_t fd) {
  sock_ctx *s = lp_xcalloc(1, sizeof *s);
  if (uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
    free(s);
    return NULL;
  }
  s->fd = fd;
  s->client = c;
  s->poll.data = s;
  s->next = c->socks;
  if (c->socks) c->socks->prev = s;
  c->socks = s;
  c->open_handles++;
  return s;
}

/* Linear: only when curl announces a socket it had dropped, and there are at most max_total. */
static sock_ctx *sock_find(lp_http_client *c, curl_socket_t fd) {
  for (sock_ctx *s = c->socks; s; s = s->next)
    if (s->fd == fd) return s;
  return NULL;
}

/* libuv's uv_poll_start always removes the descriptor from epoll and adds it again: only when the
 * events change. */
static void sock_watch(sock_ctx *s, int events, uv_poll_cb cb) {
  if (events == s->events) return;
  s->events = events;
  if (events)
    uv_poll_start(&s->poll, events, cb);
  else
    uv_poll_stop(&s->poll);
}

static void sock_park(sock_ctx *s) {
  s->parked = 1;
  uv_unref((uv_handle_t *)&s->poll);
}

static curl_socket_t on_open_socket(void *userp, curlsocktype purpose, struct curl_sockaddr *addr) {
  lp_http_client *c = userp;
  curl_socket_t fd = socket(addr->family, addr->socktype, addr->protocol);
  if (fd == CURL_SOCKET_BAD) return fd;
  sock_ctx *s = c->closing ? NULL : sock_new(c, fd);
  if (!s) {
    close(fd);
    return CURL_SOCKET_BAD;
  }
  s->owned = 1;
  sock_park(s); /* not watched until curl announces it */
  return fd;
}

static int on_close_socket(void *userp, curl_socket_t fd) {
  sock_ctx *s = sock_find(userp, fd);
  if (s) sock_close(s); /* stops polling at once: the descriptor closes right after */
  return close(fd);
}

static void drain(lp_http_client *c);

static void on_poll(uv_poll_t *p, int status, int events) {
  sock_ctx *s = p->data;
  lp_http_client *c = s->client;
  if (c->closing) return;
  if (s->parked) {
    /* the peer closed or wrote to an idle connection: curl finds out when it next picks it; until
     * then a level-triggered watch would fire on every iteration */
    sock_watch(s, 0, on_poll);
    return;
  }
  int flags = 0;
  if (status < 0) {
    flags = CURL_CSELECT_ERR; /* libuv reports POLLERR as a status; curl must see it to fail the socket */
  } else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  int running;
  curl_multi_socket_action(c->multi, s->fd, flags, &running);
  drain(c);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  lp_http_client *c = userp;
  sock_ctx *s = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (!s) return 0;
    if (c->closing) {
      sock_close(s); /* curl_multi_cleanup is tearing the socket hash down: no curl_multi_assign */
      return 0;
    }
    curl_multi_assign(c->multi, fd, NULL);
    if (s->owned)
      sock_park(s); /* still watched for what the peer does; see on_poll */
    else
      sock_close(s);
    return 0;
  }
  if (c->closing) {
    /* curl_multi_cleanup may announce a last read on a connection it is about to close */
    if (s && !s->closing) sock_watch(s, 0, on_poll);
    return 0;
  }
  if (!s) {
    s = sock_find(c, fd);
    if (s && s->parked) {
      s->parked = 0;
      uv_ref((uv_handle_t *)&s->poll);
    } else if (!s && !(s = sock_new(c, fd))) {
      return -1;
    }
    curl_multi_assign(c->multi, fd, s); /* documented as allowed inside the socket callback */
  }
  int events = 0;
  if (what & CURL_POLL_IN) events |= UV_READABLE;
  if (what & CURL_POLL_OUT) events |= UV_WRITABLE;
  sock_watch(s, events, on_poll);
  return 0;
}

/* ---- curl's timer ---- */

static void on_timeout(uv_timer_t *t) {
  lp_http_client *c = t->data;
  int running;
  curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  drain(c);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
  lp_http_client *c = userp;
  if (c->closing) return 0; /* the timer belongs to the close step now */
  if (timeout_ms < 0) {
    uv_timer_stop(&c->timer);
  } else {
    /* 0 means "as soon as possible". A libuv timer of 0 fires in the next loop iteration, never inside
     * this callback, so curl is not re-entered; rounding it up to 1 ms (as curl's multi-uv example
     * does) would add a millisecond to every request. */
    uv_timer_start(&c->timer, on_timeout, (uint64_t)timeout_ms, 0);
  }
  return 0;
}

/* ---- calls ---- */

static void on_call_closed(uv_handle_t *h) {
  lp_http_call *call = h->data;
  lp_http_client *c = call->client;
  free(call);
  c->open_handles--;
  maybe_free(c);
}

/* Resets first: the handle points into the call (error buffer, headers, body) until then. */
static void release_easy(lp_http_client *c, CURL *easy) {
  if (c->closing || c->nidle == c->settings.max_per_host) {
    curl_easy_cleanup(easy);
    return;
  }
  curl_easy_reset(easy);
  c->idle[c->nidle++] = easy;
}

static void finish(lp_http_call *call) {
  if (call->state == CALL_DONE) return;
  lp_http_client *c = call->client;
  call->state = CALL_DONE;
  if (call->in_multi) curl_multi_remove_handle(c->multi, call->easy);
  call->in_multi = 0;
  if (call->easy) release_easy(c, call->easy);
  call->easy = NULL;
  if (call->prev)
    call->prev->next = call->next;
  else
    c->calls = call->next;
  if (call->next) call->next->prev = call->prev;
  c->in_flight--;
  /* the call stays allocated until the close callback, so a cancel from inside done is a no-op */
  uv_close((uv_handle_t *)&call->timer, on_call_closed);
  call->done(lp_http_exchange_result(&call->ex), call->ud);
}

static void set_error(lp_http_call *call, const char *what) {
  lp_error_free(call->ex.error);
  call->ex.error = lp_error_new("Transport", "%s %s: %s", call->ex.method, call->ex.safe_url, what);
}

static int start_attempt(lp_http_call *call) {
  lp_http_exchange_begin(&call->ex);
  CURLMcode mc = curl_multi_add_handle(call->client->multi, call->easy);
  if (mc != CURLM_OK) {
    set_error(call, curl_multi_strerror(mc));
    return -1;
  }
  call->in_multi = 1;
  call->state = CALL_RUNNING;
  return 0;
}

static void on_call_timer(uv_timer_t *t) {
  lp_http_call *call = t->data;
  if (call->ex.cancelled || call->finish_pending || call->client->closing || start_attempt(call) != 0)
    finish(call);
}

static void record_attempt(lp_http_client *c, lp_http_exchange *ex, CURL *easy) {
  const char *method = lp_http_method_label(ex->method);
  curl_off_t us = 0;
  curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME_T, &us);
  lp_counter_inc(c->requests, LP_LABELS(method, lp_http_code_label(ex->status, ex->error)));
  lp_histogram_observe(c->duration, LP_LABELS(method), (double)us / 1e6);
}

static void attempt_done(lp_http_call *call, CURLcode rc) {
  lp_http_client *c = call->client;
  long delay = lp_http_exchange_end(&call->ex, call->easy, rc);
  record_attempt(c, &call->ex, call->easy);
  if (delay < 0 || c->closing) {
    finish(call);
    return;
  }
  lp_counter_inc(c->retries, LP_NO_LABELS);
  lp_debug("engine.http", "retrying", LPF_STR("method", call->ex.method), LPF_STR("url", call->ex.safe_url),
           LPF_INT("status", call->ex.status),
           LPF_STR("error", call->ex.error ? call->ex.error->message : NULL),
           LPF_INT("attempt", call->ex.attempts), LPF_INT("delay_ms", delay));
  call->state = CALL_WAITING;
  uv_timer_start(&call->timer, on_call_timer, (uint64_t)delay, 0);
}

/* Reads every finished transfer. Only ever called after curl_multi_socket_action has returned, so
 * removing handles and running done callbacks here is outside curl's callbacks. */
static void drain(lp_http_client *c) {
  CURLMsg *msg;
  int pending;
  while (!c->closing && (msg = curl_multi_info_read(c->multi, &pending))) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL *easy = msg->easy_handle;
    CURLcode rc = msg->data.result; /* msg dies with the removal below */
    char *priv = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    lp_http_call *call = (lp_http_call *)priv;
    curl_multi_remove_handle(c->multi, easy);
    call->in_multi = 0;
    attempt_done(call, rc);
  }
}

/* ---- public API ---- */

lp_http_client *lp_http_client_new(uv_loop_t *loop, const lp_http_client_options *opts, lp_error **err) {
  lp_http_global_init();
  lp_http_client *c = lp_xcalloc(1, sizeof *c);
  c->loop = loop;
  lp_http_settings_init(&c->settings, opts);
  c->multi = curl_multi_init();
  CURLMcode mc = c->multi ? CURLM_OK : CURLM_OUT_OF_MEMORY;
#define SETM(opt, val)                                                                                       \
  do {                                                                                                       \
    if (mc == CURLM_OK) mc = curl_multi_setopt(c->multi, opt, val);                                          \
  } while (0)
  SETM(CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  SETM(CURLMOPT_SOCKETDATA, c);
  SETM(CURLMOPT_TIMERFUNCTION, on_curl_timer);
  SETM(CURLMOPT_TIMERDATA, c);
  SETM(CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  /* over the cap, transfers queue inside curl (the queue time counts against their timeout) */
  SETM(CURLMOPT_MAX_HOST_CONNECTIONS, (long)c->settings.max_per_host);
  SETM(CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)c->settings.max_total);
  SETM(CURLMOPT_MAXCONNECTS, (long)c->settings.max_total);
#undef SETM
  if (mc != CURLM_OK) {
    lp_error_set(err, "Transport", "HTTP client: %s", curl_multi_strerror(mc));
    if (c->multi) curl_multi_cleanup(c->multi);
    lp_http_settings_free(&c->settings);
    free(c);
    return NULL;
  }
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  c->open_handles = 1;
  c->idle = lp_xcalloc(c->settings.max_per_host, sizeof *c->idle);
  /* per attempt, by method and status class only: URLs and hosts would make the series unbounded */
  lp_metrics *m = lp_metrics_default();
  c->requests =
      lp_metrics_counter(m, "luaprov_http_client_requests_total",
                         "HTTP requests sent by the engine (one per attempt) by method and status class.",
                         LP_LABELS("method", "code"));
  c->duration = lp_metrics_histogram(m, "luaprov_http_client_request_duration_seconds",
                                     "Duration of one HTTP attempt, queueing for a connection included.",
                                     LP_LABELS("method"), NULL, 0);
  c->retries =
      lp_metrics_counter(m, "luaprov_http_client_retries_total",
                         "HTTP attempts scheduled again after a transport error, 429 or 5xx.", LP_NO_LABELS);
  return c;
}

lp_http_call *lp_http_client_request(lp_http_client *c, const lp_http_request_opts *req, lp_http_done_fn done,
                                     void *ud) {
  lp_http_call *call = lp_xcalloc(1, sizeof *call);
  call->client = c;
  call->done = done;
  call->ud = ud;
  uv_timer_init(c->loop, &call->timer);
  call->timer.data = call;
  c->open_handles++;
  call->next = c->calls;
  if (c->calls) c->calls->prev = call;
  c->calls = call;
  c->in_flight++;
  lp_http_exchange_init(&call->ex, &c->settings, req);
  if (!call->ex.ud) call->ex.ud = ud;
  if (c->closing)
    lp_http_exchange_cancel(&call->ex);
  else if (!call->ex.error)
    call->easy = lp_http_exchange_easy(&call->ex, c->nidle ? c->idle[--c->nidle] : NULL);
  if (call->easy) {
    curl_easy_setopt(call->easy, CURLOPT_PRIVATE, (char *)call);
    curl_easy_setopt(call->easy, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(call->easy, CURLOPT_OPENSOCKETDATA, c);
    curl_easy_setopt(call->easy, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(call->easy, CURLOPT_CLOSESOCKETDATA, c);
    if (start_attempt(call) == 0) return call;
  }
  /* done must never run inside this function: the caller may not be ready for it yet */
  call->finish_pending = 1;
  call->state = CALL_WAITING;
  uv_timer_start(&call->timer, on_call_timer, 0, 0);
  return call;
}

void lp_http_call_cancel(lp_http_call *call) {
  if (!call || call->state == CALL_DONE || call->ex.cancelled) return;
  lp_http_exchange_cancel(&call->ex);
  /* may be inside on_data, where curl_multi_remove_handle is forbidden: finish from the timer */
  uv_timer_start(&call->timer, on_call_timer, 0, 0);
}

size_t lp_http_client_in_flight(const lp_http_client *c) {
  return c->in_flight;
}

static void on_close_step(uv_timer_t *t) {
  lp_http_client *c = t->data;
  /* done callbacks may start requests; those arrive cancelled at the head and are finished here too */
  while (c->calls) finish(c->calls);
  /* cached connections close now; curl calls on_curl_socket again, which shutdown mode tolerates */
  curl_multi_cleanup(c->multi);
  c->multi = NULL;
  while (c->nidle) curl_easy_cleanup(c->idle[--c->nidle]);
  free(c->idle);
  c->idle = NULL;
  while (c->socks) sock_close(c->socks);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

void lp_http_client_close(lp_http_client *c, void (*on_closed)(void *ud), void *ud) {
  if (c->closing) return;
  c->closing = 1;
  c->on_closed = on_closed;
  c->closed_ud = ud;
  for (lp_http_call *call = c->calls; call; call = call->next) lp_http_exchange_cancel(&call->ex);
  /* deferred: close may be called from done inside drain, or from on_data inside curl */
  uv_timer_start(&c->timer, on_close_step, 0, 0);
}
