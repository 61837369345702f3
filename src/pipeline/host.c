/* The host side of the stage ABI (host.h): the ebb_host_api table and the
 * per-instance context behind each ebb_stage_ctx. */
#include "pipeline/host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/log.h"
#include "pipeline/items.h"

uint64_t pl_driver_free(dev_device *dev, int *known) {
  dev_meminfo mi;
  int ok = dev_mem_info(dev, &mi) == 0 && mi.source != EBB_MEMINFO_NONE;
  if (known)
    *known = ok;
  return ok ? mi.free_bytes : 0;
}

#define C(ctx) pl_sctx_of(ctx)

static void h_log(ebb_stage_ctx *ctx, int level, const char *msg) {
  if (level < 0)
    level = 0;
  if (level > 3)
    level = 3;
  base_log((base_log_level)level, C(ctx)->name, "%s", msg ? msg : "");
}

static int h_set_error(ebb_stage_ctx *ctx, int code, const char *msg) {
  pl_sctx *c = C(ctx);
  if (code >= 0)
    code = EBB_ESTAGE;
  c->err_code = code;
  snprintf(c->err_msg, sizeof c->err_msg, "%s", msg ? msg : ebb_strerror(code));
  return ebb_seterr(code, "%s", c->err_msg);
}

static int h_cancelled(ebb_stage_ctx *ctx) {
  pl_sctx *c = C(ctx);
  if (c->cancel && atomic_load(c->cancel))
    return 1;
  if (c->deadline > 0 && base_now() >= c->deadline) {
    atomic_store(&c->timed_out, 1);
    return 1;
  }
  return 0;
}

static double h_seconds_left(ebb_stage_ctx *ctx) {
  pl_sctx *c = C(ctx);
  if (c->deadline <= 0)
    return -1;
  double left = c->deadline - base_now();
  return left > 0 ? left : 0;
}

static void h_progress(ebb_stage_ctx *ctx, double f) { C(ctx)->progress = f; }

static ebb_dev_kind h_device_kind(ebb_stage_ctx *ctx) {
  return dev_kind_of(C(ctx)->dev) == EBB_DEVICE_CUDA ? EBB_DEV_KIND_CUDA : EBB_DEV_KIND_CPU;
}

static int h_dev_alloc(ebb_stage_ctx *ctx, size_t bytes, const char *site, uint64_t *dptr) {
  pl_sctx *c = C(ctx);
  if (!dptr || !bytes)
    return ebb_seterr(EBB_EINVAL, "%s: dev_alloc of %zu bytes", c->name, bytes);
  int rc = mem_alloc(c->owner, bytes, site, dptr);
  /* Out of memory after the allocator's own trim: evict idle stages, retry. */
  if (rc == EBB_EOOM && c->on_oom && c->on_oom(c->on_oom_arg, c))
    rc = mem_alloc(c->owner, bytes, site, dptr);
  return rc;
}

static int h_dev_free(ebb_stage_ctx *ctx, uint64_t dptr) {
  pl_sctx *c = C(ctx);
  ebb_owner *o = NULL;
  size_t sz;
  if (!dptr)
    return 0;
  if (mem_lookup(c->alloc, dptr, &o, &sz) != 0 || o != c->owner)
    return ebb_seterr(EBB_EINVAL, "%s: dev_free(0x%llx): not a block of this stage", c->name,
                      (unsigned long long)dptr);
  return mem_free(c->alloc, dptr);
}

static int h_copy_htod(ebb_stage_ctx *ctx, uint64_t dst, const void *src, size_t n) {
  return dev_copy_htod(C(ctx)->dev, dst, src, n);
}
static int h_copy_dtoh(ebb_stage_ctx *ctx, void *dst, uint64_t src, size_t n) {
  return dev_copy_dtoh(C(ctx)->dev, dst, src, n);
}
static int h_memset8(ebb_stage_ctx *ctx, uint64_t dst, unsigned char v, size_t n) {
  return dev_memset8(C(ctx)->dev, dst, v, n);
}

