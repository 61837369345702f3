/* ebb's embedding API: what a program (a Python model server through ctypes,
 * a C++ service, a framework's allocator hook) links against to get ebb's
 * owners, leak reports and driver-confirmed release in its own process.
 *
 *   cc app.c $(pkg-config --cflags --libs ebb)
 *
 *   ebb_gpu *g;      ebb_gpu_open("cuda:0", &g);
 *   ebb_owner *o;    ebb_owner_open(g, "separate", NULL, &o);
 *   uint64_t p;      ebb_alloc(o, 1 << 30, "app.c:12", &p);
 *   ...              ebb_free(g, p);
 *   ebb_released r = {.size = sizeof r};
 *   ebb_owner_release(o, 0, NULL, &r);   // r.released_bytes: what the driver got back
 *   ebb_owner_close(o, NULL);
 *   ebb_gpu_release(g, EBB_GPU_RELEASE_CONTEXT, &r);  // the context too: 0 bytes held
 *   ebb_gpu_close(g);
 *
 * Conventions (the same as the rest of ebb, include/ebb/error.h): functions
 * return 0 or a negative EBB_E... code and leave a message that names what
 * was wrong in ebb_errmsg(); results come through trailing out-params;
 * handles come in open/close pairs and close(NULL) is a no-op; structs the
 * caller passes start with `size` (set it to sizeof), so a program built
 * against an older, shorter struct keeps working with a newer libebb.
 *
 * Versioning: EBB_API_VERSION is what this header describes; ebb_api_version()
 * is what the loaded libebb.so implements. The major part changes only when a
 * function is removed or changes meaning; functions and struct fields are only
 * ever appended within a major version. The stage ABI (include/ebb/stage.h)
 * is separate and unchanged by this API.
 *
 * Threads: every function may be called from any thread. The current owner
 * (ebb_push / ebb_pop) is per thread.
 *
 * Laziness: opening a CUDA device loads the driver but creates no context;
 * the first allocation does. Release never initialises anything. */
#ifndef EBB_EBB_H
#define EBB_EBB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ebb/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EBB_API_VERSION_MAJOR 1
/* 1.1: ebb_reclaim; 1.2: ebb_torch_alloc_at, ebb_broker_join, events.h; 1.3:
 * ebb_torch_python_sites, ebb_torch_site, ebb_torch_last_error,
 * ebb_gpu_reset_peaks, the totals at the end of ebb_gpu_stats; streams
 * (ebb_gpu_alloc_on, ebb_free_on, ebb_record_stream, ebb_torch_alloc_on),
 * ebb_owner_blocks, ebb_keep */
#define EBB_API_VERSION_MINOR 3
#define EBB_API_VERSION (EBB_API_VERSION_MAJOR * 1000 + EBB_API_VERSION_MINOR)

/* EBB_API_VERSION of the loaded library (major * 1000 + minor). */
int ebb_api_version(void);
/* The ebb release ("0.1.0"). */
const char *ebb_version_string(void);

typedef struct ebb_gpu ebb_gpu;     /* one device and its caching allocator */
typedef struct ebb_owner ebb_owner; /* who a block belongs to */

/* --- devices ------------------------------------------------------------- */
/* spec: "auto", "cpu", "cuda" (= cuda:0) or "cuda:N". Opening the same CUDA
 * device twice gives two handles on one allocator (counted; the last close
 * tears it down), so a library and the program around it share owners and
 * counters. *out is the caller's; close it with ebb_gpu_close. The driver is
 * EBB_LIBCUDA (else libcuda.so.1) and NVML EBB_LIBNVML, as for `ebb`. */
int ebb_gpu_open(const char *spec, ebb_gpu **out);
/* The last close of a device reports and frees every owner's live blocks,
 * gives every segment back to the driver and releases the context. NULL:
 * no-op. */
void ebb_gpu_close(ebb_gpu *g);

typedef struct ebb_gpu_info {
  uint32_t size;  /* sizeof(ebb_gpu_info), set by the caller */
  char label[32]; /* "cuda:0" or "cpu" */
  char name[128]; /* "NVIDIA H200", the fake's name, or the CPU model */
  int ordinal;    /* CUDA device number; -1 for the CPU device */
  int is_cuda;
  uint64_t total_bytes; /* device memory */
  uint64_t free_bytes;  /* the driver's free memory now (0 when it cannot
                             say without creating a context) */
} ebb_gpu_info;
int ebb_gpu_get_info(ebb_gpu *g, ebb_gpu_info *out);

