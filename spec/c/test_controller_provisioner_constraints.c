/* The provisioner's scheduling constraints beyond resources and taints (engine/controller/
 * provisioner*.c; docs/controllers.md "## Provisioner"), through the real manager, the Alibaba mapping's
 * instance types and the Kubernetes simulator, whose binder marks the pods Unschedulable: every term of
 * a required node affinity (ORed), preferred node affinity as a ranking that is relaxed, a NodePool's
 * minValues, host ports, required pod (anti-)affinity, topology spread constraints, and the
 * FailedScheduling message naming the constraint that failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract/shapes.h"
#include "controller_fixture.h"
#include "provisioner_test_support.h"

static ctrl_fixture f;

/* {"key": key, "operator": "In", "values": [value]} as a one-expression node selector term. */
static json_t *zone_term(const char *zone) {
  return json_pack("{s:[{s:s, s:s, s:[s]}]}", "matchExpressions", "key", LP_LABEL_ZONE, "operator", "In",
                   "values", zone);
}

static json_t *required_terms(json_t *a, json_t *b) {
  return json_pack("{s:{s:{s:{s:[oo]}}}}", "affinity", "nodeAffinity",
                   "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", a, b);
}

static int has_failed_scheduling(ctrl_fixture *fx, const void *pod) {
  char *msg = pt_event(fx, pod, "FailedScheduling");
  free(msg);
  return msg != NULL;
}

/* Non-zero when the pod gets (within 5 s) a FailedScheduling event whose message holds text. */
static int failed_with(const char *pod, const char *text) {
  if (!ctrl_wait_for(&f, 5, has_failed_scheduling, pod)) return 0;
  char *msg = pt_event(&f, pod, "FailedScheduling");
  int ok = msg && strstr(msg, text) != NULL;
  if (!ok) fprintf(stderr, "FailedScheduling of %s: %s\n", pod, msg ? msg : "(none)");
  free(msg);
  return ok;
}

/* ---- node affinity ---------------------------------------------------------------------------- */

/* The first term names a zone nobody offers, the second one that exists: the pod gets a NodeClaim in
 * the second's zone. A pod whose every term is impossible is reported for each term. */
static void test_required_terms_ored(void) {
  CHECK_INT(pt_pod(&f, "second-term", "500m", "512Mi",
                   required_terms(zone_term("cn-hangzhou-z"), zone_term("cn-hangzhou-j"))),
            201);
  CHECK_INT(pt_pod(&f, "no-term", "500m", "512Mi",
                   required_terms(zone_term("cn-hangzhou-y"), zone_term("cn-hangzhou-z"))),
            201);
  json_t *claim = pt_claim_of(&f, "second-term");
  CHECK(claim != NULL);
  CHECK(pt_values_are(pt_values(claim, LP_LABEL_ZONE), "cn-hangzhou-j", NULL));
  json_decref(claim);
  CHECK(failed_with("no-term", "with term 1 of its required node affinity: nodepool default: "));
  CHECK(failed_with("no-term", "; with term 2 of its required node affinity: nodepool default: "));
  CHECK_INT(pt_claims(&f, NULL), 1);
  pt_cleanup(&f);
}

static json_t *preference(int weight, const char *zone) {
  return json_pack("{s:i, s:o}", "weight", weight, "preference", zone_term(zone));
}

/* Preferences rank: the heaviest that can be met wins (k and i contradict: the lighter, k, is dropped
 * first), and a preference nobody can meet never leaves a pod unschedulable. */
static void test_preferences_relaxed(void) {
  CHECK_INT(
      pt_pod(&f, "prefers-i", "500m", "512Mi",
             json_pack("{s:{s:{s:[ooo]}}}", "affinity", "nodeAffinity",
                       "preferredDuringSchedulingIgnoredDuringExecution", preference(10, "cn-hangzhou-k"),
                       preference(50, "cn-hangzhou-i"), preference(1, "cn-hangzhou-z"))),
      201);
  CHECK_INT(
      pt_pod(&f, "prefers-nothing-possible", "3", "512Mi",
             json_pack("{s:{s:{s:[o]}}}", "affinity", "nodeAffinity",
                       "preferredDuringSchedulingIgnoredDuringExecution", preference(5, "cn-hangzhou-z"))),
      201);
  json_t *claim = pt_claim_of(&f, "prefers-i");
  CHECK(claim != NULL);
  CHECK(pt_values_are(pt_values(claim, LP_LABEL_ZONE), "cn-hangzhou-i", NULL));
  json_t *other = pt_claim_of(&f, "prefers-nothing-possible");
  CHECK(other != NULL);
  CHECK(!has_failed_scheduling(&f, "prefers-nothing-possible"));
  json_decref(claim);
  json_decref(other);
  pt_cleanup(&f);
}

