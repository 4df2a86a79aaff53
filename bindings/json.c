/* luaprov.json and the JSON <-> Lua C API (mapping in json.h).
 *
 * Decoding parses with jansson, then converts the tree. Encoding walks the Lua value and writes into
 * an lp_buf directly: no intermediate jansson tree, and object keys come out sorted bytewise (the
 * order Go's encoding/json uses), so equal tables always give equal bytes — request signatures,
 * cache keys and golden files depend on that.
 *
 * C memory (the jansson document, the output buffer, an lp_error) is parked in a "scratch" userdata
 * with a __gc while Lua may raise: under a generation's memory cap any push can fail, and a
 * longjmp must not leak a megabyte document. The encoder itself never raises: it calls only
 * lua_checkstack (which reports instead of raising), raw accessors and lua_next. */
#include "json.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "luaprov.h"

#define JSON_MAX_DEPTH 128
#define ARRAY_MT_NAME  "luaprov.json.array"
#define SCRATCH_NAME   "luaprov.json.scratch"

/* {============================================================ scratch */

typedef struct scratch {
  json_t *doc;
  lp_buf buf;
  lp_error *err;
} scratch;

static void scratch_release(scratch *s) {
  json_decref(s->doc);
  s->doc = NULL;
  lp_buf_free(&s->buf);
  lp_error_free(s->err);
  s->err = NULL;
}

static int scratch_gc(lua_State *L) {
  scratch_release(luaL_checkudata(L, 1, SCRATCH_NAME));
  return 0;
}

/* Pushes an empty scratch box.                                               [-0, +1, m] */
static scratch *push_scratch(lua_State *L) {
  scratch *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->doc = NULL;
  s->buf = (lp_buf)LP_BUF_INIT;
  s->err = NULL;
  if (luaL_newmetatable(L, SCRATCH_NAME)) {
    lua_pushcfunction(L, scratch_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushboolean(L, 0); /* scripts never see a box, but keep it opaque anyway */
    lua_setfield(L, -2, "__metatable");
  }
  lua_setmetatable(L, -2);
  return s;
}

/* }============================================================ */

void lp_json_push_null(lua_State *L) {
  lua_pushlightuserdata(L, NULL);
}

int lp_json_is_null(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TLIGHTUSERDATA && lua_touserdata(L, idx) == NULL;
}

void lp_json_push_array_mt(lua_State *L) {
  if (luaL_newmetatable(L, ARRAY_MT_NAME)) { /* also sets __name */
    /* Protected, yet getmetatable(arr) == luaprov.json.array_mt still holds: scripts test for
     * arrays that way. The price: setmetatable on an already tagged table raises. */
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__metatable");
  }
}

/* {============================================================ decoding */

/* Pushes v; mt is the absolute index of the array metatable. Returns -1 (with the partial value
 * left on the stack for the caller to drop) when v nests deeper than JSON_MAX_DEPTH. */
static int push_json(lua_State *L, json_t *v, int depth, int mt) {
  if (depth > JSON_MAX_DEPTH || !lua_checkstack(L, 3)) return -1;
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    const char *key;
    size_t klen;
    json_t *item;
    size_t n = json_object_size(v);
    lua_createtable(L, 0, n > INT_MAX ? 0 : (int)n);
    json_object_keylen_foreach(v, key, klen, item) {
      lua_pushlstring(L, key, klen);
      if (push_json(L, item, depth + 1, mt)) return -1;
      lua_rawset(L, -3);
    }
    break;
  }
  case JSON_ARRAY: {
    size_t n = json_array_size(v);
    lua_createtable(L, n > INT_MAX ? 0 : (int)n, 0);
    for (size_t i = 0; i < n; i++) {
      if (push_json(L, json_array_get(v, i), depth + 1, mt)) return -1;
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_pushvalue(L, mt);
    lua_setmetatable(L, -2);
    break;
  }
  case JSON_STRING:
    lua_pushlstring(L, json_string_value(v), json_string_length(v));
    break;
  case JSON_INTEGER:
    lua_pushinteger(L, (lua_Integer)json_integer_value(v));
    break;
  case JSON_REAL:
    lua_pushnumber(L, (lua_Number)json_real_value(v));
    break;
  case JSON_TRUE:
    lua_pushboolean(L, 1);
    break;
  case JSON_FALSE:
    lua_pushboolean(L, 0);
    break;
  case JSON_NULL:
    lp_json_push_null(L);
    break;
  }
  return 0;
}

