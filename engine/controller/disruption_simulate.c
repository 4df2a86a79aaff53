/* The consolidation simulation (disruption_simulate.h; docs/controllers.md "How consolidation decides"),
 * built on the provisioner's passes (provisioner_internal.h) with no provisioner state: one-way, the
 * provisioner never calls it.
 *
 * The snapshot (dz_sim_new) lists the instance types of the Ready node classes the NodePools and
 * NodeClaims use, then, on a later turn of the loop, reads the caches once: the NodePools with their
 * requirements, DaemonSet overhead, limit usage and compatible instance types (pv_collect_pools,
 * pv_pool_set_types); the reschedulable pods of every node and the pending pods, each built as a
 * provisioning pass builds it (pv_pod_init: every required node-affinity term, preferences, tolerations,
 * host ports, pod (anti-)affinity and topology spread, whose groups go into the base pass; and
 * pv_pod_require with the zone its volumes pin, lp_volume_requirements: a bound pod whose claim is gone
 * keeps no volume requirement, a pending one is left out); then every bin (pv_collect_bins: Ready
 * schedulable nodes minus their bound pods, and NodeClaims on their way), which counts the bound pods
 * into those groups. It keeps a reference to every node and NodeClaim, so what the bins borrow stays
 * valid, and to every bound pod, by node (what a simulation takes back from the topology counts).
 *
 * One simulation (dz_simulate) copies the bins but the candidates' (their nodes and their capacity
 * leave with them, so nothing they free counts twice; each copy's host ports its own), the pools (whose
 * limit usage the packing spends), the pods (each with its own reference to its requirements, which an
 * attempt replaces) and the topology counts, from which it takes back every pod bound to a candidate's
 * node (pv_topology_uncount: DaemonSet pods too, and the anti-affinity they carry); the packing then
 * records its placements into that copy alone. It packs the pending pods and the candidates' pods as a
 * provisioning pass does: onto bins first (pv_place_on_bins: any required term, host ports, hard
 * topology), then into new NodeClaims (pv_schedule, pv_finalize: preferences and soft topology tried
 * first, then relaxed). A candidate's pod placed on a NodeClaim that has not initialized: not feasible
 * (that room may never come). All candidates' pods on bins: delete only. A candidate pod left over: not
 * feasible, its why naming the constraint. Their pods over two new NodeClaims or more: not feasible.
 * One: the price rules below decide.
 *
 * Prices: a candidate's is its instance type's offering in its zone and capacity type (labels of its
 * Node, else of the NodeClaim). The replacement keeps the options whose cheapest available compatible
 * offering is below the candidates' sum, and is taken only when the worst launch price over them is
 * below it too. Every candidate spot and the replacement able to be spot: spot to spot, only with
 * allow_spot_to_spot, pinned to spot, and for a single candidate only with DZ_SPOT_TO_SPOT_MIN_TYPES
 * cheaper options, cut to that many. Otherwise, a replacement that may be spot or not is pinned to spot
 * when spot options stay cheaper (a launch then never falls back to a dearer on-demand node).
 *
 * No events, no logs, no metrics: the caller reports what it decides. */
#include "controller/disruption_simulate.h"

#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "contract/shapes.h"
#include "controller/conditions.h"
#include "controller/provisioner_internal.h"
#include "controller/volume_topology.h"
#include "core/buf.h"
#include "core/error.h"

#define SPOT      "spot"
#define ON_DEMAND "on-demand"

