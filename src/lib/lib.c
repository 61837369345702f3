/* libebb.so: the embedding API of include/ebb/ebb.h over the device and memory
 * rooms. This file only adapts: devices are shared by label, owners are the
 * memory room's owners, sites are interned (the allocator keeps one copy per
 * distinct pointer, and a Python caller builds a new string per call), the
 * current owner is a per-thread stack, and leak reports are copied into one
 * self-contained block the caller frees. PyTorch's entry points live in
 * torch.c. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/events.h"
#include "base/log.h"
#include "device/device.h"
#include "ebb/ebb.h"
#include "lib/lib_int.h"
#include "memory/memory.h"

struct ebb_gpu {
  ebb_gpu *next; /* all open devices (g_devs) */
  int refs;      /* ebb_gpu_open calls not yet closed */
  dev_device *dev;
  mem_allocator *a;
  ebb_owner *def;  /* "default": memory allocated with no owner current */
  int ordinal_ref; /* ebb_gpu_for_ordinal holds one of refs (never let go) */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ebb_gpu *g_devs;

int ebb_api_version(void) { return EBB_API_VERSION; }
const char *ebb_version_string(void) { return EBB_VERSION; }

/* --- devices ---------------------------------------------------------------- */
static ebb_gpu *find_label_locked(const char *label) {
  for (ebb_gpu *g = g_devs; g; g = g->next)
    if (!strcmp(dev_device_label(g->dev), label))
      return g;
  return NULL;
}

static ebb_gpu *find_alloc_locked(const mem_allocator *a) {
  for (ebb_gpu *g = g_devs; g; g = g->next)
    if (g->a == a)
      return g;
  return NULL;
}

static int gpu_new(dev_device *dev, ebb_gpu **out) {
  ebb_gpu *g = calloc(1, sizeof *g);
  if (!g)
    return ebb_seterr(EBB_ENOMEM, "ebb_gpu_open: no host memory");
  g->dev = dev;
  g->refs = 1;
  int rc = mem_allocator_create(dev, NULL, &g->a);
  if (rc)
    goto fail_alloc;
  rc = mem_owner_create(g->a, "default", NULL, &g->def);
  if (rc)
    goto fail_owner;
  *out = g;
  return 0;
fail_owner:
  mem_allocator_destroy(g->a);
fail_alloc:
  free(g);
  return rc;
}

int ebb_gpu_open(const char *spec, ebb_gpu **out) {
  if (!out)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_open: out is NULL");
  *out = NULL;
  dev_device *dev = NULL;
  int rc = dev_open(spec ? spec : "auto", &dev);
  if (rc)
    return rc;
  pthread_mutex_lock(&g_mu);
  ebb_gpu *g = find_label_locked(dev_device_label(dev));
  if (g) {
    g->refs++;
    pthread_mutex_unlock(&g_mu);
    dev_close(dev); /* no context was made: opening creates none */
    *out = g;
    return 0;
  }
  rc = gpu_new(dev, &g);
  if (rc) {
    pthread_mutex_unlock(&g_mu);
    dev_close(dev);
    return rc;
  }
  g->next = g_devs;
  g_devs = g;
  pthread_mutex_unlock(&g_mu);
  *out = g;
  return 0;
}

