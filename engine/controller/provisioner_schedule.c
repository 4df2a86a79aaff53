/* Packing pending pods into new NodeClaims (provisioner_internal.h; a simplified
 * Karpenter scheduler): first fit decreasing. Pods come biggest first; each goes onto the
 * first NodeClaim opened so far that can still take it — its taints tolerated, its requirements
 * agreeing, and some option left that holds every pod plus the DaemonSet overhead — else opens a new
 * NodeClaim on the first NodePool (by weight) that has an option for it. A NodeClaim's options are
 * the instance types compatible with its requirements, with an available compatible offering, whose
 * allocatable holds its pods and whose capacity fits the NodePool's remaining limits, keeping the
 * pool's minValues. A pod is tried in its attempts' order (pv_pod_attempt: preferences first, then
 * relaxed); pods sharing a host port never share a NodeClaim, and topology (provisioner_topology.c)
 * may refuse a NodeClaim or narrow an open zone to one value. The reason kept for FailedScheduling is
 * that of the most relaxed attempts. A pod that leaves a NodeClaim's requirements as they were only
 * has its resources checked against the options; one that narrows them has the options checked again,
 * on the compiled requirements, each distinct offering list once (provisioner_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/provisioner_internal.h"
#include "core/buf.h"
#include "core/error.h"

static int by_size(const void *a, const void *b) {
  const pv_pod *x = a, *y = b;
  for (int r = PV_CPU; r <= PV_MEMORY; r++)
    if (x->requests.v[r] != y->requests.v[r]) return x->requests.v[r] > y->requests.v[r] ? -1 : 1;
  if (x->created != y->created) return x->created < y->created ? -1 : 1;
  return strcmp(x->key, y->key);
}

void pv_sort_pods(pv_pass *p) {
  if (p->npods) qsort(p->pods, p->npods, sizeof *p->pods, by_size);
}

double pv_offer_price(const pv_offer *offer, const lp_reqs *reqs) {
  return offer->available && offer->priced && lp_reqs_compatible(reqs, offer->reqs) ? offer->price : -1;
}

/* The claim's requirements compiled, compiled again when c->reqs was replaced since (a simulation may
 * pin them). */
static const lp_reqs *claim_compiled(pv_claim *c) {
  if (lp_reqs_json(c->creqs) != c->reqs) {
    lp_reqs_free(c->creqs);
    c->creqs = lp_reqs_compile(c->reqs);
  }
  return c->creqs;
}

/* Requirements checked against a pool's offerings, each distinct offering list once (pool->offer_reqs):
 * known[group] is 0 until asked, then 1 compatible, 2 not. */
typedef struct offer_memo {
  const lp_reqs *reqs;
  unsigned char *known;
} offer_memo;

static offer_memo memo_new(const pv_pool *pool, const lp_reqs *reqs) {
  return (offer_memo){reqs, lp_xcalloc(pool->noffer_reqs + 1, 1)};
}

static int memo_compatible(const offer_memo *m, const pv_offer *o) {
  if (!m->known[o->group]) m->known[o->group] = lp_reqs_compatible(m->reqs, o->reqs) ? 1 : 2;
  return m->known[o->group] == 1;
}

/* The cheapest available offering of type compatible with m's requirements: its price, or < 0 when
 * none (pv_offer_price's answer, each offering list checked once). */
static double cheapest_offering(const pv_type *type, const offer_memo *m) {
  double best = -1;
  for (size_t i = 0; i < type->noffers; i++) {
    const pv_offer *o = &type->offers[i];
    if (!o->available || !o->priced || !memo_compatible(m, o)) continue;
    if (o->price >= 0 && (best < 0 || o->price < best)) best = o->price;
  }
  return best;
}

/* Non-zero when a claim under m's requirements may take type: compatible, with an available compatible
 * offering. */
static int type_allowed(const pv_type *type, const offer_memo *m) {
  return lp_reqs_compatible(m->reqs, type->reqs) && cheapest_offering(type, m) >= 0;
}

