/* (issue 12) Wake vs the alternatives, side by side in one run, per device.
 * Each round measures, one after the other (so a busy machine slows all
 * three alike):
 *   pinned copy   one cuMemcpyHtoD of the weights' size from a pinned buffer
 *                 into freshly mapped device memory (a new segment each
 *                 round: on the fake, whose device memory is host memory,
 *                 it pays the same first-touch page faults a wake pays):
 *                 the bandwidth a wake aims at
 *   sleep         mem_owner_sleep, then a release that gives the context back
 *   wake          mem_owner_wake_stats after the context was created again
 *                 (its time is shown apart as "context"): maps the segments
 *                 again and copies the weights back through pinned staging
 *   unload+load   the weights freed and the context released (an unload),
 *                 then the stage's load: the context again, its weights file
 *                 read (from the page cache), allocated and copied in (the
 *                 least a real stage's load does; it also parses, builds
 *                 kernels, warms up)
 * Ratios: wake / pinned copy bandwidth (goal >= 80 %), and (unload+load) /
 * (context + wake) time (goal >= 20x; on the fake a device copy is a host
 * memcpy, so a load that only reads a file and copies is a few wakes at
 * most: the real figure comes from scripts/gpu-check.sh on a GPU).
 * EBB_BENCH_SLEEP_MIB sets the size (default 1024). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "memory/memory.h"

#define ROUNDS 5

typedef struct best {
  double copy, sleep, ctx, wake, reload;
} best;

static double gibs(size_t n, double s) { return s > 0 ? (double)n / s / (1 << 30) : 0; }
static void keep_min(double *b, double t) { *b = t < *b ? t : *b; }

static void release_all(mem_allocator *a) {
  mem_release_result rr = {.size = sizeof rr};
  mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr);
}

/* The plain pinned copy into a segment mapped for it; -1 on failure. */
static double pinned_copy(dev_device *d, const unsigned char *host, size_t n) {
  void *pinned = NULL;
  dev_dseg seg;
  dev_seg_kind kind = dev_supports_vmm(d) ? EBB_SEG_VMM : EBB_SEG_PLAIN;
  if (dev_host_alloc(d, n, &pinned))
    return -1;
  memcpy(pinned, host, n);
  double t = -1;
  if (dev_seg_alloc(d, n, kind, &seg) == 0) {
    double t0 = bench_now();
    if (dev_copy_htod(d, seg.addr, pinned, n) == 0 && dev_synchronize(d) == 0)
      t = bench_now() - t0;
    dev_seg_free(d, &seg);
  }
  dev_host_free(d, pinned);
  return t;
}

/* Sleep, context released, context again, wake; the weights checked. */
static int sleep_wake(dev_device *d, mem_allocator *a, ebb_owner *o, uint64_t w, size_t n,
                      best *b) {
  mem_sleep_stats st = {.size = sizeof st};
  double t0 = bench_now();
  if (mem_owner_sleep(o, &st))
    return -1;
  release_all(a);
  double t1 = bench_now();
  if (dev_activate(d))
    return -1;
  double t2 = bench_now();
  if (mem_owner_wake_stats(o, &st) || dev_synchronize(d))
    return -1;
  double t3 = bench_now();
  ebb_owner *who = NULL;
  unsigned char probe[4096];
  if (mem_lookup(a, w, &who, NULL) || who != o ||
      dev_copy_dtoh(d, probe, w + n - sizeof probe, sizeof probe) || probe[0] != 0x3C ||
      probe[sizeof probe - 1] != 0x3C)
    return ebb_seterr(EBB_EIO, "the weights changed across sleep/wake");
  keep_min(&b->sleep, t1 - t0);
  keep_min(&b->ctx, t2 - t1);
  keep_min(&b->wake, t3 - t2);
  return 0;
}

/* Unload (free, context released), then load: context, the weights file
 * read, allocated, copied in. */
