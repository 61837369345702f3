/* Host memory registration and pointer queries. With unified addressing a
 * pointer names one allocation whatever its kind: device, managed, pinned
 * host (cuMemHostAlloc), registered host (cuMemHostRegister) or opened IPC;
 * pinned and registered host memory is reachable from the device at the same
 * address. Registered memory stays the caller's: unregistering (or the
 * context's end) only forgets it. VMM mappings are device memory of no
 * context: their range is the mapping (cuMemMap's piece). */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda.h"

static int is_host_kind(int kind) { return kind == FK_ALLOC_HOST || kind == FK_ALLOC_REGISTERED; }

/* 1 when every page of [p, p+n) is mapped in this process. */
static int host_range_mapped(const void *p, size_t n) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)p & ~(page - 1);
  uintptr_t end = (uintptr_t)p + n;
  return end > (uintptr_t)p && msync((void *)start, end - start, MS_ASYNC) == 0;
}

FK_API CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  if (!p || bytes == 0 || (flags & ~0xfu) || !host_range_mapped(p, bytes)) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  if (flags & CU_MEMHOSTREGISTER_IOMEMORY) {
    rc = CUDA_ERROR_NOT_SUPPORTED; /* no PCI I/O memory on the fake */
    goto out;
  }
  uint64_t addr = (uint64_t)(uintptr_t)p;
  for (size_t off = 0; off < bytes; off += 4096) {
    fk_alloc *o = fk_alloc_containing(addr + off, 1);
    if (o && is_host_kind(o->kind)) {
      rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
      goto out;
    }
  }
  fk_alloc *o = fk_alloc_containing(addr + bytes - 1, 1);
  if (o && is_host_kind(o->kind)) {
    rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    goto out;
  }
  fk_alloc *a = fk_alloc_new(FK_ALLOC_REGISTERED, c);
  if (!a) {
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  a->addr = addr;
  a->size = a->mapped = bytes;
  a->flags = flags;
  fk_alloc_link(a);
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemHostUnregister(void *p) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS) {
    fk_alloc *a = p ? fk_alloc_containing((uint64_t)(uintptr_t)p, 1) : NULL;
    if (!a || a->kind != FK_ALLOC_REGISTERED || a->addr != (uint64_t)(uintptr_t)p)
      rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    else
      fk_alloc_unlink_free(a);
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS) {
    fk_alloc *a = p ? fk_alloc_containing((uint64_t)(uintptr_t)p, 1) : NULL;
    if (!dptr || flags != 0 || !a || !is_host_kind(a->kind))
      rc = CUDA_ERROR_INVALID_VALUE;
    else
      *dptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemHostGetFlags(unsigned int *flags, void *p) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS) {
    fk_alloc *a = p ? fk_alloc_containing((uint64_t)(uintptr_t)p, 1) : NULL;
    if (!flags || !a || !is_host_kind(a->kind))
      rc = CUDA_ERROR_INVALID_VALUE;
    else
      *flags = a->flags;
  }
  fk_unlock();
  return rc;
}

/* What a pointer names: an allocation of a context, else a VMM mapping
 * described in *tmp (kind device, no context), else NULL. Caller holds fk_lock. */
static const fk_alloc *lookup(uint64_t ptr, fk_alloc *tmp, int *ordinal) {
  const fk_alloc *a = fk_alloc_containing(ptr, 1);
  if (a) {
    *ordinal = a->ctx->device;
    return a;
  }
  uint64_t start, size;
  unsigned dev;
  if (!fk_vmm_find(ptr, &start, &size, &dev))
    return NULL;
  memset(tmp, 0, sizeof *tmp);
  tmp->kind = FK_ALLOC_DEVICE;
  tmp->addr = start;
  tmp->size = size;
  tmp->id = start; /* stable while mapped, unique among live mappings */
  *ordinal = fk_ordinal_of(dev);
  return tmp;
}

/* The allocation that contains dptr: 500 (NOT_FOUND) if none. */
FK_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS) {
    fk_alloc tmp;
    int ordinal;
    const fk_alloc *a = lookup(dptr, &tmp, &ordinal);
    if (!a) {
      rc = CUDA_ERROR_NOT_FOUND;
    } else {
      if (base)
        *base = a->addr;
      if (size)
        *size = a->size;
    }
  }
  fk_unlock();
  return rc;
}

/* One attribute of allocation a (NULL: ptr is no CUDA pointer, every
 * attribute reads as zero) into data. Caller holds fk_lock. */
