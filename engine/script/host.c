/* The script host: the generation in service, reload (validate then swap), and file watching. */
#include "script/host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "json.h"
#include "script/host_internal.h"
#include "script/tree.h"

static void register_metrics(lp_script_host *h) {
  lp_metrics *m = lp_metrics_default();
  h->calls_total = lp_metrics_counter(m, "luaprov_script_calls_total", "Script function calls by outcome.",
                                      LP_LABELS("module", "function", "result"));
  h->call_seconds =
      lp_metrics_histogram(m, "luaprov_script_call_duration_seconds",
                           "Wall time of script calls, awaits included.", LP_LABELS("module"), NULL, 0);
  h->reloads_total =
      lp_metrics_counter(m, "luaprov_script_reload_total", "Script reloads by result.", LP_LABELS("result"));
  h->generation_gauge = lp_metrics_gauge(m, "luaprov_script_generation",
                                         "Number of the script generation in service.", LP_NO_LABELS);
  h->memory_gauge = lp_metrics_gauge(m, "luaprov_script_memory_bytes",
                                     "Lua heap of the script generation in service.", LP_NO_LABELS);
  h->tasks_gauge = lp_metrics_gauge(m, "luaprov_script_tasks_in_flight",
                                    "Script calls running or awaiting I/O.", LP_NO_LABELS);
}

static lp_generation *load_generation(lp_script_host *h, lp_problems *problems) {
  const char *layers[4] = {NULL};
  for (size_t i = 0; i < h->nlayers; i++) layers[i] = h->layers[i];
  lp_generation_config cfg = {
      .layers = layers,
      .modules = h->modules,
      .limits = &h->limits,
      .host = &h->lua_host,
      .id = h->next_id,
      .no_policy_calls = h->no_policy_calls,
  };
  lp_generation *g = lp_generation_load(&cfg, problems);
  if (g) h->next_id++;
  return g;
}

static void log_problems(const char *msg, const lp_problems *problems, const char *trigger) {
  for (size_t i = 0; i < problems->count; i++) {
    const lp_problem *p = &problems->items[i];
    lp_errorlog("engine.script", msg, LPF_STR("trigger", trigger), LPF_STR("file", p->file),
                LPF_INT("line", p->line), LPF_STR("error", p->message));
  }
}

static void start_watching(lp_script_host *h);
static void stop_watching(lp_script_host *h);

/* Folders may have appeared or gone, whatever the reload decided: a new empty folder changes no
 * script (the reload is skipped) but the file written into it next must still be seen. */
static void rewatch(lp_script_host *h) {
  if (!h->watch) return;
  stop_watching(h);
  start_watching(h);
}

int lp_script_host_reload(lp_script_host *h, const char *trigger, int force, lp_problems *problems) {
  const char *layers[4] = {NULL};
  for (size_t i = 0; i < h->nlayers; i++) layers[i] = h->layers[i];
  if (!force && lp_layers_digest(layers) == lp_generation_digest(h->current)) {
    lp_counter_inc(h->reloads_total, LP_LABELS("unchanged"));
    lp_debug("engine.script", "scripts unchanged, reload skipped", LPF_STR("trigger", trigger));
    rewatch(h);
    return 0;
  }
  double started = lp_clock_monotonic();
  lp_problems local = {0};
  lp_problems *found = problems ? problems : &local;
  lp_generation *g = load_generation(h, found);
  if (!g) {
    lp_counter_inc(h->reloads_total, LP_LABELS("error"));
    log_problems("script reload rejected, previous generation stays in service", found, trigger);
    lp_problems_free(&local);
    rewatch(h);
    return -1;
  }
  lp_generation *old = h->current;
  h->current = g;
  lp_counter_inc(h->reloads_total, LP_LABELS("ok"));
  lp_gauge_set(h->generation_gauge, LP_NO_LABELS, (double)lp_generation_id(g));
  lp_gauge_set(h->memory_gauge, LP_NO_LABELS, (double)lp_generation_memory(g));
  lp_info("engine.script", "scripts reloaded", LPF_STR("trigger", trigger),
          LPF_INT("generation", (long long)lp_generation_id(g)),
          LPF_INT("previous", (long long)lp_generation_id(old)),
          LPF_NUM("load_ms", (lp_clock_monotonic() - started) * 1000.0));
  lp_generation_unref(old); /* tasks still running on it hold their own references */
  rewatch(h);
  return 1;
}

