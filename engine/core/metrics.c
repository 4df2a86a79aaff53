#include "core/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/error.h"
#include "core/log.h"

typedef enum { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM } metric_kind;

static const char *const kind_names[] = {"counter", "gauge", "histogram"};

typedef struct series {
  struct series *next;  /* creation order, for rendering */
  struct series *chain; /* hash bucket */
  uint64_t hash;
  char **values;           /* one per label name */
  double value;            /* counter or gauge; histogram sum */
  uint64_t count;          /* histogram observations */
  uint64_t *bucket_counts; /* histogram: per bucket, not cumulative; [nbuckets] is +Inf */
} series;

struct lp_metric {
  lp_metric *next;
  metric_kind kind;
  char *name;
  char *help;
  char **labels;
  size_t nlabels;
  double *buckets;
  size_t nbuckets;
  series *first, *last;
  series **table; /* chained, keyed by a hash of the joined label values; power-of-two size */
  size_t table_size;
  size_t nseries;
};

struct lp_metrics {
  lp_metric *first, *last;
};

static const double default_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

/* Misuse of the registry is a bug in the engine, found by the first test that runs the code; a
 * loud stop with the metric's name beats a /metrics page Prometheus rejects. */
__attribute__((noreturn, format(printf, 2, 3))) static void misuse(const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lp_error *e = lp_error_newv("Misuse", fmt, ap);
  va_end(ap);
  lp_errorlog("engine.metrics", "metrics registry misuse", LPF_STR("metric", name),
              LPF_STR("error", e->message));
  lp_error_free(e);
  abort();
}

lp_metrics *lp_metrics_new(void) {
  return lp_xcalloc(1, sizeof(lp_metrics));
}

static void free_family(lp_metric *f) {
  for (series *s = f->first, *next; s; s = next) {
    next = s->next;
    for (size_t i = 0; i < f->nlabels; i++) free(s->values[i]);
    free(s->values);
    free(s->bucket_counts);
    free(s);
  }
  for (size_t i = 0; i < f->nlabels; i++) free(f->labels[i]);
  free(f->labels);
  free(f->buckets);
  free(f->table);
  free(f->name);
  free(f->help);
  free(f);
}

void lp_metrics_free(lp_metrics *m) {
  if (!m) return;
  for (lp_metric *f = m->first, *next; f; f = next) {
    next = f->next;
    free_family(f);
  }
  free(m);
}

static lp_metrics *default_registry;

static void free_default(void) {
  lp_metrics_free(default_registry);
  default_registry = NULL;
}

lp_metrics *lp_metrics_default(void) {
  if (!default_registry) {
    default_registry = lp_metrics_new();
    atexit(free_default);
  }
  return default_registry;
}

static int valid_name(const char *s, int allow_colon) {
  if (!s || !*s) return 0;
  for (const char *p = s; *p; p++) {
    char c = *p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':') ||
             (p != s && c >= '0' && c <= '9');
    if (!ok) return 0;
  }
  return 1;
}

static size_t count_strings(const char *const *list) {
  size_t n = 0;
  if (list)
    while (list[n]) n++;
  return n;
}

static uint64_t hash_values(const char *const *values, size_t n) {
  uint64_t h = 14695981039346656037ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) {
    for (const unsigned char *p = (const unsigned char *)values[i]; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    /* 0xff never occurs in UTF-8, so ("ab","c") and ("a","bc") hash apart */
    h = (h ^ 0xff) * 1099511628211ULL;
  }
  return h;
}

static series *find_series(lp_metric *f, const char *const *values, uint64_t hash) {
  for (series *s = f->table[hash & (f->table_size - 1)]; s; s = s->chain) {
    if (s->hash != hash) continue;
    size_t i = 0;
    while (i < f->nlabels && strcmp(s->values[i], values[i]) == 0) i++;
    if (i == f->nlabels) return s;
  }
  return NULL;
}

static void grow_table(lp_metric *f) {
  size_t size = f->table_size * 2;
  series **table = lp_xcalloc(size, sizeof *table);
  for (series *s = f->first; s; s = s->next) {
    series **slot = &table[s->hash & (size - 1)];
    s->chain = *slot;
    *slot = s;
  }
  free(f->table);
  f->table = table;
  f->table_size = size;
}

static series *add_series(lp_metric *f, const char *const *values, uint64_t hash) {
  if (f->nseries + 1 > f->table_size / 4 * 3) grow_table(f);
  series *s = lp_xcalloc(1, sizeof *s);
  s->hash = hash;
  s->values = lp_xcalloc(f->nlabels ? f->nlabels : 1, sizeof(char *));
  for (size_t i = 0; i < f->nlabels; i++) s->values[i] = lp_xstrdup(values[i]);
  if (f->kind == KIND_HISTOGRAM) s->bucket_counts = lp_xcalloc(f->nbuckets + 1, sizeof(uint64_t));
  series **slot = &f->table[hash & (f->table_size - 1)];
  s->chain = *slot;
  *slot = s;
  if (f->last)
    f->last->next = s;
  else
    f->first = s;
  f->last = s;
  f->nseries++;
  return s;
}

