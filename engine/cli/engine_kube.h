/* The in-cluster controller part of `luaprov run`: where the Kubernetes API is (--kubeconfig, the
 * in-cluster service account, or the simulator of --sim), the CloudProvider over the mapping (with the
 * values of its settings), and the controller manager. Loop thread only. */
#ifndef LUAPROV_CLI_ENGINE_KUBE_H
#define LUAPROV_CLI_ENGINE_KUBE_H

#include <uv.h>

#include "controller/manager.h"
#include "script/host.h"

typedef struct engine_kube engine_kube;

typedef struct engine_kube_options {
  const char *kubeconfig;       /* --kubeconfig; NULL = in-cluster when KUBERNETES_SERVICE_HOST is set */
  const char *sim_server;       /* --sim: the simulator's URL (wins over the above) */
  int leader_elect;             /* --leader-elect */
  const char *cluster_id;       /* --cluster-id / $CLUSTER_ID */
  const json_t *provider_flags; /* --<setting> VALUE for the mapping's settings (contract/settings.h) */
  int sim;                      /* --sim: settings default to their simulator values */
  const char *cloud_endpoint;   /* one URL for every API of the cloud (the simulator); NULL = the real ones */
  const char *ca_file;          /* extra trust for the HTTP client, as the engine's */
  lp_ctrl_settings settings;    /* --config */
} engine_kube_options;

/* Non-zero when opts name a Kubernetes API (a kubeconfig, the simulator, or the in-cluster variables). */
int engine_kube_wanted(const engine_kube_options *opts);

/* Starts the client, the CloudProvider and the manager on scripts (borrowed; must outlive the result
 * until engine_kube_stop completes). Returns NULL after logging why (unreadable kubeconfig, missing
 * cluster ID or a required setting of the mapping, invalid leader options). */
engine_kube *engine_kube_start(uv_loop_t *loop, lp_script_host *scripts, const engine_kube_options *opts);

/* Caches synced (readiness) and liveness of the leader election. */
int engine_kube_ready(const engine_kube *k);
int engine_kube_healthy(const engine_kube *k);

/* Refuses new CloudProvider calls (ShuttingDown): call it before the script host closes. */
void engine_kube_shutdown_cloud(engine_kube *k);

/* Stops the controllers (reconciles in flight finish; they end sooner once the script host cancels
 * its calls), releases the Lease, closes the client and frees everything, then on_done. */
void engine_kube_stop(engine_kube *k, void (*on_done)(void *ud), void *ud);

#endif
