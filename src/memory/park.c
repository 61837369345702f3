/* Parking (VMM segments): an owner's segments are copied to host memory and
 * their physical memory given back while the address range is kept; waking
 * maps new physical memory at the same addresses and copies the bytes back.
 * Only segments whose live blocks all belong to the owner (or descendants)
 * are parked; allocation never uses a parked segment (its free blocks are
 * out of the bins) and reserved/allocated do not count it. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
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

/* --- sleep: only the weights are copied ------------------------------------ */
#define CHUNK ((size_t)64 << 20)

/* One block's bytes between device and host, in chunks (a wake of a large
 * model is many driver calls, each bounded). */
static int copy_chunked(ebb_allocator *a, unsigned char *h, uint64_t d, size_t n, int to_host) {
  int rc = 0;
  for (size_t off = 0; off < n && !rc; off += CHUNK) {
    size_t k = n - off < CHUNK ? n - off : CHUNK;
    rc = to_host ? ebb_device_copy_dtoh(a->dev, h + off, d + off, k)
                 : ebb_device_copy_htod(a->dev, d + off, h + off, k);
  }
  return rc;
}

static int seg_has_weights(const mem_seg *s) {
  for (const mem_block *b = s->first; b; b = b->next)
    if (!b->free && b->weights)
      return 1;
  return 0;
}

/* Parks s keeping only its weights blocks' bytes (in park_copy, at their
 * offsets); the others are dropped. */
static int sleep_seg_locked(ebb_allocator *a, ebb_owner *o, mem_seg *s, ebb_sleep_stats *st) {
  unsigned char *copy = NULL;
  if (seg_has_weights(s) && !(copy = malloc(s->d.size)))
    return ebb_seterr(EBB_ENOMEM, "owner '%s': no host memory to back up %zu bytes of weights",
                      o->name, s->d.size);
  uint64_t live = 0, kept = 0;
  int rc = 0;
  for (mem_block *b = s->first; b && !rc; b = b->next) {
    if (b->free)
      continue;
    live += b->size;
    if (b->weights) {
      rc = copy_chunked(a, copy + (b->addr - s->d.addr), b->addr, b->size, 1);
      kept += b->size;
    }
  }
  if (!rc)
    rc = ebb_device_seg_park(a->dev, &s->d);
  if (rc) {
    free(copy);
    return ebb_errctx(rc, "owner '%s': putting a segment of %zu bytes to sleep: ", o->name,
                      s->d.size);
  }
  s->park_copy = copy;
  s->asleep = 1;
  seg_bins(a, s, 0);
  mem__stat_sub(&a->reserved, s->d.size);
  mem__stat_sub(&a->allocated, live);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_PARK, o, s->d.addr, s->d.size);
  st->device_bytes += s->d.size;
  st->backup_bytes += kept;
  st->dropped_bytes += live - kept;
  st->segments++;
  return 0;
}

static void stats_out(ebb_sleep_stats *out, ebb_sleep_stats *st, uint64_t t0) {
  st->seconds = (double)(mem__now_ns() - t0) / 1e9;
  if (out)
    mem__copy_sized(out, st, sizeof *st);
}

int ebb_owner_sleep(ebb_owner *o, ebb_sleep_stats *out) {
  ebb_sleep_stats st = {.size = sizeof st};
  uint64_t t0 = mem__now_ns();
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_sleep: no owner");
  mem__check_owner(o);
  ebb_allocator *a = o->a;
  int rc = 0;
  mem__lock(a);
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (seg_parkable(s, o))
      rc = sleep_seg_locked(a, o, s, &st);
  mem__unlock(a);
  stats_out(out, &st, t0);
  return rc;
}

/* --- wake: all or nothing ------------------------------------------------- */
/* The bytes back into a segment mapped again: the copy of every live block
 * (a park), or of its weights with the rest zeroed (a sleep). */
