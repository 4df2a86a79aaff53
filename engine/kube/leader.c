/* Lease leader election (see leader.h). One attempt at a time: `busy` while its GET, CREATE or PUT is in
 * flight; `epoch` counts lost leaderships so replies of attempts begun before a loss are ignored. Two
 * timers: `tick` starts the next attempt, `deadline` ends a leadership that was not renewed in time. */
#include "kube/leader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"

#define LOGGER "engine.kube.leader"

struct lp_leader {
  lp_kube_client *c;
  char *namespace, *name, *identity;
  unsigned duration_ms, deadline_ms, retry_ms;
  lp_leader_opts cb; /* callbacks and ud only */
  lp_metric *gauge, *transitions;
  uv_timer_t tick, deadline;
  int leading, busy, stopping, release, closing;
  unsigned epoch, attempt_epoch;
  json_t *lease;      /* the last Lease object the server gave us, or NULL */
  char *observed_raw; /* the last spec seen, serialized with sorted keys */
  char *holder;       /* its holderIdentity */
  double observed_at; /* our monotonic clock when observed_raw last changed */
  double renewed_at;  /* our monotonic clock at the last successful write */
  void (*on_done)(void *ud);
  void *on_done_ud;
};

/* ---- small helpers ---- */

static double now_s(void) {
  return lp_clock_monotonic();
}

/* MicroTime: RFC 3339 in UTC with exactly six fractional digits. */
static char *default_identity(void) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0 || !*host) snprintf(host, sizeof host, "unknown");
  unsigned char rnd[8] = {0};
  if (uv_random(NULL, NULL, rnd, sizeof rnd, 0, NULL) != 0) {
    unsigned long long x = (unsigned long long)(now_s() * 1e6) ^ (unsigned long long)getpid() << 32;
    memcpy(rnd, &x, sizeof rnd);
  }
  char hex[17];
  for (size_t i = 0; i < sizeof rnd; i++) snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
  return lp_xasprintf("%s_%s", host, hex);
}

/* client-go's wait.Jitter(retry, 1.2): retry + random [0, 1.2 x retry). */
static uint64_t jittered(unsigned retry_ms) {
  uint32_t r = 0;
  if (uv_random(NULL, NULL, &r, sizeof r, 0, NULL) != 0) r = (uint32_t)rand();
  return retry_ms + (uint64_t)((double)r / 4294967296.0 * 1.2 * retry_ms);
}

static lp_kube_ref lease_ref(const lp_leader *le) {
  return (lp_kube_ref){.group = "coordination.k8s.io",
                       .version = "v1",
                       .resource = "leases",
                       .namespace = le->namespace,
                       .name = le->name};
}

static void keep_lease(lp_leader *le, json_t *obj) {
  if (!json_is_object(obj)) return;
  json_decref(le->lease);
  le->lease = json_incref(obj);
}

static json_t *spec_of(const json_t *lease) {
  return json_object_get(lease, "spec");
}

static const char *holder_of(const json_t *spec) {
  const char *h = json_string_value(json_object_get(spec, "holderIdentity"));
  return h ? h : "";
}

/* Remembers spec when it differs from the last one seen, stamping our clock. */
static void observe(lp_leader *le, const json_t *spec, double now) {
  char *raw = spec ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  if (!raw) raw = lp_xstrdup("{}");
  if (le->observed_raw && strcmp(raw, le->observed_raw) == 0) {
    free(raw);
    return;
  }
  free(le->observed_raw);
  le->observed_raw = raw;
  le->observed_at = now;
  const char *h = holder_of(spec);
  if (strcmp(h, le->holder) != 0) {
    free(le->holder);
    le->holder = lp_xstrdup(h);
    if (le->cb.on_new_leader && !le->stopping) le->cb.on_new_leader(le, le->holder, le->cb.ud);
  }
}

static const char *lease_label(const lp_leader *le, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s", le->namespace, le->name);
  return buf;
}

static void set_leading(lp_leader *le, int leading, const char *reason) {
  le->leading = leading;
  lp_gauge_set(le->gauge, NULL, leading);
  lp_counter_inc(le->transitions, NULL);
  char lease[300];
  lease_label(le, lease, sizeof lease);
  if (leading) {
    lp_info(LOGGER, "started leading", LPF_STR("lease", lease), LPF_STR("identity", le->identity));
    if (le->cb.on_started_leading) le->cb.on_started_leading(le, le->cb.ud);
  } else {
    lp_warn(LOGGER, "stopped leading", LPF_STR("lease", lease), LPF_STR("identity", le->identity),
            LPF_STR("reason", reason));
    if (le->cb.on_stopped_leading) le->cb.on_stopped_leading(le, le->cb.ud);
  }
}

/* ---- the attempt ---- */

static void attempt(uv_timer_t *t);
static void on_deadline(uv_timer_t *t);
static void maybe_finish(lp_leader *le);

/* Ends an attempt: schedules the next one, then reports a leadership that just began. */
static void attempt_done(lp_leader *le, int ok) {
  uv_timer_start(&le->tick, attempt, le->leading || ok ? le->retry_ms : jittered(le->retry_ms), 0);
  if (!ok) return;
  le->renewed_at = now_s();
  uv_timer_start(&le->deadline, on_deadline, le->deadline_ms, 0);
  if (!le->leading) set_leading(le, 1, NULL);
}

