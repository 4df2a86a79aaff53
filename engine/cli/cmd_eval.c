/* luaprov eval drift|repair|tags|disruption|instance-types|user-data: dry-run the policies and the
 * mapping on objects read from files. One JSON document on stdout (user-data: the user data text
 * itself); {"error": ...}, the error's fields on stderr (cli/error_print.h) and exit 1 on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/cli.h"
#include "cli/error_print.h"
#include "cli/mapping_exports.h"
#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "contract/error_table.h"
#include "contract/engine_tags.h"
#include "contract/settings.h"
#include "contract/shapes.h"
#include "controller/controller.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/yaml.h"
#include "script/endpoints.h"
#include "script/host.h"
#include "script/tree.h"

static const char usage[] =
    "usage: luaprov eval drift  --nodeclaim F --nodeclass F --instance F [--nodepool F] [--now TIME]\n"
    "                           [--scripts DIR]\n"
    "       luaprov eval repair [--scripts DIR]\n"
    "       luaprov eval tags   --nodeclaim F --nodeclass F [--cluster-id ID] [--SETTING VALUE] [--scripts "
    "DIR]\n"
    "       luaprov eval disruption --nodeclaim F [--node F] [--pods F] [--nodepool F] [--reason R]\n"
    "                               [--method M] [--now TIME] [--scripts DIR]\n"
    "       luaprov eval instance-types --nodeclass F [--endpoint URL] [--SETTING VALUE] [--scripts DIR]\n"
    "       luaprov eval user-data --nodeclaim F --nodeclass F [--endpoint URL] [--cluster-id ID]\n"
    "                              [--capacity-type spot|on-demand] [--SETTING VALUE] [--scripts DIR]\n"
    "\n"
    "Runs one policy or mapping function on objects read from files, with the scripts of DIR (files it\n"
    "does not hold come from the default tree), and prints one JSON document:\n"
    "  drift           {\"reason\": \"NodeClassDrift\"} (\"\" when not drifted; when the policy cannot tell\n"
    "                  yet, {\"reason\": \"\", \"undecided\": \"why\"}: the engine leaves Drifted as it is)\n"
    "  repair          [{\"condition_type\", \"condition_status\", \"toleration_seconds\"}]\n"
    "  tags            {\"tag-key\": \"value\", ...}\n"
    "  disruption      {\"allowed\": true, \"why\": null} or {\"allowed\": false, \"why\": \"...\"}: "
    "whether\n"
    "                  the disruption policy lets the node go now; --pods is the pods bound to the node\n"
    "                  (a list, or kubectl get pods -o json|yaml output); --reason Empty|Underutilized|\n"
    "                  Drifted (default Underutilized); --method emptiness|drift|multi-node\n"
    "                  consolidation|single-node consolidation (default: the one of the reason);\n"
    "                  --now epoch seconds or RFC 3339 (default: now); ctx.nodepool is the --nodepool\n"
    "                  object's name, else the NodeClaim's karpenter.sh/nodepool label\n"
    "  instance-types  [{\"name\", \"requirements\", \"offerings\", \"capacity\", \"overhead\"}]\n"
    "  user-data       the user data a launch of the NodeClaim would send, as the instance receives it\n"
    "                  (plain text, not JSON; --capacity-type defaults to on-demand)\n"
    "Objects are JSON or YAML as `kubectl get -o json|yaml` prints them; the instance is JSON in the\n"
    "shape of docs/contracts.md#the-instance-shape. instance-types and user-data call the cloud API at\n"
    "--endpoint (e.g. `luaprov sim`). --SETTING VALUE sets one of the mapping's settings (`luaprov run\n"
    "--help` lists them), else the environment, else their simulator values.\n"
    "--now TIME (every verb) is the time the policies see (luaprov.time, ctx.now): epoch seconds or RFC\n"
    "3339, e.g. 2026-12-01T00:00:00Z, to dry-run a time-dependent policy at a boundary (default: now).\n"
    "On failure prints {\"error\": \"...\"} and exits 1; stderr then holds the error's known fields, one\n"
    "per line (reason, action, request id, object, at FILE:LINE, hint, and a script's Lua traceback).\n"
    "An option that is neither one of the above nor a setting of the mapping is a usage error (exit 2).\n";

typedef struct eval_args {
  const char *what;
  const char *files[6]; /* nodeclaim, nodeclass, instance, nodepool, node, pods */
  const char *scripts, *cluster_id, *endpoint, *capacity_type;
  const char *reason, *method, *now; /* disruption's ctx; --now is also luaprov.time's clock */
  double now_t;                      /* --now parsed (epoch seconds) */
  const char *log_level, *log_format;
  json_t *flags; /* --SETTING VALUE: the mapping's settings (contract/settings.h) */
} eval_args;