static int copy_back_locked(ebb_allocator *a, mem_seg *s, uint64_t *kept) {
  int rc = 0;
  for (mem_block *b = s->first; b && !rc; b = b->next) {
    if (b->free)
      continue;
    if (s->park_copy && (!s->asleep || b->weights)) {
      rc = copy_chunked(a, (unsigned char *)s->park_copy + (b->addr - s->d.addr), b->addr,
                        b->size, 0);
      *kept += b->size;
    } else {
      rc = ebb_device_memset8(a->dev, b->addr, 0, b->size);
    }
  }
  return rc;
}

/* A segment woken by this call: its copy freed, its free blocks usable, the
 * books count it again. */
static void woke_locked(ebb_allocator *a, ebb_owner *o, mem_seg *s) {
  uint64_t live = 0;
  for (mem_block *b = s->first; b; b = b->next)
    if (!b->free)
      live += b->size;
  free(s->park_copy);
  s->park_copy = NULL;
  s->asleep = s->waking = 0;
  seg_bins(a, s, 1);
  mem__stat_add(&a->reserved, s->d.size);
  mem__stat_add(&a->allocated, live);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_WAKE, o, s->d.addr, s->d.size);
}

/* A failed wake: what this call mapped goes back to the driver again (the
 * copies stay), so the owner is exactly as parked as before. */
static void unwind_locked(ebb_allocator *a) {
  for (mem_seg *s = a->segs; s; s = s->next)
    if (s->waking) {
      if (ebb_device_seg_park(a->dev, &s->d) != 0)
        ebb_log(EBB_LOG_WARN, "memory", "a failed wake could not park a segment of %zu bytes "
                "again: %s", s->d.size, ebb_errmsg());
      s->waking = 0;
    }
}

int ebb_owner_wake_stats(ebb_owner *o, ebb_sleep_stats *out) {
  ebb_sleep_stats st = {.size = sizeof st};
  uint64_t t0 = mem__now_ns();
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_wake: no owner");
  mem__check_owner(o);
  ebb_allocator *a = o->a;
  int rc = 0;
  uint64_t want = 0;
  mem__lock(a);
  for (mem_seg *s = a->segs; s; s = s->next)
    if (seg_wakeable(s, o))
      want += s->d.size;
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (seg_wakeable(s, o)) {
      if ((rc = ebb_device_seg_wake(a->dev, &s->d)) == 0) {
        s->waking = 1;
        st.device_bytes += s->d.size;
        st.segments++;
      }
    }
  for (mem_seg *s = a->segs; s && !rc; s = s->next)
    if (s->waking)
      rc = copy_back_locked(a, s, &st.backup_bytes);
  if (rc) {
    char need[32], got[32];
    mem__fmt_bytes(need, sizeof need, want);
    mem__fmt_bytes(got, sizeof got, st.device_bytes);
    rc = ebb_errctx(rc, "owner '%s': wake failed after mapping %s of %s (parked again; its "
                        "backup is kept, so the wake can be retried): ",
                    o->name, got, need);
    unwind_locked(a);
    st.device_bytes = st.backup_bytes = 0;
    st.segments = 0;
  } else {
    for (mem_seg *s = a->segs; s; s = s->next)
      if (s->waking)
        woke_locked(a, o, s);
  }
  mem__unlock(a);
  stats_out(out, &st, t0);
  return rc;
}

int ebb_owner_wake(ebb_owner *o) { return ebb_owner_wake_stats(o, NULL); }

uint64_t ebb_allocator_backup_bytes(ebb_allocator *a) {
  uint64_t n = 0;
  if (!a)
    return 0;
  mem__lock(a);
  for (mem_seg *s = a->segs; s; s = s->next) {
    if (!s->d.parked || !s->park_copy)
      continue;
    if (!s->asleep) {
      n += s->d.size;
      continue;
    }
    for (mem_block *b = s->first; b; b = b->next)
      if (!b->free && b->weights)
        n += b->size;
  }
  mem__unlock(a);
  return n;
}
