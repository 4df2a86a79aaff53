/* The script host: keeps the generation in service, runs script functions as tasks, and reloads.
 *
 * A task runs one function of an entry module (module "policies.drift", function "is_drifted") in
 * its own coroutine on the generation in service when it starts. Arguments go in as JSON values and
 * results come out as a JSON array, so nothing outside the host touches a Lua stack. A task that
 * calls luaprov.http.request yields to the loop and resumes when the response arrives; other tasks
 * run meanwhile. Each task has the instruction budget and wall-clock timeout of lp_script_limits.
 *
 * Reload (file change under a watched tree, SIGHUP through lp_script_host_reload, or a caller)
 * loads a complete new generation, validates it and swaps it in; a failure leaves the old one in
 * service, logs every problem with file:line and counts luaprov_script_reload_total{result="error"}.
 * Tasks in flight finish on the generation they started on.
 * Loop thread only. */
#ifndef LUAPROV_SCRIPT_HOST_H
#define LUAPROV_SCRIPT_HOST_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "http/client.h"
#include "script/generation.h"

typedef struct lp_script_host lp_script_host;
typedef struct lp_task lp_task;

typedef struct lp_script_host_config {
  uv_loop_t *loop;
  const char *scripts_dir;       /* the operator's tree (may hold only some files); NULL = defaults only */
  const char *defaults_dir;      /* the shipped tree; required */
  const lp_module_spec *modules; /* entry modules and their contracts, terminated by {NULL} */
  lp_script_limits limits;
  lp_http_client *http;    /* serves luaprov.http.request; NULL = requests fail with "Unavailable" */
  int watch;               /* reload when files under the trees change */
  unsigned debounce_ms;    /* quiet time after the last file event before reloading; 0 = 20 ms */
  double (*now)(void *ud); /* luaprov.time.now; NULL = system clock */
  void *now_ud;
  /* NULL for the engine's own scripts: the start logs "scripts loaded" with the operator's tree
   * ("scripts") and the default one. Another host (the simulators) names itself here and logs
   * "<purpose> scripts loaded" with its "tree", so the start-up log names the engine's tree once. */
  const char *purpose;
  int no_policy_calls; /* validate shapes only (eval, which calls the policy itself); see generation.h */
} lp_script_host_config;

typedef struct lp_task_result {
  char *json; /* JSON array of the function's return values (nil -> null); NULL on error */
  size_t json_len;
  lp_error *error; /* codes: ScriptError, Budget, Memory, Timeout, Cancelled, NotFound, Contract */
  char *traceback; /* of a script error; may be NULL */
  uint64_t generation;
  const char *module; /* valid during the done callback */
  const char *function;
  double elapsed_s;
} lp_task_result;

/* Called once per task on the loop thread, never from inside lp_script_host_call. The host frees
 * result after the callback returns. */
typedef void (*lp_task_done_fn)(const lp_task_result *result, void *ud);

/* Loads generation 1 and starts watching when cfg->watch. Returns NULL with *problems filled when
 * the scripts do not load or validate (nothing to serve). Strings in cfg are copied. */
lp_script_host *lp_script_host_new(const lp_script_host_config *cfg, lp_problems *problems);

/* Reloads now. Returns 1 when a new generation is in service, 0 when nothing changed on disk
 * (force = 0) and -1 when the new scripts were rejected (the old generation stays; problems are
 * logged and, if problems is not NULL, returned). trigger names the cause in logs. */
int lp_script_host_reload(lp_script_host *h, const char *trigger, int force, lp_problems *problems);

/* The reason (lp_error.reason) of the Contract error a call gets when its module does not export
 * the function: an optional export that is absent, told without reading the message. */
#define LP_ERR_NOT_EXPORTED "NotExported"

/* Starts function of module with args (a JSON array; the reference is stolen; NULL = no arguments).
 * Returns the task (for lp_task_cancel) or NULL if done will report an immediate failure. The values
 * in args must not be changed afterwards, even those the caller still references: the generation
 * may keep a Kubernetes object argument to recognise it in a later call (script/objects.h). */
lp_task *lp_script_host_call(lp_script_host *h, const char *module, const char *function, json_t *args,
                             lp_task_done_fn done, void *ud);

/* Runs a call to completion by running the loop. Not from inside a loop callback (the CLI and tests
 * use it). The caller frees the result with lp_task_result_free. */
lp_task_result *lp_script_host_call_sync(lp_script_host *h, const char *module, const char *function,
                                         json_t *args);
void lp_task_result_free(lp_task_result *r);

/* Cancels a task: its pending HTTP request is cancelled and done reports "Cancelled". */
void lp_task_cancel(lp_task *t);
/* Cancels every task in flight (shutdown). */
void lp_script_host_cancel_all(lp_script_host *h);
size_t lp_script_host_tasks_in_flight(const lp_script_host *h);

/* A string field of an entry module of the generation in service (e.g. the mapping's `name`), as a
 * malloc'd copy, or NULL when the module or the field is absent or not a string. */
char *lp_script_host_module_string(lp_script_host *h, const char *module, const char *field);

/* The strings of a list field of an entry module of the generation in service (e.g. the mapping's
 * `interruption_conditions`), as a new JSON array (caller decrefs; entries that are not strings are
 * left out), or NULL when the module or the field is absent or not a table. */
json_t *lp_script_host_module_strings(lp_script_host *h, const char *module, const char *field);
/* Any field of an entry module of the generation in service (e.g. the mapping's `nodeclass` table) as
 * JSON (the encoding of bindings/json.h), new reference; NULL when the module or the field is absent
 * or cannot be encoded (a function, a sparse array). */
json_t *lp_script_host_module_json(lp_script_host *h, const char *module, const char *field);
/* 1 when an entry module of the generation in service exports a function under field (an optional
 * export such as the drift policy's `static_drift`), 0 when the module or the function is absent. */
int lp_script_host_module_has_function(lp_script_host *h, const char *module, const char *field);
/* The same for any loaded generation (`luaprov run --help` reads the tree without a host). */
json_t *lp_generation_module_json(lp_generation *g, const char *module, const char *field);

lp_generation *lp_script_host_current(lp_script_host *h);
uint64_t lp_script_host_generation_id(const lp_script_host *h);

/* Stops watching and releases the generation in service. Tasks still in flight are cancelled;
 * the host frees itself once their callbacks have run and libuv has closed its handles; on_closed
 * (may be NULL) runs then. */
void lp_script_host_close(lp_script_host *h, void (*on_closed)(void *ud), void *ud);

#endif