struct dz_sim {
  lp_controller *c;
  void (*ready)(void *ud, dz_sim *sim, lp_error *err);
  void *ud;
  uv_timer_t *turn; /* the later turn of the loop that takes the snapshot */
  size_t fetching;
  lp_error *err;
  pv_pass base;   /* dims, pools with their types, bins; base.types: node class key -> its types */
  json_t *nodes;  /* node name -> the cached node (the bins borrow from it) */
  json_t *claims; /* NodeClaim name -> the cached NodeClaim (likewise) */
  char **names;   /* the bins' node and NodeClaim names (the cache's keys copied) */
  json_t *prices; /* node class key -> {type name -> type}: the candidates' prices */
  pv_pod *pods;   /* reschedulable bound pods, then the pending ones (pv_pod_init into base) */
  size_t npods, npending, cap;
  json_t *by_node;          /* node name -> [indices into pods] */
  json_t *on_node;          /* node name -> [every pod bound there (own references)] */
  struct dz_quote **quotes; /* per pool, per pool type: its quote under the pool's requirements */
};

static void quote_pools(dz_sim *s);

/* ---- the snapshot ----------------------------------------------------------------------------- */

/* The pod as the provisioner sees it (pv_pod_init: its terms, preferences, host ports and topology
 * terms, interned into the base pass), its volumes' zone ANDed in (volumes may be NULL). */
static void add_pod(dz_sim *s, const char *key, json_t *pod, const json_t *volumes) {
  if (s->npods == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->pods = lp_xrealloc(s->pods, s->cap * sizeof *s->pods);
  }
  pv_pod *pp = &s->pods[s->npods++];
  pv_pod_init(&s->base, pp, key, pod);
  if (volumes) pv_pod_require(pp, volumes);
}

static void append(json_t *index, const char *key, json_t *item) {
  json_t *list = json_object_get(index, key);
  if (!list) json_object_set_new(index, key, list = json_array());
  json_array_append_new(list, item);
}

static void scan_bound(const char *key, json_t *pod, void *ud) {
  dz_sim *s = ud;
  const char *node = lp_obj_str(pod, "spec.nodeName");
  if (!node || !*node) return;
  append(s->on_node, node, json_incref(pod)); /* pv_topology_uncount passes over the finished ones */
  if (!pv_pod_reschedulable(pod)) return;
  char *why = NULL; /* a claim gone missing: the pod runs, and moves with no volume requirement */
  json_t *volumes = lp_volume_requirements(s->base.env, pod, &why);
  free(why);
  append(s->by_node, node, json_integer((json_int_t)s->npods));
  add_pod(s, key, pod, volumes);
  json_decref(volumes);
}

static void scan_pending(const char *key, json_t *pod, void *ud) {
  dz_sim *s = ud;
  if (!pv_pod_provisionable(pod)) return;
  char *why = NULL;
  json_t *volumes = lp_volume_requirements(s->base.env, pod, &why);
  if (!why) add_pod(s, key, pod, volumes); /* a missing claim: it waits, as the provisioner leaves it */
  free(why);
  json_decref(volumes);
}

static void hold(const char *key, json_t *obj, void *ud) {
  json_object_set(ud, key, obj);
}

/* {type name -> type} of every node class's list. */
static void index_prices(dz_sim *s) {
  s->prices = json_object();
  const char *key;
  json_t *types;
  json_object_foreach(s->base.types, key, types) {
    json_t *byname = json_object();
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t) {
      const char *name = json_string_value(json_object_get(t, "name"));
      if (name) json_object_set(byname, name, t);
    }
    json_object_set_new(s->prices, key, byname);
  }
}

