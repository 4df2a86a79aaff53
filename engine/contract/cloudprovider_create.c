/* CloudProvider Create: the offerings the NodeClaim may launch in, cheapest first, handed to the
 * mapping's create (which decides how to launch one of them); out-of-stock offerings it reports are
 * marked unavailable and all the others handed again; the instance it launched (or found already
 * launched for the NodeClaim) is checked and turned into the NodeClaim Karpenter persists (rules CP1, CP2 and
 * CP9, docs/contracts.md#create). */
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider_internal.h"
#include "contract/contracts.h"
#include "contract/engine_tags.h"
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

static int compare_field(const json_t *x, const json_t *y, const char *key) {
  return strcmp(json_string_value(json_object_get(x, key)) ?: "",
                json_string_value(json_object_get(y, key)) ?: "");
}

/* cheapest first; unknown prices last; then by type name, zone and capacity type for a stable order */
static int compare_candidates(const void *a, const void *b) {
  const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  const json_t *ox = json_array_get(x, 1), *oy = json_array_get(y, 1);
  double px = offering_price(ox), py = offering_price(oy);
  if ((px < 0) != (py < 0)) return px < 0 ? 1 : -1;
  if (px != py) return px < py ? -1 : 1;
  int c = compare_field(json_array_get(x, 0), json_array_get(y, 0), "name");
  if (!c) c = compare_field(ox, oy, "zone");
  return c ? c : compare_field(ox, oy, "capacity_type");
}

enum { TYPE_ALLOWED, TYPE_INCOMPATIBLE, TYPE_TOO_SMALL };

/* Whether the NodeClaim allows the type: its requirements meet the type's and its requests fit. */
static int type_allowed(const json_t *nodeclaim, const json_t *type) {
  const json_t *spec = json_object_get(nodeclaim, "spec");
  if (!lp_requirements_compatible(json_object_get(spec, "requirements"),
                                  json_object_get(type, "requirements"), NULL))
    return TYPE_INCOMPATIBLE;
  if (!lp_resources_fit(json_object_get(json_object_get(spec, "resources"), "requests"),
                        json_object_get(type, "capacity"), json_object_get(type, "overhead"), NULL))
    return TYPE_TOO_SMALL;
  return TYPE_ALLOWED;
}

static int offering_allowed(const json_t *nodeclaim, const json_t *offering) {
  return lp_requirements_compatible(json_object_get(json_object_get(nodeclaim, "spec"), "requirements"),
                                    json_object_get(offering, "requirements"), NULL);
}

/* Types compatible with the NodeClaim's requirements that fit its requests, with each of their
 * available offerings compatible with the requirements, as [type, offering] pairs, cheapest first. */
