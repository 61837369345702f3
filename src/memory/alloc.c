/* The caching device allocator: segments from the driver, blocks carved by
 * best fit, split and coalesced; owners and their counters; trim; quota;
 * out-of-memory handling. Locking: one mutex per allocator (memory.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "memory/internal.h"

/* --- small helpers ---------------------------------------------------------- */
void stat_add(ebb_stat_count *c, uint64_t n) {
  c->current += n;
  c->total += n;
  if (c->current > c->peak)
    c->peak = c->current;
}

void stat_sub(ebb_stat_count *c, uint64_t n) { c->current = c->current >= n ? c->current - n : 0; }

static void stat_set(ebb_stat_count *c, uint64_t v) {
  if (v > c->current)
    c->total += v - c->current;
  c->current = v;
  if (v > c->peak)
    c->peak = v;
}

uint64_t mem_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mem_fmt_bytes(char *buf, size_t n, uint64_t b) {
  if (b >= (1ull << 30))
    snprintf(buf, n, "%.1f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20))
    snprintf(buf, n, "%.0f MiB", (double)b / (double)(1ull << 20));
  else if (b >= 1024)
    snprintf(buf, n, "%.0f KiB", (double)b / 1024.0);
  else
    snprintf(buf, n, "%" PRIu64 " B", b);
}

static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

void mem_check_alloc(const ebb_allocator *a) {
#ifdef EBB_DEBUG
  if (a->sig != EBB_SIG_ALLOC) {
    ebb_log(EBB_LOG_ERROR, "memory", "bad allocator handle %p (signature %08x)", (const void *)a,
            a->sig);
    abort();
  }
#else
  (void)a;
#endif
}

void mem_check_owner(const ebb_owner *o) {
#ifdef EBB_DEBUG
  if (o->sig != EBB_SIG_OWNER) {
    ebb_log(EBB_LOG_ERROR, "memory", "bad owner handle %p (signature %08x%s)", (const void *)o,
            o->sig, o->sig == EBB_SIG_DEAD ? ": used after ebb_owner_destroy" : "");
    abort();
  }
#else
  (void)o;
#endif
}

void mem_lock(ebb_allocator *a) {
  mem_check_alloc(a);
  pthread_mutex_lock(&a->mu);
}

void mem_unlock(ebb_allocator *a) { pthread_mutex_unlock(&a->mu); }

static void update_cached(ebb_allocator *a) {
  uint64_t r = a->reserved.current, al = a->allocated.current;
  stat_set(&a->cached, r > al ? r - al : 0);
}

static void ev(ebb_allocator *a, ebb_ledger_kind k, const ebb_owner *o, uint64_t addr,
               uint64_t bytes) {
  ledger_add(a->ledger, k, o ? o->id : 0, addr, bytes, o ? o->bytes.current : 0,
             a->reserved.current, a->allocated.current);
}

/* --- free bins ---------------------------------------------------------------- */
static int bin_of(size_t size) { return 63 - __builtin_clzll((unsigned long long)size); }

static void bin_insert(mem_pool *p, mem_block *b) {
  b->bin = bin_of(b->size);
  b->fprev = NULL;
  b->fnext = p->bins[b->bin];
  if (b->fnext)
    b->fnext->fprev = b;
  p->bins[b->bin] = b;
}

static void bin_remove(mem_pool *p, mem_block *b) {
  if (b->fprev)
    b->fprev->fnext = b->fnext;
  else
    p->bins[b->bin] = b->fnext;
  if (b->fnext)
    b->fnext->fprev = b->fprev;
  b->fprev = b->fnext = NULL;
}

/* Best fit within the request's own bin, else the smallest block of the first
 * non-empty larger bin (every block there is big enough). */
static mem_block *pool_find(mem_pool *p, size_t size) {
  int bin = bin_of(size);
  mem_block *best = NULL;
  for (mem_block *b = p->bins[bin]; b; b = b->fnext)
    if (b->size >= size && (!best || b->size < best->size)) {
      best = b;
      if (b->size == size)
        break;
    }
  for (int i = bin + 1; !best && i < EBB_MEM_NBINS; i++)
    for (mem_block *b = p->bins[i]; b; b = b->fnext)
      if (!best || b->size < best->size)
        best = b;
  return best;
}

static mem_pool *pool_of(ebb_allocator *a, const mem_seg *s) { return s->small ? &a->small : &a->large; }

/* --- context and segments ------------------------------------------------------ */
/* Activates the context if needed, recording CTX_CREATE and measuring what
 * the context costs (NVML per-process usage, else the driver's free memory
 * before and after). */
int mem_ctx_ensure_locked(ebb_allocator *a) {
  if (ebb_device_kind_of(a->dev) == EBB_DEVICE_CPU || ebb_device_ctx_active(a->dev))
    return 0;
  ebb_dev_meminfo before = {0}, after = {0};
  ebb_device_mem_info(a->dev, &before);
  int rc = ebb_device_activate(a->dev);
  if (rc)
    return rc;
  uint64_t used = 0;
  if (ebb_device_process_used(a->dev, getpid(), &used) == 0 && used > a->reserved.current) {
    a->context_estimate = used - a->reserved.current;
    a->ctx_measured = 1;
  } else if (ebb_device_mem_info(a->dev, &after) == 0 && before.source != EBB_MEMINFO_NONE &&
             after.source != EBB_MEMINFO_NONE && before.free_bytes > after.free_bytes) {
    a->context_estimate = before.free_bytes - after.free_bytes;
    a->ctx_measured = 1;
  }
  ev(a, EBB_EV_CTX_CREATE, NULL, 0, a->context_estimate);
  return 0;
}

static int ready_locked(ebb_allocator *a) {
  int rc = mem_ctx_ensure_locked(a);
  if (rc)
    return rc;
  if (a->ready)
    return 0;
  size_t g = 0;
  rc = ebb_device_granularity(a->dev, &g);
  if (rc)
    return rc;
  if (g < EBB_MEM_ALIGN)
    g = EBB_MEM_ALIGN;
  a->gran = g;
  if (a->opts.seg_kind == EBB_SEG_AUTO)
    a->kind = ebb_device_supports_vmm(a->dev) ? EBB_SEG_VMM : EBB_SEG_PLAIN;
  else
    a->kind = (ebb_seg_kind)a->opts.seg_kind;
  a->ready = 1;
  return 0;
}

static int seg_new_locked(ebb_allocator *a, size_t size, int small, mem_seg **out) {
  mem_seg *s = calloc(1, sizeof *s);
  mem_block *b = calloc(1, sizeof *b);
  if (!s || !b) {
    free(s);
    free(b);
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for a segment record");
  }
  int rc = ebb_device_seg_alloc(a->dev, size, a->kind, &s->d);
  if (rc) {
    free(s);
    free(b);
    return rc;
  }
  a->seg_allocs++;
  s->small = small;
  b->addr = s->d.addr;
  b->size = s->d.size;
  b->seg = s;
  b->free = 1;
  s->first = b;
  s->next = a->segs;
  if (a->segs)
    a->segs->prev = s;
  a->segs = s;
  bin_insert(pool_of(a, s), b);
  stat_add(&a->reserved, s->d.size);
  stat_add(&a->segments, 1);
  update_cached(a);
  ev(a, EBB_EV_SEG_MAP, NULL, s->d.addr, s->d.size);
  *out = s;
  return 0;
}

static void seg_unlink(ebb_allocator *a, mem_seg *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    a->segs = s->next;
  if (s->next)
    s->next->prev = s->prev;
}

/* Gives an empty segment back; returns the physical bytes returned. */
static uint64_t seg_drop_locked(ebb_allocator *a, mem_seg *s) {
  mem_block *b = s->first;
  int parked = s->d.parked;
  ebb_dseg d = s->d; /* seg_free clears what it is given */
  if (!parked)
    bin_remove(pool_of(a, s), b);
  int rc = ebb_device_seg_free(a->dev, &d);
  if (rc) {
    ebb_log(EBB_LOG_WARN, "memory", "%s: giving a segment of %zu bytes back failed: %s",
            ebb_device_label(a->dev), s->d.size, ebb_errmsg());
    if (!parked)
      bin_insert(pool_of(a, s), b);
    return 0;
  }
  a->seg_frees++;
  seg_unlink(a, s);
  uint64_t bytes = parked ? 0 : s->d.size;
  if (!parked)
    stat_sub(&a->reserved, s->d.size);
  stat_sub(&a->segments, 1);
  update_cached(a);
  ev(a, EBB_EV_SEG_UNMAP, NULL, s->d.addr, bytes);
  free(s->park_copy);
  free(b);
  free(s);
  return bytes;
}

uint64_t mem_trim_locked(ebb_allocator *a) {
  uint64_t bytes = 0;
  mem_seg *next;
  for (mem_seg *s = a->segs; s; s = next) {
    next = s->next;
    if (s->nlive == 0)
      bytes += seg_drop_locked(a, s);
  }
  a->trimmed_bytes += bytes;
  return bytes;
}

/* --- allocator ------------------------------------------------------------------ */
int ebb_allocator_create(ebb_device *dev, const ebb_alloc_opts *opts, ebb_allocator **out) {
  if (!dev || !out)
    return ebb_seterr(EBB_EINVAL, "ebb_allocator_create: device and out are required");
  *out = NULL;
  ebb_allocator *a = calloc(1, sizeof *a);
  if (!a)
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for an allocator");
  a->sig = EBB_SIG_ALLOC;
  a->dev = dev;
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
  if (!a->context_estimate && ebb_device_kind_of(dev) == EBB_DEVICE_CUDA)
    a->context_estimate = 300ull << 20;
  a->next_owner_id = 1;
  pthread_mutex_init(&a->mu, NULL);
  int rc = ledger_create(a->opts.ledger_events, ebb_device_label(dev), &a->ledger);
  if (rc) {
    pthread_mutex_destroy(&a->mu);
    free(a);
    return rc;
  }
  *out = a;
  return 0;
}

ebb_device *ebb_allocator_device(const ebb_allocator *a) { return a ? a->dev : NULL; }
ebb_ledger *ebb_allocator_ledger(ebb_allocator *a) { return a ? a->ledger : NULL; }

void ebb_allocator_on_leak(ebb_allocator *a, ebb_leak_fn fn, void *ctx) {
  mem_lock(a);
  a->leak_fn = fn;
  a->leak_ctx = ctx;
  mem_unlock(a);
}

int ebb_allocator_trim(ebb_allocator *a, uint64_t *bytes) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "ebb_allocator_trim: no allocator");
  mem_lock(a);
  uint64_t n = mem_trim_locked(a);
  pin_trim_locked(a);
  if (n)
    ev(a, EBB_EV_TRIM, NULL, 0, n);
  mem_unlock(a);
  if (bytes)
    *bytes = n;
  return 0;
}

