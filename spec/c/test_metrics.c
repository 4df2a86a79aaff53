/* Metrics registry: the exact Prometheus 0.0.4 text, series lookup, re-registration and misuse. */
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/metrics.h"

static void check_render(lp_metrics *m, const char *expected) {
  size_t len = 0;
  char *text = lp_metrics_render(m, &len);
  CHECK_STR(text, expected);
  CHECK_INT(len, strlen(expected));
  free(text);
}

static void test_empty_registry(void) {
  lp_metrics *m = lp_metrics_new();
  check_render(m, "");
  lp_metrics_free(m);
}

static void test_counters(void) {
  lp_metrics *m = lp_metrics_new();
  lp_metric *plain = lp_metrics_counter(m, "luaprov_reloads_total", "Script reloads.", LP_NO_LABELS);
  lp_metric *runs = lp_metrics_counter(m, "engine_script_runs_total", "Lua handler invocations by outcome.",
                                       LP_LABELS("script", "result"));
  /* before any event: the label-free counter shows 0, the labelled one only its header */
  check_render(m, "# HELP luaprov_reloads_total Script reloads.\n"
                  "# TYPE luaprov_reloads_total counter\n"
                  "luaprov_reloads_total 0\n"
                  "# HELP engine_script_runs_total Lua handler invocations by outcome.\n"
                  "# TYPE engine_script_runs_total counter\n");

  lp_counter_inc(plain, LP_NO_LABELS);
  lp_counter_add(plain, NULL, 2.5);
  for (int i = 0; i < 1027; i++) lp_counter_inc(runs, LP_LABELS("drift", "ok"));
  lp_counter_inc(runs, LP_LABELS("drift", "error"));
  lp_counter_add(runs, LP_LABELS("repair", "ok"), 0);
  check_render(m, "# HELP luaprov_reloads_total Script reloads.\n"
                  "# TYPE luaprov_reloads_total counter\n"
                  "luaprov_reloads_total 3.5\n"
                  "# HELP engine_script_runs_total Lua handler invocations by outcome.\n"
                  "# TYPE engine_script_runs_total counter\n"
                  "engine_script_runs_total{script=\"drift\",result=\"ok\"} 1027\n"
                  "engine_script_runs_total{script=\"drift\",result=\"error\"} 1\n"
                  "engine_script_runs_total{script=\"repair\",result=\"ok\"} 0\n");

  CHECK(lp_metric_value(plain, LP_NO_LABELS) == 3.5);
  CHECK(lp_metric_value(runs, LP_LABELS("drift", "ok")) == 1027);
  CHECK(lp_metric_value(runs, LP_LABELS("drift", "unknown")) == 0);
  /* asking for a value does not create the series */
  char *text = lp_metrics_render(m, NULL);
  CHECK(strstr(text, "unknown") == NULL);
  free(text);
  lp_metrics_free(m);
}

static void test_gauges_and_special_values(void) {
  lp_metrics *m = lp_metrics_new();
  lp_metric *leader = lp_metrics_gauge(m, "luaprov_leader", "1 while this replica leads.", LP_NO_LABELS);
  lp_metric *g = lp_metrics_gauge(m, "luaprov_things", "", LP_LABELS("kind"));
  lp_gauge_set(leader, LP_NO_LABELS, 1);
  lp_gauge_set(g, LP_LABELS("a"), -2);
  lp_gauge_add(g, LP_LABELS("a"), 0.5);
  lp_gauge_add(g, LP_LABELS("b"), 3);
  lp_gauge_set(g, LP_LABELS("nan"), NAN);
  lp_gauge_set(g, LP_LABELS("pinf"), INFINITY);
  lp_gauge_set(g, LP_LABELS("ninf"), -INFINITY);
  lp_gauge_set(g, LP_LABELS("small"), 1e-7);
  lp_gauge_set(g, LP_LABELS("third"), 1.0 / 3);
  check_render(m, "# HELP luaprov_leader 1 while this replica leads.\n"
                  "# TYPE luaprov_leader gauge\n"
                  "luaprov_leader 1\n"
                  "# TYPE luaprov_things gauge\n"
                  "luaprov_things{kind=\"a\"} -1.5\n"
                  "luaprov_things{kind=\"b\"} 3\n"
                  "luaprov_things{kind=\"nan\"} NaN\n"
                  "luaprov_things{kind=\"pinf\"} +Inf\n"
                  "luaprov_things{kind=\"ninf\"} -Inf\n"
                  "luaprov_things{kind=\"small\"} 1e-07\n"
                  "luaprov_things{kind=\"third\"} 0.3333333333333333\n");
  CHECK(lp_metric_value(g, LP_LABELS("a")) == -1.5);
  lp_metrics_free(m);
}

