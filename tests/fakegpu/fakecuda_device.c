/* Device-wide queries and settings beyond the attributes (fakecuda_init.c):
 * graph memory (cuDeviceGet/SetGraphMemAttribute, cuDeviceGraphMemTrim),
 * execution affinity (cuDeviceGetExecAffinitySupport, cuCtxGetExecAffinity)
 * and cuFlushGPUDirectRDMAWrites.
 *
 * Graphs on the fake never allocate memory (no memory-allocation nodes), so
 * the graph memory figures are 0; the high watermarks may be reset to 0 and
 * nothing else may be set (1). The fake does not partition SMs: affinity
 * support answers 0 and a context's SM count is the device's 132. There is
 * no RDMA traffic to flush: the call checks its target (the current
 * context, 0) and scope (to owner 100, to all devices 200) and returns. */
#include "fakecuda.h"

#define FK_GRAPH_MEM_ATTRS 4 /* USED_MEM_CURRENT/HIGH, RESERVED_MEM_CURRENT/HIGH */

FK_API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, void *value) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!value || attr < 0 || attr >= FK_GRAPH_MEM_ATTRS)
    return CUDA_ERROR_INVALID_VALUE;
  *(cuuint64_t *)value = 0;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, int attr, void *value) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!value || (attr != 1 && attr != 3) || *(cuuint64_t *)value != 0)
    return CUDA_ERROR_INVALID_VALUE; /* only a high watermark, only to 0 */
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGraphMemTrim(CUdevice dev) { return fk_check_device(dev); }

FK_API CUresult cuDeviceGetExecAffinitySupport(int *supported, int type, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!supported || type != 0 /* CU_EXEC_AFFINITY_TYPE_SM_COUNT */)
    return CUDA_ERROR_INVALID_VALUE;
  *supported = 0;
  return CUDA_SUCCESS;
}

typedef struct {
  int type;
  unsigned int sm_count;
} fk_affinity; /* CUexecAffinityParam */

FK_API CUresult cuCtxGetExecAffinity(fk_affinity *param, int type) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_unlock();
  if (rc)
    return rc;
  if (!param || type != 0)
    return CUDA_ERROR_INVALID_VALUE;
  param->type = 0;
  param->sm_count = 132;
  return CUDA_SUCCESS;
}

FK_API CUresult cuFlushGPUDirectRDMAWrites(int target, int scope) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_unlock();
  if (rc)
    return rc;
  return target == 0 && (scope == 100 || scope == 200) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
