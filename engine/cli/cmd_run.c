/* luaprov run: the engine process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/engine.h"
#include "cli/run_config.h"
#include "cli/mapping_exports.h"
#include "contract/settings.h"
#include "core/buf.h"

static const char usage[] =
    "usage: luaprov run [--sim] [--config FILE] [--kubeconfig FILE] [--leader-elect] [--cluster-id ID]\n"
    "                   [--SETTING VALUE ...]\n"
    "                   [--scripts DIR] [--metrics-addr HOST:PORT] [--shutdown-timeout SECONDS]\n"
    "                   [--grpc-addr HOST:PORT [--grpc-cert FILE --grpc-key FILE --grpc-ca FILE]]\n"
    "                   [--bizfly-cluster UID] [--ca-file FILE] [--log-level LEVEL] [--log-format "
    "json|text]\n"
    "\n"
    "Runs the engine: loads the scripts (DIR first, the default tree for files DIR does not hold),\n"
    "reloads them when files under the trees change or on SIGHUP (a script that fails to load or\n"
    "validate is rejected and the previous generation keeps serving), and serves /healthz, /readyz and\n"
    "/metrics on --metrics-addr (default 127.0.0.1:8080; port 0 picks a free port, logged at start).\n"
    "SIGTERM or SIGINT shut down gracefully: script calls in flight get --shutdown-timeout (default 10)\n"
    "seconds to finish.\n"
    "\n"
    "The in-cluster controller (node class status, NodeClaim launch/registration/initialization,\n"
    "termination, garbage collection) runs against the Kubernetes API named by --kubeconfig, or the\n"
    "service account's when KUBERNETES_SERVICE_HOST is set (in a Pod), or the simulator with --sim.\n"
    "It needs the cluster ID (--cluster-id / $CLUSTER_ID) and the settings the CloudProvider mapping\n"
    "declares, listed below.\n"
    "--leader-elect campaigns for the Lease luaprov-leader-election in $POD_NAMESPACE (else the\n"
    "kubeconfig's namespace, else kube-system): only the holder reconciles, the others keep warm caches.\n"
    "/readyz turns 200 once every cache has listed. --config FILE (YAML) tunes the controllers'\n"
    "timings (launch and registration timeouts, garbage collection, workers): see docs/controllers.md.\n"
    "\n"
    "--grpc-addr serves the Cluster Autoscaler's externalgrpc CloudProvider protocol (use it with\n"
    "--cloud-provider=externalgrpc) from the Bizfly mapping, providers/bizfly/init.lua: plaintext h2c,\n"
    "or mTLS when --grpc-cert, --grpc-key and --grpc-ca are all given (client certificates signed by\n"
    "--grpc-ca are required). Port 0 picks a free port; the \"engine started\" log line names it\n"
    "(grpc_addr). The mapping reads the BIZFLYCLOUD_* variables; --bizfly-cluster (default\n"
    "$CLUSTER_NAME) is the BKE cluster UID whose worker pools are the node groups.\n"
    "\n"
    "--sim starts the built-in simulators in-process (the Kubernetes API and each cloud's, as\n"
    "`luaprov sim` serves them), points the providers at them with the simulators' credentials and\n"
    "runs every controller against the simulated Kubernetes API (cluster ID luaprov-sim, each setting\n"
    "its simulator value). The \"engine started\" line names the simulators' URLs (sim).\n";

/* The usage, then the settings of the CloudProvider mapping in the tree. */
static void print_usage(FILE *out, const char *scripts_dir) {
  fputs(usage, out);
  char *problem = NULL;
  json_t *declared = lp_cli_mapping_settings(scripts_dir, &problem);
  lp_buf lines = LP_BUF_INIT;
  if (declared) lp_settings_usage(declared, &lines);
  fprintf(out, "\nSettings of the CloudProvider mapping (--SETTING VALUE, else the environment):\n%s",
          declared ? lp_buf_cstr(&lines) : problem);
  lp_buf_free(&lines);
  json_decref(declared);
  free(problem);
}

