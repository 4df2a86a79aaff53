/* The drift checks of a launched NodeClaim, in the order of docs/controllers.md (Drift); the
 * first that finds drift decides:
 *   1. static: the NodeClaim's karpenter.sh/nodepool-hash differs from its NodePool's current hash
 *      (lp_nodepool_hash), when the NodeClaim's hash version is this engine's LP_NODEPOOL_HASH_VERSION
 *      and the NodePool does not carry another version (one stamped by Go Karpenter, whose hashes are
 *      not comparable with ours) -> NodePoolDrifted;
 *   2. requirements: a requirement of the NodePool's template that the NodeClaim's labels do not
 *      satisfy, as Karpenter's Compatible without the well-known-label allowance: a label missing for
 *      In, Exists, Gt, Lt, Gte or Lte, present for DoesNotExist, or a value outside the set
 *      -> RequirementsDrifted;
 *   3. instance type not found, for a NodeClaim older than DRIFT_MIN_AGE_FACTOR x resync (1 h): its
 *      node.kubernetes.io/instance-type label missing, the type not among GetInstanceTypes of its
 *      node class, or no offering of it compatible with its zone and capacity-type labels (offerings
 *      out of stock count: they are the type's, only not buyable now) -> InstanceTypeNotFound;
 *      GetInstanceTypes is asked once per node class per DRIFT_TYPES_TTL_FACTOR x resync (30 min),
 *      concurrent reconciles sharing one call;
 *   4. provider: lp_cp_is_drifted, the Lua drift policy (NodeClassDrift, or one of the reasons the
 *      mapping declares in its drift_reasons). Its answer is kept per NodeClaim uid for resync seconds
 *      (5 min) unless the node class changed since (its resourceVersion is part of the entry), so a
 *      node costs at most one instance lookup per period. DriftUnknown (the policy cannot tell yet)
 *      and NodeClaimNotFound (the instance is gone: garbage collection's business) leave the condition
 *      as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/requirements.h"
#include "contract/shapes.h"
#include "controller/drift_internal.h"
#include "controller/nodepool.h"
#include "core/clock.h"
#include "core/log.h"

struct drift_fetch {
  char *nodeclass;
  drift_run *waiters; /* linked through next_waiter */
  drift_fetch *next;
};

static void provider_check(drift_run *r);

/* ---- 1. static ------------------------------------------------------------------------------ */

static int static_drift(drift_run *r) {
  const char *have = lp_obj_annotation(r->claim, LP_NODEPOOL_HASH_ANNOTATION);
  const char *version = lp_obj_annotation(r->claim, LP_NODEPOOL_HASH_VERSION_ANNOTATION);
  const char *pool_version = lp_obj_annotation(r->nodepool, LP_NODEPOOL_HASH_VERSION_ANNOTATION);
  if (!have || !version || strcmp(version, LP_NODEPOOL_HASH_VERSION) != 0 ||
      (pool_version && strcmp(pool_version, LP_NODEPOOL_HASH_VERSION) != 0))
    return 0;
  char want[17];
  lp_nodepool_hash(r->nodepool, want);
  if (strcmp(want, have) == 0) return 0;
  char message[128];
  snprintf(message, sizeof message, "NodePool template hash %s differs from the NodeClaim's %s", want, have);
  drift_verdict(r, DRIFT_FOUND, "NodePoolDrifted", message, NULL);
  return 1;
}

/* ---- 2. requirements ------------------------------------------------------------------------- */

static int requirements_drift(drift_run *r) {
  const json_t *reqs = json_object_get(
      json_object_get(json_object_get(json_object_get(r->nodepool, "spec"), "template"), "spec"),
      "requirements");
  size_t i;
  const json_t *req;
  json_array_foreach(reqs, i, req) {
    const char *key = json_string_value(json_object_get(req, "key"));
    if (!key) continue;
    const char *value = lp_obj_label(r->claim, key);
    if (lp_requirement_allows(req, value)) continue;
    char *values = json_dumps(json_object_get(req, "values"), JSON_COMPACT | JSON_ENCODE_ANY);
    const char *op = json_string_value(json_object_get(req, "operator"));
    char message[512];
    snprintf(message, sizeof message, "label %s%s%s does not satisfy the NodePool's requirement %s %s %s",
             key, value ? "=" : " is missing and", value ? value : "", key, op ? op : "?",
             values ? values : "[]");
    free(values);
    drift_verdict(r, DRIFT_FOUND, "RequirementsDrifted", message, NULL);
    return 1;
  }
  return 0;
}

