/* Reload latency: from the write of a changed policy file to the new generation serving calls, through
 * the real file watcher (inotify via uv_fs_event) and its debounce; and the load itself of the shipped
 * tree under the engine's contract modules, as `luaprov run` reloads it, with validation's policy calls
 * on the test kit's default objects and without them (no_policy_calls: no kit loaded, shapes only), to
 * show what those calls cost a reload. Prints figures; never fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contract/contracts.h"
#include "core/cache.h"
#include "core/clock.h"
#include "core/log.h"
#include "script/host.h"

static const lp_module_spec modules[] = {{"policies.drift", "drift policy", 1, NULL}, {NULL, NULL, 0, NULL}};

static void write_policy(const char *path, int version) {
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  fprintf(f, "local M = { version = %d }\nfunction M.is_drifted() return '' end\nreturn M\n", version);
  fclose(f);
  rename(tmp, path);
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ms per forced reload of h, one reload timed. */
static double timed_reload(lp_script_host *h) {
  double t0 = lp_clock_monotonic();
  if (lp_script_host_reload(h, "bench", 1, NULL) != 1) fprintf(stderr, "reload rejected\n");
  return (lp_clock_monotonic() - t0) * 1000.0;
}

/* The shipped tree (LUAPROV_SOURCE_DIR) under lp_contract_modules, reloaded rounds times with
 * validation's policy calls and rounds times without, alternating so both see the same machine. */
static void shipped_tree(uv_loop_t *loop, int rounds) {
  lp_script_host_config with = {
      .loop = loop, .defaults_dir = LUAPROV_SOURCE_DIR, .modules = lp_contract_modules};
  lp_script_host_config without = with;
  without.no_policy_calls = 1;
  lp_problems problems = {0};
  lp_script_host *calls = lp_script_host_new(&with, &problems);
  lp_script_host *shapes = lp_script_host_new(&without, &problems);
  if (!calls || !shapes) {
    char *text = lp_problems_render(&problems);
    fprintf(stderr, "the shipped tree does not load:\n%s", text);
    free(text);
    lp_problems_free(&problems);
    return;
  }
  double *a = calloc((size_t)rounds, sizeof *a), *b = calloc((size_t)rounds, sizeof *b);
  for (int i = 0; i < rounds; i++) {
    a[i] = timed_reload(calls);
    b[i] = timed_reload(shapes);
  }
  qsort(a, (size_t)rounds, sizeof *a, compare);
  qsort(b, (size_t)rounds, sizeof *b, compare);
  printf("shipped tree, contract modules: load + validate + swap (%d rounds each, alternating)\n", rounds);
  printf("  with policy calls (test kit loaded, up to 4 calls):  min %.2f ms  median %.2f ms  max %.2f ms\n",
         a[0], a[rounds / 2], a[rounds - 1]);
  printf("  without (no_policy_calls: shapes only):              min %.2f ms  median %.2f ms  max %.2f ms\n",
         b[0], b[rounds / 2], b[rounds - 1]);
  printf("  added by the kit and the calls: %.2f ms per reload median against median, %.2f min against min\n",
         a[rounds / 2] - b[rounds / 2], a[0] - b[0]);
  free(a);
  free(b);
  lp_script_host_close(calls, NULL, NULL);
  lp_script_host_close(shapes, NULL, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 30;
  lp_log_configure(LP_LOG_WARN, LP_LOG_FORMAT_JSON, 2);
  char tree[] = "/tmp/luaprov-reload-XXXXXX";
  if (!mkdtemp(tree)) return 1;
  char dir[128], path[160];
  snprintf(dir, sizeof dir, "%s/policies", tree);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/drift.lua", dir);
  write_policy(path, 0);

  uv_loop_t loop;
  uv_loop_init(&loop);
  lp_script_host_config cfg = {.loop = &loop, .defaults_dir = tree, .modules = modules, .watch = 1};
  lp_problems problems = {0};
  lp_script_host *h = lp_script_host_new(&cfg, &problems);
  if (!h) return 1;

  double *ms = calloc((size_t)rounds, sizeof *ms);
  for (int i = 0; i < rounds; i++) {
    uint64_t before = lp_script_host_generation_id(h);
    double t0 = lp_clock_monotonic();
    write_policy(path, i + 1);
    while (lp_script_host_generation_id(h) == before && lp_clock_monotonic() - t0 < 5)
      uv_run(&loop, UV_RUN_ONCE);
    lp_task_result_free(lp_script_host_call_sync(h, "policies.drift", "is_drifted", NULL)); /* serving */
    ms[i] = (lp_clock_monotonic() - t0) * 1000.0;
  }
  /* The load itself, without the watcher's debounce. */
  double t0 = lp_clock_monotonic();
  for (int i = 0; i < rounds; i++) lp_script_host_reload(h, "bench", 1, NULL);
  double load_ms = (lp_clock_monotonic() - t0) * 1000.0 / rounds;

  qsort(ms, (size_t)rounds, sizeof *ms, compare);
  printf("reload: file write -> new generation serving (%d rounds, debounce %u ms)\n", rounds, 20u);
  printf("  min %.1f ms  median %.1f ms  p99 %.1f ms  max %.1f ms\n", ms[0], ms[rounds / 2],
         ms[(int)(rounds * 0.99)], ms[rounds - 1]);
  printf("  load + validate + swap alone: %.2f ms per reload\n", load_ms);

  lp_script_host_close(h, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  printf("\n");
  shipped_tree(&loop, rounds);
  uv_loop_close(&loop);
  free(ms);
  remove(path);
  rmdir(dir);
  rmdir(tree);
  lp_cache_registry_clear();
  return 0;
}