/* The value of --scripts in argv, for the help (which lists the settings of that tree). */
static const char *scripts_arg(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--scripts") == 0) return argv[i + 1];
  return NULL;
}

int lp_cmd_run(int argc, char **argv) {
  json_t *flags = json_object(); /* --SETTING VALUE, checked against the mapping below */
  lp_engine_options opts = {.metrics_port = 8080, .provider_flags = flags};
  const char *metrics_addr = NULL, *grpc_addr = NULL, *config = NULL, *shutdown = NULL;
  char *metrics_host = NULL, *grpc_host = NULL;
  const lp_cli_opt options[] = {{"--scripts", &opts.scripts_dir, NULL},
                                {"--metrics-addr", &metrics_addr, NULL},
                                {"--shutdown-timeout", &shutdown, NULL},
                                {"--ca-file", &opts.ca_file, NULL},
                                {"--grpc-addr", &grpc_addr, NULL},
                                {"--grpc-cert", &opts.grpc_cert, NULL},
                                {"--grpc-key", &opts.grpc_key, NULL},
                                {"--grpc-ca", &opts.grpc_ca, NULL},
                                {"--bizfly-cluster", &opts.bizfly_cluster, NULL},
                                {"--config", &config, NULL},
                                {"--kubeconfig", &opts.kubeconfig, NULL},
                                {"--cluster-id", &opts.cluster_id, NULL},
                                {"--leader-elect", NULL, &opts.leader_elect},
                                {"--sim", NULL, &opts.sim},
                                {NULL, NULL, NULL}};
  lp_cli_args a = {.cmd = "run", .opts = options, .settings = flags};
  int parsed = lp_cli_parse(&a, argc, argv);
  if (parsed != LP_CLI_OK) {
    if (parsed == LP_CLI_HELP) print_usage(stdout, scripts_arg(argc, argv));
    json_decref(flags);
    return parsed == LP_CLI_HELP ? 0 : 2;
  }
  const char *level = a.log_level, *format = a.log_format;
  if (shutdown) {
    char *end;
    double seconds = strtod(shutdown, &end);
    if (*end || seconds < 0) {
      json_decref(flags);
      return lp_cli_usage_error("run", "--shutdown-timeout needs a number of seconds >= 0, got '%s'",
                                shutdown);
    }
    opts.shutdown_timeout_ms = (unsigned)(seconds * 1000);
  }
  char *unknown = lp_cli_unknown_setting(opts.scripts_dir, flags);
  if (unknown) {
    lp_cli_usage_error("run", "%s", unknown);
    free(unknown);
    json_decref(flags);
    return 2;
  }
  if (lp_cli_configure_logging(level, format) != 0) return 2;
  if (config && lp_run_config_load(config, &opts.settings) != 0) return 2;
  if (metrics_addr &&
      lp_cli_parse_addr("--metrics-addr", metrics_addr, &metrics_host, &opts.metrics_port) != 0)
    return 2;
  opts.metrics_host = metrics_host;
  int tls_files = !!opts.grpc_cert + !!opts.grpc_key + !!opts.grpc_ca;
  if (tls_files != 0 && tls_files != 3) {
    lp_cli_usage_error("run", "mTLS needs all three of --grpc-cert, --grpc-key and --grpc-ca (or none for "
                              "plaintext h2c)");
    free(metrics_host);
    return 2;
  }
  if (tls_files && !grpc_addr) {
    lp_cli_usage_error("run", "--grpc-cert, --grpc-key and --grpc-ca need --grpc-addr");
    free(metrics_host);
    return 2;
  }
  if (grpc_addr && lp_cli_parse_addr("--grpc-addr", grpc_addr, &grpc_host, &opts.grpc_port) != 0) {
    free(metrics_host);
    return 2;
  }
  opts.grpc_host = grpc_host;
  int status = lp_engine_run(&opts);
  free(metrics_host);
  free(grpc_host);
  json_decref(flags);
  return status;
}
