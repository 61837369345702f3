/* The worker round trip: one `run` request to a Python worker written on the
 * SDK (bench/worker_echo.py) and its answer, for a small JSON item and for a
 * 64 MiB tensor, p50 and p99, side by side with the same work done by an
 * in-process stage (a C call on the same item). The tensor goes the way
 * src/pipeline/isolated.c sends it: copied once into /dev/shm by the host,
 * mapped (not copied) by the worker, named in a small JSON frame; the copy is
 * timed on its own too, so the line says what is memory bandwidth and what
 * is protocol. Then the path that needs no copy at all: the producer built
 * its tensor in shared memory (wrk_shm_create), and each run hands it over by
 * name; and, as the bandwidth reference, a plain memcpy of the same 64 MiB
 * between two warm buffers in the same run. The small item runs twice, each
 * time with a worker of its own: with the spin off (EBB_WORKER_SPIN_US=0:
 * each side sleeps in recv and is woken by the other's frame) and on (the
 * default, or EBB_BENCH_SPIN_US), with the CPU each side spent per round
 * trip (/proc/PID/schedstat), so the spin's cost is printed beside its
 * gain. Prefers /usr/bin/python3 when it has NumPy (the SDK's zero-copy
 * arrays), else `python3`. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_util.h"
#include "worker/proc.h"
#include "worker/wire.h"

#define SMALL_N 20000
#define TENSOR_N 30
#define TENSOR_FLOATS (16u << 20) /* 64 MiB */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  int i = (int)(p * (n - 1) + 0.5);
  return v[i];
}

/* The in-process stage: the same answer the Python stage gives. */
static json_t *inproc_echo(const char *name, const char *text, const float *t, size_t n) {
  json_t *o = json_object();
  if (t)
    json_object_set_new(o, name, json_pack("[[I], f, f]", (json_int_t)n, (double)t[0],
                                           (double)t[n - 1]));
  else
    json_object_set_new(o, name, json_integer((json_int_t)(text ? strlen(text) : 0)));
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  json_t *item = json_pack("{s:s, s:s, s:s}", "kind", "json", "name", "echo", "text", s);
  free(s);
  return item;
}

static const char *pick_python(void) {
  if (access("/usr/bin/python3", X_OK) == 0 &&
      system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0)
    return "/usr/bin/python3";
  return "python3";
}

static int call(wrk_wproc *w, json_t *msg, json_t **r) {
  int rc = wrk_wproc_call(w, msg, bench_now() + 60, NULL, r);
  if (rc)
    fprintf(stderr, "worker_roundtrip: %s\n", ebb_errmsg());
  return rc;
}

/* Nanoseconds a process (0: this one) has run on a CPU (schedstat). */
static double cpu_ns(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/schedstat", pid ? (long)pid : (long)getpid());
  FILE *f = fopen(path, "r");
  double ns = 0;
  if (f && fscanf(f, "%lf", &ns) != 1)
    ns = 0;
  if (f)
    fclose(f);
  return ns;
}

/* A worker on the SDK, hello'd and loaded; spin: its EBB_WORKER_SPIN_US. */
static wrk_wproc *start_worker(const char *py, const char *spin) {
  const char *script = EBB_SOURCE_DIR "/bench/worker_echo.py";
  const char *args[] = {script};
  wrk_wproc *w = NULL;
  setenv("EBB_WORKER_SPIN_US", spin, 1);
  if (wrk_wproc_spawn(py, args, 1, "bench echo", &w)) {
    fprintf(stderr, "worker_roundtrip: %s\n", ebb_errmsg());
    return NULL;
  }
  json_t *r = NULL;
  json_t *m = json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:I}", "type", "hello", "protocol", 1,
                        "ebb_version", EBB_VERSION, "stage", "echo", "name", "echo",
                        "shm_prefix", wrk_wproc_shm_prefix(w), "host_pid", (json_int_t)getpid());
  int rc = call(w, m, &r);
  json_decref(m), json_decref(r);
  m = json_pack("{s:s, s:s, s:{}, s:s}", "type", "load", "stage", "echo", "options", "device",
                "cpu");
  if (!rc)
    rc = call(w, m, &r);
  json_decref(m), json_decref(r);
  if (rc)
    wrk_wproc_stop(w, 5, NULL), w = NULL;
  return w;
}