static void test_histograms(void) {
  lp_metrics *m = lp_metrics_new();
  const double b[] = {0.01, 0.1, 1};
  lp_metric *h = lp_metrics_histogram(m, "engine_script_duration_seconds", "Handler run time.",
                                      LP_LABELS("script"), b, 3);
  lp_metric *bare =
      lp_metrics_histogram(m, "luaprov_reload_seconds", NULL, LP_NO_LABELS, (const double[]){1, INFINITY}, 2);
  lp_histogram_observe(h, LP_LABELS("drift"), 0.005);
  lp_histogram_observe(h, LP_LABELS("drift"), 0.01); /* bounds are inclusive */
  lp_histogram_observe(h, LP_LABELS("drift"), 0.5);
  lp_histogram_observe(h, LP_LABELS("drift"), 7);
  lp_histogram_observe(h, LP_LABELS("repair"), 0.05);
  check_render(m, "# HELP engine_script_duration_seconds Handler run time.\n"
                  "# TYPE engine_script_duration_seconds histogram\n"
                  "engine_script_duration_seconds_bucket{script=\"drift\",le=\"0.01\"} 2\n"
                  "engine_script_duration_seconds_bucket{script=\"drift\",le=\"0.1\"} 2\n"
                  "engine_script_duration_seconds_bucket{script=\"drift\",le=\"1\"} 3\n"
                  "engine_script_duration_seconds_bucket{script=\"drift\",le=\"+Inf\"} 4\n"
                  "engine_script_duration_seconds_sum{script=\"drift\"} 7.515\n"
                  "engine_script_duration_seconds_count{script=\"drift\"} 4\n"
                  "engine_script_duration_seconds_bucket{script=\"repair\",le=\"0.01\"} 0\n"
                  "engine_script_duration_seconds_bucket{script=\"repair\",le=\"0.1\"} 1\n"
                  "engine_script_duration_seconds_bucket{script=\"repair\",le=\"1\"} 1\n"
                  "engine_script_duration_seconds_bucket{script=\"repair\",le=\"+Inf\"} 1\n"
                  "engine_script_duration_seconds_sum{script=\"repair\"} 0.05\n"
                  "engine_script_duration_seconds_count{script=\"repair\"} 1\n"
                  "# TYPE luaprov_reload_seconds histogram\n"
                  "luaprov_reload_seconds_bucket{le=\"1\"} 0\n"
                  "luaprov_reload_seconds_bucket{le=\"+Inf\"} 0\n"
                  "luaprov_reload_seconds_sum 0\n"
                  "luaprov_reload_seconds_count 0\n");
  CHECK(lp_metric_value(h, LP_LABELS("drift")) == 4);
  CHECK(lp_metric_value(bare, LP_NO_LABELS) == 0);
  lp_metrics_free(m);
}

