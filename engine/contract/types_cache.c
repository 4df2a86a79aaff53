#include "contract/types_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* A cluster has a handful of node classes, so a list is the right index. */
typedef struct entry {
  struct entry *next;
  char *class_key;
  uint64_t fingerprint, generation;
  json_t *types;     /* as checked, never modified */
  json_t *positions; /* type name -> its index in types */
  double tried_at;   /* when the list was stored, or a refresh of it last failed */
  int refreshing;
  /* the overlaid view handed out, current while the unavailable cache has seen `changes` changes
   * and until `valid_until`, when the first unavailable entry it used expires */
  json_t *view;
  uint64_t changes;
  double valid_until;
} entry;

struct lp_types_cache {
  lp_cache *unavailable;
  double max_age;
  entry *entries;
};

lp_types_cache *lp_types_cache_new(lp_cache *unavailable, double max_age_s) {
  lp_types_cache *tc = lp_xcalloc(1, sizeof *tc);
  tc->unavailable = unavailable;
  tc->max_age = max_age_s;
  return tc;
}

static void clear_lists(entry *e) {
  json_decref(e->types);
  json_decref(e->positions);
  json_decref(e->view);
  e->types = e->positions = e->view = NULL;
}

void lp_types_cache_free(lp_types_cache *tc) {
  if (!tc) return;
  for (entry *e = tc->entries, *next; e; e = next) {
    next = e->next;
    clear_lists(e);
    free(e->class_key);
    free(e);
  }
  free(tc);
}

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

uint64_t lp_types_fingerprint(const json_t *nodeclass) {
  json_t *metadata = json_object_get(nodeclass, "metadata");
  json_t *inputs =
      json_pack("{s:O*, s:O*, s:O*, s:O*, s:O*, s:O*}", "apiVersion",
                json_object_get(nodeclass, "apiVersion"), "name", json_object_get(metadata, "name"), "labels",
                json_object_get(metadata, "labels"), "annotations", json_object_get(metadata, "annotations"),
                "spec", json_object_get(nodeclass, "spec"), "status", json_object_get(nodeclass, "status"));
  char *text = json_dumps(inputs, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  uint64_t h = text ? fnv1a(text, strlen(text)) : 0;
  free(text);
  json_decref(inputs);
  return h;
}

static entry *find(lp_types_cache *tc, const char *class_key) {
  for (entry *e = tc->entries; e; e = e->next)
    if (strcmp(e->class_key, class_key) == 0) return e;
  return NULL;
}

typedef struct overlay {
  entry *e;
  json_t *view; /* NULL until an unavailable offering of this list is found */
  double valid_until;
} overlay;

/* Copies the type at index i (and its offerings array) into the view unless it is copied already,
 * and returns the view's offerings of it. */
static json_t *own_offerings(overlay *ov, size_t i) {
  if (!ov->view) ov->view = json_copy(ov->e->types);
  json_t *type = json_array_get(ov->view, i);
  if (type == json_array_get(ov->e->types, i)) {
    type = json_copy(type);
    json_object_set_new(type, "offerings", json_copy(json_object_get(type, "offerings")));
    json_array_set_new(ov->view, i, type);
  }
  return json_object_get(type, "offerings");
}

/* key is "type|zone|capacity_type" (cp_offering_key); instance type names hold no '|'. */
static void mark_unavailable(const char *key, size_t key_len, double expires, void *ud) {
  overlay *ov = ud;
  const char *bar = memchr(key, '|', key_len);
  if (!bar) return;
  char *type_name = lp_xstrndup(key, (size_t)(bar - key));
  json_t *position = json_object_get(ov->e->positions, type_name);
  free(type_name);
  if (!position) return;
  size_t i = (size_t)json_integer_value(position);
  const char *rest = bar + 1;
  size_t rest_len = key_len - (size_t)(rest - key);
  json_t *offerings = json_object_get(json_array_get(ov->e->types, i), "offerings");
  size_t k;
  json_t *offering;
  json_array_foreach(offerings, k, offering) {
    const char *zone = json_string_value(json_object_get(offering, "zone"));
    const char *capacity = json_string_value(json_object_get(offering, "capacity_type"));
    if (!zone || !capacity) continue;
    size_t zone_len = strlen(zone);
    if (zone_len + 1 + strlen(capacity) != rest_len || memcmp(rest, zone, zone_len) != 0 ||
        rest[zone_len] != '|' || strcmp(rest + zone_len + 1, capacity) != 0)
      continue;
    if (expires < ov->valid_until) ov->valid_until = expires;
    if (json_is_false(json_object_get(offering, "available"))) continue;
    json_t *owned = own_offerings(ov, i);
    json_t *copy = json_copy(offering);
    json_object_set_new(copy, "available", json_false());
    json_array_set_new(owned, k, copy);
  }
}

static json_t *current_view(lp_types_cache *tc, entry *e) {
  uint64_t changes = lp_cache_changes(tc->unavailable);
  if (e->view && e->changes == changes && lp_cache_now(tc->unavailable) < e->valid_until)
    return json_incref(e->view);
  overlay ov = {e, NULL, INFINITY};
  lp_cache_each_live(tc->unavailable, mark_unavailable, &ov);
  json_decref(e->view);
  e->view = ov.view ? ov.view : json_incref(e->types);
  e->changes = changes;
  e->valid_until = ov.valid_until;
  return json_incref(e->view);
}

lp_types_state lp_types_cache_get(lp_types_cache *tc, const char *class_key, uint64_t fingerprint,
                                  uint64_t generation, json_t **types) {
  *types = NULL;
  entry *e = find(tc, class_key);
  if (!e || !e->types || e->fingerprint != fingerprint || e->generation != generation) return LP_TYPES_MISS;
  *types = current_view(tc, e);
  if (e->refreshing || lp_cache_now(tc->unavailable) - e->tried_at < tc->max_age) return LP_TYPES_FRESH;
  e->refreshing = 1;
  return LP_TYPES_STALE;
}

json_t *lp_types_cache_put(lp_types_cache *tc, const char *class_key, uint64_t fingerprint,
                           uint64_t generation, json_t *types) {
  entry *e = find(tc, class_key);
  if (!e) {
    e = lp_xcalloc(1, sizeof *e);
    e->class_key = lp_xstrdup(class_key);
    e->next = tc->entries;
    tc->entries = e;
  }
  clear_lists(e);
  e->types = types;
  e->positions = json_object();
  size_t i;
  json_t *type;
  json_array_foreach(types, i, type) {
    const char *name = json_string_value(json_object_get(type, "name"));
    if (name) json_object_set_new(e->positions, name, json_integer((json_int_t)i));
  }
  e->fingerprint = fingerprint;
  e->generation = generation;
  e->tried_at = lp_cache_now(tc->unavailable);
  e->refreshing = 0;
  return current_view(tc, e);
}

void lp_types_cache_refresh_failed(lp_types_cache *tc, const char *class_key) {
  entry *e = find(tc, class_key);
  if (!e) return;
  e->tried_at = lp_cache_now(tc->unavailable);
  e->refreshing = 0;
}
