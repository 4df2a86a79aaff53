/* Shared by the framework's own files (manager.c, controller.c, env.c); controllers use controller.h. */
#ifndef LUAPROV_CONTROLLER_INTERNAL_H
#define LUAPROV_CONTROLLER_INTERNAL_H

#include "controller/controller.h"
#include "kube/informer.h"
#include "kube/workqueue.h"

struct lp_ctrl_env {
  uv_loop_t *loop;
  lp_kube_client *kube;
  lp_cloudprovider *cloud;
  lp_metrics *metrics;
  lp_ctrl_settings settings;
  lp_informer *informers[LP_KIND_COUNT];
  json_t *indices[LP_INDEX_COUNT]; /* indexed value -> {key: true} */
  json_t *recent_events;           /* "uid\nreason\nmessage" -> wall time recorded */
  double (*clock)(void *ud);       /* lp_env_monotonic's; NULL = lp_clock_monotonic */
  void *clock_ud;
};

/* Updates every index of kind for one change (old_obj NULL on add, new_obj NULL on delete). */
void env_index_update(lp_ctrl_env *env, lp_kind kind, const char *key, const json_t *old_obj,
                      const json_t *new_obj);
void env_init(lp_ctrl_env *env);
void env_free(lp_ctrl_env *env);

/* One running controller (controller.c). */
lp_controller *controller_start(const lp_controller_def *def, lp_ctrl_env *env);
/* Stops its queue and timers; on_closed runs once its last reconcile ended and it is freed. */
void controller_stop(lp_controller *c, void (*on_closed)(void *ud), void *ud);
/* paused != 0: no new reconcile starts (keys keep queueing; those in flight finish) until it is called
 * with 0. Its state is kept, unlike a stop. */
void controller_pause(lp_controller *c, int paused);
const lp_controller_def *controller_def(const lp_controller *c);
/* Every key it owns: the primary kind's cached keys, or the singleton. */
void controller_enqueue_all(lp_controller *c);

#endif
