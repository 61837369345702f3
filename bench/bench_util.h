/* Small helpers for the benchmarks in bench/. */
#ifndef EBB_BENCH_UTIL_H
#define EBB_BENCH_UTIL_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Opens the driver library at path and sets each *slots[i] to its entry
 * point names[i] (n of them): 0, or -1 after saying which is missing (`who`
 * names the bench). For the benches that call a libcuda.so.1 directly. */
static inline int bench_dlsyms(const char *who, const char *path, void **const slots[],
                               const char *const names[], size_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "%s: cannot open %s: %s\n", who, path, dlerror());
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    if (!(*slots[i] = dlsym(h, names[i]))) {
      fprintf(stderr, "%s: %s has no %s\n", who, path, names[i]);
      return -1;
    }
  return 0;
}

/* Opens spec or says why it is skipped (returns NULL). */
static inline dev_device *bench_open(const char *spec) {
  dev_device *d = NULL;
  if (dev_open(spec, &d)) {
    printf("  (%s skipped: %s)\n", spec, ebb_errmsg());
    return NULL;
  }
  return d;
}

/* The devices to measure: the CPU device and the first CUDA device (the fake
 * GPU when scripts/bench.sh set EBB_LIBCUDA, else a real one if present). */
static const char *const bench_devices[] = {"cpu", "cuda:0"};
#define BENCH_NDEV 2

/* Starts `ebb serve` on a free loopback port over data dir `dir` and returns its
 * pid with the port in *port, or -1 after saying why (`who` names the bench).
 * The server's stdout stays a pipe whose read end is kept open: the server
 * logs little after its first line, which names the port. */
static inline pid_t bench_serve(const char *who, const char *ebb, const char *dir, int *port) {
  int pfd[2];
  if (pipe(pfd) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 1);
    close(pfd[0]);
    execl(ebb, ebb, "serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--no-cache",
          (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  FILE *f = fdopen(pfd[0], "r");
  char line[512] = "";
  if (!f || !fgets(line, sizeof line, f) || !strstr(line, "listening on http://")) {
    fprintf(stderr, "%s: %s did not start: %s\n", who, ebb, line);
    return -1;
  }
  *port = atoi(strrchr(line, ':') + 1);
  return pid;
}

#endif
