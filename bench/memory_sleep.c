/* (issue 12) Wake vs the alternatives, side by side in one run, per device:
 *   wake          ebb_owner_wake of an owner whose weights were put to sleep
 *                 (and whose context was released), GiB/s of weights restored
 *   pinned copy   one host-to-device copy of the same bytes from a pinned
 *                 buffer into mapped memory: the bandwidth a wake aims at
 *   unload+load   the owner's memory freed, trimmed and the context released
 *                 (an unload), then allocated again and the weights copied in
 *                 from pageable host memory (the least any load does: a real
 *                 stage also reads and parses its files)
 * Ratios: wake / pinned copy bandwidth, (unload+load) / (sleep+wake) time.
 * EBB_BENCH_SLEEP_MIB sets the size (default 1024). */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "memory/memory.h"

#define ROUNDS 3

static double gibs(size_t n, double s) { return s > 0 ? (double)n / s / (1 << 30) : 0; }

static void release_all(ebb_allocator *a) {
  ebb_release_result rr = {.size = sizeof rr};
  ebb_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr);
}

static void run(const char *spec, size_t n) {
  ebb_device *d = bench_open(spec);
  if (!d)
    return;
  ebb_allocator *a = NULL;
  ebb_owner *o = NULL;
  uint64_t w = 0;
  void *pinned = NULL;
  unsigned char *host = malloc(n);
  ebb_allocator_create(d, NULL, &a);
  ebb_owner_create(a, "model", NULL, &o);
  ebb_owner_mark_weights(o, 1);
  if (!host || ebb_mem_alloc(o, n, "bench", &w) || ebb_device_host_alloc(d, n, &pinned)) {
    printf("  %s: setup failed: %s\n", spec, ebb_errmsg());
    goto out;
  }
  memset(host, 0x3C, n);
  memcpy(pinned, host, n);
  double best_copy = 1e9, best_wake = 1e9, best_sleep = 1e9, best_reload = 1e9;
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = bench_now();
    ebb_device_copy_htod(d, w, pinned, n);
    ebb_device_synchronize(d);
    double t = bench_now() - t0;
    best_copy = t < best_copy ? t : best_copy;
  }
  ebb_device_host_free(d, pinned);
  pinned = NULL;
  for (int r = 0; r < ROUNDS; r++) {
    ebb_sleep_stats st = {.size = sizeof st};
    double t0 = bench_now();
    if (ebb_owner_sleep(o, &st)) {
      printf("  %s: sleep failed: %s\n", spec, ebb_errmsg());
      goto out;
    }
    release_all(a);
    double ts = bench_now() - t0;
    t0 = bench_now();
    if (ebb_owner_wake_stats(o, &st)) {
      printf("  %s: wake failed: %s\n", spec, ebb_errmsg());
      goto out;
    }
    ebb_device_synchronize(d);
    double tw = bench_now() - t0;
    /* same address, same bytes (the context was released in between) */
    ebb_owner *who = NULL;
    unsigned char probe[4096];
    if (ebb_mem_lookup(a, w, &who, NULL) || who != o ||
        ebb_device_copy_dtoh(d, probe, w + n - sizeof probe, sizeof probe) ||
        probe[0] != 0x3C || probe[sizeof probe - 1] != 0x3C) {
      printf("  %s: the weights changed across sleep/wake (round %d)\n", spec, r);
      goto out;
    }
    best_sleep = ts < best_sleep ? ts : best_sleep;
    best_wake = tw < best_wake ? tw : best_wake;
  }
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = bench_now();
    ebb_mem_free(a, w); /* unload */
    release_all(a);
    if (ebb_mem_alloc(o, n, "bench", &w)) { /* load */
      printf("  %s: load failed: %s\n", spec, ebb_errmsg());
      goto out;
    }
    ebb_device_copy_htod(d, w, host, n);
    ebb_device_synchronize(d);
    double t = bench_now() - t0;
    best_reload = t < best_reload ? t : best_reload;
  }
  printf("  %-7s %5zu MiB  wake %7.2f GiB/s  pinned copy %7.2f GiB/s  wake/copy %5.0f %%  "
         "sleep %7.3f s  wake %7.3f s  unload+load %7.3f s  (unload+load)/wake %6.2fx\n",
         spec, n >> 20, gibs(n, best_wake), gibs(n, best_copy),
         100.0 * gibs(n, best_wake) / gibs(n, best_copy), best_sleep, best_wake, best_reload,
         best_reload / best_wake);
out:
  if (w)
    ebb_mem_free(a, w);
  if (pinned)
    ebb_device_host_free(d, pinned);
  free(host);
  ebb_owner_destroy(o, NULL);
  ebb_allocator_destroy(a);
  ebb_device_close(d);
}

int main(void) {
  const char *e = getenv("EBB_BENCH_SLEEP_MIB");
  size_t mib = e && atoi(e) > 0 ? (size_t)atoi(e) : 1024;
  printf("sleep/wake of %zu MiB of weights (best of %d), side by side:\n", mib, ROUNDS);
  for (int i = 0; i < BENCH_NDEV; i++)
    run(bench_devices[i], mib << 20);
  return 0;
}
