/* fuzz_provider_decoders: the Alibaba and Bizfly mappings' response decoders (providers/; README.md),
 * in a real Lua state with the luaprov module and the source tree on package.path. The input's first
 * byte picks a call of spec/fuzz/providers_driver.lua, the second the HTTP status of the answer, and
 * the rest is its body. A Lua error is an acceptable answer to bad bytes; a C crash, a sanitizer
 * report or a hang (an instruction budget per input, else libFuzzer's -timeout) is a finding.
 * libFuzzer sees only C coverage, so a line hook gives it the Lua lines run as extra 8-bit counters
 * (a hash of chunk and line): inputs that reach new lines of the mappings are kept. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>

#include "core/log.h"
#include "luaprov.h"

#define BUDGET_INSTRUCTIONS (50 * 1000 * 1000)
#define LUA_COUNTERS        (1u << 16)

void __sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop);
void __sanitizer_cov_pcs_init(const uintptr_t *start, const uintptr_t *stop);

static lua_State *L;
static int driver = LUA_NOREF;
static uint8_t lua_lines[LUA_COUNTERS];
static uintptr_t lua_pcs[2 * LUA_COUNTERS]; /* libFuzzer wants a (pc, flags) pair per counter */

static void hook(lua_State *l, lua_Debug *ar) {
  if (ar->event == LUA_HOOKCOUNT) {
    fprintf(stderr, "fuzz_provider_decoders: an input ran more than %d Lua instructions (a hang)\n",
            BUDGET_INSTRUCTIONS);
    abort();
  }
  if (!lua_getinfo(l, "S", ar)) return;
  /* a loaded chunk's source string stays put while the chunk lives, and modules stay loaded */
  uintptr_t h = (uintptr_t)ar->source ^ ((uintptr_t)ar->currentline * 2654435761u);
  lua_lines[(h ^ h >> 16) % LUA_COUNTERS]++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  for (size_t i = 0; i < LUA_COUNTERS; i++) lua_pcs[2 * i] = (uintptr_t)&lua_lines[i];
  __sanitizer_cov_8bit_counters_init(lua_lines, lua_lines + LUA_COUNTERS);
  __sanitizer_cov_pcs_init(lua_pcs, lua_pcs + 2 * LUA_COUNTERS);
  L = luaL_newstate();
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_luaprov);
  lua_setfield(L, -2, "luaprov");
  lua_pop(L, 1);
  lua_getglobal(L, "package");
  lua_pushstring(L, LUAPROV_SOURCE_DIR "/?.lua;" LUAPROV_SOURCE_DIR "/?/init.lua");
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  if (luaL_dofile(L, LUAPROV_SOURCE_DIR "/spec/fuzz/providers_driver.lua")) {
    fprintf(stderr, "fuzz_provider_decoders: %s\n", lua_tostring(L, -1));
    abort();
  }
  driver = luaL_ref(L, LUA_REGISTRYINDEX);
  /* after the module is open: opening it sets the log level from the environment */
  int devnull = open("/dev/null", O_WRONLY);
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, devnull < 0 ? 2 : devnull);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, driver);
  lua_pushinteger(L, data[0]);
  lua_pushinteger(L, data[1]);
  lua_pushlstring(L, (const char *)data + 2, size - 2);
  lua_sethook(L, hook, LUA_MASKLINE | LUA_MASKCOUNT, BUDGET_INSTRUCTIONS);
  (void)lua_pcall(L, 3, 0, 0); /* a Lua error is an answer, not a finding */
  lua_sethook(L, NULL, 0, 0);
  lua_settop(L, 0);
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
