/* (issue 41) Copies on the fake GPU against a plain memcpy of the same bytes
 * in the same process, side by side (best of ROUNDS each):
 *   warm     a device-to-host copy (cuMemcpyDtoH_v2) between device memory
 *            and pinned host memory that were both written before, against
 *            memcpy between the same two buffers
 *   park     what ebb does to park a model: a fresh pinned buffer
 *            (cuMemHostAlloc) filled from device memory, against a fresh
 *            malloc'd buffer filled by memcpy from the same device memory;
 *            both pay the first touch of their pages
 *   upload   a host-to-device copy (cuMemcpyHtoD_v2) into fresh device
 *            memory, against memcpy into a fresh malloc'd buffer
 * The ratio is memcpy's time / the driver's (1.0: as fast as memcpy); the
 * issue's target is >= 0.5 for the 4 GiB device-to-host copy.
 * The plain memcpy reads the device memory itself, which on the fake is host
 * memory of this process: so it runs on the fake only (EBB_BENCH_REAL_GPU=1
 * skips it). EBB_BENCH_COPY_MIB sets the size (default 4096). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define ROUNDS 3

typedef int (*fn_init)(unsigned);
typedef int (*fn_devget)(int *, int);
typedef int (*fn_ctxretain)(void **, int);
typedef int (*fn_ctxset)(void *);
typedef int (*fn_alloc)(uint64_t *, size_t);
typedef int (*fn_free)(uint64_t);
typedef int (*fn_hostalloc)(void **, size_t, unsigned);
typedef int (*fn_hostfree)(void *);
typedef int (*fn_dtoh)(void *, uint64_t, size_t);
typedef int (*fn_htod)(uint64_t, const void *, size_t);
typedef int (*fn_memset)(uint64_t, unsigned char, size_t);

static struct {
  fn_init init;
  fn_devget devget;
  fn_ctxretain retain;
  fn_ctxset set;
  fn_alloc alloc;
  fn_free free;
  fn_hostalloc hostalloc;
  fn_hostfree hostfree;
  fn_dtoh dtoh;
  fn_htod htod;
  fn_memset memset;
} cu;

static int load(const char *path) {
  void **slots[] = {(void **)&cu.init,      (void **)&cu.devget,   (void **)&cu.retain,
                    (void **)&cu.set,       (void **)&cu.alloc,    (void **)&cu.free,
                    (void **)&cu.hostalloc, (void **)&cu.hostfree, (void **)&cu.dtoh,
                    (void **)&cu.htod,      (void **)&cu.memset};
  const char *names[] = {"cuInit",          "cuDeviceGet",   "cuDevicePrimaryCtxRetain",
                         "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2",
                         "cuMemHostAlloc",  "cuMemFreeHost", "cuMemcpyDtoH_v2",
                         "cuMemcpyHtoD_v2", "cuMemsetD8_v2"};
  return bench_dlsyms("fakegpu_copy", path, slots, names, sizeof names / sizeof *names);
}

static int start(void) {
  int dev;
  void *ctx;
  if (cu.init(0) || cu.devget(&dev, 0) || cu.retain(&ctx, dev) || cu.set(ctx)) {
    fprintf(stderr, "fakegpu_copy: the driver did not start (cuInit, primary context)\n");
    return -1;
  }
  return 0;
}

/* memcpy through a volatile pointer, so a copy into a buffer freed right
 * after is not optimised away. */
static void *(*volatile plain_copy)(void *, const void *, size_t) = memcpy;

static void keep_min(double *b, double t) { *b = t < *b ? t : *b; }
static double gbs(size_t n, double s) { return (double)n / s / 1e9; }

static void report(const char *what, size_t n, double plain, double drv) {
  printf("  %-7s memcpy %6.2f GB/s  driver %6.2f GB/s  ratio %.2f\n", what, gbs(n, plain),
         gbs(n, drv), plain / drv);
}

/* warm: both buffers written before; best of ROUNDS. */
static int warm(uint64_t dev, size_t n, double *plain, double *drv) {
  void *host;
  if (cu.hostalloc(&host, n, 0))
    return -1;
  memset(host, 1, n);
  *plain = *drv = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = bench_now();
    plain_copy(host, (const void *)(uintptr_t)dev, n);
    double t1 = bench_now();
    if (cu.dtoh(host, dev, n))
      return -1;
    keep_min(plain, t1 - t0);
    keep_min(drv, bench_now() - t1);
  }
  return cu.hostfree(host);
}

/* park: fresh destinations each round. */
static int park(uint64_t dev, size_t n, double *plain, double *drv) {
  *plain = *drv = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = bench_now();
    char *m = malloc(n);
    if (!m)
      return -1;
    plain_copy(m, (const void *)(uintptr_t)dev, n);
    double t1 = bench_now();
    free(m);
    void *host;
    double t2 = bench_now();
    if (cu.hostalloc(&host, n, 0) || cu.dtoh(host, dev, n))
      return -1;
    double t3 = bench_now();
    cu.hostfree(host);
    keep_min(plain, t1 - t0);
    keep_min(drv, t3 - t2);
  }
  return 0;
}

/* upload: fresh device memory (or a fresh malloc) each round. */
static int upload(const void *src, size_t n, double *plain, double *drv) {
  *plain = *drv = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = bench_now();
    char *m = malloc(n);
    if (!m)
      return -1;
    plain_copy(m, src, n);
    double t1 = bench_now();
    free(m);
    uint64_t dev;
    double t2 = bench_now();
    if (cu.alloc(&dev, n) || cu.htod(dev, src, n))
      return -1;
    double t3 = bench_now();
    cu.free(dev);
    keep_min(plain, t1 - t0);
    keep_min(drv, t3 - t2);
  }
  return 0;
}

int main(void) {
  const char *lib = getenv("EBB_LIBCUDA");
  const char *mib_s = getenv("EBB_BENCH_COPY_MIB");
  size_t mib = mib_s ? strtoull(mib_s, NULL, 10) : 4096;
  const char *real = getenv("EBB_BENCH_REAL_GPU");
  if (!lib || !*lib || (real && !strcmp(real, "1"))) {
    printf("  (skipped: needs the fake GPU's EBB_LIBCUDA, as scripts/bench.sh sets it)\n");
    return 0;
  }
  if (!mib) {
    fprintf(stderr, "fakegpu_copy: EBB_BENCH_COPY_MIB must be a positive number of MiB\n");
    return 2;
  }
  size_t n = mib << 20;
  if (load(lib) || start())
    return 1;
  uint64_t dev;
  if (cu.alloc(&dev, n) || cu.memset(dev, 7, n)) {
    fprintf(stderr, "fakegpu_copy: cannot allocate and fill %zu MiB of device memory\n", mib);
    return 1;
  }
  printf("  %zu MiB, best of %d (ratio: memcpy time / driver time; target >= 0.50 for dtoh)\n", mib,
         ROUNDS);
  double plain, drv;
  if (warm(dev, n, &plain, &drv))
    return 1;
  report("dtoh", n, plain, drv);
  if (park(dev, n, &plain, &drv))
    return 1;
  report("park", n, plain, drv);
  if (upload((const void *)(uintptr_t)dev, n, &plain, &drv))
    return 1;
  report("upload", n, plain, drv);
  cu.free(dev);
  return 0;
}
