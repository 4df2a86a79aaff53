/* What a pass can schedule onto (provisioner_internal.h): capacity that exists or is being launched
 * (Ready nodes, NodeClaims not initialized yet), and the NodePools that may add more, with their
 * requirements, DaemonSet overhead and limits. */
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/conditions.h"
#include "controller/nodepool.h"
#include "controller/provisioner_internal.h"
#include "core/error.h"
#include "core/log.h"

/* ---- NodeClaims the pass knows: the cache's, and those it created that the cache lacks -------- */

typedef void (*claim_fn)(pv_pass *p, const char *name, json_t *claim, void *ud);

typedef struct claim_walk {
  pv_pass *p;
  claim_fn fn;
  void *ud;
} claim_walk;

static void cached_claim(const char *key, json_t *claim, void *ud) {
  claim_walk *w = ud;
  w->fn(w->p, key, claim, w->ud);
}

static void each_claim(pv_pass *p, claim_fn fn, void *ud) {
  claim_walk w = {p, fn, ud};
  lp_env_each(p->env, LP_KIND_NODECLAIM, cached_claim, &w);
  if (!p->st) return; /* a pass that is not the provisioner's has nothing on its way */
  const char *name;
  json_t *entry;
  json_object_foreach(p->st->created, name, entry) {
    if (!lp_env_get(p->env, LP_KIND_NODECLAIM, name)) fn(p, name, json_object_get(entry, "claim"), ud);
  }
}

static const json_t *labels_of(const json_t *obj) {
  return json_object_get(json_object_get(obj, "metadata"), "labels");
}

/* ---- DaemonSet overhead ----------------------------------------------------------------------- */

typedef struct daemon_scan {
  pv_pass *p;
  const json_t *reqs, *taints;
  pv_res *out;
  pv_ports *ports;
} daemon_scan;

/* Karpenter counts a DaemonSet when its requirements are compatible with the node's, a key the node
 * does not define counting as incompatible unless it is a well-known label or the requirement is
 * negative (NotIn, DoesNotExist). */
static int daemon_lands(const json_t *node_reqs, const json_t *daemon_reqs) {
  if (pv_undefined_key(daemon_reqs, node_reqs, NULL, 1)) return 0;
  json_t *both = lp_requirements_intersect(node_reqs, daemon_reqs, NULL);
  int agree = both != NULL;
  json_decref(both);
  return agree;
}

static void add_daemon(const char *key, json_t *ds, void *ud) {
  (void)key;
  daemon_scan *s = ud;
  const json_t *spec = json_object_get(json_object_get(json_object_get(ds, "spec"), "template"), "spec");
  if (lp_obj_deleting(ds) || !spec || !pv_tolerates(json_object_get(spec, "tolerations"), s->taints, NULL))
    return;
  json_t *reqs = pv_pod_requirements(spec);
  if (!reqs || daemon_lands(s->reqs, reqs)) {
    pv_res r;
    pv_pod_requests(&s->p->dims, spec, &r);
    *s->out = pv_res_sum(s->out, &r);
    pv_ports_of(spec, s->ports);
  }
  json_decref(reqs);
}

/* The requests of the DaemonSet pods that would run on a node with these requirements and taints:
 * those whose node requirements agree and which tolerate the taints; their host ports go to ports. */
static pv_res daemon_overhead(pv_pass *p, const json_t *reqs, const json_t *taints, pv_ports *ports) {
  pv_res out = {{0}};
  daemon_scan s = {p, reqs, taints, &out, ports};
  lp_env_each(p->env, LP_KIND_DAEMONSET, add_daemon, &s);
  return out;
}

/* ---- bins ----------------------------------------------------------------------------------- */

static pv_bin *new_bin(pv_pass *p) {
  p->bins = lp_xrealloc(p->bins, (p->nbins + 1) * sizeof *p->bins);
  pv_bin *b = &p->bins[p->nbins++];
  memset(b, 0, sizeof *b);
  return b;
}

typedef struct bound_scan {
  pv_pass *p;
  pv_bin *bin;
} bound_scan;

