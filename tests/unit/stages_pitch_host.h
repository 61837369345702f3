/* A test-only stage host for the pitch/align/export tests: an ebb_host_api
 * with an item store, an output directory, captured log and error text, and
 * a "device" that is host memory (malloc, with a live-block count) whose
 * launch resolves kernels by name to their host twins (`fakegpu_twin_<name>`
 * via dlsym in this executable, as the fake driver does). It lets a test run
 * a stage's load/run/unload without the runner. */
#ifndef EBB_TESTS_STAGES_PITCH_HOST_H
#define EBB_TESTS_STAGES_PITCH_HOST_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/kernel_twin.h"
#include "ebb/error.h"
#include "ebb/stage.h"
#include "test.h"

#define TH_MAX_ITEMS 32

struct ebb_items {
  int n;
  ebb_item_info info[TH_MAX_ITEMS];
  void *owned[TH_MAX_ITEMS];
  char name[TH_MAX_ITEMS][64];
};

typedef struct th_ctx {
  ebb_stage_ctx base; /* first: the stage sees only this */
  ebb_dev_kind kind;
  int live_blocks, allocs, launches;
  char outdir[1024];
  char err[1024];
  char log[16384];
} th_ctx;

static inline th_ctx *th_of(ebb_stage_ctx *c) { return (th_ctx *)c; }

static void th_log(ebb_stage_ctx *c, int level, const char *msg) {
  th_ctx *t = th_of(c);
  size_t used = strlen(t->log);
  snprintf(t->log + used, sizeof t->log - used, "[%d] %s\n", level, msg);
}
static int th_set_error(ebb_stage_ctx *c, int code, const char *msg) {
  snprintf(th_of(c)->err, sizeof th_of(c)->err, "%s", msg);
  return code;
}
static int th_cancelled(ebb_stage_ctx *c) { return 0; }
static double th_seconds_left(ebb_stage_ctx *c) { return -1; }
static void th_progress(ebb_stage_ctx *c, double f) {}
static ebb_dev_kind th_kind(ebb_stage_ctx *c) { return th_of(c)->kind; }
static int th_dev_alloc(ebb_stage_ctx *c, size_t n, const char *site, uint64_t *p) {
  void *m = malloc(n ? n : 1);
  if (!m)
    return EBB_EOOM;
  th_of(c)->live_blocks++;
  th_of(c)->allocs++;
  *p = (uint64_t)(uintptr_t)m;
  return 0;
}
static int th_dev_free(ebb_stage_ctx *c, uint64_t p) {
  free((void *)(uintptr_t)p);
  th_of(c)->live_blocks--;
  return 0;
}
static int th_htod(ebb_stage_ctx *c, uint64_t d, const void *s, size_t n) {
  memcpy((void *)(uintptr_t)d, s, n);
  return 0;
}
static int th_dtoh(ebb_stage_ctx *c, void *d, uint64_t s, size_t n) {
  memcpy(d, (const void *)(uintptr_t)s, n);
  return 0;
}
static int th_memset8(ebb_stage_ctx *c, uint64_t d, unsigned char v, size_t n) {
  memset((void *)(uintptr_t)d, v, n);
  return 0;
}
static int th_launch(ebb_stage_ctx *c, const void *image, const char *name, const unsigned g[3],
                     const unsigned b[3], unsigned shared, void **params) {
  char sym[256];
  snprintf(sym, sizeof sym, "%s%s", EBB_TWIN_PREFIX, name);
  dev_kernel_twin_fn fn = (dev_kernel_twin_fn)dlsym(RTLD_DEFAULT, sym);
  if (!fn)
    return EBB_EDRIVER;
  dev_launch_dims d = {{g[0], g[1], g[2]}, {b[0], b[1], b[2]}, shared};
  fn(&d, params);
  th_of(c)->launches++;
  return 0;
}
static int th_item_count(const ebb_items *it) { return it->n; }
static int th_item_get(const ebb_items *it, int i, ebb_item_info *out) {
  if (i < 0 || i >= it->n)
    return EBB_ENOTFOUND;
  *out = it->info[i];
  return 0;
}
static int th_item_find(const ebb_items *it, const char *name, ebb_item_info *out) {
  for (int i = 0; i < it->n; i++)
    if (!strcmp(it->name[i], name)) {
      *out = it->info[i];
      return 0;
    }
  return EBB_ENOTFOUND;
}
static ebb_item_info *th_slot(ebb_items *it, const char *name, ebb_item_kind kind, void *owned) {
  if (it->n >= TH_MAX_ITEMS)
    return NULL;
  int i = it->n++;
  snprintf(it->name[i], sizeof it->name[i], "%s", name);
  memset(&it->info[i], 0, sizeof it->info[i]);
  it->info[i].size = sizeof it->info[i];
  it->info[i].kind = kind;
  it->info[i].name = it->name[i];
  it->owned[i] = owned;
  return &it->info[i];
}
static int th_add_audio(ebb_items *out, const char *name, const float *s, uint64_t frames,
                        uint32_t ch, uint32_t rate) {
  uint64_t total = frames * ch;
  float *c = malloc((total ? total : 1) * sizeof *c);
  if (!c)
    return EBB_ENOMEM;
  memcpy(c, s, frames * ch * sizeof *c);
  ebb_item_info *i = th_slot(out, name, EBB_ITEM_AUDIO, c);
  if (!i)
    return EBB_ENOMEM;
  i->samples = c, i->frames = frames, i->channels = ch, i->rate = rate;
  return 0;
}
static int th_add_tensor(ebb_items *out, const char *name, const float *d, uint32_t ndim,
                         const uint64_t *shape) {
  uint64_t n = 1;
  for (uint32_t k = 0; k < ndim; k++)
    n *= shape[k];
  float *c = malloc((n ? n : 1) * sizeof *c);
  if (!c)
    return EBB_ENOMEM;
  memcpy(c, d, n * sizeof *c);
  ebb_item_info *i = th_slot(out, name, EBB_ITEM_TENSOR, c);
  if (!i)
    return EBB_ENOMEM;
  i->data = c, i->ndim = ndim;
  for (uint32_t k = 0; k < ndim && k < 8; k++)
    i->shape[k] = shape[k];
  return 0;
}
static int th_add_text(ebb_items *out, const char *name, const char *text, ebb_item_kind kind) {
  char *c = strdup(text);
  ebb_item_info *i = c ? th_slot(out, name, kind, c) : NULL;
  if (!i)
    return EBB_ENOMEM;
  i->text = c;
  return 0;
}
static int th_add_json(ebb_items *out, const char *name, const char *json) {
  return th_add_text(out, name, json, EBB_ITEM_JSON);
}
static int th_add_file(ebb_items *out, const char *name, const char *path) {
  return th_add_text(out, name, path, EBB_ITEM_FILE);
}
static const char *th_output_dir(ebb_stage_ctx *c) { return th_of(c)->outdir; }
static const char *th_stage_name(ebb_stage_ctx *c) { return "test"; }

