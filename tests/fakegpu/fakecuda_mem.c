/* Plain device memory, pinned host memory, copies, memset and IPC handles.
 * A CUdeviceptr is a host address: every device allocation is a memfd mapped
 * into this process, so copies and kernel twins really read and write it and
 * another process can map the same pages (IPC, VMM export). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakecuda.h"

static fk_alloc *g_allocs;
static long g_alloc_count;
static fk_alloc *new_alloc(int kind, struct CUctx_st *ctx);

int fk_alloc_should_fail(void) {
  g_alloc_count++;
  return fk_cfg.fail_alloc_at > 0 && g_alloc_count == fk_cfg.fail_alloc_at;
}

static void release_alloc(fk_alloc *a) {
  if ((a->kind == FK_ALLOC_DEVICE || a->kind == FK_ALLOC_MANAGED) && fk_cfg.poison)
    memset((void *)(uintptr_t)a->addr, FK_POISON_BYTE, a->mapped);
  if (a->kind == FK_ALLOC_HOST)
    munmap((void *)(uintptr_t)a->addr, a->mapped);
  else if (a->kind != FK_ALLOC_REGISTERED && a->mapped) /* the caller's memory stays theirs */
    fk_freed_unmap(a->addr, a->mapped);                 /* device memory: a launch on it faults */
  else if (a->kind != FK_ALLOC_REGISTERED && !a->chunk)
    fk_freed_note(a->addr, a->size); /* a pool block: its memory is its chunk's */
  if (a->fd >= 0)
    close(a->fd);
  if (a->charged)
    fg_state_uncharge(fk_device_of(a->ctx->device), a->charged, 0);
  free(a);
}

static void unlink_alloc(fk_alloc *a) {
  for (fk_alloc **pp = &g_allocs; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      return;
    }
}

void fk_mem_free_ctx(struct CUctx_st *ctx) {
  fk_alloc **pp = &g_allocs;
  while (*pp) {
    fk_alloc *a = *pp;
    if (a->ctx == ctx) {
      *pp = a->next;
      release_alloc(a);
    } else {
      pp = &a->next;
    }
  }
}

static fk_alloc *find_alloc(int kind, uint64_t addr, int containing) {
  for (fk_alloc *a = g_allocs; a; a = a->next) {
    if (a->kind != kind || a->chunk)
      continue;
    if (a->addr == addr || (containing && addr > a->addr && addr < a->addr + a->size))
      return a;
  }
  return NULL;
}

static int alloc_contains(const fk_alloc *a, uint64_t addr, size_t n) {
  return addr >= a->addr && addr - a->addr <= a->size && n <= a->size - (addr - a->addr);
}

/* With unified addressing, pinned and registered host memory is mapped into
 * the device's address space at the same address: it is a valid device
 * range too. */
int fk_mem_range_ok(uint64_t addr, size_t n) {
  for (fk_alloc *a = g_allocs; a; a = a->next)
    if (!a->chunk && alloc_contains(a, addr, n))
      return 1;
  return fk_vmm_range_ok(addr, n);
}

fk_alloc *fk_alloc_containing(uint64_t addr, size_t n) {
  for (fk_alloc *a = g_allocs; a; a = a->next)
    if (!a->chunk && alloc_contains(a, addr, n) && (n > 0 || addr < a->addr + a->size))
      return a;
  return NULL;
}

fk_alloc *fk_alloc_new(int kind, struct CUctx_st *ctx) { return new_alloc(kind, ctx); }

void fk_alloc_link(fk_alloc *a) {
  a->next = g_allocs;
  g_allocs = a;
}

void fk_alloc_unlink_free(fk_alloc *a) {
  unlink_alloc(a);
  release_alloc(a);
}

static fk_alloc *new_alloc(int kind, struct CUctx_st *ctx) {
  static uint64_t next_id;
  fk_alloc *a = calloc(1, sizeof *a);
  if (a) {
    a->id = ++next_id;
    a->kind = kind;
    a->fd = -1;
    a->ctx = ctx;
  }
  return a;
}

/* A device (or managed) allocation: a memfd mapped here, charged rounded up
 * to the granularity. Caller holds fk_lock and checked the arguments. */
