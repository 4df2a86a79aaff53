/* Which candidates a consolidation method picks (disruption_internal.h); the pass (disruption.c) runs
 * the methods, asks the simulation and acts.
 *
 * Emptiness takes every candidate without reschedulable pods whose NodeClaim is Consolidatable=True and
 * whose NodePool consolidates (WhenEmpty or WhenEmptyOrUnderutilized, consolidateAfter not Never), as
 * many per NodePool as its Empty budget still allows. Consolidation of underutilized nodes considers the
 * Consolidatable=True candidates of WhenEmptyOrUnderutilized pools, cheapest to disrupt first, each
 * pool's up to its Underutilized budget: multi-node consolidation looks for the longest prefix of at
 * least two of them (at most 100) that the simulation can remove or replace by one cheaper node,
 * halving the range each time as Karpenter does; single-node consolidation for the first one alone.
 * Candidates held back by karpenter.sh/do-not-disrupt are never picked. A replacement of several
 * candidates may not be of an instance type one of them has (dz_drop_candidate_types). */
#include <stdint.h>
#include <string.h>

#include "contract/shapes.h"
#include "controller/disruption_internal.h"

int dz_is_empty_candidate(const dz_candidate *cd) {
  return cd->consolidatable && cd->pods == 0 && cd->policy != DZ_CONSOLIDATE_NEVER;
}

int dz_is_underutilized_candidate(const dz_candidate *cd) {
  return cd->consolidatable && cd->policy == DZ_CONSOLIDATE_UNDERUTILIZED;
}

/* Takes one from the pool's budget in left; 0 when it has none left. */
static int take_budget(json_t *left, const char *pool) {
  json_int_t n = json_integer_value(json_object_get(left, pool));
  if (n <= 0) return 0;
  json_object_set_new(left, pool, json_integer(n - 1));
  return 1;
}

size_t dz_pick_empty(dz_candidate *const *candidates, size_t n, json_t *left, dz_candidate **out,
                     void (*held_fn)(dz_candidate *cd, const char *why, void *ud), void *ud) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    dz_candidate *cd = candidates[i];
    if (!dz_is_empty_candidate(cd)) continue;
    if (cd->blocked) {
      if (held_fn) held_fn(cd, cd->blocked, ud);
    } else if (!take_budget(left, cd->pool)) {
      if (held_fn)
        held_fn(cd, "No allowed disruptions for disruption reason " DZ_REASON_EMPTY " due to blocking budget",
                ud);
    } else {
      out[k++] = cd;
    }
  }
  return k;
}

size_t dz_pick_consolidatable(dz_candidate *const *candidates, size_t n, json_t *left, size_t max,
                              dz_candidate **out) {
  size_t k = 0;
  for (size_t i = 0; i < n && k < max; i++) {
    dz_candidate *cd = candidates[i];
    if (dz_is_underutilized_candidate(cd) && !cd->blocked && take_budget(left, cd->pool)) out[k++] = cd;
  }
  return k;
}

size_t dz_multi_prefix(dz_candidate *const *candidates, size_t n, dz_try_fn try_fn, void *ud) {
  if (n < 2) return 0;
  size_t lo = 2, hi = n, best = 0;
  while (lo <= hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (try_fn(ud, candidates, mid)) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

size_t dz_single_first(dz_candidate *const *candidates, size_t n, dz_try_fn try_fn, void *ud) {
  for (size_t i = 0; i < n; i++)
    if (try_fn(ud, &candidates[i], 1)) return i;
  return n;
}

size_t dz_drop_candidate_types(json_t *shape, json_t *const *claims, size_t k) {
  size_t i;
  json_t *req;
  json_array_foreach(json_object_get(shape, "requirements"), i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    json_t *values = json_object_get(req, "values");
    if (!key || strcmp(key, LP_LABEL_INSTANCE_TYPE) != 0 || !json_is_array(values)) continue;
    for (size_t v = json_array_size(values); v-- > 0;) {
      const char *type = json_string_value(json_array_get(values, v));
      for (size_t c = 0; c < k; c++) {
        const char *has = lp_obj_label(claims[c], LP_LABEL_INSTANCE_TYPE);
        if (type && has && strcmp(type, has) == 0) {
          json_array_remove(values, v);
          break;
        }
      }
    }
    return json_array_size(values);
  }
  return SIZE_MAX;
}
