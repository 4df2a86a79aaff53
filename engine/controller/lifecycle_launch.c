/* Launch, the lifecycle's first step (docs/controllers.md#nodeclaim-lifecycle-nodeclaimlifecycle): call
 * CloudProvider Create once for a NodeClaim that has no instance yet and fold the result into it.
 *
 * A Create result is cached by NodeClaim uid for an hour before anything is written: when storing it
 * fails (409, 500, a timeout) or a reconcile runs on a cache that has not seen the write yet, the next
 * reconcile reuses it instead of launching again. The ClientToken protects only a retried
 * RunInstances of the same offering; a second Create could choose another offering.
 *
 * Create's errors: InsufficientCapacity and NodeClassNotReady delete the NodeClaim (the provisioner
 * makes a new one for the pods) with a Warning event; CreateError and anything else leave
 * Launched=Unknown with a reason and are retried with backoff until the launch timeout. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "controller/conditions.h"
#include "controller/lifecycle_internal.h"
#include "core/error_log.h"
#include "core/log.h"

/* Karpenter's limit on a launch failure's condition message. */
#define MESSAGE_MAX 300

/* Folds Create's answer into the NodeClaim: the provider's labels under the NodeClaim's own, the
 * NodeClaim's annotations under the provider's, and the instance's status fields. */
static void apply_created(lc_run *r, const json_t *created) {
  json_t *md = json_object_get(r->claim, "metadata");
  const json_t *created_md = json_object_get(created, "metadata");
  json_t *labels = json_object(), *annotations = json_object();
  const json_t *layers[2][2] = {
      {json_object_get(created_md, "labels"), json_object_get(md, "labels")},
      {json_object_get(md, "annotations"), json_object_get(created_md, "annotations")}};
  json_t *merged[2] = {labels, annotations};
  for (int m = 0; m < 2; m++)
    for (int l = 0; l < 2; l++)
      if (json_is_object(layers[m][l])) json_object_update(merged[m], (json_t *)layers[m][l]);
  json_object_set_new(md, "labels", labels);
  json_object_set_new(md, "annotations", annotations);

  json_t *status = json_object_get(r->claim, "status");
  if (!json_is_object(status)) {
    status = json_object();
    json_object_set_new(r->claim, "status", status);
  }
  static const char *const fields[] = {"providerID", "imageID", "capacity", "allocatable", NULL};
  const json_t *created_status = json_object_get(created, "status");
  for (size_t i = 0; fields[i]; i++) {
    json_t *v = json_object_get(created_status, fields[i]);
    if (v) json_object_set(status, fields[i], v);
  }
  lp_condition_set(r->claim, LC_LAUNCHED, "True", NULL, NULL, r->now);
}

/* text cut to MESSAGE_MAX bytes (on a UTF-8 boundary) plus "...", malloc'd. */
static char *truncated(const char *text) {
  size_t n = strlen(text);
  if (n <= MESSAGE_MAX) return lp_xstrdup(text);
  n = MESSAGE_MAX;
  while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
  return lp_xasprintf("%.*s...", (int)n, text);
}

/* The condition reason of a CreateError: the cloud's own code the error carries in its reason field
 * (docs/contracts.md#create), kept to what a condition reason may hold, "QuotaExceed.ElasticQuota" ->
 * "QuotaExceedElasticQuota"; "CreateError" without one. */
static void create_error_reason(const lp_error *err, char out[64]) {
  size_t n = 0;
  for (const char *p = err->reason ? err->reason : ""; *p && n < 63; p++)
    if (isalnum((unsigned char)*p) || *p == '_') out[n++] = *p;
  out[n] = '\0';
  if (n == 0 || !isalpha((unsigned char)out[0])) strcpy(out, "CreateError");
}

