/* The memory room: one caching device allocator per dev_device, owners that
 * every block belongs to, a pinned host pool, the release registry and the
 * ledger (events -> JSON / SVG timeline). Internal API: the pipeline runner,
 * the manager and the server call this; stages reach it through the host
 * table in include/ebb/stage.h.
 *
 * Allocator design (docs/memory.md has the long form):
 *   - Segments come from dev_seg_alloc (VMM where the device supports
 *     it, else plain); their sizes are multiples of the driver granularity.
 *   - Requests are rounded up to 512 bytes (EBB_MEM_ALIGN). Requests under
 *     1 MiB (EBB_MEM_SMALL_LIMIT) are carved from 2 MiB small segments;
 *     requests under 10 MiB from 20 MiB (EBB_MEM_LARGE_SEG_MIN) large
 *     segments; requests of 10 MiB or more get a segment of their own size
 *     rounded up to the granularity. Blocks are split best-fit out of free
 *     blocks and coalesced with free neighbours on free; a segment whose
 *     blocks are all free is "cached" until trim. Segments are owner-affine:
 *     a segment holds the blocks of one owner only (each owner has its own
 *     small and large pools; an empty segment is cache any owner may take),
 *     so releasing or parking an owner is exact. Before growing by a large
 *     segment, empty large segments too small to have served the request
 *     are given back (keeps reserved close to allocated).
 *   - On out-of-memory from the driver the allocator trims its cache and
 *     retries once, then fails with EBB_EOOM and a message naming the owner,
 *     the request and the numbers.
 *
 * Locking: each allocator has one mutex that guards its segments, blocks,
 * owners, counters and pinned pool; every function below may be called from
 * any thread. Driver calls (segment alloc/free) are made with that mutex held,
 * so allocation is serialised per device (ebb's allocations are few and
 * large; see bench/ for the cost). The ledger is NOT guarded by it: it has a
 * mutex of its own, a leaf that the allocator takes inside its own to record
 * an event (so an event's numbers are consistent) and that is never held
 * while another lock is taken; the ebb_ledger_* functions take only that one,
 * so they never wait for an allocation's driver call. No function declared
 * here expects a lock held (the _locked helpers are internal.h's). The
 * release registry has its own mutex; release
 * callbacks run with NO memory lock held, so a callback may free blocks and
 * even register/unregister callbacks. The leak handler and log lines are also
 * emitted with no lock held. Owner handles must not be used after
 * mem_owner_destroy (debug builds check a signature and abort).
 *
 * Debug builds (EBB_DEBUG): freed blocks are poisoned with 0xDB (their first
 * 64 MiB) via dev_memset8 where device memory is host-addressable (CPU
 * device, the fake GPU); handles carry a signature checked on every call. */
#ifndef EBB_MEMORY_MEMORY_H
#define EBB_MEMORY_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "device/device.h"
#include "ebb/error.h"

#define EBB_MEM_ALIGN 512u
#define EBB_MEM_SMALL_LIMIT (1u << 20)    /* requests below: small segments */
#define EBB_MEM_SMALL_SEG (2u << 20)      /* small segment size */
#define EBB_MEM_LARGE_SEG_MIN (20u << 20) /* smallest large segment */
#define EBB_MEM_STATS_VERSION 1u

typedef struct mem_allocator mem_allocator;
typedef struct ebb_owner ebb_owner;
typedef struct mem_ledger mem_ledger;

/* --- counters ------------------------------------------------------------- */
/* One counter: what is held now, the most ever held, the sum of everything
 * ever taken (mimalloc's mi_stat_count_t). */
typedef struct mem_stat_count {
  uint64_t current, peak, total;
} mem_stat_count;

/* Per-owner counters; X(name, description). Counted for the owner's own
 * blocks (not its children's). */
#define EBB_OWNER_STAT_FIELDS(X)                           \
  X(bytes, "device bytes in live blocks (rounded to 512)") \
  X(blocks, "live device blocks")                          \
  X(pinned_bytes, "pinned host bytes in live buffers")     \
  X(pinned_blocks, "live pinned host buffers")

