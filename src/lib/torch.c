/* PyTorch's CUDAPluggableAllocator entry points (include/ebb/ebb.h) and
 * their late-free guard.
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "lib/lib_int.h"

#define NBUCKETS 4096

typedef struct tblock {
  struct tblock *next;
  const ebb_gpu *g;
  uint64_t addr;
  size_t live;  /* the live PyTorch block's size; 0: none */
  size_t norph; /* orphans at this address (never with a live block) */
} tblock;

static pthread_mutex_t t_mu = PTHREAD_MUTEX_INITIALIZER;
static tblock *t_tab[NBUCKETS];

void lib_torch_lock(void) { pthread_mutex_lock(&t_mu); }
void lib_torch_unlock(void) { pthread_mutex_unlock(&t_mu); }

static tblock **slot_locked(const ebb_gpu *g, uint64_t addr) {
  uint64_t h = (addr >> 8) ^ ((uint64_t)(uintptr_t)g * 0x9e3779b97f4a7c15ull);
  tblock **p = &t_tab[(h ^ (h >> 29)) & (NBUCKETS - 1)];
  while (*p && ((*p)->g != g || (*p)->addr != addr))
    p = &(*p)->next;
  return p;
}

/* Records of blocks PyTorch freed, kept for the next allocations (no host
 * allocation per tensor), at most SPARE_MAX of them. */
#define SPARE_MAX 1024
static tblock *t_spare;
static size_t t_nspare;

static void drop_locked(tblock **p) {
  tblock *b = *p;
  *p = b->next;
  if (t_nspare == SPARE_MAX) {
    free(b);
    return;
  }
  b->next = t_spare;
  t_spare = b;
  t_nspare++;
}

static tblock *new_locked(void) {
  tblock *b = t_spare;
  if (!b)
    return calloc(1, sizeof *b);
  t_spare = b->next;
  t_nspare--;
  memset(b, 0, sizeof *b);
  return b;
}

void lib_torch_leaked(const ebb_gpu *g, const mem_leak_report *r) {
  for (size_t i = 0; g && r && i < r->nleaks; i++) {
    if (r->leaks[i].pinned)
      continue;
    tblock **p = slot_locked(g, r->leaks[i].addr);
    if (*p && (*p)->live) {
      (*p)->live = 0;
      (*p)->norph++;
    }
  }
}

#define ORD_MAX 64
static _Atomic(ebb_gpu *) t_ord[ORD_MAX];

static void forget_ordinal(const ebb_gpu *g) {
  for (int i = 0; i < ORD_MAX; i++) {
    ebb_gpu *want = (ebb_gpu *)g;
    atomic_compare_exchange_strong(&t_ord[i], &want, NULL);
  }
}

void lib_torch_forget(const ebb_gpu *g) {
  forget_ordinal(g);
  lib_torch_lock();
  for (size_t i = 0; i < NBUCKETS; i++)
    for (tblock **p = &t_tab[i]; *p;)
      if ((*p)->g == g)
        drop_locked(p);
      else
        p = &(*p)->next;
  lib_torch_unlock();
}

/* How many blocks one allocation may set aside because their addresses are
 * still held by tensors ebb freed as leaks. */
#define HOLD_MAX 256

/* 1 when addr is new to PyTorch: then it is recorded as live (size). */
static int claim(const ebb_gpu *g, uint64_t addr, size_t size) {
  lib_torch_lock();
  tblock **p = slot_locked(g, addr);
  int fresh = *p == NULL;
  if (fresh && (*p = new_locked()) != NULL) {
    (*p)->g = g;
    (*p)->addr = addr;
    (*p)->live = size;
  } else if (fresh) {
    base_log(EBB_LOG_WARN, "ebb",
             "torch: no host memory to track the block at 0x%" PRIx64
             "; a late free there may free a newer block",
             addr);
  } else if ((*p)->live) {
    /* ebb handed out an address PyTorch still holds live: its block was
     * freed by a path that told nothing here; its PyTorch free is to come */
    (*p)->live = 0;
    (*p)->norph++;
  }
  lib_torch_unlock();
  return fresh;
}

/* The handle of CUDA device `ordinal`, without ebb_gpu_for_ordinal's lock
 * after the first call: that handle holds a reference until exit (its
 * ordinal_ref), so it stays valid; lib_torch_forget clears it all the same. */
static int gpu_of(int device, ebb_gpu **g) {
  if (device >= 0 && device < ORD_MAX &&
      (*g = atomic_load_explicit(&t_ord[device], memory_order_acquire)) != NULL)
    return 0;
  int rc = ebb_gpu_for_ordinal(device, g);
  if (!rc && device < ORD_MAX)
    atomic_store_explicit(&t_ord[device], *g, memory_order_release);
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
    if (claim(g, addr, (size_t)size)) {
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

/* Which block a PyTorch free of addr is: 1 the live one (free it), 0 an
 * orphan (retired here; nothing to free), -1 none known here. */
static int match_locked(tblock **p) {
  tblock *b = *p;
  if (!b)
    return -1;
  if (b->norph) { /* then there is no live PyTorch block here (alloc_at) */
    if (--b->norph == 0 && !b->live)
      drop_locked(p);
    return 0;
  }
  int live = b->live != 0;
  drop_locked(p);
  return live ? 1 : -1;
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
    if (match_locked(slot_locked(g, addr)) != 0)
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