typedef struct ebb_gpu_stats {
  uint32_t size;                      /* sizeof(ebb_gpu_stats), set by the caller */
  uint64_t reserved, reserved_peak;   /* bytes held from the driver (segments) */
  uint64_t allocated, allocated_peak; /* bytes in live blocks */
  uint64_t cached;                    /* reserved - allocated */
  uint64_t segments, blocks;
  uint64_t pinned_reserved, pinned_allocated;
  uint64_t driver_free, driver_total; /* the driver's view (never initialises) */
  int ctx_active;                     /* this process holds the context */
  uint64_t context_bytes;             /* what the context costs (measured or
                                         assumed) */
  uint64_t driver_used_by_process;    /* NVML: all this process holds on the
                                         device, context included; 0 unknown */
  int64_t unattributed;               /* driver_used_by_process - reserved -
                                         context: memory taken behind ebb's
                                         back (0 when unknown) */
  /* API 1.3: totals (all ever taken), the remaining peaks, driver calls */
  uint64_t reserved_total, allocated_total;
  uint64_t segments_peak, segments_total;
  uint64_t blocks_peak, blocks_total;
  uint64_t seg_allocs, seg_frees; /* segments taken from / given to the driver */
  uint64_t oom_retries;           /* driver out-of-memory answered by trim + retry */
} ebb_gpu_stats;
int ebb_gpu_get_stats(ebb_gpu *g, ebb_gpu_stats *out);
/* Sets every peak of g's counters (reserved, allocated, segments, blocks,
 * pinned) to what is held now, as torch.cuda.reset_peak_memory_stats does
 * for PyTorch's allocator; owners' peaks are their own. API 1.3. */
int ebb_gpu_reset_peaks(ebb_gpu *g);

/* --- owners -------------------------------------------------------------- */
/* name is copied ("separate", "job 17"). parent may be NULL; it must belong
 * to the same device. *out is the caller's: ebb_owner_close. */
int ebb_owner_open(ebb_gpu *g, const char *name, ebb_owner *parent, ebb_owner **out);
const char *ebb_owner_get_name(const ebb_owner *o);
ebb_gpu *ebb_owner_gpu(const ebb_owner *o);
/* bytes: limit on the owner's and its descendants' device bytes; 0: none.
 * An allocation over it fails with EBB_EQUOTA naming the owner and figures. */
int ebb_owner_quota(ebb_owner *o, uint64_t bytes);

typedef struct ebb_owner_usage {
  uint32_t size;                           /* sizeof(ebb_owner_usage), by caller */
  uint64_t bytes, bytes_peak, bytes_total; /* own device bytes: now, most,
                                               all ever allocated */
  uint64_t blocks, blocks_peak, blocks_total;
  uint64_t tree_bytes; /* own + descendants' bytes now */
  uint64_t pinned_bytes, pinned_peak;
  uint64_t quota;   /* 0: none */
  uint64_t refused; /* allocations refused */
} ebb_owner_usage;
int ebb_owner_get_usage(ebb_owner *o, ebb_owner_usage *out);

/* A leak: a block its owner did not free before the owner was released or
 * closed. ebb frees it. */
typedef struct ebb_leak_entry {
  uint64_t addr;
  uint64_t size;         /* bytes asked for */
  const char *owner;     /* the owner that allocated it (maybe a child) */
  const char *site;      /* the site given to ebb_alloc ("app.py:12"), or "?" */
  const char *backtrace; /* symbolised frames, one per line, or NULL
                              (capture is on with EBB_MEM_BACKTRACE=1) */
  int pinned;            /* 1: a pinned host buffer */
} ebb_leak_entry;
typedef struct ebb_leak_list {
  const char *owner; /* the owner released or closed */
  uint64_t count;
  uint64_t bytes; /* device bytes leaked (asked-for sizes) */
  uint64_t pinned_bytes;
  ebb_leak_entry *leaks; /* count entries, largest first */
} ebb_leak_list;
/* NULL: no-op. */
void ebb_leak_list_free(ebb_leak_list *l);
/* The blocks and pinned buffers o and its descendants hold now, as a list
 * of the same kind (what a release would reclaim as leaks; nothing is
 * freed): *out NULL when they hold none, else the caller frees it with
 * ebb_leak_list_free. API 1.3. */
int ebb_owner_blocks(ebb_owner *o, ebb_leak_list **out);
/* The live block at addr survives its owner's releases: not reclaimed, not
 * reported, still its owner's, until it is freed (something the program
 * cannot change still uses it: ebb.py's leak policy "keep").
 * ebb_owner_close frees it all the same. EBB_ENOTFOUND: not a live block.
 * API 1.3. */
