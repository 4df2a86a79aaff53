/* The work queue (see workqueue.h). A FIFO ring of waiting keys; jansson objects serve as the string
 * hash maps (dirty: key -> true; failures: key -> count; delayed: key -> earliest due time in ms);
 * a binary min-heap of (due, key) behind one timer, where an entry whose time is no longer the key's
 * earliest is skipped when it surfaces. Workers are slots; a uv_idle handle dispatches waiting keys to
 * free slots outside the callers' stacks. */
#include "kube/workqueue.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

#define DEFAULT_BASE_S   0.005
#define DEFAULT_MAX_S    1000.0
#define DISPATCH_PER_RUN 256 /* then yield to the loop, so a worker that re-adds its key cannot spin */

typedef struct slot {
  char *key; /* NULL when free */
  double started;
} slot;

typedef struct delayed {
  uint64_t due; /* uv_now milliseconds */
  uint64_t seq; /* FIFO among equal times */
  char *key;
} delayed;

struct lp_workqueue {
  uv_loop_t *loop;
  char *name;
  lp_workqueue_opts opts;
  /* waiting keys: a ring */
  char **ring;
  size_t cap, head, len;
  json_t *dirty, *failures, *due_of;
  slot *slots;
  size_t active;
  delayed *heap;
  size_t nheap, heapcap;
  uint64_t seq;
  uv_timer_t timer;
  uv_idle_t idle;
  int shutting, drain, closing, handles_open;
  int paused; /* lp_workqueue_pause */
  void (*on_closed)(void *ud);
  void *on_closed_ud;
  lp_metric *m_depth, *m_adds, *m_retries, *m_duration;
};

static void kick(lp_workqueue *q);
static void maybe_close(lp_workqueue *q);

static void set_depth(lp_workqueue *q) {
  lp_gauge_set(q->m_depth, LP_LABELS(q->name), (double)q->len);
}

/* ---- the ring ---- */

static void ring_push(lp_workqueue *q, char *key) {
  if (q->len == q->cap) {
    size_t ncap = q->cap ? q->cap * 2 : 16;
    char **n = lp_xcalloc(ncap, sizeof *n);
    for (size_t i = 0; i < q->len; i++) n[i] = q->ring[(q->head + i) % q->cap];
    free(q->ring);
    q->ring = n;
    q->cap = ncap;
    q->head = 0;
  }
  q->ring[(q->head + q->len++) % q->cap] = key;
}

static char *ring_pop(lp_workqueue *q) {
  char *key = q->ring[q->head];
  q->head = (q->head + 1) % q->cap;
  q->len--;
  return key;
}

static slot *slot_of(const lp_workqueue *q, const char *key) {
  for (unsigned i = 0; i < q->opts.workers; i++)
    if (q->slots[i].key && strcmp(q->slots[i].key, key) == 0) return &q->slots[i];
  return NULL;
}

/* ---- adds ---- */

int lp_workqueue_add(lp_workqueue *q, const char *key) {
  if (q->shutting || json_object_get(q->dirty, key)) return 0;
  json_object_set_new_nocheck(q->dirty, key, json_true());
  lp_counter_inc(q->m_adds, LP_LABELS(q->name));
  if (slot_of(q, key)) return 1; /* queued again by lp_workqueue_done */
  ring_push(q, lp_xstrdup(key));
  set_depth(q);
  kick(q);
  return 1;
}

/* ---- the delayed heap ---- */

