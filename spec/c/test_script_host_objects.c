/* Kubernetes objects passed to script calls (script/objects.h): one read-only view per object
 * version and generation, shared by the calls that pass that version; a new resourceVersion, a
 * changed content or a new generation gives a new table; writes fail with the documented error at
 * the script's line; reads (fields, pairs, ipairs, #, next, rawget, json.encode) see the object; a
 * call that runs out of memory drops the cached views. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "core/cache.h"
#include "core/log.h"
#include "script/host.h"
#include "script/objects.h"

static char tree[256];
static uv_loop_t loop;

static const lp_module_spec modules[] = {{"sim.objects", "objects probe", 1, NULL}, {NULL, NULL, 0, NULL}};

static const char probe[] =
    "local json = require('luaprov').json\n"
    "local M = {}\n"
    "local kept\n"
    "function M.same(obj)\n"
    "  local same = rawequal(obj, kept)\n"
    "  kept = obj\n"
    "  return tostring(obj), same, obj.metadata.name\n"
    "end\n"
    "function M.label(obj) obj.metadata.labels.team = 'x' end\n"    /* line 9 */
    "function M.taint(obj) table.insert(obj.spec.taints, {}) end\n" /* line 10 */
    "function M.raw(obj) rawset(obj.metadata, 'name', 'y') end\n"   /* line 11 */
    "function M.top(obj) obj.status = {} end\n"                     /* line 12 */
    "function M.read(obj)\n"
    "  local keys = {}\n"
    "  for k, v in pairs(obj.metadata.labels) do keys[#keys + 1] = k .. '=' .. v end\n"
    "  table.sort(keys)\n"
    "  local taints = {}\n"
    "  for i, t in ipairs(obj.spec.taints) do taints[i] = t.key end\n"
    "  return table.concat(keys, ','), #obj.spec.taints, table.concat(taints, ','),\n"
    "    next(obj.metadata.labels) ~= nil, rawget(obj.metadata, 'name'), rawlen(obj.spec.taints),\n"
    "    getmetatable(obj.spec.taints) == json.array_mt, json.encode(obj)\n"
    "end\n"
    "function M.copy(obj)\n"
    "  local c = json.decode(json.encode(obj))\n"
    "  c.metadata.name = 'changed'\n"
    "  return c.metadata.name, obj.metadata.name\n"
    "end\n"
    "function M.hog() local t = {} for i = 1, 1e8 do t[i] = {i} end end\n"
    "return M\n";

static void write_probe(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/sim/objects.lua", tree);
  FILE *f = fopen(path, "w");
  fputs(probe, f);
  fclose(f);
}

/* A NodeClaim-shaped object; version NULL leaves out metadata.uid and resourceVersion. */
static json_t *object(const char *version, const char *name) {
  json_t *o = json_pack("{s:{s:s, s:{s:s, s:s}}, s:{s:[{s:s}]}}", "metadata", "name", name, "labels", "team",
                        "a", "zone", "z1", "spec", "taints", "key", "k1");
  if (version) {
    json_t *metadata = json_object_get(o, "metadata");
    json_object_set_new(metadata, "uid", json_string("6a1f0c3e-uid"));
    json_object_set_new(metadata, "resourceVersion", json_string(version));
  }
  return o;
}

static lp_script_host *new_host_capped(size_t memory_bytes) {
  lp_script_host_config cfg = {
      .loop = &loop, .defaults_dir = tree, .modules = modules, .limits = {.memory_bytes = memory_bytes}};
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  lp_problems_free(&problems);
  return h;
}

static lp_script_host *new_host(void) {
  return new_host_capped(0);
}

static int closed;
static void on_closed(void *ud) {
  closed = 1;
}

static void close_host(lp_script_host *h) {
  closed = 0;
  lp_script_host_close(h, on_closed, NULL);
  while (!closed) uv_run(&loop, UV_RUN_ONCE);
}

/* The values function returned for obj (stolen), as a JSON array (caller decrefs), or NULL on error. */
static json_t *values(lp_script_host *h, const char *function, json_t *obj) {
  lp_task_result *r = lp_script_host_call_sync(h, "sim.objects", function, json_pack("[o]", obj));
  if (r->error) fprintf(stderr, "%s: %s\n", function, r->error->message);
  json_t *v = r->json ? json_loads(r->json, 0, NULL) : NULL;
  lp_task_result_free(r);
  return v;
}

static const char *string_at(json_t *v, size_t i) {
  return json_string_value(json_array_get(v, i));
}

static void test_same_version_same_table(void) {
  lp_script_host *h = new_host();
  if (!h) return;
  json_t *first = values(h, "same", object("101", "n1"));
  json_t *again = values(h, "same", object("101", "n1")); /* another jansson value, equal content */
  CHECK(first && again);
  CHECK_STR(string_at(first, 0), string_at(again, 0));
  CHECK(json_is_true(json_array_get(again, 1)));
  CHECK_INT(lp_object_cache_entries(lp_generation_objects(lp_script_host_current(h))), 1);
  CHECK(lp_object_cache_bytes(lp_generation_objects(lp_script_host_current(h))) > 0);

  /* A new resourceVersion is another object version: a new table. */
  json_t *next = values(h, "same", object("102", "n1"));
  CHECK(next && strcmp(string_at(next, 0), string_at(again, 0)) != 0);
  CHECK(json_is_false(json_array_get(next, 1)));

  /* The engine changed the content without a write: the script sees the change, in a new table. */
  json_t *changed = values(h, "same", object("102", "n1-changed"));
  CHECK(changed && json_is_false(json_array_get(changed, 1)));
  CHECK_STR(string_at(changed, 2), "n1-changed");

  /* Without uid and resourceVersion an argument is converted for each call. */
  json_t *plain = values(h, "same", object(NULL, "n2"));
  json_t *plain_again = values(h, "same", object(NULL, "n2"));
  CHECK(plain_again && json_is_false(json_array_get(plain_again, 1)));

  json_decref(first);
  json_decref(again);
  json_decref(next);
  json_decref(changed);
  json_decref(plain);
  json_decref(plain_again);
  close_host(h);
}

