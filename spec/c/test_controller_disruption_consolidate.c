/* Consolidation of underutilized nodes in the disruption controller (engine/controller/disruption*.c,
 * with the simulation of disruption_simulate.c): the ordering, search and consolidation policies on
 * their own (pure), then through the real manager and both simulators: a Deployment-like set of pods
 * spread over 4 nodes, one each after a scale-down, fits on fewer; multi-node consolidation deletes as
 * many as the Underutilized budget allows in one decision, once it held 15 s on the controllers' clock
 * (the test moves it), and every evicted pod, created again as a ReplicaSet would, finds a place on the
 * nodes left; the expireAfter fraction in the disruption cost; a single big node replaced by a cheaper
 * one; a PodDisruptionBudget holding a node, two that both select its pods holding it too; three nodes
 * replaced by one; a node whose pod would break its zone spread anywhere else stays. The test writes the
 * Consolidatable condition itself.
 *
 * Simulated time runs 20 times faster than the wall clock, so instances boot in under a second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "disruption_test_support.h"

#define PODS "/api/v1/namespaces/default/pods"

static ctrl_fixture f;
static double mono = 1000;

/* ---- the search alone -------------------------------------------------------------------------- */

/* try_fn accepting any k up to *ud, counting its calls. */
typedef struct fake {
  size_t up_to, calls;
} fake;

static int accepts(void *ud, dz_candidate *const *c, size_t k) {
  (void)c;
  fake *fk = ud;
  fk->calls++;
  return k <= fk->up_to;
}

static int accepts_third(void *ud, dz_candidate *const *c, size_t k) {
  (void)ud;
  return k == 1 && strcmp(c[0]->name, "c") == 0;
}

static void test_search(void) {
  dz_candidate v[8];
  dz_candidate *by[8];
  const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
  for (int i = 0; i < 8; i++) {
    v[i] = (dz_candidate){.name = names[i], .cost = 8 - i};
    by[i] = &v[i];
  }
  dz_sort_by_cost(by, 8);
  CHECK_STR(by[0]->name, "h"); /* cheapest first */
  fake fk = {5, 0};
  CHECK_INT(dz_multi_prefix(by, 8, accepts, &fk), 5);
  CHECK(fk.calls <= 4); /* a binary search, not a walk */
  fk = (fake){1, 0};
  CHECK_INT(dz_multi_prefix(by, 8, accepts, &fk), 0); /* multi-node needs two */
  fk = (fake){8, 0};
  CHECK_INT(dz_multi_prefix(by, 8, accepts, &fk), 8);
  CHECK_INT(dz_multi_prefix(by, 1, accepts, &fk), 0);
  CHECK_INT(dz_single_first(by, 8, accepts_third, NULL), 5); /* "c" is sixth cheapest */
}

/* A NodePool's spec.disruption (JSON text) as a dz_policy. */
static dz_policy policy_of(const char *disruption) {
  json_t *pool = json_pack("{s:{s:o}}", "spec", "disruption", json_loads(disruption, 0, NULL));
  dz_policy p = dz_policy_of(pool);
  json_decref(pool);
  return p;
}

/* WhenEmpty consolidates empty nodes only: with consolidation of underutilized nodes picking, a WhenEmpty
 * pool's node with pods is never taken, a WhenEmptyOrUnderutilized pool's is; emptiness takes both pools'
 * empty nodes. */
