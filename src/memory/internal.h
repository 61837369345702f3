/* Shared internals of the memory room (not for other rooms).
 *
 * Names: `ebb_` is public API (include/ebb); `mem_` is the room's interface
 * to the rooms above it (memory.h); `mem__` (two underscores, libuv's
 * `uv__`) is a function defined in one file of this room and called from
 * another, declared below under the file that defines it (or, for the hot
 * path's one-liners, defined inline at the end of this header); everything
 * else is `static`. The files call each other in one direction only: a file
 * calls only files on lower lines (what the ctest `memory_layering` prints;
 * it derives the call graph from the object files and fails on a cycle):
 *
 *   allocator.c
 *   leak.c                 (reclaims owners: block.c, pinned.c, owner.c)
 *   block.c  release.c
 *   segment.c  pinned.c  park.c  ledger_export.c
 *   xfer.c
 *   context.c  owner.c  ledger_svg.c
 *   ledger.c  site.c
 *   bins.c
 *   util.c  map.c  stream.c  backtrace.c  ledger_svg_replay.c
 *
 * Locks. `_locked` (and only that suffix) means: the caller holds the
 * allocator's mutex, a->mu (mem__lock). The ledger's own mutex, a leaf taken
 * inside a->mu and never the other way, is only ever held inside ledger.c;
 * its static helpers end in `_ledger_locked`. The release registry's mutex
 * (release.c) is never held while anything else is called. */
#ifndef EBB_MEMORY_INTERNAL_H
#define EBB_MEMORY_INTERNAL_H

#include <pthread.h>

#include "base/clock.h" /* base_mono_ns: ledger and park times */
#include "ebb/events.h" /* mem__publish */
#include "memory/memory.h"

#define EBB_SIG_ALLOC 0xEBBA110Cu
#define EBB_SIG_OWNER 0xEBB0B4E8u
#define EBB_SIG_DEAD 0xDEADEBB0u
#define EBB_MEM_BT_MAX 16
#define EBB_MEM_NBINS 64
#define EBB_MEM_LARGE_OWN (10u << 20) /* requests >= this get their own segment */

/* Intrusive doubly linked lists (the segment list, an owner's blocks and
 * pinned buffers, the free bins, owner trees): push n at the front of the
 * list whose first node is head, or unlink n from it (its links cleared),
 * through the fields named prev and next. */
#define MEM_DLIST_PUSH(head, n, prev, next) \
  do {                                      \
    (n)->prev = NULL;                       \
    (n)->next = (head);                     \
    if ((n)->next)                          \
      (n)->next->prev = (n);                \
    (head) = (n);                           \
  } while (0)
#define MEM_DLIST_UNLINK(head, n, prev, next) \
  do {                                        \
    if ((n)->prev)                            \
      (n)->prev->next = (n)->next;            \
    else                                      \
      (head) = (n)->next;                     \
    if ((n)->next)                            \
      (n)->next->prev = (n)->prev;            \
    (n)->prev = (n)->next = NULL;             \
  } while (0)

typedef struct mem_seg mem_seg;
typedef struct mem_block mem_block;

/* Stream-ordered reuse (stream.c). An event recorded on a stream when a
 * block was freed there (or on a stream the block's uses were recorded
 * for): the free blocks cut from or merged with that block share it
 * (counted references). A free block's gate is the events it waits for:
 * a request on stream T may take it when every event of its gate on
 * another stream than T has completed. */
#define MEM_GATE_MAX 4
typedef struct mem_event {
  void *h;         /* the device's event (dev_event_record) */
  uint64_t stream; /* where it was recorded */
  uint64_t seq;    /* record order: on one stream a later event covers earlier ones */
  int refs;
  int done; /* seen complete */
  /* not recorded yet (stream.c: a free on a stream that lives as long as
   * the context); recorded when a request on another stream asks */
  int lazy;
} mem_event;