static void snapshot(dz_sim *s) {
  pv_pass *p = &s->base;
  s->nodes = json_object();
  s->claims = json_object();
  lp_env_each(p->env, LP_KIND_NODE, hold, s->nodes);
  lp_env_each(p->env, LP_KIND_NODECLAIM, hold, s->claims);
  pv_collect_pools(p);
  for (size_t i = 0; i < p->npools; i++)
    if (!p->pools[i].skip_why)
      pv_pool_set_types(p, &p->pools[i], json_object_get(p->types, p->pools[i].nodeclass));
  /* the pods first: their topology groups must exist when pv_collect_bins counts the bound pods */
  s->by_node = json_object();
  s->on_node = json_object();
  lp_env_each(p->env, LP_KIND_POD, scan_bound, s);
  size_t bound = s->npods;
  lp_env_each(p->env, LP_KIND_POD, scan_pending, s);
  s->npending = s->npods - bound;
  pv_collect_bins(p, NULL);
  pv_topology_add_pool_domains(p); /* once: every simulation's copy has them */
  s->names = lp_xcalloc(p->nbins + 1, sizeof *s->names);
  for (size_t i = 0; i < p->nbins; i++) { /* the cache's keys live only as long as its entries */
    pv_bin *b = &p->bins[i];
    s->names[i] = lp_xstrdup(b->node ? b->node : b->claim ? b->claim : "");
    if (b->node) b->node = s->names[i];
    if (b->claim) b->claim = s->names[i];
  }
  index_prices(s);
  quote_pools(s);
}

static void taken(uv_timer_t *t) {
  dz_sim *s = t->data;
  uv_close((uv_handle_t *)t, (uv_close_cb)free);
  s->turn = NULL;
  if (s->err) {
    lp_error *err = s->err;
    s->err = NULL;
    void (*ready)(void *, dz_sim *, lp_error *) = s->ready;
    void *ud = s->ud;
    dz_sim_free(s);
    ready(ud, NULL, err);
    return;
  }
  snapshot(s);
  s->ready(s->ud, s, NULL);
}

static void later(dz_sim *s) {
  s->turn = lp_xmalloc(sizeof *s->turn);
  uv_timer_init(lp_env_loop(s->base.env), s->turn);
  s->turn->data = s;
  uv_timer_start(s->turn, taken, 0, 0);
}

typedef struct fetch {
  dz_sim *s;
  char *nodeclass;
} fetch;

static void fetched(json_t *value, lp_error *err, void *ud) {
  fetch *f = ud;
  dz_sim *s = f->s;
  if (err) {
    char *label = lp_env_nodeclass_label(s->base.env, f->nodeclass);
    lp_error_keep_first(&s->err, lp_error_new(err->code, "instance types of %s: %s", label, err->message));
    free(label);
    lp_error_free(err);
  } else {
    json_object_set_new(s->base.types, f->nodeclass, value);
  }
  free(f->nodeclass);
  free(f);
  if (--s->fetching == 0) later(s);
}

/* The Ready node class an object's nodeClassRef names goes into asked (key -> class). */
static void ask_class(dz_sim *s, json_t *asked, const json_t *obj, const char *path) {
  char *key = lp_env_nodeclass_key(s->base.env, lp_obj_get(obj, path));
  json_t *nc = key ? lp_env_get(s->base.env, LP_KIND_NODECLASS, key) : NULL;
  if (nc && !lp_obj_deleting(nc) && lp_condition_is(nc, "Ready", "True")) json_object_set(asked, key, nc);
  free(key);
}

typedef struct class_scan {
  dz_sim *s;
  json_t *asked;
  const char *path;
} class_scan;

static void scan_class(const char *key, json_t *obj, void *ud) {
  (void)key;
  class_scan *cs = ud;
  ask_class(cs->s, cs->asked, obj, cs->path);
}

void dz_sim_new(lp_controller *c, void (*ready)(void *ud, dz_sim *sim, lp_error *err), void *ud) {
  dz_sim *s = lp_xcalloc(1, sizeof *s);
  s->c = c;
  s->ready = ready;
  s->ud = ud;
  s->base.c = c;
  s->base.env = lp_controller_env(c);
  s->base.key = "consolidation";
  s->base.started = lp_env_monotonic(s->base.env);
  s->base.types = json_object();
  pv_dims_init(&s->base.dims);
  json_t *asked = json_object();
  class_scan pools = {s, asked, "spec.template.spec.nodeClassRef"}, claims = {s, asked, "spec.nodeClassRef"};
  lp_env_each(s->base.env, LP_KIND_NODEPOOL, scan_class, &pools);
  lp_env_each(s->base.env, LP_KIND_NODECLAIM, scan_class, &claims);
  s->fetching = json_object_size(asked);
  if (s->fetching == 0) later(s);
  const char *key;
  json_t *nc;
  json_object_foreach(asked, key, nc) {
    fetch *f = lp_xmalloc(sizeof *f);
    f->s = s;
    f->nodeclass = lp_xstrdup(key);
    lp_cp_get_instance_types(lp_env_cloud(s->base.env), nc, fetched, f);
  }
  json_decref(asked);
}

