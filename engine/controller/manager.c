/* The controller manager (manager.h): informers feeding indices and controllers, leader election
 * deciding when the controllers run. */
#include "controller/manager.h"

#include <stdlib.h>
#include <string.h>

#include "controller/controller_internal.h"
#include "core/log.h"
#include "kube/leader.h"

#define LOGGER "controller.manager"

/* One informer: a kind's, or the node class's in one of its groups. */
typedef struct informer_ud {
  lp_controllers *m;
  lp_kind kind;
  const char *alias; /* LP_KIND_NODECLASS in an alias group: that group (keys "group/name"), else NULL */
  lp_informer *inf;
} informer_ud;

struct lp_controllers {
  lp_ctrl_env env;
  const lp_controller_def *const *defs;
  size_t ndefs;
  lp_controller **running; /* ndefs entries while active, else NULL */
  size_t closing;          /* controllers still stopping */
  informer_ud *informers;  /* every kind's, then the node class's alias groups' */
  size_t ninformers;
  lp_leader *leader;
  int leader_elect, leading, synced, stopping;
  int current; /* every informer current (lp_informer_current): listed, not relisting */
  int paused;  /* the running controllers are paused while current is 0 */
  lp_metric *synced_gauge, *active_gauge;
  uv_timer_t done_timer; /* runs on_done on a later loop turn */
  int pending_stop;      /* parts of the shutdown still in progress */
  void (*on_done)(void *ud);
  void *on_done_ud;
};

static void maybe_start_controllers(lp_controllers *m);
static void caches_changed(lp_controllers *m);

/* ---- informers ----------------------------------------------------------------------------- */

static void fan_out(lp_controllers *m, lp_kind kind, const char *key, const json_t *old_obj,
                    const json_t *new_obj) {
  env_index_update(&m->env, kind, key, old_obj, new_obj);
  if (!m->running) return;
  for (size_t i = 0; i < m->ndefs; i++) {
    const lp_controller_def *def = m->defs[i];
    if (def->primary == kind) lp_controller_enqueue(m->running[i], key);
    if (def->on_change) def->on_change(m->running[i], kind, old_obj, new_obj);
  }
}

/* The controllers' key of obj: the informer's, with the group in front in a node class alias group. */
static char *key_of(const informer_ud *iu, const json_t *obj) {
  char *key = lp_informer_key(obj);
  if (!key || !iu->alias) return key;
  char *keyed = env_nodeclass_key_in(iu->alias, key);
  free(key);
  return keyed;
}

static void on_add(lp_informer *inf, json_t *obj, void *ud) {
  (void)inf;
  informer_ud *iu = ud;
  char *key = key_of(iu, obj);
  if (key) fan_out(iu->m, iu->kind, key, NULL, obj);
  free(key);
}

static void on_update(lp_informer *inf, json_t *old_obj, json_t *new_obj, void *ud) {
  (void)inf;
  informer_ud *iu = ud;
  char *key = key_of(iu, new_obj);
  if (key) fan_out(iu->m, iu->kind, key, old_obj, new_obj);
  free(key);
}

static void on_delete(lp_informer *inf, json_t *obj, void *ud) {
  (void)inf;
  informer_ud *iu = ud;
  char *key = key_of(iu, obj);
  if (key) fan_out(iu->m, iu->kind, key, obj, NULL);
  free(key);
}

static void on_synced(lp_informer *inf, void *ud) {
  (void)inf;
  lp_controllers *m = ((informer_ud *)ud)->m;
  for (size_t i = 0; i < m->ninformers; i++)
    if (!lp_informer_synced(m->informers[i].inf)) return;
  m->synced = 1;
  size_t counts[LP_KIND_COUNT];
  for (int k = 0; k < LP_KIND_COUNT; k++) counts[k] = lp_env_count(&m->env, (lp_kind)k);
  lp_info(LOGGER, "caches synced", LPF_INT("nodeclaims", counts[LP_KIND_NODECLAIM]),
          LPF_INT("nodes", counts[LP_KIND_NODE]), LPF_INT("nodepools", counts[LP_KIND_NODEPOOL]),
          LPF_INT("nodeclasses", counts[LP_KIND_NODECLASS]), LPF_INT("pods", counts[LP_KIND_POD]),
          LPF_INT("daemonsets", counts[LP_KIND_DAEMONSET]), LPF_INT("pdbs", counts[LP_KIND_PDB]),
          LPF_INT("pvcs", counts[LP_KIND_PVC]), LPF_INT("pvs", counts[LP_KIND_PV]),
          LPF_INT("storageclasses", counts[LP_KIND_STORAGECLASS]));
  caches_changed(m);
}

static void on_current(lp_informer *inf, int current, void *ud) {
  (void)inf;
  (void)current;
  caches_changed(((informer_ud *)ud)->m);
}

/* ---- controllers --------------------------------------------------------------------------- */

typedef struct replay {
  lp_controller *c;
  lp_kind kind;
} replay;