/* ---- minValues ------------------------------------------------------------------------------ */

#define FAMILY "karpenter.k8s.alibabacloud/instance-family"

/* A NodePool named name labelling its nodes team=name whose requirement on key is Exists with
 * minValues min (on-demand only). */
static void min_values_pool(const char *name, const char *key, int min) {
  CHECK_INT(pt_nodepool(&f, name, 0,
                        json_pack("{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:i}]}", "requirements", "key",
                                  LP_LABEL_CAPACITY_TYPE, "operator", "In", "values", "on-demand", "key", key,
                                  "operator", "Exists", "minValues", min),
                        json_pack("{s:{s:s}}", "labels", "team", name), NULL),
            201);
}

/* How many distinct cpu counts the claim's options have. */
static size_t distinct_cpus(const json_t *claim) {
  json_t *types = pt_instance_types(&f), *seen = json_object();
  size_t i;
  const json_t *v;
  json_array_foreach(pt_values(claim, LP_LABEL_INSTANCE_TYPE), i, v) {
    char cpus[32];
    snprintf(cpus, sizeof cpus, "%g", pt_type_capacity(types, json_string_value(v), "cpu"));
    json_object_set_new(seen, cpus, json_true());
  }
  size_t n = json_object_size(seen);
  json_decref(seen);
  json_decref(types);
  return n;
}

/* instance-type minValues 3: three r8y sizes hold a 1-core pod, so its NodeClaim keeps them; only one
 * holds 5 cores, so that pod is unschedulable on the pool and says why. Each of the 9 cpu counts of
 * the catalogue (instance-cpu minValues 9) survives the cut to 60 options, though the 60 cheapest
 * lack the two largest (48 and 64 cores). */
static void test_min_values(void) {
  min_values_pool("three", LP_LABEL_INSTANCE_TYPE, 3);
  min_values_pool("cpus", "karpenter.k8s.alibabacloud/instance-cpu", 9);
  ctrl_run_for(&f, 0.3);
  CHECK_INT(pt_pod(&f, "three-fit", "1", "512Mi",
                   json_pack("{s:{s:s, s:s}}", "nodeSelector", "team", "three", FAMILY, "ecs.r8y")),
            201);
  CHECK_INT(pt_pod(&f, "one-fits", "5", "512Mi",
                   json_pack("{s:{s:s, s:s}}", "nodeSelector", "team", "three", FAMILY, "ecs.r8y")),
            201);
  CHECK_INT(pt_pod(&f, "varied", "500m", "512Mi", json_pack("{s:{s:s}}", "nodeSelector", "team", "cpus")),
            201);
  json_t *claim = pt_claim_of(&f, "three-fit");
  CHECK(claim != NULL);
  CHECK(json_array_size(pt_values(claim, LP_LABEL_INSTANCE_TYPE)) >= 3);
  json_decref(claim);
  CHECK(failed_with("one-fits",
                    "nodepool three: minValues requirement is not met for node.kubernetes.io/instance-type "
                    "(1 of 3 distinct values)"));
  json_t *varied = pt_claim_of(&f, "varied");
  CHECK(varied != NULL);
  CHECK_INT(json_array_size(pt_values(varied, LP_LABEL_INSTANCE_TYPE)), 60);
  CHECK_INT(distinct_cpus(varied), 9);
  json_decref(varied);
  pt_cleanup(&f);
}

/* ---- host ports ----------------------------------------------------------------------------- */

/* A container of 250m and 256Mi listening on host port port/protocol (port 0: none). */
static json_t *port_container(int port, const char *protocol) {
  json_t *c = json_pack("{s:s, s:s, s:{s:{s:s, s:s}}}", "name", "app", "image", "app", "resources",
                        "requests", "cpu", "250m", "memory", "256Mi");
  if (port)
    json_object_set_new(
        c, "ports",
        json_pack("[{s:i, s:i, s:s}]", "containerPort", port, "hostPort", port, "protocol", protocol));
  return c;
}

