/* Mipmapped arrays (cuMipmappedArrayCreate, GetLevel, Destroy). A mipmapped
 * array is a chain of CUDA arrays (fakecuda_array.c), one per level, each
 * half the size of the one before in every dimension it has (never under
 * 1): device memory counted like any array's, which a copy into a level and
 * out again returns byte for byte. The level count is clamped to
 * [1, 1 + floor(log2(max(width, height, depth)))] as documented; the
 * descriptor's checks are cuArray3DCreate's (1 for a bad size, format or
 * channel count, 801 for layered, cubemap, gather or sparse flags). An
 * unknown mipmapped array answers 400 (INVALID_HANDLE), a level past the
 * last 1. Mipmapped arrays belong to the context current at creation and go
 * with it. Texture objects and references (fakecuda_texture.c,
 * fakecuda_texref.c) bind them through fk_mipmap_desc. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_MIPMAP_MAGIC 0x3173a9c5u
#define FK_MIPMAP_MAX_LEVELS 64

typedef struct CUmipmappedArray_st *CUmipmappedArray;

struct CUmipmappedArray_st {
  uint32_t magic;
  struct CUctx_st *ctx;
  CUDA_ARRAY3D_DESCRIPTOR desc;
  unsigned levels;
  CUarray level[FK_MIPMAP_MAX_LEVELS];
  struct CUmipmappedArray_st *next;
};

static struct CUmipmappedArray_st *g_mipmaps;

/* fakecuda_array.c; they take fk_lock. */
CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d);
CUresult cuArrayDestroy(CUarray h);

/* The live mipmapped array h, NULL if none. Caller holds fk_lock. */
static struct CUmipmappedArray_st *mipmap_find(const void *h) {
  for (struct CUmipmappedArray_st *m = g_mipmaps; m; m = m->next)
    if (m == h && m->magic == FK_MIPMAP_MAGIC)
      return m;
  return NULL;
}

int fk_mipmap_desc(const void *h, CUDA_ARRAY3D_DESCRIPTOR *d) {
  struct CUmipmappedArray_st *m = mipmap_find(h);
  if (m && d)
    *d = m->desc;
  return m != NULL;
}

/* Called with fk_lock held when context c is destroyed: its mipmapped
 * arrays go (their levels' memory goes with the context's). */
void fk_mipmap_ctx_gone(struct CUctx_st *c) {
  struct CUmipmappedArray_st **pp = &g_mipmaps;
  while (*pp) {
    struct CUmipmappedArray_st *m = *pp;
    if (m->ctx == c) {
      *pp = m->next;
      m->magic = 0;
      free(m);
    } else {
      pp = &m->next;
    }
  }
}

static size_t halve(size_t n, unsigned times) {
  if (!n)
    return 0;
  n = times >= 64 ? 0 : n >> times;
  return n ? n : 1;
}

/* 1 + floor(log2(the largest dimension)). */
static unsigned max_levels(const CUDA_ARRAY3D_DESCRIPTOR *d) {
  size_t big = d->Width;
  if (d->Height > big)
    big = d->Height;
  if (d->Depth > big)
    big = d->Depth;
  unsigned n = 1;
  while (big >>= 1)
    n++;
  return n;
}

/* Makes the levels' arrays; on failure destroys those made. */
static CUresult make_levels(struct CUmipmappedArray_st *m) {
  for (unsigned i = 0; i < m->levels; i++) {
    CUDA_ARRAY3D_DESCRIPTOR d = m->desc;
    d.Width = halve(d.Width, i);
    d.Height = halve(d.Height, i);
    d.Depth = halve(d.Depth, i);
    CUresult rc = cuArray3DCreate_v2(&m->level[i], &d);
    if (rc) {
      while (i--)
        cuArrayDestroy(m->level[i]);
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned int levels) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_unlock();
  if (rc)
    return rc;
  if (!out || !d || !d->Width)
    return CUDA_ERROR_INVALID_VALUE;
  struct CUmipmappedArray_st *m = calloc(1, sizeof *m);
  if (!m)
    return CUDA_ERROR_OUT_OF_MEMORY;
  unsigned most = max_levels(d);
  m->desc = *d;
  m->ctx = c;
  m->levels = levels < 1 ? 1 : levels > most ? most : levels;
  rc = make_levels(m);
  if (rc) {
    free(m);
    return rc;
  }
  fk_lock();
  m->magic = FK_MIPMAP_MAGIC;
  m->next = g_mipmaps;
  g_mipmaps = m;
  fk_unlock();
  *out = m;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMipmappedArrayGetLevel(CUarray *out, CUmipmappedArray h, unsigned int level) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct CUmipmappedArray_st *m = mipmap_find(h);
  if (!m)
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (level >= m->levels)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *out = m->level[level];
  fk_unlock();
  return rc;
}

FK_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUmipmappedArray_st **pp = &g_mipmaps;
  while (*pp && !(*pp == h && h->magic == FK_MIPMAP_MAGIC))
    pp = &(*pp)->next;
  struct CUmipmappedArray_st *m = *pp;
  if (m) {
    *pp = m->next;
    m->magic = 0;
  }
  fk_unlock();
  if (!m)
    return CUDA_ERROR_INVALID_HANDLE;
  for (unsigned i = 0; i < m->levels; i++)
    cuArrayDestroy(m->level[i]);
  free(m);
  return CUDA_SUCCESS;
}
