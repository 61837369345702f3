/* Plain device memory: real host memory behind every CUdeviceptr, accounting
 * rounded up to the granularity, out of memory (2) when the device is full,
 * FAKEGPU_FAIL_ALLOC_AT, copies and memset that check their device ranges. */
#include "fakegpu/fg_test.h"

static void test_granularity_rounding(void) {
  unsigned long long base = fgt_used();
  CHECK_EQ_U64(base, 300 * MIB); /* the context alone */
  CUdeviceptr a, b, c;
  REQUIRE(cu_cuMemAlloc(&a, 1) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 2 * MIB);
  REQUIRE(cu_cuMemAlloc(&b, 2 * MIB) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 4 * MIB);
  REQUIRE(cu_cuMemAlloc(&c, 2 * MIB + 1) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 8 * MIB);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 308 * MIB);
  CHECK_EQ_INT(cu_cuMemFree(c), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 4 * MIB);
  CHECK_EQ_INT(cu_cuMemFree(a), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(b), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used(), base);
  /* Bad frees and sizes. */
  CHECK_EQ_INT(cu_cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemFree(0), CUDA_SUCCESS); /* as the driver: cudaFree(0) ends here */
  CHECK_EQ_INT(cu_cuMemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE);
}

static int child_small_granularity(void) {
  fgt_init_ctx();
  unsigned long long base = fgt_used();
  CUdeviceptr p;
  if (cu_cuMemAlloc(&p, 1) != CUDA_SUCCESS)
    return 10;
  return fgt_used() - base == 64 * 1024 ? 0 : 11;
}

/* FAKEGPU_CONTEXT_MIB=500: what a context costs this process. */
static int child_ctx_mib(void) {
  fgt_init_ctx();
  if (fgt_used() != 500 * MIB)
    return 10;
  CUcontext c;
  if (cu_cuCtxCreate(&c, 0, 0) != CUDA_SUCCESS || fgt_used() != 1000 * MIB)
    return 11;
  if (cu_cuCtxDestroy(c) != CUDA_SUCCESS || fgt_used() != 500 * MIB)
    return 12;
  return 0;
}

/* FAKEGPU_MEMORY_MIB=1024: the context takes 300, so 724 MiB are left. */
static int child_oom(void) {
  fgt_init_ctx();
  CUdeviceptr p, q;
  if (cu_cuMemAlloc(&p, 2048 * MIB) != CUDA_ERROR_OUT_OF_MEMORY)
    return 10;
  if (cu_cuMemAlloc(&p, 724 * MIB) != CUDA_SUCCESS) /* exactly what is left */
    return 11;
  if (cu_cuMemAlloc(&q, 1) != CUDA_ERROR_OUT_OF_MEMORY)
    return 12;
  size_t fr, tot;
  if (cu_cuMemGetInfo(&fr, &tot) != CUDA_SUCCESS || fr != 0 || tot != 1024 * MIB)
    return 13;
  /* A second context does not fit either. */
  CUcontext c;
  if (cu_cuCtxCreate(&c, 0, 0) != CUDA_ERROR_OUT_OF_MEMORY)
    return 14;
  if (cu_cuMemFree(p) != CUDA_SUCCESS || cu_cuMemAlloc(&q, 1) != CUDA_SUCCESS)
    return 15;
  return 0;
}

/* FAKEGPU_FAIL_ALLOC_AT=3: the third device allocation of the process
 * (cuMemAlloc or cuMemCreate) fails, the others do not. */
static int child_fail_at(void) {
  fgt_init_ctx();
  CUdeviceptr p;
  CUmemGenericAllocationHandle h;
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  if (cu_cuMemAlloc(&p, 4096) != CUDA_SUCCESS)
    return 10;
  if (cu_cuMemCreate(&h, 2 * MIB, &prop, 0) != CUDA_SUCCESS)
    return 11;
  if (cu_cuMemAlloc(&p, 4096) != CUDA_ERROR_OUT_OF_MEMORY)
    return 12;
  if (cu_cuMemAlloc(&p, 4096) != CUDA_SUCCESS)
    return 13;
  return 0;
}

static int child_fail_at_create(void) {
  fgt_init_ctx();
  CUdeviceptr p;
  CUmemGenericAllocationHandle h;
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  if (cu_cuMemAlloc(&p, 4096) != CUDA_SUCCESS)
    return 10;
  if (cu_cuMemCreate(&h, 2 * MIB, &prop, 0) != CUDA_ERROR_OUT_OF_MEMORY)
    return 11;
  if (cu_cuMemCreate(&h, 2 * MIB, &prop, 0) != CUDA_SUCCESS)
    return 12;
  return 0;
}

