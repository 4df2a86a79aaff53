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

/* Read-only views (the engine hands Kubernetes objects to scripts this way, docs/lua-api.md):
 * lp_json_push_view pushes a view of value, a table that reads like lp_json_push_value's (fields,
 * ipairs, #, pairs, getmetatable(arr) == array_mt, lp_json_encode gives the same bytes) and refuses
 * every write with "<file>:<line>: cannot set <path>: " LP_JSON_READ_ONLY, the path written as
 * lp_json_encode writes paths (metadata.labels.team, spec.taints[2]). A scalar is pushed as itself.
 * Returns an estimate of the bytes the view takes in the state's heap. Raises as
 * lp_json_push_value does.                                                    [-0, +1, v] */
#define LP_JSON_READ_ONLY "arguments that are Kubernetes objects are read-only (copy the table to change it)"
size_t lp_json_push_view(lua_State *L, const json_t *value);
/* A view is an empty table: raw access (lua_next, lua_rawget, lua_rawlen) sees nothing. When the
 * value at idx is a view, pushes the table of its contents and returns 1 (the contents are the
 * engine's: read them, never write them or hand them to a script); else pushes nothing, returns 0.
 * Nested tables in the contents are views.                                    [-0, +(0|1), -] */
int lp_json_push_view_contents(lua_State *L, int idx);
/* Raises the read-only error for a write of the key at index key into the view at index view. */
int lp_json_view_refuse(lua_State *L, int view, int key);

/* Pushes luaprov.json.null / the array metatable (created once per state).   [-0, +1, m] */
void lp_json_push_null(lua_State *L);
void lp_json_push_array_mt(lua_State *L);
int lp_json_is_null(lua_State *L, int idx);

#endif
