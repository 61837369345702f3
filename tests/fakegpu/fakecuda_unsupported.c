/* Names the fake exports but does not implement: stream memory operations. cuBLASLt (cublasCreate, hence every cuBLAS
 * user: CuPy, PyTorch) opens libcuda.so.1 itself and looks up about 80 names
 * with dlsym; if one is missing it gives up with "Driver API initialization
 * failed" (CUBLAS_STATUS_INTERNAL_ERROR) before it uses any of them. These
 * answer as a driver on a device without the feature: 3 before cuInit and
 * after fork, 201 without a context, the context's sticky error, else 801
 * (CUDA_ERROR_NOT_SUPPORTED). The device attributes that announce stream
 * memory operations answer 0. They are not handed out by cuGetProcAddress. */
#include "fakecuda.h"

typedef struct fk_opaque fk_opaque;

static CUresult unsupported(void) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_unlock();
  return rc ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

FK_API CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, unsigned int value,
                                    unsigned int flags) {
  (void)s, (void)addr, (void)value, (void)flags;
  return unsupported();
}

FK_API CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, fk_opaque *ops,
                                   unsigned int flags) {
  (void)s, (void)count, (void)ops, (void)flags;
  return unsupported();
}