int ebb_allocator_get_stats(ebb_allocator *a, ebb_alloc_stats *st) {
  if (!a || !st || st->size < sizeof(uint32_t) * 2)
    return ebb_seterr(EBB_EINVAL, "ebb_allocator_get_stats: st->size must be set");
  ebb_alloc_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  s.version = EBB_MEM_STATS_VERSION;
  mem_lock(a);
#define EBB_X_(name, doc) s.name = a->name;
  EBB_ALLOC_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  s.seg_allocs = a->seg_allocs;
  s.seg_frees = a->seg_frees;
  s.oom_retries = a->oom_retries;
  s.trimmed_bytes = a->trimmed_bytes;
  s.ctx_active = ebb_device_kind_of(a->dev) == EBB_DEVICE_CUDA && ebb_device_ctx_active(a->dev);
  s.context_estimate = s.ctx_active ? a->context_estimate : 0;
  mem_unlock(a);
  ebb_dev_meminfo mi = {0};
  if (ebb_device_mem_info(a->dev, &mi) == 0) {
    s.driver_free = mi.free_bytes;
    s.driver_total = mi.total_bytes;
    s.driver_source = mi.source;
  }
  size_t n = st->size < sizeof s ? st->size : sizeof s;
  uint32_t keep = st->size;
  memcpy(st, &s, n);
  st->size = keep;
  return 0;
}

