/* A TTL cache with string keys and owned byte values, bounded in entries (least recently used entry
 * evicted first), with hit/miss/eviction counters and an entries gauge labelled by cache name:
 *   luaprov_cache_hits_total{cache}, luaprov_cache_misses_total{cache},
 *   luaprov_cache_evictions_total{cache}, luaprov_cache_entries{cache}.
 * Expired entries count as misses and are dropped lazily on access and when the cache is full (the
 * least recently used entry goes; evictions_total counts it only when it was still live, since that
 * is the signal that the bound is too small).
 * Loop thread only. Keys and values are binary-safe. A cache with metrics must be freed before its
 * registry; freeing it sets its entries gauge to 0 and leaves its counters. */
#ifndef LUAPROV_CORE_CACHE_H
#define LUAPROV_CORE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/metrics.h"

typedef struct lp_cache lp_cache;

/* Monotonic seconds; the default reads CLOCK_MONOTONIC. Tests and the simulated clock replace it. */
typedef double (*lp_clock_fn)(void *ud);

/* Creates a cache. ttl_s > 0 is the default lifetime of an entry; max_entries > 0 bounds the size.
 * metrics may be NULL (no metrics). name is copied and labels the metrics. Caller owns the cache.
 * Other ttl_s or max_entries values abort: the bindings validate what scripts pass. */
lp_cache *lp_cache_new(const char *name, double ttl_s, size_t max_entries, lp_metrics *metrics);
void lp_cache_free(lp_cache *c);

/* clock NULL restores the default. Expiry deadlines already set were computed on the old clock. */
void lp_cache_set_clock(lp_cache *c, lp_clock_fn clock, void *ud);

/* Stores a copy of value under a copy of key, replacing any previous value. ttl_s <= 0 uses the
 * cache's default. Evicts the least recently used entry when full. */
void lp_cache_set(lp_cache *c, const char *key, size_t key_len, const void *value, size_t value_len,
                  double ttl_s);

/* Looks key up. Returns a pointer to the cached bytes and stores their length in *value_len, or NULL
 * on a miss or an expired entry (value_len may be NULL). The bytes are followed by a NUL that is not
 * counted, so text values can be used as C strings. A hit makes the entry the most recently used;
 * it does not extend its lifetime. The pointer stays valid until the next set/delete/free on this
 * cache; copy it before calling anything that may change the cache. */
const void *lp_cache_get(lp_cache *c, const char *key, size_t key_len, size_t *value_len);

/* Removes key; returns 1 when it was present (expired or not), 0 otherwise. */
int lp_cache_delete(lp_cache *c, const char *key, size_t key_len);

/* How many sets and deletes the cache has seen: a reader that derived something from the entries
 * knows it is still current while this is unchanged and no entry it used has expired. */
uint64_t lp_cache_changes(const lp_cache *c);
/* The cache's clock now (expiry deadlines are on it). */
double lp_cache_now(const lp_cache *c);
/* Calls visit for every live entry, newest first, with its key and expiry deadline. visit must not
 * change the cache. Does not count hits or reorder entries. */
typedef void (*lp_cache_visit_fn)(const char *key, size_t key_len, double expires, void *ud);
void lp_cache_each_live(const lp_cache *c, lp_cache_visit_fn visit, void *ud);

/* Number of entries held, expired ones included until they are dropped. */
size_t lp_cache_size(const lp_cache *c);
const char *lp_cache_name(const lp_cache *c);
double lp_cache_ttl(const lp_cache *c);

/* Named caches that outlive Lua generations: the first call creates the cache with ttl_s and
 * max_entries (both > 0), later calls with the same name return it (their ttl/max are ignored).
 * Owned by the process and registered on lp_metrics_default(); lp_cache_registry_clear frees all of
 * them (tests call it; an atexit handler installed with the first cache calls it at exit). */
lp_cache *lp_cache_registry_get(const char *name, double ttl_s, size_t max_entries);
void lp_cache_registry_clear(void);

#endif