static void subtract_bound(const char *key, json_t *pod, void *ud) {
  (void)key;
  bound_scan *s = ud;
  const char *phase = lp_obj_str(pod, "status.phase");
  if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) return;
  pv_res r;
  pv_pod_requests(&s->p->dims, json_object_get(pod, "spec"), &r);
  for (size_t i = 0; i < PV_RES_MAX; i++) s->bin->free.v[i] -= r.v[i];
  pv_ports_of(json_object_get(pod, "spec"), &s->bin->ports);
}

/* The requests and host ports of the pods bound to node_name count against bin. */
static void subtract_bound_pods(pv_pass *p, const char *node_name, pv_bin *b) {
  bound_scan s = {p, b};
  if (node_name && *node_name) lp_env_index_each(p->env, LP_INDEX_POD_BY_NODE, node_name, subtract_bound, &s);
}

static int in_flight(const json_t *claim) {
  return !lp_obj_deleting(claim) && !lp_condition_is(claim, "Initialized", "True");
}

static void add_node_bin(const char *key, json_t *node, void *ud) {
  pv_pass *p = ud;
  if (lp_obj_deleting(node) || !lp_condition_is(node, "Ready", "True") ||
      json_is_true(json_object_get(json_object_get(node, "spec"), "unschedulable")))
    return;
  const char *pid = lp_obj_str(node, "spec.providerID");
  json_t *claim =
      pid && *pid ? lp_env_index_first(p->env, LP_INDEX_NODECLAIM_BY_PROVIDER_ID, pid, NULL) : NULL;
  /* a NodeClaim's node is going away with it, or counted as the in-flight NodeClaim until initialized */
  if (claim && (lp_obj_deleting(claim) || !lp_condition_is(claim, "Initialized", "True"))) return;
  pv_bin *b = new_bin(p);
  b->node = key;
  b->host = lp_xstrdup(key);
  b->labels = labels_of(node);
  b->taints = json_object_get(json_object_get(node, "spec"), "taints");
  pv_res_add_list(&p->dims, &b->free, json_object_get(json_object_get(node, "status"), "allocatable"), 1);
  subtract_bound_pods(p, key, b);
}

/* A NodeClaim's requirements with its labels as In requirements: what a pod must agree with. */
static json_t *claim_requirements(const json_t *claim) {
  json_t *reqs = json_deep_copy(json_object_get(json_object_get(claim, "spec"), "requirements"));
  if (!json_is_array(reqs)) {
    json_decref(reqs);
    reqs = json_array();
  }
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)labels_of(claim), key, value) {
    if (json_is_string(value))
      json_array_append_new(reqs,
                            json_pack("{s:s, s:s, s:[O]}", "key", key, "operator", "In", "values", value));
  }
  return reqs;
}

static void add_claim_bin(pv_pass *p, const char *name, json_t *claim, void *ud) {
  json_t *index = ud;
  if (!in_flight(claim)) return;
  const json_t *spec = json_object_get(claim, "spec");
  pv_bin *b = new_bin(p);
  b->claim = name;
  const char *node_name = lp_obj_str(claim, "status.nodeName");
  b->host = lp_xstrdup(node_name && *node_name ? node_name : name);
  b->reqs = claim_requirements(claim);
  b->taints = json_object_get(spec, "taints");
  const json_t *allocatable = json_object_get(json_object_get(claim, "status"), "allocatable");
  if (!json_object_size(allocatable)) /* not launched: it will hold at least what it asked for */
    allocatable = json_object_get(json_object_get(spec, "resources"), "requests");
  pv_res_add_list(&p->dims, &b->free, allocatable, 1);
  pv_res daemon = daemon_overhead(p, b->reqs, b->taints, &b->ports);
  for (size_t i = 0; i < PV_RES_MAX; i++) b->free.v[i] -= daemon.v[i];
  subtract_bound_pods(p, lp_obj_str(claim, "status.nodeName"), b);
  json_object_set_new(index, name, json_integer((json_int_t)(p->nbins - 1)));
}

static pv_site bin_site(const pv_bin *b) {
  return (pv_site){b->host, b->labels, b->reqs, 0};
}

