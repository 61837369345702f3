/* (issues 41, 42) The fake GPU's argument checks against the number of VMM
 * ranges a process holds: ebb reserves and maps one range per allocation,
 * and every copy, memset and launch on the fake checks its addresses against
 * them. One process makes FEW ranges (2 MiB each, mapped read-write) and
 * times CALLS memsets of 64 bytes at random ranges, then makes ranges up to
 * MANY and times the same number again, side by side:
 *   ratio = time per call with MANY ranges / with FEW (1.0: the check does
 *   not grow with the ranges; it walked a list of every range until
 *   2026-12-07, about 13 at these sizes).
 * Runs on the fake only (EBB_LIBCUDA, as scripts/bench.sh sets it;
 * EBB_BENCH_REAL_GPU=1 skips it). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define FEW 100
#define MANY 4000
#define CALLS 200000
#define RANGE (2u << 20)

typedef struct {
  int type, handle_types, loc_type, loc_id;
  void *win32;
  unsigned char alloc_flags[8];
} prop_t; /* CUmemAllocationProp */
typedef struct {
  int loc_type, loc_id, flags;
} access_t; /* CUmemAccessDesc */

static struct {
  int (*init)(unsigned);
  int (*retain)(void **, int);
  int (*set)(void *);
  int (*reserve)(uint64_t *, size_t, size_t, uint64_t, unsigned long long);
  int (*create)(uint64_t *, size_t, const prop_t *, unsigned long long);
  int (*map)(uint64_t, size_t, size_t, uint64_t, unsigned long long);
  int (*access)(uint64_t, size_t, const access_t *, size_t);
  int (*unmap)(uint64_t, size_t);
  int (*addrfree)(uint64_t, size_t);
  int (*release)(uint64_t);
  int (*memset)(uint64_t, unsigned char, size_t);
} cu;

static int load(const char *path) {
  void **slots[] = {(void **)&cu.init,    (void **)&cu.retain, (void **)&cu.set,
                    (void **)&cu.reserve, (void **)&cu.create, (void **)&cu.map,
                    (void **)&cu.access,  (void **)&cu.unmap,  (void **)&cu.addrfree,
                    (void **)&cu.release, (void **)&cu.memset};
  const char *names[] = {"cuInit",           "cuDevicePrimaryCtxRetain",
                         "cuCtxSetCurrent",  "cuMemAddressReserve",
                         "cuMemCreate",      "cuMemMap",
                         "cuMemSetAccess",   "cuMemUnmap",
                         "cuMemAddressFree", "cuMemRelease",
                         "cuMemsetD8_v2"};
  return bench_dlsyms("fakegpu_ranges", path, slots, names, sizeof names / sizeof *names);
}

/* Ranges [from, to) of va, each mapping the one physical allocation h. */
static int make(uint64_t *va, int from, int to, uint64_t h) {
  access_t rw = {1, 0, 3}; /* device 0, PROT_READWRITE */
  for (int i = from; i < to; i++)
    if (cu.reserve(&va[i], RANGE, 0, 0, 0) || cu.map(va[i], RANGE, 0, h, 0) ||
        cu.access(va[i], RANGE, &rw, 1))
      return -1;
  return 0;
}

/* memset through a volatile pointer: the plain writes are not optimised
 * away. */
static void *(*volatile plain_set)(void *, int, size_t) = memset;

/* Seconds per memset of 64 bytes at a random one of the first n ranges
 * (each range written once before, so no first touch of a page is timed):
 * through the driver, or (plain) by the CPU at the same addresses. */
static double per_call(const uint64_t *va, int n, int plain) {
  unsigned s = 12345;
  for (int i = 0; i < n; i++)
    if (cu.memset(va[i], 1, 64))
      return -1;
  double t0 = bench_now();
  for (int k = 0; k < CALLS; k++) {
    s = s * 1103515245u + 12345u;
    uint64_t at = va[(s >> 8) % (unsigned)n];
    if (plain)
      plain_set((void *)(uintptr_t)at, 1, 64);
    else if (cu.memset(at, 1, 64))
      return -1;
  }
  return (bench_now() - t0) / CALLS;
}

int main(void) {
  const char *lib = getenv("EBB_LIBCUDA");
  const char *real = getenv("EBB_BENCH_REAL_GPU");
  if (!lib || !*lib || (real && !strcmp(real, "1"))) {
    printf("  (skipped: needs the fake GPU's EBB_LIBCUDA, as scripts/bench.sh sets it)\n");
    return 0;
  }
  static uint64_t va[MANY];
  void *ctx;
  uint64_t h;
  prop_t prop = {.type = 1, .loc_type = 1}; /* pinned, on device 0 */
  if (load(lib) || cu.init(0) || cu.retain(&ctx, 0) || cu.set(ctx) ||
      cu.create(&h, RANGE, &prop, 0) || make(va, 0, FEW, h)) {
    fprintf(stderr, "fakegpu_ranges: the driver did not start or make %d VMM ranges\n", FEW);
    return 1;
  }
  double few = per_call(va, FEW, 0), few_plain = per_call(va, FEW, 1);
  if (make(va, FEW, MANY, h)) {
    fprintf(stderr, "fakegpu_ranges: cannot make %d VMM ranges\n", MANY);
    return 1;
  }
  double many = per_call(va, MANY, 0), many_plain = per_call(va, MANY, 1);
  if (few < 0 || many < 0) {
    fprintf(stderr, "fakegpu_ranges: a memset on a mapped range was refused\n");
    return 1;
  }
  printf("  cuMemsetD8 of 64 B at random ranges, %d calls each (plain: the CPU's memset at the "
         "same addresses)\n",
         CALLS);
  printf("  %4d ranges  driver %6.2f us/call  plain %5.2f us/call\n", FEW, few * 1e6,
         few_plain * 1e6);
  printf("  %4d ranges  driver %6.2f us/call  plain %5.2f us/call\n", MANY, many * 1e6,
         many_plain * 1e6);
  printf("  ratio %d/%d ranges, driver time per call: %.2f (1.0: independent of the ranges)\n",
         MANY, FEW, many / few);
  for (int i = 0; i < MANY; i++)
    if (cu.unmap(va[i], RANGE) || cu.addrfree(va[i], RANGE))
      return 1;
  return cu.release(h) ? 1 : 0;
}
