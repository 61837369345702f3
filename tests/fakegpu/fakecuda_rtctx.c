/* What the CUDA runtime asks of contexts, devices, streams and events beyond
 * ebb's own table (FK_RT_ENTRY_POINTS in fakecuda_rt.h): the CUDA 13 _v2
 * ABIs that take a context, the old ABIs it still asks for, context flags,
 * limits and cache configuration, PCI ids, stream priorities and capture
 * queries (the fake never captures), host functions and IPC event handles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"

/* Entry points of the fake's other files called here. */
FK_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
FK_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
FK_API CUresult cuLinkCreate_v2(unsigned int n, CUjit_option *opts, void **vals,
                                CUlinkState *state);
FK_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                 const char *name, unsigned int n, CUjit_option *opts, void **vals);
FK_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                 unsigned int n, CUjit_option *opts, void **vals);
FK_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags);
FK_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b);
FK_API CUresult cuEventRecord(CUevent e, CUstream s);
FK_API CUresult cuEventCreate(CUevent *e, unsigned int flags);
FK_API CUresult cuStreamCreate(CUstream *s, unsigned int flags);
FK_API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *user,
                                    unsigned int flags);
FK_API CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags);
FK_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
FK_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);


/* --- the CUDA 13 ABIs that name their context ------------------------------ */
/* ctx NULL: the current context. Caller holds fk_lock. */
static CUresult ctx_arg(CUcontext ctx, struct CUctx_st **out) {
  if (!ctx)
    return fk_need_ctx(out);
  CUresult rc = fk_check_init();
  if (rc == CUDA_SUCCESS)
    rc = fk_ctx_usable(ctx);
  if (rc == CUDA_SUCCESS)
    *out = ctx;
  return rc;
}

CUresult fk_ctx_get_device_v2(CUdevice *dev, CUcontext ctx) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = ctx_arg(ctx, &c);
  if (rc == CUDA_SUCCESS && !dev)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    *dev = c->device;
  fk_unlock();
  return rc;
}

CUresult fk_ctx_synchronize_v2(CUcontext ctx) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = ctx_arg(ctx, &c);
  if (rc == CUDA_SUCCESS)
    fk_pools_sync();
  double done = rc == CUDA_SUCCESS && fk_sim_on() ? fk_sim_ctx_done(c) : 0;
  fk_unlock();
  fk_sim_sleep_until(done);
  if (rc == CUDA_SUCCESS)
    fk_callbacks_drain();
  return rc;
}

/* --- old ABIs with the same parameters as the current ones ------------------- */
FK_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}
FK_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }
FK_API CUresult cuLinkCreate(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *state) {
  return cuLinkCreate_v2(n, opts, vals, state);
}
FK_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
                              const char *name, unsigned int n, CUjit_option *opts, void **vals) {
  return cuLinkAddData_v2(state, type, data, size, name, n, opts, vals);
}
FK_API CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path,
                              unsigned int n, CUjit_option *opts, void **vals) {
  return cuLinkAddFile_v2(state, type, path, n, opts, vals);
}
FK_API CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags) {
  return cuIpcOpenMemHandle_v2(dptr, h, flags);
}
FK_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
  return cuEventElapsedTime(ms, a, b);
}

/* --- context flags, limits, cache configuration ------------------------------- */
/* Runs body with c, the current context, under fk_lock. */
#define WITH_CTX(body)             \
  do {                             \
    fk_lock();                     \
    struct CUctx_st *c;            \
    CUresult rc = fk_need_ctx(&c); \
    if (rc == CUDA_SUCCESS) {      \
      body;                        \
    }                              \
    fk_unlock();                   \
    return rc;                     \
  } while (0)

#define FK_CTX_FLAGS_MASK 0xffu

FK_API CUresult cuCtxGetFlags(unsigned int *flags) {
  WITH_CTX(if (!flags) rc = CUDA_ERROR_INVALID_VALUE;
           else *flags = c->primary ? c->flags : c->ctx_flags);
}

FK_API CUresult cuCtxSetFlags(unsigned int flags) {
  WITH_CTX(if ((flags & ~FK_CTX_FLAGS_MASK) || (flags & 0x7u) == 3 || (flags & 0x7u) > 4)
               rc = CUDA_ERROR_INVALID_VALUE;
           else if (c->primary) c->flags = flags; else c->ctx_flags = flags);
}

FK_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id) {
  static unsigned long long next_id;
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = ctx_arg(ctx, &c);
  if (rc == CUDA_SUCCESS && !id)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    if (!c->id)
      c->id = ++next_id;
    *id = c->id;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = ctx_arg(ctx, &c);
  if (rc == CUDA_SUCCESS && !version)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    *version = 3020; /* every context is made through the v2 (3.2) API */
  fk_unlock();
  return rc;
}