enum { F_NODECLAIM, F_NODECLASS, F_INSTANCE, F_NODEPOOL, F_NODE, F_PODS, F_COUNT };

static int print_value(json_t *value) {
  char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text) {
    json_decref(value);
    lp_error *e = lp_error_new("BadOutput", "the result cannot be written as JSON");
    lp_cli_print_error(e);
    lp_error_free(e);
    return 1;
  }
  printf("%s\n", text);
  free(text);
  json_decref(value);
  return 0;
}

/* The first line of path that holds key as a YAML key or a JSON member: where to look. 0 if none. */
static int key_line(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[4096], yaml[300], json[300];
  snprintf(yaml, sizeof yaml, "%s:", key);
  snprintf(json, sizeof json, "\"%s\"", key);
  int n = 0, found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    n++;
    const char *s = line + strspn(line, " \t{,");
    if (strncmp(s, yaml, strlen(yaml)) == 0 || strstr(line, json)) found = n;
  }
  fclose(f);
  return found;
}

static void fixture_error(lp_error **err, const char *what, const char *path, const char *key,
                          const char *fmt, const char *a, const char *b) {
  char *text = lp_xasprintf(fmt, a, b);
  int line = key ? key_line(path, key) : 0;
  if (line)
    lp_error_set(err, "BadInput", "--%s %s:%d: %s", what, path, line, text);
  else
    lp_error_set(err, "BadInput", "--%s %s: %s", what, path, text);
  free(text);
}

/* The instance shape's neutral fields, then the mapping's own (its `instance_fields`). */
#define INSTANCE_FIELDS_MAX 48
static const char *const neutral_instance_fields[] = {
    "id",    "zone",       "instance_type", "capacity_type", "image_id",
    "state", "private_ip", "tags",          "launch_time",   NULL};

/* Fixtures are kubectl dumps (or the instance shape, docs/contracts.md#the-instance-shape): a misspelled
 * top-level field would otherwise read as absent and the policy answer quietly for the wrong object.
 * mapping_fields: the fields the mapping adds to the instance shape (borrowed, may be NULL). */
