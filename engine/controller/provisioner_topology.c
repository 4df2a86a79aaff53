/* Topology for the provisioner's pass (provisioner_internal.h): required pod affinity and
 * anti-affinity and topology spread constraints, counted over the pods already running and those the
 * pass places. Called by provisioner_capacity.c (bins) and provisioner_schedule.c (new NodeClaims);
 * calls neither.
 *
 * Each distinct term (kind, topology key, label selector, namespaces, maxSkew, minDomains) is one
 * pv_group, shared by the pods that carry it, with the number of matching pods per domain (a value of
 * the topology key: a node's label, the hostname a NodeClaim will have). Pods bound to nodes count
 * where their node is, pods nominated for a launching NodeClaim where it is, and each pod the pass
 * places where it goes. A place whose value for a key is not pinned yet (a NodeClaim spanning zones)
 * is narrowed to one value when a constraint on that key asks for it; an anti-affinity term of a pod
 * placed where the value is still open counts in every value it may take, as Karpenter does.
 *
 * Domains of a key: the values on Ready nodes, and (from pv_topology_add_pool_domains) those the
 * NodePools' requirements and instance types allow. Affinity: the domain must hold a matching pod
 * (when none exists anywhere and the pod matches its own selector, any one domain will do). Anti-
 * affinity: it must hold none, and no pod whose anti-affinity term the pod matches (a pod bound to a
 * node, or placed by the pass) may be there.
 * Spread: the matching pods in the domain, plus the pod itself when it matches, minus the fewest in any
 * domain the pod's node requirements allow (0 when fewer such domains than minDomains, and always 0
 * for kubernetes.io/hostname: a new node is a new domain) must not exceed maxSkew. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/provisioner_internal.h"
#include "core/buf.h"
#include "core/error.h"

#define HOSTNAME    "kubernetes.io/hostname"
#define MAX_OPTIONS 32

static const char *const kind_text[] = {"pod affinity", "pod anti-affinity", "topology spread constraint"};

/* ---- parsing -------------------------------------------------------------------------------- */

json_t *pv_selector_requirements(const json_t *selector) {
  if (!json_is_object(selector)) return NULL;
  json_t *out = json_array();
  const char *key;
  const json_t *value;
  json_object_foreach(json_object_get(selector, "matchLabels"), key, value) {
    if (json_is_string(value))
      json_array_append_new(out,
                            json_pack("{s:s, s:s, s:[O]}", "key", key, "operator", "In", "values", value));
  }
  size_t i;
  const json_t *expr;
  json_array_foreach(json_object_get(selector, "matchExpressions"), i, expr) {
    const json_t *values = json_object_get(expr, "values");
    if (json_is_string(json_object_get(expr, "key")))
      json_array_append_new(out,
                            json_pack("{s:O, s:O, s:o}", "key", json_object_get(expr, "key"), "operator",
                                      json_object_get(expr, "operator"), "values",
                                      json_is_array(values) ? json_incref((json_t *)values) : json_array()));
  }
  return out;
}

static const char *namespace_of(const json_t *pod) {
  const char *ns = lp_obj_str(pod, "metadata.namespace");
  return ns && *ns ? ns : "default";
}

/* The group of the term, found among the pass's or added. */
static size_t intern(pv_pass *p, int kind, const char *key, json_t *selector, json_t *namespaces, int skew,
                     int min_domains) {
  for (size_t g = 0; g < p->ngroups; g++) {
    const pv_group *x = &p->groups[g];
    if (x->kind == kind && strcmp(x->key, key) == 0 && x->max_skew == skew && x->min_domains == min_domains &&
        json_equal(x->namespaces, namespaces) &&
        (x->selector == selector || (x->selector && selector && json_equal(x->selector, selector)))) {
      json_decref(selector);
      json_decref(namespaces);
      return g;
    }
  }
  p->groups = lp_xrealloc(p->groups, (p->ngroups + 1) * sizeof *p->groups);
  pv_group *g = &p->groups[p->ngroups];
  memset(g, 0, sizeof *g);
  g->kind = kind;
  g->key = lp_xstrdup(key);
  g->selector = selector;
  g->namespaces = namespaces;
  g->max_skew = skew;
  g->min_domains = min_domains;
  g->counts = json_object();
  g->owners = json_object();
  return p->ngroups++;
}

