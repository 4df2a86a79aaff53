/* The `luaprov` Lua module: the only API scripts see (docs/lua-api.md). One C source per sub-module
 * (http.c, json.c, crypto.c, time.c, log.c, cache.c, env.c, fs.c,
 * stream.c), assembled by luaprov.c.
 *
 * Conventions (as Lua's own lauxlib): misuse (a wrong argument type) raises; an operational failure
 * returns `nil, message, code` where code is a stable string scripts can branch on ("Timeout",
 * "NotFound", "Throttled", "InvalidJSON", ...). Each binding documents its stack effect
 * [-o, +p, x] like the Lua manual.
 *
 * The same objects are linked into the engine and into luaprov.so. Inside the engine the script host
 * registers an lp_lua_host on each Lua state; under plain lua5.4 (busted) there is none, and the
 * bindings fall back to synchronous behaviour (http.request blocks, time is the system clock). */
#ifndef LUAPROV_BINDINGS_H
#define LUAPROV_BINDINGS_H

#include <lua.h>
#include <lauxlib.h>

#include "http/client.h"

/* What a host offers the bindings. All function pointers may be NULL except where noted. */
typedef struct lp_lua_host {
  /* Starts req for the coroutine L and yields it; the host later resumes L with the results of
   * luaprov.http.request ({status, headers, body} or nil, message, code). Called only when L is a
   * task coroutine the host can resume (the binding checks lp_lua_host.can_yield first). Returns
   * the value of lua_yield. */
  int (*http_request)(lua_State *L, const lp_http_request_opts *req, void *ud);
  /* Starts n requests (copied; at most concurrency at a time) for the coroutine L and yields it; the
   * host resumes it with one list in the shape lp_push_http_results builds. May be NULL: the
   * binding then runs them synchronously. Called only when can_yield(L). */
  int (*http_request_all)(lua_State *L, const lp_http_request_opts *reqs, size_t n, unsigned concurrency,
                          void *ud);
  /* Parks the coroutine L for seconds (>= 0) and yields; the host resumes it with no values.
   * Called only when can_yield(L). Returns the value of lua_yield. */
  int (*sleep)(lua_State *L, double seconds, void *ud);
  /* Non-zero when L may yield to the host (a task coroutine, not module load or a C boundary). */
  int (*can_yield)(lua_State *L, void *ud);
  /* Seconds since the epoch; the simulated clock in `luaprov demo`. NULL = the system clock. */
  double (*now)(void *ud);
  /* Logger name for log lines written by the script running on L, e.g. "script.drift"; NULL =
   * "script". The returned string must live until the next call. */
  const char *(*logger_name)(lua_State *L, void *ud);
  /* luaprov.stream: one operation (LP_STREAM_OPEN, _WRITE, _CLOSE) on the streaming response the host
   * registered under id (script/handler.h). Returns 1 when the stream is open (OPEN), the bytes were
   * queued (WRITE) or it was open and is now ended (CLOSE); 0 when no open stream has that id. data
   * is copied. NULL = no streams (plain lua5.4): the binding answers nil, "Unavailable". */
  int (*stream)(const char *id, int op, const char *data, size_t len, void *ud);
  void *ud;
} lp_lua_host;

enum { LP_STREAM_OPEN, LP_STREAM_WRITE, LP_STREAM_CLOSE };

/* Registers host on L's registry (the struct is referenced, not copied: it must outlive L). */
void lp_bindings_set_host(lua_State *L, const lp_lua_host *host);
/* The registered host, or NULL under plain lua5.4. */
const lp_lua_host *lp_bindings_host(lua_State *L);

/* Opens the whole module: pushes the `luaprov` table.   [-0, +1, m] */
int luaopen_luaprov(lua_State *L);

/* Sub-module openers, each pushes its table.           [-0, +1, m] */
int lp_open_http(lua_State *L);
int lp_open_json(lua_State *L);
int lp_open_crypto(lua_State *L);
int lp_open_time(lua_State *L);
int lp_open_log(lua_State *L);
int lp_open_cache(lua_State *L);
int lp_open_env(lua_State *L);
int lp_open_fs(lua_State *L);
int lp_open_stream(lua_State *L);

/* Pushes nil, message, code and returns 3: the operational-failure convention. [-0, +3, m] */
int lp_push_fail(lua_State *L, const char *message, const char *code);

/* Pushes what luaprov.http.request returns for res: {status, headers, body}, or nil, message, code
 * when res->error is set. Returns the number of values pushed. res stays owned by the caller.
 *                                                                       [-0, +(1|3), m] */
int lp_push_http_result(lua_State *L, const lp_http_result *res);

/* Pushes the list luaprov.http.request_all returns: per result the response table, or
 * {error = message, code = code}. Results stay owned by the caller.       [-0, +1, m] */
int lp_push_http_results(lua_State *L, lp_http_result *const *results, size_t n);

/* Seconds since the epoch from the host clock, or the system clock. */
double lp_bindings_now(lua_State *L);

#endif