static void stop_worker(wrk_wproc *w) {
  json_t *r = NULL, *m = json_pack("{s:s}", "type", "exit");
  if (!call(w, m, &r))
    json_decref(r);
  json_decref(m);
  wrk_wproc_stop(w, 5, NULL);
}

/* SMALL_N small-item round trips: times into tw (worker) and ti (the same
 * answer built in-process); *host_us, *worker_us: CPU per round trip. */
static int small_runs(wrk_wproc *w, double *tw, double *ti, double *host_us, double *worker_us) {
  const char *text = "{\"prompt\": \"a small item\", \"n\": 1}";
  json_t *r = NULL, *small = json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "type", "run", "items",
                                       "kind", "json", "name", "q", "text", text);
  int rc = 0;
  double h0 = cpu_ns(0), w0 = cpu_ns(wrk_wproc_pid(w)), hi = 0;
  for (int i = 0; i < SMALL_N && !rc; i++) {
    double t0 = bench_now();
    rc = call(w, small, &r);
    tw[i] = bench_now() - t0;
    json_decref(r);
    t0 = bench_now();
    json_t *it = inproc_echo("q", text, NULL, 0);
    ti[i] = bench_now() - t0;
    hi += ti[i];
    json_decref(it);
  }
  json_decref(small);
  *host_us = ((cpu_ns(0) - h0) / 1e3 - hi * 1e6) / SMALL_N;
  *worker_us = (cpu_ns(wrk_wproc_pid(w)) - w0) / 1e3 / SMALL_N;
  return rc;
}

static void print_small(const char *how, double *tw, double *ti, double host_us,
                        double worker_us) {
  double sw50 = pct(tw, SMALL_N, .5), sw99 = pct(tw, SMALL_N, .99);
  double si50 = pct(ti, SMALL_N, .5), si99 = pct(ti, SMALL_N, .99);
  printf("  small JSON item, %s (%d runs): worker p50 %6.1f us  p99 %7.1f us | in-process p50 "
         "%5.2f us  p99 %5.2f us | worker/in-process p50 %.0fx | CPU per round trip: ebb %.1f "
         "us, worker %.1f us\n", how, SMALL_N, sw50 * 1e6, sw99 * 1e6, si50 * 1e6, si99 * 1e6,
         sw50 / si50, host_us, worker_us);
}