static int supported_key(const char *key) {
  return key && (strcmp(key, HOSTNAME) == 0 || strcmp(key, "topology.kubernetes.io/zone") == 0 ||
                 strcmp(key, "karpenter.sh/capacity-type") == 0);
}

static void add_term(pv_pod *pod, size_t group, int hard) {
  pod->topo = lp_xrealloc(pod->topo, (pod->ntopo + 1) * sizeof *pod->topo);
  pod->topo[pod->ntopo++] = (pv_term){group, hard};
  if (!hard) pod->nsoft++;
}

static json_t *site_values(const pv_pass *p, const pv_site *s, const char *key);
static void bump(json_t *counts, const char *domain, json_int_t by);

typedef struct weighted {
  json_int_t weight;
  size_t order;
  const json_t *term;
} weighted;

static int by_weight_desc(const void *a, const void *b) {
  const weighted *x = a, *y = b;
  if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

json_t *pv_heaviest_first(const json_t *list, const char *field) {
  size_t n = json_array_size(list), k = 0;
  weighted *sorted = lp_xmalloc((n ? n : 1) * sizeof *sorted);
  for (size_t i = 0; i < n; i++) {
    const json_t *item = json_array_get(list, i), *term = json_object_get(item, field);
    if (json_is_object(term))
      sorted[k++] = (weighted){json_integer_value(json_object_get(item, "weight")), i, term};
  }
  qsort(sorted, k, sizeof *sorted, by_weight_desc);
  json_t *out = json_array();
  for (size_t i = 0; i < k; i++) json_array_append(out, (json_t *)sorted[i].term);
  free(sorted);
  return out;
}

/* The terms of affinity (of the pod obj) as groups: the required ones (hard) or, with preferred, the
 * preferred ones (soft, heaviest first). Added to pod's terms, or (pod NULL: a pod bound at site, required
 * terms only) counted by `by` (1, or -1 for a pod leaving) in the owners of its anti-affinity groups. */
static void affinity_terms(pv_pass *p, const json_t *obj, const json_t *affinity, int kind, int preferred,
                           pv_pod *pod, const pv_site *site, json_int_t by) {
  json_t *terms =
      preferred
          ? pv_heaviest_first(json_object_get(affinity, "preferredDuringSchedulingIgnoredDuringExecution"),
                              "podAffinityTerm")
          : json_incref(json_object_get(affinity, "requiredDuringSchedulingIgnoredDuringExecution"));
  size_t i;
  const json_t *term;
  json_array_foreach(terms, i, term) {
    const char *key = json_string_value(json_object_get(term, "topologyKey"));
    if (!supported_key(key)) continue;
    json_t *namespaces = json_object();
    size_t k;
    const json_t *ns;
    json_array_foreach(json_object_get(term, "namespaces"), k, ns) {
      if (json_is_string(ns)) json_object_set(namespaces, json_string_value(ns), json_true());
    }
    if (json_object_size(namespaces) == 0) json_object_set_new(namespaces, namespace_of(obj), json_true());
    size_t g = intern(p, kind, key, pv_selector_requirements(json_object_get(term, "labelSelector")),
                      namespaces, 0, 0);
    if (pod) {
      add_term(pod, g, !preferred);
      continue;
    }
    json_t *values = site_values(p, site, key);
    if (json_array_size(values) == 1)
      bump(p->groups[g].owners, json_string_value(json_array_get(values, 0)), by);
    json_decref(values);
  }
  json_decref(terms);
}

void pv_topology_pod(pv_pass *p, pv_pod *pod) {
  const json_t *spec = json_object_get(pod->obj, "spec");
  const json_t *affinity = json_object_get(spec, "affinity");
  const json_t *pod_affinity = json_object_get(affinity, "podAffinity");
  const json_t *pod_anti = json_object_get(affinity, "podAntiAffinity");
  affinity_terms(p, pod->obj, pod_affinity, PV_TOPO_AFFINITY, 0, pod, NULL, 1);
  affinity_terms(p, pod->obj, pod_anti, PV_TOPO_ANTI, 0, pod, NULL, 1);
  size_t i;
  const json_t *c;
  json_array_foreach(json_object_get(spec, "topologySpreadConstraints"), i, c) {
    const char *key = json_string_value(json_object_get(c, "topologyKey"));
    int skew = (int)json_integer_value(json_object_get(c, "maxSkew"));
    if (!supported_key(key) || skew <= 0) continue;
    const char *when = json_string_value(json_object_get(c, "whenUnsatisfiable"));
    json_t *namespaces = json_pack("{s:b}", namespace_of(pod->obj), 1);
    size_t g = intern(p, PV_TOPO_SPREAD, key, pv_selector_requirements(json_object_get(c, "labelSelector")),
                      namespaces, skew, (int)json_integer_value(json_object_get(c, "minDomains")));
    add_term(pod, g, !when || strcmp(when, "ScheduleAnyway") != 0);
  }
  /* soft terms go last first: preferred affinity, then preferred anti-affinity, then ScheduleAnyway */
  affinity_terms(p, pod->obj, pod_anti, PV_TOPO_ANTI, 1, pod, NULL, 1);
  affinity_terms(p, pod->obj, pod_affinity, PV_TOPO_AFFINITY, 1, pod, NULL, 1);
}

/* ---- matching and counting --------------------------------------------------------------------- */

static int group_matches(const pv_group *g, const json_t *pod) {
  if (!g->selector || !json_object_get(g->namespaces, namespace_of(pod))) return 0;
  const json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
  size_t i;
  const json_t *req;
  json_array_foreach(g->selector, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    if (!lp_requirement_allows(req, json_string_value(json_object_get(labels, key)))) return 0;
  }
  return 1;
}

static void bump(json_t *counts, const char *domain, json_int_t by) {
  json_int_t n = json_integer_value(json_object_get(counts, domain)) + by;
  json_object_set_new(counts, domain, json_integer(n));
}

static json_int_t count_of(const json_t *counts, const char *domain) {
  return json_integer_value(json_object_get(counts, domain));
}

/* The values of key a site may take: [its one value], or for a place not pinned yet its requirement's
 * In values, else every domain known (fresh NodeClaims) or none (a launching one: unknown). New
 * reference, or NULL when unknown. */
static json_t *site_values(const pv_pass *p, const pv_site *s, const char *key) {
  if (strcmp(key, HOSTNAME) == 0) return json_pack("[s]", s->host ? s->host : "");
  if (s->labels) {
    const char *v = json_string_value(json_object_get(s->labels, key));
    return v ? json_pack("[s]", v) : NULL;
  }
  size_t i;
  const json_t *req;
  json_array_foreach(s->reqs, i, req) {
    if (strcmp(json_string_value(json_object_get(req, "key")) ?: "", key) != 0) continue;
    if (strcmp(json_string_value(json_object_get(req, "operator")) ?: "", "In") == 0)
      return json_incref(json_object_get(req, "values"));
    json_t *out = json_array();
    const char *d;
    json_t *v;
    json_object_foreach(json_object_get(p->domains, key), d, v) {
      if (lp_requirement_allows(req, d)) json_array_append_new(out, json_string(d));
    }
    return out;
  }
  if (!s->fresh) return NULL;
  json_t *out = json_array();
  const char *d;
  json_t *v;
  json_object_foreach(json_object_get(p->domains, key), d, v) json_array_append_new(out, json_string(d));
  return out;
}

/* Counts obj (a pod, placed at s) by `by` (1; -1 takes it back) in every group it matches, and its own
 * anti-affinity terms (pod, or NULL for a pod not in the pass) in owners. Where s has several values for
 * a key, anti-affinity counts in each, the others in none. */
static void record(pv_pass *p, const json_t *obj, const pv_pod *pod, const pv_site *s, json_int_t by) {
  for (size_t g = 0; g < p->ngroups; g++) {
    pv_group *grp = &p->groups[g];
    int matches = group_matches(grp, obj), owns = 0;
    for (size_t t = 0; pod && t < pod->ntopo; t++) /* a preference keeps no other pod away */
      owns |= pod->topo[t].group == g && grp->kind == PV_TOPO_ANTI && pod->topo[t].hard;
    if (!matches && !owns) continue;
    json_t *values = site_values(p, s, grp->key);
    size_t n = json_array_size(values);
    if (n == 1 || (n > 1 && grp->kind == PV_TOPO_ANTI)) {
      size_t i;
      json_t *v;
      json_array_foreach(values, i, v) {
        if (matches) bump(grp->counts, json_string_value(v), by);
        if (owns) bump(grp->owners, json_string_value(v), by);
      }
      grp->total += matches * by;
    }
    json_decref(values);
  }
}

void pv_topology_record(pv_pass *p, const pv_pod *pod, const pv_site *site) {
  if (p->ngroups) record(p, pod->obj, pod, site, 1);
}

void pv_topology_record_obj(pv_pass *p, const json_t *obj, const pv_site *site) {
  if (p->ngroups) record(p, obj, NULL, site, 1);
}

static void note_domain(pv_pass *p, const char *key, const char *value) {
  if (!value || strcmp(key, HOSTNAME) == 0) return;
  if (!p->domains) p->domains = json_object();
  json_t *set = json_object_get(p->domains, key);
  if (!set) json_object_set_new(p->domains, key, set = json_object());
  json_object_set_new(set, value, json_true());
}

static void node_domains(const char *name, json_t *node, void *ud) {
  (void)name;
  pv_pass *p = ud;
  const json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
  for (size_t g = 0; g < p->ngroups; g++)
    note_domain(p, p->groups[g].key, json_string_value(json_object_get(labels, p->groups[g].key)));
}

/* Counts obj, bound to node (the Node of its spec.nodeName; NULL when there is none), by `by`. */
static void count_bound(pv_pass *p, const json_t *obj, const json_t *node, json_int_t by) {
  const char *node_name = lp_obj_str(obj, "spec.nodeName");
  const char *phase = lp_obj_str(obj, "status.phase");
  if (!node_name || !*node_name ||
      (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)))
    return;
  const json_t *anti =
      json_object_get(json_object_get(lp_obj_get(obj, "spec"), "affinity"), "podAntiAffinity");
  if (!p->ngroups && !anti) return;
  pv_site s = {.host = node_name, .labels = json_object_get(json_object_get(node, "metadata"), "labels")};
  json_t *none = s.labels ? NULL : json_object(); /* no node: only its hostname is known */
  if (none) s.labels = none;
  record(p, obj, NULL, &s, by);
  if (anti) affinity_terms(p, obj, anti, PV_TOPO_ANTI, 0, NULL, &s, by);
  json_decref(none);
}