/* The hot path of every instrumented call: one hash over the label values and a short chain walk. */
static series *lookup(lp_metric *f, const char *const *values, int create) {
  size_t n = count_strings(values);
  if (n != f->nlabels) misuse(f->name, "%zu label values given, the family has %zu labels", n, f->nlabels);
  uint64_t hash = hash_values(values, n);
  series *s = find_series(f, values, hash);
  return s || !create ? s : add_series(f, values, hash);
}

static void check_kind(lp_metric *f, metric_kind kind, const char *op) {
  if (f->kind != kind) misuse(f->name, "%s on a %s", op, kind_names[f->kind]);
}

static int same_labels(const lp_metric *f, const char *const *labels) {
  for (size_t i = 0; i < f->nlabels; i++)
    if (strcmp(f->labels[i], labels[i]) != 0) return 0;
  return 1;
}

static int same_buckets(const lp_metric *f, const double *buckets, size_t n) {
  return f->nbuckets == n && memcmp(f->buckets, buckets, n * sizeof *buckets) == 0;
}

static void check_labels(const char *name, const char *const *labels, size_t n, metric_kind kind) {
  for (size_t i = 0; i < n; i++) {
    if (!valid_name(labels[i], 0) || strncmp(labels[i], "__", 2) == 0)
      misuse(name, "invalid label name \"%s\"", labels[i]);
    if (kind == KIND_HISTOGRAM && strcmp(labels[i], "le") == 0)
      misuse(name, "label \"le\" is reserved for histogram buckets");
    for (size_t j = 0; j < i; j++)
      if (strcmp(labels[i], labels[j]) == 0) misuse(name, "label \"%s\" given twice", labels[i]);
  }
}

/* A trailing +Inf is dropped because every histogram has one implicitly. */
static size_t check_buckets(const char *name, const double *buckets, size_t n) {
  if (n > 0 && isinf(buckets[n - 1]) && buckets[n - 1] > 0) n--;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1])))
      misuse(name, "bucket bounds must be finite and strictly increasing");
  }
  return n;
}

static lp_metric *register_family(lp_metrics *m, metric_kind kind, const char *name, const char *help,
                                  const char *const *labels, const double *buckets, size_t nbuckets) {
  if (!valid_name(name, 1)) misuse(name ? name : "(null)", "invalid metric name");
  size_t nlabels = count_strings(labels);
  check_labels(name, labels, nlabels, kind);
  if (kind == KIND_HISTOGRAM) nbuckets = check_buckets(name, buckets, nbuckets);

  for (lp_metric *f = m->first; f; f = f->next) {
    if (strcmp(f->name, name) != 0) continue;
    if (f->kind != kind)
      misuse(name, "registered as a %s, asked for again as a %s", kind_names[f->kind], kind_names[kind]);
    if (f->nlabels != nlabels || !same_labels(f, labels))
      misuse(name, "registered again with other label names");
    if (kind == KIND_HISTOGRAM && !same_buckets(f, buckets, nbuckets))
      misuse(name, "registered again with other bucket bounds");
    return f;
  }

  lp_metric *f = lp_xcalloc(1, sizeof *f);
  f->kind = kind;
  f->name = lp_xstrdup(name);
  f->help = help && *help ? lp_xstrdup(help) : NULL;
  f->nlabels = nlabels;
  f->labels = lp_xcalloc(nlabels ? nlabels : 1, sizeof(char *));
  for (size_t i = 0; i < nlabels; i++) f->labels[i] = lp_xstrdup(labels[i]);
  if (kind == KIND_HISTOGRAM) {
    f->nbuckets = nbuckets;
    f->buckets = lp_xmalloc((nbuckets ? nbuckets : 1) * sizeof(double));
    if (nbuckets) memcpy(f->buckets, buckets, nbuckets * sizeof(double));
  }
  f->table_size = 8;
  f->table = lp_xcalloc(f->table_size, sizeof(series *));
  /* A family without labels has exactly one series; creating it now renders it (as 0) before the
   * first event, so a dashboard sees "no errors yet" rather than "no data". */
  if (nlabels == 0) lookup(f, LP_NO_LABELS, 1);
  if (m->last)
    m->last->next = f;
  else
    m->first = f;
  m->last = f;
  return f;
}

lp_metric *lp_metrics_find(lp_metrics *m, const char *name) {
  for (lp_metric *f = m->first; f; f = f->next)
    if (strcmp(f->name, name) == 0) return f;
  return NULL;
}

lp_metric *lp_metrics_counter(lp_metrics *m, const char *name, const char *help,
                              const char *const *label_names) {
  return register_family(m, KIND_COUNTER, name, help, label_names, NULL, 0);
}

