/* The engine process: one libuv loop owning the HTTP client, the script host, the health and
 * metrics server and the signal handlers. SIGTERM/SIGINT shut down gracefully: stop accepting work,
 * let script calls in flight finish until the shutdown deadline, cancel the rest, close everything,
 * flush logs. A second SIGINT/SIGTERM exits at once. SIGHUP reloads the scripts. */
#ifndef LUAPROV_CLI_ENGINE_H
#define LUAPROV_CLI_ENGINE_H

#include "controller/controller.h"

typedef struct lp_engine_options {
  const char *scripts_dir;      /* operator tree; NULL = defaults only */
  const char *metrics_host;     /* NULL = 127.0.0.1 */
  int metrics_port;             /* 0 = pick a free port (logged) */
  unsigned shutdown_timeout_ms; /* 0 = 10 s */
  const char *ca_file;          /* TLS trust for luaprov.http.request; NULL = system bundle */
  /* --sim: the simulators run in-process and the provider mappings are pointed at them (endpoints
   * and the simulators' credentials in the environment the mappings read). */
  int sim;
  /* The externalgrpc CloudProvider server (docs/bizfly.md); grpc_host NULL = not served. mTLS when cert,
   * key and ca are all set; plaintext h2c when none is. */
  const char *grpc_host;
  int grpc_port; /* 0 = pick a free port (logged as grpc_addr) */
  const char *grpc_cert, *grpc_key, *grpc_ca;
  const char
      *bizfly_cluster; /* ctx.cluster of the NodeGroup mapping; NULL = $CLUSTER_NAME, or the simulator's */
  /* The in-cluster controller: the Kubernetes API from --kubeconfig, or in-cluster when
   * KUBERNETES_SERVICE_HOST is set, or the simulator with --sim; none of them = no controllers. */
  const char *kubeconfig;
  int leader_elect;
  const char *cluster_id; /* NULL = $CLUSTER_ID ("luaprov-sim" with --sim) */
  /* --<setting> VALUE for the CloudProvider mapping's settings (owned by the caller; NULL = none): the
   * engine refuses to start the controllers when one names no setting or a required one has no value */
  const json_t *provider_flags;
  lp_ctrl_settings settings; /* --config; zeros = defaults */
} lp_engine_options;

/* Runs until shut down. Returns the process exit status: 0 after a clean shutdown, 1 when the
 * engine could not start (the reason is logged). */
int lp_engine_run(const lp_engine_options *opts);

#endif
