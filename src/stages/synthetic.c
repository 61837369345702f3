/* The synthetic stage: a diagnostic for any GPU (docs/stage-abi.md, "synthetic").
 * It takes device memory the way a model stage does and checks it is really
 * there: every block is written with a pattern (memset8 over the whole block,
 * copy_htod of patterned windows every 16 MiB) and read back (copy_dtoh) and
 * checksummed; a mismatch fails the stage naming the block and offset.
 *
 *   weights_mib      allocated at load, freed at unload
 *   activations_mib  allocated during each run, freed before it returns
 *   cache_mib        built on the first run and kept in a cache that only the
 *                    release registry drops (an on_release callback)
 *   leak_mib         allocated on every run and never freed by the stage
 *   outside_mib      taken at load straight from the driver (raw_driver_alloc),
 *                    bypassing ebb's allocator; given back at unload
 *   fail             "load" | "run" | "unload" | "" (none): fail there
 *   run_ms           how long a run lasts (polls ebb_cancelled every 10 ms)
 *   touch            "full" (default: memset8 over every byte, then the
 *                    windows) or "sample" (only the windows: cheap on the fake
 *                    GPU, where device memory is host memory)
 * Output: a JSON item named after the stage instance describing what it did. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ebb/stage.h"
#include "stages/builtin.h"
#include "stages/options.h"
#include "stages/audio/st_util.h"

#define MIB_BYTES 1048576.0
#define WINDOW (64u << 10) /* patterned window written/read back */
#define STRIDE (16u << 20) /* one window every 16 MiB */

typedef struct syn {
  ebb_stage_ctx *ctx;
  size_t weights_bytes, act_bytes, cache_bytes, leak_bytes, outside_bytes;
  char fail[16];
  double run_ms;
  int sample; /* touch: "sample" */
  uint64_t weights, cache, outside;
  uint64_t cache_handle;
  uint64_t leaked; /* bytes leaked so far */
  unsigned runs;
  uint32_t checksum; /* of everything read back */
} syn;

/* The options, each written once: the schema and the values load reads
 * both come from this table (stages/options.h). */
#define SYN_OPTIONS(NUM, INT, STR, BOOL, SEP, ...)                                               \
  NUM(weights_mib, 256, 0, 1048576, "device memory allocated at load (the model's weights)")     \
  SEP NUM(activations_mib, 64, 0, 1048576,                                                       \
          "device memory allocated during each run and freed before it ends") SEP                \
  NUM(cache_mib, 0, 0, 1048576,                                                                  \
      "device memory kept in a cache that only the release registry drops") SEP                  \
  NUM(leak_mib, 0, 0, 1048576,                                                                   \
      "device memory allocated on each run and never freed by the stage") SEP                    \
  NUM(outside_mib, 0, 0, 1048576, "device memory taken straight from the driver, bypassing ebb") \
      SEP                                                                                        \
      STR(fail, "", "fail at 'load', 'run' or 'unload'; empty: never") SEP                       \
      NUM(run_ms, 0, 0, 86400000, "how long each run takes in milliseconds (cancellable)") SEP   \
      STR(touch, "full",                                                                         \
          "'full': write every byte and check windows; 'sample': write and check only a 64 KiB " \
          "window every 16 MiB")
EBB_STAGE_OPTIONS(SYN_OPTIONS)

/* The pattern and the checksum work a 64-bit word at a time: on the fake GPU
 * device memory is host memory and this check is what a run costs on top
 * of its run_ms, so byte-at-a-time loops (a hash per byte, a compare and a
 * multiply per byte) made four devices' runs compete for the CPU. */
static uint64_t pat64(uint32_t seed, uint64_t word) {
  uint64_t z = word * 0x9e3779b97f4a7c15ull ^ (uint64_t)seed * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 31;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 29);
}

/* n bytes of the pattern of the block at byte offset off (a multiple of 8). */
static void pat_fill(uint8_t *p, uint32_t seed, size_t off, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = pat64(seed, (off + i) / 8);
    memcpy(p + i, &w, 8);
  }
  if (i < n) {
    uint64_t w = pat64(seed, (off + i) / 8);
    memcpy(p + i, &w, n - i);
  }
}

/* FNV-1a over 64-bit words (the tail byte by byte), folded to 32 bits. */
static uint32_t fnv(uint32_t h, const uint8_t *p, size_t n) {
  uint64_t x = 0xcbf29ce484222325ull ^ h;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    x = (x ^ w) * 0x100000001b3ull;
  }
  for (; i < n; i++)
    x = (x ^ p[i]) * 0x100000001b3ull;
  return (uint32_t)(x ^ (x >> 32));
}