static void test_default_buckets(void) {
  lp_metrics *m = lp_metrics_new();
  lp_metric *h = lp_metrics_histogram(m, "d_seconds", "d", LP_NO_LABELS, NULL, 0);
  lp_histogram_observe(h, LP_NO_LABELS, 0.3);
  char *text = lp_metrics_render(m, NULL);
  CHECK_CONTAINS(text, "d_seconds_bucket{le=\"0.005\"} 0\nd_seconds_bucket{le=\"0.01\"} 0\n"
                       "d_seconds_bucket{le=\"0.025\"} 0\nd_seconds_bucket{le=\"0.05\"} 0\n"
                       "d_seconds_bucket{le=\"0.1\"} 0\nd_seconds_bucket{le=\"0.25\"} 0\n"
                       "d_seconds_bucket{le=\"0.5\"} 1\nd_seconds_bucket{le=\"1\"} 1\n"
                       "d_seconds_bucket{le=\"2.5\"} 1\nd_seconds_bucket{le=\"5\"} 1\n"
                       "d_seconds_bucket{le=\"10\"} 1\nd_seconds_bucket{le=\"+Inf\"} 1\n"
                       "d_seconds_sum 0.3\nd_seconds_count 1\n");
  free(text);
  lp_metrics_free(m);
}

static void test_escaping(void) {
  lp_metrics *m = lp_metrics_new();
  lp_metric *c =
      lp_metrics_counter(m, "esc_total", "Back\\slash, \"quotes\" stay,\nnew line.", LP_LABELS("v"));
  lp_counter_inc(c, LP_LABELS("a\\b \"q\"\nz"));
  check_render(m, "# HELP esc_total Back\\\\slash, \"quotes\" stay,\\nnew line.\n"
                  "# TYPE esc_total counter\n"
                  "esc_total{v=\"a\\\\b \\\"q\\\"\\nz\"} 1\n");
  CHECK(lp_metric_value(c, LP_LABELS("a\\b \"q\"\nz")) == 1);
  lp_metrics_free(m);
}

static void test_reregistration(void) {
  lp_metrics *m = lp_metrics_new();
  lp_metric *a = lp_metrics_counter(m, "x_total", "first help", LP_LABELS("cache"));
  lp_metric *b = lp_metrics_counter(m, "x_total", "other help is ignored", LP_LABELS("cache"));
  CHECK(a == b);
  lp_counter_inc(b, LP_LABELS("c1"));
  CHECK(lp_metric_value(a, LP_LABELS("c1")) == 1);
  const double bk[] = {1, 2};
  lp_metric *h1 = lp_metrics_histogram(m, "h_seconds", "h", LP_NO_LABELS, bk, 2);
  CHECK(h1 == lp_metrics_histogram(m, "h_seconds", "h", LP_NO_LABELS, bk, 2));
  check_render(m, "# HELP x_total first help\n"
                  "# TYPE x_total counter\n"
                  "x_total{cache=\"c1\"} 1\n"
                  "# HELP h_seconds h\n"
                  "# TYPE h_seconds histogram\n"
                  "h_seconds_bucket{le=\"1\"} 0\n"
                  "h_seconds_bucket{le=\"2\"} 0\n"
                  "h_seconds_bucket{le=\"+Inf\"} 0\n"
                  "h_seconds_sum 0\n"
                  "h_seconds_count 0\n");
  lp_metrics_free(m);
}

/* Many series in one family: the hash table grows and every series stays findable. */
static void test_many_series(void) {
  lp_metrics *m = lp_metrics_new();
  lp_metric *c = lp_metrics_counter(m, "many_total", "m", LP_LABELS("a", "b"));
  char a[16], b[16];
  for (int round = 1; round <= 2; round++) {
    for (int i = 0; i < 5000; i++) {
      snprintf(a, sizeof a, "%d", i / 10);
      snprintf(b, sizeof b, "%d", i % 10);
      lp_counter_add(c, LP_LABELS(a, b), i);
    }
  }
  int wrong = 0;
  for (int i = 0; i < 5000; i++) {
    snprintf(a, sizeof a, "%d", i / 10);
    snprintf(b, sizeof b, "%d", i % 10);
    wrong += lp_metric_value(c, LP_LABELS(a, b)) != 2.0 * i;
  }
  CHECK_INT(wrong, 0);
  /* ("1","23") and ("12","3") are different series */
  CHECK(lp_metric_value(c, LP_LABELS("1", "23")) == 0);
  lp_metrics_free(m);
}

