/* The one door into Lua. Every call the engine makes into a script goes through lp_script_pcall
 * (plain calls on a state's main thread) or lp_script_resume (task coroutines): they install the
 * traceback handler, apply the instruction budget of the thread, map the status onto an lp_error,
 * and leave the stack as documented. No other lua_pcall/lua_resume in the engine.
 *
 * Budgets: each thread that runs script code carries an lp_thread_ctx in its extra space. A count
 * hook adds up instructions; past the limit it raises "instruction budget of N exceeded" at the
 * script's file:line, and keeps raising at every instruction after that, so a script that catches
 * the error with pcall is stopped again at once. */
#ifndef LUAPROV_SCRIPT_CALL_H
#define LUAPROV_SCRIPT_CALL_H

#include <lua.h>

#include "core/error.h"

typedef struct lp_task lp_task;

typedef struct lp_thread_ctx {
  long limit;    /* instructions allowed; <= 0 = unlimited */
  long used;     /* instructions counted so far */
  int exceeded;  /* set once the limit was hit */
  lp_task *task; /* the task owning this coroutine, NULL on a main thread */
} lp_thread_ctx;

/* The coroutine a task runs on (task.c). */
lua_State *lp_task_coroutine(const lp_task *t);

/* The context stored in L's extra space (may be NULL for threads the engine did not set up). */
lp_thread_ctx *lp_thread_ctx_get(lua_State *L);
/* Stores ctx in L's extra space and arms the count hook on L. ctx must outlive the calls on L. */
void lp_thread_ctx_attach(lua_State *L, lp_thread_ctx *ctx);
/* Starts a new budget on L (whose ctx is attached): zero count, the given limit, hook re-armed. */
void lp_thread_ctx_reset(lua_State *L, long limit);

/* Error codes produced here (lp_error.code): */
#define LP_ERR_SCRIPT "ScriptError" /* a runtime error raised by the script */
#define LP_ERR_BUDGET "Budget"      /* instruction budget exceeded */
#define LP_ERR_MEMORY "Memory"      /* the generation's memory cap was hit */
#define LP_ERR_SYNTAX "Syntax"

/* Calls the function below nargs arguments on L (a main thread) in protected mode.
 * On LUA_OK returns 0 with nresults values on the stack in place of function and arguments.
 * On failure returns -1, pops function and arguments, sets *err (message "file:line: text") and,
 * when traceback is not NULL, *traceback (caller frees; NULL when unavailable, as after a memory
 * error). After a memory error the generation's cached object views are dropped (lp_generation_drop_objects)
 * and the state's garbage is collected before returning. [-(n+1), +(r|0), -] */
int lp_script_pcall(lua_State *L, int nargs, int nresults, lp_error **err, char **traceback);

/* Resumes the coroutine co (created from the main thread L) with nargs values on its stack.
 * Returns LUA_OK (finished: *nresults values on co's stack), LUA_YIELD (parked or preempted), or
 * -1 with *err and *traceback set (co is dead; the caller closes it); after a memory error the
 * generation's cached object views are dropped.                      [-(nargs), +(nresults), -] */
int lp_script_resume(lua_State *L, lua_State *co, int nargs, int *nresults, lp_error **err, char **traceback);

/* Runs fn(L) with light userdata ud as its only argument, protected, on L's main thread, under the
 * current thread budget. For host-side multi-step work on a state (pushing arguments, converting
 * results) that may raise memory errors. Returns 0 or -1 with *err. */
int lp_script_cpcall(lua_State *L, lua_CFunction fn, void *ud, lp_error **err);

#endif