void ebb_gpu_close(ebb_gpu *g) {
  if (!g)
    return;
  pthread_mutex_lock(&g_mu);
  if (--g->refs > 0) {
    pthread_mutex_unlock(&g_mu);
    return;
  }
  for (ebb_gpu **p = &g_devs; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  mem_allocator_destroy(g->a); /* leaks reported, segments back */
  dev_close(g->dev);           /* the context back */
  lib_torch_forget(g);
  free(g);
}

ebb_gpu *lib_gpu_open_ordinal(int ordinal) {
  char label[32];
  snprintf(label, sizeof label, "cuda:%d", ordinal);
  pthread_mutex_lock(&g_mu);
  ebb_gpu *g = find_label_locked(label);
  if (g)
    g->refs++;
  pthread_mutex_unlock(&g_mu);
  return g;
}

int ebb_gpu_for_ordinal(int ordinal, ebb_gpu **out) {
  if (!out || ordinal < 0)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_for_ordinal: bad device %d", ordinal);
  char label[32];
  snprintf(label, sizeof label, "cuda:%d", ordinal);
  /* A framework's allocator has no close: the handle it uses holds a
   * reference of its own until exit, so a program that opened the same
   * device and closes it does not pull it from under the framework. */
  pthread_mutex_lock(&g_mu);
  ebb_gpu *g = find_label_locked(label);
  if (g && !g->ordinal_ref) {
    g->ordinal_ref = 1;
    g->refs++;
  }
  pthread_mutex_unlock(&g_mu);
  if (g) {
    *out = g;
    return 0;
  }
  int rc = ebb_gpu_open(label, &g);
  if (rc)
    return rc;
  pthread_mutex_lock(&g_mu);
  if (g->ordinal_ref) /* another thread got there first: one reference is enough */
    g->refs--;
  else
    g->ordinal_ref = 1;
  pthread_mutex_unlock(&g_mu);
  *out = g;
  return 0;
}

/* Copies the prefix of a filled struct the caller knows (its size field). */
static int copy_sized(void *dst, const void *src, size_t full) {
  uint32_t want;
  memcpy(&want, dst, sizeof want);
  if (want < sizeof(uint32_t))
    return ebb_seterr(EBB_EINVAL, "struct size field is %u: set it to sizeof the struct", want);
  memcpy((char *)dst + sizeof want, (const char *)src + sizeof want,
         (want < full ? want : full) - sizeof want);
  return 0;
}

int ebb_gpu_get_info(ebb_gpu *g, ebb_gpu_info *out) {
  if (!g || !out)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_get_info: NULL argument");
  ebb_gpu_info i = {.size = sizeof i};
  snprintf(i.label, sizeof i.label, "%s", dev_device_label(g->dev));
  snprintf(i.name, sizeof i.name, "%s", dev_name(g->dev));
  i.ordinal = dev_ordinal(g->dev);
  i.is_cuda = dev_kind_of(g->dev) == EBB_DEVICE_CUDA;
  i.total_bytes = dev_total_bytes(g->dev);
  dev_meminfo mi = {0};
  if (!dev_mem_info(g->dev, &mi) && mi.source != EBB_MEMINFO_NONE) {
    i.free_bytes = mi.free_bytes;
    if (!i.total_bytes)
      i.total_bytes = mi.total_bytes;
  }
  return copy_sized(out, &i, sizeof i);
}

int ebb_gpu_get_stats(ebb_gpu *g, ebb_gpu_stats *out) {
  if (!g || !out)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_get_stats: NULL argument");
  mem_alloc_stats st = {.size = sizeof st};
  int rc = mem_allocator_get_stats(g->a, &st);
  if (rc)
    return rc;
  ebb_gpu_stats s = {.size = sizeof s};
  s.reserved = st.reserved.current;
  s.reserved_peak = st.reserved.peak;
  s.allocated = st.allocated.current;
  s.allocated_peak = st.allocated.peak;
  s.cached = st.cached.current;
  s.segments = st.segments.current;
  s.blocks = st.blocks.current;
  s.pinned_reserved = st.pinned_reserved.current;
  s.pinned_allocated = st.pinned_allocated.current;
  s.driver_free = st.driver_free;
  s.driver_total = st.driver_total;
  s.ctx_active = st.ctx_active;
  s.context_bytes = st.ctx_active ? st.context_estimate : 0;
  s.reserved_total = st.reserved.total;
  s.allocated_total = st.allocated.total;
  s.segments_peak = st.segments.peak;
  s.segments_total = st.segments.total;
  s.blocks_peak = st.blocks.peak;
  s.blocks_total = st.blocks.total;
  s.seg_allocs = st.seg_allocs;
  s.seg_frees = st.seg_frees;
  s.oom_retries = st.oom_retries;
  mem_unattributed u = {.size = sizeof u};
  if (!mem_allocator_unattributed(g->a, &u) && u.known && u.per_process) {
    s.driver_used_by_process = u.driver_used;
    s.unattributed = u.unattributed;
  }
  ebb_clearerr();
  return copy_sized(out, &s, sizeof s);
}

int ebb_gpu_reset_peaks(ebb_gpu *g) {
  if (!g)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_reset_peaks: no device");
  mem_allocator_reset_peaks(g->a);
  return 0;
}

/* --- owners ----------------------------------------------------------------- */
int ebb_owner_open(ebb_gpu *g, const char *name, ebb_owner *parent, ebb_owner **out) {
  if (!g || !out)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_open('%s'): %s is NULL", name ? name : "?",
                      g ? "out" : "the device");
  if (!name || !*name)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_open: an owner needs a name");
  if (parent && mem_owner_allocator(parent) != g->a)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_open('%s'): parent '%s' belongs to another device",
                      name, mem_owner_name(parent));
  return mem_owner_create(g->a, name, parent, out);
}

