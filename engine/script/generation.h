/* A generation: one lua_State holding one consistent version of every script (docs/hot-reload.md).
 *
 * Loading reads the entry modules named by the caller from a list of layers (an operator's tree
 * first, the defaults after it: a file missing from the operator's tree falls back to the default),
 * runs their top-level code in the sandbox under the load budget, and validates each against its
 * contract. A generation that fails any step is never used; lp_generation_load returns NULL and the
 * problems, each with file:line.
 *
 * Generations are reference counted: the script host holds one reference on the generation in
 * service, every running task one on the generation it started on, so calls in flight finish on
 * their own generation after a reload and the old lua_State closes when the last of them ends.
 * Loop thread only. */
#ifndef LUAPROV_SCRIPT_GENERATION_H
#define LUAPROV_SCRIPT_GENERATION_H

#include <jansson.h>
#include <lua.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct lp_generation lp_generation;
typedef struct lp_lua_host lp_lua_host;
typedef struct lp_object_cache lp_object_cache;

typedef struct lp_script_limits {
  size_t memory_bytes;      /* cap on the generation's Lua heap; 0 = 64 MiB */
  long call_instructions;   /* VM instructions per call (all resumes of a task); 0 = 20 million */
  long load_instructions;   /* top-level code of one module; 0 = 50 million */
  unsigned call_timeout_ms; /* wall time of a task, awaits included; 0 = 60 s */
} lp_script_limits;

/* Fills zero fields with the defaults above. */
void lp_script_limits_resolve(lp_script_limits *limits);

/* One problem found while loading or validating: file may be NULL for problems not tied to a file;
 * line is 0 when unknown. */
typedef struct lp_problem {
  char *file;
  int line;
  char *message;
} lp_problem;

typedef struct lp_problems {
  lp_problem *items;
  size_t count;
} lp_problems;

void lp_problems_add(lp_problems *p, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Adds a problem from a Lua error message "file:line: text" (as luaL_error and the compiler write
 * them), splitting the location out when it is there. */
void lp_problems_add_lua_message(lp_problems *p, const char *fallback_file, const char *message);
/* Renders "file:line: message" lines, one per problem. Caller frees. */
char *lp_problems_render(const lp_problems *p);
void lp_problems_free(lp_problems *p);

/* Validates the module value at stack index idx (a module's return value). Runs inside a protected
 * call on the generation's state: it may raise, and may call functions of the module (under the
 * call budget) to check their results. Reports through lp_problems_add with the script's file. */
typedef void (*lp_module_validate_fn)(lua_State *L, int idx, const char *file, lp_problems *problems);

typedef struct lp_module_spec {
  const char *module;             /* "policies.drift" -> policies/drift.lua or policies/drift/init.lua */
  const char *contract;           /* for messages: "drift policy" */
  int required;                   /* a missing file is a problem (otherwise the module is simply absent) */
  lp_module_validate_fn validate; /* may be NULL */
} lp_module_spec;

/* Registry field holding the test kit's builders while the entry modules are validated: validators
 * call each policy once on the kit's default objects (docs/hot-reload.md). */
#define LP_GENERATION_KIT_KEY "luaprov.kit"
/* Registry table: module name -> the value it returned (entry modules load in lp_contract_modules order). */
#define LP_GENERATION_LOADED_KEY "luaprov.loaded"

typedef struct lp_generation_config {
  const char *const *layers;     /* NULL-terminated directories, searched in order */
  const lp_module_spec *modules; /* entry modules, terminated by {NULL} */
  const lp_script_limits *limits;
  const lp_lua_host *host; /* registered for the bindings; may be NULL (synchronous bindings) */
  uint64_t id;             /* generation number shown in logs and metrics */
  int load_all;            /* also load every other *.lua under policies/ and providers/ (check) */
  int no_policy_calls;     /* do not load the test kit, so validators check shapes only */
} lp_generation_config;

/* Loads and validates a generation. Returns it with one reference held by the caller, or NULL with
 * the problems in *problems (which the caller frees with lp_problems_free either way). */
lp_generation *lp_generation_load(const lp_generation_config *cfg, lp_problems *problems);

lp_generation *lp_generation_ref(lp_generation *g);
/* Drops a reference; the last one closes the lua_State and frees the generation. */
void lp_generation_unref(lp_generation *g);

uint64_t lp_generation_id(const lp_generation *g);
lua_State *lp_generation_state(lp_generation *g);
const lp_script_limits *lp_generation_limits(const lp_generation *g);
/* Bytes currently allocated by the generation's Lua heap, and the cap. */
size_t lp_generation_memory(const lp_generation *g);

/* Pushes the value an entry module returned, or nil when the module is absent. [-0, +1, -] */
int lp_generation_push_module(lp_generation *g, const char *module);
/* Pushes an argument of a script call on g's state: a Kubernetes object as the read-only view g
 * keeps of that version (made now when it has none; script/objects.h), anything else converted
 * afresh. Raises on memory, like any push.                                      [-0, +1, v] */
void lp_generation_push_argument(lp_generation *g, const json_t *value);
/* Forgets the views of the object cache, so that they never make a call fail: after the heap hit its
 * cap (the one door into Lua, call.h, calls it then). Allocates nothing. */
void lp_generation_drop_objects(lp_generation *g);
/* Finished task coroutines kept for the next tasks: a coroutine that returned normally has an empty
 * stack and can run another function, and reusing it saves creating a thread and growing its stack
 * on every call. take returns one (and its registry reference) or NULL; give keeps co (its stack
 * emptied by the caller) and returns 1, or returns 0 when the pool is full (the caller lets it go). */
lua_State *lp_generation_take_thread(lp_generation *g, int *ref);
int lp_generation_give_thread(lp_generation *g, lua_State *co, int ref);
/* g's object cache (entries and bytes, for tests and metrics). */
const lp_object_cache *lp_generation_objects(const lp_generation *g);

/* The file an entry module was loaded from, NULL when absent. */
const char *lp_generation_module_file(const lp_generation *g, const char *module);
/* Content hash of every file the generation read (to skip no-op reloads). */
uint64_t lp_generation_digest(const lp_generation *g);

/* The generation owning L (any thread of its state). */
lp_generation *lp_generation_of(lua_State *L);

/* The thread of g's state that runs script code from now on (the one door into Lua, call.c, sets it
 * around every call and resume); returns the one before, which the caller restores with another
 * call when its call returns. Clears the record lp_generation_refused_at reads. Loop thread only. */
lua_State *lp_generation_enter(lp_generation *g, lua_State *running);

/* Where the last allocation the memory cap refused since lp_generation_enter was asked for: returns
 * the line of the innermost Lua function running then and sets *file to its short source
 * ("policies/drift.lua", as in the budget error; borrowed from g, valid until the next call), or
 * returns 0 when no Lua function was running (a host-side conversion). */
int lp_generation_refused_at(const lp_generation *g, const char **file);

/* Computes the same digest as a loaded generation would have over the files of the given layers,
 * without loading them: the host uses it to skip reloads when nothing changed. */
uint64_t lp_layers_digest(const char *const *layers);

#endif