/* A key the pod requires that neither the pool nor its instance types define, or NULL. */
static const char *unknown_label(const pv_pool *pool, const json_t *pod_reqs) {
  return pv_undefined_key(pod_reqs, pool->reqs, pool->provider_keys, 1);
}

static void set_max_alloc(pv_claim *c) {
  memset(&c->max_alloc, 0, sizeof c->max_alloc);
  for (size_t t = 0; t < c->ntypes; t++)
    for (size_t r = 0; r < PV_RES_MAX; r++)
      if (c->types[t]->allocatable.v[r] > c->max_alloc.v[r])
        c->max_alloc.v[r] = c->types[t]->allocatable.v[r];
}

/* Notes in seen the values of key that type offers; returns how many were new. */
static size_t note_values(json_t *seen, const pv_type *type, const char *key) {
  size_t i, added = 0;
  const json_t *v;
  json_array_foreach(pv_type_values(type, key), i, v) {
    const char *value = json_string_value(v);
    if (!value || json_object_get(seen, value)) continue;
    json_object_set_new(seen, value, json_true());
    added++;
  }
  return added;
}

/* The first minValues requirement of the pool that the n types do not meet (borrowed), or NULL;
 * *have gets how many distinct values they offer for its key. */
static const json_t *min_values_unmet(const pv_pool *pool, pv_type *const *types, size_t n, size_t *have) {
  size_t i;
  const json_t *req;
  json_array_foreach(pool->min_values, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    size_t want = (size_t)json_integer_value(json_object_get(req, "minValues")), count = 0;
    json_t *seen = json_object();
    for (size_t t = 0; t < n && count < want; t++) count += note_values(seen, types[t], key);
    json_decref(seen);
    if (count < want) {
      *have = count;
      return req;
    }
  }
  return NULL;
}

static void claim_push_pod(pv_claim *c, size_t pod) {
  if (c->npods == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 8;
    c->pods = lp_xrealloc(c->pods, c->cap * sizeof *c->pods);
  }
  c->pods[c->npods++] = pod;
}

/* Narrows claim c to reqs (stolen) with the pod: the options that still hold every pod and, when
 * changed, agree with reqs, keeping minValues. Returns non-zero when it did; else c is unchanged. */
static int claim_take(pv_pass *p, pv_claim *c, size_t index, json_t *reqs, const pv_res *pods) {
  pv_pod *pod = &p->pods[index];
  pv_pool *pool = c->pool;
  pv_res want = pv_res_sum(pods, &pool->daemon);
  int changed = !json_equal(reqs, c->reqs);
  lp_reqs *creqs = changed ? lp_reqs_compile(reqs) : NULL;
  offer_memo memo = memo_new(pool, creqs);
  pv_type **kept = lp_xmalloc((c->ntypes ? c->ntypes : 1) * sizeof *kept);
  size_t n = 0;
  for (size_t t = 0; t < c->ntypes; t++) {
    pv_type *type = c->types[t];
    if (!pv_res_fits(&p->dims, &want, &type->allocatable)) continue;
    if (changed && !type_allowed(type, &memo)) continue;
    kept[n++] = type;
  }
  free(memo.known);
  size_t have = 0;
  if (n == 0 || (pool->min_values && min_values_unmet(pool, kept, n, &have))) {
    free(kept);
    lp_reqs_free(creqs);
    json_decref(reqs);
    return 0;
  }
  free(c->types);
  c->types = kept;
  c->ntypes = n;
  if (changed) { /* unchanged, the claim keeps its list and its compiled form */
    json_decref(c->reqs);
    c->reqs = reqs;
    lp_reqs_free(c->creqs);
    c->creqs = creqs;
  } else {
    json_decref(reqs);
  }
  c->requests = *pods;
  pv_ports_add(&c->ports, &pod->ports);
  claim_push_pod(c, index);
  set_max_alloc(c);
  pv_site site = {c->host, NULL, c->reqs, 1};
  pv_topology_record(p, pod, &site);
  return 1;
}