struct mem_block {
  uint64_t addr;
  size_t size; /* carved size (multiple of EBB_MEM_ALIGN) */
  size_t req;  /* bytes the caller asked for (0 when free) */
  mem_seg *seg;
  mem_block *prev, *next;   /* address order within the segment */
  mem_block *fprev, *fnext; /* free bin list (free blocks) */
  mem_block *oprev, *onext; /* owner's live list (live blocks) */
  int free;
  int bin;
  ebb_owner *owner;
  const char *site;
  void **bt; /* captured return addresses (malloc'd) or NULL */
  int nbt;
  int weights; /* allocated while its owner was marked (mem_owner_mark_weights):
                  backed up by a sleep; other blocks' bytes are dropped */
  int backed;  /* parked with its bytes in seg->park_copy, at bk_off */
  size_t bk_off;
  /* live: the stream it was allocated on (MEM_STREAM_NONE: none) and the
   * others its uses were recorded on (mem_record_stream); sync_free: more
   * uses than fit, its free waits for the device */
  uint64_t stream;
  uint64_t uses[MEM_GATE_MAX - 1];
  int nuses, sync_free;
  int kept; /* mem_keep: an owner's release leaves it live */
  /* free: the events a request on another stream waits for */
  mem_event *gate[MEM_GATE_MAX];
  int ngate;
};

struct mem_seg {
  dev_dseg d;
  int small;
  size_t nlive;
  /* the owner whose blocks it holds (its free blocks are in that owner's
   * pools); NULL while it holds none (free block in the allocator's pools) */
  ebb_owner *affine;
  mem_block *first;
  mem_seg *prev, *next;
  /* parking: the backed blocks' bytes, packed in address order (a block's
   * place is its bk_off); park_size bytes, NULL when none was backed */
  void *park_copy;
  size_t park_size;
  int picked; /* chosen by the sleep or park in progress */
  int waking; /* inside one ebb_owner_wake: mapped by it, books not yet moved */
  int asleep; /* parked by mem_owner_sleep: only weights blocks are in
                 park_copy (NULL when it has none); the rest come back zeroed */
};

typedef struct mem_pool {
  uint64_t nonempty; /* bit i: bins[i] has a block (finds the next one fast) */
  mem_block *bins[EBB_MEM_NBINS];
} mem_pool;

/* addr -> live block, open addressing with linear probing */
typedef struct mem_map {
  uint64_t *keys;
  void **vals;
  size_t cap, n;
} mem_map;

typedef struct pin_buf pin_buf;
struct pin_buf {
  void *p;
  size_t size; /* rounded size (what the driver gave) */
  size_t req;
  ebb_owner *owner; /* NULL while idle */
  pin_buf *next;    /* idle list or owner list */
  pin_buf *oprev, *onext;
};

struct ebb_owner {
  uint32_t sig;
  uint32_t id;
  mem_allocator *a;
  char *name;
  const char *kind; /* "owner", "stage", ...: used in messages */
  ebb_owner *parent;
  ebb_owner *child, *sib_prev, *sib_next;
  ebb_owner *all_prev, *all_next; /* allocator's list */
#define EBB_X_(name, doc) mem_stat_count name;
  EBB_OWNER_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  uint64_t tree_bytes;
  uint64_t quota;
  uint64_t refused;
  int weights_on;  /* mem_owner_mark_weights: new blocks are weights */
  mem_block *live; /* live blocks */
  pin_buf *pins;   /* live pinned buffers */
  /* free blocks of the segments that hold this owner's blocks: an owner's
   * blocks never share a segment with another owner's */
  mem_pool small, large;
};

/* Everything below `mu` is guarded by it, except ledger (its own mutex) and
 * what is set once at create (sig, dev, opts). */
