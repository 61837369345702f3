/* Device-wide queries and settings beyond the attributes (fakecuda_init.c):
 * graph memory (cuDeviceGet/SetGraphMemAttribute, cuDeviceGraphMemTrim),
 * execution affinity (cuDeviceGetExecAffinitySupport, cuCtxGetExecAffinity),
 * SM resources (cuDeviceGetDevResource, cuCtxGetDevResource),
 * cuFlushGPUDirectRDMAWrites, and the GPU core dump settings.
 *
 * Graphs on the fake never allocate memory (no memory-allocation nodes), so
 * the graph memory figures are 0; the high watermarks may be reset to 0 and
 * nothing else may be set (1). The fake does not partition SMs: affinity
 * support answers 0 and a context's SM count (affinity, SM resource) is the
 * device's 132. There is
 * no RDMA traffic to flush: the call checks its target (the current
 * context, 0) and scope (to owner 100, to all devices 200) and returns. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
  param->sm_count = FK_DEVICE_SMS;
  return CUDA_SUCCESS;
}

/* CUdevResource (cuda.h, ABI version 1): a type, 92 bytes the driver keeps,
 * then a 48-byte union whose SM member is what the fake fills in. */
typedef struct {
  int type; /* CU_DEV_RESOURCE_TYPE_SM = 1 */
  unsigned char internal[92];
  union {
    struct {
      unsigned sm_count, min_partition, coscheduled_alignment;
    } sm;
    unsigned char oversize[48];
  };
} fk_dev_resource;

/* Every SM of the device (a context never holds fewer on the fake: there are
 * no green contexts). Hopper partitions in groups of at least 8 SMs; 2 SMs of
 * a TPC are scheduled together. cuDNN's persistent kernels size their grids
 * from this count. Another type: 914 (INVALID_RESOURCE_TYPE). */
