/* Device memory that was freed: the ranges a kernel argument must not point
 * into (fakecuda_params.c checks launches against them).
 *
 * Every range that was device memory of this process (a plain or managed
 * allocation, a pool block, an opened IPC mapping, a VMM reservation) is
 * recorded here when it is freed, merged with its neighbours. A value is a
 * pointer into freed memory when it lies in such a range and no live memory
 * has been put there since (fk_mem_range_ok answers that). Values outside
 * every range that ever was device memory are not pointers the fake knows
 * of (integers, host pointers): they are never judged.
 *
 * Quarantine: a freed range is not handed back to the kernel at once but
 * kept reserved (PROT_NONE, no memory behind it), the last
 * FAKEGPU_QUARANTINE ranges (default 4096), so the next allocation cannot
 * land on the same addresses and hide a stale pointer by making it valid
 * again -- a launch on a freed tensor then faults every time, not only when
 * nothing was allocated in between. The oldest range beyond the limit is
 * unmapped for real. FAKEGPU_QUARANTINE=0 unmaps at once, as before.
 * A range unmapped for real leaves the freed set too: the process's own
 * heap may map those addresses next (device memory is host address space
 * here), and a host pointer there -- stale padding in a kernel's parameter
 * struct, say -- is not a device pointer (CuPy's texture tests under ASan
 * faulted on one after 4096 frees before this). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fakecuda.h"

/* Sorted, disjoint, non-adjacent ranges [lo, hi). */
typedef struct range {
  uint64_t lo, hi;
} range;

#define FK_FREED_MAX (1u << 16) /* ranges kept; beyond it new ones are not recorded */

static range *g_freed;
static size_t g_nfreed, g_capfreed;

static range *g_quar; /* FIFO ring of quarantined ranges */
static size_t g_qhead, g_qlen, g_qcap;

/* Index of the first range with hi >= lo (the one lo may join). */
static size_t first_reaching(uint64_t lo) {
  size_t a = 0, b = g_nfreed;
  while (a < b) {
    size_t m = a + (b - a) / 2;
    if (g_freed[m].hi < lo)
      a = m + 1;
    else
      b = m;
  }
  return a;
}

static void freed_add(uint64_t lo, uint64_t hi) {
  if (hi <= lo)
    return;
  size_t i = first_reaching(lo), j = i;
  while (j < g_nfreed && g_freed[j].lo <= hi) { /* overlaps or touches: merge */
    lo = g_freed[j].lo < lo ? g_freed[j].lo : lo;
    hi = g_freed[j].hi > hi ? g_freed[j].hi : hi;
    j++;
  }
  if (j == i) { /* a new range at i */
    if (g_nfreed >= FK_FREED_MAX)
      return;
    if (g_nfreed == g_capfreed) {
      size_t cap = g_capfreed ? g_capfreed * 2 : 64;
      range *r = realloc(g_freed, cap * sizeof *r);
      if (!r)
        return;
      g_freed = r;
      g_capfreed = cap;
    }
    memmove(g_freed + i + 1, g_freed + i, (g_nfreed - i) * sizeof *g_freed);
    g_nfreed++;
  } else if (j > i + 1) { /* ranges i..j-1 become one */
    memmove(g_freed + i + 1, g_freed + j, (g_nfreed - j) * sizeof *g_freed);
    g_nfreed -= j - i - 1;
  }
  g_freed[i] = (range){lo, hi};
}

/* Takes [lo, hi) out of the freed set (its addresses may be the host's now). */
static void freed_remove(uint64_t lo, uint64_t hi) {
  size_t i = first_reaching(lo + 1);
  while (i < g_nfreed && g_freed[i].lo < hi) {
    range r = g_freed[i];
    if (r.lo < lo && r.hi > hi) { /* a hole in the middle: split in two */
      if (g_nfreed == g_capfreed) {
        size_t cap = g_capfreed * 2;
        range *n = realloc(g_freed, cap * sizeof *n);
        if (!n) { /* cannot split: forget the whole range, never judge it wrongly */
          memmove(g_freed + i, g_freed + i + 1, (g_nfreed - i - 1) * sizeof *g_freed);
          g_nfreed--;
          return;
        }
        g_freed = n;
        g_capfreed = cap;
      }
      memmove(g_freed + i + 1, g_freed + i, (g_nfreed - i) * sizeof *g_freed);
      g_nfreed++;
      g_freed[i] = (range){r.lo, lo};
      g_freed[i + 1] = (range){hi, r.hi};
      return;
    }
    if (r.lo < lo) { /* keep the head */
      g_freed[i++].hi = lo;
    } else if (r.hi > hi) { /* keep the tail */
      g_freed[i].lo = hi;
      return;
    } else { /* wholly inside: drop it */
      memmove(g_freed + i, g_freed + i + 1, (g_nfreed - i - 1) * sizeof *g_freed);
      g_nfreed--;
    }
  }
}

/* Gives [addr, addr+n) back to the kernel: no longer the fake's to judge. */
static void unmap_for_real(uint64_t addr, uint64_t n) {
  munmap((void *)(uintptr_t)addr, n);
  freed_remove(addr, addr + n);
}

int fk_freed_holds(uint64_t v) {
  size_t i = first_reaching(v + 1);
  return i < g_nfreed && g_freed[i].lo <= v && v < g_freed[i].hi;
}

/* Keeps [addr, addr+n) reserved; unmaps the oldest range beyond the limit. */
static void quarantine(uint64_t addr, uint64_t n) {
  long limit = fk_cfg.check_args ? fk_cfg.quarantine : 0;
  void *p = (void *)(uintptr_t)addr;
  if (limit <= 0 || mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                         -1, 0) == MAP_FAILED) {
    unmap_for_real(addr, n);
    return;
  }
  if (g_qlen == g_qcap) {
    size_t cap = g_qcap ? g_qcap * 2 : 64;
    range *r = malloc(cap * sizeof *r);
    if (!r) {
      unmap_for_real(addr, n);
      return;
    }
    for (size_t k = 0; k < g_qlen; k++)
      r[k] = g_quar[(g_qhead + k) % g_qcap];
    free(g_quar);
    g_quar = r, g_qcap = cap, g_qhead = 0;
  }
  g_quar[(g_qhead + g_qlen++) % g_qcap] = (range){addr, addr + n};
  while ((long)g_qlen > limit) {
    range old = g_quar[g_qhead];
    unmap_for_real(old.lo, old.hi - old.lo);
    g_qhead = (g_qhead + 1) % g_qcap;
    g_qlen--;
  }
}

void fk_freed_unmap(uint64_t addr, uint64_t n) {
  freed_add(addr, addr + n);
  quarantine(addr, n);
}

void fk_freed_note(uint64_t addr, uint64_t n) { freed_add(addr, addr + n); }
