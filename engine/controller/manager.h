/* The controller manager: one informer per cached kind (controller.h; the node class's once per group
 * its descriptor serves it in, aliases included), the secondary indices, Lease leader election, and
 * the controllers, started only while this process leads.
 *
 * Start-up: the informers list and watch at once, leader or not, so a standby has warm caches. Once
 * every informer is current (lp_informer_current: listed, not relisting) and (with leader election)
 * this process leads, each controller gets its workqueue and every key of its primary kind is
 * enqueued. Winning the lease relists every informer first (lp_informer_relist): a standby's watches
 * may have been cut off by an API server restart without a 410 yet, and the previous leader wrote until
 * moments ago, so the controllers start only once every cache holds a list begun after the win. Losing
 * the lease stops the controllers' queues (reconciles in flight finish, nothing new starts) until the
 * lease is won again. While any informer relists (a 410) the running controllers are paused: no new
 * reconcile starts, their state and queued keys are kept, and they resume once it is current again.
 *
 * Readiness (/readyz): lp_controllers_synced, every informer listed. Liveness (/healthz):
 * lp_controllers_healthy, false only when the leader's renew loop is wedged.
 * Metrics: luaprov_caches_synced (gauge: 1 while every informer is current), luaprov_controllers_active
 * (gauge: 1 while the controllers run, not paused), and those of the informers, queues, leader election
 * and controllers. Loop thread only. */
#ifndef LUAPROV_CONTROLLER_MANAGER_H
#define LUAPROV_CONTROLLER_MANAGER_H

#include "contract/cloudprovider.h"
#include "controller/controller.h"
#include "core/error.h"
#include "kube/client.h"

typedef struct lp_controllers lp_controllers;

typedef struct lp_controllers_config {
  uv_loop_t *loop;
  lp_kube_client *kube;    /* borrowed; must outlive the manager */
  lp_cloudprovider *cloud; /* borrowed */
  lp_metrics *metrics;     /* NULL = lp_metrics_default() */
  lp_ctrl_settings settings;
  int leader_elect;             /* 0: act at once (a single replica, or tests) */
  const char *leader_namespace; /* the Lease's namespace; NULL = $POD_NAMESPACE or "kube-system" */
  const char *leader_identity;  /* NULL = hostname + random suffix */
  /* the controllers to run, NULL-terminated (lp_controllers_default: every controller of the engine) */
  const lp_controller_def *const *controllers;
} lp_controllers_config;

/* NULL-terminated: nodeclass status, nodepool status, nodeclaim lifecycle, termination, garbage
 * collection, provisioner, node repair, drift, disruption (defs.c). */
extern const lp_controller_def *const lp_controllers_default[];

/* Starts the informers (and the campaign). Returns NULL with err "InvalidConfig" on bad leader
 * options. */
lp_controllers *lp_controllers_start(const lp_controllers_config *cfg, lp_error **err);

/* Non-zero once every informer has listed (stays so). */
int lp_controllers_synced(const lp_controllers *m);
/* Non-zero while the controllers run (leading, or no leader election, and every cache current; not
 * while they are paused for a relist). */
int lp_controllers_active(const lp_controllers *m);
/* Liveness: false only when leading with a wedged renew loop. */
int lp_controllers_healthy(const lp_controllers *m);
/* The shared view (tests drive it; controllers get it from lp_controller_env). */
lp_ctrl_env *lp_controllers_env(lp_controllers *m);

/* Stops: controllers' queues (no new reconcile; those in flight finish), the Lease released when held,
 * informers. on_done (may be NULL) runs once everything is released, never from inside this call. */
void lp_controllers_stop(lp_controllers *m, void (*on_done)(void *ud), void *ud);

#endif
