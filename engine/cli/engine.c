#include "cli/engine.h"

#include "cli/engine_kube.h"
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "contract/contracts.h"
#include "contract/nodegroup.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"
#include "grpc/externalgrpc.h"
#include "grpc/server.h"
#include "http/client.h"
#include "http/server.h"
#include "luaprov_version.h"
#include "script/host.h"
#include "script/tree.h"
#include "sim/sim.h"

#define LOGGER "engine"

typedef struct engine {
  uv_loop_t loop;
  uv_signal_t sigterm, sigint, sighup;
  uv_timer_t drain;
  lp_http_client *http;
  lp_http_server *server;
  lp_script_host *scripts;
  lp_sim *sim;               /* --sim */
  char *cloud_endpoint;      /* --sim: the URL of the simulator the CloudProvider mapping names */
  lp_grpc_server *grpc;      /* --grpc-addr */
  lp_nodegroups *nodegroups; /* the NodeGroup contract behind it */
  lp_externalgrpc *externalgrpc;
  engine_kube *kube; /* the controllers, when a Kubernetes API is configured */
  int waiting_for_kube;
  int shutting_down;
  double shutdown_deadline;
} engine;

/* ---- health and metrics ------------------------------------------------------------------ */

/* The loop answers, so it turns; only a wedged leader renew loop makes the process unhealthy. */
static void serve_healthz(const lp_http_request *req, lp_http_response *res, void *ud) {
  engine *e = ud;
  if (e->kube && !engine_kube_healthy(e->kube)) {
    static const char body[] = "leader election: the lease was not renewed in time\n";
    lp_http_respond(res, 500, "text/plain; charset=utf-8", body, sizeof body - 1);
    return;
  }
  lp_http_respond(res, 200, "text/plain; charset=utf-8", "ok\n", 3);
}

static void serve_readyz(const lp_http_request *req, lp_http_response *res, void *ud) {
  engine *e = ud;
  int scripts_ok = e->scripts != NULL;
  int caches_ok = !e->kube || engine_kube_ready(e->kube);
  int ready = scripts_ok && caches_ok && !e->shutting_down;
  char body[256];
  int n;
  if (strstr(req->query, "verbose")) {
    n = snprintf(body, sizeof body, "[%c]scripts %s\n[%c]caches %s\n[%c]shutdown %s\nreadyz check %s\n",
                 scripts_ok ? '+' : '-', scripts_ok ? "ok" : "failed", caches_ok ? '+' : '-',
                 !e->kube    ? "ok (no controllers)"
                 : caches_ok ? "synced"
                             : "not synced yet",
                 e->shutting_down ? '-' : '+', e->shutting_down ? "in progress" : "ok",
                 ready ? "passed" : "failed");
  } else {
    n = snprintf(body, sizeof body, "%s\n", ready ? "ok" : "not ready");
  }
  lp_http_respond(res, ready ? 200 : 503, "text/plain; charset=utf-8", body, (size_t)n);
}

static void serve_metrics(const lp_http_request *req, lp_http_response *res, void *ud) {
  size_t len;
  char *text = lp_metrics_render(lp_metrics_default(), &len);
  lp_http_respond(res, 200, LP_METRICS_CONTENT_TYPE, text, len);
  free(text);
}

/* ---- shutdown ---------------------------------------------------------------------------- */

static void closed_handle(uv_handle_t *h) {}

/* Shutdown, in order: stop accepting (HTTP, gRPC), let script calls finish until the deadline, close
 * the script host (cancelling the rest; every gRPC call in flight gets its answer), close the gRPC
 * server, the simulators, the HTTP client, and the loop's own handles. */
static void http_client_closed(void *ud) {
  engine *e = ud;
  uv_close((uv_handle_t *)&e->sigterm, closed_handle);
  uv_close((uv_handle_t *)&e->sigint, closed_handle);
  uv_close((uv_handle_t *)&e->sighup, closed_handle);
  uv_close((uv_handle_t *)&e->drain, closed_handle);
  lp_info(LOGGER, "shutdown complete");
}

