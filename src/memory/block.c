/* Blocks: requests rounded to 512 bytes, carved best fit out of the owner's
 * own free blocks or an empty segment (a new segment when none fits), split,
 * and on free coalesced with free neighbours. Reuse is stream-ordered
 * (stream.c): a free block carries the events of its frees (its gate) into
 * the blocks split from it and merged with it. Owner-affine: a segment holds
 * the blocks of one owner only, from its first live block to its last, so
 * releasing or parking an owner is exact to the segment. Out of memory from the driver: trim,
 * retry once, then an error naming the owner and the numbers. Functions
 * ending in _locked expect a->mu. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "memory/internal.h"

static int oom_message(mem_allocator *a, ebb_owner *o, size_t req, uint64_t trimmed) {
  char ask[32], fr[32], tr[32], res[32];
  dev_meminfo mi = {0};
  dev_mem_info(a->dev, &mi);
  base_fmt_size(ask, sizeof ask, req);
  base_fmt_size(fr, sizeof fr, mi.free_bytes);
  base_fmt_size(tr, sizeof tr, trimmed);
  base_fmt_size(res, sizeof res, a->reserved.current);
  return ebb_seterr(EBB_EOOM,
                    "out of device memory: %s '%s' asked for %s; %s free on %s after "
                    "trimming %s of cache "
                    "(request %zu bytes, free %" PRIu64 " of %" PRIu64
                    " bytes, ebb holds %s in %" PRIu64 " segments)",
                    o->kind, o->name, ask, fr, dev_device_label(a->dev), tr, req, mi.free_bytes,
                    mi.total_bytes, res, a->segments.current);
}

/* A new segment for a request of size (bytes asked): empty large segments
 * too small for it go first; on the driver's out-of-memory the cache is
 * trimmed and the driver asked once more. *out: its one free block. */
static int grow_locked(mem_allocator *a, ebb_owner *o, size_t size, size_t bytes, int small,
                       mem_block **out) {
  mem_seg *s = NULL;
  size_t ssz = mem__seg_size_for(a, size, small);
  uint64_t dropped = small ? 0 : mem__seg_drop_useless_locked(a, ssz);
  a->trimmed_bytes += dropped;
  int rc = mem__seg_new_locked(a, ssz, small, o, &s);
  if (rc == EBB_EOOM) {
    /* Trim and retry once; with nothing to trim a retry would only hide a
     * real out-of-memory (or an injected one) behind a second attempt. */
    uint64_t trimmed = mem__trim_locked(a);
    if (trimmed) {
      mem__event_locked(a, EBB_EV_TRIM, NULL, 0, trimmed);
      a->oom_retries++;
      rc = mem__seg_new_locked(a, ssz, small, o, &s);
    }
    if (rc == EBB_EOOM) {
      o->refused++;
      mem__event_locked(a, EBB_EV_OOM, o, 0, size);
      return oom_message(a, o, bytes, dropped + trimmed);
    }
  }
  if (rc)
    return rc;
  *out = s->first;
  return 0;
}

/* Cuts the free block b (out of the bins) to size; what is left, when 512
 * bytes or more, becomes a free block after it. */
static int split_locked(mem_pool *pool, mem_block *b, size_t size) {
  if (b->size - size < EBB_MEM_ALIGN)
    return 0;
  mem_block *rest = calloc(1, sizeof *rest);
  if (!rest)
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for a block record");
  rest->addr = b->addr + size;
  rest->size = b->size - size;
  rest->seg = b->seg;
  rest->free = 1;
  rest->stream = MEM_STREAM_NONE;
  mem__gate_copy_locked(rest, b);
  rest->prev = b;
  rest->next = b->next;
  if (b->next)
    b->next->prev = rest;
  b->next = rest;
  b->size = size;
  mem__bin_insert(pool, rest);
  return 0;
}

/* Merges q, a free block, into p, the free block just before it (p waits
 * for q's events too). */
static void merge_into(mem_allocator *a, mem_block *p, mem_block *q) {
  mem__gate_merge_locked(a, p, q);
  p->size += q->size;
  p->next = q->next;
  if (q->next)
    q->next->prev = p;
  free(q);
}

/* The free block b (out of the bins) merged with free neighbours; the result
 * back in the bins (a parked segment's free blocks stay out of them). A
 * segment left with no live block is one free block again and leaves its
 * owner: it goes to the allocator's pools, where any owner may take it. */