/* CUlimit: 0 stack, 1 printf FIFO, 2 malloc heap, 3 sync depth, 4 pending
 * launches, 5 L2 fetch granularity, 6 persisting L2, 7 CIG shared memory
 * (query only), 8 CIG enabled (query only), 9 CIG fallback. */
static const size_t g_limit_default[10] = {1024, 1u << 20, 8u << 20, 2, 2048, 64, 0, 0, 0, 0};

FK_API CUresult cuCtxGetLimit(size_t *value, CUlimit limit) {
  WITH_CTX(if (!value || limit < 0 || limit > 9) rc = CUDA_ERROR_INVALID_VALUE;
           else *value = c->limits[limit] ? c->limits[limit] : g_limit_default[limit]);
}

FK_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  WITH_CTX(if (limit < 0 || limit > 9 || limit == 7 || limit == 8) rc = CUDA_ERROR_INVALID_VALUE;
           else if (limit == 5 && value != 0 && value != 32 && value != 64 && value != 128)
               rc = CUDA_ERROR_INVALID_VALUE;
           else c->limits[limit] = value);
}

FK_API CUresult cuCtxGetCacheConfig(CUfunc_cache *config) {
  WITH_CTX(if (!config) rc = CUDA_ERROR_INVALID_VALUE; else *config = c->cache_config);
}

FK_API CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  WITH_CTX(if (config < 0 || config > 3) rc = CUDA_ERROR_INVALID_VALUE;
           else c->cache_config = config);
}

FK_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config) {
  WITH_CTX(if (!config) rc = CUDA_ERROR_INVALID_VALUE; else *config = 1 /* 4-byte banks */);
}

/* Hopper's shared memory banks are 4 bytes wide and fixed: a valid setting
 * (DEFAULT, FOUR_BYTE, EIGHT_BYTE: 0-2) is taken and changes nothing, as the
 * driver documents for such devices; others 1. */
FK_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) {
  WITH_CTX(if (config < 0 || config > 2) rc = CUDA_ERROR_INVALID_VALUE);
}

FK_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
  WITH_CTX(if (least) *least = FK_PRIO_LEAST; if (greatest) *greatest = FK_PRIO_GREATEST);
}

FK_API CUresult cuCtxResetPersistingL2Cache(void) { WITH_CTX((void)c); }

/* --- devices ------------------------------------------------------------------ */
FK_API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!id || len <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  snprintf(id, (size_t)len, "0000:%02x:00.0",
           0x18 + fk_device_of(dev)); /* as the driver: 4-digit domain */
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *id) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!dev || !id)
    return CUDA_ERROR_INVALID_VALUE;
  unsigned domain = 0, bus = 0, device = 0, fn = 0;
  if (sscanf(id, "%x:%x:%x.%x", &domain, &bus, &device, &fn) != 4 &&
      sscanf(id, "%x:%x.%x", &bus, &device, &fn) != 3)
    return CUDA_ERROR_INVALID_VALUE;
  int ord = bus >= 0x18 && domain == 0 && device == 0 ? fk_ordinal_of(bus - 0x18) : -1;
  if (ord < 0)
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = ord;
  return CUDA_SUCCESS;
}

/* CUdevice_P2PAttribute: 1 performance rank, 2 access, 3 native atomics,
 * 4 array access, 5 only-partial atomics. Every pair of distinct devices are
 * peers (as cuDeviceCanAccessPeer says). */
FK_API CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attr, CUdevice src,
                                        CUdevice dst) {
  CUresult rc = fk_check_device(src);
  if (rc == CUDA_SUCCESS)
    rc = fk_check_device(dst);
  if (rc)
    return rc;
  if (!value || attr < 1 || attr > 5)
    return CUDA_ERROR_INVALID_VALUE;
  if (src == dst)
    return CUDA_ERROR_INVALID_DEVICE;
  *value = attr == 1 || attr == 5 ? 0 : 1;
  return CUDA_SUCCESS;
}

/* --- streams ------------------------------------------------------------------- */
struct CUctx_st *fk_stream_ctx(CUstream s) {
  if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
    return fk_current();
  fk_obj *o = fk_obj_check(s, FK_OBJ_STREAM);
  return o ? o->ctx : NULL;
}

FK_API CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority) {
  CUresult rc = cuStreamCreate(s, flags);
  if (rc == CUDA_SUCCESS) {
    fk_lock();
    fk_obj *o = fk_obj_check(*s, FK_OBJ_STREAM);
    /* Out-of-range priorities are clamped, as the driver does. */
    if (o)
      o->priority = priority > FK_PRIO_LEAST      ? FK_PRIO_LEAST
                    : priority < FK_PRIO_GREATEST ? FK_PRIO_GREATEST
                                                  : priority;
    fk_unlock();
  }
  return rc;
}