static CUresult alloc_memfd(int kind, struct CUctx_st *c, size_t bytes, unsigned flags,
                            CUdeviceptr *dptr) {
  CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (fk_alloc_should_fail())
    goto out;
  uint64_t rounded = fk_round_up(bytes), charged = rounded;
  unsigned dev = fk_device_of(c->device);
  if (rounded < bytes)
    goto out;
  if (fg_state_charge(dev, charged, 0) != 0) {
    /* Managed memory can be oversubscribed, as on a real GPU of compute
     * capability 6.0 or more: the part that fits is resident on the device
     * and counted; the rest stays in host memory. */
    fg_device_usage u;
    if (kind != FK_ALLOC_MANAGED || fg_state_device(dev, &u) != 0)
      goto out;
    charged = u.used_bytes < u.total_bytes
                  ? (u.total_bytes - u.used_bytes) / fk_granularity * fk_granularity
                  : 0;
    if (charged && fg_state_charge(dev, charged, 0) != 0)
      charged = 0;
  }
  fk_alloc *a = new_alloc(kind, c);
  int fd = a ? memfd_create("fakegpu-mem", MFD_CLOEXEC) : -1;
  void *p = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)rounded) == 0)
    p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    if (fd >= 0)
      close(fd);
    free(a);
    if (charged)
      fg_state_uncharge(dev, charged, 0);
    goto out;
  }
  a->addr = (uint64_t)(uintptr_t)p;
  a->size = bytes;
  a->mapped = rounded;
  a->charged = charged;
  a->fd = fd;
  a->flags = flags;
  a->next = g_allocs;
  g_allocs = a;
  *dptr = a->addr;
  rc = CUDA_SUCCESS;
out:
  return rc;
}

CUresult fk_alloc_device(struct CUctx_st *c, size_t bytes, fk_alloc **out) {
  CUdeviceptr p;
  CUresult rc = alloc_memfd(FK_ALLOC_DEVICE, c, bytes, 0, &p);
  if (rc == CUDA_SUCCESS)
    *out = g_allocs; /* alloc_memfd lists it first */
  return rc;
}

fk_alloc *fk_alloc_first(void) { return g_allocs; }

fk_alloc *fk_alloc_at(uint64_t addr) {
  fk_alloc *a = find_alloc(FK_ALLOC_DEVICE, addr, 0);
  return a;
}

FK_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!dptr || bytes == 0))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = alloc_memfd(FK_ALLOC_DEVICE, c, bytes, 0, dptr);
  fk_unlock();
  return rc;
}

/* Managed memory is a device allocation the host may touch too: on the fake
 * every device allocation is host memory, so it only differs in its
 * attributes. It is counted on the device like cuMemAlloc. */
FK_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS &&
      (!dptr || bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = alloc_memfd(FK_ALLOC_MANAGED, c, bytes, flags, dptr);
  fk_unlock();
  return rc;
}

/* With unified addressing the pointer names its context: with no current
 * context at all, cuMemFree frees an allocation of any live context (Numba's
 * context reset relies on this). A current context that is gone or faulted
 * still answers 201 / its sticky error. */
FK_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_ERROR_INVALID_CONTEXT && !fk_current()) {
    fk_alloc *a = find_alloc(FK_ALLOC_DEVICE, dptr, 0);
    if (!a)
      a = find_alloc(FK_ALLOC_MANAGED, dptr, 0);
    if (a && a->ctx->active && !a->ctx->sticky)
      rc = CUDA_SUCCESS;
  }
  if (rc == CUDA_SUCCESS && dptr == 0) {
    /* as the driver: freeing NULL does nothing (cudaFree(0) ends here) */
  } else if (rc == CUDA_SUCCESS) {
    fk_alloc *a = find_alloc(FK_ALLOC_DEVICE, dptr, 0);
    if (!a)
      a = find_alloc(FK_ALLOC_MANAGED, dptr, 0);
    if (!a || a->module_owned) {
      rc = CUDA_ERROR_INVALID_VALUE;
    } else if (a->parent) { /* from a pool: cuMemFree waits for the device */
      fk_pool_block_free(a);
      fk_pools_sync();
    } else {
      unlink_alloc(a);
      release_alloc(a);
    }
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!free_bytes || !total_bytes))
    rc = CUDA_ERROR_INVALID_VALUE;
  fg_device_usage u;
  if (rc == CUDA_SUCCESS && fg_state_device(fk_device_of(c->device), &u) != 0)
    rc = CUDA_ERROR_UNKNOWN;
  if (rc == CUDA_SUCCESS) {
    *total_bytes = u.total_bytes;
    *free_bytes = u.used_bytes < u.total_bytes ? u.total_bytes - u.used_bytes : 0;
  }
  fk_unlock();
  return rc;
}

/* --- pinned host memory --------------------------------------------------- */
FK_API CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  if (!p || bytes == 0 || (flags & ~0x7u)) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  fk_alloc *a = new_alloc(FK_ALLOC_HOST, c);
  void *m = a ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
              : MAP_FAILED;
  if (m == MAP_FAILED) {
    free(a);
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  a->addr = (uint64_t)(uintptr_t)m;
  a->size = a->mapped = bytes;
  a->flags = flags;
  a->next = g_allocs;
  g_allocs = a;
  *p = m;
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemFreeHost(void *p) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_alloc *a = find_alloc(FK_ALLOC_HOST, (uint64_t)(uintptr_t)p, 0);
  if (!a) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    unlink_alloc(a);
    release_alloc(a);
  }
  fk_unlock();
  return rc;
}

