/* Virtual memory management: address reservations (PROT_NONE anonymous
 * mappings), physical allocations (memfds, counted against the device from
 * cuMemCreate until the handle is released AND unmapped everywhere), mappings
 * of one onto the other, access rights (mprotect), and export/import of the
 * physical allocation as a file descriptor.
 *
 * VMM memory belongs to the process, not to a context: it survives
 * cuCtxDestroy and primary context release/reset and needs its own
 * cuMemRelease, as with the real driver. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakecuda.h"

#define FK_HANDLE_MAGIC 0x7a11c0deu

typedef struct fk_phys {
  uint32_t magic;
  int fd;
  uint64_t size;
  int device;
  uint64_t charged; /* 0 for an imported handle: its owner pays */
  unsigned refs;    /* the handle's references + one per mapping */
  unsigned handles; /* references to the handle: creation + retains */
  int released;     /* every handle reference released */
  int exportable;
  struct fk_phys *next;
} fk_phys;

typedef struct fk_resv {
  uint64_t addr, size;
} fk_resv;

typedef struct fk_map {
  uint64_t addr, size, offset;
  fk_phys *phys;
  int prot;
} fk_map;

static fk_phys *g_phys;
/* Reservations and mappings by address (fakecuda_spans.c): neither overlaps
 * another of its kind (a reservation is an mmap of its own, cuMemMap refuses
 * an overlap), and every mapping lies in one reservation. */
static fk_spans g_resv, g_maps;

#define MAP_AT(i) ((fk_map *)g_maps.v[i].obj)

static int is_multiple(uint64_t x) { return x % fk_granularity == 0; }

static fk_phys *phys_of(CUmemGenericAllocationHandle h) {
  for (fk_phys *p = g_phys; p; p = p->next)
    if ((CUmemGenericAllocationHandle)(uintptr_t)p == h && p->magic == FK_HANDLE_MAGIC &&
        !p->released)
      return p;
  return NULL;
}