/* Converts value into a Lua value left at the top. Returns -1 (stack back at its old top) when
 * it nests too deep. */
static int push_tree(lua_State *L, const json_t *value) {
  int top = lua_gettop(L);
  lp_json_push_array_mt(L);
  /* jansson's iteration API is not const-correct; nothing here modifies the tree */
  if (push_json(L, (json_t *)value, 1, top + 1)) {
    lua_settop(L, top);
    return -1;
  }
  lua_remove(L, top + 1);
  return 0;
}

/* Raises (not only on memory) when value nests deeper than 128: [-0, +1, v] rather than the
 * header's m. Values the engine parsed itself go through lp_json_push_text, which reports it. */
void lp_json_push_value(lua_State *L, const json_t *value) {
  if (push_tree(L, value)) luaL_error(L, "JSON value nested deeper than %d levels", JSON_MAX_DEPTH);
}

int lp_json_push_text(lua_State *L, const char *text, size_t len, lp_error **err) {
  scratch *s = push_scratch(L);
  json_error_t jerr;
  s->doc = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
  if (!s->doc) {
    lua_pop(L, 1); /* the box, empty */
    lp_error_set(err, "InvalidJSON", "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
                 jerr.text);
    return -1;
  }
  int rc = push_tree(L, s->doc);
  scratch_release(s);
  if (rc) {
    lua_pop(L, 1);
    lp_error_set(err, "InvalidJSON", "invalid JSON: nested deeper than %d levels", JSON_MAX_DEPTH);
    return -1;
  }
  lua_remove(L, -2); /* the box */
  return 0;
}

/* }============================================================ */

/* {============================================================ encoding */

/* One step from a container to a child: a key (pointing into a Lua string kept alive on the
 * stack) or a 1-based array index. */
typedef struct path_step {
  const char *key;
  size_t klen;
  lua_Integer index;
} path_step;

/* An object member waiting to be written: its key, and the stack slot holding key then value. */
typedef struct member {
  const char *key;
  size_t klen;
  int slot;
} member;

typedef struct encoder {
  lua_State *L;
  lp_buf *out;
  lp_error **err;
  int array_mt;    /* absolute stack index */
  member *members; /* shared by all levels, each using the segment past its parent's */
  size_t nmembers, cap;
  const void *tables[JSON_MAX_DEPTH]; /* the containers on the current path: cycle detection */
  path_step path[JSON_MAX_DEPTH];
} encoder;

static int is_identifier(const char *s, size_t n) {
  if (n == 0 || !(s[0] == '_' || ((s[0] | 32) >= 'a' && (s[0] | 32) <= 'z'))) return 0;
  for (size_t i = 1; i < n; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'))) return 0;
  }
  return 1;
}

/* Appends one step of a path the way a script would index it: .name (name at the start), ["a/b"],
 * [2] (key NULL). */
static void put_step(lp_buf *path, const char *key, size_t klen, lua_Integer index) {
  if (!key) {
    lp_buf_printf(path, "[%lld]", (long long)index);
  } else if (is_identifier(key, klen)) {
    if (path->len > 0) lp_buf_putc(path, '.');
    lp_buf_append(path, key, klen);
  } else {
    lp_buf_putc(path, '[');
    lp_buf_json_string(path, key, klen);
    lp_buf_putc(path, ']');
  }
}

/* Fails the encoding with "cannot encode <what> at <path>", the path written the way a script
 * would index the value: metadata.labels["kubernetes.io/hostname"], spec.taints[2].key. */
static int encode_fail(encoder *e, int depth, const char *what) {
  lp_buf path = LP_BUF_INIT;
  for (int i = 0; i < depth; i++) put_step(&path, e->path[i].key, e->path[i].klen, e->path[i].index);
  if (depth > 0)
    lp_error_set(e->err, "InvalidValue", "cannot encode %s at %s", what, lp_buf_cstr(&path));
  else
    lp_error_set(e->err, "InvalidValue", "cannot encode %s", what);
  lp_buf_free(&path);
  return -1;
}

