/* TTL + LRU cache: values, expiry on an injected clock, eviction order, metrics, the named registry. */
#include "check.h"
#include "core/cache.h"

static double fake_now;
static double fake_clock(void *ud) {
  (void)ud;
  return fake_now;
}

static lp_cache *new_cache(const char *name, double ttl, size_t max, lp_metrics *m) {
  lp_cache *c = lp_cache_new(name, ttl, max, m);
  fake_now = 1000;
  lp_cache_set_clock(c, fake_clock, NULL);
  return c;
}

static void set_str(lp_cache *c, const char *k, const char *v, double ttl) {
  lp_cache_set(c, k, strlen(k), v, strlen(v), ttl);
}

/* The value under key as a string, or NULL on a miss. */
static const char *get_str(lp_cache *c, const char *k) {
  size_t n = 99;
  const char *v = lp_cache_get(c, k, strlen(k), &n);
  if (v) CHECK_INT(n, strlen(v));
  return v;
}

static void test_set_get_delete(void) {
  lp_cache *c = new_cache("basic", 60, 10, NULL);
  CHECK_STR(lp_cache_name(c), "basic");
  CHECK(lp_cache_ttl(c) == 60);
  CHECK(get_str(c, "a") == NULL);
  set_str(c, "a", "1", 0);
  set_str(c, "b", "two", 0);
  CHECK_STR(get_str(c, "a"), "1");
  CHECK_STR(get_str(c, "b"), "two");
  set_str(c, "a", "replaced", 0);
  CHECK_STR(get_str(c, "a"), "replaced");
  CHECK_INT(lp_cache_size(c), 2);
  CHECK_INT(lp_cache_delete(c, "a", 1), 1);
  CHECK_INT(lp_cache_delete(c, "a", 1), 0);
  CHECK(get_str(c, "a") == NULL);
  CHECK_INT(lp_cache_size(c), 1);
  /* an empty value is a hit, not a miss */
  set_str(c, "empty", "", 0);
  size_t n = 99;
  CHECK(lp_cache_get(c, "empty", 5, &n) != NULL);
  CHECK_INT(n, 0);
  /* the empty key is a key like any other */
  lp_cache_set(c, NULL, 0, "e", 1, 0);
  CHECK(lp_cache_get(c, "", 0, NULL) != NULL);
  lp_cache_free(c);
}

static void test_ttl_expiry(void) {
  lp_cache *c = new_cache("ttl", 10, 10, NULL);
  set_str(c, "k", "v", 0);
  fake_now += 9.999;
  CHECK_STR(get_str(c, "k"), "v");
  fake_now += 0.001; /* exactly at the deadline it is gone */
  CHECK(get_str(c, "k") == NULL);
  CHECK_INT(lp_cache_size(c), 0);

  /* replacing an entry restarts its lifetime; reading it does not */
  set_str(c, "k", "v1", 0);
  fake_now += 8;
  set_str(c, "k", "v2", 0);
  fake_now += 8;
  CHECK_STR(get_str(c, "k"), "v2");
  fake_now += 1.9;
  CHECK_STR(get_str(c, "k"), "v2");
  fake_now += 0.1;
  CHECK(get_str(c, "k") == NULL);

  /* an expired entry still counts as present for delete, and for size until it is dropped */
  set_str(c, "gone", "x", 0);
  fake_now += 100;
  CHECK_INT(lp_cache_size(c), 1);
  CHECK_INT(lp_cache_delete(c, "gone", 4), 1);
  lp_cache_free(c);
}

static void test_per_entry_ttl(void) {
  lp_cache *c = new_cache("per-entry", 10, 10, NULL);
  set_str(c, "short", "s", 1);
  set_str(c, "default", "d", 0);
  set_str(c, "negative", "n", -5); /* <= 0 means the cache default */
  set_str(c, "long", "l", 3600);
  fake_now += 1;
  CHECK(get_str(c, "short") == NULL);
  CHECK_STR(get_str(c, "default"), "d");
  fake_now += 9;
  CHECK(get_str(c, "default") == NULL);
  CHECK(get_str(c, "negative") == NULL);
  CHECK_STR(get_str(c, "long"), "l");
  fake_now += 3590;
  CHECK(get_str(c, "long") == NULL);
  lp_cache_free(c);
}

