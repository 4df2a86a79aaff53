/* luaprov.time: wall-clock time from the host's clock (simulated in `luaprov demo`) or the system
 * clock, and RFC 3339 timestamps as Kubernetes writes them (creationTimestamp, lastTransitionTime,
 * MicroTime) and cloud APIs expect them (Alibaba's signature Timestamp).
 *
 * Calendar arithmetic is done here (days from civil, proleptic Gregorian) rather than with
 * gmtime/timegm, so the result never depends on TZ or on the width of time_t. Times are seconds
 * since the epoch as floats; a double keeps microseconds exact for centuries around now, which is
 * as fine as Kubernetes goes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <lauxlib.h>

#include "luaprov.h"

/* 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the years RFC 3339 can spell */
#define MIN_EPOCH_SECONDS (-62167219200.0)
#define MAX_EPOCH_SECONDS 253402300799.0

double lp_bindings_now(lua_State *L) {
  const lp_lua_host *host = lp_bindings_host(L);
  if (host && host->now) return host->now(host->ud);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = (int)(doy - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m) {
  static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : days[m - 1];
}

/* luaprov.time.sleep(seconds)                                               [-1, +0, e]
 * Inside the engine the calling task yields to the loop (other tasks run meanwhile); under plain
 * lua5.4 the process sleeps. 0 <= seconds <= 3600. For backoff between retries. */
static int time_sleep(lua_State *L) {
  lua_Number seconds = luaL_checknumber(L, 1);
  luaL_argcheck(L, seconds >= 0 && seconds <= 3600, 1, "seconds must be between 0 and 3600");
  const lp_lua_host *host = lp_bindings_host(L);
  if (host && host->sleep) {
    if (!host->can_yield(L, host->ud))
      return luaL_error(L,
                        "luaprov.time.sleep cannot run here: call it from a contract function (not at module "
                        "load, inside a coroutine the script created, or a sort/gsub callback)");
    return host->sleep(L, (double)seconds, host->ud);
  }
  struct timespec ts = {(time_t)seconds, (long)((seconds - floor(seconds)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  return 0;
}

/* luaprov.time.now() -> seconds since the epoch (float)                      [-0, +1, -] */
static int time_now(lua_State *L) {
  lua_pushnumber(L, lp_bindings_now(L));
  return 1;
}

/* luaprov.time.monotonic() -> seconds (float) from an arbitrary origin         [-0, +1, -]
 * Always the system's monotonic clock, even under a simulated host clock: it measures how long
 * the script itself took, not where the simulation is. */
static int time_monotonic(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
  return 1;
}

/* luaprov.time.iso8601([t]) -> "2026-11-30T03:22:51Z"                        [-(0|1), +1, v]
 * t (seconds since the epoch, default now) is written in UTC with its fraction dropped (rounded
 * towards the past); it must fall within years 0000..9999. */
static int time_iso8601(lua_State *L) {
  double t = lua_isnoneornil(L, 1) ? lp_bindings_now(L) : luaL_checknumber(L, 1);
  luaL_argcheck(L, t >= MIN_EPOCH_SECONDS && t < MAX_EPOCH_SECONDS + 1, 1, "time outside years 0000..9999");
  int64_t secs = (int64_t)floor(t);
  int64_t days = (secs >= 0 ? secs : secs - 86399) / 86400;
  int64_t rem = secs - days * 86400;
  int64_t y;
  int m, d;
  civil_from_days(days, &y, &m, &d);
  char out[32];
  snprintf(out, sizeof out, "%04d-%02d-%02dT%02d:%02d:%02dZ", (int)y, m, d, (int)(rem / 3600),
           (int)(rem / 60 % 60), (int)(rem % 60));
  lua_pushstring(L, out);
  return 1;
}

/* Reads exactly width digits at *p. */
static int read_digits(const char **p, const char *end, int width, int *out) {
  int v = 0;
  for (int i = 0; i < width; i++) {
    if (*p >= end || **p < '0' || **p > '9') return -1;
    v = v * 10 + (*(*p)++ - '0');
  }
  *out = v;
  return 0;
}

static int expect(const char **p, const char *end, const char *accepted) {
  if (*p >= end) return -1;
  for (; *accepted; accepted++)
    if (**p == *accepted) {
      (*p)++;
      return 0;
    }
  return -1;
}

/* Parses RFC 3339 date-time into *out; returns NULL or what is wrong. */
static const char *parse_rfc3339(const char *s, size_t n, double *out) {
  const char *p = s, *end = s + n;
  int year, mon, day, hour, min, sec;
  if (read_digits(&p, end, 4, &year) || expect(&p, end, "-") || read_digits(&p, end, 2, &mon) ||
      expect(&p, end, "-") || read_digits(&p, end, 2, &day))
    return "expected a date YYYY-MM-DD";
  if (expect(&p, end, "Tt")) return "expected 'T' after the date";
  if (read_digits(&p, end, 2, &hour) || expect(&p, end, ":") || read_digits(&p, end, 2, &min) ||
      expect(&p, end, ":") || read_digits(&p, end, 2, &sec))
    return "expected a time hh:mm:ss";
  if (mon < 1 || mon > 12) return "month out of range";
  if (day < 1 || day > days_in_month(year, mon)) return "day out of range";
  /* second 60 is refused as Go (and so Kubernetes) does: leap seconds never reach the API */
  if (hour > 23 || min > 59 || sec > 59) return "time of day out of range";
  double frac = 0, scale = 0.1;
  if (p < end && *p == '.') {
    p++;
    if (p >= end || *p < '0' || *p > '9') return "expected digits after '.'";
    for (; p < end && *p >= '0' && *p <= '9'; p++, scale /= 10) frac += (*p - '0') * scale;
  }
  int offset = 0;
  if (expect(&p, end, "Zz") != 0) {
    if (p >= end || (*p != '+' && *p != '-')) return "expected 'Z' or an offset +hh:mm";
    int sign = *p++ == '-' ? -1 : 1, oh, om;
    if (read_digits(&p, end, 2, &oh) || expect(&p, end, ":") || read_digits(&p, end, 2, &om))
      return "expected an offset +hh:mm";
    if (oh > 23 || om > 59) return "offset out of range";
    offset = sign * (oh * 3600 + om * 60);
  }
  if (p != end) return "unexpected text after the time";
  int64_t secs = days_from_civil(year, mon, day) * 86400 + hour * 3600 + min * 60 + sec - offset;
  *out = (double)secs + frac;
  return NULL;
}

/* luaprov.time.parse_iso8601(s) -> seconds since the epoch (float) | nil, message, "InvalidTime"
 * Accepts RFC 3339 date-times: "2026-11-30T03:22:51Z", "2026-11-30T03:22:51.123456Z",
 * "2026-11-30T10:22:51+07:00" (any number of fraction digits; 't' and 'z' too).   [-1, +(1|3), m] */
static int time_parse_iso8601(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  double t;
  const char *why = parse_rfc3339(s, n, &t);
  if (why) {
    lua_pushfstring(L, "invalid RFC 3339 time \"%s\": %s", n > 64 ? "(too long to show)" : s, why);
    return lp_push_fail(L, lua_tostring(L, -1), "InvalidTime");
  }
  lua_pushnumber(L, t);
  return 1;
}

static const luaL_Reg time_funcs[] = {
    {"now", time_now},
    {"sleep", time_sleep},
    {"monotonic", time_monotonic},
    {"iso8601", time_iso8601},
    {"parse_iso8601", time_parse_iso8601},
    {NULL, NULL},
};

int lp_open_time(lua_State *L) {
  luaL_newlib(L, time_funcs);
  return 1;
}
