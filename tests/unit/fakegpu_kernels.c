/* Kernels on the fake: cuModuleGetFunction(name) finds the process's host
 * twin fakegpu_twin_<name> (500 if there is none), cuLaunchKernel calls it
 * once with the grid and the parameters and needs a current context (201);
 * a faulting kernel leaves its context with ILLEGAL_ADDRESS (700) for every
 * later call until the context is destroyed or reset. Also events. */
#include "fakegpu/fg_test.h"

/* cuLaunchKernel's `extra` keys (cuda.h's CU_LAUNCH_PARAM_*). */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

static int g_calls;
static dev_launch_dims g_dims;

/* x[i] *= s for i < n, one "thread" per element. */
__attribute__((visibility("default"))) void fakegpu_twin_scale(const dev_launch_dims *d,
                                                               void **params) {
  g_calls++;
  g_dims = *d;
  float *x = (float *)(uintptr_t)(*(CUdeviceptr *)params[0]);
  float s = *(float *)params[1];
  int n = *(int *)params[2];
  unsigned threads = d->grid[0] * d->block[0];
  for (unsigned t = 0; t < threads; t++)
    if ((int)t < n)
      x[t] *= s;
}

/* A kernel that reports touching memory it must not. */
__attribute__((visibility("default"))) void fakegpu_twin_wild(const dev_launch_dims *d,
                                                              void **params) {
  void (*fault)(void);
  *(void **)&fault = dlsym(fgt_cuda, "fakegpu_kernel_fault");
  if (fault)
    fault();
}

static CUfunction get(CUmodule m, const char *name) {
  CUfunction f = NULL;
  CHECK_EQ_INT(cu_cuModuleGetFunction(&f, m, name), CUDA_SUCCESS);
  return f;
}

