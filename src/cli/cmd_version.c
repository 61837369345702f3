/* `ebb version`: ebb's version, the CUDA driver's and where libcuda was found
 * (or why not), and NVML's. Loads the driver to ask it (cuInit) but never
 * creates a context. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "device/cuda_driver.h"
#include "device/device.h"
#include "device/nvml.h"

#ifndef EBB_VERSION
#define EBB_VERSION "0.0.0-unknown"
#endif

static void version_usage(FILE *f) {
  fprintf(f, "usage: ebb version [--short]\n\n"
             "Prints ebb's version, the CUDA driver's version and the libcuda it was\n"
             "loaded from (EBB_LIBCUDA, else libcuda.so.1), or why no driver was found,\n"
             "and NVML's driver version (EBB_LIBNVML, else libnvidia-ml.so.1).\n"
             "Loading the driver calls cuInit; no device context is created.\n\n"
             "  --short   print only ebb's version (touches no driver)\n");
}

int cli_cmd_version(int argc, char **argv) {
  int short_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      version_usage(stdout);
      return EBB_EXIT_OK;
    } else if (!strcmp(argv[i], "--short")) {
      short_only = 1;
    } else {
      fprintf(stderr, "ebb version: unknown option '%s'\n", argv[i]);
      version_usage(stderr);
      return EBB_EXIT_USAGE;
    }
  }
  printf("ebb %s\n", EBB_VERSION);
  if (short_only)
    return EBB_EXIT_OK;
  dev_probe p;
  dev_device_probe(&p);
  if (p.driver_loaded) {
    const dev_cuda_driver *drv = NULL;
    dev_cuda_driver_get(&drv); /* already loaded by the probe */
    printf("CUDA driver: %d.%d (%d), libcuda from %s\n", p.driver_version / 1000,
           (p.driver_version % 1000) / 10, p.driver_version, p.driver_path);
    if (drv)
      printf("  entry points: %d through cuGetProcAddress_v2, %d by versioned name, %d "
             "missing\n",
             drv->n_procaddr, drv->n_dlsym, drv->n_missing);
  } else {
    printf("CUDA driver: none (%s)\n", p.why);
  }
  if (p.nvml_loaded)
    printf("NVML: driver %s, from %s\n", p.nvml_driver[0] ? p.nvml_driver : "(unknown)",
           dev_nvml_path());
  else
    printf("NVML: none (%s)\n", dev_nvml_why());
  return EBB_EXIT_OK;
}
