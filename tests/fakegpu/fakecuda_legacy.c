/* The launch API of CUDA before 4.0, still exported by the driver:
 * cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSetSize, cuParamSeti,
 * cuParamSetf, cuParamSetv, cuLaunch, cuLaunchGrid, cuLaunchGridAsync.
 *
 * Each function keeps a block shape (1x1x1 until set), a dynamic shared
 * memory size and a parameter buffer of up to 4 KiB that the cuParamSet*
 * calls fill at byte offsets; a launch hands that buffer to fk_launch
 * packed in `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE), as cuLaunchKernel
 * does, so the launch checks, twins and counting are the same. A block
 * dimension of 0, a parameter past 4 KiB or past the size set: 1. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_LEGACY_PARAMS 4096

struct fk_legacy {
  unsigned block[3];
  unsigned shmem;
  unsigned size;
  unsigned char buf[FK_LEGACY_PARAMS];
};

/* The legacy state of function f (made on first use); fk_lock held. */
static CUresult legacy_of(CUfunction f, struct fk_legacy **out) {
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *fn = rc ? NULL : fk_launch_function(f, c);
  if (rc)
    return rc;
  if (!fn)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!fn->legacy) {
    if (!(fn->legacy = calloc(1, sizeof *fn->legacy)))
      return CUDA_ERROR_OUT_OF_MEMORY;
    fn->legacy->block[0] = fn->legacy->block[1] = fn->legacy->block[2] = 1;
  }
  *out = fn->legacy;
  return CUDA_SUCCESS;
}

FK_API CUresult cuFuncSetBlockShape(CUfunction f, int x, int y, int z) {
  fk_lock();
  struct fk_legacy *l;
  CUresult rc = legacy_of(f, &l);
  if (rc == CUDA_SUCCESS && (x <= 0 || y <= 0 || z <= 0))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    l->block[0] = (unsigned)x;
    l->block[1] = (unsigned)y;
    l->block[2] = (unsigned)z;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuFuncSetSharedSize(CUfunction f, unsigned int bytes) {
  fk_lock();
  struct fk_legacy *l;
  CUresult rc = legacy_of(f, &l);
  if (rc == CUDA_SUCCESS)
    l->shmem = bytes;
  fk_unlock();
  return rc;
}

FK_API CUresult cuParamSetSize(CUfunction f, unsigned int bytes) {
  fk_lock();
  struct fk_legacy *l;
  CUresult rc = legacy_of(f, &l);
  if (rc == CUDA_SUCCESS && bytes > FK_LEGACY_PARAMS)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    l->size = bytes;
  fk_unlock();
  return rc;
}

/* Copies n bytes at offset into f's parameter buffer. */
static CUresult param_set(CUfunction f, int offset, const void *p, unsigned n) {
  fk_lock();
  struct fk_legacy *l;
  CUresult rc = legacy_of(f, &l);
  if (rc == CUDA_SUCCESS &&
      (offset < 0 || !p || n > FK_LEGACY_PARAMS || (unsigned)offset > FK_LEGACY_PARAMS - n))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    memcpy(l->buf + offset, p, n);
  fk_unlock();
  return rc;
}

FK_API CUresult cuParamSeti(CUfunction f, int offset, unsigned int v) {
  return param_set(f, offset, &v, sizeof v);
}
FK_API CUresult cuParamSetf(CUfunction f, int offset, float v) {
  return param_set(f, offset, &v, sizeof v);
}
FK_API CUresult cuParamSetv(CUfunction f, int offset, void *p, unsigned int n) {
  return param_set(f, offset, p, n);
}

static CUresult legacy_launch(CUfunction f, int w, int h, CUstream s) {
  fk_lock();
  struct fk_legacy *l;
  CUresult rc = legacy_of(f, &l);
  struct fk_legacy copy;
  if (rc == CUDA_SUCCESS)
    copy = *l; /* launched as it was at the call */
  fk_unlock();
  if (rc)
    return rc;
  if (w <= 0 || h <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  size_t size = copy.size;
  void *extra[] = {(void *)1 /* BUFFER_POINTER */, copy.buf, (void *)2 /* BUFFER_SIZE */, &size,
                   (void *)0 /* END */};
  fk_launch_args a = {.f = f,
                      .dims = {(unsigned)w, (unsigned)h, 1, copy.block[0], copy.block[1],
                               copy.block[2]},
                      .shmem = copy.shmem,
                      .s = s,
                      .extra = size ? extra : NULL};
  return fk_launch(&a);
}

FK_API CUresult cuLaunch(CUfunction f) { return legacy_launch(f, 1, 1, NULL); }
FK_API CUresult cuLaunchGrid(CUfunction f, int w, int h) { return legacy_launch(f, w, h, NULL); }
FK_API CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s) {
  return legacy_launch(f, w, h, s);
}