static void coalesce_locked(mem_allocator *a, mem_block *b) {
  mem_seg *s = b->seg;
  mem_pool *pool = mem__pool_of(a, s);
  int in_bins = !s->d.parked;
  mem_block *n = b->next;
  if (n && n->free) {
    if (in_bins)
      mem__bin_remove(pool, n);
    merge_into(a, b, n);
  }
  mem_block *p = b->prev;
  if (p && p->free) {
    if (in_bins)
      mem__bin_remove(pool, p);
    merge_into(a, p, b);
    b = p;
  }
  if (!s->nlive)
    s->affine = NULL;
  if (in_bins)
    mem__bin_insert(mem__pool_of(a, s), b);
}

/* b becomes o's live block on stream: its record, the counters, the ledger. */
static void take_locked(mem_allocator *a, ebb_owner *o, mem_block *b, size_t bytes,
                        const char *site, uint64_t stream, void **bt, int nbt) {
  mem__gate_clear_locked(a, b);
  b->stream = stream;
  b->nuses = 0;
  b->sync_free = 0;
  b->kept = 0;
  b->free = 0;
  b->req = bytes;
  b->owner = o;
  b->weights = o->weights_on;
  b->site = site;
  b->bt = bt;
  b->nbt = nbt;
  b->seg->nlive++;
  mem__owner_link_locked(o, b);
  mem__stat_add(&o->bytes, b->size);
  mem__stat_add(&o->blocks, 1);
  for (ebb_owner *q = o; q; q = q->parent)
    q->tree_bytes += b->size;
  mem__stat_add(&a->allocated, b->size);
  mem__stat_add(&a->blocks, 1);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_ALLOC, o, b->addr, b->size);
}

/* The best fit for size among o's own free blocks and the empty segments
 * any owner may take (the smaller of the two candidates; o's on a tie),
 * of the blocks a request on stream may take. */
static mem_block *find_locked(mem_allocator *a, ebb_owner *o, size_t size, int small,
                              uint64_t stream) {
  mem_block *mine = mem__pool_find(a, small ? &o->small : &o->large, size, stream);
  mem_block *empty = mem__pool_find(a, small ? &a->small : &a->large, size, stream);
  if (!mine || !empty)
    return mine ? mine : empty;
  return empty->size < mine->size ? empty : mine;
}

/* The allocation with a->mu held; bt (captured before the lock) becomes the
 * block's on success. The block's segment becomes o's if it was empty. */
typedef struct alloc_req {
  size_t bytes, size;
  const char *site;
  uint64_t stream;
  int oom; /* out: the driver refused a new segment (the ledger's OOM) */
} alloc_req;

static int alloc_locked(ebb_owner *o, alloc_req *q, void **bt, int nbt, uint64_t *addr) {
  size_t bytes = q->bytes, size = q->size;
  mem_allocator *a = o->a;
  int rc = mem__owner_check_quota_locked(o, size, bytes);
  if (!rc)
    rc = mem__seg_ready_locked(a);
  if (rc)
    return rc;
  int small = size < EBB_MEM_SMALL_LIMIT;
  mem_block *b = find_locked(a, o, size, small, q->stream);
  if (!b && (rc = grow_locked(a, o, size, bytes, small, &b))) {
    q->oom = rc == EBB_EOOM; /* grow_locked's only EOOM is the recorded one */
    return rc;
  }
  mem__bin_remove(mem__pool_of(a, b->seg), b);
  b->seg->affine = o;
  rc = split_locked(mem__pool_of(a, b->seg), b, size);
  const char *st = rc ? NULL : mem__site_intern_locked(a, q->site);
  if (!rc && mem__map_put(&a->live, b->addr, b))
    rc = ebb_seterr(EBB_ENOMEM, "memory: no host memory for the block table");
  if (rc) {
    coalesce_locked(a, b); /* a free block again, its segment as it was */
    return rc;
  }
  take_locked(a, o, b, bytes, st, q->stream, bt, nbt);
  *addr = b->addr;
  return 0;
}

/* EBB_EVENT_OOM: o's request for bytes found the driver out of memory (the
 * ledger has its OOM event; the live picture shows a mark). */
