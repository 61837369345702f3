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

struct CUctx_st *fk_current(void) {
  return t_depth ? t_stack[t_depth - 1] : NULL;
}

int fk_ctx_known(const struct CUctx_st *c) {
  for (int i = 0; i < FG_MAX_DEVICES; i++)
    if (c == &g_primary[i])
      return (unsigned)i < fk_ndevices;
  for (const struct CUctx_st *k = g_created; k; k = k->next_created)
    if (k == c)
      return 1;
  return 0;
}

static CUresult ctx_activate(struct CUctx_st *c) {
  if (fg_state_lost(fk_device_of(c->device)))
    return CUDA_ERROR_UNKNOWN;
  if (fg_state_charge(fk_device_of(c->device), fk_cfg.context_bytes, 1) != 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  c->active = 1;
  c->sticky = CUDA_SUCCESS;
  return CUDA_SUCCESS;
}

/* Peer access ends with either context. */
static void drop_peers(struct CUctx_st *c) {
  memset(c->peers, 0, sizeof c->peers);
  for (int i = 0; i < FG_MAX_DEVICES; i++)
    for (int k = 0; k < FK_MAX_PEERS; k++)
      if (g_primary[i].peers[k] == c)
        g_primary[i].peers[k] = NULL;
  for (struct CUctx_st *o = g_created; o; o = o->next_created)
    for (int k = 0; k < FK_MAX_PEERS; k++)
      if (o->peers[k] == c)
        o->peers[k] = NULL;
}

struct CUctx_st *fk_primary_handle(CUdevice dev) {
  fk_lock();
  struct CUctx_st *p = &g_primary[dev];
  p->magic = FK_CTX_MAGIC;
  p->device = dev;
  p->primary = 1;
  fk_unlock();
  return p;
}

void fk_ctx_teardown(struct CUctx_st *c) {
  drop_peers(c);
  fk_cls_teardown(c);
  fk_texobj_ctx_gone(c);
  fk_texref_ctx_gone(c);
  fk_mipmap_ctx_gone(c);
  fk_coredump_ctx_gone(c);
  fk_exec_free_ctx(c);
  fk_mem_free_ctx(c);
  if (c->active)
    fg_state_uncharge(fk_device_of(c->device), fk_cfg.context_bytes, 1);
  c->active = 0;
  c->sticky = CUDA_SUCCESS;
}

void fk_ctx_raise(struct CUctx_st *c, CUresult err) {
  if (c && c->sticky == CUDA_SUCCESS)
    c->sticky = err;
}

/* FAKEGPU_FAIL_DEVICE: the (N+1)th call on the device that needs a context
 * fails it once: a sticky 700 on the context, or the device lost for every
 * process (999 from then on, as a GPU that fell off the bus). */
static long g_fail_calls;
static int g_fail_fired;

static void maybe_fail_device(struct CUctx_st *c) {
  if (fk_cfg.fail_device != (int)fk_device_of(c->device) || g_fail_fired ||
      ++g_fail_calls <= fk_cfg.fail_after)
    return;
  g_fail_fired = 1;
  if (fk_cfg.fail_lost)
    fg_state_set_lost(fk_device_of(c->device));
  else
    fk_ctx_raise(c, CUDA_ERROR_ILLEGAL_ADDRESS);
}

CUresult fk_ctx_usable(struct CUctx_st *c) {
  if (!c || !fk_ctx_known(c) || c->dead)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (fg_state_lost(fk_device_of(c->device)))
    return CUDA_ERROR_UNKNOWN;
  if (!c->active) {
    if (!c->primary || c->refcount == 0)
      return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = ctx_activate(c);
    if (rc)
      return rc;
  }
  return c->sticky;
}

CUresult fk_need_ctx(struct CUctx_st **out) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  struct CUctx_st *c = fk_current();
  if (!c || c->dead)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (fk_cfg.fail_device >= 0)
    maybe_fail_device(c);
  if (fg_state_lost(fk_device_of(c->device)))
    return CUDA_ERROR_UNKNOWN;
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
  fk_cls_run_due();
  return rc;
}

FK_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  fk_lock();
  fk_ctx_teardown(&g_primary[dev]);
  fk_unlock();
  fk_cls_run_due();
  return CUDA_SUCCESS;
}

FK_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!flags || !active)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  *flags = g_primary[dev].flags;
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

FK_API CUresult cuCtxCreate_v4(CUcontext *ctx, CUctxCreateParams *params, unsigned int flags,
                               CUdevice dev) {
  return ctx_create(ctx, dev);
}

