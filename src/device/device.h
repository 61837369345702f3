/* How ebb reaches a GPU. One dev_device per selected device; a CUDA backend
 * (driver API through dlopen, cuda_backend.c) and a CPU backend (host memory,
 * cpu_backend.c) behind this one interface.
 *
 * Laziness rule: opening a "cpu" device never loads the driver. Opening a
 * CUDA device loads libcuda and calls cuInit but creates no context; the
 * primary context is retained on the first call that needs it
 * (dev_activate, or any allocation / copy / launch). Queries and
 * cleanup (mem_info, ctx_release, seg_free of nothing) on a device whose
 * context is not active never create one (the is-initialized guard).
 *
 * Threads: every function may be called from any thread; calls that touch the
 * driver make the device's context current on the calling thread first.
 * Never fork after a CUDA device is opened (or dev_device_probe ran): cuInit
 * has been called and the driver does not survive fork in the child. ebb
 * starts workers with posix_spawn (fork+exec), never a bare fork. */
#ifndef EBB_DEVICE_DEVICE_H
#define EBB_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ebb/error.h"

typedef enum { EBB_DEVICE_CPU = 0, EBB_DEVICE_CUDA = 1 } dev_type;
typedef struct dev_device dev_device;

/* Opens "auto" (the CUDA device with the most free memory (NVML) if the
 * driver loads and reports one, else the CPU device), "cpu", "cuda" (= cuda:0) or "cuda:N". *out is owned by the
 * caller; close it with dev_close. Errors name the spec and why:
 * EBB_ENOLIB (no libcuda / the toolkit's stub, CUDA error 34), EBB_ENODEV
 * (CUDA error 100 or N out of range), EBB_EINVAL (bad spec). */
int dev_open(const char *spec, dev_device **out);
/* Frees every segment still held, releases the context if held. NULL: no-op. */
void dev_close(dev_device *dev);

dev_type dev_kind_of(const dev_device *dev);
/* "cpu" or "cuda:N"; valid while dev lives. */
const char *dev_device_label(const dev_device *dev);
/* The device's name ("NVIDIA H200", "fakegpu ..." or the CPU model). */
const char *dev_name(const dev_device *dev);
uint64_t dev_total_bytes(const dev_device *dev);
/* "auto" that fell back to the CPU: why (the CUDA open's message), else NULL.
 * Valid while dev lives. */
const char *dev_note(const dev_device *dev);
/* The CUDA device number; -1 for the CPU device. */
int dev_ordinal(const dev_device *dev);

/* --- context ------------------------------------------------------------ */
/* Retains the primary context once (first call) and makes it current on the
 * calling thread. Idempotent. CPU device: no-op. */
int dev_activate(dev_device *dev);
/* 1 when this process holds the device's primary context. */
int dev_ctx_active(const dev_device *dev);
/* Gives the context back (primary context release) so that the process holds
 * 0 bytes on the device. Fails with EBB_EBUSY if segments are still mapped or
 * pinned host buffers, streams or modules are held (the message counts each). Parked
 * VMM segments do not block it: they hold no physical memory, and wake
 * retains the context again. (That a reserved range survives the context on
 * a real driver is checked by scripts/gpu-check.sh, not yet on real hardware.)
 * No-op when the context is not active. */
int dev_ctx_release(dev_device *dev);

/* --- memory information (never initialises anything) --------------------- */
typedef enum {
  EBB_MEMINFO_NONE,
  EBB_MEMINFO_DRIVER,
  EBB_MEMINFO_NVML,
  EBB_MEMINFO_HOST
} dev_meminfo_source;
typedef struct dev_meminfo {
  uint64_t free_bytes, total_bytes;
  dev_meminfo_source source;
} dev_meminfo;
/* With an active context: cuMemGetInfo. Without: NVML if it loads, else
 * source NONE. CPU: host memory (sysinfo). */
int dev_mem_info(dev_device *dev, dev_meminfo *out);
/* Bytes the driver says process pid holds on this device, context included
 * (NVML per-process usage). EBB_EUNSUPPORTED if NVML is unavailable. */
int dev_process_used(dev_device *dev, pid_t pid, uint64_t *bytes);

/* --- segments: memory taken from the driver -------------------------------- */
typedef enum { EBB_SEG_PLAIN = 0, EBB_SEG_VMM = 1 } dev_seg_kind;
typedef struct dev_dseg {
  uint64_t addr; /* device address (CPU device: host address) */
  size_t size;   /* a multiple of the granularity */
  dev_seg_kind kind;
  uint64_t handle; /* VMM physical allocation handle; 0 while parked */
  int parked;      /* VMM: physical memory released, address range kept */
} dev_dseg;

/* The allocation granularity (CUDA: cuMemGetAllocationGranularity, minimum;
 * CPU: page size). Activates the context on CUDA. */
int dev_granularity(dev_device *dev, size_t *out);
/* 1 when the device supports VMM (CPU device: 1, emulated with mmap). */
int dev_supports_vmm(dev_device *dev);
/* Takes size bytes (rounded up to the granularity) from the driver. kind VMM:
 * reserve + create + map + set access. EBB_EOOM on out of memory (with
 * message), nothing held on any failure. */
