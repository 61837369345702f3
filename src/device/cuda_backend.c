/* The CUDA device: the driver API through the table in cuda_driver.h.
 *
 * The primary context is retained on the first call that needs it (activate,
 * an allocation, a copy, a launch) and released by ctx_release; queries
 * (mem_info through NVML, process_used) and cleanup never retain it. Functions
 * named *_locked run with dev->mu held (device.c takes it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "device/cuda_driver.h"
#include "device/device_impl.h"
#include "device/nvml.h"

#define PLAIN_GRANULARITY (2u << 20) /* when the driver has no VMM granularity */

typedef struct cuda_impl {
  const dev_cuda_driver *drv;
  CUdevice cudev;
  CUcontext ctx;
  int active; /* read with __atomic outside dev->mu */
  size_t gran;
  int vmm;
  char uuid[48];
  int nvml_state; /* 0 not tried, 1 found, -1 unavailable */
  nvmlDevice_t nvdev;
} cuda_impl;

/* Primary context retains this process holds per device, across dev_device
 * handles: the driver keeps the context while any is held. */
static pthread_mutex_t retain_lock = PTHREAD_MUTEX_INITIALIZER;
static int retains[64];

#define CI(dev) ((cuda_impl *)(dev)->impl)
/* Calls a driver entry point; an entry the driver lacks answers
 * CUDA_ERROR_NOT_SUPPORTED. */
