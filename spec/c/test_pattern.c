/* Guarded pattern functions: a differential test against the stock Lua 5.4 ones (hand-written
 * cases for every feature plus generated ones), then the limits: pathological patterns fail fast,
 * heavy but ordinary use still succeeds. Two states run the same driver chunk; `ref` keeps Lua's
 * own string functions, `grd` has lp_pattern_install applied to its string table. */
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "script/pattern.h"

static lua_State *ref, *grd;
static int compared, mismatches;

/* Serialises every result (type-tagged, errors by message) so the states can be compared as text.
 * It uses no pattern function, so both states run identical code around the function under test. */
static const char driver[] =
    "local function ser1(v)\n"
    "  local t = type(v)\n"
    "  if t == 'string' then return string.format('%q', v) end\n"
    "  if t == 'number' then return math.type(v) .. ':' .. tostring(v) end\n"
    "  return tostring(v)\n"
    "end\n"
    "local function ser(...)\n"
    "  local out = {}\n"
    "  for i = 1, select('#', ...) do out[i] = ser1((select(i, ...))) end\n"
    "  return select('#', ...) .. '|' .. table.concat(out, ',')\n"
    "end\n"
    "function run(fname, s, p, a3, a4)\n"
    "  if fname == 'gmatch' then\n"
    "    local ok, it = pcall(string.gmatch, s, p, a3)\n"
    "    if not ok then return 'E:' .. ser1(it) end\n"
    "    local parts = {}\n"
    "    for _ = 1, 100 do\n"
    "      local r = table.pack(pcall(it))\n"
    "      if not r[1] then parts[#parts + 1] = 'E:' .. ser1(r[2]) break end\n"
    "      if r.n == 1 then break end\n"
    "      parts[#parts + 1] = ser(table.unpack(r, 2, r.n))\n"
    "    end\n"
    "    return table.concat(parts, ';')\n"
    "  end\n"
    "  return ser(pcall(string[fname], s, p, a3, a4))\n"
    "end\n"
    "REPLS = {\n"
    "  {hello = 'HI', a = 'A', b = false, c = 1.5, ['1'] = 'one', x = true, [3] = 'three'},\n"
    "  function(...) return (...):upper() end,\n"
    "  function(a, b) return b end,\n"
    "  function() return false end,\n"
    "  function(a) return #tostring(a) end,\n"
    "  function() return {} end,\n"
    "  function(...) return select('#', ...) .. ':' .. table.concat({...}, '|') end,\n"
    "  setmetatable({}, {__index = function(_, k) return '<' .. tostring(k) .. '>' end}),\n"
    "  function(a) local x = string.find('nested', 'e(s)') return a .. x end,\n"
    "  function(a) if a == 'b' then error('boom') end return a end,\n"
    "}\n"
    "local mi, ma = math.mininteger, math.maxinteger\n"
    "HAND = {\n"
    /* find: plain, init, anchors, argument errors */
    "  {'find', 'hello world', 'o w'}, {'find', 'hello world', 'o', 6}, {'find', 'hello', 'l', -2},\n"
    "  {'find', 'hello', 'l', -100}, {'find', 'hello', '', 10}, {'find', 'hello', '', 6},\n"
    "  {'find', 'hello', '', 5}, {'find', 'hello', '', 0}, {'find', '', '', 1}, {'find', '', ''},\n"
    "  {'find', '', '', 2}, {'find', 'a.b', '.'}, {'find', 'a.b', '.', 1, true}, {'find', 'a+b', '+', 1, "
    "true},\n"
    "  {'find', 'a\\0b', '\\0b'}, {'find', 'a\\0b%', '\\0b%'}, {'find', 'a\\0b.', 'b.', 1, 1},\n"
    "  {'find', 'abc', 'abcd', 1, true}, {'find', 'abcabc', 'ca', -4, true}, {'find', 'abc', '', 4, true},\n"
    "  {'find', 'abc', 'b', '2'}, {'find', 'abc', 'b', 1.5}, {'find', 'abc', 'b', 2.0}, {'find', 123, '2'},\n"
    "  {'find', 12.5, '%.'}, {'find', nil, 'a'}, {'find', 'abc', nil}, {'find', 'abc', {}}, {'find', 'abc', "
    "'b', 'x'},\n"
    "  {'find', 'abc', 'a', mi}, {'find', 'abc', 'a', ma}, {'find', 'abc', 'c', -1}, {'find', 'abc', '^c', "
    "-1},\n"
    "  {'find', 'aaa', '^a'}, {'find', 'baa', '^a'}, {'find', 'baa', '^a', 2}, {'find', 'a^b', 'a^b'},\n"
    "  {'find', 'a$b', '$b'}, {'find', 'a$b', 'a$b'}, {'find', 'ab', 'b$'}, {'find', 'ab', 'a$'}, {'find', "
    "'ab', '$'},\n"
    "  {'find', 'ab', '^$'}, {'find', '', '^$'}, {'find', '^a', '^^a'}, {'find', 'ab', '^'}, {'find', 'ab', "
    "'b$', 3},\n"
    "  {'find', 'abc', 'x%'}, {'find', 'x', 'x%'}, {'find', 'abc', '%'}, {'find', 'hello', '(l)(l)'},\n"
    "  {'find', 'hello', '()ll()'}, {'find', 'hello', 'l+'}, {'find', 'a', 'a', 1, nil},\n"
    /* match and classes */
    "  {'match', '  trim  ', '^%s*(.-)%s*$'}, {'match', 'key = value', '(%w+)%s*=%s*(%w+)'},\n"
    "  {'match', '2024-01-15', '(%d+)-(%d+)-(%d+)'}, {'match', 'x', '()'}, {'match', 'hello', "
    "'(h)(e)(l)(l)(o)'},\n"
    "  {'match', 'abc', '..'}, {'match', '\\0x', '.'}, {'match', 'hello', '.-l'}, {'match', 'hello', "
    "'.*l'},\n"
    "  {'match', 'hello', 'l*'}, {'match', 'hello', 'x*'}, {'match', 'hello', 'h?e'}, {'match', 'hello', "
    "'x?h'},\n"
    "  {'match', 'aaab', 'a-b'}, {'match', 'aaab', '(a-)(a*)b'}, {'match', 'aaa', 'a?a?aa'}, {'match', "
    "'aab', 'a+$'},\n"
    "  {'match', '3.14e', '%d+%.?%d*'}, {'match', 'x', 'x', 2}, {'match', 'x', 'x', 3}, {'match', 'xy', "
    "'()', 3},\n"
    "  {'match', 'hello', 'l', -1}, {'match', 'hello', '^(h)', 1}, {'match', 'ahello', '^(h)', 2},\n"
    /* sets */
    "  {'match', 'xabcx', '[abc]+'}, {'match', 'xabcx', '[^abc]+'}, {'match', 'xabcx', '[a-c]+'},\n"
    "  {'match', 'a_b.c', '[%a_]+'}, {'match', 'x]y', '[%]]'}, {'match', 'x]y', '[]]'}, {'match', ']x', "
    "'[^]]'},\n"
    "  {'match', '-a', '[a-]+'}, {'match', 'a-', '[-a]+'}, {'match', 'b-', '[%-a]+'}, {'match', 'b-z', "
    "'[a%-z]+'},\n"
    "  {'match', 'abc', '[z-a]'}, {'match', '1 a', '[^%d%s]'}, {'match', 'a.b_c', '[%w_%.]+'},\n"
    "  {'match', 'c-e', '[a-c-e]+'}, {'match', 'a', '[]'}, {'match', 'a', '[^]'}, {'match', 'a', '[a'},\n"
    "  {'match', 'a', '[%'}, {'match', 'a', '[%a'}, {'match', 'a', '[^'}, {'match', 'b', 'a[x'}, {'match', "
    "'^', '[\\0^]'},\n"
    "  {'match', 'a', '[a-%]'}, {'match', '%', '[%%]'}, {'match', 'x-', '[x-]-'}, {'match', 'bbb', "
    "'[]b]*'},\n"
    /* captures and back-references */
    "  {'match', 'ab', '(a)(b)'}, {'match', 'ab', '(a(b))'}, {'match', 'aa', '(a)%1'}, {'match', 'aaaa', "
    "'(a*)%1'},\n"
    "  {'match', 'aaaa', '((a)%2)'}, {'match', 'a', '%0'}, {'match', 'aa', '(a)%2'}, {'match', 'aa', "
    "'(a%1)'},\n"
    "  {'match', 'a', ')'}, {'match', 'a', '(a'}, {'match', 'a', '(()'}, {'match', 'xx', '()%1'},\n"
    "  {'match', 'x', string.rep('()', 32)}, {'match', 'x', string.rep('()', 33)}, {'find', 'x', '(x)(x'},\n"
    "  {'match', 'abab', '(ab)%1$'}, {'match', 'aXa', '(.).%1'}, {'find', 'say \"hi\" now', "
    "'([\"\\'])(.-)%1'},\n"
    /* %b and %f */
    "  {'match', 'f(a(b)c) d', '%b()'}, {'match', 'x{a}', '%b{}'}, {'match', 'xaxy', '%bxy'}, {'match', 'a', "
    "'%b'},\n"
    "  {'match', 'a', '%b('}, {'match', 'a\"b\"c', '%b\"\"'}, {'match', '(((', '%b()'}, {'match', '', "
    "'%b()'},\n"
    "  {'match', 'THE (quick) fox', '%f[%a]%a+'}, {'match', 'THE (quick) fox', '%f[%W]'}, {'match', 'a', "
    "'%f'},\n"
    "  {'match', 'a', '%fa'}, {'match', 'a', '%f[a'}, {'match', 'ab', '%f[^a]'}, {'find', 'ab', '%f[%z]'},\n"
    "  {'find', 'ab', '%f[\\0]'}, {'find', 'ab', '%f[^\\0]'}, {'find', 'hello', '%f[%l]', 2},\n"
    /* gsub */
    "  {'gsub', 'hello world', '(o)', '[%1]'}, {'gsub', 'abc', '%w', '%0%0'}, {'gsub', 'abc', '%w', '%1'},\n"
    "  {'gsub', 'abc', '(%w)', '%2'}, {'gsub', 'abc', '%w', '%%'}, {'gsub', 'abc', '%w', '%'}, {'gsub', "
    "'abc', '%w', '%x'},\n"
    "  {'gsub', 'abc', '%w', 'a%'}, {'gsub', 'abc', '()b', '%1'}, {'gsub', 'abc', 'b', 5}, {'gsub', 'abc', "
    "'b', 2.5},\n"
    "  {'gsub', 'abc', 'b', nil}, {'gsub', 'abc', 'b', true}, {'gsub', 'abc', 'x', '-'}, {'gsub', 'abc', '', "
    "'-'},\n"
    "  {'gsub', 'abc', '.-', '-'}, {'gsub', 'abc', 'b*', '-'}, {'gsub', 'aaa', '^a', 'b'}, {'gsub', 'aaa', "
    "'^', 'x'},\n"
    "  {'gsub', 'aaa', 'a', 'b', 0}, {'gsub', 'aaa', 'a', 'b', 1}, {'gsub', 'aaa', 'a', 'b', -1}, {'gsub', "
    "'aaa', 'a', 'b', 2.5},\n"
    "  {'gsub', 'aaa', 'a', 'b', '2'}, {'gsub', 'aaa', 'a', nil, 'x'}, {'gsub', 'a\\0b', '%z', 'Z'}, "
    "{'gsub', 'a\\0b', '\\0', 'Z'},\n"
    "  {'gsub', 'abc', '', '%0'}, {'gsub', 'abc', '$', '!'}, {'gsub', 'abc', 'c$', '!'}, {'gsub', '', '', "
    "'e'},\n"
    "  {'gsub', 'x = 1, y = 2', '(%w+) = (%w+)', '%2 = %1'}, {'gsub', 'abc', '%w', '%0%9'}, {'gsub', 12345, "
    "3, 9},\n"
    "  {'gsub', 'abc', '(b)(c)', '%3'}, {'gsub', 'abc', '(b', 'x'}, {'gsub', 'abc', 'b)', 'x'}, {'gsub', "
    "'a.b', '.', '%%.'},\n"
    "}\n"
    "local function add(t) HAND[#HAND + 1] = t end\n"
    "local all = {}\n"
    "for i = 0, 255 do all[#all + 1] = string.char(i) end\n"
    "ALL = table.concat(all)\n"
    "for _, c in ipairs({'a', 'c', 'd', 'g', 'l', 'p', 's', 'u', 'w', 'x', 'A', 'C', 'D', 'G', 'L', 'P', "
    "'S',\n"
    "                    'U', 'W', 'X', 'z', 'Z', '.', '%', ']', '1', '-', '^'}) do\n"
    "  add({'gsub', ALL, '%' .. c, ''})\n"
    "  add({'gsub', ALL, '[%' .. c .. ']+', '#'})\n"
    "  add({'gsub', ALL, '[^%' .. c .. ']', ''})\n"
    "  add({'gsub', ALL, '%f[%' .. c .. ']', '|'})\n"
    "  add({'find', ALL, '%' .. c .. '+', 40})\n"
    "end\n"
    "add({'gsub', ALL, '[\\128-\\255]', ''}) add({'gsub', ALL, '[\\0-\\31]+', '.'}) add({'gsub', ALL, "
    "'[^\\1-\\254]', '.'})\n"
    "for i = 1, #REPLS do\n"
    "  add({'gsub', 'hello world abc', '%w+', REPLS[i]}) add({'gsub', 'hello world abc', '(%w)(%w*)', "
    "REPLS[i]})\n"
    "  add({'gsub', 'a b c x 1 3', '%w', REPLS[i]}) add({'gsub', 'abc', '()(b)', REPLS[i]})\n"
    "  add({'gsub', 'abc', '', REPLS[i]}) add({'gsub', 'abc', '%w', REPLS[i], 2})\n"
    "end\n"
    "for _, p in ipairs({'%a+', '(%w+)=(%w+)', '', 'a*', '()', '^a', '%', '(', '.-', 'x*', '%f[%w]', "
    "'()a()'}) do\n"
    "  for _, init in ipairs({1, 3, -3, 0, 12, 13, 14, 40, -40}) do\n"
    "    add({'gmatch', 'k=v, a=b aa^a', p, init})\n"
    "  end\n"
    "  add({'gmatch', 'k=v, a=b aa^a', p})\n"
    "end\n"
    "add({'gmatch', nil, 'a'}) add({'gmatch', 'a', 'a', 'x'}) add({'gmatch', 123, '%d'})\n"
    "function hand_count() return #HAND end\n"
    "function run_hand(i)\n"
    "  local c = HAND[i]\n"
    "  local d = {}\n"
    "  for k = 1, 5 do d[k] = type(c[k]) == 'string' and string.format('%q', c[k]:sub(1, 40)) or "
    "tostring(c[k]) end\n"
    "  return run(c[1], c[2], c[3], c[4], c[5]), table.concat(d, ', ')\n"
    "end\n";

