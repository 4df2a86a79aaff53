/* luaprov instance: the instance document of a NodeClaim (read from the cluster by name, or from a
 * file), fetched through the CloudProvider mapping's get (lp_cp_get_instance), exactly what a drift
 * policy receives as `instance`: save it and pass it to `luaprov eval drift --instance FILE`
 * (docs/writing-policies.md#a-real-instance-document). One JSON document on stdout; {"error": ...},
 * the error's fields on stderr (cli/error_print.h) and exit 1 on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/error_print.h"
#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "core/yaml.h"
#include "kube/client.h"
#include "kube/config.h"
#include "script/host.h"
#include "script/tree.h"

static const char usage[] =
    "usage: luaprov instance (NAME [--kubeconfig FILE] | --nodeclaim FILE | --provider-id ID)\n"
    "                        [--endpoint URL] [--scripts DIR] [--cluster-id ID]\n"
    "\n"
    "Prints the instance of the NodeClaim (its status.providerID) as the mapping's get returns it: the\n"
    "document a drift policy receives, for `luaprov eval drift --instance`. NAME reads the NodeClaim\n"
    "(karpenter.sh/v1) from the cluster: the API server of --kubeconfig FILE, else $KUBECONFIG, else\n"
    "~/.kube/config, else the Pod's service account. --nodeclaim FILE reads it as `kubectl get nodeclaim\n"
    "NAME -o yaml` writes it. --endpoint is the cloud API (a simulator's URL, e.g. the one `luaprov sim`\n"
    "prints); without it the mapping's own endpoint and credentials are used.\n"
    "On failure prints {\"error\": \"...\"} (the error's fields on stderr) and exits 1.\n";

typedef struct instance_args {
  const char *name, *kubeconfig, *nodeclaim, *provider_id, *endpoint, *scripts, *cluster_id;
} instance_args;

typedef struct claim_reply {
  int done;
  json_t *object;
  lp_error *error;
  long status;
} claim_reply;

static void claim_got(const lp_kube_reply *reply, void *ud) {
  claim_reply *out = ud;
  out->done = 1;
  out->status = reply->status;
  out->object = reply->object ? json_incref(reply->object) : NULL;
  out->error = reply->error ? lp_error_copy(reply->error) : NULL;
}

static void free_config(void *ud) {
  lp_kube_config_free(ud);
}

/* GET the NodeClaim name from the cluster (new reference), or NULL with *err naming the NodeClaim
 * or the API server. */
static json_t *claim_from_cluster(uv_loop_t *loop, const instance_args *a, lp_error **err) {
  lp_kube_config *cfg = lp_kube_config_load_default(a->kubeconfig, err);
  if (!cfg) return NULL;
  lp_http_client_options http = {.default_timeout_ms = 10000, .max_retries = 1};
  lp_kube_client *kube = lp_kube_client_new(loop, cfg, &http, err);
  if (!kube) {
    lp_kube_config_free(cfg);
    return NULL;
  }
  claim_reply out = {0};
  lp_kube_ref ref = {.group = "karpenter.sh", .version = "v1", .resource = "nodeclaims", .name = a->name};
  lp_kube_get(kube, &ref, claim_got, &out);
  while (!out.done) uv_run(loop, UV_RUN_ONCE);
  lp_error *e = NULL;
  if (out.error && strcmp(out.error->code, "NotFound") == 0)
    e = lp_error_new("NotFound", "nodeclaim %s not found in the cluster at %s (kubeconfig %s)", a->name,
                     cfg->server, cfg->source);
  else if (out.error && out.status == 0)
    e = lp_error_new(out.error->code, "cannot reach the Kubernetes API server at %s (kubeconfig %s): %s",
                     cfg->server, cfg->source, out.error->message);
  else if (out.error)
    e = lp_error_new(out.error->code, "reading nodeclaim %s from %s: %s", a->name, cfg->server,
                     out.error->message);
  if (e) lp_error_keep_first(err, lp_error_with(lp_error_inherit(e, out.error), LP_ERROR_OBJECT, a->name));
  lp_error_free(out.error);
  lp_kube_client_close(kube, free_config, cfg);
  return out.object;
}

