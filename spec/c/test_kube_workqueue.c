/* The work queue (engine/kube/workqueue.h) on a real loop, no server: dedup while waiting, re-queue
 * while processing (once, after done, never concurrently even with 4 workers), rate-limited backoff
 * that grows and resets on forget, requeue_after, 1,000 keys by 4 workers each exactly once, shutdown
 * with and without draining, pausing, and the metrics. Reconciles finish asynchronously, from a uv_check. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "core/clock.h"
#include "kube/workqueue.h"

#define MAXKEYS 1000

static uv_loop_t loop;
static lp_metrics *metrics;
static lp_workqueue *q;

/* What the worker saw, per key index (keys are "k<i>"). */
static struct {
  int starts[MAXKEYS], running[MAXKEYS], overlaps;
  double started_at[MAXKEYS][8];
  int active, max_active, total;
  int hold;       /* keep reconciles open until released */
  int retry_left; /* k0 fails this many times */
  char order[4096];
  int closed;
} w;

/* Reconciles waiting to be finished by the check handle (async completion). */
static char *pending[MAXKEYS];
static int npending;
static uv_check_t finisher;

static int index_of(const char *key) {
  return atoi(key + 1);
}

static void work(lp_workqueue *wq, const char *key, void *ud) {
  int i = index_of(key);
  if (w.running[i]) w.overlaps++;
  w.running[i] = 1;
  if (w.starts[i] < 8) w.started_at[i][w.starts[i]] = lp_clock_monotonic();
  w.starts[i]++;
  w.total++;
  if (++w.active > w.max_active) w.max_active = w.active;
  size_t len = strlen(w.order);
  if (len + 16 < sizeof w.order) snprintf(w.order + len, sizeof w.order - len, "%s;", key);
  pending[npending++] = (char *)key; /* owned by the queue until done */
}

static void finish_all(uv_check_t *h) {
  if (w.hold) return;
  int n = npending;
  char *keys[MAXKEYS];
  memcpy(keys, pending, sizeof keys[0] * n);
  npending = 0;
  for (int i = 0; i < n; i++) {
    int k = index_of(keys[i]);
    w.running[k] = 0;
    w.active--;
    lp_workqueue_result r = LP_WORKQUEUE_SUCCESS;
    if (k == 0 && w.retry_left > 0) {
      w.retry_left--;
      r = LP_WORKQUEUE_RETRY;
    }
    lp_workqueue_done(q, keys[i], r);
  }
}

static void setup(unsigned workers) {
  memset(&w, 0, sizeof w);
  npending = 0;
  uv_loop_init(&loop);
  metrics = lp_metrics_new();
  uv_check_init(&loop, &finisher);
  uv_check_start(&finisher, finish_all);
  lp_workqueue_opts o = {.name = "test", .workers = workers, .metrics = metrics, .work = work};
  q = lp_workqueue_new(&loop, &o);
}

/* Runs the loop until cond holds or ms elapse; returns cond. */
#define RUN_UNTIL(cond, ms)                                                                                  \
  do {                                                                                                       \
    double until_ = lp_clock_monotonic() + (ms) / 1000.0;                                                    \
    while (!(cond) && lp_clock_monotonic() < until_) uv_run(&loop, UV_RUN_NOWAIT);                           \
  } while (0)

static void on_closed(void *ud) {
  w.closed = 1;
}