static int check_fixture(const json_t *doc, const char *what, const char *path, const json_t *mapping_fields,
                         const char *nodeclass_kind, lp_error **err) {
  static const char *const k8s[] = {"apiVersion", "kind", "metadata", "spec", "status", NULL};
  const char *instance[INSTANCE_FIELDS_MAX + 1];
  size_t n = 0, i;
  for (; neutral_instance_fields[n]; n++) instance[n] = neutral_instance_fields[n];
  const json_t *f;
  json_array_foreach(mapping_fields, i, f) if (json_is_string(f) && n < INSTANCE_FIELDS_MAX) instance[n++] =
      json_string_value(f);
  instance[n] = NULL;
  int is_instance = strcmp(what, "instance") == 0;
  const char *kind = json_string_value(json_object_get(doc, "kind"));
  if (!json_is_object(doc)) {
    fixture_error(err, what, path, NULL,
                  "holds %s%s, not an object; pass one object as kubectl get -o yaml prints it",
                  json_is_array(doc) ? "a list" : "a scalar", "");
    return -1;
  }
  if (is_instance && kind) {
    fixture_error(err, what, path, "kind",
                  "is a Kubernetes %s, not an instance; --instance takes the instance shape of "
                  "docs/contracts.md#the-instance-shape (id, zone, instance_type, image_id, ...)%s",
                  kind, "");
    return -1;
  }
  const char *expected = strcmp(what, "nodeclaim") == 0   ? "NodeClaim"
                         : strcmp(what, "nodeclass") == 0 ? nodeclass_kind
                         : strcmp(what, "nodepool") == 0  ? "NodePool"
                         : strcmp(what, "node") == 0      ? "Node"
                                                          : NULL;
  if (expected && kind && strcmp(kind, expected) != 0) {
    fixture_error(err, what, path, "kind",
                  "kind is %s, expected %s; pass the object of that kind (kubectl get ... -o yaml)", kind,
                  expected);
    return -1;
  }
  const char *const *known = is_instance ? instance : k8s;
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)doc, key, value) {
    int ok = 0;
    for (const char *const *k = known; *k && !ok; k++) ok = strcmp(key, *k) == 0;
    if (ok) continue;
    const char *near = lp_contract_closest(key, known);
    if (near) {
      fixture_error(err, what, path, key, "unknown top-level field '%s'; did you mean '%s'?", key, near);
      return -1;
    }
    lp_buf listed = LP_BUF_INIT;
    for (i = 0; i < n; i++) lp_buf_printf(&listed, "%s%s", i ? ", " : "", instance[i]);
    fixture_error(err, what, path, key,
                  is_instance ? "unknown top-level field '%s'; the instance shape "
                                "(docs/contracts.md#the-instance-shape) has %s"
                              : "unknown top-level field '%s'; a Kubernetes object has apiVersion, kind, "
                                "metadata, spec and status%s",
                  key, is_instance ? lp_buf_cstr(&listed) : "");
    lp_buf_free(&listed);
    return -1;
  }
  if (is_instance) {
    char *problem = lp_check_instance(doc);
    if (problem) {
      fixture_error(err, what, path, NULL,
                    "%s; the instance shape is in docs/contracts.md#the-instance-shape%s", problem, "");
      free(problem);
      return -1;
    }
  }
  return 0;
}

/* What the fixture checks need of the mapping: its instance fields and its node class's kind. */
typedef struct mapping_view {
  json_t *instance_fields;
  json_t *nodeclass;
} mapping_view;