static void launch_failed(lc_run *r, lp_error *err) {
  int ice = strcmp(err->code, "InsufficientCapacity") == 0;
  if (ice || strcmp(err->code, "NodeClassNotReady") == 0) {
    lp_errorlog(lp_controller_logger(r->c), "failed launching nodeclaim",
                LPF_STR("nodeclaim", lp_obj_name(r->claim)), LPF_ERROR(err));
    char *described = lp_error_describe(err);
    lp_env_event(r->env, r->stored, "Warning", ice ? "InsufficientCapacityError" : "NodeClassNotReady",
                 "Failed to launch NodeClaim: %s", described);
    free(described);
    lp_error_free(err);
    lc_delete_claim(r, ice ? "insufficient_capacity" : "nodeclass_not_ready");
    return;
  }
  char reason[64];
  char *message;
  char *described = lp_error_describe(err);
  if (strcmp(err->code, "CreateError") == 0) {
    create_error_reason(err, reason);
    message = truncated(described);
  } else {
    strcpy(reason, "LaunchFailed");
    char *full = lp_xasprintf("%s: %s", err->code, described);
    message = truncated(full);
    free(full);
  }
  free(described);
  /* A repeated failure keeps its first message: every answer names a new RequestId, and a status that
   * changes on each retry would requeue itself through its own watch event, defeating the backoff. */
  const char *had = json_string_value(json_object_get(lp_condition_get(r->claim, LC_LAUNCHED), "reason"));
  if (!lp_condition_is(r->claim, LC_LAUNCHED, "Unknown") || !had || strcmp(had, reason) != 0)
    lp_condition_set(r->claim, LC_LAUNCHED, "Unknown", reason, message, r->now);
  free(message);
  lp_error_keep_first(&r->err, err);
  lc_launch_done(r);
}

static void created(json_t *value, lp_error *err, void *ud) {
  lc_run *r = ud;
  if (err) {
    json_decref(value);
    launch_failed(r, err);
    return;
  }
  const char *uid = lp_obj_uid(r->claim);
  char *text = json_dumps(value, JSON_COMPACT);
  if (uid && text) lp_cache_set(r->st->launches, uid, strlen(uid), text, strlen(text), 0);
  free(text);
  apply_created(r, value);
  json_decref(value);
  lc_launch_done(r);
}

void lc_launch(lc_run *r) {
  if (lp_condition_is(r->claim, LC_LAUNCHED, "True")) {
    lc_launch_done(r);
    return;
  }
  const char *pid = lp_obj_str(r->claim, "status.providerID");
  if (pid && *pid) { /* someone stored the instance without the condition: it is launched */
    lp_condition_set(r->claim, LC_LAUNCHED, "True", NULL, NULL, r->now);
    lc_launch_done(r);
    return;
  }
  const char *uid = lp_obj_uid(r->claim);
  size_t len = 0;
  const char *cached = uid ? lp_cache_get(r->st->launches, uid, strlen(uid), &len) : NULL;
  json_t *previous = cached ? json_loadb(cached, len, 0, NULL) : NULL;
  if (previous) {
    apply_created(r, previous);
    json_decref(previous);
    lc_launch_done(r);
    return;
  }
  const json_t *ref = lp_obj_get(r->claim, "spec.nodeClassRef");
  const json_t *nodeclass = lp_env_nodeclass_of(r->env, ref); /* by group and name */
  if (!nodeclass) {
    char *key = lp_env_nodeclass_key(r->env, ref);
    char *label = key ? lp_env_nodeclass_label(r->env, key) : NULL;
    launch_failed(r, label ? lp_error_new("NodeClassNotReady", "%s not found", label)
                           : lp_error_new("NodeClassNotReady", "%s %s not found",
                                          lp_obj_str(r->claim, "spec.nodeClassRef.kind") ?: "node class",
                                          lp_obj_str(r->claim, "spec.nodeClassRef.name") ?: "(no name)"));
    free(label);
    free(key);
    return;
  }
  lp_cp_create(lp_env_cloud(r->env), r->claim, nodeclass, created, r);
}