static void test_twin_runs_on_device_memory(void) {
  CUmodule m;
  CHECK_EQ_INT(cu_cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cu_cuModuleLoadData(&m, "\x7f"
                                  "ELF any fatbin bytes") == CUDA_SUCCESS);
  CUfunction f = get(m, "scale");
  REQUIRE(f != NULL);
  float host[100];
  for (int i = 0; i < 100; i++)
    host[i] = (float)i;
  CUdeviceptr x;
  REQUIRE(cu_cuMemAlloc(&x, sizeof host) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemcpyHtoD(x, host, sizeof host) == CUDA_SUCCESS);
  float s = 2.5f;
  int n = 100;
  void *params[] = {&x, &s, &n};
  g_calls = 0;
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 4, 1, 1, 32, 1, 1, 128, NULL, params, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(g_calls, 1);
  CHECK_EQ_INT(g_dims.grid[0], 4);
  CHECK_EQ_INT(g_dims.block[0], 32);
  CHECK_EQ_INT(g_dims.grid[1], 1);
  CHECK_EQ_INT(g_dims.shared_bytes, 128);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  REQUIRE(cu_cuMemcpyDtoH(host, x, sizeof host) == CUDA_SUCCESS);
  CHECK_NEAR(host[99], 99 * 2.5, 1e-4);
  CHECK_NEAR(host[1], 2.5, 1e-6);
  /* Launch checks. */
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuLaunchKernel((CUfunction)&g_calls, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
               CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(g_calls, 1);
  /* Unknown kernel. */
  CUfunction none = NULL;
  CHECK_EQ_INT(cu_cuModuleGetFunction(&none, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  /* Without a current context. */
  CUcontext cur;
  REQUIRE(cu_cuCtxPopCurrent(&cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
               CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuModuleGetFunction(&none, m, "scale"), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(g_calls, 1);
  REQUIRE(cu_cuCtxPushCurrent(cur) == CUDA_SUCCESS);
  /* Functions go with their module. */
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
               CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuMemFree(x), CUDA_SUCCESS);
}

/* Every later call on the faulted context answers 700. */
static void check_sticky(CUdeviceptr p) {
  CUdeviceptr q;
  size_t fr, tot;
  unsigned char b;
  CUstream s;
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuMemAlloc(&q, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&b, p, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuMemGetInfo(&fr, &tot), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuStreamCreate(&s, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoHAsync(&b, p, 1, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuMemcpyHtoDAsync(p, &b, 1, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

static void test_illegal_address_is_sticky_until_reset(void) {
  CUmodule m;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  CUfunction bad = get(m, "fakegpu_illegal_address");
  CUdeviceptr p;
  REQUIRE(cu_cuMemAlloc(&p, 4096) == CUDA_SUCCESS);
  /* The launch itself succeeds; the fault shows on the next call. */
  CHECK_EQ_INT(cu_cuLaunchKernel(bad, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
  check_sticky(p);
  CHECK_EQ_INT(cu_cuLaunchKernel(bad, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
               CUDA_ERROR_ILLEGAL_ADDRESS);
  /* Reset clears it: same handle, fresh context, old memory gone. */
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr q;
  CHECK_EQ_INT(cu_cuMemAlloc(&q, 4096), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(q), CUDA_SUCCESS);
}

static void test_twin_fault_is_sticky_until_destroy(void) {
  CUcontext prim, c;
  REQUIRE(cu_cuCtxGetCurrent(&prim) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxCreate(&c, 0, 0) == CUDA_SUCCESS);
  CUmodule m;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  CUfunction wild = get(m, "wild");
  CUdeviceptr p;
  REQUIRE(cu_cuMemAlloc(&p, 4096) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(wild, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
  check_sticky(p);
  /* Another context is not affected. */
  CHECK_EQ_INT(cu_cuCtxPushCurrent(prim), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CUcontext tmp;
  CHECK_EQ_INT(cu_cuCtxPopCurrent(&tmp), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxDestroy(c), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&tmp), CUDA_SUCCESS);
  CHECK(tmp == prim);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
}

/* FAKEGPU_FAULT_LAUNCH_AT=2: the second launch of the process faults. */
static int child_fault_at(void) {
  fgt_init_ctx();
  CUmodule m;
  CUfunction f;
  if (cu_cuModuleLoadData(&m, "") || cu_cuModuleGetFunction(&f, m, "scale"))
    return 10;
  CUdeviceptr x;
  float s = 1;
  int n = 1;
  if (cu_cuMemAlloc(&x, 4096))
    return 11;
  void *params[] = {&x, &s, &n};
  if (cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) || cu_cuCtxSynchronize())
    return 12;
  if (cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL))
    return 13;
  return cu_cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 14;
}

static void test_events(void) {
  CUevent a, b, nt;
  REQUIRE(cu_cuEventCreate(&a, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuEventCreate(&b, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuEventCreate(&nt, 0x2) == CUDA_SUCCESS); /* disable timing */
  float ms = -1;
  CHECK_EQ_INT(cu_cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
  CHECK_EQ_INT(cu_cuEventRecord(a, NULL), CUDA_SUCCESS);
  usleep(20000);
  CHECK_EQ_INT(cu_cuEventRecord(b, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventSynchronize(b), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  CHECK_MSG(ms >= 19.0f && ms < 5000.0f, "elapsed %f ms for a 20 ms sleep", ms);
  CHECK_EQ_INT(cu_cuEventRecord(nt, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuEventDestroy(a), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuEventDestroy(b), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventDestroy(nt), CUDA_SUCCESS);
}

/* cuLaunchKernel with its arguments packed in `extra` (cuBLASLt's fp16
 * kernels are launched so): taken as the driver takes it; both forms at once,
 * an unknown key, a pointer without its size or no END: INVALID_VALUE. A twin
 * reads kernelParams, unpacked by the kernel's layout: this image gives none,
 * so a twin launched packed answers INVALID_VALUE and does not run. */
static void test_arguments_in_extra(void) {
  /* A fatbin that names one kernel: its header (magic, version, header
   * size 16, size of the rest), an empty entry (header size 0 ends the walk),
   * then the name as a string table would hold it. */
  static const char name[] = "a_kernel_with_no_twin";
  unsigned char image[16 + 48 + sizeof name + 1] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0};
  uint64_t rest = sizeof image - 16;
  memcpy(image + 8, &rest, sizeof rest);
  memcpy(image + 16 + 48 + 1, name, sizeof name);
  CUmodule m;
  REQUIRE(cu_cuModuleLoadData(&m, image) == CUDA_SUCCESS);
  CUfunction noop = get(m, name), twin = get(m, "scale");
  REQUIRE(noop != NULL && twin != NULL);
  struct {
    CUdeviceptr p;
    float s;
    int n;
  } args = {0, 1.0f, 0};
  size_t size = sizeof args;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CHECK_EQ_INT(cu_cuLaunchKernel(noop, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra), CUDA_SUCCESS);
  void *params[] = {&args.p, &args.s, &args.n};
  CHECK_EQ_INT(cu_cuLaunchKernel(noop, 1, 1, 1, 32, 1, 1, 0, NULL, params, extra),
               CUDA_ERROR_INVALID_VALUE);
  void *no_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_END};
  CHECK_EQ_INT(cu_cuLaunchKernel(noop, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, no_size),
               CUDA_ERROR_INVALID_VALUE);
  void *unknown[] = {(void *)0x7, &args, CU_LAUNCH_PARAM_END};
  CHECK_EQ_INT(cu_cuLaunchKernel(noop, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, unknown),
               CUDA_ERROR_INVALID_VALUE);
  g_calls = 0;
  CHECK_EQ_INT(cu_cuLaunchKernel(twin, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(g_calls, 0);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "fault_at") ? child_fault_at() : 99;
  fgt_init_ctx();
  RUN(test_twin_runs_on_device_memory);
  RUN(test_arguments_in_extra);
  RUN(test_illegal_address_is_sticky_until_reset);
  RUN(test_twin_fault_is_sticky_until_destroy);
  RUN(test_events);
  char state[4200];
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.child", getenv("FAKEGPU_STATE"));
  CHECK_EQ_INT(fgt_run_self("fault_at", (const char *[]){"FAKEGPU_FAULT_LAUNCH_AT=2", state, NULL}),
               0);
  CHECK_EQ_INT(fgt_run_self("fault_at", (const char *[]){state, NULL}), 14);
  unlink(state + strlen("FAKEGPU_STATE="));
  return TEST_END();
}
