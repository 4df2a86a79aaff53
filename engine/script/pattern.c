/* Guarded string.find/match/gmatch/gsub: an independent implementation of the Lua 5.4.4 pattern
 * language whose observable behaviour matches the stock one, including which malformed patterns go
 * unnoticed (errors surface only when matching reaches the bad part, as in Lua), plus the limits
 * documented in pattern.h. Compatibility is checked by the differential test in
 * spec/c/test_pattern.c; keep both in step when touching the matcher. */
#define _GNU_SOURCE /* memmem */
#include "script/pattern.h"

#include <ctype.h>
#include <stdatomic.h>
#include <string.h>

#include <lauxlib.h>

enum { PM_MAX_CAPTURES = 32 };

/* Capture lengths that are not lengths: still open, or a position capture "()". */
#define PM_CAP_OPEN ((ptrdiff_t)-1)
#define PM_CAP_POS  ((ptrdiff_t)-2)

static _Atomic long pm_limit_steps = LP_PATTERN_DEFAULT_MAX_STEPS;
static _Atomic size_t pm_limit_len = LP_PATTERN_DEFAULT_MAX_LEN;

typedef struct pm_state {
  const char *subj;     /* subject start; position captures count from here */
  const char *subj_end; /* one past the subject; %f sees the position there as preceding a NUL */
  const char *pat_end;
  lua_State *L;
  const char *fname; /* "string.find" etc., named in limit errors */
  long steps_left;
  long max_steps; /* as the call started, for the error message */
  int depth_left;
  int ncap;
  struct {
    const char *at;
    ptrdiff_t len;
  } cap[PM_MAX_CAPTURES];
} pm_state;

static int pm_out_of_steps(pm_state *ms) {
  return luaL_error(ms->L, "pattern too complex: more than %I matching steps (%s)",
                    (lua_Integer)ms->max_steps, ms->fname);
}

/* Charging is a decrement and a predictable branch, cheap enough for the innermost loops. */
#define PM_CHARGE(ms, n)                                                                                     \
  do {                                                                                                       \
    if (((ms)->steps_left -= (long)(n)) < 0) pm_out_of_steps(ms);                                            \
  } while (0)

static void pm_begin(pm_state *ms, lua_State *L, const char *fname, const char *s, size_t ls, const char *p,
                     size_t lp) {
  ms->L = L;
  ms->fname = fname;
  ms->subj = s;
  ms->subj_end = s + ls;
  ms->pat_end = p + lp;
  ms->max_steps = atomic_load_explicit(&pm_limit_steps, memory_order_relaxed);
  ms->steps_left = ms->max_steps;
}

/* Called before each attempt at a new subject position. The depth is reset rather than asserted:
 * an error mid-match leaves it unbalanced, and a gmatch iterator may be called again after one. */
static void pm_restart(pm_state *ms) {
  ms->ncap = 0;
  ms->depth_left = LP_PATTERN_MAX_DEPTH;
}

static void pm_check_length(lua_State *L, size_t lp, const char *fname) {
  size_t limit = atomic_load_explicit(&pm_limit_len, memory_order_relaxed);
  if (lp > limit)
    luaL_error(L, "pattern too long: %I bytes, limit is %I (%s)", (lua_Integer)lp, (lua_Integer)limit, fname);
}

/* ---- the matcher ------------------------------------------------------------------------------- */

/* %a-style classes go through <ctype.h> like Lua's, so both agree under any locale. */
static int pm_class(int c, int cl) {
  int hit;
  switch (tolower(cl)) {
  case 'a':
    hit = isalpha(c);
    break;
  case 'c':
    hit = iscntrl(c);
    break;
  case 'd':
    hit = isdigit(c);
    break;
  case 'g':
    hit = isgraph(c);
    break;
  case 'l':
    hit = islower(c);
    break;
  case 'p':
    hit = ispunct(c);
    break;
  case 's':
    hit = isspace(c);
    break;
  case 'u':
    hit = isupper(c);
    break;
  case 'w':
    hit = isalnum(c);
    break;
  case 'x':
    hit = isxdigit(c);
    break;
  case 'z': /* deprecated since 5.2 but still accepted by 5.4 */
    hit = c == 0;
    break;
  default:
    return cl == c; /* %. %% %] ...: the character itself */
  }
  return isupper(cl) ? !hit : hit != 0;
}