void dz_sim_free(dz_sim *s) {
  if (!s) return;
  for (size_t i = 0; s->quotes && i < s->base.npools; i++) free(s->quotes[i]);
  free(s->quotes);
  pv_pools_free(&s->base);
  pv_bins_free(&s->base);
  for (size_t i = 0; s->names && s->names[i]; i++) free(s->names[i]);
  free(s->names);
  for (size_t i = 0; i < s->npods; i++) pv_pod_free(&s->pods[i]);
  free(s->pods);
  pv_topology_free(&s->base);
  json_decref(s->by_node);
  json_decref(s->on_node);
  json_decref(s->prices);
  json_decref(s->nodes);
  json_decref(s->claims);
  json_decref(s->base.types);
  pv_dims_free(&s->base.dims);
  lp_error_free(s->err);
  free(s);
}

/* ---- one simulation --------------------------------------------------------------------------- */

typedef struct cands {
  const char **nodes; /* status.nodeName of each (may be NULL) */
  size_t n;
  double price;
  int all_spot;
  char *why; /* a price that is not known */
} cands;

/* The candidate's label: its Node's, else the NodeClaim's. */
static const char *label(dz_sim *s, const json_t *claim, const char *node, const char *key) {
  const char *v = node ? lp_obj_label(json_object_get(s->nodes, node), key) : NULL;
  return v ? v : lp_obj_label(claim, key);
}

/* The price of the offering of the candidate's instance type in its zone and capacity type, or < 0. */
static double candidate_price(dz_sim *s, const json_t *claim, const char *node, const char **ct, char **why) {
  const char *type = label(s, claim, node, LP_LABEL_INSTANCE_TYPE);
  const char *zone = label(s, claim, node, LP_LABEL_ZONE);
  *ct = label(s, claim, node, LP_LABEL_CAPACITY_TYPE);
  char *key = lp_env_nodeclass_key(s->base.env, lp_obj_get(claim, "spec.nodeClassRef"));
  const json_t *t = type ? json_object_get(json_object_get(s->prices, key ? key : ""), type) : NULL;
  free(key);
  size_t i;
  const json_t *o;
  json_array_foreach(json_object_get(t, "offerings"), i, o) {
    const json_t *price = json_object_get(o, "price");
    if (zone && *ct && json_is_number(price) &&
        strcmp(json_string_value(json_object_get(o, "zone")) ?: "", zone) == 0 &&
        strcmp(json_string_value(json_object_get(o, "capacity_type")) ?: "", *ct) == 0)
      return json_number_value(price);
  }
  *why = t ? lp_xasprintf("nodeclaim %s: instance type %s has no priced offering in zone %s for capacity "
                          "type %s",
                          lp_obj_name(claim) ?: "?", type, zone ? zone : "(none)", *ct ? *ct : "(none)")
           : lp_xasprintf("nodeclaim %s: instance type %s is not among its node class's instance types",
                          lp_obj_name(claim) ?: "?", type ? type : "(none)");
  return -1;
}

