#include "script/generation.h"

#include <dirent.h>
#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/log.h"
#include "luaprov.h"
#include "script/call.h"
#include "script/endpoints.h"
#include "script/lua_message.h"
#include "script/module_name.h"
#include "script/objects.h"
#include "script/roles.h"
#include "script/sandbox.h"
#include "script/tree.h"

#define LOADED_KEY   LP_GENERATION_LOADED_KEY /* module name -> value (or LOADING sentinel) */
#define FILES_KEY    "luaprov.files"          /* module name -> file it came from */
#define BINDINGS_KEY "luaprov.module"         /* the luaprov table */

typedef struct entry_module {
  char *name;
  char *file; /* NULL when absent */
  int ref;    /* registry ref of the module value, LUA_NOREF when absent */
} entry_module;

/* Task coroutines kept for reuse: about the calls a busy loop has in flight at once. */
#define THREAD_POOL 32

/* The object cache's bounds: the views of a few thousand objects, at most a quarter of the heap cap. */
#define OBJECT_CACHE_ENTRIES 8192
#define OBJECT_CACHE_SHARE   4

struct lp_generation {
  lua_State *L;
  int refs;
  uint64_t id;
  uint64_t digest;
  size_t memory_used;
  lua_State *running;            /* the thread running script code (lp_generation_enter) */
  char refused_file[LUA_IDSIZE]; /* where the cap last refused an allocation */
  int refused_line;              /* 0 = no refusal inside a Lua function since enter */
  lp_script_limits limits;
  lp_thread_ctx main_ctx;
  char **layers; /* NULL-terminated copies */
  entry_module *entries;
  size_t nentries;
  lp_object_cache *objects; /* the views of the Kubernetes objects calls passed (objects.h) */
  struct {
    lua_State *co;
    int ref;
  } threads[THREAD_POOL]; /* finished task coroutines, for the next tasks */
  int nthreads;
};

void lp_script_limits_resolve(lp_script_limits *limits) {
  if (!limits->memory_bytes) limits->memory_bytes = 64u << 20;
  if (!limits->call_instructions) limits->call_instructions = 20000000;
  if (!limits->load_instructions) limits->load_instructions = 50000000;
  if (!limits->call_timeout_ms) limits->call_timeout_ms = 60000;
}

/* ---- problems ---------------------------------------------------------------------------- */

void lp_problems_add(lp_problems *p, const char *file, int line, const char *fmt, ...) {
  p->items = lp_xrealloc(p->items, (p->count + 1) * sizeof *p->items);
  lp_problem *item = &p->items[p->count++];
  item->file = file ? lp_xstrdup(file) : NULL;
  item->line = line;
  va_list ap;
  va_start(ap, fmt);
  lp_error *tmp = lp_error_newv(NULL, fmt, ap);
  va_end(ap);
  item->message = tmp->message;
  tmp->message = NULL;
  lp_error_free(tmp);
}

void lp_problems_add_lua_message(lp_problems *p, const char *fallback_file, const char *message) {
  char *file;
  int line;
  const char *text;
  if (lp_lua_message_place(message, &file, &line, &text)) {
    lp_problems_add(p, file, line, "%s", text);
    free(file);
    return;
  }
  lp_problems_add(p, fallback_file, 0, "%s", message); /* no position: kept whole */
}

char *lp_problems_render(const lp_problems *p) {
  lp_buf out = LP_BUF_INIT;
  for (size_t i = 0; i < p->count; i++) {
    const lp_problem *item = &p->items[i];
    if (item->file && item->line > 0)
      lp_buf_printf(&out, "%s:%d: ", item->file, item->line);
    else if (item->file)
      lp_buf_printf(&out, "%s: ", item->file);
    lp_buf_printf(&out, "%s\n", item->message);
  }
  return lp_buf_take(&out, NULL);
}

void lp_problems_free(lp_problems *p) {
  for (size_t i = 0; i < p->count; i++) {
    free(p->items[i].file);
    free(p->items[i].message);
  }
  free(p->items);
  p->items = NULL;
  p->count = 0;
}

