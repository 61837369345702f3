/* Free blocks sorted into 64 bins by power of two, one set per pool (each
 * owner's small and large pools, and the allocator's pools of empty
 * segments); a bit mask says which bins hold blocks. A request takes the best
 * fit in its own bin, else the smallest block of the next non-empty bin.
 * Insert and remove are inline in internal.h. Callers hold a->mu. */
#include "memory/internal.h"

/* Best fit within the request's own bin, else the smallest block of the first
 * non-empty larger bin (every block there is big enough). */
mem_block *mem__pool_find(mem_pool *p, size_t size) {
  int bin = mem__bin_of(size);
  mem_block *best = NULL;
  for (mem_block *b = p->bins[bin]; b; b = b->fnext)
    if (b->size >= size && (!best || b->size < best->size)) {
      best = b;
      if (b->size == size)
        break;
    }
  uint64_t larger = bin + 1 < EBB_MEM_NBINS ? p->nonempty & (~0ull << (bin + 1)) : 0;
  if (best || !larger)
    return best;
  for (mem_block *b = p->bins[__builtin_ctzll(larger)]; b; b = b->fnext)
    if (!best || b->size < best->size)
      best = b;
  return best;
}