/* ---- 3. instance type not found -------------------------------------------------------------- */

/* The cached index of the node class's types (name -> [[zone, capacity type]...]), or NULL when
 * absent or stale. */
static const json_t *types_cached(drift_state *st, const char *nodeclass) {
  const json_t *entry = json_object_get(st->types, nodeclass);
  if (!entry) return NULL;
  double at = json_real_value(json_object_get(entry, "at"));
  if (lp_clock_monotonic() - at >= st->resync_s * DRIFT_TYPES_TTL_FACTOR) return NULL;
  return json_object_get(entry, "types");
}

static json_t *index_types(const json_t *types) {
  json_t *index = json_object();
  size_t i, j;
  const json_t *type, *offering;
  json_array_foreach(types, i, type) {
    const char *name = json_string_value(json_object_get(type, "name"));
    if (!name) continue;
    json_t *offers = json_array();
    json_array_foreach(json_object_get(type, "offerings"), j, offering) {
      json_array_append_new(offers, json_pack("[OO]", json_object_get(offering, "zone"),
                                              json_object_get(offering, "capacity_type")));
    }
    json_object_set_new(index, name, offers);
  }
  return index;
}

static int label_matches(const json_t *offered, const char *label) {
  return !label || (json_is_string(offered) && strcmp(json_string_value(offered), label) == 0);
}

static void check_type(drift_run *r, const json_t *index) {
  const char *name = lp_obj_label(r->claim, LP_LABEL_INSTANCE_TYPE);
  const char *zone = lp_obj_label(r->claim, LP_LABEL_ZONE);
  const char *capacity = lp_obj_label(r->claim, LP_LABEL_CAPACITY_TYPE);
  const json_t *offers = name ? json_object_get(index, name) : NULL;
  char message[512];
  if (!name) {
    snprintf(message, sizeof message, "the NodeClaim has no %s label", LP_LABEL_INSTANCE_TYPE);
  } else if (!offers) {
    snprintf(message, sizeof message, "instance type %s is not among the instance types of %s %s", name,
             lp_env_nodeclass(r->env)->kind, lp_obj_name(r->nodeclass));
  } else {
    size_t i;
    const json_t *o;
    json_array_foreach(offers, i, o) {
      if (label_matches(json_array_get(o, 0), zone) && label_matches(json_array_get(o, 1), capacity)) {
        provider_check(r);
        return;
      }
    }
    snprintf(message, sizeof message, "instance type %s has no offering in zone %s for capacity type %s",
             name, zone ? zone : "(any)", capacity ? capacity : "(any)");
  }
  drift_verdict(r, DRIFT_FOUND, "InstanceTypeNotFound", message, NULL);
}

static void types_fetched(json_t *value, lp_error *err, void *ud) {
  drift_fetch *f = ud;
  drift_state *st = f->waiters->st;
  for (drift_fetch **p = &st->fetches; *p; p = &(*p)->next) {
    if (*p == f) {
      *p = f->next;
      break;
    }
  }
  json_t *index = NULL;
  if (!err) {
    index = index_types(value);
    json_object_set_new(st->types, f->nodeclass,
                        json_pack("{s:f, s:O}", "at", lp_clock_monotonic(), "types", index));
  }
  drift_run *w = f->waiters;
  while (w) {
    drift_run *next = w->next_waiter;
    if (err)
      drift_verdict(w, DRIFT_UNKNOWN, NULL, NULL,
                    lp_error_new(err->code, "drift: GetInstanceTypes of %s %s: %s",
                                 lp_env_nodeclass(w->env)->kind, f->nodeclass, err->message));
    else
      check_type(w, index);
    w = next;
  }
  json_decref(index);
  json_decref(value);
  lp_error_free(err);
  free(f->nodeclass);
  free(f);
}

