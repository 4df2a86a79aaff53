/* Spot interruption (engine/controller/interruption.c, docs/controllers.md) through the real manager,
 * the Alibaba mapping (its interruption_conditions) and the Kubernetes simulator over HTTP. Nodes and
 * NodeClaims are written by hand, as ACK's node controller and the lifecycle controller would leave
 * them, so only the interruption controller acts: a spot Node with InstanceExpired=True gets its
 * NodeClaim deleted, its offering marked unavailable (GetInstanceTypes shows it), a
 * TerminatingOnInterruption event on both, once, and the annotation luaprov.io/interrupted on the
 * NodeClaim, so a restarted manager over the NodeClaim still draining announces nothing again; an
 * on-demand Node, or the condition False, is left alone; until the annotation is stored, the memory of
 * a handled NodeClaim lasts an hour of the controllers' clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "controller_fixture.h"

#define NODECLAIMS "/apis/karpenter.sh/v1/nodeclaims"
#define NODES      "/api/v1/nodes"
#define TYPE       "ecs.g7.large"
#define ZONE       "cn-hangzhou-h"
#define HOLD       "test.luaprov.io/hold" /* keeps a deleted NodeClaim around so a test can look at it */

static ctrl_fixture fx;
static const lp_controller_def *const interruption_only[] = {&lp_interruption_controller, NULL};

/* A launched NodeClaim (held by a finalizer) for instance id, and its Node: capacity type capacity,
 * InstanceExpired at expired ("True", "False", or NULL for none). */
static void cluster_node(const char *name, const char *id, const char *capacity, const char *expired) {
  char pid[128], path[256];
  snprintf(pid, sizeof pid, "cn-hangzhou.%s", id);
  CHECK_INT(ctrl_kube_pack(&fx, "POST", NODECLAIMS,
                           "{s:s, s:s, s:{s:s, s:[s], s:{s:s, s:s, s:s, s:s}}, s:{s:{s:s, s:s, s:s}, s:[]}}",
                           "apiVersion", "karpenter.sh/v1", "kind", "NodeClaim", "metadata", "name", name,
                           "finalizers", HOLD, "labels", "karpenter.sh/nodepool", "default",
                           "karpenter.sh/capacity-type", capacity, "node.kubernetes.io/instance-type", TYPE,
                           "topology.kubernetes.io/zone", ZONE, "spec", "nodeClassRef", "group",
                           "karpenter.alibabacloud.com", "kind", "ECSNodeClass", "name", "default",
                           "requirements"),
            201);
  snprintf(path, sizeof path, NODECLAIMS "/%s/status", name);
  CHECK_INT(
      ctrl_kube_pack(&fx, "PATCH", path, "{s:{s:s, s:s}}", "status", "providerID", pid, "nodeName", name),
      200);
  json_t *conditions = json_pack("[{s:s, s:s}]", "type", "Ready", "status", "True");
  if (expired)
    json_array_append_new(conditions,
                          json_pack("{s:s, s:s, s:s, s:s}", "type", "InstanceExpired", "status", expired,
                                    "reason", "SpotInstanceReclaim", "message",
                                    "The spot instance will be reclaimed at 2026-12-02T04:00:00Z"));
  CHECK_INT(ctrl_kube_pack(&fx, "POST", NODES,
                           "{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s, s:s}}, s:{s:s}, s:{s:o}}", "apiVersion",
                           "v1", "kind", "Node", "metadata", "name", name, "labels", "karpenter.sh/nodepool",
                           "default", "karpenter.sh/capacity-type", capacity,
                           "node.kubernetes.io/instance-type", TYPE, "topology.kubernetes.io/zone", ZONE,
                           "spec", "providerID", pid, "status", "conditions", conditions),
            201);
}

static int claim_deleting(ctrl_fixture *f, const void *name) {
  char path[256];
  snprintf(path, sizeof path, NODECLAIMS "/%s", (const char *)name);
  json_t *claim = ctrl_get(f, path);
  int deleting = claim && lp_obj_deleting(claim);
  json_decref(claim);
  return deleting;
}

static double interruptions(void) {
  return ctrl_metric(&fx, "luaprov_interruptions_total", LP_LABELS("InstanceExpired"));
}