/* ---- memory -------------------------------------------------------------------------------- */

/* Lua calls no message handler for a memory error and unwinds the stack before the caller sees it,
 * so the allocator notes the position when it refuses: the innermost Lua frame of the running thread.
 * That is sound inside the allocator: lua_getstack and lua_getinfo("Sl") only read the CallInfo chain
 * and write into ar (short_src is a buffer in it), they allocate nothing; and every allocation is a
 * point where Lua may raise (and where an emergency collection walks every stack), so the chain is
 * consistent there and the VM has saved the pc, as it does for the line of any runtime error. A
 * coroutine the script itself created reports the line that resumed it. */
static void note_refusal(lp_generation *g) {
  g->refused_line = 0;
  if (!g->running) return;
  lua_Debug ar;
  for (int level = 0; lua_getstack(g->running, level, &ar); level++) {
    if (!lua_getinfo(g->running, "Sl", &ar) || ar.currentline <= 0) continue; /* a C function */
    snprintf(g->refused_file, sizeof g->refused_file, "%s", ar.short_src);
    g->refused_line = ar.currentline;
    return;
  }
}

/* Caps the generation's heap: growth past the cap fails (Lua raises "not enough memory" in the
 * call that asked), frees and shrinks always succeed. When ptr is NULL, osize is a type tag. */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  lp_generation *g = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    g->memory_used -= old;
    return NULL;
  }
  if (nsize > old && g->memory_used - old + nsize > g->limits.memory_bytes) {
    note_refusal(g);
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (!p) return NULL;
  g->memory_used = g->memory_used - old + nsize;
  return p;
}

static int at_panic(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  lp_errorlog("engine.script", "unprotected Lua error", LPF_STR("error", msg ? msg : "?"));
  return 0; /* Lua aborts after this; reaching it is an engine bug, never a script's doing. */
}

/* ---- module resolution ------------------------------------------------------------------ */

/* Module names are dotted identifiers; anything else (.., /, empty parts) never reaches the disk. */
static int valid_module_name(const char *name) {
  if (!*name || *name == '.') return 0;
  for (const char *c = name; *c; c++) {
    if (*c == '.' && (c[1] == '.' || c[1] == '\0')) return 0;
    if (!(*c == '.' || *c == '_' || *c == '-' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
          (*c >= '0' && *c <= '9')))
      return 0;
  }
  return 1;
}

/* Finds the file of module in layers[first..last]; returns a malloc'd path or NULL. */
static char *resolve_in(char *const *layers, size_t first, size_t last, const char *module) {
  char *rel = lp_xstrdup(module);
  for (char *c = rel; *c; c++)
    if (*c == '.') *c = '/';
  char *found = NULL;
  for (size_t i = first; i <= last && !found; i++) {
    static const char *const patterns[] = {"%s/%s.lua", "%s/%s/init.lua"};
    for (size_t k = 0; k < 2 && !found; k++) {
      char *path = lp_xasprintf(patterns[k], layers[i], rel);
      struct stat st;
      if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        found = path;
      else
        free(path);
    }
  }
  free(rel);
  return found;
}

static size_t layer_count(char *const *layers) {
  size_t n = 0;
  while (layers[n]) n++;
  return n;
}

static char *resolve_module(lp_generation *g, const char *module) {
  size_t n = layer_count(g->layers);
  if (n == 0) return NULL;
  const char *bare = lp_module_bare(module);
  if (bare != module) return resolve_in(g->layers, n - 1, n - 1, bare); /* the shipped layer only */
  return resolve_in(g->layers, 0, n - 1, module);
}

/* A chunk name that reads well in "file:line:" messages: relative to the working directory when the
 * file is below it, else the path as given. */
static char *chunk_name(const char *path) {
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd)) {
    size_t n = strlen(cwd);
    if (strncmp(path, cwd, n) == 0 && path[n] == '/') return lp_xasprintf("@%s", path + n + 1);
  }
  return lp_xasprintf("@%s", path);
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  lp_buf b = LP_BUF_INIT;
  char chunk[8192];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) lp_buf_append(&b, chunk, n);
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    lp_buf_free(&b);
    return NULL;
  }
  return lp_buf_take(&b, len);
}

