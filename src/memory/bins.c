/* Free blocks sorted into 64 bins by power of two, one set per pool (each
 * owner's small and large pools, and the allocator's pools of empty
 * segments); a bit mask says which bins hold blocks. A request takes the best
 * fit in its own bin, else the smallest block of the next non-empty bin,
 * among the blocks its stream may take (stream.c: a block freed on another
 * stream waits for that stream's work). Insert and remove are inline in
 * internal.h. Callers hold a->mu. */
#include "memory/internal.h"

/* Blocks with no gate need no driver call; the gate is asked last. */
static int fits(mem_allocator *a, mem_block *b, size_t size, uint64_t stream) {
  return b->size >= size && (!b->ngate || mem__gate_open_locked(a, b, stream));
}

/* The smallest block of bin that fits (best fit; an exact one ends the walk). */
static mem_block *best_in(mem_allocator *a, mem_block *bin, size_t size, uint64_t stream) {
  mem_block *best = NULL;
  for (mem_block *b = bin; b; b = b->fnext)
    if ((!best || b->size < best->size) && fits(a, b, size, stream)) {
      best = b;
      if (b->size == size)
        break;
    }
  return best;
}

/* Best fit within the request's own bin, else the smallest block of the
 * first larger bin that has one the stream may take (every block there is
 * big enough). */
mem_block *mem__pool_find(mem_allocator *a, mem_pool *p, size_t size, uint64_t stream) {
  int bin = mem__bin_of(size);
  mem_block *best = best_in(a, p->bins[bin], size, stream);
  uint64_t larger = bin + 1 < EBB_MEM_NBINS ? p->nonempty & (~0ull << (bin + 1)) : 0;
  while (!best && larger) {
    int i = __builtin_ctzll(larger);
    best = best_in(a, p->bins[i], size, stream);
    larger &= larger - 1;
  }
  return best;
}
