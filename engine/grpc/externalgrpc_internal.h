/* Internal to the externalgrpc service (externalgrpc*.c): the service state, a call waiting for the
 * contract, and the helpers and handlers shared between externalgrpc.c and externalgrpc_options.c. */
#ifndef LUAPROV_GRPC_EXTERNALGRPC_INTERNAL_H
#define LUAPROV_GRPC_EXTERNALGRPC_INTERNAL_H

#include "externalgrpc.pb-c.h"
#include "grpc/externalgrpc.h"

/* The generated names carry the whole package. */
#define PB(type)      Clusterautoscaler__Cloudprovider__V1__Externalgrpc__##type
#define PB_DESC(name) clusterautoscaler__cloudprovider__v1__externalgrpc__##name##__descriptor
#define PB_INIT(name) clusterautoscaler__cloudprovider__v1__externalgrpc__##name##__init

struct lp_externalgrpc {
  lp_nodegroups *ng;
  int stopped;
  size_t in_flight;
};

/* A call waiting for the contract. */
typedef struct pending {
  lp_externalgrpc *svc;
  lp_grpc_call *call;
  lp_grpc_handler retry; /* run again once a snapshot exists */
  uint8_t *bytes;
  size_t len;
} pending;

pending *lp_xg_pending_new(lp_externalgrpc *svc, lp_grpc_call *call);
void lp_xg_pending_free(pending *p);
/* The contract's own rejections keep the upstream wording; failures name their code. */
void lp_xg_fail_with(lp_grpc_call *call, const lp_error *err);
void lp_xg_respond(lp_grpc_call *call, const ProtobufCMessage *message);
/* Decodes the request or answers INVALID_ARGUMENT; the caller frees with protobuf_c_message_free_unpacked. */
ProtobufCMessage *lp_xg_decode(lp_grpc_call *call, const ProtobufCMessageDescriptor *d, const uint8_t *msg,
                               size_t len);
/* Shutting down: new calls are turned away at once (returns 1). */
int lp_xg_refused(lp_externalgrpc *svc, lp_grpc_call *call);

/* The optional methods (externalgrpc_options.c): NodeGroupGetOptions, PricingNodePrice, PricingPodPrice. */
void lp_xg_get_options(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud);
void lp_xg_node_price(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud);
void lp_xg_pod_price(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud);

#endif
