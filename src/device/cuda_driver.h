/* The CUDA driver, loaded at run time (driver_loader.c). One process-wide
 * table of entry points generated from EBB_CUDA_ENTRY_POINTS (cuda_api.h).
 *
 * Nothing here runs until a CUDA device is opened or probed: opening the CPU
 * device never reaches this file. Never fork after dev_cuda_driver_get()
 * succeeded (cuInit was called); start children with posix_spawn. */
#ifndef EBB_DEVICE_CUDA_DRIVER_H
#define EBB_DEVICE_CUDA_DRIVER_H

#include "device/cuda_api.h"
#include "ebb/error.h"

typedef struct dev_cuda_fns {
#define EBB_CUDA_FN_FIELD_(name, sym, ver, params) CUresult(*name) params;
  EBB_CUDA_ENTRY_POINTS(EBB_CUDA_FN_FIELD_)
#undef EBB_CUDA_FN_FIELD_
} dev_cuda_fns;

#define EBB_CUDA_COUNT_(name, sym, ver, params) +1
enum { EBB_CUDA_NENTRIES = 0 EBB_CUDA_ENTRY_POINTS(EBB_CUDA_COUNT_) };
#undef EBB_CUDA_COUNT_

/* How one entry point was found. */
typedef enum {
  EBB_CUDA_RES_MISSING = 0,
  EBB_CUDA_RES_PROCADDR = 1,
  EBB_CUDA_RES_DLSYM = 2
} dev_cuda_res;

typedef struct dev_cuda_driver {
  void *lib;          /* dlopen handle; never closed once loaded */
  char path[512];     /* what was dlopen'ed (EBB_LIBCUDA or the default) */
  char found_at[512]; /* the file it resolved to (dladdr), when known */
  int has_get_proc;   /* cuGetProcAddress_v2 was exported */
  int n_procaddr, n_dlsym, n_missing;
  int version;  /* cuDriverGetVersion */
  int ndevices; /* cuDeviceGetCount */
  dev_cuda_fns fn;
  dev_cuda_res how[EBB_CUDA_NENTRIES]; /* per entry, in table order */
} dev_cuda_driver;

/* Number of entries in EBB_CUDA_ENTRY_POINTS and their base names. */
int dev_cuda_entry_count(void);
const char *dev_cuda_entry_name(int i);

/* Loads path (NULL: EBB_LIBCUDA, else "libcuda.so.1") into *out, resolves the
 * table, calls cuInit(0) and cuDeviceGetCount. Not cached: each call dlopens
 * again (the same handle when already loaded). On failure the library is
 * closed and the message names the path: EBB_ENOLIB (missing, not a driver,
 * the toolkit's stub: CUDA error 34), EBB_ENODEV (error 100 or 0 devices),
 * EBB_EDRIVER (anything else). */
int dev_cuda_driver_load(const char *path, dev_cuda_driver *out);

/* The process's driver: loaded on the first call, then the same pointer for
 * the process's life (a failure is not remembered, the next call tries again).
 * Thread-safe. The pointer is owned by this file. */
int dev_cuda_driver_get(const dev_cuda_driver **out);
/* 1 when dev_cuda_driver_get has succeeded in this process; never loads. */
int dev_cuda_driver_is_loaded(void);
/* The path ebb will load: EBB_LIBCUDA or "libcuda.so.1". */
const char *dev_cuda_driver_path(void);

/* "CUDA_ERROR_OUT_OF_MEMORY" from the driver's cuGetErrorName when it
 * answers, else from ebb's own table; never NULL. drv may be NULL. */
const char *dev_cuda_errname(const dev_cuda_driver *drv, CUresult r);
/* EBB_E code for a CUresult (OOM -> EBB_EOOM, 100/101 -> EBB_ENODEV, ...). */
int dev_cuda_code(CUresult r);
/* Sets the message "<fn> failed on <label>: <NAME> (<r>)" plus extra (may be
 * NULL) and returns the translated code. r must not be CUDA_SUCCESS. */
int dev_cuda_fail(const dev_cuda_driver *drv, CUresult r, const char *fn, const char *label,
                  const char *extra);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", the form NVML and nvidia-smi use. */
void dev_cuda_format_uuid(const CUuuid *u, char *buf, size_t len);

#endif