/* The provider ID to fetch: --provider-id, or the NodeClaim's status.providerID (a new string). */
static char *provider_id_of(uv_loop_t *loop, const instance_args *a, lp_error **err) {
  if (a->provider_id) return strdup(a->provider_id);
  json_t *claim = a->name ? claim_from_cluster(loop, a, err) : lp_load_json_or_yaml_file(a->nodeclaim, err);
  if (!claim) return NULL;
  const char *pid = json_string_value(json_object_get(json_object_get(claim, "status"), "providerID"));
  char *out = pid && *pid ? strdup(pid) : NULL;
  if (!out && a->name)
    lp_error_keep_first(
        err,
        lp_error_with(lp_error_new("NotLaunched",
                                   "nodeclaim/%s: the NodeClaim has no status.providerID (not launched yet)",
                                   a->name),
                      LP_ERROR_OBJECT, a->name));
  else if (!out)
    lp_error_set(err, "Usage", "%s: the NodeClaim has no status.providerID (not launched yet)", a->nodeclaim);
  json_decref(claim);
  return out;
}

static json_t *fetch(uv_loop_t *loop, lp_http_client *http, const instance_args *a, const char *pid,
                     lp_error **err) {
  lp_script_host_config cfg = {.loop = loop,
                               .scripts_dir = a->scripts,
                               .defaults_dir = lp_default_scripts_dir(),
                               .modules = lp_contract_modules,
                               .http = http};
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  if (!h) {
    char *text = lp_problems_render(&problems);
    lp_error_set(err, "ScriptError", "the scripts do not load: %s", text);
    free(text);
  }
  lp_problems_free(&problems);
  if (!h) return NULL;
  lp_cloudprovider *cp = lp_cloudprovider_new(&(lp_cloudprovider_config){
      .loop = loop, .scripts = h, .cluster_id = a->cluster_id, .endpoint = a->endpoint});
  lp_cp_outcome out = {0};
  lp_cp_get_instance(cp, pid, lp_cp_outcome_store, &out);
  lp_cp_outcome_wait(loop, &out);
  lp_cloudprovider_free(cp);
  lp_script_host_close(h, NULL, NULL);
  if (out.error) lp_error_keep_first(err, out.error); /* with the cloud's reason, action, request ID */
  return out.value;
}

int lp_cmd_instance(int argc, char **argv) {
  instance_args a = {0};
  const lp_cli_opt opts[] = {{"--kubeconfig", &a.kubeconfig, NULL},
                             {"--nodeclaim", &a.nodeclaim, NULL},
                             {"--provider-id", &a.provider_id, NULL},
                             {"--endpoint", &a.endpoint, NULL},
                             {"--scripts", &a.scripts, NULL},
                             {"--cluster-id", &a.cluster_id, NULL},
                             {NULL, NULL, NULL}};
  const char *positional[1] = {NULL};
  lp_cli_args args = {.cmd = "instance", .opts = opts, .positional = positional, .max_positional = 1};
  int parsed = lp_cli_parse(&args, argc, argv);
  if (parsed == LP_CLI_HELP) {
    fputs(usage, stdout);
    return 0;
  }
  if (parsed != LP_CLI_OK) return 2;
  a.name = positional[0];
  if ((a.name != NULL) + (a.nodeclaim != NULL) + (a.provider_id != NULL) != 1)
    return lp_cli_usage_error("instance", "give one of NAME, --nodeclaim FILE and --provider-id ID");
  if (a.kubeconfig && !a.name)
    return lp_cli_usage_error("instance", "--kubeconfig reads a NodeClaim by NAME; give its name");
  const char *level = args.log_level;
  if (!level && !getenv("LUAPROV_LOG_LEVEL")) level = "warn"; /* stdout is the answer */
  if (lp_cli_configure_logging(level, args.log_format) != 0) return 2;
  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_error *err = NULL;
  json_t *instance = NULL;
  char *pid = provider_id_of(&loop, &a, &err);
  lp_http_client *http = pid ? lp_http_client_new(&loop, NULL, &err) : NULL;
  if (http) instance = fetch(&loop, http, &a, pid, &err);
  char *text = instance ? json_dumps(instance, JSON_COMPACT) : NULL;
  int status = 0;
  if (text) {
    printf("%s\n", text);
  } else {
    if (!err) err = lp_error_new("BadOutput", "the instance cannot be written as JSON");
    status = lp_cli_print_error(err);
  }
  free(text);
  free(pid);
  json_decref(instance);
  lp_error_free(err);
  if (http) lp_http_client_close(http, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return status;
}
