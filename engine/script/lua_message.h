/* Reads the position Lua puts in front of a raised string: "policies/drift.lua:12: text". The one
 * parser of that form in the engine; the call door (call.c) and the load-time problem list
 * (generation.c) both place errors with it. Pure string work: no Lua state, any thread. */
#ifndef LUAPROV_SCRIPT_LUA_MESSAGE_H
#define LUAPROV_SCRIPT_LUA_MESSAGE_H

/* When message starts with "FILE:LINE: " (FILE non-empty, not a "[string ...]" or "[C]" chunk, and
 * either free of spaces or ending in ".lua"; LINE in 1..1000000), returns 1, sets *file to a malloc'd
 * copy of FILE (the caller frees it), *line to LINE and *text to what follows, leading spaces skipped
 * (a pointer into message). Otherwise returns 0 and leaves the outputs alone. */
int lp_lua_message_place(const char *message, char **file, int *line, const char **text);

#endif