int main(void) {
  const char *py = pick_python();
  /* the small item twice, the spin off then on (each its own worker) */
  static double tw0[SMALL_N], ti0[SMALL_N], tw[SMALL_N], ti[SMALL_N];
  double h0 = 0, c0 = 0, h1 = 0, c1 = 0;
  wrk_wproc *w = start_worker(py, "0");
  int rc = !w || small_runs(w, tw0, ti0, &h0, &c0);
  if (w)
    stop_worker(w);
  const char *spin = getenv("EBB_BENCH_SPIN_US");
  char spin_s[32];
  snprintf(spin_s, sizeof spin_s, "%u", spin ? (unsigned)atoi(spin) : EBB_WIRE_SPIN_US_DEFAULT);
  w = rc ? NULL : start_worker(py, spin_s);
  if (!rc && (!w || small_runs(w, tw, ti, &h1, &c1)))
    rc = 1;
  json_t *r = NULL;

  static double bw[TENSOR_N], bi[TENSOR_N], bc[TENSOR_N];
  float *t = malloc((size_t)TENSOR_FLOATS * sizeof *t);
  if (!t) {
    fprintf(stderr, "worker_roundtrip: no host memory for the 64 MiB tensor\n");
    if (w)
      stop_worker(w);
    return 1;
  }
  for (size_t i = 0; i < TENSOR_FLOATS; i++)
    t[i] = (float)i;
  char name[128];
  for (int i = 0; i < TENSOR_N && !rc; i++) {
    snprintf(name, sizeof name, "%si%d", wrk_wproc_shm_prefix(w), i);
    double t0 = bench_now();
    rc = wrk_shm_put(name, t, (size_t)TENSOR_FLOATS * 4);
    bc[i] = bench_now() - t0;
    json_t *run = json_pack("{s:s, s:[{s:s, s:s, s:[I], s:s, s:I}]}", "type", "run", "items",
                            "kind", "tensor", "name", "t", "shape", (json_int_t)TENSOR_FLOATS,
                            "shm", name, "bytes", (json_int_t)TENSOR_FLOATS * 4);
    if (!rc)
      rc = call(w, run, &r);
    wrk_shm_unlink(name);
    bw[i] = bench_now() - t0;
    json_decref(run), json_decref(r);
    t0 = bench_now();
    json_t *it = inproc_echo("t", NULL, t, TENSOR_FLOATS);
    bi[i] = bench_now() - t0;
    json_decref(it);
  }
  /* the tensor already lives in shared memory: handed over by name */
  static double sw[TENSOR_N], mc[TENSOR_N];
  size_t tb = (size_t)TENSOR_FLOATS * 4;
  void *shm = NULL;
  snprintf(name, sizeof name, "%sresident", wrk_wproc_shm_prefix(w));
  if (!rc && (rc = wrk_shm_create(name, tb, &shm)))
    fprintf(stderr, "worker_roundtrip: %s\n", ebb_errmsg());
  if (!rc)
    memcpy(shm, t, tb);
  json_t *run = json_pack("{s:s, s:[{s:s, s:s, s:[I], s:s, s:I}]}", "type", "run", "items",
                          "kind", "tensor", "name", "t", "shape", (json_int_t)TENSOR_FLOATS,
                          "shm", name, "bytes", (json_int_t)tb);
  for (int i = 0; i < TENSOR_N && !rc; i++) {
    double t0 = bench_now();
    rc = call(w, run, &r);
    sw[i] = bench_now() - t0;
    json_decref(r);
  }
  json_decref(run);
  if (shm)
    wrk_shm_unmap(shm, tb), wrk_shm_unlink(name);
  /* the bandwidth reference: memcpy of the same 64 MiB between warm buffers */
  float *dst = malloc(tb);
  memcpy(dst, t, tb);
  for (int i = 0; i < TENSOR_N && !rc; i++) {
    double t0 = bench_now();
    memcpy(dst, t, tb);
    mc[i] = bench_now() - t0;
    t[i] += (float)dst[i]; /* keep the copy observable */
  }
  free(dst);
  free(t);
  if (w)
    stop_worker(w);
  if (rc)
    return 1;

  double tw50 = pct(bw, TENSOR_N, .5), tw99 = pct(bw, TENSOR_N, .99);
  double ti50 = pct(bi, TENSOR_N, .5), ti99 = pct(bi, TENSOR_N, .99);
  double tc50 = pct(bc, TENSOR_N, .5);
  printf("worker round trip (Python SDK worker, %s) vs in-process stage, one run each:\n", py);
  print_small("spin off", tw0, ti0, h0, c0);
  char how[64];
  snprintf(how, sizeof how, "spin %s us", spin_s);
  print_small(how, tw, ti, h1, c1);
  printf("    (spin: each side polls the socket without sleeping for up to EBB_WORKER_SPIN_US "
         "before it sleeps, so an answer that comes in time costs no wake-up; goal p50 <= 20 "
         "us)\n");
  printf("  64 MiB tensor    (%d runs): worker p50 %7.2f ms  p99 %7.2f ms | in-process p50 %6.3f ms"
         "  p99 %6.3f ms\n", TENSOR_N, tw50 * 1e3, tw99 * 1e3, ti50 * 1e3, ti99 * 1e3);
  printf("    of which the host's copy into /dev/shm: p50 %.2f ms (%.1f GB/s); protocol + worker "
         "p50 %.2f ms; the socket carried no payload\n",
         tc50 * 1e3, (double)TENSOR_FLOATS * 4 / tc50 / 1e9, (tw50 - tc50) * 1e3);
  printf("    the worker's tensor round trip runs at %.1f GB/s (64 MiB / p50)\n",
         (double)TENSOR_FLOATS * 4 / tw50 / 1e9);
  double rs50 = pct(sw, TENSOR_N, .5), rs99 = pct(sw, TENSOR_N, .99);
  double mc50 = pct(mc, TENSOR_N, .5);
  printf("  64 MiB tensor already in shm (%d runs, handed over by name, no copy): worker p50 "
         "%7.3f ms  p99 %7.3f ms\n", TENSOR_N, rs50 * 1e3, rs99 * 1e3);
  printf("    = %.1f GiB/s effective vs plain memcpy of the same 64 MiB in this run: p50 %.2f ms "
         "(%.1f GiB/s): the handover takes %.2f%% of one copy\n",
         (double)tb / rs50 / (1u << 30), mc50 * 1e3, (double)tb / mc50 / (1u << 30),
         100 * rs50 / mc50);
  return 0;
}