/* ---- watching ---------------------------------------------------------------------------- */

static void handle_closed(uv_handle_t *handle) {
  lp_script_host *h = handle->data;
  if (handle->type == UV_FS_EVENT) free(handle);
  if (--h->open_handles == 0 && h->closing) {
    void (*cb)(void *) = h->on_closed;
    void *ud = h->on_closed_ud;
    for (size_t i = 0; i < h->nlayers; i++) free(h->layers[i]);
    free(h);
    if (cb) cb(ud);
  }
}

static void debounce_fired(uv_timer_t *timer) {
  lp_script_host *h = timer->data;
  lp_script_host_reload(h, "file", 0, NULL);
}

static void fs_changed(uv_fs_event_t *handle, const char *filename, int events, int status) {
  lp_script_host *h = handle->data;
  if (h->closing) return;
  if (status < 0) {
    lp_warn("engine.script", "file watch error", LPF_STR("error", uv_strerror(status)));
    return;
  }
  /* Editors write through temporary files and ConfigMaps swap symlinks: wait for quiet. */
  uv_timer_start(&h->debounce, debounce_fired, h->debounce_ms, 0);
}

static void start_watching(lp_script_host *h) {
  for (size_t l = 0; l < h->nlayers; l++) {
    char **dirs = lp_script_tree_dirs(h->layers[l]);
    for (char **d = dirs; *d; d++) {
      uv_fs_event_t *w = lp_xmalloc(sizeof *w);
      uv_fs_event_init(h->loop, w);
      w->data = h;
      h->open_handles++;
      int rc = uv_fs_event_start(w, fs_changed, *d, 0);
      if (rc < 0) {
        lp_warn("engine.script", "cannot watch folder", LPF_STR("dir", *d),
                LPF_STR("error", uv_strerror(rc)));
        uv_close((uv_handle_t *)w, handle_closed);
        continue;
      }
      h->watchers = lp_xrealloc(h->watchers, (h->nwatchers + 1) * sizeof *h->watchers);
      h->watchers[h->nwatchers++] = w;
    }
    lp_script_tree_free_dirs(dirs);
  }
}

