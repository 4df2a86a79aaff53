/* Tasks: one coroutine per script call, parked on HTTP requests, resumed by the loop. */
#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/error_log.h"
#include "core/log.h"
#include "json.h"
#include "script/handler.h"
#include "script/host_internal.h"

static lp_task *task_of(lua_State *L) {
  lp_thread_ctx *ctx = lp_thread_ctx_get(L);
  return ctx ? ctx->task : NULL;
}

/* ---- finishing ----------------------------------------------------------------------------- */

static void deadline_closed(uv_handle_t *handle) {
  free(handle);
}

static void release_task(lp_task *t) {
  lp_script_host *h = t->host;
  if (t->prev)
    t->prev->next = t->next;
  else
    h->in_flight = t->next;
  if (t->next) t->next->prev = t->prev;
  h->ntasks--;
  lp_gauge_set(h->tasks_gauge, LP_NO_LABELS, (double)h->ntasks);
  if (t->deadline) {
    uv_close((uv_handle_t *)t->deadline, deadline_closed);
    t->deadline = NULL;
  }
  lua_State *L = lp_generation_state(t->generation);
  if (t->co) {
    /* a script may keep a reference to this thread (coroutine.running()): it must not point at the
     * task once the task is gone */
    *(lp_thread_ctx **)lua_getextraspace(t->co) = NULL;
    lua_Debug ar;
    int returned = lua_status(t->co) == LUA_OK && !lua_getstack(t->co, 0, &ar); /* not parked, not dead */
    if (returned) lua_settop(t->co, 0);
    if (!returned || !lp_generation_give_thread(t->generation, t->co, t->co_ref)) {
      lua_resetthread(t->co); /* runs pending to-be-closed variables, drops the stack */
      luaL_unref(L, LUA_REGISTRYINDEX, t->co_ref);
    }
    t->co = NULL;
  }
  if (h->current) lp_gauge_set(h->memory_gauge, LP_NO_LABELS, (double)lp_generation_memory(h->current));
}

static const char *result_label(const lp_error *err) {
  if (!err) return "ok";
  if (strcmp(err->code, LP_ERR_BUDGET) == 0) return "budget";
  if (strcmp(err->code, LP_ERR_MEMORY) == 0) return "memory";
  if (strcmp(err->code, "Timeout") == 0) return "timeout";
  if (strcmp(err->code, "Cancelled") == 0) return "cancelled";
  return "error";
}

/* Ends the task (err owned by the task from here) and queues its done callback. */
void lp_task_finish(lp_task *t, lp_error *err, char *traceback) {
  lp_script_host *h = t->host;
  t->result.error = err;
  t->result.traceback = traceback;
  t->result.elapsed_s = lp_clock_monotonic() - t->started;
  lp_counter_inc(h->calls_total, LP_LABELS(t->module, t->function, result_label(err)));
  lp_histogram_observe(h->call_seconds, LP_LABELS(t->module), t->result.elapsed_s);
  if (err) {
    lp_warn("engine.script", "script call failed", LPF_STR("module", t->module),
            LPF_STR("function", t->function), LPF_INT("generation", (long long)t->result.generation),
            LPF_ERROR(err)); /* the error fields, traceback included (docs/reference-metrics-logs.md) */
  }
  release_task(t);
  t->next_done = NULL;
  if (h->done_tail)
    h->done_tail->next_done = t;
  else
    h->done_head = t;
  h->done_tail = t;
  if (h->closing) {
    lp_host_maybe_finish_close(h);
    return;
  }
  uv_idle_start(&h->completions, lp_task_completions_cb);
}

void lp_task_completions_cb(uv_idle_t *idle) {
  lp_script_host *h = idle->data;
  uv_idle_stop(idle);
  lp_task_deliver_completions(h);
}

void lp_task_deliver_completions(lp_script_host *h) {
  lp_task *t = h->done_head;
  h->done_head = h->done_tail = NULL;
  while (t) {
    lp_task *next = t->next_done;
    t->result.module = t->module;
    t->result.function = t->function;
    t->done(&t->result, t->done_ud);
    free(t->result.json);
    lp_error_free(t->result.error);
    free(t->result.traceback);
    lp_generation_unref(t->generation);
    free(t->module);
    free(t->function);
    free(t);
    t = next;
  }
}

/* ---- results ------------------------------------------------------------------------------- */

typedef struct encode_results_args {
  lua_State *co;
  int nresults;
  lp_buf out;
  lp_error *err;
} encode_results_args;

