/* Parking (VMM segments): an owner's segments are copied to host memory and
 * their physical memory given back while the address range is kept; waking
 * maps new physical memory at the same addresses and copies the bytes back.
 * Only segments whose live blocks all belong to the owner (or descendants)
 * are parked; allocation never uses a parked segment (its free blocks are
 * out of the bins) and reserved/allocated do not count it. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/text.h"
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
  if (!s->d.parked || (!s->park_copy && !s->asleep))
    return 0;
  int mine = 0, others = 0;
  for (const mem_block *b = s->first; b; b = b->next)
    if (!b->free)
      mem__owner_in_tree(b->owner, o) ? mine++ : others++;
  return mine && !others;
}

/* s's free blocks into the bins (insert) or out of them. */
static void seg_bins(mem_allocator *a, mem_seg *s, int insert) {
  mem_pool *pool = mem__pool_of(a, s);
  for (mem_block *b = s->first; b; b = b->next)
    if (b->free)
      insert ? mem__bin_insert(pool, b) : mem__bin_remove(pool, b);
}

/* A block whose bytes a park (all) or a sleep (weights only) keeps. */
static int keeps(const mem_block *b, int all) { return !b->free && (all || b->weights); }

static uint64_t kept_bytes(const mem_seg *s, int all) {
  uint64_t n = 0;
  for (const mem_block *b = s->first; b; b = b->next)
    if (keeps(b, all))
      n += b->size;
  return n;
}

static void drop_backup(mem_seg *s) {
  mem__backup_free(s->park_copy, s->park_size);
  s->park_copy = NULL;
  s->park_size = 0;
  for (mem_block *b = s->first; b; b = b->next)
    b->backed = 0;
}

/* Queues the copies of s's kept blocks into a backup of exactly their size,
 * packed in address order (each block's place in bk_off). */
static int backup_seg_locked(ebb_owner *o, mem_seg *s, int all, mem_xfer *x) {
  size_t n = kept_bytes(s, all);
  if (n == 0)
    return 0;
  unsigned char *copy = mem__backup_alloc(n);
  if (!copy)
    return ebb_seterr(EBB_ENOMEM, "owner '%s': no host memory to back up %zu bytes", o->name, n);
  s->park_copy = copy;
  s->park_size = n;
  size_t off = 0;
  int rc = 0;
  for (mem_block *b = s->first; b && !rc; b = b->next)
    if (keeps(b, all)) {
      b->bk_off = off;
      b->backed = 1;
      rc = mem__xfer_dtoh(x, copy + off, b->addr, b->size);
      off += b->size;
    }
  return rc;
}

/* s has given its physical memory back: the books stop counting it. */
static void parked_locked(mem_allocator *a, ebb_owner *o, mem_seg *s, int sleep,
                          mem_sleep_stats *st) {
  uint64_t live = 0;
  for (const mem_block *b = s->first; b; b = b->next)
    live += b->free ? 0 : b->size;
  s->asleep = sleep;
  seg_bins(a, s, 0);
  mem__stat_sub(&a->reserved, s->d.size);
  mem__stat_sub(&a->allocated, live);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_PARK, o, s->d.addr, s->d.size);
  st->device_bytes += s->d.size;
  st->backup_bytes += s->park_size;
  st->dropped_bytes += live - s->park_size;
  st->segments++;
}

/* After the copies: each picked segment's physical memory goes back. A
 * failure stops there: the segments parked so far stay parked, the rest
 * stay as they were (their backups dropped). */
static int park_picked_locked(mem_allocator *a, ebb_owner *o, int sleep, mem_sleep_stats *st) {
  int rc = 0;
  for (mem_seg *s = a->segs; s; s = s->next) {
    if (!s->picked)
      continue;
    s->picked = 0;
    if (!rc && (rc = dev_seg_park(a->dev, &s->d)) != 0)
      rc = ebb_errctx(rc, "owner '%s': %s a segment of %zu bytes: ", o->name,
                      sleep ? "putting to sleep" : "parking", s->d.size);
    if (rc)
      drop_backup(s);
    else
      parked_locked(a, o, s, sleep, st);
  }
  return rc;
}

/* Park (all live bytes kept) or sleep (weights only) every segment of o's:
 * first every backup is copied (chunks through pinned staging, the DMA of
 * one overlapping the host copy of the other), then the memory goes, and
 * the fact is published (EBB_EVENT_PARKED). st starts at zero. */
static int put_away(ebb_owner *o, int sleep, mem_sleep_stats *st) {
  mem_allocator *a = o->a;
  uint64_t total = 0;
  mem_xfer x;
  mem__lock(a);
  for (mem_seg *s = a->segs; s; s = s->next)
    if ((s->picked = seg_parkable(s, o)))
      total += kept_bytes(s, !sleep);
  int rc = mem__xfer_open_locked(a, total, &x);
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (s->picked)
      rc = backup_seg_locked(o, s, !sleep, &x);
  if (!rc)
    rc = mem__xfer_finish(&x);
  mem__xfer_close(&x);
  if (rc) {
    for (mem_seg *s = a->segs; s; s = s->next)
      if (s->picked) {
        s->picked = 0;
        drop_backup(s);
      }
    rc = ebb_errctx(rc, "owner '%s': backing up %llu bytes: ", o->name, (unsigned long long)total);
  } else {
    rc = park_picked_locked(a, o, sleep, st);
  }
  mem__unlock(a);
  if (st->device_bytes) { /* those parked stay parked, even when a later one failed */
    ebb_event ev = {.kind = EBB_EVENT_PARKED,
                    .device = dev_device_label(a->dev),
                    .owner = o->name,
                    .state = sleep ? "asleep" : "parked",
                    .bytes = st->device_bytes};
    mem__publish(&ev, rc);
  }
  return rc;
}