static int h_launch(ebb_stage_ctx *ctx, const void *image, const char *name, const unsigned grid[3],
                    const unsigned block[3], unsigned shared_bytes, void **params) {
  pl_sctx *c = C(ctx);
  dev_module *m = NULL;
  for (size_t i = 0; i < c->nmods; i++)
    if (c->mods[i].image == image)
      m = c->mods[i].module;
  if (!m) {
    pl_sctx_mod *v = realloc(c->mods, (c->nmods + 1) * sizeof *v);
    if (!v)
      return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", c->name);
    c->mods = v;
    int rc = dev_module_load(c->dev, image, &m);
    if (rc)
      return ebb_errctx(rc, "%s: loading the kernels for '%s': ", c->name, name);
    c->mods[c->nmods++] = (pl_sctx_mod){image, m};
  }
  dev_kernel *k;
  int rc = dev_device_kernel(c->dev, m, name, &k);
  if (rc)
    return ebb_errctx(rc, "%s: kernel '%s': ", c->name, name);
  return dev_launch(c->dev, k, grid, block, shared_bytes, params);
}

static int h_pinned_alloc(ebb_stage_ctx *ctx, size_t bytes, void **p) {
  return mem_pinned_alloc(C(ctx)->owner, bytes, p);
}
static int h_pinned_free(ebb_stage_ctx *ctx, void *p) { return mem_pinned_free(C(ctx)->alloc, p); }

/* The context's array v (n used of *cap, elem bytes each), grown so one
 * more fits: the array to keep, or NULL (EBB_ENOMEM set, naming the stage;
 * v is untouched). */
static void *room_for_one(pl_sctx *c, void *v, size_t *cap, size_t n, size_t elem) {
  if (n < *cap)
    return v;
  size_t ncap = *cap ? *cap * 2 : 4;
  void *nv = realloc(v, ncap * elem);
  if (!nv) {
    ebb_seterr(EBB_ENOMEM, "%s: out of host memory", c->name);
    return NULL;
  }
  *cap = ncap;
  return nv;
}

static int h_raw_alloc(ebb_stage_ctx *ctx, size_t bytes, uint64_t *dptr) {
  pl_sctx *c = C(ctx);
  if (!dptr || !bytes)
    return ebb_seterr(EBB_EINVAL, "%s: raw_driver_alloc of %zu bytes", c->name, bytes);
  dev_dseg *raw = room_for_one(c, c->raw, &c->capraw, c->nraw, sizeof *raw);
  if (!raw)
    return EBB_ENOMEM;
  c->raw = raw;
  dev_dseg seg;
  int rc = dev_seg_alloc(c->dev, bytes, EBB_SEG_PLAIN, &seg);
  if (rc)
    return ebb_errctx(rc, "%s: raw driver allocation of %zu MiB: ", c->name, bytes >> 20);
  c->raw[c->nraw++] = seg;
  c->raw_bytes += seg.size;
  *dptr = seg.addr;
  return 0;
}

static int raw_free_at(pl_sctx *c, size_t i) {
  dev_dseg seg = c->raw[i];
  c->raw[i] = c->raw[--c->nraw];
  c->raw_bytes -= seg.size;
  c->raw_freed += seg.size;
  return dev_seg_free(c->dev, &seg);
}

static int h_raw_free(ebb_stage_ctx *ctx, uint64_t dptr) {
  pl_sctx *c = C(ctx);
  for (size_t i = 0; i < c->nraw; i++)
    if (c->raw[i].addr == dptr)
      return raw_free_at(c, i);
  return ebb_seterr(EBB_EINVAL, "%s: raw_driver_free(0x%llx): not from raw_driver_alloc", c->name,
                    (unsigned long long)dptr);
}

static int h_on_release(ebb_stage_ctx *ctx, const char *name, ebb_release_fn fn, void *arg,
                        uint64_t *handle) {
  pl_sctx *c = C(ctx);
  uint64_t *handles = room_for_one(c, c->handles, &c->caphandles, c->nhandles, sizeof *handles);
  if (!handles)
    return EBB_ENOMEM;
  c->handles = handles;
  char full[256];
  snprintf(full, sizeof full, "%s: %s", c->name, name ? name : "cache");
  uint64_t h;
  int rc = mem_on_release_for(c->owner, full, fn, arg, &h); /* this instance's own */
  if (rc)
    return rc;
  c->handles[c->nhandles++] = h;
  if (handle)
    *handle = h;
  return 0;
}

