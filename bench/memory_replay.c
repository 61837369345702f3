/* (3) Replay of a realistic trace (bench/memory_trace.h: four models in
 * turn, weights then growing activations freed layer by layer, twice round):
 * fragmentation = peak reserved / peak allocated, with ebb's release after
 * each model and with the cache never trimmed; and the time per operation.
 * Then what owner-affine segments cost: the same trace with each model's
 * allocations spread round-robin over 2, 8 and 32 owners alive at once (no
 * segment may hold two owners' blocks), as ratios to the one-owner run. */
#include "bench_util.h"
#include "memory_trace.h"

#include "base/log.h"

/* One never-trimmed replay with `owners` owners per model. */
static int replay_owners(dev_device *d, int owners, trace_result *r, double *us_op) {
  mem_allocator *a = NULL;
  if (mem_allocator_create(d, NULL, &a))
    return -1;
  double t0 = bench_now();
  int rc = trace_run_owners(a, 1.0, 2, 12, 0, owners, r);
  *us_op = (bench_now() - t0) * 1e6 / (double)(r->allocs + r->frees);
  mem_allocator_destroy(a);
  return rc;
}

static void affinity_cost(dev_device *d) {
  static const int counts[] = {1, 2, 8, 32};
  trace_result base;
  double base_us = 0;
  printf("  owner-affine segments, never trimmed, N owners alive per model:\n");
  for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
    trace_result r;
    double us = 0;
    if (replay_owners(d, counts[i], &r, &us)) {
      printf("    %2d owners: replay failed: %s\n", counts[i], ebb_errmsg());
      return;
    }
    if (i == 0) {
      base = r;
      base_us = us;
    }
    double frag = (double)r.peak_reserved / (double)r.peak_allocated;
    printf("    %2d owners: peak reserved %7.1f MiB  reserved/allocated %.3f  (x%.3f of one "
           "owner's)  %.2f us/op (x%.2f)\n",
           counts[i], r.peak_reserved / 1048576.0, frag,
           frag / ((double)base.peak_reserved / (double)base.peak_allocated), us,
           base_us > 0 ? us / base_us : 0);
  }
}

static void run(const char *spec) {
  dev_device *d = bench_open(spec);
  if (!d)
    return;
  printf("\n%s\n", spec);
  for (int rel = 1; rel >= 0; rel--) {
    mem_allocator *a = NULL;
    mem_allocator_create(d, NULL, &a);
    trace_result r;
    double t0 = bench_now();
    trace_run(a, 1.0, 2, 12, rel, &r);
    double t = bench_now() - t0;
    printf("  %-26s peak allocated %7.1f MiB  peak reserved %7.1f MiB  reserved/allocated "
           "%.3f  (%llu allocs, %llu failed, %.2f us/op)\n",
           rel ? "release after each model:" : "never trimmed:", r.peak_allocated / 1048576.0,
           r.peak_reserved / 1048576.0, (double)r.peak_reserved / (double)r.peak_allocated,
           (unsigned long long)r.allocs, (unsigned long long)r.failed,
           t * 1e6 / (double)(r.allocs + r.frees));
    mem_allocator_destroy(a);
  }
  affinity_cost(d);
  dev_close(d);
}

int main(void) {
  base_log_set_level(EBB_LOG_ERROR);
  printf("memory_replay: fragmentation on a replayed model trace\n");
  for (int i = 0; i < BENCH_NDEV; i++)
    run(bench_devices[i]);
  return 0;
}
