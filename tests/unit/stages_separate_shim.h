/* A test-only stage host for the audio stage tests: an ebb_host_api whose
 * "device" is host memory (malloc, with live/peak byte counts and an
 * allocation-failure switch) and whose launch resolves kernels by name to
 * their host twins (`fakegpu_twin_<name>`, dlsym in this executable, exactly
 * as the fake driver does), plus a small item store. It lets a test call a
 * stage's load/run/unload or the GPU path of the algorithm directly, without
 * the runner. */
#ifndef EBB_TESTS_STAGES_SEPARATE_SHIM_H
#define EBB_TESTS_STAGES_SEPARATE_SHIM_H

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/kernel_twin.h"
#include "ebb/error.h"
#include "ebb/stage.h"

#define SHIM_MAX_ITEMS 16
#define SHIM_MAX_BLOCKS 64

struct ebb_items {
  int n;
  ebb_item_info info[SHIM_MAX_ITEMS];
  void *owned[SHIM_MAX_ITEMS];
  char name[SHIM_MAX_ITEMS][64];
};

typedef struct shim_ctx {
  ebb_stage_ctx base; /* first: the stage sees only this */
  ebb_dev_kind kind;
  int no_twins;      /* 1: launch fails like a real GPU without an image */
  int cancel;        /* what cancelled() answers */
  int fail_alloc_at; /* N > 0: the Nth dev_alloc fails with EBB_EOOM */
  int allocs, launches;
  uint64_t live_bytes, peak_bytes;
  int live_blocks;
  void *block[SHIM_MAX_BLOCKS];
  size_t block_size[SHIM_MAX_BLOCKS];
  int err_code;
  char err[1024];
  char log[4096];
} shim_ctx;

static inline shim_ctx *shim_of(ebb_stage_ctx *c) { return (shim_ctx *)c; }

static inline void shim_log(ebb_stage_ctx *c, int level, const char *msg) {
  shim_ctx *s = shim_of(c);
  size_t used = strlen(s->log);
  snprintf(s->log + used, sizeof s->log - used, "[%d] %s\n", level, msg);
  fprintf(stderr, "  stage log %d: %s\n", level, msg);
}
static inline int shim_set_error(ebb_stage_ctx *c, int code, const char *msg) {
  shim_ctx *s = shim_of(c);
  s->err_code = code;
  snprintf(s->err, sizeof s->err, "%s", msg ? msg : "");
  return code;
}
static inline int shim_cancelled(ebb_stage_ctx *c) { return shim_of(c)->cancel; }
static inline double shim_seconds_left(ebb_stage_ctx *c) { return -1; }
static inline void shim_progress(ebb_stage_ctx *c, double f) {}
static inline ebb_dev_kind shim_kind(ebb_stage_ctx *c) { return shim_of(c)->kind; }