/* --- copies and memset (synchronous; the async forms check the stream) ------ */
enum { DEV_DST = 1, DEV_SRC = 2 };

static CUresult copy(uint64_t dst, uint64_t src, size_t n, int dev_sides, CUstream s,
                     int check_stream) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  if (check_stream && !fk_stream_ok(s)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
    goto out;
  }
  if (check_stream && fk_capture_copy(s, dst, src, n, &rc))
    goto out; /* recorded into the stream's capture, or refused */
  if (check_stream && (rc = fk_stream_work(s)) != CUDA_SUCCESS)
    goto out;
  if (n == 0)
    goto out;
  if (!dst || !src || ((dev_sides & DEV_DST) && !fk_mem_range_ok(dst, n)) ||
      ((dev_sides & DEV_SRC) && !fk_mem_range_ok(src, n))) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
out:
  fk_unlock();
  return rc;
}

#define U64(p) ((uint64_t)(uintptr_t)(p))

FK_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  return copy(dst, U64(src), n, DEV_DST, NULL, 0);
}
FK_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  return copy(U64(dst), src, n, DEV_SRC, NULL, 0);
}
FK_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, src, n, DEV_DST | DEV_SRC, NULL, 0);
}
FK_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  return copy(dst, U64(src), n, DEV_DST, s, 1);
}
FK_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(U64(dst), src, n, DEV_SRC, s, 1);
}
FK_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(dst, src, n, DEV_DST | DEV_SRC, s, 1);
}
/* Between two contexts (two devices, peers or not): both must be live and
 * each range inside memory of this process; no current context needed. */
static CUresult copy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                          size_t n, CUstream s, int check_stream) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  rc = fk_ctx_usable(dctx);
  if (rc == CUDA_SUCCESS)
    rc = fk_ctx_usable(sctx);
  if (rc == CUDA_SUCCESS && check_stream && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && check_stream)
    rc = fk_stream_work(s);
  if (rc == CUDA_SUCCESS && n > 0 && (!fk_mem_range_ok(dst, n) || !fk_mem_range_ok(src, n)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && n > 0)
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                             size_t n) {
  return copy_peer(dst, dctx, src, sctx, n, NULL, 0);
}
FK_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                                  size_t n, CUstream s) {
  return copy_peer(dst, dctx, src, sctx, n, s, 1);
}

/* Unified addressing: either side may be host or device memory. */
FK_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, src, n, 0, NULL, 0);
}
FK_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(dst, src, n, 0, s, 1);
}

/* n elements of width bytes (1, 2, 4); dst aligned to the width. */
static CUresult memset_n(CUdeviceptr dst, uint32_t v, size_t n, unsigned width, CUstream s,
                         int check_stream) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && check_stream && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && check_stream && fk_capture_memset(s, dst, v, n, width, &rc)) {
    fk_unlock(); /* recorded into the stream's capture, or refused */
    return rc;
  }
  if (rc == CUDA_SUCCESS && check_stream)
    rc = fk_stream_work(s);
  if (rc == CUDA_SUCCESS && n > 0) {
    if (dst % width || n > SIZE_MAX / width || !fk_mem_range_ok(dst, n * width)) {
      rc = CUDA_ERROR_INVALID_VALUE;
    } else if (width == 1) {
      memset((void *)(uintptr_t)dst, (int)v, n);
    } else {
      for (size_t i = 0; i < n; i++)
        memcpy((char *)(uintptr_t)dst + i * width, &v, width); /* little endian */
    }
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  return memset_n(dst, v, n, 1, NULL, 0);
}
FK_API CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short v, size_t n) {
  return memset_n(dst, v, n, 2, NULL, 0);
}
FK_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
  return memset_n(dst, v, n, 4, NULL, 0);
}
FK_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return memset_n(dst, v, n, 1, s, 1);
}
FK_API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
  return memset_n(dst, v, n, 2, s, 1);
}
FK_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  return memset_n(dst, v, n, 4, s, 1);
}

/* 2D memset: height rows of width elements, pitch bytes apart; the pitch
 * must hold a row (1). Each row is one memset (on a capturing stream, one
 * memset node per row). */
static CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t v, size_t w, size_t h,
                          unsigned width, CUstream s, int check_stream) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && check_stream && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && w && h &&
           (pitch / width < w || dst % width || h - 1 > (UINT64_MAX - dst - w * width) / pitch ||
            !fk_mem_range_ok(dst, (h - 1) * pitch + w * width)))
    rc = CUDA_ERROR_INVALID_VALUE; /* nothing is written unless the whole area is valid */
  fk_unlock();
  for (size_t r = 0; rc == CUDA_SUCCESS && w && r < h; r++)
    rc = memset_n(dst + r * pitch, v, w, width, s, check_stream);
  return rc;
}

