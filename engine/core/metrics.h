/* A metrics registry rendered in the Prometheus text exposition format 0.0.4.
 *
 * A family (counter, gauge or histogram) has a name, a help text and a fixed list of label names;
 * a series is one combination of label values. Registering a family twice with the same name and
 * type returns the same family, so independent modules (and Lua caches created again after a hot
 * reload) can ask for it without coordination; the same name with another type or label list is a
 * programming error and aborts with a message (an error log line, then abort()). So do: a metric name
 * outside [a-zA-Z_:][a-zA-Z0-9_:]*, a label name outside [a-zA-Z_][a-zA-Z0-9_]* or starting with
 * "__", a repeated label name, "le" on a histogram, bucket bounds not strictly increasing, a
 * negative counter delta, the wrong number of label values, and an operation for another type.
 * A family without labels has its one series from registration on, so it renders 0 before the first
 * event; a family with labels renders only its HELP and TYPE lines until a series is used.
 * Loop thread only (the engine has one loop); no locking. Families live as long as the registry. */
#ifndef LUAPROV_CORE_METRICS_H
#define LUAPROV_CORE_METRICS_H

#include <stddef.h>

typedef struct lp_metrics lp_metrics;
typedef struct lp_metric lp_metric;

/* NULL-terminated list literal: LP_LABELS("script", "result"). */
#define LP_LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define LP_NO_LABELS   ((const char *const[]){NULL})

lp_metrics *lp_metrics_new(void);
void lp_metrics_free(lp_metrics *m);

/* The process-wide registry served on /metrics; created on first use, freed at exit. */
lp_metrics *lp_metrics_default(void);

/* label_names is NULL-terminated (LP_LABELS or LP_NO_LABELS); copied. help may be NULL (no HELP
 * line); on a re-registration the first help text stays. */
lp_metric *lp_metrics_counter(lp_metrics *m, const char *name, const char *help,
                              const char *const *label_names);
lp_metric *lp_metrics_gauge(lp_metrics *m, const char *name, const char *help,
                            const char *const *label_names);
/* buckets: increasing upper bounds, +Inf implied; NULL/0 selects the default latency buckets
 * (0.005 .. 10 s, as the Go client). A trailing +Inf is accepted and dropped. Re-registering needs
 * the same bounds. */
lp_metric *lp_metrics_histogram(lp_metrics *m, const char *name, const char *help,
                                const char *const *label_names, const double *buckets, size_t nbuckets);

/* label_values is NULL-terminated and must have as many values as the family has label names
 * (a mismatch aborts: it is a programming error); NULL is accepted for families without labels.
 * Values are copied on first use of a series, which is found by a hash of the values (cheap enough
 * for hot paths; no allocation once the series exists). */
void lp_counter_add(lp_metric *c, const char *const *label_values, double delta); /* delta >= 0 */
void lp_counter_inc(lp_metric *c, const char *const *label_values);
void lp_gauge_set(lp_metric *g, const char *const *label_values, double value);
void lp_gauge_add(lp_metric *g, const char *const *label_values, double delta);
void lp_histogram_observe(lp_metric *h, const char *const *label_values, double value);

/* The family registered under name, or NULL (tests read values through it). */
lp_metric *lp_metrics_find(lp_metrics *m, const char *name);

/* Current value of a counter or gauge series, or the count of a histogram series; 0 when the series
 * does not exist yet. For tests and for the engine's own decisions (e.g. reload status). */
double lp_metric_value(lp_metric *metric, const char *const *label_values);

/* Renders every family in registration order, series in creation order. Returns a NUL-terminated
 * string the caller frees; *len (optional) receives its length. */
char *lp_metrics_render(lp_metrics *m, size_t *len);

#define LP_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