/* Runs body with o, the stream object (NULL for the special handles), under
 * fk_lock, after the context and handle checks. */
#define WITH_STREAM(s, body)                                \
  do {                                                      \
    fk_lock();                                              \
    struct CUctx_st *c;                                     \
    CUresult rc = fk_need_ctx(&c);                          \
    fk_obj *o = rc ? NULL : fk_obj_check(s, FK_OBJ_STREAM); \
    if (rc == CUDA_SUCCESS && !fk_stream_ok(s))             \
      rc = CUDA_ERROR_INVALID_HANDLE;                       \
    if (rc == CUDA_SUCCESS) {                               \
      (void)o;                                              \
      body;                                                 \
    }                                                       \
    fk_unlock();                                            \
    return rc;                                              \
  } while (0)

FK_API CUresult cuStreamGetPriority(CUstream s, int *priority) {
  WITH_STREAM(s, if (!priority) rc = CUDA_ERROR_INVALID_VALUE;
              else *priority = o ? o->priority : FK_PRIO_LEAST);
}

FK_API CUresult cuStreamGetFlags(CUstream s, unsigned int *flags) {
  WITH_STREAM(s, if (!flags) rc = CUDA_ERROR_INVALID_VALUE; else *flags = o ? o->flags : 0);
}

FK_API CUresult cuStreamGetCtx(CUstream s, CUcontext *ctx) {
  WITH_STREAM(s, if (!ctx) rc = CUDA_ERROR_INVALID_VALUE; else *ctx = o ? o->ctx : c);
}

FK_API CUresult cuStreamGetDevice(CUstream s, CUdevice *dev) {
  WITH_STREAM(s, if (!dev) rc = CUDA_ERROR_INVALID_VALUE; else *dev = (o ? o->ctx : c)->device);
}

FK_API CUresult cuStreamGetId(CUstream s, unsigned long long *id) {
  static unsigned long long next_id = 16; /* below: the special streams */
  WITH_STREAM(
      s, if (!id) rc = CUDA_ERROR_INVALID_VALUE;
      else if (!o) *id = (unsigned long long)(uintptr_t)s; else {
        if (!o->id)
          o->id = ++next_id;
        *id = o->id;
      });
}

/* Capture status (fakecuda_graph.c): none, active or invalidated. */
/* The legacy stream synchronizes with every blocking stream: asking it while
 * one captures (not in relaxed mode) is 906 (STREAM_CAPTURE_IMPLICIT). */
#define FK_ERR_CAPTURE_IMPLICIT ((CUresult)906)
#define IS_LEGACY(s) ((s) == NULL || (uintptr_t)(s) == 1)

FK_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
  WITH_STREAM(s, if (!status) rc = CUDA_ERROR_INVALID_VALUE;
              else if (IS_LEGACY(s) && fk_capture_implicit(c)) rc = FK_ERR_CAPTURE_IMPLICIT;
              else *status = fk_capture_status(s, NULL));
}

FK_API CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id) {
  WITH_STREAM(
      s, if (!status) rc = CUDA_ERROR_INVALID_VALUE;
      else if (IS_LEGACY(s) && fk_capture_implicit(c)) rc = FK_ERR_CAPTURE_IMPLICIT; else {
        unsigned long long cid;
        *status = fk_capture_status(s, &cid);
        if (id)
          *id = cid;
      });
}

FK_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                          CUgraph *graph, const CUgraphNode **deps, size_t *ndeps) {
  if (graph)
    *graph = NULL;
  if (deps)
    *deps = NULL;
  if (ndeps)
    *ndeps = 0;
  return cuStreamGetCaptureInfo(s, status, id);
}

FK_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                          CUgraph *graph, const CUgraphNode **deps,
                                          const CUgraphEdgeData **edges, size_t *ndeps) {
  if (edges)
    *edges = NULL;
  return cuStreamGetCaptureInfo_v2(s, status, id, graph, deps, ndeps);
}

static __thread int t_capture_mode; /* CU_STREAM_CAPTURE_MODE_GLOBAL */

FK_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!mode || *mode < 0 || *mode > 2)
    return CUDA_ERROR_INVALID_VALUE;
  int old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

/* A host function runs as a stream callback does: later, on the driver's
 * callback thread, in order (and must not call CUDA: 800). */
typedef struct host_fn_call {
  CUhostFn fn;
  void *user;
} host_fn_call;

static void host_fn_trampoline(CUstream s, CUresult status, void *arg) {
  (void)s, (void)status;
  host_fn_call call = *(host_fn_call *)arg;
  free(arg);
  call.fn(call.user);
}