static void put_integer(lp_buf *b, lua_Integer v) {
  char tmp[24];
  char *p = tmp + sizeof tmp;
  lua_Unsigned u = v < 0 ? 0u - (lua_Unsigned)v : (lua_Unsigned)v;
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) *--p = '-';
  lp_buf_append(b, p, (size_t)(tmp + sizeof tmp - p));
}

static int member_cmp(const void *a, const void *b) {
  const member *x = a, *y = b;
  int c = memcmp(x->key, y->key, x->klen < y->klen ? x->klen : y->klen);
  if (c) return c;
  return (x->klen > y->klen) - (x->klen < y->klen);
}

static int encode_value(encoder *e, int idx, int depth);

static int encode_array(encoder *e, int t, lua_Integer n, int depth) {
  lp_buf_putc(e->out, '[');
  for (lua_Integer i = 1; i <= n; i++) {
    if (i > 1) lp_buf_putc(e->out, ',');
    lua_rawgeti(e->L, t, i);
    e->path[depth] = (path_step){NULL, 0, i};
    if (encode_value(e, lua_gettop(e->L), depth + 1)) return -1;
    lua_pop(e->L, 1);
  }
  lp_buf_putc(e->out, ']');
  return 0;
}

/* Writes the members whose key/value pairs sit on the stack from slot first on, n of them. */
static int encode_object(encoder *e, int first, size_t n, int depth) {
  lua_State *L = e->L;
  size_t base = e->nmembers;
  if (e->cap - base < n) {
    while (e->cap - base < n) e->cap = e->cap ? e->cap * 2 : 64;
    e->members = lp_xrealloc(e->members, e->cap * sizeof *e->members);
  }
  for (size_t i = 0; i < n; i++) {
    member *m = &e->members[base + i];
    m->slot = first + 2 * (int)i;
    m->key = lua_tolstring(L, m->slot, &m->klen); /* a string already: no conversion */
  }
  e->nmembers = base + n;
  qsort(e->members + base, n, sizeof *e->members, member_cmp);
  lp_buf_putc(e->out, '{');
  for (size_t i = 0; i < n; i++) {
    const member *m = &e->members[base + i]; /* re-read: a child may have grown the array */
    if (i > 0) lp_buf_putc(e->out, ',');
    lp_buf_json_string(e->out, m->key, m->klen);
    lp_buf_putc(e->out, ':');
    e->path[depth] = (path_step){m->key, m->klen, 0};
    if (encode_value(e, m->slot + 1, depth + 1)) return -1;
  }
  lp_buf_putc(e->out, '}');
  e->nmembers = base;
  return 0;
}

/* A table is an array when tagged with array_mt or when its keys are exactly 1..n; an object when
 * every key is a string; an untagged empty table is an object. Anything else is refused. */
static int encode_table(encoder *e, int t, int depth) {
  lua_State *L = e->L;
  if (depth >= JSON_MAX_DEPTH) return encode_fail(e, depth, "a table nested deeper than 128 levels");
  if (!lua_checkstack(L, 4)) return encode_fail(e, depth, "a value nested too deep for the Lua stack");
  const void *self = lua_topointer(L, t);
  for (int i = 0; i < depth; i++)
    if (e->tables[i] == self) return encode_fail(e, depth, "a cycle (a table that contains itself)");
  e->tables[depth] = self;

  int tagged = 0;
  if (lua_getmetatable(L, t)) {
    tagged = lua_rawequal(L, -1, e->array_mt);
    lua_pop(L, 1);
  }
  int top = lua_gettop(L);
  size_t nstrings = 0;
  lua_Integer nints = 0, maxint = 0;
  /* Keep string keys and their values on the stack, each pair below the iteration key, so
   * they can be sorted without a lookup that might allocate. */
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      if (!lua_checkstack(L, 3)) {
        lua_settop(L, top);
        return encode_fail(e, depth, "an object with too many keys");
      }
      lua_pushvalue(L, -2);
      lua_rotate(L, -3, 1); /* key', key, value */
      lua_rotate(L, -2, 1); /* key', value, key */
      nstrings++;
    } else if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1) {
      lua_Integer k = lua_tointeger(L, -2);
      nints++;
      if (k > maxint) maxint = k;
      lua_pop(L, 1);
    } else {
      char what[64]; /* not lua_pushfstring: the encoder must not allocate from Lua */
      if (lua_type(L, -2) == LUA_TNUMBER)
        snprintf(what, sizeof what, "a table with a non-positive or fractional number key");
      else
        snprintf(what, sizeof what, "a table with a %s key", luaL_typename(L, -2));
      lua_settop(L, top);
      return encode_fail(e, depth, what);
    }
  }
  int rc;
  if (nstrings && (nints || tagged)) {
    rc = encode_fail(e, depth,
                     tagged ? "an array with string keys" : "a table with mixed string and number keys");
  } else if (nstrings) {
    rc = encode_object(e, top + 1, nstrings, depth);
  } else if (nints != maxint) {
    rc = encode_fail(e, depth, "a sparse array (integer keys with holes)");
  } else if (nints == 0 && !tagged) {
    lp_buf_puts(e->out, "{}");
    rc = 0;
  } else {
    rc = encode_array(e, t, nints, depth);
  }
  lua_settop(L, top);
  return rc;
}