/* Tries reqs (stolen) narrowed by each of options (NULL: reqs alone) in turn with take(p, x, index,
 * narrowed, ud); returns non-zero at the first that takes the pod. */
static int each_option(pv_pass *p, void *x, size_t index, json_t *reqs, const json_t *options,
                       int (*take)(pv_pass *p, void *x, size_t index, json_t *reqs, void *ud), void *ud) {
  if (!options) return take(p, x, index, reqs, ud);
  int done = 0;
  size_t i;
  const json_t *o;
  json_array_foreach(options, i, o) {
    json_t *narrowed = json_array_size(o) ? lp_requirements_intersect(reqs, o, NULL) : json_incref(reqs);
    if (narrowed && (done = take(p, x, index, narrowed, ud))) break;
  }
  json_decref(reqs);
  return done;
}

static int claim_take_option(pv_pass *p, void *x, size_t index, json_t *reqs, void *ud) {
  return claim_take(p, x, index, reqs, ud);
}

/* Puts the pod on the claim when it can take it; returns non-zero when it did. */
static int claim_add(pv_pass *p, pv_claim *c, size_t index) {
  pv_pod *pod = &p->pods[index];
  pv_pool *pool = c->pool;
  pv_res pods = pv_res_sum(&c->requests, &pod->requests);
  pv_res want = pv_res_sum(&pods, &pool->daemon);
  if (!pv_res_fits(&p->dims, &want, &c->max_alloc) || !pv_tolerates(pod->tolerations, pool->taints, NULL) ||
      pv_ports_clash(&c->ports, &pod->ports))
    return 0;
  json_t *reqs = json_incref(c->reqs);
  if (pod->reqs) {
    json_decref(reqs);
    reqs = unknown_label(pool, pod->reqs) ? NULL : lp_requirements_intersect(c->reqs, pod->reqs, NULL);
    if (!reqs) return 0;
  }
  pv_site site = {c->host, NULL, reqs, 1};
  json_t *options = pv_topology_options(p, pod, &site, NULL);
  int done = each_option(p, c, index, reqs, options, claim_take_option, &pods);
  json_decref(options);
  return done;
}

/* Why a pool's instance types cannot hold a pod, counted while looking for options. */
typedef struct type_misses {
  size_t incompatible, unavailable, too_small, over_limits;
  const pv_type *largest; /* of those too small, by cpu */
} type_misses;

static int within_limits(const pv_pass *p, const pv_pool *pool, const pv_type *type) {
  for (size_t r = 0; r < p->dims.n; r++)
    if (pool->limited[r] && type->capacity.v[r] > pool->limit.v[r] - pool->used.v[r] + 1e-9) return 0;
  return 1;
}

static void describe_misses(lp_buf *why, const pv_pass *p, const pv_pool *pool, const type_misses *m,
                            const pv_res *want) {
  lp_buf_printf(why, "nodepool %s: of %zu instance types", pool->name, pool->ntypes);
  if (m->incompatible) lp_buf_printf(why, ", %zu incompatible with the pod's requirements", m->incompatible);
  if (m->unavailable) lp_buf_printf(why, ", %zu without an available offering", m->unavailable);
  if (m->too_small) {
    char *lack = pv_res_shortfall(&p->dims, want, &m->largest->allocatable);
    lp_buf_printf(why, ", %zu too small (%s on the largest, %s)", m->too_small, lack, m->largest->name);
    free(lack);
  }
  if (m->over_limits) lp_buf_printf(why, ", %zu over the nodepool's remaining limits", m->over_limits);
}

static pv_claim *new_claim(pv_pass *p, pv_pool *pool, json_t *reqs, lp_reqs *creqs) {
  if (p->nclaims == p->claims_cap) {
    p->claims_cap = p->claims_cap ? 2 * p->claims_cap : 16;
    p->claims = lp_xrealloc(p->claims, p->claims_cap * sizeof *p->claims);
  }
  pv_claim *c = &p->claims[p->nclaims++];
  memset(c, 0, sizeof *c);
  c->pool = pool;
  c->reqs = reqs;
  c->creqs = creqs;
  snprintf(c->host, sizeof c->host, "new-%zu", p->nclaims - 1);
  return c;
}