static void phys_unref(fk_phys *p) {
  if (--p->refs > 0)
    return;
  for (fk_phys **pp = &g_phys; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  if (fk_cfg.poison) {
    void *m = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
    if (m != MAP_FAILED) {
      memset(m, FK_POISON_BYTE, p->size);
      munmap(m, p->size);
    }
  }
  close(p->fd);
  if (p->charged)
    fg_state_uncharge((unsigned)p->device, p->charged, 0);
  p->magic = 0;
  free(p);
}

int fk_vmm_range_ok(uint64_t addr, size_t n) {
  /* Mappings next to each other in one reservation form one range. */
  uint64_t end = addr + n;
  while (addr < end) {
    fk_map *hit = fk_spans_at(&g_maps, addr);
    if (!hit || !(hit->prot & PROT_WRITE))
      return 0;
    addr = hit->addr + hit->size;
  }
  return 1;
}

int fk_vmm_find(uint64_t addr, uint64_t *start, uint64_t *size, unsigned *device) {
  fk_map *m = fk_spans_at(&g_maps, addr);
  if (!m)
    return 0;
  *start = m->addr;
  *size = m->size;
  *device = (unsigned)m->phys->device;
  return 1;
}

/* The index of the first mapping meeting [ptr, ptr+size) and one past the
 * last. */
static size_t maps_meeting(uint64_t ptr, uint64_t size, size_t *to) {
  size_t from = fk_spans_from(&g_maps, ptr), i = from;
  while (i < g_maps.n && g_maps.v[i].addr < ptr + size)
    i++;
  *to = i;
  return from;
}

static int valid_location(const CUmemLocation *loc) {
  return loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 &&
         (unsigned)loc->id < fk_ndevices;
}

FK_API CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!gran || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      !valid_location(&prop->location) ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
       option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  *gran = fk_granularity;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                    unsigned long long flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ptr || size == 0 || !is_multiple(size) || (align & (align - 1)) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (align < fk_granularity)
    align = fk_granularity;
  fk_resv *r = calloc(1, sizeof *r);
  if (!r)
    return CUDA_ERROR_OUT_OF_MEMORY;
  /* Over-reserve and trim so the range is aligned; the hint is only a hint. */
  size_t span = size + align;
  void *m = mmap((void *)(uintptr_t)addr, span, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    free(r);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  uint64_t base = (uint64_t)(uintptr_t)m;
  uint64_t aligned = (base + align - 1) & ~(uint64_t)(align - 1);
  if (aligned > base)
    munmap(m, aligned - base);
  if (aligned + size < base + span)
    munmap((void *)(uintptr_t)(aligned + size), base + span - (aligned + size));
  r->addr = aligned;
  r->size = size;
  fk_lock();
  int full = fk_spans_room(&g_resv);
  if (!full)
    fk_spans_add(&g_resv, aligned, size, r);
  fk_unlock();
  if (full) {
    munmap((void *)(uintptr_t)aligned, size);
    free(r);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *ptr = aligned;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  rc = CUDA_ERROR_INVALID_VALUE;
  size_t i = fk_spans_from(&g_resv, ptr), to;
  fk_resv *r = i < g_resv.n ? g_resv.v[i].obj : NULL;
  if (r && r->addr == ptr && r->size == size && /* still mapped: unmap first */
      maps_meeting(r->addr, r->size, &to) == to) {
    fk_spans_cut(&g_resv, i, i + 1);
    fk_freed_unmap(r->addr, r->size); /* a launch on it faults */
    free(r);
    rc = CUDA_SUCCESS;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  if (!h || !prop || size == 0 || !is_multiple(size) || flags != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !valid_location(&prop->location) ||
      (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (fk_alloc_should_fail())
    goto out;
  unsigned dev = fk_device_of(prop->location.id); /* p->device: the fake's index */
  if (fg_state_charge(dev, size, 0) != 0)
    goto out;
  fk_phys *p = calloc(1, sizeof *p);
  int fd = p ? memfd_create("fakegpu-vmm", MFD_CLOEXEC) : -1;
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    if (fd >= 0)
      close(fd);
    free(p);
    fg_state_uncharge(dev, size, 0);
    goto out;
  }
  p->magic = FK_HANDLE_MAGIC;
  p->fd = fd;
  p->size = size;
  p->device = (int)dev;
  p->charged = size;
  p->refs = 1;
  p->handles = 1;
  p->exportable = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  p->next = g_phys;
  g_phys = p;
  *h = (CUmemGenericAllocationHandle)(uintptr_t)p;
  rc = CUDA_SUCCESS;
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_phys *p = phys_of(h);
  if (!p) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    p->released = --p->handles == 0;
    phys_unref(p); /* freed now, or when its last mapping goes */
  }
  fk_unlock();
  return rc;
}

/* The handle of the memory mapped at any address of a mapping, one more
 * reference to it (released by its own cuMemRelease), even after the
 * creator released its handle. Not mapped -> 1. */
FK_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!h)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_map *m = fk_spans_at(&g_maps, (uint64_t)(uintptr_t)addr);
  if (!m) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    m->phys->handles++;
    m->phys->released = 0;
    m->phys->refs++;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
  }
  fk_unlock();
  return rc;
}

/* The properties the handle was created with: pinned device memory of its
 * device (this process's ordinal), exportable as a POSIX fd or not. */
FK_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                       CUmemGenericAllocationHandle h) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!prop)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_phys *p = phys_of(h);
  if (!p) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = fk_ordinal_of((unsigned)p->device);
    prop->requestedHandleTypes = p->exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0;
  }
  fk_unlock();
  return rc;
}

static fk_resv *resv_containing(uint64_t addr, uint64_t size) {
  if (addr + size <= addr) /* empty, or past the end of the address space */
    return NULL;
  fk_resv *r = fk_spans_at(&g_resv, addr);
  return r && addr + size <= r->addr + r->size ? r : NULL;
}

int fk_vmm_reserved(uint64_t addr) { return resv_containing(addr, 1) != NULL; }