static json_t *load(const char *path, const char *what, const mapping_view *m, lp_error **err) {
  if (!path) {
    lp_error_set(err, "Usage", "--%s FILE is required", what);
    return NULL;
  }
  lp_error *parse = NULL;
  json_t *doc = lp_load_json_or_yaml_file(path, &parse);
  if (!doc) {
    lp_error_set(err, parse ? parse->code : "BadInput",
                 "--%s %s; the file must be one JSON or YAML object as kubectl get -o json|yaml prints it",
                 what, parse ? parse->message : path);
    lp_error_free(parse);
    return NULL;
  }
  const char *kind = json_string_value(json_object_get(m->nodeclass, "kind"));
  if (check_fixture(doc, what, path, m->instance_fields, kind ? kind : "", err) != 0) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* The pods bound to a node: a list of Pods, a List or PodList (kubectl get pods -o json|yaml), or one
 * Pod. Returns a new array. */
static json_t *load_pods(const char *path, lp_error **err) {
  lp_error *parse = NULL;
  json_t *doc = lp_load_json_or_yaml_file(path, &parse);
  if (!doc) {
    lp_error_set(err, parse ? parse->code : "BadInput",
                 "--pods %s; the file must hold the pods as kubectl get pods -o json|yaml prints them",
                 parse ? parse->message : path);
    lp_error_free(parse);
    return NULL;
  }
  json_t *pods = json_is_array(doc)                             ? json_incref(doc)
                 : json_is_array(json_object_get(doc, "items")) ? json_incref(json_object_get(doc, "items"))
                 : json_is_object(doc)                          ? json_pack("[O]", doc)
                                                                : NULL;
  json_decref(doc);
  size_t i;
  json_t *pod;
  json_array_foreach(pods, i, pod) {
    const char *kind = json_string_value(json_object_get(pod, "kind"));
    if (!json_is_object(pod) || (kind && strcmp(kind, "Pod") != 0)) {
      char item[24];
      snprintf(item, sizeof item, "%zu", i + 1);
      fixture_error(err, "pods", path, kind ? "kind" : NULL,
                    "item %s is a %s, not a Pod; pass the pods bound to the node (kubectl get pods -o yaml "
                    "--field-selector spec.nodeName=NODE)",
                    item, kind ? kind : "scalar or a list");
      json_decref(pods);
      return NULL;
    }
  }
  if (!pods) fixture_error(err, "pods", path, NULL, "holds a scalar%s%s, not a list of pods", "", "");
  return pods;
}

/* Calls a script function through the script host (args stolen) and returns the array of its results
 * (new reference), or NULL with *err set when the call itself failed (every part of the script's
 * error kept: its position and traceback). */
static json_t *call_script(lp_script_host *h, const char *module, const char *function, json_t *args,
                           lp_error **err) {
  lp_task_result *r = lp_script_host_call_sync(h, module, function, args);
  json_t *values = NULL;
  if (r->error)
    lp_error_keep_first(err, lp_error_copy(r->error)); /* with its fields: file:line, hint, ... */
  else
    values = json_loads(r->json, JSON_DECODE_ANY, NULL);
  lp_task_result_free(r);
  return values;
}

/* The message of a script's second result (a string, or a table with "message"); NULL if none. */
static const char *problem_message(const json_t *problem) {
  return json_is_string(problem) ? json_string_value(problem)
                                 : json_string_value(json_object_get(problem, "message"));
}

/* Calls a policy function through the script host and returns its first result (new reference). */
static json_t *call_policy(lp_script_host *h, const char *module, const char *function, json_t *args,
                           lp_error **err) {
  json_t *values = call_script(h, module, function, args, err);
  if (!values) return NULL;
  json_t *value = NULL;
  json_t *first = json_array_get(values, 0), *second = json_array_get(values, 1);
  if (json_is_null(first) && second && !json_is_null(second)) {
    const char *msg = problem_message(second);
    lp_error_set(err, "PolicyUndecided", "%s.%s returned no answer: %s", module, function, msg ? msg : "?");
  } else {
    value = json_incref(first ? first : json_null());
  }
  json_decref(values);
  return value;
}

/* A contract problem with what a policy returned, placed at the function's definition: the line of the
 * return is gone by the time the value is back in C. */
static void policy_error(lp_script_host *h, const char *module, const char *function, const char *problem,
                         lp_error **err) {
  if (!err || *err) return; /* the first error stays, as lp_error_set keeps it */
  *err = lp_policy_answer_error(lp_script_host_current(h), module, function, problem);
}

static json_t *eval_drift(lp_script_host *h, json_t *ctx, json_t **objects, lp_error **err) {
  if (objects[F_NODEPOOL]) json_object_set(ctx, "nodepool", objects[F_NODEPOOL]);
  lp_error *call_err = NULL;
  json_t *reason = call_policy(
      h, "policies.drift", "is_drifted",
      json_pack("[OOOO]", objects[F_NODECLAIM], objects[F_NODECLASS], objects[F_INSTANCE], ctx), &call_err);
  if (!reason && strcmp(call_err->code, "PolicyUndecided") == 0) {
    /* nil, message is an answer, "not known yet": the engine leaves the Drifted condition as it is */
    json_t *out = json_pack("{s:s, s:s}", "reason", "", "undecided", call_err->message);
    lp_error_free(call_err);
    return out;
  }
  if (!reason) {
    *err = call_err;
    return NULL;
  }
  json_t *reasons = lp_script_host_module_json(h, LUAPROV_CLOUDPROVIDER_MAPPING, "drift_reasons");
  char *problem = lp_drift_answer_problem("is_drifted", reason, reasons);
  json_decref(reasons);
  const char *r = json_is_null(reason) ? "" : json_string_value(reason);
  if (problem) {
    policy_error(h, "policies.drift", "is_drifted", problem, err);
    free(problem);
    json_decref(reason);
    return NULL;
  }
  json_t *out = json_pack("{s:s}", "reason", r);
  json_decref(reason);
  return out;
}

static json_t *eval_repair(lp_script_host *h, json_t *ctx, lp_error **err) {
  json_t *list = call_policy(h, "policies.repair", "policies", json_pack("[O]", ctx), err);
  char *problem = list ? lp_repair_answer_problem(list) : NULL;
  if (problem) {
    policy_error(h, "policies.repair", "policies", problem, err);
    free(problem);
    json_decref(list);
    return NULL;
  }
  if (json_is_object(list)) { /* an empty Lua table */
    json_decref(list);
    list = json_array();
  }
  return list;
}

static json_t *eval_tags(lp_script_host *h, json_t *ctx, json_t **objects, lp_error **err) {
  json_t *tags = call_policy(h, "policies.tags", "build_instance_tags",
                             json_pack("[OOO]", objects[F_NODECLAIM], objects[F_NODECLASS], ctx), err);
  char *problem = tags ? lp_tags_answer_problem(tags) : NULL;
  if (problem) {
    policy_error(h, "policies.tags", "build_instance_tags", problem, err);
    free(problem);
    json_decref(tags);
    return NULL;
  }
  if (!tags) return NULL; /* the call failed: *err says why */
  /* what a launch carries: the engine's own tags go over the policy's (rule CP7) */
  const char *cluster_id = json_string_value(json_object_get(ctx, "cluster_id"));
  json_t *merged = lp_tags_with_engine(tags, objects[F_NODECLAIM], cluster_id);
  json_decref(tags);
  json_t *engine = lp_engine_tags(objects[F_NODECLAIM], cluster_id);
  fputs("note: the engine's own tags, set after the policy (it cannot remove or override them):", stderr);
  const char *key;
  json_t *value;
  json_object_foreach(engine, key, value) fprintf(stderr, " %s", key);
  fputc('\n', stderr);
  json_decref(engine);
  return merged;
}

/* The disruption's ctx from the flags: {reason, nodepool, now, method}; NULL with *err on a bad flag. */
static json_t *disruption_ctx(const eval_args *a, json_t **objects, lp_error **err) {
  static const char *const reasons[] = {"Empty", "Underutilized", "Drifted", NULL};
  static const char *const methods[] = {"emptiness", "drift", "multi-node consolidation",
                                        "single-node consolidation", NULL};
  const char *reason = a->reason ? a->reason : "Underutilized";
  int r = 0;
  while (reasons[r] && strcmp(reasons[r], reason) != 0) r++;
  if (!reasons[r]) {
    lp_error_set(err, "Usage", "--reason %s: a disruption reason is Empty, Underutilized or Drifted", reason);
    return NULL;
  }
  static const char *const method_of[] = {"emptiness", "single-node consolidation", "drift"};
  const char *method = a->method ? a->method : method_of[r];
  int m = 0;
  while (methods[m] && strcmp(methods[m], method) != 0) m++;
  if (!methods[m]) {
    lp_error_set(err, "Usage",
                 "--method %s: a disruption method is emptiness, drift, \"multi-node consolidation\" or "
                 "\"single-node consolidation\"",
                 method);
    return NULL;
  }
  double now = a->now ? a->now_t : lp_clock_wall();
  const char *pool =
      json_string_value(json_object_get(json_object_get(objects[F_NODEPOOL], "metadata"), "name"));
  if (!pool)
    pool = json_string_value(
        json_object_get(json_object_get(json_object_get(objects[F_NODECLAIM], "metadata"), "labels"),
                        "karpenter.sh/nodepool"));
  return json_pack("{s:s, s:s, s:I, s:s}", "reason", reason, "nodepool", pool ? pool : "", "now",
                   (json_int_t)now, "method", method);
}

typedef struct disruption_answer {
  int done, allowed;
  char *why;
  lp_error *err;
} disruption_answer;

static void disruption_answered(int allowed, const char *why, lp_error *err, void *ud) {
  disruption_answer *out = ud;
  out->done = 1;
  out->allowed = allowed;
  out->why = why ? lp_xstrdup(why) : NULL;
  out->err = err;
}

/* The answer of lp_cp_can_disrupt, the engine's own call, so the dry run applies the engine's rules. */
static json_t *eval_disruption(uv_loop_t *loop, lp_script_host *h, const eval_args *a, json_t *settings,
                               json_t **objects, lp_error **err) {
  json_t *ctx = disruption_ctx(a, objects, err);
  if (!ctx) return NULL;
  lp_cloudprovider *cp = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = loop,
                                                                         .scripts = h,
                                                                         .settings = settings,
                                                                         .cluster_id = a->cluster_id,
                                                                         .refresh_interval_s = -1});
  json_t *pods = objects[F_PODS] ? json_incref(objects[F_PODS]) : json_array();
  disruption_answer out = {0};
  lp_cp_can_disrupt(cp, objects[F_NODECLAIM], objects[F_NODE], pods, ctx, disruption_answered, &out);
  while (!out.done) uv_run(loop, UV_RUN_ONCE);
  lp_cloudprovider_free(cp);
  json_decref(pods);
  json_decref(ctx);
  json_t *answer = NULL;
  if (out.err)
    *err = out.err;
  else
    answer = json_pack("{s:b, s:s?}", "allowed", out.allowed, "why", out.why);
  free(out.why);
  return answer;
}