static inline int shim_dev_alloc(ebb_stage_ctx *c, size_t bytes, const char *site, uint64_t *dptr) {
  shim_ctx *s = shim_of(c);
  s->allocs++;
  if (s->fail_alloc_at > 0 && s->allocs == s->fail_alloc_at)
    return ebb_seterr(EBB_EOOM, "shim: injected out of device memory at allocation %d (%s)",
                      s->allocs, site);
  for (int i = 0; i < SHIM_MAX_BLOCKS; i++)
    if (!s->block[i]) {
      void *p = malloc(bytes ? bytes : 1);
      if (!p)
        return ebb_seterr(EBB_EOOM, "shim: malloc(%zu) failed", bytes);
      /* poison, so a kernel that reads memory it never wrote shows up */
      memset(p, 0x7f, bytes);
      s->block[i] = p;
      s->block_size[i] = bytes;
      s->live_bytes += bytes;
      s->live_blocks++;
      if (s->live_bytes > s->peak_bytes)
        s->peak_bytes = s->live_bytes;
      *dptr = (uint64_t)(uintptr_t)p;
      return 0;
    }
  return ebb_seterr(EBB_EOOM, "shim: more than %d live blocks", SHIM_MAX_BLOCKS);
}
static inline int shim_dev_free(ebb_stage_ctx *c, uint64_t dptr) {
  shim_ctx *s = shim_of(c);
  for (int i = 0; i < SHIM_MAX_BLOCKS; i++)
    if (s->block[i] && (uint64_t)(uintptr_t)s->block[i] == dptr) {
      free(s->block[i]);
      s->block[i] = NULL;
      s->live_bytes -= s->block_size[i];
      s->live_blocks--;
      return 0;
    }
  return ebb_seterr(EBB_EINVAL, "shim: free of unknown device pointer 0x%llx",
                    (unsigned long long)dptr);
}
static inline int shim_htod(ebb_stage_ctx *c, uint64_t dst, const void *src, size_t n) {
  memcpy((void *)(uintptr_t)dst, src, n);
  return 0;
}
static inline int shim_dtoh(ebb_stage_ctx *c, void *dst, uint64_t src, size_t n) {
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return 0;
}
static int shim_memset8(ebb_stage_ctx *c, uint64_t dst, unsigned char v, size_t n) {
  memset((void *)(uintptr_t)dst, v, n);
  return 0;
}
static inline int shim_launch(ebb_stage_ctx *c, const void *image, const char *name,
                              const unsigned grid[3], const unsigned block[3],
                              unsigned shared_bytes, void **params) {
  shim_ctx *s = shim_of(c);
  if (s->no_twins)
    return ebb_seterr(EBB_EDRIVER, "shim: no kernel %s (no image, real GPU)", name);
  char sym[256];
  snprintf(sym, sizeof sym, "%s%s", EBB_TWIN_PREFIX, name);
  void *fn = dlsym(RTLD_DEFAULT, sym);
  if (!fn)
    return ebb_seterr(EBB_ENOTFOUND, "shim: no twin %s exported", sym);
  dev_launch_dims d = {{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, shared_bytes};
  dev_kernel_twin_fn twin;
  memcpy(&twin, &fn, sizeof twin);
  twin(&d, params);
  s->launches++;
  return 0;
}
static inline int shim_pinned_alloc(ebb_stage_ctx *c, size_t bytes, void **p) {
  *p = malloc(bytes);
  return *p ? 0 : EBB_ENOMEM;
}
static inline int shim_pinned_free(ebb_stage_ctx *c, void *p) {
  free(p);
  return 0;
}
static inline int shim_raw_alloc(ebb_stage_ctx *c, size_t bytes, uint64_t *dptr) {
  return EBB_EUNSUPPORTED;
}
static inline int shim_on_release(ebb_stage_ctx *c, const char *name, ebb_release_fn fn, void *arg,
                                  uint64_t *handle) {
  *handle = 1;
  return 0;
}
static inline int shim_off_release(ebb_stage_ctx *c, uint64_t handle) { return 0; }

static inline int shim_item_count(const ebb_items *it) { return it->n; }
static inline int shim_item_get(const ebb_items *it, int i, ebb_item_info *out) {
  if (i < 0 || i >= it->n)
    return EBB_ENOTFOUND;
  *out = it->info[i];
  return 0;
}
static inline int shim_item_find(const ebb_items *it, const char *name, ebb_item_info *out) {
  for (int i = 0; i < it->n; i++)
    if (strcmp(it->name[i], name) == 0) {
      *out = it->info[i];
      return 0;
    }
  return EBB_ENOTFOUND;
}
static inline ebb_item_info *shim_item_new(ebb_items *it, const char *name, ebb_item_kind kind) {
  if (it->n >= SHIM_MAX_ITEMS)
    return NULL;
  int i = it->n++;
  snprintf(it->name[i], sizeof it->name[i], "%s", name);
  memset(&it->info[i], 0, sizeof it->info[i]);
  it->info[i].size = sizeof(ebb_item_info);
  it->info[i].kind = kind;
  it->info[i].name = it->name[i];
  return &it->info[i];
}
static inline int shim_add_audio(ebb_items *it, const char *name, const float *samples,
                                 uint64_t frames, uint32_t channels, uint32_t rate) {
  ebb_item_info *in = shim_item_new(it, name, EBB_ITEM_AUDIO);
  float *copy = malloc(sizeof(float) * (size_t)(frames * channels + 1));
  if (!in || !copy) {
    free(copy);
    return EBB_ENOMEM;
  }
  memcpy(copy, samples, sizeof(float) * (size_t)(frames * channels));
  it->owned[it->n - 1] = copy;
  in->samples = copy;
  in->frames = frames;
  in->channels = channels;
  in->rate = rate;
  return 0;
}
static inline int shim_add_text(ebb_items *it, const char *name, const char *text,
                                ebb_item_kind kind) {
  ebb_item_info *in = shim_item_new(it, name, kind);
  char *copy = strdup(text);
  if (!in || !copy) {
    free(copy);
    return EBB_ENOMEM;
  }
  it->owned[it->n - 1] = copy;
  in->text = copy;
  return 0;
}
static inline int shim_add_tensor(ebb_items *it, const char *name, const float *data, uint32_t ndim,
                                  const uint64_t *shape) {
  return EBB_EUNSUPPORTED;
}
static inline int shim_add_json(ebb_items *it, const char *name, const char *json) {
  return shim_add_text(it, name, json, EBB_ITEM_JSON);
}
static inline int shim_add_file(ebb_items *it, const char *name, const char *path) {
  return shim_add_text(it, name, path, EBB_ITEM_FILE);
}
static const char *shim_output_dir(ebb_stage_ctx *c) { return "."; }
static const char *shim_stage_name(ebb_stage_ctx *c) { return "test"; }

static inline void shim_items_free(ebb_items *it) {
  for (int i = 0; i < it->n; i++)
    free(it->owned[i]);
  memset(it, 0, sizeof *it);
}

static const ebb_host_api shim_host = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_host_api),
    .log = shim_log,
    .set_error = shim_set_error,
    .cancelled = shim_cancelled,
    .seconds_left = shim_seconds_left,
    .progress = shim_progress,
    .device_kind = shim_kind,
    .dev_alloc = shim_dev_alloc,
    .dev_free = shim_dev_free,
    .copy_htod = shim_htod,
    .copy_dtoh = shim_dtoh,
    .memset8 = shim_memset8,
    .launch = shim_launch,
    .pinned_alloc = shim_pinned_alloc,
    .pinned_free = shim_pinned_free,
    .raw_driver_alloc = shim_raw_alloc,
    .on_release = shim_on_release,
    .off_release = shim_off_release,
    .item_count = shim_item_count,
    .item_get = shim_item_get,
    .item_find = shim_item_find,
    .add_audio = shim_add_audio,
    .add_tensor = shim_add_tensor,
    .add_json = shim_add_json,
    .add_file = shim_add_file,
    .output_dir = shim_output_dir,
    .stage_name = shim_stage_name,
};

static inline void shim_init(shim_ctx *s, ebb_dev_kind kind) {
  memset(s, 0, sizeof *s);
  s->base.host = &shim_host;
  s->kind = kind;
}

#endif