static lua_State *new_state(int guarded) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (guarded) {
    lua_getglobal(L, "string");
    int top = lua_gettop(L);
    lp_pattern_install(L, -1);
    CHECK_INT(lua_gettop(L), top);
    lua_pop(L, 1);
  }
  if (luaL_loadbuffer(L, driver, sizeof driver - 1, "=driver") || lua_pcall(L, 0, 0, 0)) {
    fprintf(stderr, "driver: %s\n", lua_tostring(L, -1));
    exit(1);
  }
  return L;
}

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

static void compare(const char *a, const char *b, const char *what) {
  compared++;
  if (strcmp(a, b) == 0) return;
  if (++mismatches <= 25) fprintf(stderr, "MISMATCH %s\n  lua:     %s\n  guarded: %s\n", what, a, b);
}

static void test_hand_cases(void) {
  lua_getglobal(ref, "hand_count");
  lua_call(ref, 0, 1);
  int n = (int)lua_tointeger(ref, -1);
  lua_pop(ref, 1);
  int before = mismatches;
  for (int i = 1; i <= n; i++) {
    lua_getglobal(ref, "run_hand");
    lua_pushinteger(ref, i);
    lua_call(ref, 1, 2);
    lua_getglobal(grd, "run_hand");
    lua_pushinteger(grd, i);
    lua_call(grd, 1, 2);
    compare(lua_tostring(ref, -2), lua_tostring(grd, -2), lua_tostring(grd, -1));
    lua_pop(ref, 2);
    lua_pop(grd, 2);
  }
  fprintf(stderr, "     %d hand-written cases\n", n);
  CHECK(n > 300);
  CHECK_INT(mismatches - before, 0);
}

