/* CUDA arrays (cuArrayCreate, cuArray3DCreate) and the 2D/3D copies that
 * reach them. An array is device memory like cuMemAlloc's (counted in
 * fakegpu-smi, rounded; it dies with its context) laid out row by row, so a
 * copy into it and out again returns the bytes; texture and surface objects
 * (fakecuda_texture.c) name it but nothing samples it (kernels do no
 * arithmetic on the fake). CUDA_ARRAY3D_SURFACE_LDST is the one flag taken
 * (a surface object needs it); layered, cubemap, gather and sparse arrays are refused
 * (CUDA_ERROR_NOT_SUPPORTED), as are formats other than the eight plain
 * integer and float ones. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_ARRAY_MAGIC 0xa77a70e5u
#define CU_MEMORYTYPE_ARRAY 3
#define FK_ARRAY_SURFACE_LDST 0x02u /* CUDA_ARRAY3D_SURFACE_LDST */
#define CU_MEMORYTYPE_UNIFIED 4

struct fk_array {
  uint32_t magic;
  fk_alloc *mem;
  CUDA_ARRAY3D_DESCRIPTOR desc;
  size_t elem;  /* bytes per element, all channels */
  size_t pitch; /* bytes per row */
  size_t rows;  /* height (1 for 1D) */
  struct fk_array *next;
};

static struct fk_array *g_arrays;

size_t fk_format_bytes(int format) {
  switch (format) {
  case 0x01:
  case 0x08: return 1; /* (un)signed 8-bit */
  case 0x02:
  case 0x09:
  case 0x10: return 2; /* 16-bit, half */
  case 0x03:
  case 0x0a:
  case 0x20: return 4; /* 32-bit, float */
  default: return 0;
  }
}

/* A live array of this process (its memory not torn down with its context).
 * Caller holds fk_lock. */
static struct fk_array *array_check(CUarray h) {
  for (struct fk_array *a = g_arrays; a; a = a->next)
    if (a == h && a->magic == FK_ARRAY_MAGIC)
      return fk_alloc_at(a->mem->addr) == a->mem ? a : NULL;
  return NULL;
}

