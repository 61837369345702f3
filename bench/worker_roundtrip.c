/* The worker round trip: one `run` request to a Python worker written on the
 * SDK (bench/worker_echo.py) and its answer, for a small JSON item and for a
 * 64 MiB tensor, p50 and p99, side by side with the same work done by an
 * in-process stage (a C call on the same item). The tensor goes the way
 * src/pipeline/isolated.c sends it: copied once into /dev/shm by the host,
 * mapped (not copied) by the worker, named in a small JSON frame; the copy is
 * timed on its own too, so the line says what is memory bandwidth and what
 * is protocol. Then the path that needs no copy at all: the producer built
 * its tensor in shared memory (ebb_shm_create), and each run hands it over by
 * name; and, as the bandwidth reference, a plain memcpy of the same 64 MiB
 * between two warm buffers in the same run. Prefers /usr/bin/python3 when it has NumPy (the SDK's zero-
 * copy arrays), else `python3`. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_util.h"
#include "worker/proc.h"
#include "worker/wire.h"

#define SMALL_N 2000
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
    json_object_set_new(o, name, json_integer((json_int_t)strlen(text)));
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

static int call(ebb_wproc *w, json_t *msg, json_t **r) {
  int rc = ebb_wproc_call(w, msg, bench_now() + 60, NULL, r);
  if (rc)
    fprintf(stderr, "worker_roundtrip: %s\n", ebb_errmsg());
  return rc;
}

int main(void) {
  const char *py = pick_python();
  const char *script = EBB_SOURCE_DIR "/bench/worker_echo.py";
  const char *args[] = {script};
  ebb_wproc *w = NULL;
  if (ebb_wproc_spawn(py, args, 1, "bench echo", &w)) {
    fprintf(stderr, "worker_roundtrip: %s\n", ebb_errmsg());
    return 1;
  }
  json_t *r = NULL;
  json_t *m = json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:I}", "type", "hello", "protocol", 1,
                        "ebb_version", EBB_VERSION, "stage", "echo", "name", "echo",
                        "shm_prefix", ebb_wproc_shm_prefix(w), "host_pid", (json_int_t)getpid());
  int rc = call(w, m, &r);
  json_decref(m), json_decref(r);
  m = json_pack("{s:s, s:s, s:{}, s:s}", "type", "load", "stage", "echo", "options", "device",
                "cpu");
  if (!rc)
    rc = call(w, m, &r);
  json_decref(m), json_decref(r);
  if (rc)
    return 1;

  static double tw[SMALL_N], ti[SMALL_N];
  const char *text = "{\"prompt\": \"a small item\", \"n\": 1}";
  json_t *small = json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "type", "run", "items", "kind", "json",
                            "name", "q", "text", text);
  for (int i = 0; i < SMALL_N && !rc; i++) {
    double t0 = bench_now();
    rc = call(w, small, &r);
    tw[i] = bench_now() - t0;
    json_decref(r);
    t0 = bench_now();
    json_t *it = inproc_echo("q", text, NULL, 0);
    ti[i] = bench_now() - t0;
    json_decref(it);
  }
  json_decref(small);

  static double bw[TENSOR_N], bi[TENSOR_N], bc[TENSOR_N];
  float *t = malloc((size_t)TENSOR_FLOATS * sizeof *t);
  for (size_t i = 0; i < TENSOR_FLOATS; i++)
    t[i] = (float)i;
  char name[128];
  for (int i = 0; i < TENSOR_N && !rc; i++) {
    snprintf(name, sizeof name, "%si%d", ebb_wproc_shm_prefix(w), i);
    double t0 = bench_now();
    rc = ebb_shm_put(name, t, (size_t)TENSOR_FLOATS * 4);
    bc[i] = bench_now() - t0;
    json_t *run = json_pack("{s:s, s:[{s:s, s:s, s:[I], s:s, s:I}]}", "type", "run", "items",
                            "kind", "tensor", "name", "t", "shape", (json_int_t)TENSOR_FLOATS,
                            "shm", name, "bytes", (json_int_t)TENSOR_FLOATS * 4);
    if (!rc)
      rc = call(w, run, &r);
    ebb_shm_unlink(name);
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
  snprintf(name, sizeof name, "%sresident", ebb_wproc_shm_prefix(w));
  if (!rc && (rc = ebb_shm_create(name, tb, &shm)))
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
    ebb_shm_unmap(shm, tb), ebb_shm_unlink(name);
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
  m = json_pack("{s:s}", "type", "exit");
  if (!rc)
    call(w, m, &r), json_decref(r);
  json_decref(m);
  ebb_wproc_stop(w, 5, NULL);
  if (rc)
    return 1;

  double sw50 = pct(tw, SMALL_N, .5), sw99 = pct(tw, SMALL_N, .99);
  double si50 = pct(ti, SMALL_N, .5), si99 = pct(ti, SMALL_N, .99);
  double tw50 = pct(bw, TENSOR_N, .5), tw99 = pct(bw, TENSOR_N, .99);
  double ti50 = pct(bi, TENSOR_N, .5), ti99 = pct(bi, TENSOR_N, .99);
  double tc50 = pct(bc, TENSOR_N, .5);
  printf("worker round trip (Python SDK worker, %s) vs in-process stage, one run each:\n", py);
  printf("  small JSON item  (%d runs): worker p50 %7.1f us  p99 %7.1f us | in-process p50 %6.2f us"
         "  p99 %6.2f us | worker/in-process p50 %.0fx\n",
         SMALL_N, sw50 * 1e6, sw99 * 1e6, si50 * 1e6, si99 * 1e6, sw50 / si50);
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