/* The first part of a module name must be a script folder (policies, providers, sim): everything
 * require can reach is then also what `luaprov check`, the file watcher and the reload fingerprint
 * see. */
static int in_script_folder(const char *name) {
  for (const char *const *folder = lp_script_tree_folders; *folder; folder++) {
    size_t n = strlen(*folder);
    if (strncmp(name, *folder, n) == 0 && name[n] == '.') return 1;
  }
  return 0;
}

static int sandbox_require(lua_State *L);

/* Compiles the file at path (text only) as module name and gives the chunk its own sandboxed _ENV.
 * Returns LUA_OK with the chunk pushed, LUA_ERRFILE with nothing pushed when the file cannot be read,
 * or the compiler's status with its message pushed. Both the script tree's modules and the test kit's
 * files load through here. [-0, +(0|1), m] */
static int load_sandboxed(lua_State *L, lp_generation *g, const char *path, const char *name) {
  size_t len = 0;
  char *source = read_file(path, &len);
  if (!source) return LUA_ERRFILE;
  char *chunkname = chunk_name(path);
  int status = luaL_loadbufferx(L, source, len, chunkname, "t");
  free(source);
  free(chunkname);
  if (status != LUA_OK) return status;
  lp_sandbox_push_env(L, name, sandbox_require, g);
  lua_setupvalue(L, -2, 1); /* the chunk's _ENV */
  return LUA_OK;
}

/* require(name) -> module value                                     [-1, +1, e]
 * Resolves only within the generation's script tree ("luaprov" is the bindings, as the requiring
 * module's role sees them: script/roles.h). Upvalue 1 is the generation, upvalue 2 the requiring
 * module's name (none when the engine itself requires an entry module). Each module loads once per
 * generation into its own sandboxed _ENV. */