static void test_lru_eviction(void) {
  lp_cache *c = new_cache("lru", 60, 3, NULL);
  set_str(c, "a", "1", 0);
  set_str(c, "b", "2", 0);
  set_str(c, "c", "3", 0);
  set_str(c, "d", "4", 0); /* a is the least recently used */
  CHECK_INT(lp_cache_size(c), 3);
  CHECK(get_str(c, "a") == NULL);
  CHECK_STR(get_str(c, "b"), "2"); /* b is now the most recent: c goes next */
  set_str(c, "e", "5", 0);
  CHECK(get_str(c, "c") == NULL);
  CHECK_STR(get_str(c, "b"), "2");
  set_str(c, "d", "4'", 0); /* replacing refreshes too: e goes next */
  set_str(c, "f", "6", 0);
  CHECK(get_str(c, "e") == NULL);
  CHECK_STR(get_str(c, "b"), "2");
  CHECK_STR(get_str(c, "d"), "4'");
  CHECK_STR(get_str(c, "f"), "6");
  CHECK_INT(lp_cache_size(c), 3);
  lp_cache_free(c);
}

static void test_binary_keys_and_values(void) {
  lp_cache *c = new_cache("binary", 60, 10, NULL);
  const char k1[] = {'a', 0, 'b'}, k2[] = {'a', 0, 'c'}, k3[] = {'a'};
  const unsigned char v1[] = {0, 1, 2, 0, 255};
  lp_cache_set(c, k1, sizeof k1, v1, sizeof v1, 0);
  lp_cache_set(c, k2, sizeof k2, "two", 3, 0);
  lp_cache_set(c, k3, sizeof k3, "one", 3, 0);
  size_t n = 0;
  const unsigned char *got = lp_cache_get(c, k1, sizeof k1, &n);
  CHECK(got != NULL);
  CHECK_INT(n, sizeof v1);
  CHECK(got && memcmp(got, v1, sizeof v1) == 0);
  CHECK(got && got[n] == 0); /* the documented terminator after the bytes */
  const char *s = lp_cache_get(c, k2, sizeof k2, &n);
  CHECK(s && n == 3 && memcmp(s, "two", 3) == 0);
  s = lp_cache_get(c, k3, sizeof k3, &n);
  CHECK(s && n == 3 && memcmp(s, "one", 3) == 0);
  CHECK(lp_cache_get(c, k1, 2, &n) == NULL); /* "a\0" is a different key */
  CHECK_INT(lp_cache_delete(c, k1, sizeof k1), 1);
  CHECK(lp_cache_get(c, k2, sizeof k2, &n) != NULL);
  lp_cache_free(c);
}

static double value(lp_metric *m, const char *cache) {
  return lp_metric_value(m, LP_LABELS(cache));
}

static void test_metrics(void) {
  lp_metrics *m = lp_metrics_new();
  lp_cache *c = new_cache("zones", 10, 2, m);
  lp_cache *other = new_cache("types", 10, 2, m);
  char *text = lp_metrics_render(m, NULL);
  CHECK_STR(text,
            "# HELP luaprov_cache_hits_total Cache lookups that found a live entry.\n"
            "# TYPE luaprov_cache_hits_total counter\n"
            "luaprov_cache_hits_total{cache=\"zones\"} 0\n"
            "luaprov_cache_hits_total{cache=\"types\"} 0\n"
            "# HELP luaprov_cache_misses_total Cache lookups that found no entry or an expired one.\n"
            "# TYPE luaprov_cache_misses_total counter\n"
            "luaprov_cache_misses_total{cache=\"zones\"} 0\n"
            "luaprov_cache_misses_total{cache=\"types\"} 0\n"
            "# HELP luaprov_cache_evictions_total Live cache entries dropped to make room for new ones.\n"
            "# TYPE luaprov_cache_evictions_total counter\n"
            "luaprov_cache_evictions_total{cache=\"zones\"} 0\n"
            "luaprov_cache_evictions_total{cache=\"types\"} 0\n"
            "# HELP luaprov_cache_entries Entries held by the cache, expired ones included until dropped.\n"
            "# TYPE luaprov_cache_entries gauge\n"
            "luaprov_cache_entries{cache=\"zones\"} 0\n"
            "luaprov_cache_entries{cache=\"types\"} 0\n");
  free(text);

  lp_metric *hits = lp_metrics_counter(m, "luaprov_cache_hits_total", "", LP_LABELS("cache"));
  lp_metric *misses = lp_metrics_counter(m, "luaprov_cache_misses_total", "", LP_LABELS("cache"));
  lp_metric *evictions = lp_metrics_counter(m, "luaprov_cache_evictions_total", "", LP_LABELS("cache"));
  lp_metric *entries = lp_metrics_gauge(m, "luaprov_cache_entries", "", LP_LABELS("cache"));

  set_str(c, "a", "1", 0);
  CHECK(value(entries, "zones") == 1);
  get_str(c, "a");    /* hit */
  get_str(c, "a");    /* hit */
  get_str(c, "nope"); /* miss */
  set_str(c, "b", "2", 0);
  set_str(c, "c", "3", 0); /* evicts live a */
  CHECK(value(evictions, "zones") == 1);
  fake_now += 20;  /* b and c expire */
  get_str(c, "b"); /* expired: a miss, dropped, not an eviction */
  CHECK(value(entries, "zones") == 1);
  set_str(c, "d", "4", 0);
  set_str(c, "e", "5", 0); /* full: the oldest (c) is expired, so dropped without counting */
  CHECK(value(hits, "zones") == 2);
  CHECK(value(misses, "zones") == 2);
  CHECK(value(evictions, "zones") == 1);
  CHECK(value(entries, "zones") == 2);
  CHECK_INT(lp_cache_delete(c, "d", 1), 1);
  CHECK(value(entries, "zones") == 1);
  CHECK(value(hits, "types") == 0);

  text = lp_metrics_render(m, NULL);
  CHECK_CONTAINS(
      text, "luaprov_cache_hits_total{cache=\"zones\"} 2\nluaprov_cache_hits_total{cache=\"types\"} 0\n");
  CHECK_CONTAINS(text, "luaprov_cache_misses_total{cache=\"zones\"} 2\n");
  CHECK_CONTAINS(text, "luaprov_cache_evictions_total{cache=\"zones\"} 1\n");
  CHECK_CONTAINS(text, "luaprov_cache_entries{cache=\"zones\"} 1\n");
  free(text);

  /* freeing a cache keeps its counters but empties its gauge */
  lp_cache_free(c);
  CHECK(value(hits, "zones") == 2);
  CHECK(value(entries, "zones") == 0);
  lp_cache_free(other);
  lp_metrics_free(m);
}