static void instance_type_check(drift_run *r) {
  double created = lp_rfc3339_parse(lp_obj_str(r->claim, "metadata.creationTimestamp"));
  if (!r->nodeclass || created < 0 || r->now - created < r->st->resync_s * DRIFT_MIN_AGE_FACTOR) {
    provider_check(r);
    return;
  }
  const char *nodeclass = lp_obj_name(r->nodeclass);
  const json_t *index = types_cached(r->st, nodeclass);
  if (index) {
    check_type(r, index);
    return;
  }
  drift_fetch *f = r->st->fetches;
  while (f && strcmp(f->nodeclass, nodeclass) != 0) f = f->next;
  if (f) {
    r->next_waiter = f->waiters;
    f->waiters = r;
    return;
  }
  f = lp_xcalloc(1, sizeof *f);
  f->nodeclass = lp_xstrdup(nodeclass);
  f->waiters = r;
  f->next = r->st->fetches;
  r->st->fetches = f;
  lp_cp_get_instance_types(lp_env_cloud(r->env), r->nodeclass, types_fetched, f);
}

/* ---- 4. the provider's drift policy ---------------------------------------------------------- */

/* "<node class resourceVersion>\n<script generation>\n": the prefix a cached answer must have to be
 * used, so a changed class or a reloaded policy is asked again. */
static char *policy_prefix(const drift_run *r) {
  const char *rv = lp_obj_resource_version(r->nodeclass);
  return lp_xasprintf("%s\n%llu\n", rv ? rv : "",
                      (unsigned long long)lp_cloudprovider_script_generation(lp_env_cloud(r->env)));
}

static void policy_verdict(drift_run *r, const char *reason) {
  if (!*reason) {
    drift_verdict(r, DRIFT_CLEAN, NULL, NULL, NULL);
    return;
  }
  char message[256];
  snprintf(message, sizeof message, "the drift policy reports %s against %s %s", reason,
           lp_env_nodeclass(r->env)->kind, lp_obj_name(r->nodeclass));
  drift_verdict(r, DRIFT_FOUND, reason, message, NULL);
}

static void policy_answered(json_t *value, lp_error *err, void *ud) {
  drift_run *r = ud;
  if (err && (strcmp(err->code, "DriftUnknown") == 0 || strcmp(err->code, "NodeClaimNotFound") == 0)) {
    lp_debug(lp_controller_logger(r->c), "drift not known yet", LPF_STR("nodeclaim", r->key),
             LPF_STR("code", err->code), LPF_STR("error", err->message));
    lp_error_free(err);
    drift_verdict(r, DRIFT_UNKNOWN, NULL, NULL, NULL);
    return;
  }
  if (err) {
    lp_error *e = lp_error_new(err->code, "drift: IsDrifted of nodeclaim %s: %s", r->key, err->message);
    lp_error_inherit(e, err); /* the policy error's position and traceback, for the log line */
    lp_error_free(err);
    drift_verdict(r, DRIFT_UNKNOWN, NULL, NULL, e);
    return;
  }
  const char *reason = json_string_value(value);
  char *prefix = policy_prefix(r);
  char *entry = lp_xasprintf("%s%s", prefix, reason ? reason : "");
  const char *uid = lp_obj_uid(r->claim);
  if (uid) lp_cache_set(r->st->policy, uid, strlen(uid), entry, strlen(entry), 0);
  free(entry);
  free(prefix);
  policy_verdict(r, reason ? reason : "");
  json_decref(value);
}

static void provider_check(drift_run *r) {
  if (!r->nodeclass) { /* nothing to compare the instance with until the class is cached again */
    drift_verdict(r, DRIFT_UNKNOWN, NULL, NULL, NULL);
    return;
  }
  const char *uid = lp_obj_uid(r->claim);
  const char *hit = uid ? lp_cache_get(r->st->policy, uid, strlen(uid), NULL) : NULL;
  char *prefix = policy_prefix(r);
  size_t n = strlen(prefix);
  if (hit && strncmp(hit, prefix, n) == 0) {
    char *reason = lp_xstrdup(hit + n); /* the verdict may write the cache */
    free(prefix);
    policy_verdict(r, reason);
    free(reason);
    return;
  }
  free(prefix);
  lp_cp_is_drifted(lp_env_cloud(r->env), r->claim, r->nodeclass, policy_answered, r);
}

void drift_check(drift_run *r) {
  if (static_drift(r) || requirements_drift(r)) return;
  instance_type_check(r);
}