const char *ebb_owner_get_name(const ebb_owner *o) { return o ? mem_owner_name(o) : NULL; }

ebb_gpu *ebb_owner_gpu(const ebb_owner *o) {
  if (!o)
    return NULL;
  pthread_mutex_lock(&g_mu);
  ebb_gpu *g = find_alloc_locked(mem_owner_allocator(o));
  pthread_mutex_unlock(&g_mu);
  return g;
}

int ebb_owner_quota(ebb_owner *o, uint64_t bytes) {
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_quota: no owner");
  return mem_owner_set_quota(o, bytes);
}

int ebb_owner_get_usage(ebb_owner *o, ebb_owner_usage *out) {
  if (!o || !out)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_get_usage: NULL argument");
  mem_owner_stats st = {.size = sizeof st};
  int rc = mem_owner_get_stats(o, &st);
  if (rc)
    return rc;
  ebb_owner_usage u = {.size = sizeof u};
  u.bytes = st.bytes.current;
  u.bytes_peak = st.bytes.peak;
  u.bytes_total = st.bytes.total;
  u.blocks = st.blocks.current;
  u.blocks_peak = st.blocks.peak;
  u.blocks_total = st.blocks.total;
  u.tree_bytes = st.tree_bytes;
  u.pinned_bytes = st.pinned_bytes.current;
  u.pinned_peak = st.pinned_bytes.peak;
  u.quota = st.quota;
  u.refused = st.refused;
  return copy_sized(out, &u, sizeof u);
}

/* --- leak lists: one block, strings included, independent of the allocator */
static size_t str_sz(const char *s) { return s ? strlen(s) + 1 : 0; }

static const char *str_put(char **pool, const char *s) {
  if (!s)
    return NULL;
  size_t n = strlen(s) + 1;
  memcpy(*pool, s, n);
  const char *r = *pool;
  *pool += n;
  return r;
}

static ebb_leak_list *leak_list_from(const mem_leak_report *r) {
  size_t strs = str_sz(r->owner);
  for (size_t i = 0; i < r->nleaks; i++)
    strs += str_sz(r->leaks[i].owner) + str_sz(r->leaks[i].site) + str_sz(r->leaks[i].backtrace);
  size_t head = sizeof(ebb_leak_list) + r->nleaks * sizeof(ebb_leak_entry);
  ebb_leak_list *l = calloc(1, head + strs);
  if (!l)
    return NULL;
  char *pool = (char *)l + head;
  l->owner = str_put(&pool, r->owner);
  l->count = r->nleaks;
  l->bytes = r->bytes;
  l->pinned_bytes = r->pinned_bytes;
  l->leaks = (ebb_leak_entry *)(l + 1);
  for (size_t i = 0; i < r->nleaks; i++) {
    const mem_leak *k = &r->leaks[i];
    l->leaks[i] = (ebb_leak_entry){.addr = k->addr, .size = k->size, .pinned = k->pinned};
    l->leaks[i].owner = str_put(&pool, k->owner);
    l->leaks[i].site = str_put(&pool, k->site);
    l->leaks[i].backtrace = str_put(&pool, k->backtrace);
  }
  return l;
}

void ebb_leak_list_free(ebb_leak_list *l) { free(l); }

/* The report goes to the caller as a list (or, when it cannot be copied or
 * the caller wants none, to the log). Frees r. */
static void hand_over(mem_leak_report *r, ebb_leak_list **leaks, ebb_released *out) {
  if (!r)
    return;
  if (out) {
    out->leaked_bytes += r->bytes;
    out->leaked_blocks += r->nleaks;
  }
  ebb_leak_list *l = leaks ? leak_list_from(r) : NULL;
  if (l)
    *leaks = l;
  else
    mem_leak_report_publish(r, 0);
  mem_leak_report_free(r);
}