/* open points at '[', close at the ']' that ends the set. */
static int pm_set(int c, const char *open, const char *close) {
  const char *p = open + 1;
  int want = 1;
  if (*p == '^') {
    want = 0;
    p++;
  }
  for (; p < close; p++) {
    if (*p == '%') {
      p++;
      if (pm_class(c, (unsigned char)*p)) return want;
    } else if (p[1] == '-' && p + 2 < close) {
      if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2]) return want;
      p += 2;
    } else if ((unsigned char)*p == c) {
      return want;
    }
  }
  return !want;
}

/* Returns the end of the single-character item at p (where a quantifier would be). */
static const char *pm_item_end(pm_state *ms, const char *p) {
  char c = *p++;
  if (c == '%') {
    if (p >= ms->pat_end) luaL_error(ms->L, "malformed pattern (ends with '%%')");
    return p + 1;
  }
  if (c == '[') {
    if (*p == '^') p++;
    /* The first member is taken before looking for ']', so "[]]" is a set holding ']'. */
    for (;;) {
      if (p >= ms->pat_end) luaL_error(ms->L, "malformed pattern (missing ']')");
      c = *p++;
      if (c == '%' && p < ms->pat_end) p++;
      if (*p == ']') return p + 1;
    }
  }
  return p;
}

static inline int pm_single(const pm_state *ms, const char *s, const char *p, const char *ep) {
  if (s >= ms->subj_end) return 0;
  int c = (unsigned char)*s;
  switch (*p) {
  case '.':
    return 1;
  case '%':
    return pm_class(c, (unsigned char)p[1]);
  case '[':
    return pm_set(c, p, ep - 1);
  default:
    return (unsigned char)*p == c;
  }
}

static const char *pm_match(pm_state *ms, const char *s, const char *p);

/* %bxy at s; p points at x. */
static const char *pm_balance(pm_state *ms, const char *s, const char *p) {
  if (p + 1 >= ms->pat_end) luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
  if (s >= ms->subj_end || *s != *p) return NULL;
  const char *start = s;
  char open = p[0], close = p[1];
  size_t nesting = 1;
  /* The close test comes first so that %b"" (open == close) ends at the next quote. */
  while (++s < ms->subj_end) {
    if (*s == close) {
      if (--nesting == 0) break;
    } else if (*s == open) {
      nesting++;
    }
  }
  PM_CHARGE(ms, s - start);
  return s < ms->subj_end ? s + 1 : NULL;
}

static int pm_capture_index(pm_state *ms, int digit) {
  int i = digit - '1';
  if (i < 0 || i >= ms->ncap || ms->cap[i].len == PM_CAP_OPEN)
    return luaL_error(ms->L, "invalid capture index %%%d", i + 1);
  return i;
}

static const char *pm_backref(pm_state *ms, const char *s, int digit) {
  int i = pm_capture_index(ms, digit);
  /* A position capture's length is negative, so as a size it never fits: "()%1" cannot match. */
  size_t n = (size_t)ms->cap[i].len;
  if ((size_t)(ms->subj_end - s) < n) return NULL;
  PM_CHARGE(ms, n);
  return memcmp(ms->cap[i].at, s, n) == 0 ? s + n : NULL;
}

static const char *pm_open_capture(pm_state *ms, const char *s, const char *p, ptrdiff_t kind) {
  if (ms->ncap >= PM_MAX_CAPTURES) luaL_error(ms->L, "too many captures");
  ms->cap[ms->ncap].at = s;
  ms->cap[ms->ncap].len = kind;
  ms->ncap++;
  const char *r = pm_match(ms, s, p);
  if (!r) ms->ncap--;
  return r;
}

static const char *pm_close_capture(pm_state *ms, const char *s, const char *p) {
  int i = ms->ncap - 1;
  while (i >= 0 && ms->cap[i].len != PM_CAP_OPEN) i--;
  if (i < 0) luaL_error(ms->L, "invalid pattern capture");
  ms->cap[i].len = s - ms->cap[i].at;
  const char *r = pm_match(ms, s, p);
  if (!r) ms->cap[i].len = PM_CAP_OPEN;
  return r;
}

/* item* and item+ (after its first match): longest run first, then back off one at a time. */
static const char *pm_greedy(pm_state *ms, const char *s, const char *p, const char *ep) {
  ptrdiff_t n = 0;
  while (pm_single(ms, s + n, p, ep)) {
    n++;
    PM_CHARGE(ms, 1);
  }
  for (; n >= 0; n--) {
    const char *r = pm_match(ms, s + n, ep + 1);
    if (r) return r;
  }
  return NULL;
}