static int read_candidates(dz_sim *s, json_t *const *claims, size_t n, cands *out) {
  memset(out, 0, sizeof *out);
  out->nodes = lp_xcalloc(n + 1, sizeof *out->nodes);
  out->n = n;
  out->all_spot = n > 0;
  for (size_t i = 0; i < n; i++) {
    const char *node = lp_obj_str(claims[i], "status.nodeName");
    out->nodes[i] = node && *node ? node : NULL;
    const char *ct = NULL;
    double price = candidate_price(s, claims[i], out->nodes[i], &ct, &out->why);
    if (price < 0) return -1;
    out->price += price;
    out->all_spot &= strcmp(ct, SPOT) == 0;
  }
  return 0;
}

static int leaving(const cands *cs, json_t *const *claims, const pv_bin *b) {
  for (size_t i = 0; i < cs->n; i++) {
    if (b->node && cs->nodes[i] && strcmp(b->node, cs->nodes[i]) == 0) return 1;
    if (b->claim && strcmp(b->claim, lp_obj_name(claims[i]) ?: "") == 0) return 1;
  }
  return 0;
}

/* A copy of pod for one pass: what the pass changes (the attempt's requirements, why, placed) is its
 * own. */
static pv_pod pod_copy(const pv_pod *pod) {
  pv_pod out = *pod;
  json_incref(out.reqs);
  out.why = NULL;
  out.placed = 0;
  out.claim = NULL;
  return out;
}

/* The pass of one simulation: copies of the base's bins (less the candidates'; their host ports their
 * own), pools and pods, and of the topology counts without the pods bound to the candidates' nodes. */
static void pass_for(dz_sim *s, json_t *const *claims, const cands *cs, pv_pass *p) {
  memset(p, 0, sizeof *p);
  p->c = s->c;
  p->env = s->base.env;
  p->key = s->base.key;
  p->started = s->base.started;
  p->dims = s->base.dims; /* shared: every name was met in the snapshot */
  p->types = s->base.types;
  p->bins = lp_xmalloc((s->base.nbins + 1) * sizeof *p->bins);
  for (size_t i = 0; i < s->base.nbins; i++) {
    if (leaving(cs, claims, &s->base.bins[i])) continue;
    pv_bin *b = &p->bins[p->nbins++];
    *b = s->base.bins[i];
    memset(&b->ports, 0, sizeof b->ports); /* pv_ports_add reallocates what it adds to */
    pv_ports_add(&b->ports, &s->base.bins[i].ports);
  }
  p->pools = lp_xmalloc((s->base.npools + 1) * sizeof *p->pools);
  memcpy(p->pools, s->base.pools, s->base.npools * sizeof *p->pools);
  p->npools = s->base.npools;
  size_t cap = s->npending + 1;
  for (size_t i = 0; i < cs->n; i++) cap += json_array_size(json_object_get(s->by_node, cs->nodes[i] ?: ""));
  p->pods = lp_xmalloc(cap * sizeof *p->pods);
  for (size_t i = s->npods - s->npending; i < s->npods; i++) p->pods[p->npods++] = pod_copy(&s->pods[i]);
  for (size_t i = 0; i < cs->n; i++) {
    size_t k;
    const json_t *index;
    json_array_foreach(json_object_get(s->by_node, cs->nodes[i] ?: ""), k, index) p->pods[p->npods++] =
        pod_copy(&s->pods[json_integer_value(index)]);
  }
  pv_topology_copy(p, &s->base);
  for (size_t i = 0; i < cs->n; i++) {
    if (!cs->nodes[i]) continue;
    const json_t *node = json_object_get(s->nodes, cs->nodes[i]);
    size_t k;
    const json_t *pod;
    json_array_foreach(json_object_get(s->on_node, cs->nodes[i]), k, pod) pv_topology_uncount(p, pod, node);
  }
}

static void pass_free(pv_pass *p) {
  pv_claims_free(p);
  for (size_t i = 0; i < p->npods; i++) {
    free(p->pods[i].why);
    json_decref(p->pods[i].reqs);
  }
  free(p->pods);
  for (size_t i = 0; i < p->nbins; i++) pv_ports_free(&p->bins[i].ports);
  free(p->bins);
  free(p->pools);
  pv_topology_free(p);
}

