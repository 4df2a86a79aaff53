/* The script host against real Lua states, a real loop, a real HTTP server and client: sandbox
 * escapes, budgets, memory caps, reload (keep-old-on-failure, swap latency, generations of calls in
 * flight), and tasks awaiting HTTP while others run. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/client.h"
#include "http/server.h"
#include "script/host.h"

static char tree[256];
static uv_loop_t loop;
static lp_http_server *server;
static lp_http_client *client;
static int server_port;

static const lp_module_spec modules[] = {
    {"sim.probe", "probe", 1, NULL},
    {NULL, NULL, 0, NULL},
};

static void write_file(const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tree, rel);
  char tmp[520];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  fputs(text, f);
  fclose(f);
  rename(tmp, path); /* atomic, as editors and ConfigMaps do it */
}

static const char probe_v1[] =
    "local luaprov = require 'luaprov'\n"
    "local M = { version = 1 }\n"
    "function M.try(code)\n"
    "  local f, err = load(code)\n"
    "  if not f then return 'load failed: ' .. err end\n"
    "  local ok, res = pcall(f)\n"
    "  if ok then return 'ok: ' .. tostring(res) end\n"
    "  return 'error: ' .. tostring(res)\n"
    "end\n"
    "function M.spin() while true do end end\n"                                               /* line 10 */
    "function M.spin_pcall() while true do pcall(function() while true do end end) end end\n" /* line 11 */
    "function M.hog() local t = {} for i = 1, 1e8 do t[i] = {i} end return #t end\n"
    "function M.pattern() return string.find(('a'):rep(28), ('a?'):rep(28) .. ('a'):rep(28)) end\n"
    "function M.version_of() return M.version end\n"
    "function M.echo(a, b) return a, b end\n"
    "function M.fetch(url)\n"
    "  local res, err, code = luaprov.http.request{ url = url, timeout_ms = 5000 }\n"
    "  if not res then return nil, code end\n"
    "  return res.status, res.body, res.headers['x-probe']\n"
    "end\n"
    "function M.bare_yield() coroutine.yield() end\n"
    "function M.fetch_all(url, n, concurrency)\n"
    "  local reqs = {}\n"
    "  for i = 1, n do reqs[i] = { url = url .. '?i=' .. i } end\n"
    "  local out = {}\n"
    "  for i, r in ipairs(luaprov.http.request_all(reqs, { concurrency = concurrency })) do\n"
    "    out[i] = r.status or r.code\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "function M.nap(seconds) luaprov.time.sleep(seconds) return 'rested' end\n"
    "function M.busy(n) local x = 0 for i = 1, n do x = x + i end return x end\n"
    "function M.keep_thread() kept = coroutine.running() return coroutine.status(kept) end\n"
    "function M.resume_kept() return coroutine.resume(kept) end\n"
    "return M\n";

static lp_script_host *new_host(int watch) {
  lp_script_host_config cfg = {
      .loop = &loop,
      .defaults_dir = tree,
      .modules = modules,
      .http = client,
      .watch = watch,
      .limits = {.memory_bytes = 16u << 20, .call_instructions = 5000000},
  };
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  if (!h) {
    char *text = lp_problems_render(&problems);
    fprintf(stderr, "host failed to load:\n%s", text);
    free(text);
  }
  lp_problems_free(&problems);
  return h;
}

static int host_closed;
static void on_host_closed(void *ud) {
  host_closed = 1;
}

static void close_host(lp_script_host *h) {
  host_closed = 0;
  lp_script_host_close(h, on_host_closed, NULL);
  while (!host_closed) uv_run(&loop, UV_RUN_ONCE);
}

static lp_task_result *call(lp_script_host *h, const char *function, json_t *args) {
  return lp_script_host_call_sync(h, "sim.probe", function, args);
}

static char *try_code(lp_script_host *h, const char *code) {
  lp_task_result *r = call(h, "try", json_pack("[s]", code));
  char *out = NULL;
  if (r->json) {
    json_t *v = json_loads(r->json, 0, NULL);
    out = strdup(json_string_value(json_array_get(v, 0)));
    json_decref(v);
  } else {
    out = strdup(r->error->message);
  }
  lp_task_result_free(r);
  return out;
}