#define CU(ci, name, ...) \
  ((ci)->drv->fn.name ? (ci)->drv->fn.name(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

static int fail(dev_device *dev, CUresult r, const char *fn, const char *extra) {
  return dev_cuda_fail(CI(dev)->drv, r, fn, dev->label, extra);
}

static int cuda_activate_locked(dev_device *dev) {
  cuda_impl *ci = CI(dev);
  if (!ci->active) {
    CUcontext ctx = NULL;
    CUresult r = CU(ci, cuDevicePrimaryCtxRetain, &ctx, ci->cudev);
    if (r != CUDA_SUCCESS)
      return fail(dev, r, "cuDevicePrimaryCtxRetain", "cannot create the device context");
    ci->ctx = ctx;
    __atomic_store_n(&ci->active, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&retain_lock);
    if (dev->ordinal < 64)
      retains[dev->ordinal]++;
    pthread_mutex_unlock(&retain_lock);
    base_log(EBB_LOG_DEBUG, "device", "%s: primary context retained", dev->label);
  }
  CUresult r = CU(ci, cuCtxSetCurrent, ci->ctx);
  if (r != CUDA_SUCCESS)
    return fail(dev, r, "cuCtxSetCurrent", NULL);
  return 0;
}

/* For calls made without dev->mu: activates if needed, then makes the
 * context current on this thread. */
static int enter(dev_device *dev) {
  cuda_impl *ci = CI(dev);
  if (__atomic_load_n(&ci->active, __ATOMIC_ACQUIRE)) {
    CUresult r = CU(ci, cuCtxSetCurrent, ci->ctx);
    return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuCtxSetCurrent", NULL);
  }
  pthread_mutex_lock(&dev->mu);
  int rc = cuda_activate_locked(dev);
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

static int cuda_ctx_active(const dev_device *dev) {
  return __atomic_load_n(&CI(dev)->active, __ATOMIC_ACQUIRE);
}

static int cuda_ctx_release_locked(dev_device *dev) {
  cuda_impl *ci = CI(dev);
  if (!ci->active)
    return 0;
  CUcontext cur = NULL;
  if (CU(ci, cuCtxGetCurrent, &cur) == CUDA_SUCCESS && cur == ci->ctx)
    CU(ci, cuCtxSetCurrent, (CUcontext)NULL);
  CUresult r = CU(ci, cuDevicePrimaryCtxRelease, ci->cudev);
  if (r != CUDA_SUCCESS)
    return fail(dev, r, "cuDevicePrimaryCtxRelease_v2", NULL);
  ci->ctx = NULL;
  __atomic_store_n(&ci->active, 0, __ATOMIC_RELEASE);
  int left = 0;
  pthread_mutex_lock(&retain_lock);
  if (dev->ordinal < 64 && retains[dev->ordinal] > 0)
    left = --retains[dev->ordinal];
  pthread_mutex_unlock(&retain_lock);
  if (left == 0) {
    unsigned flags = 0;
    int still = 0;
    if (CU(ci, cuDevicePrimaryCtxGetState, ci->cudev, &flags, &still) == CUDA_SUCCESS && still)
      base_log(EBB_LOG_WARN, "device",
               "%s: ebb released its context but the primary context is still active: "
               "something else in this process retained it",
               dev->label);
  }
  base_log(EBB_LOG_DEBUG, "device", "%s: primary context released", dev->label);
  return 0;
}

static int nvml_dev(dev_device *dev, nvmlDevice_t *out) {
  cuda_impl *ci = CI(dev);
  if (ci->nvml_state == 0)
    ci->nvml_state = dev_nvml_device(dev->ordinal, ci->uuid, &ci->nvdev) == 0 ? 1 : -1;
  if (ci->nvml_state < 0)
    return ebb_seterr(EBB_EUNSUPPORTED, "%s: NVML cannot see this device: %s", dev->label,
                      dev_nvml_why()[0] ? dev_nvml_why() : "no matching NVML device");
  *out = ci->nvdev;
  return 0;
}

static int cuda_mem_info_locked(dev_device *dev, dev_meminfo *out) {
  cuda_impl *ci = CI(dev);
  if (ci->active) {
    int rc = cuda_activate_locked(dev);
    if (rc)
      return rc;
    size_t fr = 0, tot = 0;
    CUresult r = CU(ci, cuMemGetInfo, &fr, &tot);
    if (r != CUDA_SUCCESS)
      return fail(dev, r, "cuMemGetInfo_v2", NULL);
    out->free_bytes = fr;
    out->total_bytes = tot;
    out->source = EBB_MEMINFO_DRIVER;
    return 0;
  }
  nvmlDevice_t nd = NULL;
  if (nvml_dev(dev, &nd) == 0 && dev_nvml_meminfo(nd, &out->free_bytes, &out->total_bytes) == 0) {
    out->source = EBB_MEMINFO_NVML;
    return 0;
  }
  ebb_clearerr();
  out->free_bytes = 0;
  out->total_bytes = dev->total;
  out->source = EBB_MEMINFO_NONE;
  return 0;
}

static int cuda_process_used(dev_device *dev, pid_t pid, uint64_t *bytes) {
  pthread_mutex_lock(&dev->mu);
  nvmlDevice_t nd = NULL;
  int rc = nvml_dev(dev, &nd);
  pthread_mutex_unlock(&dev->mu);
  if (rc)
    return rc;
  return dev_nvml_process_used(nd, pid, bytes);
}

static void vmm_prop(dev_device *dev, CUmemAllocationProp *p) {
  memset(p, 0, sizeof *p);
  p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p->location.id = CI(dev)->cudev;
}

static int cuda_granularity_locked(dev_device *dev, size_t *out) {
  cuda_impl *ci = CI(dev);
  if (!ci->gran) {
    int rc = cuda_activate_locked(dev);
    if (rc)
      return rc;
    size_t g = 0;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (ci->vmm) {
      CUmemAllocationProp prop;
      vmm_prop(dev, &prop);
      r = CU(ci, cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      if (r != CUDA_SUCCESS)
        return fail(dev, r, "cuMemGetAllocationGranularity", NULL);
    }
    ci->gran = r == CUDA_SUCCESS && g ? g : PLAIN_GRANULARITY;
  }
  *out = ci->gran;
  return 0;
}

static int cuda_supports_vmm(dev_device *dev) { return CI(dev)->vmm; }

/* EBB_EOOM (or another code) naming the device, the request and what the
 * driver says is free. */
static int alloc_fail(dev_device *dev, CUresult r, const char *fn, size_t size) {
  cuda_impl *ci = CI(dev);
  size_t fr = 0, tot = 0;
  char a[32], b[32], c[32], extra[256];
  if (CU(ci, cuMemGetInfo, &fr, &tot) == CUDA_SUCCESS)
    snprintf(extra, sizeof extra, "asking for %s (%zu bytes); the driver reports %s free of %s",
             base_fmt_bytes(size, a, sizeof a), size, base_fmt_bytes(fr, b, sizeof b),
             base_fmt_bytes(tot, c, sizeof c));
  else
    snprintf(extra, sizeof extra, "asking for %s (%zu bytes)", base_fmt_bytes(size, a, sizeof a),
             size);
  return fail(dev, r, fn, extra);
}

/* Physical memory of seg->size mapped at seg->addr with read/write access.
 * Nothing is held on failure. */
static int vmm_back(dev_device *dev, dev_dseg *seg) {
  cuda_impl *ci = CI(dev);
  CUmemAllocationProp prop;
  vmm_prop(dev, &prop);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = CU(ci, cuMemCreate, &h, seg->size, &prop, 0);
  if (r != CUDA_SUCCESS)
    return alloc_fail(dev, r, "cuMemCreate", seg->size);
  r = CU(ci, cuMemMap, (CUdeviceptr)seg->addr, seg->size, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    int rc = fail(dev, r, "cuMemMap", NULL);
    CU(ci, cuMemRelease, h);
    return rc;
  }
  CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  r = CU(ci, cuMemSetAccess, (CUdeviceptr)seg->addr, seg->size, &acc, 1);
  if (r != CUDA_SUCCESS) {
    int rc = fail(dev, r, "cuMemSetAccess", NULL);
    CU(ci, cuMemUnmap, (CUdeviceptr)seg->addr, seg->size);
    CU(ci, cuMemRelease, h);
    return rc;
  }
  seg->handle = h;
  seg->parked = 0;
  return 0;
}

/* Unmaps and releases the physical memory, keeps the range. */
static int vmm_unback(dev_device *dev, dev_dseg *seg) {
  cuda_impl *ci = CI(dev);
  CUresult r = CU(ci, cuMemUnmap, (CUdeviceptr)seg->addr, seg->size);
  if (r != CUDA_SUCCESS)
    return fail(dev, r, "cuMemUnmap", NULL);
  r = CU(ci, cuMemRelease, (CUmemGenericAllocationHandle)seg->handle);
  if (r != CUDA_SUCCESS)
    return fail(dev, r, "cuMemRelease", NULL);
  seg->handle = 0;
  seg->parked = 1;
  return 0;
}

static int cuda_seg_alloc_locked(dev_device *dev, size_t size, dev_seg_kind kind, dev_dseg *out) {
  cuda_impl *ci = CI(dev);
  if (kind == EBB_SEG_VMM && !ci->vmm)
    return ebb_seterr(EBB_EUNSUPPORTED,
                      "%s (%s) does not support virtual memory management; use plain segments",
                      dev->label, dev->name);
  size_t g;
  /* makes the context current on this thread (granularity activates only on
   * its first call) */
  int rc = cuda_activate_locked(dev);
  if (!rc)
    rc = cuda_granularity_locked(dev, &g);
  if (rc)
    return rc;
  size_t sz = (size + g - 1) / g * g;
  if (sz < size)
    return ebb_seterr(EBB_EINVAL, "%s: segment size %zu overflows", dev->label, size);
  if (kind == EBB_SEG_PLAIN) {
    CUdeviceptr p = 0;
    CUresult r = CU(ci, cuMemAlloc, &p, sz);
    if (r != CUDA_SUCCESS)
      return alloc_fail(dev, r, "cuMemAlloc_v2", sz);
    *out = (dev_dseg){.addr = p, .size = sz, .kind = EBB_SEG_PLAIN};
    return 0;
  }
  CUdeviceptr va = 0;
  CUresult r = CU(ci, cuMemAddressReserve, &va, sz, g, 0, 0);
  if (r != CUDA_SUCCESS)
    return alloc_fail(dev, r, "cuMemAddressReserve", sz);
  *out = (dev_dseg){.addr = va, .size = sz, .kind = EBB_SEG_VMM};
  rc = vmm_back(dev, out);
  if (rc) {
    CU(ci, cuMemAddressFree, va, sz);
    memset(out, 0, sizeof *out);
  }
  return rc;
}

static int cuda_seg_free_locked(dev_device *dev, dev_dseg *seg, int quiet) {
  cuda_impl *ci = CI(dev);
  if (!ci->active && seg->parked) {
    /* Only the reserved range is left and there is no context: free it
     * without making one (it may already have gone with the context). */
    CUresult r = CU(ci, cuMemAddressFree, (CUdeviceptr)seg->addr, seg->size);
    if (r != CUDA_SUCCESS && !quiet)
      base_log(EBB_LOG_DEBUG, "device", "%s: cuMemAddressFree without a context: %s (%d)",
               dev->label, dev_cuda_errname(ci->drv, r), r);
    return 0;
  }
  int rc = cuda_activate_locked(dev);
  if (rc)
    return rc;
  if (seg->kind == EBB_SEG_PLAIN) {
    CUresult r = CU(ci, cuMemFree, (CUdeviceptr)seg->addr);
    return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuMemFree_v2", NULL);
  }
  if (!seg->parked && (rc = vmm_unback(dev, seg)))
    return rc;
  CUresult r = CU(ci, cuMemAddressFree, (CUdeviceptr)seg->addr, seg->size);
  return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuMemAddressFree", NULL);
}

static int cuda_seg_park_locked(dev_device *dev, dev_dseg *seg) {
  int rc = cuda_activate_locked(dev);
  return rc ? rc : vmm_unback(dev, seg);
}

static int cuda_seg_wake_locked(dev_device *dev, dev_dseg *seg) {
  int rc = cuda_activate_locked(dev);
  return rc ? rc : vmm_back(dev, seg);
}

static int cuda_host_alloc_locked(dev_device *dev, size_t size, void **out) {
  int rc = cuda_activate_locked(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemHostAlloc, out, size, 0);
  if (r != CUDA_SUCCESS) {
    char extra[96];
    snprintf(extra, sizeof extra, "pinned host buffer of %zu bytes", size);
    return fail(dev, r, "cuMemHostAlloc", extra);
  }
  return 0;
}

static int cuda_host_free_locked(dev_device *dev, void *p) {
  int rc = cuda_activate_locked(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemFreeHost, p);
  return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuMemFreeHost", NULL);
}

static int copy_fail(dev_device *dev, CUresult r, const char *fn, uint64_t a, uint64_t b,
                     size_t n) {
  char extra[160];
  snprintf(extra, sizeof extra, "%zu bytes, 0x%llx <- 0x%llx", n, (unsigned long long)a,
           (unsigned long long)b);
  return fail(dev, r, fn, extra);
}

static int cuda_copy_htod(dev_device *dev, uint64_t dst, const void *src, size_t n) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemcpyHtoD, dst, src, n);
  return r == CUDA_SUCCESS ? 0 : copy_fail(dev, r, "cuMemcpyHtoD_v2", dst, (uintptr_t)src, n);
}

static int cuda_copy_dtoh(dev_device *dev, void *dst, uint64_t src, size_t n) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemcpyDtoH, dst, src, n);
  return r == CUDA_SUCCESS ? 0 : copy_fail(dev, r, "cuMemcpyDtoH_v2", (uintptr_t)dst, src, n);
}

