/* The fake libnvidia-ml.so.1: device totals and per-process usage read from
 * the fake GPU's state file. It never creates a context and never takes a
 * slot in the state file, so querying costs the caller nothing on the device. */
#include <stdio.h>
#include <string.h>

#include "device/cuda_api.h"
#include "fg_state.h"

#define NV_API __attribute__((visibility("default")))
#define NVML_ERROR_GPU_IS_LOST 15

struct nvmlDevice_st {
  unsigned index;
};

static struct nvmlDevice_st g_devs[FG_MAX_DEVICES];
static int g_init_count;
static unsigned g_ndevices;

NV_API nvmlReturn_t nvmlInit_v2(void) {
  fg_config cfg;
  fg_config_from_env(&cfg);
  if (cfg.stub)
    return NVML_ERROR_DRIVER_NOT_LOADED;
  if (cfg.ndevices > 0 && fg_state_attach(&cfg, 0) != 0)
    return NVML_ERROR_UNKNOWN;
  fg_device_usage u = {0};
  g_ndevices = cfg.ndevices > 0 && fg_state_device(0, &u) == 0 ? u.ndevices : 0;
  for (unsigned i = 0; i < FG_MAX_DEVICES; i++)
    g_devs[i].index = i;
  g_init_count++;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlShutdown(void) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (--g_init_count == 0)
    fg_state_detach();
  return NVML_SUCCESS;
}

NV_API const char *nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
  case NVML_SUCCESS: return "Success";
  case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
  case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
  case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
  case NVML_ERROR_NOT_FOUND: return "Not Found";
  case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
  case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
  case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
  case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
  default: return "Unknown Error";
  }
}

static nvmlReturn_t check_dev(nvmlDevice_t dev) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (!dev || dev < &g_devs[0] || dev >= &g_devs[g_ndevices])
    return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (!count)
    return NVML_ERROR_INVALID_ARGUMENT;
  *count = g_ndevices;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (!dev || index >= g_ndevices)
    return NVML_ERROR_INVALID_ARGUMENT;
  *dev = &g_devs[index];
  return NVML_SUCCESS;
}

/* The NVML 1 names NCCL (CuPy's, PyTorch's) loads with dlsym and calls
 * without checking for NULL: the same functions under their first ABI. */
NV_API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
NV_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }
NV_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev) {
  return nvmlDeviceGetHandleByIndex_v2(index, dev);
}

/* Device d sits on bus 0x18 + d (fakegpu-smi's pci.bus_id, the driver's
 * cuDeviceGetPCIBusId); the domain may be written with 4 or 8 digits. */
NV_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *dev) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  unsigned domain = 0, bus = 0, device = 0, fn = 0;
  if (!id || !dev ||
      (sscanf(id, "%x:%x:%x.%x", &domain, &bus, &device, &fn) != 4 &&
       sscanf(id, "%x:%x.%x", &bus, &device, &fn) != 3))
    return NVML_ERROR_INVALID_ARGUMENT;
  if (domain != 0 || device != 0 || fn != 0 || bus < 0x18 || bus - 0x18 >= g_ndevices)
    return NVML_ERROR_NOT_FOUND;
  *dev = &g_devs[bus - 0x18];
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *id, nvmlDevice_t *dev) {
  return nvmlDeviceGetHandleByPciBusId_v2(id, dev);
}

NV_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t dev, int *major, int *minor) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  if (!major || !minor)
    return NVML_ERROR_INVALID_ARGUMENT;
  *major = 9;
  *minor = 0;
  return NVML_SUCCESS;
}

/* What else NCCL asks while it maps the topology: every pair of devices can
 * be peers (as cuDeviceCanAccessPeer says), there is no NVLink, no fabric,
 * no platform information and no confidential computing. */
NV_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int caps, int *status) {
  nvmlReturn_t r = check_dev(a);
  if (r == NVML_SUCCESS)
    r = check_dev(b);
  if (r)
    return r;
  if (!status || caps < 0)
    return NVML_ERROR_INVALID_ARGUMENT;
  *status = a == b ? 5 /* NOT_SUPPORTED */ : 0 /* OK */;
  return NVML_SUCCESS;
}

static nvmlReturn_t no_nvlink(nvmlDevice_t dev, unsigned link, const void *out) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  (void)link;
  return out ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

NV_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned link, int *active) {
  return no_nvlink(dev, link, active);
}
NV_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t dev, unsigned link, void *pci) {
  return no_nvlink(dev, link, pci);
}
NV_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t dev, unsigned link, int cap,
                                                  unsigned *result) {
  (void)cap;
  return no_nvlink(dev, link, result);
}
NV_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, void *info) {
  return no_nvlink(dev, 0, info);
}
NV_API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t dev, void *info) {
  return no_nvlink(dev, 0, info);
}

