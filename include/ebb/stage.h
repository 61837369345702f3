/* The stage ABI: what a stage author (built-in or plugin .so) writes against.
 * A stage sees only include/ebb/. Plugins never link against ebb's symbols:
 * everything they call goes through the host function table in their context
 * (ctx->host), and the inline wrappers below make that look like plain calls.
 *
 * Lifetime: load(options) once per stage instance -> run(job items) any number
 * of times -> unload. After every run (policy "after-stage") the runner calls
 * the stage's release (if any) and the release registry, then trims the
 * allocator, so everything the stage took that is not its loaded state is
 * handed back to the driver; with the default policy unload also follows each
 * job, so the stage holds nothing between jobs.
 *
 * Ownership: all device memory a stage takes through ebb_dev_alloc is owned by
 * the stage instance; what it did not free by unload is reported as a leak and
 * freed by ebb. Items a stage puts in its output are owned by the job. */
#ifndef EBB_STAGE_H
#define EBB_STAGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ebb/error_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EBB_STAGE_ABI_VERSION 1u

typedef struct ebb_stage_ctx ebb_stage_ctx;
typedef struct ebb_item ebb_item;
typedef struct ebb_items ebb_items;
typedef struct ebb_host_api ebb_host_api;
struct ebb_estimate;
struct ebb_work;

/* --- items ------------------------------------------------------------------ */
typedef enum {
  EBB_ITEM_AUDIO = 1,  /* float PCM, interleaved: data, frames, channels, rate */
  EBB_ITEM_TENSOR = 2, /* float32 tensor on host (data) or device (dptr) */
  EBB_ITEM_JSON = 3,   /* a JSON text (NUL-terminated) */
  EBB_ITEM_FILE = 4,   /* a path on disk */
} ebb_item_kind;

typedef struct ebb_item_info {
  uint32_t size; /* sizeof(ebb_item_info): grows by appending */
  ebb_item_kind kind;
  const char *name; /* "vocals", "transcript", ... unique within a job */
  /* AUDIO */
  const float *samples;
  uint64_t frames;
  uint32_t channels;
  uint32_t rate;
  /* TENSOR */
  const float *data; /* host tensor or NULL */
  uint64_t dptr;     /* device tensor or 0 */
  uint32_t ndim;
  uint64_t shape[8];
  /* JSON / FILE */
  const char *text; /* JSON text or file path */
} ebb_item_info;

/* --- the stage vtable ------------------------------------------------------ */
typedef struct ebb_stage {
  uint32_t abi_version; /* EBB_STAGE_ABI_VERSION, always first */
  uint32_t size;        /* sizeof(ebb_stage) */
  const char *name;     /* registry name ("synthetic", "separate") */
  uint32_t version;     /* bump when outputs change: keys the result cache */
  const char *description;
  /* JSON object: option name -> {"type": "number"|"integer"|"string"|"boolean",
   * "default": ..., "description": "..."}. Unknown options and wrong types are
   * rejected by ebb before load. */
  const char *options_schema;
  int needs_gpu; /* 1: prefers the GPU; still runs on the CPU device */

  /* Builds the stage's loaded state (weights). options_json is validated.
   * *state is the stage's own. Return 0 or an EBB_E... code with
   * ebb_set_error(ctx, ...) explaining it. */
  int (*load)(ebb_stage_ctx *ctx, const char *options_json, void **state);
  /* Reads `in` (the job's items so far), adds outputs with ebb_item_add_*. */
  int (*run)(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out);
  /* Frees the loaded state. Must not fail; what it leaves behind is a leak. */
  void (*unload)(ebb_stage_ctx *ctx, void *state);
  /* Optional: drop caches but keep the loaded state usable. */
  int (*release)(ebb_stage_ctx *ctx, void *state);

  /* --- appended after the first release: a stage built against the older,
   * shorter struct (size EBB_STAGE_SIZE_V1) still loads; read these only
   * through EBB_STAGE_HAS(st, field). --- */
  /* Optional: the memory a run of this stage will need, declared before it
   * runs (placement, "will it fit", `ebb stages`), checked by ebb against
   * the measured peak after every run. options_json: the merged options;
   * in: the job's items so far (NULL when no job is known: answer for no
   * input). Fills out (out->size is set by ebb; write only what fits). */
  int (*estimate)(const ebb_host_api *host, const char *options_json, const ebb_items *in,
                  struct ebb_estimate *out);

  /* --- appended in the third round: a stage built against the struct that
   * ends with estimate (size EBB_STAGE_SIZE_V2) still loads and simply gives
   * no work estimate. --- */
  /* Optional: the work a run of this stage will take on input_s seconds of
   * input audio (what decode reads; 0: unknown, answer for none), from its
   * merged options (options_json), before the job is queued. The server
   * refuses a job whose stages' work adds up to more than its limit
   * (docs/api.md, "Security"). Fills out (out->size is set by ebb; write
   * only what fits). */
  int (*work)(const ebb_host_api *host, const char *options_json, double input_s,
              struct ebb_work *out);
} ebb_stage;