void pv_collect_bins(pv_pass *p, const json_t *nominated) {
  pv_topology_count(p);
  lp_env_each(p->env, LP_KIND_NODE, add_node_bin, p);
  json_t *index = json_object(); /* NodeClaim name -> bin */
  each_claim(p, add_claim_bin, index);
  const char *pod_key;
  const json_t *claim_name;
  json_object_foreach((json_t *)nominated, pod_key, claim_name) {
    json_t *i = json_object_get(index, json_string_value(claim_name));
    json_t *pod = lp_env_get(p->env, LP_KIND_POD, pod_key);
    if (!i || !pod) continue;
    pv_res r;
    pv_pod_requests(&p->dims, json_object_get(pod, "spec"), &r);
    pv_bin *b = &p->bins[json_integer_value(i)];
    for (size_t k = 0; k < PV_RES_MAX; k++) b->free.v[k] -= r.v[k];
    pv_ports_of(json_object_get(pod, "spec"), &b->ports);
    pv_site site = bin_site(b);
    pv_topology_record_obj(p, pod, &site);
  }
  json_decref(index);
}

static int bin_satisfies(const pv_bin *b, const json_t *reqs) {
  if (b->labels) return pv_labels_satisfy(b->labels, reqs);
  /* strict, as for a node: a label the NodeClaim does not pin yet (its zone before launch) may come out
   * other than the pod needs */
  return !pv_undefined_key(reqs, b->reqs, NULL, 0) && lp_requirements_compatible(reqs, b->reqs, NULL);
}

/* The scheduler's view: any required node-affinity term will do; preferences only rank. */
static int bin_takes(const pv_pass *p, const pv_bin *b, const pv_pod *pod) {
  if (!pv_res_fits(&p->dims, &pod->requests, &b->free) || !pv_tolerates(pod->tolerations, b->taints, NULL) ||
      pv_ports_clash(&b->ports, &pod->ports))
    return 0;
  size_t n = json_array_size(pod->terms);
  int fits = n == 0 && bin_satisfies(b, pod->reqs); /* a pod built without pv_pod_init has reqs alone */
  for (size_t i = 0; i < n && !fits; i++) fits = bin_satisfies(b, json_array_get(pod->terms, i));
  pv_site site = bin_site(b);
  return fits && pv_topology_allows(p, pod, &site);
}

size_t pv_place_on_bins(pv_pass *p) {
  size_t left = 0;
  for (size_t i = 0; i < p->npods; i++) {
    pv_pod *pod = &p->pods[i];
    for (size_t k = 0; k < p->nbins && !pod->placed; k++) {
      pv_bin *b = &p->bins[k];
      if (!bin_takes(p, b, pod)) continue;
      for (size_t r = 0; r < PV_RES_MAX; r++) b->free.v[r] -= pod->requests.v[r];
      pv_ports_add(&b->ports, &pod->ports);
      pv_site site = bin_site(b);
      pv_topology_record(p, pod, &site);
      pod->placed = 1;
      pod->claim = b->claim;
      if (b->claim) pv_nominate(p, pod, b->claim);
    }
    left += !pod->placed;
  }
  return left;
}

void pv_bins_free(pv_pass *p) {
  for (size_t i = 0; i < p->nbins; i++) {
    json_decref(p->bins[i].reqs);
    pv_ports_free(&p->bins[i].ports);
    free(p->bins[i].host);
  }
  free(p->bins);
  p->bins = NULL;
  p->nbins = 0;
}

/* ---- NodePools ------------------------------------------------------------------------------ */

static int weight_of(const json_t *pool) {
  return (int)json_integer_value(json_object_get(json_object_get(pool, "spec"), "weight"));
}

static int by_weight(const void *a, const void *b) {
  const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  int wx = weight_of(x), wy = weight_of(y);
  if (wx != wy) return wx > wy ? -1 : 1;
  return strcmp(lp_obj_name(x) ?: "", lp_obj_name(y) ?: "");
}

typedef struct pool_scan {
  pv_pass *p;
  json_t *supported; /* lp_cloudprovider_supported_nodeclasses */
  json_t **found;
  size_t n;
} pool_scan;

/* Why the pool cannot provision at all (debug-logged; "its node class (<Kind>) is not Ready"), written
 * into buf, or NULL. */
