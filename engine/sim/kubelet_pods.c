#include "sim/kubelet_pods.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "kube/informer.h"

#define LOGGER "sim.kubelet"

/* Where a pod stands with this kubelet, by uid. While a request is in flight (STARTING, REMOVING) the
 * pod gets no other; STARTED keeps the informer's echo of our own status patch from being patched again. */
enum { POD_STARTING = 1, POD_STARTED, POD_REMOVING };

struct kubelet_pods {
  lp_kube_client *kube;
  lp_informer *informer;
  lp_clock_fn clock;
  void *clock_ud;
  json_t *pods;     /* uid -> POD_* */
  unsigned next_ip; /* pod IPs come from 10.244.0.0/16, one per pod started */
  size_t started, removed;
  int pending; /* requests whose done has not run */
  int stopping;
  void (*on_stopped)(void *ud);
  void *on_stopped_ud;
};

typedef struct pod_call {
  kubelet_pods *pods;
  char *uid;
  char *what; /* "pod ns/name" for messages */
  int kind;
} pod_call;

static void finish_if_stopped(kubelet_pods *p) {
  if (!p->stopping || p->pending > 0) return;
  void (*cb)(void *) = p->on_stopped;
  void *ud = p->on_stopped_ud;
  json_decref(p->pods);
  free(p);
  if (cb) cb(ud);
}

static void forget_pod(lp_informer *inf, json_t *obj, void *ud) {
  (void)inf;
  kubelet_pods *p = ud;
  const char *uid = json_string_value(json_object_get(json_object_get(obj, "metadata"), "uid"));
  if (uid) json_object_del(p->pods, uid);
}

kubelet_pods *kubelet_pods_start(lp_kube_client *kube, lp_clock_fn clock, void *clock_ud) {
  kubelet_pods *p = lp_xcalloc(1, sizeof *p);
  p->kube = kube;
  p->clock = clock;
  p->clock_ud = clock_ud;
  p->pods = json_object();
  lp_kube_ref pods = {.version = "v1", .resource = "pods"};
  p->informer =
      lp_informer_start(kube, &pods, NULL, &(lp_informer_handlers){.on_delete = forget_pod, .ud = p});
  return p;
}

int kubelet_pods_synced(const kubelet_pods *p) {
  return p->informer && lp_informer_synced(p->informer);
}

static void pod_done(const lp_kube_reply *reply, void *ud) {
  pod_call *call = ud;
  kubelet_pods *p = call->pods;
  p->pending--;
  int gone = reply->error && strcmp(reply->error->code, "NotFound") == 0;
  if (reply->error && !gone && strcmp(reply->error->code, "Cancelled") != 0)
    lp_warn(LOGGER,
            call->kind == POD_STARTING ? "cannot set a pod Running" : "cannot remove a terminated pod",
            LPF_STR("pod", call->what), LPF_STR("code", reply->error->code),
            LPF_STR("error", reply->error->message));
  /* a failure is tried again on the next pass; a removal is forgotten when the informer sees it go */
  if (!reply->error) {
    if (call->kind == POD_STARTING)
      p->started++;
    else
      p->removed++;
  }
  if (!p->stopping) {
    if (call->kind == POD_STARTING && !reply->error)
      json_object_set_new(p->pods, call->uid, json_integer(POD_STARTED));
    else if (reply->error && !gone)
      json_object_del(p->pods, call->uid);
  }
  free(call->uid);
  free(call->what);
  free(call);
  finish_if_stopped(p);
}

static pod_call *pod_call_new(kubelet_pods *p, const char *uid, const json_t *md, int kind) {
  pod_call *call = lp_xcalloc(1, sizeof *call);
  call->pods = p;
  call->uid = lp_xstrdup(uid);
  call->what = lp_xasprintf("%s/%s", json_string_value(json_object_get(md, "namespace")),
                            json_string_value(json_object_get(md, "name")));
  call->kind = kind;
  json_object_set_new(p->pods, uid, json_integer(kind));
  p->pending++;
  return call;
}