/* item-: shortest run first. */
static const char *pm_lazy(pm_state *ms, const char *s, const char *p, const char *ep) {
  for (;;) {
    const char *r = pm_match(ms, s, ep + 1);
    if (r) return r;
    if (!pm_single(ms, s, p, ep)) return NULL;
    s++;
    PM_CHARGE(ms, 1);
  }
}

/* Matches the rest of the pattern p at s; returns the end of the match or NULL. The loop stands in
 * for tail calls, so the depth limit counts the same nesting as Lua's and rejects the same patterns;
 * every trip round it is one step, which bounds the work per step by the pattern length. */
static const char *pm_match(pm_state *ms, const char *s, const char *p) {
  if (ms->depth_left-- == 0)
    luaL_error(ms->L, "pattern too complex: more than %d nested matching levels (%s)", LP_PATTERN_MAX_DEPTH,
               ms->fname);
  for (;;) {
    PM_CHARGE(ms, 1);
    if (p == ms->pat_end) break;
    switch (*p) {
    case '(':
      s = p[1] == ')' ? pm_open_capture(ms, s, p + 2, PM_CAP_POS)
                      : pm_open_capture(ms, s, p + 1, PM_CAP_OPEN);
      goto out;
    case ')':
      s = pm_close_capture(ms, s, p + 1);
      goto out;
    case '$':
      if (p + 1 != ms->pat_end) break; /* a '$' elsewhere is an ordinary character */
      if (s != ms->subj_end) s = NULL;
      goto out;
    case '%':
      switch (p[1]) {
      case 'b':
        s = pm_balance(ms, s, p + 2);
        if (!s) goto out;
        p += 4;
        continue;
      case 'f': {
        p += 2;
        if (*p != '[') luaL_error(ms->L, "missing '[' after '%%f' in pattern");
        const char *ep = pm_item_end(ms, p);
        int before = s == ms->subj ? 0 : (unsigned char)s[-1];
        int here = s < ms->subj_end ? (unsigned char)*s : 0;
        if (pm_set(before, p, ep - 1) || !pm_set(here, p, ep - 1)) {
          s = NULL;
          goto out;
        }
        p = ep;
        continue;
      }
      case '0':
      case '1':
      case '2':
      case '3':
      case '4':
      case '5':
      case '6':
      case '7':
      case '8':
      case '9':
        s = pm_backref(ms, s, (unsigned char)p[1]);
        if (!s) goto out;
        p += 2;
        continue;
      default:
        break; /* a class such as %d */
      }
      break;
    default:
      break;
    }

    /* A single-character item with an optional quantifier after it. */
    const char *ep = pm_item_end(ms, p);
    if (!pm_single(ms, s, p, ep)) {
      if (*ep == '*' || *ep == '?' || *ep == '-') {
        p = ep + 1;
        continue;
      }
      s = NULL;
      goto out;
    }
    switch (*ep) {
    case '?': {
      const char *r = pm_match(ms, s + 1, ep + 1);
      if (r) {
        s = r;
        goto out;
      }
      p = ep + 1;
      continue;
    }
    case '+':
      s = pm_greedy(ms, s + 1, p, ep);
      goto out;
    case '*':
      s = pm_greedy(ms, s, p, ep);
      goto out;
    case '-':
      s = pm_lazy(ms, s, p, ep);
      goto out;
    default:
      s++;
      p = ep;
      continue;
    }
  }
out:
  ms->depth_left++;
  return s;
}

/* ---- results ----------------------------------------------------------------------------------- */

/* Capture i of the match [s, e): with no captures, index 0 is the whole match. A position capture
 * is pushed as an integer and PM_CAP_POS returned; otherwise *out and the length are set. */
static ptrdiff_t pm_get_capture(pm_state *ms, int i, const char *s, const char *e, const char **out) {
  if (i >= ms->ncap) {
    if (i != 0) luaL_error(ms->L, "invalid capture index %%%d", i + 1);
    *out = s;
    return e - s;
  }
  ptrdiff_t len = ms->cap[i].len;
  *out = ms->cap[i].at;
  if (len == PM_CAP_OPEN) luaL_error(ms->L, "unfinished capture");
  if (len == PM_CAP_POS) lua_pushinteger(ms->L, (ms->cap[i].at - ms->subj) + 1);
  return len;
}

static void pm_push_capture(pm_state *ms, int i, const char *s, const char *e) {
  const char *at;
  ptrdiff_t len = pm_get_capture(ms, i, s, e, &at);
  if (len != PM_CAP_POS) lua_pushlstring(ms->L, at, (size_t)len);
}