static void sim_closed(void *ud) {
  engine *e = ud;
  e->sim = NULL;
  free(e->cloud_endpoint);
  e->cloud_endpoint = NULL;
  lp_http_client_close(e->http, http_client_closed, e);
}

/* The scripts did not load: nothing but the simulators and the HTTP client was started. */
static void unstarted_sim_closed(void *ud) {
  engine *e = ud;
  e->sim = NULL;
  lp_http_client_close(e->http, NULL, NULL);
}

/* The simulators and the HTTP client go last: the controllers' requests need them until they stop. */
static void close_simulators(engine *e) {
  if (e->sim)
    lp_sim_close(e->sim, sim_closed, e);
  else
    sim_closed(e);
}

static void kube_stopped(void *ud) {
  engine *e = ud;
  e->kube = NULL;
  if (e->waiting_for_kube) close_simulators(e);
}

static void grpc_closed(void *ud) {
  engine *e = ud;
  e->grpc = NULL;
  lp_externalgrpc_free(e->externalgrpc);
  lp_nodegroups_free(e->nodegroups);
  e->externalgrpc = NULL;
  e->nodegroups = NULL;
  if (e->kube) {
    e->waiting_for_kube = 1; /* kube_stopped continues */
    return;
  }
  close_simulators(e);
}

/* The NodeGroup operations cancelled by the script host's close end on the next loop turns. */
static void grpc_drain_tick(uv_timer_t *t) {
  engine *e = t->data;
  if (lp_nodegroups_in_flight(e->nodegroups) > 0) return;
  uv_timer_stop(t);
  lp_grpc_server_close(e->grpc, grpc_closed, e);
}

static void scripts_closed(void *ud) {
  engine *e = ud;
  e->scripts = NULL;
  if (e->grpc)
    uv_timer_start(&e->drain, grpc_drain_tick, 0, 10);
  else
    grpc_closed(e);
}

static void drain_tick(uv_timer_t *t) {
  engine *e = t->data;
  size_t in_flight = lp_script_host_tasks_in_flight(e->scripts);
  if (in_flight > 0 && lp_clock_monotonic() < e->shutdown_deadline) return;
  uv_timer_stop(t);
  if (in_flight > 0)
    lp_warn(LOGGER, "shutdown deadline reached, cancelling script calls",
            LPF_INT("in_flight", (long long)in_flight));
  /* no new script calls from here on */
  if (e->nodegroups) lp_nodegroups_shutdown(e->nodegroups);
  if (e->kube) engine_kube_shutdown_cloud(e->kube);
  lp_script_host_close(e->scripts, scripts_closed, e);
}

static void server_closed(void *ud) {
  engine *e = ud;
  e->server = NULL;
  /* the controllers stop taking keys now; reconciles awaiting script calls end by the deadline */
  if (e->kube) engine_kube_stop(e->kube, kube_stopped, e);
  uv_timer_start(&e->drain, drain_tick, 0, 50);
}

static void begin_shutdown(engine *e, const char *signal_name, unsigned timeout_ms) {
  if (e->shutting_down) {
    lp_warn(LOGGER, "second signal, exiting now", LPF_STR("signal", signal_name));
    lp_log_flush();
    _exit(1);
  }
  e->shutting_down = 1;
  e->shutdown_deadline = lp_clock_monotonic() + timeout_ms / 1000.0;
  lp_info(LOGGER, "shutting down", LPF_STR("signal", signal_name),
          LPF_INT("in_flight", (long long)lp_script_host_tasks_in_flight(e->scripts)),
          LPF_INT("timeout_ms", timeout_ms));
  if (e->externalgrpc) lp_externalgrpc_stop(e->externalgrpc);
  lp_http_server_close(e->server, server_closed, e);
}

static unsigned shutdown_timeout_ms;