static void replay_one(const char *key, json_t *obj, void *ud) {
  (void)key;
  replay *r = ud;
  controller_def(r->c)->on_change(r->c, r->kind, NULL, obj);
}

/* Changes seen before the controllers ran (while listing, or as a standby) reach their on_change as
 * adds, so a Node deleted while no engine led still finds its NodeClaim. */
static void replay_cache(lp_controllers *m, lp_controller *c) {
  if (!controller_def(c)->on_change) return;
  for (int k = 0; k < LP_KIND_COUNT; k++) {
    replay r = {c, (lp_kind)k};
    lp_env_each(&m->env, (lp_kind)k, replay_one, &r);
  }
}

static void maybe_start_controllers(lp_controllers *m) {
  if (m->stopping || m->running || m->closing || !m->current) return;
  if (m->leader_elect && !m->leading) return;
  m->running = lp_xcalloc(m->ndefs, sizeof *m->running);
  for (size_t i = 0; i < m->ndefs; i++) {
    m->running[i] = controller_start(m->defs[i], &m->env);
    replay_cache(m, m->running[i]);
  }
  lp_gauge_set(m->active_gauge, NULL, 1);
  lp_info(LOGGER, "controllers running", LPF_INT("controllers", (long long)m->ndefs));
}

/* Running controllers act only on current caches: while an informer relists (a 410, or the relist of a
 * new leader) its store may miss what happened during a whole outage, and a provisioner counting
 * NodeClaims from it would create them again. Pausing keeps their state and queued keys; changes seen
 * meanwhile still reach their on_change. */
static void set_paused(lp_controllers *m, int paused) {
  if (!m->running || m->paused == paused) return;
  m->paused = paused;
  for (size_t i = 0; i < m->ndefs; i++) controller_pause(m->running[i], paused);
  lp_gauge_set(m->active_gauge, NULL, paused ? 0 : 1);
  if (paused)
    lp_warn(LOGGER, "a cache is relisting: controllers paused until it is current");
  else
    lp_info(LOGGER, "caches current: controllers resumed");
}

static void caches_changed(lp_controllers *m) {
  int current = 1;
  for (size_t i = 0; i < m->ninformers && current; i++)
    current = m->informers[i].inf && lp_informer_current(m->informers[i].inf);
  m->current = current;
  lp_gauge_set(m->synced_gauge, NULL, current);
  set_paused(m, !current);
  maybe_start_controllers(m);
}

static void finish_stop_part(lp_controllers *m);

static void controller_closed(void *ud) {
  lp_controllers *m = ud;
  if (--m->closing > 0) return;
  if (m->stopping)
    finish_stop_part(m);
  else
    maybe_start_controllers(m); /* leadership may have come back meanwhile */
}

/* Stops every running controller; returns how many are closing (0 when none ran). */
static size_t stop_controllers(lp_controllers *m) {
  if (!m->running) return 0;
  lp_controller **running = m->running;
  m->running = NULL;
  m->paused = 0;
  m->closing += m->ndefs;
  lp_gauge_set(m->active_gauge, NULL, 0);
  for (size_t i = 0; i < m->ndefs; i++) controller_stop(running[i], controller_closed, m);
  free(running);
  return m->ndefs;
}

/* ---- leader election ----------------------------------------------------------------------- */

/* A new leader lists everything again before its controllers run: its watches may have been cut off
 * (an API server restart) and not resumed yet, and the previous leader may have written until moments
 * ago. The controllers start once every informer holds a list begun after this point. */
static void started_leading(lp_leader *le, void *ud) {
  (void)le;
  lp_controllers *m = ud;
  m->leading = 1;
  lp_info(LOGGER, "leading: relisting every cache before the controllers run");
  for (size_t i = 0; i < m->ninformers; i++)
    if (m->informers[i].inf) lp_informer_relist(m->informers[i].inf);
  caches_changed(m);
}

static void stopped_leading(lp_leader *le, void *ud) {
  (void)le;
  lp_controllers *m = ud;
  m->leading = 0;
  if (!m->stopping) lp_warn(LOGGER, "lost the lease: controllers stop until it is won again");
  stop_controllers(m);
}