int ebb_keep(ebb_gpu *g, uint64_t addr);

/* What a release handed back. */
typedef struct ebb_released {
  uint32_t size;           /* sizeof(ebb_released), set by the caller */
  uint64_t released_bytes; /* device bytes the driver got back: segments +
                                context; measured, not estimated, where the
                                driver can say (NVML or free memory) */
  uint64_t segment_bytes;  /* of which segments */
  uint64_t context_bytes;  /* of which the context */
  uint64_t pinned_bytes;   /* pinned host bytes freed */
  uint64_t leaked_bytes;   /* owner release: live blocks reclaimed as leaks */
  uint64_t leaked_blocks;
  int context_released; /* 1: the context went back */
  int context_error;    /* 0, or why the context could not go (EBB_EBUSY:
                                something still holds memory) */
  int callbacks_run, callbacks_failed;
} ebb_released;

enum {
  EBB_OWNER_RELEASE_KEEP = 1u << 0, /* do not reclaim live blocks, only give
                                       back what is cached */
};
/* The end of an owner's work: what it still holds is reclaimed (reported
 * as leaks: into *leaks when leaks is non-NULL, else logged as
 * `[owner] leaked N MiB in M blocks; freed by ebb`), then the release
 * callbacks run and every cached segment goes back to the driver. out
 * (may be NULL) says how many bytes the driver got back. The owner stays open
 * and may allocate again. flags: 0 or EBB_OWNER_RELEASE_KEEP. *leaks is NULL
 * when nothing leaked, else the caller frees it with ebb_leak_list_free. */
int ebb_owner_release(ebb_owner *o, unsigned flags, ebb_leak_list **leaks, ebb_released *out);
/* Closes o's children, reclaims what they and o still hold (leaks, as
 * above), frees the handle. Gives nothing back to the driver by itself (the
 * cache keeps it until a release). NULL: no-op. */
void ebb_owner_close(ebb_owner *o, ebb_leak_list **leaks);

/* Parking: copies the owner's blocks to host memory and gives their physical
 * memory back while keeping their addresses (VMM segments the owner has to
 * itself); wake maps new memory at the same addresses and copies back.
 * *bytes (may be NULL): device bytes given back. */
int ebb_owner_park(ebb_owner *o, uint64_t *bytes);
int ebb_owner_wake(ebb_owner *o);

/* --- the current owner of a thread ------------------------------------------ */
/* Makes o the calling thread's current owner until the matching ebb_pop, so
 * an allocator callback that is told no owner (ebb_torch_alloc, a CuPy or
 * Numba hook) still attributes correctly. Nests (a stack, 64 deep). */
int ebb_push(ebb_owner *o);
/* Pops the calling thread's top owner. EBB_ESTATE when nothing was pushed. */
int ebb_pop(void);
/* The calling thread's innermost pushed owner of device g (g NULL: of any
 * device), else NULL. */
ebb_owner *ebb_current(ebb_gpu *g);
/* The owner of memory allocated on g with no owner current: "default". */
ebb_owner *ebb_gpu_default_owner(ebb_gpu *g);

/* --- device memory --------------------------------------------------------- */
/* bytes > 0; o must not be NULL (ebb_gpu_alloc takes the current owner). site: where
 * the allocation was made ("app.py:12"; copied; NULL = "?"); it names the
 * block in leak reports. *addr: the device address (512-aligned). Errors:
 * EBB_EQUOTA, EBB_EOOM (after trimming the cache and retrying once). */
int ebb_alloc(ebb_owner *o, size_t bytes, const char *site, uint64_t *addr);
/* As ebb_alloc for the calling thread's current owner of g, else g's
 * default owner. */
int ebb_gpu_alloc(ebb_gpu *g, size_t bytes, const char *site, uint64_t *addr);
/* EBB_ENOTFOUND when addr is not a live block of g (double free included,
 * and a block ebb already freed as a leak). */
int ebb_free(ebb_gpu *g, uint64_t addr);
/* Streams (API 1.3). A framework's memory is used in the order of its
 * streams: stream is the driver's handle (CUstream, cudaStream_t) of the
 * device's primary context as an integer, 0 the legacy default stream.
 * A block freed on stream S goes at once to a request on S; a request on
 * another stream (or on none) gets it only once the work queued on S
 * before the free has completed (an event recorded at the free), and the
 * work of every stream ebb_record_stream named for it. EBB_STREAM_NONE:
 * no stream (ebb_alloc / ebb_free: the caller's work on the block is
 * over at the free). */
