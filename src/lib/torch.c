/* PyTorch's CUDAPluggableAllocator entry points (include/ebb/ebb.h); their
 * late-free guard's table is torch_guard.c's.
 *
 * PyTorch frees by address (and the size it asked for), with no token of
 * its own. When an owner is released with a tensor still alive, ebb frees
 * the tensor's block as a leak, and the address may go to another block;
 * when the old tensor finally dies its free names that address. So libebb
 * keeps, per device and address, the live PyTorch block (its size) and the
 * "orphans": blocks there that ebb freed as leaks whose PyTorch free has
 * not come yet. A free of an address with an orphan retires it and frees
 * nothing (whatever block now lies there is someone else's).
 *
 * PyTorch itself keys its allocations by address (its pluggable allocator
 * keeps a map from pointer to size and aborts, "Trying to free a pointer
 * not allocated here", when one address is handed out twice while alive),
 * so an address with an orphan is never given to PyTorch again until the
 * orphan's free: the allocation sets such a block aside and takes another,
 * and gives the set-aside ones back after. Hence a live PyTorch block and
 * an orphan never share an address. The lock is taken before the
 * allocator's (leak reclaim, free), never the other way round. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "base/log.h"
#include "lib/lib_int.h"

/* How many blocks one allocation may set aside because their addresses are
 * still held by tensors ebb freed as leaks. */
#define HOLD_MAX 256

/* The handle of CUDA device `ordinal`, without ebb_gpu_for_ordinal's lock
 * after the first call: that handle holds a reference until exit (its
 * ordinal_ref), so it stays valid; lib_torch_forget clears it all the same. */
static int gpu_of(int device, ebb_gpu **g) {
  if ((*g = lib_torch_ordinal(device)) != NULL)
    return 0;
  int rc = ebb_gpu_for_ordinal(device, g);
  if (!rc)
    lib_torch_set_ordinal(device, *g);
  return rc;
}

/* Refused allocations: PyTorch turns NULL into "out of memory" and no
 * more, so the reason is kept for ebb_torch_last_error. */
static _Atomic uint64_t t_refused;
static char t_last_error[512];

static void refused(void) {
  atomic_fetch_add(&t_refused, 1);
  lib_torch_lock();
  snprintf(t_last_error, sizeof t_last_error, "%s", ebb_errmsg());
  lib_torch_unlock();
}

int ebb_torch_last_error(char *buf, size_t cap, uint64_t *n) {
  if (n)
    *n = atomic_load(&t_refused);
  if (buf && cap) {
    lib_torch_lock();
    snprintf(buf, cap, "%s", t_last_error);
    lib_torch_unlock();
  }
  return 0;
}

/* site: interned (lib_intern) or NULL. stream: PyTorch's, for the
 * allocator's stream-ordered reuse. */
static int alloc_at(ssize_t size, int device, const char *site, void *stream, void **ptr) {
  ebb_gpu *g = NULL;
  uint64_t addr = 0, held[HOLD_MAX];
  int nheld = 0;
  uint64_t st = (uint64_t)(uintptr_t)stream;
  *ptr = NULL;
  int rc = gpu_of(device, &g);
  while (!rc) {
    if ((rc = lib_gpu_alloc_interned(g, (size_t)size, site, st, &addr)) != 0)
      break;
    if (lib_torch_claim(g, addr, (size_t)size)) {
      *ptr = (void *)(uintptr_t)addr;
      break;
    }
    /* a tensor ebb freed as a leak still holds this address in PyTorch */
    if (nheld == HOLD_MAX) {
      ebb_free_on(g, addr, st);
      rc = ebb_seterr(EBB_EOOM,
                      "ebb_torch_alloc(%zd bytes, cuda:%d): %d blocks in a row lie "
                      "at addresses that tensors ebb freed as leaks still hold; drop those "
                      "tensors",
                      size, device, HOLD_MAX);
      break;
    }
    held[nheld++] = addr;
  }
  for (int i = 0; i < nheld; i++)
    ebb_free_on(g, held[i], st);
  if (rc)
    refused();
  return rc;
}

int ebb_torch_alloc_on(ssize_t size, int device, void *stream, const char *site, void **ptr) {
  if (!ptr)
    return ebb_seterr(EBB_EINVAL, "ebb_torch_alloc_at(%zd bytes, cuda:%d): ptr is NULL", size,
                      device);
  *ptr = NULL;
  if (size <= 0)
    return 0; /* an empty tensor needs no memory */
  return alloc_at(size, device, lib_intern(site), stream, ptr);
}

int ebb_torch_alloc_at(ssize_t size, int device, const char *site, void **ptr) {
  return ebb_torch_alloc_on(size, device, NULL, site, ptr);
}

void *ebb_torch_alloc(ssize_t size, int device, void *stream) {
  void *p = NULL;
  if (size <= 0)
    return NULL; /* an empty tensor needs no memory */
  if (alloc_at(size, device, lib_pysite(), stream, &p) != 0)
    base_log(EBB_LOG_ERROR, "ebb", "ebb_torch_alloc(%zd bytes, cuda:%d): %s", size, device,
             ebb_errmsg());
  return p;
}

void ebb_torch_free(void *ptr, ssize_t size, int device, void *stream) {
  if (!ptr)
    return;
  ebb_gpu *g = NULL;
  int rc = gpu_of(device, &g);
  if (!rc) {
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    /* the free under the lock: a leak reclaim and a new block at this
     * address cannot come between the match and the free */
    lib_torch_lock();
    if (lib_torch_match_locked(g, addr) != 0)
      rc = ebb_free_on(g, addr, (uint64_t)(uintptr_t)stream);
    lib_torch_unlock();
  }
  /* A block ebb freed with no record here (allocated before the guard, or
   * through another entry point) comes back as EBB_ENOTFOUND: not an
   * error. */
  if (rc && rc != EBB_ENOTFOUND)
    base_log(EBB_LOG_ERROR, "ebb", "ebb_torch_free(%p, %zd bytes, cuda:%d): %s", ptr, size, device,
             ebb_errmsg());
}