static void bound_pod(const char *key, json_t *obj, void *ud) {
  (void)key;
  pv_pass *p = ud;
  const char *node_name = lp_obj_str(obj, "spec.nodeName");
  count_bound(p, obj, node_name && *node_name ? lp_env_get(p->env, LP_KIND_NODE, node_name) : NULL, 1);
}

void pv_topology_uncount(pv_pass *p, const json_t *obj, const json_t *node) {
  count_bound(p, obj, node, -1);
}

void pv_topology_copy(pv_pass *to, const pv_pass *from) {
  to->groups = lp_xmalloc((from->ngroups + 1) * sizeof *to->groups);
  to->ngroups = from->ngroups;
  for (size_t g = 0; g < from->ngroups; g++) {
    const pv_group *x = &from->groups[g];
    pv_group *y = &to->groups[g];
    *y = *x;
    y->key = lp_xstrdup(x->key);
    y->selector = json_incref(x->selector); /* never changed after intern */
    y->namespaces = json_incref(x->namespaces);
    y->counts = json_deep_copy(x->counts);
    y->owners = json_deep_copy(x->owners);
  }
  to->domains = from->domains ? json_deep_copy(from->domains) : NULL;
  to->pool_domains = from->pool_domains;
}

void pv_topology_count(pv_pass *p) {
  lp_env_each(p->env, LP_KIND_POD, bound_pod, p);
  if (p->ngroups) lp_env_each(p->env, LP_KIND_NODE, node_domains, p);
}