/* What opening a claim tries to place, and why it could not. */
typedef struct opening {
  pv_res want;   /* the pod and the pool's DaemonSet overhead */
  lp_buf detail; /* why the last option failed */
} opening;

/* Opens a NodeClaim on pool with requirements reqs (stolen) for the pod when some option holds it. */
static int open_with(pv_pass *p, void *x, size_t index, json_t *reqs, void *ud) {
  pv_pool *pool = x;
  opening *o = ud;
  pv_pod *pod = &p->pods[index];
  type_misses m = {0};
  lp_reqs *creqs = lp_reqs_compile(reqs);
  offer_memo memo = memo_new(pool, creqs);
  pv_type **kept = lp_xmalloc((pool->ntypes ? pool->ntypes : 1) * sizeof *kept);
  size_t n = 0;
  for (size_t t = 0; t < pool->ntypes; t++) {
    pv_type *type = &pool->types[t];
    if (!lp_reqs_compatible(creqs, type->reqs)) {
      m.incompatible++;
    } else if (cheapest_offering(type, &memo) < 0) {
      m.unavailable++;
    } else if (!pv_res_fits(&p->dims, &o->want, &type->allocatable)) {
      m.too_small++;
      if (!m.largest || type->allocatable.v[PV_CPU] > m.largest->allocatable.v[PV_CPU]) m.largest = type;
    } else if (!within_limits(p, pool, type)) {
      m.over_limits++;
    } else {
      kept[n++] = type;
    }
  }
  free(memo.known);
  size_t have = 0;
  const json_t *unmet = n && pool->min_values ? min_values_unmet(pool, kept, n, &have) : NULL;
  lp_buf_reset(&o->detail);
  if (unmet)
    lp_buf_printf(&o->detail,
                  "nodepool %s: minValues requirement is not met for %s (%zu of %lld distinct values)",
                  pool->name, json_string_value(json_object_get(unmet, "key")), have,
                  (long long)json_integer_value(json_object_get(unmet, "minValues")));
  else if (n == 0)
    describe_misses(&o->detail, p, pool, &m, &o->want);
  if (n == 0 || unmet) {
    free(kept);
    lp_reqs_free(creqs);
    json_decref(reqs);
    return 0;
  }
  pv_claim *c = new_claim(p, pool, reqs, creqs);
  c->types = kept;
  c->ntypes = n;
  c->requests = pod->requests;
  pv_ports_add(&c->ports, &pool->daemon_ports);
  pv_ports_add(&c->ports, &pod->ports);
  claim_push_pod(c, index);
  set_max_alloc(c);
  pv_site site = {c->host, NULL, c->reqs, 1};
  pv_topology_record(p, pod, &site);
  /* Karpenter's pessimism: the claim may become its largest option, so that much of the limit is gone */
  for (size_t r = 0; r < PV_RES_MAX; r++) {
    double largest = 0;
    for (size_t t = 0; t < n; t++)
      if (kept[t]->capacity.v[r] > largest) largest = kept[t]->capacity.v[r];
    pool->used.v[r] += largest;
  }
  pool->nodes_used += 1;
  return 1;
}