static void publish_oom(mem_allocator *a, const ebb_owner *o, size_t bytes) {
  ebb_event ev = {.kind = EBB_EVENT_OOM,
                  .device = dev_device_label(a->dev),
                  .owner = o->name,
                  .bytes = bytes};
  mem__publish(&ev, EBB_EOOM);
}

int mem_alloc(ebb_owner *o, size_t bytes, const char *site, uint64_t *addr) {
  return mem_alloc_on(o, bytes, site, MEM_STREAM_NONE, addr);
}

int mem_alloc_on(ebb_owner *o, size_t bytes, const char *site, uint64_t stream, uint64_t *addr) {
  if (!o || !addr || bytes == 0)
    return ebb_seterr(EBB_EINVAL, "mem_alloc: owner, a size > 0 and addr are required");
  mem__check_owner(o);
  *addr = 0;
  if (bytes > SIZE_MAX - EBB_MEM_ALIGN)
    return ebb_seterr(EBB_EOOM, "%s '%s' asked for %zu bytes: too large", o->kind, o->name, bytes);
  alloc_req q = {bytes, mem__round_up(bytes, EBB_MEM_ALIGN), site, stream, 0};
  mem_allocator *a = o->a;
  void **bt = NULL;
  int nbt = 0;
  if (a->opts.backtraces)
    nbt = mem__bt_capture(&bt);
  mem__lock(a);
  int rc = alloc_locked(o, &q, bt, nbt, addr);
  mem__unlock(a);
  if (rc)
    free(bt);
  if (q.oom) /* the fact, once the allocator is let go: a subscriber may read it */
    publish_oom(a, o, bytes);
  return rc;
}

void mem__block_free_locked(mem_allocator *a, mem_block *b, mem_ledger_kind kind, uint64_t stream) {
  ebb_owner *o = b->owner;
  mem_seg *s = b->seg;
  mem__owner_unlink_locked(o, b);
  mem__stat_sub(&o->bytes, b->size);
  mem__stat_sub(&o->blocks, 1);
  for (ebb_owner *q = o; q; q = q->parent)
    q->tree_bytes -= b->size;
  if (!s->d.parked)
    mem__stat_sub(&a->allocated, b->size);
  mem__stat_sub(&a->blocks, 1);
  mem__event_locked(a, kind, o, b->addr, b->size);
#ifdef EBB_DEBUG
  /* at most the first 64 MiB: poisoning a 4.7 GiB block took a minute on
   * the fake GPU (and committed every page of it), long past a job's
   * deadline */
  if (!s->d.parked)
    dev_memset8(a->dev, b->addr, 0xDB, b->size < (64u << 20) ? b->size : (64u << 20));
#endif
  free(b->bt);
  b->bt = NULL;
  b->nbt = 0;
  b->owner = NULL;
  b->weights = 0;
  b->backed = 0; /* freed while parked: its backup is not copied back */
  b->site = NULL;
  b->req = 0;
  b->free = 1;
  mem__gate_at_free_locked(a, b, stream);
  s->nlive--;
  coalesce_locked(a, b);
  mem__update_cached_locked(a);
}

int mem_free(mem_allocator *a, uint64_t addr) { return mem_free_on(a, addr, MEM_STREAM_NONE); }

int mem_free_on(mem_allocator *a, uint64_t addr, uint64_t stream) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "mem_free: no allocator");
  mem__lock(a);
  mem_block *b = mem__map_del(&a->live, addr);
  if (!b) {
    mem__unlock(a);
    return ebb_seterr(EBB_ENOTFOUND,
                      "mem_free: 0x%" PRIx64 " is not a live block on %s (double free or "
                      "not from mem_alloc)",
                      addr, dev_device_label(a->dev));
  }
  mem__block_free_locked(a, b, EBB_EV_FREE, stream);
  mem__unlock(a);
  return 0;
}

int mem_lookup(mem_allocator *a, uint64_t addr, ebb_owner **owner, size_t *size) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "mem_lookup: no allocator");
  mem__lock(a);
  mem_block *b = mem__map_get(&a->live, addr);
  if (b) {
    if (owner)
      *owner = b->owner;
    if (size)
      *size = b->req;
  }
  mem__unlock(a);
  if (!b)
    return ebb_seterr(EBB_ENOTFOUND, "0x%" PRIx64 " is not a live block on %s", addr,
                      dev_device_label(a->dev));
  return 0;
}