/* Moves the finished coroutine's results to the main thread and encodes them as a JSON array. */
static int encode_results(lua_State *L) {
  encode_results_args *a = lua_touserdata(L, 1);
  luaL_checkstack(L, a->nresults + 2, "too many results");
  lua_xmove(a->co, L, a->nresults);
  int first = lua_gettop(L) - a->nresults + 1;
  lp_buf_putc(&a->out, '[');
  for (int i = 0; i < a->nresults; i++) {
    if (i) lp_buf_putc(&a->out, ',');
    if (lua_isnil(L, first + i)) {
      lp_buf_puts(&a->out, "null");
    } else if (lp_json_encode(L, first + i, &a->out, &a->err) != 0) {
      return 0;
    }
  }
  lp_buf_putc(&a->out, ']');
  return 0;
}

static void task_complete(lp_task *t, int nresults) {
  lua_State *L = lp_generation_state(t->generation);
  encode_results_args a = {t->co, nresults, LP_BUF_INIT, NULL};
  lp_error *err = NULL;
  if (lp_script_cpcall(L, encode_results, &a, &err) != 0 || a.err) {
    lp_error *cause = a.err ? a.err : err;
    lp_error *contract = lp_error_new("Contract", "%s.%s returned a value that is not plain data: %s",
                                      t->module, t->function, cause->message);
    lp_error_free(a.err);
    lp_error_free(err);
    lp_buf_free(&a.out);
    lp_task_finish(t, contract, NULL);
    return;
  }
  t->result.json = lp_buf_take(&a.out, &t->result.json_len);
  lp_task_finish(t, NULL, NULL);
}

void lp_task_resume(lp_task *t, int nargs) {
  lua_State *L = lp_generation_state(t->generation);
  int nresults = 0;
  lp_error *err = NULL;
  char *traceback = NULL;
  int status = lp_script_resume(L, t->co, nargs, &nresults, &err, &traceback);
  if (status == LUA_OK && t->ctx.exceeded) {
    /* the budget ran out inside a coroutine or pcall the script used, which swallowed the error:
     * the call still failed */
    lua_settop(t->co, 0);
    lp_task_finish(t,
                   lp_error_new(LP_ERR_BUDGET, "%s.%s: instruction budget of %ld exceeded", t->module,
                                t->function, t->ctx.limit),
                   NULL);
  } else if (status == LUA_OK) {
    task_complete(t, nresults);
  } else if (status == LUA_YIELD) {
    if (!t->http_call && !t->sleep_timer && !t->batch) {
      /* Only the host's own awaits may suspend a task; a bare coroutine.yield would park it forever. */
      lua_settop(t->co, 0);
      lp_task_finish(t,
                     lp_error_new(LP_ERR_SCRIPT,
                                  "%s.%s yielded outside luaprov.http.request (coroutine.yield is only for "
                                  "coroutines the script creates itself)",
                                  t->module, t->function),
                     NULL);
    }
  } else {
    lp_task_finish(t, err, traceback);
  }
}

/* ---- HTTP awaits ------------------------------------------------------------------------- */

typedef struct push_response_args {
  lua_State *co;
  const lp_http_result *res;
  int nvalues;
} push_response_args;

/* Builds the values luaprov.http.request returns and moves them onto the coroutine. */
static int push_response(lua_State *L) {
  push_response_args *a = lua_touserdata(L, 1);
  a->nvalues = lp_push_http_result(L, a->res);
  lua_xmove(L, a->co, a->nvalues);
  return 0;
}

/* Ends a parked task that was cancelled or timed out instead of resuming it. */
void lp_task_finish_cancelled(lp_task *t) {
  int timeout = strcmp(t->cancel_code, "Timeout") == 0;
  lp_task_finish(t,
                 lp_error_new(t->cancel_code, "%s.%s %s", t->module, t->function,
                              timeout ? "exceeded its wall-clock timeout" : "was cancelled"),
                 NULL);
}

static void task_http_done(lp_http_result *res, void *ud) {
  lp_task *t = ud;
  t->http_call = NULL;
  if (t->cancelled) {
    lp_http_result_free(res);
    lp_task_finish_cancelled(t);
    return;
  }
  lua_State *L = lp_generation_state(t->generation);
  push_response_args a = {t->co, res, 0};
  lp_error *err = NULL;
  int rc = lp_script_cpcall(L, push_response, &a, &err);
  lp_http_result_free(res);
  if (rc != 0) {
    lp_task_finish(t, err, NULL);
    return;
  }
  lp_task_resume(t, a.nvalues);
}

static int host_can_yield(lua_State *L, void *ud) {
  lp_task *t = task_of(L);
  return t && t->co == L && lua_isyieldable(L);
}

