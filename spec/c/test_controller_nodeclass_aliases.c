/* A node class served in two API groups (the descriptor's `aliases`, engine/contract/nodeclass_desc.h),
 * through the real manager, the Alibaba mapping with an alias group (spec/fixtures/nodeclass_aliases)
 * and the simulators over HTTP: GetSupportedNodeClasses lists both groups; a class in the alias group
 * is resolved, finalized and hashed on its own object; a NodePool referencing the alias group
 * provisions and launches from that class; two classes of one name in the two groups stay two classes
 * (each NodePool gets its own class's readiness and hash, a deleted class waits only for the
 * NodeClaims of its own group); a missing class is named with its group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "provisioner_test_support.h"

#define OLD_GROUP "karpenter.k8s.alibabacloud" /* the descriptor's group */
#define NEW_GROUP "karpenter.alibabacloud.com" /* its alias */
#define OLD       "/apis/" OLD_GROUP "/v1alpha1/ecsnodeclasses"
#define NEW       "/apis/" NEW_GROUP "/v1alpha1/ecsnodeclasses"
#define FINALIZER "karpenter.k8s.alibabacloud/termination"

static ctrl_fixture f;

static lp_ctrl_env *env(void) {
  return lp_controllers_env(f.manager);
}

/* The cached class at key ("name" in the descriptor's group, NEW_GROUP "/name" in the alias group). */
static json_t *cached(const char *key) {
  return lp_env_get(env(), LP_KIND_NODECLASS, key);
}

/* {key, status}: the cached class at key has Ready at status. */
static int class_ready_is(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  const char *const *want = ud;
  return lp_condition_is(cached(want[0]), "Ready", want[1]);
}

/* The class name in group, selecting the vSwitches tagged vswitch_tag, with userData (NULL: none). */
static void create_class(const char *group, const char *name, const char *vswitch_tag,
                         const char *user_data) {
  json_t *nc = mapping_nodeclass(name, vswitch_tag);
  char api_version[128];
  snprintf(api_version, sizeof api_version, "%s/v1alpha1", group);
  json_object_set_new(nc, "apiVersion", json_string(api_version));
  if (user_data) json_object_set_new(json_object_get(nc, "spec"), "userData", json_string(user_data));
  char path[256];
  snprintf(path, sizeof path, "/apis/%s/v1alpha1/ecsnodeclasses", group);
  CHECK_INT(pt_post(&f, path, nc), 201);
}

/* The NodePool name on the class class_name of group. */
static void create_pool(const char *name, const char *group, const char *class_name) {
  json_t *pool =
      json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:[s]}]}}}}", "apiVersion",
                "karpenter.sh/v1", "kind", "NodePool", "metadata", "name", name, "spec", "template", "spec",
                "nodeClassRef", "group", group, "kind", "ECSNodeClass", "name", class_name, "requirements",
                "key", "karpenter.sh/capacity-type", "operator", "In", "values", "on-demand");
  CHECK_INT(pt_post(&f, PT_NODEPOOLS, pool), 201);
}

static const char *hash_of(const json_t *obj) {
  return lp_obj_annotation(obj, LP_ANNOTATION_HASH);
}

/* {pool, status}: the cached NodePool's NodeClassReady is at status. */
static int pool_class_ready_is(ctrl_fixture *fx, const void *ud) {
  (void)fx;
  const char *const *want = ud;
  return lp_condition_is(lp_env_get(env(), LP_KIND_NODEPOOL, want[0]), "NodeClassReady", want[1]);
}

/* ---- the cases ----------------------------------------------------------------------------- */

static void test_supported_and_watched(void) {
  json_t *supported = lp_cloudprovider_supported_nodeclasses(f.cloud);
  char *text = json_dumps(supported, JSON_COMPACT | JSON_SORT_KEYS);
  CHECK_STR(text, "[{\"group\":\"" OLD_GROUP "\",\"kind\":\"ECSNodeClass\",\"version\":\"v1alpha1\"},"
                  "{\"group\":\"" NEW_GROUP "\",\"kind\":\"ECSNodeClass\",\"version\":\"v1alpha1\"}]");
  free(text);
  json_t *ref = json_pack("{s:s, s:s, s:s}", "group", NEW_GROUP, "kind", "ECSNodeClass", "name", "x");
  CHECK(lp_nodeclass_ref_supported(supported, ref));
  json_decref(ref);
  json_decref(supported);
  CHECK(lp_controllers_synced(f.manager));

  /* a class in the alias group only: resolved, finalized and hashed on its own object */
  create_class(NEW_GROUP, "default", "luaprov-sim", NULL);
  CHECK(ctrl_wait_for(&f, 10, class_ready_is, (const char *const[]){NEW_GROUP "/default", "True"}));
  CHECK(cached("default") == NULL); /* nothing of that name in the descriptor's group */
  json_t *obj = ctrl_get(&f, NEW "/default");
  CHECK(lp_obj_has_finalizer(obj, FINALIZER));
  CHECK_INT(strlen(hash_of(obj) ?: ""), 16);
  CHECK_INT(json_array_size(json_object_get(json_object_get(obj, "status"), "vSwitches")), 4);
  CHECK(lp_condition_is(obj, "Ready", "True"));
  json_decref(obj);
  CHECK_INT(lp_env_count(env(), LP_KIND_NODECLASS), 1);
}

