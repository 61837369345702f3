/* (1) An alloc+free pair through ebb's caching allocator against the same
 * pair straight to the driver (dev_seg_alloc/seg_free, the segment
 * kind the allocator uses), same sizes, measured side by side; plus the
 * cache's own cost per operation and what capturing a backtrace at every
 * allocation (EBB_MEM_BACKTRACE=1) adds. */
#include <stdlib.h>

#include "bench_util.h"
#include "memory/memory.h"

static double cache_pair_ns(mem_allocator *a, ebb_owner *o, size_t size, int iters) {
  uint64_t x;
  mem_alloc(o, size, "bench:warm", &x); /* segment in the cache */
  mem_free(a, x);
  double t0 = bench_now();
  for (int i = 0; i < iters; i++) {
    if (mem_alloc(o, size, "bench.c:1", &x) || mem_free(a, x)) {
      printf("  cache alloc failed: %s\n", ebb_errmsg());
      return -1;
    }
  }
  return (bench_now() - t0) / iters * 1e9;
}

static double driver_pair_ns(dev_device *d, size_t size, dev_seg_kind kind, int iters) {
  dev_dseg s;
  double t0 = bench_now();
  for (int i = 0; i < iters; i++) {
    if (dev_seg_alloc(d, size, kind, &s) || dev_seg_free(d, &s)) {
      printf("  driver alloc failed: %s\n", ebb_errmsg());
      return -1;
    }
  }
  return (bench_now() - t0) / iters * 1e9;
}

static void run(const char *spec) {
  dev_device *d = bench_open(spec);
  if (!d)
    return;
  dev_seg_kind kind = dev_supports_vmm(d) ? EBB_SEG_VMM : EBB_SEG_PLAIN;
  printf("\n%s (%s), driver segments: %s\n", spec, dev_name(d),
         kind == EBB_SEG_VMM ? "VMM" : "plain");
  printf("  %-10s %14s %14s %10s\n", "size", "cache ns/pair", "driver ns/pair", "driver/cache");
  static const size_t sizes[] = {4096, 256u << 10, 4u << 20, 64u << 20};
  static const char *names[] = {"4 KiB", "256 KiB", "4 MiB", "64 MiB"};
  mem_alloc_opts opts = {.size = sizeof opts, .seg_kind = EBB_SEG_AUTO, .backtraces = 0};
  mem_allocator *a = NULL;
  ebb_owner *o = NULL;
  mem_allocator_create(d, &opts, &a);
  mem_owner_create(a, "bench", NULL, &o);
  double cache_sum = 0;
  for (int i = 0; i < 4; i++) {
    double c = cache_pair_ns(a, o, sizes[i], 200000);
    double r = driver_pair_ns(d, sizes[i], kind, sizes[i] >= (64u << 20) ? 200 : 1000);
    cache_sum += c;
    printf("  %-10s %14.0f %14.0f %9.0fx\n", names[i], c, r, c > 0 ? r / c : 0);
  }
  printf("  cache cost per operation (alloc or free), mean over sizes: %.0f ns\n",
         cache_sum / 4 / 2);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  /* backtrace capture cost */
  opts.backtraces = 1;
  mem_allocator_create(d, &opts, &a);
  mem_owner_create(a, "bench-bt", NULL, &o);
  double with = cache_pair_ns(a, o, 256u << 10, 100000);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  opts.backtraces = 0;
  mem_allocator_create(d, &opts, &a);
  mem_owner_create(a, "bench-nobt", NULL, &o);
  double without = cache_pair_ns(a, o, 256u << 10, 100000);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  printf("  backtrace capture at alloc (EBB_MEM_BACKTRACE=1): %.0f ns/pair vs %.0f ns/pair "
         "(%.1fx, +%.0f ns per allocation)\n",
         with, without, without > 0 ? with / without : 0, with - without);
  dev_close(d);
}

int main(void) {
  printf("memory_alloc: alloc+free pairs, ebb's cache vs the driver\n");
  for (int i = 0; i < BENCH_NDEV; i++)
    run(bench_devices[i]);
  return 0;
}
