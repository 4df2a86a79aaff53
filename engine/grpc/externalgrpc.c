/* The externalgrpc CloudProvider service: request bytes in, the NodeGroup contract asked, response
 * bytes out. See externalgrpc.h for the statuses. */
#include "grpc/externalgrpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "externalgrpc_internal.h"

#define LOGGER "engine.externalgrpc"

pending *lp_xg_pending_new(lp_externalgrpc *svc, lp_grpc_call *call) {
  pending *p = lp_xcalloc(1, sizeof *p);
  p->svc = svc;
  p->call = call;
  svc->in_flight++;
  return p;
}

void lp_xg_pending_free(pending *p) {
  p->svc->in_flight--;
  free(p->bytes);
  free(p);
}

int lp_externalgrpc_status(const char *code) {
  static const struct {
    const char *code;
    int status;
  } table[] = {
      {"InvalidArgument", LP_GRPC_INVALID_ARGUMENT},
      {"FailedPrecondition", LP_GRPC_FAILED_PRECONDITION},
      {"NotFound", LP_GRPC_NOT_FOUND},
      {"Unimplemented", LP_GRPC_UNIMPLEMENTED},
      {"Contract", LP_GRPC_INTERNAL},
      {"ScriptError", LP_GRPC_INTERNAL},
      {"Budget", LP_GRPC_INTERNAL},
      {"Memory", LP_GRPC_INTERNAL},
      {"Syntax", LP_GRPC_INTERNAL},
  };
  for (size_t i = 0; code && i < sizeof table / sizeof table[0]; i++)
    if (strcmp(code, table[i].code) == 0) return table[i].status;
  return LP_GRPC_UNAVAILABLE; /* the cloud or the engine is not available now: the client retries */
}

/* The contract's own rejections keep the upstream wording; failures name their code. */
void lp_xg_fail_with(lp_grpc_call *call, const lp_error *err) {
  int status = lp_externalgrpc_status(err->code);
  if (status == LP_GRPC_UNAVAILABLE || status == LP_GRPC_INTERNAL) {
    char *message = lp_xasprintf("%s: %s", err->code, err->message);
    lp_grpc_fail(call, status, message);
    free(message);
  } else {
    lp_grpc_fail(call, status, err->message);
  }
}

void lp_xg_respond(lp_grpc_call *call, const ProtobufCMessage *message) {
  uint8_t small[512];
  size_t n = protobuf_c_message_get_packed_size(message);
  uint8_t *buf = n <= sizeof small ? small : lp_xmalloc(n);
  protobuf_c_message_pack(message, buf);
  lp_grpc_respond(call, buf, n);
  if (buf != small) free(buf);
}

static void respond_empty(lp_grpc_call *call) {
  static const uint8_t none[1];
  lp_grpc_respond(call, none, 0);
}

/* Decodes the request or answers INVALID_ARGUMENT; the caller frees with protobuf_c_message_free_unpacked. */
ProtobufCMessage *lp_xg_decode(lp_grpc_call *call, const ProtobufCMessageDescriptor *d, const uint8_t *msg,
                               size_t len) {
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, msg);
  if (!m) {
    char *text = lp_xasprintf("cannot decode the request as %s (%zu bytes)", d->name, len);
    lp_grpc_fail(call, LP_GRPC_INVALID_ARGUMENT, text);
    free(text);
  }
  return m;
}

/* Shutting down: new calls are turned away at once. */
int lp_xg_refused(lp_externalgrpc *svc, lp_grpc_call *call) {
  if (!svc->stopped) return 0;
  lp_grpc_fail(call, LP_GRPC_UNAVAILABLE, "luaprov is shutting down");
  return 1;
}

/* ---- answers from the snapshot ----------------------------------------------------------- */

static void snapshot_ready(lp_error *err, void *ud) {
  pending *p = ud;
  if (lp_ng_has_snapshot(p->svc->ng))
    p->retry(p->call, p->bytes, p->len, p->svc);
  else if (err)
    lp_xg_fail_with(p->call, err);
  else
    lp_grpc_fail(p->call, LP_GRPC_UNAVAILABLE, "no node group snapshot yet");
  lp_error_free(err);
  lp_xg_pending_free(p);
}

/* Before the first snapshot, refreshes and runs the handler again; returns 1 when it did so. */
static int wait_for_snapshot(lp_externalgrpc *svc, lp_grpc_call *call, lp_grpc_handler handler,
                             const uint8_t *msg, size_t len) {
  if (lp_ng_has_snapshot(svc->ng)) return 0;
  pending *p = lp_xg_pending_new(svc, call);
  p->retry = handler;
  p->bytes = lp_xmalloc(len ? len : 1);
  memcpy(p->bytes, msg, len);
  p->len = len;
  lp_ng_refresh(svc->ng, snapshot_ready, p);
  return 1;
}

static void fill_group(PB(NodeGroup) * out, const lp_ng_group *g) {
  PB_INIT(node_group)(out);
  out->id = (char *)g->id;
  out->minsize = g->min_size;
  out->maxsize = g->max_size;
  out->debug = (char *)g->debug;
}

