/* The Cluster Autoscaler's externalgrpc CloudProvider service (docs/bizfly.md, externalgrpc.proto) on an
 * lp_grpc_server: one handler per method path decodes the request with protobuf-c, asks the NodeGroup
 * contract (contract/nodegroup.h) and encodes the answer.
 *
 * Answers from the snapshot (NodeGroups, NodeGroupForNode, NodeGroupTargetSize, NodeGroupNodes) need
 * no script call; before the first snapshot they refresh first. NodeGroupGetOptions, PricingNodePrice
 * and PricingPodPrice ask the mapping's optional get_options, node_price and pod_price
 * (lp_ng_get_options, lp_ng_node_price, lp_ng_pod_price) and answer UNIMPLEMENTED (the client then
 * uses its defaults) when the mapping has none, as does NodeGroupTemplateNodeInfo when the mapping
 * has no template for the group; never OK with an empty body. Statuses: undecodable request bytes
 * and wrong deltas INVALID_ARGUMENT; an unknown node group NOT_FOUND; a request that does not fit
 * the group now (above max, below the node count, a node of another group) FAILED_PRECONDITION with
 * the upstream provider's wording; a mapping that broke its contract or failed as a script INTERNAL;
 * a cloud failure UNAVAILABLE with its code and message. Loop thread only. */
#ifndef LUAPROV_GRPC_EXTERNALGRPC_H
#define LUAPROV_GRPC_EXTERNALGRPC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "contract/nodegroup.h"
#include "grpc/server.h"

#define LP_EXTERNALGRPC_SERVICE "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"

typedef struct lp_externalgrpc lp_externalgrpc;

/* Registers the 15 methods on server (before it listens). ng is borrowed and must outlive the
 * service. */
lp_externalgrpc *lp_externalgrpc_new(lp_grpc_server *server, lp_nodegroups *ng);
/* From now on calls are answered UNAVAILABLE at once (shutdown); calls in flight finish. */
void lp_externalgrpc_stop(lp_externalgrpc *svc);
/* Calls received and not yet answered. */
size_t lp_externalgrpc_in_flight(const lp_externalgrpc *svc);
/* Frees the service once the server that routes to it is closed. */
void lp_externalgrpc_free(lp_externalgrpc *svc);

/* The gRPC status for an lp_error code of the NodeGroup contract. */
int lp_externalgrpc_status(const char *code);

/* Encodes a Kubernetes v1.Node given as JSON (metadata.name/uid/labels/annotations, spec.providerID/
 * podCIDR/unschedulable/taints, status.capacity/allocatable/phase/conditions/addresses/nodeInfo) as
 * the k8s.io.api.core.v1.Node protobuf message. Returns malloc'd bytes, their count in *len. */
uint8_t *lp_externalgrpc_node_bytes(const json_t *node, size_t *len);

/* Decodes a Kubernetes v1.Pod (k8s_core.proto) into {name, namespace, labels, node_name, requests,
 * limits, containers = [{name, requests, limits}]}: the containers' quantities as strings, the pod's
 * requests and limits as numbers of base units (cores, bytes): the containers' sum, or the largest
 * init container when that is larger. NULL when the bytes are not a Pod. */
json_t *lp_externalgrpc_pod_json(const uint8_t *bytes, size_t len);

#endif