/* The last requirement of reqs on key, or NULL. */
static const json_t *requirement_on(const json_t *reqs, const char *key) {
  const json_t *req = NULL;
  size_t r;
  const json_t *x;
  json_array_foreach(reqs, r, x) {
    if (strcmp(json_string_value(json_object_get(x, "key")) ?: "", key) == 0) req = x;
  }
  return req;
}

void pv_topology_add_pool_domains(pv_pass *p) {
  if (!p->ngroups || p->pool_domains) return;
  p->pool_domains = 1;
  json_t *keys = json_object(); /* each key once; a new node's hostname is its own */
  for (size_t g = 0; g < p->ngroups; g++)
    if (strcmp(p->groups[g].key, HOSTNAME) != 0) json_object_set_new(keys, p->groups[g].key, json_true());
  const char *key;
  json_t *unused;
  json_object_foreach(keys, key, unused) {
    for (size_t k = 0; k < p->npools; k++) {
      const pv_pool *pool = &p->pools[k];
      if (pool->skip_why) continue;
      const json_t *req = requirement_on(pool->reqs, key);
      for (size_t t = 0; t < pool->ntypes; t++) {
        size_t i;
        const json_t *v;
        json_array_foreach(pv_type_values(&pool->types[t], key), i, v) {
          if (!req || lp_requirement_allows(req, json_string_value(v)))
            note_domain(p, key, json_string_value(v));
        }
      }
    }
  }
  json_decref(keys);
}

