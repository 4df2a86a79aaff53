/* Guarded string.find/match/gmatch/gsub: an independent implementation of the Lua 5.4.4 pattern
 * language whose observable behaviour matches the stock one, including which malformed patterns go
 * unnoticed (errors surface only when matching reaches the bad part, as in Lua), plus the limits
 * documented in pattern.h. Compatibility is checked by the differential test in
 * spec/c/test_pattern.c; keep both in step when touching the matcher. The matcher core lives in
 * pattern_match.c; this file holds the limits and the Lua bindings. */
#define _GNU_SOURCE /* memmem */
#include "script/pattern.h"

#include <ctype.h>
#include <stdatomic.h>
#include <string.h>

#include <lauxlib.h>

#include "script/pattern_internal.h"

static _Atomic long pm_limit_steps = LP_PATTERN_DEFAULT_MAX_STEPS;
static _Atomic size_t pm_limit_len = LP_PATTERN_DEFAULT_MAX_LEN;

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