static int cuda_copy_dtod(dev_device *dev, uint64_t dst, uint64_t src, size_t n) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemcpyDtoD, dst, src, n);
  return r == CUDA_SUCCESS ? 0 : copy_fail(dev, r, "cuMemcpyDtoD_v2", dst, src, n);
}

static int cuda_memset8(dev_device *dev, uint64_t dst, unsigned char v, size_t n) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemsetD8, dst, v, n);
  return r == CUDA_SUCCESS ? 0 : copy_fail(dev, r, "cuMemsetD8_v2", dst, v, n);
}

static int cuda_synchronize(dev_device *dev) {
  if (!cuda_ctx_active(dev))
    return 0; /* nothing can be in flight without a context */
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuCtxSynchronize);
  return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuCtxSynchronize", NULL);
}

static int cuda_stream_create_locked(dev_device *dev, void **out) {
  int rc = cuda_activate_locked(dev);
  if (rc)
    return rc;
  CUstream st = NULL;
  CUresult r = CU(CI(dev), cuStreamCreate, &st, 0);
  if (r != CUDA_SUCCESS)
    return fail(dev, r, "cuStreamCreate", NULL);
  *out = st;
  return 0;
}

static void cuda_stream_destroy_locked(dev_device *dev, void *s) {
  if (!CI(dev)->active)
    return; /* it went with the context */
  if (cuda_activate_locked(dev))
    return;
  CUresult r = CU(CI(dev), cuStreamDestroy, (CUstream)s);
  if (r != CUDA_SUCCESS) {
    fail(dev, r, "cuStreamDestroy_v2", NULL);
    base_log(EBB_LOG_WARN, "device", "%s", ebb_errmsg());
  }
}

