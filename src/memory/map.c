/* addr -> pointer hash map (open addressing, linear probing, backward-shift
 * deletion). Keys are nonzero device or host addresses. */
#include <stdlib.h>

#include "memory/internal.h"

static size_t slot_of(const mem_map *m, uint64_t k) {
  /* addresses are 512-aligned: mix the high bits down (splitmix64 finaliser) */
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k & (m->cap - 1);
}

static int grow(mem_map *m) {
  size_t ncap = m->cap ? m->cap * 2 : 64;
  uint64_t *nk = calloc(ncap, sizeof *nk);
  void **nv = calloc(ncap, sizeof *nv);
  if (!nk || !nv) {
    free(nk);
    free(nv);
    return EBB_ENOMEM;
  }
  mem_map old = *m;
  m->keys = nk;
  m->vals = nv;
  m->cap = ncap;
  m->n = 0;
  for (size_t i = 0; i < old.cap; i++)
    if (old.keys[i])
      mem__map_put(m, old.keys[i], old.vals[i]);
  free(old.keys);
  free(old.vals);
  return 0;
}

int mem__map_put(mem_map *m, uint64_t k, void *v) {
  if ((m->n + 1) * 4 > m->cap * 3) {
    int rc = grow(m);
    if (rc)
      return rc;
  }
  size_t i = slot_of(m, k);
  while (m->keys[i] && m->keys[i] != k)
    i = (i + 1) & (m->cap - 1);
  if (!m->keys[i])
    m->n++;
  m->keys[i] = k;
  m->vals[i] = v;
  return 0;
}

void *mem__map_get(const mem_map *m, uint64_t k) {
  if (!m->cap || !k)
    return NULL;
  size_t i = slot_of(m, k);
  while (m->keys[i]) {
    if (m->keys[i] == k)
      return m->vals[i];
    i = (i + 1) & (m->cap - 1);
  }
  return NULL;
}

void *mem__map_del(mem_map *m, uint64_t k) {
  if (!m->cap || !k)
    return NULL;
  size_t mask = m->cap - 1, i = slot_of(m, k);
  while (m->keys[i] && m->keys[i] != k)
    i = (i + 1) & mask;
  if (!m->keys[i])
    return NULL;
  void *v = m->vals[i];
  /* backward shift: move later members of the probe run into the hole */
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!m->keys[j])
      break;
    size_t home = slot_of(m, m->keys[j]);
    /* can the entry at j move to i? only if its home is not in (i, j] */
    int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (!in_range) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      i = j;
    }
  }
  m->keys[i] = 0;
  m->vals[i] = NULL;
  m->n--;
  return v;
}

void mem__map_free(mem_map *m) {
  free(m->keys);
  free(m->vals);
  m->keys = NULL;
  m->vals = NULL;
  m->cap = m->n = 0;
}