/* Whether GetInstanceTypes answers the offering (TYPE, ZONE, capacity) available. */
static int offering_available(const json_t *nodeclass, const char *capacity) {
  lp_cp_outcome o = {0};
  lp_cp_get_instance_types(fx.cloud, nodeclass, lp_cp_outcome_store, &o);
  lp_cp_outcome_wait(&fx.loop, &o);
  CHECK(o.error == NULL);
  lp_error_free(o.error);
  int available = -1;
  size_t i, k;
  json_t *type, *offering;
  json_array_foreach(o.value, i, type) {
    if (strcmp(json_string_value(json_object_get(type, "name")) ?: "", TYPE) != 0) continue;
    json_array_foreach(json_object_get(type, "offerings"), k, offering) {
      if (strcmp(json_string_value(json_object_get(offering, "zone")) ?: "", ZONE) == 0 &&
          strcmp(json_string_value(json_object_get(offering, "capacity_type")) ?: "", capacity) == 0)
        available = json_is_true(json_object_get(offering, "available"));
    }
  }
  json_decref(o.value);
  return available;
}

/* How many TerminatingOnInterruption events (their counts summed) are about the objects named name. */
static long long events_about(const char *name) {
  json_t *events = ctrl_get(&fx, "/api/v1/namespaces/default/events");
  long long n = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(json_object_get(events, "items"), i, ev) {
    if (strcmp(json_string_value(json_object_get(ev, "reason")) ?: "", "TerminatingOnInterruption") == 0 &&
        strcmp(lp_obj_str(ev, "involvedObject.name") ?: "", name) == 0) {
      json_int_t count = json_integer_value(json_object_get(ev, "count"));
      n += count > 0 ? count : 1;
    }
  }
  json_decref(events);
  return n;
}

static double reconciled(void) {
  return ctrl_metric(&fx, "luaprov_controller_reconciles_total", LP_LABELS("node.interruption", "success"));
}

static int reconciled_since(ctrl_fixture *f, const void *ud) {
  (void)f;
  return reconciled() > *(const double *)ud;
}

static void test_spot_interruption(void) {
  json_t *nodeclass = mapping_resolved_nodeclass(fx.scripts, fx.sim);
  CHECK_INT(offering_available(nodeclass, "spot"), 1);
  CHECK_INT(offering_available(nodeclass, "on-demand"), 1);

  cluster_node("spot-reclaimed", "i-bp1spotreclaimed00", "spot", "True");
  CHECK(ctrl_wait_for(&fx, 10, claim_deleting, "spot-reclaimed"));
  CHECK(ctrl_has_event(&fx, "spot-reclaimed", "TerminatingOnInterruption"));
  json_t *events = ctrl_get(&fx, "/api/v1/namespaces/default/events");
  int kinds = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(json_object_get(events, "items"), i, ev) {
    if (strcmp(json_string_value(json_object_get(ev, "reason")) ?: "", "TerminatingOnInterruption") != 0)
      continue;
    const char *kind = lp_obj_str(ev, "involvedObject.kind");
    kinds |= strcmp(kind ?: "", "NodeClaim") == 0 ? 1 : strcmp(kind ?: "", "Node") == 0 ? 2 : 0;
    CHECK_STR(json_string_value(json_object_get(ev, "type")), "Warning");
  }
  json_decref(events);
  CHECK_INT(kinds, 3); /* on the NodeClaim and on the Node */
  CHECK(interruptions() == 1);
  CHECK(ctrl_metric(&fx, "luaprov_nodeclaims_disrupted_total", LP_LABELS("interrupted", "default")) == 1);

  /* the provisioner does not launch into the capacity being reclaimed; on-demand is not touched */
  CHECK_INT(offering_available(nodeclass, "spot"), 0);
  CHECK_INT(offering_available(nodeclass, "on-demand"), 1);

  /* re-delivery: the Node changes again while its NodeClaim is deleting; nothing is done twice */
  double before = reconciled();
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", NODES "/spot-reclaimed", "{s:{s:{s:s}}}", "metadata", "labels",
                           "touched", "again"),
            200);
  CHECK(ctrl_wait_for(&fx, 10, reconciled_since, &before));
  CHECK(interruptions() == 1);
  json_decref(nodeclass);
}

/* A restart while the interrupted NodeClaim still drains (test_spot_interruption's, held by a
 * finalizer): its annotation luaprov.io/interrupted says it was announced, so the fresh manager
 * publishes no event and counts nothing again; the offering stays unavailable. */
