/* A libcuda (and NVML) whose every exported entry point calls abort(): the
 * versioned symbols of EBB_CUDA_ENTRY_POINTS, cuGetProcAddress(_v2), cuInit
 * and the NVML functions. Set EBB_LIBCUDA / EBB_LIBNVML to it and a run that
 * makes any driver call dies with SIGABRT. With ABORTCUDA_MARK=FILE, loading
 * the library at all appends a line to FILE, so a test can also prove that
 * nothing dlopen'ed it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/cuda_api.h"

#define ABORT_CU_(name, sym, ver, params)        \
  CUresult abortcuda_##name params __asm__(sym); \
  CUresult abortcuda_##name params { abort(); }
EBB_CUDA_ENTRY_POINTS(ABORT_CU_)
#undef ABORT_CU_

#define ABORT_NVML_(name, ret, params) \
  ret name params;                     \
  ret name params { abort(); }
EBB_NVML_ENTRY_POINTS(ABORT_NVML_)
#undef ABORT_NVML_

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
  abort();
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
  abort();
}
/* The unversioned names of the _v2 entry points, as old drivers export them. */
CUresult cuMemAlloc(void);
CUresult cuMemAlloc(void) { abort(); }
CUresult cuMemGetInfo(void);
CUresult cuMemGetInfo(void) { abort(); }
CUresult cuDeviceTotalMem(void);
CUresult cuDeviceTotalMem(void) { abort(); }
CUresult cuDevicePrimaryCtxRelease(void);
CUresult cuDevicePrimaryCtxRelease(void) { abort(); }

__attribute__((constructor)) static void abortcuda_loaded(void) {
  const char *mark = getenv("ABORTCUDA_MARK");
  if (!mark || !*mark)
    return;
  FILE *f = fopen(mark, "a");
  if (f) {
    fprintf(f, "abortcuda loaded by pid %d\n", (int)getpid());
    fclose(f);
  }
}