/* Opens a NodeClaim on pool for the pod, or appends to why the reason it cannot. */
static int open_claim(pv_pass *p, pv_pool *pool, size_t index, lp_buf *why) {
  pv_pod *pod = &p->pods[index];
  const json_t *taint = NULL;
  const char *unknown = NULL;
  char *conflict = NULL;
  if (pool->skip_why) {
    lp_buf_printf(why, "nodepool %s: %s", pool->name, pool->skip_why);
    return 0;
  }
  if (!pv_tolerates(pod->tolerations, pool->taints, &taint)) {
    char *text = pv_taint_text(taint);
    lp_buf_printf(why, "nodepool %s: the pod does not tolerate taint %s", pool->name, text);
    free(text);
    return 0;
  }
  const pv_port *port = pv_ports_clash(&pool->daemon_ports, &pod->ports);
  if (port) {
    lp_buf_printf(why, "nodepool %s: host port %d/%s%s%s in use by a DaemonSet pod", pool->name, port->port,
                  port->protocol, *port->ip ? " on " : "", port->ip);
    return 0;
  }
  if ((unknown = unknown_label(pool, pod->reqs))) {
    lp_buf_printf(why, "nodepool %s: label %s does not have known values", pool->name, unknown);
    return 0;
  }
  json_t *reqs =
      pod->reqs ? lp_requirements_intersect(pool->reqs, pod->reqs, &conflict) : json_incref(pool->reqs);
  if (!reqs) {
    lp_buf_printf(why, "nodepool %s: incompatible requirements, %s", pool->name, conflict);
    free(conflict);
    return 0;
  }
  if (pool->node_limit >= 0 && pool->nodes_used + 1 > pool->node_limit + 1e-9) {
    lp_buf_printf(why, "nodepool %s: its nodes limit of %g is reached", pool->name, pool->node_limit);
    json_decref(reqs);
    return 0;
  }
  char host[32];
  snprintf(host, sizeof host, "new-%zu", p->nclaims);
  pv_site site = {host, NULL, reqs, 1};
  opening o = {pv_res_sum(&pod->requests, &pool->daemon), LP_BUF_INIT};
  json_t *options = pv_topology_options(p, pod, &site, &o.detail);
  if (options && json_array_size(options) == 0) {
    lp_buf_printf(why, "nodepool %s: %s", pool->name, lp_buf_cstr(&o.detail));
    json_decref(options);
    json_decref(reqs);
    lp_buf_free(&o.detail);
    return 0;
  }
  int done = each_option(p, pool, index, reqs, options, open_with, &o);
  if (!done) lp_buf_puts(why, lp_buf_cstr(&o.detail));
  json_decref(options);
  lp_buf_free(&o.detail);
  return done;
}

/* Puts the pod, as its current attempt asks, on a NodeClaim opened so far, else on a new one on the
 * first NodePool that takes it; appends to why the reason each NodePool cannot. */
static int place_new(pv_pass *p, size_t index, lp_buf *why) {
  for (size_t k = 0; k < p->nclaims; k++)
    if (claim_add(p, &p->claims[k], index)) return 1;
  for (size_t k = 0; k < p->npools; k++) {
    if (k) lp_buf_puts(why, "; ");
    if (open_claim(p, &p->pools[k], index, why)) return 1;
  }
  if (p->npools == 0) lp_buf_puts(why, "no NodePool with a Ready node class");
  return 0;
}

void pv_schedule(pv_pass *p) {
  pv_topology_add_pool_domains(p);
  for (size_t i = 0; i < p->npods; i++) {
    pv_pod *pod = &p->pods[i];
    if (pod->placed) continue;
    size_t attempts = pv_pod_attempts(pod), terms = json_array_size(pod->terms), last = terms ? terms : 1;
    lp_buf why = LP_BUF_INIT, one = LP_BUF_INIT;
    for (size_t a = 0; a < attempts && !pod->placed; a++) {
      if (!pv_pod_attempt(pod, a)) continue;
      lp_buf_reset(&one);
      pod->placed = place_new(p, i, &one);
      if (pod->placed || a + last < attempts) continue; /* only the most relaxed attempts say why */
      if (why.len) lp_buf_puts(&why, "; ");
      if (terms > 1) lp_buf_printf(&why, "with term %zu of its required node affinity: ", a % terms + 1);
      lp_buf_puts(&why, lp_buf_cstr(&one));
    }
    lp_buf_free(&one);
    if (pod->placed)
      lp_buf_free(&why);
    else
      pod->why = lp_buf_take(&why, NULL);
  }
}

typedef struct priced {
  pv_type *type;
  double price;
} priced;

