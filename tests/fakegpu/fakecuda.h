/* Internals of the fake libcuda.so.1, shared by its files:
 *   fakecuda_init.c     cuInit, fork rule, devices, errors, versions
 *   fakecuda_procaddr.c cuGetProcAddress
 *   fakecuda_ctx.c      primary and created contexts, the current stack
 *   fakecuda_mem.c      plain and managed allocations, host memory, copies, IPC
 *   fakecuda_ptr.c      host registration, pointer and address-range queries
 *   fakecuda_vmm.c      virtual memory management
 *   fakecuda_exec.c     streams, events, modules, kernel launches
 *   fakecuda_stream.c   stream callbacks, waits and queries, the profiler
 *   fakecuda_module.c   JIT images (PTX check), the linker, function queries
 *   fakecuda_globals.c  device variables of binary images
 *   fakecuda_params.c   kernel parameter layouts, the launch argument check
 *   fakecuda_freed.c    freed device ranges, their quarantine
 *   fakecuda_simtime.c  simulated kernel time per stream (FAKEGPU_KERNEL_US)
 *   fakecuda_graph.c    stream capture (fork/join across streams) into graphs
 *   fakecuda_graphnode.c graphs built node by node, edges, node parameters
 *   fakecuda_graphquery.c graph queries, clone, destroy node, DOT print
 *   fakecuda_graphexec.c instantiate, launch (dependency order), exec node
 *                       parameters, exec update
 *   fakecuda_texture.c  texture and surface objects
 *   fakecuda_texref.c   texture references (cuTexRef*, deprecated)
 *   fakecuda_mipmap.c   mipmapped arrays
 *   fakecuda_advise.c   managed-memory advice and range attributes
 *   fakecuda_userobj.c  user objects and the references graphs hold
 *   fakecuda_device.c   graph memory, execution affinity, RDMA flush, core
 *                       dump settings
 *   fakecuda_legacy.c   the pre-CUDA-4.0 launch API (cuParamSet*, cuLaunchGrid)
 *   fakecuda_memops.c   stream memory operations (write/wait value, batches)
 *   fakecuda_hash.c     hash maps for handle and name lookups
 *   fakecuda_spans.c    sorted address ranges (VMM reservations, mappings)
 *   fakecuda_rtctx.c    what the CUDA runtime asks of contexts, devices,
 *                       streams and events beyond ebb's table (_v2 ABIs,
 *                       flags, limits, capture queries, IPC event handles)
 *   fakecuda_pool.c     memory pools, stream-ordered allocation
 *   fakecuda_library.c  libraries and kernels (cuLibrary*, cuKernel*)
 *   fakecuda_array.c    CUDA arrays, 2D/3D copies
 *   fakecuda_export.c   cuGetExportTable: the runtime's private tables
 * Headers: fakecuda_extra.h (FK_EXTRA_ENTRY_POINTS), fakecuda_graph.h (what
 * the graph files share), fakecuda_rt.h
 * (FK_RT_ENTRY_POINTS), fg_state.h/fg_state.c (the state file, shared with
 * fakenvml.c, fakegpu_smi.c and fakegpu_hold.c); tests/fakegpu/README.md
 * lists every file of the directory.
 * One process-wide mutex (fk_lock) guards every list here; the state file has
 * its own lock (fg_state.h). Exported functions are FK_API; everything else is
 * hidden (-fvisibility=hidden). */
#ifndef FAKEGPU_FAKECUDA_H
#define FAKEGPU_FAKECUDA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "device/cuda_api.h"
#include "device/kernel_twin.h"
#include "fakecuda_extra.h"
#include "fakecuda_rt.h"
#include "fg_state.h"

#define FK_API __attribute__((visibility("default")))
#define FK_DRIVER_VERSION 13000
#define FK_DEVICE_NAME "fakegpu (ebb test device)"
#define FK_DEVICE_SMS 132 /* streaming multiprocessors, as an H100 SXM */

/* Types of the entry points that are not in EBB_CUDA_ENTRY_POINTS. */
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCreateParams_st CUctxCreateParams;

typedef struct fk_alloc fk_alloc;
typedef struct fk_obj fk_obj;

#define FK_MAX_PEERS 16

/* A context: the primary context of a device (one per device, its handle
 * never changes) or one made by cuCtxCreate. */
