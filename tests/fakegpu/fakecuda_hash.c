/* Hash maps for the fake's lookups: handles (is this pointer a live stream,
 * event, module, function, library, kernel?), the object a library or kernel
 * owns in a context, a library's kernel by name, the identifiers of a binary
 * image. A launch or a cuLibraryGetKernel walked a list of every object
 * before; PyTorch makes tens of thousands of them at start.
 *
 * Open addressing with linear probing and tombstones; a key is two words and
 * an optional string (compared with strcmp; the map keeps the pointer, so the
 * string must live as long as its entry). Callers hold fk_lock. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_HMAP_TOMB ((void *)(uintptr_t)1)

struct fk_hmap_slot {
  uint64_t hash;
  uintptr_t k1, k2;
  const char *name;
  void *val; /* NULL: empty; FK_HMAP_TOMB: deleted */
};

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

uint64_t fk_hash_bytes(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++)
    h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t key_hash(uintptr_t k1, uintptr_t k2, const char *name) {
  uint64_t h = mix(k1 * 0x9e3779b97f4a7c15ull ^ mix(k2 + 0x632be59bd9b4e019ull));
  if (name)
    h ^= mix(fk_hash_bytes(name, strlen(name)));
  return h | 2; /* never 0 */
}

static int slot_is(const struct fk_hmap_slot *s, uint64_t h, uintptr_t k1, uintptr_t k2,
                   const char *name) {
  return s->val != FK_HMAP_TOMB && s->hash == h && s->k1 == k1 && s->k2 == k2 &&
         (s->name == name || (s->name && name && !strcmp(s->name, name)));
}

static struct fk_hmap_slot *find_slot(const fk_hmap *m, uint64_t h, uintptr_t k1, uintptr_t k2,
                                      const char *name) {
  if (!m->cap)
    return NULL;
  for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    struct fk_hmap_slot *s = &m->slots[i];
    if (!s->val)
      return NULL;
    if (slot_is(s, h, k1, k2, name))
      return s;
  }
}

void *fk_hmap_get(const fk_hmap *m, uintptr_t k1, uintptr_t k2, const char *name) {
  struct fk_hmap_slot *s = find_slot(m, key_hash(k1, k2, name), k1, k2, name);
  return s ? s->val : NULL;
}

static int grow(fk_hmap *m) {
  size_t cap = m->cap ? m->cap : 64;
  while ((m->n + 1) * 2 > cap)
    cap *= 2;
  struct fk_hmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return -1;
  for (size_t j = 0; j < m->cap; j++) {
    struct fk_hmap_slot *s = &m->slots[j];
    if (!s->val || s->val == FK_HMAP_TOMB)
      continue;
    size_t i = s->hash & (cap - 1);
    while (slots[i].val)
      i = (i + 1) & (cap - 1);
    slots[i] = *s;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->n;
  return 0;
}

int fk_hmap_put(fk_hmap *m, uintptr_t k1, uintptr_t k2, const char *name, void *val) {
  uint64_t h = key_hash(k1, k2, name);
  struct fk_hmap_slot *s = find_slot(m, h, k1, k2, name);
  if (s) {
    s->val = val;
    return 0;
  }
  if ((m->used + 1) * 10 > m->cap * 7 && grow(m))
    return -1;
  size_t i = h & (m->cap - 1);
  while (m->slots[i].val && m->slots[i].val != FK_HMAP_TOMB)
    i = (i + 1) & (m->cap - 1);
  if (!m->slots[i].val)
    m->used++;
  m->slots[i] = (struct fk_hmap_slot){h, k1, k2, name, val};
  m->n++;
  return 0;
}

void fk_hmap_del(fk_hmap *m, uintptr_t k1, uintptr_t k2, const char *name, const void *val) {
  struct fk_hmap_slot *s = find_slot(m, key_hash(k1, k2, name), k1, k2, name);
  if (s && (!val || s->val == val)) {
    s->val = FK_HMAP_TOMB;
    s->name = NULL;
    m->n--;
  }
}

void fk_hmap_clear(fk_hmap *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}