static void on_signal(uv_signal_t *handle, int signum) {
  engine *e = handle->data;
  if (signum == SIGHUP) {
    if (!e->shutting_down) lp_script_host_reload(e->scripts, "SIGHUP", 1, NULL);
    return;
  }
  begin_shutdown(e, signum == SIGTERM ? "SIGTERM" : "SIGINT", shutdown_timeout_ms);
}

/* ---- start ------------------------------------------------------------------------------- */

typedef struct fetched {
  int done;
  long status;
  char *body;
} fetched;

static void got_body(lp_http_result *r, void *ud) {
  fetched *f = ud;
  f->status = r->status;
  f->body = r->body ? lp_xstrdup(r->body) : NULL;
  f->done = 1;
  lp_http_result_free(r);
}

/* The UID of the simulated BKE cluster (GET /_sim/cluster), served by this very loop. */
static char *sim_cluster_uid(engine *e, const char *bizfly_url) {
  char *url = lp_xasprintf("%s/_sim/cluster", bizfly_url);
  lp_http_request_opts req = {.method = "GET", .url = url, .idempotent = 1};
  fetched f = {0};
  lp_http_client_request(e->http, &req, got_body, &f);
  while (!f.done) uv_run(&e->loop, UV_RUN_ONCE);
  free(url);
  json_t *summary = f.status == 200 && f.body ? json_loads(f.body, 0, NULL) : NULL;
  const char *uid = json_string_value(json_object_get(summary, "uid"));
  char *out = uid ? lp_xstrdup(uid) : NULL;
  json_decref(summary);
  free(f.body);
  return out;
}

/* --sim: the simulators on this loop, and the environment the provider mappings read pointed at
 * them (the simulators' own, published credentials; see docs/sim.md and docs/bizfly.md). */
static int start_simulators(engine *e, const lp_engine_options *opts) {
  lp_error *err = NULL;
  e->sim = lp_sim_start(&e->loop, &(lp_sim_options){0}, &err);
  if (!e->sim) {
    lp_errorlog(LOGGER, "cannot start the simulators", LPF_STR("error", err->message));
    lp_error_free(err);
    return -1;
  }
  const char *bizfly = lp_sim_url(e->sim, "bizfly");
  if (bizfly) {
    setenv("LUAPROV_BIZFLY_ENDPOINT", bizfly, 1);
    setenv("BIZFLYCLOUD_AUTH_METHOD", "application_credential", 1);
    setenv("BIZFLYCLOUD_APP_CREDENTIAL_ID", "luaprov-sim-credential", 1);
    setenv("BIZFLYCLOUD_APP_CREDENTIAL_SECRET", "luaprov-sim-secret", 1);
    if (!opts->bizfly_cluster) {
      char *uid = sim_cluster_uid(e, bizfly);
      if (uid) setenv("CLUSTER_NAME", uid, 1);
      free(uid);
    }
  }
  return 0;
}

/* --sim, once the scripts are loaded: the CloudProvider mapping's `sim` table names the simulator that
 * stands in for its cloud, the variable that points the mapping at a URL, and the simulator's own,
 * published credentials (docs/contracts.md#mappings). */
static void point_mapping_at_sim(engine *e) {
  json_t *sim = lp_script_host_module_json(e->scripts, LUAPROV_CLOUDPROVIDER_MAPPING, "sim");
  const char *url = lp_sim_url(e->sim, json_string_value(json_object_get(sim, "service")));
  if (url) {
    e->cloud_endpoint = lp_xstrdup(url);
    const char *endpoint_env = json_string_value(json_object_get(sim, "endpoint_env"));
    if (endpoint_env) setenv(endpoint_env, url, 1);
    const char *name;
    json_t *value;
    json_object_foreach(json_object_get(sim, "env"), name, value) {
      if (json_is_string(value)) setenv(name, json_string_value(value), 1);
    }
  } else {
    lp_warn(LOGGER, "the CloudProvider mapping names no simulator that runs",
            LPF_STR("fix", "set M.sim = {service = <a sim/ module>, ...} in the mapping"));
  }
  json_decref(sim);
}