static json_t *eval_instance_types(uv_loop_t *loop, lp_script_host *h, const eval_args *a, json_t *ctx,
                                   json_t **objects, lp_error **err) {
  lp_cloudprovider_config cfg = {
      .loop = loop,
      .scripts = h,
      .settings = ctx,
      .cluster_id = a->cluster_id,
      .endpoint = a->endpoint,
  };
  lp_cloudprovider *cp = lp_cloudprovider_new(&cfg);
  lp_cp_outcome out = {0};
  lp_cp_get_instance_types(cp, objects[F_NODECLASS], lp_cp_outcome_store, &out);
  lp_cp_outcome_wait(loop, &out);
  lp_cloudprovider_free(cp);
  if (out.error) lp_error_keep_first(err, out.error); /* with the cloud's reason, action, request ID */
  return out.value;
}

/* The entry module of the CloudProvider mapping (the one the engine launches through). */
static const char *cloudprovider_module(void) {
  for (const lp_module_spec *m = lp_contract_modules; m->module; m++)
    if (strcmp(m->contract, "CloudProvider mapping") == 0) return m->module;
  return NULL;
}

/* The mapping's user_data(ctx, nodeclaim, nodeclass, capacity_type) -> text | nil, err: the text as a
 * JSON string, or the mapping's error (its code and message). */
