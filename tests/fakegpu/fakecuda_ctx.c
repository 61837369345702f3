/* Contexts: one primary context per device (stable handle, retain count,
 * released at count 0, reset on demand) and contexts made by cuCtxCreate.
 * Each active context costs FAKEGPU_CONTEXT_MIB in this process's usage. A
 * context that raised a fault answers the fault to every call until it is
 * destroyed or reset (the real driver's sticky errors). */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_STACK_MAX 64

static struct CUctx_st g_primary[FG_MAX_DEVICES];
static struct CUctx_st *g_created;
static __thread struct CUctx_st *t_stack[FK_STACK_MAX];
static __thread int t_depth;

struct CUctx_st *fk_current(void) { return t_depth ? t_stack[t_depth - 1] : NULL; }

static int ctx_known(const struct CUctx_st *c) {
  for (int i = 0; i < FG_MAX_DEVICES; i++)
    if (c == &g_primary[i])
      return (unsigned)i < fk_ndevices;
  for (const struct CUctx_st *k = g_created; k; k = k->next_created)
    if (k == c)
      return 1;
  return 0;
}

static CUresult ctx_activate(struct CUctx_st *c) {
  if (fg_state_charge((unsigned)c->device, fk_cfg.context_bytes, 1) != 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  c->active = 1;
  c->sticky = CUDA_SUCCESS;
  return CUDA_SUCCESS;
}

void fk_ctx_teardown(struct CUctx_st *c) {
  fk_exec_free_ctx(c);
  fk_mem_free_ctx(c);
  if (c->active)
    fg_state_uncharge((unsigned)c->device, fk_cfg.context_bytes, 1);
  c->active = 0;
  c->sticky = CUDA_SUCCESS;
}

void fk_ctx_raise(struct CUctx_st *c, CUresult err) {
  if (c && c->sticky == CUDA_SUCCESS)
    c->sticky = err;
}

CUresult fk_need_ctx(struct CUctx_st **out) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  struct CUctx_st *c = fk_current();
  if (!c || c->dead)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->active) {
    /* A primary context that was reset but is still retained comes back on
     * first use; one released to count 0 is gone. */
    if (!c->primary || c->refcount == 0)
      return CUDA_ERROR_INVALID_CONTEXT;
    rc = ctx_activate(c);
    if (rc)
      return rc;
  }
  if (c->sticky)
    return c->sticky;
  *out = c;
  return CUDA_SUCCESS;
}

/* --- primary context --------------------------------------------------------- */
FK_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct CUctx_st *p = &g_primary[dev];
  p->magic = FK_CTX_MAGIC;
  p->device = dev;
  p->primary = 1;
  if (!p->active)
    rc = ctx_activate(p);
  if (rc == CUDA_SUCCESS) {
    p->refcount++;
    *ctx = p;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  fk_lock();
  struct CUctx_st *p = &g_primary[dev];
  if (p->refcount == 0) {
    rc = CUDA_ERROR_INVALID_CONTEXT;
  } else if (--p->refcount == 0) {
    fk_ctx_teardown(p); /* stays current where it was: unlike cuCtxDestroy */
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  fk_lock();
  fk_ctx_teardown(&g_primary[dev]);
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!flags || !active)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  *flags = 0;
  *active = g_primary[dev].active;
  fk_unlock();
  return CUDA_SUCCESS;
}

/* --- created contexts ---------------------------------------------------------- */
static CUresult ctx_create(CUcontext *ctx, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  struct CUctx_st *c = calloc(1, sizeof *c);
  if (!c)
    return CUDA_ERROR_OUT_OF_MEMORY;
  c->magic = FK_CTX_MAGIC;
  c->device = dev;
  fk_lock();
  if (t_depth == FK_STACK_MAX) {
    rc = CUDA_ERROR_UNKNOWN;
  } else {
    rc = ctx_activate(c);
  }
  if (rc) {
    fk_unlock();
    free(c);
    return rc;
  }
  c->next_created = g_created;
  g_created = c;
  t_stack[t_depth++] = c;
  *ctx = c;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev) {
  return ctx_create(ctx, dev);
}

FK_API CUresult cuCtxCreate_v3(CUcontext *ctx, CUexecAffinityParam *params, int n,
                               unsigned int flags, CUdevice dev) {
  return ctx_create(ctx, dev);
}

FK_API CUresult cuCtxCreate_v4(CUcontext *ctx, CUctxCreateParams *params,
                               unsigned int flags, CUdevice dev) {
  return ctx_create(ctx, dev);
}

FK_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  if (!ctx_known(ctx) || ctx->dead || ctx->primary) {
    fk_unlock();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  fk_ctx_teardown(ctx);
  ctx->dead = 1; /* the struct stays so a stale handle is recognised */
  /* Popped from the calling thread's stack if it is current there. */
  if (t_depth && t_stack[t_depth - 1] == ctx)
    t_depth--;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  if (!ctx_known(ctx) || ctx->dead)
    rc = CUDA_ERROR_INVALID_CONTEXT;
  else if (t_depth == FK_STACK_MAX)
    rc = CUDA_ERROR_UNKNOWN;
  else
    t_stack[t_depth++] = ctx;
  fk_unlock();
  return rc;
}

FK_API CUresult cuCtxPopCurrent_v2(CUcontext *ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (t_depth == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  struct CUctx_st *c = t_stack[--t_depth];
  if (ctx)
    *ctx = c;
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ctx) {
    if (t_depth)
      t_depth--;
    return CUDA_SUCCESS;
  }
  fk_lock();
  if (!ctx_known(ctx) || ctx->dead)
    rc = CUDA_ERROR_INVALID_CONTEXT;
  else if (t_depth)
    t_stack[t_depth - 1] = ctx;
  else
    t_stack[t_depth++] = ctx;
  fk_unlock();
  return rc;
}

FK_API CUresult cuCtxGetCurrent(CUcontext *ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  *ctx = fk_current();
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxSynchronize(void) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_unlock();
  return rc;
}
