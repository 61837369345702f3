/* Small helpers for the benchmarks in bench/. */
#ifndef EBB_BENCH_UTIL_H
#define EBB_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "device/device.h"

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Opens spec or says why it is skipped (returns NULL). */
static inline ebb_device *bench_open(const char *spec) {
  ebb_device *d = NULL;
  if (ebb_device_open(spec, &d)) {
    printf("  (%s skipped: %s)\n", spec, ebb_errmsg());
    return NULL;
  }
  return d;
}

/* The devices to measure: the CPU device and the first CUDA device (the fake
 * GPU when scripts/bench.sh set EBB_LIBCUDA, else a real one if present). */
static const char *const bench_devices[] = {"cpu", "cuda:0"};
#define BENCH_NDEV 2

#endif