static void node_groups(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  ProtobufCMessage *req = lp_xg_decode(call, &PB_DESC(node_groups_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  if (wait_for_snapshot(svc, call, node_groups, msg, len)) return;
  size_t n = lp_ng_count(svc->ng);
  PB(NodeGroup) *groups = lp_xcalloc(n ? n : 1, sizeof *groups);
  PB(NodeGroup) **list = lp_xcalloc(n ? n : 1, sizeof *list);
  for (size_t i = 0; i < n; i++) {
    fill_group(&groups[i], lp_ng_at(svc->ng, i));
    list[i] = &groups[i];
  }
  PB(NodeGroupsResponse) res;
  PB_INIT(node_groups_response)(&res);
  res.n_nodegroups = n;
  res.nodegroups = list;
  lp_xg_respond(call, &res.base);
  free(list);
  free(groups);
}

static void node_group_for_node(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupForNodeRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(node_group_for_node_request), msg, len);
  if (!req) return;
  if (!req->node) {
    lp_grpc_fail(call, LP_GRPC_INVALID_ARGUMENT, "request fields were nil");
  } else if (!wait_for_snapshot(svc, call, node_group_for_node, msg, len)) {
    PB(NodeGroup) group;
    PB_INIT(node_group)(&group); /* id "" = not managed by luaprov */
    const lp_ng_group *g = lp_ng_for_node(svc->ng, req->node->providerid);
    if (g) fill_group(&group, g);
    PB(NodeGroupForNodeResponse) res;
    PB_INIT(node_group_for_node_response)(&res);
    res.nodegroup = &group;
    lp_xg_respond(call, &res.base);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* The group named by the request, or NOT_FOUND. */
static const lp_ng_group *group_or_fail(lp_externalgrpc *svc, lp_grpc_call *call, const char *id) {
  const lp_ng_group *g = lp_ng_find(svc->ng, id);
  if (!g) {
    char *text = lp_xasprintf("NodeGroup \"%s\", not found", id ? id : "");
    lp_grpc_fail(call, LP_GRPC_NOT_FOUND, text);
    free(text);
  }
  return g;
}

static void target_size(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupTargetSizeRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(node_group_target_size_request), msg, len);
  if (!req) return;
  const lp_ng_group *g;
  if (!wait_for_snapshot(svc, call, target_size, msg, len) && (g = group_or_fail(svc, call, req->id))) {
    PB(NodeGroupTargetSizeResponse) res;
    PB_INIT(node_group_target_size_response)(&res);
    res.targetsize = g->target_size;
    lp_xg_respond(call, &res.base);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void group_nodes(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupNodesRequest) *req = (void *)lp_xg_decode(call, &PB_DESC(node_group_nodes_request), msg, len);
  if (!req) return;
  const lp_ng_group *g;
  if (!wait_for_snapshot(svc, call, group_nodes, msg, len) && (g = group_or_fail(svc, call, req->id))) {
    size_t n = g->ninstances;
    PB(Instance) *instances = lp_xcalloc(n ? n : 1, sizeof *instances);
    PB(Instance) **list = lp_xcalloc(n ? n : 1, sizeof *list);
    PB(InstanceStatus) *statuses = lp_xcalloc(n ? n : 1, sizeof *statuses);
    PB(InstanceErrorInfo) *errors = lp_xcalloc(n ? n : 1, sizeof *errors);
    for (size_t i = 0; i < n; i++) {
      const lp_ng_instance *in = &g->instances[i];
      PB_INIT(instance)(&instances[i]);
      PB_INIT(instance_status)(&statuses[i]);
      instances[i].id = (char *)in->provider_id;
      instances[i].status = &statuses[i];
      statuses[i].instancestate = (PB(InstanceStatus__InstanceState))in->state;
      if (in->error_class != LP_NG_NO_ERROR) { /* no errorInfo at all when there is no error */
        PB_INIT(instance_error_info)(&errors[i]);
        errors[i].errorcode = (char *)in->error_code;
        errors[i].errormessage = (char *)in->error_message;
        errors[i].instanceerrorclass = in->error_class;
        statuses[i].errorinfo = &errors[i];
      }
      list[i] = &instances[i];
    }
    PB(NodeGroupNodesResponse) res;
    PB_INIT(node_group_nodes_response)(&res);
    res.n_instances = n;
    res.instances = list;
    lp_xg_respond(call, &res.base);
    free(errors);
    free(statuses);
    free(list);
    free(instances);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- operations ---------------------------------------------------------------------------- */

static void operation_done(lp_error *err, void *ud) {
  pending *p = ud;
  if (err)
    lp_xg_fail_with(p->call, err);
  else
    respond_empty(p->call);
  lp_error_free(err);
  lp_xg_pending_free(p);
}

static void refresh(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  ProtobufCMessage *req = lp_xg_decode(call, &PB_DESC(refresh_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  lp_ng_refresh(svc->ng, operation_done, lp_xg_pending_new(svc, call));
}

static void increase_size(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupIncreaseSizeRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(node_group_increase_size_request), msg, len);
  if (!req) return;
  lp_ng_increase_size(svc->ng, req->id, req->delta, operation_done, lp_xg_pending_new(svc, call));
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void decrease_target_size(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupDecreaseTargetSizeRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(node_group_decrease_target_size_request), msg, len);
  if (!req) return;
  lp_ng_decrease_target_size(svc->ng, req->id, req->delta, operation_done, lp_xg_pending_new(svc, call));
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void delete_nodes(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupDeleteNodesRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(node_group_delete_nodes_request), msg, len);
  if (!req) return;
  json_t *nodes = json_array();
  for (size_t i = 0; i < req->n_nodes; i++) {
    const PB(ExternalGrpcNode) *n = req->nodes[i];
    json_t *labels = json_object();
    for (size_t k = 0; k < n->n_labels; k++)
      if (n->labels[k]->key && n->labels[k]->value)
        json_object_set_new(labels, n->labels[k]->key, json_string(n->labels[k]->value));
    json_array_append_new(nodes, json_pack("{s:s?, s:s?, s:o}", "provider_id", n->providerid, "name", n->name,
                                           "labels", labels));
  }
  lp_ng_delete_nodes(svc->ng, req->id, nodes, operation_done, lp_xg_pending_new(svc, call));
  json_decref(nodes);
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void template_done(json_t *node, lp_error *err, void *ud) {
  pending *p = ud;
  if (err) {
    lp_xg_fail_with(p->call, err);
  } else {
    size_t n;
    uint8_t *bytes = lp_externalgrpc_node_bytes(node, &n);
    PB(NodeGroupTemplateNodeInfoResponse) res;
    PB_INIT(node_group_template_node_info_response)(&res);
    res.nodebytes.data = bytes; /* CA >= 1.35 */
    res.nodebytes.len = n;
    res.nodeinfo = res.nodebytes; /* CA <= 1.34: the same bytes as an embedded v1.Node */
    lp_xg_respond(p->call, &res.base);
    free(bytes);
  }
  json_decref(node);
  lp_error_free(err);
  lp_xg_pending_free(p);
}

static void template_node_info(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupTemplateNodeInfoRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(node_group_template_node_info_request), msg, len);
  if (!req) return;
  lp_ng_template_node(svc->ng, req->id, template_done, lp_xg_pending_new(svc, call));
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- constant answers ---------------------------------------------------------------------- */

static void gpu_label(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  ProtobufCMessage *req = lp_xg_decode(call, &PB_DESC(gpulabel_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  PB(GPULabelResponse) res;
  PB_INIT(gpulabel_response)(&res);
  res.label = lp_nodegroups_gpu_label(svc->ng);
  lp_xg_respond(call, &res.base);
  free(res.label);
}

/* Bizfly names no GPU types (the upstream provider returns nil): an empty map. */
static void gpu_types(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  if (lp_xg_refused(ud, call)) return;
  ProtobufCMessage *req = lp_xg_decode(call, &PB_DESC(get_available_gputypes_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  respond_empty(call);
}

/* Nothing to clean up: the engine owns its resources and keeps running. */
static void cleanup(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  if (lp_xg_refused(ud, call)) return;
  ProtobufCMessage *req = lp_xg_decode(call, &PB_DESC(cleanup_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  respond_empty(call);
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

lp_externalgrpc *lp_externalgrpc_new(lp_grpc_server *server, lp_nodegroups *ng) {
  static const struct {
    const char *method;
    lp_grpc_handler handler;
  } methods[] = {
      {"NodeGroups", node_groups},
      {"NodeGroupForNode", node_group_for_node},
      {"PricingNodePrice", lp_xg_node_price},
      {"PricingPodPrice", lp_xg_pod_price},
      {"GPULabel", gpu_label},
      {"GetAvailableGPUTypes", gpu_types},
      {"Cleanup", cleanup},
      {"Refresh", refresh},
      {"NodeGroupTargetSize", target_size},
      {"NodeGroupIncreaseSize", increase_size},
      {"NodeGroupDeleteNodes", delete_nodes},
      {"NodeGroupDecreaseTargetSize", decrease_target_size},
      {"NodeGroupNodes", group_nodes},
      {"NodeGroupTemplateNodeInfo", template_node_info},
      {"NodeGroupGetOptions", lp_xg_get_options},
  };
  lp_externalgrpc *svc = lp_xcalloc(1, sizeof *svc);
  svc->ng = ng;
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    char path[160];
    snprintf(path, sizeof path, "%s%s", LP_EXTERNALGRPC_SERVICE, methods[i].method);
    lp_grpc_server_handle(server, path, methods[i].handler, svc);
  }
  return svc;
}

void lp_externalgrpc_stop(lp_externalgrpc *svc) {
  svc->stopped = 1;
}

size_t lp_externalgrpc_in_flight(const lp_externalgrpc *svc) {
  return svc->in_flight;
}

void lp_externalgrpc_free(lp_externalgrpc *svc) {
  if (svc && svc->in_flight)
    lp_warn(LOGGER, "externalgrpc service freed with calls in flight", LPF_INT("in_flight", svc->in_flight));
  free(svc);
}
