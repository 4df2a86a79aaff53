/* The validated instance types of each node class, held by the CloudProvider so that GetInstanceTypes
 * answers from memory instead of running the mapping and converting thousands of offerings on every
 * call.
 *
 * One entry per node class (its identity key, "apiVersion name"). An entry answers only for the
 * inputs it was computed from: the fingerprint of the class (lp_types_fingerprint) and the script
 * generation. Other inputs are a miss, and the caller runs the mapping. An entry older than max_age
 * is still served, marked stale once so the caller refreshes it in the background; lp_types_cache_put
 * then replaces it in one step, so a reader sees the old list or the new one, never a mix.
 *
 * The unavailable-offerings cache (borrowed, type|zone|capacity_type keys) is laid over the stored
 * list on the way out: those offerings read "available": false. The overlaid view is rebuilt only
 * when that cache changed or an entry it used expired, and it shares every type it does not touch
 * with the stored list, so a hit costs a lookup and a reference.
 *
 * Lists handed out are shared with the cache: the caller gets a new reference and must not modify
 * them. Loop thread only. */
#ifndef LUAPROV_CONTRACT_TYPES_CACHE_H
#define LUAPROV_CONTRACT_TYPES_CACHE_H

#include <jansson.h>
#include <stdint.h>

#include "core/cache.h"

typedef struct lp_types_cache lp_types_cache;

/* unavailable is borrowed and must outlive the cache; its clock is the cache's clock. max_age_s > 0. */
lp_types_cache *lp_types_cache_new(lp_cache *unavailable, double max_age_s);
void lp_types_cache_free(lp_types_cache *tc);

/* What the mapping's answer for a node class depends on: its spec, status, labels and annotations
 * (not resourceVersion or managed fields, which change without changing the answer). */
uint64_t lp_types_fingerprint(const json_t *nodeclass);

typedef enum {
  LP_TYPES_MISS,  /* no entry for these inputs: *types is NULL */
  LP_TYPES_FRESH, /* *types is the overlaid list */
  LP_TYPES_STALE, /* *types is the overlaid list, older than max_age: the caller should refresh the
                   * entry (reported once per refresh: lp_types_cache_put or _refresh_failed ends it) */
} lp_types_state;

lp_types_state lp_types_cache_get(lp_types_cache *tc, const char *class_key, uint64_t fingerprint,
                                  uint64_t generation, json_t **types);

/* Stores types (stolen; checked by the caller) as the class's entry for these inputs, replacing any
 * other, and ends a refresh in progress. Returns the overlaid list (a new reference). */
json_t *lp_types_cache_put(lp_types_cache *tc, const char *class_key, uint64_t fingerprint,
                           uint64_t generation, json_t *types);

/* A refresh of the class failed: the entry is kept, and reported stale again after another max_age. */
void lp_types_cache_refresh_failed(lp_types_cache *tc, const char *class_key);

#endif
