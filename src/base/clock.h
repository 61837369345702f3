/* ebb's one clock. Durations, deadlines, timeouts and ledger times all read
 * CLOCK_MONOTONIC through base_mono_ns (or its seconds view base_now), so two
 * times taken anywhere in ebb can be compared; base_wall_s is the calendar
 * time a person or a record reads (Unix seconds). */
#ifndef EBB_BASE_CLOCK_H
#define EBB_BASE_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t base_mono_ns(void);
/* The same clock in seconds. */
double base_now(void);
/* CLOCK_REALTIME in seconds since the Unix epoch. */
double base_wall_s(void);

#endif