int ebb_owner_park(ebb_owner *o, uint64_t *parked) {
  mem_sleep_stats st = {.size = sizeof st};
  if (parked)
    *parked = 0;
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_park: no owner");
  mem__check_owner(o);
  int rc = put_away(o, 0, &st);
  if (parked)
    *parked = st.device_bytes;
  return rc;
}

static void stats_out(mem_sleep_stats *out, mem_sleep_stats *st, uint64_t t0) {
  st->seconds = (double)(base_mono_ns() - t0) / 1e9;
  if (out)
    mem__copy_sized(out, st, sizeof *st);
}

int mem_owner_sleep(ebb_owner *o, mem_sleep_stats *out) {
  mem_sleep_stats st = {.size = sizeof st};
  uint64_t t0 = base_mono_ns();
  if (!o)
    return ebb_seterr(EBB_EINVAL, "mem_owner_sleep: no owner");
  mem__check_owner(o);
  int rc = put_away(o, 1, &st);
  stats_out(out, &st, t0);
  return rc;
}

/* --- wake: all or nothing ------------------------------------------------- */
/* Queues the bytes back into a segment mapped again: its backed blocks from
 * the backup; the others (a sleep's dropped blocks) zeroed. */
static int copy_back_locked(mem_allocator *a, mem_seg *s, mem_xfer *x) {
  int rc = 0;
  for (mem_block *b = s->first; b && !rc; b = b->next) {
    if (b->free)
      continue;
    if (b->backed)
      rc = mem__xfer_htod(x, b->addr, (unsigned char *)s->park_copy + b->bk_off, b->size);
    else
      rc = dev_memset8(a->dev, b->addr, 0, b->size);
  }
  return rc;
}

/* A segment woken by this call: its backup freed, its free blocks usable,
 * the books count it again. */
static void woke_locked(mem_allocator *a, ebb_owner *o, mem_seg *s, mem_sleep_stats *st) {
  uint64_t live = 0;
  for (mem_block *b = s->first; b; b = b->next)
    if (!b->free)
      live += b->size;
  st->backup_bytes += s->park_size;
  drop_backup(s);
  s->asleep = s->waking = 0;
  seg_bins(a, s, 1);
  mem__stat_add(&a->reserved, s->d.size);
  mem__stat_add(&a->allocated, live);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_WAKE, o, s->d.addr, s->d.size);
}

/* A failed wake: what this call mapped goes back to the driver again (the
 * copies stay), so the owner is exactly as parked as before. */
static void unwind_locked(mem_allocator *a) {
  for (mem_seg *s = a->segs; s; s = s->next)
    if (s->waking) {
      if (dev_seg_park(a->dev, &s->d) != 0)
        base_log(EBB_LOG_WARN, "memory",
                 "a failed wake could not park a segment of %zu bytes "
                 "again: %s",
                 s->d.size, ebb_errmsg());
      s->waking = 0;
    }
}

/* Maps every wakeable segment of o's again; the bytes mapped and the bytes
 * their backups hold. */
static int map_again_locked(mem_allocator *a, ebb_owner *o, mem_sleep_stats *st, uint64_t *want,
                            uint64_t *copy) {
  int rc = 0;
  for (mem_seg *s = a->segs; s; s = s->next)
    if (seg_wakeable(s, o))
      *want += s->d.size;
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (seg_wakeable(s, o) && (rc = dev_seg_wake(a->dev, &s->d)) == 0) {
      s->waking = 1;
      st->device_bytes += s->d.size;
      st->segments++;
      *copy += s->park_size;
    }
  return rc;
}

int mem_owner_wake_stats(ebb_owner *o, mem_sleep_stats *out) {
  mem_sleep_stats st = {.size = sizeof st};
  uint64_t t0 = base_mono_ns();
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_wake: no owner");
  mem__check_owner(o);
  mem_allocator *a = o->a;
  uint64_t want = 0, copy = 0;
  mem_xfer x;
  memset(&x, 0, sizeof x);
  mem__lock(a);
  int rc = map_again_locked(a, o, &st, &want, &copy);
  if (!rc)
    rc = mem__xfer_open_locked(a, copy, &x);
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (s->waking)
      rc = copy_back_locked(a, s, &x);
  if (!rc)
    rc = mem__xfer_finish(&x);
  mem__xfer_close(&x);
  if (rc) {
    char need[32], got[32];
    base_fmt_size(need, sizeof need, want);
    base_fmt_size(got, sizeof got, st.device_bytes);
    rc = ebb_errctx(rc,
                    "owner '%s': wake failed after mapping %s of %s (parked again; its "
                    "backup is kept, so the wake can be retried): ",
                    o->name, got, need);
    unwind_locked(a);
    st.device_bytes = 0;
    st.segments = 0;
  } else {
    for (mem_seg *s = a->segs; s; s = s->next)
      if (s->waking)
        woke_locked(a, o, s, &st);
  }
  mem__unlock(a);
  stats_out(out, &st, t0);
  return rc;
}

int ebb_owner_wake(ebb_owner *o) { return mem_owner_wake_stats(o, NULL); }

uint64_t mem_allocator_backup_bytes(mem_allocator *a) {
  uint64_t n = 0;
  if (!a)
    return 0;
  mem__lock(a);
  for (mem_seg *s = a->segs; s; s = s->next)
    n += s->park_size;
  mem__unlock(a);
  return n;
}
