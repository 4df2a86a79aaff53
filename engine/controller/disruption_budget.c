/* NodePool disruption budgets (docs/controllers.md, Disruption): spec.disruption.budgets, each
 * {nodes, reasons?, schedule?, duration?}; absent means [{nodes: "10%"}].
 *
 * A budget applies to a reason when it lists no reasons or lists that one. It is active always, or,
 * with a schedule, for duration after each time the schedule fires (UTC): active at now when it fired
 * in (now - duration, now]. nodes is a count ("3") or a percentage of the pool's nodes rounded up
 * ("10%" of 5 is 1). What is allowed is the minimum over the active budgets that apply; no such budget
 * means no limit.
 *
 * Schedules understood: @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly, and five
 * fields "minute hour day-of-month month day-of-week" each a plain number or "*" (day of week 0-7,
 * both 0 and 7 Sunday; when both day fields are numbers either may match, as cron has it). Not
 * understood, so the budget counts as 0 (fail closed, as Karpenter does with a schedule it cannot
 * parse): lists (1,15), ranges (1-5), steps (0/15), names (MON, JAN), "?", "L", "@every" and time-zone
 * prefixes (CRON_TZ=...). So is a schedule without a duration or the other way round. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/disruption_internal.h"

/* Every schedule of the supported subset that fires at all fires within four years (29 February). */
#define MAX_HOURS_BACK (4 * 366 * 24)

typedef struct cron {
  int minute, hour, dom, month, dow; /* -1 = "*" */
} cron;

static const struct {
  const char *name, *fields;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},  {"@midnight", "0 0 * * *"}, {"@hourly", "0 * * * *"},
};

/* One field: "*" or a plain number in [lo, hi]. */
static int parse_field(const char *s, size_t n, int lo, int hi, int *out) {
  if (n == 1 && s[0] == '*') {
    *out = -1;
    return 0;
  }
  if (n == 0 || n > 2) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_cron(const char *schedule, cron *c) {
  for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
    if (strcmp(schedule, macros[i].name) == 0) schedule = macros[i].fields;
  static const int lo[] = {0, 0, 1, 1, 0}, hi[] = {59, 23, 31, 12, 7};
  int *fields[] = {&c->minute, &c->hour, &c->dom, &c->month, &c->dow};
  const char *p = schedule;
  for (int f = 0; f < 5; f++) {
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strcspn(p, " \t");
    if (parse_field(p, n, lo[f], hi[f], fields[f]) != 0) return -1;
    p += n;
  }
  while (*p == ' ' || *p == '\t') p++;
  return *p ? -1 : 0;
}

static int hour_matches(const cron *c, const struct tm *tm) {
  if (c->month >= 0 && tm->tm_mon + 1 != c->month) return 0;
  if (c->hour >= 0 && tm->tm_hour != c->hour) return 0;
  int dom = c->dom < 0 || tm->tm_mday == c->dom;
  int dow = c->dow < 0 || tm->tm_wday == c->dow % 7;
  return c->dom < 0 || c->dow < 0 ? dom && dow : dom || dow;
}

/* Non-zero when the schedule fired in (now - duration, now]: walks the hours back from now. */
static int fired_within(const cron *c, double duration, double now) {
  double start = now - duration;
  time_t hour = (time_t)(floor(now / 3600.0) * 3600.0);
  for (int i = 0; i < MAX_HOURS_BACK && (double)hour + 3600.0 > start; i++, hour -= 3600) {
    struct tm tm;
    gmtime_r(&hour, &tm);
    if (!hour_matches(c, &tm)) continue;
    double latest; /* the hour's last firing not after now */
    if (c->minute >= 0)
      latest = (double)hour + 60.0 * c->minute;
    else
      latest = (double)hour + 60.0 * floor(fmin(now - (double)hour, 3540.0) / 60.0);
    if (latest <= now && latest > start) return 1;
  }
  return 0;
}

/* 1 active, 0 not, -1 unreadable (*why set to a static description). */
static int budget_active(const json_t *budget, double now, const char **why) {
  const json_t *schedule = json_object_get(budget, "schedule"),
               *duration = json_object_get(budget, "duration");
  int has_schedule = schedule && !json_is_null(schedule), has_duration = duration && !json_is_null(duration);
  if (!has_schedule && !has_duration) return 1;
  if (has_schedule != has_duration) {
    *why = "schedule and duration must be set together";
    return -1;
  }
  cron c;
  if (!json_is_string(schedule) || parse_cron(json_string_value(schedule), &c) != 0) {
    *why = "the schedule is not one this engine understands (a @macro, or five fields each a number or *)";
    return -1;
  }
  double d = json_is_string(duration) ? lp_duration_parse(json_string_value(duration)) : -1;
  if (d < 0) {
    *why = "the duration is not a duration like 1h30m";
    return -1;
  }
  return fired_within(&c, d, now);
}

/* nodes as a count among total; -1 when it is neither "N" nor "P%" with P at most 100. */
static long long parse_nodes(const json_t *nodes, int total) {
  const char *s = json_string_value(nodes);
  size_t n = s ? strlen(s) : 0;
  int percent = n > 0 && s[n - 1] == '%';
  size_t digits = n - (size_t)percent;
  if (digits == 0 || digits > (percent ? 3 : 9)) return -1;
  long long v = 0;
  for (size_t i = 0; i < digits; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (!percent) return v;
  if (v > 100) return -1;
  return (long long)ceil((double)total * (double)v / 100.0);
}

static int applies(const json_t *budget, const char *reason) {
  const json_t *reasons = json_object_get(budget, "reasons");
  if (json_array_size(reasons) == 0) return 1;
  size_t i;
  const json_t *r;
  json_array_foreach(reasons, i, r) {
    if (json_is_string(r) && strcmp(json_string_value(r), reason) == 0) return 1;
  }
  return 0;
}

int dz_budget_allowed(const json_t *nodepool, const char *reason, int total, double now, char **problem) {
  *problem = NULL;
  const json_t *budgets =
      json_object_get(json_object_get(json_object_get(nodepool, "spec"), "disruption"), "budgets");
  if (!budgets || json_is_null(budgets)) return (int)ceil(total * 0.1);
  if (!json_is_array(budgets)) {
    *problem = lp_xstrdup("spec.disruption.budgets is not a list");
    return 0;
  }
  long long allowed = INT_MAX;
  size_t i;
  const json_t *b;
  json_array_foreach(budgets, i, b) {
    if (!applies(b, reason)) continue;
    const char *why = NULL;
    int active = budget_active(b, now, &why);
    if (active == 0) continue;
    long long n = active > 0 ? parse_nodes(json_object_get(b, "nodes"), total) : -1;
    if (n < 0) {
      if (!why) why = "nodes is neither a count (\"3\") nor a percentage (\"10%\")";
      if (!*problem) *problem = lp_xasprintf("budget %zu: %s", i + 1, why);
      n = 0;
    }
    if (n < allowed) allowed = n;
  }
  return (int)allowed;
}
