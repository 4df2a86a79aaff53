/* Guarded pattern functions: a differential test against the stock Lua 5.4 ones (hand-written
 * cases for every feature plus generated ones). The limits (pathological patterns fail fast, heavy
 * but ordinary use still succeeds) are in test_pattern_limits.c; the driver chunk both run is in
 * pattern_test_support.h. */
#include <stdint.h>

#include "pattern_test_support.h"

static int compared, mismatches;

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

int main(void) {
  ref = new_state(0, 1);
  grd = new_state(1, 1);
  RUN(test_hand_cases);
  RUN(test_generated_cases);
  fprintf(stderr, "     %d differential comparisons, %d mismatches\n", compared, mismatches);
  lua_close(ref);
  lua_close(grd);
  return check_summary();
}