static void released_from(const mem_release_result *r, ebb_released *out) {
  out->released_bytes += r->released_bytes;
  out->segment_bytes += r->segment_bytes;
  out->context_bytes += r->context_bytes;
  out->pinned_bytes += r->pinned_bytes;
  out->callbacks_run += r->callbacks_run;
  out->callbacks_failed += r->callbacks_failed;
  out->context_released |= r->context_released;
  if (r->context_error)
    out->context_error = r->context_error;
}

int ebb_owner_release(ebb_owner *o, unsigned flags, ebb_leak_list **leaks, ebb_released *out) {
  if (leaks)
    *leaks = NULL;
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_release: no owner");
  if (flags & ~(unsigned)EBB_OWNER_RELEASE_KEEP)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_release('%s'): unknown flags 0x%x", mem_owner_name(o),
                      flags);
  ebb_released res = {.size = sizeof res};
  if (!(flags & EBB_OWNER_RELEASE_KEEP)) {
    mem_leak_report *r = NULL;
    ebb_gpu *g = ebb_owner_gpu(o);
    lib_torch_lock(); /* a PyTorch free of a block freed here must not free its successor */
    int rc = mem_owner_reclaim(o, &r);
    if (!rc)
      lib_torch_leaked(g, r);
    lib_torch_unlock();
    if (rc)
      return rc;
    hand_over(r, leaks, &res);
  }
  mem_release_result rr = {.size = sizeof rr};
  int rc = mem_release(mem_owner_allocator(o), EBB_RELEASE_DEFAULT, &rr);
  if (rc)
    return rc;
  released_from(&rr, &res);
  /* the fact for subscribers (include/ebb/events.h); no log line: the
   * caller reads the figures from out (QUIET) */
  ebb_event ev = {.kind = EBB_EVENT_RELEASED,
                  .flags = EBB_EVENT_QUIET,
                  .device = dev_device_label(mem_allocator_device(mem_owner_allocator(o))),
                  .owner = mem_owner_name(o),
                  .what = "GPU memory",
                  .bytes = res.released_bytes,
                  .context_bytes = res.context_bytes,
                  .callbacks_run = res.callbacks_run,
                  .callbacks_failed = res.callbacks_failed};
  base_event_publish(&ev);
  return out ? copy_sized(out, &res, sizeof res) : 0;
}

void ebb_owner_close(ebb_owner *o, ebb_leak_list **leaks) {
  if (leaks)
    *leaks = NULL;
  if (!o)
    return;
  mem_leak_report *r = NULL;
  ebb_gpu *g = ebb_owner_gpu(o);
  lib_torch_lock();
  mem_owner_destroy(o, &r);
  lib_torch_leaked(g, r);
  lib_torch_unlock();
  hand_over(r, leaks, NULL);
}

int ebb_owner_blocks(ebb_owner *o, ebb_leak_list **out) {
  if (!o || !out)
    return ebb_seterr(EBB_EINVAL, "ebb_owner_blocks: %s is NULL", o ? "out" : "the owner");
  *out = NULL;
  mem_leak_report *r = NULL;
  int rc = mem_owner_live(o, &r);
  if (rc || !r)
    return rc;
  *out = leak_list_from(r);
  mem_leak_report_free(r);
  return *out ? 0
              : ebb_seterr(EBB_ENOMEM, "ebb_owner_blocks('%s'): no host memory for the list",
                           mem_owner_name(o));
}

/* ebb_owner_park and ebb_owner_wake are the memory room's own (same names,
 * same meaning): exported as they are. */

/* --- the current owner --------------------------------------------------------- */
#define STACK_MAX 64
static __thread ebb_owner *t_stack[STACK_MAX];
static __thread int t_depth;

int ebb_push(ebb_owner *o) {
  if (!o)
    return ebb_seterr(EBB_EINVAL, "ebb_push: no owner");
  if (t_depth == STACK_MAX)
    return ebb_seterr(EBB_ESTATE,
                      "ebb_push('%s'): %d owners already pushed on this thread "
                      "(a missing ebb_pop?)",
                      mem_owner_name(o), STACK_MAX);
  t_stack[t_depth++] = o;
  return 0;
}