/* The same names in both groups: "default" Ready in both with other user data (so other hashes),
 * "split" Ready in the descriptor's group and matching no vSwitch in the alias group. */
static void test_same_name_two_groups(void) {
  create_class(OLD_GROUP, "default", "luaprov-sim", "#!/bin/sh\necho old\n");
  create_class(OLD_GROUP, "split", "luaprov-sim", NULL);
  create_class(NEW_GROUP, "split", "nothing-has-this", NULL);
  CHECK(ctrl_wait_for(&f, 10, class_ready_is, (const char *const[]){"default", "True"}));
  CHECK(ctrl_wait_for(&f, 10, class_ready_is, (const char *const[]){"split", "True"}));
  CHECK(ctrl_wait_for(&f, 10, class_ready_is, (const char *const[]){NEW_GROUP "/split", "False"}));
  CHECK_INT(lp_env_count(env(), LP_KIND_NODECLASS), 4);
  json_t *old_default = ctrl_get(&f, OLD "/default"), *new_default = ctrl_get(&f, NEW "/default");
  CHECK(hash_of(old_default) && hash_of(new_default) &&
        strcmp(hash_of(old_default), hash_of(new_default)) != 0);
  CHECK_STR(hash_of(cached("default")), hash_of(old_default));
  CHECK_STR(hash_of(cached(NEW_GROUP "/default")), hash_of(new_default));
  json_decref(old_default), json_decref(new_default);
  json_t *new_split = ctrl_get(&f, NEW "/split"), *old_split = ctrl_get(&f, OLD "/split");
  CHECK(lp_condition_is(new_split, "Ready", "False"));
  CHECK(lp_condition_is(old_split, "Ready", "True"));
  CHECK(lp_obj_has_finalizer(new_split, FINALIZER) && lp_obj_has_finalizer(old_split, FINALIZER));
  json_decref(new_split), json_decref(old_split);

  /* each NodePool gets the readiness of the class its ref's group names */
  create_pool("pool-old", OLD_GROUP, "default");
  create_pool("pool-new", NEW_GROUP, "default");
  create_pool("split-old", OLD_GROUP, "split");
  create_pool("split-new", NEW_GROUP, "split");
  CHECK(ctrl_wait_for(&f, 10, pool_class_ready_is, (const char *const[]){"split-new", "False"}));
  CHECK(ctrl_wait_for(&f, 10, pool_class_ready_is, (const char *const[]){"split-old", "True"}));
  CHECK(ctrl_wait_for(&f, 10, pool_class_ready_is, (const char *const[]){"pool-new", "True"}));
  CHECK(ctrl_wait_for(&f, 10, pool_class_ready_is, (const char *const[]){"pool-old", "True"}));
}

/* The pod's NodeClaim (caller decrefs) once Launched, or NULL. */
static json_t *launched_claim_of(const char *pod) {
  json_t *claim = pt_claim_of(&f, pod);
  const char *name = lp_obj_name(claim);
  CHECK(name != NULL);
  if (!name) return claim;
  char path[256];
  snprintf(path, sizeof path, PT_CLAIMS "/%s", name);
  for (int i = 0; i < 250 && !lp_condition_is(claim, "Launched", "True"); i++) {
    ctrl_run_for(&f, 0.04);
    json_decref(claim);
    claim = ctrl_get(&f, path);
  }
  CHECK(lp_condition_is(claim, "Launched", "True"));
  return claim;
}

static void test_provision_from_alias(void) {
  CHECK_INT(pt_pod(&f, "web-new", "500m", "512Mi",
                   json_pack("{s:{s:s}}", "nodeSelector", "karpenter.sh/nodepool", "pool-new")),
            201);
  CHECK_INT(pt_pod(&f, "web-old", "500m", "512Mi",
                   json_pack("{s:{s:s}}", "nodeSelector", "karpenter.sh/nodepool", "pool-old")),
            201);
  CHECK_INT(pt_pod(&f, "web-split", "500m", "512Mi",
                   json_pack("{s:{s:s}}", "nodeSelector", "karpenter.sh/nodepool", "split-new")),
            201);
  json_t *claim_new = launched_claim_of("web-new"), *claim_old = launched_claim_of("web-old");
  CHECK_STR(lp_obj_str(claim_new, "spec.nodeClassRef.group"), NEW_GROUP);
  CHECK_STR(lp_obj_str(claim_old, "spec.nodeClassRef.group"), OLD_GROUP);
  /* launched from the class its group names: the hash copied is that class's */
  CHECK_STR(hash_of(claim_new), hash_of(cached(NEW_GROUP "/default")));
  CHECK_STR(hash_of(claim_old), hash_of(cached("default")));
  json_decref(claim_new), json_decref(claim_old);
  /* the alias group's "split" is not Ready, whatever the other group's "split" is */
  CHECK(!pt_is_nominated(&f, "web-split"));
  CHECK_INT(pt_claims(&f, "split-new"), 0);
}

