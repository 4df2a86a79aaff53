/* The object cache of a generation: a Kubernetes object passed to a script call is converted once per
 * version and the same read-only view (bindings/json.h) handed to every call that passes that version
 * again, instead of a new Lua copy per call (docs/lua-api.md#kubernetes-objects-are-read-only).
 *
 * An object is a JSON object whose metadata has non-empty string uid and resourceVersion: the API
 * server gives every change a new resourceVersion, so the pair names one content. The engine may
 * still pass a copy it changed without a write (a status it has just computed), so a hit is served
 * only when the value is the one converted (the same jansson value, which callers never change once
 * passed, or an equal one); otherwise the entry is converted again. Anything else is converted afresh
 * on every call, as before.
 *
 * Bounded: at most max_entries objects and an estimate of max_bytes of views, the least recently
 * used going first. The views live in the generation's heap and count against its memory cap; the
 * cache also holds a reference to each converted jansson value (C memory, for the equality check).
 * Evicted views stay alive while a call still holds them. Loop thread only. */
#ifndef LUAPROV_SCRIPT_OBJECTS_H
#define LUAPROV_SCRIPT_OBJECTS_H

#include <jansson.h>
#include <lua.h>
#include <stddef.h>

typedef struct lp_object_cache lp_object_cache;

lp_object_cache *lp_object_cache_new(size_t max_entries, size_t max_bytes);
/* Frees the C side; call after lua_close of the state it served (views are not unreferenced). */
void lp_object_cache_free(lp_object_cache *c);

/* Pushes value for a script call on L: the cached view of an object, a new view (then cached) of
 * an object not seen at this version, or a fresh conversion (lp_json_push_value) of anything else.
 * Raises on memory and on nesting deeper than 128 levels.                      [-0, +1, v] */
void lp_object_cache_push(lp_object_cache *c, lua_State *L, const json_t *value);

/* Forgets every object (their views stay alive while calls hold them). Allocates nothing: for when
 * the state has run out of memory, so the views the cache kept never make a call fail. */
void lp_object_cache_clear(lp_object_cache *c, lua_State *L);

/* Objects held, and the estimated bytes of their views. */
size_t lp_object_cache_entries(const lp_object_cache *c);
size_t lp_object_cache_bytes(const lp_object_cache *c);

#endif
