#include "core/cache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

typedef struct entry {
  struct entry *chain;         /* hash bucket */
  struct entry *newer, *older; /* recency list */
  uint64_t hash;
  double expires; /* on the cache's clock */
  char *value;    /* value_len bytes plus a NUL, so C callers may treat text values as strings */
  size_t value_len;
  size_t key_len;
  char key[]; /* key_len bytes plus a NUL */
} entry;

struct lp_cache {
  char *name;
  const char *label_values[2]; /* {name, NULL}: the "cache" label of every metric */
  double ttl;
  size_t max_entries;
  size_t size;
  entry **table; /* power-of-two size */
  size_t table_size;
  entry *newest, *oldest;
  lp_clock_fn clock;
  void *clock_ud;
  uint64_t changes;                               /* sets and deletes so far: lp_cache_changes */
  lp_metric *hits, *misses, *evictions, *entries; /* all NULL without a registry */
};

static double monotonic_clock(void *ud) {
  return lp_clock_monotonic();
}

static uint64_t hash_key(const char *key, size_t n) {
  uint64_t h = 14695981039346656037ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
  return h;
}

static void count(lp_cache *c, lp_metric *counter) {
  if (counter) lp_counter_inc(counter, c->label_values);
}

static void update_entries_gauge(lp_cache *c) {
  if (c->entries) lp_gauge_set(c->entries, c->label_values, (double)c->size);
}

lp_cache *lp_cache_new(const char *name, double ttl_s, size_t max_entries, lp_metrics *metrics) {
  if (!(ttl_s > 0) || max_entries == 0) {
    /* the bindings validate script input, so reaching this is an engine bug */
    lp_errorlog("engine.cache", "invalid cache parameters", LPF_STR("cache", name), LPF_NUM("ttl_s", ttl_s),
                LPF_INT("max_entries", max_entries));
    abort();
  }
  lp_cache *c = lp_xcalloc(1, sizeof *c);
  c->name = lp_xstrdup(name);
  c->label_values[0] = c->name;
  c->ttl = ttl_s;
  c->max_entries = max_entries;
  c->table_size = 16;
  c->table = lp_xcalloc(c->table_size, sizeof(entry *));
  c->clock = monotonic_clock;
  if (metrics) {
    const char *const *labels = LP_LABELS("cache");
    c->hits = lp_metrics_counter(metrics, "luaprov_cache_hits_total",
                                 "Cache lookups that found a live entry.", labels);
    c->misses = lp_metrics_counter(metrics, "luaprov_cache_misses_total",
                                   "Cache lookups that found no entry or an expired one.", labels);
    c->evictions = lp_metrics_counter(metrics, "luaprov_cache_evictions_total",
                                      "Live cache entries dropped to make room for new ones.", labels);
    c->entries = lp_metrics_gauge(metrics, "luaprov_cache_entries",
                                  "Entries held by the cache, expired ones included until dropped.", labels);
    /* series exist from the start, so a rate() over a cache that never missed reads 0, not nothing */
    lp_counter_add(c->hits, c->label_values, 0);
    lp_counter_add(c->misses, c->label_values, 0);
    lp_counter_add(c->evictions, c->label_values, 0);
    update_entries_gauge(c);
  }
  return c;
}

static void free_entry(entry *e) {
  free(e->value);
  free(e);
}

void lp_cache_free(lp_cache *c) {
  if (!c) return;
  for (entry *e = c->newest, *older; e; e = older) {
    older = e->older;
    free_entry(e);
  }
  c->size = 0;
  /* the series outlives the cache (counters must not reset), so say it holds nothing now */
  update_entries_gauge(c);
  free(c->table);
  free(c->name);
  free(c);
}

void lp_cache_set_clock(lp_cache *c, lp_clock_fn clock, void *ud) {
  c->clock = clock ? clock : monotonic_clock;
  c->clock_ud = clock ? ud : NULL;
}

static entry **slot_of(lp_cache *c, const char *key, size_t key_len, uint64_t hash) {
  entry **slot = &c->table[hash & (c->table_size - 1)];
  while (*slot && !((*slot)->hash == hash && (*slot)->key_len == key_len &&
                    (key_len == 0 || memcmp((*slot)->key, key, key_len) == 0)))
    slot = &(*slot)->chain;
  return slot;
}

static void unlink_recency(lp_cache *c, entry *e) {
  if (e->newer)
    e->newer->older = e->older;
  else
    c->newest = e->older;
  if (e->older)
    e->older->newer = e->newer;
  else
    c->oldest = e->newer;
}

static void push_newest(lp_cache *c, entry *e) {
  e->newer = NULL;
  e->older = c->newest;
  if (c->newest)
    c->newest->newer = e;
  else
    c->oldest = e;
  c->newest = e;
}

static void remove_entry(lp_cache *c, entry *e) {
  entry **slot = slot_of(c, e->key, e->key_len, e->hash);
  *slot = e->chain;
  unlink_recency(c, e);
  free_entry(e);
  c->size--;
}

