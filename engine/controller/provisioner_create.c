/* The provisioner's NodeClaims (provisioner_internal.h): built from the NodePool's template and the
 * computed claim, created a few at a time, and their pods nominated. The lifecycle controller launches
 * them: CloudProvider Create picks the cheapest offering the requirements allow. */
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "controller/nodepool.h"
#include "controller/provisioner_internal.h"
#include "core/error.h"
#include "core/log.h"

/* Karpenter creates NodeClaims in parallel; a few at once keep the API server's queue short. */
#define MAX_CREATING 8

static const json_t *template_part(const pv_pool *pool, const char *part) {
  return json_object_get(json_object_get(json_object_get(pool->obj, "spec"), "template"), part);
}

static int has_suffix(const char *s, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && strncmp(s + n - k, suffix, k) == 0;
}

/* Karpenter injects a single-valued requirement as a label unless the key is one the cloud provider
 * or Karpenter sets itself (restricted: the karpenter.sh domains, kubernetes.io/hostname). */
static int injectable(const pv_pool *pool, const char *key) {
  const char *slash = strchr(key, '/');
  size_t domain = slash ? (size_t)(slash - key) : 0;
  int karpenter = domain && ((domain == strlen("karpenter.sh") && has_suffix(key, domain, "karpenter.sh")) ||
                             has_suffix(key, domain, ".karpenter.sh"));
  return *key && !karpenter && strcmp(key, "kubernetes.io/hostname") != 0 &&
         !json_object_get(pool->provider_keys, key);
}

static json_t *claim_labels(const pv_claim *c) {
  json_t *labels = json_deep_copy(json_object_get(template_part(c->pool, "metadata"), "labels"));
  if (!json_is_object(labels)) {
    json_decref(labels);
    labels = json_object();
  }
  size_t i;
  const json_t *req;
  json_array_foreach(c->reqs, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    const json_t *values = json_object_get(req, "values");
    if (key && strcmp(json_string_value(json_object_get(req, "operator")) ?: "", "In") == 0 &&
        json_array_size(values) == 1 && injectable(c->pool, key))
      json_object_set(labels, key, json_array_get(values, 0));
  }
  json_object_set_new(labels, PV_LABEL_NODEPOOL, json_string(c->pool->name));
  return labels;
}

static json_t *claim_annotations(const pv_claim *c) {
  json_t *annotations = json_deep_copy(json_object_get(template_part(c->pool, "metadata"), "annotations"));
  if (!json_is_object(annotations)) {
    json_decref(annotations);
    annotations = json_object();
  }
  char hash[17];
  lp_nodepool_hash(c->pool->obj, hash);
  json_object_set_new(annotations, LP_NODEPOOL_HASH_ANNOTATION, json_string(hash));
  json_object_set_new(annotations, LP_NODEPOOL_HASH_VERSION_ANNOTATION,
                      json_string(LP_NODEPOOL_HASH_VERSION));
  return annotations;
}

json_t *pv_claim_requirements(const pv_claim *c) {
  json_t *names = json_array();
  for (size_t t = 0; t < c->ntypes; t++) json_array_append_new(names, json_string(c->types[t]->name));
  json_t *options = json_pack("[{s:s, s:s, s:o}, {s:s, s:s, s:O}]", "key", "node.kubernetes.io/instance-type",
                              "operator", "In", "values", names, "key", "karpenter.sh/capacity-type",
                              "operator", "In", "values", c->capacity_types);
  /* never empty: every option is compatible with the requirements, and so are its offerings */
  json_t *reqs = lp_requirements_intersect(c->reqs, options, NULL);
  json_decref(options);
  return reqs;
}