static const ebb_host_api th_api = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_host_api),
    .log = th_log,
    .set_error = th_set_error,
    .cancelled = th_cancelled,
    .seconds_left = th_seconds_left,
    .progress = th_progress,
    .device_kind = th_kind,
    .dev_alloc = th_dev_alloc,
    .dev_free = th_dev_free,
    .copy_htod = th_htod,
    .copy_dtoh = th_dtoh,
    .memset8 = th_memset8,
    .launch = th_launch,
    .item_count = th_item_count,
    .item_get = th_item_get,
    .item_find = th_item_find,
    .add_audio = th_add_audio,
    .add_tensor = th_add_tensor,
    .add_json = th_add_json,
    .add_file = th_add_file,
    .output_dir = th_output_dir,
    .stage_name = th_stage_name,
};

static inline void th_init(th_ctx *t, ebb_dev_kind kind) {
  memset(t, 0, sizeof *t);
  t->base.host = &th_api;
  t->kind = kind;
}

static inline void th_items_free(ebb_items *it) {
  for (int i = 0; i < it->n; i++)
    free(it->owned[i]);
  it->n = 0;
}

/* Runs stage load -> run -> unload; returns run's (or load's) code. */
static inline int th_run_stage(th_ctx *t, const ebb_stage *st, const char *opts,
                               const ebb_items *in, ebb_items *out) {
  void *state = NULL;
  int rc = st->load(&t->base, opts, &state);
  if (rc)
    return rc;
  rc = st->run(&t->base, state, in, out);
  st->unload(&t->base, state);
  return rc;
}

/* The stage refuses opts at load (EBB_ECONFIG) with an error naming name. */
static inline void th_check_refused(const ebb_stage *st, const char *opts, const char *name) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  void *state = NULL;
  CHECK_EQ_INT(st->load(&t.base, opts, &state), EBB_ECONFIG);
  CHECK_MSG(strstr(t.err, name) != NULL, "%s: the error does not name the option: %s", opts, t.err);
}

#endif
