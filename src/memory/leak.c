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

/* Frees everything of o's subtree into r (a->mu held). strdup failures leave
 * NULL strings; the memory is freed regardless. */
static void reclaim_tree_locked(mem_allocator *a, ebb_owner *o, mem_leak_report *r, size_t cap) {
  while (o->live) {
    mem_block *b = o->live;
    mem_leak *l = next_leak(r, cap);
    if (l) {
      l->addr = b->addr;
      l->size = b->req;
      l->owner = strdup(o->name);
      l->site = strdup(b->site ? b->site : "?");
      l->backtrace = b->nbt ? mem__bt_symbolise(b->bt, b->nbt) : NULL;
    }
    r->bytes += b->req;
    mem__map_del(&a->live, b->addr);
    mem__block_free_locked(a, b, EBB_EV_LEAK_FREE);
  }
  while (o->pins) {
    pin_buf *p = o->pins;
    mem_leak *l = next_leak(r, cap);
    if (l) {
      l->addr = (uint64_t)(uintptr_t)p->p;
      l->size = p->req;
      l->owner = strdup(o->name);
      l->site = strdup("pinned host buffer");
      l->pinned = 1;
    }
    r->pinned_bytes += p->req;
    mem__pin_release_locked(a, p);
  }
  for (ebb_owner *c = o->child; c; c = c->sib_next)
    reclaim_tree_locked(a, c, r, cap);
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

static int reclaim(ebb_owner *o, mem_leak_report **res) {
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
  reclaim_tree_locked(a, o, r ? r : &dummy, r && r->leaks ? n : 0);
  mem__unlock(a);
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
  int rc = reclaim(o, &r);
  deliver(o->a, r, out);
  return rc;
}

void mem_owner_destroy(ebb_owner *o, mem_leak_report **out) {
  if (out)
    *out = NULL;
  if (!o)
    return;
  mem__check_owner(o);
  mem_allocator *a = o->a;
  mem_leak_report *r = NULL;
  reclaim(o, &r);
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
