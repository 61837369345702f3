/* ebb's one clock. Durations, deadlines, timeouts and ledger times all read
 * CLOCK_MONOTONIC through ebb_mono_ns (or its seconds view ebb_now), so two
 * times taken anywhere in ebb can be compared; ebb_wall_s is the calendar
 * time a person or a record reads (Unix seconds). */
#ifndef EBB_BASE_CLOCK_H
#define EBB_BASE_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t ebb_mono_ns(void);
/* The same clock in seconds. */
double ebb_now(void);
/* CLOCK_REALTIME in seconds since the Unix epoch. */
double ebb_wall_s(void);

#endif