int dev_seg_alloc(dev_device *dev, size_t size, dev_seg_kind kind, dev_dseg *out);
/* Gives a segment back to the driver (unmap, release, free the range). */
int dev_seg_free(dev_device *dev, dev_dseg *seg);
/* VMM only: release the physical memory, keep the address range reserved. */
int dev_seg_park(dev_device *dev, dev_dseg *seg);
/* VMM only: new physical memory mapped at the same address. */
int dev_seg_wake(dev_device *dev, dev_dseg *seg);

/* --- pinned host memory --------------------------------------------------- */
/* CUDA: cuMemHostAlloc (activates the context). CPU: page-aligned malloc. */
int dev_host_alloc(dev_device *dev, size_t size, void **out);
int dev_host_free(dev_device *dev, void *p);

/* --- copies and kernels --------------------------------------------------- */
int dev_copy_htod(dev_device *dev, uint64_t dst, const void *src, size_t n);
int dev_copy_dtoh(dev_device *dev, void *dst, uint64_t src, size_t n);
int dev_copy_dtod(dev_device *dev, uint64_t dst, uint64_t src, size_t n);
int dev_memset8(dev_device *dev, uint64_t dst, unsigned char v, size_t n);
int dev_synchronize(dev_device *dev);

/* --- streams: copies queued in order, overlapping the host ---------------- */
/* An ordered queue of copies. CUDA: a stream of the device's context (this
 * activates it); the copies return once queued, and host memory handed to
 * them must stay valid and unchanged until dev_stream_sync (they run
 * at the link's bandwidth only from pinned memory: dev_host_alloc).
 * CPU: copies run at the call. Destroy every stream before the context goes:
 * dev_ctx_release fails with EBB_EBUSY while one lives. *out is owned
 * by the caller. */
typedef struct dev_stream dev_stream;
int dev_stream_create(dev_device *dev, dev_stream **out);
/* Waits for nothing (sync first). NULL: no-op. */
void dev_stream_destroy(dev_device *dev, dev_stream *s);
/* Returns once every copy queued on s is done; a failed copy's error shows
 * here at the latest. */
int dev_stream_sync(dev_device *dev, dev_stream *s);
int dev_copy_htod_async(dev_device *dev, uint64_t dst, const void *src, size_t n, dev_stream *s);
int dev_copy_dtoh_async(dev_device *dev, void *dst, uint64_t src, size_t n, dev_stream *s);

/* --- events: how far a stream's work has come ------------------------------ */
/* For stream-ordered reuse in the memory room. stream is a framework's raw
 * stream handle (CUstream / cudaStream_t of the primary context) as an
 * integer, 0 the legacy default stream. Records an event on it: *ev NULL
 * makes a new one (no timing), else *ev is recorded again. Query: 1 when
 * everything queued on the stream before the record has completed, 0 when
 * not yet, < 0 on an error. Wait: blocks until then. The CPU device's
 * events are complete at once. Destroy every event before the context goes
 * (NULL: no-op). */
int dev_event_record(dev_device *dev, uint64_t stream, void **ev);
int dev_event_query(dev_device *dev, void *ev);
int dev_event_wait(dev_device *dev, void *ev);
void dev_event_destroy(dev_device *dev, void *ev);

typedef struct dev_module dev_module;
typedef struct dev_kernel dev_kernel;
/* image: a fatbin/PTX that nvcc built (may be NULL on the fake or when no
 * toolkit was present at build time: the fake resolves kernels by name to
 * host twins). */
int dev_module_load(dev_device *dev, const void *image, dev_module **out);
void dev_module_unload(dev_device *dev, dev_module *m);
/* *out is owned by the module: valid until dev_module_unload(m). Look
 * kernels up from one thread per module (launching them is thread-safe). */
int dev_device_kernel(dev_device *dev, dev_module *m, const char *name, dev_kernel **out);
int dev_launch(dev_device *dev, dev_kernel *k, const unsigned grid[3], const unsigned block[3],
               unsigned shared_bytes, void **params);

/* --- probing (for `ebb devices` / `ebb version`) --------------------------- */
typedef struct dev_probe_device {
  int index;
  char name[128];
  char uuid[48];
  int cc_major, cc_minor;
  uint64_t total_bytes, free_bytes; /* free from NVML when it answers, else 0 */
  int vmm;
} dev_probe_device;
typedef struct dev_probe {
  int driver_loaded;     /* libcuda was found and cuInit succeeded */
  char driver_path[512]; /* where it came from (EBB_LIBCUDA or the default) */
  int driver_version;    /* cuDriverGetVersion, e.g. 13000 */
  int nvml_loaded;
  char nvml_driver[64]; /* nvmlSystemGetDriverVersion */
  char why[512];        /* when no driver: why (missing, stub, no device) */
  int ndevices;
  dev_probe_device devices[16];
} dev_probe;
/* Loads the driver (calls cuInit) and NVML and fills *out; creates no
 * context. Always fills why on failure and returns 0 if a report was made. */
int dev_device_probe(dev_probe *out);

#endif