typedef struct mem_owner_stats {
  uint32_t size;    /* sizeof(mem_owner_stats): set by the caller */
  uint32_t version; /* EBB_MEM_STATS_VERSION: set by ebb */
#define EBB_X_(name, doc) mem_stat_count name;
  EBB_OWNER_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  uint64_t tree_bytes; /* current device bytes of this owner and all descendants */
  uint64_t quota;      /* 0: none */
  uint64_t refused;    /* allocations refused (quota or out of memory) */
} mem_owner_stats;

/* Per-device counters of one allocator. */
#define EBB_ALLOC_STAT_FIELDS(X)                                      \
  X(reserved, "device bytes held from the driver (segments)")         \
  X(allocated, "device bytes in live blocks")                         \
  X(cached, "reserved - allocated: held but not in use")              \
  X(segments, "segments held")                                        \
  X(blocks, "live blocks")                                            \
  X(pinned_reserved, "pinned host bytes held from the driver (pool)") \
  X(pinned_allocated, "pinned host bytes in live buffers")

typedef struct mem_alloc_stats {
  uint32_t size;    /* sizeof(mem_alloc_stats): set by the caller */
  uint32_t version; /* EBB_MEM_STATS_VERSION */
#define EBB_X_(name, doc) mem_stat_count name;
  EBB_ALLOC_STAT_FIELDS(EBB_X_)
#undef EBB_X_
  /* the driver's view (dev_mem_info: never initialises a context) */
  uint64_t driver_free, driver_total;
  dev_meminfo_source driver_source;
  int ctx_active;                 /* this process holds the device context */
  uint64_t context_estimate;      /* bytes the context costs (measured or assumed) */
  uint64_t seg_allocs, seg_frees; /* driver calls made */
  uint64_t oom_retries;           /* driver OOMs answered by trim + retry */
  uint64_t trimmed_bytes;         /* bytes returned by trim, all time */
} mem_alloc_stats;

/* --- allocator ------------------------------------------------------------ */
typedef enum {
  EBB_SEG_AUTO = -1, /* VMM where dev_supports_vmm, else plain */
} mem_seg_kind_auto;

typedef struct mem_alloc_opts {
  uint32_t size;             /* sizeof(mem_alloc_opts) */
  int seg_kind;              /* EBB_SEG_AUTO (default), EBB_SEG_PLAIN, EBB_SEG_VMM */
  size_t ledger_events;      /* ring capacity; 0: 65536 */
  int backtraces;            /* 1: capture a backtrace at every alloc (leak
                               reports show it); -1: from env EBB_MEM_BACKTRACE
                               (default); 0: never */
  uint64_t context_estimate; /* bytes a context costs when it cannot be
                               measured; 0: 300 MiB on CUDA, 0 on CPU */
} mem_alloc_opts;

/* opts may be NULL (defaults). Takes nothing from the driver (segments are
 * taken on the first allocation). *out is owned by the caller. dev is
 * borrowed and must outlive the allocator. */
int mem_allocator_create(dev_device *dev, const mem_alloc_opts *opts, mem_allocator **out);
/* Destroys every owner (leaks reported and freed), gives every segment and
 * pinned buffer back to the driver. Does not release the context. NULL: no-op. */
void mem_allocator_destroy(mem_allocator *a);
dev_device *mem_allocator_device(const mem_allocator *a);
/* st->size must be set. Queries the driver (mem_info) without initialising. */
int mem_allocator_get_stats(mem_allocator *a, mem_alloc_stats *st);
/* Sets the peak of every counter of a (EBB_ALLOC_STAT_FIELDS) to its
 * current value; the owners' counters are untouched. */
void mem_allocator_reset_peaks(mem_allocator *a);
/* Returns every segment with no live block and every idle pinned buffer to
 * the driver; *bytes (may be NULL) = device bytes returned (segments). */
int mem_allocator_trim(mem_allocator *a, uint64_t *bytes);

/* --- owners --------------------------------------------------------------- */
/* name is copied ("separate", "pipeline songtrace", "job 17"). parent may be
 * NULL; it must belong to the same allocator. *out is owned by the caller. */
int mem_owner_create(mem_allocator *a, const char *name, ebb_owner *parent, ebb_owner **out);
const char *mem_owner_name(const ebb_owner *o);
ebb_owner *mem_owner_parent(const ebb_owner *o);
mem_allocator *mem_owner_allocator(const ebb_owner *o);
/* st->size must be set. */
int mem_owner_get_stats(ebb_owner *o, mem_owner_stats *st);
/* bytes: limit on the owner's tree_bytes (its own and descendants'); 0 none.
 * An allocation over it fails with EBB_EQUOTA naming the owner and numbers. */
