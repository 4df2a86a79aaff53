/* Guarded Lua pattern functions (docs/lua-api.md#budgets-and-limits: guarded against pathological
 * input sizes). Lua's own string.find/match/gmatch/gsub backtrack in C, where the sandbox's count hooks
 * never fire, so a 28-byte subject with a pathological pattern can hold the loop for minutes. The
 * replacements installed here behave like Lua 5.4.4's (same results, same error messages for bad
 * arguments and malformed patterns) but stop with a Lua error when a call exceeds a limit:
 *
 *   - matching steps per call (default LP_PATTERN_DEFAULT_MAX_STEPS, tens of milliseconds): one
 *     step per pattern item visited, per repetition of a single-character item, and per subject
 *     byte scanned by %b or compared by a back-reference. Error:
 *       "pattern too complex: more than N matching steps (string.find)"
 *     gsub and find/match count one budget across all start positions of the call; each call of a
 *     gmatch iterator gets a fresh budget. Time spent in gsub replacement functions or __index
 *     metamethods is Lua code and is left to the sandbox's hooks, not charged here.
 *   - pattern length (default LP_PATTERN_DEFAULT_MAX_LEN bytes) for patterns that are actually
 *     interpreted; plain finds (4th argument true, or no magic characters) search in linear time
 *     and accept any length. Error: "pattern too long: N bytes, limit is M (string.gsub)"
 *   - nesting depth LP_PATTERN_MAX_DEPTH, the same as Lua's MAXCCALLS, so exactly the patterns Lua
 *     rejects are rejected. Error: "pattern too complex: more than 200 nested matching levels (...)"
 *     (Lua's plain "pattern too complex" extended with the limit and the function).
 *
 * Limit errors, like all errors of these functions, are raised with lua_error in the calling state;
 * scripts can catch them with pcall. */
#ifndef LUAPROV_SCRIPT_PATTERN_H
#define LUAPROV_SCRIPT_PATTERN_H

#include <stddef.h>

#include <lua.h>

#define LP_PATTERN_DEFAULT_MAX_STEPS 10000000L
#define LP_PATTERN_DEFAULT_MAX_LEN   ((size_t)4096)
#define LP_PATTERN_MAX_DEPTH         200

/* Replaces find, match, gmatch and gsub in the table at index idx (the state's own `string` table,
 * which is also the string metatable's __index) with the guarded versions, using raw sets. The
 * functions keep no per-state data, so installing into several states or tables is fine.
 *                                                                                   [-0, +0, m] */
void lp_pattern_install(lua_State *L, int idx);

/* Sets the process-wide limits used by calls that start afterwards (safe to call from any thread;
 * calls already running keep the limits they started with). A value <= 0 keeps the current one. */
void lp_pattern_set_limits(long max_steps, size_t max_pattern_len);

/* Reads the current process-wide limits into whichever pointers are non-NULL. */
void lp_pattern_get_limits(long *max_steps, size_t *max_pattern_len);

#endif