/* A pod of the scheduler "custom" (the simulator's binder leaves it alone) of 250m and 256Mi, labelled
 * app=app (NULL: no label), with extra in its spec (stolen, may be NULL), bound to node, or else marked
 * Unschedulable as that scheduler would. */
static void app_pod(const char *name, const char *app, json_t *extra, const char *node) {
  if (!extra) extra = json_object();
  json_object_set_new(extra, "schedulerName", json_string("custom"));
  if (node) json_object_set_new(extra, "nodeName", json_string(node));
  if (!json_object_get(extra, "containers"))
    json_object_set_new(extra, "containers", json_pack("[o]", port_container(0, NULL)));
  json_t *pod = json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion", "v1", "kind", "Pod", "metadata",
                          "name", name, "namespace", "default", "spec", extra);
  if (app) json_object_set_new(json_object_get(pod, "metadata"), "labels", json_pack("{s:s}", "app", app));
  CHECK_INT(pt_post(&f, PT_PODS, pod), 201);
  if (node) return;
  CHECK_INT(pt_mark_unschedulable(&f, name), 200);
}

static void custom_pod(const char *name, json_t *extra, const char *node) {
  app_pod(name, NULL, extra, node);
}

static json_t *ports_spec(int port, const char *protocol) {
  return json_pack("{s:[o]}", "containers", port_container(port, protocol));
}

/* The same, in zone cn-hangzhou-j: not on node n1. */
static json_t *ports_spec_j(int port, const char *protocol) {
  return json_pack("{s:[o], s:{s:s}}", "containers", port_container(port, protocol), "nodeSelector",
                   LP_LABEL_ZONE, "cn-hangzhou-j");
}

/* A Ready node of 4 cores and 8Gi in zone. */
static void node(const char *name, const char *zone) {
  CHECK_INT(pt_post(&f, "/api/v1/nodes",
                    json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}}, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:s}]}}",
                              "apiVersion", "v1", "kind", "Node", "metadata", "name", name, "labels",
                              "kubernetes.io/hostname", name, LP_LABEL_ZONE, zone, "status", "allocatable",
                              "cpu", "4", "memory", "8Gi", "pods", "110", "conditions", "type", "Ready",
                              "status", "True")),
            201);
}

/* Two pods on host port 8080/TCP (in a zone node n1 is not in) need two NodeClaims; one on 8080/UDP shares. A
 * pod on the host port a bound pod holds on node n1 gets a NodeClaim, one on another port is left to n1. A
 * pod on the port of a DaemonSet is unschedulable and says which port. */
static void test_host_ports(void) {
  node("n1", "cn-hangzhou-h");
  custom_pod("resident", ports_spec(9090, "TCP"), "n1");
  json_t *ds = json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:s}}, s:{s:{s:{s:s}}, s:{s:[o]}}}}", "apiVersion",
                         "apps/v1", "kind", "DaemonSet", "metadata", "name", "agent", "spec", "selector",
                         "matchLabels", "app", "agent", "template", "metadata", "labels", "app", "agent",
                         "spec", "containers", port_container(8081, "TCP"));
  CHECK_INT(pt_post(&f, PT_DAEMONSETS, ds), 201);
  ctrl_run_for(&f, 0.3);
  custom_pod("web-a", ports_spec_j(8080, "TCP"), NULL);
  custom_pod("web-b", ports_spec_j(8080, "TCP"), NULL);
  custom_pod("web-udp", ports_spec_j(8080, "UDP"), NULL);
  custom_pod("wants-9090", ports_spec(9090, "TCP"), NULL);
  custom_pod("wants-9091", ports_spec(9091, "TCP"), NULL);
  custom_pod("wants-8081", ports_spec_j(8081, "TCP"), NULL);
  json_t *a = pt_claim_of(&f, "web-a"), *b = pt_claim_of(&f, "web-b"), *c = pt_claim_of(&f, "wants-9090");
  CHECK(a && b && c);
  CHECK(strcmp(lp_obj_name(a) ?: "", lp_obj_name(b) ?: "") != 0);
  CHECK(pt_is_nominated(&f, "web-udp"));
  CHECK(!pt_is_nominated(&f, "wants-9091"));
  CHECK(failed_with("wants-8081", "nodepool default: host port 8081/TCP in use by a DaemonSet pod"));
  CHECK_INT(pt_claims(&f, NULL), 2);
  json_decref(a);
  json_decref(b);
  json_decref(c);
  pt_cleanup(&f);
}