static int class_not_ready_event(ctrl_fixture *fx, const void *claim) {
  return ctrl_has_event(fx, claim, "NodeClassNotReady");
}

static void test_missing_class_named_with_group(void) {
  long status = ctrl_kube_pack(&f, "POST", PT_CLAIMS, "{s:s, s:s, s:{s:s}, s:{s:{s:s, s:s, s:s}, s:[]}}",
                               "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name",
                               "nc-missing", "spec", "nodeClassRef", "group", NEW_GROUP, "kind",
                               "ECSNodeClass", "name", "missing", "requirements");
  CHECK_INT(status, 201);
  CHECK(ctrl_wait_for(&f, 10, class_not_ready_event, "nc-missing"));
  char *msg = pt_event(&f, "nc-missing", "NodeClassNotReady");
  CHECK_STR(msg, "Failed to launch NodeClaim: ECSNodeClass missing (" NEW_GROUP ") not found");
  free(msg);
}

static int claim_indexed(ctrl_fixture *fx, const void *name) {
  (void)fx;
  return lp_env_index_first(env(), LP_INDEX_NODECLAIM_BY_NODECLASS, name, NULL) != NULL;
}

static int path_gone(ctrl_fixture *fx, const void *path) {
  return ctrl_gone(fx, path);
}

static int waiting_on(ctrl_fixture *fx, const void *name) {
  return ctrl_has_event(fx, name, "WaitingOnNodeClaimTermination");
}

/* A deleted class waits for the NodeClaims of its own group only. */
static void test_finalizer_per_group(void) {
  create_class(OLD_GROUP, "gone", "luaprov-sim", NULL);
  create_class(NEW_GROUP, "gone", "luaprov-sim", NULL);
  CHECK(ctrl_wait_for(&f, 10, class_ready_is, (const char *const[]){"gone", "True"}));
  CHECK(ctrl_wait_for(&f, 10, class_ready_is, (const char *const[]){NEW_GROUP "/gone", "True"}));
  long status = ctrl_kube_pack(&f, "POST", PT_CLAIMS, "{s:s, s:s, s:{s:s}, s:{s:{s:s, s:s, s:s}, s:[]}}",
                               "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name",
                               "nc-gone", "spec", "nodeClassRef", "group", OLD_GROUP, "kind", "ECSNodeClass",
                               "name", "gone", "requirements");
  CHECK_INT(status, 201);
  CHECK(ctrl_wait_for(&f, 10, claim_indexed, "gone"));

  /* the alias group's "gone" has no NodeClaim: it goes at once */
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", NEW "/gone", NULL), 200);
  CHECK(ctrl_wait_for(&f, 10, path_gone, NEW "/gone"));
  CHECK(!ctrl_has_event(&f, "gone", "WaitingOnNodeClaimTermination"));
  /* the descriptor's group's "gone" waits for nc-gone */
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", OLD "/gone", NULL), 200);
  CHECK(ctrl_wait_for(&f, 10, waiting_on, "gone"));
  ctrl_run_for(&f, 0.5);
  json_t *old_gone = ctrl_get(&f, OLD "/gone");
  CHECK(old_gone != NULL && lp_obj_deleting(old_gone) && lp_obj_has_finalizer(old_gone, FINALIZER));
  json_decref(old_gone);
  /* and the alias group's "default", referenced by pool-new's NodeClaim, waits too when deleted */
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", NEW "/default", NULL), 200);
  ctrl_run_for(&f, 1.0);
  json_t *new_default = ctrl_get(&f, NEW "/default");
  CHECK(new_default != NULL && lp_obj_has_finalizer(new_default, FINALIZER));
  json_decref(new_default);
}

/* /readyz's condition: every informer listed, the alias group's included. */
static int synced(ctrl_fixture *fx, const void *ud) {
  (void)ud;
  return lp_controllers_synced(fx->manager);
}

static const lp_controller_def *const controllers[] = {
    &lp_nodeclass_controller, &lp_nodepool_status_controller, &lp_provisioner_controller,
    &lp_nodeclaim_lifecycle_controller, NULL};

int main(void) {
  ctrl_fixture_start_tree(&f, controllers, NULL, LUAPROV_SOURCE_DIR "/spec/fixtures/nodeclass_aliases");
  CHECK(ctrl_wait_for(&f, 10, synced, NULL));
  RUN(test_supported_and_watched);
  RUN(test_same_name_two_groups);
  RUN(test_provision_from_alias);
  RUN(test_missing_class_named_with_group);
  RUN(test_finalizer_per_group);
  ctrl_fixture_stop(&f);
  return check_summary();
}