static void test_policies(void) {
  CHECK_INT(policy_of("{}"), DZ_CONSOLIDATE_UNDERUTILIZED);
  CHECK_INT(policy_of("{\"consolidationPolicy\":\"WhenEmptyOrUnderutilized\"}"),
            DZ_CONSOLIDATE_UNDERUTILIZED);
  CHECK_INT(policy_of("{\"consolidationPolicy\":\"WhenEmpty\"}"), DZ_CONSOLIDATE_EMPTY);
  CHECK_INT(policy_of("{\"consolidationPolicy\":\"WhenEmpty\",\"consolidateAfter\":\"Never\"}"),
            DZ_CONSOLIDATE_NEVER);
  CHECK_INT(policy_of("{\"consolidationPolicy\":\"Sometimes\"}"), DZ_CONSOLIDATE_NEVER);

  dz_candidate v[4] = {
      {.name = "empty-pool-busy",
       .pool = "e",
       .pods = 2,
       .consolidatable = 1,
       .policy = DZ_CONSOLIDATE_EMPTY},
      {.name = "under-pool-busy",
       .pool = "u",
       .pods = 2,
       .consolidatable = 1,
       .policy = DZ_CONSOLIDATE_UNDERUTILIZED},
      {.name = "empty-pool-idle",
       .pool = "e",
       .pods = 0,
       .consolidatable = 1,
       .policy = DZ_CONSOLIDATE_EMPTY},
      {.name = "under-pool-idle",
       .pool = "u",
       .pods = 0,
       .consolidatable = 1,
       .policy = DZ_CONSOLIDATE_UNDERUTILIZED},
  };
  dz_candidate *by[4], *out[4];
  for (int i = 0; i < 4; i++) by[i] = &v[i];
  json_t *left = json_pack("{s:i, s:i}", "e", 10, "u", 10);
  CHECK_INT(dz_pick_consolidatable(by, 4, left, 4, out), 2);
  CHECK_STR(out[0]->name, "under-pool-busy");
  CHECK_STR(out[1]->name, "under-pool-idle");
  CHECK(!dz_is_underutilized_candidate(&v[0]));
  CHECK_INT(dz_pick_empty(by, 4, left, out, NULL, NULL), 2);
  CHECK_STR(out[0]->name, "empty-pool-idle");
  CHECK_STR(out[1]->name, "under-pool-idle");
  json_decref(left);
}

/* ---- the cluster -------------------------------------------------------------------------------- */

/* A pod labelled app, asking for cpu, bound to node (NULL: pending, the simulated binder places it). */
static void post_app_pod(const char *name, const char *node, const char *cpu, const char *app) {
  json_t *pod = json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:[{s:s, s:s, s:{s:{s:s}}}]}}", "apiVersion", "v1",
                          "kind", "Pod", "metadata", "name", name, "labels", "app", app, "spec", "containers",
                          "name", "app", "image", "nginx", "resources", "requests", "cpu", cpu);
  /* the workload of NodePool DT_POOL: new capacity for it comes from there, never from "default" */
  json_object_set_new(json_object_get(pod, "spec"), "nodeSelector",
                      json_pack("{s:s}", DZ_LABEL_POOL, DT_POOL));
  if (node) json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node));
  CHECK_INT(ctrl_kube_pack(&f, "POST", PODS, "o", pod), 201);
}

static void post_pod_of(const char *name, const char *node, const char *cpu) {
  post_app_pod(name, node, cpu, "web");
}

static void post_pod(const char *name, const char *node) {
  post_pod_of(name, node, "100m");
}

#define NPODS 4
static const char *const pod_names[NPODS] = {"w-1", "w-2", "w-3", "w-4"};
static const char *const claim_names[] = {"web-a", "web-b", "web-c", "web-d", NULL};

typedef struct watch {
  int most; /* most NodeClaims being deleted at once */
} watch;

/* The ReplicaSet's part: an evicted pod is created again (pending); non-zero once every pod runs and the
 * pool holds want NodeClaims, none deleting. */
static int settled(ctrl_fixture *fx, const void *ud) {
  watch *w = (watch *)ud;
  size_t running = 0;
  for (int i = 0; i < NPODS; i++) {
    char path[128];
    snprintf(path, sizeof path, PODS "/%s", pod_names[i]);
    json_t *pod = ctrl_get(fx, path);
    if (!pod) post_pod(pod_names[i], NULL);
    const char *phase = lp_obj_str(pod, "status.phase");
    running += phase && strcmp(phase, "Running") == 0 && !lp_obj_deleting(pod);
    json_decref(pod);
  }
  json_t *items = dt_pool_claims(fx);
  int deleting = 0;
  size_t i;
  json_t *c;
  json_array_foreach(items, i, c) deleting += lp_obj_deleting(c);
  if (deleting > w->most) w->most = deleting;
  int ok = running == NPODS && json_array_size(items) == 2 && deleting == 0;
  json_decref(items);
  return ok;
}

static int eligible_is(ctrl_fixture *fx, const void *ud) {
  return ctrl_metric(fx, "luaprov_voluntary_disruption_eligible_nodes", LP_LABELS("underutilized")) ==
         *(const double *)ud;
}

static int budget_is(ctrl_fixture *fx, const void *ud) {
  return ctrl_metric(fx, "luaprov_disruption_budgets_allowed", LP_LABELS(DT_POOL)) == *(const double *)ud;
}

