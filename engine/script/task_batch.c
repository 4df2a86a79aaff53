/* luaprov.http.request_all: a task parked on many requests, at most `concurrency` in flight, resumed
 * once with every result in order. The requests are copied when the batch starts, so nothing of the
 * parked coroutine is read while it waits. */
#include <stdlib.h>
#include <string.h>

#include "script/host_internal.h"

typedef struct lp_http_batch {
  lp_task *task;
  lp_http_request_opts *reqs; /* deep copies */
  size_t n, next, running;
  unsigned concurrency;
  lp_http_result **results;
  lp_http_call **calls; /* per request while it runs */
} lp_http_batch;

typedef struct batch_slot {
  lp_http_batch *batch;
  size_t index;
} batch_slot;

static void copy_request(lp_http_request_opts *dst, const lp_http_request_opts *src) {
  *dst = *src;
  dst->method = lp_xstrdup(src->method ? src->method : "GET");
  dst->url = lp_xstrdup(src->url);
  dst->body = src->body ? lp_xstrndup(src->body, src->body_len) : NULL;
  lp_http_header *headers = lp_xcalloc(src->nheaders ? src->nheaders : 1, sizeof *headers);
  for (size_t i = 0; i < src->nheaders; i++) {
    headers[i].name = lp_xstrdup(src->headers[i].name);
    headers[i].value = lp_xstrdup(src->headers[i].value);
  }
  dst->headers = headers;
}

static void free_request(lp_http_request_opts *r) {
  free((char *)r->method);
  free((char *)r->url);
  free((char *)r->body);
  for (size_t i = 0; i < r->nheaders; i++) {
    free(r->headers[i].name);
    free(r->headers[i].value);
  }
  free((lp_http_header *)r->headers);
}

static void batch_free(lp_http_batch *b) {
  for (size_t i = 0; i < b->n; i++) {
    free_request(&b->reqs[i]);
    lp_http_result_free(b->results[i]);
  }
  free(b->reqs);
  free(b->results);
  free(b->calls);
  free(b);
}

typedef struct push_results_args {
  lua_State *co;
  lp_http_batch *batch;
} push_results_args;

static int push_results(lua_State *L) {
  push_results_args *a = lua_touserdata(L, 1);
  lp_push_http_results(L, a->batch->results, a->batch->n);
  lua_xmove(L, a->co, 1);
  return 0;
}

static void start_next(lp_http_batch *b);

static void request_done(lp_http_result *res, void *ud) {
  batch_slot *slot = ud;
  lp_http_batch *b = slot->batch;
  b->results[slot->index] = res;
  b->calls[slot->index] = NULL;
  free(slot);
  b->running--;
  lp_task *t = b->task;
  if (!t->cancelled) start_next(b);
  if (b->running > 0) return;
  t->batch = NULL;
  if (t->cancelled) {
    batch_free(b);
    lp_task_finish_cancelled(t);
    return;
  }
  push_results_args a = {t->co, b};
  lp_error *err = NULL;
  int rc = lp_script_cpcall(lp_generation_state(t->generation), push_results, &a, &err);
  batch_free(b);
  if (rc != 0) {
    lp_task_finish(t, err, NULL);
    return;
  }
  lp_task_resume(t, 1);
}

static void start_next(lp_http_batch *b) {
  while (b->running < b->concurrency && b->next < b->n) {
    batch_slot *slot = lp_xmalloc(sizeof *slot);
    slot->batch = b;
    slot->index = b->next++;
    b->running++;
    b->calls[slot->index] =
        lp_http_client_request(b->task->host->http, &b->reqs[slot->index], request_done, slot);
  }
}

int lp_task_http_request_all(lua_State *L, const lp_http_request_opts *reqs, size_t n, unsigned concurrency,
                             void *ud) {
  lp_script_host *h = ud;
  lp_task *t = lp_thread_ctx_get(L)->task;
  if (!h->http) return lp_push_fail(L, "this engine has no HTTP client", "Unavailable");
  if (n == 0) {
    lua_newtable(L);
    return 1;
  }
  lp_http_batch *b = lp_xcalloc(1, sizeof *b);
  b->task = t;
  b->n = n;
  b->concurrency = concurrency ? concurrency : 1;
  b->reqs = lp_xcalloc(n, sizeof *b->reqs);
  b->results = lp_xcalloc(n, sizeof *b->results);
  b->calls = lp_xcalloc(n, sizeof *b->calls);
  for (size_t i = 0; i < n; i++) copy_request(&b->reqs[i], &reqs[i]);
  t->batch = b;
  lp_task_arm_deadline(t);
  start_next(b);
  return lua_yield(L, 0);
}

void lp_task_batch_cancel(lp_task *t) {
  lp_http_batch *b = t->batch;
  b->next = b->n; /* start nothing more */
  for (size_t i = 0; i < b->n; i++)
    if (b->calls[i]) lp_http_call_cancel(b->calls[i]);
}
