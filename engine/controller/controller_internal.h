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
  lp_informer *informers[LP_KIND_COUNT]; /* LP_KIND_NODECLASS: the descriptor's group's */
  lp_informer **alias_informers;         /* LP_KIND_NODECLASS in each alias group, in the
                                            descriptor's order (lp_env_nodeclass(env)->naliases) */
  json_t *indices[LP_INDEX_COUNT];       /* indexed value -> {key: true} */
  json_t *recent_events;                 /* "uid\nreason\nmessage" -> wall time recorded */
  double (*clock)(void *ud);             /* lp_env_monotonic's; NULL = lp_clock_monotonic */
  void *clock_ud;
  double (*wall)(void *ud); /* lp_env_wall's; NULL = lp_clock_wall */
  void *wall_ud;
};

/* Updates every index of kind for one change (old_obj NULL on add, new_obj NULL on delete). */
void env_index_update(lp_ctrl_env *env, lp_kind kind, const char *key, const json_t *old_obj,
                      const json_t *new_obj);
void env_init(lp_ctrl_env *env);
void env_free(lp_ctrl_env *env);

/* The node class kind across its groups (env_nodeclass.c; controller.h "node classes"). */
/* The key of the class name in the alias group (NULL: the descriptor's group), malloc'd. */
char *env_nodeclass_key_in(const char *alias, const char *name);
/* The resource the informer of group i watches: 0 the descriptor's group, i the alias i - 1. */
lp_kube_ref env_nodeclass_group_ref(lp_ctrl_env *env, size_t i);
/* lp_env_get, lp_env_each and lp_env_count of LP_KIND_NODECLASS. */
json_t *env_nodeclass_get(lp_ctrl_env *env, const char *key);
void env_nodeclass_each(lp_ctrl_env *env, void (*fn)(const char *key, json_t *obj, void *ud), void *ud);
size_t env_nodeclass_count(lp_ctrl_env *env);
/* The reference of the class at key: its group's resource and its name (pointing into key). */
lp_kube_ref env_nodeclass_ref_for(lp_ctrl_env *env, const char *key);

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