static const char *unusable(pv_pass *p, const json_t *supported, const json_t *pool, char *buf, size_t cap) {
  if (lp_obj_deleting(pool)) return "the nodepool is being deleted";
  if (!lp_nodeclass_ref_supported(supported, lp_obj_get(pool, "spec.template.spec.nodeClassRef")))
    return "its nodeClassRef is not a node class this provider serves";
  const json_t *nc = lp_env_nodeclass_of(p->env, lp_obj_get(pool, "spec.template.spec.nodeClassRef"));
  const char *problem = !nc                                     ? "was not found"
                        : lp_obj_deleting(nc)                   ? "is being deleted"
                        : !lp_condition_is(nc, "Ready", "True") ? "is not Ready"
                                                                : NULL;
  if (!problem) return NULL;
  snprintf(buf, cap, "its node class (%s) %s", lp_env_nodeclass(p->env)->kind, problem);
  return buf;
}

static void scan_pool(const char *key, json_t *pool, void *ud) {
  pool_scan *s = ud;
  char buf[160];
  const char *why = unusable(s->p, s->supported, pool, buf, sizeof buf);
  if (why) {
    lp_debug(lp_controller_logger(s->p->c), "skipping nodepool", LPF_STR("nodepool", key),
             LPF_STR("reason", why));
    return;
  }
  s->found = lp_xrealloc(s->found, (s->n + 1) * sizeof *s->found);
  s->found[s->n++] = pool;
}

/* Template requirements, template labels as In requirements, and karpenter.sh/nodepool In [name]. */
static json_t *pool_requirements(const json_t *pool, char **why) {
  const json_t *tmpl = json_object_get(json_object_get(pool, "spec"), "template");
  json_t *labels = json_pack("[{s:s, s:s, s:[s]}]", "key", PV_LABEL_NODEPOOL, "operator", "In", "values",
                             lp_obj_name(pool) ?: "");
  const char *key;
  const json_t *value;
  json_object_foreach(json_object_get(json_object_get(tmpl, "metadata"), "labels"), key, value) {
    if (json_is_string(value))
      json_array_append_new(labels,
                            json_pack("{s:s, s:s, s:[O]}", "key", key, "operator", "In", "values", value));
  }
  json_t *reqs =
      lp_requirements_intersect(json_object_get(json_object_get(tmpl, "spec"), "requirements"), labels, why);
  json_decref(labels);
  return reqs;
}

static void add_usage(pv_pass *p, const char *name, json_t *claim, void *ud) {
  (void)name;
  pv_pool *pool = ud;
  const char *owner = json_string_value(json_object_get(labels_of(claim), PV_LABEL_NODEPOOL));
  if (!owner || strcmp(owner, pool->name) != 0 || lp_obj_deleting(claim)) return;
  const json_t *capacity = json_object_get(json_object_get(claim, "status"), "capacity");
  if (!json_object_size(capacity))
    capacity = json_object_get(json_object_get(json_object_get(claim, "spec"), "resources"), "requests");
  pv_res_add_list(&p->dims, &pool->used, capacity, 1);
  pool->nodes_used += 1;
}

/* Limits and what the pool's NodeClaims use of them; skip_why when a limit is exceeded already. */
static void set_limits(pv_pass *p, pv_pool *pool) {
  const json_t *limits = json_object_get(json_object_get(pool->obj, "spec"), "limits");
  pool->node_limit = -1;
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)limits, key, value) {
    double q = 0;
    if (!json_is_string(value) || lp_quantity_parse(json_string_value(value), &q) != 0) continue;
    if (strcmp(key, "nodes") == 0) {
      pool->node_limit = q;
      continue;
    }
    int i = pv_dim(&p->dims, key);
    if (i < 0) continue;
    pool->limit.v[i] = q;
    pool->limited[i] = 1;
  }
  each_claim(p, add_usage, pool);
  if (pool->skip_why) return;
  for (size_t i = 0; i < p->dims.n; i++) {
    if (pool->limited[i] && pool->used.v[i] > pool->limit.v[i] + 1e-9)
      pool->skip_why = lp_xasprintf("%s resource usage of %g exceeds limit of %g", p->dims.name[i],
                                    pool->used.v[i], pool->limit.v[i]);
  }
  if (!pool->skip_why && pool->node_limit >= 0 && pool->nodes_used > pool->node_limit)
    pool->skip_why =
        lp_xasprintf("nodes resource usage of %g exceeds limit of %g", pool->nodes_used, pool->node_limit);
}