static json_t *eval_user_data(lp_script_host *h, json_t *ctx, json_t **objects, const char *capacity_type,
                              lp_error **err) {
  const char *module = cloudprovider_module();
  json_t *values =
      call_script(h, module, "user_data",
                  json_pack("[OOOs]", ctx, objects[F_NODECLAIM], objects[F_NODECLASS], capacity_type), err);
  if (!values) return NULL;
  json_t *out = NULL;
  json_t *text = json_array_get(values, 0), *problem = json_array_get(values, 1);
  if (json_is_string(text)) {
    out = json_incref(text);
  } else if (problem && !json_is_null(problem)) {
    lp_error *e = lp_error_from_table(problem),
             *shown = lp_error_new(strcmp(e->code, "Error") == 0 ? "MappingError" : e->code, "user_data: %s",
                                   e->message);
    lp_error_keep_first(err, lp_error_inherit(shown, e));
    lp_error_free(e);
  } else {
    policy_error(h, module, "user_data",
                 "user_data returned no text; return the user data as a string, or nil and an error", err);
  }
  json_decref(values);
  return out;
}

/* argv[0] is the verb (drift, tags, ...). */
static int parse_args(int argc, char **argv, eval_args *a) {
  a->what = argv[0];
  const lp_cli_opt opts[] = {{"--nodeclaim", &a->files[F_NODECLAIM], NULL},
                             {"--nodeclass", &a->files[F_NODECLASS], NULL},
                             {"--instance", &a->files[F_INSTANCE], NULL},
                             {"--nodepool", &a->files[F_NODEPOOL], NULL},
                             {"--node", &a->files[F_NODE], NULL},
                             {"--pods", &a->files[F_PODS], NULL},
                             {"--scripts", &a->scripts, NULL},
                             {"--cluster-id", &a->cluster_id, NULL},
                             {"--endpoint", &a->endpoint, NULL},
                             {"--capacity-type", &a->capacity_type, NULL},
                             {"--reason", &a->reason, NULL},
                             {"--method", &a->method, NULL},
                             {"--now", &a->now, NULL},
                             {NULL, NULL, NULL}};
  /* an unknown --NAME VALUE is a setting: checked against the mapping's before anything runs */
  lp_cli_args args = {.cmd = "eval", .opts = opts, .settings = a->flags};
  int parsed = lp_cli_parse(&args, argc, argv);
  a->log_level = args.log_level;
  a->log_format = args.log_format;
  return parsed;
}