static void test_registry(void) {
  lp_cache *a = lp_cache_registry_get("instance-types", 30, 100);
  lp_cache *b = lp_cache_registry_get("instance-types", 999, 5); /* later ttl/max ignored */
  lp_cache *z = lp_cache_registry_get("zones", 10, 10);
  CHECK(a == b);
  CHECK(a != z);
  CHECK(lp_cache_ttl(b) == 30);
  set_str(a, "k", "v", 0);
  CHECK_STR(get_str(b, "k"), "v");

  /* registry caches report on the process-wide registry */
  lp_metric *hits =
      lp_metrics_counter(lp_metrics_default(), "luaprov_cache_hits_total", "", LP_LABELS("cache"));
  CHECK(value(hits, "instance-types") == 1);
  char *text = lp_metrics_render(lp_metrics_default(), NULL);
  CHECK_CONTAINS(text, "luaprov_cache_entries{cache=\"instance-types\"} 1\n");
  free(text);

  lp_cache_registry_clear();
  lp_cache *fresh = lp_cache_registry_get("instance-types", 30, 100);
  CHECK(get_str(fresh, "k") == NULL);        /* a new, empty cache */
  CHECK(value(hits, "instance-types") == 1); /* counters survive the cache */
  /* left in the registry on purpose: the atexit handler frees it */
}

/* 100k distinct keys through a 10k bound: the size never passes the bound, the newest 10k survive. */
static void test_stress(void) {
  lp_metrics *m = lp_metrics_new();
  lp_cache *c = new_cache("stress", 3600, 10000, m);
  char key[32], val[32];
  size_t max_seen = 0;
  for (int i = 0; i < 100000; i++) {
    int kn = snprintf(key, sizeof key, "key-%d", i), vn = snprintf(val, sizeof val, "value-%d", i);
    lp_cache_set(c, key, (size_t)kn, val, (size_t)vn, 0);
    if (lp_cache_size(c) > max_seen) max_seen = lp_cache_size(c);
    if (i % 7 == 0) lp_cache_get(c, key, (size_t)kn, NULL);
  }
  CHECK_INT(max_seen, 10000);
  CHECK_INT(lp_cache_size(c), 10000);
  int wrong = 0;
  for (int i = 0; i < 100000; i++) {
    int kn = snprintf(key, sizeof key, "key-%d", i);
    snprintf(val, sizeof val, "value-%d", i);
    size_t n = 0;
    const char *v = lp_cache_get(c, key, (size_t)kn, &n);
    if (i < 90000)
      wrong += v != NULL;
    else
      wrong += !v || n != strlen(val) || memcmp(v, val, n) != 0;
  }
  CHECK_INT(wrong, 0);
  lp_metric *evictions = lp_metrics_counter(m, "luaprov_cache_evictions_total", "", LP_LABELS("cache"));
  lp_metric *entries = lp_metrics_gauge(m, "luaprov_cache_entries", "", LP_LABELS("cache"));
  CHECK(value(evictions, "stress") == 90000);
  CHECK(value(entries, "stress") == 10000);
  lp_cache_free(c);
  lp_metrics_free(m);
}

int main(void) {
  RUN(test_set_get_delete);
  RUN(test_ttl_expiry);
  RUN(test_per_entry_ttl);
  RUN(test_lru_eviction);
  RUN(test_binary_keys_and_values);
  RUN(test_metrics);
  RUN(test_registry);
  RUN(test_stress);
  return check_summary();
}