int mem_owner_set_quota(ebb_owner *o, uint64_t bytes);
/* The word used for the owner in messages: "stage" gives "stage 'separate'
 * asked for 2.0 GiB; ...". kind must be a static string. Default "owner". */
void mem_owner_set_kind(ebb_owner *o, const char *kind);

/* A leaked block: what an owner did not free itself. */
typedef struct mem_leak {
  uint64_t addr;
  size_t size;           /* bytes the caller asked for */
  const char *owner;     /* the owner that allocated it (maybe a child) */
  const char *site;      /* "file.c:123" given at alloc, or "?" */
  const char *backtrace; /* symbolised frames, one per line, or NULL when
                               capture was off */
  int pinned;            /* 1: a pinned host buffer */
} mem_leak;
typedef struct mem_leak_report {
  const char *owner;  /* the owner reclaimed/destroyed */
  const char *device; /* its allocator's device label (the device's string) */
  size_t nleaks;
  uint64_t bytes; /* total leaked device bytes (requested sizes) */
  uint64_t pinned_bytes;
  mem_leak *leaks; /* nleaks entries, largest first */
} mem_leak_report;
/* Publishes the report as one EBB_EVENT_LEAK (src/base/events.h; flags:
 * EBB_EVENT_QUIET or 0). Its subscribers write what it says: the log the
 * fixed lines, scope = owner name: `[owner] leaked N MiB in M blocks; freed
 * by ebb` then one `[owner]   <size> at <site>` line per block (with
 * backtrace frames indented when present). Nothing when the report is
 * empty. */
void mem_leak_report_publish(const mem_leak_report *r, unsigned flags);
void mem_leak_report_free(mem_leak_report *r);
/* Called for every non-empty report from owner reclaim/destroy (and from
 * allocator destroy), with no lock held. Default (fn NULL):
 * mem_leak_report_publish. The report is valid during the call only. */
typedef void (*mem_leak_fn)(const mem_leak_report *r, void *ctx);
void mem_allocator_on_leak(mem_allocator *a, mem_leak_fn fn, void *ctx);

/* Frees every live block and pinned buffer of o and its descendants; they are
 * leaks. If out is non-NULL and something leaked, *out receives a report the
 * caller frees with mem_leak_report_free (and the leak handler is not called);
 * else the leak handler runs. *out is NULL when nothing leaked. */
int mem_owner_reclaim(ebb_owner *o, mem_leak_report **out);
/* The live block at addr stays live through its owner's reclaims (it is
 * neither freed nor reported: something still uses it, and the caller
 * keeps it on purpose); mem_owner_destroy still frees it. Until the block
 * is freed. EBB_ENOTFOUND when addr is not a live block. */
int mem_keep(mem_allocator *a, uint64_t addr);
/* What mem_owner_reclaim would free, freeing nothing: the live blocks and
 * pinned buffers of o's tree as a report (largest first) the caller frees
 * with mem_leak_report_free; *out NULL when there are none. */
int mem_owner_live(ebb_owner *o, mem_leak_report **out);
/* Destroys the owner's children first, reclaims (as above), frees the handle.
 * NULL: no-op. */
void mem_owner_destroy(ebb_owner *o, mem_leak_report **out);

/* --- device blocks -------------------------------------------------------- */
/* Streams. A framework's allocations and frees come with the stream they
 * are ordered on: the driver's stream handle (CUstream, cudaStream_t) as an
 * integer, 0 the legacy default stream. MEM_STREAM_NONE is no stream: the
 * caller's work on the block is over when it frees it (mem_alloc /
 * mem_free, ebb_alloc / ebb_free, stages). Reuse is stream-ordered, as in
 * PyTorch's caching allocator and the driver's cuMemFreeAsync: a block
 * freed on stream S is handed at once to a request on S (S's later work
 * runs after the work before the free); a request on another stream (or
 * on none) gets it only once an event recorded on S at the free has
 * completed, and, when the block's uses on other streams were recorded
 * (mem_record_stream), an event recorded on each of those at the free.
 * Blocks freed with no stream and no recorded uses go to any request (a
 * block taken on a stream and freed with none is ordered on that stream). A
 * segment goes back to the driver (trim) only after its blocks' events
 * have completed. */
