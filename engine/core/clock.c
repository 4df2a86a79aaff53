#include "core/clock.h"

#include <time.h>

static double read_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double lp_clock_monotonic(void) {
  return read_clock(CLOCK_MONOTONIC);
}

double lp_clock_wall(void) {
  return read_clock(CLOCK_REALTIME);
}
