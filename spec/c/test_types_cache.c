/* The CloudProvider's held instance types: answers only for the inputs they were computed from, the
 * unavailable offerings laid over them without copying the rest, staleness on an injected clock, and
 * the fingerprint of a node class. */
#include "check.h"
#include "contract/types_cache.h"

static double fake_now;
static double fake_clock(void *ud) {
  (void)ud;
  return fake_now;
}

static const char *const KEY = "karpenter.k8s.alibabacloud/v1alpha1 default";

/* n types "t0".."t<n-1>", each with offerings in zones a and b, on-demand */
static json_t *catalogue(int n) {
  json_t *types = json_array();
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    json_array_append_new(types,
                          json_pack("{s:s, s:[{s:s, s:s, s:b}, {s:s, s:s, s:b}]}", "name", name, "offerings",
                                    "zone", "a", "capacity_type", "on-demand", "available", 1, "zone", "b",
                                    "capacity_type", "on-demand", "available", 1));
  }
  return types;
}

static int available(const json_t *types, size_t type, size_t offering) {
  json_t *o = json_array_get(json_object_get(json_array_get(types, type), "offerings"), offering);
  return json_is_true(json_object_get(o, "available"));
}

static lp_cache *unavailable_cache(void) {
  lp_cache *c = lp_cache_new("unavailable-test", 180, 100, NULL);
  fake_now = 1000;
  lp_cache_set_clock(c, fake_clock, NULL);
  return c;
}

static void mark(lp_cache *c, const char *key) {
  lp_cache_set(c, key, strlen(key), "1", 1, 0);
}

static void test_answers_only_its_inputs(void) {
  lp_cache *u = unavailable_cache();
  lp_types_cache *tc = lp_types_cache_new(u, 60);
  json_t *got = NULL;
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_MISS);
  CHECK(got == NULL);
  json_t *stored = catalogue(3);
  json_t *first = lp_types_cache_put(tc, KEY, 1, 7, stored);
  CHECK(first == stored); /* nothing unavailable: the stored list itself, shared */
  json_decref(first);
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_FRESH);
  CHECK(got == stored);
  json_decref(got);
  CHECK(lp_types_cache_get(tc, KEY, 2, 7, &got) == LP_TYPES_MISS); /* the class changed */
  CHECK(lp_types_cache_get(tc, KEY, 1, 8, &got) == LP_TYPES_MISS); /* a reload */
  CHECK(lp_types_cache_get(tc, "other", 1, 7, &got) == LP_TYPES_MISS);
  CHECK(got == NULL);
  lp_types_cache_free(tc);
  lp_cache_free(u);
}

static void test_overlay_copies_only_what_it_marks(void) {
  lp_cache *u = unavailable_cache();
  lp_types_cache *tc = lp_types_cache_new(u, 60);
  json_t *stored = catalogue(3);
  json_decref(lp_types_cache_put(tc, KEY, 1, 7, stored));
  mark(u, "t1|b|on-demand");
  mark(u, "t9|a|on-demand"); /* a type this class does not have */
  mark(u, "t2|a|spot");      /* an offering it does not have */
  json_t *view = NULL;
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &view) == LP_TYPES_FRESH);
  CHECK(view != stored);
  CHECK_INT(json_array_size(view), 3);
  CHECK(available(view, 1, 0));
  CHECK(!available(view, 1, 1));
  CHECK(available(stored, 1, 1)); /* the stored list is never modified */
  CHECK(json_array_get(view, 0) == json_array_get(stored, 0));
  CHECK(json_array_get(view, 2) == json_array_get(stored, 2));
  CHECK(json_array_get(view, 1) != json_array_get(stored, 1));
  /* the same view while the unavailable cache is unchanged */
  json_t *again = NULL;
  lp_types_cache_get(tc, KEY, 1, 7, &again);
  CHECK(again == view);
  json_decref(again);
  json_decref(view);
  /* the mark expires (180 s): the stored list again */
  fake_now += 181;
  json_decref(lp_types_cache_put(tc, KEY, 1, 7, json_incref(stored))); /* fresh, so not stale either */
  lp_types_cache_get(tc, KEY, 1, 7, &view);
  CHECK(view == stored);
  json_decref(view);
  /* a new mark is seen at once */
  mark(u, "t0|a|on-demand");
  lp_types_cache_get(tc, KEY, 1, 7, &view);
  CHECK(!available(view, 0, 0));
  CHECK(available(view, 1, 1));
  json_decref(view);
  lp_types_cache_free(tc);
  lp_cache_free(u);
}

static void test_stale_reported_once_per_refresh(void) {
  lp_cache *u = unavailable_cache();
  lp_types_cache *tc = lp_types_cache_new(u, 60);
  json_t *old = catalogue(1);
  json_decref(lp_types_cache_put(tc, KEY, 1, 7, old));
  json_t *got = NULL;
  fake_now += 59;
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_FRESH);
  json_decref(got);
  fake_now += 2;
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_STALE);
  CHECK(got == old); /* still answered */
  json_decref(got);
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_FRESH); /* the refresh is under way */
  json_decref(got);
  lp_types_cache_refresh_failed(tc, KEY);
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_FRESH); /* kept, not asked again at once */
  CHECK(got == old);
  json_decref(got);
  fake_now += 61;
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_STALE);
  json_decref(got);
  json_t *renewed = catalogue(2);
  json_decref(lp_types_cache_put(tc, KEY, 1, 7, renewed)); /* replaces the entry in one step */
  CHECK(lp_types_cache_get(tc, KEY, 1, 7, &got) == LP_TYPES_FRESH);
  CHECK(got == renewed);
  json_decref(got);
  lp_types_cache_free(tc);
  lp_cache_free(u);
}

static void test_fingerprint_reads_what_the_answer_depends_on(void) {
  json_t *nc = json_loads("{\"apiVersion\":\"v1\",\"kind\":\"K\",\"metadata\":{\"name\":\"default\","
                          "\"resourceVersion\":\"5\",\"labels\":{\"a\":\"1\"}},\"spec\":{\"disk\":40},"
                          "\"status\":{\"zones\":[\"a\"]}}",
                          0, NULL);
  uint64_t base = lp_types_fingerprint(nc);
  json_t *copy = json_deep_copy(nc);
  json_object_set_new(json_object_get(copy, "metadata"), "resourceVersion", json_string("6"));
  json_object_set_new(json_object_get(copy, "metadata"), "managedFields", json_array());
  CHECK(lp_types_fingerprint(copy) == base);
  json_object_set_new(copy, "status", json_pack("{s:[s,s]}", "zones", "a", "b"));
  CHECK(lp_types_fingerprint(copy) != base);
  json_decref(copy);
  copy = json_deep_copy(nc);
  json_object_set_new(json_object_get(copy, "spec"), "disk", json_integer(80));
  CHECK(lp_types_fingerprint(copy) != base);
  json_decref(copy);
  copy = json_deep_copy(nc);
  json_object_set_new(json_object_get(copy, "metadata"), "annotations", json_pack("{s:s}", "h", "x"));
  CHECK(lp_types_fingerprint(copy) != base);
  json_decref(copy);
  json_decref(nc);
}

int main(void) {
  RUN(test_answers_only_its_inputs);
  RUN(test_overlay_copies_only_what_it_marks);
  RUN(test_stale_reported_once_per_refresh);
  RUN(test_fingerprint_reads_what_the_answer_depends_on);
  return check_summary();
}
