/* A tiny libcuda for loader tests. Its cuGetProcAddress_v2 (built only with
 * MARKCUDA_GPA) answers base names at a requested version the way the real
 * driver does (cuMemAlloc below 3020 is the old 32-bit entry point, at 3020+
 * cuMemAlloc_v2) and remembers what it was asked; its exported symbols are
 * different functions from the ones cuGetProcAddress hands out, so a test can
 * tell which way every entry was resolved. With MARKCUDA_GPA_NULL=1 set,
 * cuGetProcAddress_v2 finds nothing (the loader must fall back to dlsym).
 * Only a handful of entry points exist; the rest are missing on purpose. */
#include <stdlib.h>
#include <string.h>

#include "device/cuda_api.h"

#define API __attribute__((visibility("default")))

/* Exported (found by dlsym). */
API CUresult cuInit(unsigned flags) { return CUDA_SUCCESS; }
API CUresult cuDriverGetVersion(int *v) {
  *v = 12345;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetCount(int *n) {
  *n = 1;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}
API CUresult cuMemAlloc(CUdeviceptr *p, unsigned int bytes) {
  *p = 1;
  return CUDA_SUCCESS;
}
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  *p = 2;
  return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return CUDA_SUCCESS; }
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return CUDA_SUCCESS; }

#ifdef MARKCUDA_GPA
/* What cuGetProcAddress hands out: distinct functions. */
static CUresult gpa_cuInit(unsigned flags) { return CUDA_SUCCESS; }
static CUresult gpa_cuDriverGetVersion(int *v) {
  *v = 54321;
  return CUDA_SUCCESS;
}
static CUresult gpa_cuDeviceGetCount(int *n) {
  *n = 1;
  return CUDA_SUCCESS;
}
static CUresult gpa_cuDeviceGet(CUdevice *d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}
static CUresult gpa_cuMemAlloc_v1(CUdeviceptr *p, unsigned int b) {
  *p = 3;
  return CUDA_SUCCESS;
}
static CUresult gpa_cuMemAlloc_v2(CUdeviceptr *p, size_t b) {
  *p = 4;
  return CUDA_SUCCESS;
}
static CUresult gpa_release_v1(CUdevice d) { return CUDA_SUCCESS; }
static CUresult gpa_release_v2(CUdevice d) { return CUDA_SUCCESS; }

static struct {
  char name[64];
  int version;
} asked[128];
static int nasked;

static void *gpa_lookup(const char *s, int v) {
  if (!strcmp(s, "cuInit"))
    return (void *)gpa_cuInit;
  if (!strcmp(s, "cuDriverGetVersion"))
    return (void *)gpa_cuDriverGetVersion;
  if (!strcmp(s, "cuDeviceGetCount"))
    return (void *)gpa_cuDeviceGetCount;
  if (!strcmp(s, "cuDeviceGet"))
    return (void *)gpa_cuDeviceGet;
  if (!strcmp(s, "cuMemAlloc"))
    return v >= 3020 ? (void *)gpa_cuMemAlloc_v2 : (void *)gpa_cuMemAlloc_v1;
  if (!strcmp(s, "cuDevicePrimaryCtxRelease"))
    return v >= 11000 ? (void *)gpa_release_v2 : (void *)gpa_release_v1;
  return NULL;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status) {
  if (nasked < 128) {
    strncpy(asked[nasked].name, symbol, sizeof asked[nasked].name - 1);
    asked[nasked++].version = version;
  }
  const char *null = getenv("MARKCUDA_GPA_NULL");
  void *p = null && *null == '1' ? NULL : gpa_lookup(symbol, version);
  *pfn = p;
  if (status)
    *status = p ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* For the test: the version the loader asked symbol at (-1: never asked). */
API int markcuda_asked(const char *symbol) {
  for (int i = nasked - 1; i >= 0; i--)
    if (!strcmp(asked[i].name, symbol))
      return asked[i].version;
  return -1;
}
/* For the test: what cuGetProcAddress_v2 answers for symbol at version. */
API void *markcuda_gpa_ptr(const char *symbol, int version) { return gpa_lookup(symbol, version); }
#endif
