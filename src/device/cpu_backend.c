/* The CPU device: host memory standing in for device memory, so the same
 * stages run where no GPU is. Segments are anonymous mappings; VMM is
 * emulated: park replaces the pages with an inaccessible reservation at the
 * same address (the pages go back to the kernel), wake maps fresh zeroed pages
 * there again. Kernels run their host twins (fakegpu_twin_<name>). This file
 * never loads the CUDA driver or NVML. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "device/device_impl.h"

typedef struct cpu_impl {
  uint64_t next_handle;
} cpu_impl;

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

/* MemTotal / MemAvailable from /proc/meminfo; sysinfo when it is missing. */
static void host_mem(uint64_t *free_bytes, uint64_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kib;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
        *total_bytes = kib * 1024ull;
      else if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
        *free_bytes = kib * 1024ull;
    }
    fclose(f);
  }
  if (!*total_bytes) {
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
      *total_bytes = (uint64_t)si.totalram * si.mem_unit;
      *free_bytes = (uint64_t)si.freeram * si.mem_unit;
    }
  }
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "host CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "model name", 10)) {
      char *c = strchr(line, ':');
      if (c) {
        c++;
        while (*c == ' ' || *c == '\t')
          c++;
        c[strcspn(c, "\n")] = '\0';
        if (*c)
          snprintf(buf, len, "%s", c);
      }
      break;
    }
  }
  fclose(f);
}

static void cpu_destroy(dev_device *dev) { free(dev->impl); }
static int cpu_activate(dev_device *dev) { return 0; }
static int cpu_ctx_active(const dev_device *dev) { return 0; }
static int cpu_ctx_release(dev_device *dev) { return 0; }

static int cpu_mem_info(dev_device *dev, dev_meminfo *out) {
  host_mem(&out->free_bytes, &out->total_bytes);
  out->source = EBB_MEMINFO_HOST;
  return 0;
}

/* The resident set of pid: what the host "device" holds for it. */
static int cpu_process_used(dev_device *dev, pid_t pid, uint64_t *bytes) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return ebb_seterr(EBB_ENOTFOUND, "cpu: no process %d (%s)", (int)pid, strerror(errno));
  unsigned long long size = 0, resident = 0;
  int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  if (n != 2)
    return ebb_seterr(EBB_EIO, "cpu: cannot read %s", path);
  *bytes = resident * page_size();
  return 0;
}

static int cpu_granularity(dev_device *dev, size_t *out) {
  *out = page_size();
  return 0;
}

static int cpu_supports_vmm(dev_device *dev) { return 1; }

static int map_fail(dev_device *dev, const char *what, size_t size) {
  int e = errno;
  char a[32], b[32], c[32];
  uint64_t fr, tot;
  host_mem(&fr, &tot);
  return ebb_seterr(e == ENOMEM ? EBB_EOOM : EBB_EIO,
                    "%s failed on cpu: %s asking for %s (%zu bytes); %s free of %s", what,
                    strerror(e), base_fmt_bytes(size, a, sizeof a), size,
                    base_fmt_bytes(fr, b, sizeof b), base_fmt_bytes(tot, c, sizeof c));
}

static int cpu_seg_alloc(dev_device *dev, size_t size, dev_seg_kind kind, dev_dseg *out) {
  size_t g = page_size();
  size_t sz = (size + g - 1) / g * g;
  void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return map_fail(dev, "mmap", sz);
  cpu_impl *ci = dev->impl;
  out->addr = (uint64_t)(uintptr_t)p;
  out->size = sz;
  out->kind = kind;
  out->handle = kind == EBB_SEG_VMM ? ++ci->next_handle : 0;
  out->parked = 0;
  return 0;
}

static int cpu_seg_free(dev_device *dev, dev_dseg *seg, int quiet) {
  if (munmap((void *)(uintptr_t)seg->addr, seg->size))
    return ebb_seterr(EBB_EIO, "cpu: munmap of %zu bytes at 0x%llx: %s", seg->size,
                      (unsigned long long)seg->addr, strerror(errno));
  return 0;
}