#define EBB_STREAM_NONE UINT64_MAX
int ebb_gpu_alloc_on(ebb_gpu *g, size_t bytes, const char *site, uint64_t stream, uint64_t *addr);
int ebb_free_on(ebb_gpu *g, uint64_t addr, uint64_t stream);
/* The live block at addr is used on stream too (PyTorch's
 * Tensor.record_stream): no request takes it after its free before that
 * stream's work queued by then is done. EBB_ENOTFOUND: not a live block. */
int ebb_record_stream(ebb_gpu *g, uint64_t addr, uint64_t stream);
/* Who owns the block at addr (may be NULL) and its size (may be NULL). */
int ebb_lookup(ebb_gpu *g, uint64_t addr, ebb_owner **owner, uint64_t *size);

/* Page-locked host memory counted for o (the pinned pool). */
int ebb_pinned_alloc_for(ebb_owner *o, size_t bytes, void **p);
int ebb_pinned_free_for(ebb_gpu *g, void *p);

/* --- release ----------------------------------------------------------------- */
enum {
  EBB_GPU_RELEASE_CONTEXT = 1u << 0,  /* also give the device context back
                                        when nothing is left on the device */
  EBB_GPU_RELEASE_NO_HOOKS = 1u << 1, /* skip the release callbacks (a caller
                                         that ran them in a first pass) */
};
/* Runs the release callbacks, gives every cached segment and idle pinned
 * buffer back to the driver, and with EBB_GPU_RELEASE_CONTEXT the context
 * (out->context_error says why not, e.g. EBB_EBUSY when blocks are live).
 * g NULL: every open device. Never initialises a device. out may be NULL. */
int ebb_gpu_release(ebb_gpu *g, unsigned flags, ebb_released *out);

/* Release callbacks, process-wide: fn(arg) drops something cached (a model
 * cache, a framework's allocator cache). Run by every release in
 * registration order, with no ebb lock held. name is copied. *handle is for
 * ebb_release_hook_remove. */
typedef void (*ebb_release_hook_fn)(void *arg);
int ebb_release_hook_add(const char *name, ebb_release_hook_fn fn, void *arg, uint64_t *handle);
int ebb_release_hook_remove(uint64_t handle);

/* --- timeline ---------------------------------------------------------------- */
/* A labelled point on g's timeline, and the timeline as JSON or SVG (chosen
 * by the extension of path: .json / .svg). */
int ebb_gpu_mark(ebb_gpu *g, const char *label);
int ebb_gpu_write_timeline(ebb_gpu *g, const char *path);

/* --- framework allocator entry points ------------------------------------------- */
/* PyTorch's CUDAPluggableAllocator loads these by name:
 *   torch.cuda.memory.CUDAPluggableAllocator("libebb.so", "ebb_torch_alloc",
 *                                            "ebb_torch_free")
 * device is the CUDA ordinal (opened on first use); the block goes to the
 * calling thread's current owner of that device, else its default owner.
 * stream is the tensor's: the block is allocated and freed on it (PyTorch
 * hands its free the stream of the allocation), so it is reused at once on
 * that stream and on another only after the work queued before the free
 * has completed (ebb_gpu_alloc_on). Returns NULL on failure,
 * with the reason in ebb_errmsg() and logged.
 * A tensor still alive when its owner is released is freed by ebb as a
 * leak; until its late ebb_torch_free, its address is not handed to
 * PyTorch again (PyTorch keys its allocations by address), and that free
 * frees nothing (another block ebb placed there is left alone).
 * The block's site is the Python line that made the tensor when
 * ebb_torch_python_sites turned that on, else "torch". */
void *ebb_torch_alloc(ssize_t size, int device, void *stream);
void ebb_torch_free(void *ptr, ssize_t size, int device, void *stream);
/* ebb_torch_alloc for an allocator that knows where the tensor was made
 * (ebb.torch's Python allocator passes "file.py:line"; NULL: "torch"):
 * 0 and *ptr (NULL for size <= 0), or an EBB_E... code with the reason in
 * ebb_errmsg(), nothing logged. Its blocks go back with ebb_torch_free.
 * API 1.2. */
int ebb_torch_alloc_at(ssize_t size, int device, const char *site, void **ptr);
/* ebb_torch_alloc_at on stream (the one PyTorch's allocator callback is
 * given). API 1.3. */
