/* Free blocks sorted into 64 bins by power of two (one set per pool: small
 * and large segments; insert/remove are inline in internal.h). A request takes the best fit in its own bin, else the
 * smallest block of the next non-empty bin. Callers hold a->mu. */
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
  for (int i = bin + 1; !best && i < EBB_MEM_NBINS; i++)
    for (mem_block *b = p->bins[i]; b; b = b->fnext)
      if (!best || b->size < best->size)
        best = b;
  return best;
}
