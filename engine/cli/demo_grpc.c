/* The demo's Cluster Autoscaler side: unary externalgrpc calls as the autoscaler makes them, gRPC over
 * h2c (curl with HTTP/2 prior knowledge), the messages packed by the same protobuf-c code the server
 * uses. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/demo.h"
#include "core/buf.h"
#include "externalgrpc.pb-c.h"

#define SERVICE          "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"
#define PB(name)         Clusterautoscaler__Cloudprovider__V1__Externalgrpc__##name
#define DESCRIPTOR(name) clusterautoscaler__cloudprovider__v1__externalgrpc__##name##__descriptor

typedef struct reply {
  lp_buf body;
  int status; /* grpc-status; -1 until the trailers came */
  char message[256];
} reply;

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  lp_buf_append(&((reply *)ud)->body, data, size * n);
  return size * n;
}

/* Headers and trailers alike: grpc-status and grpc-message may come in either. */
static size_t on_header(char *line, size_t size, size_t n, void *ud) {
  reply *r = ud;
  size_t len = size * n;
  if (len > 12 && strncasecmp(line, "grpc-status:", 12) == 0) r->status = atoi(line + 12);
  if (len > 13 && strncasecmp(line, "grpc-message:", 13) == 0) {
    size_t m = len - 13;
    while (m > 0 && (line[13 + m - 1] == '\r' || line[13 + m - 1] == '\n')) m--;
    const char *text = line + 13;
    while (m > 0 && *text == ' ') text++, m--;
    snprintf(r->message, sizeof r->message, "%.*s", (int)m, text);
  }
  return len;
}

/* Calls method with request; on grpc-status 0 unpacks the answer as out_desc into *out (caller frees
 * with protobuf_c_message_free_unpacked). Returns 0, or -1 with *error. */
static int call(demo *d, const char *method, const ProtobufCMessage *request,
                const ProtobufCMessageDescriptor *out_desc, ProtobufCMessage **out, const char **error) {
  static char error_text[320];
  size_t len = protobuf_c_message_get_packed_size(request);
  unsigned char *frame = malloc(len + 5);
  frame[0] = 0; /* not compressed */
  frame[1] = (unsigned char)(len >> 24), frame[2] = (unsigned char)(len >> 16);
  frame[3] = (unsigned char)(len >> 8), frame[4] = (unsigned char)len;
  protobuf_c_message_pack(request, frame + 5);
  char url[256];
  snprintf(url, sizeof url, "http://%s" SERVICE "%s", d->grpc, method);
  if (!d->curl) d->curl = curl_easy_init();
  CURL *c = d->curl;
  curl_easy_reset(c);
  struct curl_slist *headers = curl_slist_append(NULL, "content-type: application/grpc");
  headers = curl_slist_append(headers, "te: trailers");
  reply r = {.body = LP_BUF_INIT, .status = -1};
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, frame);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)(len + 5));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 15000L);
  /* one connection per call: curl's reuse of a prior-knowledge h2c connection after an easy reset
   * breaks its framing; the autoscaler's own client keeps one channel, which grpc-js tests cover */
  curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);
  curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  free(frame);
  int result = -1;
  if (rc != CURLE_OK) {
    snprintf(error_text, sizeof error_text, "%s: %s", method, curl_easy_strerror(rc));
  } else if (r.status != 0) {
    snprintf(error_text, sizeof error_text, "%s: grpc-status %d: %s", method, r.status, r.message);
  } else if (r.body.len < 5) {
    snprintf(error_text, sizeof error_text, "%s: an answer without a message", method);
  } else {
    *out = protobuf_c_message_unpack(out_desc, NULL, r.body.len - 5, (const uint8_t *)r.body.data + 5);
    if (*out)
      result = 0;
    else
      snprintf(error_text, sizeof error_text, "%s: the answer does not decode", method);
  }
  lp_buf_free(&r.body);
  *error = result == 0 ? NULL : error_text;
  return result;
}

int demo_grpc_node_groups(demo *d, char ids[][64], int max, int *count, const char **error) {
  PB(NodeGroupsRequest) req = CLUSTERAUTOSCALER__CLOUDPROVIDER__V1__EXTERNALGRPC__NODE_GROUPS_REQUEST__INIT;
  ProtobufCMessage *out = NULL;
  if (call(d, "NodeGroups", &req.base, &DESCRIPTOR(node_groups_response), &out, error) != 0) return -1;
  PB(NodeGroupsResponse) *resp = (PB(NodeGroupsResponse) *)out;
  *count = 0;
  for (size_t i = 0; i < resp->n_nodegroups && *count < max; i++)
    snprintf(ids[(*count)++], 64, "%s", resp->nodegroups[i]->id);
  protobuf_c_message_free_unpacked(out, NULL);
  return 0;
}

int demo_grpc_target_size(demo *d, const char *id, int *size, const char **error) {
  PB(NodeGroupTargetSizeRequest)
  req = CLUSTERAUTOSCALER__CLOUDPROVIDER__V1__EXTERNALGRPC__NODE_GROUP_TARGET_SIZE_REQUEST__INIT;
  req.id = (char *)id;
  ProtobufCMessage *out = NULL;
  if (call(d, "NodeGroupTargetSize", &req.base, &DESCRIPTOR(node_group_target_size_response), &out, error) !=
      0)
    return -1;
  *size = ((PB(NodeGroupTargetSizeResponse) *)out)->targetsize;
  protobuf_c_message_free_unpacked(out, NULL);
  return 0;
}

int demo_grpc_increase_size(demo *d, const char *id, int delta, const char **error) {
  PB(NodeGroupIncreaseSizeRequest)
  req = CLUSTERAUTOSCALER__CLOUDPROVIDER__V1__EXTERNALGRPC__NODE_GROUP_INCREASE_SIZE_REQUEST__INIT;
  req.id = (char *)id;
  req.delta = delta;
  ProtobufCMessage *out = NULL;
  if (call(d, "NodeGroupIncreaseSize", &req.base, &DESCRIPTOR(node_group_increase_size_response), &out,
           error) != 0)
    return -1;
  protobuf_c_message_free_unpacked(out, NULL);
  return 0;
}

int demo_grpc_refresh(demo *d, const char **error) {
  PB(RefreshRequest) req = CLUSTERAUTOSCALER__CLOUDPROVIDER__V1__EXTERNALGRPC__REFRESH_REQUEST__INIT;
  ProtobufCMessage *out = NULL;
  if (call(d, "Refresh", &req.base, &DESCRIPTOR(refresh_response), &out, error) != 0) return -1;
  protobuf_c_message_free_unpacked(out, NULL);
  return 0;
}

void demo_grpc_close(demo *d) {
  if (d->curl) curl_easy_cleanup(d->curl);
  d->curl = NULL;
}