static int cpu_seg_park(dev_device *dev, dev_dseg *seg) {
  /* Replacing the mapping drops its pages; the range stays ours. */
  void *p = mmap((void *)(uintptr_t)seg->addr, seg->size, PROT_NONE,
                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return map_fail(dev, "park (mmap PROT_NONE)", seg->size);
  seg->handle = 0;
  seg->parked = 1;
  return 0;
}

static int cpu_seg_wake(dev_device *dev, dev_dseg *seg) {
  void *p = mmap((void *)(uintptr_t)seg->addr, seg->size, PROT_READ | PROT_WRITE,
                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return map_fail(dev, "wake (mmap)", seg->size);
  cpu_impl *ci = dev->impl;
  seg->handle = ++ci->next_handle;
  seg->parked = 0;
  return 0;
}

static int cpu_host_alloc(dev_device *dev, size_t size, void **out) {
  size_t g = page_size();
  void *p = aligned_alloc(g, (size + g - 1) / g * g);
  if (!p)
    return ebb_seterr(EBB_ENOMEM, "cpu: out of host memory for a %zu-byte host buffer", size);
  *out = p;
  return 0;
}

static int cpu_host_free(dev_device *dev, void *p) {
  free(p);
  return 0;
}

static int cpu_copy_htod(dev_device *dev, uint64_t dst, const void *src, size_t n) {
  memcpy((void *)(uintptr_t)dst, src, n);
  return 0;
}
static int cpu_copy_dtoh(dev_device *dev, void *dst, uint64_t src, size_t n) {
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return 0;
}
static int cpu_copy_dtod(dev_device *dev, uint64_t dst, uint64_t src, size_t n) {
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return 0;
}
static int cpu_memset8(dev_device *dev, uint64_t dst, unsigned char v, size_t n) {
  memset((void *)(uintptr_t)dst, v, n);
  return 0;
}
static int cpu_synchronize(dev_device *dev) { return 0; }

/* Streams: the copies run at the call, so a stream is only a token. */
static char cpu_stream_tag;
static int cpu_stream_create(dev_device *dev, void **out) {
  *out = &cpu_stream_tag;
  return 0;
}
static void cpu_stream_destroy(dev_device *dev, void *s) {}
static int cpu_stream_sync(dev_device *dev, void *s) { return 0; }
static int cpu_copy_htod_async(dev_device *dev, uint64_t dst, const void *src, size_t n, void *s) {
  return cpu_copy_htod(dev, dst, src, n);
}
static int cpu_copy_dtoh_async(dev_device *dev, void *dst, uint64_t src, size_t n, void *s) {
  return cpu_copy_dtoh(dev, dst, src, n);
}

/* Events: work on the CPU device is done at the call, so every event is
 * complete as soon as it is recorded. */
static int cpu_event_record(dev_device *dev, uint64_t stream, void **ev) {
  *ev = &cpu_stream_tag;
  return 0;
}
static int cpu_event_query(dev_device *dev, void *ev) { return 1; }
static int cpu_event_wait(dev_device *dev, void *ev) { return 0; }
static void cpu_event_destroy(dev_device *dev, void *ev) {}

/* A module on the CPU is a namespace for host twins; the image is unused. */
static char cpu_module_tag;
static int cpu_module_load(dev_device *dev, const void *image, void **out) {
  *out = &cpu_module_tag;
  return 0;
}
static void cpu_module_unload(dev_device *dev, void *mod) {}

static int cpu_kernel(dev_device *dev, void *mod, const char *name, void **out) {
  char sym[192];
  snprintf(sym, sizeof sym, "%s%s", EBB_TWIN_PREFIX, name);
  void *p = dlsym(RTLD_DEFAULT, sym);
  if (!p)
    return ebb_seterr(EBB_ENOTFOUND,
                      "cpu: kernel %s has no host twin (symbol %s not exported by the program)",
                      name, sym);
  *out = p;
  return 0;
}

static int cpu_launch(dev_device *dev, void *fn, const dev_launch_dims *dims, void **params) {
  dev_kernel_twin_fn twin;
  memcpy(&twin, &fn, sizeof twin);
  twin(dims, params);
  return 0;
}

static const dev_ops cpu_ops = {
    .destroy = cpu_destroy,
    .activate = cpu_activate,
    .ctx_active = cpu_ctx_active,
    .ctx_release = cpu_ctx_release,
    .mem_info = cpu_mem_info,
    .process_used = cpu_process_used,
    .granularity = cpu_granularity,
    .supports_vmm = cpu_supports_vmm,
    .seg_alloc = cpu_seg_alloc,
    .seg_free = cpu_seg_free,
    .seg_park = cpu_seg_park,
    .seg_wake = cpu_seg_wake,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .copy_htod = cpu_copy_htod,
    .copy_dtoh = cpu_copy_dtoh,
    .copy_dtod = cpu_copy_dtod,
    .memset8 = cpu_memset8,
    .synchronize = cpu_synchronize,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .copy_htod_async = cpu_copy_htod_async,
    .copy_dtoh_async = cpu_copy_dtoh_async,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_wait = cpu_event_wait,
    .event_destroy = cpu_event_destroy,
    .module_load = cpu_module_load,
    .module_unload = cpu_module_unload,
    .kernel = cpu_kernel,
    .launch = cpu_launch,
};

int dev_cpu_backend_open(dev_device *dev) {
  cpu_impl *ci = calloc(1, sizeof *ci);
  if (!ci)
    return ebb_seterr(EBB_ENOMEM, "out of host memory opening the CPU device");
  dev->impl = ci;
  dev->ops = &cpu_ops;
  dev->kind = EBB_DEVICE_CPU;
  dev->ordinal = -1;
  snprintf(dev->label, sizeof dev->label, "cpu");
  cpu_model(dev->name, sizeof dev->name);
  uint64_t fr;
  host_mem(&fr, &dev->total);
  return 0;
}