/* nvml.h's nvmlFieldValue_t: each field answers NOT_SUPPORTED. */
typedef struct {
  unsigned field_id, scope_id;
  long long timestamp, latency_usec;
  int value_type;
  nvmlReturn_t ret;
  unsigned long long value;
} fk_field_value;

NV_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int count, fk_field_value *values) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  if (count < 0 || (count && !values))
    return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < count; i++)
    values[i].ret = NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlSystemGetConfComputeState(unsigned *state /* 3 fields */) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (!state)
    return NVML_ERROR_INVALID_ARGUMENT;
  memset(state, 0, 3 * sizeof *state); /* no CC environment, feature or dev tools */
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlSystemGetConfComputeSettings(unsigned *settings /* version + 4 */) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (!settings)
    return NVML_ERROR_INVALID_ARGUMENT;
  memset(settings + 1, 0, 4 * sizeof *settings);
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  if (!name)
    return NVML_ERROR_INVALID_ARGUMENT;
  static const char n[] = "fakegpu (ebb test device)";
  if (len < sizeof n)
    return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(name, n, sizeof n);
  return NVML_SUCCESS;
}

static nvmlReturn_t usage(nvmlDevice_t dev, fg_device_usage *u) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  if (fg_state_device(dev->index, u) != 0)
    return NVML_ERROR_UNKNOWN;
  return u->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  if (!index)
    return NVML_ERROR_INVALID_ARGUMENT;
  *index = dev->index;
  return NVML_SUCCESS;
}

/* "GPU-66616b65-6770-752d-6562-6210421337NN", as fakegpu-smi and
 * cuDeviceGetUuid spell it. */
NV_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  if (!uuid)
    return NVML_ERROR_INVALID_ARGUMENT;
  static const unsigned char b[15] = {'f', 'a', 'k', 'e',  'g',  'p',  'u', '-',
                                      'e', 'b', 'b', 0x10, 0x42, 0x13, 0x37};
  char buf[64];
  snprintf(buf, sizeof buf,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           dev->index);
  if (len < strlen(buf) + 1)
    return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(uuid, buf, strlen(buf) + 1);
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
  fg_device_usage u;
  nvmlReturn_t r = mem ? usage(dev, &u) : NVML_ERROR_INVALID_ARGUMENT;
  if (r)
    return r;
  mem->total = u.total_bytes;
  mem->used = u.used_bytes;
  mem->free = u.used_bytes < u.total_bytes ? u.total_bytes - u.used_bytes : 0;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem) {
  if (!mem || mem->version != nvmlMemory_v2)
    return g_init_count ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
  fg_device_usage u;
  nvmlReturn_t r = usage(dev, &u);
  if (r)
    return r;
  mem->total = u.total_bytes;
  mem->reserved = 0;
  mem->used = u.used_bytes;
  mem->free = u.used_bytes < u.total_bytes ? u.total_bytes - u.used_bytes : 0;
  return NVML_SUCCESS;
}

/* The NVML protocol: with *count too small (0 and infos NULL to ask),
 * answers INSUFFICIENT_SIZE and the count needed; otherwise fills infos and
 * sets *count to how many it wrote. */
NV_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
  nvmlReturn_t r = check_dev(dev);
  if (r)
    return r;
  if (!count || (*count > 0 && !infos))
    return NVML_ERROR_INVALID_ARGUMENT;
  fg_proc_usage procs[FG_MAX_PROCS];
  unsigned n = 0;
  if (fg_state_lost(dev->index))
    return NVML_ERROR_GPU_IS_LOST;
  if (fg_state_procs(dev->index, procs, FG_MAX_PROCS, &n) != 0)
    return NVML_ERROR_UNKNOWN;
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; i++) {
    infos[i].pid = (unsigned)procs[i].pid;
    infos[i].usedGpuMemory = procs[i].used_bytes;
    infos[i].gpuInstanceId = 0xFFFFFFFFu;
    infos[i].computeInstanceId = 0xFFFFFFFFu;
  }
  *count = n;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int len) {
  if (g_init_count == 0)
    return NVML_ERROR_UNINITIALIZED;
  if (!version)
    return NVML_ERROR_INVALID_ARGUMENT;
  static const char v[] = "580.00.00-fakegpu";
  if (len < sizeof v)
    return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(version, v, sizeof v);
  return NVML_SUCCESS;
}
