/* ebb's one clock (clock.h): CLOCK_MONOTONIC for durations and deadlines,
 * the wall clock for records. */
#include "base/clock.h"

#include <time.h>

uint64_t base_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double base_now(void) { return (double)base_mono_ns() / 1e9; }

double base_wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