int ebb_pop(void) {
  if (!t_depth)
    return ebb_seterr(EBB_ESTATE, "ebb_pop: no owner pushed on this thread");
  t_stack[--t_depth] = NULL;
  return 0;
}

ebb_owner *ebb_current(ebb_gpu *g) {
  for (int i = t_depth - 1; i >= 0; i--)
    if (!g || mem_owner_allocator(t_stack[i]) == g->a)
      return t_stack[i];
  return NULL;
}

ebb_owner *ebb_gpu_default_owner(ebb_gpu *g) { return g ? g->def : NULL; }

/* --- sites ------------------------------------------------------------------------ */
/* Interned for the life of the process: bounded by the distinct call sites. */
static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static char **s_tab;
static size_t s_cap, s_n;

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int intern_grow_locked(void) {
  size_t ncap = s_cap ? s_cap * 2 : 256;
  char **n = calloc(ncap, sizeof *n);
  if (!n)
    return -1;
  for (size_t i = 0; i < s_cap; i++)
    if (s_tab[i]) {
      size_t j = str_hash(s_tab[i]) & (ncap - 1);
      while (n[j])
        j = (j + 1) & (ncap - 1);
      n[j] = s_tab[i];
    }
  free(s_tab);
  s_tab = n;
  s_cap = ncap;
  return 0;
}

const char *lib_intern(const char *s) {
  if (!s)
    return NULL;
  pthread_mutex_lock(&s_mu);
  if ((s_n + 1) * 2 > s_cap && intern_grow_locked()) {
    pthread_mutex_unlock(&s_mu);
    return "?";
  }
  size_t j = str_hash(s) & (s_cap - 1);
  while (s_tab[j] && strcmp(s_tab[j], s))
    j = (j + 1) & (s_cap - 1);
  if (!s_tab[j]) {
    s_tab[j] = strdup(s);
    if (!s_tab[j]) {
      pthread_mutex_unlock(&s_mu);
      return "?";
    }
    s_n++;
  }
  const char *r = s_tab[j];
  pthread_mutex_unlock(&s_mu);
  return r;
}

/* --- device memory ----------------------------------------------------------------- */
int ebb_alloc(ebb_owner *o, size_t bytes, const char *site, uint64_t *addr) {
  if (!o || !addr)
    return ebb_seterr(EBB_EINVAL, "ebb_alloc(%zu bytes at %s): %s is NULL", bytes,
                      site ? site : "?", o ? "addr" : "the owner");
  if (!bytes)
    return ebb_seterr(EBB_EINVAL, "ebb_alloc: owner '%s' asked for 0 bytes at %s",
                      mem_owner_name(o), site ? site : "?");
  return mem_alloc(o, bytes, lib_intern(site), addr);
}

int ebb_gpu_alloc(ebb_gpu *g, size_t bytes, const char *site, uint64_t *addr) {
  if (!g)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_alloc: no device");
  ebb_owner *o = ebb_current(g);
  return ebb_alloc(o ? o : g->def, bytes, site, addr);
}

int lib_gpu_alloc_interned(ebb_gpu *g, size_t bytes, const char *site, uint64_t stream,
                           uint64_t *addr) {
  ebb_owner *o = ebb_current(g);
  return mem_alloc_on(o ? o : g->def, bytes, site ? site : "torch", stream, addr);
}

int ebb_free(ebb_gpu *g, uint64_t addr) { return ebb_free_on(g, addr, EBB_STREAM_NONE); }

int ebb_gpu_alloc_on(ebb_gpu *g, size_t bytes, const char *site, uint64_t stream, uint64_t *addr) {
  if (!g || !addr)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_alloc_on(%zu bytes at %s): %s is NULL", bytes,
                      site ? site : "?", g ? "addr" : "the device");
  ebb_owner *o = ebb_current(g);
  if (!o)
    o = g->def;
  if (!bytes)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_alloc_on: owner '%s' asked for 0 bytes at %s",
                      mem_owner_name(o), site ? site : "?");
  return mem_alloc_on(o, bytes, lib_intern(site), stream, addr);
}

int ebb_free_on(ebb_gpu *g, uint64_t addr, uint64_t stream) {
  if (!g)
    return ebb_seterr(EBB_EINVAL, "ebb_free(0x%" PRIx64 "): no device", addr);
  return mem_free_on(g->a, addr, stream);
}