/* ---- pod affinity and anti-affinity ---------------------------------------------------------- */

/* A NodePool name (on-demand) in zone a, or a, b and c, for pods with nodeSelector team=zones. */
static void zone_pool(const char *name, const char *a, const char *b, const char *c) {
  json_t *zones = b ? json_pack("[sss]", a, b, c) : json_pack("[s]", a);
  CHECK_INT(pt_nodepool(&f, name, 0,
                        json_pack("{s:[{s:s, s:s, s:[s]}, {s:s, s:s, s:o}]}", "requirements", "key",
                                  LP_LABEL_CAPACITY_TYPE, "operator", "In", "values", "on-demand", "key",
                                  LP_LABEL_ZONE, "operator", "In", "values", zones),
                        json_pack("{s:{s:s}}", "labels", "team", "zones"), NULL),
            201);
  ctrl_run_for(&f, 0.3);
}

/* {"podAntiAffinity" or "podAffinity": required [{labelSelector app=app, topologyKey}]} as a spec. */
static json_t *pod_affinity(const char *kind, const char *app, const char *key) {
  return json_pack("{s:{s:{s:[{s:{s:{s:s}}, s:s}]}}}", "affinity", kind,
                   "requiredDuringSchedulingIgnoredDuringExecution", "labelSelector", "matchLabels", "app",
                   app, "topologyKey", key);
}

static const char *zone_of(const json_t *claim) {
  const json_t *zones = pt_values(claim, LP_LABEL_ZONE);
  return json_array_size(zones) == 1 ? json_string_value(json_array_get(zones, 0)) : "(not one zone)";
}

/* Three replicas with hostname self anti-affinity: three NodeClaims. Two with zone self anti-affinity,
 * a third already running on node n1 in zone h: two NodeClaims, each pinned to its own zone, neither h
 * (n1 has room, but not for the rule). */
static void test_pod_anti_affinity(void) {
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "web-%d", i);
    app_pod(name, "web", pod_affinity("podAntiAffinity", "web", "kubernetes.io/hostname"), NULL);
  }
  json_t *w0 = pt_claim_of(&f, "web-0"), *w1 = pt_claim_of(&f, "web-1"), *w2 = pt_claim_of(&f, "web-2");
  CHECK(w0 && w1 && w2);
  CHECK(strcmp(lp_obj_name(w0) ?: "", lp_obj_name(w1) ?: "") != 0);
  CHECK(strcmp(lp_obj_name(w1) ?: "", lp_obj_name(w2) ?: "") != 0);
  CHECK(strcmp(lp_obj_name(w0) ?: "", lp_obj_name(w2) ?: "") != 0);
  CHECK_INT(pt_claims(&f, NULL), 3);
  json_decref(w0);
  json_decref(w1);
  json_decref(w2);
  pt_cleanup(&f);

  node("n1", "cn-hangzhou-h");
  app_pod("zonal-0", "zonal", pod_affinity("podAntiAffinity", "zonal", LP_LABEL_ZONE), "n1");
  app_pod("zonal-1", "zonal", pod_affinity("podAntiAffinity", "zonal", LP_LABEL_ZONE), NULL);
  app_pod("zonal-2", "zonal", pod_affinity("podAntiAffinity", "zonal", LP_LABEL_ZONE), NULL);
  json_t *z1 = pt_claim_of(&f, "zonal-1"), *z2 = pt_claim_of(&f, "zonal-2");
  CHECK(z1 && z2);
  CHECK(strcmp(zone_of(z1), zone_of(z2)) != 0);
  CHECK(strcmp(zone_of(z1), "cn-hangzhou-h") != 0 && strcmp(zone_of(z1), "(not one zone)") != 0);
  CHECK(strcmp(zone_of(z2), "cn-hangzhou-h") != 0 && strcmp(zone_of(z2), "(not one zone)") != 0);
  json_decref(z1);
  json_decref(z2);
  pt_cleanup(&f);
}

/* A pod running on node n1 with hostname anti-affinity against app=web keeps a web pod off n1 (it gets
 * a NodeClaim); zone anti-affinity against a pod in the only zone a pool offers cannot be met, and the
 * pod says so. */
