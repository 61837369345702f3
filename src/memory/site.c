/* Allocation sites ("file.c:123") interned per allocator: a block keeps a
 * pointer to the allocator's copy, so a plugin's string literals may go away
 * with the plugin while its blocks (and their leak reports) stay. Interned by
 * pointer; a pointer reused for another text (a plugin unloaded and another
 * loaded at the same address) gets a new copy, and the old copy is kept for
 * the blocks that still point at it. Callers hold a->mu. */
#include <stdlib.h>
#include <string.h>

#include "memory/internal.h"

/* Old interned site texts stay readable until the allocator goes. */
static void site_retire(mem_allocator *a, char *old) {
  char **n = realloc(a->retired_sites, (a->nretired + 1) * sizeof *n);
  if (!n) { /* keep it reachable through the map under a fake key */
    mem__map_put(&a->sites, (uint64_t)(uintptr_t)old | 1, old);
    return;
  }
  a->retired_sites = n;
  a->retired_sites[a->nretired++] = old;
}

const char *mem__site_intern_locked(mem_allocator *a, const char *site) {
  if (!site)
    return "?";
  uint64_t key = (uint64_t)(uintptr_t)site;
  const char *st = mem__map_get(&a->sites, key);
  if (st && strcmp(st, site) == 0)
    return st;
  char *copy = strdup(site);
  char *old = copy ? mem__map_del(&a->sites, key) : NULL;
  if (!copy || mem__map_put(&a->sites, key, copy)) {
    free(copy);
    copy = NULL;
  }
  /* blocks still pointing at the old copy keep it: park it on a list */
  if (old)
    site_retire(a, old);
  return copy ? copy : "?";
}

void mem__sites_free(mem_allocator *a) {
  for (size_t i = 0; i < a->sites.cap; i++)
    free(a->sites.vals[i]);
  mem__map_free(&a->sites);
  for (size_t i = 0; i < a->nretired; i++)
    free(a->retired_sites[i]);
  free(a->retired_sites);
  a->retired_sites = NULL;
  a->nretired = 0;
}
