/* The two clocks the core reads, in seconds as doubles (microsecond resolution is kept for the next
 * few centuries, and doubles are what Lua, JSON and Prometheus use anyway).
 * Thread-safe; both never fail on Linux. */
#ifndef LUAPROV_CORE_CLOCK_H
#define LUAPROV_CORE_CLOCK_H

/* CLOCK_MONOTONIC: for durations, deadlines and TTLs; unaffected by NTP steps or an operator setting
 * the date. Its origin is arbitrary (usually boot), so never show it to a human. */
double lp_clock_monotonic(void);

/* CLOCK_REALTIME: seconds since the Unix epoch, for timestamps people and other systems read (log
 * lines, Kubernetes conditions). May jump; never use it to measure a duration. */
double lp_clock_wall(void);

/* Wall time t as RFC 3339 in UTC, the form Kubernetes objects carry: "2026-12-01T22:12:47Z" (a Time,
 * fraction dropped) or, with micro set, "2026-12-01T22:12:47.123456Z" (a MicroTime: Lease renewals).
 * out holds at least LP_RFC3339_SIZE bytes. */
#define LP_RFC3339_SIZE 32
void lp_clock_rfc3339(double t, int micro, char *out);

#endif