static void test_anti_affinity_of_running_pods(void) {
  zone_pool("only-h", "cn-hangzhou-h", NULL, NULL);
  node("n1", "cn-hangzhou-h");
  app_pod("guard", "guard", pod_affinity("podAntiAffinity", "web", "kubernetes.io/hostname"), "n1");
  app_pod("web", "web", NULL, NULL);
  json_t *lonely = pod_affinity("podAntiAffinity", "guard", LP_LABEL_ZONE);
  json_object_set_new(lonely, "nodeSelector", json_pack("{s:s}", "team", "zones"));
  app_pod("lonely", "lonely", lonely, NULL);
  json_t *claim = pt_claim_of(&f, "web");
  CHECK(claim != NULL);
  json_decref(claim);
  CHECK(failed_with("lonely",
                    "nodepool only-h: pod anti-affinity on topology.kubernetes.io/zone cannot be met"));
  pt_cleanup(&f);
}

/* A container requesting cpu. */
static json_t *cpu_containers(const char *cpu) {
  return json_pack("[{s:s, s:s, s:{s:{s:s}}}]", "name", "app", "image", "app", "resources", "requests", "cpu",
                   cpu);
}

/* A pod with zone affinity to a pod running on node n1 in zone k, too big for n1, gets a NodeClaim in
 * k; one with hostname affinity to it cannot go on a new node, and says so. */
static void test_pod_affinity(void) {
  node("n1", "cn-hangzhou-k");
  app_pod("leader", "leader", NULL, "n1");
  json_t *follower = pod_affinity("podAffinity", "leader", LP_LABEL_ZONE);
  json_object_set_new(follower, "containers", cpu_containers("6"));
  app_pod("follower", "follower", follower, NULL);
  json_t *sticky = pod_affinity("podAffinity", "leader", "kubernetes.io/hostname");
  json_object_set_new(sticky, "containers", cpu_containers("8"));
  app_pod("sticky", "sticky", sticky, NULL);
  json_t *claim = pt_claim_of(&f, "follower");
  CHECK(claim != NULL);
  CHECK_STR(zone_of(claim), "cn-hangzhou-k");
  json_decref(claim);
  CHECK(failed_with("sticky", "nodepool default: pod affinity on kubernetes.io/hostname cannot be met"));
  pt_cleanup(&f);
}

/* {"affinity": {kind: {preferred: [{weight, podAffinityTerm: {labelSelector app=app, topologyKey}}]}}}. */
static json_t *preferred_affinity(const char *kind, int weight, const char *app, const char *key) {
  return json_pack("{s:{s:{s:[{s:i, s:{s:{s:{s:s}}, s:s}}]}}}", "affinity", kind,
                   "preferredDuringSchedulingIgnoredDuringExecution", "weight", weight, "podAffinityTerm",
                   "labelSelector", "matchLabels", "app", app, "topologyKey", key);
}

/* Preferred pod (anti-)affinity is tried as if required, then given up. Three small replicas preferring
 * hostname self anti-affinity get three NodeClaims; two preferring zone self anti-affinity, in a pool of
 * one zone, both get one; a pod preferring zone affinity to a pod running in zone k gets a NodeClaim in
 * k. The preference of a running pod keeps no other pod off its node. */
static void test_preferred_pod_affinity(void) {
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "apart-%d", i);
    app_pod(name, "apart", preferred_affinity("podAntiAffinity", 50, "apart", "kubernetes.io/hostname"),
            NULL);
  }
  json_t *a0 = pt_claim_of(&f, "apart-0"), *a1 = pt_claim_of(&f, "apart-1"), *a2 = pt_claim_of(&f, "apart-2");
  CHECK(a0 && a1 && a2);
  CHECK(strcmp(lp_obj_name(a0) ?: "", lp_obj_name(a1) ?: "") != 0);
  CHECK(strcmp(lp_obj_name(a1) ?: "", lp_obj_name(a2) ?: "") != 0);
  CHECK(strcmp(lp_obj_name(a0) ?: "", lp_obj_name(a2) ?: "") != 0);
  json_decref(a0);
  json_decref(a1);
  json_decref(a2);
  pt_cleanup(&f);

  zone_pool("only-h", "cn-hangzhou-h", NULL, NULL);
  for (int i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof name, "pair-%d", i);
    json_t *spec = preferred_affinity("podAntiAffinity", 10, "pair", LP_LABEL_ZONE);
    json_object_set_new(spec, "nodeSelector", json_pack("{s:s}", "team", "zones"));
    app_pod(name, "pair", spec, NULL);
  }
  json_t *p0 = pt_claim_of(&f, "pair-0"), *p1 = pt_claim_of(&f, "pair-1");
  CHECK(p0 && p1);
  CHECK(!has_failed_scheduling(&f, "pair-0") && !has_failed_scheduling(&f, "pair-1"));
  json_decref(p0);
  json_decref(p1);
  pt_cleanup(&f);

  node("n1", "cn-hangzhou-k");
  app_pod("chief", "chief", NULL, "n1");
  app_pod("shy", "shy", preferred_affinity("podAntiAffinity", 100, "near", "kubernetes.io/hostname"), "n1");
  json_t *trailer = preferred_affinity("podAffinity", 10, "chief", LP_LABEL_ZONE);
  json_object_set_new(trailer, "containers", cpu_containers("6"));
  app_pod("trailer", "trailer", trailer, NULL);
  app_pod("near", "near", NULL, NULL);
  json_t *claim = pt_claim_of(&f, "trailer");
  CHECK(claim != NULL);
  CHECK_STR(zone_of(claim), "cn-hangzhou-k");
  CHECK(!pt_is_nominated(&f, "near"));
  CHECK_INT(pt_claims(&f, NULL), 1);
  json_decref(claim);
  pt_cleanup(&f);
}