/* Four nodes, one pod each: two go in one multi-node decision (the Underutilized budget is 2), the pods
 * move to the two left. */
static void test_multi_node(void) {
  for (int i = 0; claim_names[i]; i++) dt_post_claim(&f, claim_names[i]);
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){4}));
  for (int i = 0; i < NPODS; i++) {
    json_t *c = dt_claim(&f, claim_names[i]);
    post_pod(pod_names[i], lp_obj_str(c, "status.nodeName"));
    json_decref(c);
  }
  for (int i = 0; claim_names[i]; i++) dt_mark_consolidatable(&f, claim_names[i]);
  CHECK(ctrl_wait_for(&f, 15, eligible_is, &(double){4}));
  dt_set_budgets(&f, "[{\"nodes\":\"2\",\"reasons\":[\"Underutilized\"]}, {\"nodes\":\"4\"}]");
  CHECK(ctrl_wait_for(&f, 5, budget_is, &(double){4})); /* the pass that decides has run */
  ctrl_run_for(&f, 1);
  json_t *items = dt_pool_claims(&f);
  size_t i;
  json_t *c;
  int deleting = 0;
  json_array_foreach(items, i, c) deleting += lp_obj_deleting(c);
  CHECK_INT(deleting, 0); /* not before the validation */
  json_decref(items);
  mono += 16;
  watch w = {0};
  CHECK(ctrl_wait_for(&f, 40, settled, &w));
  CHECK(w.most <= 2);
  CHECK_INT(ctrl_metric(&f, "luaprov_voluntary_disruption_decisions_total",
                        LP_LABELS("delete", "underutilized", "multi")),
            1);
  CHECK_INT(ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("underutilized", DT_POOL)), 2);
}

/* The claim (a copy of the NodeClaim named name) with spec.expireAfter and a creationTimestamp, or
 * neither when expire is NULL, filled in as a candidate at the wall time now; its cost. */
static double cost_with_lifetime(const char *name, const char *expire, const char *created, const char *now) {
  json_t *claim = dt_claim(&f, name);
  CHECK(claim != NULL);
  json_t *pool = ctrl_get(&f, DT_POOLS "/" DT_POOL);
  if (expire) {
    json_object_set_new(json_object_get(claim, "spec"), "expireAfter", json_string(expire));
    json_object_set_new(json_object_get(claim, "metadata"), "creationTimestamp", json_string(created));
  }
  lp_ctrl_env *env = lp_controllers_env(f.manager);
  dz_pdbs *pdbs = dz_pdbs_new(env);
  dz_candidate cd;
  dz_candidate_fill(env, pdbs, &cd, claim, pool, lp_rfc3339_parse(now));
  double cost = cd.cost;
  CHECK(cd.pods > 0);
  dz_candidate_clear(&cd);
  dz_pdbs_free(pdbs);
  json_decref(pool);
  json_decref(claim);
  return cost;
}

/* The disruption cost of a node left above (1 per 100m pod) times the fraction of
 * expireAfter still ahead: a node closer to its expiry is cheaper to disrupt, and sorts first. */
static void test_lifetime_cost(void) {
  json_t *items = dt_pool_claims(&f);
  CHECK_INT(json_array_size(items), 2);
  char *name = strdup(lp_obj_name(json_array_get(items, 0)) ?: "");
  json_decref(items);
  const char *now = "2026-06-01T10:00:00Z";
  double none = cost_with_lifetime(name, NULL, NULL, now);
  double young = cost_with_lifetime(name, "10h", "2026-06-01T09:00:00Z", now);
  double old = cost_with_lifetime(name, "10h", "2026-06-01T01:00:00Z", now);
  double expired = cost_with_lifetime(name, "10h", "2026-05-31T10:00:00Z", now);
  CHECK(none >= 1); /* one per pod */
  CHECK(young > 0.899 * none && young < 0.901 * none);
  CHECK(old > 0.099 * none && old < 0.101 * none);
  CHECK(expired == 0);
  dz_candidate v[3] = {
      {.name = "none", .cost = none}, {.name = "young", .cost = young}, {.name = "old", .cost = old}};
  dz_candidate *by[3] = {&v[0], &v[1], &v[2]};
  dz_sort_by_cost(by, 3);
  CHECK_STR(by[0]->name, "old");
  CHECK_STR(by[1]->name, "young");
  free(name);
}