/* The first byte of the window read back that differs from what was written
 * (want: the pattern in its first half, the fill after), or -1. memcmp does
 * the work; the byte loop only runs to name a mismatch. */
static long window_mismatch(const uint8_t *rbuf, const uint8_t *wbuf, size_t half, size_t n,
                            uint8_t fill) {
  int same = memcmp(rbuf, wbuf, half) == 0;
  if (same && n > half) /* all of [half, n) equal to fill */
    same = rbuf[half] == fill && memcmp(rbuf + half, rbuf + half + 1, n - half - 1) == 0;
  if (same)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (rbuf[i] != (i < half ? wbuf[i] : fill))
      return (long)i;
  return -1;
}

/* Writes the block and reads it back; *sum accumulates the checksum. */
static int touch(syn *s, const char *what, uint64_t dptr, size_t bytes, uint32_t seed) {
  ebb_stage_ctx *ctx = s->ctx;
  const ebb_host_api *h = ctx->host;
  uint8_t fill = (uint8_t)(0x40 + (seed & 0x3f));
  int rc = 0;
  if (!s->sample)
    rc = h->memset8(ctx, dptr, fill, bytes);
  for (size_t off = 0; s->sample && !rc && off < bytes; off += STRIDE)
    rc = h->memset8(ctx, dptr + off, fill, bytes - off < WINDOW ? bytes - off : WINDOW);
  if (rc)
    return stg_st_fail(ctx, rc, "synthetic: %s: memset of %zu MiB failed", what, bytes >> 20);
  void *buf = NULL;
  rc = h->pinned_alloc(ctx, 2 * WINDOW, &buf);
  if (rc)
    return stg_st_fail(ctx, rc, "synthetic: %s: pinned buffer of %u KiB failed", what,
                       2 * WINDOW >> 10);
  uint8_t *wbuf = buf, *rbuf = wbuf + WINDOW;
  for (size_t off = 0; off < bytes && !rc; off += STRIDE) {
    if (h->cancelled(ctx)) { /* a SIGINT during a 4 GiB load should not wait for it */
      h->pinned_free(ctx, buf);
      return stg_st_fail(ctx, EBB_ECANCELED, "synthetic: %s: cancelled while touching memory",
                         what);
    }
    size_t n = bytes - off < WINDOW ? bytes - off : WINDOW;
    /* the first half of the window gets a pattern, the second keeps the fill */
    size_t half = n / 2;
    pat_fill(wbuf, seed, off, half);
    if (half && (rc = h->copy_htod(ctx, dptr + off, wbuf, half)))
      break;
    if ((rc = h->copy_dtoh(ctx, rbuf, dptr + off, n)))
      break;
    long bad = window_mismatch(rbuf, wbuf, half, n, fill);
    if (bad >= 0) {
      uint8_t got = rbuf[bad], want = (size_t)bad < half ? wbuf[bad] : fill;
      h->pinned_free(ctx, buf);
      return stg_st_fail(ctx, EBB_ESTAGE,
                         "synthetic: %s: read back 0x%02x at offset %zu, wrote 0x%02x: device "
                         "memory "
                         "does not hold what was written",
                         what, got, off + (size_t)bad, want);
    }
    s->checksum = fnv(s->checksum, rbuf, n);
  }
  h->pinned_free(ctx, buf);
  if (rc)
    return stg_st_fail(ctx, rc, "synthetic: %s: copy failed", what);
  return 0;
}

static int alloc_touched(syn *s, const char *what, size_t bytes, uint32_t seed, uint64_t *out) {
  *out = 0;
  if (!bytes)
    return 0;
  int rc = ebb_dev_alloc(s->ctx, bytes, out);
  if (rc) {
    *out = 0;
    /* the allocator's message names the owner, the request and the numbers */
    return stg_st_fail(s->ctx, rc, "synthetic: %s: allocating %.0f MiB failed: %s", what,
                       bytes / MIB_BYTES, ebb_errmsg());
  }
  return touch(s, what, *out, bytes, seed);
}


static void drop_cache(void *arg) {
  syn *s = arg;
  if (s->cache) {
    ebb_dev_free(s->ctx, s->cache);
    s->cache = 0;
  }
}

static void free_all(syn *s) {
  if (s->cache_handle)
    s->ctx->host->off_release(s->ctx, s->cache_handle);
  drop_cache(s);
  if (s->weights)
    ebb_dev_free(s->ctx, s->weights);
  if (s->outside)
    s->ctx->host->raw_driver_free(s->ctx, s->outside);
  free(s);
}