/* The NodeClaim object for a computed claim; new reference. */
static json_t *claim_object(pv_pass *p, const pv_claim *c) {
  const json_t *tspec = template_part(c->pool, "spec");
  json_t *spec = json_object();
  static const char *const copied[] = {"nodeClassRef",           "taints", "startupTaints", "expireAfter",
                                       "terminationGracePeriod", NULL};
  for (size_t i = 0; copied[i]; i++) {
    json_t *v = json_object_get(tspec, copied[i]);
    if (v) json_object_set_new(spec, copied[i], json_deep_copy(v));
  }
  json_object_set_new(spec, "requirements", pv_claim_requirements(c));
  pv_res requests = pv_res_sum(&c->requests, &c->pool->daemon);
  json_object_set_new(spec, "resources", json_pack("{s:o}", "requests", pv_res_to_list(&p->dims, &requests)));
  char *name = pv_claim_name(p, c->pool->name); /* not generateName: see provisioner_inflight.c */
  json_t *claim = json_pack("{s:s, s:s, s:{s:s, s:o, s:o, s:[o]}, s:o}", "apiVersion", "karpenter.sh/v1",
                            "kind", "NodeClaim", "metadata", "name", name, "labels", claim_labels(c),
                            "annotations", claim_annotations(c), "ownerReferences",
                            lp_obj_owner_ref(c->pool->obj, "karpenter.sh/v1", "NodePool"), "spec", spec);
  free(name);
  return claim;
}

/* ---- creation ------------------------------------------------------------------------------- */

typedef struct create_op {
  pv_pass *p;
  const pv_claim *claim;
  json_t *obj;
  int retried; /* POSTed a second time after an answer that said nothing */
} create_op;

static void create_more(pv_pass *p);

static void log_created(pv_pass *p, const pv_claim *c, const json_t *created) {
  char *requests =
      json_dumps(json_object_get(json_object_get(json_object_get(created, "spec"), "resources"), "requests"),
                 JSON_COMPACT | JSON_SORT_KEYS);
  lp_info(lp_controller_logger(p->c), "created nodeclaim", LPF_STR("nodeclaim", lp_obj_name(created)),
          LPF_STR("nodepool", c->pool->name), LPF_JSON("requests", requests ? requests : "{}"),
          LPF_INT("pods", c->npods), LPF_INT("instance_types", c->ntypes),
          LPF_STR("cheapest", c->types[0]->name), LPF_NUM("cheapest_price", c->cheapest_price));
  free(requests);
}

static void claim_created(const lp_kube_reply *reply, void *ud) {
  create_op *op = ud;
  pv_pass *p = op->p;
  const pv_claim *c = op->claim;
  const char *name = lp_obj_name(op->obj);
  pv_outcome outcome = pv_inflight_answer(p, name, reply, op->retried);
  if (outcome == PV_UNCONFIRMED && !op->retried) { /* the same name again: AlreadyExists if it landed */
    op->retried = 1;
    lp_kube_create(lp_env_kube(p->env), lp_kind_ref(LP_KIND_NODECLAIM), op->obj, claim_created, op);
    return;
  }
  if (outcome == PV_REFUSED) {
    lp_error_keep_first(&p->err, lp_error_new(reply->error->code, "creating nodeclaim %s for nodepool %s: %s",
                                              name, c->pool->name, reply->error->message));
  } else {
    for (size_t i = 0; i < c->npods; i++) pv_nominate(p, &p->pods[c->pods[i]], name);
    if (outcome == PV_STORED) {
      lp_counter_inc(p->st->created_total, LP_LABELS(c->pool->name, "provisioning"));
      log_created(p, c, op->obj);
    }
  }
  json_decref(op->obj);
  free(op);
  p->creating--;
  create_more(p);
}

static void create_more(pv_pass *p) {
  while (p->creating < MAX_CREATING && p->next_create < p->nclaims) {
    create_op *op = lp_xcalloc(1, sizeof *op);
    op->p = p;
    op->claim = &p->claims[p->next_create++];
    op->obj = claim_object(p, op->claim);
    p->creating++;
    pv_inflight_add(p, lp_obj_name(op->obj), op->obj);
    lp_kube_create(lp_env_kube(p->env), lp_kind_ref(LP_KIND_NODECLAIM), op->obj, claim_created, op);
  }
  if (p->creating == 0) pv_finish(p);
}

void pv_create_claims(pv_pass *p) {
  create_more(p);
}