static void grow_table(lp_cache *c) {
  size_t size = c->table_size * 2;
  entry **table = lp_xcalloc(size, sizeof *table);
  for (entry *e = c->newest; e; e = e->older) {
    entry **slot = &table[e->hash & (size - 1)];
    e->chain = *slot;
    *slot = e;
  }
  free(c->table);
  c->table = table;
  c->table_size = size;
}

static void store_value(entry *e, const void *value, size_t value_len) {
  e->value = lp_xmalloc(value_len + 1);
  if (value_len) memcpy(e->value, value, value_len);
  e->value[value_len] = '\0';
  e->value_len = value_len;
}

void lp_cache_set(lp_cache *c, const char *key, size_t key_len, const void *value, size_t value_len,
                  double ttl_s) {
  double now = c->clock(c->clock_ud);
  double expires = now + (ttl_s > 0 ? ttl_s : c->ttl);
  uint64_t hash = hash_key(key, key_len);
  c->changes++;
  entry **slot = slot_of(c, key, key_len, hash);
  if (*slot) {
    entry *e = *slot;
    free(e->value);
    store_value(e, value, value_len);
    e->expires = expires;
    unlink_recency(c, e);
    push_newest(c, e);
    return;
  }

  if (c->size >= c->max_entries) {
    /* The least recently used entry goes; it only counts as an eviction when it was still live,
     * because evictions are the signal that max_entries is too small. */
    entry *victim = c->oldest;
    if (now < victim->expires) count(c, c->evictions);
    remove_entry(c, victim);
  } else if (c->size + 1 > c->table_size / 4 * 3) {
    grow_table(c);
  }
  /* the removal or the rehash may have moved what slot pointed at */
  slot = &c->table[hash & (c->table_size - 1)];

  entry *e = lp_xmalloc(sizeof *e + key_len + 1);
  if (key_len) memcpy(e->key, key, key_len);
  e->key[key_len] = '\0';
  e->key_len = key_len;
  e->hash = hash;
  e->expires = expires;
  store_value(e, value, value_len);
  e->chain = *slot;
  *slot = e;
  push_newest(c, e);
  c->size++;
  update_entries_gauge(c);
}

const void *lp_cache_get(lp_cache *c, const char *key, size_t key_len, size_t *value_len) {
  entry *e = *slot_of(c, key, key_len, hash_key(key, key_len));
  if (e && c->clock(c->clock_ud) >= e->expires) {
    remove_entry(c, e);
    update_entries_gauge(c);
    e = NULL;
  }
  if (!e) {
    count(c, c->misses);
    return NULL;
  }
  count(c, c->hits);
  unlink_recency(c, e);
  push_newest(c, e);
  if (value_len) *value_len = e->value_len;
  return e->value;
}

int lp_cache_delete(lp_cache *c, const char *key, size_t key_len) {
  entry *e = *slot_of(c, key, key_len, hash_key(key, key_len));
  if (!e) return 0;
  c->changes++;
  remove_entry(c, e);
  update_entries_gauge(c);
  return 1;
}

uint64_t lp_cache_changes(const lp_cache *c) {
  return c->changes;
}

double lp_cache_now(const lp_cache *c) {
  return c->clock(c->clock_ud);
}

void lp_cache_each_live(const lp_cache *c, lp_cache_visit_fn visit, void *ud) {
  double now = c->clock(c->clock_ud);
  for (const entry *e = c->newest; e; e = e->older)
    if (now < e->expires) visit(e->key, e->key_len, e->expires, ud);
}

size_t lp_cache_size(const lp_cache *c) {
  return c->size;
}

const char *lp_cache_name(const lp_cache *c) {
  return c->name;
}

double lp_cache_ttl(const lp_cache *c) {
  return c->ttl;
}

static struct {
  lp_cache **caches;
  size_t n, cap;
  int cleanup_registered;
} registry;

lp_cache *lp_cache_registry_get(const char *name, double ttl_s, size_t max_entries) {
  for (size_t i = 0; i < registry.n; i++)
    if (strcmp(registry.caches[i]->name, name) == 0) return registry.caches[i];
  /* Asking for the metrics registry first registers its atexit handler first, so it runs after ours
   * and the caches can still zero their gauges while they are freed. */
  lp_cache *c = lp_cache_new(name, ttl_s, max_entries, lp_metrics_default());
  if (!registry.cleanup_registered) {
    atexit(lp_cache_registry_clear);
    registry.cleanup_registered = 1;
  }
  if (registry.n == registry.cap) {
    registry.cap = registry.cap ? registry.cap * 2 : 8;
    registry.caches = lp_xrealloc(registry.caches, registry.cap * sizeof *registry.caches);
  }
  registry.caches[registry.n++] = c;
  return c;
}

void lp_cache_registry_clear(void) {
  for (size_t i = 0; i < registry.n; i++) lp_cache_free(registry.caches[i]);
  free(registry.caches);
  registry.caches = NULL;
  registry.n = registry.cap = 0;
}
