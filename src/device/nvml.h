/* NVML, loaded at run time (nvml.c): device totals and per-process usage
 * without creating a CUDA context. EBB_LIBNVML overrides "libnvidia-ml.so.1".
 * Loaded on first use only; the CPU device never reaches this file. */
#ifndef EBB_DEVICE_NVML_H
#define EBB_DEVICE_NVML_H

#include <stdint.h>
#include <sys/types.h>

#include "device/cuda_api.h"

/* Loads NVML and calls nvmlInit_v2 once per process (the result, success or
 * failure, is kept). 0 or EBB_ENOLIB / EBB_EDRIVER with a message. */
int dev_nvml_load(void);
/* The path ebb loads (EBB_LIBNVML or the default) and, after a failed load,
 * why (else ""). Owned by this file. */
const char *dev_nvml_path(void);
const char *dev_nvml_why(void);
/* nvmlSystemGetDriverVersion into buf; 0 or an EBB_E code. */
int dev_nvml_driver_version(char *buf, size_t len);
/* The NVML device for a CUDA device: the one whose UUID matches uuid
 * ("GPU-..."; may be NULL or ""), else the one at the same index. */
int dev_nvml_device(int cuda_ordinal, const char *uuid, nvmlDevice_t *out);
int dev_nvml_meminfo(nvmlDevice_t d, uint64_t *free_bytes, uint64_t *total_bytes);
/* Bytes pid holds on d (0 when it holds nothing). */
int dev_nvml_process_used(nvmlDevice_t d, pid_t pid, uint64_t *bytes);
/* A CUDA device as the broker's callbacks name it (brk_free_fn,
 * brk_used_fn: arg is a dev_nvml_ref): its free bytes, a process's usage. */
typedef struct dev_nvml_ref {
  int ordinal;
  char uuid[64];
} dev_nvml_ref;
int dev_nvml_ref_free(void *ref, uint64_t *free_bytes);
int dev_nvml_ref_used(void *ref, pid_t pid, uint64_t *bytes);
/* Every process with a context on d (compute processes): up to cap of them
 * into pids/bytes (bytes ~0ull when NVML cannot say), *n = how many were
 * written. For `ebb top --local`. */
int dev_nvml_processes(nvmlDevice_t d, unsigned *pids, uint64_t *bytes, unsigned cap, unsigned *n);
/* Devices NVML sees. */
int dev_nvml_count(unsigned *count);

#endif
