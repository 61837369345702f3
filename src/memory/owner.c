/* Owners: the handles every block and pinned buffer belongs to (a stage, a
 * job, a pipeline), in a tree (tree_bytes and quota count descendants), with
 * their counters and quota. Reclaiming an owner's leftovers and destroying it
 * is leak.c's. Functions ending in _locked expect a->mu. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/text.h"
#include "memory/internal.h"

int mem_owner_create(mem_allocator *a, const char *name, ebb_owner *parent, ebb_owner **out) {
  if (!a || !out)
    return ebb_seterr(EBB_EINVAL, "mem_owner_create: allocator and out are required");
  *out = NULL;
  if (parent) {
    mem__check_owner(parent);
    if (parent->a != a)
      return ebb_seterr(EBB_EINVAL, "owner '%s': parent '%s' belongs to another allocator",
                        name ? name : "?", parent->name);
  }
  ebb_owner *o = calloc(1, sizeof *o);
  char *nm = strdup(name && *name ? name : "anonymous");
  if (!o || !nm) {
    free(o);
    free(nm);
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for owner '%s'", name ? name : "?");
  }
  o->sig = EBB_SIG_OWNER;
  o->a = a;
  o->name = nm;
  o->kind = "owner";
  o->parent = parent;
  mem__lock(a);
  o->id = a->next_owner_id++;
  if (parent)
    MEM_DLIST_PUSH(parent->child, o, sib_prev, sib_next);
  MEM_DLIST_PUSH(a->owners, o, all_prev, all_next);
  mem__ledger_owner_name(a->ledger, o->id, o->name);
  mem__unlock(a);
  *out = o;
  return 0;
}

const char *mem_owner_name(const ebb_owner *o) { return o ? o->name : NULL; }
ebb_owner *mem_owner_parent(const ebb_owner *o) { return o ? o->parent : NULL; }
mem_allocator *mem_owner_allocator(const ebb_owner *o) { return o ? o->a : NULL; }

void mem_owner_set_kind(ebb_owner *o, const char *kind) {
  if (!o)
    return;
  mem__check_owner(o);
  o->kind = kind && *kind ? kind : "owner";
}

void mem_owner_mark_weights(ebb_owner *o, int on) {
  if (!o)
    return;
  mem__lock(o->a);
  o->weights_on = on != 0;
  mem__unlock(o->a);
}

int mem_owner_set_quota(ebb_owner *o, uint64_t bytes) {
  if (!o)
    return ebb_seterr(EBB_EINVAL, "mem_owner_set_quota: no owner");
  mem__check_owner(o);
  mem__lock(o->a);
  o->quota = bytes;
  mem__unlock(o->a);
  return 0;
}

int mem_owner_get_stats(ebb_owner *o, mem_owner_stats *st) {
  if (!o || !st || st->size < sizeof(uint32_t) * 2)
    return ebb_seterr(EBB_EINVAL, "mem_owner_get_stats: st->size must be set");
  mem__check_owner(o);
  mem_owner_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  s.version = EBB_MEM_STATS_VERSION;
  mem__lock(o->a);
#define EBB_X_(name, doc) s.name = o->name;
  EBB_OWNER_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  s.tree_bytes = o->tree_bytes;
  s.quota = o->quota;
  s.refused = o->refused;
  mem__unlock(o->a);
  mem__copy_sized(st, &s, sizeof s);
  return 0;
}

static int quota_error(const ebb_owner *o, const ebb_owner *q, size_t req) {
  char ask[32], holds[32], quota[32];
  base_fmt_size(ask, sizeof ask, req);
  base_fmt_size(holds, sizeof holds, q->tree_bytes);
  base_fmt_size(quota, sizeof quota, q->quota);
  if (q == o)
    return ebb_seterr(EBB_EQUOTA,
                      "%s '%s' asked for %s (%zu bytes) but holds %s of its %s quota "
                      "(%" PRIu64 " of %" PRIu64 " bytes)",
                      o->kind, o->name, ask, req, holds, quota, q->tree_bytes, q->quota);
  return ebb_seterr(EBB_EQUOTA,
                    "%s '%s' asked for %s (%zu bytes) but %s '%s' holds %s of its %s quota "
                    "(%" PRIu64 " of %" PRIu64 " bytes)",
                    o->kind, o->name, ask, req, q->kind, q->name, holds, quota, q->tree_bytes,
                    q->quota);
}

int mem__owner_check_quota_locked(ebb_owner *o, size_t size, size_t req) {
  for (ebb_owner *q = o; q; q = q->parent)
    if (q->quota && q->tree_bytes + size > q->quota) {
      o->refused++;
      return quota_error(o, q, req);
    }
  return 0;
}

void mem__owner_free_tree_locked(mem_allocator *a, ebb_owner *o) {
  while (o->child)
    mem__owner_free_tree_locked(a, o->child);
  if (o->parent)
    MEM_DLIST_UNLINK(o->parent->child, o, sib_prev, sib_next);
  MEM_DLIST_UNLINK(a->owners, o, all_prev, all_next);
#ifdef EBB_DEBUG
  /* reclaim freed every block: each segment that held o's went empty and
   * left o's pools (block.c); a free block still here is a segment lost */
  if (o->small.nonempty || o->large.nonempty) {
    base_log(EBB_LOG_ERROR, "memory", "owner '%s' destroyed with free blocks in its pools",
             o->name);
    abort();
  }
#endif
  o->sig = EBB_SIG_DEAD;
  free(o->name);
  o->name = NULL;
#if defined(EBB_DEBUG) && !defined(__SANITIZE_ADDRESS__)
  /* debug builds keep the dead handle (a few bytes) so that a later use trips
   * the signature check instead of reading freed memory; ASan catches reuse
   * itself */
#else
  free(o);
#endif
}

int mem__owner_in_tree(const ebb_owner *x, const ebb_owner *root) {
  for (; x; x = x->parent)
    if (x == root)
      return 1;
  return 0;
}