/* Pushes every capture, or the whole match when there are none and s is given. */
static int pm_push_captures(pm_state *ms, const char *s, const char *e) {
  int n = (ms->ncap == 0 && s) ? 1 : ms->ncap;
  luaL_checkstack(ms->L, n, "too many captures");
  for (int i = 0; i < n; i++) pm_push_capture(ms, i, s, e);
  return n;
}

/* ---- string.find / string.match ---------------------------------------------------------------- */

/* Lua's start-position rule: negative counts from the end, anything before the start clips to 1. */
static size_t pm_start_index(lua_Integer pos, size_t len) {
  if (pos > 0) return (size_t)pos;
  if (pos == 0 || pos < -(lua_Integer)len) return 1;
  return len + (size_t)pos + 1;
}

/* True when p has none of Lua's magic characters, embedded NULs included, so find may search
 * literally. */
static int pm_is_literal(const char *p, size_t lp) {
  for (size_t i = 0; i < lp; i++)
    if (strchr("^$*+?.([%-", p[i]) && p[i] != '\0') return 0;
  return 1;
}

static int pm_find_or_match(lua_State *L, int find) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  size_t init = pm_start_index(luaL_optinteger(L, 3, 1), ls) - 1;
  if (init > ls) {
    luaL_pushfail(L);
    return 1;
  }
  if (find && (lua_toboolean(L, 4) || pm_is_literal(p, lp))) {
    /* glibc's memmem is linear-time, so literal searches need no budget. */
    const char *hit = lp == 0 ? s + init : memmem(s + init, ls - init, p, lp);
    if (hit) {
      lua_pushinteger(L, (hit - s) + 1);
      lua_pushinteger(L, (lua_Integer)((hit - s) + lp));
      return 2;
    }
    luaL_pushfail(L);
    return 1;
  }
  const char *fname = find ? "string.find" : "string.match";
  pm_check_length(L, lp, fname);
  pm_state ms;
  int anchored = *p == '^';
  if (anchored) {
    p++;
    lp--;
  }
  pm_begin(&ms, L, fname, s, ls, p, lp);
  const char *at = s + init;
  do {
    pm_restart(&ms);
    const char *e = pm_match(&ms, at, p);
    if (e) {
      if (!find) return pm_push_captures(&ms, at, e);
      lua_pushinteger(L, (at - s) + 1);
      lua_pushinteger(L, e - s);
      return pm_push_captures(&ms, NULL, NULL) + 2;
    }
  } while (at++ < ms.subj_end && !anchored);
  luaL_pushfail(L);
  return 1;
}

static int pm_find(lua_State *L) {
  return pm_find_or_match(L, 1);
}

static int pm_match_fn(lua_State *L) {
  return pm_find_or_match(L, 0);
}

/* ---- string.gmatch ----------------------------------------------------------------------------- */

/* Lives in a userdata upvalue of the iterator; the subject and pattern strings are upvalues too,
 * which keeps the pointers below valid. */
typedef struct pm_gmatch {
  const char *next;     /* where the next search starts */
  const char *last_end; /* end of the previous match: an empty match there is skipped */
  const char *pat;
  pm_state ms;
} pm_gmatch;

static int pm_gmatch_step(lua_State *L) {
  pm_gmatch *gm = lua_touserdata(L, lua_upvalueindex(3));
  pm_state *ms = &gm->ms;
  /* The iterator may run in another coroutine than the one that made it. */
  ms->L = L;
  ms->max_steps = atomic_load_explicit(&pm_limit_steps, memory_order_relaxed);
  ms->steps_left = ms->max_steps;
  for (const char *at = gm->next; at <= ms->subj_end; at++) {
    pm_restart(ms);
    const char *e = pm_match(ms, at, gm->pat);
    if (e && e != gm->last_end) {
      gm->next = gm->last_end = e;
      return pm_push_captures(ms, at, e);
    }
  }
  return 0;
}

static int pm_gmatch_fn(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  size_t init = pm_start_index(luaL_optinteger(L, 3, 1), ls) - 1;
  pm_check_length(L, lp, "string.gmatch");
  lua_settop(L, 2);
  pm_gmatch *gm = lua_newuserdatauv(L, sizeof *gm, 0);
  if (init > ls) init = ls + 1; /* past the end: the first call finds nothing */
  pm_begin(&gm->ms, L, "string.gmatch", s, ls, p, lp);
  gm->next = s + init;
  gm->last_end = NULL;
  gm->pat = p;
  lua_pushcclosure(L, pm_gmatch_step, 3);
  return 1;
}

/* ---- string.gsub ------------------------------------------------------------------------------- */