static int encode_value(encoder *e, int idx, int depth) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    lp_buf_puts(e->out, "null");
    return 0;
  case LUA_TBOOLEAN:
    lp_buf_puts(e->out, lua_toboolean(L, idx) ? "true" : "false");
    return 0;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      put_integer(e->out, lua_tointeger(L, idx));
    } else {
      lua_Number v = lua_tonumber(L, idx);
      if (isnan(v)) return encode_fail(e, depth, "NaN");
      if (isinf(v)) return encode_fail(e, depth, v > 0 ? "inf" : "-inf");
      /* integral floats come out without a fraction: Go decodes 2.0 into an int field only
       * when it is written "2" */
      lp_buf_number(e->out, v, "null", "null", "null");
    }
    return 0;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    lp_buf_json_string(e->out, s, n);
    return 0;
  }
  case LUA_TTABLE: {
    if (!lua_checkstack(L, 3)) return encode_fail(e, depth, "a value nested too deep for the Lua stack");
    if (!lp_json_push_view_contents(L, idx)) return encode_table(e, idx, depth);
    int rc = encode_table(e, lua_gettop(L), depth); /* a view encodes as what it shows */
    lua_pop(L, 1);
    return rc;
  }
  case LUA_TLIGHTUSERDATA:
    if (lp_json_is_null(L, idx)) {
      lp_buf_puts(e->out, "null");
      return 0;
    }
    return encode_fail(e, depth, "userdata");
  default:
    return encode_fail(e, depth, lua_typename(L, lua_type(L, idx)));
  }
}

int lp_json_encode(lua_State *L, int idx, lp_buf *out, lp_error **err) {
  idx = lua_absindex(L, idx);
  int top = lua_gettop(L);
  lp_json_push_array_mt(L);
  encoder e = {.L = L, .out = out, .err = err, .array_mt = lua_gettop(L)};
  int rc = encode_value(&e, idx, 0);
  free(e.members);
  lua_settop(L, top);
  return rc;
}

/* }============================================================ */

/* {============================================================ read-only views */

/* A view of a JSON container is three tables: the empty table scripts hold, its own metatable and the
 * contents, reached only through that metatable's __index (so reads cost a table lookup, not a call).
 * Every write lands on the empty table and so in __newindex, which refuses it; the metatable is
 * protected, so a script cannot reach the contents to change them. Child containers in the contents
 * are views themselves. The metatable keeps the view's path for the error message. */
#define VIEW_PATH_KEY "path"

static int view_newindex(lua_State *L);

/* The contents of the view at idx pushed, or 0 with nothing pushed when idx is not a view. */
int lp_json_push_view_contents(lua_State *L, int idx) {
  if (!lua_checkstack(L, 2) || !lua_getmetatable(L, idx)) return 0;
  lua_pushliteral(L, "__newindex"); /* raw: a script's metatable may have a metatable of its own */
  if (lua_rawget(L, -2) != LUA_TFUNCTION || lua_tocfunction(L, -1) != view_newindex) {
    lua_pop(L, 2);
    return 0;
  }
  lua_pop(L, 1);
  lua_pushliteral(L, "__index");
  lua_rawget(L, -2);
  lua_remove(L, -2);
  return 1;
}

