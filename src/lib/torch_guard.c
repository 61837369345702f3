/* The late-free guard of PyTorch's entry points (torch.c): per device
 * and address, the live PyTorch block and the orphans (blocks ebb freed as
 * leaks whose PyTorch free has not come yet), under one lock that leak
 * reclaims (lib.c) take too; and the handles of the CUDA ordinals that
 * torch.c has looked up, forgotten with their device. This file calls
 * nothing else of libebb: lib.c and torch.c both use it, and neither is
 * used by it (build_cycles). Why the guard is needed: torch.c's opening
 * comment. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "lib/lib_int.h"

#define NBUCKETS_LOG2 12
#define NBUCKETS (1u << NBUCKETS_LOG2)

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

/* Every bit of the address counts (multiplied, the high bits taken): tensors
 * at the start of 2 MiB-aligned segments share their low 21 bits, and a
 * hash of bits 8-19 put them all in one chain that every allocation and
 * free walked (perf: lib_torch_claim and lib_torch_match_locked first
 * among libebb's costs once a model's weights were live). */
static tblock **slot_locked(const ebb_gpu *g, uint64_t addr) {
  uint64_t h = (addr ^ ((uint64_t)(uintptr_t)g << 1)) * 0x9e3779b97f4a7c15ull;
  tblock **p = &t_tab[h >> (64 - NBUCKETS_LOG2)];
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

static _Atomic(ebb_gpu *) t_ord[LIB_TORCH_ORD_MAX];

ebb_gpu *lib_torch_ordinal(int device) {
  if (device < 0 || device >= LIB_TORCH_ORD_MAX)
    return NULL;
  return atomic_load_explicit(&t_ord[device], memory_order_acquire);
}

void lib_torch_set_ordinal(int device, ebb_gpu *g) {
  if (device >= 0 && device < LIB_TORCH_ORD_MAX)
    atomic_store_explicit(&t_ord[device], g, memory_order_release);
}

static void forget_ordinal(const ebb_gpu *g) {
  for (int i = 0; i < LIB_TORCH_ORD_MAX; i++) {
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

int lib_torch_claim(const ebb_gpu *g, uint64_t addr, size_t size) {
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

static int match_at_locked(tblock **p) {
  tblock *b = *p;
  if (!b)
    return -1;
  if (b->norph) { /* then there is no live PyTorch block here (torch.c: alloc_at) */
    if (--b->norph == 0 && !b->live)
      drop_locked(p);
    return 0;
  }
  int live = b->live != 0;
  drop_locked(p);
  return live ? 1 : -1;
}

int lib_torch_match_locked(const ebb_gpu *g, uint64_t addr) {
  return match_at_locked(slot_locked(g, addr));
}