struct CUctx_st {
  uint32_t magic;
  int device;
  int primary;
  int active;        /* created, context memory charged */
  int dead;          /* created context destroyed (kept so stale handles are caught) */
  unsigned refcount; /* primary: retains */
  unsigned attached; /* created: cuCtxAttach's not yet detached */
  CUresult sticky;   /* 700 etc. once raised, until destroy/reset */
  unsigned flags;    /* primary: cuDevicePrimaryCtxSetFlags */
  struct CUctx_st *peers[FK_MAX_PEERS]; /* cuCtxEnablePeerAccess */
  unsigned ctx_flags;                   /* created: cuCtxCreate / cuCtxSetFlags */
  size_t limits[10];                    /* cuCtxSetLimit (0: the default) */
  int cache_config;                     /* cuCtxSetCacheConfig */
  unsigned long long id;                /* cuCtxGetId */
  struct CUctx_st *next_created;
};
#define FK_CTX_MAGIC 0xc0de7c7u

/* What a context holds in memory: a plain allocation (cuMemAlloc, backed by
 * a memfd), pinned host memory (cuMemHostAlloc) or a mapping opened from an
 * IPC handle. All of them die with their context. */
enum { FK_ALLOC_DEVICE = 1, FK_ALLOC_HOST, FK_ALLOC_IPC, FK_ALLOC_MANAGED, FK_ALLOC_REGISTERED };
struct fk_alloc {
  int kind;
  uint64_t addr;
  size_t size;    /* bytes asked for: the range copies may touch */
  size_t mapped;  /* bytes mapped (a device allocation: rounded up) */
  size_t charged; /* bytes counted against the device (rounded up) */
  int fd;         /* memfd of a device allocation; -1 otherwise */
  unsigned flags; /* cuMemHostAlloc / cuMemHostRegister / cuMemAllocManaged flags */
  uint64_t id;    /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique in the process */
  struct CUctx_st *ctx;
  struct fk_pool *pool; /* cuMemAllocAsync: the pool it came from (NULL: its pool was destroyed) */
  int chunk;            /* a pool's reserved memory, carved into blocks: no user pointer */
  fk_alloc *parent;     /* a pool block: the chunk it lies in (its memory, charged there) */
  int module_owned;     /* a module's variables: cuMemFree does not take it */
  int sync_memops;      /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, set by cuPointerSetAttribute */
  fk_alloc *next;
};

enum { FK_OBJ_STREAM = 1, FK_OBJ_EVENT, FK_OBJ_MODULE, FK_OBJ_FUNCTION };
struct fk_obj {
  uint32_t magic; /* FK_OBJ_MAGIC + kind */
  int kind;
  struct CUctx_st *ctx;
  fk_obj *next;
  /* streams and events */
  unsigned flags;
  int priority;          /* streams */
  unsigned long long id; /* streams: cuStreamGetId */
  int recorded;
  double t_ms;
  /* modules: loaded from a real binary (fatbin or cubin), whose functions
   * are found by any name; functions: noop = of such a module, no twin */
  int binary;
  int noop;
  void *owner;                /* modules: their CUlibrary; functions: their CUkernel */
  const void *image;          /* binary modules: the image (NULL: names unknown) */
  int image_owned;            /* image is this module's copy */
  char *ptx;                  /* PTX modules: their text, owned (entries that do nothing) */
  struct fk_globals *globals; /* modules: their device variables, once asked */
  /* functions */
  fk_obj *module;
  dev_kernel_twin_fn twin; /* NULL and !noop: the built-in faulting kernel */
  char *name;              /* functions: the kernel's name, owned (any length, as the driver's) */
  struct fk_capture *capture; /* streams: their stream capture, NULL if none */
  /* events recorded into a stream capture: its id, the place in it and the
   * stream it was recorded on (compared, never dereferenced) */
  unsigned long long cap_id, cap_seq;
  fk_obj *cap_stream;
  unsigned char *attrs;     /* streams: cuStreamSetAttribute's values (NULL: defaults) */
  struct fk_legacy *legacy; /* functions: the pre-4.0 launch state (fakecuda_legacy.c) */
  int max_dyn_smem;         /* functions: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                     * set by cuFuncSetAttribute (0: the default 48 KiB) */
};
#define FK_OBJ_MAGIC 0x0b1ec700u

