/* Inside the device room: the backend interface and the dev_device struct.
 * device.c owns what every backend shares (spec parsing, the segment
 * registry, locking); each backend (cpu_backend.c, cuda_backend.c) fills one
 * dev_ops table. */
#ifndef EBB_DEVICE_DEVICE_IMPL_H
#define EBB_DEVICE_DEVICE_IMPL_H

#include <pthread.h>

#include "base/text.h" /* base_fmt_bytes */
#include "device/cuda_api.h"
#include "device/device.h"
#include "device/kernel_twin.h"

typedef struct dev_ops {
  void (*destroy)(dev_device *dev); /* frees impl; segments are gone already */
  int (*activate)(dev_device *dev);
  int (*ctx_active)(const dev_device *dev);
  int (*ctx_release)(dev_device *dev);
  int (*mem_info)(dev_device *dev, dev_meminfo *out);
  int (*process_used)(dev_device *dev, pid_t pid, uint64_t *bytes);
  int (*granularity)(dev_device *dev, size_t *out);
  int (*supports_vmm)(dev_device *dev);
  int (*seg_alloc)(dev_device *dev, size_t size, dev_seg_kind kind, dev_dseg *out);
  /* quiet: called from close on a device whose context is gone; must not
   * create one */
  int (*seg_free)(dev_device *dev, dev_dseg *seg, int quiet);
  int (*seg_park)(dev_device *dev, dev_dseg *seg);
  int (*seg_wake)(dev_device *dev, dev_dseg *seg);
  int (*host_alloc)(dev_device *dev, size_t size, void **out);
  int (*host_free)(dev_device *dev, void *p);
  int (*copy_htod)(dev_device *dev, uint64_t dst, const void *src, size_t n);
  int (*copy_dtoh)(dev_device *dev, void *dst, uint64_t src, size_t n);
  int (*copy_dtod)(dev_device *dev, uint64_t dst, uint64_t src, size_t n);
  int (*memset8)(dev_device *dev, uint64_t dst, unsigned char v, size_t n);
  int (*synchronize)(dev_device *dev);
  int (*stream_create)(dev_device *dev, void **out); /* dev->mu held */
  void (*stream_destroy)(dev_device *dev, void *s);  /* dev->mu held */
  int (*stream_sync)(dev_device *dev, void *s);
  int (*copy_htod_async)(dev_device *dev, uint64_t dst, const void *src, size_t n, void *s);
  int (*copy_dtoh_async)(dev_device *dev, void *dst, uint64_t src, size_t n, void *s);
  /* events (a stream's point of progress): stream is the raw handle */
  int (*event_record)(dev_device *dev, uint64_t stream, void **ev); /* *ev NULL: new */
  int (*event_query)(dev_device *dev, void *ev);                    /* 1 done, 0 not yet */
  int (*event_wait)(dev_device *dev, void *ev);
  void (*event_destroy)(dev_device *dev, void *ev);
  int (*module_load)(dev_device *dev, const void *image, void **out);
  void (*module_unload)(dev_device *dev, void *mod);
  int (*kernel)(dev_device *dev, void *mod, const char *name, void **out);
  int (*launch)(dev_device *dev, void *fn, const dev_launch_dims *dims, void **params);
} dev_ops;

struct dev_device {
  const dev_ops *ops;
  dev_type kind;
  int ordinal;    /* CUDA device number; -1 for the CPU */
  char label[16]; /* "cpu" / "cuda:N" */
  char name[128];
  char note[512]; /* why auto fell back to the CPU, else "" */
  uint64_t total;
  pthread_mutex_t mu; /* guards the registry and the backend's state */
  dev_dseg *segs;     /* every segment held, parked ones too */
  size_t nsegs, capsegs;
  size_t nhost;    /* live pinned host buffers */
  size_t nmodules; /* loaded modules */
  size_t nstreams; /* live streams */
  void *impl;      /* backend state */
};


/* Backend constructors: fill dev (ops, name, total, impl). */
int dev_cpu_backend_open(dev_device *dev);
int dev_cuda_backend_open(dev_device *dev, int ordinal);

#endif