/* More than a node the provisioner sizes for one CPU holds: only the big node, or a replacement, takes it. */
#define BIG_CPU "6"

/* A ctrl_wait_for condition that also lets the controllers' clock run fast (half a second a check), so
 * each decision's 15 s validation passes within a few real seconds: one NodeClaim is left, not of
 * instance type *ud, every pod runs, nothing is deleting. */
static int replaced_by_cheaper(ctrl_fixture *fx, const void *ud) {
  mono += 0.5;
  static const char *const pods[] = {"w-1", "w-2", "w-3", "w-4", "w-big"};
  size_t running = 0;
  for (size_t i = 0; i < sizeof pods / sizeof pods[0]; i++) {
    char path[128];
    snprintf(path, sizeof path, PODS "/%s", pods[i]);
    json_t *pod = ctrl_get(fx, path);
    if (!pod) post_pod_of(pods[i], NULL, strcmp(pods[i], "w-big") == 0 ? BIG_CPU : "100m");
    const char *phase = lp_obj_str(pod, "status.phase");
    running += phase && strcmp(phase, "Running") == 0 && !lp_obj_deleting(pod);
    json_decref(pod);
  }
  json_t *items = dt_pool_claims(fx);
  json_t *only = json_array_size(items) == 1 ? json_array_get(items, 0) : NULL;
  const json_t *labels = lp_obj_get(only, "metadata.labels");
  const char *type = json_string_value(json_object_get(labels, "node.kubernetes.io/instance-type"));
  int ok = only && !lp_obj_deleting(only) && lp_condition_is(only, "Initialized", "True") && type &&
           strcmp(type, (const char *)ud) != 0 && running == sizeof pods / sizeof pods[0];
  json_decref(items);
  return ok;
}

/* A 16-vCPU node running one 6-CPU pod, next to the two small nodes left above: consolidation ends with
 * one node of a cheaper type holding every pod. The two small ones can go by deletion (their pods fit
 * on the big one, the big pod on neither of them); the big one alone is replaced (single-node consolidation:
 * the replacement initialized before the candidate is deleted), the pods moving to the replacement. */
static void test_single_replace(void) {
  const char *big_type = "ecs.g7.4xlarge";
  dt_post_claim_with(&f, "web-big",
                     json_pack("{s:s, s:s, s:[s]}", "key", "node.kubernetes.io/instance-type", "operator",
                               "In", "values", big_type));
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){3}));
  json_t *c = dt_claim(&f, "web-big");
  post_pod_of("w-big", lp_obj_str(c, "status.nodeName"), BIG_CPU);
  json_decref(c);
  dt_mark_consolidatable(&f, "web-big");
  dt_set_budgets(&f, "[{\"nodes\":\"100%\"}]");
  CHECK(ctrl_wait_for(&f, 60, replaced_by_cheaper, big_type));
  CHECK_INT(ctrl_metric(&f, "luaprov_voluntary_disruption_decisions_total",
                        LP_LABELS("replace", "underutilized", "single")),
            1);
  CHECK(ctrl_has_event(&f, "web-big", "DisruptionLaunching"));
  json_t *items = dt_pool_claims(&f);
  json_t *replacement = json_array_get(items, 0);
  CHECK_STR(dt_annotation(replacement, DZ_ANNOTATION_REPLACES), "web-big");
  CHECK_STR(dt_annotation(replacement, DZ_ANNOTATION_REASON), "Underutilized");
  json_decref(items);
  CHECK(ctrl_metric(&f, "luaprov_nodeclaims_disrupted_total", LP_LABELS("underutilized", DT_POOL)) >= 3);
}

static int blocked_by_pdb(ctrl_fixture *fx, const void *name) {
  mono += 0.5;
  return ctrl_has_event_message(fx, name, "DisruptionBlocked", "pdb default/web-pdb prevents pod evictions");
}

/* A PodDisruptionBudget that allows no eviction of the pods on the last node keeps it, however
 * underutilized: a drain would stall on them. */
