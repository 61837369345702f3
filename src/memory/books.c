/* The allocator's books: the one derived counter (cached = reserved -
 * allocated) and the ledger event that records an owner's and the
 * allocator's numbers after a change. Every function expects a->mu. */
#include "memory/internal.h"

void mem__update_cached_locked(ebb_allocator *a) {
  uint64_t r = a->reserved.current, al = a->allocated.current;
  mem__stat_set(&a->cached, r > al ? r - al : 0);
}

void mem__event_locked(ebb_allocator *a, ebb_ledger_kind k, const ebb_owner *o, uint64_t addr,
                       uint64_t bytes) {
  mem__ledger_add(a->ledger, k, o ? o->id : 0, addr, bytes, o ? o->bytes.current : 0,
                  a->reserved.current, a->allocated.current);
}