/* --now as epoch seconds into a->now_t; -1 with *err when it is neither epoch seconds nor RFC 3339. */
static int parse_now(eval_args *a, lp_error **err) {
  if (!a->now) return 0;
  char *end = NULL;
  a->now_t = strtod(a->now, &end);
  if (end == a->now || *end) a->now_t = lp_rfc3339_parse(a->now);
  if (a->now_t >= 0) return 0;
  lp_error_set(err, "Usage", "--now %s: give epoch seconds (1796205600) or RFC 3339 (2026-12-02T10:00:00Z)",
               a->now);
  return -1;
}

/* luaprov.time.now for the policies: the --now time. */
static double fixed_now(void *ud) {
  return *(const double *)ud;
}

static json_t *evaluate(uv_loop_t *loop, lp_script_host *h, const eval_args *a, json_t **objects,
                        lp_error **err) {
  json_t *declared = lp_script_host_module_json(h, LUAPROV_CLOUDPROVIDER_MAPPING, "settings");
  char *problem = NULL;
  json_t *ctx = lp_settings_resolve(declared, a->flags, LP_SETTINGS_SIM_FALLBACK, &problem);
  json_decref(declared);
  if (!ctx) {
    lp_error_set(err, "Usage", "%s", problem);
    free(problem);
    return NULL;
  }
  json_object_set_new(ctx, "cluster_id", json_string(a->cluster_id));
  if (a->endpoint) json_object_set_new(ctx, "endpoint", json_string(a->endpoint));
  lp_endpoints_allow_configured(a->endpoint); /* the mapping may reach what it is pointed at */
  json_t *out = NULL;
  if (strcmp(a->what, "drift") == 0)
    out = eval_drift(h, ctx, objects, err);
  else if (strcmp(a->what, "repair") == 0)
    out = eval_repair(h, ctx, err);
  else if (strcmp(a->what, "tags") == 0)
    out = eval_tags(h, ctx, objects, err);
  else if (strcmp(a->what, "disruption") == 0)
    out = eval_disruption(loop, h, a, ctx, objects, err);
  else if (strcmp(a->what, "user-data") == 0)
    out = eval_user_data(h, ctx, objects, a->capacity_type, err);
  else
    out = eval_instance_types(loop, h, a, ctx, objects, err);
  json_decref(ctx);
  return out;
}

