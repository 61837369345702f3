/* NVML through dlopen: totals and per-process usage with no CUDA context. */
#include "device/nvml.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"

#define DEFAULT_LIBNVML "libnvidia-ml.so.1"

typedef nvmlReturn_t (*pfn_nvmlDeviceGetUUID)(nvmlDevice_t dev, char *uuid, unsigned int len);

static struct {
#define NVML_FIELD_(name, ret, params) ret(*name) params;
  EBB_NVML_ENTRY_POINTS(NVML_FIELD_)
#undef NVML_FIELD_
  pfn_nvmlDeviceGetUUID getUUID; /* optional: matches CUDA and NVML devices */
} fn;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *lib;
static int load_rc = EBB_ENOLIB;
static char path[512];
static char why[1024];

static const char *nvml_err(nvmlReturn_t r) {
  const char *s = fn.nvmlErrorString ? fn.nvmlErrorString(r) : NULL;
  return s ? s : "NVML error";
}

static void load_once(void) {
  const char *p = getenv("EBB_LIBNVML");
  snprintf(path, sizeof path, "%s", p && *p ? p : DEFAULT_LIBNVML);
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, sizeof why, "cannot load %s (%s)", path, e ? e : "dlopen failed");
    load_rc = EBB_ENOLIB;
    return;
  }
  void *s;
#define NVML_RESOLVE_(name, ret, params) \
  s = dlsym(lib, #name);                 \
  memcpy(&fn.name, &s, sizeof s);
  EBB_NVML_ENTRY_POINTS(NVML_RESOLVE_)
#undef NVML_RESOLVE_
  s = dlsym(lib, "nvmlDeviceGetUUID");
  memcpy(&fn.getUUID, &s, sizeof s);
  if (!fn.nvmlInit_v2 || !fn.nvmlDeviceGetHandleByIndex_v2 || !fn.nvmlDeviceGetCount_v2) {
    snprintf(why, sizeof why, "%s is not NVML (nvmlInit_v2 or device functions missing)", path);
    load_rc = EBB_ENOLIB;
    return;
  }
  struct link_map *lm = NULL;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
    snprintf(path, sizeof path, "%s", lm->l_name); /* where it was found */
  nvmlReturn_t r = fn.nvmlInit_v2();
  if (r != NVML_SUCCESS) {
    snprintf(why, sizeof why, "%s: nvmlInit_v2 failed: %s (%d)", path, nvml_err(r), r);
    load_rc = EBB_EDRIVER;
    return;
  }
  load_rc = 0;
}

int dev_nvml_load(void) {
  pthread_once(&once, load_once);
  if (load_rc)
    return ebb_seterr(load_rc, "NVML unavailable: %s", why);
  return 0;
}

const char *dev_nvml_path(void) {
  if (!path[0]) {
    const char *p = getenv("EBB_LIBNVML");
    return p && *p ? p : DEFAULT_LIBNVML;
  }
  return path;
}

const char *dev_nvml_why(void) { return why; }

int dev_nvml_driver_version(char *buf, size_t len) {
  int rc = dev_nvml_load();
  if (rc)
    return rc;
  if (!fn.nvmlSystemGetDriverVersion)
    return ebb_seterr(EBB_EUNSUPPORTED, "%s lacks nvmlSystemGetDriverVersion", path);
  nvmlReturn_t r = fn.nvmlSystemGetDriverVersion(buf, (unsigned)len);
  if (r != NVML_SUCCESS)
    return ebb_seterr(EBB_EDRIVER, "nvmlSystemGetDriverVersion: %s (%d)", nvml_err(r), r);
  return 0;
}

int dev_nvml_device(int cuda_ordinal, const char *uuid, nvmlDevice_t *out) {
  int rc = dev_nvml_load();
  if (rc)
    return rc;
  unsigned count = 0;
  nvmlReturn_t r = fn.nvmlDeviceGetCount_v2(&count);
  if (r != NVML_SUCCESS)
    return ebb_seterr(EBB_EDRIVER, "nvmlDeviceGetCount_v2: %s (%d)", nvml_err(r), r);
  if (uuid && *uuid && fn.getUUID) {
    for (unsigned i = 0; i < count; i++) {
      nvmlDevice_t d;
      char u[96];
      if (fn.nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS &&
          fn.getUUID(d, u, sizeof u) == NVML_SUCCESS && !strcasecmp(u, uuid)) {
        *out = d;
        return 0;
      }
    }
  }
  if (cuda_ordinal < 0 || (unsigned)cuda_ordinal >= count)
    return ebb_seterr(EBB_ENODEV, "NVML reports %u devices, none matches cuda:%d", count,
                      cuda_ordinal);
  r = fn.nvmlDeviceGetHandleByIndex_v2((unsigned)cuda_ordinal, out);
  if (r != NVML_SUCCESS)
    return ebb_seterr(EBB_EDRIVER, "nvmlDeviceGetHandleByIndex_v2(%d): %s (%d)", cuda_ordinal,
                      nvml_err(r), r);
  return 0;
}