static void test_env_children(void) {
  char state[4200];
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.child", getenv("FAKEGPU_STATE"));
  const char *gran[] = {"FAKEGPU_GRANULARITY_KIB=64", state, NULL};
  CHECK_EQ_INT(fgt_run_self("granularity", gran), 0);
  CHECK_EQ_INT(fgt_run_self("ctx_mib", (const char *[]){"FAKEGPU_CONTEXT_MIB=500", state, NULL}),
               0);
  CHECK_EQ_INT(fgt_run_self("ctx_mib", (const char *[]){state, NULL}), 10);
  const char *oom[] = {"FAKEGPU_MEMORY_MIB=1024", state, NULL};
  CHECK_EQ_INT(fgt_run_self("oom", oom), 0);
  const char *fail[] = {"FAKEGPU_FAIL_ALLOC_AT=3", state, NULL};
  CHECK_EQ_INT(fgt_run_self("fail_at", fail), 0);
  const char *fail2[] = {"FAKEGPU_FAIL_ALLOC_AT=2", state, NULL};
  CHECK_EQ_INT(fgt_run_self("fail_at_create", fail2), 0);
  /* Without the variable nothing fails. */
  CHECK_EQ_INT(fgt_run_self("fail_at", (const char *[]){state, NULL}), 12);
  unlink(state + strlen("FAKEGPU_STATE="));
}

static void test_copies_and_memset(void) {
  CUdeviceptr a, b;
  REQUIRE(cu_cuMemAlloc(&a, 1 * MIB) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAlloc(&b, 1 * MIB) == CUDA_SUCCESS);
  unsigned char src[4096], dst[4096];
  for (int i = 0; i < 4096; i++)
    src[i] = (unsigned char)(i * 7);
  CHECK_EQ_INT(cu_cuMemcpyHtoD(a, src, sizeof src), CUDA_SUCCESS);
  /* Device memory is host memory: the bytes are really there. */
  CHECK(memcmp((void *)(uintptr_t)a, src, sizeof src) == 0);
  CHECK_EQ_INT(cu_cuMemcpyDtoD(b + 100, a, sizeof src), CUDA_SUCCESS);
  memset(dst, 0, sizeof dst);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(dst, b + 100, sizeof dst), CUDA_SUCCESS);
  CHECK(memcmp(dst, src, sizeof src) == 0);
  CHECK_EQ_INT(cu_cuMemsetD8(b, 0xab, 64), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(dst, b, 64), CUDA_SUCCESS);
  CHECK(dst[0] == 0xab && dst[63] == 0xab);
  /* Async forms on a stream and on the default stream. */
  CUstream s;
  REQUIRE(cu_cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyHtoDAsync(a, src + 1, 10, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoDAsync(b, a, 10, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoHAsync(dst, b, 10, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  CHECK(memcmp(dst, src + 1, 10) == 0);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoHAsync(dst, b, 10, s), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  /* Device ranges are checked: past the end, or not device memory. */
  CHECK_EQ_INT(cu_cuMemcpyHtoD(a + MIB - 10, src, 11), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, 10), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemsetD8(a + MIB, 0, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemcpyDtoD(a, (CUdeviceptr)(uintptr_t)src, 1), CUDA_ERROR_INVALID_VALUE);
  /* An invalid copy is an ordinary error, not a sticky one. */
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(a), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(dst, a, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemFree(b), CUDA_SUCCESS);
}

static void test_host_memory(void) {
  unsigned long long before = fgt_used();
  void *h = NULL;
  REQUIRE(cu_cuMemHostAlloc(&h, 1 << 20, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS);
  memset(h, 1, 1 << 20);
  CHECK_EQ_U64(fgt_used(), before); /* pinned host memory is not device memory */
  CHECK_EQ_INT(cu_cuMemFreeHost(h), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  fgt_load_nvml();
  if (argc > 1) {
    if (!strcmp(argv[1], "granularity"))
      return child_small_granularity();
    if (!strcmp(argv[1], "ctx_mib"))
      return child_ctx_mib();
    if (!strcmp(argv[1], "oom"))
      return child_oom();
    if (!strcmp(argv[1], "fail_at"))
      return child_fail_at();
    if (!strcmp(argv[1], "fail_at_create"))
      return child_fail_at_create();
    return 99;
  }
  REQUIRE(nv_nvmlInit_v2() == NVML_SUCCESS);
  fgt_init_ctx();
  RUN(test_granularity_rounding);
  RUN(test_copies_and_memset);
  RUN(test_host_memory);
  RUN(test_env_children);
  return TEST_END();
}