FK_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  if (!fk_ctx_known(ctx) || ctx->dead || ctx->primary) {
    fk_unlock();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  fk_ctx_teardown(ctx);
  ctx->dead = 1; /* the struct stays so a stale handle is recognised */
  /* Popped from the calling thread's stack if it is current there. */
  if (t_depth && t_stack[t_depth - 1] == ctx)
    t_depth--;
  fk_unlock();
  fk_cls_run_due();
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  if (!fk_ctx_known(ctx) || ctx->dead)
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
  if (!fk_ctx_known(ctx) || ctx->dead)
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
  if (rc == CUDA_SUCCESS)
    fk_pools_sync();
  double done = rc == CUDA_SUCCESS && fk_sim_on() ? fk_sim_ctx_done(c) : 0;
  fk_unlock();
  fk_sim_sleep_until(done); /* every stream's simulated work has ended */
  if (rc == CUDA_SUCCESS)
    fk_callbacks_drain();
  return rc;
}

FK_API CUresult cuCtxGetDevice(CUdevice *dev) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !dev)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    *dev = c->device;
  fk_unlock();
  return rc;
}

/* Scheduling flags (0..7 minus 3), MAP_HOST 0x08, LMEM_RESIZE_TO_MAX 0x10,
 * COREDUMP 0x20, USER_COREDUMP 0x40, SYNC_MEMOPS 0x80. The _v2 form may be
 * called while the context is active (the v1 form answered 708 then). */
#define FK_CTX_FLAGS_MASK 0xffu
FK_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if ((flags & ~FK_CTX_FLAGS_MASK) || (flags & 0x7u) == 3 || (flags & 0x7u) > 4)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  g_primary[dev].flags = flags;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!major || !minor)
    return CUDA_ERROR_INVALID_VALUE;
  *major = 9;
  *minor = 0;
  return CUDA_SUCCESS;
}

/* Every pair of distinct fake devices can reach each other (NVLink); a
 * device is not its own peer. */
FK_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
  CUresult rc = fk_check_device(dev);
  if (rc == CUDA_SUCCESS)
    rc = fk_check_device(peer);
  if (rc)
    return rc;
  if (!can)
    return CUDA_ERROR_INVALID_VALUE;
  *can = dev != peer;
  return CUDA_SUCCESS;
}

static int peer_slot(struct CUctx_st *c, struct CUctx_st *peer) {
  for (int k = 0; k < FK_MAX_PEERS; k++)
    if (c->peers[k] == peer)
      return k;
  return -1;
}

FK_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  if (flags != 0) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (!peer || !fk_ctx_known(peer) || peer->dead ||
             (!peer->active && !(peer->primary && peer->refcount))) {
    rc = CUDA_ERROR_INVALID_CONTEXT;
  } else if (peer->device == c->device) {
    rc = CUDA_ERROR_INVALID_DEVICE; /* cuDeviceCanAccessPeer says no */
  } else if (peer_slot(c, peer) >= 0) {
    rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  } else {
    int k = peer_slot(c, NULL);
    if (k < 0)
      rc = CUDA_ERROR_TOO_MANY_PEERS;
    else
      c->peers[k] = peer;
  }
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS) {
    int k = peer ? peer_slot(c, peer) : -1;
    if (k < 0)
      rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
      c->peers[k] = NULL;
  }
  fk_unlock();
  return rc;
}

/* The CUDA 3.x names of push and pop, with the same parameters: cuDNN looks
 * them up with dlsym by these names (not handed out by cuGetProcAddress,
 * which answers the _v2 ABI as the driver does from 4000 on). */
FK_API CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
FK_API CUresult cuCtxPopCurrent(CUcontext *ctx) { return cuCtxPopCurrent_v2(ctx); }

/* --- cuCtxAttach / cuCtxDetach (deprecated usage counts) ------------------- */
/* cuCtxAttach counts one more use of the current context (flags must be 0,
 * 1; no current context 201) and passes it back; cuCtxDetach takes one use
 * of a context that must be current to the calling thread (else 201) and
 * destroys it as cuCtxDestroy does when none is left. On the primary
 * context the uses are its retains: attach retains, detach releases. */
FK_API CUresult cuCtxAttach(CUcontext *pctx, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!pctx || flags))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    if (c->primary)
      c->refcount++;
    else
      c->attached++;
    *pctx = c;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuCtxDetach(CUcontext ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  int current = ctx && fk_ctx_known(ctx) && !ctx->dead && fk_current() == ctx;
  int primary = current && ctx->primary, last = current && !primary && !ctx->attached;
  if (current && !primary && !last)
    ctx->attached--;
  fk_unlock();
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (primary)
    return cuDevicePrimaryCtxRelease_v2(ctx->device);
  return last ? cuCtxDestroy_v2(ctx) : CUDA_SUCCESS;
}