/* Appends the replacement string (argument 3) with %0-%9 and %% expanded. */
static void pm_expand(pm_state *ms, luaL_Buffer *b, const char *s, const char *e) {
  lua_State *L = ms->L;
  size_t left;
  const char *r = lua_tolstring(L, 3, &left);
  const char *pct;
  while ((pct = memchr(r, '%', left)) != NULL) {
    luaL_addlstring(b, r, (size_t)(pct - r));
    char c = pct[1]; /* the string's trailing NUL when '%' is last, which is rejected below */
    if (c == '%') {
      luaL_addchar(b, '%');
    } else if (c == '0') {
      luaL_addlstring(b, s, (size_t)(e - s));
    } else if (isdigit((unsigned char)c)) {
      const char *at;
      ptrdiff_t len = pm_get_capture(ms, c - '1', s, e, &at);
      if (len == PM_CAP_POS)
        luaL_addvalue(b);
      else
        luaL_addlstring(b, at, (size_t)len);
    } else {
      luaL_error(L, "invalid use of '%c' in replacement string", '%');
    }
    left -= (size_t)(pct + 2 - r);
    r = pct + 2;
  }
  luaL_addlstring(b, r, left);
}

/* Appends the replacement for the match [s, e); returns whether it differs from the original. */
static int pm_replace(pm_state *ms, luaL_Buffer *b, const char *s, const char *e, int kind) {
  lua_State *L = ms->L;
  if (kind == LUA_TFUNCTION) {
    lua_pushvalue(L, 3);
    int n = pm_push_captures(ms, s, e);
    lua_call(L, n, 1);
  } else if (kind == LUA_TTABLE) {
    pm_push_capture(ms, 0, s, e);
    lua_gettable(L, 3);
  } else {
    pm_expand(ms, b, s, e);
    return 1;
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, s, (size_t)(e - s));
    return 0;
  }
  if (!lua_isstring(L, -1)) return luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  luaL_addvalue(b);
  return 1;
}

static int pm_gsub(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  int kind = lua_type(L, 3);
  lua_Integer max_n = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
  luaL_argexpected(L,
                   kind == LUA_TNUMBER || kind == LUA_TSTRING || kind == LUA_TFUNCTION || kind == LUA_TTABLE,
                   3, "string/function/table");
  pm_check_length(L, lp, "string.gsub");
  int anchored = *p == '^';
  if (anchored) {
    p++;
    lp--;
  }
  pm_state ms;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  pm_begin(&ms, L, "string.gsub", s, ls, p, lp);
  const char *last_end = NULL;
  lua_Integer n = 0;
  int changed = 0;
  while (n < max_n) {
    pm_restart(&ms);
    const char *e = pm_match(&ms, s, p);
    if (e && e != last_end) {
      n++;
      changed |= pm_replace(&ms, &b, s, e, kind);
      s = last_end = e;
    } else if (s < ms.subj_end) {
      luaL_addchar(&b, *s++);
    } else {
      break;
    }
    if (anchored) break;
  }
  if (changed) {
    luaL_addlstring(&b, s, (size_t)(ms.subj_end - s));
    luaL_pushresult(&b);
  } else {
    lua_pushvalue(L, 1); /* unchanged: hand back the very same string */
  }
  lua_pushinteger(L, n);
  return 2;
}

/* ---- public API -------------------------------------------------------------------------------- */

void lp_pattern_install(lua_State *L, int idx) {
  static const luaL_Reg fns[] = {
      {"find", pm_find}, {"match", pm_match_fn}, {"gmatch", pm_gmatch_fn}, {"gsub", pm_gsub}, {NULL, NULL}};
  idx = lua_absindex(L, idx);
  for (const luaL_Reg *f = fns; f->name; f++) {
    lua_pushstring(L, f->name);
    lua_pushcfunction(L, f->func);
    lua_rawset(L, idx);
  }
}

void lp_pattern_set_limits(long max_steps, size_t max_pattern_len) {
  if (max_steps > 0) atomic_store_explicit(&pm_limit_steps, max_steps, memory_order_relaxed);
  if (max_pattern_len > 0) atomic_store_explicit(&pm_limit_len, max_pattern_len, memory_order_relaxed);
}

void lp_pattern_get_limits(long *max_steps, size_t *max_pattern_len) {
  if (max_steps) *max_steps = atomic_load_explicit(&pm_limit_steps, memory_order_relaxed);
  if (max_pattern_len) *max_pattern_len = atomic_load_explicit(&pm_limit_len, memory_order_relaxed);
}
