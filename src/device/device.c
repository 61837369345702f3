/* The device front: spec parsing ("auto", "cpu", "cuda", "cuda:N"), the
 * registry of segments every backend shares, and dispatch to the backend. */
#include "device/device_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

struct dev_module {
  void *h;
  dev_kernel **kernels; /* owned: freed by dev_module_unload */
  size_t nkernels;
};
struct dev_kernel {
  void *fn;
  char name[128];
};
struct dev_stream {
  void *h;
};

/* Parses "cuda" / "cuda:N"; -1 when spec is not a CUDA spec, -2 when malformed. */
static int parse_cuda(const char *spec) {
  if (!strcmp(spec, "cuda"))
    return 0;
  if (strncmp(spec, "cuda:", 5))
    return -1;
  const char *p = spec + 5;
  if (*p < '0' || *p > '9')
    return -2;
  errno = 0;
  char *end;
  long n = strtol(p, &end, 10);
  if (*end || errno || n > 1024)
    return -2;
  return (int)n;
}

static dev_device *dev_new(void) {
  dev_device *dev = calloc(1, sizeof *dev);
  if (!dev)
    return NULL;
  pthread_mutex_init(&dev->mu, NULL);
  dev->ordinal = -1;
  return dev;
}

static void dev_free(dev_device *dev) {
  pthread_mutex_destroy(&dev->mu);
  free(dev->segs);
  free(dev);
}

static int open_cpu(dev_device **out) {
  dev_device *dev = dev_new();
  if (!dev)
    return ebb_seterr(EBB_ENOMEM, "out of host memory opening the CPU device");
  int rc = dev_cpu_backend_open(dev);
  if (rc) {
    dev_free(dev);
    return rc;
  }
  *out = dev;
  return 0;
}

static int open_cuda(int ordinal, dev_device **out) {
  dev_device *dev = dev_new();
  if (!dev)
    return ebb_seterr(EBB_ENOMEM, "out of host memory opening cuda:%d", ordinal);
  int rc = dev_cuda_backend_open(dev, ordinal);
  if (rc) {
    dev_free(dev);
    return rc;
  }
  *out = dev;
  return 0;
}

/* "auto": the CUDA device with the most free memory as NVML (the driver's
 * own figure, other processes included) reports it, the lowest number on a
 * tie; 0 when there is one device, no driver or no NVML (open then says why). */
static int auto_ordinal(void) {
  dev_probe *p = malloc(sizeof *p);
  if (!p)
    return 0;
  int best = 0;
  if (dev_device_probe(p) == 0 && p->driver_loaded && p->ndevices > 1 && p->nvml_loaded) {
    for (int i = 1; i < p->ndevices; i++)
      if (p->devices[i].free_bytes > p->devices[best].free_bytes)
        best = i;
    char fb[32], tb[32];
    base_log(EBB_LOG_INFO, "device",
             "auto: cuda:%d has the most free memory (%s of %s; %d devices)", best,
             base_fmt_bytes(p->devices[best].free_bytes, fb, sizeof fb),
             base_fmt_bytes(p->devices[best].total_bytes, tb, sizeof tb), p->ndevices);
  }
  free(p);
  return best;
}

int dev_open(const char *spec, dev_device **out) {
  if (!out)
    return ebb_seterr(EBB_EINVAL, "dev_open: out is NULL");
  *out = NULL;
  if (!spec || !*spec || !strcmp(spec, "auto")) {
    int rc = open_cuda(auto_ordinal(), out);
    if (rc == 0)
      return 0;
    if (rc == EBB_ENOMEM)
      return rc;
    char why[512];
    snprintf(why, sizeof why, "%s", ebb_errmsg());
    rc = open_cpu(out);
    if (rc)
      return rc;
    snprintf((*out)->note, sizeof(*out)->note, "%s", why);
    base_log(EBB_LOG_INFO, "device", "auto: no usable CUDA device (%s); using the CPU device", why);
    ebb_clearerr();
    return 0;
  }
  if (!strcmp(spec, "cpu"))
    return open_cpu(out);
  int n = parse_cuda(spec);
  if (n >= 0) {
    int rc = open_cuda(n, out);
    return rc ? ebb_errctx(rc, "device '%s': ", spec) : 0;
  }
  return ebb_seterr(EBB_EINVAL, "bad device '%s': expected auto, cpu, cuda or cuda:N", spec);
}

