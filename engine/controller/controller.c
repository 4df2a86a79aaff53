/* One running controller: its workqueue, its resync timer and its reconcile accounting (controller.h). */
#include <stdlib.h>
#include <string.h>

#include "controller/controller_internal.h"
#include "core/error.h"
#include "core/error_log.h"
#include "core/log.h"

struct lp_controller {
  const lp_controller_def *def;
  lp_ctrl_env *env;
  lp_workqueue *queue;
  void *state;
  char *logger;
  uv_timer_t resync;
  int stopping;
  lp_metric *reconciles;
  void (*on_closed)(void *ud);
  void *on_closed_ud;
  int pending_closes;
};

lp_ctrl_env *lp_controller_env(lp_controller *c) {
  return c->env;
}
void *lp_controller_state(lp_controller *c) {
  return c->state;
}
const char *lp_controller_name(const lp_controller *c) {
  return c->def->name;
}
const char *lp_controller_logger(const lp_controller *c) {
  return c->logger;
}
const lp_controller_def *controller_def(const lp_controller *c) {
  return c->def;
}

void lp_controller_enqueue(lp_controller *c, const char *key) {
  if (!c->stopping && key && *key) lp_workqueue_add(c->queue, key);
}

void lp_controller_enqueue_after(lp_controller *c, const char *key, double seconds) {
  if (!c->stopping && key && *key) lp_workqueue_requeue_after(c->queue, key, seconds);
}

void lp_controller_each_waiting(lp_controller *c, int (*fn)(const char *key, void *ud), void *ud) {
  lp_workqueue_each_waiting(c->queue, fn, ud);
}

void lp_controller_done(lp_controller *c, const char *key, lp_error *err, double requeue_after_s) {
  const char *result = "success";
  if (err) {
    result = "error";
    /* a conflict only means the cache was behind: expected, and retried like any error */
    int expected = strcmp(err->code, "Conflict") == 0;
    lp_log(expected ? LP_LOG_DEBUG : LP_LOG_ERROR, c->logger, "reconcile failed, will retry",
           LPF_STR("controller", c->def->name), LPF_STR("key", key), LPF_ERROR(err),
           LPF_INT("retries", (long long)lp_workqueue_num_requeues(c->queue, key)));
    lp_error_free(err);
  } else if (requeue_after_s > 0) {
    result = "requeue";
    lp_workqueue_requeue_after(c->queue, key, requeue_after_s);
  }
  lp_counter_inc(c->reconciles, LP_LABELS(c->def->name, result));
  lp_workqueue_done(c->queue, key, err ? LP_WORKQUEUE_RETRY : LP_WORKQUEUE_SUCCESS);
}

int lp_controller_gone(lp_controller *c, const char *key, const lp_kube_reply *reply, const char *action) {
  if (!reply->error || reply->status != 404) return 0;
  lp_debug(c->logger, "already gone, nothing left to do", LPF_STR("controller", c->def->name),
           LPF_STR("key", key), LPF_STR("action", action), LPF_STR("error", reply->error->message));
  return 1;
}

static void work(lp_workqueue *q, const char *key, void *ud) {
  (void)q;
  lp_controller *c = ud;
  c->def->reconcile(c, key);
}

static void enqueue_key(const char *key, json_t *obj, void *ud) {
  (void)obj;
  lp_controller_enqueue(ud, key);
}

typedef struct pool_scan {
  lp_controller *c;
  const char *pool;
} pool_scan;

static void enqueue_if_pool(const char *key, json_t *claim, void *ud) {
  pool_scan *s = ud;
  const char *pool = lp_obj_label(claim, "karpenter.sh/nodepool");
  if (pool && strcmp(pool, s->pool) == 0) lp_controller_enqueue(s->c, key);
}

void lp_controller_enqueue_pool_claims(lp_controller *c, const char *nodepool) {
  pool_scan s = {c, nodepool};
  if (nodepool) lp_env_each(c->env, LP_KIND_NODECLAIM, enqueue_if_pool, &s);
}

void controller_enqueue_all(lp_controller *c) {
  if (c->def->primary == LP_KIND_NONE)
    lp_controller_enqueue(c, c->def->singleton_key);
  else
    lp_env_each(c->env, c->def->primary, enqueue_key, c);
}

static void resync_tick(uv_timer_t *t) {
  controller_enqueue_all(t->data);
}

lp_controller *controller_start(const lp_controller_def *def, lp_ctrl_env *env) {
  lp_controller *c = lp_xcalloc(1, sizeof *c);
  c->def = def;
  c->env = env;
  c->logger = lp_xasprintf("controller.%s", def->name);
  c->reconciles = lp_metrics_counter(env->metrics, "luaprov_controller_reconciles_total",
                                     "Reconciles ended, by controller and result (success, error, requeue).",
                                     LP_LABELS("controller", "result"));
  c->queue = lp_workqueue_new(env->loop, &(lp_workqueue_opts){.name = def->name,
                                                              .workers = env->settings.workers,
                                                              .backoff_base_s = 0.1,
                                                              .backoff_max_s = 60,
                                                              .metrics = env->metrics,
                                                              .work = work,
                                                              .ud = c});
  if (def->state_new) c->state = def->state_new(c);
  uv_timer_init(env->loop, &c->resync);
  c->resync.data = c;
  if (def->resync_s > 0) {
    uint64_t ms = (uint64_t)(def->resync_s * 1000);
    uv_timer_start(&c->resync, resync_tick, ms, ms);
  }
  lp_info(c->logger, "controller started", LPF_STR("controller", def->name));
  controller_enqueue_all(c);
  return c;
}

void controller_pause(lp_controller *c, int paused) {
  lp_workqueue_pause(c->queue, paused);
}

static void part_closed(lp_controller *c) {
  if (--c->pending_closes > 0) return;
  if (c->def->state_free) c->def->state_free(c->state);
  lp_info(c->logger, "controller stopped", LPF_STR("controller", c->def->name));
  void (*cb)(void *) = c->on_closed;
  void *ud = c->on_closed_ud;
  free(c->logger);
  free(c);
  if (cb) cb(ud);
}

static void timer_closed(uv_handle_t *h) {
  part_closed(h->data);
}
static void queue_closed(void *ud) {
  part_closed(ud);
}

void controller_stop(lp_controller *c, void (*on_closed)(void *ud), void *ud) {
  c->stopping = 1;
  c->on_closed = on_closed;
  c->on_closed_ud = ud;
  c->pending_closes = 2;
  uv_close((uv_handle_t *)&c->resync, timer_closed);
  lp_workqueue_shutdown(c->queue, 0, queue_closed, c);
}
