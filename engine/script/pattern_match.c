/* The matcher core of the guarded pattern functions (see pattern.c): character classes, sets, the
 * match recursion with its step and depth limits, and captures. Behaviour must stay identical to
 * Lua 5.4.4's; spec/c/test_pattern.c checks it differentially. */
#include <ctype.h>
#include <string.h>

#include <lauxlib.h>

#include "script/pattern.h"
#include "script/pattern_internal.h"

static int pm_out_of_steps(pm_state *ms) {
  return luaL_error(ms->L, "pattern too complex: more than %I matching steps (%s)",
                    (lua_Integer)ms->max_steps, ms->fname);
}

/* Charging is a decrement and a predictable branch, cheap enough for the innermost loops. */
#define PM_CHARGE(ms, n)                                                                                     \
  do {                                                                                                       \
    if (((ms)->steps_left -= (long)(n)) < 0) pm_out_of_steps(ms);                                            \
  } while (0)

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
const char *pm_match(pm_state *ms, const char *s, const char *p) {
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
ptrdiff_t pm_get_capture(pm_state *ms, int i, const char *s, const char *e, const char **out) {
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

void pm_push_capture(pm_state *ms, int i, const char *s, const char *e) {
  const char *at;
  ptrdiff_t len = pm_get_capture(ms, i, s, e, &at);
  if (len != PM_CAP_POS) lua_pushlstring(ms->L, at, (size_t)len);
}

/* Pushes every capture, or the whole match when there are none and s is given. */
int pm_push_captures(pm_state *ms, const char *s, const char *e) {
  int n = (ms->ncap == 0 && s) ? 1 : ms->ncap;
  luaL_checkstack(ms->L, n, "too many captures");
  for (int i = 0; i < n; i++) pm_push_capture(ms, i, s, e);
  return n;
}
