/* Guarded pattern functions, the limits: pathological patterns fail fast with the documented
 * errors, heavy but ordinary use still succeeds, the setters work, hooks keep running in callbacks,
 * and a benchmark against the stock functions. The differential test is in test_pattern.c. */
#include <time.h>

#include "pattern_test_support.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs chunk in L; returns the error message or NULL (result strings are copied into out). */
static const char *eval(lua_State *L, const char *chunk, char *out, size_t outsz) {
  static char err[512];
  lua_settop(L, 0);
  if (luaL_loadstring(L, chunk) || lua_pcall(L, 0, 1, 0)) {
    snprintf(err, sizeof err, "%s", lua_tostring(L, -1));
    lua_settop(L, 0);
    return err;
  }
  if (out) snprintf(out, outsz, "%s", lua_isnil(L, -1) ? "nil" : luaL_tolstring(L, -1, NULL));
  lua_settop(L, 0);
  return NULL;
}

/* ---- limits ------------------------------------------------------------------------------------ */

/* Runs chunk in the guarded state, expecting an error containing needle within max_seconds. */
static double slowest_error;

static void expect_fast_error(const char *chunk, const char *needle, double max_seconds) {
  double t0 = now();
  const char *err = eval(grd, chunk, NULL, 0);
  double dt = now() - t0;
  if (dt > slowest_error) slowest_error = dt;
  CHECK_CONTAINS(err, needle);
  if (dt >= max_seconds) fprintf(stderr, "  too slow (%.3f s): %s\n", dt, chunk);
  CHECK(dt < max_seconds);
}

static void test_pathological(void) {
  expect_fast_error(
      "local n = 22 return string.find(string.rep('a', n), string.rep('a?', n) .. string.rep('a', n))",
      "pattern too complex: more than 10000000 matching steps (string.find)", 1.0);
  expect_fast_error(
      "local n = 28 return (string.rep('a', n)):find(string.rep('a?', n) .. string.rep('a', n))",
      "pattern too complex: more than 10000000 matching steps (string.find)", 1.0);
  expect_fast_error(
      "local n = 40 return string.match(string.rep('a', n), string.rep('a?', n) .. string.rep('a', n))",
      "matching steps (string.match)", 1.0);
  expect_fast_error("return string.rep('a', 100000):find(string.rep('a*', 20) .. 'b')",
                    "pattern too complex: more than 10000000 matching steps (string.find)", 1.0);
  expect_fast_error(
      "return string.gsub(string.rep('a', 40), string.rep('a?', 40) .. string.rep('a', 40), '')",
      "matching steps (string.gsub)", 1.0);
  expect_fast_error(
      "for w in string.gmatch(string.rep('a', 40), string.rep('a?', 40) .. string.rep('a', 40)) do end",
      "matching steps (string.gmatch)", 1.0);
  /* Quadratic rather than exponential, but 10^10 steps is still far too long without the guard. */
  expect_fast_error("return string.rep('(', 100000):gsub('%b()', '')", "matching steps (string.gsub)", 1.0);
  expect_fast_error("local s = string.rep('a', 100000) return s:find('(.*)%1b')",
                    "matching steps (string.find)", 1.0);
  /* Errors are ordinary Lua errors: pcall catches them and the state stays usable. */
  char out[64];
  CHECK(eval(grd,
             "local ok, e = pcall(string.find, string.rep('a', 30), string.rep('a?', 30) .. string.rep('a', "
             "30))\n"
             "return tostring(ok) .. ' ' .. tostring(('abc'):find('b'))",
             out, sizeof out) == NULL);
  CHECK_STR(out, "false 2");
  fprintf(stderr, "     slowest limit error took %.3f s\n", slowest_error);
}

static void test_depth_limit(void) {
  /* Lua rejects this too; the guarded message keeps Lua's prefix and adds the limit and function. */
  const char *chunk = "return string.find(string.rep('a', 300), string.rep('a?', 300))";
  CHECK_CONTAINS(eval(ref, chunk, NULL, 0), "pattern too complex");
  CHECK_CONTAINS(eval(grd, chunk, NULL, 0),
                 "pattern too complex: more than 200 nested matching levels (string.find)");
  char out[64];
  CHECK(eval(grd, "return (string.find(string.rep('a', 190), string.rep('a?', 190)))", out, sizeof out) ==
        NULL);
  CHECK_STR(out, "1");
}

static void test_heavy_but_fine(void) {
  char out[128];
  double t0 = now();
  CHECK(eval(grd,
             "local s = string.rep('hello world ', 87382)\n"
             "assert(#s >= 1048576)\n"
             "local r, n = s:gsub('o', '0')\n"
             "local r2, n2 = s:gsub('%s+', ' ')\n"
             "local r3, n3 = s:gsub('(%w+)', '<%1>')\n"
             "return n .. ' ' .. n2 .. ' ' .. n3 .. ' ' .. #r3",
             out, sizeof out) == NULL);
  CHECK_STR(out, "174764 174764 174764 1398112");
  CHECK(eval(grd,
             "local s = string.rep('word ', 100000)\n"
             "local n = 0\n"
             "for w in s:gmatch('%a+') do n = n + 1 end\n"
             "local m = 0\n"
             "for a, b in s:gmatch('()(%a+)') do m = m + 1 end\n"
             "return n + m",
             out, sizeof out) == NULL);
  CHECK_STR(out, "200000");
  /* A long literal needle is no threat (linear search), so the pattern-length limit spares it. */
  CHECK(eval(grd,
             "local s = string.rep('ab', 500000) .. 'c'\n"
             "return s:find(string.rep('ab', 5000) .. 'c', 1, true)",
             out, sizeof out) == NULL);
  CHECK_STR(out, "990001");
  fprintf(stderr, "     heavy workloads took %.3f s\n", now() - t0);
}