static CUresult pointer_attribute(const fk_alloc *a, int ordinal, CUpointer_attribute attr,
                                  void *data, CUdeviceptr ptr) {
  int host = a && is_host_kind(a->kind);
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_CONTEXT: {
    CUcontext v = a ? a->ctx : NULL; /* VMM memory belongs to no context */
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: {
    unsigned v = !a ? 0 : host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
    CUdeviceptr v = a ? ptr : 0;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_HOST_POINTER: {
    /* Plain device memory and IPC mappings have no host address. */
    if (a && !host && a->kind != FK_ALLOC_MANAGED)
      return CUDA_ERROR_INVALID_VALUE;
    void *v = a ? (void *)(uintptr_t)ptr : NULL;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_IS_MANAGED: {
    /* An unsigned int: the runtime's cudaPointerGetAttributes reads four
     * bytes it did not clear (one byte here made device memory "managed"
     * whenever the stack held garbage). */
    unsigned v = a && a->kind == FK_ALLOC_MANAGED;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
  case CU_POINTER_ATTRIBUTE_MAPPED: {
    bool v = a && (attr == CU_POINTER_ATTRIBUTE_MAPPED || a->sync_memops);
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_BUFFER_ID: {
    unsigned long long v = a ? a->id : 0;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
    int v = a ? ordinal : -2;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: {
    CUdeviceptr v = a ? a->addr : 0;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
    size_t v = a ? a->size : 0;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case 10: { /* IS_LEGACY_CUDA_IPC_CAPABLE: plain device memory */
    bool v = a && a->kind == FK_ALLOC_DEVICE && !a->pool;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  /* cuda.h's numbers: 14 ALLOWED_HANDLE_TYPES, 15 IS_GPU_DIRECT_RDMA_CAPABLE,
   * 16 ACCESS_FLAGS (the fake once answered them shifted by one, writing 8
   * bytes where a client asking 15 holds a flag). */
  case 14: { /* ALLOWED_HANDLE_TYPES: none (IPC goes through cuIpcGetMemHandle) */
    unsigned long long v = 0;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case 15: { /* IS_GPU_DIRECT_RDMA_CAPABLE: no */
    bool v = false;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case 16: { /* ACCESS_FLAGS: read-write from its device */
    unsigned v = a ? 3 : 0;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: {
    void *v = a ? (void *)a->pool : NULL;
    memcpy(data, &v, sizeof v);
    return CUDA_SUCCESS;
  }
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

/* Needs only cuInit (no context), like the real driver. A pointer that no
 * allocation, mapping or registration holds answers 1 (INVALID_VALUE). */
FK_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!data)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_alloc tmp;
  int ordinal = -2;
  const fk_alloc *a = lookup(ptr, &tmp, &ordinal);
  rc = a ? pointer_attribute(a, ordinal, attr, data, ptr) : CUDA_ERROR_INVALID_VALUE;
  fk_unlock();
  return rc;
}

/* Unlike cuPointerGetAttribute, a pointer CUDA does not know is no error:
 * every attribute reads as its null value. */
FK_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                       CUdeviceptr ptr) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (n == 0 || !attrs || !data)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_alloc tmp;
  int ordinal = -2;
  const fk_alloc *a = lookup(ptr, &tmp, &ordinal);
  for (unsigned i = 0; i < n && rc == CUDA_SUCCESS; i++) {
    rc = data[i] ? pointer_attribute(a, ordinal, attrs[i], data[i], ptr) : CUDA_ERROR_INVALID_VALUE;
    /* Device memory has no host address: the batch form answers NULL. */
    if (rc == CUDA_ERROR_INVALID_VALUE && data[i] &&
        attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
      void *none = NULL;
      memcpy(data[i], &none, sizeof none);
      rc = CUDA_SUCCESS;
    }
  }
  fk_unlock();
  return rc;
}

/* Only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS is settable, as documented (other
 * attributes 1); value points to an unsigned int, 0 or 1 (else 1); ptr must
 * lie in an allocation of a context (else 1). cuPointerGetAttribute then
 * answers it for every pointer into that allocation. */
FK_API CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attr,
                                      CUdeviceptr ptr) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_alloc *a = rc ? NULL : fk_alloc_containing(ptr, 1);
  unsigned v = 2;
  if (value)
    memcpy(&v, value, sizeof v);
  if (rc == CUDA_SUCCESS && (attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || !a || v > 1))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    a->sync_memops = (int)v;
  fk_unlock();
  return rc;
}