static int syn_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_error_t je;
  json_t *o = json_loads(options_json ? options_json : "{}", 0, &je);
  if (!o || !json_is_object(o)) {
    json_decref(o);
    return stg_st_fail(ctx, EBB_ECONFIG, "synthetic: options are not a JSON object: %s", je.text);
  }
  syn *s = calloc(1, sizeof *s);
  if (!s) {
    json_decref(o);
    return stg_st_fail(ctx, EBB_ENOMEM, "synthetic: out of host memory");
  }
  s->ctx = ctx;
  stage_opts v;
  int rc = stage_opts_read("synthetic", o, &v);
  if (rc) {
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto fail;
  }
  s->weights_bytes = (size_t)(v.weights_mib * MIB_BYTES);
  s->act_bytes = (size_t)(v.activations_mib * MIB_BYTES);
  s->cache_bytes = (size_t)(v.cache_mib * MIB_BYTES);
  s->leak_bytes = (size_t)(v.leak_mib * MIB_BYTES);
  s->outside_bytes = (size_t)(v.outside_mib * MIB_BYTES);
  s->run_ms = v.run_ms;
  if (*v.fail && strcmp(v.fail, "none") && strcmp(v.fail, "load") && strcmp(v.fail, "run") &&
      strcmp(v.fail, "unload")) {
    rc = stg_st_fail(ctx, EBB_ECONFIG,
                     "synthetic: option 'fail' must be \"load\", \"run\" or \"unload\", "
                     "got \"%s\"",
                     v.fail);
    goto fail;
  }
  snprintf(s->fail, sizeof s->fail, "%s", v.fail);
  if (strcmp(v.touch, "full") && strcmp(v.touch, "sample")) {
    rc = stg_st_fail(ctx, EBB_ECONFIG,
                     "synthetic: option 'touch' must be \"full\" or \"sample\", got "
                     "\"%s\"",
                     v.touch);
    goto fail;
  }
  s->sample = !strcmp(v.touch, "sample");
  json_decref(o);
  o = NULL;
  s->checksum = 2166136261u;
  if ((rc = alloc_touched(s, "weights", s->weights_bytes, 1, &s->weights)))
    goto fail;
  if (s->outside_bytes) {
    if ((rc = ctx->host->raw_driver_alloc(ctx, s->outside_bytes, &s->outside))) {
      s->outside = 0;
      rc = stg_st_fail(ctx, rc, "synthetic: outside: taking %.0f MiB from the driver failed: %s",
                       s->outside_bytes / MIB_BYTES, ebb_strerror(rc));
      goto fail;
    }
    if ((rc = touch(s, "outside", s->outside, s->outside_bytes, 2)))
      goto fail;
  }
  if (!strcmp(s->fail, "load")) {
    rc = stg_st_fail(ctx, EBB_ESTAGE, "synthetic: failing at load as asked (fail=load)");
    goto fail;
  }
  *state = s;
  return 0;
fail:
  json_decref(o);
  free_all(s);
  return rc;
}

static int sleep_cancellable(ebb_stage_ctx *ctx, double ms) {
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (now.tv_sec - t0.tv_sec) * 1e3 + (now.tv_nsec - t0.tv_nsec) / 1e6;
    if (ebb_cancelled(ctx))
      return stg_st_fail(ctx, EBB_ECANCELED, "synthetic: cancelled after %.0f ms of %.0f", el, ms);
    if (el >= ms)
      return 0;
    double left = ms - el < 10 ? ms - el : 10;
    struct timespec d = {0, (long)(left * 1e6)};
    nanosleep(&d, NULL);
  }
}