/* ---- generated cases --------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static unsigned rnd(unsigned n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (unsigned)(rng_state % n);
}

typedef struct text {
  char b[256];
  size_t n;
} text;

static void put(text *t, const char *s) {
  size_t k = strlen(s);
  if (t->n + k < sizeof t->b) {
    memcpy(t->b + t->n, s, k);
    t->n += k;
  }
}

static void putc_(text *t, char c) {
  if (t->n + 1 < sizeof t->b) t->b[t->n++] = c;
}

static const char subject_chars[] = "aaabbbc()x. -1%^$]";

static void gen_subject(text *t) {
  unsigned len = rnd(13);
  for (unsigned i = 0; i < len; i++) {
    if (rnd(40) == 0)
      putc_(t, '\0');
    else
      putc_(t, subject_chars[rnd(sizeof subject_chars - 1)]);
  }
}

static void gen_set_member(text *t) {
  static const char *const members[] = {"a",  "b", "c", "a-b", "b-c", "x",  "%a", "%d", "%s", "%p", "%]",
                                        "%%", "-", "(", ".",   "^",   "%W", "]",  "$",  " ",  "a-"};
  put(t, members[rnd(sizeof members / sizeof *members)]);
}

static void gen_class(text *t) {
  static const char *const singles[] = {"a",  "b",  "c",  "x",  "1",  " ",  ".",  "%.", "%(", "%)", "%%",
                                        "%-", "%]", "]",  "^",  "%a", "%c", "%d", "%g", "%l", "%p", "%s",
                                        "%u", "%w", "%x", "%A", "%D", "%P", "%S", "%W", "%z", "-",  "%$"};
  if (rnd(5) == 0) {
    putc_(t, '[');
    if (rnd(3) == 0) putc_(t, '^');
    unsigned k = 1 + rnd(3);
    for (unsigned i = 0; i < k; i++) gen_set_member(t);
    putc_(t, ']');
  } else {
    put(t, singles[rnd(sizeof singles / sizeof *singles)]);
  }
}

static void gen_seq(text *t, int depth, int *closed) {
  unsigned items = rnd(5);
  for (unsigned i = 0; i < items; i++) {
    unsigned r = rnd(100);
    if (r < 62) {
      gen_class(t);
      static const char quant[] = "*+-?";
      if (rnd(5) < 3) putc_(t, quant[rnd(4)]);
    } else if (r < 74 && depth < 3) {
      putc_(t, '(');
      gen_seq(t, depth + 1, closed);
      putc_(t, ')');
      (*closed)++;
    } else if (r < 79) {
      put(t, "()");
      (*closed)++;
    } else if (r < 85) {
      char backref[4] = {'%', (char)('1' + rnd(*closed ? (unsigned)*closed + (rnd(8) == 0) : 2)), 0};
      put(t, backref);
    } else if (r < 91) {
      static const char *const bal[] = {"%b()", "%bab", "%b((", "%b)("};
      put(t, bal[rnd(4)]);
    } else {
      static const char *const fr[] = {"%f[%w]", "%f[%W]", "%f[a]", "%f[^a]", "%f[%s]", "%f[^b-c]", "%f[(]"};
      put(t, fr[rnd(7)]);
    }
  }
}

static void gen_pattern(text *t) {
  int closed = 0;
  if (rnd(5) == 0) putc_(t, '^');
  gen_seq(t, 0, &closed);
  if (rnd(7) == 0) putc_(t, '$');
  if (rnd(15) == 0 && t->n > 0) {
    /* Malformed on purpose: errors must agree, including whether matching ever reaches them. */
    static const char bad[] = "%[()]";
    size_t at = rnd((unsigned)t->n + 1);
    memmove(t->b + at + 1, t->b + at, t->n - at);
    t->b[at] = bad[rnd(5)];
    t->n++;
  }
}

