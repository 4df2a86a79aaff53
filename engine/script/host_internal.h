/* Shared between host.c (generations, reload, watching) and task.c (running calls). */
#ifndef LUAPROV_SCRIPT_HOST_INTERNAL_H
#define LUAPROV_SCRIPT_HOST_INTERNAL_H

#include "core/metrics.h"
#include "luaprov.h"
#include "script/call.h"
#include "script/host.h"

struct lp_task {
  lp_script_host *host;
  lp_generation *generation; /* one reference held until the task ends */
  lua_State *co;
  int co_ref;
  lp_thread_ctx ctx;
  char *module;
  char *function;
  lp_task_done_fn done;
  void *done_ud;
  lp_http_call *http_call;     /* the request the task is parked on, or NULL */
  uv_timer_t *sleep_timer;     /* the luaprov.time.sleep the task is parked on, or NULL */
  struct lp_http_batch *batch; /* the luaprov.http.request_all the task is parked on, or NULL */
  uv_timer_t *deadline;        /* heap-allocated: freed in its close callback */
  int cancelled;               /* "Cancelled" or "Timeout" pending: stop instead of resuming */
  const char *cancel_code;
  double started;
  lp_task_result result;
  lp_task *next_done;   /* completion queue */
  lp_task *prev, *next; /* in-flight list */
};

struct lp_script_host {
  uv_loop_t *loop;
  char *layers[3];
  size_t nlayers;
  const lp_module_spec *modules;
  int no_policy_calls;
  lp_script_limits limits;
  lp_http_client *http;
  lp_lua_host lua_host;
  double (*now)(void *ud);
  void *now_ud;
  lp_generation *current;
  uint64_t next_id;

  lp_task *in_flight; /* doubly linked */
  size_t ntasks;
  lp_task *done_head, *done_tail;
  uv_idle_t completions; /* delivers done callbacks outside the call that finished them */

  int watch;
  unsigned debounce_ms;
  uv_fs_event_t **watchers;
  size_t nwatchers;
  uv_timer_t debounce;
  int closing;
  int completions_closed;
  int open_handles;
  void (*on_closed)(void *ud);
  void *on_closed_ud;

  lp_metric *calls_total, *call_seconds, *reloads_total, *generation_gauge, *memory_gauge, *tasks_gauge;
};

/* task.c: the life of a task, shared with task_batch.c */
void lp_task_resume(lp_task *t, int nargs);
/* Ends the task (err and traceback owned by the task from here) and queues its done callback. */
void lp_task_finish(lp_task *t, lp_error *err, char *traceback);
/* Ends a parked task that was cancelled or timed out instead of resuming it. */
void lp_task_finish_cancelled(lp_task *t);
/* Arms the wall-clock deadline at the first await. */
void lp_task_arm_deadline(lp_task *t);

/* task_batch.c: luaprov.http.request_all */
int lp_task_http_request_all(lua_State *L, const lp_http_request_opts *reqs, size_t n, unsigned concurrency,
                             void *ud);
void lp_task_batch_cancel(lp_task *t);

void lp_task_host_bindings(lp_lua_host *lua_host);
void lp_task_deliver_completions(lp_script_host *h);
void lp_task_completions_cb(uv_idle_t *idle);

/* host.c: frees the host once closing and the last task has ended. */
void lp_host_maybe_finish_close(lp_script_host *h);

#endif