static const char *leader_namespace(const lp_controllers_config *cfg) {
  if (cfg->leader_namespace) return cfg->leader_namespace;
  const char *ns = getenv("POD_NAMESPACE");
  if (ns && *ns) return ns;
  lp_kube_config *kc = lp_kube_client_config(cfg->kube);
  return kc && kc->namespace ? kc->namespace : "kube-system";
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

lp_controllers *lp_controllers_start(const lp_controllers_config *cfg, lp_error **err) {
  lp_controllers *m = lp_xcalloc(1, sizeof *m);
  m->env.loop = cfg->loop;
  m->env.kube = cfg->kube;
  m->env.cloud = cfg->cloud;
  m->env.metrics = cfg->metrics ? cfg->metrics : lp_metrics_default();
  m->env.settings = lp_ctrl_settings_resolve(&cfg->settings);
  env_init(&m->env);
  m->defs = cfg->controllers;
  while (m->defs[m->ndefs]) m->ndefs++;
  m->leader_elect = cfg->leader_elect;
  m->synced_gauge = lp_metrics_gauge(
      m->env.metrics, "luaprov_caches_synced",
      "1 while every informer cache is listed and current (0 while one relists).", LP_NO_LABELS);
  m->active_gauge =
      lp_metrics_gauge(m->env.metrics, "luaprov_controllers_active",
                       "1 while this process runs the controllers (leading and synced).", LP_NO_LABELS);
  lp_gauge_set(m->synced_gauge, NULL, 0);
  lp_gauge_set(m->active_gauge, NULL, 0);
  uv_timer_init(cfg->loop, &m->done_timer);
  m->done_timer.data = m;
  if (cfg->leader_elect) {
    m->leader = lp_leader_start(cfg->kube,
                                &(lp_leader_opts){.namespace = leader_namespace(cfg),
                                                  .identity = cfg->leader_identity,
                                                  .metrics = m->env.metrics,
                                                  .on_started_leading = started_leading,
                                                  .on_stopped_leading = stopped_leading,
                                                  .ud = m},
                                err);
    if (!m->leader) {
      uv_close((uv_handle_t *)&m->done_timer, NULL);
      env_free(&m->env);
      free(m);
      return NULL;
    }
  }
  lp_informer_handlers h = {.on_add = on_add,
                            .on_update = on_update,
                            .on_delete = on_delete,
                            .on_synced = on_synced,
                            .on_current = on_current};
  /* every kind, then the node class once more in each alias group (controller.h "node classes") */
  const lp_nodeclass_desc *d = lp_env_nodeclass(&m->env);
  m->ninformers = LP_KIND_COUNT + d->naliases;
  m->informers = lp_xcalloc(m->ninformers, sizeof *m->informers);
  if (d->naliases) m->env.alias_informers = lp_xcalloc(d->naliases, sizeof *m->env.alias_informers);
  for (size_t i = 0; i < m->ninformers; i++) {
    size_t alias = i < LP_KIND_COUNT ? 0 : i - LP_KIND_COUNT + 1; /* 0: not an alias group */
    informer_ud *iu = &m->informers[i];
    *iu =
        (informer_ud){m, alias ? LP_KIND_NODECLASS : (lp_kind)i, alias ? d->aliases[alias - 1] : NULL, NULL};
    h.ud = iu;
    lp_kube_ref ref = alias ? env_nodeclass_group_ref(&m->env, alias) : lp_env_ref(&m->env, (lp_kind)i);
    iu->inf = lp_informer_start(cfg->kube, &ref, &(lp_informer_opts){.metrics = m->env.metrics}, &h);
    if (alias)
      m->env.alias_informers[alias - 1] = iu->inf;
    else
      m->env.informers[i] = iu->inf;
  }
  return m;
}

int lp_controllers_synced(const lp_controllers *m) {
  return m->synced;
}
int lp_controllers_active(const lp_controllers *m) {
  return m->running != NULL && !m->paused;
}
int lp_controllers_healthy(const lp_controllers *m) {
  return !m->leader || lp_leader_healthy(m->leader);
}
lp_ctrl_env *lp_controllers_env(lp_controllers *m) {
  return &m->env;
}

static void done_timer_closed(uv_handle_t *h) {
  lp_controllers *m = h->data;
  void (*cb)(void *) = m->on_done;
  void *ud = m->on_done_ud;
  env_free(&m->env);
  free(m->env.alias_informers);
  free(m->informers);
  free(m);
  if (cb) cb(ud);
}

static void finish_stop_part(lp_controllers *m) {
  if (--m->pending_stop > 0) return;
  for (size_t i = 0; i < m->ninformers; i++) {
    if (m->informers[i].inf) lp_informer_stop(m->informers[i].inf);
    m->informers[i].inf = NULL;
  }
  memset(m->env.informers, 0, sizeof m->env.informers);
  for (size_t i = 0; m->env.alias_informers && i < m->ninformers - LP_KIND_COUNT; i++)
    m->env.alias_informers[i] = NULL;
  uv_close((uv_handle_t *)&m->done_timer, done_timer_closed);
}

static void leader_stopped(void *ud) {
  finish_stop_part(ud);
}

void lp_controllers_stop(lp_controllers *m, void (*on_done)(void *ud), void *ud) {
  m->stopping = 1;
  m->on_done = on_done;
  m->on_done_ud = ud;
  /* one part for this call, one per phase still running: controllers, then the Lease */
  m->pending_stop = 1;
  if (stop_controllers(m) > 0 || m->closing > 0) m->pending_stop++;
  if (m->leader) {
    m->pending_stop++;
    lp_leader_stop(m->leader, 1, leader_stopped, m);
    m->leader = NULL;
  }
  finish_stop_part(m);
}