#define MEM_STREAM_NONE UINT64_MAX
/* bytes > 0. site: "file.c:123" (copied once per distinct pointer and kept
 * until the allocator goes, so a plugin's string literals may go away with
 * the plugin; pass literals, not strings built per call; NULL = "?"). *addr: device address, 512-aligned;
 * on the CPU device a host pointer. Errors: EBB_EQUOTA (owner over quota),
 * EBB_EOOM (driver out of memory after trim + one retry), EBB_ENOMEM. */
int mem_alloc(ebb_owner *o, size_t bytes, const char *site, uint64_t *addr);
/* Frees a block from mem_alloc. EBB_ENOTFOUND if addr is not a live
 * block of this allocator (double free included). */
int mem_free(mem_allocator *a, uint64_t addr);
/* mem_alloc / mem_free ordered on stream (above). A block may be freed on
 * another stream than it was allocated on. */
int mem_alloc_on(ebb_owner *o, size_t bytes, const char *site, uint64_t stream, uint64_t *addr);
int mem_free_on(mem_allocator *a, uint64_t addr, uint64_t stream);
/* The live block at addr is used on stream too (PyTorch's
 * Tensor.record_stream): its free records an event there as well, and no
 * request takes it before that work is done. Beyond MEM_GATE_MAX - 1
 * streams per block, its free waits for the whole device. EBB_ENOTFOUND
 * when addr is not a live block. */
int mem_record_stream(mem_allocator *a, uint64_t addr, uint64_t stream);
/* Requests that passed over a free block because another stream's work on
 * it was still pending (since the allocator was made). */
uint64_t mem_allocator_stream_waits(mem_allocator *a);
/* Who owns addr (the block's start) and its requested size. */
int mem_lookup(mem_allocator *a, uint64_t addr, ebb_owner **owner, size_t *size);

/* --- parking (VMM segments) ----------------------------------------------- */
/* Parks every segment that holds blocks of o (or its descendants): segments
 * are owner-affine, so that is every one of them. Copies the live bytes to
 * host memory, releases the physical memory, keeps the address range.
 * *parked (may be NULL): device bytes given back. Plain segments stay
 * resident. Allocation never uses a parked segment. */
int ebb_owner_park(ebb_owner *o, uint64_t *parked);
/* Maps new physical memory at the same addresses and copies the bytes back
 * (every parked segment of o's tree, those of mem_owner_sleep too). All or
 * nothing: when a mapping or a copy fails (out of memory, driver error) the
 * segments mapped by this call are parked again, every backup is kept, and
 * the error names the owner and the bytes, so the wake can be retried. */
int ebb_owner_wake(ebb_owner *o);

/* --- sleep (parking that keeps only the weights) --------------------------- */
/* While on, the blocks o allocates are its weights (the runner marks a
 * stage's owner around its load). */
void mem_owner_mark_weights(ebb_owner *o, int on);
typedef struct mem_sleep_stats {
  uint32_t size;          /* sizeof(mem_sleep_stats), set by the caller */
  uint64_t device_bytes;  /* sleep: physical bytes given back; wake: mapped again */
  uint64_t backup_bytes;  /* weights' bytes copied to host (sleep) or back (wake) */
  uint64_t dropped_bytes; /* sleep: live bytes not backed up (not weights) */
  uint32_t segments;      /* segments parked / woken */
  double seconds;         /* the copies and driver calls */
} mem_sleep_stats;
/* Like ebb_owner_park, but only the weights blocks (mem_owner_mark_weights)
 * are copied to host memory; other live blocks keep their addresses and come
 * back zeroed by ebb_owner_wake. The backup holds exactly the weights' bytes
 * (mem_allocator_backup_bytes); copies go in 8 MiB chunks through two pinned
 * staging buffers on two streams (xfer.c), the host copy of one chunk
 * overlapping the transfer of the other. The host
 * copies are freed by the wake (and by the owner's teardown: a sleeping
 * owner can be destroyed). st may be NULL. */
int mem_owner_sleep(ebb_owner *o, mem_sleep_stats *st);
/* ebb_owner_wake with figures. */
int mem_owner_wake_stats(ebb_owner *o, mem_sleep_stats *st);
/* Host bytes held by the backups of every parked segment of this allocator. */
uint64_t mem_allocator_backup_bytes(mem_allocator *a);