/* A candidate's pod: bound, where the pending ones are not. */
static int moved(const pv_pod *pod) {
  return !pv_pod_provisionable(pod->obj);
}

static int holds_moved(const pv_pass *p, const pv_claim *c) {
  for (size_t i = 0; i < c->npods; i++)
    if (moved(&p->pods[c->pods[i]])) return 1;
  return 0;
}

/* ---- prices ---------------------------------------------------------------------------------- */

typedef struct dz_quote {
  pv_type *type;
  double lo, hi;           /* cheapest and dearest available offering compatible with the requirements */
  double spot_lo, spot_hi; /* the same among the spot offerings; < 0: none */
  int spot, on_demand;     /* some such offering is spot / on-demand */
} dz_quote;

/* What type costs under reqs, in one walk over its offerings (each offering's requirements name its own
 * capacity type, rule CP4: pinning reqs to spot keeps exactly its spot offerings). */
static dz_quote quote(pv_type *type, const lp_reqs *reqs) {
  dz_quote q = {type, -1, -1, -1, -1, 0, 0};
  for (size_t i = 0; i < type->noffers; i++) {
    double v = pv_offer_price(&type->offers[i], reqs);
    if (v < 0) continue;
    if (q.lo < 0 || v < q.lo) q.lo = v;
    if (v > q.hi) q.hi = v;
    const char *ct = type->offers[i].capacity_type ?: "";
    if (strcmp(ct, SPOT) == 0) {
      q.spot = 1;
      if (q.spot_lo < 0 || v < q.spot_lo) q.spot_lo = v;
      if (v > q.spot_hi) q.spot_hi = v;
    }
    q.on_demand |= strcmp(ct, ON_DEMAND) == 0;
  }
  return q;
}

/* Every pool type's quote under the pool's own requirements: a claim no pod narrowed reuses them. */
static void quote_pools(dz_sim *s) {
  s->quotes = lp_xcalloc(s->base.npools + 1, sizeof *s->quotes);
  for (size_t i = 0; i < s->base.npools; i++) {
    pv_pool *pool = &s->base.pools[i];
    s->quotes[i] = lp_xcalloc(pool->ntypes + 1, sizeof **s->quotes);
    for (size_t t = 0; t < pool->ntypes; t++) s->quotes[i][t] = quote(&pool->types[t], pool->creqs);
  }
}

static int by_price(const void *a, const void *b) {
  const dz_quote *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return strcmp(x->type->name, y->type->name);
}

static int by_spot_price(const void *a, const void *b) {
  const dz_quote *x = a, *y = b;
  if (x->spot_lo != y->spot_lo) return x->spot_lo < y->spot_lo ? -1 : 1;
  return strcmp(x->type->name, y->type->name);
}

/* The claim's options as the provisioner finalizes them (pv_finalize): quoted under its requirements,
 * cheapest first, at most PV_MAX_INSTANCE_TYPES. How many; *list is malloc'd. */
static size_t options_of(const dz_sim *s, const pv_pass *p, const pv_claim *c, dz_quote **list) {
  size_t pool = (size_t)(c->pool - p->pools), n = 0;
  const pv_pool *base = &s->base.pools[pool];
  int narrowed = c->reqs != base->reqs && !json_equal(c->reqs, base->reqs);
  lp_reqs *reqs = narrowed ? lp_reqs_compile(c->reqs) : NULL;
  *list = lp_xmalloc((c->ntypes + 1) * sizeof **list);
  for (size_t t = 0; t < c->ntypes; t++) {
    dz_quote q = narrowed ? quote(c->types[t], reqs) : s->quotes[pool][c->types[t] - base->types];
    if (q.lo >= 0) (*list)[n++] = q;
  }
  lp_reqs_free(reqs);
  if (n) qsort(*list, n, sizeof **list, by_price);
  return n < PV_MAX_INSTANCE_TYPES ? n : PV_MAX_INSTANCE_TYPES;
}

