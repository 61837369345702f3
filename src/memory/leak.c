/* Leaks: reclaiming an owner frees every live block and pinned buffer of it
 * and its descendants, and what the owner did not free itself is reported
 * (owner, size, allocation site, backtrace) as an EBB_EVENT_LEAK, which the
 * log writes as `[owner] leaked N MiB in M blocks; freed by ebb`; destroying an owner
 * reclaims it and then frees its handle and its children's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/events.h"
#include "base/log.h"
#include "memory/internal.h"

static int leak_cmp(const void *x, const void *y) {
  const mem_leak *p = x, *q = y;
  return p->size < q->size ? 1 : p->size > q->size ? -1 : 0;
}

static size_t count_live(const ebb_owner *o) {
  size_t n = 0;
  for (const mem_block *b = o->live; b; b = b->onext)
    n++;
  for (const pin_buf *p = o->pins; p; p = p->onext)
    n++;
  for (const ebb_owner *c = o->child; c; c = c->sib_next)
    n += count_live(c);
  return n;
}

/* The next entry of r, or NULL when the report has no room (no memory). */
static mem_leak *next_leak(mem_leak_report *r, size_t cap) {
  return r->leaks && r->nleaks < cap ? &r->leaks[r->nleaks++] : NULL;
}

static void describe_block(mem_leak *l, const ebb_owner *o, const mem_block *b) {
  l->addr = b->addr;
  l->size = b->req;
  l->owner = strdup(o->name);
  l->site = strdup(b->site ? b->site : "?");
  l->backtrace = b->nbt ? mem__bt_symbolise(b->bt, b->nbt) : NULL;
}

static void describe_pin(mem_leak *l, const ebb_owner *o, const pin_buf *p) {
  l->addr = (uint64_t)(uintptr_t)p->p;
  l->size = p->req;
  l->owner = strdup(o->name);
  l->site = strdup("pinned host buffer");
  l->pinned = 1;
}

/* What a reclaim does: a release frees what the owner holds but the blocks
 * mem_keep marked, a teardown frees all, a listing frees nothing. */
enum { RECLAIM_RELEASE, RECLAIM_ALL, RECLAIM_LIST };

/* Frees o's subtree into r as mode says (a->mu held). strdup failures
 * leave NULL strings; the memory is freed regardless. */
static void reclaim_tree_locked(mem_allocator *a, ebb_owner *o, mem_leak_report *r, size_t cap,
                                int mode) {
  int keep = mode == RECLAIM_LIST;
  for (mem_block *b = o->live, *next; b; b = next) {
    next = b->onext;
    if (mode == RECLAIM_RELEASE && b->kept)
      continue;
    mem_leak *l = next_leak(r, cap);
    if (l)
      describe_block(l, o, b);
    r->bytes += b->req;
    if (keep)
      continue;
    mem__map_del(&a->live, b->addr);
    /* its framework's work on it may still be queued: ordered on its stream */
    mem__block_free_locked(a, b, EBB_EV_LEAK_FREE, b->stream);
  }
  for (pin_buf *p = o->pins, *next; p; p = next) {
    next = p->onext;
    mem_leak *l = next_leak(r, cap);
    if (l)
      describe_pin(l, o, p);
    r->pinned_bytes += p->req;
    if (!keep)
      mem__pin_release_locked(a, p);
  }
  for (ebb_owner *c = o->child; c; c = c->sib_next)
    reclaim_tree_locked(a, c, r, cap, mode);
}

/* The report to the caller (out), else to the allocator's leak handler, else
 * to the log; called with no lock held. */
static void deliver(mem_allocator *a, mem_leak_report *r, mem_leak_report **out) {
  if (!r)
    return;
  if (out) {
    *out = r;
    return;
  }
  mem__lock(a);
  mem_leak_fn fn = a->leak_fn;
  void *ctx = a->leak_ctx;
  mem__unlock(a);
  if (fn)
    fn(r, ctx);
  else
    mem_leak_report_publish(r, 0);
  mem_leak_report_free(r);
}

