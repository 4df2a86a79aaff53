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

#endif