FK_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle h, unsigned long long flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  rc = CUDA_ERROR_INVALID_VALUE;
  fk_phys *p = phys_of(h);
  if (!p || size == 0 || !is_multiple(size) || !is_multiple(offset) || !is_multiple(ptr) ||
      flags != 0 || offset + size > p->size || offset + size < offset ||
      !resv_containing(ptr, size))
    goto out;
  size_t to;
  if (maps_meeting(ptr, size, &to) != to)
    goto out; /* overlaps an existing mapping */
  fk_map *m = fk_spans_room(&g_maps) ? NULL : calloc(1, sizeof *m);
  if (!m) {
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  /* No access until cuMemSetAccess, as on the device. */
  void *r =
      mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, (off_t)offset);
  if (r == MAP_FAILED) {
    free(m);
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  m->addr = ptr;
  m->size = size;
  m->offset = offset;
  m->phys = p;
  m->prot = PROT_NONE;
  fk_spans_add(&g_maps, ptr, size, m);
  p->refs++;
  rc = CUDA_SUCCESS;
out:
  fk_unlock();
  return rc;
}

/* Every byte of [ptr, ptr+size) is mapped and no mapping sticks out of it. */
static int covers_whole_mappings(uint64_t ptr, uint64_t size) {
  uint64_t covered = 0;
  size_t to;
  for (size_t i = maps_meeting(ptr, size, &to); i < to; i++) {
    fk_map *m = MAP_AT(i);
    if (m->addr < ptr || m->addr + m->size > ptr + size)
      return 0;
    covered += m->size;
  }
  return covered == size;
}

FK_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  if (size == 0 || !is_multiple(size) || !covers_whole_mappings(ptr, size)) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  size_t to, from = maps_meeting(ptr, size, &to);
  for (size_t i = from; i < to; i++) {
    fk_map *m = MAP_AT(i);
    /* Back to a bare reservation at the same addresses. */
    mmap((void *)(uintptr_t)m->addr, m->size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    phys_unref(m->phys);
    free(m);
  }
  fk_spans_cut(&g_maps, from, to);
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!desc || count == 0 || size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  int prot = -1;
  for (size_t i = 0; i < count; i++) {
    if (!valid_location(&desc[i].location))
      return CUDA_ERROR_INVALID_VALUE;
    switch (desc[i].flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_NONE: prot = PROT_NONE; break;
    case CU_MEM_ACCESS_FLAGS_PROT_READ: prot = PROT_READ; break;
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot = PROT_READ | PROT_WRITE; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  fk_lock();
  if (!covers_whole_mappings(ptr, size)) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    size_t to;
    for (size_t i = maps_meeting(ptr, size, &to); i < to; i++) {
      mprotect((void *)(uintptr_t)MAP_AT(i)->addr, MAP_AT(i)->size, prot);
      MAP_AT(i)->prot = prot;
    }
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h,
                                             CUmemAllocationHandleType type,
                                             unsigned long long flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_phys *p = phys_of(h);
  if (!p || !shareable || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0 ||
      !p->exportable) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
      *(int *)shareable = fd;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
                                               CUmemAllocationHandleType type) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  int src = (int)(intptr_t)os_handle;
  struct stat sb;
  if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || src < 0 || fstat(src, &sb) != 0 ||
      sb.st_size <= 0 || !is_multiple((uint64_t)sb.st_size))
    return CUDA_ERROR_INVALID_VALUE;
  fk_phys *p = calloc(1, sizeof *p);
  int fd = p ? fcntl(src, F_DUPFD_CLOEXEC, 0) : -1;
  if (fd < 0) {
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->magic = FK_HANDLE_MAGIC;
  p->fd = fd;
  p->size = (uint64_t)sb.st_size;
  p->refs = 1;
  p->handles = 1;
  p->exportable = 1;
  fk_lock();
  p->next = g_phys;
  g_phys = p;
  fk_unlock();
  *h = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

/* cuMemGetAccess: the access of the mapping holding ptr (NONE until
 * cuMemSetAccess, READ, READWRITE). The fake keeps one access per mapping
 * for every device (host memory backs it), so any valid device location
 * answers the same. No mapping at ptr, or a bad location: 1. */
FK_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc,
                               CUdeviceptr ptr) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!flags || !loc || !valid_location(loc))
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_map *m = fk_spans_at(&g_maps, ptr);
  if (!m)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *flags = m->prot == (PROT_READ | PROT_WRITE) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
             : m->prot == PROT_READ              ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                 : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  fk_unlock();
  return rc;
}
