/* luaprov.env: read-only access to the process environment, where the operator's deployment puts
 * script configuration (BIZFLYCLOUD_REGION) and cloud credentials (ALIBABA_CLOUD_ACCESS_KEY_ID).
 *
 * Any name may be read, without an allow-list: the signers need credentials anyway, and the
 * scripts are the operator's own code; the sandbox bounds what a script may consume (instructions,
 * memory), not what it may know. Values are read at call time (the engine never calls setenv, so
 * getenv is safe on the loop thread). Scripts must not log what they read. */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "luaprov.h"

/* luaprov.env(name) -> string | nil                                          [-1, +1, v]
 * Raises when name is not a string, is empty or contains '=' or a NUL byte: such a name can never
 * be set, so asking for it is a bug, and getenv would silently read a different variable. */
static int env_get(lua_State *L) {
  size_t n;
  const char *name = luaL_checklstring(L, 1, &n);
  luaL_argcheck(L, n > 0 && strlen(name) == n && !strchr(name, '='), 1, "not an environment variable name");
  const char *value = getenv(name);
  if (value)
    lua_pushstring(L, value);
  else
    lua_pushnil(L);
  return 1;
}

/* Unlike the other openers this pushes a function, not a table: luaprov.env is called directly. */
int lp_open_env(lua_State *L) {
  lua_pushcfunction(L, env_get);
  return 1;
}