/* Hash maps (fakecuda_hash.c), keyed by two words and an optional string
 * that the map does not copy. get: the value or NULL; put replaces (-1
 * without memory); del removes the key (only if it maps to val, unless val
 * is NULL). Callers hold fk_lock. */
typedef struct fk_hmap {
  size_t cap, n, used;
  struct fk_hmap_slot *slots;
} fk_hmap;
void *fk_hmap_get(const fk_hmap *m, uintptr_t k1, uintptr_t k2, const char *name);
int fk_hmap_put(fk_hmap *m, uintptr_t k1, uintptr_t k2, const char *name, void *val);
void fk_hmap_del(fk_hmap *m, uintptr_t k1, uintptr_t k2, const char *name, const void *val);
void fk_hmap_clear(fk_hmap *m);
uint64_t fk_hash_bytes(const void *p, size_t n);

/* Sorted sets of address ranges that do not overlap (fakecuda_spans.c):
 * room makes space for one more (-1 without memory), and add then cannot
 * fail; from is the index of the first range ending after addr (n when
 * none), so the ranges meeting [a, b) are those from fk_spans_from(a) while
 * their addr < b; at is the object of the range holding addr, or NULL; cut
 * removes the entries [from, to). Callers hold fk_lock. */
typedef struct fk_span {
  uint64_t addr, end;
  void *obj;
} fk_span;
typedef struct fk_spans {
  fk_span *v;
  size_t n, cap;
} fk_spans;
int fk_spans_room(fk_spans *s);
void fk_spans_add(fk_spans *s, uint64_t addr, uint64_t size, void *obj);
size_t fk_spans_from(const fk_spans *s, uint64_t addr);
void *fk_spans_at(const fk_spans *s, uint64_t addr);
void fk_spans_cut(fk_spans *s, size_t from, size_t to);

/* Global state. */
extern fg_config fk_cfg;
extern int fk_initialized;     /* cuInit succeeded in this process */
extern int fk_forked;          /* this is a child forked after cuInit */
extern CUresult fk_init_error; /* what cuInit answered if it failed */
extern unsigned fk_ndevices;
extern uint64_t fk_granularity;

void fk_lock(void);
void fk_unlock(void);

/* 0 when the driver may be used: cuInit done, not a forked child. */
CUresult fk_check_init(void);
CUresult fk_check_device(CUdevice dev);
/* The fake's device (its index in the state file, fakegpu-smi and NVML)
 * behind this process's ordinal: CUDA_VISIBLE_DEVICES reorders and hides. */
unsigned fk_device_of(int ordinal);
uint64_t fk_round_up(uint64_t bytes);

/* The calling thread's current context (NULL if none). Caller holds fk_lock. */
struct CUctx_st *fk_current(void);
/* For calls that need a context: checks init, that there is a current,
 * live context, activates a reset primary context that is still retained,
 * and answers the context's sticky error. Caller holds fk_lock. */
CUresult fk_need_ctx(struct CUctx_st **out);
/* A context handed in as an argument (not the current one): 201 unless it
 * is live (a reset, still retained primary comes back), else its sticky
 * error. Caller holds fk_lock. */
CUresult fk_ctx_usable(struct CUctx_st *c);
/* Frees everything a context holds and takes back its memory. Holds fk_lock. */
void fk_ctx_teardown(struct CUctx_st *ctx);
/* Marks ctx faulted: every later call on it answers err. */
void fk_ctx_raise(struct CUctx_st *ctx, CUresult err);

/* Device allocation counter for FAKEGPU_FAIL_ALLOC_AT: 1 when this
 * allocation is the one to fail. Caller holds fk_lock. */
int fk_alloc_should_fail(void);

/* Device memory ranges: 1 when [addr, addr+n) lies inside one accessible
 * device range of this process (plain, VMM mapped with access, IPC opened). */
int fk_mem_range_ok(uint64_t addr, size_t n);
int fk_vmm_range_ok(uint64_t addr, size_t n);
/* The VMM mapping holding addr: 1 and its start, size and the fake's device
 * index; 0 if addr is not mapped. Caller holds fk_lock. */
