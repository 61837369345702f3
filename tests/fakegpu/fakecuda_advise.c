/* Managed-memory advice (cuMemAdvise) and what cuMemRangeGetAttribute(s)
 * reads back of it. The fake does not move pages, so advice changes no
 * placement; it is kept per 4 KiB page of each managed allocation (made on
 * the first advice or prefetch, found by the allocation's unique id, so a
 * later allocation at the same address starts clean): read-mostly, the
 * preferred location, the devices (and the CPU) set to access it, and the
 * last prefetch destination (cuMemPrefetchAsync, fakecuda_rtctx.c). Advice
 * on plain device memory is checked and kept nowhere. The range queries
 * answer as documented: read-mostly only if every page is; a preferred or
 * last-prefetch location only if every page shares it, else
 * CU_DEVICE_INVALID (-2); the devices set to access every page, the rest of
 * the buffer filled with -2; the CUDA 12.2 type/id forms. Checked, with the
 * driver's codes: advice 1-6 (1), a range inside one allocation (1), a
 * device for SET_PREFERRED_LOCATION and (UN)SET_ACCESSED_BY that is the CPU
 * (-1) or exists (101); the queries need a
 * managed range (1), a data size of 4 (ACCESSED_BY: a non-zero multiple of
 * 4) (1), a known attribute (1). */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_PAGE 4096u
#define FK_DEV_CPU (-1)
#define FK_DEV_INVALID (-2)
#define FK_CPU_BIT 63
#define FK_LOC_INVALID 0
#define FK_LOC_DEVICE 1
#define FK_LOC_HOST 2

typedef struct {
  int read_mostly;
  int preferred;     /* device, FK_DEV_CPU or FK_DEV_INVALID */
  int prefetched;    /* the same */
  uint64_t accessed; /* bit per device, FK_CPU_BIT for the CPU */
} fk_page;

typedef struct fk_advised {
  uint64_t id, base;
  size_t npages;
  fk_page *pages;
  struct fk_advised *next;
} fk_advised;

static fk_advised *g_advised;

/* Drops the state of allocations that are gone. Caller holds fk_lock. */
static void sweep(void) {
  fk_advised **pp = &g_advised;
  while (*pp) {
    fk_advised *v = *pp;
    fk_alloc *a = fk_alloc_containing(v->base, 1);
    if (!a || a->id != v->id) {
      *pp = v->next;
      free(v->pages);
      free(v);
    } else {
      pp = &v->next;
    }
  }
}

/* The managed allocation holding [p, p+n), NULL if there is none. Caller
 * holds fk_lock. */
static fk_alloc *managed_at(CUdeviceptr p, size_t n) {
  fk_alloc *a = n ? fk_alloc_containing(p, 1) : NULL;
  if (!a || a->kind != FK_ALLOC_MANAGED || p - a->addr > a->size || n > a->size - (p - a->addr))
    return NULL;
  return a;
}

/* The page state of allocation a, made (all defaults) when make. Caller
 * holds fk_lock. */
static fk_advised *state_of(fk_alloc *a, int make) {
  for (fk_advised *v = g_advised; v; v = v->next)
    if (v->id == a->id)
      return v;
  if (!make)
    return NULL;
  sweep();
  fk_advised *v = calloc(1, sizeof *v);
  size_t np = (a->size + FK_PAGE - 1) / FK_PAGE;
  if (!v || !(v->pages = calloc(np ? np : 1, sizeof *v->pages))) {
    free(v);
    return NULL;
  }
  for (size_t i = 0; i < np; i++)
    v->pages[i].preferred = v->pages[i].prefetched = FK_DEV_INVALID;
  v->id = a->id;
  v->base = a->addr;
  v->npages = np;
  v->next = g_advised;
  g_advised = v;
  return v;
}

/* The pages [*first, *end) that [p, p+n) touches in allocation a. */
static void page_span(const fk_alloc *a, CUdeviceptr p, size_t n, size_t *first, size_t *end) {
  *first = (p - a->addr) / FK_PAGE;
  *end = (p - a->addr + n + FK_PAGE - 1) / FK_PAGE;
}

static uint64_t dev_bit(int dev) { return dev == FK_DEV_CPU ? 1ull << FK_CPU_BIT : 1ull << dev; }

static void apply(fk_page *pg, int advice, int dev) {
  switch (advice) {
  case 1: pg->read_mostly = 1; break;
  case 2: pg->read_mostly = 0; break;
  case 3: pg->preferred = dev; break;
  case 4: pg->preferred = FK_DEV_INVALID; break;
  case 5: pg->accessed |= dev_bit(dev); break;
  default: pg->accessed &= ~dev_bit(dev); break;
  }
}