const json_t *pv_type_values(const pv_type *type, const char *key) {
  size_t i;
  const json_t *req;
  json_array_foreach(json_object_get(type->obj, "requirements"), i, req) {
    if (strcmp(json_string_value(json_object_get(req, "key")) ?: "", key) == 0 &&
        strcmp(json_string_value(json_object_get(req, "operator")) ?: "", "In") == 0)
      return json_object_get(req, "values");
  }
  return NULL;
}

/* ---- deciding ---------------------------------------------------------------------------------- */

/* Non-zero when the pod's node requirements allow value for key. */
static int reqs_allow(const json_t *reqs, const char *key, const char *value) {
  size_t i;
  const json_t *req;
  json_array_foreach(reqs, i, req) {
    if (strcmp(json_string_value(json_object_get(req, "key")) ?: "", key) == 0 &&
        !lp_requirement_allows(req, value))
      return 0;
  }
  return 1;
}

/* The fewest matching pods in a domain the pod may use (spread's global minimum). */
static json_int_t spread_min(const pv_pass *p, const pv_group *g, const pv_pod *pod) {
  if (strcmp(g->key, HOSTNAME) == 0) return 0;
  json_int_t min = -1;
  size_t eligible = 0;
  const char *d;
  json_t *v;
  json_object_foreach(json_object_get(p->domains, g->key), d, v) {
    if (!reqs_allow(pod->reqs, g->key, d)) continue;
    eligible++;
    json_int_t n = count_of(g->counts, d);
    if (min < 0 || n < min) min = n;
  }
  if (min < 0 || (g->min_domains > 0 && eligible < (size_t)g->min_domains)) return 0;
  return min;
}

static int term_active(const pv_pod *pod, size_t t) {
  if (pod->topo[t].hard) return 1;
  size_t soft = 0; /* the soft terms before this one */
  for (size_t k = 0; k < t; k++) soft += !pod->topo[k].hard;
  return soft < pod->soft_kept;
}

/* Non-zero when domain suits term t of the pod. */
static int domain_ok(const pv_pass *p, const pv_pod *pod, size_t t, const char *domain) {
  const pv_group *g = &p->groups[pod->topo[t].group];
  switch (g->kind) {
  case PV_TOPO_AFFINITY:
    return count_of(g->counts, domain) > 0 || (g->total == 0 && group_matches(g, pod->obj));
  case PV_TOPO_ANTI:
    return count_of(g->counts, domain) == 0;
  default:
    return count_of(g->counts, domain) + group_matches(g, pod->obj) - spread_min(p, g, pod) <= g->max_skew;
  }
}

