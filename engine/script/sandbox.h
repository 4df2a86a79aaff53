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
 * require_fn is the C function implementing require for this generation; it receives the
 * environment-independent upvalue require_ud.                                  [-0, +1, e] */
void lp_sandbox_push_env(lua_State *L, const char *script_name, lua_CFunction require_fn, void *require_ud);

#endif