int fk_vmm_find(uint64_t addr, uint64_t *start, uint64_t *size, unsigned *device);
/* This process's ordinal of the fake's device d (-1 when not visible). */
int fk_ordinal_of(unsigned d);
/* Free everything ctx holds (memory, streams, events, modules). */
void fk_mem_free_ctx(struct CUctx_st *ctx);
void fk_exec_free_ctx(struct CUctx_st *ctx);
fk_obj *fk_obj_check(void *h, int kind);
/* A new object of kind on the current context. Caller holds fk_lock. */
CUresult fk_new_obj(int kind, fk_obj **out);
/* A stream argument: NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a live
 * stream. Caller holds fk_lock. */
int fk_stream_ok(CUstream s);
/* The host twin of kernel `name`, NULL if the process has none. */
dev_kernel_twin_fn fk_find_twin(const char *name);
/* An image the fake cannot run (PTX whose kernels have no host twin) answers
 * CUDA_ERROR_INVALID_PTX and says why in msg (also on stderr). Any other
 * image is accepted: its kernels are resolved by name at cuModuleGetFunction. */
CUresult fk_image_check(const void *image, char *msg, size_t msg_len);
/* 1 when the PTX text declares entry `name` with a body of `ret;` alone: a
 * kernel that does nothing, run as a no-op without a twin. */
int fk_ptx_entry_does_nothing(const char *ptx, const char *name);
/* Waits until every stream callback queued before the call has run. Called
 * without fk_lock. */
void fk_callbacks_drain(void);
/* Queues fn on the driver's callback thread after every callback queued
 * before (fakecuda_stream.c); without fk_lock. */
CUresult fk_callback_enqueue(CUstream s, CUstreamCallback fn, void *user);
/* 1 on the driver thread that runs stream callbacks: a callback must not
 * call the driver (800, NOT_PERMITTED). */
int fk_in_callback(void);
/* Pinned/registered host memory containing [p, p+n): its alloc or NULL.
 * Caller holds fk_lock. */
fk_alloc *fk_alloc_containing(uint64_t addr, size_t n);
/* A device allocation of bytes for ctx (a memfd, charged rounded up), listed.
 * Caller holds fk_lock. */
CUresult fk_alloc_device(struct CUctx_st *c, size_t bytes, fk_alloc **out);
/* Pools (fakecuda_pool.c), caller holds fk_lock: a block of a pool freed
 * (cuMemFreeAsync, cuMemFree); a synchronisation (stream, event, context),
 * when each pool gives back what is over its release threshold. */
void fk_pool_block_free(fk_alloc *a);
void fk_pools_sync(void);
/* The device allocation starting at addr (any context), NULL if none. */
fk_alloc *fk_alloc_at(uint64_t addr);
/* A new record of kind for ctx (not yet listed), NULL without memory. */
fk_alloc *fk_alloc_new(int kind, struct CUctx_st *ctx);
/* Lists a; unlists and frees a (unmapping and uncharging what it holds). */
void fk_alloc_link(fk_alloc *a);
void fk_alloc_unlink_free(fk_alloc *a);

/* Loads a real binary image (fatbin, cubin) as a module of the current
 * context: its kernels are found by any name, and one with no host twin is
 * launched as a no-op. Takes fk_lock. */
CUresult fk_module_load_binary(CUmodule *m, const void *image);
/* 1 when image starts as a fatbin, its wrapper or an ELF cubin does. */
int fk_image_is_binary(const void *image);
/* What a module keeps of a binary image to check kernel names against: the
 * image itself for the runtime's registered wrapper (static data), else a
 * copy (*owned = 1), or NULL when its names cannot be read. */
const void *fk_image_keep(const void *image, int *owned);
struct fk_launch_args;
/* Stream capture (fakecuda_graph.c); callers hold fk_lock unless said.
 * fk_stream_work: 0 when work may be done on stream s at the call; when s
 * captures, invalidates the capture and answers 900 (901 once invalidated).
 * fk_capture_kernel: 1 when s captures and the launch was recorded (its
 * arguments copied by fn's layout; a kernel with a host twin whose
 * arguments cannot be copied: 900) or refused (*rc). fk_capture_host_fn (takes fk_lock): the same for a host
 * function, or 1 with the context's error in *rc. fk_capture_status: 0 not
 * capturing, 1 active, 2 invalidated, and the capture's id. */