/* Non-zero when no pod whose anti-affinity the pod matches is in domain of key. */
static int inverse_ok(const pv_pass *p, const pv_pod *pod, const char *key, const char *domain) {
  for (size_t g = 0; g < p->ngroups; g++) {
    const pv_group *grp = &p->groups[g];
    if (grp->kind == PV_TOPO_ANTI && strcmp(grp->key, key) == 0 && count_of(grp->owners, domain) > 0 &&
        group_matches(grp, pod->obj))
      return 0;
  }
  return 1;
}

/* Non-zero when p has anti-affinity owners on key (inverse checks are needed). */
static int has_owners(const pv_pass *p, const char *key) {
  for (size_t g = 0; g < p->ngroups; g++)
    if (p->groups[g].kind == PV_TOPO_ANTI && strcmp(p->groups[g].key, key) == 0 &&
        json_object_size(p->groups[g].owners))
      return 1;
  return 0;
}

static void say_failed(lp_buf *why, const pv_pass *p, const pv_pod *pod, size_t t) {
  const pv_group *g = &p->groups[pod->topo[t].group];
  if (!why || why->len) return;
  lp_buf_printf(why, "%s on %s", kind_text[g->kind], g->key);
  if (g->kind == PV_TOPO_SPREAD) lp_buf_printf(why, " (maxSkew %d)", g->max_skew);
  lp_buf_puts(why, " cannot be met");
}

/* The keys the pod's active terms (or others' anti-affinity against it) constrain: keys -> true. */
static json_t *constrained_keys(const pv_pass *p, const pv_pod *pod) {
  json_t *keys = json_object();
  for (size_t t = 0; t < pod->ntopo; t++)
    if (term_active(pod, t)) json_object_set_new(keys, p->groups[pod->topo[t].group].key, json_true());
  for (size_t g = 0; g < p->ngroups; g++)
    if (p->groups[g].kind == PV_TOPO_ANTI && has_owners(p, p->groups[g].key) &&
        group_matches(&p->groups[g], pod->obj))
      json_object_set_new(keys, p->groups[g].key, json_true());
  return keys;
}

typedef struct ranked {
  const char *domain;
  json_int_t rank;
} ranked;

static int by_rank(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return strcmp(x->domain, y->domain);
}

/* The first active term of the pod on key, or -1. */
static long first_term(const pv_pass *p, const pv_pod *pod, const char *key) {
  for (size_t t = 0; t < pod->ntopo; t++)
    if (term_active(pod, t) && strcmp(p->groups[pod->topo[t].group].key, key) == 0) return (long)t;
  return -1;
}

/* The values of values that suit every active term on key, best first (fewest matching pods for a
 * spread, most for an affinity, by name otherwise). New array; when empty, why (may be NULL) says
 * which constraint failed first. */
static json_t *allowed(const pv_pass *p, const pv_pod *pod, const char *key, const json_t *values,
                       lp_buf *why) {
  size_t n = json_array_size(values), kept = 0;
  ranked *list = lp_xmalloc((n ? n : 1) * sizeof *list);
  long fail = first_term(p, pod, key); /* what to name when no value is known at all */
  int inverse = 0, failed = 0;
  for (size_t i = 0; i < n; i++) {
    const char *d = json_string_value(json_array_get(values, i));
    int ok = inverse_ok(p, pod, key, d), ranked_yet = 0;
    json_int_t rank = 0;
    if (!ok && !failed) inverse = failed = 1;
    for (size_t t = 0; t < pod->ntopo && ok; t++) {
      const pv_group *g = &p->groups[pod->topo[t].group];
      if (!term_active(pod, t) || strcmp(g->key, key) != 0) continue;
      if (!domain_ok(p, pod, t, d)) {
        ok = 0;
        if (!failed) fail = (long)t, failed = 1;
      } else if (!ranked_yet && g->kind != PV_TOPO_ANTI) {
        rank = g->kind == PV_TOPO_SPREAD ? count_of(g->counts, d) : -count_of(g->counts, d);
        ranked_yet = 1;
      }
    }
    if (ok) list[kept++] = (ranked){d, rank};
  }
  if (kept == 0 && why && !why->len) {
    if (inverse || fail < 0)
      lp_buf_printf(why, "pod anti-affinity of a pod already placed, on %s, cannot be met", key);
    else
      say_failed(why, p, pod, (size_t)fail);
  }
  qsort(list, kept, sizeof *list, by_rank);
  json_t *out = json_array();
  for (size_t i = 0; i < kept; i++) json_array_append_new(out, json_string(list[i].domain));
  free(list);
  return out;
}

