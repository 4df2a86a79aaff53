/* The externalgrpc service's optional methods: NodeGroupGetOptions, PricingNodePrice and
 * PricingPodPrice, asking the mapping's get_options, node_price and pod_price. See externalgrpc.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "externalgrpc_internal.h"

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

/* The defaults the client sent, as the contract reads them (durations in seconds); NULL when the
 * request has none, which the contract refuses. */
static json_t *options_json(const PB(NodeGroupAutoscalingOptions) * o) {
  if (!o) return NULL;
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
    lp_xg_fail_with(p->call, err);
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
    lp_xg_respond(p->call, &res.base);
  }
  json_decref(options);
  lp_error_free(err);
  lp_xg_pending_free(p);
}

void lp_xg_get_options(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(NodeGroupAutoscalingOptionsRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(node_group_autoscaling_options_request), msg, len);
  if (!req) return;
  json_t *defaults = options_json(req->defaults);
  lp_ng_get_options(svc->ng, req->id, defaults, options_done, lp_xg_pending_new(svc, call));
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
    lp_xg_fail_with(p->call, err);
  } else {
    PB(PricingNodePriceResponse) res; /* the pod's answer has the same one field */
    PB_INIT(pricing_node_price_response)(&res);
    res.price = json_number_value(price);
    lp_xg_respond(p->call, &res.base);
  }
  json_decref(price);
  lp_error_free(err);
  lp_xg_pending_free(p);
}

void lp_xg_node_price(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(PricingNodePriceRequest) *req =
      (void *)lp_xg_decode(call, &PB_DESC(pricing_node_price_request), msg, len);
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
  lp_ng_node_price(svc->ng, node, start, end, price_done, lp_xg_pending_new(svc, call));
  free(start);
  free(end);
  json_decref(node);
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

void lp_xg_pod_price(lp_grpc_call *call, const uint8_t *msg, size_t len, void *ud) {
  lp_externalgrpc *svc = ud;
  if (lp_xg_refused(svc, call)) return;
  PB(PricingPodPriceRequest) *req = (void *)lp_xg_decode(call, &PB_DESC(pricing_pod_price_request), msg, len);
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
    lp_ng_pod_price(svc->ng, pod, start, end, price_done, lp_xg_pending_new(svc, call));
    free(start);
    free(end);
    json_decref(pod);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
}