struct mem_allocator {
  uint32_t sig;
  dev_device *dev;
  pthread_mutex_t mu;
  mem_alloc_opts opts;
  int ready; /* granularity and kind resolved */
  size_t gran;
  dev_seg_kind kind;
  mem_seg *segs;
  mem_pool small, large; /* segments with no live block: any owner takes them */
  mem_map live;
  mem_map sites; /* site pointer -> interned copy (sites outlive plugins) */
  char **retired_sites;
  size_t nretired;
  ebb_owner *owners;
  uint32_t next_owner_id;
#define EBB_X_(name, doc) mem_stat_count name;
  EBB_ALLOC_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  uint64_t seg_allocs, seg_frees, oom_retries, trimmed_bytes;
  uint64_t context_estimate;
  int ctx_measured;
  /* pinned pool */
  pin_buf *pin_idle;
  mem_map pin_live;
  /* leak handler */
  mem_leak_fn leak_fn;
  void *leak_ctx;
  mem_ledger *ledger;
  /* stream-ordered reuse: idle device events for the next record, the
   * record counter, blocks passed over for another stream's pending work */
  mem_event **ev_idle; /* idle events, each with its device event */
  size_t nev_idle, cap_ev_idle;
  uint64_t ev_seq;
  uint64_t stream_waits;
};

/* --- "util.c": byte text, sized copies, handles, the allocator lock */
/* Copies a stats/result struct whose first field is `uint32_t size` into the
 * caller's, which may be older and shorter: min(dst->size, n) bytes, and
 * dst->size keeps what the caller set. */
void mem__copy_sized(void *dst, const void *src, size_t n);
/* Debug builds abort on a bad signature (a freed or foreign handle). */
void mem__check_alloc(const mem_allocator *a);
void mem__check_owner(const ebb_owner *o);
/* Takes / drops a->mu (checks the handle first). */
void mem__lock(mem_allocator *a);
void mem__unlock(mem_allocator *a);
/* Publishes ev on the bus (never with a->mu held). rc: the caller's result;
 * when an error, its message is kept (a subscriber's calls may set one). */
void mem__publish(ebb_event *ev, int rc);

/* --- "map.c": address -> pointer hash map (no lock of its own) ----------- */
int mem__map_put(mem_map *m, uint64_t k, void *v);
void *mem__map_get(const mem_map *m, uint64_t k);
void *mem__map_del(mem_map *m, uint64_t k);
void mem__map_free(mem_map *m);

/* --- "ledger.c": the event ring (takes its own leaf mutex inside) -------- */
int mem__ledger_create(size_t cap, const char *device, mem_ledger **out);
void mem__ledger_destroy(mem_ledger *l);
void mem__ledger_owner_name(mem_ledger *l, uint32_t id, const char *name);
void mem__ledger_add(mem_ledger *l, mem_ledger_kind k, uint32_t owner_id, uint64_t addr,
                     uint64_t bytes, uint64_t owner_bytes, uint64_t reserved, uint64_t allocated);

/* --- "bins.c": free blocks in power-of-two bins (a->mu held by callers) --- */
/* Best fit among the blocks a request on `stream` may take (their gate is
 * open to it) in the request's bin, else the smallest such block of the
 * next bin that has one (insert and remove are inline, below). */
mem_block *mem__pool_find(mem_allocator *a, mem_pool *p, size_t size, uint64_t stream);

/* --- "stream.c": stream-ordered reuse (a->mu held by callers) ----------- */
/* 1 when a request on stream may take the free block b: every event of its
 * gate on another stream has completed (those found complete leave it). */
int mem__gate_open_locked(mem_allocator *a, mem_block *b, uint64_t stream);
/* The live block b is being freed on stream (MEM_STREAM_NONE: the caller's
 * work on it is complete; ordered on the stream it was taken on, if any): its gate becomes an event on that stream and
 * one on each stream its uses were recorded on. A record that fails waits
 * for the device instead (logged). */
void mem__gate_at_free_locked(mem_allocator *a, mem_block *b, uint64_t stream);
/* dst (a free block) takes src's events too (src's gate is emptied): one
 * per stream, the later one; beyond MEM_GATE_MAX the oldest is waited for. */
void mem__gate_merge_locked(mem_allocator *a, mem_block *dst, mem_block *src);
/* dst shares src's events (a free block split in two). */
void mem__gate_copy_locked(mem_block *dst, const mem_block *src);
/* Drops b's gate without waiting (the block is taken by a request the
 * gate is open to). */
void mem__gate_clear_locked(mem_allocator *a, mem_block *b);
/* Waits for every event of b's gate and drops it (the block's memory goes
 * back to the driver). */
void mem__gate_settle_locked(mem_allocator *a, mem_block *b);
/* Destroys the idle device events (trim: the context may go next). */
void mem__events_trim_locked(mem_allocator *a);