/* Checks and keeps advice on [p, p+n) for dev (FK_DEV_CPU: the host). */
static CUresult advise(CUdeviceptr p, size_t n, int advice, int dev) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (advice < 1 || advice > 6)
    return CUDA_ERROR_INVALID_VALUE;
  int needs_dev = advice == 3 || advice == 5 || advice == 6;
  if (needs_dev && dev != FK_DEV_CPU && (rc = fk_check_device(dev)) != 0)
    return rc;
  if (needs_dev && dev >= FK_CPU_BIT)
    return CUDA_ERROR_INVALID_DEVICE;
  fk_lock();
  struct CUctx_st *c;
  rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!n || !fk_mem_range_ok(p, n)))
    rc = CUDA_ERROR_INVALID_VALUE;
  fk_alloc *a = rc ? NULL : managed_at(p, n);
  fk_advised *v = a ? state_of(a, 1) : NULL;
  if (a && !v)
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (v) {
    size_t first, end;
    page_span(a, p, n, &first, &end);
    for (size_t i = first; i < end && i < v->npages; i++)
      apply(&v->pages[i], advice, dev);
  }
  fk_unlock();
  return rc;
}

void fk_advise_prefetched(CUdeviceptr p, size_t n, int dev) {
  fk_lock();
  fk_alloc *a = managed_at(p, n);
  fk_advised *v = a ? state_of(a, 1) : NULL;
  if (v) {
    size_t first, end;
    page_span(a, p, n, &first, &end);
    for (size_t i = first; i < end && i < v->npages; i++)
      v->pages[i].prefetched = dev;
  }
  fk_unlock();
}

FK_API CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice dev) {
  return advise(p, n, advice, dev);
}

/* The location's device: a device's ordinal, the host (any host kind) -1,
 * else -3 (no device: refused where a device is needed). */
FK_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc) {
  int dev = loc.type == FK_LOC_DEVICE                  ? loc.id
            : loc.type >= FK_LOC_HOST && loc.type <= 4 ? FK_DEV_CPU
                                                       : -3;
  if (dev == -3 && (advice == 3 || advice == 5 || advice == 6))
    return fk_check_init() ? fk_check_init() : CUDA_ERROR_INVALID_VALUE;
  return advise(p, n, advice, dev);
}

/* The value every page in [first, end) shares (field 0 preferred, 1
 * prefetched), or FK_DEV_INVALID. */
static int common_loc(const fk_advised *v, size_t first, size_t end, int field) {
  int loc = FK_DEV_INVALID;
  for (size_t i = first; i < end && i < v->npages; i++) {
    int x = field ? v->pages[i].prefetched : v->pages[i].preferred;
    if (i > first && x != loc)
      return FK_DEV_INVALID;
    loc = x;
  }
  return loc;
}

/* Writes the devices set to access every page: ordinals up, then the CPU;
 * the rest of the n ints -2. */
static void accessed_list(const fk_advised *v, size_t first, size_t end, int *out, size_t n) {
  uint64_t all = ~0ull;
  for (size_t i = first; i < end && i < v->npages; i++)
    all &= v->pages[i].accessed;
  if (first >= end)
    all = 0;
  size_t k = 0;
  for (int b = 0; b < 64 && k < n; b++)
    if (all & (1ull << b))
      out[k++] = b == FK_CPU_BIT ? FK_DEV_CPU : b;
  while (k < n)
    out[k++] = FK_DEV_INVALID;
}

static int loc_type(int dev) {
  return dev == FK_DEV_INVALID ? FK_LOC_INVALID : dev == FK_DEV_CPU ? FK_LOC_HOST : FK_LOC_DEVICE;
}

/* One attribute of [p, p+n) into data of size bytes. Caller holds fk_lock. */
static CUresult range_attribute(void *data, size_t size, int attr, CUdeviceptr p, size_t n) {
  fk_alloc *a = managed_at(p, n);
  if (!a || !data || attr < 1 || attr > 8 || (attr == 3 ? !size || size % 4 : size != 4))
    return CUDA_ERROR_INVALID_VALUE;
  fk_advised *v = state_of(a, 1);
  if (!v)
    return CUDA_ERROR_OUT_OF_MEMORY;
  size_t first, end;
  page_span(a, p, n, &first, &end);
  int x = 0;
  if (attr == 3) {
    int *list = malloc(size);
    if (!list)
      return CUDA_ERROR_OUT_OF_MEMORY;
    accessed_list(v, first, end, list, size / 4);
    memcpy(data, list, size);
    free(list);
    return CUDA_SUCCESS;
  }
  if (attr == 1) {
    x = 1;
    for (size_t i = first; i < end && i < v->npages; i++)
      x &= v->pages[i].read_mostly;
  } else {
    int loc = common_loc(v, first, end, attr == 4 || attr >= 7);
    x = attr == 2 || attr == 4 ? loc : (attr == 5 || attr == 7) ? loc_type(loc) : loc;
  }
  memcpy(data, &x, sizeof x);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemRangeGetAttribute(void *data, size_t size, int attr, CUdeviceptr p, size_t n) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS)
    rc = range_attribute(data, size, attr, p, n);
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, int *attrs, size_t count,
                                        CUdeviceptr p, size_t n) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!data || !sizes || !attrs || !count))
    rc = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
    rc = range_attribute(data[i], sizes[i], attrs[i], p, n);
  fk_unlock();
  return rc;
}