/* ---- topology spread ----------------------------------------------------------------------- */

/* A spread constraint on key over pods app=app. */
static json_t *spread(const char *key, int skew, const char *when, const char *app) {
  return json_pack("{s:[{s:i, s:s, s:s, s:{s:{s:s}}}]}", "topologySpreadConstraints", "maxSkew", skew,
                   "topologyKey", key, "whenUnsatisfiable", when, "labelSelector", "matchLabels", "app", app);
}

static json_t *spread_spec(const char *when, const char *cpu) {
  json_t *spec = spread(LP_LABEL_ZONE, 1, when, "spread");
  json_object_set_new(spec, "nodeSelector", json_pack("{s:s}", "team", "zones"));
  json_object_set_new(spec, "containers", cpu_containers(cpu));
  return spec;
}

/* Zone spread, maxSkew 1, over the pool's zones h, i and j; two matching pods already run in h (on
 * nodes too small for another). Two new replicas go one to i, one to j, each NodeClaim pinned to its
 * zone so that the launch lands there. */
static void test_zone_spread(void) {
  zone_pool("zones", "cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j");
  node("n1", "cn-hangzhou-h");
  node("n2", "cn-hangzhou-h");
  app_pod("old-1", "spread", json_pack("{s:o}", "containers", cpu_containers("3")), "n1");
  app_pod("old-2", "spread", json_pack("{s:o}", "containers", cpu_containers("3")), "n2");
  app_pod("new-1", "spread", spread_spec("DoNotSchedule", "3"), NULL);
  app_pod("new-2", "spread", spread_spec("DoNotSchedule", "3"), NULL);
  json_t *a = pt_claim_of(&f, "new-1"), *b = pt_claim_of(&f, "new-2");
  CHECK(a && b);
  const char *za = zone_of(a), *zb = zone_of(b);
  CHECK(strcmp(za, zb) != 0);
  CHECK(strcmp(za, "cn-hangzhou-i") == 0 || strcmp(za, "cn-hangzhou-j") == 0);
  CHECK(strcmp(zb, "cn-hangzhou-i") == 0 || strcmp(zb, "cn-hangzhou-j") == 0);
  json_decref(a);
  json_decref(b);
  pt_cleanup(&f);
}

/* Zone spread over h (the only zone of the pool) and j (where node n1 runs, no matching pod): the first
 * replica goes to h, a second would make h 2 against j's 0 and is unschedulable, naming the
 * constraint; the same pod with ScheduleAnyway gets a NodeClaim (the preference is relaxed). */
static void test_spread_unsatisfiable(void) {
  zone_pool("only-h", "cn-hangzhou-h", NULL, NULL);
  node("n1", "cn-hangzhou-j");
  app_pod("old", "other", NULL, "n1"); /* zone j is a domain, with no matching pod */
  ctrl_run_for(&f, 0.3);
  app_pod("hard-1", "spread", spread_spec("DoNotSchedule", "3"), NULL);
  app_pod("hard-2", "spread", spread_spec("DoNotSchedule", "3"), NULL);
  json_t *first = pt_claim_of(&f, "hard-1");
  CHECK(first != NULL);
  CHECK_STR(zone_of(first), "cn-hangzhou-h");
  json_decref(first);
  CHECK(failed_with("hard-2", "nodepool only-h: topology spread constraint on topology.kubernetes.io/zone "
                              "(maxSkew 1) cannot be met"));
  app_pod("soft", "spread", spread_spec("ScheduleAnyway", "3"), NULL);
  json_t *soft = pt_claim_of(&f, "soft");
  CHECK(soft != NULL);
  json_decref(soft);
  pt_cleanup(&f);
}