static void stop_watching(lp_script_host *h) {
  for (size_t i = 0; i < h->nwatchers; i++) uv_close((uv_handle_t *)h->watchers[i], handle_closed);
  free(h->watchers);
  h->watchers = NULL;
  h->nwatchers = 0;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

lp_script_host *lp_script_host_new(const lp_script_host_config *cfg, lp_problems *problems) {
  lp_script_host *h = lp_xcalloc(1, sizeof *h);
  h->loop = cfg->loop;
  if (cfg->scripts_dir && (!cfg->defaults_dir || strcmp(cfg->scripts_dir, cfg->defaults_dir) != 0))
    h->layers[h->nlayers++] = lp_xstrdup(cfg->scripts_dir);
  h->layers[h->nlayers++] = lp_xstrdup(cfg->defaults_dir);
  h->modules = cfg->modules;
  h->no_policy_calls = cfg->no_policy_calls;
  h->limits = cfg->limits;
  lp_script_limits_resolve(&h->limits);
  h->http = cfg->http;
  h->now = cfg->now;
  h->now_ud = cfg->now_ud;
  h->watch = cfg->watch;
  h->debounce_ms = cfg->debounce_ms ? cfg->debounce_ms : 20;
  h->next_id = 1;
  lp_task_host_bindings(&h->lua_host);
  h->lua_host.ud = h;
  register_metrics(h);

  h->current = load_generation(h, problems);
  if (!h->current) {
    for (size_t i = 0; i < h->nlayers; i++) free(h->layers[i]);
    free(h);
    return NULL;
  }
  lp_gauge_set(h->generation_gauge, LP_NO_LABELS, (double)lp_generation_id(h->current));
  lp_gauge_set(h->memory_gauge, LP_NO_LABELS, (double)lp_generation_memory(h->current));

  uv_idle_init(h->loop, &h->completions);
  h->completions.data = h;
  uv_timer_init(h->loop, &h->debounce);
  h->debounce.data = h;
  h->open_handles = 2;
  if (h->watch) start_watching(h);
  if (cfg->purpose) {
    char msg[96];
    snprintf(msg, sizeof msg, "%s scripts loaded", cfg->purpose);
    lp_info("engine.script", msg, LPF_INT("generation", (long long)lp_generation_id(h->current)),
            LPF_STR("tree", h->layers[0]));
  } else {
    lp_info("engine.script", "scripts loaded", LPF_INT("generation", (long long)lp_generation_id(h->current)),
            LPF_STR("scripts", h->layers[0]), LPF_STR("defaults", h->layers[h->nlayers - 1]));
  }
  return h;
}

/* Reading one field of an entry module of generation g: fn runs with the field's value on top of the
 * stack (any type) and fills out. */
typedef struct module_field_args {
  lp_generation *g;
  const char *module;
  const char *field;
  void (*fn)(lua_State *L, void *out);
  void *out;
} module_field_args;

static int read_module_field(lua_State *L) {
  module_field_args *a = lua_touserdata(L, 1);
  lp_generation_push_module(a->g, a->module);
  if (!lua_istable(L, -1)) return 0;
  lua_pushstring(L, a->field);
  lua_rawget(L, -2);
  a->fn(L, a->out);
  return 0;
}

static void module_field(lp_generation *g, const char *module, const char *field,
                         void (*fn)(lua_State *L, void *out), void *out) {
  module_field_args a = {g, module, field, fn, out};
  lp_error *err = NULL;
  if (lp_script_cpcall(lp_generation_state(g), read_module_field, &a, &err) != 0) lp_error_free(err);
}

static void string_of(lua_State *L, void *out) {
  if (lua_type(L, -1) == LUA_TSTRING) *(char **)out = lp_xstrdup(lua_tostring(L, -1));
}

char *lp_script_host_module_string(lp_script_host *h, const char *module, const char *field) {
  char *out = NULL;
  module_field(h->current, module, field, string_of, &out);
  return out;
}

static void is_function(lua_State *L, void *out) {
  *(int *)out = lua_type(L, -1) == LUA_TFUNCTION;
}

int lp_script_host_module_has_function(lp_script_host *h, const char *module, const char *field) {
  int out = 0;
  module_field(h->current, module, field, is_function, &out);
  return out;
}

static void strings_of(lua_State *L, void *out) {
  if (!lua_istable(L, -1)) return;
  int list = lua_gettop(L);
  lua_Integer n = (lua_Integer)lua_rawlen(L, list);
  json_t *strings = json_array();
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, list, i) == LUA_TSTRING)
      json_array_append_new(strings, json_string(lua_tostring(L, -1)));
    lua_pop(L, 1);
  }
  *(json_t **)out = strings;
}

json_t *lp_script_host_module_strings(lp_script_host *h, const char *module, const char *field) {
  json_t *out = NULL;
  module_field(h->current, module, field, strings_of, &out);
  return out;
}

/* Any value the JSON encoding takes (bindings/json.h); nil and what it refuses leave out NULL. */
static void json_of(lua_State *L, void *out) {
  if (lua_isnil(L, -1)) return;
  lp_buf buf = {0};
  lp_error *err = NULL;
  if (lp_json_encode(L, -1, &buf, &err) == 0)
    *(json_t **)out = json_loadb(buf.data ? buf.data : "", buf.len, JSON_DECODE_ANY, NULL);
  lp_error_free(err);
  lp_buf_free(&buf);
}

json_t *lp_generation_module_json(lp_generation *g, const char *module, const char *field) {
  json_t *out = NULL;
  module_field(g, module, field, json_of, &out);
  return out;
}

json_t *lp_script_host_module_json(lp_script_host *h, const char *module, const char *field) {
  return lp_generation_module_json(h->current, module, field);
}

lp_generation *lp_script_host_current(lp_script_host *h) {
  return h->current;
}

uint64_t lp_script_host_generation_id(const lp_script_host *h) {
  return lp_generation_id(h->current);
}

void lp_host_maybe_finish_close(lp_script_host *h) {
  if (!h->closing || h->ntasks > 0 || h->completions_closed) return;
  h->completions_closed = 1;
  lp_task_deliver_completions(h);
  lp_generation_unref(h->current);
  h->current = NULL;
  uv_close((uv_handle_t *)&h->completions, handle_closed);
}

void lp_script_host_close(lp_script_host *h, void (*on_closed)(void *ud), void *ud) {
  h->closing = 1;
  h->on_closed = on_closed;
  h->on_closed_ud = ud;
  lp_script_host_cancel_all(h); /* parked tasks end through their HTTP callbacks */
  stop_watching(h);
  uv_close((uv_handle_t *)&h->debounce, handle_closed);
  lp_host_maybe_finish_close(h);
}