/* --grpc-addr: the externalgrpc CloudProvider server over the NodeGroup mapping. */
static int start_externalgrpc(engine *e, const lp_engine_options *opts) {
  if (!lp_generation_module_file(lp_script_host_current(e->scripts), "providers.bizfly")) {
    lp_errorlog(LOGGER, "cannot serve externalgrpc: the scripts hold no NodeGroup mapping",
                LPF_STR("expected", "providers/bizfly/init.lua"));
    return -1;
  }
  lp_error *err = NULL;
  lp_grpc_server_options gopts = {.host = opts->grpc_host,
                                  .port = opts->grpc_port,
                                  .cert_file = opts->grpc_cert,
                                  .key_file = opts->grpc_key,
                                  .ca_file = opts->grpc_ca};
  e->grpc = lp_grpc_server_new(&e->loop, &gopts, &err);
  if (!e->grpc) {
    lp_errorlog(LOGGER, "cannot create the gRPC server", LPF_STR("code", err->code),
                LPF_STR("error", err->message));
    lp_error_free(err);
    return -1;
  }
  e->nodegroups = lp_nodegroups_new(&(lp_nodegroups_config){
      .loop = &e->loop,
      .scripts = e->scripts,
      .cluster = opts->bizfly_cluster,
      .endpoint = e->sim ? lp_sim_url(e->sim, "bizfly") : NULL,
  });
  e->externalgrpc = lp_externalgrpc_new(e->grpc, e->nodegroups);
  if (!opts->bizfly_cluster && !getenv("CLUSTER_NAME"))
    lp_warn(LOGGER, "no Bizfly cluster named: every Refresh will fail until one is",
            LPF_STR("fix", "set CLUSTER_NAME to the BKE cluster UID, or pass --bizfly-cluster"));
  if (lp_grpc_server_listen(e->grpc, &err) != 0) {
    lp_errorlog(LOGGER, "cannot serve externalgrpc", LPF_STR("error", err->message));
    lp_error_free(err);
    return -1;
  }
  return 0;
}

/* The in-cluster controller, when a Kubernetes API is configured (--sim names the simulator's). */
static int start_controllers(engine *e, const lp_engine_options *opts) {
  engine_kube_options kopts = {
      .kubeconfig = opts->kubeconfig,
      .sim_server = e->sim ? lp_sim_url(e->sim, "kubernetes") : NULL,
      .leader_elect = opts->leader_elect,
      .cluster_id = opts->cluster_id ? opts->cluster_id : (e->sim ? "luaprov-sim" : NULL),
      .provider_flags = opts->provider_flags,
      .sim = e->sim != NULL,
      .cloud_endpoint = e->cloud_endpoint,
      .ca_file = opts->ca_file,
      .settings = opts->settings,
  };
  if (!engine_kube_wanted(&kopts)) {
    lp_info(LOGGER, "no Kubernetes API configured: the controllers are off",
            LPF_STR("fix", "pass --kubeconfig, run in a cluster, or use --sim"));
    return 0;
  }
  e->kube = engine_kube_start(&e->loop, e->scripts, &kopts);
  return e->kube ? 0 : -1;
}