/* --- owners ------------------------------------------------------------------------ */
int ebb_owner_create(ebb_allocator *a, const char *name, ebb_owner *parent, ebb_owner **out) {
  if (!a || !out)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_create: allocator and out are required");
  *out = NULL;
  if (parent) {
    mem_check_owner(parent);
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
  mem_lock(a);
  o->id = a->next_owner_id++;
  if (parent) {
    o->sib_next = parent->child;
    if (parent->child)
      parent->child->sib_prev = o;
    parent->child = o;
  }
  o->all_next = a->owners;
  if (a->owners)
    a->owners->all_prev = o;
  a->owners = o;
  ledger_owner_name(a->ledger, o->id, o->name);
  mem_unlock(a);
  *out = o;
  return 0;
}

const char *ebb_owner_name(const ebb_owner *o) { return o ? o->name : NULL; }
ebb_owner *ebb_owner_parent(const ebb_owner *o) { return o ? o->parent : NULL; }
ebb_allocator *ebb_owner_allocator(const ebb_owner *o) { return o ? o->a : NULL; }

void ebb_owner_set_kind(ebb_owner *o, const char *kind) {
  if (!o)
    return;
  mem_check_owner(o);
  o->kind = kind && *kind ? kind : "owner";
}

int ebb_owner_set_quota(ebb_owner *o, uint64_t bytes) {
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_set_quota: no owner");
  mem_check_owner(o);
  mem_lock(o->a);
  o->quota = bytes;
  mem_unlock(o->a);
  return 0;
}

int ebb_owner_get_stats(ebb_owner *o, ebb_owner_stats *st) {
  if (!o || !st || st->size < sizeof(uint32_t) * 2)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_get_stats: st->size must be set");
  mem_check_owner(o);
  ebb_owner_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  s.version = EBB_MEM_STATS_VERSION;
  mem_lock(o->a);
#define EBB_X_(name, doc) s.name = o->name;
  EBB_OWNER_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  s.tree_bytes = o->tree_bytes;
  s.quota = o->quota;
  s.refused = o->refused;
  mem_unlock(o->a);
  size_t n = st->size < sizeof s ? st->size : sizeof s;
  uint32_t keep = st->size;
  memcpy(st, &s, n);
  st->size = keep;
  return 0;
}

/* --- blocks ------------------------------------------------------------------------- */
static void owner_link(ebb_owner *o, mem_block *b) {
  b->oprev = NULL;
  b->onext = o->live;
  if (o->live)
    o->live->oprev = b;
  o->live = b;
}

static void owner_unlink(ebb_owner *o, mem_block *b) {
  if (b->oprev)
    b->oprev->onext = b->onext;
  else
    o->live = b->onext;
  if (b->onext)
    b->onext->oprev = b->oprev;
  b->oprev = b->onext = NULL;
}

static int over_quota(ebb_allocator *a, ebb_owner *o, size_t size, size_t req) {
  for (ebb_owner *q = o; q; q = q->parent) {
    if (q->quota && q->tree_bytes + size > q->quota) {
      char ask[32], holds[32], quota[32];
      mem_fmt_bytes(ask, sizeof ask, req);
      mem_fmt_bytes(holds, sizeof holds, q->tree_bytes);
      mem_fmt_bytes(quota, sizeof quota, q->quota);
      o->refused++;
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
  }
  (void)a;
  return 0;
}

static size_t seg_size_for(const ebb_allocator *a, size_t size, int small) {
  if (small)
    return round_up(EBB_MEM_SMALL_SEG, a->gran);
  if (size >= EBB_MEM_LARGE_OWN)
    return round_up(size, a->gran);
  return round_up(EBB_MEM_LARGE_SEG_MIN > size ? EBB_MEM_LARGE_SEG_MIN : size, a->gran);
}

/* Before growing by a large segment of ssz bytes: empty large segments
 * smaller than that could not have served the request (else pool_find would
 * have found them), and keeping them while growing is how reserved memory
 * drifts away from allocated memory as request sizes change (a model's
 * activations growing with the sequence length). Give them back now; the
 * driver call is made on a path that calls the driver anyway. */
static uint64_t drop_useless_locked(ebb_allocator *a, size_t ssz) {
  uint64_t bytes = 0;
  mem_seg *next;
  for (mem_seg *s = a->segs; s; s = next) {
    next = s->next;
    if (!s->small && s->nlive == 0 && !s->d.parked && s->d.size < ssz)
      bytes += seg_drop_locked(a, s);
  }
  return bytes;
}

/* Old interned site texts stay readable until the allocator goes. */
static void site_retire(ebb_allocator *a, char *old) {
  char **n = realloc(a->retired_sites, (a->nretired + 1) * sizeof *n);
  if (!n) { /* keep it reachable through the map under a fake key */
    mem_map_put(&a->sites, (uint64_t)(uintptr_t)old | 1, old);
    return;
  }
  a->retired_sites = n;
  a->retired_sites[a->nretired++] = old;
}

static int oom_message(ebb_allocator *a, ebb_owner *o, size_t req, uint64_t trimmed) {
  char ask[32], fr[32], tr[32], res[32];
  ebb_dev_meminfo mi = {0};
  ebb_device_mem_info(a->dev, &mi);
  mem_fmt_bytes(ask, sizeof ask, req);
  mem_fmt_bytes(fr, sizeof fr, mi.free_bytes);
  mem_fmt_bytes(tr, sizeof tr, trimmed);
  mem_fmt_bytes(res, sizeof res, a->reserved.current);
  return ebb_seterr(EBB_EOOM,
                    "out of device memory: %s '%s' asked for %s; %s free on %s after "
                    "trimming %s of cache "
                    "(request %zu bytes, free %" PRIu64 " of %" PRIu64
                    " bytes, ebb holds %s in %" PRIu64 " segments)",
                    o->kind, o->name, ask, fr, ebb_device_label(a->dev), tr, req, mi.free_bytes,
                    mi.total_bytes, res, a->segments.current);
}

int ebb_mem_alloc(ebb_owner *o, size_t bytes, const char *site, uint64_t *addr) {
  if (!o || !addr || bytes == 0)
    return ebb_seterr(EBB_EINVAL, "ebb_mem_alloc: owner, a size > 0 and addr are required");
  mem_check_owner(o);
  *addr = 0;
  if (bytes > SIZE_MAX - EBB_MEM_ALIGN)
    return ebb_seterr(EBB_EOOM, "%s '%s' asked for %zu bytes: too large", o->kind, o->name, bytes);
  size_t size = round_up(bytes, EBB_MEM_ALIGN);
  ebb_allocator *a = o->a;
  void **bt = NULL;
  int nbt = 0;
  if (a->opts.backtraces)
    nbt = mem_bt_capture(&bt);

  mem_lock(a);
  int rc = over_quota(a, o, size, bytes);
  if (rc)
    goto fail;
  rc = ready_locked(a);
  if (rc)
    goto fail;
  int small = size < EBB_MEM_SMALL_LIMIT;
  mem_pool *pool = small ? &a->small : &a->large;
  mem_block *b = pool_find(pool, size);
  if (!b) {
    mem_seg *s = NULL;
    size_t ssz = seg_size_for(a, size, small);
    uint64_t dropped = small ? 0 : drop_useless_locked(a, ssz);
    a->trimmed_bytes += dropped;
    rc = seg_new_locked(a, ssz, small, &s);
    if (rc == EBB_EOOM) {
      /* Trim and retry once; with nothing to trim a retry would only hide a
       * real out-of-memory (or an injected one) behind a second attempt. */
      uint64_t trimmed = mem_trim_locked(a);
      if (trimmed) {
        ev(a, EBB_EV_TRIM, NULL, 0, trimmed);
        a->oom_retries++;
        rc = seg_new_locked(a, ssz, small, &s);
      }
      if (rc == EBB_EOOM) {
        o->refused++;
        ev(a, EBB_EV_OOM, o, 0, size);
        rc = oom_message(a, o, bytes, dropped + trimmed);
        goto fail;
      }
    }
    if (rc)
      goto fail;
    b = s->first;
  }
  bin_remove(pool, b);
  if (b->size - size >= EBB_MEM_ALIGN) {
    mem_block *rest = calloc(1, sizeof *rest);
    if (!rest) {
      bin_insert(pool, b);
      rc = ebb_seterr(EBB_ENOMEM, "memory: no host memory for a block record");
      goto fail;
    }
    rest->addr = b->addr + size;
    rest->size = b->size - size;
    rest->seg = b->seg;
    rest->free = 1;
    rest->prev = b;
    rest->next = b->next;
    if (b->next)
      b->next->prev = rest;
    b->next = rest;
    b->size = size;
    bin_insert(pool, rest);
  }
  /* interned by pointer; the strcmp catches a pointer reused for another
   * text (a plugin unloaded and another loaded at the same address) */
  const char *st = site ? mem_map_get(&a->sites, (uint64_t)(uintptr_t)site) : "?";
  if (!st || strcmp(st, site) != 0) {
    char *copy = strdup(site);
    char *old = copy ? mem_map_del(&a->sites, (uint64_t)(uintptr_t)site) : NULL;
    if (!copy || mem_map_put(&a->sites, (uint64_t)(uintptr_t)site, copy)) {
      free(copy);
      copy = NULL;
    }
    /* blocks still pointing at the old copy keep it: park it on a list */
    if (old)
      site_retire(a, old);
    st = copy ? copy : "?";
  }
  rc = mem_map_put(&a->live, b->addr, b);
  if (rc) {
    /* put it back as a free block; coalescing happens on the next free */
    bin_insert(pool, b);
    rc = ebb_seterr(EBB_ENOMEM, "memory: no host memory for the block table");
    goto fail;
  }
  b->free = 0;
  b->req = bytes;
  b->owner = o;
  b->site = st;
  b->bt = bt;
  b->nbt = nbt;
  b->seg->nlive++;
  owner_link(o, b);
  stat_add(&o->bytes, b->size);
  stat_add(&o->blocks, 1);
  for (ebb_owner *q = o; q; q = q->parent)
    q->tree_bytes += b->size;
  stat_add(&a->allocated, b->size);
  stat_add(&a->blocks, 1);
  update_cached(a);
  ev(a, EBB_EV_ALLOC, o, b->addr, b->size);
  *addr = b->addr;
  mem_unlock(a);
  return 0;
fail:
  mem_unlock(a);
  free(bt);
  return rc;
}

/* Frees a live block (lock held): accounting, poison, coalesce. */
static void block_free_locked(ebb_allocator *a, mem_block *b, ebb_ledger_kind kind) {
  ebb_owner *o = b->owner;
  mem_seg *s = b->seg;
  owner_unlink(o, b);
  stat_sub(&o->bytes, b->size);
  stat_sub(&o->blocks, 1);
  for (ebb_owner *q = o; q; q = q->parent)
    q->tree_bytes -= b->size;
  if (!s->d.parked)
    stat_sub(&a->allocated, b->size);
  stat_sub(&a->blocks, 1);
  ev(a, kind, o, b->addr, b->size);
#ifdef EBB_DEBUG
  if (!s->d.parked)
    ebb_device_memset8(a->dev, b->addr, 0xDB, b->size);
#endif
  free(b->bt);
  b->bt = NULL;
  b->nbt = 0;
  b->owner = NULL;
  b->site = NULL;
  b->req = 0;
  b->free = 1;
  s->nlive--;
  mem_pool *pool = pool_of(a, s);
  int in_bins = !s->d.parked;
  mem_block *n = b->next;
  if (n && n->free) {
    if (in_bins)
      bin_remove(pool, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next)
      n->next->prev = b;
    free(n);
  }
  mem_block *p = b->prev;
  if (p && p->free) {
    if (in_bins)
      bin_remove(pool, p);
    p->size += b->size;
    p->next = b->next;
    if (b->next)
      b->next->prev = p;
    free(b);
    b = p;
  }
  if (in_bins)
    bin_insert(pool, b);
  update_cached(a);
}

int ebb_mem_free(ebb_allocator *a, uint64_t addr) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "ebb_mem_free: no allocator");
  mem_lock(a);
  mem_block *b = mem_map_del(&a->live, addr);
  if (!b) {
    mem_unlock(a);
    return ebb_seterr(EBB_ENOTFOUND,
                      "ebb_mem_free: 0x%" PRIx64 " is not a live block on %s (double free or "
                      "not from ebb_mem_alloc)",
                      addr, ebb_device_label(a->dev));
  }
  block_free_locked(a, b, EBB_EV_FREE);
  mem_unlock(a);
  return 0;
}

