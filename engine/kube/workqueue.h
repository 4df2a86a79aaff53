/* A rate-limited, deduplicating queue of string keys ("ns/name") served to N asynchronous workers on
 * the loop: client-go's workqueue (rate-limiting + delaying) for reconcilers that await HTTP.
 *
 * A key is in at most one of: waiting (queued), processing (a worker has it), or neither; plus a
 * "dirty" mark. The rules (client-go's):
 *   - adding a waiting key does nothing (no duplicate);
 *   - adding a key being processed marks it dirty: it is queued again once its worker calls
 *     lp_workqueue_done, so one key is never processed twice at the same time, whatever N is;
 *   - lp_workqueue_requeue_after adds the key after a delay; a key waiting for several delayed adds
 *     is added once, at the earliest time;
 *   - lp_workqueue_requeue_rate_limited adds it after the key's backoff, base * 2^failures (5 ms
 *     doubling to 1000 s by default) and counts a failure; lp_workqueue_forget resets the count.
 * Workers are called from the loop (never from inside lp_workqueue_add) with a key; the reconcile may
 * take any number of loop iterations and ends with exactly one lp_workqueue_done for that key.
 *
 * Metrics (opts.metrics, or the default registry), by queue name: luaprov_workqueue_depth (keys
 * waiting), luaprov_workqueue_adds_total (adds that queued or marked a key), luaprov_workqueue_retries_total
 * (rate-limited requeues), luaprov_workqueue_work_duration_seconds (from the worker's call to done).
 * Loop thread only. */
#ifndef LUAPROV_KUBE_WORKQUEUE_H
#define LUAPROV_KUBE_WORKQUEUE_H

#include <uv.h>

#include "core/metrics.h"

typedef struct lp_workqueue lp_workqueue;

/* How a reconcile ended. */
typedef enum {
  LP_WORKQUEUE_SUCCESS = 0, /* forget the key's failures (a requeue_after already asked for still runs) */
  LP_WORKQUEUE_RETRY,       /* a failure: lp_workqueue_requeue_rate_limited */
} lp_workqueue_result;

/* Reconciles key (owned by the queue, valid until lp_workqueue_done for it). Must end, now or later,
 * with lp_workqueue_done(q, key, result). */
typedef void (*lp_workqueue_work_fn)(lp_workqueue *q, const char *key, void *ud);

typedef struct lp_workqueue_opts {
  const char *name;          /* the metrics label and log field; required */
  unsigned workers;          /* keys processed at once; 0 = 1 */
  double backoff_base_s;     /* 0 = 0.005 */
  double backoff_max_s;      /* 0 = 1000 */
  lp_metrics *metrics;       /* NULL = lp_metrics_default() */
  lp_workqueue_work_fn work; /* required */
  void *ud;
} lp_workqueue_opts;

/* Creates an empty queue (opts and its name copied). Release with lp_workqueue_shutdown. */
lp_workqueue *lp_workqueue_new(uv_loop_t *loop, const lp_workqueue_opts *opts);

/* Adds key (copied). Returns 1 when the key was queued or marked for after its reconcile, 0 when it
 * was already waiting (or the queue is shutting down). */
int lp_workqueue_add(lp_workqueue *q, const char *key);

/* Adds key after seconds (<= 0: now). */
void lp_workqueue_requeue_after(lp_workqueue *q, const char *key, double seconds);

/* Adds key after its backoff and counts a failure (and a retry in the metrics). */
void lp_workqueue_requeue_rate_limited(lp_workqueue *q, const char *key);

/* Resets key's failure count, so its next rate-limited requeue waits the base delay again. */
void lp_workqueue_forget(lp_workqueue *q, const char *key);

/* The key's failure count since the last forget. */
unsigned lp_workqueue_num_requeues(const lp_workqueue *q, const char *key);

/* The backoff after failures failures: base * 2^failures, capped at max (opts' defaults apply). */
double lp_workqueue_backoff_seconds(const lp_workqueue_opts *opts, unsigned failures);

/* Ends the reconcile of key, which a worker was given: frees the worker, applies result, and queues the
 * key again when it was added meanwhile. A key not being processed is a programming error: logged and
 * ignored. May be called from inside the work callback. */
void lp_workqueue_done(lp_workqueue *q, const char *key, lp_workqueue_result result);

/* paused != 0: no key is handed to a worker until it is called again with 0. Adds, delayed adds and
 * requeues still queue keys (deduplicated as ever); reconciles in flight finish. Resuming serves what
 * waits. lp_workqueue_shutdown ends a pause. */
void lp_workqueue_pause(lp_workqueue *q, int paused);

/* Calls fn(key, ud) for the keys waiting, in the order workers will be given them, until fn returns 0 or
 * none is left; keys delayed (requeue_after, backoff) are not waiting yet. For a reconciler that reads
 * ahead (the drift controller looks up, in one cloud call, the instances of the keys served next). fn
 * must not add, requeue or finish keys. Returns how many keys fn was called with. */
size_t lp_workqueue_each_waiting(const lp_workqueue *q, int (*fn)(const char *key, void *ud), void *ud);

/* Keys waiting, and keys being processed. */
size_t lp_workqueue_len(const lp_workqueue *q);
size_t lp_workqueue_active(const lp_workqueue *q);
int lp_workqueue_shutting_down(const lp_workqueue *q);

/* Stops the queue: adds are refused and delayed adds dropped at once. drain != 0 keeps serving the keys
 * already waiting; drain == 0 drops them. Either way reconciles in flight finish (their done is still
 * required); then the queue frees itself and on_closed (may be NULL) runs. Do not use q after on_closed.
 * Safe from inside the work callback. */
void lp_workqueue_shutdown(lp_workqueue *q, int drain, void (*on_closed)(void *ud), void *ud);

#endif