static void test_limits_and_setters(void) {
  long steps;
  size_t len;
  lp_pattern_get_limits(&steps, &len);
  CHECK_INT(steps, LP_PATTERN_DEFAULT_MAX_STEPS);
  CHECK_INT(len, 4096);
  CHECK_CONTAINS(eval(grd, "return string.find('abc', string.rep('a', 4097) .. '.')", NULL, 0),
                 "pattern too long: 4098 bytes, limit is 4096 (string.find)");
  CHECK_CONTAINS(eval(grd, "return string.gsub('abc', string.rep('%a', 3000), '')", NULL, 0),
                 "pattern too long: 6000 bytes, limit is 4096 (string.gsub)");
  CHECK_CONTAINS(eval(grd, "return string.gmatch('abc', string.rep('%a', 3000))", NULL, 0),
                 "(string.gmatch)");
  CHECK(eval(grd, "return string.find('abc', string.rep('x', 4095) .. '.')", NULL, 0) == NULL);

  lp_pattern_set_limits(1000, 8);
  CHECK_CONTAINS(eval(grd, "return string.find(string.rep('a', 2000), '.-b')", NULL, 0),
                 "pattern too complex: more than 1000 matching steps (string.find)");
  CHECK_CONTAINS(eval(grd, "return string.match('abc', '.........')", NULL, 0), "limit is 8 (string.match)");
  lp_pattern_set_limits(0, 0); /* keeps both */
  lp_pattern_get_limits(&steps, &len);
  CHECK_INT(steps, 1000);
  CHECK_INT(len, 8);
  /* Each gmatch iteration has its own budget: 600 words of ~2 steps each pass, 1 word of 2000 fails. */
  char out[32];
  CHECK(eval(grd, "local n = 0 for w in string.rep('ab ', 600):gmatch('%a+') do n = n + 1 end return n", out,
             sizeof out) == NULL);
  CHECK_STR(out, "600");
  lp_pattern_set_limits(LP_PATTERN_DEFAULT_MAX_STEPS, LP_PATTERN_DEFAULT_MAX_LEN);
  lp_pattern_get_limits(&steps, &len);
  CHECK_INT(steps, LP_PATTERN_DEFAULT_MAX_STEPS);
  CHECK_INT(len, LP_PATTERN_DEFAULT_MAX_LEN);
}

static int hook_calls;
static void count_hook(lua_State *L, lua_Debug *ar) {
  hook_calls++;
}

/* Replacement functions are Lua code, so the sandbox's instruction hook keeps running inside gsub. */
static void test_callbacks_keep_hooks(void) {
  hook_calls = 0;
  lua_sethook(grd, count_hook, LUA_MASKCOUNT, 100);
  char out[32];
  CHECK(eval(grd,
             "local r = string.gsub(string.rep('x', 1000), 'x', function(c)\n"
             "  local t = 0 for i = 1, 10 do t = t + i end return c end)\n"
             "return #r",
             out, sizeof out) == NULL);
  lua_sethook(grd, NULL, 0, 0);
  CHECK_STR(out, "1000");
  CHECK(hook_calls > 100);
  /* The iterator may be resumed from another coroutine than the one that created it. */
  CHECK(eval(grd,
             "local it = string.gmatch('a b c', '%a')\n"
             "local co = coroutine.wrap(function() return it() .. it() end)\n"
             "return co() .. it()",
             out, sizeof out) == NULL);
  CHECK_STR(out, "abc");
}

/* Same workload in both states; prints the time ratio guarded/stock (best of five). */
static void test_benchmark(void) {
  static const char bench[] =
      "local s = string.rep('key1=value1, key2 = value2; foo_bar=42 http://x.y/z?q=1\\n', 8000)\n"
      "local n = 0\n"
      "for k, v in s:gmatch('(%w+)%s*=%s*(%w+)') do n = n + 1 end\n"
      "local r, c = s:gsub('%s+', ' ')\n"
      "local r2 = s:gsub('(%w+)=(%w+)', '%2=%1')\n"
      "for i = 1, 30000 do local a = ('  trim me please  '):match('^%s*(.-)%s*$') end\n"
      "for i = 1, 30000 do local a, b = ('GET /api/v1/nodes HTTP/1.1'):match('^(%u+)%s+(%S+)') end\n"
      "local x = s:find('foo_bar=43')\n"
      "local y = s:find('%d%d%d')\n"
      "return n";
  double best[2] = {1e9, 1e9};
  lua_State *states[2] = {ref, grd};
  for (int round = 0; round < 5; round++) {
    for (int k = 0; k < 2; k++) {
      double t0 = now();
      CHECK(eval(states[k], bench, NULL, 0) == NULL);
      double dt = now() - t0;
      if (dt < best[k]) best[k] = dt;
    }
  }
  fprintf(stderr, "     benchmark: stock %.1f ms, guarded %.1f ms, ratio %.2f\n", best[0] * 1e3,
          best[1] * 1e3, best[1] / best[0]);
}

int main(void) {
  ref = new_state(0, 0);
  grd = new_state(1, 0);
  RUN(test_pathological);
  RUN(test_depth_limit);
  RUN(test_heavy_but_fine);
  RUN(test_limits_and_setters);
  RUN(test_callbacks_keep_hooks);
  RUN(test_benchmark);
  lua_close(ref);
  lua_close(grd);
  return check_summary();
}