/* --- pinned host pool ----------------------------------------------------- */
/* Page-locked host memory from dev_host_alloc, cached by size (rounded
 * up to 4 KiB below 1 MiB, to 1 MiB above; a freed buffer is kept idle and
 * reused for the next request of the same rounded size), counted per owner.
 * *p is owned by o until mem_pinned_free; release (EBB_RELEASE_PINNED) and
 * trim give the idle buffers back. */
int mem_pinned_alloc(ebb_owner *o, size_t bytes, void **p);
int mem_pinned_free(mem_allocator *a, void *p);

/* --- release registry ----------------------------------------------------- */
/* Same type as ebb_release_fn in include/ebb/stage.h; declared here so the
 * memory room does not depend on the stage ABI. */
typedef void (*mem_release_fn)(void *arg);
/* Every registration belongs to an owner: a stage instance's
 * (mem_on_release_for), or the process (mem_on_release, owner NULL: a
 * library's cache that belongs to nobody; its release is logged under the
 * name EBB_RELEASE_PROCESS_OWNER). fn(arg) drops something cached.
 * mem_release_callbacks_of(o) runs o's callbacks only; mem_release with
 * EBB_RELEASE_CALLBACKS runs every owner's (a whole-process release). Both
 * in registration order. name is copied (it names the callback in reports).
 * *handle (never 0) is for mem_off_release. The owner is compared, never
 * dereferenced: whoever registered for it unregisters before destroying it. */
#define EBB_RELEASE_PROCESS_OWNER "process"
int mem_on_release(const char *name, mem_release_fn fn, void *arg, uint64_t *handle);
int mem_on_release_for(ebb_owner *owner, const char *name, mem_release_fn fn, void *arg,
                       uint64_t *handle);
/* Internal variant whose callback can fail: nonzero return = failure, reported
 * with ebb_errmsg() (the callback may ebb_seterr); the others still run. */
typedef int (*mem_release_fn_int)(void *arg);
int mem_on_release_int(const char *name, mem_release_fn_int fn, void *arg, uint64_t *handle);
/* EBB_ENOTFOUND for an unknown or already removed handle. */
int mem_off_release(uint64_t handle);
/* Runs owner's callbacks only (NULL: the process-wide ones), in
 * registration order; a failing one is logged and counted. *run / *failed
 * (may be NULL) get the counts. Returns the number run. */
int mem_release_callbacks_of(ebb_owner *owner, int *run, int *failed);
/* How many callbacks owner (NULL: the process) has registered now. */
size_t mem_release_count_of(ebb_owner *owner);

enum {
  EBB_RELEASE_CALLBACKS = 1u << 0, /* run every owner's callbacks (the process's too) */
  EBB_RELEASE_TRIM = 1u << 1,      /* trim the device allocator */
  EBB_RELEASE_PINNED = 1u << 2,    /* empty the pinned pool's idle buffers */
  EBB_RELEASE_CONTEXT = 1u << 3,   /* then release the device context if no
                                      segment is left (else: reported, EBUSY
                                      in result.context_error, not fatal) */
  EBB_RELEASE_DEFAULT = EBB_RELEASE_CALLBACKS | EBB_RELEASE_TRIM | EBB_RELEASE_PINNED,
};
typedef struct mem_release_result {
  uint32_t size;           /* sizeof(mem_release_result), set by caller */
  uint64_t released_bytes; /* device bytes handed back to the driver:
                                 segments + the context (if released) */
  uint64_t segment_bytes;  /* of which: segments trimmed */
  uint64_t context_bytes;  /* of which: the context (measured via the
                                 driver/NVML when possible, else estimate) */
  uint64_t pinned_bytes;   /* pinned host bytes freed */
  int callbacks_run, callbacks_failed;
  int context_released; /* 1: the context was released by this call */
  int context_error;    /* 0 or the EBB_E... code of ctx release */
} mem_release_result;
/* Runs what flags say, in this order: callbacks, trim, pinned, context. a
 * may be NULL (callbacks only). Never initialises a device whose context is
 * not active. Returns 0 even when callbacks fail (they are logged and
 * counted); an error only for bad arguments. out may be NULL. Adds a
 * RELEASE event to the ledger labelled with the bytes handed back. */