CUresult fk_stream_work(CUstream s);
int fk_capture_kernel(CUstream s, const struct fk_launch_args *a, const fk_obj *fn, CUresult *rc);
int fk_capture_host_fn(CUstream s, CUhostFn fn, void *user, CUresult *rc);
/* An event record on a capturing stream: 1 when recorded as a node (or
 * refused, *rc), 0 when s does not capture. Caller holds fk_lock. */
int fk_capture_event(CUstream s, CUevent e, CUresult *rc);
int fk_capture_status(CUstream s, unsigned long long *id);
/* fk_capture_wait: cuStreamWaitEvent on a capture (s joins the capture
 * the event was recorded in, or merges a joined stream back): 1 when handled
 * (*rc), 0 when neither s captures nor e belongs to a live capture.
 * fk_capture_memset/fk_capture_copy: 1 when s captures and the work was
 * recorded as a node or refused (*rc). fk_capture_implicit: 1 when a
 * blocking stream (not CU_STREAM_NON_BLOCKING) of c captures (the legacy
 * stream would depend on it implicitly). fk_capture_live: 1 while the
 * capture with this id goes on. Caller holds fk_lock. */
int fk_capture_wait(CUstream s, fk_obj *ev, CUresult *rc);
int fk_capture_memset(CUstream s, uint64_t dst, uint32_t v, size_t n, unsigned width, CUresult *rc);
int fk_capture_copy(CUstream s, uint64_t dst, uint64_t src, size_t n, CUresult *rc);
int fk_capture_implicit(struct CUctx_st *c);
int fk_capture_live(unsigned long long id);
/* fk_graph_live (fakecuda_graph.c, fk_lock held): graph is live.
 * fk_graph_user_objects_gone (fakecuda_userobj.c, without fk_lock): a graph
 * being destroyed drops its user objects' references. */
int fk_graph_live(CUgraph graph);
void fk_graph_user_objects_gone(struct CUgraph_st *g);
#define FK_ERR_CAPTURED_EVENT ((CUresult)907) /* CUDA_ERROR_CAPTURED_EVENT */
void fk_capture_free(fk_obj *stream);
/* Calls fn(name, arg) for each kernel (global function) of a binary image's
 * cubin for the fake's architecture, until fn answers 0. -1 when the image
 * has no cubin the fake can read (none for sm_90 or below, or compressed
 * without the system's decompressor). */
int fk_image_kernels(const void *image, int (*fn)(const char *name, void *arg), void *arg);
/* The entry of a binary image of kind (2: ELF cubin, 1: PTX text) for the
 * fake's architecture, else the newest one below it: 1 and *elf, its size,
 * and *owned (free it) when it was decompressed; 0 when there is none. */
int fk_image_entry(const void *image, unsigned kind, const unsigned char **elf, size_t *elf_n,
                   unsigned char **owned);
/* Little-endian fields of an image (fatbin headers, ELF, .nv.info), read
 * without alignment assumptions; shared by fakecuda_globals.c and
 * fakecuda_params.c. */
