/* Memory pools and stream-ordered allocation (cuMemAllocAsync/FreeAsync).
 *
 * Each device has a default pool (the current pool until cuDeviceSetMemPool
 * or cuMemSetMemPool); cuMemPoolCreate makes more. As on the driver, a pool
 * reserves device memory in chunks (each a device allocation like
 * cuMemAlloc's: a memfd, counted on the device in fakegpu-smi, rounded to the
 * granularity, at least one granule) and carves its allocations (blocks,
 * 512-byte aligned) out of them, first fit: small allocations share a chunk.
 * A freed block goes back to its chunk at once; a chunk with no block stays
 * reserved until the next synchronisation (cuStreamSynchronize,
 * cuEventSynchronize, cuCtxSynchronize, cuMemFree), when the pool gives back
 * empty chunks while its reserved memory is over its release threshold
 * (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0 by default); cuMemPoolTrimTo gives
 * them back at once, down to the bytes asked to keep, and so does an
 * allocation that would otherwise run out of memory. Used memory is the
 * bytes the blocks asked for. Pool memory belongs to the context that
 * allocated it and dies with it. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_POOL_MAGIC 0x9001f00du

struct fk_pool {
  uint32_t magic;
  int device; /* ordinal */
  int is_default;
  uint64_t release_threshold;
  uint64_t reserved_high, used_high;
  int reuse[4];               /* attributes 1..3, all on by default */
  int access[FG_MAX_DEVICES]; /* other devices' access (cuMemPoolSetAccess); own: read-write */
  struct fk_pool *next;
};

static struct fk_pool g_default[FG_MAX_DEVICES];
static struct fk_pool *g_current[FG_MAX_DEVICES]; /* NULL: the default */
static struct fk_pool *g_pools;                   /* created pools */

static struct fk_pool *default_pool(int dev) {
  struct fk_pool *p = &g_default[dev];
  if (p->magic != FK_POOL_MAGIC) {
    p->magic = FK_POOL_MAGIC;
    p->device = dev;
    p->is_default = 1;
    p->reuse[1] = p->reuse[2] = p->reuse[3] = 1;
  }
  return p;
}

static struct fk_pool *pool_check(CUmemoryPool h) {
  for (int d = 0; d < FG_MAX_DEVICES; d++)
    if (h == &g_default[d])
      return h->magic == FK_POOL_MAGIC && (unsigned)d < fk_ndevices ? h : NULL;
  for (struct fk_pool *p = g_pools; p; p = p->next)
    if (p == h)
      return p;
  return NULL;
}

#define FK_POOL_ALIGN 512

/* Reserved (the chunks, mapped) and used (the bytes asked for by the blocks
 * not yet freed, as the driver reports them) of a pool. Caller holds
 * fk_lock. */
typedef struct pool_usage {
  uint64_t reserved, used;
} pool_usage;

static pool_usage usage_of(const struct fk_pool *p) {
  pool_usage u = {0, 0};
  for (fk_alloc *a = fk_alloc_first(); a; a = a->next) {
    if (a->pool != p)
      continue;
    if (a->chunk)
      u.reserved += a->mapped;
    else
      u.used += a->size;
  }
  return u;
}

static int chunk_empty(const fk_alloc *chunk) {
  for (fk_alloc *a = fk_alloc_first(); a; a = a->next)
    if (a->parent == chunk)
      return 0;
  return 1;
}

/* Gives empty chunks back (largest first) until the pool's reserved memory
 * is at most keep. Caller holds fk_lock. */
static void trim(struct fk_pool *p, uint64_t keep) {
  for (;;) {
    pool_usage u = usage_of(p);
    if (u.reserved <= keep)
      return;
    fk_alloc *big = NULL;
    for (fk_alloc *a = fk_alloc_first(); a; a = a->next)
      if (a->pool == p && a->chunk && (!big || a->mapped > big->mapped) && chunk_empty(a))
        big = a;
    if (!big)
      return;
    fk_alloc_unlink_free(big);
  }
}

void fk_pools_sync(void) {
  for (int d = 0; d < FG_MAX_DEVICES; d++)
    if (g_default[d].magic == FK_POOL_MAGIC)
      trim(&g_default[d], g_default[d].release_threshold);
  for (struct fk_pool *p = g_pools; p; p = p->next)
    trim(p, p->release_threshold);
}

static void note_high(struct fk_pool *p) {
  pool_usage u = usage_of(p);
  if (u.reserved > p->reserved_high)
    p->reserved_high = u.reserved;
  if (u.used > p->used_high)
    p->used_high = u.used;
}