static void deadline_expired(uv_timer_t *timer);
static void sleep_over(uv_timer_t *timer);

/* The wall-clock deadline only matters once a task waits on I/O (the instruction budget bounds its
 * CPU time), so the timer is armed at the first await: calls that never wait cost no timer. */
void lp_task_arm_deadline(lp_task *t) {
  if (t->deadline) return;
  double budget_ms = lp_generation_limits(t->generation)->call_timeout_ms;
  double spent_ms = (lp_clock_monotonic() - t->started) * 1000.0;
  t->deadline = lp_xmalloc(sizeof *t->deadline);
  uv_timer_init(t->host->loop, t->deadline);
  t->deadline->data = t;
  uv_update_time(t->host->loop); /* the timer counts from the loop's cached time, which may be stale */
  uv_timer_start(t->deadline, deadline_expired, spent_ms < budget_ms ? (uint64_t)(budget_ms - spent_ms) : 0,
                 0);
}

static int host_http_request(lua_State *L, const lp_http_request_opts *req, void *ud) {
  lp_task *t = task_of(L);
  if (!t->host->http) return lp_push_fail(L, "this engine has no HTTP client", "Unavailable");
  lp_task_arm_deadline(t);
  t->http_call = lp_http_client_request(t->host->http, req, task_http_done, t);
  return lua_yield(L, 0);
}

static void sleep_timer_closed(uv_handle_t *handle) {
  free(handle);
}

static void sleep_over(uv_timer_t *timer) {
  lp_task *t = timer->data;
  uv_close((uv_handle_t *)timer, sleep_timer_closed);
  t->sleep_timer = NULL;
  if (t->cancelled) {
    lp_task_finish_cancelled(t);
    return;
  }
  lp_task_resume(t, 0);
}

static int host_sleep(lua_State *L, double seconds, void *ud) {
  lp_task *t = task_of(L);
  lp_task_arm_deadline(t);
  t->sleep_timer = lp_xmalloc(sizeof *t->sleep_timer);
  uv_timer_init(t->host->loop, t->sleep_timer);
  t->sleep_timer->data = t;
  /* rounded up, and one more: libuv compares against the loop time cached at the start of the iteration */
  uv_timer_start(t->sleep_timer, sleep_over, (uint64_t)ceil(seconds * 1000.0) + 1, 0);
  return lua_yield(L, 0);
}

static double host_now(void *ud) {
  lp_script_host *h = ud;
  return h->now ? h->now(h->now_ud) : lp_clock_wall();
}

static const char *host_logger_name(lua_State *L, void *ud) {
  static char name[128];
  lp_task *t = task_of(L);
  snprintf(name, sizeof name, "script.%s", t ? t->module : "load");
  return name;
}

static int host_stream(const char *id, int op, const char *data, size_t len, void *ud) {
  return lp_script_stream_op(ud, id, op, data, len);
}

void lp_task_host_bindings(lp_lua_host *lua_host) {
  lua_host->stream = host_stream;
  lua_host->http_request = host_http_request;
  lua_host->sleep = host_sleep;
  lua_host->http_request_all = lp_task_http_request_all;
  lua_host->can_yield = host_can_yield;
  lua_host->now = host_now;
  lua_host->logger_name = host_logger_name;
}

/* ---- starting ---------------------------------------------------------------------------- */

typedef struct start_args {
  lp_task *t;
  json_t *args;
  int nargs;
  const char *problem; /* NotFound / Contract message, set instead of raising */
  const char *problem_code;
  const char *problem_reason; /* LP_ERR_NOT_EXPORTED for a missing function, else NULL */
} start_args;

/* Creates the coroutine and puts the function and its arguments on it. */
static int start_coroutine(lua_State *L) {
  start_args *a = lua_touserdata(L, 1);
  lp_task *t = a->t;
  lp_generation_push_module(t->generation, t->module);
  if (!lua_istable(L, -1)) {
    a->problem_code = "NotFound";
    a->problem = "module is not loaded";
    return 0;
  }
  lua_pushstring(L, t->function);
  if (lua_rawget(L, -2) != LUA_TFUNCTION) {
    a->problem_code = "Contract";
    a->problem = "module does not export this function";
    a->problem_reason = LP_ERR_NOT_EXPORTED;
    return 0;
  }
  size_t nargs = a->args ? json_array_size(a->args) : 0;
  luaL_checkstack(L, (int)nargs + 4, "too many arguments");
  int ref;
  lua_State *co = lp_generation_take_thread(t->generation, &ref);
  if (co) {
    t->co = co; /* the task owns it from here: released with the task whatever happens below */
    t->co_ref = ref;
  } else {
    co = lua_newthread(L);
    lua_insert(L, -2);
  }
  if (!lua_checkstack(co, (int)nargs + 1)) return luaL_error(L, "too many arguments for a script call");
  for (size_t i = 0; i < nargs; i++) lp_generation_push_argument(t->generation, json_array_get(a->args, i));
  lua_xmove(L, co, (int)nargs + 1);
  if (!t->co) {
    t->co = co;
    t->co_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* pops the thread */
  }
  a->nargs = (int)nargs;
  return 0;
}

