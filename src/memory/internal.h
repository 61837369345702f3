/* Shared internals of the memory room (not for other rooms). */
#ifndef EBB_MEMORY_INTERNAL_H
#define EBB_MEMORY_INTERNAL_H

#include <pthread.h>

#include "memory/memory.h"

#define EBB_SIG_ALLOC 0xEBBA110Cu
#define EBB_SIG_OWNER 0xEBB0B4E8u
#define EBB_SIG_DEAD 0xDEADEBB0u
#define EBB_MEM_BT_MAX 16
#define EBB_MEM_NBINS 64
#define EBB_MEM_LARGE_OWN (10u << 20) /* requests >= this get their own segment */

typedef struct mem_seg mem_seg;
typedef struct mem_block mem_block;

struct mem_block {
  uint64_t addr;
  size_t size;       /* carved size (multiple of EBB_MEM_ALIGN) */
  size_t req;        /* bytes the caller asked for (0 when free) */
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
};

struct mem_seg {
  ebb_dseg d;
  int small;
  size_t nlive;
  mem_block *first;
  mem_seg *prev, *next;
  /* parking */
  void *park_copy;
};

typedef struct mem_pool {
  mem_block *bins[EBB_MEM_NBINS];
} mem_pool;

/* addr -> live block, open addressing with linear probing */
typedef struct mem_map {
  uint64_t *keys;
  void **vals;
  size_t cap, n;
} mem_map;
int mem_map_put(mem_map *m, uint64_t k, void *v);
void *mem_map_get(const mem_map *m, uint64_t k);
void *mem_map_del(mem_map *m, uint64_t k);
void mem_map_free(mem_map *m);

typedef struct pin_buf pin_buf;
struct pin_buf {
  void *p;
  size_t size;   /* rounded size (what the driver gave) */
  size_t req;
  ebb_owner *owner; /* NULL while idle */
  pin_buf *next;    /* idle list or owner list */
  pin_buf *oprev, *onext;
};

struct ebb_owner {
  uint32_t sig;
  uint32_t id;
  ebb_allocator *a;
  char *name;
  const char *kind; /* "owner", "stage", ...: used in messages */
  ebb_owner *parent;
  ebb_owner *child, *sib_prev, *sib_next;
  ebb_owner *all_prev, *all_next; /* allocator's list */
#define EBB_X_(name, doc) ebb_stat_count name;
  EBB_OWNER_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  uint64_t tree_bytes;
  uint64_t quota;
  uint64_t refused;
  mem_block *live;  /* live blocks */
  pin_buf *pins;    /* live pinned buffers */
};

struct ebb_allocator {
  uint32_t sig;
  ebb_device *dev;
  pthread_mutex_t mu;
  ebb_alloc_opts opts;
  int ready;       /* granularity and kind resolved */
  size_t gran;
  ebb_seg_kind kind;
  mem_seg *segs;
  mem_pool small, large;
  mem_map live;
  mem_map sites; /* site pointer -> interned copy (sites outlive plugins) */
  char **retired_sites;
  size_t nretired;
  ebb_owner *owners;
  uint32_t next_owner_id;
#define EBB_X_(name, doc) ebb_stat_count name;
  EBB_ALLOC_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  uint64_t seg_allocs, seg_frees, oom_retries, trimmed_bytes;
  uint64_t context_estimate;
  int ctx_measured;
  /* pinned pool */
  pin_buf *pin_idle;
  mem_map pin_live;
  /* leak handler */
  ebb_leak_fn leak_fn;
  void *leak_ctx;
  ebb_ledger *ledger;
};

void stat_add(ebb_stat_count *c, uint64_t n);
void stat_sub(ebb_stat_count *c, uint64_t n);

/* Allocator lock helpers (check signatures in debug builds). */
void mem_lock(ebb_allocator *a);
void mem_unlock(ebb_allocator *a);
void mem_check_owner(const ebb_owner *o);
void mem_check_alloc(const ebb_allocator *a);

/* Activates the context (lock held), recording CTX_CREATE once per activation. */
int mem_ctx_ensure_locked(ebb_allocator *a);
/* Trim with the lock held; returns bytes given back. */
uint64_t mem_trim_locked(ebb_allocator *a);
uint64_t pin_trim_locked(ebb_allocator *a);
/* Frees one pinned buffer of an owner (lock held) as a leak or not. */
void pin_release_locked(ebb_allocator *a, pin_buf *b);

/* Leaks: capture and symbolise. */
int mem_bt_enabled(const ebb_allocator *a);
int mem_bt_capture(void ***frames);
char *mem_bt_symbolise(void **frames, int n);

/* Ledger (the ledger has its own leaf lock). */
int ledger_create(size_t cap, const char *device, ebb_ledger **out);
void ledger_destroy(ebb_ledger *l);
void ledger_owner_name(ebb_ledger *l, uint32_t id, const char *name);
void ledger_add(ebb_ledger *l, ebb_ledger_kind k, uint32_t owner_id, uint64_t addr,
                uint64_t bytes, uint64_t owner_bytes, uint64_t reserved, uint64_t allocated);
uint64_t mem_now_ns(void);

/* "2.0 GiB", "300 MiB", "512 B" */
void mem_fmt_bytes(char *buf, size_t n, uint64_t bytes);

#endif