void dev_close(dev_device *dev) {
  if (!dev)
    return;
  pthread_mutex_lock(&dev->mu);
  /* Mapped segments exist only with an active context, so freeing them
   * creates nothing; parked ones are freed quietly (no context made). */
  for (size_t i = dev->nsegs; i-- > 0;) {
    if (dev->ops->seg_free(dev, &dev->segs[i], 1))
      base_log(EBB_LOG_WARN, "device", "%s: freeing a segment at close: %s", dev->label,
               ebb_errmsg());
  }
  dev->nsegs = 0;
  if (dev->ops->ctx_release(dev))
    base_log(EBB_LOG_WARN, "device", "%s: releasing the context at close: %s", dev->label,
             ebb_errmsg());
  pthread_mutex_unlock(&dev->mu);
  dev->ops->destroy(dev);
  dev_free(dev);
}

dev_type dev_kind_of(const dev_device *dev) { return dev->kind; }
const char *dev_device_label(const dev_device *dev) { return dev->label; }
const char *dev_name(const dev_device *dev) { return dev->name; }
uint64_t dev_total_bytes(const dev_device *dev) { return dev->total; }
const char *dev_note(const dev_device *dev) { return dev->note[0] ? dev->note : NULL; }
int dev_ordinal(const dev_device *dev) { return dev->ordinal; }

int dev_ctx_active(const dev_device *dev) { return dev->ops->ctx_active(dev); }