/* The template requirements with a minValues: [{"key", "minValues"}], or NULL. */
static json_t *min_values_of(const json_t *pool) {
  json_t *out = json_array();
  size_t i;
  const json_t *req;
  json_array_foreach(lp_obj_get(pool, "spec.template.spec.requirements"), i, req) {
    const json_t *min = json_object_get(req, "minValues");
    const char *key = json_string_value(json_object_get(req, "key"));
    if (key && json_is_integer(min) && json_integer_value(min) > 0)
      json_array_append_new(out, json_pack("{s:s, s:O}", "key", lp_label_normalized(key), "minValues", min));
  }
  if (json_array_size(out)) return out;
  json_decref(out);
  return NULL;
}

void pv_collect_pools(pv_pass *p) {
  pool_scan s = {p, lp_cloudprovider_supported_nodeclasses(lp_env_cloud(p->env)), NULL, 0};
  lp_env_each(p->env, LP_KIND_NODEPOOL, scan_pool, &s);
  json_decref(s.supported);
  if (s.n) qsort(s.found, s.n, sizeof *s.found, by_weight);
  p->pools = lp_xcalloc(s.n ? s.n : 1, sizeof *p->pools);
  p->npools = s.n;
  for (size_t i = 0; i < s.n; i++) {
    pv_pool *pool = &p->pools[i];
    pool->obj = json_incref(s.found[i]);
    pool->name = lp_obj_name(pool->obj);
    pool->nodeclass = lp_env_nodeclass_key(p->env, lp_obj_get(pool->obj, "spec.template.spec.nodeClassRef"));
    pool->taints = json_object_get(
        json_object_get(json_object_get(json_object_get(pool->obj, "spec"), "template"), "spec"), "taints");
    char *why = NULL;
    pool->reqs = pool_requirements(pool->obj, &why);
    if (!pool->reqs) pool->skip_why = lp_xasprintf("its requirements contradict each other (%s)", why);
    free(why);
    if (pool->reqs) pool->daemon = daemon_overhead(p, pool->reqs, pool->taints, &pool->daemon_ports);
    pool->min_values = min_values_of(pool->obj);
    set_limits(p, pool);
  }
  free(s.found);
}

/* The index in pool->offer_reqs of list, added when new. Types list their offerings in the same order,
 * so the group of the previous type's offering at the same place (hint) is tried first. A list not
 * found among the first few is added again: a duplicate costs a check, not an answer. */
static int same_list(const lp_reqs *known, const json_t *list) {
  const json_t *k = lp_reqs_json(known);
  return k == list || (k && list && json_equal(k, list));
}

static size_t offer_group(pv_pool *pool, const json_t *list, size_t hint) {
  if (hint < pool->noffer_reqs && same_list(pool->offer_reqs[hint], list)) return hint;
  for (size_t g = 0; g < pool->noffer_reqs && g < 64; g++)
    if (same_list(pool->offer_reqs[g], list)) return g;
  size_t n = pool->noffer_reqs;
  if ((n & (n - 1)) == 0) /* full at powers of two */
    pool->offer_reqs = lp_xrealloc(pool->offer_reqs, (n ? 2 * n : 1) * sizeof *pool->offer_reqs);
  pool->offer_reqs[pool->noffer_reqs] = lp_reqs_compile(list);
  return pool->noffer_reqs++;
}

/* Reads the offerings of t->obj once: their requirements compiled, availability and price; prev is the
 * type read before (or NULL). */
static void read_offers(pv_pool *pool, pv_type *t, const pv_type *prev) {
  const json_t *offerings = json_object_get(t->obj, "offerings");
  t->noffers = json_array_size(offerings);
  t->offers = lp_xcalloc(t->noffers + 1, sizeof *t->offers);
  for (size_t i = 0; i < t->noffers; i++) {
    const json_t *o = json_array_get(offerings, i), *price = json_object_get(o, "price");
    pv_offer *f = &t->offers[i];
    f->obj = o;
    f->group = offer_group(pool, json_object_get(o, "requirements"),
                           prev && i < prev->noffers ? prev->offers[i].group : 0);
    f->reqs = pool->offer_reqs[f->group];
    f->capacity_type = json_string_value(json_object_get(o, "capacity_type"));
    f->priced = json_is_number(price);
    f->price = f->priced ? json_number_value(price) : -1;
    f->available = json_is_true(json_object_get(o, "available"));
  }
}