/* --- "backtrace.c": capture at alloc, symbolise for leak reports --------- */
int mem__bt_capture(void ***frames);
char *mem__bt_symbolise(void **frames, int n);

/* --- "context.c": the device context seen from the allocator ------------- */
/* Activates the context if needed, recording CTX_CREATE and what it costs.
 * Expects a->mu. */
int mem__ctx_ensure_locked(mem_allocator *a);
/* EBB_RELEASE_CONTEXT for mem_release: gives the context back when no
 * segment or pinned buffer is left, filling r's context fields. Takes a->mu
 * itself (the driver call is made without it). */
void mem__ctx_release(mem_allocator *a, mem_release_result *r);

/* --- "xfer.c": bulk copies for park/sleep/wake (a->mu held) -------------- */
#define MEM_XFER_CHUNK ((size_t)8 << 20)
/* One call's copy engine: two pinned staging buffers of cap bytes, a stream
 * each (cap 0: the CPU device, or none could be had: the copies are then
 * synchronous). */
typedef struct mem_xfer {
  dev_device *dev;
  dev_stream *st[2];
  void *stage[2];
  size_t cap;
  int cur;
  int busy[2];                /* a copy is queued on st[i] */
  unsigned char *pend_dst[2]; /* device-to-host: where stage[i] goes once done */
  size_t pend_n[2];
  int rc; /* the first failure */
} mem_xfer;
/* Sets x up for about total bytes (0: nothing is set up); activates the
 * context. Never fails for want of pinned memory (falls back). */
int mem__xfer_open_locked(mem_allocator *a, uint64_t total, mem_xfer *x);
/* Queue n bytes; the host side of a copy may be ordinary memory. The bytes
 * are in place only after mem__xfer_finish. */
int mem__xfer_htod(mem_xfer *x, uint64_t dst, const unsigned char *src, size_t n);
int mem__xfer_dtoh(mem_xfer *x, unsigned char *dst, uint64_t src, size_t n);
/* Waits for every queued copy; the first error. */
int mem__xfer_finish(mem_xfer *x);
/* Waits, gives the streams and staging buffers back (keeps the message of
 * a failed copy). Zeroed x: no-op. */
void mem__xfer_close(mem_xfer *x);
/* A backup's host memory (n > 0; NULL when there is none) and its end; the
 * pages go back to the kernel at the free. */
void *mem__backup_alloc(size_t n);
void mem__backup_free(void *p, size_t n);

/* --- "segment.c": segments from the driver (all expect a->mu) ------------ */
/* Context, granularity and segment kind resolved (once). */
int mem__seg_ready_locked(mem_allocator *a);
/* Bytes of the segment a request of `size` grows the pool by. */
size_t mem__seg_size_for(const mem_allocator *a, size_t size, int small);
/* A new segment whose one free block is o's (the segment is affine to o). */
int mem__seg_new_locked(mem_allocator *a, size_t size, int small, ebb_owner *o, mem_seg **out);
/* Gives an empty segment back; the physical bytes returned (0 on failure). */
uint64_t mem__seg_drop_locked(mem_allocator *a, mem_seg *s);
void mem__seg_unlink_locked(mem_allocator *a, mem_seg *s);
/* Before growing by ssz: drops empty large segments smaller than ssz. */
uint64_t mem__seg_drop_useless_locked(mem_allocator *a, size_t ssz);
/* Every segment with no live block back to the driver; bytes given back. */
uint64_t mem__trim_locked(mem_allocator *a);

/* --- "site.c": allocation sites interned per allocator (a->mu held) ------ */
/* The allocator's lasting copy of site ("?" for NULL or no memory). */
const char *mem__site_intern_locked(mem_allocator *a, const char *site);
/* Frees every interned copy (allocator destroy; no lock needed then). */
void mem__sites_free(mem_allocator *a);

/* --- "owner.c": owner handles, their tree and quota (a->mu held) -------- */
/* 0, or EBB_EQUOTA with the message naming o (or the ancestor whose quota it
 * is) and the numbers; counts the refusal. */