int pv_topology_allows(const pv_pass *p, const pv_pod *pod, const pv_site *site) {
  if (!p->ngroups) return 1;
  json_t *keys = constrained_keys(p, pod);
  int ok = 1;
  const char *key;
  json_t *v;
  json_object_foreach(keys, key, v) {
    json_t *values = site_values(p, site, key);
    json_t *good = json_array_size(values) == 1 ? allowed(p, pod, key, values, NULL) : NULL;
    ok = json_array_size(good) == 1;
    json_decref(values);
    json_decref(good);
    if (!ok) break;
  }
  json_decref(keys);
  return ok;
}

/* Appends to out the requirement lists narrowing base by one value per key of keys[k..], at most
 * MAX_OPTIONS in all. */
static void combine(json_t *out, const json_t *base, json_t *const *choices, const char *const *keys,
                    size_t k, size_t nkeys) {
  if (json_array_size(out) >= MAX_OPTIONS) return;
  if (k == nkeys) {
    json_array_append(out, (json_t *)base);
    return;
  }
  if (!choices[k]) {
    combine(out, base, choices, keys, k + 1, nkeys);
    return;
  }
  size_t i;
  json_t *d;
  json_array_foreach(choices[k], i, d) {
    json_t *one = json_pack("[{s:s, s:s, s:[O]}]", "key", keys[k], "operator", "In", "values", d);
    json_t *narrowed = json_array();
    json_array_extend(narrowed, (json_t *)base);
    json_array_extend(narrowed, one);
    combine(out, narrowed, choices, keys, k + 1, nkeys);
    json_decref(narrowed);
    json_decref(one);
  }
}

json_t *pv_topology_options(const pv_pass *p, const pv_pod *pod, const pv_site *site, lp_buf *why) {
  if (!p->ngroups) return NULL;
  json_t *keys = constrained_keys(p, pod);
  size_t nkeys = json_object_size(keys);
  if (nkeys == 0) {
    json_decref(keys);
    return NULL;
  }
  json_t **choices = lp_xcalloc(nkeys, sizeof *choices);
  const char **names = lp_xcalloc(nkeys, sizeof *names);
  size_t k = 0;
  int ok = 1;
  const char *key;
  json_t *v;
  json_object_foreach(keys, key, v) {
    names[k] = key;
    json_t *values = site_values(p, site, key);
    json_t *good = allowed(p, pod, key, values, why);
    ok = ok && json_array_size(good) > 0;
    /* one value already: nothing to narrow; the hostname is the NodeClaim's own */
    if (json_array_size(values) > 1 && strcmp(key, HOSTNAME) != 0)
      choices[k] = good;
    else
      json_decref(good);
    json_decref(values);
    k++;
  }
  json_t *out = json_array(), *none = json_array();
  if (ok) combine(out, none, choices, names, 0, nkeys);
  json_decref(none);
  for (k = 0; k < nkeys; k++) json_decref(choices[k]);
  free(choices);
  free(names);
  json_decref(keys);
  return out;
}

void pv_topology_free(pv_pass *p) {
  for (size_t g = 0; g < p->ngroups; g++) {
    free(p->groups[g].key);
    json_decref(p->groups[g].selector);
    json_decref(p->groups[g].namespaces);
    json_decref(p->groups[g].counts);
    json_decref(p->groups[g].owners);
  }
  free(p->groups);
  p->groups = NULL;
  p->ngroups = 0;
  json_decref(p->domains);
  p->domains = NULL;
}