static int unload_load(dev_device *d, mem_allocator *a, ebb_owner *o, uint64_t *w,
                       const char *file, unsigned char *buf, size_t n, best *b) {
  double t0 = bench_now();
  mem_free(a, *w);
  *w = 0;
  release_all(a);
  int fd = open(file, O_RDONLY);
  size_t got = 0;
  ssize_t k = 1;
  while (fd >= 0 && got < n && (k = read(fd, buf + got, n - got)) > 0)
    got += (size_t)k;
  if (fd >= 0)
    close(fd);
  if (got != n)
    return ebb_seterr(EBB_EIO, "reading %s: %zu of %zu bytes", file, got, n);
  if (dev_activate(d) || mem_alloc(o, n, "bench", w) ||
      dev_copy_htod(d, *w, buf, n) || dev_synchronize(d))
    return -1;
  keep_min(&b->reload, bench_now() - t0);
  return 0;
}

static int write_file(const char *path, const unsigned char *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  size_t put = 0;
  ssize_t k = 1;
  while (fd >= 0 && put < n && (k = write(fd, p + put, n - put)) > 0)
    put += (size_t)k;
  if (fd >= 0)
    close(fd);
  return put == n ? 0 : ebb_seterr(EBB_EIO, "writing %s", path);
}

static void report(const char *spec, size_t n, const best *b) {
  double wake = gibs(n, b->wake), copy = gibs(n, b->copy);
  printf("  %-7s %5zu MiB  wake %6.2f GiB/s  pinned copy %6.2f GiB/s  wake/copy %4.0f %% "
         "(goal >= 80 %%)\n",
         spec, n >> 20, wake, copy, copy > 0 ? 100.0 * wake / copy : 0);
  printf("  %-7s %5s      sleep %.3f s  context %.3f s  wake %.3f s  unload+load %.3f s  "
         "(unload+load)/(context+wake) %.2fx (goal >= 20x)\n",
         spec, "", b->sleep, b->ctx, b->wake, b->reload, b->reload / (b->ctx + b->wake));
}

static void run(const char *spec, size_t n, const char *file) {
  dev_device *d = bench_open(spec);
  if (!d)
    return;
  mem_allocator *a = NULL;
  ebb_owner *o = NULL;
  uint64_t w = 0;
  unsigned char *host = malloc(n), *buf = malloc(n);
  best b = {1e9, 1e9, 1e9, 1e9, 1e9};
  mem_allocator_create(d, NULL, &a);
  mem_owner_create(a, "model", NULL, &o);
  mem_owner_mark_weights(o, 1);
  if (!host || !buf || mem_alloc(o, n, "bench", &w)) {
    printf("  %s: setup failed: %s\n", spec, ebb_errmsg());
    goto out;
  }
  memset(host, 0x3C, n);
  dev_copy_htod(d, w, host, n);
  for (int r = 0; r < ROUNDS; r++) {
    double t = pinned_copy(d, host, n);
    if (t < 0 || sleep_wake(d, a, o, w, n, &b) || unload_load(d, a, o, &w, file, buf, n, &b)) {
      printf("  %s: round %d failed: %s\n", spec, r, ebb_errmsg());
      goto out;
    }
    keep_min(&b.copy, t);
  }
  report(spec, n, &b);
out:
  if (w)
    mem_free(a, w);
  free(host);
  free(buf);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

int main(void) {
  const char *e = getenv("EBB_BENCH_SLEEP_MIB");
  size_t mib = e && atoi(e) > 0 ? (size_t)atoi(e) : 1024;
  size_t n = mib << 20;
  char dir[] = "/tmp/ebb-bench-sleep.XXXXXX", file[64];
  unsigned char *w = malloc(n);
  if (!w || !mkdtemp(dir)) {
    fprintf(stderr, "memory_sleep: no host memory or temp dir for %zu MiB\n", mib);
    free(w);
    return 1;
  }
  snprintf(file, sizeof file, "%s/weights.bin", dir);
  memset(w, 0x3C, n);
  int rc = write_file(file, w, n);
  free(w);
  if (rc == 0) {
    printf("sleep/wake of %zu MiB of weights (best of %d), side by side:\n", mib, ROUNDS);
    for (int i = 0; i < BENCH_NDEV; i++)
      run(bench_devices[i], n, file);
  } else {
    fprintf(stderr, "memory_sleep: %s\n", ebb_errmsg());
  }
  unlink(file);
  rmdir(dir);
  return rc ? 1 : 0;
}