static int cuda_stream_sync(dev_device *dev, void *s) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuStreamSynchronize, (CUstream)s);
  return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuStreamSynchronize", NULL);
}

static int cuda_copy_htod_async(dev_device *dev, uint64_t dst, const void *src, size_t n, void *s) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemcpyHtoDAsync, dst, src, n, (CUstream)s);
  return r == CUDA_SUCCESS ? 0 : copy_fail(dev, r, "cuMemcpyHtoDAsync_v2", dst, (uintptr_t)src, n);
}

static int cuda_copy_dtoh_async(dev_device *dev, void *dst, uint64_t src, size_t n, void *s) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuMemcpyDtoHAsync, dst, src, n, (CUstream)s);
  return r == CUDA_SUCCESS ? 0 : copy_fail(dev, r, "cuMemcpyDtoHAsync_v2", (uintptr_t)dst, src, n);
}

/* Events for stream-ordered reuse (memory room): made without timing (the
 * cheap kind PyTorch's allocator uses), recorded on a stream of the
 * primary context (the handle a framework gave, 0 the legacy stream). */
#define EBB_CU_EVENT_DISABLE_TIMING 0x2u
static int cuda_event_record(dev_device *dev, uint64_t stream, void **ev) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUevent e = *ev;
  CUresult r = CUDA_SUCCESS;
  if (!e && (r = CU(CI(dev), cuEventCreate, &e, EBB_CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
    return fail(dev, r, "cuEventCreate", NULL);
  *ev = e;
  r = CU(CI(dev), cuEventRecord, e, (CUstream)(uintptr_t)stream);
  return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuEventRecord", "recording a block's free");
}

static int cuda_event_query(dev_device *dev, void *ev) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuEventQuery, (CUevent)ev);
  if (r == CUDA_ERROR_NOT_READY)
    return 0;
  return r == CUDA_SUCCESS ? 1 : fail(dev, r, "cuEventQuery", NULL);
}