int fk_array_flags(CUarray h, unsigned *flags) {
  struct fk_array *a = array_check(h);
  if (a)
    *flags = a->desc.Flags;
  return a != NULL;
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  size_t fb = d ? fk_format_bytes(d->Format) : 0;
  if (rc)
    goto out;
  if (!out || !d || !d->Width || (d->Depth && !d->Height) || !fb ||
      (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  if (d->Flags & ~FK_ARRAY_SURFACE_LDST) {
    rc = CUDA_ERROR_NOT_SUPPORTED;
    goto out;
  }
  struct fk_array *a = calloc(1, sizeof *a);
  if (!a) {
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  a->desc = *d;
  a->elem = fb * d->NumChannels;
  a->pitch = d->Width * a->elem;
  a->rows = d->Height ? d->Height : 1;
  size_t depth = d->Depth ? d->Depth : 1;
  if (a->pitch / a->elem != d->Width || a->rows > SIZE_MAX / a->pitch / depth) {
    free(a);
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  rc = fk_alloc_device(c, a->pitch * a->rows * depth, &a->mem);
  if (rc) {
    free(a);
    goto out;
  }
  a->magic = FK_ARRAY_MAGIC;
  a->next = g_arrays;
  g_arrays = a;
  *out = a;
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
  return array_create(out, d);
}

FK_API CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d) {
  CUDA_ARRAY3D_DESCRIPTOR d3 = {0};
  if (d) {
    d3.Width = d->Width;
    d3.Height = d->Height;
    d3.Format = d->Format;
    d3.NumChannels = d->NumChannels;
  }
  return array_create(out, d ? &d3 : NULL);
}

FK_API CUresult cuArrayDestroy(CUarray h) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_array *a = array_check(h);
  if (!a) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else {
    fk_alloc_unlink_free(a->mem);
    for (struct fk_array **pp = &g_arrays; *pp; pp = &(*pp)->next)
      if (*pp == a) {
        *pp = a->next;
        break;
      }
    a->magic = 0;
    free(a);
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!d)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct fk_array *a = array_check(h);
  if (a)
    *d = a->desc;
  else
    rc = CUDA_ERROR_INVALID_HANDLE;
  fk_unlock();
  return rc;
}

FK_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray h) {
  CUDA_ARRAY3D_DESCRIPTOR d3;
  if (!d) {
    CUresult rc = fk_check_init();
    return rc ? rc : CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = cuArray3DGetDescriptor_v2(&d3, h);
  if (rc == CUDA_SUCCESS) {
    d->Width = d3.Width;
    d->Height = d3.Height;
    d->Format = d3.Format;
    d->NumChannels = d3.NumChannels;
  }
  return rc;
}

/* --- 2D and 3D copies ----------------------------------------------------------- */
/* One side of a copy: its first byte, the bytes between rows and between
 * slices, and (for device memory) what must be checked. */
typedef struct side {
  unsigned char *base;
  size_t pitch, slice;
  int device; /* 1: check the range against device memory */
} side;

static CUresult resolve(int type, const void *host, CUdeviceptr dev, CUarray arr, size_t x,
                        size_t y, size_t z, size_t pitch, size_t height, side *out) {
  if (type == CU_MEMORYTYPE_ARRAY) {
    struct fk_array *a = array_check(arr);
    if (!a)
      return CUDA_ERROR_INVALID_HANDLE;
    out->pitch = a->pitch;
    out->slice = a->pitch * a->rows;
    out->base = (unsigned char *)(uintptr_t)a->mem->addr + z * out->slice + y * a->pitch + x;
    out->device = 1;
    return CUDA_SUCCESS;
  }
  if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
    return CUDA_ERROR_INVALID_VALUE;
  out->pitch = pitch;
  out->slice = pitch * height;
  const unsigned char *p = type == CU_MEMORYTYPE_HOST ? host : (const void *)(uintptr_t)dev;
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  out->base = (unsigned char *)p + z * out->slice + y * pitch + x;
  out->device = type == CU_MEMORYTYPE_DEVICE;
  return CUDA_SUCCESS;
}

static int side_ok(const side *s, size_t width, size_t height, size_t depth) {
  if (!s->device)
    return 1;
  size_t last = (depth - 1) * s->slice + (height - 1) * s->pitch + width;
  return fk_mem_range_ok((uint64_t)(uintptr_t)s->base, last);
}

typedef struct copy3d {
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  int srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  void *reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  void *reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
} copy3d;

static CUresult copy_3d(const copy3d *p, CUstream s) {
  fk_lock();
  struct CUctx_st *c;
  side src, dst;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s);
  if (rc == CUDA_SUCCESS && !p)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = resolve(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
                 p->srcZ, p->srcPitch ? p->srcPitch : p->WidthInBytes,
                 p->srcHeight ? p->srcHeight : p->Height, &src);
  if (rc == CUDA_SUCCESS)
    rc = resolve(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
                 p->dstZ, p->dstPitch ? p->dstPitch : p->WidthInBytes,
                 p->dstHeight ? p->dstHeight : p->Height, &dst);
  size_t w = p ? p->WidthInBytes : 0, h = p && p->Height ? p->Height : 1,
         d = p && p->Depth ? p->Depth : 1;
  if (rc == CUDA_SUCCESS && w &&
      (w > src.pitch || w > dst.pitch || !side_ok(&src, w, h, d) || !side_ok(&dst, w, h, d)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && w)
    for (size_t z = 0; z < d; z++)
      for (size_t y = 0; y < h; y++)
        memmove(dst.base + z * dst.slice + y * dst.pitch, src.base + z * src.slice + y * src.pitch,
                w);
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy_3d((const copy3d *)p, NULL); }
FK_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) {
  return copy_3d((const copy3d *)p, s);
}

/* The 2D form: the same fields without Z, LOD and slice height. */
typedef struct copy2d {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} copy2d;

static CUresult copy_2d(const CUDA_MEMCPY2D *p2, CUstream s) {
  const copy2d *p = (const copy2d *)p2;
  if (!p)
    return copy_3d(NULL, s);
  copy3d q = {0};
  q.srcXInBytes = p->srcXInBytes;
  q.srcY = p->srcY;
  q.srcMemoryType = p->srcMemoryType;
  q.srcHost = p->srcHost;
  q.srcDevice = p->srcDevice;
  q.srcArray = p->srcArray;
  q.srcPitch = p->srcPitch;
  q.dstXInBytes = p->dstXInBytes;
  q.dstY = p->dstY;
  q.dstMemoryType = p->dstMemoryType;
  q.dstHost = p->dstHost;
  q.dstDevice = p->dstDevice;
  q.dstArray = p->dstArray;
  q.dstPitch = p->dstPitch;
  q.WidthInBytes = p->WidthInBytes;
  q.Height = p->Height;
  q.Depth = 1;
  return copy_3d(&q, s);
}

FK_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL); }
FK_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL); }
FK_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, s); }