static void test_default_registry(void) {
  lp_metrics *d = lp_metrics_default();
  CHECK(d != NULL);
  CHECK(d == lp_metrics_default());
}

typedef void (*misuse_fn)(lp_metrics *m);

/* Runs fn in a child and reports whether it aborted; stderr (the log line saying why) is silenced. */
static int aborts(misuse_fn fn) {
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "w", stderr);
    lp_metrics *m = lp_metrics_new();
    fn(m);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void conflicting_type(lp_metrics *m) {
  lp_metrics_counter(m, "dup_total", "c", LP_NO_LABELS);
  lp_metrics_gauge(m, "dup_total", "g", LP_NO_LABELS);
}
static void conflicting_labels(lp_metrics *m) {
  lp_metrics_counter(m, "dup_total", "c", LP_LABELS("a"));
  lp_metrics_counter(m, "dup_total", "c", LP_LABELS("b"));
}
static void conflicting_buckets(lp_metrics *m) {
  lp_metrics_histogram(m, "h", "h", LP_NO_LABELS, (const double[]){1, 2}, 2);
  lp_metrics_histogram(m, "h", "h", LP_NO_LABELS, (const double[]){1, 3}, 2);
}
static void bad_metric_name(lp_metrics *m) {
  lp_metrics_counter(m, "9lives", "x", LP_NO_LABELS);
}
static void bad_metric_char(lp_metrics *m) {
  lp_metrics_counter(m, "a-b", "x", LP_NO_LABELS);
}
static void bad_label_colon(lp_metrics *m) {
  lp_metrics_counter(m, "ok:name", "x", LP_LABELS("a:b"));
}
static void reserved_label(lp_metrics *m) {
  lp_metrics_counter(m, "ok", "x", LP_LABELS("__name"));
}
static void le_on_histogram(lp_metrics *m) {
  lp_metrics_histogram(m, "ok", "x", LP_LABELS("le"), NULL, 0);
}
static void duplicate_label(lp_metrics *m) {
  lp_metrics_gauge(m, "ok", "x", LP_LABELS("a", "a"));
}
static void unsorted_buckets(lp_metrics *m) {
  lp_metrics_histogram(m, "ok", "x", LP_NO_LABELS, (const double[]){2, 1}, 2);
}
static void wrong_value_count(lp_metrics *m) {
  lp_counter_inc(lp_metrics_counter(m, "ok", "x", LP_LABELS("a", "b")), LP_LABELS("only one"));
}
static void negative_counter(lp_metrics *m) {
  lp_counter_add(lp_metrics_counter(m, "ok", "x", LP_NO_LABELS), NULL, -1);
}
static void wrong_kind(lp_metrics *m) {
  lp_gauge_set(lp_metrics_counter(m, "ok", "x", LP_NO_LABELS), NULL, 1);
}
static void valid_use(lp_metrics *m) {
  lp_metrics_counter(m, "ns:sub_total", "x", LP_LABELS("_a1", "B"));
  lp_metrics_free(m);
}

static void test_misuse_aborts(void) {
  CHECK(aborts(conflicting_type));
  CHECK(aborts(conflicting_labels));
  CHECK(aborts(conflicting_buckets));
  CHECK(aborts(bad_metric_name));
  CHECK(aborts(bad_metric_char));
  CHECK(aborts(bad_label_colon));
  CHECK(aborts(reserved_label));
  CHECK(aborts(le_on_histogram));
  CHECK(aborts(duplicate_label));
  CHECK(aborts(unsorted_buckets));
  CHECK(aborts(wrong_value_count));
  CHECK(aborts(negative_counter));
  CHECK(aborts(wrong_kind));
  CHECK(!aborts(valid_use));
}

int main(void) {
  RUN(test_empty_registry);
  RUN(test_counters);
  RUN(test_gauges_and_special_values);
  RUN(test_histograms);
  RUN(test_default_buckets);
  RUN(test_escaping);
  RUN(test_reregistration);
  RUN(test_many_series);
  RUN(test_default_registry);
  RUN(test_misuse_aborts);
  return check_summary();
}
