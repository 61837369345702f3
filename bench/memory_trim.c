/* (2) trim and release time with 1, 100 and 10 000 freed blocks in the cache.
 * Blocks of 1 MiB (20 to a 20 MiB segment) and of 12 MiB (a segment each,
 * up to 1000: the fake GPU's 80 GiB), so the cost per segment handed back
 * and the cost of walking blocks both show. */
#include <stdlib.h>

#include "bench_util.h"
#include "memory/memory.h"

static void noop(void *arg) { (void)arg; }

static void one(dev_device *d, size_t bsize, int n, int release) {
  mem_allocator *a = NULL;
  ebb_owner *o = NULL;
  mem_allocator_create(d, NULL, &a);
  mem_owner_create(a, "bench", NULL, &o);
  uint64_t *x = calloc((size_t)n, sizeof *x);
  for (int i = 0; i < n; i++)
    if (mem_alloc(o, bsize, "bench", &x[i])) {
      printf("  alloc %d failed: %s\n", i, ebb_errmsg());
      n = i;
      break;
    }
  double t0 = bench_now();
  for (int i = 0; i < n; i++)
    mem_free(a, x[i]);
  double tfree = bench_now() - t0;
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  uint64_t segs = st.segments.current, got = 0;
  t0 = bench_now();
  if (release) {
    mem_release_result r = {.size = sizeof r};
    mem_release(a, EBB_RELEASE_DEFAULT, &r);
    got = r.released_bytes;
  } else {
    mem_allocator_trim(a, &got);
  }
  double t = bench_now() - t0;
  printf("  %-8s %6d x %-7s %5llu segs  free %9.1f us  %s %9.1f us (%6.2f us/segment)  "
         "%llu MiB back\n",
         release ? "release" : "trim", n, bsize >= (12u << 20) ? "12 MiB" : "1 MiB",
         (unsigned long long)segs, tfree * 1e6, release ? "release" : "trim   ", t * 1e6,
         segs ? t * 1e6 / (double)segs : 0, (unsigned long long)(got >> 20));
  free(x);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
}

static void run(const char *spec) {
  dev_device *d = bench_open(spec);
  if (!d)
    return;
  printf("\n%s\n", spec);
  uint64_t h[10];
  for (int i = 0; i < 10; i++) /* ten registered callbacks, as stages would */
    mem_on_release("bench noop", noop, NULL, &h[i]);
  static const int counts[] = {1, 100, 10000};
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 3; i++) {
      one(d, 1u << 20, counts[i], r);
      one(d, 12u << 20, counts[i] > 1000 ? 1000 : counts[i], r);
    }
  for (int i = 0; i < 10; i++)
    mem_off_release(h[i]);
  dev_close(d);
}

int main(void) {
  printf("memory_trim: time to hand cached memory back (trim / release)\n");
  for (int i = 0; i < BENCH_NDEV; i++)
    run(bench_devices[i]);
  return 0;
}