typedef struct arg {
  enum { A_NONE, A_INT, A_STR, A_BOOL, A_REPL } kind;
  long long i;
  const char *s;
} arg;

static void push_arg(lua_State *L, const arg *a) {
  switch (a->kind) {
  case A_NONE:
    lua_pushnil(L);
    break;
  case A_INT:
    lua_pushinteger(L, a->i);
    break;
  case A_STR:
    lua_pushstring(L, a->s);
    break;
  case A_BOOL:
    lua_pushboolean(L, (int)a->i);
    break;
  case A_REPL:
    lua_getglobal(L, "REPLS");
    lua_rawgeti(L, -1, a->i);
    lua_remove(L, -2);
    break;
  }
}

static const char *run_in(lua_State *L, const char *fname, const text *s, const text *p, const arg *a3,
                          const arg *a4) {
  lua_settop(L, 0);
  lua_getglobal(L, "run");
  lua_pushstring(L, fname);
  lua_pushlstring(L, s->b, s->n);
  lua_pushlstring(L, p->b, p->n);
  push_arg(L, a3);
  push_arg(L, a4);
  lua_call(L, 5, 1);
  return lua_tostring(L, -1);
}

static void test_generated_cases(void) {
  static const char *const fnames[] = {"find", "match", "gmatch", "gsub"};
  static const char *const repl_strings[] = {"<%0>", "%1", "%2", "x", "%%", "", "%", "%z", "[%1|%0]", "%3"};
  int before = mismatches, n = 4000;
  for (int c = 0; c < n; c++) {
    text s = {{0}, 0}, p = {{0}, 0};
    gen_subject(&s);
    gen_pattern(&p);
    const char *fname = fnames[rnd(4)];
    arg a3 = {A_NONE, 0, NULL}, a4 = {A_NONE, 0, NULL};
    if (strcmp(fname, "gsub") == 0) {
      if (rnd(3) == 0) {
        a3.kind = A_REPL;
        a3.i = 1 + rnd(10);
      } else {
        a3.kind = A_STR;
        a3.s = repl_strings[rnd(sizeof repl_strings / sizeof *repl_strings)];
      }
      if (rnd(4) == 0) a4 = (arg){A_INT, (long long)rnd(4) - 1, NULL};
    } else if (rnd(3) == 0) {
      a3 = (arg){A_INT, (long long)rnd(30) - 15, NULL};
      if (strcmp(fname, "find") == 0 && rnd(4) == 0) a4 = (arg){A_BOOL, 1, NULL};
    }
    const char *r = run_in(ref, fname, &s, &p, &a3, &a4);
    const char *g = run_in(grd, fname, &s, &p, &a3, &a4);
    char what[700];
    snprintf(what, sizeof what, "#%d %s subject=[%.*s] pattern=[%.*s] a3=%lld/%s a4=%lld", c, fname, (int)s.n,
             s.b, (int)p.n, p.b, a3.i, a3.s ? a3.s : "-", a4.i);
    compare(r, g, what);
  }
  fprintf(stderr, "     %d generated cases\n", n);
  CHECK_INT(mismatches - before, 0);
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
  ref = new_state(0);
  grd = new_state(1);
  RUN(test_hand_cases);
  RUN(test_generated_cases);
  fprintf(stderr, "     %d differential comparisons, %d mismatches\n", compared, mismatches);
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
