/* A realistic allocation trace, replayed through the allocator by the
 * fragmentation test (tests/unit/memory_fragmentation.c) and the benchmark
 * (bench/memory_replay.c): several models in turn, each loading its weights
 * (many tensors of mixed sizes), then running steps whose activations grow
 * with the sequence length and are freed layer by layer, with small
 * temporaries mixed in; then unloading. Deterministic (fixed seed). */
#ifndef EBB_BENCH_MEMORY_TRACE_H
#define EBB_BENCH_MEMORY_TRACE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"

typedef struct trace_model {
  const char *name;
  double weights_mib; /* at scale 1 */
  int tensors;
  int layers;
  double act_mib;     /* activation per layer at step 0, scale 1 */
} trace_model;

static const trace_model trace_models[] = {
    {"separate", 1600, 120, 24, 48},
    {"transcribe", 3000, 300, 32, 24},
    {"align", 400, 80, 12, 64},
    {"pitch", 150, 40, 8, 16},
};
#define TRACE_NMODELS (sizeof trace_models / sizeof *trace_models)

typedef struct trace_result {
  uint64_t peak_allocated, peak_reserved; /* allocator stats peaks */
  uint64_t allocs, frees, failed;
  uint64_t released; /* bytes handed back by the releases between models */
} trace_result;

static unsigned trace_rand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* size in bytes from a MiB figure at the given scale, at least 256 bytes */
static size_t trace_bytes(double mib, double scale) {
  double b = mib * scale * 1048576.0;
  return b < 256 ? 256 : (size_t)b;
}

/* Replays rounds x all models. release_between: mem_release (trim) after
 * each model is unloaded, as the runner does with the after-stage policy.
 * owners > 1: each model's allocations go round-robin to that many child
 * owners of the model's owner, alive at once (segments are owner-affine, so
 * this is what giving every owner segments of its own costs). */
static int trace_run_owners(mem_allocator *a, double scale, int rounds, int steps,
                            int release_between, int owners, trace_result *res) {
  unsigned seed = 12345;
  memset(res, 0, sizeof *res);
  uint64_t *w = NULL, *act = NULL, tmp[8];
  ebb_owner *kids[64];
  unsigned turn = 0;
  if (owners < 1 || owners > 64)
    return -1;
  for (int round = 0; round < rounds; round++)
    for (size_t m = 0; m < TRACE_NMODELS; m++) {
      const trace_model *tm = &trace_models[m];
      ebb_owner *top = NULL;
      if (mem_owner_create(a, tm->name, NULL, &top))
        return -1;
      for (int k = 0; k < owners; k++)
        if (owners == 1)
          kids[k] = top;
        else if (mem_owner_create(a, "part", top, &kids[k]))
          return -1;
      w = calloc((size_t)tm->tensors, sizeof *w);
      act = calloc((size_t)tm->layers, sizeof *act);
      if (!w || !act)
        return -1;
      /* weights: a few big matrices, many mid-size, some small (biases, norms) */
      double left = tm->weights_mib;
      for (int i = 0; i < tm->tensors; i++) {
        unsigned r = trace_rand(&seed) % 100;
        double mib = r < 10 ? tm->weights_mib * 0.04 : r < 70 ? tm->weights_mib * 0.009
                                                              : 0.05 + (r % 7) * 0.03;
        if (i == tm->tensors - 1 || mib > left)
          mib = left > 0.01 ? left : 0.01;
        left -= mib;
        ebb_owner *o = kids[turn++ % (unsigned)owners];
        if (mem_alloc(o, trace_bytes(mib, scale), "trace:weights", &w[i]))
          res->failed++, w[i] = 0;
        else
          res->allocs++;
      }
      for (int step = 0; step < steps; step++) {
        double grow = 1.0 + step / 4.0; /* the sequence gets longer */
        for (int l = 0; l < tm->layers; l++) {
          double jitter = 0.8 + (trace_rand(&seed) % 40) / 100.0;
          ebb_owner *o = kids[turn++ % (unsigned)owners];
          if (mem_alloc(o, trace_bytes(tm->act_mib * grow * jitter, scale), "trace:act",
                            &act[l]))
            res->failed++, act[l] = 0;
          else
            res->allocs++;
          for (int t = 0; t < 8; t++) { /* temporaries of the layer */
            size_t n = 512u + (trace_rand(&seed) % 900) * 1024u;
            o = kids[turn++ % (unsigned)owners];
            if (mem_alloc(o, trace_bytes(n / 1048576.0, scale), "trace:tmp", &tmp[t]))
              res->failed++, tmp[t] = 0;
            else
              res->allocs++;
          }
          for (int t = 0; t < 8; t++)
            if (tmp[t] && !mem_free(a, tmp[t]))
              res->frees++;
          /* a layer's input is dropped once the next layer has its output */
          if (l >= 2 && act[l - 2] && !mem_free(a, act[l - 2]))
            res->frees++, act[l - 2] = 0;
        }
        for (int l = 0; l < tm->layers; l++)
          if (act[l] && !mem_free(a, act[l]))
            res->frees++, act[l] = 0;
      }
      for (int i = 0; i < tm->tensors; i++)
        if (w[i] && !mem_free(a, w[i]))
          res->frees++;
      free(w);
      free(act);
      w = act = NULL;
      mem_owner_destroy(top, NULL);
      if (release_between) {
        mem_release_result rr = {.size = sizeof rr};
        mem_release(a, EBB_RELEASE_TRIM | EBB_RELEASE_PINNED, &rr);
        res->released += rr.released_bytes;
      }
    }
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  res->peak_allocated = st.allocated.peak;
  res->peak_reserved = st.reserved.peak;
  return 0;
}

static int trace_run(mem_allocator *a, double scale, int rounds, int steps, int release_between,
                     trace_result *res) {
  return trace_run_owners(a, scale, rounds, steps, release_between, 1, res);
}

#endif