static int by_price(const void *a, const void *b) {
  const priced *x = a, *y = b;
  if (x->price != y->price) return x->price < y->price ? -1 : 1;
  return strcmp(x->type->name, y->type->name);
}

/* Reorders list (n > PV_MAX_INSTANCE_TYPES, cheapest first) so that its first PV_MAX_INSTANCE_TYPES
 * are, by price, the cheapest types giving each minValues key of the pool its distinct values first,
 * then the cheapest of the rest: the truncation keeps minValues when the options can. */
static void keep_min_values(const pv_pool *pool, priced *list, size_t n) {
  char *chosen = lp_xcalloc(n, 1);
  size_t nchosen = 0, i;
  const json_t *req;
  json_array_foreach(pool->min_values, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    size_t want = (size_t)json_integer_value(json_object_get(req, "minValues")), count = 0;
    json_t *seen = json_object();
    for (size_t t = 0; t < n; t++)
      if (chosen[t]) count += note_values(seen, list[t].type, key);
    for (size_t t = 0; t < n && count < want && nchosen < PV_MAX_INSTANCE_TYPES; t++) {
      if (chosen[t]) continue;
      size_t added = note_values(seen, list[t].type, key);
      if (added) {
        chosen[t] = 1;
        nchosen++;
        count += added;
      }
    }
    json_decref(seen);
  }
  for (size_t t = 0; t < n && nchosen < PV_MAX_INSTANCE_TYPES; t++)
    if (!chosen[t]) {
      chosen[t] = 1;
      nchosen++;
    }
  priced *sorted = lp_xmalloc(n * sizeof *sorted);
  size_t k = 0;
  for (size_t t = 0; t < n; t++)
    if (chosen[t]) sorted[k++] = list[t];
  for (size_t t = 0; t < n; t++)
    if (!chosen[t]) sorted[k++] = list[t];
  memcpy(list, sorted, n * sizeof *list);
  free(sorted);
  free(chosen);
}

static void note_capacity_types(json_t *set, const pv_type *type, const offer_memo *m) {
  for (size_t i = 0; i < type->noffers; i++) {
    const pv_offer *o = &type->offers[i];
    if (o->capacity_type && o->available && memo_compatible(m, o))
      json_object_set_new(set, o->capacity_type, json_true());
  }
}

void pv_finalize(pv_pass *p) {
  for (size_t k = 0; k < p->nclaims; k++) {
    pv_claim *c = &p->claims[k];
    offer_memo memo = memo_new(c->pool, claim_compiled(c));
    priced *list = lp_xmalloc(c->ntypes * sizeof *list);
    for (size_t t = 0; t < c->ntypes; t++)
      list[t] = (priced){c->types[t], cheapest_offering(c->types[t], &memo)};
    qsort(list, c->ntypes, sizeof *list, by_price);
    if (c->ntypes > PV_MAX_INSTANCE_TYPES) {
      if (c->pool->min_values) keep_min_values(c->pool, list, c->ntypes);
      c->ntypes = PV_MAX_INSTANCE_TYPES;
    }
    json_t *set = json_object();
    for (size_t t = 0; t < c->ntypes; t++) {
      c->types[t] = list[t].type;
      note_capacity_types(set, list[t].type, &memo);
    }
    c->cheapest_price = list[0].price;
    free(list);
    free(memo.known);
    c->capacity_types = json_array();
    const char *ct;
    json_t *v;
    json_object_foreach(set, ct, v) json_array_append_new(c->capacity_types, json_string(ct));
    json_decref(set);
  }
}

void pv_claims_free(pv_pass *p) {
  for (size_t k = 0; k < p->nclaims; k++) {
    json_decref(p->claims[k].reqs);
    lp_reqs_free(p->claims[k].creqs);
    json_decref(p->claims[k].capacity_types);
    free(p->claims[k].types);
    free(p->claims[k].pods);
    pv_ports_free(&p->claims[k].ports);
  }
  free(p->claims);
  p->claims = NULL;
  p->nclaims = p->claims_cap = 0;
}