static inline uint16_t fk_rd16(const unsigned char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
static inline uint32_t fk_rd32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline uint64_t fk_rd64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
/* Kernel parameters (fakecuda_params.c), caller holds fk_lock.
 * fk_params_check: a launch's arguments, given as kernelParams or as
 * `extra`'s packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE), read by
 * fn's parameter layout from its image (every 8-byte aligned word of a
 * buffer whose layout is unknown; nothing of a kernelParams array whose
 * layout is unknown). CUDA_ERROR_INVALID_VALUE for both forms at once or a
 * malformed `extra`; else 0, and *fault = 1 (the reason on stderr) when a
 * value points into device memory that is freed or not mapped with access.
 * FAKEGPU_CHECK_ARGS=0: no value is judged. fk_params_unpack: a twin's
 * kernelParams array pointing into `extra`'s buffer (free it), NULL with
 * CUDA_ERROR_INVALID_VALUE when the layout is unknown. fk_params_forget:
 * an image is freed, its layouts go. */
CUresult fk_params_check(const fk_obj *fn, void **params, void **extra, int *fault);
CUresult fk_params_unpack(const fk_obj *fn, void **extra, void ***out);
/* fk_params_pack: the arguments in either form as one packed buffer (owned
 * by the caller, NULL for none), for graph nodes; CUDA_ERROR_NOT_FOUND for
 * kernelParams of an unknown layout. */
CUresult fk_params_pack(const fk_obj *fn, void **params, void **extra, unsigned char **buf,
                        size_t *n);
void fk_params_forget(const void *image);
/* Freed device memory (fakecuda_freed.c), caller holds fk_lock:
 * fk_freed_unmap records [addr, addr+n) as freed and unmaps it (kept
 * reserved while in quarantine); fk_freed_note records a range whose memory
 * stays mapped (a pool block); fk_freed_holds: v lies in a freed range. */
void fk_freed_unmap(uint64_t addr, uint64_t n);
void fk_freed_note(uint64_t addr, uint64_t n);
int fk_freed_holds(uint64_t v);
/* Simulated time (fakecuda_simtime.c, FAKEGPU_KERNEL_US), caller holds
 * fk_lock except for fk_sim_sleep_until. Times are CLOCK_MONOTONIC ms.
 * fk_sim_launch: a kernel launched on s takes its time there;
 * fk_sim_record: when an event recorded on s now completes;
 * fk_sim_stream_done / fk_sim_ctx_done: when the work on s / on every
 * stream of c completes; fk_sim_wait_event: s's later work starts after an
 * event that completes at event_ms. */
int fk_sim_on(void);
double fk_sim_now(void);
void fk_sim_launch(const struct CUctx_st *c, CUstream s);
double fk_sim_record(const struct CUctx_st *c, CUstream s);
double fk_sim_stream_done(const struct CUctx_st *c, CUstream s);
double fk_sim_ctx_done(const struct CUctx_st *c);
void fk_sim_wait_event(const struct CUctx_st *c, CUstream s, double event_ms);
void fk_sim_sleep_until(double ms);
/* The first live stream, event, module or function (the list goes on with
 * ->next). Caller holds fk_lock. */
fk_obj *fk_obj_first(void);
/* 1 when addr lies in a live VMM reservation (mapped or not). */
int fk_vmm_reserved(uint64_t addr);
/* 1 when a binary image names kernel `name`, or may (compressed entries). */
int fk_image_may_hold(const void *image, const char *name);
/* Drops what fk_image_may_hold learnt of an image about to be freed. */
void fk_image_forget(const void *image);
/* The primary context's handle of dev (not retained). Holds fk_lock. */
struct CUctx_st *fk_primary_handle(CUdevice dev);
/* 1 when c is a context of this process (live or not). Holds no lock. */
int fk_ctx_known(const struct CUctx_st *c);
/* The context a stream argument belongs to: the current one for NULL and the
 * special handles, else the stream's; NULL if the stream is not valid.
 * Caller holds fk_lock. */
struct CUctx_st *fk_stream_ctx(CUstream s);
/* The function behind a launch handle: a CUfunction, or a CUkernel (which
 * the runtime passes to cuLaunchKernel as it is) resolved in ctx. Caller
 * holds fk_lock. NULL if neither. */
fk_obj *fk_launch_function(void *handle, struct CUctx_st *ctx);
/* One kernel launch, as every launch path (cuLaunchKernel, cuLaunchKernelEx,
 * cooperative launches, graph replay) hands it to fk_launch: the function
 * (CUfunction or CUkernel), grid and block (x, y, z each), dynamic shared
 * memory, stream, and the arguments either as kernelParams (params) or
 * packed in `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE/END), which
 * fk_params_check reads (both at once, a malformed extra: 1). fk_launch
 * takes fk_lock. */
typedef struct fk_launch_args {
  void *f;
  unsigned dims[6];
  unsigned shmem;
  CUstream s;
  void **params;
  void **extra;
} fk_launch_args;
CUresult fk_launch(const fk_launch_args *a);
/* The kernel a handle names, NULL if it is not one. */
struct fk_kernel *fk_kernel_check(void *h);
/* The object of kind owned by owner (a CUlibrary for modules, a CUkernel for
 * functions) in ctx, NULL if none; fk_objs_drop_owner frees every object
 * owned by owner (and the functions of such modules). Caller holds fk_lock. */
fk_obj *fk_obj_find_owned(int kind, const void *owner, const struct CUctx_st *ctx);
void fk_objs_drop_owner(const void *owner);
/* Sets o's owner and lists it for fk_obj_find_owned (-1 without memory). */
int fk_obj_set_owner(fk_obj *o, void *owner);
/* Device variables of a module in ctx (fakecuda_globals.c): the address and
 * size of `name` (either may be NULL), 500 if the image has no such
 * variable. The first call lays out and allocates all of them. Caller holds
 * fk_lock. fk_module_globals_free gives their memory back. */
CUresult fk_module_global(fk_obj *m, struct CUctx_st *ctx, const char *name, CUdeviceptr *dptr,
                          size_t *bytes);
void fk_module_globals_free(fk_obj *m);
/* cuFuncGetAttribute's answers, and whether a value may be set. */
/* A function's attribute; max_dyn is its dynamic shared memory limit
 * (0: the default). Settable: checks value; the caller keeps what it sets. */
CUresult fk_func_attribute(CUfunction_attribute attr, int *value, int max_dyn);
CUresult fk_func_attribute_settable(CUfunction_attribute attr, int value);
/* The dynamic shared memory a block of fn may use: what cuFuncSetAttribute /
 * cuKernelSetAttribute set (its kernel's, for a library kernel's function),
 * else 48 KiB. Caller holds fk_lock. */
int fk_func_max_dyn_smem(const fk_obj *fn);
/* A library kernel's image and name (*name NULL: not a kernel). Caller
 * holds fk_lock. */
const void *fk_kernel_image(void *kernel, const char **name);
/* A library kernel's limit as cuKernelSetAttribute set it (0: default). */
int fk_kernel_max_dyn_smem(const void *kernel);

/* The first listed allocation (the list goes on with ->next). Caller holds
 * fk_lock. */
fk_alloc *fk_alloc_first(void);

/* Context-local storage (the runtime's private table): fk_cls_teardown
 * (fk_lock held) sets aside the entries of a context being torn down;
 * fk_cls_run_due (without fk_lock) runs their destructors. */
void fk_cls_teardown(struct CUctx_st *ctx);
void fk_cls_run_due(void);

/* Texture and surface objects (fakecuda_texture.c); fk_lock held: the
 * objects of a context being torn down go. fk_array_flags (fakecuda_array.c,
 * fk_lock held): 1 and the array's creation flags if h is a live array. */
void fk_texobj_ctx_gone(struct CUctx_st *ctx);
/* fakecuda_texref.c, fk_lock held: a context's texture references go. */
void fk_texref_ctx_gone(struct CUctx_st *ctx);
/* fakecuda_mipmap.c, fk_lock held: fk_mipmap_desc is 1 (and copies the
 * descriptor to d unless NULL) if h is a live mipmapped array;
 * fk_mipmap_ctx_gone: a context's mipmapped arrays go. */
int fk_mipmap_desc(const void *h, CUDA_ARRAY3D_DESCRIPTOR *d);
void fk_mipmap_ctx_gone(struct CUctx_st *ctx);
/* fakecuda_advise.c, takes fk_lock: a prefetch of [p, p+n) to dev (-1: the
 * host) is kept as the pages' last prefetch location if they are managed. */
void fk_advise_prefetched(CUdeviceptr p, size_t n, int dev);
/* fakecuda_device.c, fk_lock held: a context's core dump settings go. */
void fk_coredump_ctx_gone(struct CUctx_st *ctx);
int fk_array_flags(CUarray h, unsigned *flags);
/* fakecuda_array.c: bytes of one channel of a CUarray_format (plain 8-, 16-
 * and 32-bit integers, half, float), 0 for any other. */
size_t fk_format_bytes(int format);
/* fakecuda_module.c: the whole file at path in *buf (NUL-terminated, the
 * caller frees it) and its length in *n; CUDA_ERROR_FILE_NOT_FOUND (301)
 * when it cannot be opened, CUDA_ERROR_OUT_OF_MEMORY when not read. */
CUresult fk_read_file(const char *path, char **buf, long *n);
#define FK_ATTR_PCI_DOMAIN_ID 50

/* FAKEGPU_TRACE=1: one line on stderr per cuGetProcAddress and
 * cuGetExportTable question and its answer (fakecuda_procaddr.c). */
int fk_trace_on(void);
void fk_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Poison freed device memory (FAKEGPU_POISON=1) so late readers see it. */
#define FK_POISON_BYTE 0xdb

#endif
