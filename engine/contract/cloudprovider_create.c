/* CloudProvider Create: choose the cheapest compatible offering, build the launch request, fall
 * through out-of-stock offerings, and assemble the NodeClaim Karpenter persists (rules CP1 and CP2,
 * docs/contracts.md). */
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider_internal.h"
#include "contract/requirements.h"
#include "contract/shapes.h"
#include "core/log.h"

/* ---- Create ------------------------------------------------------------------------------ */

static int condition_true(const json_t *object, const char *type) {
  size_t i;
  const json_t *c;
  json_array_foreach(json_object_get(json_object_get(object, "status"), "conditions"), i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    if (t && strcmp(t, type) == 0)
      return strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") == 0;
  }
  return 0;
}

static double offering_price(const json_t *offering) {
  const json_t *p = json_object_get(offering, "price");
  return json_is_number(p) ? json_number_value(p) : -1;
}

/* cheapest first; unknown prices last; then by type name for a stable order */
static int compare_candidates(const void *a, const void *b) {
  const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  double px = offering_price(json_array_get(x, 1)), py = offering_price(json_array_get(y, 1));
  if ((px < 0) != (py < 0)) return px < 0 ? 1 : -1;
  if (px != py) return px < py ? -1 : 1;
  return strcmp(json_string_value(json_object_get(json_array_get(x, 0), "name")),
                json_string_value(json_object_get(json_array_get(y, 0), "name")));
}

/* Types compatible with the NodeClaim's requirements that fit its requests, with each of their
 * available offerings compatible with the requirements, as [type, offering] pairs, cheapest first. */
static json_t *launch_candidates(const json_t *nodeclaim, const json_t *types, char **why) {
  const json_t *spec = json_object_get(nodeclaim, "spec");
  const json_t *reqs = json_object_get(spec, "requirements");
  const json_t *requests = json_object_get(json_object_get(spec, "resources"), "requests");
  json_t *out = json_array();
  size_t incompatible = 0, too_small = 0, unavailable = 0, i;
  const json_t *type;
  json_array_foreach(types, i, type) {
    if (!lp_requirements_compatible(reqs, json_object_get(type, "requirements"), NULL)) {
      incompatible++;
      continue;
    }
    if (!lp_resources_fit(requests, json_object_get(type, "capacity"), json_object_get(type, "overhead"),
                          NULL)) {
      too_small++;
      continue;
    }
    size_t k, before = json_array_size(out);
    const json_t *offering;
    json_array_foreach(json_object_get(type, "offerings"), k, offering) {
      if (json_is_true(json_object_get(offering, "available")) &&
          lp_requirements_compatible(reqs, json_object_get(offering, "requirements"), NULL))
        json_array_append_new(out, json_pack("[OO]", type, offering));
    }
    if (json_array_size(out) == before) unavailable++;
  }
  size_t n = json_array_size(out);
  json_t **items = lp_xcalloc(n ? n : 1, sizeof *items);
  for (size_t k = 0; k < n; k++) items[k] = json_incref(json_array_get(out, k));
  qsort(items, n, sizeof *items, compare_candidates);
  json_array_clear(out);
  for (size_t k = 0; k < n; k++) json_array_append_new(out, items[k]);
  free(items);
  if (n == 0)
    *why = lp_xasprintf(
        "no offering can launch: of %zu instance types, %zu do not meet the requirements, %zu are "
        "too small for the requests and %zu have no available compatible offering",
        json_array_size(types), incompatible, too_small, unavailable);
  return out;
}

static const char *first_id(const json_t *list, const char *field, const char *value) {
  size_t i;
  const json_t *item;
  json_array_foreach(list, i, item) {
    const char *v = json_string_value(json_object_get(item, field));
    if (!value || (v && strcmp(v, value) == 0)) return json_string_value(json_object_get(item, "id"));
  }
  return NULL;
}

/* The first resolved image whose requirements (architecture) suit the type. */
static const char *image_for(const json_t *nodeclass, const json_t *type) {
  size_t i;
  const json_t *image;
  json_array_foreach(json_object_get(json_object_get(nodeclass, "status"), "images"), i, image) {
    if (lp_requirements_compatible(json_object_get(image, "requirements"),
                                   json_object_get(type, "requirements"), NULL))
      return json_string_value(json_object_get(image, "id"));
  }
  return NULL;
}

/* The same NodeClaim and offering always get the same token, so a retried RunInstances returns the
 * instance the first attempt launched instead of a second one. */
static char *client_token(const json_t *nodeclaim, const char *type, const json_t *offering) {
  const json_t *md = json_object_get(nodeclaim, "metadata");
  const char *uid = json_string_value(json_object_get(md, "uid"));
  if (!uid) uid = json_string_value(json_object_get(md, "name"));
  char *seed =
      lp_xasprintf("%s|%s|%s|%s", uid ? uid : "", type, json_string_value(json_object_get(offering, "zone")),
                   json_string_value(json_object_get(offering, "capacity_type")));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)seed, strlen(seed), digest);
  free(seed);
  char *hex = lp_xmalloc(2 * 24 + 1);
  for (int i = 0; i < 24; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  return hex;
}