static void attempt_failed(lp_leader *le, const char *what, const lp_error *err) {
  char lease[300];
  lp_debug(LOGGER, "attempt failed", LPF_STR("lease", lease_label(le, lease, sizeof lease)),
           LPF_STR("step", what), LPF_STR("error", err ? err->message : ""));
  attempt_done(le, 0);
}

/* Common entry of every reply: returns 1 when the attempt should go on. */
static int reply_current(lp_leader *le, const lp_kube_reply *r) {
  le->busy = 0;
  if (r->object) keep_lease(le, r->object); /* when stopping, a renewal that landed: release needs it */
  if (le->stopping) {
    maybe_finish(le);
    return 0;
  }
  if (le->attempt_epoch != le->epoch) { /* begun before a lost leadership: its outcome is stale */
    attempt_done(le, 0);
    return 0;
  }
  return 1;
}

static void on_written(const lp_kube_reply *r, void *ud) {
  lp_leader *le = ud;
  if (!reply_current(le, r)) return;
  if (r->error) {
    /* Conflict / AlreadyExists: another candidate wrote first this round */
    attempt_failed(le, "write", r->error);
    return;
  }
  observe(le, spec_of(r->object), now_s());
  if (!le->stopping) attempt_done(le, 1); /* on_new_leader may have stopped us */
}

static json_t *our_record(const lp_leader *le, const char *acquire, const char *renew,
                          json_int_t transitions) {
  json_int_t secs = (le->duration_ms + 999) / 1000;
  return json_pack("{s:s,s:I,s:s,s:s,s:I}", "holderIdentity", le->identity, "leaseDurationSeconds",
                   secs < 1 ? (json_int_t)1 : secs, "acquireTime", acquire, "renewTime", renew,
                   "leaseTransitions", transitions);
}

static void on_get(const lp_kube_reply *r, void *ud) {
  lp_leader *le = ud;
  if (!reply_current(le, r)) return;
  lp_kube_ref ref = lease_ref(le);
  char now_text[LP_RFC3339_SIZE];
  lp_clock_rfc3339(lp_clock_wall(), 1, now_text);
  if (r->error && strcmp(r->error->code, "NotFound") == 0) {
    json_t *obj = json_pack("{s:s,s:s,s:{s:s,s:s},s:o}", "apiVersion", "coordination.k8s.io/v1", "kind",
                            "Lease", "metadata", "name", le->name, "namespace", le->namespace, "spec",
                            our_record(le, now_text, now_text, 0));
    le->busy = 1;
    lp_kube_create(le->c, &ref, obj, on_written, le);
    json_decref(obj);
    return;
  }
  if (r->error) {
    attempt_failed(le, "get", r->error);
    return;
  }
  double now = now_s();
  const json_t *spec = spec_of(r->object);
  observe(le, spec, now);
  if (le->stopping) return; /* on_new_leader stopped us; lp_leader_stop finished the rest */
  const char *holder = holder_of(spec);
  int ours = strcmp(holder, le->identity) == 0;
  if (*holder && !ours && le->observed_at + le->duration_ms / 1000.0 > now) {
    attempt_done(le, 0); /* held by someone else and not expired by our clock */
    return;
  }
  json_int_t transitions = json_integer_value(json_object_get(spec, "leaseTransitions"));
  const char *acquire = json_string_value(json_object_get(spec, "acquireTime"));
  json_t *obj = json_deep_copy(r->object);
  json_object_set_new(obj, "spec",
                      ours ? our_record(le, acquire ? acquire : now_text, now_text, transitions)
                           : our_record(le, now_text, now_text, transitions + 1));
  le->busy = 1;
  lp_kube_replace(le->c, &ref, obj, on_written, le); /* carries the GET's resourceVersion */
  json_decref(obj);
}

static void attempt(uv_timer_t *t) {
  lp_leader *le = t->data;
  if (le->busy || le->stopping) return;
  le->busy = 1;
  le->attempt_epoch = le->epoch;
  lp_kube_ref ref = lease_ref(le);
  lp_kube_get(le->c, &ref, on_get, le);
}

static void on_deadline(uv_timer_t *t) {
  lp_leader *le = t->data;
  if (!le->leading || le->stopping) return;
  le->epoch++;
  set_leading(le, 0, "renew deadline exceeded");
}

/* ---- public ---- */