int ebb_torch_alloc_on(ssize_t size, int device, void *stream, const char *site, void **ptr);

/* Sites with no callback (API 1.3): ebb_torch_alloc names each block with
 * the "file.py:line" of the calling thread's innermost Python frame whose
 * file lies under none of the skip directories, reading the thread's own
 * frames from C (no GIL, no Python object made; docs/python.md). The
 * layout of those frames is known for CPython 3.11 (EBB_EUNSUPPORTED for
 * another hexversion). cfg NULL turns it off. */
typedef struct ebb_python_sites {
  uint32_t size;           /* sizeof(ebb_python_sites), set by the caller */
  uint32_t hexversion;     /* sys.hexversion of the interpreter in this process */
  void *this_thread_state; /* the address of its PyGILState_GetThisThreadState */
  void *addr2line;         /* the address of its PyCode_Addr2Line */
  const char *skip;        /* directories ending in '/', one a line (the
                              frameworks' packages); copied */
} ebb_python_sites;
int ebb_torch_python_sites(const ebb_python_sites *cfg);
/* The site ebb_torch_alloc would give a block allocated now on this thread
 * ("torch" when there is none), into buf (cap bytes, NUL-terminated). */
int ebb_torch_site(char *buf, size_t cap);
/* How many allocations ebb_torch_alloc refused since the process started
 * (*refused; may be NULL) and the reason of the last one (into buf, cap
 * bytes; "" when none): PyTorch says only "out of memory". */
int ebb_torch_last_error(char *buf, size_t cap, uint64_t *refused);

/* The open handle of CUDA device `ordinal` that ebb_torch_alloc uses (opened
 * on first use; it holds a reference of its own until process exit, so an
 * ebb_gpu_close of the same device by the program does not tear it down). */
int ebb_gpu_for_ordinal(int ordinal, ebb_gpu **out);

/* --- a GPU shared with other processes (API 1.1, docs/broker.md) ---------------- */
typedef struct ebb_reclaim_result {
  uint32_t size;        /* sizeof(ebb_reclaim_result), set by the caller */
  uint64_t free_before; /* the driver's free bytes on the device before asking */
  uint64_t free_after;  /* and after the peers gave (and the wait) */
  uint64_t given_bytes; /* what the peers gave back, driver-confirmed, summed */
  int peers_asked;      /* peers that answered a reclaim */
  int peers_skipped;    /* silent, refusing or dead ones */
} ebb_reclaim_result;
/* Asks the ebb processes using CUDA device `device` ("cuda:N"), the ones
 * registered in broker_dir (NULL: $XDG_RUNTIME_DIR/ebb, else /run/ebb), to
 * give memory back until `bytes` are free there: most idle first, each
 * within timeout_s (<= 0: 2 s); then waits up to 5 s for the driver to show
 * them free. Call it before allocating outside ebb (a model server about to
 * wake). 0 when the bytes are free; EBB_EOOM when they could not all be had,
 * the message naming what each peer keeps and why; EBB_EINVAL for a device
 * that is not cuda:N, EBB_ENODEV when there is no such device. out (may be
 * NULL) is filled either way. Loads the driver; creates no context. */
int ebb_reclaim(const char *device, uint64_t bytes, const char *broker_dir, double timeout_s,
                ebb_reclaim_result *out);

/* The giving side (API 1.2): registers this process in broker_dir (as
 * ebb_reclaim; the directory is made mode 0700 when missing) so that other
 * processes on its GPUs can ask it for memory. A request for device D runs
 * ebb_gpu_release(D, EBB_GPU_RELEASE_CONTEXT) on a listener thread of its
 * own: the release callbacks (a framework's cache, a model cache), the
 * cached segments, and the context when nothing is live there; the answer
 * is the bytes the driver got back, and what live blocks keep. It offers
 * only the devices the program has open (ebb_gpu_open, ebb_gpu_for_ordinal)
 * and never opens one. what: how it calls itself in the asker's log
 * ("notebook"; NULL: "libebb"). *out for ebb_broker_leave. 0, EBB_ENODEV
 * (no CUDA driver), EBB_EINVAL (the directory is another user's or too
 * widely writable, named in ebb_errmsg()), EBB_EIO. */
typedef struct ebb_broker ebb_broker;
int ebb_broker_join(const char *broker_dir, const char *what, ebb_broker **out);
/* Unregisters (the socket goes) and frees b; a request being answered
 * finishes first. NULL: no-op. */
void ebb_broker_leave(ebb_broker *b);

#ifdef __cplusplus
}
#endif
#endif
