/* Helpers for what drives the consolidation simulation from outside a controller
 * (spec/c/test_controller_disruption_simulate.c, spec/bench/bench_consolidation.c): a controller of
 * their own ("probe", a singleton that only remembers itself) lends dz_sim_new its environment, and
 * sp_snapshot runs the loop until the snapshot is ready. Header-only: each test is its own executable.
 * Loop thread only. */
#ifndef LUAPROV_SPEC_SIMULATE_TEST_SUPPORT_H
#define LUAPROV_SPEC_SIMULATE_TEST_SUPPORT_H

#include <stdio.h>
#include <uv.h>

#include "controller/controller.h"
#include "controller/disruption_simulate.h"

/* The probe, once the manager ran its first reconcile (at start); NULL before. */
static lp_controller *sp_probe;

static inline void sp_probe_reconcile(lp_controller *c, const char *key) {
  sp_probe = c;
  lp_controller_done(c, key, NULL, 0);
}

static const lp_controller_def sp_probe_def = {
    .name = "probe", .primary = LP_KIND_NONE, .singleton_key = "probe", .reconcile = sp_probe_reconcile};

typedef struct sp_taken {
  int done;
  dz_sim *sim;
} sp_taken;

static inline void sp_ready(void *ud, dz_sim *sim, lp_error *err) {
  sp_taken *t = ud;
  t->done = 1;
  t->sim = sim;
  if (err) fprintf(stderr, "snapshot: %s\n", err->message);
  lp_error_free(err);
}

/* A snapshot through the probe, the loop run until it is ready (NULL when it failed: the error is
 * printed). *early (may be NULL) is set when ready ran inside dz_sim_new, which it must not. */
static inline dz_sim *sp_snapshot(uv_loop_t *loop, int *early) {
  sp_taken t = {0};
  dz_sim_new(sp_probe, sp_ready, &t);
  if (early) *early = t.done;
  while (!t.done) uv_run(loop, UV_RUN_ONCE);
  return t.sim;
}

#endif