FK_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user) {
  if (!fn)
    return fk_check_init() ? fk_check_init() : CUDA_ERROR_INVALID_VALUE;
  CUresult rc;
  if (fk_capture_host_fn(s, fn, user, &rc)) /* recorded into the stream's capture */
    return rc;
  host_fn_call *call = malloc(sizeof *call);
  if (!call)
    return CUDA_ERROR_OUT_OF_MEMORY;
  call->fn = fn;
  call->user = user;
  rc = cuStreamAddCallback(s, host_fn_trampoline, call, 0);
  if (rc)
    free(call);
  return rc;
}

/* --- events ---------------------------------------------------------------------- */
FK_API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
  if (flags & ~1u) { /* CU_EVENT_RECORD_EXTERNAL */
    CUresult rc = fk_check_init();
    return rc ? rc : CUDA_ERROR_INVALID_VALUE;
  }
  return cuEventRecord(e, s);
}

/* An IPC event handle names its owner process and the event; the event opened
 * from it in another process is always complete, since all work on the fake
 * is done by the time the call that queued it returns. */
#define FK_IPC_EVENT_MAGIC 0xfa6e7e47u
typedef struct fk_ipc_event {
  uint32_t magic;
  int32_t pid;
  uint64_t start_time;
  uint64_t event;
} fk_ipc_event;

FK_API CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(e, FK_OBJ_EVENT);
  if (rc == CUDA_SUCCESS && (!h || !o))
    rc = o ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
  /* Only events made with INTERPROCESS | DISABLE_TIMING can be shared. */
  if (rc == CUDA_SUCCESS && (o->flags & (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING)) !=
                                (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    fk_ipc_event ev = {FK_IPC_EVENT_MAGIC, (int32_t)getpid(), fg_proc_start_time(getpid()),
                       (uint64_t)(uintptr_t)e};
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &ev, sizeof ev);
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuIpcOpenEventHandle(CUevent *e, CUipcEventHandle h) {
  fk_ipc_event ev;
  memcpy(&ev, h.reserved, sizeof ev);
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!e || ev.magic != FK_IPC_EVENT_MAGIC || ev.pid <= 0 ||
      fg_proc_start_time(ev.pid) != ev.start_time)
    return CUDA_ERROR_INVALID_VALUE;
  return cuEventCreate(e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
}

/* --- host memory, pitched memory, managed memory hints ------------------------------ */
FK_API CUresult cuMemAllocHost_v2(void **p, size_t bytes) { return cuMemHostAlloc(p, bytes, 0); }

#define FK_PITCH_ALIGN 512
FK_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int elem) {
  if (!pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16)) {
    CUresult rc = fk_check_init();
    return rc ? rc : CUDA_ERROR_INVALID_VALUE;
  }
  size_t p = (width + FK_PITCH_ALIGN - 1) / FK_PITCH_ALIGN * FK_PITCH_ALIGN;
  if (p < width || height > SIZE_MAX / p)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = cuMemAlloc_v2(dptr, p * height);
  if (rc == CUDA_SUCCESS)
    *pitch = p;
  return rc;
}

/* Prefetching changes where pages live, which the fake does not model: the
 * range must be managed (or device) memory of this process; the destination
 * is kept for cuMemRangeGetAttribute (fakecuda_advise.c, which also holds
 * cuMemAdvise). */
static CUresult managed_range(CUdeviceptr p, size_t n) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!n || !fk_mem_range_ok(p, n)))
    rc = CUDA_ERROR_INVALID_VALUE;
  fk_unlock();
  return rc;
}

#define FK_DEVICE_CPU (-1) /* CU_DEVICE_CPU */
/* A prefetch goes to a device of this process or to the host; any other
 * destination answers 101 (INVALID_DEVICE), as the driver does. */
FK_API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream s) {
  CUresult rc = dev == FK_DEVICE_CPU ? fk_check_init() : fk_check_device(dev);
  if (rc)
    return rc;
  rc = managed_range(p, n);
  if (rc == CUDA_SUCCESS) {
    fk_lock();
    if (!fk_stream_ok(s))
      rc = CUDA_ERROR_INVALID_HANDLE;
    fk_unlock();
  }
  if (rc == CUDA_SUCCESS)
    fk_advise_prefetched(p, n, dev);
  return rc;
}

FK_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc,
                                      unsigned int flags, CUstream s) {
  if (flags)
    return fk_check_init() ? fk_check_init() : CUDA_ERROR_INVALID_VALUE;
  /* The host: HOST, HOST_NUMA, HOST_NUMA_CURRENT (2..4). */
  if (loc.type >= CU_MEM_LOCATION_TYPE_HOST && loc.type <= 4)
    return cuMemPrefetchAsync(p, n, FK_DEVICE_CPU, s);
  if (loc.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return fk_check_init() ? fk_check_init() : CUDA_ERROR_INVALID_VALUE;
  return loc.id == FK_DEVICE_CPU ? fk_check_device(loc.id) : cuMemPrefetchAsync(p, n, loc.id, s);
}
