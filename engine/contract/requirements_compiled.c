/* Requirement lists compiled once for many compatibility checks (requirements.h): the provisioner
 * compares a NodeClaim's requirements with hundreds of instance types and their offerings per pod, and
 * walking JSON arrays with string compares there cost most of a packing pass.
 *
 * A compiled entry is what lp_requirements_compatible reads from a requirement (requirements.c: a
 * finite set for In, a complement for NotIn, Exists, Gt, Lt, Gte, Lte, the absent label for
 * DoesNotExist), with its key and its values hashed and sorted, the values' integers parsed once.
 * Entries are sorted by key, so two lists meet in one merge walk instead of every pair of entries.
 * The answer is the JSON path's, entry for entry; spec/c/test_requirements.c holds both to it. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "core/error.h"

typedef struct cvalue {
  uint64_t hash;
  const char *s;
  int integer; /* s is a base-10 integer, n */
  long long n;
} cvalue;

typedef struct centry {
  uint64_t hash;
  const char *key;
  enum { C_FINITE, C_COMPLEMENT, C_ABSENT } kind;
  int negative; /* NotIn with values, or DoesNotExist: agrees with any other negative */
  int has_min, has_max;
  long long min, max; /* inclusive */
  size_t nvalues;
  cvalue *values; /* members (FINITE) or exclusions (COMPLEMENT), by hash then text */
} centry;

struct lp_reqs {
  json_t *src; /* the list (own reference): the strings are its */
  size_t n;
  centry *v; /* by hash then key */
};

static uint64_t hash_of(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int cmp_hashed(uint64_t ha, const char *a, uint64_t hb, const char *b) {
  if (ha != hb) return ha < hb ? -1 : 1;
  return strcmp(a, b);
}

static int by_value(const void *x, const void *y) {
  const cvalue *a = x, *b = y;
  return cmp_hashed(a->hash, a->s, b->hash, b->s);
}

static int by_key(const void *x, const void *y) {
  const centry *a = x, *b = y;
  return cmp_hashed(a->hash, a->key, b->hash, b->key);
}

static long long first_bound(const json_t *values) {
  long long v = 0;
  lp_requirement_integer(json_string_value(json_array_get(values, 0)), &v);
  return v;
}

/* The string values of list, hashed and sorted, into out (room for json_array_size(list)). */
static size_t compile_values(const json_t *list, cvalue *out) {
  size_t i, n = 0;
  const json_t *item;
  json_array_foreach(list, i, item) {
    const char *s = json_string_value(item);
    if (!s) continue;
    cvalue *v = &out[n++];
    v->s = s;
    v->hash = hash_of(s);
    v->integer = lp_requirement_integer(s, &v->n) == 0;
  }
  if (n > 1) qsort(out, n, sizeof *out, by_value);
  return n;
}

static void compile_entry(const json_t *req, const char *key, centry *e, cvalue **room) {
  const char *op = json_string_value(json_object_get(req, "operator"));
  const json_t *values = json_object_get(req, "values");
  memset(e, 0, sizeof *e);
  e->key = key;
  e->hash = hash_of(key);
  e->kind = C_COMPLEMENT;
  const json_t *listed = NULL;
  if (!op || strcmp(op, "In") == 0) {
    e->kind = C_FINITE;
    listed = values;
  } else if (strcmp(op, "NotIn") == 0) {
    listed = values;
    e->negative = values != NULL;
  } else if (strcmp(op, "DoesNotExist") == 0) {
    e->kind = C_ABSENT;
    e->negative = 1;
  } else if (strcmp(op, "Gt") == 0 || strcmp(op, "Gte") == 0) {
    e->has_min = 1;
    e->min = first_bound(values) + (strcmp(op, "Gt") == 0);
  } else if (strcmp(op, "Lt") == 0 || strcmp(op, "Lte") == 0) {
    e->has_max = 1;
    e->max = first_bound(values) - (strcmp(op, "Lt") == 0);
  } /* Exists, or an operator nobody knows: the full complement */
  e->values = *room;
  e->nvalues = compile_values(listed, *room);
  *room += e->nvalues;
}

lp_reqs *lp_reqs_compile(const json_t *list) {
  size_t n = 0, nvalues = 0, i;
  const json_t *req;
  json_array_foreach(list, i, req) {
    if (!json_string_value(json_object_get(req, "key"))) continue;
    n++;
    nvalues += json_array_size(json_object_get(req, "values"));
  }
  /* one block: the header, the entries, then every entry's values */
  lp_reqs *r = lp_xmalloc(sizeof *r + n * sizeof(centry) + nvalues * sizeof(cvalue));
  r->src = json_incref((json_t *)list);
  r->n = n;
  r->v = (centry *)(r + 1);
  cvalue *room = (cvalue *)(r->v + n);
  size_t k = 0;
  json_array_foreach(list, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    if (key) compile_entry(req, key, &r->v[k++], &room);
  }
  if (n > 1) qsort(r->v, n, sizeof *r->v, by_key);
  return r;
}

void lp_reqs_free(lp_reqs *r) {
  if (!r) return;
  json_decref(r->src);
  free(r);
}

const json_t *lp_reqs_json(const lp_reqs *r) {
  return r ? r->src : NULL;
}

static int has_value(const centry *e, const cvalue *v) {
  size_t lo = 0, hi = e->nvalues;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = cmp_hashed(e->values[mid].hash, e->values[mid].s, v->hash, v->s);
    if (c == 0) return 1;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

/* Non-zero when the complement e holds v: not excluded, and within its bounds. */
static int complement_holds(const centry *e, const cvalue *v) {
  if (e->nvalues && has_value(e, v)) return 0;
  if (!e->has_min && !e->has_max) return 1;
  if (!v->integer) return 0;
  return (!e->has_min || v->n >= e->min) && (!e->has_max || v->n <= e->max);
}

static int entries_meet(const centry *a, const centry *b) {
  if (a->negative && b->negative) return 1;
  if (a->kind == C_ABSENT || b->kind == C_ABSENT) return 0;
  if (a->kind == C_FINITE || b->kind == C_FINITE) {
    const centry *finite = a->kind == C_FINITE ? a : b, *other = finite == a ? b : a;
    for (size_t i = 0; i < finite->nvalues; i++) {
      const cvalue *v = &finite->values[i];
      if (other->kind == C_FINITE ? has_value(other, v) : complement_holds(other, v)) return 1;
    }
    return 0;
  }
  long long lo = a->has_min ? a->min : LLONG_MIN, hi = a->has_max ? a->max : LLONG_MAX;
  if (b->has_min && b->min > lo) lo = b->min;
  if (b->has_max && b->max < hi) hi = b->max;
  return lo <= hi;
}

int lp_reqs_compatible(const lp_reqs *a, const lp_reqs *b) {
  if (!a || !b) return 1;
  size_t i = 0, j = 0;
  while (i < a->n && j < b->n) {
    const centry *x = &a->v[i], *y = &b->v[j];
    int c = cmp_hashed(x->hash, x->key, y->hash, y->key);
    if (c < 0) {
      i++;
    } else if (c > 0) {
      j++;
    } else { /* every entry of a on this key against every one of b */
      size_t ie = i, je = j;
      while (ie < a->n && by_key(&a->v[ie], x) == 0) ie++;
      while (je < b->n && by_key(&b->v[je], y) == 0) je++;
      for (size_t p = i; p < ie; p++)
        for (size_t q = j; q < je; q++)
          if (!entries_meet(&a->v[p], &b->v[q])) return 0;
      i = ie;
      j = je;
    }
  }
  return 1;
}