/* What work answers. Grows by appending (size first). */
typedef struct ebb_work {
  uint32_t size;       /* sizeof(ebb_work), set by ebb */
  uint32_t input_rate; /* set by ebb: the input file's sample rate from its header
                        * (0: unknown) */
  double cpu_s;        /* estimated CPU seconds on one reference core (docs/stage-abi.md) */
  double wait_s;       /* the longest it may wait on something else (a remote), bounded
                   * by its own options; not counted in cpu_s (0: none) */
  char drivers[128];   /* the options that drive the cost, as the refusal shows them:
                      * "hop 1, frame 65536" (NUL-terminated; may be empty) */
} ebb_work;

/* What estimate answers. Grows by appending (size first). */
typedef struct ebb_estimate {
  uint32_t size;             /* sizeof(ebb_estimate), set by ebb */
  uint64_t device_bytes;     /* peak device bytes of the stage's owner for this input */
  uint64_t host_bytes;       /* peak host bytes (pinned + host_alloc) for this input */
  double device_bytes_per_s; /* of which: per second of audio input (0: not per second) */
  double host_bytes_per_s;   /* likewise, host */
} ebb_estimate;

#define EBB_STAGE_SIZE_V1 ((uint32_t)offsetof(ebb_stage, estimate))
/* The struct that ends with estimate (before work was appended). */
#define EBB_STAGE_SIZE_V2 ((uint32_t)offsetof(ebb_stage, work))
/* 1 when stage st is new enough to have field (and it may still be NULL). */
#define EBB_STAGE_HAS(st, field) ((st)->size >= offsetof(ebb_stage, field) + sizeof((st)->field))

/* A plugin .so exports this one symbol. It checks host->abi_version, keeps the
 * host table and returns its stages (static storage) in *stages / *n. */
#define EBB_PLUGIN_INIT_SYMBOL "ebb_plugin_init"
typedef int (*ebb_plugin_init_fn)(const ebb_host_api *host, const ebb_stage *const **stages,
                                  size_t *n);

/* --- the host function table ---------------------------------------------- */
typedef enum { EBB_DEV_KIND_CPU = 0, EBB_DEV_KIND_CUDA = 1 } ebb_dev_kind;
typedef void (*ebb_release_fn)(void *arg);

struct ebb_host_api {
  uint32_t abi_version; /* EBB_STAGE_ABI_VERSION */
  uint32_t size;        /* sizeof(ebb_host_api): new functions are appended */

  /* messages and control */
  void (*log)(ebb_stage_ctx *ctx, int level, const char *msg); /* 0 debug .. 3 error */
  int (*set_error)(ebb_stage_ctx *ctx, int code, const char *msg);
  int (*cancelled)(ebb_stage_ctx *ctx);       /* 1 when the job was cancelled or ran out of time */
  double (*seconds_left)(ebb_stage_ctx *ctx); /* before the stage's deadline; <0 none */
  void (*progress)(ebb_stage_ctx *ctx, double fraction);

  /* device */
  ebb_dev_kind (*device_kind)(ebb_stage_ctx *ctx);
  /* Device memory owned by this stage instance. site: "file.c:123". On the
   * CPU device the returned address is a host pointer. */
  int (*dev_alloc)(ebb_stage_ctx *ctx, size_t bytes, const char *site, uint64_t *dptr);
  int (*dev_free)(ebb_stage_ctx *ctx, uint64_t dptr);
  int (*copy_htod)(ebb_stage_ctx *ctx, uint64_t dst, const void *src, size_t n);
  int (*copy_dtoh)(ebb_stage_ctx *ctx, void *dst, uint64_t src, size_t n);
  int (*memset8)(ebb_stage_ctx *ctx, uint64_t dst, unsigned char v, size_t n);
  /* Launches kernel `name` from the fatbin image (NULL: by name only, the
   * fake driver's host twins). Synchronous. */
  int (*launch)(ebb_stage_ctx *ctx, const void *image, const char *name, const unsigned grid[3],
                const unsigned block[3], unsigned shared_bytes, void **params);
  /* Pinned host buffers owned by this stage instance. */
  int (*pinned_alloc)(ebb_stage_ctx *ctx, size_t bytes, void **p);
  int (*pinned_free)(ebb_stage_ctx *ctx, void *p);
  /* Driver memory taken behind ebb's back (diagnostics only: the synthetic
   * stage's outside_mib). Returns 0 and the address, or an error. */
  int (*raw_driver_alloc)(ebb_stage_ctx *ctx, size_t bytes, uint64_t *dptr);