FK_API CUresult cuMemsetD2D8_v2(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w,
                                size_t h) {
  return memset_2d(dst, pitch, v, w, h, 1, NULL, 0);
}
FK_API CUresult cuMemsetD2D16_v2(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w,
                                 size_t h) {
  return memset_2d(dst, pitch, v, w, h, 2, NULL, 0);
}
FK_API CUresult cuMemsetD2D32_v2(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w,
                                 size_t h) {
  return memset_2d(dst, pitch, v, w, h, 4, NULL, 0);
}
FK_API CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w,
                                  size_t h, CUstream s) {
  return memset_2d(dst, pitch, v, w, h, 1, s, 1);
}
FK_API CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w,
                                   size_t h, CUstream s) {
  return memset_2d(dst, pitch, v, w, h, 2, s, 1);
}
FK_API CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w,
                                   size_t h, CUstream s) {
  return memset_2d(dst, pitch, v, w, h, 4, s, 1);
}

/* Managed memory attached to a stream (GLOBAL 1, HOST 2, SINGLE 4; SINGLE
 * not on the legacy stream): the range must lie in one managed allocation
 * (length 0: all of it), else 1. The fake's managed memory is reachable from
 * host and device at all times, so nothing moves. */
FK_API CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t length,
                                       unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_alloc *a = rc ? NULL : find_alloc(FK_ALLOC_MANAGED, p, 1);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS &&
           ((flags != 1 && flags != 2 && flags != 4) || !a ||
            (length && !alloc_contains(a, p, length)) || (!length && p != a->addr) ||
            (flags == 4 && !fk_obj_check(s, FK_OBJ_STREAM))))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s);
  fk_unlock();
  return rc;
}

/* --- IPC: the handle names the owner's memfd; the opener maps
 * /proc/<pid>/fd/<fd>, checked against pid reuse and fd reuse. ------------- */
#define FK_IPC_MAGIC 0x46495043u
typedef struct fk_ipc {
  uint32_t magic;
  int32_t pid;
  uint64_t start_time;
  int32_t fd;
  uint32_t pad;
  uint64_t size;
  uint64_t st_dev;
  uint64_t st_ino;
} fk_ipc;
_Static_assert(sizeof(fk_ipc) <= CU_IPC_HANDLE_SIZE, "IPC handle too big");

FK_API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  fk_alloc *a = h ? find_alloc(FK_ALLOC_DEVICE, dptr, 1) : NULL;
  struct stat sb;
  if (!a || fstat(a->fd, &sb) != 0) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  fk_ipc ipc = {FK_IPC_MAGIC, (int32_t)getpid(),   fg_proc_start_time(getpid()), a->fd, 0,
                a->mapped,    (uint64_t)sb.st_dev, (uint64_t)sb.st_ino};
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &ipc, sizeof ipc);
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  fk_ipc ipc;
  memcpy(&ipc, h.reserved, sizeof ipc);
  if (!dptr || (flags & ~1u) || ipc.magic != FK_IPC_MAGIC) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  if (ipc.pid == getpid()) { /* the real driver refuses its own handles */
    rc = CUDA_ERROR_INVALID_CONTEXT;
    goto out;
  }
  rc = CUDA_ERROR_INVALID_VALUE;
  if (fg_proc_start_time(ipc.pid) != ipc.start_time)
    goto out;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)ipc.pid, (int)ipc.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    goto out;
  struct stat sb;
  void *p = MAP_FAILED;
  if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_dev == ipc.st_dev && (uint64_t)sb.st_ino == ipc.st_ino)
    p = mmap(NULL, ipc.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  fk_alloc *a = p != MAP_FAILED ? new_alloc(FK_ALLOC_IPC, c) : NULL;
  if (!a) {
    if (p != MAP_FAILED)
      munmap(p, ipc.size);
    goto out;
  }
  a->addr = U64(p);
  a->size = a->mapped = ipc.size;
  a->next = g_allocs;
  g_allocs = a;
  *dptr = a->addr;
  rc = CUDA_SUCCESS;
out:
  fk_unlock();
  return rc;
}

/* Needs a current context, as with the real driver (201 otherwise). */
FK_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_alloc *a = rc ? NULL : find_alloc(FK_ALLOC_IPC, dptr, 0);
  if (a) {
    unlink_alloc(a);
    release_alloc(a);
  } else if (rc == CUDA_SUCCESS) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  fk_unlock();
  return rc;
}
