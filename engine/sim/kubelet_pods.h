/* The simulated kubelet's pods (engine/sim/kubelet.c): what a kubelet does for the pods bound to its
 * Node, over an informer of every pod. Internal to engine/sim. Loop thread only. */
#ifndef LUAPROV_SIM_KUBELET_PODS_H
#define LUAPROV_SIM_KUBELET_PODS_H

#include <jansson.h>

#include "core/cache.h"
#include "kube/client.h"

typedef struct kubelet_pods kubelet_pods;

/* Starts the pod informer on kube (borrowed, outlives the pods). clock gives wall time. */
kubelet_pods *kubelet_pods_start(lp_kube_client *kube, lp_clock_fn clock, void *clock_ud);

/* One pass over the cached pods: those bound to a Node named in live_nodes (borrowed: node name ->
 * {"ip": the Node's InternalIP}) are set Running, those being deleted there are removed. Pods of other
 * Nodes are left alone. Requests already in flight for a pod are not repeated. */
void kubelet_pods_sync(kubelet_pods *p, const json_t *live_nodes);

/* Non-zero once the informer has listed every pod. */
int kubelet_pods_synced(const kubelet_pods *p);

/* Pods set Running, and terminating pods removed, so far. */
void kubelet_pods_counts(const kubelet_pods *p, size_t *started, size_t *removed);

/* Stops the informer; frees p once its requests have returned, then calls on_stopped (may be NULL). */
void kubelet_pods_stop(kubelet_pods *p, void (*on_stopped)(void *ud), void *ud);

#endif