int mem_release(mem_allocator *a, unsigned flags, mem_release_result *out);

/* --- unattributed memory ---------------------------------------------------- */
typedef struct mem_unattributed {
  uint32_t size;             /* sizeof(mem_unattributed), set by caller */
  int per_process;           /* 1: driver_used is this process's own (NVML);
                               0: whole-device used (total - free) */
  int known;                 /* 0: the driver could not say (no NVML, no ctx;
                               always 0 on the CPU device, which has no
                               memory of its own to compare) */
  uint64_t driver_used;      /* what the driver says we (or the device) hold */
  uint64_t ebb_reserved;     /* segments ebb holds */
  uint64_t context_estimate; /* 0 when the context is not active */
  int64_t unattributed;      /* driver_used - ebb_reserved - context_estimate:
                               memory taken from the driver behind ebb's back */
} mem_unattributed;
int mem_allocator_unattributed(mem_allocator *a, mem_unattributed *out);

/* --- ledger ----------------------------------------------------------------- */
#define EBB_LEDGER_KINDS(X)     \
  X(SEG_MAP, "seg_map")         \
  X(SEG_UNMAP, "seg_unmap")     \
  X(ALLOC, "alloc")             \
  X(FREE, "free")               \
  X(LEAK_FREE, "leak_free")     \
  X(PIN_ALLOC, "pinned_alloc")  \
  X(PIN_FREE, "pinned_free")    \
  X(TRIM, "trim")               \
  X(RELEASE, "release")         \
  X(CTX_CREATE, "ctx_create")   \
  X(CTX_RELEASE, "ctx_release") \
  X(OOM, "oom")                 \
  X(PARK, "park")               \
  X(WAKE, "wake")               \
  X(MARK, "mark")

typedef enum {
#define EBB_X_(k, s) EBB_EV_##k,
  EBB_LEDGER_KINDS(EBB_X_)
#undef EBB_X_
} mem_ledger_kind;
const char *mem_ledger_kind_name(mem_ledger_kind k);

typedef struct mem_ledger_event {
  uint64_t t_ns; /* CLOCK_MONOTONIC */
  mem_ledger_kind kind;
  uint32_t owner_id; /* 0: none (segment, release...) */
  uint64_t addr;
  uint64_t bytes;       /* the event's size (bytes returned for TRIM/RELEASE) */
  uint64_t owner_bytes; /* the owner's current bytes after the event */
  uint64_t reserved;    /* allocator reserved after the event */
  uint64_t allocated;   /* allocator allocated after the event */
  const char *label;    /* owner name or mark text (interned, lives as
                               long as the ledger) */
} mem_ledger_event;

/* The allocator's ledger (borrowed; lives as long as the allocator). */
mem_ledger *mem_allocator_ledger(mem_allocator *a);
/* A labelled point in time ("separate start"); shown on the SVG. */
void mem_ledger_mark(mem_ledger *l, const char *label);
/* Copies up to cap of the newest events, oldest first; *n = copied. *dropped
 * (may be NULL) = events lost to the ring's bound. */
int mem_ledger_events(mem_ledger *l, mem_ledger_event *out, size_t cap, size_t *n,
                      uint64_t *dropped);
size_t mem_ledger_count(mem_ledger *l);
/* {"device":"cuda:0","t0_ns":...,"dropped":0,"owners":[{"id":1,"name":"a"}...],
 *  "events":[{"t_ns":..,"kind":"alloc","owner":"a","addr":..,"bytes":..,
 *  "owner_bytes":..,"reserved":..,"allocated":..}...]} */
int mem_ledger_write_json(mem_ledger *l, FILE *f);
/* Timeline: the device context as a grey band from its creation to its
 * release, device bytes over time stacked by owner on top of it (one colour
 * each, with a legend), reserved as a dashed line, release points marked with
 * the bytes returned, marks as labelled ticks (close ones merged into one
 * label), axes in seconds and MiB/GiB. title may be NULL. */
int mem_ledger_write_svg(mem_ledger *l, FILE *f, const char *title);
/* Writes JSON or SVG chosen by the path's extension (.json / .svg). */
int mem_ledger_write(mem_ledger *l, const char *path);

#endif
