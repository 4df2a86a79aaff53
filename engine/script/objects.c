#include "script/objects.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "json.h"

/* The registry key (its address) of the table identity -> light userdata (its entry): a light
 * userdata key, so that clearing after a memory error needs no string. */
static const char objects_key;

typedef struct entry {
  char key[256]; /* "uid\0resourceVersion" */
  size_t klen;
  json_t *value; /* the value the view was made from */
  int ref;       /* registry reference of the view; LUA_NOREF until it is stored */
  size_t bytes;
  struct entry *prev, *next; /* most recently used first */
} entry;

struct lp_object_cache {
  entry *head, *tail;
  size_t entries, bytes;
  size_t max_entries, max_bytes;
};

lp_object_cache *lp_object_cache_new(size_t max_entries, size_t max_bytes) {
  lp_object_cache *c = lp_xcalloc(1, sizeof *c);
  c->max_entries = max_entries;
  c->max_bytes = max_bytes;
  return c;
}

static void unlink_entry(lp_object_cache *c, entry *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    c->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    c->tail = e->prev;
  e->prev = e->next = NULL;
}

static void link_first(lp_object_cache *c, entry *e) {
  e->next = c->head;
  if (c->head) c->head->prev = e;
  c->head = e;
  if (!c->tail) c->tail = e;
}

void lp_object_cache_free(lp_object_cache *c) {
  if (!c) return;
  for (entry *e = c->head, *next; e; e = next) {
    next = e->next;
    json_decref(e->value);
    free(e);
  }
  free(c);
}

/* The identity of an object version, "uid\0resourceVersion"; 0 when value is no such object (or its
 * identity is too long to be one an API server gives). */
static int identity_of(const json_t *value, char *key, size_t *klen) {
  const json_t *metadata = json_object_get(value, "metadata");
  const json_t *uid = json_object_get(metadata, "uid"),
               *version = json_object_get(metadata, "resourceVersion");
  if (!json_is_string(uid) || !json_is_string(version)) return 0;
  size_t ulen = json_string_length(uid), vlen = json_string_length(version);
  if (ulen == 0 || vlen == 0 || ulen + 1 + vlen > 255) return 0;
  memcpy(key, json_string_value(uid), ulen);
  key[ulen] = '\0';
  memcpy(key + ulen + 1, json_string_value(version), vlen);
  *klen = ulen + 1 + vlen;
  return 1;
}

/* Forgets e: its registry slot, its name in the objects table at index objects (when the name is
 * still its own) and the entry. Neither allocates: both slots exist. */
static void drop(lp_object_cache *c, lua_State *L, int objects, entry *e) {
  lua_pushlstring(L, e->key, e->klen);
  if (lua_rawget(L, objects) == LUA_TLIGHTUSERDATA && lua_touserdata(L, -1) == e) {
    lua_pushlstring(L, e->key, e->klen);
    lua_pushnil(L);
    lua_rawset(L, objects);
  }
  lua_pop(L, 1);
  luaL_unref(L, LUA_REGISTRYINDEX, e->ref);
  unlink_entry(c, e);
  c->entries--;
  c->bytes -= e->bytes;
  json_decref(e->value);
  free(e);
}

void lp_object_cache_push(lp_object_cache *c, lua_State *L, const json_t *value) {
  char key[256];
  size_t klen;
  if (!identity_of(value, key, &klen)) {
    lp_json_push_value(L, value);
    return;
  }
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &objects_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &objects_key);
  }
  int objects = lua_gettop(L);
  lua_pushlstring(L, key, klen);
  entry *e = lua_rawget(L, objects) == LUA_TLIGHTUSERDATA ? lua_touserdata(L, -1) : NULL;
  lua_pop(L, 1);
  if (e && e->ref != LUA_NOREF && (e->value == value || json_equal(e->value, value))) {
    if (e->value != value) { /* keep the caller's latest copy: its next call is a pointer comparison */
      json_decref(e->value);
      e->value = json_incref((json_t *)value);
    }
    unlink_entry(c, e);
    link_first(c, e);
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->ref);
    lua_remove(L, objects);
    return;
  }
  if (e) drop(c, L, objects, e); /* the engine changed this version's content: convert it again */
  size_t bytes = lp_json_push_view(L, value); /* may raise: nothing is held on the C side yet */
  e = lp_xcalloc(1, sizeof *e);
  memcpy(e->key, key, klen);
  e->klen = klen;
  e->value = json_incref((json_t *)value);
  e->ref = LUA_NOREF;
  e->bytes = bytes;
  link_first(c, e); /* owned by the cache from here, even when storing it below raises */
  c->entries++;
  c->bytes += bytes;
  lua_pushvalue(L, -1);
  e->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushlstring(L, key, klen);
  lua_pushlightuserdata(L, e);
  lua_rawset(L, objects);
  while ((c->entries > c->max_entries || c->bytes > c->max_bytes) && c->tail != e)
    drop(c, L, objects, c->tail);
  lua_remove(L, objects);
}

void lp_object_cache_clear(lp_object_cache *c, lua_State *L) {
  if (!c->head) return; /* nothing to forget (and maybe no table: nothing below may allocate) */
  lua_pushnil(L);       /* the objects table goes with its names: a new one is made on the next miss */
  lua_rawsetp(L, LUA_REGISTRYINDEX, &objects_key);
  for (entry *e = c->head, *next; e; e = next) {
    next = e->next;
    luaL_unref(L, LUA_REGISTRYINDEX, e->ref);
    json_decref(e->value);
    free(e);
  }
  c->head = c->tail = NULL;
  c->entries = c->bytes = 0;
}

size_t lp_object_cache_entries(const lp_object_cache *c) {
  return c->entries;
}

size_t lp_object_cache_bytes(const lp_object_cache *c) {
  return c->bytes;
}