/* The innermost frame with a line: a write through table.insert is placed at the script's call. */
static void push_where(lua_State *L) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
      lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
      return;
    }
  }
  lua_pushliteral(L, "");
}

int lp_json_view_refuse(lua_State *L, int view, int key) {
  view = lua_absindex(L, view);
  key = lua_absindex(L, key);
  scratch *s = push_scratch(L); /* holds the path while Lua allocates */
  lua_getmetatable(L, view);
  lua_getfield(L, -1, VIEW_PATH_KEY);
  size_t n;
  const char *path = lua_tolstring(L, -1, &n);
  lp_buf_append(&s->buf, path ? path : "", path ? n : 0);
  lua_pop(L, 2);
  if (lua_type(L, key) == LUA_TSTRING) {
    const char *k = lua_tolstring(L, key, &n);
    put_step(&s->buf, k, n, 0);
  } else if (lua_isinteger(L, key)) {
    put_step(&s->buf, NULL, 0, lua_tointeger(L, key));
  } else {
    lp_buf_printf(&s->buf, "[%s]", luaL_typename(L, key));
  }
  push_where(L);
  lua_pushfstring(L, "cannot set %s: " LP_JSON_READ_ONLY, lp_buf_cstr(&s->buf));
  lua_concat(L, 2);
  scratch_release(s);
  return lua_error(L);
}

static int view_newindex(lua_State *L) {
  return lp_json_view_refuse(L, 1, 2);
}

/* next over the view's contents: the iterator state is the view, never the contents. pairs hands
 * this function to scripts, so it checks what it is given. */
static int view_next(lua_State *L) {
  lua_settop(L, 2);
  if (!lua_istable(L, 1) || !lp_json_push_view_contents(L, 1))
    return luaL_argerror(L, 1, "a read-only view expected");
  lua_insert(L, 2);
  return lua_next(L, 2) ? 2 : (lua_pushnil(L), 1);
}

