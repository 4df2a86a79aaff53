/* Assembles the `luaprov` module from its sub-modules and keeps the host pointer. */
#include "luaprov.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "luaprov_version.h"

/* The registry slot is keyed by this variable's address: no string to intern, so reading it cannot
 * allocate (and therefore cannot fail) even when the Lua heap is at its cap. */
static const char host_key = 0;

void lp_bindings_set_host(lua_State *L, const lp_lua_host *host) {
  lua_pushlightuserdata(L, (void *)host);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &host_key);
}

const lp_lua_host *lp_bindings_host(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &host_key);
  const lp_lua_host *host = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return host;
}

/* Under plain lua5.4 nobody configures the logger: take the engine's environment variables so that
 * LUAPROV_LOG_LEVEL=debug busted shows a policy's debug lines. Inside the engine the CLI has already
 * done this and the host is registered before the module opens. */
static void configure_standalone_logging(void) {
  lp_log_level level = LP_LOG_INFO;
  const char *level_name = getenv("LUAPROV_LOG_LEVEL");
  if (level_name) lp_log_parse_level(level_name, &level);
  const char *format = getenv("LUAPROV_LOG_FORMAT");
  lp_log_format fmt = format && strcmp(format, "text") == 0   ? LP_LOG_FORMAT_TEXT
                      : format && strcmp(format, "json") == 0 ? LP_LOG_FORMAT_JSON
                                                              : LP_LOG_FORMAT_AUTO;
  lp_log_configure(level, fmt, 2);
}

int luaopen_luaprov(lua_State *L) {
  if (!lp_bindings_host(L)) configure_standalone_logging();
  static const struct {
    const char *name;
    lua_CFunction open;
  } parts[] = {
      {"http", lp_open_http}, {"json", lp_open_json}, {"crypto", lp_open_crypto},
      {"time", lp_open_time}, {"log", lp_open_log},   {"cache", lp_open_cache},
      {"env", lp_open_env},   {"fs", lp_open_fs},     {"stream", lp_open_stream},
  };
  lua_createtable(L, 0, (int)(sizeof parts / sizeof parts[0]) + 1);
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    parts[i].open(L);
    lua_setfield(L, -2, parts[i].name);
  }
  lua_pushliteral(L, LUAPROV_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
