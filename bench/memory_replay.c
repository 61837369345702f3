/* (3) Replay of a realistic trace (bench/memory_trace.h: four models in
 * turn, weights then growing activations freed layer by layer, twice round):
 * fragmentation = peak reserved / peak allocated, with ebb's release after
 * each model and with the cache never trimmed; and the time per operation. */
#include "bench_util.h"
#include "memory_trace.h"

#include "base/log.h"

static void run(const char *spec) {
  ebb_device *d = bench_open(spec);
  if (!d)
    return;
  printf("\n%s\n", spec);
  for (int rel = 1; rel >= 0; rel--) {
    ebb_allocator *a = NULL;
    ebb_allocator_create(d, NULL, &a);
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
    ebb_allocator_destroy(a);
  }
  ebb_device_close(d);
}

int main(void) {
  ebb_log_set_level(EBB_LOG_ERROR);
  printf("memory_replay: fragmentation on a replayed model trace\n");
  for (int i = 0; i < BENCH_NDEV; i++)
    run(bench_devices[i]);
  return 0;
}