/* Hostname spread, maxSkew 1: every replica on a node of its own (a new node is an empty domain). */
static void test_hostname_spread(void) {
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "spread-%d", i);
    app_pod(name, "host-spread", spread("kubernetes.io/hostname", 1, "DoNotSchedule", "host-spread"), NULL);
  }
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "spread-%d", i);
    CHECK(ctrl_wait_for(&f, 10, pt_is_nominated, name));
  }
  CHECK_INT(pt_claims(&f, NULL), 3);
  pt_cleanup(&f);
}

/* The manager keeps this list for as long as it runs. */
static const lp_controller_def *const controllers[] = {&lp_nodeclass_controller, &lp_provisioner_controller,
                                                       NULL};

/* ---- volume topology -------------------------------------------------------------------------- */

static json_t *claim_volume(const char *claim) {
  return json_pack("{s:[{s:s, s:{s:s}}]}", "volumes", "name", "data", "persistentVolumeClaim", "claimName",
                   claim);
}

/* A claim bound to a volume made in zone j pins its pod's NodeClaim to j; an unbound claim of a class
 * allowed only in zone i pins it to i; a claim that does not exist gets no NodeClaim, and the pod a
 * FailedScheduling event naming it. */
static void test_volume_topology(void) {
  pt_bound_volume(&f, "pv-j", "bound", "cn-hangzhou-j");
  CHECK_INT(pt_post(&f, "/apis/storage.k8s.io/v1/storageclasses",
                    json_pack("{s:s, s:s, s:{s:s}, s:s, s:[{s:[{s:s, s:[s]}]}]}", "apiVersion",
                              "storage.k8s.io/v1", "kind", "StorageClass", "metadata", "name", "zonal-i",
                              "provisioner", "disk.csi", "allowedTopologies", "matchLabelExpressions", "key",
                              LP_LABEL_ZONE, "values", "cn-hangzhou-i")),
            201);
  CHECK_INT(
      pt_post(&f, "/api/v1/namespaces/default/persistentvolumeclaims",
              json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "PersistentVolumeClaim",
                        "metadata", "name", "unbound", "spec", "storageClassName", "zonal-i")),
      201);
  ctrl_run_for(&f, 0.3); /* the manager's caches have them */
  CHECK_INT(pt_pod(&f, "vol-bound", "500m", "512Mi", claim_volume("bound")), 201);
  CHECK_INT(pt_pod(&f, "vol-class", "500m", "512Mi", claim_volume("unbound")), 201);
  CHECK_INT(pt_pod(&f, "vol-missing", "500m", "512Mi", claim_volume("nope")), 201);
  json_t *bound = pt_claim_of(&f, "vol-bound"), *byclass = pt_claim_of(&f, "vol-class");
  CHECK(bound && byclass);
  CHECK(pt_values_are(pt_values(bound, LP_LABEL_ZONE), "cn-hangzhou-j", NULL));
  CHECK(pt_values_are(pt_values(byclass, LP_LABEL_ZONE), "cn-hangzhou-i", NULL));
  json_decref(bound);
  json_decref(byclass);
  CHECK(failed_with("vol-missing", "persistentvolumeclaim default/nope not found"));
  pt_cleanup(&f);
}

int main(void) {
  ctrl_fixture_start(&f, controllers, NULL);
  ctrl_fixture_apply_defaults(&f);
  CHECK(ctrl_wait_for(&f, 10, pt_class_ready, "default"));
  RUN(test_required_terms_ored);
  RUN(test_preferences_relaxed);
  RUN(test_min_values);
  RUN(test_host_ports);
  RUN(test_pod_anti_affinity);
  RUN(test_pod_affinity);
  RUN(test_anti_affinity_of_running_pods);
  RUN(test_preferred_pod_affinity);
  RUN(test_zone_spread);
  RUN(test_spread_unsatisfiable);
  RUN(test_hostname_spread);
  RUN(test_volume_topology);
  ctrl_fixture_stop(&f);
  return check_summary();
}