static int before(const delayed *a, const delayed *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void heap_push(lp_workqueue *q, delayed d) {
  if (q->nheap == q->heapcap) {
    q->heapcap = q->heapcap ? q->heapcap * 2 : 16;
    q->heap = lp_xrealloc(q->heap, q->heapcap * sizeof *q->heap);
  }
  size_t i = q->nheap++;
  while (i && before(&d, &q->heap[(i - 1) / 2])) {
    q->heap[i] = q->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  q->heap[i] = d;
}

static delayed heap_pop(lp_workqueue *q) {
  delayed top = q->heap[0], last = q->heap[--q->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= q->nheap) break;
    if (c + 1 < q->nheap && before(&q->heap[c + 1], &q->heap[c])) c++;
    if (!before(&q->heap[c], &last)) break;
    q->heap[i] = q->heap[c];
    i = c;
  }
  if (q->nheap) q->heap[i] = last;
  return top;
}

static void arm(lp_workqueue *q);

static void on_timer(uv_timer_t *t) {
  lp_workqueue *q = t->data;
  uint64_t now = uv_now(q->loop);
  while (q->nheap && q->heap[0].due <= now) {
    delayed d = heap_pop(q);
    json_t *due = json_object_get(q->due_of, d.key);
    if (due && (uint64_t)json_integer_value(due) == d.due) { /* else a stale, later entry */
      json_object_del(q->due_of, d.key);
      lp_workqueue_add(q, d.key);
    }
    free(d.key);
  }
  arm(q);
}

static void arm(lp_workqueue *q) {
  if (!q->nheap) {
    uv_timer_stop(&q->timer);
    return;
  }
  uint64_t now = uv_now(q->loop);
  uv_timer_start(&q->timer, on_timer, q->heap[0].due > now ? q->heap[0].due - now : 0, 0);
}

void lp_workqueue_requeue_after(lp_workqueue *q, const char *key, double seconds) {
  if (q->shutting) return;
  if (seconds <= 0) {
    lp_workqueue_add(q, key);
    return;
  }
  uint64_t due = uv_now(q->loop) + (uint64_t)ceil(seconds * 1000.0);
  json_t *cur = json_object_get(q->due_of, key);
  if (cur && (uint64_t)json_integer_value(cur) <= due) return; /* an earlier add is already pending */
  json_object_set_new_nocheck(q->due_of, key, json_integer((json_int_t)due));
  heap_push(q, (delayed){.due = due, .seq = q->seq++, .key = lp_xstrdup(key)});
  if (q->heap[0].due == due) arm(q);
}

/* ---- rate limiting ---- */

double lp_workqueue_backoff_seconds(const lp_workqueue_opts *opts, unsigned failures) {
  double base = opts && opts->backoff_base_s > 0 ? opts->backoff_base_s : DEFAULT_BASE_S;
  double max = opts && opts->backoff_max_s > 0 ? opts->backoff_max_s : DEFAULT_MAX_S;
  double d = base * pow(2.0, failures > 1000 ? 1000 : failures);
  return d > max ? max : d;
}

void lp_workqueue_requeue_rate_limited(lp_workqueue *q, const char *key) {
  if (q->shutting) return;
  unsigned failures = lp_workqueue_num_requeues(q, key);
  json_object_set_new_nocheck(q->failures, key, json_integer((json_int_t)failures + 1));
  lp_counter_inc(q->m_retries, LP_LABELS(q->name));
  lp_workqueue_requeue_after(q, key, lp_workqueue_backoff_seconds(&q->opts, failures));
}

void lp_workqueue_forget(lp_workqueue *q, const char *key) {
  json_object_del(q->failures, key);
}

unsigned lp_workqueue_num_requeues(const lp_workqueue *q, const char *key) {
  return (unsigned)json_integer_value(json_object_get(q->failures, key));
}

/* ---- workers ---- */

static void on_idle(uv_idle_t *h) {
  lp_workqueue *q = h->data;
  for (int n = 0; n < DISPATCH_PER_RUN && q->len && q->active < q->opts.workers; n++) {
    if ((q->shutting && !q->drain) || q->paused) break;
    char *key = ring_pop(q);
    json_object_del(q->dirty, key);
    set_depth(q);
    slot *s = NULL;
    for (unsigned i = 0; i < q->opts.workers && !s; i++)
      if (!q->slots[i].key) s = &q->slots[i];
    s->key = key;
    s->started = lp_clock_monotonic();
    q->active++;
    q->opts.work(q, key, q->opts.ud); /* may call done, add, shutdown: all leave q alive */
  }
  if (!q->len || q->active >= q->opts.workers || (q->shutting && !q->drain) || q->paused)
    uv_idle_stop(&q->idle);
  maybe_close(q);
}

static void kick(lp_workqueue *q) {
  if (q->len && q->active < q->opts.workers && !q->closing && !q->paused) uv_idle_start(&q->idle, on_idle);
}

void lp_workqueue_pause(lp_workqueue *q, int paused) {
  q->paused = paused && !q->shutting;
  if (q->paused)
    uv_idle_stop(&q->idle);
  else
    kick(q);
}

void lp_workqueue_done(lp_workqueue *q, const char *key, lp_workqueue_result result) {
  slot *s = key ? slot_of(q, key) : NULL;
  if (!s) {
    lp_log(LP_LOG_ERROR, "engine.kube.workqueue", "done for a key not being processed",
           LPF_STR("queue", q->name), LPF_STR("key", key ? key : "(null)"));
    return;
  }
  char *mine = s->key; /* key may be this very string: use mine until the end, then free it */
  lp_histogram_observe(q->m_duration, LP_LABELS(q->name), lp_clock_monotonic() - s->started);
  s->key = NULL;
  q->active--;
  if (result == LP_WORKQUEUE_RETRY)
    lp_workqueue_requeue_rate_limited(q, mine);
  else
    lp_workqueue_forget(q, mine);
  if (json_object_get(q->dirty, mine)) { /* added while it was processed */
    ring_push(q, mine);
    set_depth(q);
  } else {
    free(mine);
  }
  kick(q);
  maybe_close(q);
}

size_t lp_workqueue_each_waiting(const lp_workqueue *q, int (*fn)(const char *key, void *ud), void *ud) {
  size_t i = 0;
  while (i < q->len && fn(q->ring[(q->head + i) % q->cap], ud)) i++;
  return i < q->len ? i + 1 : i;
}

size_t lp_workqueue_len(const lp_workqueue *q) {
  return q->len;
}

size_t lp_workqueue_active(const lp_workqueue *q) {
  return q->active;
}

int lp_workqueue_shutting_down(const lp_workqueue *q) {
  return q->shutting;
}

/* ---- life cycle ---- */

lp_workqueue *lp_workqueue_new(uv_loop_t *loop, const lp_workqueue_opts *opts) {
  lp_workqueue *q = lp_xcalloc(1, sizeof *q);
  q->loop = loop;
  q->opts = *opts;
  q->name = lp_xstrdup(opts->name ? opts->name : "default");
  q->opts.name = q->name;
  if (!q->opts.workers) q->opts.workers = 1;
  q->slots = lp_xcalloc(q->opts.workers, sizeof *q->slots);
  q->dirty = json_object();
  q->failures = json_object();
  q->due_of = json_object();
  lp_metrics *m = opts->metrics ? opts->metrics : lp_metrics_default();
  q->m_depth =
      lp_metrics_gauge(m, "luaprov_workqueue_depth", "Keys waiting in a work queue.", LP_LABELS("name"));
  q->m_adds =
      lp_metrics_counter(m, "luaprov_workqueue_adds_total", "Keys added to a work queue.", LP_LABELS("name"));
  q->m_retries = lp_metrics_counter(m, "luaprov_workqueue_retries_total",
                                    "Rate-limited requeues of a work queue.", LP_LABELS("name"));
  q->m_duration =
      lp_metrics_histogram(m, "luaprov_workqueue_work_duration_seconds",
                           "Seconds from a worker's start to its done.", LP_LABELS("name"), NULL, 0);
  set_depth(q);
  uv_timer_init(loop, &q->timer);
  uv_idle_init(loop, &q->idle);
  q->timer.data = q->idle.data = q;
  q->handles_open = 2;
  return q;
}

static void on_handle_closed(uv_handle_t *h) {
  lp_workqueue *q = h->data;
  if (--q->handles_open) return;
  void (*cb)(void *) = q->on_closed;
  void *ud = q->on_closed_ud;
  while (q->len) free(ring_pop(q));
  free(q->ring);
  while (q->nheap) free(heap_pop(q).key);
  free(q->heap);
  json_decref(q->dirty);
  json_decref(q->failures);
  json_decref(q->due_of);
  free(q->slots);
  free(q->name);
  free(q);
  if (cb) cb(ud);
}

static void maybe_close(lp_workqueue *q) {
  if (!q->shutting || q->closing || q->active || (q->drain && q->len)) return;
  q->closing = 1;
  set_depth(q);
  uv_close((uv_handle_t *)&q->timer, on_handle_closed);
  uv_close((uv_handle_t *)&q->idle, on_handle_closed);
}

void lp_workqueue_shutdown(lp_workqueue *q, int drain, void (*on_closed)(void *ud), void *ud) {
  if (q->shutting) return;
  q->shutting = 1;
  q->paused = 0;
  q->drain = drain;
  q->on_closed = on_closed;
  q->on_closed_ud = ud;
  uv_timer_stop(&q->timer);
  while (q->nheap) free(heap_pop(q).key);
  json_object_clear(q->due_of);
  if (!drain) {
    while (q->len) {
      char *key = ring_pop(q);
      json_object_del(q->dirty, key);
      free(key);
    }
  }
  json_object_clear(q->dirty); /* nothing is queued again after a reconcile */
  set_depth(q);
  kick(q); /* a drain serves what a pause held back */
  maybe_close(q);
}
