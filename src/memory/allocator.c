/* The allocator: one per device, created empty (nothing is taken from the
 * driver before the first allocation), its options, stats and trim, and its
 * destruction (every owner reclaimed, every segment and pinned buffer given
 * back). The pieces live in their own files: segments (segment.c), blocks
 * (block.c), owners (owner.c), leaks (leak.c), parking (park.c), the pinned
 * pool (pinned.c). Locking: a->mu (memory.h). */
#include <stdlib.h>
#include <string.h>

#include "memory/internal.h"

static void read_opts(mem_allocator *a, const mem_alloc_opts *opts) {
  a->opts.size = sizeof a->opts;
  a->opts.seg_kind = EBB_SEG_AUTO;
  a->opts.backtraces = -1;
  if (opts) {
    size_t n = opts->size && opts->size < sizeof a->opts ? opts->size : sizeof a->opts;
    memcpy(&a->opts, opts, n);
    a->opts.size = sizeof a->opts;
  }
  if (!a->opts.ledger_events)
    a->opts.ledger_events = 65536;
  if (a->opts.backtraces < 0) {
    const char *e = getenv("EBB_MEM_BACKTRACE");
    a->opts.backtraces = e && *e && strcmp(e, "0") != 0;
  }
  a->context_estimate = a->opts.context_estimate;
  if (!a->context_estimate && dev_kind_of(a->dev) == EBB_DEVICE_CUDA)
    a->context_estimate = 300ull << 20;
}

int mem_allocator_create(dev_device *dev, const mem_alloc_opts *opts, mem_allocator **out) {
  if (!dev || !out)
    return ebb_seterr(EBB_EINVAL, "mem_allocator_create: device and out are required");
  *out = NULL;
  mem_allocator *a = calloc(1, sizeof *a);
  if (!a)
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for an allocator");
  a->sig = EBB_SIG_ALLOC;
  a->dev = dev;
  read_opts(a, opts);
  a->next_owner_id = 1;
  pthread_mutex_init(&a->mu, NULL);
  int rc = mem__ledger_create(a->opts.ledger_events, dev_device_label(dev), &a->ledger);
  if (rc) {
    pthread_mutex_destroy(&a->mu);
    free(a);
    return rc;
  }
  *out = a;
  return 0;
}

dev_device *mem_allocator_device(const mem_allocator *a) { return a ? a->dev : NULL; }
mem_ledger *mem_allocator_ledger(mem_allocator *a) { return a ? a->ledger : NULL; }

void mem_allocator_on_leak(mem_allocator *a, mem_leak_fn fn, void *ctx) {
  mem__lock(a);
  a->leak_fn = fn;
  a->leak_ctx = ctx;
  mem__unlock(a);
}

int mem_allocator_trim(mem_allocator *a, uint64_t *bytes) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "mem_allocator_trim: no allocator");
  mem__lock(a);
  uint64_t n = mem__trim_locked(a);
  mem__pin_trim_locked(a);
  if (n)
    mem__event_locked(a, EBB_EV_TRIM, NULL, 0, n);
  mem__unlock(a);
  if (bytes)
    *bytes = n;
  return 0;
}

int mem_allocator_get_stats(mem_allocator *a, mem_alloc_stats *st) {
  if (!a || !st || st->size < sizeof(uint32_t) * 2)
    return ebb_seterr(EBB_EINVAL, "mem_allocator_get_stats: st->size must be set");
  mem_alloc_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  s.version = EBB_MEM_STATS_VERSION;
  mem__lock(a);
#define EBB_X_(name, doc) s.name = a->name;
  EBB_ALLOC_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  s.seg_allocs = a->seg_allocs;
  s.seg_frees = a->seg_frees;
  s.oom_retries = a->oom_retries;
  s.trimmed_bytes = a->trimmed_bytes;
  s.ctx_active = dev_kind_of(a->dev) == EBB_DEVICE_CUDA && dev_ctx_active(a->dev);
  s.context_estimate = s.ctx_active ? a->context_estimate : 0;
  mem__unlock(a);
  dev_meminfo mi = {0};
  if (dev_mem_info(a->dev, &mi) == 0) {
    s.driver_free = mi.free_bytes;
    s.driver_total = mi.total_bytes;
    s.driver_source = mi.source;
  }
  mem__copy_sized(st, &s, sizeof s);
  return 0;
}

void mem_allocator_reset_peaks(mem_allocator *a) {
  if (!a)
    return;
  mem__lock(a);
#define EBB_X_(name, doc) a->name.peak = a->name.current;
  EBB_ALLOC_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  mem__unlock(a);
}

/* Every root owner destroyed (children go with them; leaks reported). */
static void destroy_owners(mem_allocator *a) {
  for (;;) {
    mem__lock(a);
    ebb_owner *root = a->owners;
    while (root && root->parent)
      root = root->parent;
    mem__unlock(a);
    if (!root)
      break;
    mem_owner_destroy(root, NULL);
  }
}

/* Every segment back, parked ones too (they still hold an address range). */
static void drop_segments_locked(mem_allocator *a) {
  while (a->segs) {
    mem_seg *s = a->segs;
    if (s->nlive) /* cannot happen: every block has an owner */
      break;
    if (!mem__seg_drop_locked(a, s) && a->segs == s) {
      mem__seg_unlink_locked(a, s);
      free(s->first);
      mem__backup_free(s->park_copy, s->park_size);
      free(s);
    }
  }
}

void mem_allocator_destroy(mem_allocator *a) {
  if (!a)
    return;
  mem__check_alloc(a);
  destroy_owners(a);
  mem__lock(a);
  drop_segments_locked(a);
  mem__pin_trim_locked(a);
  mem__events_trim_locked(a);
  mem__unlock(a);
  free(a->ev_idle);
  mem__map_free(&a->live);
  mem__map_free(&a->pin_live);
  mem__sites_free(a);
  mem__ledger_destroy(a->ledger);
  pthread_mutex_destroy(&a->mu);
  a->sig = EBB_SIG_DEAD;
  free(a);
}