/* Keeps in kept (of n options) those cheaper than price, pinned to spot or not, cheapest first; their
 * worst launch price into *worst, the cheapest any option has into *lowest (< 0: none). How many. */
static size_t cheaper(dz_quote *opts, size_t n, int spot, double price, dz_quote *kept, double *worst,
                      double *lowest) {
  size_t k = 0;
  *lowest = -1;
  for (size_t t = 0; t < n; t++) {
    double lo = spot ? opts[t].spot_lo : opts[t].lo;
    if (lo >= 0 && (*lowest < 0 || lo < *lowest)) *lowest = lo;
    if (lo >= 0 && lo < price) kept[k++] = opts[t];
  }
  if (spot && k) qsort(kept, k, sizeof *kept, by_spot_price);
  *worst = 0;
  for (size_t t = 0; t < k; t++) {
    double hi = spot ? kept[t].spot_hi : kept[t].hi;
    if (hi > *worst) *worst = hi;
  }
  return k;
}

/* The replacement: c narrowed to the kept options (and to spot), its requirements and requests. */
static json_t *replacement(pv_pass *p, pv_claim *c, const dz_quote *kept, size_t n, int spot) {
  if (spot) {
    json_t *pin =
        json_pack("[{s:s, s:s, s:[s]}]", "key", LP_LABEL_CAPACITY_TYPE, "operator", "In", "values", SPOT);
    json_t *reqs = lp_requirements_intersect(c->reqs, pin, NULL);
    json_decref(pin);
    if (!reqs) return NULL; /* spot offerings were quoted: not reached */
    json_decref(c->reqs);
    c->reqs = reqs;
  }
  c->ntypes = n;
  json_t *cts = json_object();
  for (size_t t = 0; t < n; t++) {
    c->types[t] = kept[t].type;
    size_t i;
    const json_t *o;
    json_array_foreach(json_object_get(kept[t].type->obj, "offerings"), i, o) {
      const char *ct = json_string_value(json_object_get(o, "capacity_type"));
      if (ct && json_is_true(json_object_get(o, "available")) &&
          lp_requirements_compatible(c->reqs, json_object_get(o, "requirements"), NULL))
        json_object_set_new(cts, ct, json_true());
    }
  }
  json_decref(c->capacity_types);
  c->capacity_types = json_array();
  const char *ct;
  json_t *v;
  json_object_foreach(cts, ct, v) json_array_append_new(c->capacity_types, json_string(ct));
  json_decref(cts);
  pv_res requests = pv_res_sum(&c->requests, &c->pool->daemon);
  return json_pack("{s:s, s:o, s:{s:o}}", "nodepool", c->pool->name, "requirements", pv_claim_requirements(c),
                   "resources", "requests", pv_res_to_list(&p->dims, &requests));
}