int ebb_keep(ebb_gpu *g, uint64_t addr) {
  if (!g)
    return ebb_seterr(EBB_EINVAL, "ebb_keep(0x%" PRIx64 "): no device", addr);
  return mem_keep(g->a, addr);
}

int ebb_record_stream(ebb_gpu *g, uint64_t addr, uint64_t stream) {
  if (!g)
    return ebb_seterr(EBB_EINVAL, "ebb_record_stream(0x%" PRIx64 "): no device", addr);
  return mem_record_stream(g->a, addr, stream);
}

int ebb_lookup(ebb_gpu *g, uint64_t addr, ebb_owner **owner, uint64_t *size) {
  if (!g)
    return ebb_seterr(EBB_EINVAL, "ebb_lookup: no device");
  ebb_owner *o = NULL;
  size_t n = 0;
  int rc = mem_lookup(g->a, addr, &o, &n);
  if (rc)
    return rc;
  if (owner)
    *owner = o;
  if (size)
    *size = n;
  return 0;
}

int ebb_pinned_alloc_for(ebb_owner *o, size_t bytes, void **p) {
  if (!o || !p)
    return ebb_seterr(EBB_EINVAL, "ebb_pinned_alloc_for: NULL argument");
  return mem_pinned_alloc(o, bytes, p);
}

int ebb_pinned_free_for(ebb_gpu *g, void *p) {
  if (!g)
    return ebb_seterr(EBB_EINVAL, "ebb_pinned_free_for: no device");
  return mem_pinned_free(g->a, p);
}

/* --- release ----------------------------------------------------------------------- */
static int gpu_release_one(ebb_gpu *g, unsigned flags, ebb_released *res) {
  unsigned f = EBB_RELEASE_TRIM | EBB_RELEASE_PINNED;
  if (flags & EBB_GPU_RELEASE_CONTEXT)
    f |= EBB_RELEASE_CONTEXT;
  mem_release_result rr = {.size = sizeof rr};
  int rc = mem_release(g->a, f, &rr);
  if (!rc)
    released_from(&rr, res);
  return rc;
}

int ebb_gpu_release(ebb_gpu *g, unsigned flags, ebb_released *out) {
  if (flags & ~(unsigned)(EBB_GPU_RELEASE_CONTEXT | EBB_GPU_RELEASE_NO_HOOKS))
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_release: unknown flags 0x%x", flags);
  ebb_released res = {.size = sizeof res};
  int rc = 0;
  if (!(flags & EBB_GPU_RELEASE_NO_HOOKS)) {
    /* the callbacks once, not once per device */
    mem_release_result cb = {.size = sizeof cb};
    rc = mem_release(NULL, EBB_RELEASE_CALLBACKS, &cb);
    if (rc)
      return rc;
    released_from(&cb, &res);
  }
  if (g) {
    rc = gpu_release_one(g, flags, &res);
  } else {
    /* every open device; the list is only appended to while we walk it
     * without the lock held (closing a device while releasing it is the
     * caller's race, as for any handle) */
    pthread_mutex_lock(&g_mu);
    ebb_gpu *it = g_devs;
    pthread_mutex_unlock(&g_mu);
    for (; it && !rc; it = it->next)
      rc = gpu_release_one(it, flags, &res);
  }
  if (rc)
    return rc;
  return out ? copy_sized(out, &res, sizeof res) : 0;
}

int ebb_release_hook_add(const char *name, ebb_release_hook_fn fn, void *arg, uint64_t *handle) {
  return mem_on_release(name, fn, arg, handle);
}

int ebb_release_hook_remove(uint64_t handle) { return mem_off_release(handle); }

/* --- timeline ---------------------------------------------------------------------- */
int ebb_gpu_mark(ebb_gpu *g, const char *label) {
  if (!g || !label)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_mark: NULL argument");
  mem_ledger_mark(mem_allocator_ledger(g->a), label);
  return 0;
}

int ebb_gpu_write_timeline(ebb_gpu *g, const char *path) {
  if (!g || !path)
    return ebb_seterr(EBB_EINVAL, "ebb_gpu_write_timeline: NULL argument");
  return mem_ledger_write(mem_allocator_ledger(g->a), path);
}