static void try_next_candidate(op *o);

static void provider_id_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  const char *pid = json_string_value(json_array_get(values, 0));
  if (!pid || !*pid) {
    json_decref(values);
    cp_finish(o, NULL,
              cp_contract_error(o, o->cp->mapping, "provider_id", lp_xstrdup("did not return a string"),
                                "docs/contracts.md#mappings"));
    return;
  }
  json_t *claim = lp_nodeclaim_for_instance(o->nodeclaim, o->instance, o->chosen_type, pid);
  json_t *annotations = json_object_get(json_object_get(claim, "metadata"), "annotations");
  if (!json_is_object(annotations)) {
    annotations = json_object();
    json_object_set_new(json_object_get(claim, "metadata"), "annotations", annotations);
  }
  const json_t *class_annotations = json_object_get(json_object_get(o->nodeclass, "metadata"), "annotations");
  const char *keys[] = {LP_ANNOTATION_HASH, LP_ANNOTATION_HASH_VERSION};
  for (int i = 0; i < 2; i++) {
    json_t *v = json_object_get(class_annotations, keys[i]);
    if (json_is_string(v)) json_object_set(annotations, keys[i], v);
  }
  char *missing = lp_check_nodeclaim_labels(claim);
  if (!missing && (!json_object_get(annotations, LP_ANNOTATION_HASH) ||
                   !json_object_get(annotations, LP_ANNOTATION_HASH_VERSION)))
    missing = lp_xasprintf("the %s and %s annotations (the ECSNodeClass has none yet)", LP_ANNOTATION_HASH,
                           LP_ANNOTATION_HASH_VERSION);
  if (missing) {
    lp_error *e =
        lp_error_new("Contract", "the NodeClaim for instance %s lacks %s (rule CP2 in docs/contracts.md)",
                     json_string_value(json_object_get(o->instance, "id")), missing);
    free(missing);
    json_decref(claim);
    json_decref(values);
    cp_finish(o, NULL, e);
    return;
  }
  lp_counter_inc(o->cp->launches, LP_LABELS("ok"));
  lp_info(
      LOGGER, "instance launched",
      LPF_STR("nodeclaim", json_string_value(json_object_get(json_object_get(claim, "metadata"), "name"))),
      LPF_STR("provider_id", pid),
      LPF_STR("instance_type", json_string_value(json_object_get(o->instance, "instance_type"))),
      LPF_STR("zone", json_string_value(json_object_get(o->instance, "zone"))));
  json_decref(values); /* pid points into it */
  cp_finish(o, claim, NULL);
}

static void mark_unavailable(lp_cloudprovider *cp, const char *type, const json_t *offering) {
  char key[512];
  cp_offering_key(key, sizeof key, type, offering);
  lp_cache_set(cp->unavailable, key, strlen(key), "1", 1, 0);
}

static void launch_done(op *o, json_t *values, lp_error *err) {
  json_t *pair = json_array_get(o->candidates, o->next_candidate - 1);
  const char *type = json_string_value(json_object_get(json_array_get(pair, 0), "name"));
  const json_t *offering = json_array_get(pair, 1);
  if (err) {
    if (strcmp(err->code, "InsufficientCapacity") == 0) {
      lp_counter_inc(o->cp->launches, LP_LABELS("insufficient_capacity"));
      lp_warn(LOGGER, "offering out of stock, trying the next", LPF_STR("instance_type", type),
              LPF_STR("zone", json_string_value(json_object_get(offering, "zone"))),
              LPF_STR("capacity_type", json_string_value(json_object_get(offering, "capacity_type"))),
              LPF_STR("error", err->message));
      mark_unavailable(o->cp, type, offering);
      lp_error_free(err);
      try_next_candidate(o);
      return;
    }
    lp_counter_inc(o->cp->launches, LP_LABELS("error"));
    if (strcmp(err->code, "NodeClassNotReady") == 0 || strcmp(err->code, "Contract") == 0) {
      cp_finish(o, NULL, err);
      return;
    }
    lp_error *create =
        lp_error_new("CreateError", "launching %s in %s failed: %s: %s", type,
                     json_string_value(json_object_get(offering, "zone")), err->code, err->message);
    lp_error_free(err);
    cp_finish(o, NULL, create);
    return;
  }
  json_t *instance = json_array_get(values, 0);
  char *problem = lp_check_instance(instance);
  if (problem) {
    json_decref(values);
    cp_finish(
        o, NULL,
        cp_contract_error(o, o->cp->mapping, "create", problem, "docs/contracts.md#the-instance-shape"));
    return;
  }
  o->instance = json_incref(instance);
  o->chosen_type = json_incref(json_array_get(pair, 0));
  json_decref(values);
  cp_call(o, o->cp->mapping, "provider_id", json_pack("[O]", o->instance), provider_id_done);
}

