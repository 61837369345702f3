/* Sorted sets of address ranges that do not overlap (the VMM reservations
 * and mappings of fakecuda_vmm.c): a range by address in O(log n) by binary
 * search, where the argument checks of every copy, memset and launch walked
 * a list of every reservation and mapping (ebb reserves one range per
 * allocation). Adding and removing move the entries after the place (a
 * memmove of pointers and two words each). Callers hold fk_lock. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

int fk_spans_room(fk_spans *s) {
  if (s->n < s->cap)
    return 0;
  size_t cap = s->cap ? 2 * s->cap : 64;
  fk_span *v = realloc(s->v, cap * sizeof *v);
  if (!v)
    return -1;
  s->v = v;
  s->cap = cap;
  return 0;
}

size_t fk_spans_from(const fk_spans *s, uint64_t addr) {
  size_t lo = 0, hi = s->n; /* ranges do not overlap: their ends are sorted too */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->v[mid].end > addr)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

void *fk_spans_at(const fk_spans *s, uint64_t addr) {
  size_t i = fk_spans_from(s, addr);
  return i < s->n && s->v[i].addr <= addr ? s->v[i].obj : NULL;
}

void fk_spans_add(fk_spans *s, uint64_t addr, uint64_t size, void *obj) {
  size_t i = fk_spans_from(s, addr);
  memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof *s->v);
  s->v[i] = (fk_span){addr, addr + size, obj};
  s->n++;
}

void fk_spans_cut(fk_spans *s, size_t from, size_t to) {
  memmove(&s->v[from], &s->v[to], (s->n - to) * sizeof *s->v);
  s->n -= to - from;
}