static void test_restart_announces_nothing_again(void) {
  char path[256];
  snprintf(path, sizeof path, NODECLAIMS "/%s", "spot-reclaimed");
  json_t *claim = ctrl_get(&fx, path);
  CHECK(lp_obj_deleting(claim));
  CHECK_STR(lp_obj_annotation(claim, "luaprov.io/interrupted"), "InstanceExpired");
  json_decref(claim);
  long long events = events_about("spot-reclaimed");
  CHECK_INT(events, 2); /* the NodeClaim's and the Node's */

  ctrl_stop_manager(&fx, fx.manager);
  double before = reconciled(); /* the registry (fx.metrics) outlives the manager */
  lp_controllers_config cfg = ctrl_manager_config(&fx, interruption_only);
  lp_error *err = NULL;
  fx.manager = lp_controllers_start(&cfg, &err);
  CHECK(fx.manager != NULL);
  if (!fx.manager) abort();
  CHECK(ctrl_wait_for(&fx, 10, reconciled_since, &before)); /* the only Node, listed at start */
  CHECK_INT(events_about("spot-reclaimed"), events);
  CHECK(interruptions() == 1);
  json_t *nodeclass = mapping_resolved_nodeclass(fx.scripts, fx.sim);
  CHECK_INT(offering_available(nodeclass, "spot"), 0);
  json_decref(nodeclass);
}

static void test_left_alone(void) {
  cluster_node("on-demand-expired", "i-bp1ondemandexpired", "on-demand", "True");
  cluster_node("spot-not-expired", "i-bp1spotnotexpired0", "spot", "False");
  cluster_node("spot-healthy", "i-bp1spothealthy0000", "spot", NULL);
  ctrl_run_for(&fx, 1.5);
  CHECK(!claim_deleting(&fx, "on-demand-expired"));
  CHECK(!claim_deleting(&fx, "spot-not-expired"));
  CHECK(!claim_deleting(&fx, "spot-healthy"));
  CHECK(!ctrl_has_event(&fx, "on-demand-expired", "TerminatingOnInterruption"));
  CHECK(!ctrl_has_event(&fx, "spot-not-expired", "TerminatingOnInterruption"));
  CHECK(interruptions() == 1);

  /* the condition turning True is what counts */
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", NODES "/spot-not-expired/status", "{s:{s:[{s:s, s:s}, {s:s, s:s}]}}",
                           "status", "conditions", "type", "Ready", "status", "True", "type",
                           "InstanceExpired", "status", "True"),
            200);
  CHECK(ctrl_wait_for(&fx, 10, claim_deleting, "spot-not-expired"));
  CHECK(interruptions() == 2);
}

static double fake_now = 1000; /* the controllers' clock in test_memory_on_the_controllers_clock */

static double errors(void) {
  return ctrl_metric(&fx, "luaprov_controller_reconciles_total", LP_LABELS("node.interruption", "error"));
}

static int errored_twice_since(ctrl_fixture *f, const void *ud) {
  (void)f;
  return errors() >= *(const double *)ud + 2;
}

static int interrupted_at_least(ctrl_fixture *f, const void *ud) {
  (void)f;
  return interruptions() >= *(const double *)ud;
}

/* While the annotation cannot be stored (every patch of NodeClaims fails), the memory of the handled
 * NodeClaim is what keeps the events from repeating: for an hour of the controllers' clock (moved by
 * the test), not of the wall clock. */
static void test_memory_on_the_controllers_clock(void) {
  lp_env_set_clock(lp_controllers_env(fx.manager), ctrl_clock_at, &fake_now);
  /* skip 1: cluster_node's own status patch */
  ctrl_kube_faults(&fx, "{\"verb\":\"patch\",\"resource\":\"nodeclaims\",\"status\":500,\"skip\":1}", 0);
  double want = interruptions() + 1;
  cluster_node("spot-stuck", "i-bp1spotstuck000000", "spot", "True");
  CHECK(ctrl_wait_for(&fx, 10, interrupted_at_least, &want));

  fake_now = 1000 + 3599; /* not yet forgotten: the retries (and an update of the Node) announce nothing */
  double before = errors();
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", NODES "/spot-stuck", "{s:{s:{s:s}}}", "metadata", "labels",
                           "touched", "3599"),
            200);
  CHECK(ctrl_wait_for(&fx, 10, errored_twice_since, &before));
  CHECK(interruptions() == want);

  fake_now = 1000 + 3601; /* forgotten: announced again */
  CHECK_INT(ctrl_kube_pack(&fx, "PATCH", NODES "/spot-stuck", "{s:{s:{s:s}}}", "metadata", "labels",
                           "touched", "3601"),
            200);
  want += 1;
  CHECK(ctrl_wait_for(&fx, 10, interrupted_at_least, &want));
  json_decref(ctrl_admin(&fx, "kubernetes", "DELETE", "/_sim/faults", NULL));
  CHECK(ctrl_wait_for(&fx, 10, claim_deleting, "spot-stuck"));
}

int main(void) {
  ctrl_fixture_start(&fx, interruption_only, NULL);
  RUN(test_spot_interruption);
  RUN(test_restart_announces_nothing_again);
  RUN(test_left_alone);
  RUN(test_memory_on_the_controllers_clock);
  ctrl_fixture_stop(&fx);
  return check_summary();
}