static int cuda_event_wait(dev_device *dev, void *ev) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuEventSynchronize, (CUevent)ev);
  return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuEventSynchronize", NULL);
}

static void cuda_event_destroy(dev_device *dev, void *ev) {
  if (!cuda_ctx_active(dev) || enter(dev))
    return; /* it went with the context */
  CU(CI(dev), cuEventDestroy, (CUevent)ev);
}

static int cuda_module_load_locked(dev_device *dev, const void *image, void **out) {
  int rc = cuda_activate_locked(dev);
  if (rc)
    return rc;
  /* Without an image (no nvcc at build time) the fake still needs one to
   * accept: it resolves kernels by name to host twins. A real driver rejects
   * this placeholder with CUDA_ERROR_INVALID_IMAGE, and the message says why. */
  static const char no_image[] = "ebb: no kernel image (built without nvcc)";
  CUmodule m = NULL;
  CUresult r = CU(CI(dev), cuModuleLoadData, &m, image ? image : (const void *)no_image);
  if (r != CUDA_SUCCESS)
    return fail(dev, r, "cuModuleLoadData",
                image ? NULL : "no kernel image (ebb was built without nvcc)");
  *out = m;
  return 0;
}

static void cuda_module_unload_locked(dev_device *dev, void *mod) {
  if (cuda_activate_locked(dev))
    return;
  CUresult r = CU(CI(dev), cuModuleUnload, (CUmodule)mod);
  if (r != CUDA_SUCCESS) {
    fail(dev, r, "cuModuleUnload", NULL);
    base_log(EBB_LOG_WARN, "device", "%s", ebb_errmsg());
  }
}

static int cuda_kernel(dev_device *dev, void *mod, const char *name, void **out) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUfunction f = NULL;
  CUresult r = CU(CI(dev), cuModuleGetFunction, &f, (CUmodule)mod, name);
  if (r != CUDA_SUCCESS) {
    char extra[192];
    snprintf(extra, sizeof extra, "kernel %s", name);
    return fail(dev, r, "cuModuleGetFunction", extra);
  }
  *out = f;
  return 0;
}