int dev_activate(dev_device *dev) {
  pthread_mutex_lock(&dev->mu);
  int rc = dev->ops->activate(dev);
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

/* Number of registered segments that hold physical memory (not parked). */
static size_t dev_mapped_segments(const dev_device *dev) {
  size_t n = 0;
  for (size_t i = 0; i < dev->nsegs; i++)
    n += !dev->segs[i].parked;
  return n;
}

int dev_ctx_release(dev_device *dev) {
  pthread_mutex_lock(&dev->mu);
  size_t mapped = dev_mapped_segments(dev);
  int rc;
  if (dev->kind == EBB_DEVICE_CUDA && (mapped || dev->nhost || dev->nmodules || dev->nstreams)) {
    rc = ebb_seterr(EBB_EBUSY,
                    "cannot release the context of %s: it still holds %zu mapped segments, "
                    "%zu pinned host buffers, %zu streams and %zu modules",
                    dev->label, mapped, dev->nhost, dev->nstreams, dev->nmodules);
  } else {
    rc = dev->ops->ctx_release(dev);
  }
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

int dev_mem_info(dev_device *dev, dev_meminfo *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&dev->mu);
  int rc = dev->ops->mem_info(dev, out);
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

int dev_process_used(dev_device *dev, pid_t pid, uint64_t *bytes) {
  *bytes = 0;
  return dev->ops->process_used(dev, pid, bytes);
}

int dev_granularity(dev_device *dev, size_t *out) {
  pthread_mutex_lock(&dev->mu);
  int rc = dev->ops->granularity(dev, out);
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

int dev_supports_vmm(dev_device *dev) { return dev->ops->supports_vmm(dev); }

static dev_dseg *find_seg(dev_device *dev, uint64_t addr) {
  for (size_t i = 0; i < dev->nsegs; i++)
    if (dev->segs[i].addr == addr)
      return &dev->segs[i];
  return NULL;
}

int dev_seg_alloc(dev_device *dev, size_t size, dev_seg_kind kind, dev_dseg *out) {
  memset(out, 0, sizeof *out);
  if (size == 0)
    return ebb_seterr(EBB_EINVAL, "%s: a segment of 0 bytes", dev->label);
  if (kind != EBB_SEG_PLAIN && kind != EBB_SEG_VMM)
    return ebb_seterr(EBB_EINVAL, "%s: unknown segment kind %d", dev->label, (int)kind);
  pthread_mutex_lock(&dev->mu);
  int rc = 0;
  if (dev->nsegs == dev->capsegs) {
    size_t cap = dev->capsegs ? dev->capsegs * 2 : 16;
    dev_dseg *s = realloc(dev->segs, cap * sizeof *s);
    if (!s) {
      rc = ebb_seterr(EBB_ENOMEM, "out of host memory tracking segments of %s", dev->label);
      goto out;
    }
    dev->segs = s;
    dev->capsegs = cap;
  }
  rc = dev->ops->seg_alloc(dev, size, kind, out);
  if (rc == 0)
    dev->segs[dev->nsegs++] = *out;
out:
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

/* The device's record of the segment at addr, or EBB_EINVAL naming the address. dev->mu held. */
static int known_seg(dev_device *dev, uint64_t addr, dev_dseg **out) {
  *out = find_seg(dev, addr);
  if (!*out)
    return ebb_seterr(EBB_EINVAL, "%s: no segment at 0x%llx", dev->label, (unsigned long long)addr);
  return 0;
}

int dev_seg_free(dev_device *dev, dev_dseg *seg) {
  pthread_mutex_lock(&dev->mu);
  int rc;
  dev_dseg *s;
  if ((rc = known_seg(dev, seg->addr, &s)))
    goto out;
  rc = dev->ops->seg_free(dev, s, 0);
  if (rc == 0) {
    *s = dev->segs[--dev->nsegs];
    memset(seg, 0, sizeof *seg);
  }
out:
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

static int park_or_wake(dev_device *dev, dev_dseg *seg, int park) {
  pthread_mutex_lock(&dev->mu);
  dev_dseg *s;
  int rc = known_seg(dev, seg->addr, &s);
  if (rc == 0 && s->kind != EBB_SEG_VMM)
    rc = ebb_seterr(EBB_EINVAL,
                    "%s: the segment at 0x%llx is not a VMM segment; only VMM "
                    "segments can be parked",
                    dev->label, (unsigned long long)s->addr);
  else if (rc == 0 && s->parked != park) /* else already so */
    rc = park ? dev->ops->seg_park(dev, s) : dev->ops->seg_wake(dev, s);
  if (s)
    *seg = *s;
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

int dev_seg_park(dev_device *dev, dev_dseg *seg) { return park_or_wake(dev, seg, 1); }
int dev_seg_wake(dev_device *dev, dev_dseg *seg) { return park_or_wake(dev, seg, 0); }

int dev_host_alloc(dev_device *dev, size_t size, void **out) {
  *out = NULL;
  pthread_mutex_lock(&dev->mu);
  int rc = dev->ops->host_alloc(dev, size, out);
  dev->nhost += rc == 0;
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

int dev_host_free(dev_device *dev, void *p) {
  if (!p)
    return 0;
  pthread_mutex_lock(&dev->mu);
  int rc = dev->ops->host_free(dev, p);
  if (rc == 0 && dev->nhost)
    dev->nhost--;
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

int dev_copy_htod(dev_device *dev, uint64_t dst, const void *src, size_t n) {
  return n ? dev->ops->copy_htod(dev, dst, src, n) : 0;
}
int dev_copy_dtoh(dev_device *dev, void *dst, uint64_t src, size_t n) {
  return n ? dev->ops->copy_dtoh(dev, dst, src, n) : 0;
}
int dev_copy_dtod(dev_device *dev, uint64_t dst, uint64_t src, size_t n) {
  return n ? dev->ops->copy_dtod(dev, dst, src, n) : 0;
}
int dev_memset8(dev_device *dev, uint64_t dst, unsigned char v, size_t n) {
  return n ? dev->ops->memset8(dev, dst, v, n) : 0;
}
int dev_synchronize(dev_device *dev) { return dev->ops->synchronize(dev); }

int dev_stream_create(dev_device *dev, dev_stream **out) {
  *out = NULL;
  dev_stream *s = calloc(1, sizeof *s);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "out of host memory creating a stream on %s", dev->label);
  pthread_mutex_lock(&dev->mu);
  int rc = dev->ops->stream_create(dev, &s->h);
  dev->nstreams += rc == 0;
  pthread_mutex_unlock(&dev->mu);
  if (rc) {
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

void dev_stream_destroy(dev_device *dev, dev_stream *s) {
  if (!s)
    return;
  pthread_mutex_lock(&dev->mu);
  dev->ops->stream_destroy(dev, s->h);
  if (dev->nstreams)
    dev->nstreams--;
  pthread_mutex_unlock(&dev->mu);
  free(s);
}

int dev_stream_sync(dev_device *dev, dev_stream *s) {
  if (!s)
    return ebb_seterr(EBB_EINVAL, "%s: stream sync without a stream", dev->label);
  return dev->ops->stream_sync(dev, s->h);
}

int dev_copy_htod_async(dev_device *dev, uint64_t dst, const void *src, size_t n, dev_stream *s) {
  if (!s)
    return ebb_seterr(EBB_EINVAL, "%s: async copy without a stream", dev->label);
  return n ? dev->ops->copy_htod_async(dev, dst, src, n, s->h) : 0;
}

int dev_copy_dtoh_async(dev_device *dev, void *dst, uint64_t src, size_t n, dev_stream *s) {
  if (!s)
    return ebb_seterr(EBB_EINVAL, "%s: async copy without a stream", dev->label);
  return n ? dev->ops->copy_dtoh_async(dev, dst, src, n, s->h) : 0;
}

int dev_event_record(dev_device *dev, uint64_t stream, void **ev) {
  return dev->ops->event_record(dev, stream, ev);
}
int dev_event_query(dev_device *dev, void *ev) { return dev->ops->event_query(dev, ev); }
int dev_event_wait(dev_device *dev, void *ev) { return dev->ops->event_wait(dev, ev); }
void dev_event_destroy(dev_device *dev, void *ev) {
  if (ev)
    dev->ops->event_destroy(dev, ev);
}

int dev_module_load(dev_device *dev, const void *image, dev_module **out) {
  *out = NULL;
  dev_module *m = calloc(1, sizeof *m);
  if (!m)
    return ebb_seterr(EBB_ENOMEM, "out of host memory loading a module on %s", dev->label);
  pthread_mutex_lock(&dev->mu);
  int rc = dev->ops->module_load(dev, image, &m->h);
  dev->nmodules += rc == 0;
  pthread_mutex_unlock(&dev->mu);
  if (rc) {
    free(m);
    return rc;
  }
  *out = m;
  return 0;
}

void dev_module_unload(dev_device *dev, dev_module *m) {
  if (!m)
    return;
  pthread_mutex_lock(&dev->mu);
  dev->ops->module_unload(dev, m->h);
  if (dev->nmodules)
    dev->nmodules--;
  pthread_mutex_unlock(&dev->mu);
  for (size_t i = 0; i < m->nkernels; i++)
    free(m->kernels[i]);
  free(m->kernels);
  free(m);
}

int dev_device_kernel(dev_device *dev, dev_module *m, const char *name, dev_kernel **out) {
  *out = NULL;
  if (!m || !name || !*name)
    return ebb_seterr(EBB_EINVAL, "%s: kernel lookup without a module or a name", dev->label);
  for (size_t i = 0; i < m->nkernels; i++)
    if (!strcmp(m->kernels[i]->name, name)) {
      *out = m->kernels[i];
      return 0;
    }
  dev_kernel *k = calloc(1, sizeof *k);
  dev_kernel **ks = realloc(m->kernels, (m->nkernels + 1) * sizeof *ks);
  if (!k || !ks) {
    free(k);
    if (ks)
      m->kernels = ks;
    return ebb_seterr(EBB_ENOMEM, "out of host memory looking up kernel %s", name);
  }
  m->kernels = ks;
  snprintf(k->name, sizeof k->name, "%s", name);
  int rc = dev->ops->kernel(dev, m->h, name, &k->fn);
  if (rc) {
    free(k);
    return rc;
  }
  m->kernels[m->nkernels++] = k;
  *out = k;
  return 0;
}

int dev_launch(dev_device *dev, dev_kernel *k, const unsigned grid[3], const unsigned block[3],
               unsigned shared_bytes, void **params) {
  if (!k)
    return ebb_seterr(EBB_EINVAL, "%s: launch of a NULL kernel", dev->label);
  dev_launch_dims d = {{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, shared_bytes};
  int rc = dev->ops->launch(dev, k->fn, &d, params);
  return rc ? ebb_errctx(rc, "kernel %s: ", k->name) : 0;
}