/* Stops whatever the task is parked on; it then ends with cancel_code instead of resuming. */
static void stop_parked(lp_task *t, const char *code) {
  if (t->cancelled || (!t->http_call && !t->sleep_timer && !t->batch)) return;
  t->cancelled = 1;
  t->cancel_code = code;
  if (t->batch) {
    lp_task_batch_cancel(t); /* the last request's callback finishes the task */
  } else if (t->http_call) {
    lp_http_call_cancel(t->http_call); /* its done callback finishes the task */
  } else {
    uv_timer_start(t->sleep_timer, sleep_over, 0, 0); /* wake now; sleep_over sees cancelled */
  }
}

static void deadline_expired(uv_timer_t *timer) {
  stop_parked(timer->data, "Timeout");
}

lp_task *lp_script_host_call(lp_script_host *h, const char *module, const char *function, json_t *args,
                             lp_task_done_fn done, void *ud) {
  lp_task *t = lp_xcalloc(1, sizeof *t);
  t->host = h;
  t->generation = lp_generation_ref(h->current);
  t->module = lp_xstrdup(module);
  t->function = lp_xstrdup(function);
  t->done = done;
  t->done_ud = ud;
  t->co_ref = LUA_NOREF;
  t->started = lp_clock_monotonic();
  t->result.generation = lp_generation_id(t->generation);
  t->next = h->in_flight;
  if (h->in_flight) h->in_flight->prev = t;
  h->in_flight = t;
  h->ntasks++;
  lp_gauge_set(h->tasks_gauge, LP_NO_LABELS, (double)h->ntasks);

  lua_State *L = lp_generation_state(t->generation);
  start_args a = {t, args, 0, NULL, NULL, NULL};
  lp_error *err = NULL;
  int rc = lp_script_cpcall(L, start_coroutine, &a, &err);
  json_decref(args);
  if (rc != 0 || a.problem) {
    if (a.problem) {
      err = lp_error_new(a.problem_code, "%s.%s: %s", module, function, a.problem);
      lp_error_with(err, LP_ERROR_REASON, a.problem_reason); /* callers tell an absent export by it */
    }
    lp_task_finish(t, err, NULL);
    return NULL;
  }
  t->ctx.task = t;
  lp_thread_ctx_attach(t->co, &t->ctx);
  lp_thread_ctx_reset(t->co, lp_generation_limits(t->generation)->call_instructions);
  lp_task_resume(t, a.nargs);
  return t;
}

void lp_task_cancel(lp_task *t) {
  stop_parked(t, "Cancelled");
}

void lp_script_host_cancel_all(lp_script_host *h) {
  for (lp_task *t = h->in_flight; t; t = t->next) lp_task_cancel(t);
}

lua_State *lp_task_coroutine(const lp_task *t) {
  return t->co;
}

size_t lp_script_host_tasks_in_flight(const lp_script_host *h) {
  return h->ntasks;
}

/* ---- synchronous calls ------------------------------------------------------------------- */

static void store_result(const lp_task_result *r, void *ud) {
  lp_task_result **out = ud;
  lp_task_result *copy = lp_xcalloc(1, sizeof *copy);
  *copy = *r;
  copy->json = r->json ? lp_xstrndup(r->json, r->json_len) : NULL;
  copy->error = lp_error_copy(r->error);
  copy->traceback = r->traceback ? lp_xstrdup(r->traceback) : NULL;
  copy->module = copy->function = NULL;
  *out = copy;
}

lp_task_result *lp_script_host_call_sync(lp_script_host *h, const char *module, const char *function,
                                         json_t *args) {
  lp_task_result *result = NULL;
  lp_script_host_call(h, module, function, args, store_result, &result);
  while (!result) uv_run(h->loop, UV_RUN_ONCE);
  return result;
}

void lp_task_result_free(lp_task_result *r) {
  if (!r) return;
  free(r->json);
  lp_error_free(r->error);
  free(r->traceback);
  free(r);
}
