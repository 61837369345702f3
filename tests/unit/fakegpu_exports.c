/* The fake libcuda exports exactly the names of a real libcuda.so.1 that ebb
 * uses (every versioned symbol of EBB_CUDA_ENTRY_POINTS), and cuGetProcAddress
 * answers like the real driver: the versioned function for (base, version),
 * CUDA_SUCCESS + NULL + SYMBOL_NOT_FOUND for unknown names,
 * VERSION_NOT_SUFFICIENT for a version older than the symbol, and
 * CUDA_ERROR_INVALID_VALUE for a version newer than the driver. */
#include "fakegpu/fg_test.h"

static void test_every_versioned_symbol_is_exported(void) {
  /* fgt_load_cuda checked each one with dlsym; make sure a wrong, unversioned
   * name is not what satisfied it (the real library's cuMemAlloc is the
   * 32-bit v1 ABI). */
  CHECK(dlsym(fgt_cuda, "cuMemAlloc_v2") == (void *)cu_cuMemAlloc);
  CHECK(dlsym(fgt_cuda, "cuCtxCreate_v2") != NULL);
  CHECK(dlsym(fgt_cuda, "cuCtxCreate_v3") != NULL);
  CHECK(dlsym(fgt_cuda, "cuCtxCreate_v4") != NULL);
  CHECK(dlsym(fgt_cuda, "cuGetProcAddress") != NULL);
  CHECK(dlsym(fgt_cuda, "cuGetProcAddress_v2") != NULL);
  /* Internals stay hidden. */
  CHECK(dlsym(fgt_cuda, "fg_state_charge") == NULL);
  CHECK(dlsym(fgt_cuda, "fk_need_ctx") == NULL);
}

static void test_proc_address_matches_exports(void) {
  int checked = 0;
#define CHECK_ENTRY_(base, sym, ver, params)                                        \
  {                                                                                 \
    void *pfn = (void *)1;                                                          \
    CUdriverProcAddressQueryResult st = -1;                                         \
    CUresult rc = cu_cuGetProcAddress_v2(#base, &pfn, ver, 0, &st);                 \
    CHECK_EQ_INT(rc, CUDA_SUCCESS);                                                 \
    CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SUCCESS);                                  \
    CHECK_MSG(pfn == dlsym(fgt_cuda, sym), "%s at %d is not %s", #base, ver, sym);  \
    /* The newest driver version gets the same ABI unless a newer exists. */        \
    pfn = NULL;                                                                     \
    CHECK_EQ_INT(cu_cuGetProcAddress_v2(#base, &pfn, 13000, 0, &st), CUDA_SUCCESS); \
    CHECK_MSG(pfn != NULL, "%s at 13000 not found", #base);                         \
    checked++;                                                                      \
  }
  EBB_CUDA_ENTRY_POINTS(CHECK_ENTRY_)
#undef CHECK_ENTRY_
  CHECK(checked >= 50);
}

static void test_proc_address_versions(void) {
  void *pfn = (void *)1;
  CUdriverProcAddressQueryResult st = -1;
  /* cuCtxCreate: v2 at 3020, v3 at 11040, v4 at 12050. */
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuCtxCreate", &pfn, 3020, 0, &st), CUDA_SUCCESS);
  CHECK(pfn == dlsym(fgt_cuda, "cuCtxCreate_v2"));
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuCtxCreate", &pfn, 12000, 0, &st), CUDA_SUCCESS);
  CHECK(pfn == dlsym(fgt_cuda, "cuCtxCreate_v3"));
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuCtxCreate", &pfn, 13000, 0, &st), CUDA_SUCCESS);
  CHECK(pfn == dlsym(fgt_cuda, "cuCtxCreate_v4"));
  /* Unknown name: success, NULL, SYMBOL_NOT_FOUND. */
  pfn = (void *)1;
  st = -1;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuNoSuchThing", &pfn, 13000, 0, &st), CUDA_SUCCESS);
  CHECK(pfn == NULL);
  CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  /* A versioned name is not a base name. */
  pfn = (void *)1;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuMemAlloc_v2", &pfn, 13000, 0, &st), CUDA_SUCCESS);
  CHECK(pfn == NULL);
  CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  /* Known name, version older than its introduction. */
  pfn = (void *)1;
  st = -1;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuMemCreate", &pfn, 10010, 0, &st), CUDA_SUCCESS);
  CHECK(pfn == NULL);
  CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  /* Newer than the driver (13000). */
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuMemAlloc", &pfn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE);
  /* Bad arguments. */
  CHECK_EQ_INT(cu_cuGetProcAddress_v2(NULL, &pfn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuInit", NULL, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
  /* symbolStatus is optional; the v1 entry point has none. */
  pfn = NULL;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuInit", &pfn, 2000, 0, NULL), CUDA_SUCCESS);
  CHECK(pfn == (void *)cu_cuInit);
  CUresult (*v1)(const char *, void **, int, cuuint64_t);
  *(void **)&v1 = dlsym(fgt_cuda, "cuGetProcAddress");
  REQUIRE(v1 != NULL);
  pfn = NULL;
  CHECK_EQ_INT(v1("cuMemGetInfo", &pfn, 12000, 0), CUDA_SUCCESS);
  CHECK(pfn == (void *)cu_cuMemGetInfo);
  /* cuGetProcAddress resolves itself. */
  pfn = NULL;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2("cuGetProcAddress", &pfn, 12000, 0, &st), CUDA_SUCCESS);
  CHECK(pfn == (void *)cu_cuGetProcAddress_v2);
}

static void test_works_before_init(void) {
  /* Like the real driver: the way in and the version need no cuInit. */
  int v = 0;
  CHECK_EQ_INT(cu_cuDriverGetVersion(&v), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 13000);
  const char *s = NULL;
  CHECK_EQ_INT(cu_cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  CHECK_EQ_STR(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK_EQ_INT(cu_cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &s), CUDA_SUCCESS);
  CHECK_EQ_STR(s, "CUDA_ERROR_NOT_INITIALIZED");
  CHECK_EQ_INT(cu_cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  CHECK_EQ_STR(s, "out of memory");
  CHECK_EQ_INT(cu_cuGetErrorString(12345, &s), CUDA_ERROR_INVALID_VALUE);
  CHECK(s == NULL);
}

int main(void) {
  fgt_load_cuda();
  RUN(test_every_versioned_symbol_is_exported);
  RUN(test_proc_address_matches_exports);
  RUN(test_proc_address_versions);
  RUN(test_works_before_init);
  return TEST_END();
}