int lp_engine_run(const lp_engine_options *opts) {
  engine e;
  memset(&e, 0, sizeof e);
  shutdown_timeout_ms = opts->shutdown_timeout_ms ? opts->shutdown_timeout_ms : 10000;
  uv_loop_init(&e.loop);
  lp_gauge_set(lp_metrics_gauge(lp_metrics_default(), "luaprov_build_info", "Build information; always 1.",
                                LP_LABELS("version")),
               LP_LABELS(LUAPROV_VERSION), 1);

  lp_error *err = NULL;
  lp_http_client_options http_opts = {.ca_file = opts->ca_file};
  e.http = lp_http_client_new(&e.loop, &http_opts, &err);
  if (!e.http) {
    lp_errorlog(LOGGER, "cannot create the HTTP client", LPF_STR("error", err->message));
    lp_error_free(err);
    return 1;
  }
  if (opts->sim && start_simulators(&e, opts) != 0) return 1;

  lp_script_host_config cfg = {
      .loop = &e.loop,
      .scripts_dir = opts->scripts_dir,
      .defaults_dir = lp_default_scripts_dir(),
      .modules = lp_contract_modules,
      .http = e.http,
      .watch = 1,
  };
  lp_problems problems = {0};
  e.scripts = lp_script_host_new(&cfg, &problems);
  if (!e.scripts) {
    for (size_t i = 0; i < problems.count; i++)
      lp_errorlog(LOGGER, "scripts failed to load", LPF_STR("file", problems.items[i].file),
                  LPF_INT("line", problems.items[i].line), LPF_STR("error", problems.items[i].message));
    lp_problems_free(&problems);
    if (e.sim) /* its servers would keep the loop running */
      lp_sim_close(e.sim, unstarted_sim_closed, &e);
    else
      lp_http_client_close(e.http, NULL, NULL);
    uv_run(&e.loop, UV_RUN_DEFAULT);
    uv_loop_close(&e.loop);
    return 1;
  }

  e.server = lp_http_server_new(&e.loop, NULL);
  lp_http_server_route(e.server, "GET", "/healthz", serve_healthz, &e);
  lp_http_server_route(e.server, "GET", "/livez", serve_healthz, &e);
  lp_http_server_route(e.server, "GET", "/readyz", serve_readyz, &e);
  lp_http_server_route(e.server, "GET", "/metrics", serve_metrics, &e);
  const char *host = opts->metrics_host ? opts->metrics_host : "127.0.0.1";
  if (lp_http_server_listen(e.server, host, opts->metrics_port, &err) != 0) {
    lp_errorlog(LOGGER, "cannot serve metrics and health", LPF_STR("error", err->message));
    lp_error_free(err);
    return 1;
  }
  if (e.sim) point_mapping_at_sim(&e);
  if (opts->grpc_host && start_externalgrpc(&e, opts) != 0) return 1;
  if (start_controllers(&e, opts) != 0) return 1;

  uv_timer_init(&e.loop, &e.drain);
  e.drain.data = &e;
  uv_signal_t *signals[] = {&e.sigterm, &e.sigint, &e.sighup};
  int signums[] = {SIGTERM, SIGINT, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(&e.loop, signals[i]);
    signals[i]->data = &e;
    uv_signal_start(signals[i], on_signal, signums[i]);
  }
  char addr[300];
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, lp_http_server_port(e.server));
  char grpc_addr[300] = "";
  if (e.grpc)
    snprintf(grpc_addr, sizeof grpc_addr, strchr(opts->grpc_host, ':') ? "[%s]:%d" : "%s:%d", opts->grpc_host,
             lp_grpc_server_port(e.grpc));
  char *sim_endpoints = e.sim ? lp_sim_endpoints_json(e.sim) : NULL;
  const lp_field none = {.type = LP_FIELD_NONE};
  lp_info(LOGGER, "engine started", LPF_STR("version", LUAPROV_VERSION), LPF_STR("metrics_addr", addr),
          e.grpc ? LPF_STR("grpc_addr", grpc_addr) : none,
          e.grpc ? LPF_BOOL("grpc_tls", opts->grpc_cert != NULL) : none,
          sim_endpoints ? LPF_JSON("sim", sim_endpoints) : none,
          LPF_INT("generation", (long long)lp_script_host_generation_id(e.scripts)),
          LPF_INT("pid", getpid()));
  free(sim_endpoints);

  uv_run(&e.loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&e.loop);
  if (rc != 0)
    lp_warn(LOGGER, "event loop closed with handles still open", LPF_STR("error", uv_strerror(rc)));
  lp_log_flush();
  return 0;
}
