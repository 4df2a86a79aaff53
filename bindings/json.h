/* JSON <-> Lua conversion shared by luaprov.json, the cache binding and the engine (which passes
 * Kubernetes objects into scripts and reads their results back).
 *
 * Mapping: objects <-> tables with string keys; arrays <-> sequences, tagged on decode with the
 * metatable luaprov.json.array_mt so that an empty array encodes back as [] (an untagged empty
 * table encodes as {}); null <-> luaprov.json.null (a light userdata); integers stay integers,
 * other numbers are floats. Encoding refuses (with a message naming the path, e.g.
 * "spec.taints[2].key") sparse arrays, mixed key types, non-string keys, NaN/inf, functions,
 * userdata other than null, and nesting deeper than 128 (cycles). Decoding parses with jansson.
 *
 * Details scripts can rely on:
 * - Object keys are written sorted bytewise (Go's order), so equal tables encode to equal bytes.
 * - Paths in messages index as a script would: 1-based ([2]), odd keys quoted (labels["a/b"]).
 * - Integral floats are written without a fraction (4/2 -> 2): Go refuses 2.0 for an int field;
 *   -0.0 is written 0, as it compares equal to 0.
 *   Other floats use the shortest of 15..17 digits that reads back exactly.
 * - Strings are bytes; invalid UTF-8 is written as U+FFFD (base64 binary data first).
 * - array_mt is protected with itself as __metatable: getmetatable(arr) == array_mt holds, but
 *   setmetatable on a table already tagged raises. A table tagged by a script encodes as an
 *   array even when empty.
 * - Decoding refuses integers outside 64 bits (jansson's limit) and nesting deeper than 128. */
#ifndef LUAPROV_BINDINGS_JSON_H
#define LUAPROV_BINDINGS_JSON_H

#include <jansson.h>
#include <lua.h>
#include <stddef.h>

#include "core/buf.h"
#include "core/error.h"

/* Decodes text and pushes the value. Returns 0, or -1 with *err (code "InvalidJSON", message
 * with line and column) and nothing pushed.                                  [-0, +(0|1), m] */
int lp_json_push_text(lua_State *L, const char *text, size_t len, lp_error **err);

/* Pushes a jansson value. Raises when it nests deeper than 128 levels (jansson's own parser
 * allows 2048), so call it where a raise is handled, as for any allocation.    [-0, +1, v] */
void lp_json_push_value(lua_State *L, const json_t *value);

/* Appends the JSON encoding of the value at idx to out. Returns 0, or -1 with *err (code
 * "InvalidValue") and out possibly partially written.                        [-0, +0, m] */
int lp_json_encode(lua_State *L, int idx, lp_buf *out, lp_error **err);

/* Pushes luaprov.json.null / the array metatable (created once per state).   [-0, +1, m] */
void lp_json_push_null(lua_State *L);
void lp_json_push_array_mt(lua_State *L);
int lp_json_is_null(lua_State *L, int idx);

#endif