/* --- allocation ---------------------------------------------------------------------- */
static uint64_t align_up(uint64_t n) {
  return (n + FK_POOL_ALIGN - 1) & ~(uint64_t)(FK_POOL_ALIGN - 1);
}

static int by_addr(const void *x, const void *y) {
  uint64_t a = (*(const fk_alloc *const *)x)->addr, b = (*(const fk_alloc *const *)y)->addr;
  return a < b ? -1 : a > b;
}

/* The lowest address in chunk where want bytes are free, or 0: one walk
 * collects the chunk's blocks, one sweep in address order finds the gap.
 * Caller holds fk_lock. */
static uint64_t gap_in(const fk_alloc *chunk, uint64_t want) {
  size_t n = 0, cap = 0;
  const fk_alloc **blocks = NULL;
  for (fk_alloc *a = fk_alloc_first(); a; a = a->next) {
    if (a->parent != chunk)
      continue;
    if (n == cap) {
      const fk_alloc **grown = realloc(blocks, (cap = cap ? 2 * cap : 16) * sizeof *blocks);
      if (!grown) {
        free(blocks);
        return 0; /* no room found: the caller takes a new chunk */
      }
      blocks = grown;
    }
    blocks[n++] = a;
  }
  if (n > 1)
    qsort(blocks, n, sizeof *blocks, by_addr);
  uint64_t at = chunk->addr, end = chunk->addr + chunk->mapped, found = 0;
  for (size_t i = 0; i <= n && !found; i++) {
    uint64_t next = i < n ? blocks[i]->addr : end; /* the free run [at, next) */
    if (next >= at && next - at >= want)
      found = at;
    else if (i < n && blocks[i]->addr + align_up(blocks[i]->size) > at)
      at = blocks[i]->addr + align_up(blocks[i]->size);
  }
  free(blocks);
  return found;
}

static CUresult alloc_from(struct fk_pool *p, struct CUctx_st *c, size_t bytes, CUdeviceptr *dptr) {
  uint64_t want = align_up(bytes), at = 0;
  fk_alloc *chunk = NULL;
  for (fk_alloc *a = fk_alloc_first(); a && !at; a = a->next)
    if (a->pool == p && a->chunk && a->ctx == c && a->mapped >= want && (at = gap_in(a, want)))
      chunk = a;
  if (!chunk) {
    CUresult rc = fk_alloc_device(c, want, &chunk);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
      /* What the pool holds in reserve goes back before the driver gives up. */
      trim(p, 0);
      rc = fk_alloc_device(c, want, &chunk);
    }
    if (rc)
      return rc;
    chunk->pool = p;
    chunk->chunk = 1;
    at = chunk->addr;
  }
  fk_alloc *b = fk_alloc_new(FK_ALLOC_DEVICE, c);
  if (!b) {
    if (chunk_empty(chunk))
      trim(p, p->release_threshold);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  b->addr = at;
  b->size = bytes;
  b->pool = p;
  b->parent = chunk;
  fk_alloc_link(b);
  note_high(p);
  *dptr = b->addr;
  return CUDA_SUCCESS;
}

void fk_pool_block_free(fk_alloc *b) {
  fk_alloc *chunk = b->parent;
  if (fk_cfg.poison)
    memset((void *)(uintptr_t)b->addr, FK_POISON_BYTE, b->size);
  fk_alloc_unlink_free(b);
  if (!chunk->pool && chunk_empty(chunk)) /* its pool was destroyed */
    fk_alloc_unlink_free(chunk);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s,
                            int from_current) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  struct fk_pool *p = NULL;
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s);
  if (rc == CUDA_SUCCESS) {
    p = from_current ? (g_current[c->device] ? g_current[c->device] : default_pool(c->device))
                     : pool_check(pool);
    if (!dptr || bytes == 0 || !p)
      rc = CUDA_ERROR_INVALID_VALUE;
    else if (p->device != c->device)
      rc = CUDA_ERROR_INVALID_DEVICE;
  }
  if (rc == CUDA_SUCCESS)
    rc = alloc_from(p, c, bytes, dptr);
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s) {
  return alloc_async(dptr, bytes, NULL, s, 1);
}

FK_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                        CUstream s) {
  return alloc_async(dptr, bytes, pool, s, 0);
}

/* Frees an allocation of cuMemAllocAsync (into its pool) or of cuMemAlloc. */
FK_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_alloc *a = rc ? NULL : fk_alloc_at(dptr);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && !a)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s);
  if (rc == CUDA_SUCCESS) {
    if (a->parent)
      fk_pool_block_free(a); /* its chunk stays reserved until a synchronisation */
    else
      fk_alloc_unlink_free(a);
  }
  fk_unlock();
  return rc;
}