/* The status a kubelet reports once every container of the pod runs and is ready. */
static json_t *running_status(kubelet_pods *p, const json_t *pod, const char *host_ip) {
  char now[LP_RFC3339_SIZE], pod_ip[20];
  lp_clock_rfc3339(p->clock(p->clock_ud), 0, now);
  unsigned n = p->next_ip++;
  snprintf(pod_ip, sizeof pod_ip, "10.244.%u.%u", (n / 250) % 256, n % 250 + 2);
  static const char *const ready_types[] = {"PodReadyToStartContainers", "Initialized", "Ready",
                                            "ContainersReady", "PodScheduled"};
  json_t *conditions = json_array();
  for (size_t i = 0; i < sizeof ready_types / sizeof ready_types[0]; i++)
    json_array_append_new(conditions, json_pack("{s:s,s:s,s:s}", "type", ready_types[i], "status", "True",
                                                "lastTransitionTime", now));
  json_t *containers = json_array();
  size_t i;
  json_t *container;
  json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, container) {
    const char *name = json_string_value(json_object_get(container, "name"));
    const char *image = json_string_value(json_object_get(container, "image"));
    char *id = lp_xasprintf("containerd://%08x%04zx", n, i);
    json_array_append_new(containers,
                          json_pack("{s:s,s:s,s:s,s:s,s:b,s:b,s:i,s:{s:{s:s}}}", "name", name ? name : "",
                                    "image", image ? image : "", "imageID", "", "containerID", id, "ready", 1,
                                    "started", 1, "restartCount", 0, "state", "running", "startedAt", now));
    free(id);
  }
  return json_pack("{s:{s:s,s:s,s:[{s:s}],s:s,s:[{s:s}],s:s,s:o,s:o}}", "status", "phase", "Running",
                   "hostIP", host_ip, "hostIPs", "ip", host_ip, "podIP", pod_ip, "podIPs", "ip", pod_ip,
                   "startTime", now, "conditions", conditions, "containerStatuses", containers);
}

typedef struct sync_pass {
  kubelet_pods *pods;
  const json_t *live_nodes;
} sync_pass;

static void sync_pod(const char *key, json_t *pod, void *ud) {
  (void)key;
  sync_pass *pass = ud;
  kubelet_pods *p = pass->pods;
  json_t *md = json_object_get(pod, "metadata");
  const char *uid = json_string_value(json_object_get(md, "uid"));
  const char *node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
  json_t *live = node ? json_object_get(pass->live_nodes, node) : NULL;
  if (!uid || !live) return;
  json_int_t state = json_integer_value(json_object_get(p->pods, uid));
  if (state == POD_STARTING || state == POD_REMOVING) return;
  lp_kube_ref ref = {.version = "v1",
                     .resource = "pods",
                     .namespace = json_string_value(json_object_get(md, "namespace")),
                     .name = json_string_value(json_object_get(md, "name"))};
  if (json_object_get(md, "deletionTimestamp")) {
    /* the containers are stopped at once: what a kubelet does after the grace period, done now */
    json_t *opts = json_pack("{s:s,s:s,s:i,s:{s:s}}", "apiVersion", "v1", "kind", "DeleteOptions",
                             "gracePeriodSeconds", 0, "preconditions", "uid", uid);
    lp_kube_delete_with(p->kube, &ref, opts, pod_done, pod_call_new(p, uid, md, POD_REMOVING));
    json_decref(opts);
    return;
  }
  const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
  if (state == POD_STARTED || (phase && strcmp(phase, "Pending") != 0)) return;
  json_t *patch = running_status(p, pod, json_string_value(json_object_get(live, "ip")));
  lp_kube_merge_patch(p->kube, &ref, "status", patch, pod_done, pod_call_new(p, uid, md, POD_STARTING));
  json_decref(patch);
}

void kubelet_pods_counts(const kubelet_pods *p, size_t *started, size_t *removed) {
  *started = p->started;
  *removed = p->removed;
}

void kubelet_pods_sync(kubelet_pods *p, const json_t *live_nodes) {
  if (p->stopping || !lp_informer_synced(p->informer)) return;
  sync_pass pass = {.pods = p, .live_nodes = live_nodes};
  lp_informer_list(p->informer, sync_pod, &pass);
}

void kubelet_pods_stop(kubelet_pods *p, void (*on_stopped)(void *ud), void *ud) {
  p->stopping = 1;
  p->on_stopped = on_stopped;
  p->on_stopped_ud = ud;
  lp_informer_stop(p->informer);
  p->informer = NULL;
  finish_if_stopped(p);
}