static int cuda_launch(dev_device *dev, void *fn, const dev_launch_dims *d, void **params) {
  int rc = enter(dev);
  if (rc)
    return rc;
  CUresult r = CU(CI(dev), cuLaunchKernel, (CUfunction)fn, d->grid[0], d->grid[1], d->grid[2],
                  d->block[0], d->block[1], d->block[2], d->shared_bytes, (CUstream)NULL, params,
                  (void **)NULL);
  return r == CUDA_SUCCESS ? 0 : fail(dev, r, "cuLaunchKernel", NULL);
}

static void cuda_destroy(dev_device *dev) { free(dev->impl); }

static const dev_ops cuda_ops = {
    .destroy = cuda_destroy,
    .activate = cuda_activate_locked,
    .ctx_active = cuda_ctx_active,
    .ctx_release = cuda_ctx_release_locked,
    .mem_info = cuda_mem_info_locked,
    .process_used = cuda_process_used,
    .granularity = cuda_granularity_locked,
    .supports_vmm = cuda_supports_vmm,
    .seg_alloc = cuda_seg_alloc_locked,
    .seg_free = cuda_seg_free_locked,
    .seg_park = cuda_seg_park_locked,
    .seg_wake = cuda_seg_wake_locked,
    .host_alloc = cuda_host_alloc_locked,
    .host_free = cuda_host_free_locked,
    .copy_htod = cuda_copy_htod,
    .copy_dtoh = cuda_copy_dtoh,
    .copy_dtod = cuda_copy_dtod,
    .memset8 = cuda_memset8,
    .synchronize = cuda_synchronize,
    .stream_create = cuda_stream_create_locked,
    .stream_destroy = cuda_stream_destroy_locked,
    .stream_sync = cuda_stream_sync,
    .copy_htod_async = cuda_copy_htod_async,
    .copy_dtoh_async = cuda_copy_dtoh_async,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_wait = cuda_event_wait,
    .event_destroy = cuda_event_destroy,
    .module_load = cuda_module_load_locked,
    .module_unload = cuda_module_unload_locked,
    .kernel = cuda_kernel,
    .launch = cuda_launch,
};

void dev_cuda_format_uuid(const CUuuid *u, char *buf, size_t len) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

int dev_cuda_backend_open(dev_device *dev, int ordinal) {
  const dev_cuda_driver *drv;
  int rc = dev_cuda_driver_get(&drv);
  if (rc)
    return rc;
  if (ordinal < 0 || ordinal >= drv->ndevices)
    return ebb_seterr(EBB_ENODEV, "no CUDA device cuda:%d: the driver at %s reports %d device%s",
                      ordinal, drv->found_at, drv->ndevices, drv->ndevices == 1 ? "" : "s");
  cuda_impl *ci = calloc(1, sizeof *ci);
  if (!ci)
    return ebb_seterr(EBB_ENOMEM, "out of host memory opening cuda:%d", ordinal);
  ci->drv = drv;
  dev->impl = ci;
  dev->ops = &cuda_ops;
  dev->kind = EBB_DEVICE_CUDA;
  dev->ordinal = ordinal;
  snprintf(dev->label, sizeof dev->label, "cuda:%d", ordinal);
  CUresult r = CU(ci, cuDeviceGet, &ci->cudev, ordinal);
  if (r != CUDA_SUCCESS) {
    rc = fail(dev, r, "cuDeviceGet", NULL);
    goto fail_impl;
  }
  if (CU(ci, cuDeviceGetName, dev->name, (int)sizeof dev->name, ci->cudev) != CUDA_SUCCESS)
    snprintf(dev->name, sizeof dev->name, "CUDA device %d", ordinal);
  size_t total = 0;
  r = CU(ci, cuDeviceTotalMem, &total, ci->cudev);
  if (r != CUDA_SUCCESS) {
    rc = fail(dev, r, "cuDeviceTotalMem_v2", NULL);
    goto fail_impl;
  }
  dev->total = total;
  int vmm = 0;
  if (CU(ci, cuDeviceGetAttribute, &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
         ci->cudev) == CUDA_SUCCESS)
    ci->vmm = vmm != 0 && drv->fn.cuMemCreate && drv->fn.cuMemAddressReserve;
  CUuuid u;
  if (CU(ci, cuDeviceGetUuid, &u, ci->cudev) == CUDA_SUCCESS)
    dev_cuda_format_uuid(&u, ci->uuid, sizeof ci->uuid);
  return 0;

fail_impl:
  free(ci);
  dev->impl = NULL;
  return rc;
}