int lp_cmd_eval(int argc, char **argv) {
  static const char *const kinds[] = {"drift",          "repair",    "tags", "disruption",
                                      "instance-types", "user-data", NULL};
  if (argc >= 2 && lp_cli_wants_help(2, argv)) { /* luaprov eval --help */
    fputs(usage, stdout);
    return 0;
  }
  if (argc < 2)
    return lp_cli_usage_error("eval", "missing what to evaluate: drift, repair, tags, disruption, "
                                      "instance-types or user-data");
  int known = 0;
  for (const char *const *k = kinds; *k; k++) known |= strcmp(argv[1], *k) == 0;
  if (!known) return lp_cli_unknown_choice("eval", "subcommand", argv[1], kinds);
  eval_args a = {.cluster_id = "luaprov", .capacity_type = "on-demand", .flags = json_object()};
  int parsed = parse_args(argc - 1, argv + 1, &a);
  if (parsed != LP_CLI_OK) {
    if (parsed == LP_CLI_HELP) fputs(usage, stdout);
    json_decref(a.flags);
    return parsed == LP_CLI_HELP ? 0 : 2;
  }
  char *unknown = lp_cli_unknown_setting(a.scripts, a.flags); /* a usage error, as for `run` */
  if (unknown) {
    lp_cli_usage_error("eval", "%s", unknown);
    free(unknown);
    json_decref(a.flags);
    return 2;
  }
  const char *level = a.log_level                   ? a.log_level
                      : getenv("LUAPROV_LOG_LEVEL") ? NULL
                                                    : "warn"; /* stdout is the answer */
  if (lp_cli_configure_logging(level, a.log_format) != 0) {
    json_decref(a.flags);
    return 2;
  }

  /* which files each verb needs */
  int needs[F_COUNT] = {0};
  if (strcmp(a.what, "drift") == 0) needs[F_NODECLAIM] = needs[F_NODECLASS] = needs[F_INSTANCE] = 1;
  if (strcmp(a.what, "tags") == 0 || strcmp(a.what, "user-data") == 0)
    needs[F_NODECLAIM] = needs[F_NODECLASS] = 1;
  if (strcmp(a.what, "instance-types") == 0) needs[F_NODECLASS] = 1;
  if (strcmp(a.what, "disruption") == 0) needs[F_NODECLAIM] = 1;
  static const char *const names[] = {"nodeclaim", "nodeclass", "instance", "nodepool", "node", "pods"};
  json_t *objects[F_COUNT] = {NULL};
  lp_error *err = NULL;

  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_http_client *http = NULL;
  lp_script_host *h = NULL;
  json_t *out = NULL;
  if (!err) parse_now(&a, &err);
  if (!err) http = lp_http_client_new(&loop, NULL, &err);
  if (!err) {
    lp_script_host_config cfg = {
        .loop = &loop,
        .scripts_dir = a.scripts,
        .defaults_dir = lp_default_scripts_dir(),
        .modules = lp_contract_modules,
        .http = http,
        .now = a.now ? fixed_now : NULL,
        .now_ud = &a.now_t,
        .no_policy_calls = 1, /* eval calls the policy on the given objects, with its own messages */
    };
    lp_problems problems = {0};
    h = lp_script_host_new(&cfg, &problems);
    if (!h) {
      char *text = lp_problems_render(&problems);
      size_t n = strlen(text);
      if (n && text[n - 1] == '\n') text[n - 1] = '\0';
      err = lp_error_new("ScriptError", "the scripts do not load: %s", text);
      free(text);
    }
    lp_problems_free(&problems);
  }
  if (!err) {
    mapping_view m = {lp_script_host_module_json(h, LUAPROV_CLOUDPROVIDER_MAPPING, "instance_fields"),
                      lp_script_host_module_json(h, LUAPROV_CLOUDPROVIDER_MAPPING, "nodeclass")};
    for (int f = 0; f < F_COUNT && !err; f++)
      if (f == F_PODS && a.files[f])
        objects[f] = load_pods(a.files[f], &err);
      else if (needs[f] || a.files[f])
        objects[f] = load(a.files[f], names[f], &m, &err);
    json_decref(m.instance_fields);
    json_decref(m.nodeclass);
  }
  if (!err) out = evaluate(&loop, h, &a, objects, &err);
  json_decref(a.flags);
  int status;
  if (err) {
    status = lp_cli_print_error(err);
  } else if (strcmp(a.what, "user-data") == 0) { /* the text itself: what the instance runs */
    fputs(json_string_value(out), stdout);
    json_decref(out);
    status = 0;
  } else {
    status = print_value(out);
  }
  lp_error_free(err);
  for (int f = 0; f < F_COUNT; f++) json_decref(objects[f]);
  if (h) lp_script_host_close(h, NULL, NULL);
  if (http) lp_http_client_close(http, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return status;
}