static void test_pdb_blocks(void) {
  json_t *items = dt_pool_claims(&f);
  CHECK_INT(json_array_size(items), 1);
  char *name = strdup(lp_obj_name(json_array_get(items, 0)) ?: "");
  json_decref(items);
  CHECK_INT(ctrl_kube_pack(&f, "POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                           "{s:s, s:s, s:{s:s}, s:{s:i, s:{s:{s:s}}}}", "apiVersion", "policy/v1", "kind",
                           "PodDisruptionBudget", "metadata", "name", "web-pdb", "spec", "maxUnavailable", 0,
                           "selector", "matchLabels", "app", "web"),
            201);
  dt_mark_consolidatable(&f, name);
  CHECK(ctrl_wait_for(&f, 20, blocked_by_pdb, name));
  json_t *c = dt_claim(&f, name);
  CHECK(c && !lp_obj_deleting(c));
  json_decref(c);
  free(name);
}

#define PDBS "/apis/policy/v1/namespaces/default/poddisruptionbudgets"

/* A PodDisruptionBudget named name selecting app=web that allows one eviction. */
static void post_pdb_allowing_one(const char *name) {
  CHECK_INT(ctrl_kube_pack(&f, "POST", PDBS, "{s:s, s:s, s:{s:s}, s:{s:i, s:{s:{s:s}}}}", "apiVersion",
                           "policy/v1", "kind", "PodDisruptionBudget", "metadata", "name", name, "spec",
                           "maxUnavailable", 1, "selector", "matchLabels", "app", "web"),
            201);
}

/* A ctrl_wait_for condition: the controllers' cache shows the PodDisruptionBudget default/<name> allowing
 * a disruption. */
static int pdb_allows(ctrl_fixture *fx, const void *name) {
  char key[128];
  snprintf(key, sizeof key, "default/%s", (const char *)name);
  const json_t *pdb = lp_env_get(lp_controllers_env(fx->manager), LP_KIND_PDB, key);
  return json_integer_value(lp_obj_get(pdb, "status.disruptionsAllowed")) >= 1;
}

static int blocked_by_two_pdbs(ctrl_fixture *fx, const void *name) {
  mono += 0.5;
  return ctrl_has_event_message(fx, name, "DisruptionBlocked",
                                "is selected by PodDisruptionBudgets default/");
}

/* Two PodDisruptionBudgets that each allow an eviction but both select the pods on the last node keep
 * it as well: the Eviction API refuses a pod more than one budget selects. */
static void test_two_pdbs(void) {
  json_t *items = dt_pool_claims(&f);
  CHECK_INT(json_array_size(items), 1);
  char *name = strdup(lp_obj_name(json_array_get(items, 0)) ?: "");
  json_decref(items);
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", PDBS "/web-pdb", NULL), 200);
  post_pdb_allowing_one("web-pdb-a");
  post_pdb_allowing_one("web-pdb-b");
  CHECK(ctrl_wait_for(&f, 10, pdb_allows, "web-pdb-a"));
  CHECK(ctrl_wait_for(&f, 10, pdb_allows, "web-pdb-b"));
  dt_set_budgets(&f, "[{\"nodes\":\"100%\"}]"); /* a pass at once */
  CHECK(ctrl_wait_for(&f, 20, blocked_by_two_pdbs, name));
  json_t *c = dt_claim(&f, name);
  CHECK(c && !lp_obj_deleting(c) && !dt_annotation(c, DZ_ANNOTATION_REPLACED_BY));
  json_decref(c);
  free(name);
}

/* ---- several nodes, one replacement ---------------------------------------------------------- */

#define MULTI_TYPE "ecs.g7.4xlarge" /* 16 vCPU */
#define MULTI_CPU  "4"              /* a quarter of it */
static const char *const multi_claims[] = {"web-m1", "web-m2", "web-m3", NULL};
static const char *const multi_pods[] = {"m-1", "m-2", "m-3", NULL};

/* What the multi-node replacement is watched for. */
typedef struct multi_watch {
  int most;      /* most of multi_claims being disrupted (marked or deleting) at once */
  int untainted; /* one seen marked while its Node lacked the karpenter.sh/disrupted taint */
} multi_watch;

/* Moves the controllers' clock half a second a check (the validation passes), recreates evicted pods;
 * done once the three are gone and every pod runs. */
