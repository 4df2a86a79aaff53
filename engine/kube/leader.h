/* Leader election with a coordination.k8s.io/v1 Lease, as client-go's tools/leaderelection does it, so
 * that of several controller replicas exactly one acts at a time.
 *
 * One attempt (client-go's tryAcquireOrRenew):
 *   GET the Lease.  404 -> CREATE it holding our identity (leaseTransitions 0).
 *   Otherwise, when its spec differs from the last one seen, remember it and stamp OUR monotonic clock as
 *   the observed time. The holder's renewTime is never compared with our clock: clocks of two machines
 *   disagree, the time we last saw the record change does not.
 *   Someone else holds it and observed + lease_duration is still ahead -> not leader this round.
 *   Else PUT (lp_kube_replace) the GET's object carrying its resourceVersion with holderIdentity = us and
 *   renewTime = now; acquireTime and leaseTransitions are kept when the holder was us, and when taking
 *   over acquireTime = now and leaseTransitions + 1. A 409 means another candidate wrote first: not
 *   leader this round.
 * Loops: a candidate attempts at once, then every retry_period + random [0, 1.2 x retry_period)
 * (client-go's JitterFactor); a leader renews every retry_period. When no renewal succeeded for
 * renew_deadline since the last one, the leader stops leading (on_stopped_leading) and goes back to being
 * a candidate; an owner that cannot stop its work cleanly should exit there, as client-go users do.
 * Replies of attempts begun before that moment are ignored, so a slow answer cannot resurrect a lost
 * leadership. Times written to the Lease are MicroTime (RFC 3339, UTC, 6 fractional digits).
 *
 * The client's HTTP timeout (lp_http_client_options.default_timeout_ms) should be below renew_deadline,
 * and its retries few: the renew deadline is enforced by a timer whatever the HTTP client does, but an
 * attempt stuck in a request delays the next one.
 * Metrics (in opts->metrics): luaprov_leader (gauge, 1 while leading) and luaprov_leader_transitions_total
 * (counter: times this process started or stopped leading). Log lines (logger "engine.kube.leader") on
 * every start and stop of leadership. Loop thread only. */
#ifndef LUAPROV_KUBE_LEADER_H
#define LUAPROV_KUBE_LEADER_H

#include "core/error.h"
#include "core/metrics.h"
#include "kube/client.h"

typedef struct lp_leader lp_leader;

#define LP_LEADER_DEFAULT_NAME      "luaprov-leader-election" /* the name examples/deploy/rbac.yaml allows */
#define LP_LEADER_LEASE_DURATION_MS 15000
#define LP_LEADER_RENEW_DEADLINE_MS 10000
#define LP_LEADER_RETRY_PERIOD_MS   2000
#define LP_LEADER_HEALTH_SLACK_MS   20000

typedef struct lp_leader_opts {
  const char *namespace; /* the Lease's namespace; required */
  const char *name;      /* NULL = LP_LEADER_DEFAULT_NAME */
  const char *identity;  /* NULL = "<hostname>_<16 random hex digits>" */
  /* 0 = the client-go defaults above; must satisfy lease_duration > renew_deadline > 1.2 x retry_period.
   * The Lease's leaseDurationSeconds is lease_duration rounded up to whole seconds (at least 1). */
  unsigned lease_duration_ms, renew_deadline_ms, retry_period_ms;
  lp_metrics *metrics; /* NULL = lp_metrics_default() */
  /* Callbacks (each may be NULL) run on the loop thread, never from inside lp_leader_start. They may
   * call lp_leader_stop. on_stopped_leading runs after every on_started_leading exactly once: on a
   * missed renew deadline, or inside lp_leader_stop. */
  void (*on_started_leading)(lp_leader *le, void *ud);
  void (*on_stopped_leading)(lp_leader *le, void *ud);
  /* The Lease names another holder than the last one seen (holder borrowed; "" when released). */
  void (*on_new_leader)(lp_leader *le, const char *holder, void *ud);
  void *ud;
} lp_leader_opts;

/* Validates opts and starts campaigning on c (borrowed; it must outlive the elector). Strings are copied.
 * Returns NULL with err code "InvalidConfig" (message naming the option) when opts are invalid. */
lp_leader *lp_leader_start(lp_kube_client *c, const lp_leader_opts *opts, lp_error **err);

/* Stops campaigning. When leading, on_stopped_leading runs before this returns (stop your work there);
 * then with release, once no request is in flight, the Lease is written with an empty holderIdentity and
 * leaseDurationSeconds 1 so another candidate takes over at its next attempt instead of waiting for the
 * lease to expire (a 409 there means it moved on already and is ignored). le is freed asynchronously and
 * on_done (may be NULL) runs after that, never from inside this call; no other callback runs after this
 * returns. Do not use le again. Safe from inside le's callbacks. */
void lp_leader_stop(lp_leader *le, int release, void (*on_done)(void *ud), void *ud);

/* Non-zero while we lead (between on_started_leading and on_stopped_leading). */
int lp_leader_is_leader(const lp_leader *le);

/* Liveness check (client-go's HealthzAdaptor): false only when we think we lead but the last successful
 * renewal is older than lease_duration + LP_LEADER_HEALTH_SLACK_MS, i.e. the renew loop is wedged.
 * _at takes an explicit monotonic time in seconds (lp_clock_monotonic) for tests. */
int lp_leader_healthy(const lp_leader *le);
int lp_leader_healthy_at(const lp_leader *le, double now);

/* Our identity and the holder named by the last Lease seen ("" before any, or when released); owned by
 * le. */
const char *lp_leader_identity(const lp_leader *le);
const char *lp_leader_holder(const lp_leader *le);

#endif