static int syn_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  syn *s = state;
  const ebb_host_api *h = ctx->host;
  uint64_t act = 0, leak = 0;
  int rc;
  if (ebb_cancelled(ctx))
    return stg_st_fail(ctx, EBB_ECANCELED, "synthetic: cancelled before running");
  if ((rc = alloc_touched(s, "activations", s->act_bytes, 3 + s->runs, &act)))
    goto done;
  if (s->cache_bytes && !s->cache) {
    if ((rc = alloc_touched(s, "cache", s->cache_bytes, 4, &s->cache)))
      goto done;
    if (!s->cache_handle &&
        (rc = h->on_release(ctx, "synthetic cache", drop_cache, s, &s->cache_handle))) {
      rc = stg_st_fail(ctx, rc, "synthetic: registering the cache's release callback failed");
      goto done;
    }
  }
  if (s->leak_bytes) {
    if ((rc = alloc_touched(s, "leak", s->leak_bytes, 5, &leak)))
      goto done;
    s->leaked += s->leak_bytes; /* never freed: ebb must find and free it */
  }
  if (s->run_ms > 0 && (rc = sleep_cancellable(ctx, s->run_ms)))
    goto done;
  if (!strcmp(s->fail, "run")) {
    rc = stg_st_fail(ctx, EBB_ESTAGE, "synthetic: failing at run as asked (fail=run)");
    goto done;
  }
  /* the weights must still hold their pattern */
  if (s->weights && (rc = touch(s, "weights", s->weights, s->weights_bytes, 1)))
    goto done;
  s->runs++;
  char json[768];
  snprintf(json, sizeof json,
           "{\"stage\": \"%s\", \"weights_mib\": %.0f, \"activations_mib\": %.0f, "
           "\"cache_mib\": %.0f, \"leaked_mib\": %.0f, \"outside_mib\": %.0f, \"runs\": %u, "
           "\"inputs\": %d, \"checksum\": \"%08x\", \"device\": \"%s\"}",
           h->stage_name(ctx), s->weights_bytes / MIB_BYTES, s->act_bytes / MIB_BYTES,
           s->cache_bytes / MIB_BYTES, s->leaked / MIB_BYTES, s->outside_bytes / MIB_BYTES, s->runs,
           h->item_count(in), s->checksum,
           h->device_kind(ctx) == EBB_DEV_KIND_CUDA ? "cuda" : "cpu");
  if ((rc = h->add_json(out, h->stage_name(ctx), json)))
    rc = stg_st_fail(ctx, rc, "synthetic: adding the output item failed");
done:
  if (act)
    ebb_dev_free(ctx, act);
  return rc;
}

static void syn_unload(ebb_stage_ctx *ctx, void *state) {
  syn *s = state;
  if (!strcmp(s->fail, "unload")) {
    /* a broken unload: everything stays behind for ebb to find */
    stg_st_fail(ctx, EBB_ESTAGE, "synthetic: failing at unload as asked (fail=unload)");
    free(s);
    return;
  }
  free_all(s);
}

/* Exact: the owner's peak is the first run's weights + activations + cache
 * + leak (all live at once); host: the pinned window buffer of touch(). */
static int syn_estimate(const ebb_host_api *host, const char *options_json, const ebb_items *in,
                        ebb_estimate *out) {
  (void)host;
  (void)in;
  json_t *root = NULL;
  stage_opts v;
  int rc = stage_opts_parse("synthetic", options_json, &root, &v);
  json_decref(root);
  if (rc)
    return rc;
  out->device_bytes = (uint64_t)(size_t)(v.weights_mib * MIB_BYTES) +
                      (uint64_t)(size_t)(v.activations_mib * MIB_BYTES) +
                      (uint64_t)(size_t)(v.cache_mib * MIB_BYTES) +
                      (uint64_t)(size_t)(v.leak_mib * MIB_BYTES);
  out->host_bytes = 2 * WINDOW;
  return 0;
}

/* Work (the stage ABI's `work`): run_ms of waiting (polled, as work: it
 * holds the device), and with touch "full" SYN_TOUCH_S per MiB written and
 * read back. Measured with `ebb run --device cpu` (one core of the 2-core
 * development machine): the defaults (320 MiB) 0.74 s, weights_mib 2048
 * (2112 MiB) 3.52 s: 1.7 to 2.3 ms a MiB; touch "sample" 0.05 s. */
#define SYN_TOUCH_S 0.0023
double stg_synthetic_work_s(double run_ms, double touched_mib, int full) {
  return run_ms / 1000.0 + (full ? SYN_TOUCH_S * touched_mib : 0.0);
}

static int syn_work(const ebb_host_api *host, const char *options_json, double input_s,
                    ebb_work *out) {
  (void)host;
  (void)input_s;
  json_t *root = NULL;
  stage_opts v;
  int rc = stage_opts_parse("synthetic", options_json, &root, &v);
  if (!rc) { /* v.touch points into root */
    double mib = v.weights_mib + v.activations_mib + v.cache_mib + v.leak_mib;
    out->cpu_s = stg_synthetic_work_s(v.run_ms, mib, !strcmp(v.touch, "full"));
    snprintf(out->drivers, sizeof out->drivers, "run_ms %g, %g MiB touched", v.run_ms, mib);
  }
  json_decref(root);
  return rc;
}

const ebb_stage stg_stage_synthetic = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "synthetic",
    .version = 1,
    .description = "diagnostic: allocates, touches and checks device memory (weights, "
                   "activations, a cache, leaks, memory outside ebb) and can fail on demand",
    .options_schema = stage_opts_schema,
    .needs_gpu = 1,
    .load = syn_load,
    .run = syn_run,
    .unload = syn_unload,
    .release = NULL,
    .estimate = syn_estimate,
    .work = syn_work,
};