static void type_free(pv_type *t) {
  lp_reqs_free(t->reqs);
  free(t->offers);
}

/* Availability is not asked here: it changes from pass to pass, and each claim checks it. */
static int offering_compatible(const pv_type *t, const lp_reqs *reqs) {
  for (size_t i = 0; i < t->noffers; i++)
    if (lp_reqs_compatible(reqs, t->offers[i].reqs)) return 1;
  return 0;
}

static void note_keys(json_t *set, const json_t *reqs) {
  size_t i;
  const json_t *req;
  json_array_foreach(reqs, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    if (key && !json_object_get(set, key)) json_object_set_new(set, key, json_true()); /* most are there */
  }
}

void pv_pool_set_types(pv_pass *p, pv_pool *pool, const json_t *types) {
  pool->provider_keys = json_object();
  pool->types = lp_xcalloc(json_array_size(types) + 1, sizeof *pool->types);
  static const char *const overheads[] = {"kube_reserved", "system_reserved", "eviction_threshold"};
  size_t i;
  const json_t *type;
  pool->creqs = pool->reqs ? lp_reqs_compile(pool->reqs) : NULL;
  json_array_foreach(types, i, type) {
    const json_t *type_reqs = json_object_get(type, "requirements");
    note_keys(pool->provider_keys, type_reqs);
    if (!pool->reqs) continue;
    pv_type *t = &pool->types[pool->ntypes];
    memset(t, 0, sizeof *t);
    t->obj = type;
    t->reqs = lp_reqs_compile(type_reqs);
    if (lp_reqs_compatible(pool->creqs, t->reqs)) read_offers(pool, t, pool->ntypes ? t - 1 : NULL);
    if (!offering_compatible(t, pool->creqs)) {
      type_free(t);
      continue;
    }
    pool->ntypes++;
    t->name = json_string_value(json_object_get(type, "name"));
    pv_res_add_list(&p->dims, &t->capacity, json_object_get(type, "capacity"), 1);
    t->allocatable = t->capacity;
    for (size_t k = 0; k < 3; k++)
      pv_res_add_list(&p->dims, &t->allocatable,
                      json_object_get(json_object_get(type, "overhead"), overheads[k]), -1);
    for (size_t k = 0; k < PV_RES_MAX; k++) /* overhead of a resource the type lacks means nothing */
      if (t->capacity.v[k] == 0) t->allocatable.v[k] = 0;
  }
  if (pool->ntypes == 0 && !pool->skip_why) {
    char *label = lp_env_nodeclass_label(p->env, pool->nodeclass ? pool->nodeclass : "?");
    pool->skip_why = lp_xasprintf("no instance type of %s is compatible with its requirements", label);
    free(label);
    if (p->st) /* the provisioner's pass: a simulation's is not news */
      lp_env_event(p->env, pool->obj, "Warning", "NoCompatibleInstanceTypes",
                   "NodePool requirements filtered out all compatible available instance types");
  }
}

void pv_pools_free(pv_pass *p) {
  for (size_t i = 0; i < p->npools; i++) {
    pv_pool *pool = &p->pools[i];
    json_decref(pool->obj);
    json_decref(pool->reqs);
    lp_reqs_free(pool->creqs);
    for (size_t t = 0; t < pool->ntypes; t++) type_free(&pool->types[t]);
    for (size_t g = 0; g < pool->noffer_reqs; g++) lp_reqs_free(pool->offer_reqs[g]);
    free(pool->offer_reqs);
    json_decref(pool->provider_keys);
    json_decref(pool->min_values);
    pv_ports_free(&pool->daemon_ports);
    free(pool->types);
    free(pool->skip_why);
    free(pool->nodeclass);
  }
  free(p->pools);
  p->pools = NULL;
  p->npools = 0;
}