lp_metric *lp_metrics_gauge(lp_metrics *m, const char *name, const char *help,
                            const char *const *label_names) {
  return register_family(m, KIND_GAUGE, name, help, label_names, NULL, 0);
}

lp_metric *lp_metrics_histogram(lp_metrics *m, const char *name, const char *help,
                                const char *const *label_names, const double *buckets, size_t nbuckets) {
  if (!buckets || nbuckets == 0) {
    buckets = default_buckets;
    nbuckets = sizeof default_buckets / sizeof default_buckets[0];
  }
  return register_family(m, KIND_HISTOGRAM, name, help, label_names, buckets, nbuckets);
}

void lp_counter_add(lp_metric *c, const char *const *label_values, double delta) {
  check_kind(c, KIND_COUNTER, "counter add");
  if (!(delta >= 0)) misuse(c->name, "counter decremented (delta %g)", delta);
  lookup(c, label_values, 1)->value += delta;
}

void lp_counter_inc(lp_metric *c, const char *const *label_values) {
  lp_counter_add(c, label_values, 1);
}

void lp_gauge_set(lp_metric *g, const char *const *label_values, double value) {
  check_kind(g, KIND_GAUGE, "gauge set");
  lookup(g, label_values, 1)->value = value;
}

void lp_gauge_add(lp_metric *g, const char *const *label_values, double delta) {
  check_kind(g, KIND_GAUGE, "gauge add");
  lookup(g, label_values, 1)->value += delta;
}

void lp_histogram_observe(lp_metric *h, const char *const *label_values, double value) {
  check_kind(h, KIND_HISTOGRAM, "histogram observe");
  series *s = lookup(h, label_values, 1);
  size_t i = 0;
  while (i < h->nbuckets && !(value <= h->buckets[i])) i++; /* NaN lands in +Inf, as in the Go client */
  s->bucket_counts[i]++;
  s->count++;
  s->value += value;
}

double lp_metric_value(lp_metric *metric, const char *const *label_values) {
  series *s = lookup(metric, label_values, 0);
  if (!s) return 0;
  return metric->kind == KIND_HISTOGRAM ? (double)s->count : s->value;
}

static void put_number(lp_buf *b, double v) {
  lp_buf_number(b, v, "NaN", "+Inf", "-Inf");
}

static void put_escaped(lp_buf *b, const char *s, int quotes) {
  for (; *s; s++) {
    if (*s == '\\')
      lp_buf_puts(b, "\\\\");
    else if (*s == '\n')
      lp_buf_puts(b, "\\n");
    else if (*s == '"' && quotes)
      lp_buf_puts(b, "\\\"");
    else
      lp_buf_putc(b, *s);
  }
}

/* name{l1="v1",l2="v2"[,le="bound"]} value */
static void put_sample(lp_buf *b, const lp_metric *f, const char *suffix, const series *s, const double *le,
                       double value) {
  lp_buf_puts(b, f->name);
  lp_buf_puts(b, suffix);
  if (f->nlabels || le) {
    lp_buf_putc(b, '{');
    for (size_t i = 0; i < f->nlabels; i++) {
      lp_buf_printf(b, "%s%s=\"", i ? "," : "", f->labels[i]);
      put_escaped(b, s->values[i], 1);
      lp_buf_putc(b, '"');
    }
    if (le) {
      lp_buf_puts(b, f->nlabels ? ",le=\"" : "le=\"");
      put_number(b, *le);
      lp_buf_putc(b, '"');
    }
    lp_buf_putc(b, '}');
  }
  lp_buf_putc(b, ' ');
  put_number(b, value);
  lp_buf_putc(b, '\n');
}

static void render_family(lp_buf *b, const lp_metric *f) {
  if (f->help) {
    lp_buf_printf(b, "# HELP %s ", f->name);
    put_escaped(b, f->help, 0);
    lp_buf_putc(b, '\n');
  }
  lp_buf_printf(b, "# TYPE %s %s\n", f->name, kind_names[f->kind]);
  for (const series *s = f->first; s; s = s->next) {
    if (f->kind != KIND_HISTOGRAM) {
      put_sample(b, f, "", s, NULL, s->value);
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= f->nbuckets; i++) {
      cumulative += s->bucket_counts[i];
      double le = i < f->nbuckets ? f->buckets[i] : INFINITY;
      put_sample(b, f, "_bucket", s, &le, (double)cumulative);
    }
    put_sample(b, f, "_sum", s, NULL, s->value);
    put_sample(b, f, "_count", s, NULL, (double)s->count);
  }
}

char *lp_metrics_render(lp_metrics *m, size_t *len) {
  lp_buf b = LP_BUF_INIT;
  /* terminates the page even when the registry is empty: lp_buf_take does not write a NUL into a
   * buffer nothing was appended to */
  lp_buf_append(&b, "", 0);
  for (const lp_metric *f = m->first; f; f = f->next) render_family(&b, f);
  return lp_buf_take(&b, len);
}