static int view_pairs(lua_State *L) {
  lua_pushcfunction(L, view_next);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* Only ever called as a view's own __len (its metatable is protected): no check. */
static int view_len(lua_State *L) {
  lua_getmetatable(L, 1);
  lua_getfield(L, -1, "__index");
  lua_pushinteger(L, (lua_Integer)lua_rawlen(L, -1));
  return 1;
}

/* What a view costs in the state's heap, roughly: three tables with their parts per container, a
 * slot per member, the strings. The object cache bounds its total with it. */
#define VIEW_CONTAINER_BYTES 420
#define VIEW_MEMBER_BYTES    40

typedef struct view_builder {
  lua_State *L;
  int array_mt; /* absolute stack index */
  lp_buf *path; /* of the container being built; parked in a scratch box */
  size_t bytes;
} view_builder;

static void set_method(lua_State *L, const char *name, lua_CFunction fn) {
  lua_pushcfunction(L, fn);
  lua_setfield(L, -2, name);
}

/* Pushes the view of v (a scalar as itself). Returns -1 (partial values left for the caller to drop)
 * when v nests deeper than JSON_MAX_DEPTH. */
static int push_view(view_builder *b, json_t *v, int depth) {
  lua_State *L = b->L;
  if (depth > JSON_MAX_DEPTH || !lua_checkstack(L, 6)) return -1;
  int is_object = json_is_object(v);
  if (!is_object && !json_is_array(v)) {
    if (json_is_string(v)) b->bytes += json_string_length(v) + VIEW_MEMBER_BYTES;
    return push_json(L, v, depth, b->array_mt);
  }
  size_t n = is_object ? json_object_size(v) : json_array_size(v);
  int size = n > INT_MAX ? 0 : (int)n;
  size_t mark = b->path->len;
  lua_createtable(L, is_object ? 0 : size, is_object ? size : 0);
  int contents = lua_gettop(L);
  if (is_object) {
    const char *key;
    size_t klen;
    json_t *item;
    json_object_keylen_foreach(v, key, klen, item) {
      put_step(b->path, key, klen, 0);
      lua_pushlstring(L, key, klen);
      if (push_view(b, item, depth + 1)) return -1;
      lua_rawset(L, contents);
      b->path->len = mark;
      b->bytes += klen + VIEW_MEMBER_BYTES;
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      put_step(b->path, NULL, 0, (lua_Integer)i + 1);
      if (push_view(b, json_array_get(v, i), depth + 1)) return -1;
      lua_rawseti(L, contents, (lua_Integer)i + 1);
      b->path->len = mark;
      b->bytes += VIEW_MEMBER_BYTES;
    }
    lua_pushvalue(L, b->array_mt); /* the encoder reads the contents: tagged, an empty one stays [] */
    lua_setmetatable(L, contents);
  }
  lua_createtable(L, 0, 0); /* the view */
  lua_createtable(L, 0, 6); /* its metatable */
  lua_pushvalue(L, contents);
  lua_setfield(L, -2, "__index");
  set_method(L, "__newindex", view_newindex);
  set_method(L, "__pairs", view_pairs);
  if (is_object) {
    lua_pushboolean(L, 0);
  } else {
    set_method(L, "__len", view_len);
    lua_pushvalue(L, b->array_mt); /* getmetatable(arr) == json.array_mt holds for views too */
  }
  lua_setfield(L, -2, "__metatable");
  lua_pushlstring(L, b->path->data ? b->path->data : "", mark);
  lua_setfield(L, -2, VIEW_PATH_KEY);
  lua_setmetatable(L, -2);
  lua_remove(L, contents);
  b->bytes += VIEW_CONTAINER_BYTES + mark;
  return 0;
}

size_t lp_json_push_view(lua_State *L, const json_t *value) {
  int top = lua_gettop(L);
  scratch *s = push_scratch(L);
  lp_json_push_array_mt(L);
  view_builder b = {L, top + 2, &s->buf, 0};
  /* jansson's iteration API is not const-correct; nothing here modifies the tree */
  if (push_view(&b, (json_t *)value, 1)) {
    lua_settop(L, top + 1);
    scratch_release(s);
    lua_pop(L, 1);
    luaL_error(L, "JSON value nested deeper than %d levels", JSON_MAX_DEPTH);
  }
  scratch_release(s);
  lua_replace(L, top + 1); /* the view where the box was */
  lua_settop(L, top + 1);
  return b.bytes;
}

/* }============================================================ */

/* {============================================================ bindings */

/* luaprov.json.encode(value) -> string | nil, message, "InvalidValue"      [-1, +(1|3), m] */
static int json_encode(lua_State *L) {
  luaL_checkany(L, 1);
  scratch *s = push_scratch(L);
  if (lp_json_encode(L, 1, &s->buf, &s->err)) {
    lp_push_fail(L, s->err->message, s->err->code);
    scratch_release(s);
    return 3;
  }
  lua_pushlstring(L, s->buf.data ? s->buf.data : "", s->buf.len);
  scratch_release(s);
  return 1;
}

/* luaprov.json.decode(text) -> value | nil, message, "InvalidJSON"          [-1, +(1|3), m]
 * Arrays come back tagged with array_mt, null as luaprov.json.null; integers beyond 64 bits and
 * nesting deeper than 128 are InvalidJSON. */
static int json_decode(lua_State *L) {
  size_t n;
  const char *text = luaL_checklstring(L, 1, &n);
  scratch *s = push_scratch(L); /* holds the error while lp_push_fail allocates */
  if (lp_json_push_text(L, text, n, &s->err)) {
    lp_push_fail(L, s->err->message, s->err->code);
    scratch_release(s);
    return 3;
  }
  return 1;
}

static const luaL_Reg json_funcs[] = {
    {"encode", json_encode}, {"decode", json_decode}, {"null", NULL}, {"array_mt", NULL}, {NULL, NULL},
};

int lp_open_json(lua_State *L) {
  luaL_newlib(L, json_funcs);
  lp_json_push_null(L);
  lua_setfield(L, -2, "null");
  lp_json_push_array_mt(L);
  lua_setfield(L, -2, "array_mt");
  return 1;
}

/* }============================================================ */