static int sandbox_require(lua_State *L) {
  lp_generation *g = lua_touserdata(L, lua_upvalueindex(1));
  const char *requirer = lua_tostring(L, lua_upvalueindex(2));
  const char *name = luaL_checkstring(L, 1);
  if (strcmp(name, "luaprov") == 0) {
    lua_getfield(L, LUA_REGISTRYINDEX, BINDINGS_KEY);
    lp_role_push_bindings(L, -1, lp_role_of_module(requirer), requirer);
    return 1;
  }
  if (requirer) {
    char *problem = lp_role_require_problem(requirer, name);
    if (problem) {
      lua_pushstring(L, problem);
      free(problem);
      return lp_sandbox_raise(L, lua_tostring(L, -1));
    }
  }
  lua_getfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
  int loaded = lua_gettop(L);
  if (lua_getfield(L, loaded, name) != LUA_TNIL) {
    if (lua_islightuserdata(L, -1) && lua_touserdata(L, -1) == (void *)g)
      return luaL_error(L, "circular require of module '%s'", name);
    return 1;
  }
  lua_pop(L, 1);
  if (!valid_module_name(name)) return luaL_error(L, "invalid module name '%s'", name);
  if (!in_script_folder(lp_module_bare(name)))
    return luaL_error(L, "module '%s' is outside the script folders (policies., providers., sim.)", name);
  char *path = resolve_module(g, name);
  if (!path) {
    lp_buf searched = LP_BUF_INIT;
    for (char **layer = g->layers; *layer; layer++)
      lp_buf_printf(&searched, "%s%s", layer == g->layers ? "" : ", ", *layer);
    lua_pushfstring(L, "module '%s' not found in the script tree (searched %s)", name,
                    lp_buf_cstr(&searched));
    lp_buf_free(&searched);
    return lua_error(L);
  }
  lua_getfield(L, LUA_REGISTRYINDEX, FILES_KEY);
  lua_pushstring(L, path);
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
  int status = load_sandboxed(L, g, path, name);
  if (status == LUA_ERRFILE) lua_pushfstring(L, "%s: cannot read module '%s'", path, name);
  free(path);
  if (status != LUA_OK) return lua_error(L);
  lua_pushlightuserdata(L, g);
  lua_setfield(L, loaded, name); /* loading sentinel: catches cycles */
  lua_pushstring(L, name);
  lua_call(L, 1, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lp_endpoints_declare(L, name, -1);
  lua_pushvalue(L, -1);
  lua_setfield(L, loaded, name);
  return 1;
}

/* ---- the test kit's defaults --------------------------------------------------------------- */

/* Runs one file of the test kit (DIR/testkit/luaprov/testkit/FILE) in the sandbox as module NAME and
 * records it as loaded, so the kit's own require finds it. [-0, +1, e] */
static void run_kit_file(lua_State *L, lp_generation *g, const char *dir, const char *file,
                         const char *name) {
  char *path = lp_xasprintf("%s/testkit/luaprov/testkit/%s", dir, file);
  int status = load_sandboxed(L, g, path, name);
  if (status == LUA_ERRFILE)
    lua_pushfstring(L, "cannot read the test kit's %s (validation calls the policies on its defaults)", path);
  free(path);
  if (status != LUA_OK) lua_error(L);
  lua_pushstring(L, name);
  lua_call(L, 1, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
}

/* What preparing a state needs: the generation, the host the bindings serve and the folder the test
 * kit ships in (prepare_state, then load_kit, each one protected call). */
typedef struct prepare_args {
  lp_generation *g;
  const lp_lua_host *host;
  const char *kit_dir;
} prepare_args;

/* The kit's builders (testkit/luaprov/testkit/builders.lua) under LP_GENERATION_KIT_KEY, for the
 * validators; the policies cannot require them. */
static int load_kit(lua_State *L) {
  prepare_args *a = lua_touserdata(L, 1);
  run_kit_file(L, a->g, a->kit_dir, "merge.lua", "luaprov.testkit.merge");
  run_kit_file(L, a->g, a->kit_dir, "builders.lua", "luaprov.testkit.builders");
  lua_setfield(L, LUA_REGISTRYINDEX, LP_GENERATION_KIT_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
  lua_pushnil(L);
  lua_setfield(L, -2, "luaprov.testkit.merge");
  lua_pushnil(L);
  lua_setfield(L, -2, "luaprov.testkit.builders");
  return 0;
}

/* ---- loading ------------------------------------------------------------------------------- */

static int prepare_state(lua_State *L) {
  prepare_args *a = lua_touserdata(L, 1);
  lp_sandbox_prepare(L);
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, LOADED_KEY);
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, FILES_KEY);
  if (a->host) lp_bindings_set_host(L, a->host);
  luaL_requiref(L, "luaprov", luaopen_luaprov, 0);
  lua_setfield(L, LUA_REGISTRYINDEX, BINDINGS_KEY);
  return 0;
}

/* require(name) through the sandbox, leaving the module value in a registry ref. */
typedef struct require_args {
  lp_generation *g;
  const char *name;
  int ref;
} require_args;

static int require_and_ref(lua_State *L) {
  require_args *a = lua_touserdata(L, 1);
  lua_pushlightuserdata(L, a->g);
  lua_pushcclosure(L, sandbox_require, 1);
  lua_pushstring(L, a->name);
  lua_call(L, 1, 1);
  a->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

typedef struct validate_args {
  const lp_module_spec *spec;
  int ref;
  const char *file;
  lp_problems *problems;
} validate_args;

static int run_validator(lua_State *L) {
  validate_args *a = lua_touserdata(L, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->ref);
  a->spec->validate(L, lua_gettop(L), a->file, a->problems);
  return 0;
}

static const char *module_file(lua_State *L, const char *name, char *buf, size_t cap) {
  lua_getfield(L, LUA_REGISTRYINDEX, FILES_KEY);
  lua_getfield(L, -1, name);
  const char *f = lua_tostring(L, -1);
  snprintf(buf, cap, "%s", f ? f : name);
  lua_pop(L, 2);
  return buf;
}

static void load_module(lp_generation *g, const char *name, int *ref_out, lp_problems *problems) {
  require_args a = {g, name, LUA_NOREF};
  lp_thread_ctx_reset(g->L, g->limits.load_instructions);
  lp_error *err = NULL;
  char *traceback = NULL;
  lua_pushcfunction(g->L, require_and_ref);
  lua_pushlightuserdata(g->L, &a);
  if (lp_script_pcall(g->L, 1, 0, &err, &traceback) != 0) {
    char file[4096];
    lp_problems_add_lua_message(problems, module_file(g->L, name, file, sizeof file), err->message);
    lp_debug("engine.script", "module failed to load", LPF_STR("module", name),
             LPF_STR("traceback", traceback));
    lp_error_free(err);
  }
  free(traceback);
  if (ref_out)
    *ref_out = a.ref;
  else if (a.ref != LUA_NOREF)
    luaL_unref(g->L, LUA_REGISTRYINDEX, a.ref);
}

static void load_entries(lp_generation *g, const lp_module_spec *specs, lp_problems *problems) {
  size_t n = 0;
  while (specs[n].module) n++;
  g->entries = lp_xcalloc(n ? n : 1, sizeof *g->entries);
  g->nentries = n;
  for (size_t i = 0; i < n; i++) {
    entry_module *e = &g->entries[i];
    e->name = lp_xstrdup(specs[i].module);
    e->ref = LUA_NOREF;
    e->file = resolve_module(g, specs[i].module);
    if (!e->file) {
      if (specs[i].required)
        lp_problems_add(problems, NULL, 0, "missing %s: no %s.lua in the script tree", specs[i].contract,
                        specs[i].module);
      continue;
    }
    size_t before = problems->count;
    load_module(g, e->name, &e->ref, problems);
    if (problems->count != before || !specs[i].validate) continue;
    lp_thread_ctx_reset(g->L, g->limits.call_instructions);
    validate_args va = {&specs[i], e->ref, e->file, problems};
    lp_error *err = NULL;
    if (lp_script_cpcall(g->L, run_validator, &va, &err) != 0) {
      lp_problems_add_lua_message(problems, e->file, err->message);
      lp_error_free(err);
    }
  }
}

static void load_every_file(lp_generation *g, lp_problems *problems) {
  lp_script_files files = {0};
  lp_script_tree_list(g->layers[0], &files);
  for (size_t i = 0; i < files.count; i++) {
    /* Every module require() attempted has an entry here, failed ones included: each problem is
     * reported once. */
    lua_getfield(g->L, LUA_REGISTRYINDEX, FILES_KEY);
    int already = lua_getfield(g->L, -1, files.items[i].module) != LUA_TNIL;
    lua_pop(g->L, 2);
    if (!already) load_module(g, files.items[i].module, NULL, problems);
  }
  lp_script_files_free(&files);
}

lp_generation *lp_generation_load(const lp_generation_config *cfg, lp_problems *problems) {
  lp_generation *g = lp_xcalloc(1, sizeof *g);
  g->refs = 1;
  g->id = cfg->id;
  g->limits = cfg->limits ? *cfg->limits : (lp_script_limits){0};
  lp_script_limits_resolve(&g->limits);
  size_t n = 0;
  while (cfg->layers[n]) n++;
  g->layers = lp_xcalloc(n + 1, sizeof *g->layers);
  for (size_t i = 0; i < n; i++) g->layers[i] = lp_xstrdup(cfg->layers[i]);
  g->digest = lp_layers_digest(cfg->layers);
  g->objects = lp_object_cache_new(OBJECT_CACHE_ENTRIES, g->limits.memory_bytes / OBJECT_CACHE_SHARE);

  g->L = lua_newstate(capped_alloc, g);
  if (!g->L) {
    lp_problems_add(problems, NULL, 0, "cannot create a Lua state (memory limit %zu bytes)",
                    g->limits.memory_bytes);
    lp_generation_unref(g);
    return NULL;
  }
  lua_atpanic(g->L, at_panic);
  lp_thread_ctx_attach(g->L, &g->main_ctx);
  lp_thread_ctx_reset(g->L, g->limits.load_instructions);

  prepare_args pa = {g, cfg->host, lp_default_scripts_dir()}; /* the kit ships beside the default tree */
  lp_error *err = NULL;
  if (lp_script_cpcall(g->L, prepare_state, &pa, &err) != 0) {
    lp_problems_add(problems, NULL, 0, "cannot prepare the sandbox: %s", err->message);
    lp_error_free(err);
  } else {
    if (!cfg->no_policy_calls && lp_script_cpcall(g->L, load_kit, &pa, &err) != 0) {
      lp_problems_add(problems, NULL, 0, "%s", err->message);
      lp_error_free(err);
    }
    load_entries(g, cfg->modules, problems);
    if (cfg->load_all) load_every_file(g, problems);
  }
  lp_thread_ctx_reset(g->L, g->limits.call_instructions);
  lua_gc(g->L, LUA_GCCOLLECT);
  if (problems->count > 0) {
    lp_generation_unref(g);
    return NULL;
  }
  return g;
}

lp_generation *lp_generation_ref(lp_generation *g) {
  g->refs++;
  return g;
}

void lp_generation_unref(lp_generation *g) {
  if (!g || --g->refs > 0) return;
  if (g->L) lua_close(g->L);
  lp_object_cache_free(g->objects);
  for (size_t i = 0; i < g->nentries; i++) {
    free(g->entries[i].name);
    free(g->entries[i].file);
  }
  free(g->entries);
  for (char **layer = g->layers; layer && *layer; layer++) free(*layer);
  free(g->layers);
  free(g);
}

uint64_t lp_generation_id(const lp_generation *g) {
  return g->id;
}
lua_State *lp_generation_state(lp_generation *g) {
  return g->L;
}
const lp_script_limits *lp_generation_limits(const lp_generation *g) {
  return &g->limits;
}
size_t lp_generation_memory(const lp_generation *g) {
  return g->memory_used;
}
uint64_t lp_generation_digest(const lp_generation *g) {
  return g->digest;
}

static const entry_module *find_entry(const lp_generation *g, const char *module) {
  for (size_t i = 0; i < g->nentries; i++)
    if (strcmp(g->entries[i].name, module) == 0) return &g->entries[i];
  return NULL;
}

int lp_generation_push_module(lp_generation *g, const char *module) {
  const entry_module *e = find_entry(g, module);
  if (!e || e->ref == LUA_NOREF) {
    lua_pushnil(g->L);
    return 0;
  }
  lua_rawgeti(g->L, LUA_REGISTRYINDEX, e->ref);
  return 1;
}

void lp_generation_push_argument(lp_generation *g, const json_t *value) {
  lp_object_cache_push(g->objects, g->L, value);
}

lua_State *lp_generation_take_thread(lp_generation *g, int *ref) {
  if (g->nthreads == 0) return NULL;
  g->nthreads--;
  *ref = g->threads[g->nthreads].ref;
  return g->threads[g->nthreads].co;
}

int lp_generation_give_thread(lp_generation *g, lua_State *co, int ref) {
  if (g->nthreads == THREAD_POOL) return 0;
  g->threads[g->nthreads].co = co;
  g->threads[g->nthreads].ref = ref;
  g->nthreads++;
  return 1;
}

void lp_generation_drop_objects(lp_generation *g) {
  lp_object_cache_clear(g->objects, g->L);
}

const lp_object_cache *lp_generation_objects(const lp_generation *g) {
  return g->objects;
}

const char *lp_generation_module_file(const lp_generation *g, const char *module) {
  const entry_module *e = find_entry(g, module);
  return e && e->ref != LUA_NOREF ? e->file : NULL;
}

lp_generation *lp_generation_of(lua_State *L) {
  void *ud = NULL;
  lua_Alloc f = lua_getallocf(L, &ud);
  return f == capped_alloc ? ud : NULL;
}

lua_State *lp_generation_enter(lp_generation *g, lua_State *running) {
  lua_State *before = g->running;
  g->running = running;
  g->refused_line = 0;
  return before;
}

int lp_generation_refused_at(const lp_generation *g, const char **file) {
  *file = g->refused_line > 0 ? g->refused_file : NULL;
  return g->refused_line;
}
