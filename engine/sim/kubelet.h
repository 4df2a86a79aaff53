/* The simulated kubelet, posting to a real Kubernetes API server (`luaprov sim --kubelet-kubeconfig`).
 *
 * The Kubernetes simulator decides which Nodes exist: one per Running simulated instance, with the
 * providerID, labels, taints, capacity and conditions its launch asked for (GET
 * <simulator>/_sim/kubelet/nodes, see sim/kubernetes/kubelet.lua). This agent makes an API server
 * agree, doing what a kubelet (and, for vanished instances, a cloud node lifecycle controller) does:
 *
 *   registration  a Node is created once per instance, status included; one that exists already is
 *                 adopted. A Node deleted while its instance runs stays deleted.
 *   heartbeats    the Node's Lease in kube-node-lease is renewed every lease_seconds / 4, so the
 *                 node lifecycle controller keeps it Ready; condition changes (Ready forced through
 *                 the simulator's /_sim/kubelet, the interruption condition while a spot reclaim's notice
 * runs) are posted to the Node's status. pods          pods bound to a live Node are set Running (conditions,
 * IPs, container statuses); pods being deleted there are removed (DELETE with grace 0 and a uid
 * precondition), as a kubelet does once their containers stopped. instance gone the Node's conditions turn
 * Unknown at once, its Lease is no longer renewed, and the Node is deleted gone_after_seconds later.
 *
 * Each step is retried on the next tick when the API server refuses or fails it (logged at warn with
 * the API error); nothing is written twice while a request for the same object is in flight.
 * Loop thread only. */
#ifndef LUAPROV_SIM_KUBELET_H
#define LUAPROV_SIM_KUBELET_H

#include <uv.h>

#include "core/cache.h"
#include "core/error.h"
#include "kube/client.h"

typedef struct lp_sim_kubelet lp_sim_kubelet;

typedef struct lp_sim_kubelet_options {
  const char *simulator_url; /* the Kubernetes simulator's base URL (copied) */
  lp_kube_client *kube;      /* the API server to post to; borrowed, must outlive the kubelet */
  double tick_seconds;       /* how often the simulator is asked; 0 = 1 */
  double lease_seconds;      /* the Leases' leaseDurationSeconds; 0 = 40 */
  double gone_after_seconds; /* an instance gone -> its Node deleted after this; 0 = 30 */
  lp_clock_fn clock;         /* wall clock for timestamps and the waits above; NULL = lp_clock_wall */
  void *clock_ud;
} lp_sim_kubelet_options;

/* Starts ticking. Returns NULL with *err when the simulator URL is missing or the HTTP client cannot
 * be created. Release with lp_sim_kubelet_stop. */
lp_sim_kubelet *lp_sim_kubelet_start(uv_loop_t *loop, const lp_sim_kubelet_options *opts, lp_error **err);

/* What the kubelet has done so far. */
typedef struct lp_sim_kubelet_stats {
  size_t live_nodes;     /* registered or adopted, instance running, not deleted */
  size_t registered;     /* Nodes created */
  size_t lease_renewals; /* Lease writes that succeeded (creations included) */
  size_t pods_started;   /* pods set Running */
  size_t pods_removed;   /* terminating pods removed */
  size_t nodes_removed;  /* Nodes of vanished instances deleted */
} lp_sim_kubelet_stats;

lp_sim_kubelet_stats lp_sim_kubelet_stats_get(const lp_sim_kubelet *k);

/* Stops ticking and frees k once its requests have returned (they are cancelled); on_stopped (may be
 * NULL) runs after that. Stop it before closing the Kubernetes client. */
void lp_sim_kubelet_stop(lp_sim_kubelet *k, void (*on_stopped)(void *ud), void *ud);

#endif
