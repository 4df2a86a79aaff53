#include "core/clock.h"

#include <stdio.h>
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

void lp_clock_rfc3339(double t, int micro, char *out) {
  time_t secs = (time_t)t;
  struct tm tm;
  gmtime_r(&secs, &tm);
  size_t n = strftime(out, LP_RFC3339_SIZE, "%Y-%m-%dT%H:%M:%S", &tm);
  if (micro)
    snprintf(out + n, LP_RFC3339_SIZE - n, ".%06uZ", (unsigned)((t - (double)secs) * 1e6) % 1000000u);
  else
    snprintf(out + n, LP_RFC3339_SIZE - n, "Z");
}
