/* fuzz_externalgrpc: the request decoders of the externalgrpc CloudProvider service (engine/grpc/
 * externalgrpc*.c; README.md). The input's first byte picks a request message of externalgrpc.proto
 * (or a bare k8s v1.Pod), the rest is its bytes: they are unpacked with the descriptor the service's
 * handler uses (lp_xg_decode's protobuf_c_message_unpack), packed again, and a PricingPodPrice
 * request's pod (pod_bytes, else pod) goes through lp_externalgrpc_pod_json as the handler does. The
 * contract calls behind the handlers (a mapping's Lua) are not reached here.
 * libprotobuf-c 1.4.1 quirks are not findings: it accepts field number 0 on unpack, but what it packs
 * again then differs, so the re-packed bytes are not compared with the input. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "externalgrpc.pb-c.h"
#include "grpc/externalgrpc.h"

#define D(name) &clusterautoscaler__cloudprovider__v1__externalgrpc__##name##__descriptor

static const ProtobufCMessageDescriptor *const requests[] = {
    D(node_groups_request),
    D(node_group_for_node_request),
    D(pricing_node_price_request),
    D(pricing_pod_price_request),
    D(gpulabel_request),
    D(get_available_gputypes_request),
    D(cleanup_request),
    D(refresh_request),
    D(node_group_target_size_request),
    D(node_group_increase_size_request),
    D(node_group_delete_nodes_request),
    D(node_group_decrease_target_size_request),
    D(node_group_nodes_request),
    D(node_group_template_node_info_request),
    D(node_group_autoscaling_options_request),
};
#define NREQUESTS (sizeof requests / sizeof requests[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void pod(const uint8_t *bytes, size_t len) {
  json_t *p = lp_externalgrpc_pod_json(bytes, len);
  free(json_dumps(p, JSON_COMPACT));
  json_decref(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  size_t pick = data[0] % (NREQUESTS + 1);
  data++, size--;
  if (pick == NREQUESTS) {
    pod(data, size);
    return 0;
  }
  ProtobufCMessage *m = protobuf_c_message_unpack(requests[pick], NULL, size, data);
  if (!m) return 0;
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *out = malloc(n ? n : 1);
  if (!out) abort();
  if (protobuf_c_message_pack(m, out) != n) abort();
  free(out);
  if (requests[pick] == D(pricing_pod_price_request)) {
    const Clusterautoscaler__Cloudprovider__V1__Externalgrpc__PricingPodPriceRequest *r = (const void *)m;
    const ProtobufCBinaryData *bytes = r->pod_bytes.len ? &r->pod_bytes : &r->pod;
    pod(bytes->data, bytes->len);
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
