/* Helpers for C tests that use the Alibaba mapping (providers/alibaba) against the in-process Alibaba
 * simulator (spec/c/sim_admin.h starts it): calls into the mapping through an engine script host, the
 * ECSNodeClass "default" resolved and hashed as the nodeclass controller would leave it, and reading
 * the simulator's /_sim/state. With or without the controller fixture (spec/c/controller_fixture.h):
 *
 *   json_t *nodeclass = mapping_resolved_nodeclass(scripts, sim);     // for lp_cp_create and friends
 *   json_t *state = sim_admin(&loop, http, sim, "alibaba", "GET", "/_sim/state", NULL);
 *   long long runs = mapping_sim_calls(state, "RunInstances");
 *
 * Header-only: each test is its own executable. */
#ifndef LUAPROV_SPEC_MAPPING_FIXTURE_H
#define LUAPROV_SPEC_MAPPING_FIXTURE_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "contract/shapes.h"

/* The hash annotations of the default mapping's node class descriptor (providers/alibaba/init.lua;
 * test_cloudprovider checks the descriptor says so). */
#ifndef LP_ANNOTATION_HASH
#define LP_ANNOTATION_HASH         "karpenter.k8s.alibabacloud/ecsnodeclass-hash"
#define LP_ANNOTATION_HASH_VERSION "karpenter.k8s.alibabacloud/ecsnodeclass-hash-version"
#endif
#include "script/endpoints.h"
#include "script/host.h"
#include "sim/sim.h"

/* The values providers.alibaba's function returned for args (a JSON array, stolen): a JSON array the
 * caller decrefs, or NULL after printing the error. */
static inline json_t *mapping_call(lp_script_host *scripts, const char *function, json_t *args) {
  lp_task_result *r = lp_script_host_call_sync(scripts, "providers.alibaba", function, args);
  json_t *values = r->json ? json_loads(r->json, JSON_DECODE_ANY, NULL) : NULL;
  if (r->error) fprintf(stderr, "%s: %s\n", function, r->error->message);
  lp_task_result_free(r);
  return values;
}

/* The ctx the engine hands the mapping for the simulated account (region, cluster, the simulator's
 * endpoint), the endpoint allowed as the engine allows the one it configures; caller decrefs. */
static inline json_t *mapping_ctx(lp_sim *sim) {
  lp_endpoints_allow_configured(lp_sim_url(sim, "alibaba"));
  return json_pack("{s:s, s:s, s:s}", "region", "cn-hangzhou", "cluster_id", "luaprov-sim", "endpoint",
                   lp_sim_url(sim, "alibaba"));
}

/* An ECSNodeClass named name selecting the simulated account's security groups and image, and the
 * vSwitches tagged karpenter.sh/discovery=vswitch_discovery ("luaprov-sim" matches them all, another
 * value none). No status; caller decrefs. */
static inline json_t *mapping_nodeclass(const char *name, const char *vswitch_discovery) {
  return json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:{s:s}}], s:[{s:{s:s}}], s:[{s:s}]}}", "apiVersion",
                   "karpenter.alibabacloud.com/v1alpha1", "kind", "ECSNodeClass", "metadata", "name", name,
                   "spec", "vSwitchSelectorTerms", "tags", "karpenter.sh/discovery", vswitch_discovery,
                   "securityGroupSelectorTerms", "tags", "karpenter.sh/discovery", "luaprov-sim",
                   "imageSelectorTerms", "alias", "AlibabaCloudLinux3");
}

/* The status the mapping's resolve_nodeclass gives nodeclass against the simulated account (its lists
 * and conditions): a new object, empty when the call failed. */
static inline json_t *mapping_resolved_status(lp_script_host *scripts, lp_sim *sim, json_t *nodeclass) {
  json_t *values = mapping_call(scripts, "resolve_nodeclass", json_pack("[oO]", mapping_ctx(sim), nodeclass));
  json_t *first = json_array_get(values, 0);
  json_t *status = json_is_object(first) ? json_deep_copy(first) : json_object();
  json_decref(values);
  return status;
}

/* The hash annotations (LP_ANNOTATION_HASH, LP_ANNOTATION_HASH_VERSION) the mapping's nodeclass_hash
 * gives nodeclass: a new object, without the keys the call did not return. */
static inline json_t *mapping_hash_annotations(lp_script_host *scripts, json_t *nodeclass) {
  json_t *values = mapping_call(scripts, "nodeclass_hash", json_pack("[O]", nodeclass));
  json_t *annotations = json_pack("{s:O*, s:O*}", LP_ANNOTATION_HASH, json_array_get(values, 0),
                                  LP_ANNOTATION_HASH_VERSION, json_array_get(values, 1));
  json_decref(values);
  return annotations;
}

/* The ECSNodeClass "default" (mapping_nodeclass("default", "luaprov-sim")) as the nodeclass controller
 * would leave it: the mapping's status with the conditions replaced by Ready=True alone, and the hash
 * annotations. Caller decrefs. */
static inline json_t *mapping_resolved_nodeclass(lp_script_host *scripts, lp_sim *sim) {
  json_t *nc = mapping_nodeclass("default", "luaprov-sim");
  json_t *status = mapping_resolved_status(scripts, sim, nc);
  json_object_set_new(status, "conditions", json_pack("[{s:s, s:s}]", "type", "Ready", "status", "True"));
  json_object_set_new(nc, "status", status);
  json_object_set_new(json_object_get(nc, "metadata"), "annotations", mapping_hash_annotations(scripts, nc));
  return nc;
}

/* How many calls of action (e.g. "RunInstances") the Alibaba simulator's state (GET /_sim/state)
 * counts. */
static inline long long mapping_sim_calls(const json_t *state, const char *action) {
  return json_integer_value(json_object_get(json_object_get(state, "calls"), action));
}

/* The simulator's record of the instance behind provider_id ("cn-hangzhou.i-...") in its state
 * (borrowed from state), or NULL when the account has no such instance. */
static inline json_t *mapping_sim_instance(const json_t *state, const char *provider_id) {
  const char *id = provider_id ? strchr(provider_id, '.') : NULL;
  size_t i;
  json_t *inst, *found = NULL;
  json_array_foreach(json_object_get(state, "instances"), i, inst) {
    const char *iid = json_string_value(json_object_get(inst, "id"));
    if (id && iid && strcmp(iid, id + 1) == 0) found = inst;
  }
  return found;
}

#endif