lp_leader *lp_leader_start(lp_kube_client *c, const lp_leader_opts *opts, lp_error **err) {
  unsigned duration = opts->lease_duration_ms ? opts->lease_duration_ms : LP_LEADER_LEASE_DURATION_MS,
           deadline = opts->renew_deadline_ms ? opts->renew_deadline_ms : LP_LEADER_RENEW_DEADLINE_MS,
           retry = opts->retry_period_ms ? opts->retry_period_ms : LP_LEADER_RETRY_PERIOD_MS;
  if (!c || !opts->namespace || !*opts->namespace) {
    lp_error_set(err, "InvalidConfig", "leader election: a client and the Lease's namespace are required");
    return NULL;
  }
  if (duration <= deadline) {
    lp_error_set(err, "InvalidConfig",
                 "leader election: lease duration %u ms must exceed renew deadline %u ms", duration,
                 deadline);
    return NULL;
  }
  if ((unsigned long long)deadline * 10 <= (unsigned long long)retry * 12) {
    lp_error_set(err, "InvalidConfig",
                 "leader election: renew deadline %u ms must exceed 1.2 x retry period %u ms", deadline,
                 retry);
    return NULL;
  }
  lp_leader *le = lp_xcalloc(1, sizeof *le);
  le->c = c;
  le->namespace = lp_xstrdup(opts->namespace);
  le->name = lp_xstrdup(opts->name && *opts->name ? opts->name : LP_LEADER_DEFAULT_NAME);
  le->identity = opts->identity && *opts->identity ? lp_xstrdup(opts->identity) : default_identity();
  le->holder = lp_xstrdup("");
  le->duration_ms = duration;
  le->deadline_ms = deadline;
  le->retry_ms = retry;
  le->cb = *opts;
  le->cb.namespace = le->cb.name = le->cb.identity = NULL;
  lp_metrics *m = opts->metrics ? opts->metrics : lp_metrics_default();
  le->gauge =
      lp_metrics_gauge(m, "luaprov_leader", "1 while this process holds the leader Lease.", LP_NO_LABELS);
  le->transitions = lp_metrics_counter(m, "luaprov_leader_transitions_total",
                                       "Times this process started or stopped leading.", LP_NO_LABELS);
  lp_gauge_set(le->gauge, NULL, 0);
  uv_loop_t *loop = lp_kube_client_loop(c);
  uv_timer_init(loop, &le->tick);
  uv_timer_init(loop, &le->deadline);
  le->tick.data = le->deadline.data = le;
  uv_timer_start(&le->tick, attempt, 0, 0);
  return le;
}

static void on_timer_closed(uv_handle_t *h) {
  lp_leader *le = h->data;
  if (--le->closing) return;
  void (*done)(void *) = le->on_done;
  void *ud = le->on_done_ud;
  json_decref(le->lease);
  free(le->observed_raw);
  free(le->holder);
  free(le->namespace);
  free(le->name);
  free(le->identity);
  free(le);
  if (done) done(ud);
}

static void on_released(const lp_kube_reply *r, void *ud) {
  lp_leader *le = ud;
  char lease[300];
  if (r->error)
    lp_debug(LOGGER, "release failed", LPF_STR("lease", lease_label(le, lease, sizeof lease)),
             LPF_STR("error", r->error->message));
  else
    lp_info(LOGGER, "released", LPF_STR("lease", lease_label(le, lease, sizeof lease)),
            LPF_STR("identity", le->identity));
  le->busy = 0;
  maybe_finish(le);
}

/* Once no request is in flight: the release write if one is due, then the timers, then free. */
static void maybe_finish(lp_leader *le) {
  if (le->busy || le->closing) return;
  if (le->release) {
    le->release = 0;
    if (le->lease && strcmp(holder_of(spec_of(le->lease)), le->identity) == 0) {
      json_t *obj = json_deep_copy(le->lease);
      json_t *spec = json_object_get(obj, "spec");
      char now_text[LP_RFC3339_SIZE];
      lp_clock_rfc3339(lp_clock_wall(), 1, now_text);
      json_object_set_new(spec, "holderIdentity", json_string(""));
      json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
      json_object_set_new(spec, "renewTime", json_string(now_text));
      json_object_set_new(spec, "acquireTime", json_string(now_text));
      lp_kube_ref ref = lease_ref(le);
      le->busy = 1;
      lp_kube_replace(le->c, &ref, obj, on_released, le);
      json_decref(obj);
      return;
    }
  }
  le->closing = 2;
  uv_close((uv_handle_t *)&le->tick, on_timer_closed);
  uv_close((uv_handle_t *)&le->deadline, on_timer_closed);
}

void lp_leader_stop(lp_leader *le, int release, void (*on_done)(void *ud), void *ud) {
  if (le->stopping) return;
  le->stopping = 1;
  le->on_done = on_done;
  le->on_done_ud = ud;
  uv_timer_stop(&le->tick);
  uv_timer_stop(&le->deadline);
  le->release = release; /* written only when the last Lease seen names us */
  if (le->leading) set_leading(le, 0, "stopped");
  maybe_finish(le);
}

int lp_leader_is_leader(const lp_leader *le) {
  return le->leading;
}

int lp_leader_healthy_at(const lp_leader *le, double now) {
  if (!le->leading) return 1;
  return now - le->renewed_at <= (le->duration_ms + LP_LEADER_HEALTH_SLACK_MS) / 1000.0;
}

int lp_leader_healthy(const lp_leader *le) {
  return lp_leader_healthy_at(le, now_s());
}

const char *lp_leader_identity(const lp_leader *le) {
  return le->identity;
}

const char *lp_leader_holder(const lp_leader *le) {
  return le->holder;
}
