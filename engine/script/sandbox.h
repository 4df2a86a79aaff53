/* The sandbox every script runs in (docs/lua-api.md#the-sandbox). Each script gets a fresh _ENV holding only
 * allow-listed globals; library tables (string, table, math, utf8, coroutine, os) are per-script
 * copies, so one script cannot change another's; os keeps only clock, time and date; load accepts
 * text only and defaults to the script's own _ENV; getmetatable refuses strings; require resolves
 * only the generation's own script tree and "luaprov"; print writes a log line. Nothing of io,
 * debug, package, dofile, loadfile, collectgarbage or string.dump is reachable.
 * Functions here run inside protected calls made by the script host (they may raise). */
#ifndef LUAPROV_SCRIPT_SANDBOX_H
#define LUAPROV_SCRIPT_SANDBOX_H

#include <lua.h>

/* Prepares a fresh state once: opens the safe standard libraries, installs the guarded pattern
 * functions into the state's string table, seals the string metatable (__metatable), and keeps the
 * pristine library tables in the registry for lp_sandbox_push_env.              [-0, +0, e] */
void lp_sandbox_prepare(lua_State *L);

/* Pushes a new environment table for the script named script_name (used by print's logger name).
 * require_fn is the C function implementing require for this generation; its upvalues are
 * require_ud (a light userdata) and script_name, the module whose require it is (its role,
 * script/roles.h).                                                              [-0, +1, e] */
void lp_sandbox_push_env(lua_State *L, const char *script_name, lua_CFunction require_fn, void *require_ud);

/* Pushes a function that raises message at the calling script's line, e.g.
 * "policies/drift.lua:7: luaprov.http is not available to a drift policy (...)": what a script reads
 * in place of something it may not use, so the mistake names itself instead of "attempt to call a
 * nil value".                                                                  [-0, +1, m] */
void lp_sandbox_push_refusal(lua_State *L, const char *message);

/* Raises message at the nearest script line below the running C function ("file:line: message"). */
int lp_sandbox_raise(lua_State *L, const char *message);

/* Pushes a table whose every field is such a function (reading luaprov.http.request gives one that
 * raises message). The table itself has no fields: pairs sees nothing.         [-0, +1, m] */
void lp_sandbox_push_refusing_table(lua_State *L, const char *message);

#endif
