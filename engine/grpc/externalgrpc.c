/* The externalgrpc CloudProvider service: request bytes in, the NodeGroup contract asked, response
 * bytes out. See externalgrpc.h for the statuses. */
#include "grpc/externalgrpc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "externalgrpc.pb-c.h"

#define LOGGER "engine.externalgrpc"

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

static pending *pending_new(lp_externalgrpc *svc, lp_grpc_call *call) {
  pending *p = lp_xcalloc(1, sizeof *p);
  p->svc = svc;
  p->call = call;
  svc->in_flight++;
  return p;
}

static void pending_free(pending *p) {
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
static void fail_with(lp_grpc_call *call, const lp_error *err) {
  int status = lp_externalgrpc_status(err->code);
  if (status == LP_GRPC_UNAVAILABLE || status == LP_GRPC_INTERNAL) {
    char *message = lp_xasprintf("%s: %s", err->code, err->message);
    lp_grpc_fail(call, status, message);
    free(message);
  } else {
    lp_grpc_fail(call, status, err->message);
  }
}

static void respond(lp_grpc_call *call, const ProtobufCMessage *message) {
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
static ProtobufCMessage *decode(lp_grpc_call *call, const ProtobufCMessageDescriptor *d, const uint8_t *msg,
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
static int refused(lp_externalgrpc *svc, lp_grpc_call *call) {
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
    fail_with(p->call, err);
  else
    lp_grpc_fail(p->call, LP_GRPC_UNAVAILABLE, "no node group snapshot yet");
  lp_error_free(err);
  pending_free(p);
}

/* Before the first snapshot, refreshes and runs the handler again; returns 1 when it did so. */
static int wait_for_snapshot(lp_externalgrpc *svc, lp_grpc_call *call, lp_grpc_handler handler,
                             const uint8_t *msg, size_t len) {
  if (lp_ng_has_snapshot(svc->ng)) return 0;
  pending *p = pending_new(svc, call);
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
  if (refused(svc, call)) return;
  ProtobufCMessage *req = decode(call, &PB_DESC(node_groups_request), msg, len);
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
  respond(call, &res.base);
  free(list);
  free(groups);
}

static void node_group_for_node(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(NodeGroupForNodeRequest) *req = (void *)decode(call, &PB_DESC(node_group_for_node_request), msg, len);
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
    respond(call, &res.base);
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
  if (refused(svc, call)) return;
  PB(NodeGroupTargetSizeRequest) *req =
      (void *)decode(call, &PB_DESC(node_group_target_size_request), msg, len);
  if (!req) return;
  const lp_ng_group *g;
  if (!wait_for_snapshot(svc, call, target_size, msg, len) && (g = group_or_fail(svc, call, req->id))) {
    PB(NodeGroupTargetSizeResponse) res;
    PB_INIT(node_group_target_size_response)(&res);
    res.targetsize = g->target_size;
    respond(call, &res.base);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void group_nodes(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(NodeGroupNodesRequest) *req = (void *)decode(call, &PB_DESC(node_group_nodes_request), msg, len);
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
    respond(call, &res.base);
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
    fail_with(p->call, err);
  else
    respond_empty(p->call);
  lp_error_free(err);
  pending_free(p);
}

static void refresh(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  ProtobufCMessage *req = decode(call, &PB_DESC(refresh_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  lp_ng_refresh(svc->ng, operation_done, pending_new(svc, call));
}

static void increase_size(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(NodeGroupIncreaseSizeRequest) *req =
      (void *)decode(call, &PB_DESC(node_group_increase_size_request), msg, len);
  if (!req) return;
  lp_ng_increase_size(svc->ng, req->id, req->delta, operation_done, pending_new(svc, call));
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void decrease_target_size(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(NodeGroupDecreaseTargetSizeRequest) *req =
      (void *)decode(call, &PB_DESC(node_group_decrease_target_size_request), msg, len);
  if (!req) return;
  lp_ng_decrease_target_size(svc->ng, req->id, req->delta, operation_done, pending_new(svc, call));
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void delete_nodes(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(NodeGroupDeleteNodesRequest) *req =
      (void *)decode(call, &PB_DESC(node_group_delete_nodes_request), msg, len);
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
  lp_ng_delete_nodes(svc->ng, req->id, nodes, operation_done, pending_new(svc, call));
  json_decref(nodes);
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void template_done(json_t *node, lp_error *err, void *ud) {
  pending *p = ud;
  if (err) {
    fail_with(p->call, err);
  } else {
    size_t n;
    uint8_t *bytes = lp_externalgrpc_node_bytes(node, &n);
    PB(NodeGroupTemplateNodeInfoResponse) res;
    PB_INIT(node_group_template_node_info_response)(&res);
    res.nodebytes.data = bytes; /* CA >= 1.35 */
    res.nodebytes.len = n;
    res.nodeinfo = res.nodebytes; /* CA <= 1.34: the same bytes as an embedded v1.Node */
    respond(p->call, &res.base);
    free(bytes);
  }
  json_decref(node);
  lp_error_free(err);
  pending_free(p);
}

static void template_node_info(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(NodeGroupTemplateNodeInfoRequest) *req =
      (void *)decode(call, &PB_DESC(node_group_template_node_info_request), msg, len);
  if (!req) return;
  lp_ng_template_node(svc->ng, req->id, template_done, pending_new(svc, call));
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- constant answers ---------------------------------------------------------------------- */

static void gpu_label(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  ProtobufCMessage *req = decode(call, &PB_DESC(gpulabel_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  PB(GPULabelResponse) res;
  PB_INIT(gpulabel_response)(&res);
  res.label = lp_nodegroups_gpu_label(svc->ng);
  respond(call, &res.base);
  free(res.label);
}

/* Bizfly names no GPU types (the upstream provider returns nil): an empty map. */
static void gpu_types(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  if (refused(ud, call)) return;
  ProtobufCMessage *req = decode(call, &PB_DESC(get_available_gputypes_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  respond_empty(call);
}

/* Nothing to clean up: the engine owns its resources and keeps running. */
static void cleanup(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  if (refused(ud, call)) return;
  ProtobufCMessage *req = decode(call, &PB_DESC(cleanup_request), msg, len);
  if (!req) return;
  protobuf_c_message_free_unpacked(req, NULL);
  respond_empty(call);
}

/* ---- the optional methods: the mapping's get_options, node_price and pod_price ------------- */

/* UNIMPLEMENTED (code 12) when the mapping has no such function: the client reads it as "use your
 * defaults". */

#define K8S_DURATION(name) k8s__io__apimachinery__pkg__apis__meta__v1__duration__##name

static double seconds_of(const Google__Protobuf__Duration *d,
                         const K8s__Io__Apimachinery__Pkg__Apis__Meta__V1__Duration *legacy) {
  if (d) return (double)d->seconds + d->nanos / 1e9;
  if (legacy) return (double)legacy->duration / 1e9;
  return 0;
}

/* The defaults the client sent, as the contract reads them (durations in seconds). */
static json_t *options_json(const PB(NodeGroupAutoscalingOptions) * o) {
  if (!o) return json_object();
  return json_pack(
      "{s:f, s:f, s:f, s:f, s:f, s:b, s:b}", "scale_down_utilization_threshold",
      o->scaledownutilizationthreshold, "scale_down_gpu_utilization_threshold",
      o->scaledowngpuutilizationthreshold, "scale_down_unneeded_time",
      seconds_of(o->scaledownunneededduration, o->scaledownunneededtime), "scale_down_unready_time",
      seconds_of(o->scaledownunreadyduration, o->scaledownunreadytime), "max_node_provision_time",
      seconds_of(o->maxnodeprovisionduration, o->maxnodeprovisiontime), "zero_or_max_node_scaling",
      o->zeroormaxnodescaling, "ignore_daemon_sets_utilization", o->ignoredaemonsetsutilization);
}

typedef struct durations {
  Google__Protobuf__Duration google;
  K8s__Io__Apimachinery__Pkg__Apis__Meta__V1__Duration legacy;
} durations;

/* Both encodings: CA >= 1.35 reads the google Duration, CA <= 1.34 the meta.v1.Duration (and
 * dereferences it without a nil check, so it is always sent). */
static void duration_set(durations *d, const json_t *options, const char *name) {
  double s = json_number_value(json_object_get(options, name));
  google__protobuf__duration__init(&d->google);
  K8S_DURATION(init)(&d->legacy);
  d->google.seconds = (int64_t)s;
  d->google.nanos = (int32_t)llround((s - (double)d->google.seconds) * 1e9);
  if (d->google.nanos >= 1000000000) {
    d->google.seconds++;
    d->google.nanos -= 1000000000;
  }
  d->legacy.has_duration = 1;
  d->legacy.duration = d->google.seconds * 1000000000 + d->google.nanos;
}

static void options_done(json_t *options, lp_error *err, void *ud) {
  pending *p = ud;
  if (err) {
    fail_with(p->call, err);
  } else {
    durations unneeded, unready, provision;
    duration_set(&unneeded, options, "scale_down_unneeded_time");
    duration_set(&unready, options, "scale_down_unready_time");
    duration_set(&provision, options, "max_node_provision_time");
    PB(NodeGroupAutoscalingOptions) o;
    PB_INIT(node_group_autoscaling_options)(&o);
    o.scaledownutilizationthreshold =
        json_number_value(json_object_get(options, "scale_down_utilization_threshold"));
    o.scaledowngpuutilizationthreshold =
        json_number_value(json_object_get(options, "scale_down_gpu_utilization_threshold"));
    o.zeroormaxnodescaling = json_is_true(json_object_get(options, "zero_or_max_node_scaling"));
    o.ignoredaemonsetsutilization = json_is_true(json_object_get(options, "ignore_daemon_sets_utilization"));
    o.scaledownunneededduration = &unneeded.google;
    o.scaledownunneededtime = &unneeded.legacy;
    o.scaledownunreadyduration = &unready.google;
    o.scaledownunreadytime = &unready.legacy;
    o.maxnodeprovisionduration = &provision.google;
    o.maxnodeprovisiontime = &provision.legacy;
    PB(NodeGroupAutoscalingOptionsResponse) res;
    PB_INIT(node_group_autoscaling_options_response)(&res);
    res.nodegroupautoscalingoptions = &o;
    respond(p->call, &res.base);
  }
  json_decref(options);
  lp_error_free(err);
  pending_free(p);
}

static void get_options(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(NodeGroupAutoscalingOptionsRequest) *req =
      (void *)decode(call, &PB_DESC(node_group_autoscaling_options_request), msg, len);
  if (!req) return;
  json_t *defaults = options_json(req->defaults);
  lp_ng_get_options(svc->ng, req->id, defaults, options_done, pending_new(svc, call));
  json_decref(defaults);
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* RFC 3339 in UTC, the fraction only when there is one; NULL for an absent time. */
static char *rfc3339(int64_t seconds, int32_t nanos, int present) {
  if (!present) return NULL;
  time_t t = (time_t)seconds;
  struct tm tm;
  if (!gmtime_r(&t, &tm)) return NULL;
  char text[64], fraction[16] = "";
  if (nanos > 0 && nanos < 1000000000) {
    snprintf(fraction, sizeof fraction, ".%09d", nanos);
    size_t n = strlen(fraction);
    while (n > 2 && fraction[n - 1] == '0') fraction[--n] = '\0'; /* ".5", not ".500000000" */
  }
  strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  return lp_xasprintf("%s%sZ", text, fraction);
}

/* The current Timestamp field, else the legacy meta.v1.Time one. */
static char *time_of(const Google__Protobuf__Timestamp *ts,
                     const K8s__Io__Apimachinery__Pkg__Apis__Meta__V1__Time *legacy) {
  if (ts) return rfc3339(ts->seconds, ts->nanos, 1);
  if (legacy) return rfc3339(legacy->seconds, legacy->nanos, 1);
  return NULL;
}

static void price_done(json_t *price, lp_error *err, void *ud) {
  pending *p = ud;
  if (err) {
    fail_with(p->call, err);
  } else {
    PB(PricingNodePriceResponse) res; /* the pod's answer has the same one field */
    PB_INIT(pricing_node_price_response)(&res);
    res.price = json_number_value(price);
    respond(p->call, &res.base);
  }
  json_decref(price);
  lp_error_free(err);
  pending_free(p);
}

static void node_price(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(PricingNodePriceRequest) *req = (void *)decode(call, &PB_DESC(pricing_node_price_request), msg, len);
  if (!req) return;
  json_t *node = json_object(), *labels = json_object(), *annotations = json_object();
  const PB(ExternalGrpcNode) *n = req->node;
  for (size_t k = 0; n && k < n->n_labels; k++)
    if (n->labels[k]->key && n->labels[k]->value)
      json_object_set_new(labels, n->labels[k]->key, json_string(n->labels[k]->value));
  for (size_t k = 0; n && k < n->n_annotations; k++)
    if (n->annotations[k]->key && n->annotations[k]->value)
      json_object_set_new(annotations, n->annotations[k]->key, json_string(n->annotations[k]->value));
  json_object_set_new(node, "name", json_string(n && n->name ? n->name : ""));
  json_object_set_new(node, "provider_id", json_string(n && n->providerid ? n->providerid : ""));
  json_object_set_new(node, "labels", labels);
  json_object_set_new(node, "annotations", annotations);
  char *start = time_of(req->starttimestamp, req->starttime), *end = time_of(req->endtimestamp, req->endtime);
  lp_ng_node_price(svc->ng, node, start, end, price_done, pending_new(svc, call));
  free(start);
  free(end);
  json_decref(node);
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void pod_price(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (refused(svc, call)) return;
  PB(PricingPodPriceRequest) *req = (void *)decode(call, &PB_DESC(pricing_pod_price_request), msg, len);
  if (!req) return;
  /* CA >= 1.35 sends pod_bytes, CA <= 1.34 the same bytes as the embedded pod */
  const ProtobufCBinaryData *bytes = req->pod_bytes.len ? &req->pod_bytes : &req->pod;
  json_t *pod = lp_externalgrpc_pod_json(bytes->data, bytes->len);
  if (!pod) {
    char *text = lp_xasprintf("cannot decode the pod as a v1.Pod (%zu bytes)", bytes->len);
    lp_grpc_fail(call, LP_GRPC_INVALID_ARGUMENT, text);
    free(text);
  } else {
    char *start = time_of(req->starttimestamp, req->starttime),
         *end = time_of(req->endtimestamp, req->endtime);
    lp_ng_pod_price(svc->ng, pod, start, end, price_done, pending_new(svc, call));
    free(start);
    free(end);
    json_decref(pod);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

lp_externalgrpc *lp_externalgrpc_new(lp_grpc_server *server, lp_nodegroups *ng) {
  static const struct {
    const char *method;
    lp_grpc_handler handler;
  } methods[] = {
      {"NodeGroups", node_groups},
      {"NodeGroupForNode", node_group_for_node},
      {"PricingNodePrice", node_price},
      {"PricingPodPrice", pod_price},
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
      {"NodeGroupGetOptions", get_options},
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