int ebb_mem_lookup(ebb_allocator *a, uint64_t addr, ebb_owner **owner, size_t *size) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "ebb_mem_lookup: no allocator");
  mem_lock(a);
  mem_block *b = mem_map_get(&a->live, addr);
  if (b) {
    if (owner)
      *owner = b->owner;
    if (size)
      *size = b->req;
  }
  mem_unlock(a);
  if (!b)
    return ebb_seterr(EBB_ENOTFOUND, "0x%" PRIx64 " is not a live block on %s", addr,
                      ebb_device_label(a->dev));
  return 0;
}

/* --- reclaim / destroy ------------------------------------------------------------- */
static int leak_cmp(const void *x, const void *y) {
  const ebb_leak *p = x, *q = y;
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

/* Frees everything of o's subtree into r (lock held). strdup failures leave
 * NULL strings; the memory is freed regardless. */
static void reclaim_tree_locked(ebb_allocator *a, ebb_owner *o, ebb_leak_report *r, size_t cap) {
  while (o->live) {
    mem_block *b = o->live;
    if (r->leaks && r->nleaks < cap) {
      ebb_leak *l = &r->leaks[r->nleaks++];
      l->addr = b->addr;
      l->size = b->req;
      l->owner = strdup(o->name);
      l->site = strdup(b->site ? b->site : "?");
      l->backtrace = b->nbt ? mem_bt_symbolise(b->bt, b->nbt) : NULL;
    }
    r->bytes += b->req;
    mem_map_del(&a->live, b->addr);
    block_free_locked(a, b, EBB_EV_LEAK_FREE);
  }
  while (o->pins) {
    pin_buf *p = o->pins;
    if (r->leaks && r->nleaks < cap) {
      ebb_leak *l = &r->leaks[r->nleaks++];
      l->addr = (uint64_t)(uintptr_t)p->p;
      l->size = p->req;
      l->owner = strdup(o->name);
      l->site = strdup("pinned host buffer");
      l->pinned = 1;
    }
    r->pinned_bytes += p->req;
    pin_release_locked(a, p);
  }
  for (ebb_owner *c = o->child; c; c = c->sib_next)
    reclaim_tree_locked(a, c, r, cap);
}

static void deliver(ebb_allocator *a, ebb_leak_report *r, ebb_leak_report **out) {
  if (!r)
    return;
  if (out) {
    *out = r;
    return;
  }
  mem_lock(a);
  ebb_leak_fn fn = a->leak_fn;
  void *ctx = a->leak_ctx;
  mem_unlock(a);
  if (fn)
    fn(r, ctx);
  else
    ebb_leak_report_log(r);
  ebb_leak_report_free(r);
}

static int reclaim(ebb_owner *o, ebb_leak_report **res) {
  ebb_allocator *a = o->a;
  *res = NULL;
  mem_lock(a);
  size_t n = count_live(o);
  if (!n) {
    mem_unlock(a);
    return 0;
  }
  ebb_leak_report *r = calloc(1, sizeof *r);
  if (r) {
    r->owner = strdup(o->name);
    r->leaks = calloc(n, sizeof *r->leaks);
  }
  ebb_leak_report dummy = {0};
  reclaim_tree_locked(a, o, r ? r : &dummy, r && r->leaks ? n : 0);
  mem_unlock(a);
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "owner '%s': leaks freed but no memory to report them",
                      o->name);
  qsort(r->leaks, r->nleaks, sizeof *r->leaks, leak_cmp);
  *res = r;
  return 0;
}

