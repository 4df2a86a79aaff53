/* Private to pattern.c (the Lua bindings, limits and installation) and pattern_match.c (the
 * matcher core: classes, sets, the match recursion and captures). */
#ifndef LUAPROV_SCRIPT_PATTERN_INTERNAL_H
#define LUAPROV_SCRIPT_PATTERN_INTERNAL_H

#include <stddef.h>

#include <lua.h>

enum { PM_MAX_CAPTURES = 32 };

/* Capture lengths that are not lengths: still open, or a position capture "()". */
#define PM_CAP_OPEN ((ptrdiff_t)-1)
#define PM_CAP_POS  ((ptrdiff_t)-2)

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

/* Matches the rest of the pattern p at s; returns the end of the match or NULL. */
const char *pm_match(pm_state *ms, const char *s, const char *p);

/* Capture i of the match [s, e): with no captures, index 0 is the whole match. A position capture
 * is pushed as an integer and PM_CAP_POS returned; otherwise *out and the length are set. */
ptrdiff_t pm_get_capture(pm_state *ms, int i, const char *s, const char *e, const char **out);
void pm_push_capture(pm_state *ms, int i, const char *s, const char *e);
/* Pushes every capture, or the whole match when there are none and s is given. */
int pm_push_captures(pm_state *ms, const char *s, const char *e);

#endif