static int multi_replaced(ctrl_fixture *fx, const void *ud) {
  multi_watch *w = (multi_watch *)ud;
  mono += 0.5;
  size_t running = 0, gone = 0;
  int disrupting = 0;
  for (int i = 0; multi_pods[i]; i++) {
    char path[128];
    snprintf(path, sizeof path, PODS "/%s", multi_pods[i]);
    json_t *pod = ctrl_get(fx, path);
    if (!pod) post_app_pod(multi_pods[i], NULL, MULTI_CPU, "multi");
    const char *phase = lp_obj_str(pod, "status.phase");
    running += phase && strcmp(phase, "Running") == 0 && !lp_obj_deleting(pod);
    json_decref(pod);
  }
  for (int i = 0; multi_claims[i]; i++) {
    json_t *c = dt_claim(fx, multi_claims[i]);
    const char *by = dt_annotation(c, DZ_ANNOTATION_REPLACED_BY);
    gone += !c;
    disrupting += c && (by || lp_obj_deleting(c));
    if (c && by && !lp_obj_deleting(c))
      w->untainted += !dt_node_tainted(&f, lp_obj_str(c, "status.nodeName"));
    json_decref(c);
  }
  if (disrupting > w->most) w->most = disrupting;
  return gone == 3 && running == 3;
}

/* Three 16-vCPU nodes each running a 4-CPU pod (and the node left above, with no room for one), the
 * Underutilized budget 3: deleting two (their pods fit on the third) is beaten by replacing all three
 * by one node (their pods fit it, it costs less than the three, and it is not of their instance type):
 * their Nodes tainted first, each marked with it, all deleted once it is initialized. */
static void test_multi_replace(void) {
  dt_set_budgets(&f, "[{\"nodes\":\"0\"}]");
  for (int i = 0; multi_claims[i]; i++)
    dt_post_claim_with(&f, multi_claims[i],
                       json_pack("{s:s, s:s, s:[s]}", "key", "node.kubernetes.io/instance-type", "operator",
                                 "In", "values", MULTI_TYPE));
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){4}));
  for (int i = 0; multi_claims[i]; i++) {
    json_t *c = dt_claim(&f, multi_claims[i]);
    post_app_pod(multi_pods[i], lp_obj_str(c, "status.nodeName"), MULTI_CPU, "multi");
    json_decref(c);
  }
  for (int i = 0; multi_claims[i]; i++) dt_mark_consolidatable(&f, multi_claims[i]);
  for (int i = 0; multi_claims[i]; i++)
    CHECK(ctrl_wait_for(&f, 5, dt_consolidatable_cached, multi_claims[i]));
  double before = ctrl_metric(&f, "luaprov_voluntary_disruption_decisions_total",
                              LP_LABELS("replace", "underutilized", "multi"));
  dt_set_budgets(&f, "[{\"nodes\":\"3\"}]");
  multi_watch w = {0};
  CHECK(ctrl_wait_for(&f, 60, multi_replaced, &w));
  CHECK(w.most <= 3);
  CHECK_INT(w.untainted, 0);
  CHECK_INT(ctrl_metric(&f, "luaprov_voluntary_disruption_decisions_total",
                        LP_LABELS("replace", "underutilized", "multi")) -
                before,
            1);
  json_t *items = dt_pool_claims(&f);
  size_t i, found = 0;
  json_t *c;
  json_array_foreach(items, i, c) {
    const char *replaces = dt_annotation(c, DZ_ANNOTATION_REPLACES);
    if (!replaces || strcmp(replaces, "web-m1,web-m2,web-m3") != 0) continue;
    found++;
    CHECK(lp_condition_is(c, "Initialized", "True"));
    CHECK_STR(dt_annotation(c, DZ_ANNOTATION_REASON), "Underutilized");
    const json_t *labels = lp_obj_get(c, "metadata.labels");
    const char *type = json_string_value(json_object_get(labels, "node.kubernetes.io/instance-type"));
    CHECK(type && strcmp(type, MULTI_TYPE) != 0);
  }
  CHECK_INT(found, 1);
  json_decref(items);
  CHECK(ctrl_has_event(&f, "web-m1", "DisruptionLaunching"));
  CHECK(ctrl_has_event(&f, "web-m3", "DisruptionTerminating"));
}

/* ---- topology holds through consolidation ----------------------------------------------------- */

/* A pod of app z spread over zones (maxSkew 1, DoNotSchedule), bound to node. */
static void post_spread_pod(const char *name, const char *node) {
  CHECK_INT(ctrl_kube_pack(&f, "POST", PODS,
                           "{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s, s:[{s:s, s:s, s:{s:{s:s}}}], s:[{s:i, s:s, "
                           "s:s, s:{s:{s:s}}}]}}",
                           "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "labels", "app", "z",
                           "spec", "nodeName", node, "containers", "name", "app", "image", "nginx",
                           "resources", "requests", "cpu", "100m", "topologySpreadConstraints", "maxSkew", 1,
                           "topologyKey", "topology.kubernetes.io/zone", "whenUnsatisfiable", "DoNotSchedule",
                           "labelSelector", "matchLabels", "app", "z"),
            201);
}