/* --- copies to and from 1D arrays (cuMemcpyHtoA, AtoH, DtoA, AtoD, AtoA) ---
 * A byte offset into the array and a byte count, the range inside the
 * array's first row (1D arrays; 1 otherwise), through copy_3d's checks. */
static CUresult copy_1d(int st, const void *sh, CUdeviceptr sd, CUarray sa, size_t so, int dt,
                        void *dh, CUdeviceptr dd, CUarray da, size_t doff, size_t n, CUstream s) {
  copy3d q = {0};
  q.srcMemoryType = st;
  q.srcHost = sh;
  q.srcDevice = sd;
  q.srcArray = sa;
  q.srcXInBytes = so;
  q.srcPitch = st == CU_MEMORYTYPE_ARRAY ? 0 : so + n;
  q.dstMemoryType = dt;
  q.dstHost = dh;
  q.dstDevice = dd;
  q.dstArray = da;
  q.dstXInBytes = doff;
  q.dstPitch = dt == CU_MEMORYTYPE_ARRAY ? 0 : doff + n;
  q.WidthInBytes = n;
  q.Height = q.Depth = 1;
  fk_lock();
  struct fk_array *a = st == CU_MEMORYTYPE_ARRAY ? array_check(sa) : NULL;
  struct fk_array *b = dt == CU_MEMORYTYPE_ARRAY ? array_check(da) : NULL;
  int fits = (!a || (so <= a->pitch && n <= a->pitch - so)) &&
             (!b || (doff <= b->pitch && n <= b->pitch - doff));
  fk_unlock();
  if (!fits)
    return fk_check_init() ? fk_check_init() : CUDA_ERROR_INVALID_VALUE;
  /* host and device sides start at their pointer: the offset was the array's */
  if (st != CU_MEMORYTYPE_ARRAY)
    q.srcXInBytes = 0, q.srcPitch = n;
  if (dt != CU_MEMORYTYPE_ARRAY)
    q.dstXInBytes = 0, q.dstPitch = n;
  return copy_3d(&q, s);
}

#define HOST_ CU_MEMORYTYPE_HOST
#define DEV_ CU_MEMORYTYPE_DEVICE
#define ARR_ CU_MEMORYTYPE_ARRAY
FK_API CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void *src, size_t n) {
  return copy_1d(HOST_, src, 0, NULL, 0, ARR_, NULL, 0, dst, off, n, NULL);
}
FK_API CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void *src, size_t n,
                                     CUstream s) {
  return copy_1d(HOST_, src, 0, NULL, 0, ARR_, NULL, 0, dst, off, n, s);
}
FK_API CUresult cuMemcpyAtoH_v2(void *dst, CUarray src, size_t off, size_t n) {
  return copy_1d(ARR_, NULL, 0, src, off, HOST_, dst, 0, NULL, 0, n, NULL);
}
FK_API CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t off, size_t n, CUstream s) {
  return copy_1d(ARR_, NULL, 0, src, off, HOST_, dst, 0, NULL, 0, n, s);
}
FK_API CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  return copy_1d(DEV_, NULL, src, NULL, 0, ARR_, NULL, 0, dst, off, n, NULL);
}
FK_API CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  return copy_1d(ARR_, NULL, 0, src, off, DEV_, NULL, dst, NULL, 0, n, NULL);
}
FK_API CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  return copy_1d(ARR_, NULL, 0, src, soff, ARR_, NULL, 0, dst, doff, n, NULL);
}

/* cuMemcpy3DPeer: CUDA_MEMCPY3D_PEER is CUDA_MEMCPY3D with each side's
 * context where the 3D form keeps a reserved word; both contexts must be
 * usable (201 or their sticky error), then the copy is copy_3d's. */
static CUresult copy_3d_peer(const copy3d *p, CUstream s) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  rc = p->reserved0 ? fk_ctx_usable((struct CUctx_st *)p->reserved0) : CUDA_ERROR_INVALID_CONTEXT;
  if (rc == CUDA_SUCCESS)
    rc = p->reserved1 ? fk_ctx_usable((struct CUctx_st *)p->reserved1) : CUDA_ERROR_INVALID_CONTEXT;
  fk_unlock();
  return rc ? rc : copy_3d(p, s);
}

FK_API CUresult cuMemcpy3DPeer(const void *p) { return copy_3d_peer((const copy3d *)p, NULL); }
FK_API CUresult cuMemcpy3DPeerAsync(const void *p, CUstream s) {
  return copy_3d_peer((const copy3d *)p, s);
}
