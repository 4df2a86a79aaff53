#include "cli/engine_kube.h"

#include <stdlib.h>
#include <string.h>

#include "contract/cloudprovider.h"
#include "contract/settings.h"
#include "core/log.h"
#include "kube/client.h"
#include "kube/config.h"

#define LOGGER "engine"

struct engine_kube {
  lp_kube_config *config;
  lp_kube_client *client;
  lp_cloudprovider *cloud;
  lp_controllers *manager;
  void (*on_done)(void *ud);
  void *on_done_ud;
};

int engine_kube_wanted(const engine_kube_options *opts) {
  const char *host = getenv("KUBERNETES_SERVICE_HOST");
  return opts->sim_server || opts->kubeconfig || (host && *host);
}

static lp_kube_config *load_config(const engine_kube_options *opts, lp_error **err) {
  if (opts->sim_server) return lp_kube_config_for_server(opts->sim_server, "kube-system");
  if (opts->kubeconfig) return lp_kube_config_load_file(opts->kubeconfig, err);
  return lp_kube_config_in_cluster(NULL, err);
}

static void free_parts(engine_kube *k) {
  if (k->cloud) lp_cloudprovider_free(k->cloud);
  lp_kube_config_free(k->config);
  free(k);
}

static void free_parts_when_closed(void *ud) {
  free_parts(ud);
}

engine_kube *engine_kube_start(uv_loop_t *loop, lp_script_host *scripts, const engine_kube_options *opts) {
  const char *cluster_id = opts->cluster_id ? opts->cluster_id : getenv("CLUSTER_ID");
  if (!cluster_id || !*cluster_id) {
    lp_errorlog(LOGGER, "the controllers need the cluster ID",
                LPF_STR("fix", "set CLUSTER_ID or pass --cluster-id"));
    return NULL;
  }
  json_t *declared = lp_script_host_module_json(scripts, LUAPROV_CLOUDPROVIDER_MAPPING, "settings");
  char *problem = NULL;
  json_t *settings = lp_settings_resolve(declared, opts->provider_flags,
                                         opts->sim ? LP_SETTINGS_SIM_FIRST : LP_SETTINGS_REAL, &problem);
  json_decref(declared);
  if (!settings) {
    lp_errorlog(LOGGER, "the controllers need the settings of the CloudProvider mapping",
                LPF_STR("error", problem), LPF_STR("help", "luaprov run --help lists them"));
    free(problem);
    return NULL;
  }
  engine_kube *k = lp_xcalloc(1, sizeof *k);
  lp_error *err = NULL;
  k->config = load_config(opts, &err);
  if (!k->config) {
    lp_errorlog(LOGGER, "cannot configure the Kubernetes client", LPF_STR("code", err->code),
                LPF_STR("error", err->message));
    lp_error_free(err);
    free(k);
    json_decref(settings);
    return NULL;
  }
  /* below the leader's renew deadline, so a hung request cannot cost the lease on its own */
  lp_http_client_options http = {.default_timeout_ms = 8000, .max_retries = 1, .ca_file = opts->ca_file};
  k->client = lp_kube_client_new(loop, k->config, &http, &err);
  if (!k->client) {
    lp_errorlog(LOGGER, "cannot create the Kubernetes client", LPF_STR("error", err->message));
    lp_error_free(err);
    free_parts(k);
    json_decref(settings);
    return NULL;
  }
  k->cloud = lp_cloudprovider_new(&(lp_cloudprovider_config){.loop = loop,
                                                             .scripts = scripts,
                                                             .settings = settings,
                                                             .cluster_id = cluster_id,
                                                             .endpoint = opts->cloud_endpoint});
  const char *pod_name = getenv("POD_NAME");
  k->manager = lp_controllers_start(
      &(lp_controllers_config){.loop = loop,
                               .kube = k->client,
                               .cloud = k->cloud,
                               .controllers = lp_controllers_default,
                               .settings = opts->settings,
                               .leader_elect = opts->leader_elect,
                               /* a Pod's name is unique among replicas */
                               .leader_identity = pod_name && *pod_name ? pod_name : NULL},
      &err);
  if (!k->manager) {
    lp_errorlog(LOGGER, "cannot start the controllers", LPF_STR("code", err->code),
                LPF_STR("error", err->message));
    lp_error_free(err);
    lp_kube_client_close(k->client, free_parts_when_closed, k);
    json_decref(settings);
    return NULL;
  }
  char *shown = json_dumps(settings, JSON_COMPACT | JSON_SORT_KEYS);
  lp_info(LOGGER, "controllers starting", LPF_STR("kubernetes", k->config->server),
          LPF_STR("config", k->config->source), LPF_BOOL("leader_elect", opts->leader_elect),
          LPF_STR("cluster_id", cluster_id), LPF_JSON("settings", shown));
  free(shown);
  json_decref(settings);
  return k;
}

int engine_kube_ready(const engine_kube *k) {
  return lp_controllers_synced(k->manager);
}
int engine_kube_healthy(const engine_kube *k) {
  return lp_controllers_healthy(k->manager);
}

void engine_kube_shutdown_cloud(engine_kube *k) {
  lp_cloudprovider_shutdown(k->cloud);
}

static void client_closed(void *ud) {
  engine_kube *k = ud;
  void (*cb)(void *) = k->on_done;
  void *cb_ud = k->on_done_ud;
  free_parts(k);
  if (cb) cb(cb_ud);
}

static void manager_stopped(void *ud) {
  engine_kube *k = ud;
  k->manager = NULL;
  lp_kube_client_close(k->client, client_closed, k);
}

void engine_kube_stop(engine_kube *k, void (*on_done)(void *ud), void *ud) {
  k->on_done = on_done;
  k->on_done_ud = ud;
  lp_controllers_stop(k->manager, manager_stopped, k);
}