static void teardown(void) {
  if (!w.closed) lp_workqueue_shutdown(q, 0, on_closed, NULL);
  uv_close((uv_handle_t *)&finisher, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(w.closed);
  CHECK_INT(uv_loop_close(&loop), 0);
  lp_metrics_free(metrics);
}

static double metric(const char *name) {
  char *text = lp_metrics_render(metrics, NULL);
  char pattern[128];
  snprintf(pattern, sizeof pattern, "%s{name=\"test\"} ", name);
  const char *at = strstr(text, pattern);
  double v = at ? atof(at + strlen(pattern)) : -1;
  free(text);
  return v;
}

static void test_dedup_while_waiting(void) {
  setup(4);
  CHECK_INT(lp_workqueue_add(q, "k1"), 1);
  CHECK_INT(lp_workqueue_add(q, "k1"), 0);
  CHECK_INT(lp_workqueue_add(q, "k2"), 1);
  CHECK_INT(lp_workqueue_add(q, "k1"), 0);
  CHECK_INT(lp_workqueue_len(q), 2);
  CHECK_INT(w.total, 0); /* workers never run inside add */
  CHECK(metric("luaprov_workqueue_depth") == 2);
  RUN_UNTIL(w.total == 2 && lp_workqueue_active(q) == 0, 1000);
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK_STR(w.order, "k1;k2;");
  CHECK_INT(w.starts[1], 1);
  CHECK(metric("luaprov_workqueue_adds_total") == 2);
  CHECK(metric("luaprov_workqueue_depth") == 0);
  CHECK(metric("luaprov_workqueue_work_duration_seconds_count") == 2);
  teardown();
}

static void test_requeue_while_processing(void) {
  setup(4);
  w.hold = 1;
  lp_workqueue_add(q, "k3");
  RUN_UNTIL(w.starts[3] == 1, 1000);
  CHECK_INT(lp_workqueue_active(q), 1);
  CHECK_INT(lp_workqueue_add(q, "k3"), 1); /* marked for after */
  CHECK_INT(lp_workqueue_add(q, "k3"), 0); /* once */
  CHECK_INT(lp_workqueue_len(q), 0);
  for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK_INT(w.starts[3], 1); /* three free workers, yet not twice at once */
  w.hold = 0;
  RUN_UNTIL(w.starts[3] == 2 && lp_workqueue_active(q) == 0, 1000);
  for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK_INT(w.starts[3], 2);
  CHECK_INT(w.overlaps, 0);
  lp_workqueue_done(q, "k3", LP_WORKQUEUE_SUCCESS); /* not processing: logged, ignored */
  CHECK_INT(lp_workqueue_active(q), 0);
  teardown();
}

/* Four workers, eight keys, each reconcile re-adding two others: keys churn while processed. */
static void churn_work(lp_workqueue *wq, const char *key, void *ud) {
  work(wq, key, ud);
  if (w.total < 2000) {
    char other[16];
    snprintf(other, sizeof other, "k%d", rand() % 8);
    lp_workqueue_add(wq, other);
    lp_workqueue_add(wq, key);
  }
}

static void test_never_concurrent(void) {
  memset(&w, 0, sizeof w);
  npending = 0;
  uv_loop_init(&loop);
  metrics = lp_metrics_new();
  uv_check_init(&loop, &finisher);
  uv_check_start(&finisher, finish_all);
  lp_workqueue_opts o = {.name = "test", .workers = 4, .metrics = metrics, .work = churn_work};
  q = lp_workqueue_new(&loop, &o);
  srand(7);
  for (int i = 0; i < 8; i++) {
    char key[8];
    snprintf(key, sizeof key, "k%d", i);
    lp_workqueue_add(q, key);
  }
  RUN_UNTIL(w.total >= 2000 && lp_workqueue_active(q) == 0 && lp_workqueue_len(q) == 0, 10000);
  CHECK(w.total >= 2000);
  CHECK_INT(w.overlaps, 0);
  CHECK_INT(w.max_active, 4);
  teardown();
}

static void test_rate_limited_backoff(void) {
  setup(4);
  lp_workqueue_opts o = {0};
  CHECK(lp_workqueue_backoff_seconds(&o, 0) == 0.005);
  CHECK(lp_workqueue_backoff_seconds(&o, 3) == 0.04);
  CHECK(lp_workqueue_backoff_seconds(&o, 30) == 1000.0);
  CHECK(lp_workqueue_backoff_seconds(&o, 4000000000u) == 1000.0);

  w.retry_left = 5; /* k0 fails 5 times: waits 5, 10, 20, 40, 80 ms */
  lp_workqueue_add(q, "k0");
  RUN_UNTIL(w.starts[0] == 6, 3000);
  CHECK_INT(w.starts[0], 6);
  CHECK_INT(lp_workqueue_num_requeues(q, "k0"), 0); /* the sixth succeeded: forgotten */
  CHECK(metric("luaprov_workqueue_retries_total") == 5);
  double prev = 0;
  for (int i = 1; i < 6; i++) {
    double gap = w.started_at[0][i] - w.started_at[0][i - 1], want = 0.005 * (1 << (i - 1));
    CHECK(gap >= want - 0.0015); /* uv timers have millisecond resolution */
    CHECK(gap > prev);
    prev = gap;
  }
  /* a second round starts from the base delay again: success forgot the failures */
  w.retry_left = 2;
  lp_workqueue_add(q, "k0");
  RUN_UNTIL(w.starts[0] == 9, 3000);
  CHECK_INT(w.starts[0], 9);
  double gap = w.started_at[0][7] - w.started_at[0][6];
  CHECK(gap >= 0.0035);
  CHECK(gap < 0.06); /* 5 ms, far from the 160 ms a sixth failure in a row would wait */
  /* failures accumulate without a worker, and forget resets them */
  lp_workqueue_requeue_rate_limited(q, "k9");
  lp_workqueue_requeue_rate_limited(q, "k9");
  lp_workqueue_requeue_rate_limited(q, "k9");
  CHECK_INT(lp_workqueue_num_requeues(q, "k9"), 3);
  lp_workqueue_forget(q, "k9");
  CHECK_INT(lp_workqueue_num_requeues(q, "k9"), 0);
  lp_workqueue_requeue_rate_limited(q, "k9");
  CHECK_INT(lp_workqueue_num_requeues(q, "k9"), 1);
  RUN_UNTIL(w.starts[9] == 1 && lp_workqueue_active(q) == 0, 1000);
  RUN_UNTIL(0, 50);
  CHECK_INT(w.starts[9], 1); /* four delayed adds, the earliest wins, one reconcile */
  CHECK(metric("luaprov_workqueue_retries_total") == 11);
  teardown();
}

static void test_requeue_after(void) {
  setup(2);
  double t0 = lp_clock_monotonic();
  lp_workqueue_requeue_after(q, "k5", 0.2);
  lp_workqueue_requeue_after(q, "k5", 0.06); /* earlier: wins */
  lp_workqueue_requeue_after(q, "k5", 0.5);  /* later: ignored */
  lp_workqueue_requeue_after(q, "k6", 0.03);
  CHECK_INT(lp_workqueue_len(q), 0);
  RUN_UNTIL(w.starts[5] == 1, 2000);
  double waited = w.started_at[5][0] - t0;
  CHECK(waited >= 0.059);
  CHECK(waited < 0.19);
  CHECK_STR(w.order, "k6;k5;");
  RUN_UNTIL(0, 600); /* the stale 0.2 s and 0.5 s entries add nothing */
  CHECK_INT(w.starts[5], 1);
  lp_workqueue_requeue_after(q, "k7", 0); /* no delay: an add */
  CHECK_INT(lp_workqueue_len(q), 1);
  teardown();
}

static void test_thousand_keys(void) {
  setup(4);
  char key[16];
  for (int i = 0; i < MAXKEYS; i++) {
    snprintf(key, sizeof key, "k%d", i);
    CHECK_INT(lp_workqueue_add(q, key), 1);
  }
  CHECK_INT(lp_workqueue_len(q), MAXKEYS);
  RUN_UNTIL(w.total == MAXKEYS && lp_workqueue_active(q) == 0, 10000);
  int once = 0;
  for (int i = 0; i < MAXKEYS; i++) once += w.starts[i] == 1;
  CHECK_INT(once, MAXKEYS);
  CHECK_INT(w.overlaps, 0);
  CHECK_INT(w.max_active, 4);
  CHECK(metric("luaprov_workqueue_adds_total") == MAXKEYS);
  CHECK(metric("luaprov_workqueue_work_duration_seconds_count") == MAXKEYS);
  CHECK(metric("luaprov_workqueue_depth") == 0);
  teardown();
}

/* Shutdown: without drain the waiting keys are dropped but the reconcile in flight must still end;
 * with drain every waiting key is served first. Adds after shutdown are refused. */
static void test_shutdown(void) {
  for (int drain = 0; drain < 2; drain++) {
    setup(1);
    w.hold = 1;
    for (int i = 0; i < 5; i++) {
      char key[8];
      snprintf(key, sizeof key, "k%d", i);
      lp_workqueue_add(q, key);
    }
    lp_workqueue_requeue_after(q, "k9", 0.01);
    RUN_UNTIL(w.total == 1, 1000);
    lp_workqueue_shutdown(q, drain, on_closed, NULL);
    CHECK(lp_workqueue_shutting_down(q));
    CHECK_INT(lp_workqueue_add(q, "k8"), 0);
    RUN_UNTIL(0, 50);
    CHECK(!w.closed); /* k0 is still being reconciled */
    w.hold = 0;
    RUN_UNTIL(w.closed, 1000);
    CHECK(w.closed);
    CHECK_INT(w.total, drain ? 5 : 1);
    CHECK_INT(w.starts[9], 0);
    teardown();
  }
}

/* Paused: the reconcile in flight ends, keys added, requeued and re-added meanwhile wait (each once);
 * resuming serves them. A drain ends a pause. */
static void test_pause(void) {
  setup(2);
  w.hold = 1;
  lp_workqueue_add(q, "k0");
  RUN_UNTIL(w.total == 1, 1000);
  lp_workqueue_pause(q, 1);
  lp_workqueue_add(q, "k1");
  lp_workqueue_add(q, "k1");
  lp_workqueue_add(q, "k0"); /* being processed: queued again after its done */
  lp_workqueue_requeue_after(q, "k2", 0.01);
  w.hold = 0;
  RUN_UNTIL(0, 100);
  CHECK_INT(w.total, 1);
  CHECK_INT(lp_workqueue_active(q), 0);
  CHECK_INT(lp_workqueue_len(q), 3);
  lp_workqueue_pause(q, 0);
  RUN_UNTIL(w.total == 4, 1000);
  CHECK_STR(w.order, "k0;k1;k0;k2;");

  lp_workqueue_pause(q, 1);
  lp_workqueue_add(q, "k3");
  lp_workqueue_shutdown(q, 1, on_closed, NULL);
  RUN_UNTIL(w.closed, 1000);
  CHECK_INT(w.starts[3], 1);
  teardown();
}

/* What each_waiting's fn saw, and after how many keys it says stop (0: never). */
static char seen[1024];
static int stop_after, seen_count;

static int collect(const char *key, void *ud) {
  (void)ud;
  size_t len = strlen(seen);
  snprintf(seen + len, sizeof seen - len, "%s;", key);
  return !stop_after || ++seen_count < stop_after;
}

static void peek(int stop, size_t want_calls, const char *want) {
  seen[0] = '\0';
  stop_after = stop;
  seen_count = 0;
  CHECK_INT(lp_workqueue_each_waiting(q, collect, NULL), want_calls);
  CHECK_STR(seen, want);
}

/* The keys waiting, in the order workers get them: not the one being processed, not a delayed one; the
 * ring's wrap-around kept. */
static void test_each_waiting(void) {
  setup(1);
  w.hold = 1;
  peek(0, 0, "");
  for (int i = 0; i < 5; i++) {
    char key[8];
    snprintf(key, sizeof key, "k%d", i);
    lp_workqueue_add(q, key);
  }
  lp_workqueue_requeue_after(q, "k9", 60);
  RUN_UNTIL(w.total == 1, 1000);
  peek(0, 4, "k1;k2;k3;k4;");
  peek(2, 2, "k1;k2;");
  w.hold = 0;
  RUN_UNTIL(w.total == 5 && lp_workqueue_active(q) == 0, 1000);
  peek(0, 0, "");
  w.hold = 1;
  for (int i = 10; i < 24; i++) { /* the ring of 16 starts at 5 now: these wrap around its end */
    char key[8];
    snprintf(key, sizeof key, "k%d", i);
    lp_workqueue_add(q, key);
  }
  RUN_UNTIL(w.total == 6, 1000);
  peek(0, 13, "k11;k12;k13;k14;k15;k16;k17;k18;k19;k20;k21;k22;k23;");
  lp_workqueue_shutdown(q, 0, on_closed, NULL);
  w.hold = 0;
  RUN_UNTIL(w.closed, 1000);
  teardown();
}

int main(void) {
  RUN(test_dedup_while_waiting);
  RUN(test_requeue_while_processing);
  RUN(test_never_concurrent);
  RUN(test_rate_limited_backoff);
  RUN(test_requeue_after);
  RUN(test_thousand_keys);
  RUN(test_shutdown);
  RUN(test_pause);
  RUN(test_each_waiting);
  return check_summary();
}
