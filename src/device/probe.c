/* dev_device_probe: what `ebb devices` and `ebb version` report. Loads the
 * driver (cuInit) and NVML but creates no context. */
#include <stdio.h>
#include <string.h>

#include "device/cuda_driver.h"
#include "device/device.h"
#include "device/nvml.h"

#define CU(drv, name, ...) ((drv)->fn.name ? (drv)->fn.name(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

static void probe_one(const dev_cuda_driver *drv, int i, dev_probe_device *d) {
  CUdevice dev = 0;
  d->index = i;
  if (CU(drv, cuDeviceGet, &dev, i) != CUDA_SUCCESS) {
    snprintf(d->name, sizeof d->name, "(cuDeviceGet failed)");
    return;
  }
  if (CU(drv, cuDeviceGetName, d->name, (int)sizeof d->name, dev) != CUDA_SUCCESS)
    snprintf(d->name, sizeof d->name, "CUDA device %d", i);
  CU(drv, cuDeviceGetAttribute, &d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  CU(drv, cuDeviceGetAttribute, &d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  size_t total = 0;
  if (CU(drv, cuDeviceTotalMem, &total, dev) == CUDA_SUCCESS)
    d->total_bytes = total;
  int vmm = 0;
  if (CU(drv, cuDeviceGetAttribute, &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
         dev) == CUDA_SUCCESS)
    d->vmm = vmm != 0;
  CUuuid u;
  if (CU(drv, cuDeviceGetUuid, &u, dev) == CUDA_SUCCESS)
    dev_cuda_format_uuid(&u, d->uuid, sizeof d->uuid);
  nvmlDevice_t nd = NULL;
  uint64_t fr, tot;
  if (dev_nvml_device(i, d->uuid, &nd) == 0 && dev_nvml_meminfo(nd, &fr, &tot) == 0)
    d->free_bytes = fr;
}

int dev_device_probe(dev_probe *out) {
  memset(out, 0, sizeof *out);
  if (dev_nvml_load() == 0) {
    out->nvml_loaded = 1;
    dev_nvml_driver_version(out->nvml_driver, sizeof out->nvml_driver);
  }
  const dev_cuda_driver *drv;
  int rc = dev_cuda_driver_get(&drv);
  if (rc) {
    snprintf(out->driver_path, sizeof out->driver_path, "%s", dev_cuda_driver_path());
    snprintf(out->why, sizeof out->why, "%s", ebb_errmsg());
    return 0;
  }
  out->driver_loaded = 1;
  snprintf(out->driver_path, sizeof out->driver_path, "%s", drv->found_at);
  out->driver_version = drv->version;
  int n = drv->ndevices;
  int cap = (int)(sizeof out->devices / sizeof out->devices[0]);
  out->ndevices = n < cap ? n : cap;
  for (int i = 0; i < out->ndevices; i++)
    probe_one(drv, i, &out->devices[i]);
  return 0;
}