static int h_off_release(ebb_stage_ctx *ctx, uint64_t handle) {
  pl_sctx *c = C(ctx);
  for (size_t i = 0; i < c->nhandles; i++)
    if (c->handles[i] == handle) {
      c->handles[i] = c->handles[--c->nhandles];
      return mem_off_release(handle);
    }
  return ebb_seterr(EBB_ENOTFOUND, "%s: off_release: handle %llu is not this stage's", c->name,
                    (unsigned long long)handle);
}

/* --- pageable host memory, owned by the stage instance ---------------------------- */
typedef struct pl_hblock { /* 32 bytes before the stage's bytes: they stay 16-aligned */
  struct pl_hblock *prev, *next;
  size_t size;      /* the stage's bytes; top bit: the block is its own mapping */
  const char *site; /* static storage (EBB_SITE) */
} pl_hblock;

/* Blocks this large get a mapping of their own: freeing one gives its pages
 * back to the kernel at once (malloc's heap may keep them), so the host
 * peak a stage reports is memory it really made resident. */
#define HOST_MAP_MIN ((size_t)256 << 10)
#define HOST_MAPPED ((size_t)1 << (sizeof(size_t) * 8 - 1))

static void *hblock_get(size_t bytes, int zero, int *mapped) {
  size_t total = sizeof(pl_hblock) + bytes;
  *mapped = bytes >= HOST_MAP_MIN;
  if (!*mapped)
    return zero ? calloc(1, total) : malloc(total);
  void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return m == MAP_FAILED ? NULL : m; /* zeroed by the kernel */
}

static void hblock_put(pl_hblock *b) {
  if (b->size & HOST_MAPPED)
    munmap(b, sizeof *b + (b->size & ~HOST_MAPPED));
  else
    free(b);
}
#define HSIZE(b) ((b)->size & ~HOST_MAPPED)

static int h_host_alloc(ebb_stage_ctx *ctx, size_t bytes, int zero, const char *site, void **p) {
  pl_sctx *c = C(ctx);
  if (!p)
    return ebb_seterr(EBB_EINVAL, "%s: host_alloc without an out-param", c->name);
  *p = NULL;
  if (bytes > SIZE_MAX - sizeof(pl_hblock))
    return ebb_seterr(EBB_ENOMEM, "%s: host_alloc of %zu bytes: too large", c->name, bytes);
  int mapped;
  pl_hblock *b = hblock_get(bytes, zero, &mapped);
  if (!b)
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory (asked for %zu MiB at %s)", c->name,
                      bytes >> 20, site ? site : "?");
  b->size = bytes | (mapped ? HOST_MAPPED : 0);
  b->site = site;
  b->prev = NULL;
  b->next = c->host_blocks;
  if (b->next)
    b->next->prev = b;
  c->host_blocks = b;
  c->host_nblocks++;
  c->host_bytes += bytes;
  c->host_total += bytes;
  if (c->host_bytes > c->host_peak)
    c->host_peak = c->host_bytes;
  *p = b + 1;
  return 0;
}

static void hblock_unlink(pl_sctx *c, pl_hblock *b) {
  if (b->prev)
    b->prev->next = b->next;
  else
    c->host_blocks = b->next;
  if (b->next)
    b->next->prev = b->prev;
  c->host_nblocks--;
  c->host_bytes -= HSIZE(b);
}

/* Looks p up among the live blocks (never reads memory that is not its
 * own): EBB_ENOTFOUND, nothing done, for a pointer host_alloc did not give. */
static int h_host_free(ebb_stage_ctx *ctx, void *p) {
  if (!p)
    return 0;
  pl_sctx *c = C(ctx);
  for (pl_hblock *b = c->host_blocks; b; b = b->next)
    if ((void *)(b + 1) == p) {
      hblock_unlink(c, b);
      hblock_put(b);
      return 0;
    }
  return ebb_seterr(EBB_ENOTFOUND, "%s: host_free(%p): not from this stage's host_alloc", c->name,
                    p);
}

uint64_t pl_sctx_host_peak(pl_sctx *c) {
  mem_owner_stats os = {.size = sizeof os};
  uint64_t pinned = c->owner && mem_owner_get_stats(c->owner, &os) == 0 ? os.pinned_bytes.peak : 0;
  return c->host_peak + pinned;
}

