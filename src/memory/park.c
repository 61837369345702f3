/* Parking (VMM segments): an owner's segments are copied to host memory and
 * their physical memory given back while the address range is kept; waking
 * maps new physical memory at the same addresses and copies the bytes back.
 * Only segments whose live blocks all belong to the owner (or descendants)
 * are parked; allocation never uses a parked segment (its free blocks are
 * out of the bins) and reserved/allocated do not count it. */
#include <stdlib.h>

#include "memory/internal.h"

static int seg_parkable(const mem_seg *s, const ebb_owner *o) {
  if (s->d.parked || s->nlive == 0 || s->d.kind != EBB_SEG_VMM)
    return 0;
  for (const mem_block *b = s->first; b; b = b->next)
    if (!b->free && !mem__owner_in_tree(b->owner, o))
      return 0;
  return 1;
}

static int seg_wakeable(const mem_seg *s, const ebb_owner *o) {
  if (!s->d.parked || !s->park_copy)
    return 0;
  int mine = 0, others = 0;
  for (const mem_block *b = s->first; b; b = b->next)
    if (!b->free)
      mem__owner_in_tree(b->owner, o) ? mine++ : others++;
  return mine && !others;
}

/* Copies s's live blocks to copy (to_host) or back from it; *live: their
 * bytes (counted up to the first failure). */
static int copy_live(ebb_allocator *a, mem_seg *s, unsigned char *copy, int to_host,
                     uint64_t *live) {
  int rc = 0;
  for (mem_block *b = s->first; b && !rc; b = b->next)
    if (!b->free) {
      unsigned char *h = copy + (b->addr - s->d.addr);
      rc = to_host ? ebb_device_copy_dtoh(a->dev, h, b->addr, b->size)
                   : ebb_device_copy_htod(a->dev, b->addr, h, b->size);
      *live += b->size;
    }
  return rc;
}

/* s's free blocks into the bins (insert) or out of them. */
static void seg_bins(ebb_allocator *a, mem_seg *s, int insert) {
  mem_pool *pool = mem__pool_of(a, s);
  for (mem_block *b = s->first; b; b = b->next)
    if (b->free)
      insert ? mem__bin_insert(pool, b) : mem__bin_remove(pool, b);
}

static int park_seg_locked(ebb_allocator *a, ebb_owner *o, mem_seg *s) {
  unsigned char *copy = malloc(s->d.size);
  if (!copy)
    return ebb_seterr(EBB_ENOMEM, "owner '%s': no host memory to park %zu bytes", o->name,
                      s->d.size);
  uint64_t live = 0;
  int rc = copy_live(a, s, copy, 1, &live);
  if (!rc)
    rc = ebb_device_seg_park(a->dev, &s->d);
  if (rc) {
    free(copy);
    return ebb_errctx(rc, "owner '%s': parking a segment of %zu bytes: ", o->name, s->d.size);
  }
  s->park_copy = copy;
  seg_bins(a, s, 0);
  mem__stat_sub(&a->reserved, s->d.size);
  mem__stat_sub(&a->allocated, live);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_PARK, o, s->d.addr, s->d.size);
  return 0;
}

int ebb_owner_park(ebb_owner *o, uint64_t *parked) {
  if (parked)
    *parked = 0;
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_park: no owner");
  mem__check_owner(o);
  ebb_allocator *a = o->a;
  int rc = 0;
  uint64_t total = 0;
  mem__lock(a);
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (seg_parkable(s, o) && !(rc = park_seg_locked(a, o, s)))
      total += s->d.size;
  mem__unlock(a);
  if (parked)
    *parked = total;
  return rc;
}

/* New physical memory under s and the bytes copied back; the books count
 * it again even when a copy failed (the memory is mapped either way). */
static int wake_seg_locked(ebb_allocator *a, ebb_owner *o, mem_seg *s) {
  int rc = ebb_device_seg_wake(a->dev, &s->d);
  if (rc)
    return ebb_errctx(rc, "owner '%s': waking a segment of %zu bytes: ", o->name, s->d.size);
  uint64_t live = 0;
  rc = copy_live(a, s, s->park_copy, 0, &live);
  free(s->park_copy);
  s->park_copy = NULL;
  seg_bins(a, s, 1);
  mem__stat_add(&a->reserved, s->d.size);
  mem__stat_add(&a->allocated, live);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_WAKE, o, s->d.addr, s->d.size);
  return rc;
}

int ebb_owner_wake(ebb_owner *o) {
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_wake: no owner");
  mem__check_owner(o);
  ebb_allocator *a = o->a;
  int rc = 0;
  mem__lock(a);
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (seg_wakeable(s, o))
      rc = wake_seg_locked(a, o, s);
  mem__unlock(a);
  return rc;
}
