/* Segments: device memory taken from the driver (dev_seg_alloc, VMM
 * or plain) in multiples of its granularity, each carved into blocks that
 * start as one free block; affine to one owner while they hold its blocks
 * (block.c); given back when no live block is left (trim) or when a larger
 * one is needed (drop_useless). Every function expects a->mu:
 * driver calls are made with it held. */
#include <stdlib.h>

#include "base/log.h"
#include "memory/internal.h"

int mem__seg_ready_locked(mem_allocator *a) {
  int rc = mem__ctx_ensure_locked(a);
  if (rc)
    return rc;
  if (a->ready)
    return 0;
  size_t g = 0;
  rc = dev_granularity(a->dev, &g);
  if (rc)
    return rc;
  if (g < EBB_MEM_ALIGN)
    g = EBB_MEM_ALIGN;
  a->gran = g;
  if (a->opts.seg_kind == EBB_SEG_AUTO)
    a->kind = dev_supports_vmm(a->dev) ? EBB_SEG_VMM : EBB_SEG_PLAIN;
  else
    a->kind = (dev_seg_kind)a->opts.seg_kind;
  a->ready = 1;
  return 0;
}

size_t mem__seg_size_for(const mem_allocator *a, size_t size, int small) {
  if (small)
    return mem__round_up(EBB_MEM_SMALL_SEG, a->gran);
  if (size >= EBB_MEM_LARGE_OWN)
    return mem__round_up(size, a->gran);
  return mem__round_up(EBB_MEM_LARGE_SEG_MIN > size ? EBB_MEM_LARGE_SEG_MIN : size, a->gran);
}

int mem__seg_new_locked(mem_allocator *a, size_t size, int small, ebb_owner *o, mem_seg **out) {
  mem_seg *s = calloc(1, sizeof *s);
  mem_block *b = calloc(1, sizeof *b);
  if (!s || !b) {
    free(s);
    free(b);
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for a segment record");
  }
  int rc = dev_seg_alloc(a->dev, size, a->kind, &s->d);
  if (rc) {
    free(s);
    free(b);
    return rc;
  }
  a->seg_allocs++;
  s->small = small;
  s->affine = o;
  b->addr = s->d.addr;
  b->size = s->d.size;
  b->seg = s;
  b->free = 1;
  b->stream = MEM_STREAM_NONE;
  s->first = b;
  MEM_DLIST_PUSH(a->segs, s, prev, next);
  mem__bin_insert(mem__pool_of(a, s), b);
  mem__stat_add(&a->reserved, s->d.size);
  mem__stat_add(&a->segments, 1);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_SEG_MAP, NULL, s->d.addr, s->d.size);
  *out = s;
  return 0;
}

void mem__seg_unlink_locked(mem_allocator *a, mem_seg *s) {
  MEM_DLIST_UNLINK(a->segs, s, prev, next);
}

uint64_t mem__seg_drop_locked(mem_allocator *a, mem_seg *s) {
  mem_block *b = s->first;
  int parked = s->d.parked;
  dev_dseg d = s->d; /* seg_free clears what it is given */
  if (!parked) {
    mem__bin_remove(mem__pool_of(a, s), b);
    mem__gate_settle_locked(a, b); /* no stream may still use it */
  }
  int rc = dev_seg_free(a->dev, &d);
  if (rc) {
    base_log(EBB_LOG_WARN, "memory", "%s: giving a segment of %zu bytes back failed: %s",
             dev_device_label(a->dev), s->d.size, ebb_errmsg());
    if (!parked)
      mem__bin_insert(mem__pool_of(a, s), b);
    return 0;
  }
  a->seg_frees++;
  mem__seg_unlink_locked(a, s);
  uint64_t bytes = parked ? 0 : s->d.size;
  if (!parked)
    mem__stat_sub(&a->reserved, s->d.size);
  mem__stat_sub(&a->segments, 1);
  mem__update_cached_locked(a);
  mem__event_locked(a, EBB_EV_SEG_UNMAP, NULL, s->d.addr, bytes);
  mem__backup_free(s->park_copy, s->park_size);
  free(b);
  free(s);
  return bytes;
}

/* Empty large segments smaller than ssz could not have served the request
 * (else mem__pool_find would have found them), and keeping them while
 * growing is how reserved memory drifts away from allocated memory as
 * request sizes change (a model's activations growing with the sequence
 * length). Give them back now; the driver call is made on a path that calls
 * the driver anyway. */
uint64_t mem__seg_drop_useless_locked(mem_allocator *a, size_t ssz) {
  uint64_t bytes = 0;
  mem_seg *next;
  for (mem_seg *s = a->segs; s; s = next) {
    next = s->next;
    if (!s->small && s->nlive == 0 && !s->d.parked && s->d.size < ssz)
      bytes += mem__seg_drop_locked(a, s);
  }
  return bytes;
}

uint64_t mem__trim_locked(mem_allocator *a) {
  uint64_t bytes = 0;
  mem_seg *next;
  for (mem_seg *s = a->segs; s; s = next) {
    next = s->next;
    if (s->nlive == 0)
      bytes += mem__seg_drop_locked(a, s);
  }
  a->trimmed_bytes += bytes;
  mem__events_trim_locked(a);
  return bytes;
}