static void test_reload_gives_new_tables(void) {
  lp_script_host *h = new_host();
  if (!h) return;
  json_decref(values(h, "same", object("101", "n1")));
  CHECK_INT(lp_script_host_reload(h, "test", 1, NULL), 1);
  CHECK_INT(lp_object_cache_entries(lp_generation_objects(lp_script_host_current(h))), 0);
  json_t *fresh = values(h, "same", object("101", "n1"));
  CHECK(fresh && json_is_false(json_array_get(fresh, 1)));
  CHECK_INT(lp_object_cache_entries(lp_generation_objects(lp_script_host_current(h))), 1);
  json_t *again = values(h, "same", object("101", "n1"));
  CHECK(again && json_is_true(json_array_get(again, 1)));
  json_decref(fresh);
  json_decref(again);
  close_host(h);
}

/* function's call on a cached object fails with the read-only error for path at sim/objects.lua:line. */
static void check_refused(lp_script_host *h, const char *function, const char *path, int line) {
  lp_task_result *r =
      lp_script_host_call_sync(h, "sim.objects", function, json_pack("[o]", object("7", "n")));
  CHECK(r->error != NULL);
  if (r->error) {
    char expected[256];
    snprintf(expected, sizeof expected, "sim/objects.lua:%d: cannot set %s: %s", line, path,
             "arguments that are Kubernetes objects are read-only (copy the table to change it)");
    CHECK_CONTAINS(r->error->message, expected);
    CHECK_STR(r->error->code, "ScriptError");
    CHECK_CONTAINS(r->error->file, "sim/objects.lua");
    CHECK_INT(r->error->line, line);
  }
  lp_task_result_free(r);
}

static void test_writes_are_refused(void) {
  lp_script_host *h = new_host();
  if (!h) return;
  check_refused(h, "label", "metadata.labels.team", 9);
  check_refused(h, "taint", "spec.taints[2]", 10);
  check_refused(h, "raw", "metadata.name", 11);
  check_refused(h, "top", "status", 12);
  /* nothing was written: the shared view still reads as the object */
  json_t *v = values(h, "read", object("7", "n"));
  CHECK(v != NULL);
  CHECK_STR(string_at(v, 0), "team=a,zone=z1");
  close_host(h);
  json_decref(v);
}

static void test_reads_see_the_object(void) {
  lp_script_host *h = new_host();
  if (!h) return;
  for (int round = 0; round < 2; round++) { /* converted, then cached */
    json_t *v = values(h, "read", object("7", "n"));
    CHECK(v != NULL);
    CHECK_STR(string_at(v, 0), "team=a,zone=z1");
    CHECK_INT(json_integer_value(json_array_get(v, 1)), 1);
    CHECK_STR(string_at(v, 2), "k1");
    CHECK(json_is_true(json_array_get(v, 3)));
    CHECK_STR(string_at(v, 4), "n");
    CHECK_INT(json_integer_value(json_array_get(v, 5)), 1);
    CHECK(json_is_true(json_array_get(v, 6)));
    CHECK_STR(string_at(v, 7), "{\"metadata\":{\"labels\":{\"team\":\"a\",\"zone\":\"z1\"},\"name\":\"n\","
                               "\"resourceVersion\":\"7\",\"uid\":\"6a1f0c3e-uid\"},\"spec\":{\"taints\":[{"
                               "\"key\":\"k1\"}]}}");
    json_decref(v);
  }
  json_t *c = values(h, "copy", object("7", "n"));
  CHECK(c && strcmp(string_at(c, 0), "changed") == 0 && strcmp(string_at(c, 1), "n") == 0);
  json_decref(c);
  close_host(h);
}

/* The cached views never make a call fail for memory: a call that hits the cap drops them. */
static void test_memory_error_drops_views(void) {
  lp_script_host *h = new_host_capped(4u << 20);
  if (!h) return;
  json_decref(values(h, "same", object("101", "n1")));
  const lp_object_cache *objects = lp_generation_objects(lp_script_host_current(h));
  CHECK_INT(lp_object_cache_entries(objects), 1);
  lp_task_result *r = lp_script_host_call_sync(h, "sim.objects", "hog", NULL);
  CHECK(r->error && strcmp(r->error->code, "Memory") == 0);
  lp_task_result_free(r);
  CHECK_INT(lp_object_cache_entries(objects), 0);
  CHECK_INT(lp_object_cache_bytes(objects), 0);
  json_t *again = values(h, "same", object("101", "n1")); /* converted again, and cached again */
  CHECK(again && json_is_false(json_array_get(again, 1)));
  CHECK_INT(lp_object_cache_entries(objects), 1);
  json_decref(again);
  close_host(h);
}

int main(void) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  snprintf(tree, sizeof tree, "/tmp/luaprov-objects-XXXXXX");
  if (!mkdtemp(tree)) return 1;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/sim", tree);
  mkdir(dir, 0755);
  write_probe();
  uv_loop_init(&loop);

  RUN(test_same_version_same_table);
  RUN(test_reload_gives_new_tables);
  RUN(test_writes_are_refused);
  RUN(test_reads_see_the_object);
  RUN(test_memory_error_drops_views);

  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tree);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tree);
  lp_cache_registry_clear();
  return check_summary();
}