uint64_t pl_sctx_host_reclaim(pl_sctx *c, int quiet, uint32_t *blocks) {
  uint64_t bytes = c->host_bytes;
  uint32_t n = c->host_nblocks;
  if (n && !quiet) {
    base_log(EBB_LOG_WARN, c->name, "leaked %llu MiB of host memory in %u blocks; freed by ebb",
             (unsigned long long)(bytes >> 20), n);
    int shown = 0;
    for (pl_hblock *b = c->host_blocks; b && shown < 5; b = b->next, shown++)
      base_log(EBB_LOG_WARN, c->name, "  %zu bytes at %s", HSIZE(b), b->site ? b->site : "?");
  }
  while (c->host_blocks) {
    pl_hblock *b = c->host_blocks;
    hblock_unlink(c, b);
    hblock_put(b);
  }
  if (blocks)
    *blocks = n;
  return bytes;
}

static int h_item_count(const ebb_items *items) { return pl_items_count(items); }
static int h_item_get(const ebb_items *items, int i, ebb_item_info *out) {
  return pl_items_get(items, i, out);
}
static int h_item_find(const ebb_items *items, const char *name, ebb_item_info *out) {
  return pl_items_find(items, name, out);
}

static const char *h_output_dir(ebb_stage_ctx *ctx) {
  return C(ctx)->output_dir ? C(ctx)->output_dir : ".";
}
static const char *h_stage_name(ebb_stage_ctx *ctx) { return C(ctx)->name; }

static const ebb_host_api host_table = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_host_api),
    .log = h_log,
    .set_error = h_set_error,
    .cancelled = h_cancelled,
    .seconds_left = h_seconds_left,
    .progress = h_progress,
    .device_kind = h_device_kind,
    .dev_alloc = h_dev_alloc,
    .dev_free = h_dev_free,
    .copy_htod = h_copy_htod,
    .copy_dtoh = h_copy_dtoh,
    .memset8 = h_memset8,
    .launch = h_launch,
    .pinned_alloc = h_pinned_alloc,
    .pinned_free = h_pinned_free,
    .raw_driver_alloc = h_raw_alloc,
    .on_release = h_on_release,
    .off_release = h_off_release,
    .item_count = h_item_count,
    .item_get = h_item_get,
    .item_find = h_item_find,
    .add_audio = pl_items_add_audio,
    .add_tensor = pl_items_add_tensor,
    .add_json = pl_items_add_json,
    .add_file = pl_items_add_file,
    .output_dir = h_output_dir,
    .stage_name = h_stage_name,
    .raw_driver_free = h_raw_free,
    .host_alloc = h_host_alloc,
    .host_free = h_host_free,
};

const ebb_host_api *pl_host_table(void) { return &host_table; }

void pl_sctx_init(pl_sctx *c, dev_device *dev, ebb_owner *owner, const char *name,
                  const char *output_dir) {
  memset(c, 0, sizeof *c);
  c->pub.host = &host_table;
  c->dev = dev;
  c->owner = owner;
  c->alloc = owner ? mem_owner_allocator(owner) : NULL;
  if (owner)
    mem_owner_set_kind(owner, "stage"); /* "stage 'separate' asked for ..." */
  snprintf(c->name, sizeof c->name, "%s", name);
  c->output_dir = output_dir;
  atomic_init(&c->timed_out, 0);
}

void pl_sctx_cleanup(pl_sctx *c) {
  pl_sctx_host_reclaim(c, 1, NULL); /* the instance reported them already */
  for (size_t i = 0; i < c->nhandles; i++)
    mem_off_release(c->handles[i]);
  c->nhandles = 0;
  while (c->nraw)
    raw_free_at(c, c->nraw - 1);
  for (size_t i = 0; i < c->nmods; i++)
    dev_module_unload(c->dev, c->mods[i].module);
  free(c->handles);
  free(c->raw);
  free(c->mods);
  c->handles = NULL;
  c->raw = NULL;
  c->mods = NULL;
  c->caphandles = c->capraw = c->nmods = 0;
}

void pl_sctx_clear_error(pl_sctx *c) {
  c->err_code = 0;
  c->err_msg[0] = '\0';
}