int dev_nvml_meminfo(nvmlDevice_t d, uint64_t *free_bytes, uint64_t *total_bytes) {
  nvmlReturn_t r = NVML_ERROR_NOT_SUPPORTED;
  if (fn.nvmlDeviceGetMemoryInfo_v2) {
    nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
    r = fn.nvmlDeviceGetMemoryInfo_v2(d, &m);
    if (r == NVML_SUCCESS) {
      *free_bytes = m.free;
      *total_bytes = m.total;
      return 0;
    }
  }
  if (fn.nvmlDeviceGetMemoryInfo) {
    nvmlMemory_t m;
    r = fn.nvmlDeviceGetMemoryInfo(d, &m);
    if (r == NVML_SUCCESS) {
      *free_bytes = m.free;
      *total_bytes = m.total;
      return 0;
    }
  }
  return ebb_seterr(EBB_EDRIVER, "nvmlDeviceGetMemoryInfo: %s (%d)", nvml_err(r), r);
}

int dev_nvml_process_used(nvmlDevice_t d, pid_t pid, uint64_t *bytes) {
  if (!fn.nvmlDeviceGetComputeRunningProcesses_v3)
    return ebb_seterr(EBB_EUNSUPPORTED, "%s lacks nvmlDeviceGetComputeRunningProcesses_v3", path);
  unsigned cap = 64;
  for (int attempt = 0; attempt < 4; attempt++) {
    nvmlProcessInfo_t *infos = calloc(cap, sizeof *infos);
    if (!infos)
      return ebb_seterr(EBB_ENOMEM, "out of host memory listing GPU processes");
    unsigned n = cap;
    nvmlReturn_t r = fn.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, infos);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
      free(infos);
      cap = n > cap ? n + 16 : cap * 4;
      continue;
    }
    if (r != NVML_SUCCESS) {
      free(infos);
      return ebb_seterr(EBB_EDRIVER, "nvmlDeviceGetComputeRunningProcesses_v3: %s (%d)",
                        nvml_err(r), r);
    }
    uint64_t sum = 0;
    for (unsigned i = 0; i < n && i < cap; i++)
      if (infos[i].pid == (unsigned)pid && infos[i].usedGpuMemory != ~0ull)
        sum += infos[i].usedGpuMemory;
    free(infos);
    *bytes = sum;
    return 0;
  }
  return ebb_seterr(EBB_EDRIVER, "nvmlDeviceGetComputeRunningProcesses_v3 kept growing");
}

int dev_nvml_count(unsigned *count) {
  int rc = dev_nvml_load();
  if (rc)
    return rc;
  nvmlReturn_t r = fn.nvmlDeviceGetCount_v2(count);
  if (r != NVML_SUCCESS)
    return ebb_seterr(EBB_EDRIVER, "nvmlDeviceGetCount_v2: %s (%d)", nvml_err(r), r);
  return 0;
}

int dev_nvml_processes(nvmlDevice_t d, unsigned *pids, uint64_t *bytes, unsigned cap, unsigned *n) {
  *n = 0;
  if (!fn.nvmlDeviceGetComputeRunningProcesses_v3)
    return ebb_seterr(EBB_EUNSUPPORTED, "%s lacks nvmlDeviceGetComputeRunningProcesses_v3", path);
  unsigned want = cap + 16;
  nvmlProcessInfo_t *infos = calloc(want, sizeof *infos);
  if (!infos)
    return ebb_seterr(EBB_ENOMEM, "out of host memory listing GPU processes");
  unsigned got = want;
  nvmlReturn_t r = fn.nvmlDeviceGetComputeRunningProcesses_v3(d, &got, infos);
  if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE) {
    free(infos);
    return ebb_seterr(EBB_EDRIVER, "nvmlDeviceGetComputeRunningProcesses_v3: %s (%d)", nvml_err(r),
                      r);
  }
  for (unsigned i = 0; r == NVML_SUCCESS && i < got && *n < cap; i++) {
    pids[*n] = infos[i].pid;
    bytes[*n] = infos[i].usedGpuMemory;
    (*n)++;
  }
  free(infos);
  return 0;
}

int dev_nvml_ref_free(void *ref, uint64_t *free_bytes) {
  dev_nvml_ref *d = ref;
  nvmlDevice_t nd;
  uint64_t total;
  int rc = dev_nvml_device(d->ordinal, d->uuid, &nd);
  return rc ? rc : dev_nvml_meminfo(nd, free_bytes, &total);
}

int dev_nvml_ref_used(void *ref, pid_t pid, uint64_t *bytes) {
  dev_nvml_ref *d = ref;
  nvmlDevice_t nd;
  int rc = dev_nvml_device(d->ordinal, d->uuid, &nd);
  return rc ? rc : dev_nvml_process_used(nd, pid, bytes);
}
