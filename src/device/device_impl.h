/* Inside the device room: the backend interface and the ebb_device struct.
 * device.c owns what every backend shares (spec parsing, the segment
 * registry, locking); each backend (cpu_backend.c, cuda_backend.c) fills one
 * ebb_device_ops table. */
#ifndef EBB_DEVICE_DEVICE_IMPL_H
#define EBB_DEVICE_DEVICE_IMPL_H

#include <pthread.h>

#include "base/text.h" /* ebb_fmt_bytes */
#include "device/cuda_api.h"
#include "device/device.h"
#include "device/kernel_twin.h"

typedef struct ebb_device_ops {
  void (*destroy)(ebb_device *dev); /* frees impl; segments are gone already */
  int (*activate)(ebb_device *dev);
  int (*ctx_active)(const ebb_device *dev);
  int (*ctx_release)(ebb_device *dev);
  int (*mem_info)(ebb_device *dev, ebb_dev_meminfo *out);
  int (*process_used)(ebb_device *dev, pid_t pid, uint64_t *bytes);
  int (*granularity)(ebb_device *dev, size_t *out);
  int (*supports_vmm)(ebb_device *dev);
  int (*seg_alloc)(ebb_device *dev, size_t size, ebb_seg_kind kind, ebb_dseg *out);
  /* quiet: called from close on a device whose context is gone; must not
   * create one */
  int (*seg_free)(ebb_device *dev, ebb_dseg *seg, int quiet);
  int (*seg_park)(ebb_device *dev, ebb_dseg *seg);
  int (*seg_wake)(ebb_device *dev, ebb_dseg *seg);
  int (*host_alloc)(ebb_device *dev, size_t size, void **out);
  int (*host_free)(ebb_device *dev, void *p);
  int (*copy_htod)(ebb_device *dev, uint64_t dst, const void *src, size_t n);
  int (*copy_dtoh)(ebb_device *dev, void *dst, uint64_t src, size_t n);
  int (*copy_dtod)(ebb_device *dev, uint64_t dst, uint64_t src, size_t n);
  int (*memset8)(ebb_device *dev, uint64_t dst, unsigned char v, size_t n);
  int (*synchronize)(ebb_device *dev);
  int (*stream_create)(ebb_device *dev, void **out); /* dev->mu held */
  void (*stream_destroy)(ebb_device *dev, void *s);  /* dev->mu held */
  int (*stream_sync)(ebb_device *dev, void *s);
  int (*copy_htod_async)(ebb_device *dev, uint64_t dst, const void *src, size_t n, void *s);
  int (*copy_dtoh_async)(ebb_device *dev, void *dst, uint64_t src, size_t n, void *s);
  int (*module_load)(ebb_device *dev, const void *image, void **out);
  void (*module_unload)(ebb_device *dev, void *mod);
  int (*kernel)(ebb_device *dev, void *mod, const char *name, void **out);
  int (*launch)(ebb_device *dev, void *fn, const ebb_launch_dims *dims, void **params);
} ebb_device_ops;

struct ebb_device {
  const ebb_device_ops *ops;
  ebb_device_type kind;
  int ordinal;          /* CUDA device number; -1 for the CPU */
  char label[16];       /* "cpu" / "cuda:N" */
  char name[128];
  char note[512];       /* why auto fell back to the CPU, else "" */
  uint64_t total;
  pthread_mutex_t mu;   /* guards the registry and the backend's state */
  ebb_dseg *segs;       /* every segment held, parked ones too */
  size_t nsegs, capsegs;
  size_t nhost;         /* live pinned host buffers */
  size_t nmodules;      /* loaded modules */
  size_t nstreams;      /* live streams */
  void *impl;           /* backend state */
};

/* Number of registered segments that hold physical memory (not parked). */
size_t ebb_device_mapped_segments(const ebb_device *dev);

/* Backend constructors: fill dev (ops, name, total, impl). */
int ebb_cpu_backend_open(ebb_device *dev);
int ebb_cuda_backend_open(ebb_device *dev, int ordinal);

#endif