static void try_next_candidate(op *o) {
  if (o->next_candidate >= json_array_size(o->candidates) ||
      o->next_candidate >= o->cp->max_launch_attempts) {
    cp_finish(
        o, NULL,
        lp_error_new("InsufficientCapacity", "all %zu offerings tried for NodeClaim %s were out of stock",
                     o->next_candidate,
                     json_string_value(json_object_get(json_object_get(o->nodeclaim, "metadata"), "name"))));
    return;
  }
  json_t *pair = json_array_get(o->candidates, o->next_candidate++);
  json_t *type = json_array_get(pair, 0);
  json_t *offering = json_array_get(pair, 1);
  const char *name = json_string_value(json_object_get(type, "name"));
  const char *zone = json_string_value(json_object_get(offering, "zone"));
  const json_t *status = json_object_get(o->nodeclass, "status");
  const char *vswitch = first_id(json_object_get(status, "vSwitches"), "zoneID", zone);
  const char *image = image_for(o->nodeclass, type);
  if (!vswitch || !image) { /* the mapping offered a zone or architecture the class cannot launch in */
    mark_unavailable(o->cp, name, offering);
    try_next_candidate(o);
    return;
  }
  json_t *sgs = json_array();
  size_t i;
  const json_t *sg;
  json_array_foreach(json_object_get(status, "securityGroups"), i, sg)
      json_array_append(sgs, json_object_get(sg, "id"));
  char *token = client_token(o->nodeclaim, name, offering);
  json_t *req = json_pack("{s:O, s:O, s:s, s:s, s:O, s:s, s:s, s:o, s:O, s:s}", "nodeclaim", o->nodeclaim,
                          "nodeclass", o->nodeclass, "instance_type", name, "zone", zone, "capacity_type",
                          json_object_get(offering, "capacity_type"), "vswitch_id", vswitch, "image_id",
                          image, "security_group_ids", sgs, "tags", o->tags, "client_token", token);
  free(token);
  const json_t *user_data = json_object_get(json_object_get(o->nodeclass, "spec"), "userData");
  if (json_is_string(user_data)) json_object_set(req, "user_data", (json_t *)user_data);
  cp_call(o, o->cp->mapping, "create", cp_ctx_args1(o->cp, req), launch_done);
}

static void tags_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  json_t *tags = json_array_get(values, 0);
  char *problem = lp_check_tags(tags);
  if (problem) {
    json_decref(values);
    cp_finish(
        o, NULL,
        cp_contract_error(o, "policies.tags", "build_instance_tags", problem, "docs/contracts.md#policies"));
    return;
  }
  o->tags = json_is_object(tags) ? json_incref(tags) : json_object();
  json_decref(values);
  try_next_candidate(o);
}

static void create_types_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  json_t *types = json_array_get(values, 0);
  lp_error *problem = cp_checked_types(o, types);
  if (problem) {
    json_decref(values);
    cp_finish(o, NULL, problem);
    return;
  }
  char *why = NULL;
  o->candidates = launch_candidates(o->nodeclaim, json_is_array(types) ? types : NULL, &why);
  json_decref(values);
  if (json_array_size(o->candidates) == 0) {
    lp_counter_inc(o->cp->launches, LP_LABELS("insufficient_capacity"));
    cp_finish(
        o, NULL,
        lp_error_new("InsufficientCapacity", "NodeClaim %s: %s",
                     json_string_value(json_object_get(json_object_get(o->nodeclaim, "metadata"), "name")),
                     why ? why : "no offering"));
    free(why);
    return;
  }
  json_t *ctx = json_pack("{s:O, s:O}", "cluster_id", json_object_get(o->cp->ctx, "cluster_id"), "region",
                          json_object_get(o->cp->ctx, "region"));
  cp_call(o, "policies.tags", "build_instance_tags", json_pack("[OOo]", o->nodeclaim, o->nodeclass, ctx),
          tags_done);
}

void lp_cp_create(lp_cloudprovider *cp, const json_t *nodeclaim, const json_t *nodeclass, lp_cp_done_fn done,
                  void *ud) {
  op *o = cp_op_new(cp, done, ud);
  o->nodeclaim = json_deep_copy(nodeclaim);
  o->nodeclass = json_deep_copy(nodeclass);
  if (!condition_true(nodeclass, "Ready")) {
    cp_fail_soon(
        o, lp_error_new("NodeClassNotReady", "ECSNodeClass %s is not ready",
                        json_string_value(json_object_get(json_object_get(nodeclass, "metadata"), "name"))));
    return;
  }
  cp_remember_class(cp, nodeclass);
  cp_call(o, cp->mapping, "instance_types", cp_ctx_args1(cp, json_deep_copy(nodeclass)), create_types_done);
}