static int unconsolidatable_by_spread(ctrl_fixture *fx, const void *name) {
  mono += 0.5;
  return ctrl_has_event_message(fx, name, "Unconsolidatable",
                                "topology spread constraint on topology.kubernetes.io/zone (maxSkew 1)");
}

/* Pods of app z spread over zones, one on each node left above and one on a new node in a zone none of
 * those is in, the only NodePool narrowed to their zones: the new node, underutilized as it is, stays,
 * since its pod would break the spread on any other node, new or not; its Unconsolidatable event names
 * the constraint. */
static void test_spread_keeps_node(void) {
  dt_set_budgets(&f, "[{\"nodes\":\"0\"}]");
  json_t *items = dt_pool_claims(&f), *zones = json_array();
  size_t n = json_array_size(items), i;
  json_t *c;
  CHECK(n > 0);
  char pod[32];
  json_array_foreach(items, i, c) {
    const char *zone = lp_obj_label(c, "topology.kubernetes.io/zone");
    CHECK(zone != NULL);
    if (zone) json_array_append_new(zones, json_string(zone));
    snprintf(pod, sizeof pod, "z-%zu", i);
    post_spread_pod(pod, lp_obj_str(c, "status.nodeName"));
  }
  json_decref(items);
  static const char *const all[] = {"cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j", "cn-hangzhou-k"};
  const char *other = NULL;
  for (size_t k = 0; k < 4 && !other; k++) {
    int used = 0;
    json_array_foreach(zones, i, c) used |= strcmp(json_string_value(c), all[k]) == 0;
    if (!used) other = all[k];
  }
  CHECK(other != NULL);
  dt_post_claim_with(&f, "web-zb",
                     json_pack("{s:s, s:s, s:[s]}", "key", "topology.kubernetes.io/zone", "operator", "In",
                               "values", other ? other : "?"));
  CHECK(ctrl_wait_for(&f, 30, dt_pool_initialized, &(int){(int)n + 1}));
  c = dt_claim(&f, "web-zb");
  post_spread_pod("z-b", lp_obj_str(c, "status.nodeName"));
  json_decref(c);
  dt_patch_pool(&f, json_pack("{s:{s:{s:{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:o}]}}}}", "spec", "template",
                              "spec", "requirements", "key", "karpenter.sh/capacity-type", "operator", "In",
                              "values", "on-demand", "key", "topology.kubernetes.io/zone", "operator", "In",
                              "values", zones));
  /* the fixture's NodePool default would launch anywhere */
  CHECK_INT(ctrl_kube_pack(&f, "DELETE", DT_POOLS "/default", NULL), 200);
  dt_mark_consolidatable(&f, "web-zb");
  dt_set_budgets(&f, "[{\"nodes\":\"100%\"}]");
  CHECK(ctrl_wait_for(&f, 20, unconsolidatable_by_spread, "web-zb"));
  c = dt_claim(&f, "web-zb");
  CHECK(c && !lp_obj_deleting(c));
  json_decref(c);
}

static const lp_controller_def *const controllers[] = {
    &lp_nodeclass_controller, &lp_nodeclaim_lifecycle_controller, &lp_termination_controller,
    &lp_disruption_controller, NULL};

int main(void) {
  RUN(test_search);
  RUN(test_policies);
  ctrl_fixture_start(&f, controllers,
                     &(lp_ctrl_settings){.drain_requeue_s = 0.3, .terminate_requeue_s = 0.3});
  lp_env_set_clock(lp_controllers_env(f.manager), ctrl_clock_at, &mono);
  json_decref(ctrl_admin(&f, "alibaba", "POST", "/_sim/clock", "{\"speed\": 20}"));
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, ctrl_nodeclass_has_ready, "default"));
  dt_nodepool(&f, "0"); /* nothing goes until the test lets it */
  RUN(test_multi_node);
  RUN(test_lifetime_cost);
  RUN(test_single_replace);
  RUN(test_pdb_blocks);
  RUN(test_two_pdbs);
  RUN(test_multi_replace);
  RUN(test_spread_keeps_node);
  ctrl_fixture_stop(&f);
  return check_summary();
}