int ebb_owner_reclaim(ebb_owner *o, ebb_leak_report **out) {
  if (out)
    *out = NULL;
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_reclaim: no owner");
  mem_check_owner(o);
  ebb_leak_report *r = NULL;
  int rc = reclaim(o, &r);
  deliver(o->a, r, out);
  return rc;
}

static void owner_free_tree_locked(ebb_allocator *a, ebb_owner *o) {
  while (o->child)
    owner_free_tree_locked(a, o->child);
  if (o->parent) {
    if (o->sib_prev)
      o->sib_prev->sib_next = o->sib_next;
    else
      o->parent->child = o->sib_next;
    if (o->sib_next)
      o->sib_next->sib_prev = o->sib_prev;
  }
  if (o->all_prev)
    o->all_prev->all_next = o->all_next;
  else
    a->owners = o->all_next;
  if (o->all_next)
    o->all_next->all_prev = o->all_prev;
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

void ebb_owner_destroy(ebb_owner *o, ebb_leak_report **out) {
  if (out)
    *out = NULL;
  if (!o)
    return;
  mem_check_owner(o);
  ebb_allocator *a = o->a;
  ebb_leak_report *r = NULL;
  reclaim(o, &r);
  mem_lock(a);
  owner_free_tree_locked(a, o);
  mem_unlock(a);
  deliver(a, r, out);
}

void ebb_allocator_destroy(ebb_allocator *a) {
  if (!a)
    return;
  mem_check_alloc(a);
  /* destroy root owners (children go with them) */
  for (;;) {
    mem_lock(a);
    ebb_owner *root = a->owners;
    while (root && root->parent)
      root = root->parent;
    mem_unlock(a);
    if (!root)
      break;
    ebb_owner_destroy(root, NULL);
  }
  mem_lock(a);
  /* parked segments still hold an address range: free them too */
  while (a->segs) {
    mem_seg *s = a->segs;
    if (s->nlive) /* cannot happen: every block has an owner */
      break;
    if (!seg_drop_locked(a, s) && a->segs == s) {
      seg_unlink(a, s);
      free(s->first);
      free(s->park_copy);
      free(s);
    }
  }
  pin_trim_locked(a);
  mem_unlock(a);
  mem_map_free(&a->live);
  mem_map_free(&a->pin_live);
  for (size_t i = 0; i < a->sites.cap; i++)
    free(a->sites.vals[i]);
  mem_map_free(&a->sites);
  for (size_t i = 0; i < a->nretired; i++)
    free(a->retired_sites[i]);
  free(a->retired_sites);
  ledger_destroy(a->ledger);
  pthread_mutex_destroy(&a->mu);
  a->sig = EBB_SIG_DEAD;
  free(a);
}

/* --- parking ------------------------------------------------------------------------ */
static int in_tree(const ebb_owner *x, const ebb_owner *root) {
  for (; x; x = x->parent)
    if (x == root)
      return 1;
  return 0;
}

static int seg_parkable(const mem_seg *s, const ebb_owner *o) {
  if (s->d.parked || s->nlive == 0 || s->d.kind != EBB_SEG_VMM)
    return 0;
  for (const mem_block *b = s->first; b; b = b->next)
    if (!b->free && !in_tree(b->owner, o))
      return 0;
  return 1;
}

int ebb_owner_park(ebb_owner *o, uint64_t *parked) {
  if (parked)
    *parked = 0;
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_park: no owner");
  mem_check_owner(o);
  ebb_allocator *a = o->a;
  int rc = 0;
  uint64_t total = 0;
  mem_lock(a);
  for (mem_seg *s = a->segs; s; s = s->next) {
    if (!seg_parkable(s, o))
      continue;
    unsigned char *copy = malloc(s->d.size);
    if (!copy) {
      rc = ebb_seterr(EBB_ENOMEM, "owner '%s': no host memory to park %zu bytes", o->name,
                      s->d.size);
      break;
    }
    uint64_t live = 0;
    for (mem_block *b = s->first; b && !rc; b = b->next)
      if (!b->free) {
        rc = ebb_device_copy_dtoh(a->dev, copy + (b->addr - s->d.addr), b->addr, b->size);
        live += b->size;
      }
    if (!rc)
      rc = ebb_device_seg_park(a->dev, &s->d);
    if (rc) {
      free(copy);
      ebb_errctx(rc, "owner '%s': parking a segment of %zu bytes: ", o->name, s->d.size);
      break;
    }
    s->park_copy = copy;
    mem_pool *pool = pool_of(a, s);
    for (mem_block *b = s->first; b; b = b->next)
      if (b->free)
        bin_remove(pool, b);
    stat_sub(&a->reserved, s->d.size);
    stat_sub(&a->allocated, live);
    update_cached(a);
    total += s->d.size;
    ev(a, EBB_EV_PARK, o, s->d.addr, s->d.size);
  }
  mem_unlock(a);
  if (parked)
    *parked = total;
  return rc;
}

int ebb_owner_wake(ebb_owner *o) {
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_wake: no owner");
  mem_check_owner(o);
  ebb_allocator *a = o->a;
  int rc = 0;
  mem_lock(a);
  for (mem_seg *s = a->segs; s && !rc; s = s->next) {
    if (!s->d.parked || !s->park_copy)
      continue;
    int mine = 0, others = 0;
    for (mem_block *b = s->first; b; b = b->next)
      if (!b->free)
        in_tree(b->owner, o) ? mine++ : others++;
    if (!mine || others)
      continue;
    rc = ebb_device_seg_wake(a->dev, &s->d);
    if (rc) {
      ebb_errctx(rc, "owner '%s': waking a segment of %zu bytes: ", o->name, s->d.size);
      break;
    }
    uint64_t live = 0;
    unsigned char *copy = s->park_copy;
    for (mem_block *b = s->first; b && !rc; b = b->next)
      if (!b->free) {
        rc = ebb_device_copy_htod(a->dev, b->addr, copy + (b->addr - s->d.addr), b->size);
        live += b->size;
      }
    free(copy);
    s->park_copy = NULL;
    mem_pool *pool = pool_of(a, s);
    for (mem_block *b = s->first; b; b = b->next)
      if (b->free)
        bin_insert(pool, b);
    stat_add(&a->reserved, s->d.size);
    stat_add(&a->allocated, live);
    update_cached(a);
    ev(a, EBB_EV_WAKE, o, s->d.addr, s->d.size);
  }
  mem_unlock(a);
  return rc;
}