/* --- pools --------------------------------------------------------------------------- */
FK_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc == CUDA_SUCCESS && !pool)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    fk_lock();
    *pool = default_pool(dev);
    fk_unlock();
  }
  return rc;
}

FK_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc == CUDA_SUCCESS && !pool)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    fk_lock();
    *pool = g_current[dev] ? g_current[dev] : default_pool(dev);
    fk_unlock();
  }
  return rc;
}

FK_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  fk_lock();
  struct fk_pool *p = pool_check(pool);
  if (!p)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (p->device != dev)
    rc = CUDA_ERROR_INVALID_DEVICE;
  else
    g_current[dev] = p->is_default ? NULL : p;
  fk_unlock();
  return rc;
}

/* The CUDA 13 forms name a location; the fake has pools of device memory only. */
static CUresult location_device(const CUmemLocation *loc, CUmemAllocationType type, CUdevice *dev) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!loc || type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED;
  *dev = loc->id;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *loc,
                                       CUmemAllocationType type) {
  CUdevice dev;
  CUresult rc = location_device(loc, type, &dev);
  return rc ? rc : cuDeviceGetDefaultMemPool(pool, dev);
}

FK_API CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *loc, CUmemAllocationType type) {
  CUdevice dev;
  CUresult rc = location_device(loc, type, &dev);
  return rc ? rc : cuDeviceGetMemPool(pool, dev);
}

FK_API CUresult cuMemSetMemPool(CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool) {
  CUdevice dev;
  CUresult rc = location_device(loc, type, &dev);
  return rc ? rc : cuDeviceSetMemPool(dev, pool);
}

FK_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      (props->handleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED;
  if ((rc = fk_check_device(props->location.id)) != CUDA_SUCCESS)
    return rc == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : rc;
  struct fk_pool *p = calloc(1, sizeof *p);
  if (!p)
    return CUDA_ERROR_OUT_OF_MEMORY;
  p->magic = FK_POOL_MAGIC;
  p->device = props->location.id;
  p->reuse[1] = p->reuse[2] = p->reuse[3] = 1;
  fk_lock();
  p->next = g_pools;
  g_pools = p;
  fk_unlock();
  *pool = p;
  return CUDA_SUCCESS;
}

/* Destroying a pool gives back its empty chunks; allocations still in use
 * stay valid until they are freed (a chunk goes back with its last block). */
FK_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_pool *p = pool_check(pool);
  if (!p || p->is_default) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    trim(p, 0);
    for (fk_alloc *a = fk_alloc_first(); a; a = a->next)
      if (a->pool ==
          p) /* chunks with blocks, and the blocks: the last block's free frees its chunk */
        a->pool = NULL;
    for (int d = 0; d < FG_MAX_DEVICES; d++)
      if (g_current[d] == p)
        g_current[d] = NULL;
    for (struct fk_pool **pp = &g_pools; *pp; pp = &(*pp)->next)
      if (*pp == p) {
        *pp = p->next;
        break;
      }
    p->magic = 0;
    free(p);
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_pool *p = pool_check(pool);
  if (!p || !value) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
             attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
    p->reuse[attr] = *(int *)value != 0;
  } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    p->release_threshold = *(cuuint64_t *)value;
    trim(p, p->release_threshold);
  } else if ((attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) &&
             *(cuuint64_t *)value == 0) {
    /* The high-water marks can only be reset (to the current value). */
    pool_usage u = usage_of(p);
    if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
      p->reserved_high = u.reserved;
    else
      p->used_high = u.used;
  } else {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_pool *p = pool_check(pool);
  if (!p || !value) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    pool_usage u = usage_of(p);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)value = p->reuse[attr]; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = u.reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = u.used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE;
    }
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_pool *p = pool_check(pool);
  if (!p)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    trim(p, keep);
  fk_unlock();
  return rc;
}

/* Every device can reach every pool (peers); the pool's own device always
 * has read-write access. */
FK_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_pool *p = pool_check(pool);
  if (!p || (!map && count))
    rc = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || map[i].location.id < 0 ||
        (unsigned)map[i].location.id >= fk_ndevices ||
        (map[i].location.id == p->device && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
        map[i].flags < CU_MEM_ACCESS_FLAGS_PROT_NONE ||
        map[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      rc = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
    p->access[map[i].location.id] = map[i].flags; /* all checked first: all or nothing */
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool,
                                   CUmemLocation *loc) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_pool *p = pool_check(pool);
  if (!p || !flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (loc->id < 0 || (unsigned)loc->id >= fk_ndevices)
    rc = CUDA_ERROR_INVALID_DEVICE;
  else
    *flags = loc->id == p->device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                  : (CUmemAccess_flags)p->access[loc->id];
  fk_unlock();
  return rc;
}
