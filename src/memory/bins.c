/* Free blocks sorted into 64 bins by power of two (one set per pool: small
 * and large segments). A request takes the best fit in its own bin, else the
 * smallest block of the next non-empty bin. Callers hold a->mu. */
#include "memory/internal.h"

static int bin_of(size_t size) { return 63 - __builtin_clzll((unsigned long long)size); }

void mem__bin_insert(mem_pool *p, mem_block *b) {
  b->bin = bin_of(b->size);
  MEM_DLIST_PUSH(p->bins[b->bin], b, fprev, fnext);
}

void mem__bin_remove(mem_pool *p, mem_block *b) {
  MEM_DLIST_UNLINK(p->bins[b->bin], b, fprev, fnext);
}

/* Best fit within the request's own bin, else the smallest block of the first
 * non-empty larger bin (every block there is big enough). */
mem_block *mem__pool_find(mem_pool *p, size_t size) {
  int bin = bin_of(size);
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

mem_pool *mem__pool_of(ebb_allocator *a, const mem_seg *s) {
  return s->small ? &a->small : &a->large;
}