static CUresult sm_resource(fk_dev_resource *r, int type) {
  if (!r)
    return CUDA_ERROR_INVALID_VALUE;
  if (type != 1)
    return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  memset(r, 0, sizeof *r);
  r->type = 1;
  r->sm.sm_count = FK_DEVICE_SMS;
  r->sm.min_partition = 8;
  r->sm.coscheduled_alignment = 2;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetDevResource(CUdevice dev, fk_dev_resource *r, int type) {
  CUresult rc = fk_check_device(dev);
  return rc ? rc : sm_resource(r, type);
}

/* hCtx NULL: the current context (201 when there is none). */
FK_API CUresult cuCtxGetDevResource(struct CUctx_st *hctx, fk_dev_resource *r, int type) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = hctx ? fk_ctx_usable(hctx) : fk_need_ctx(&c);
  fk_unlock();
  return rc ? rc : sm_resource(r, type);
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

/* --- GPU core dump settings (cuCoredumpGet/SetAttribute[Global]) ----------
 * The fake never writes a core dump, but keeps the settings as the driver
 * does: process-wide ones (the *Global calls, taken by contexts created
 * afterwards) and the current context's (201 without one), which start as
 * the global ones at the context's first change. Attributes:
 * ENABLE_ON_EXCEPTION (1), TRIGGER_HOST (2), LIGHTWEIGHT (3),
 * ENABLE_USER_TRIGGER (4) are bool (1 byte), FILE (5) and PIPE (6) strings
 * of at most 1,023 bytes, GENERATION_FLAGS (7) an int of the CU_COREDUMP_SKIP_*
 * bits (0x3f). Get: *size in is the buffer's room (1 if too small), out the
 * bytes written; set: *size is the value's bytes. Defaults: off, trigger
 * host on, file core.cuda.<pid>, pipe corepipe.cuda.<pid>, flags 0. */
#define FK_DUMP_PATH 1024

typedef struct fk_dump {
  unsigned char flag[5]; /* attributes 1..4 */
  char file[FK_DUMP_PATH], pipe[FK_DUMP_PATH];
  int gen_flags;
  struct CUctx_st *ctx; /* NULL: the global settings */
  struct fk_dump *next;
} fk_dump;

static fk_dump g_dump_global;
static int g_dump_init;
static fk_dump *g_dump_ctx;

static fk_dump *dump_global(void) {
  if (!g_dump_init) {
    g_dump_init = 1;
    g_dump_global.flag[2] = 1; /* TRIGGER_HOST */
    snprintf(g_dump_global.file, FK_DUMP_PATH, "core.cuda.%d", (int)getpid());
    snprintf(g_dump_global.pipe, FK_DUMP_PATH, "corepipe.cuda.%d", (int)getpid());
  }
  return &g_dump_global;
}

/* The settings to read or change (fk_lock held): global, or the current
 * context's (made from the global ones when create is set). */
static CUresult dump_of(int global, int create, fk_dump **out) {
  if (global) {
    *out = dump_global();
    return CUDA_SUCCESS;
  }
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    return rc;
  for (fk_dump *d = g_dump_ctx; d; d = d->next)
    if (d->ctx == c) {
      *out = d;
      return CUDA_SUCCESS;
    }
  if (!create) {
    *out = dump_global();
    return CUDA_SUCCESS;
  }
  fk_dump *d = malloc(sizeof *d);
  if (!d)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *d = *dump_global();
  d->ctx = c;
  d->next = g_dump_ctx;
  g_dump_ctx = d;
  *out = d;
  return CUDA_SUCCESS;
}

void fk_coredump_ctx_gone(struct CUctx_st *c) {
  for (fk_dump **pp = &g_dump_ctx; *pp;) {
    fk_dump *d = *pp;
    if (d->ctx == c) {
      *pp = d->next;
      free(d);
    } else {
      pp = &d->next;
    }
  }
}

static CUresult dump_get(int global, int attr, void *value, size_t *size) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!value || !size || attr < 1 || attr > 7)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_dump *d;
  rc = dump_of(global, 0, &d);
  const void *src = attr <= 4   ? (const void *)&d->flag[attr]
                    : attr == 5 ? d->file
                    : attr == 6 ? d->pipe
                                : (const void *)&d->gen_flags;
  size_t n = attr <= 4 ? 1 : attr == 7 ? sizeof(int) : strlen(src) + 1;
  if (rc == CUDA_SUCCESS && *size < n)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    memcpy(value, src, n);
    *size = n;
  }
  fk_unlock();
  return rc;
}

static CUresult dump_set(int global, int attr, const void *value, const size_t *size) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!value || !size || attr < 1 || attr > 7)
    return CUDA_ERROR_INVALID_VALUE;
  size_t n = *size;
  int flags = 0;
  if (attr == 7)
    memcpy(&flags, value, n == sizeof flags ? n : 0);
  if ((attr <= 4 && n != 1) || (attr == 7 && (n != sizeof flags || (flags & ~0x3f))) ||
      ((attr == 5 || attr == 6) && (!n || n >= FK_DUMP_PATH)))
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_dump *d;
  rc = dump_of(global, 1, &d);
  if (rc == CUDA_SUCCESS) {
    if (attr <= 4) {
      d->flag[attr] = *(const unsigned char *)value != 0;
    } else if (attr == 7) {
      d->gen_flags = flags;
    } else {
      char *dst = attr == 5 ? d->file : d->pipe;
      memcpy(dst, value, n);
      dst[n] = 0;
    }
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuCoredumpGetAttribute(int attr, void *value, size_t *size) {
  return dump_get(0, attr, value, size);
}
FK_API CUresult cuCoredumpGetAttributeGlobal(int attr, void *value, size_t *size) {
  return dump_get(1, attr, value, size);
}
FK_API CUresult cuCoredumpSetAttribute(int attr, void *value, size_t *size) {
  return dump_set(0, attr, value, size);
}
FK_API CUresult cuCoredumpSetAttributeGlobal(int attr, void *value, size_t *size) {
  return dump_set(1, attr, value, size);
}