static int reclaim(ebb_owner *o, mem_leak_report **res, int mode) {
  mem_allocator *a = o->a;
  *res = NULL;
  mem__lock(a);
  size_t n = count_live(o);
  if (!n) {
    mem__unlock(a);
    return 0;
  }
  mem_leak_report *r = calloc(1, sizeof *r);
  if (r) {
    r->owner = strdup(o->name);
    r->device = dev_device_label(a->dev);
    r->leaks = calloc(n, sizeof *r->leaks);
  }
  mem_leak_report dummy = {0};
  reclaim_tree_locked(a, o, r ? r : &dummy, r && r->leaks ? n : 0, mode);
  mem__unlock(a);
  if (r && !r->nleaks && !r->bytes && !r->pinned_bytes) { /* only kept blocks */
    mem_leak_report_free(r);
    return 0;
  }
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "owner '%s': leaks freed but no memory to report them", o->name);
  qsort(r->leaks, r->nleaks, sizeof *r->leaks, leak_cmp);
  *res = r;
  return 0;
}

int mem_owner_reclaim(ebb_owner *o, mem_leak_report **out) {
  if (out)
    *out = NULL;
  if (!o)
    return ebb_seterr(EBB_EINVAL, "mem_owner_reclaim: no owner");
  mem__check_owner(o);
  mem_leak_report *r = NULL;
  int rc = reclaim(o, &r, RECLAIM_RELEASE);
  deliver(o->a, r, out);
  return rc;
}

int mem_keep(mem_allocator *a, uint64_t addr) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "mem_keep: no allocator");
  mem__lock(a);
  mem_block *b = mem__map_get(&a->live, addr);
  if (b)
    b->kept = 1;
  mem__unlock(a);
  return b ? 0
           : ebb_seterr(EBB_ENOTFOUND, "mem_keep: 0x%llx is not a live block on %s",
                        (unsigned long long)addr, dev_device_label(a->dev));
}

int mem_owner_live(ebb_owner *o, mem_leak_report **out) {
  if (!o || !out)
    return ebb_seterr(EBB_EINVAL, "mem_owner_live: owner and out are required");
  *out = NULL;
  mem__check_owner(o);
  return reclaim(o, out, RECLAIM_LIST);
}

void mem_owner_destroy(ebb_owner *o, mem_leak_report **out) {
  if (out)
    *out = NULL;
  if (!o)
    return;
  mem__check_owner(o);
  mem_allocator *a = o->a;
  mem_leak_report *r = NULL;
  reclaim(o, &r, RECLAIM_ALL);
  mem__lock(a);
  mem__owner_free_tree_locked(a, o);
  mem__unlock(a);
  deliver(a, r, out);
}

/* The sites as the event carries them; NULL (no sites) when out of memory. */
static ebb_event_site *event_sites(const mem_leak_report *r) {
  ebb_event_site *s = r->nleaks ? calloc(r->nleaks, sizeof *s) : NULL;
  for (size_t i = 0; s && i < r->nleaks; i++) {
    const mem_leak *l = &r->leaks[i];
    int child = l->owner && r->owner && strcmp(l->owner, r->owner) != 0;
    s[i] = (ebb_event_site){.bytes = l->size,
                            .site = l->site ? l->site : "?",
                            .owner = child ? l->owner : NULL,
                            .backtrace = l->backtrace,
                            .pinned = l->pinned};
  }
  return s;
}

void mem_leak_report_publish(const mem_leak_report *r, unsigned flags) {
  if (!r || (!r->nleaks && !r->bytes && !r->pinned_bytes))
    return;
  size_t ndev = 0;
  for (size_t i = 0; i < r->nleaks; i++)
    ndev += !r->leaks[i].pinned;
  ebb_event_site *sites = event_sites(r);
  ebb_event ev = {.kind = EBB_EVENT_LEAK,
                  .flags = flags,
                  .device = r->device,
                  .owner = r->owner,
                  .message = "GPU memory",
                  .bytes = r->bytes,
                  .pinned_bytes = r->pinned_bytes,
                  .blocks = ndev,
                  .pinned_blocks = r->nleaks - ndev,
                  .sites = sites,
                  .nsites = sites ? r->nleaks : 0};
  base_event_publish(&ev);
  free(sites);
}

void mem_leak_report_free(mem_leak_report *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->nleaks; i++) {
    free((char *)r->leaks[i].owner);
    free((char *)r->leaks[i].site);
    free((char *)r->leaks[i].backtrace);
  }
  free(r->leaks);
  free((char *)r->owner);
  free(r);
}
