/* luaprov instance: the instance document of a NodeClaim, fetched through the CloudProvider mapping's
 * get (lp_cp_get_instance), exactly what a drift policy receives as `instance`: save it and pass it to
 * `luaprov eval drift --instance FILE` (docs/writing-policies.md#a-real-instance-document). One JSON
 * document on stdout; {"error": ...} and exit 1 on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "contract/cloudprovider.h"
#include "contract/contracts.h"
#include "core/yaml.h"
#include "script/host.h"
#include "script/tree.h"

static const char usage[] =
    "usage: luaprov instance (--nodeclaim FILE | --provider-id ID) [--endpoint URL] [--scripts DIR]\n"
    "                        [--cluster-id ID]\n"
    "\n"
    "Prints the instance of the NodeClaim (its status.providerID; FILE as `kubectl get nodeclaim NAME\n"
    "-o yaml` writes it) as the mapping's get returns it: the document a drift policy receives, for\n"
    "`luaprov eval drift --instance`. --endpoint is the cloud API (a simulator's URL, e.g. the one\n"
    "`luaprov sim` prints); without it the mapping's own endpoint and credentials are used.\n";

typedef struct instance_args {
  const char *nodeclaim, *provider_id, *endpoint, *scripts, *cluster_id;
} instance_args;

/* The provider ID to fetch: --provider-id, or the NodeClaim file's status.providerID (a new string). */
static char *provider_id_of(const instance_args *a, lp_error **err) {
  if (a->provider_id) return strdup(a->provider_id);
  json_t *claim = lp_load_json_or_yaml_file(a->nodeclaim, err);
  if (!claim) return NULL;
  const char *pid = json_string_value(json_object_get(json_object_get(claim, "status"), "providerID"));
  char *out = pid && *pid ? strdup(pid) : NULL;
  if (!out)
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
  if (out.error) {
    lp_error_set(err, out.error->code, "%s", out.error->message);
    lp_error_free(out.error);
  }
  return out.value;
}

int lp_cmd_instance(int argc, char **argv) {
  instance_args a = {0};
  const lp_cli_opt opts[] = {{"--nodeclaim", &a.nodeclaim, NULL},   {"--provider-id", &a.provider_id, NULL},
                             {"--endpoint", &a.endpoint, NULL},     {"--scripts", &a.scripts, NULL},
                             {"--cluster-id", &a.cluster_id, NULL}, {NULL, NULL, NULL}};
  lp_cli_args args = {.cmd = "instance", .opts = opts};
  int parsed = lp_cli_parse(&args, argc, argv);
  if (parsed == LP_CLI_HELP) {
    fputs(usage, stdout);
    return 0;
  }
  if (parsed != LP_CLI_OK) return 2;
  if ((a.nodeclaim != NULL) == (a.provider_id != NULL))
    return lp_cli_usage_error("instance", "give one of --nodeclaim FILE and --provider-id ID");
  const char *level = args.log_level;
  if (!level && !getenv("LUAPROV_LOG_LEVEL")) level = "warn"; /* stdout is the answer */
  if (lp_cli_configure_logging(level, args.log_format) != 0) return 2;
  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_error *err = NULL;
  json_t *instance = NULL;
  char *pid = provider_id_of(&a, &err);
  lp_http_client *http = pid ? lp_http_client_new(&loop, NULL, &err) : NULL;
  if (http) instance = fetch(&loop, http, &a, pid, &err);
  char *text = instance ? json_dumps(instance, JSON_COMPACT) : NULL;
  int status = 0;
  if (text) {
    printf("%s\n", text);
  } else {
    json_t *doc = json_pack("{s:s}", "error", err ? err->message : "the instance cannot be written as JSON");
    char *shown = json_dumps(doc, JSON_COMPACT);
    printf("%s\n", shown ? shown : "{\"error\":\"?\"}");
    free(shown);
    json_decref(doc);
    status = 1;
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