static json_t *launch_candidates(const json_t *nodeclaim, const json_t *types, char **why) {
  json_t *out = json_array();
  size_t incompatible = 0, too_small = 0, unavailable = 0, i;
  const json_t *type;
  json_array_foreach(types, i, type) {
    int allowed = type_allowed(nodeclaim, type);
    incompatible += allowed == TYPE_INCOMPATIBLE;
    too_small += allowed == TYPE_TOO_SMALL;
    if (allowed != TYPE_ALLOWED) continue;
    size_t k, before = json_array_size(out);
    const json_t *offering;
    json_array_foreach(json_object_get(type, "offerings"), k, offering) {
      if (json_is_true(json_object_get(offering, "available")) && offering_allowed(nodeclaim, offering))
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

static void launch_next(op *o);

static const char *claim_name(const op *o) {
  return json_string_value(json_object_get(json_object_get(o->nodeclaim, "metadata"), "name"));
}
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
  const lp_nodeclass_desc *d = &o->cp->desc;
  const char *keys[] = {d->hash_annotation, d->hash_version_annotation};
  for (int i = 0; i < 2; i++) {
    json_t *v = json_object_get(class_annotations, keys[i]);
    if (json_is_string(v)) json_object_set(annotations, keys[i], v);
  }
  char *missing = lp_check_nodeclaim_labels(claim);
  if (!missing && (!json_object_get(annotations, d->hash_annotation) ||
                   !json_object_get(annotations, d->hash_version_annotation)))
    missing = lp_xasprintf("the %s and %s annotations (the %s has none yet)", d->hash_annotation,
                           d->hash_version_annotation, d->kind);
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

/* The index in o->candidates (what the last create call was handed) of the offering (type, zone,
 * capacity type), or -1 when create was not handed it. */
static long handed_index(const op *o, const char *type, const char *zone, const char *capacity_type) {
  for (size_t i = 0; i < json_array_size(o->candidates); i++) {
    const json_t *pair = json_array_get(o->candidates, i);
    const json_t *offering = json_array_get(pair, 1);
    const char *t = json_string_value(json_object_get(json_array_get(pair, 0), "name"));
    const char *z = json_string_value(json_object_get(offering, "zone"));
    const char *c = json_string_value(json_object_get(offering, "capacity_type"));
    if (type && zone && capacity_type && t && z && c && strcmp(t, type) == 0 && strcmp(z, zone) == 0 &&
        strcmp(c, capacity_type) == 0)
      return (long)i;
  }
  return -1;
}

static long handed_index_of(const op *o, const json_t *item) {
  return handed_index(o, json_string_value(json_object_get(item, "instance_type")),
                      json_string_value(json_object_get(item, "zone")),
                      json_string_value(json_object_get(item, "capacity_type")));
}

/* InsufficientCapacity: the offerings the mapping found out of stock are marked unavailable and
 * removed, and all the others handed again; without a list, the mapping could launch none. Each
 * round removes at least one offering (one reported twice, or never handed, is a CP9 violation), so
 * the rounds end. */
static void out_of_stock(op *o, lp_error *err) {
  const json_t *reported = json_object_get(o->error_detail, "offerings");
  size_t handed = json_array_size(o->candidates);
  if (!json_is_array(reported) || json_array_size(reported) == 0) {
    lp_counter_inc(o->cp->launches, LP_LABELS("insufficient_capacity"));
    lp_error *e = lp_error_new("InsufficientCapacity",
                               "NodeClaim %s: the mapping launched none of the %zu offerings: %s",
                               claim_name(o), handed, err->message);
    lp_error_free(err);
    cp_finish(o, NULL, e);
    return;
  }
  char *gone = lp_xcalloc(handed, 1);
  size_t i;
  const json_t *item;
  json_array_foreach(reported, i, item) {
    long at = handed_index_of(o, item);
    if (at < 0) {
      free(gone);
      char *text = json_dumps(item, JSON_COMPACT | JSON_SORT_KEYS);
      char *problem =
          lp_xasprintf("reported %s out of stock, which is not one of the %zu offerings it was handed",
                       text ? text : "an offering", handed);
      free(text);
      lp_error_free(err);
      cp_finish(o, NULL,
                cp_contract_error(o, o->cp->mapping, "create", problem, "rule CP9 in docs/contracts.md"));
      return;
    }
    gone[at] = 1;
  }
  for (size_t k = 0; k < handed; k++) {
    if (!gone[k]) continue;
    const json_t *pair = json_array_get(o->candidates, k);
    const char *type = json_string_value(json_object_get(json_array_get(pair, 0), "name"));
    const json_t *offering = json_array_get(pair, 1);
    lp_counter_inc(o->cp->launches, LP_LABELS("insufficient_capacity"));
    lp_warn(LOGGER, "offering out of stock, trying the next", LPF_STR("nodeclaim", claim_name(o)),
            LPF_STR("instance_type", type),
            LPF_STR("zone", json_string_value(json_object_get(offering, "zone"))),
            LPF_STR("capacity_type", json_string_value(json_object_get(offering, "capacity_type"))),
            LPF_STR("error", err->message));
    lp_cp_mark_unavailable(o->cp, type, json_string_value(json_object_get(offering, "zone")),
                           json_string_value(json_object_get(offering, "capacity_type")), "out of stock");
  }
  for (size_t k = handed; k-- > 0;) {
    if (!gone[k]) continue;
    json_array_remove(o->candidates, k);
    o->sold_out++;
  }
  free(gone);
  lp_error_free(err);
  launch_next(o);
}

/* What an adopted instance is checked against, indexed so the check is one lookup rather than a scan of
 * the whole instance-type answer: for each offering of a type the NodeClaim allows, compatible with it,
 * available or not, its key (cp_offering_key) -> the type's name, requirements, capacity and overhead
 * (shared by the type's offerings). */
static json_t *allowed_offerings(const json_t *nodeclaim, const json_t *types) {
  static const char *const kept[] = {"name", "requirements", "capacity", "overhead", NULL};
  json_t *out = json_object();
  size_t i, k;
  const json_t *type, *offering;
  json_array_foreach(types, i, type) {
    if (type_allowed(nodeclaim, type) != TYPE_ALLOWED) continue;
    const char *name = json_string_value(json_object_get(type, "name"));
    json_t *slim = json_object();
    for (const char *const *f = kept; *f; f++) {
      json_t *v = json_object_get(type, *f);
      if (v) json_object_set(slim, *f, v);
    }
    json_array_foreach(json_object_get(type, "offerings"), k, offering) {
      if (!offering_allowed(nodeclaim, offering)) continue;
      char key[512];
      cp_offering_key(key, sizeof key, name, offering);
      json_object_set(out, key, slim);
    }
    json_decref(slim);
  }
  return out;
}

/* The type of an instance the mapping found already launched for this NodeClaim (`adopted = true`,
 * rule CP9): when its karpenter.sh/nodeclaim tag names the NodeClaim and its offering is one of a type
 * the NodeClaim allows, available or not, handed or not; else NULL. */
static const json_t *adopted_type(const op *o, const json_t *instance) {
  const char *name = claim_name(o);
  const char *owner =
      json_string_value(json_object_get(json_object_get(instance, "tags"), "karpenter.sh/nodeclaim"));
  const char *type_name = json_string_value(json_object_get(instance, "instance_type"));
  if (!json_is_true(json_object_get(instance, "adopted")) || !name || !owner || strcmp(owner, name) != 0 ||
      !type_name)
    return NULL;
  char key[512];
  cp_offering_key(key, sizeof key, type_name, instance); /* the instance has the offering's zone fields */
  return json_object_get(o->allowed, key);
}

static void launch_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    if (strcmp(err->code, "InsufficientCapacity") == 0) {
      out_of_stock(o, err);
      return;
    }
    lp_counter_inc(o->cp->launches, LP_LABELS("error"));
    if (strcmp(err->code, "NodeClassNotReady") == 0 || strcmp(err->code, "Contract") == 0) {
      cp_finish(o, NULL, err);
      return;
    }
    lp_error *create = lp_error_new("CreateError", "launching NodeClaim %s failed: %s: %s", claim_name(o),
                                    err->code, err->message);
    lp_error_inherit(create, err);
    if (!create->reason) lp_error_with(create, LP_ERROR_REASON, err->code); /* the mapping's own code */
    lp_error_free(err);
    cp_finish(o, NULL, create);
    return;
  }
  json_t *instance = json_array_get(values, 0);
  const char *rule = "docs/contracts.md#the-instance-shape";
  char *problem = lp_check_instance(instance);
  long at = problem ? -1 : handed_index_of(o, instance);
  const json_t *type = at >= 0 ? json_array_get(json_array_get(o->candidates, (size_t)at), 0) : NULL;
  if (!problem && !type) type = adopted_type(o, instance);
  if (!problem && !type) {
    rule = "rule CP9 in docs/contracts.md";
    char *adopted = json_is_true(json_object_get(instance, "adopted"))
                        ? lp_xasprintf(", nor (adopted) an offering NodeClaim %s allows with the tag "
                                       "karpenter.sh/nodeclaim=%s",
                                       claim_name(o), claim_name(o))
                        : lp_xstrdup("");
    problem =
        lp_xasprintf("instance %s is %s in %s (%s), which is not one of the %zu offerings it was handed%s",
                     json_string_value(json_object_get(instance, "id")),
                     json_string_value(json_object_get(instance, "instance_type")),
                     json_string_value(json_object_get(instance, "zone")),
                     json_string_value(json_object_get(instance, "capacity_type")),
                     json_array_size(o->candidates), adopted);
    free(adopted);
  }
  if (problem) {
    json_decref(values);
    cp_finish(o, NULL, cp_contract_error(o, o->cp->mapping, "create", problem, rule));
    return;
  }
  o->instance = json_incref(instance);
  o->chosen_type = json_incref((json_t *)type);
  json_decref(values);
  cp_call(o, o->cp->mapping, "provider_id", json_pack("[O]", o->instance), provider_id_done);
}

/* {instance_type, zone, capacity_type, price, client_token, type} for each offering still to try. */
static json_t *handed_offerings(const op *o) {
  json_t *out = json_array();
  for (size_t i = 0; i < json_array_size(o->candidates); i++) {
    json_t *pair = json_array_get(o->candidates, i);
    json_t *type = json_array_get(pair, 0), *offering = json_array_get(pair, 1);
    const char *name = json_string_value(json_object_get(type, "name"));
    char *token = client_token(o->nodeclaim, name, offering);
    json_t *item = json_pack("{s:s, s:O, s:O, s:s, s:O}", "instance_type", name, "zone",
                             json_object_get(offering, "zone"), "capacity_type",
                             json_object_get(offering, "capacity_type"), "client_token", token, "type", type);
    free(token);
    json_t *price = json_object_get(offering, "price");
    if (json_is_number(price)) json_object_set(item, "price", price);
    json_array_append_new(out, item);
  }
  return out;
}

static void launch_next(op *o) {
  if (json_array_size(o->candidates) == 0) {
    cp_finish(o, NULL,
              lp_error_new("InsufficientCapacity",
                           "all %zu offerings tried for NodeClaim %s were out of stock", o->sold_out,
                           claim_name(o)));
    return;
  }
  json_t *launch = json_pack("{s:O, s:O, s:O, s:o}", "nodeclaim", o->nodeclaim, "nodeclass", o->nodeclass,
                             "tags", o->tags, "offerings", handed_offerings(o));
  cp_call(o, o->cp->mapping, "create", cp_ctx_args1(o->cp, launch), launch_done);
}

static void tags_done(op *o, json_t *values, lp_error *err) {
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  json_t *tags = json_array_get(values, 0);
  char *problem = lp_tags_answer_problem(tags);
  if (problem) {
    json_decref(values);
    lp_error *e = lp_policy_answer_error(lp_script_host_current(o->cp->scripts), "policies.tags",
                                         "build_instance_tags", problem);
    free(problem);
    cp_finish(o, NULL, e);
    return;
  }
  /* the engine's own tags go over the policy's, whatever it returned (rule CP7) */
  o->tags =
      lp_tags_with_engine(tags, o->nodeclaim, json_string_value(json_object_get(o->cp->ctx, "cluster_id")));
  json_decref(values);
  launch_next(o);
}

static void create_types_done(json_t *types, lp_error *err, void *ud) {
  op *o = ud;
  if (err) {
    cp_finish(o, NULL, err);
    return;
  }
  char *why = NULL;
  o->allowed = allowed_offerings(o->nodeclaim, types);
  o->candidates = launch_candidates(o->nodeclaim, types, &why);
  json_decref(types);
  /* at most max_launch_attempts offerings are ever handed to create, the cheapest */
  while (json_array_size(o->candidates) > o->cp->max_launch_attempts)
    json_array_remove(o->candidates, json_array_size(o->candidates) - 1);
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
  /* the tags policy's ctx: the cluster ID and the mapping's settings (docs/contracts.md#policies) */
  json_t *ctx = json_deep_copy(o->cp->ctx);
  json_object_del(ctx, "endpoint");
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
        o, lp_error_new("NodeClassNotReady", "%s %s is not ready", cp->desc.kind,
                        json_string_value(json_object_get(json_object_get(nodeclass, "metadata"), "name"))));
    return;
  }
  lp_cp_get_instance_types(cp, nodeclass, create_types_done, o);
}