/* Applies the price and spot rules to the one new NodeClaim c; fills out (replacement or why). */
static void price_replacement(dz_sim *s, pv_pass *p, pv_claim *c, const cands *cs, int allow_spot_to_spot,
                              dz_sim_result *out) {
  dz_quote *opts;
  size_t nopts = options_of(s, p, c, &opts);
  int spot = 0, on_demand = 0;
  for (size_t t = 0; t < nopts; t++) {
    spot |= opts[t].spot;
    on_demand |= opts[t].on_demand;
  }
  int spot_to_spot = cs->all_spot && spot;
  dz_quote *kept = lp_xmalloc((nopts + 1) * sizeof *kept);
  double worst = 0, lowest = -1;
  size_t n = 0;
  /* to spot when spot options stay cheaper: the launch must not fall back to a dearer on-demand node */
  int pin = spot_to_spot || (spot && on_demand);
  if (spot_to_spot && !allow_spot_to_spot) {
    out->why = lp_xstrdup("can't replace spot with spot: spot-to-spot consolidation is disabled "
                          "(controllers.spotToSpotConsolidation)");
    goto done;
  }
  if (pin) n = cheaper(opts, nopts, 1, cs->price, kept, &worst, &lowest);
  if (n == 0 && !spot_to_spot) {
    pin = 0;
    n = cheaper(opts, nopts, 0, cs->price, kept, &worst, &lowest);
  }
  if (n == 0) {
    out->why = lowest < 0
                   ? lp_xstrdup("replacement would have no available offering")
                   : lp_xasprintf("%s would not be cheaper ($%.4g >= $%.4g)",
                                  spot_to_spot ? "spot replacement" : "replacement", lowest, cs->price);
    goto done;
  }
  if (spot_to_spot && cs->n == 1) {
    if (n < DZ_SPOT_TO_SPOT_MIN_TYPES) {
      out->why = lp_xasprintf("can't replace spot with spot: spot-to-spot consolidation needs %d cheaper "
                              "instance types, found %zu",
                              DZ_SPOT_TO_SPOT_MIN_TYPES, n);
      goto done;
    }
    n = DZ_SPOT_TO_SPOT_MIN_TYPES;
    worst = 0;
    for (size_t t = 0; t < n; t++)
      if (kept[t].spot_hi > worst) worst = kept[t].spot_hi;
  }
  out->replacement_price = worst;
  if (worst >= cs->price)
    out->why = lp_xasprintf("replacement would not be cheaper ($%.4g >= $%.4g)", worst, cs->price);
  else
    out->replacement = replacement(p, c, kept, n, pin);
done:
  free(kept);
  free(opts);
}

/* Why the candidates' pods do not all fit (NULL: they do), and the one new NodeClaim they need in *one
 * (NULL: none). */
static char *pack(pv_pass *p, pv_claim **one) {
  *one = NULL;
  pv_sort_pods(p);
  pv_place_on_bins(p);
  size_t mine = 0;
  for (size_t i = 0; i < p->npods; i++) {
    const pv_pod *pod = &p->pods[i];
    /* a node that has not initialized may never take the pod: deleting the candidate now would leave
     * it pending on room that exists only on paper */
    if (pod->claim && moved(pod))
      return lp_xasprintf("pod %s would move onto NodeClaim %s, which has not initialized", pod->key,
                          pod->claim);
    mine += !pod->placed && moved(pod);
  }
  if (mine == 0) return NULL;
  pv_schedule(p);
  for (size_t i = 0; i < p->npods; i++)
    if (!p->pods[i].placed && moved(&p->pods[i]))
      return lp_xasprintf("pod %s cannot schedule: %s", p->pods[i].key, p->pods[i].why ?: "no capacity");
  size_t claims = 0;
  for (size_t k = 0; k < p->nclaims; k++)
    if (holds_moved(p, &p->claims[k])) {
      claims++;
      *one = &p->claims[k];
    }
  if (claims > 1) {
    *one = NULL;
    return lp_xasprintf("its pods would need %zu new nodes", claims);
  }
  return NULL;
}

void dz_simulate(dz_sim *s, json_t *const *candidates, size_t n, int allow_spot_to_spot, dz_sim_result *out) {
  memset(out, 0, sizeof *out);
  cands cs;
  if (read_candidates(s, candidates, n, &cs) != 0) {
    out->why = cs.why;
    free(cs.nodes);
    return;
  }
  out->candidates_price = cs.price;
  pv_pass p;
  pass_for(s, candidates, &cs, &p);
  pv_claim *one = NULL;
  out->why = pack(&p, &one);
  if (!out->why && one) price_replacement(s, &p, one, &cs, allow_spot_to_spot, out);
  out->feasible = out->why == NULL;
  pass_free(&p);
  free(cs.nodes);
}

void dz_sim_result_free(dz_sim_result *r) {
  json_decref(r->replacement);
  free(r->why);
  memset(r, 0, sizeof *r);
}