static void test_sandbox_escapes(void) {
  lp_script_host *h = new_host(0);
  CHECK(h != NULL);
  if (!h) return;
  static const struct {
    const char *code;
    const char *expect;
  } cases[] = {
      {"return io.open('/etc/passwd')",
       "]:1: io.open is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return os.execute('true')",
       "]:1: os.execute is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return os.getenv('HOME')",
       "]:1: os.getenv is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return require('io')", "module 'io' is outside the script folders"},
      {"return require('cjson')", "module 'cjson' is outside the script folders"},
      {"return require('policies.nothing_here')", "module 'policies.nothing_here' not found"},
      {"require('luaprov').json.encode = nil; return 'x'", "ok: x"},
      {"return require('luaprov').json.encode({1})", "ok: [1]"},
      {"return require('../../etc/passwd')", "invalid module name"},
      {"return load(string.dump(function() end))", "field 'dump'"},
      {"return load('\\27Lua\\84\\0', 'x', 'b')", "mode 'b' is not allowed"},
      {"local f, err = load('\\27Lua\\84\\0'); return err", "attempt to load a binary chunk"},
      {"return debug.getinfo(1)",
       "]:1: debug.getinfo is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return getmetatable('').__index", "getmetatable on strings is not allowed"},
      {"return collectgarbage('stop')",
       "]:1: collectgarbage is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return dofile('/etc/passwd')",
       "]:1: dofile is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return loadfile('/etc/passwd')",
       "]:1: loadfile is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return package.searchpath('x', '')",
       "]:1: package.searchpath is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return io.popen('id')",
       "]:1: io.popen is not available in the sandbox (see docs/lua-api.md#the-sandbox)"},
      {"return rawget(_G, 'dofile') == nil and rawget(os, 'execute') == nil", "ok: true"},
      {"local n = 0; for _ in pairs(os) do n = n + 1 end; return n", "ok: 3"},
      {"string.upper = nil; return 'x'", "ok: x"},
      {"return ('').dump", "ok: nil"},
      {"return setmetatable({}, {__gc = function() while true do end end})",
       "__gc metamethods are not allowed"},
      {"return coroutine.resume(coroutine.running())", "a task's own coroutine cannot be resumed or closed"},
      {"local co = coroutine.wrap(function(a) coroutine.yield(a + 1) return 'done' end); return co(1) .. "
       "co()",
       "ok: 2done"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = try_code(h, cases[i].code);
    CHECK_CONTAINS(out, cases[i].expect);
    free(out);
  }
  /* The library tables are per script copies, and the string metatable still points at the real
   * string table: method calls keep working after a script tampered with its own copy. */
  char *out = try_code(h, "return ('abc'):upper()");
  CHECK_STR(out, "ok: ABC");
  free(out);
  close_host(h);
}

static void test_budget(void) {
  lp_script_host *h = new_host(0);
  if (!h) return;
  double t0 = lp_clock_monotonic();
  lp_task_result *r = call(h, "spin", NULL);
  CHECK(r->error != NULL);
  if (r->error) {
    CHECK_STR(r->error->code, "Budget");
    CHECK_CONTAINS(r->error->message, "sim/probe.lua:10: instruction budget of 5000000 exceeded");
  }
  CHECK(lp_clock_monotonic() - t0 < 2.0);
  lp_task_result_free(r);

  r = call(h, "spin_pcall", NULL); /* the script's own pcall cannot absorb the budget error */
  CHECK(r->error && strcmp(r->error->code, "Budget") == 0);
  if (r->error) CHECK_CONTAINS(r->error->message, "probe.lua:11:");
  lp_task_result_free(r);

  /* a coroutine the script creates runs on the calling task's budget */
  r = call(h, "try", json_pack("[s]", "local co = coroutine.wrap(function() while true do end end) co()"));
  CHECK(r->error && strcmp(r->error->code, "Budget") == 0);
  lp_task_result_free(r);

  /* Task coroutines are reused once a call returns: each call still starts with the whole budget (two
   * calls of about 3.5 million instructions pass under 5 million), and a thread a script kept from an
   * earlier call stays out of its reach. */
  for (int i = 0; i < 2; i++) {
    r = call(h, "busy", json_pack("[i]", 1000000));
    CHECK(r->error == NULL);
    lp_task_result_free(r);
  }
  r = call(h, "keep_thread", NULL);
  CHECK_STR(r->json, "[\"running\"]");
  lp_task_result_free(r);
  r = call(h, "resume_kept", NULL);
  /* refused, whether the thread is this call's own again or a finished one */
  CHECK(r->error ? strstr(r->error->message, "cannot be resumed") != NULL
                 : strncmp(r->json, "[false", 6) == 0);
  lp_task_result_free(r);

  r = call(h, "echo", json_pack("[si]", "still", 42)); /* the engine stays up */
  CHECK(r->error == NULL);
  CHECK_STR(r->json, "[\"still\",42]");
  lp_task_result_free(r);
  close_host(h);
}

static void test_memory_and_patterns(void) {
  lp_script_host *h = new_host(0);
  if (!h) return;
  lp_task_result *r = call(h, "hog", NULL);
  CHECK(r->error && strcmp(r->error->code, "Memory") == 0);
  if (r->error) CHECK_CONTAINS(r->error->message, "memory limit of 16384 KiB");
  lp_task_result_free(r);
  CHECK(lp_generation_memory(lp_script_host_current(h)) < (4u << 20)); /* the garbage was collected */

  double t0 = lp_clock_monotonic();
  r = call(h, "pattern", NULL);
  CHECK(r->error != NULL);
  if (r->error) CHECK_CONTAINS(r->error->message, "pattern too complex");
  CHECK(lp_clock_monotonic() - t0 < 1.0);
  lp_task_result_free(r);

  r = call(h, "echo", json_pack("[s]", "alive"));
  CHECK_STR(r->json, "[\"alive\",null]");
  lp_task_result_free(r);

  r = call(h, "bare_yield", NULL);
  CHECK(r->error && strstr(r->error->message, "yielded outside luaprov.http.request"));
  lp_task_result_free(r);
  r = call(h, "missing_function", NULL);
  CHECK(r->error && strcmp(r->error->code, "Contract") == 0);
  CHECK_STR(r->error->reason, LP_ERR_NOT_EXPORTED); /* kept by the copy a synchronous call makes */
  lp_task_result_free(r);
  close_host(h);
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

typedef struct delayed {
  uv_timer_t timer;
  lp_http_response *res;
} delayed;

static void delayed_closed(uv_handle_t *h) {
  free(h->data);
}

static void answer_later(uv_timer_t *t) {
  delayed *d = t->data;
  lp_http_response_header(d->res, "X-Probe", "slow");
  lp_http_respond(d->res, 200, "text/plain", "late answer", 11);
  uv_close((uv_handle_t *)&d->timer, delayed_closed);
}

/* The client gave up (a cancelled task): nothing left to answer. */
static void client_gone(lp_http_response *res, void *ud) {
  delayed *d = ud;
  uv_close((uv_handle_t *)&d->timer, delayed_closed);
}

static void serve_slow(const lp_http_request *req, lp_http_response *res, void *ud) {
  delayed *d = calloc(1, sizeof *d);
  d->res = res;
  uv_timer_init(&loop, &d->timer);
  d->timer.data = d;
  uv_timer_start(&d->timer, answer_later, 150, 0);
  lp_http_response_on_close(res, client_gone, d);
}

typedef struct outcome {
  int done;
  double at;
  char *json;
  uint64_t generation;
  char *error;
} outcome;

static void record(const lp_task_result *r, void *ud) {
  outcome *o = ud;
  o->done = 1;
  o->at = lp_clock_monotonic();
  o->json = r->json ? strdup(r->json) : NULL;
  o->error = r->error ? strdup(r->error->message) : NULL;
  o->generation = r->generation;
}

static void test_http_await(void) {
  lp_script_host *h = new_host(0);
  if (!h) return;
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/slow", server_port);
  outcome slow = {0}, quick = {0};
  lp_script_host_call(h, "sim.probe", "fetch", json_pack("[s]", url), record, &slow);
  lp_script_host_call(h, "sim.probe", "echo", json_pack("[i]", 7), record, &quick);
  CHECK(!slow.done && !quick.done); /* never called back from inside lp_script_host_call */
  CHECK_INT(lp_script_host_tasks_in_flight(h), 1);
  while (!slow.done) uv_run(&loop, UV_RUN_ONCE);
  CHECK(quick.done && quick.at < slow.at); /* the quick task ran while the slow one awaited */
  CHECK_STR(slow.json, "[200,\"late answer\",\"slow\"]");
  CHECK_STR(quick.json, "[7,null]");
  free(slow.json);
  free(quick.json);

  /* luaprov.time.sleep parks the task on a timer; others run meanwhile. */
  outcome nap = {0}, quick2 = {0};
  double t0 = lp_clock_monotonic();
  lp_script_host_call(h, "sim.probe", "nap", json_pack("[f]", 0.1), record, &nap);
  lp_script_host_call(h, "sim.probe", "echo", json_pack("[i]", 8), record, &quick2);
  while (!nap.done) uv_run(&loop, UV_RUN_ONCE);
  CHECK(quick2.done && quick2.at < nap.at);
  CHECK(nap.at - t0 >= 0.095);
  CHECK_STR(nap.json, "[\"rested\"]");
  free(nap.json);
  free(quick2.json);

  /* request_all: six 150 ms requests three at a time take two waves, results in order. */
  t0 = lp_clock_monotonic();
  lp_task_result *all = call(h, "fetch_all", json_pack("[sii]", url, 6, 3));
  double waves = lp_clock_monotonic() - t0;
  CHECK_STR(all->json, "[[200,200,200,200,200,200]]");
  CHECK(waves >= 0.29 && waves < 0.45);
  lp_task_result_free(all);
  char refused_url[] = "http://127.0.0.1:1/";
  all = call(h, "fetch_all", json_pack("[sii]", refused_url, 2, 2));
  CHECK_STR(all->json, "[[\"ConnectFailed\",\"ConnectFailed\"]]");
  lp_task_result_free(all);

  /* Connection refused comes back as nil, code. */
  outcome refused = {0};
  lp_script_host_call(h, "sim.probe", "fetch", json_pack("[s]", "http://127.0.0.1:1/"), record, &refused);
  while (!refused.done) uv_run(&loop, UV_RUN_ONCE);
  CHECK_STR(refused.json, "[null,\"ConnectFailed\"]");
  free(refused.json);
  close_host(h);
}

static void run_for_ms(unsigned ms) {
  double end = lp_clock_monotonic() + ms / 1000.0;
  while (lp_clock_monotonic() < end) uv_run(&loop, UV_RUN_NOWAIT), usleep(1000);
}

/* A task parked on a request longer than its wall-clock budget is stopped with "Timeout". */
static void test_call_timeout(void) {
  lp_script_host_config cfg = {
      .loop = &loop,
      .defaults_dir = tree,
      .modules = modules,
      .http = client,
      .limits = {.call_timeout_ms = 50},
  };
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  CHECK(h != NULL);
  if (!h) return;
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/slow", server_port); /* answers after 150 ms */
  double t0 = lp_clock_monotonic();
  lp_task_result *r = call(h, "fetch", json_pack("[s]", url));
  double elapsed = lp_clock_monotonic() - t0;
  CHECK(r->error && strcmp(r->error->code, "Timeout") == 0);
  if (r->error) CHECK_CONTAINS(r->error->message, "sim.probe.fetch exceeded its wall-clock timeout");
  /* never before its budget; how soon after depends on the machine's load, and the Timeout itself shows
   * it did not wait for the answer */
  CHECK(elapsed >= 0.045);
  lp_task_result_free(r);
  CHECK_INT(lp_script_host_tasks_in_flight(h), 0);
  t0 = lp_clock_monotonic();
  r = call(h, "nap", json_pack("[i]", 5)); /* a sleep past the deadline is cut short too */
  CHECK(r->error && strcmp(r->error->code, "Timeout") == 0);
  CHECK(lp_clock_monotonic() - t0 < 4.0); /* well short of the 5 s asked for, however loaded */
  lp_task_result_free(r);
  t0 = lp_clock_monotonic();
  r = call(h, "fetch_all", json_pack("[sii]", url, 4, 2)); /* a batch past the deadline is cancelled whole */
  CHECK(r->error && strcmp(r->error->code, "Timeout") == 0); /* its requests answer after 150 ms each */
  lp_task_result_free(r);
  run_for_ms(200); /* let the server answer the abandoned requests */
  close_host(h);
}

/* ---- reload ---------------------------------------------------------------------------------- */

static void test_reload(void) {
  lp_script_host *h = new_host(1);
  if (!h) return;
  CHECK_INT(lp_script_host_generation_id(h), 1);

  /* A call in flight when the reload happens finishes on generation 1. */
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/slow", server_port);
  outcome in_flight = {0};
  lp_script_host_call(h, "sim.probe", "fetch", json_pack("[s]", url), record, &in_flight);

  /* A syntax error is rejected with file:line and generation 1 stays in service. */
  write_file("sim/probe.lua", "local M = {\nreturn M\n");
  lp_problems problems = {0};
  CHECK_INT(lp_script_host_reload(h, "test", 0, &problems), -1);
  char *text = lp_problems_render(&problems);
  CHECK_CONTAINS(text, "sim/probe.lua:2:");
  free(text);
  lp_problems_free(&problems);
  CHECK_INT(lp_script_host_generation_id(h), 1);
  lp_task_result *r = call(h, "version_of", NULL);
  CHECK_STR(r->json, "[1]");
  lp_task_result_free(r);

  /* A good file swaps in through the file watcher (how soon is a figure, printed, not asserted: a
   * loaded machine must not fail it; bench_reload measures reload latency). */
  char v2[sizeof probe_v1 + 16];
  snprintf(v2, sizeof v2, "%s", probe_v1);
  char *version = strstr(v2, "version = 1");
  version[10] = '2';
  double written = lp_clock_monotonic();
  write_file("sim/probe.lua", v2);
  while (lp_script_host_generation_id(h) == 1 && lp_clock_monotonic() - written < 2.0)
    uv_run(&loop, UV_RUN_ONCE);
  double swap_ms = (lp_clock_monotonic() - written) * 1000.0;
  CHECK(lp_script_host_generation_id(h) == 2);
  fprintf(stderr, "reload swapped %.1f ms after the write\n", swap_ms);
  r = call(h, "version_of", NULL);
  CHECK_STR(r->json, "[2]");
  CHECK_INT(r->generation, 2);
  lp_task_result_free(r);

  while (!in_flight.done) uv_run(&loop, UV_RUN_ONCE);
  CHECK_INT(in_flight.generation, 1);
  CHECK_STR(in_flight.json, "[200,\"late answer\",\"slow\"]");
  free(in_flight.json);

  /* Unchanged files are not reloaded. */
  CHECK_INT(lp_script_host_reload(h, "test", 0, NULL), 0);
  run_for_ms(50);
  CHECK_INT(lp_script_host_generation_id(h), 2);
  write_file("sim/probe.lua", probe_v1);
  close_host(h);
}

static void test_load_time_http_refused(void) {
  write_file("sim/probe.lua", "local luaprov = require 'luaprov'\n"
                              "luaprov.http.request{ url = 'http://127.0.0.1:1/' }\nreturn {}\n");
  lp_script_host_config cfg = {.loop = &loop, .defaults_dir = tree, .modules = modules, .http = client};
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  CHECK(h == NULL);
  char *text = lp_problems_render(&problems);
  CHECK_CONTAINS(text, "sim/probe.lua:2: luaprov.http.request cannot run here");
  free(text);
  lp_problems_free(&problems);
  write_file("sim/probe.lua", probe_v1);
}

int main(void) {
  lp_log_configure(LP_LOG_ERROR, LP_LOG_FORMAT_JSON, 2);
  snprintf(tree, sizeof tree, "/tmp/luaprov-host-XXXXXX");
  if (!mkdtemp(tree)) return 1;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/sim", tree);
  mkdir(dir, 0755);
  write_file("sim/probe.lua", probe_v1);

  uv_loop_init(&loop);
  server = lp_http_server_new(&loop, NULL);
  lp_http_server_route(server, "GET", "/slow", serve_slow, NULL);
  lp_error *err = NULL;
  if (lp_http_server_listen(server, "127.0.0.1", 0, &err) != 0) {
    fprintf(stderr, "listen: %s\n", err->message);
    return 1;
  }
  server_port = lp_http_server_port(server);
  client = lp_http_client_new(&loop, NULL, &err);

  RUN(test_sandbox_escapes);
  RUN(test_budget);
  RUN(test_memory_and_patterns);
  RUN(test_http_await);
  RUN(test_call_timeout);
  RUN(test_reload);
  RUN(test_load_time_http_refused);

  lp_http_client_close(client, NULL, NULL);
  lp_http_server_close(server, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tree);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tree);
  lp_cache_registry_clear();
  return check_summary();
}