  /* release registry: fn(arg) drops something this stage cached */
  int (*on_release)(ebb_stage_ctx *ctx, const char *name, ebb_release_fn fn, void *arg,
                    uint64_t *handle);
  int (*off_release)(ebb_stage_ctx *ctx, uint64_t handle);

  /* items: the job owns what is added; data is copied */
  int (*item_count)(const ebb_items *items);
  int (*item_get)(const ebb_items *items, int i, ebb_item_info *out);
  int (*item_find)(const ebb_items *items, const char *name, ebb_item_info *out);
  int (*add_audio)(ebb_items *out, const char *name, const float *samples, uint64_t frames,
                   uint32_t channels, uint32_t rate);
  int (*add_tensor)(ebb_items *out, const char *name, const float *data, uint32_t ndim,
                    const uint64_t *shape);
  int (*add_json)(ebb_items *out, const char *name, const char *json);
  int (*add_file)(ebb_items *out, const char *name, const char *path);

  /* where outputs go (the job's output directory) and scratch space */
  const char *(*output_dir)(ebb_stage_ctx *ctx);
  const char *(*stage_name)(ebb_stage_ctx *ctx); /* the instance name in logs */

  /* --- appended after the first release (check host->size before use) --- */
  /* Gives back memory from raw_driver_alloc. What a stage does not give back
   * is freed by ebb when the stage is released. */
  int (*raw_driver_free)(ebb_stage_ctx *ctx, uint64_t dptr);
  /* Pageable host memory owned by this stage instance, counted like its
   * pinned buffers (current, peak; `ebb run` reports the host peak beside
   * the device peak); what it does not free by unload is a leak, reported
   * and freed by ebb. zero: cleared like calloc. site: "file.c:123".
   * 16-byte aligned. host_free(NULL) is a no-op. */
  int (*host_alloc)(ebb_stage_ctx *ctx, size_t bytes, int zero, const char *site, void **p);
  int (*host_free)(ebb_stage_ctx *ctx, void *p);
};

/* The first member of every context is the host table, so the wrappers below
 * work in plugins without linking against ebb. */
struct ebb_stage_ctx {
  const ebb_host_api *host;
};

#define EBB_SITE_STR2_(x) #x
#define EBB_SITE_STR_(x) EBB_SITE_STR2_(x)
#define EBB_SITE __FILE__ ":" EBB_SITE_STR_(__LINE__)

/* Wrappers: ebb_dev_alloc(ctx, n, &p) records the caller's file:line. */
#define ebb_dev_alloc(ctx, bytes, dptr) ((ctx)->host->dev_alloc((ctx), (bytes), EBB_SITE, (dptr)))
static inline int ebb_dev_free(ebb_stage_ctx *c, uint64_t p) { return c->host->dev_free(c, p); }
/* ebb_host_alloc(ctx, n, &p) / ebb_host_calloc: pageable host memory owned by
 * the stage (the caller's file:line recorded); NULL ctx or a host table
 * older than host_alloc (or without it): plain malloc/calloc, uncounted. ebb_host_free
 * likewise. */
#define EBB_HOST_HAS_ALLOC_(c)                                                     \
  ((c) && (c)->host->size >= offsetof(ebb_host_api, host_free) + sizeof(void *) && \
   (c)->host->host_alloc && (c)->host->host_free)
static inline void *ebb_host_alloc_at_(ebb_stage_ctx *c, size_t n, int zero, const char *site) {
  void *p = NULL;
  if (!EBB_HOST_HAS_ALLOC_(c))
    return zero ? calloc(1, n ? n : 1) : malloc(n ? n : 1);
  return c->host->host_alloc(c, n, zero, site, &p) == 0 ? p : NULL;
}
#define ebb_host_alloc(ctx, bytes) ebb_host_alloc_at_((ctx), (bytes), 0, EBB_SITE)
#define ebb_host_calloc(ctx, count, size) ebb_host_alloc_at_((ctx), (count) * (size), 1, EBB_SITE)
static inline void ebb_host_free(ebb_stage_ctx *c, void *p) {
  if (!p)
    return;
  if (!EBB_HOST_HAS_ALLOC_(c))
    free(p);
  else
    c->host->host_free(c, p);
}
static inline ebb_dev_kind ebb_device_kind(ebb_stage_ctx *c) { return c->host->device_kind(c); }
static inline int ebb_set_error(ebb_stage_ctx *c, int code, const char *msg) {
  return c->host->set_error(c, code, msg);
}
static inline void ebb_stage_log(ebb_stage_ctx *c, int level, const char *msg) {
  c->host->log(c, level, msg);
}
static inline int ebb_cancelled(ebb_stage_ctx *c) { return c->host->cancelled(c); }

#ifdef __cplusplus
}
#endif
#endif