int mem__owner_check_quota_locked(ebb_owner *o, size_t size, size_t req);
/* Unlinks o and its descendants from the tree and the allocator's list and
 * frees the handles (their blocks must be gone: leak.c reclaims first). */
void mem__owner_free_tree_locked(mem_allocator *a, ebb_owner *o);
/* 1 when x is root or one of its descendants. */
int mem__owner_in_tree(const ebb_owner *x, const ebb_owner *root);

/* --- "block.c": carving and freeing blocks ------------------------------- */
/* Frees a live block already taken out of a->live on stream (its gate,
 * stream.c): accounting, the ledger event `kind`, poison (debug),
 * coalescing. Expects a->mu. */
void mem__block_free_locked(mem_allocator *a, mem_block *b, mem_ledger_kind kind, uint64_t stream);

/* --- "pinned.c": the pinned host pool (a->mu held) ----------------------- */
/* Frees one live pinned buffer of an owner back to the idle list. */
void mem__pin_release_locked(mem_allocator *a, pin_buf *b);
/* Gives every idle pinned buffer back to the driver; bytes given back. */
uint64_t mem__pin_trim_locked(mem_allocator *a);

/* --- internal.h itself: the hot path's one-liners, inlined into callers --
 * (an allocation and a free go through each of these; as calls into another
 * file they cost about a tenth of the pair). No lock of their own: the
 * _locked ones expect a->mu like the rest. */
static inline void mem__stat_add(mem_stat_count *c, uint64_t n) {
  c->current += n;
  c->total += n;
  if (c->current > c->peak)
    c->peak = c->current;
}

static inline void mem__stat_sub(mem_stat_count *c, uint64_t n) {
  c->current = c->current >= n ? c->current - n : 0;
}

static inline void mem__stat_set(mem_stat_count *c, uint64_t v) {
  if (v > c->current)
    c->total += v - c->current;
  c->current = v;
  if (v > c->peak)
    c->peak = v;
}

static inline size_t mem__round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

/* a->cached = reserved - allocated. */
static inline void mem__update_cached_locked(mem_allocator *a) {
  uint64_t r = a->reserved.current, al = a->allocated.current;
  mem__stat_set(&a->cached, r > al ? r - al : 0);
}

/* One ledger event carrying o's bytes (0 without an owner) and a's reserved
 * and allocated after it (which is why it expects a->mu). */
static inline void mem__event_locked(mem_allocator *a, mem_ledger_kind k, const ebb_owner *o,
                                     uint64_t addr, uint64_t bytes) {
  mem__ledger_add(a->ledger, k, o ? o->id : 0, addr, bytes, o ? o->bytes.current : 0,
                  a->reserved.current, a->allocated.current);
}

/* The bin of a free block: its size's power of two. */
static inline int mem__bin_of(size_t size) {
  return 63 - __builtin_clzll((unsigned long long)size);
}

static inline void mem__bin_insert(mem_pool *p, mem_block *b) {
  b->bin = mem__bin_of(b->size);
  MEM_DLIST_PUSH(p->bins[b->bin], b, fprev, fnext);
  p->nonempty |= 1ull << b->bin;
}

static inline void mem__bin_remove(mem_pool *p, mem_block *b) {
  MEM_DLIST_UNLINK(p->bins[b->bin], b, fprev, fnext);
  if (!p->bins[b->bin])
    p->nonempty &= ~(1ull << b->bin);
}

/* Where a segment's free blocks are: its owner's pools, or the allocator's
 * while it holds no live block. */
static inline mem_pool *mem__pool_of(mem_allocator *a, const mem_seg *s) {
  if (s->affine)
    return s->small ? &s->affine->small : &s->affine->large;
  return s->small ? &a->small : &a->large;
}

/* An owner's list of live blocks. */
static inline void mem__owner_link_locked(ebb_owner *o, mem_block *b) {
  MEM_DLIST_PUSH(o->live, b, oprev, onext);
}

static inline void mem__owner_unlink_locked(ebb_owner *o, mem_block *b) {
  MEM_DLIST_UNLINK(o->live, b, oprev, onext);
}

#endif
