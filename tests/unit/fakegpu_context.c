/* Context rules: 201 without a current context; each context costs
 * FAKEGPU_CONTEXT_MIB; the primary context's handle is stable across reset;
 * releasing it to count 0 destroys it and frees what it held; plain
 * allocations die with their context; the current-context stack. */
#include "fakegpu/fg_test.h"

static void test_no_context_answers_201(void) {
  CUcontext cur = (CUcontext)1;
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == NULL);
  CUdeviceptr p;
  size_t fr, tot;
  void *host;
  CUstream s;
  CUevent e;
  CUmodule m;
  CHECK_EQ_INT(cu_cuMemAlloc(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuMemGetInfo(&fr, &tot), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuMemHostAlloc(&host, 4096, 0), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuModuleLoadData(&m, "x"), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
               CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuMemsetD8(0x1000, 0, 1), CUDA_ERROR_INVALID_CONTEXT);
  /* The async copies and the stream wait a sleep and a wake use. */
  unsigned char b[8] = {0};
  CHECK_EQ_INT(cu_cuMemcpyHtoDAsync(0x1000, b, sizeof b, NULL), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuMemcpyDtoHAsync(b, 0x1000, sizeof b, NULL), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT);
  CUmemGenericAllocationHandle h;
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  CHECK_EQ_INT(cu_cuMemCreate(&h, 2 * MIB, &prop, 0), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuCtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);
  /* Nothing was charged: this process is not on the device. */
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
}

static void test_context_costs_context_mib(void) {
  CUcontext a;
  REQUIRE(cu_cuDevicePrimaryCtxRetain(&a, 0) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 300 * MIB);
  unsigned flags = 9;
  int active = 0;
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHECK_EQ_INT(active, 1);
  /* A second retain shares it. */
  CUcontext b;
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRetain(&b, 0), CUDA_SUCCESS);
  CHECK(a == b);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 300 * MIB);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHECK_EQ_INT(active, 1); /* one retain left */
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHECK_EQ_INT(active, 0);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
}

static void test_release_to_zero_frees_everything(void) {
  CUcontext ctx = fgt_init_ctx();
  CUdeviceptr p;
  REQUIRE(cu_cuMemAlloc(&p, 10 * MIB) == CUDA_SUCCESS);
  void *host;
  CHECK_EQ_INT(cu_cuMemHostAlloc(&host, 4096, 0), CUDA_SUCCESS);
  CUstream s;
  CHECK_EQ_INT(cu_cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 310 * MIB);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
  /* Still current on this thread (release does not pop), but gone. */
  CUcontext cur;
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == ctx);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_ERROR_INVALID_CONTEXT);
  /* A new retain gives a fresh context with the same handle: the old
   * allocation died with the old one. */
  CUcontext again;
  REQUIRE(cu_cuDevicePrimaryCtxRetain(&again, 0) == CUDA_SUCCESS);
  CHECK(again == ctx);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
  /* So did the stream: a wake needs streams of its own context. */
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuMemcpyHtoDAsync(0x1000, &s, 1, s), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 300 * MIB);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSetCurrent(NULL), CUDA_SUCCESS);
}

static void test_primary_handle_stable_across_reset(void) {
  CUcontext ctx = fgt_init_ctx();
  CUdeviceptr p;
  REQUIRE(cu_cuMemAlloc(&p, 64 * MIB) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 364 * MIB);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  unsigned flags;
  int active = 1;
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHECK_EQ_INT(active, 0);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
  /* Still retained: the next use brings it back, same handle, empty. */
  CUcontext again;
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  CHECK(again == ctx);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_U64(fgt_used(), 300 * MIB);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
  CHECK_EQ_INT(cu_cuCtxSetCurrent(NULL), CUDA_SUCCESS);
}

static void test_created_contexts_and_stack(void) {
  CUcontext a, b, cur;
  REQUIRE(cu_cuCtxCreate(&a, 0, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == a);
  REQUIRE(cu_cuCtxCreate(&b, 0, 0) == CUDA_SUCCESS);
  CHECK(a != b);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 600 * MIB);
  CUdeviceptr pb;
  REQUIRE(cu_cuMemAlloc(&pb, 3 * MIB) == CUDA_SUCCESS); /* in b: 4 MiB charged */
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 604 * MIB);
  CHECK_EQ_INT(cu_cuCtxPopCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == b);
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == a);
  CHECK_EQ_INT(cu_cuCtxPushCurrent(b), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == b);
  /* Destroying b pops it and frees its allocation. */
  CHECK_EQ_INT(cu_cuCtxDestroy(b), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == a);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 300 * MIB);
  CHECK_EQ_INT(cu_cuMemFree(pb), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuCtxSetCurrent(b), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuCtxDestroy(b), CUDA_ERROR_INVALID_CONTEXT);
  /* The primary context cannot be destroyed with cuCtxDestroy. */
  CUcontext prim;
  REQUIRE(cu_cuDevicePrimaryCtxRetain(&prim, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxDestroy(prim), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxDestroy(a), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == NULL);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
}

/* cuCtxAttach/cuCtxDetach: usage counts. A created context lives until
 * its last detach (its memory still charged); detach needs the context
 * current; on the primary context attach retains and detach releases. */
static void test_attach_detach(void) {
  CUresult (*attach)(CUcontext *, unsigned) = NULL;
  CUresult (*detach)(CUcontext) = NULL;
  CUdriverProcAddressQueryResult st;
  REQUIRE(cu_cuGetProcAddress_v2("cuCtxAttach", (void **)&attach, 2000, 0, &st) == CUDA_SUCCESS);
  REQUIRE(cu_cuGetProcAddress_v2("cuCtxDetach", (void **)&detach, 2000, 0, &st) == CUDA_SUCCESS);
  REQUIRE(attach && detach);
  CUcontext a = NULL, back = NULL, cur = NULL;
  CHECK_MSG(attach(&back, 0) == CUDA_ERROR_INVALID_CONTEXT, "attached with no current context");
  REQUIRE(cu_cuCtxCreate(&a, 0, 0) == CUDA_SUCCESS);
  CHECK_MSG(attach(&back, 1) == CUDA_ERROR_INVALID_VALUE, "cuCtxAttach flags 1 taken");
  CHECK_MSG(attach(NULL, 0) == CUDA_ERROR_INVALID_VALUE, "cuCtxAttach NULL taken");
  CHECK_EQ_INT(attach(&back, 0), CUDA_SUCCESS);
  CHECK_MSG(back == a, "cuCtxAttach passed back another context");
  CHECK_EQ_INT(detach(a), CUDA_SUCCESS);
  CHECK_MSG(fgt_nvml_used_by(getpid()) == 300 * MIB,
            "one detach of an attached context freed it (%llu MiB in use)",
            (unsigned long long)(fgt_nvml_used_by(getpid()) / MIB));
  CHECK_EQ_INT(cu_cuCtxPopCurrent(&cur), CUDA_SUCCESS);
  CHECK_MSG(detach(a) == CUDA_ERROR_INVALID_CONTEXT, "detached a context not current");
  CHECK_EQ_INT(cu_cuCtxPushCurrent(a), CUDA_SUCCESS);
  CHECK_EQ_INT(detach(a), CUDA_SUCCESS); /* the creation's use: destroyed */
  CHECK_MSG(fgt_nvml_used_by(getpid()) == 0, "the last detach left the context's memory");
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK_MSG(cur == NULL, "a detached-to-zero context is still current");
  CHECK_MSG(detach(a) == CUDA_ERROR_INVALID_CONTEXT, "a destroyed context detached");
  CUcontext prim = fgt_init_ctx(); /* retained once */
  CHECK_EQ_INT(attach(&back, 0), CUDA_SUCCESS);
  CHECK_MSG(back == prim, "attach on the primary passed back another context");
  CHECK_EQ_INT(detach(prim), CUDA_SUCCESS);
  CHECK_MSG(fgt_nvml_used_by(getpid()) == 300 * MIB, "a detach took the primary's last retain");
  CHECK_EQ_INT(detach(prim), CUDA_SUCCESS); /* the retain of fgt_init_ctx */
  CHECK_MSG(fgt_nvml_used_by(getpid()) == 0, "the primary outlived its last use");
  CHECK_EQ_INT(cu_cuCtxSetCurrent(NULL), CUDA_SUCCESS);
}

static void test_context_per_thread(void);

int main(void) {
  fgt_load_cuda();
  fgt_load_nvml();
  REQUIRE(nv_nvmlInit_v2() == NVML_SUCCESS);
  REQUIRE(cu_cuInit(0) == CUDA_SUCCESS);
  RUN(test_no_context_answers_201);
  RUN(test_context_costs_context_mib);
  RUN(test_release_to_zero_frees_everything);
  RUN(test_primary_handle_stable_across_reset);
  RUN(test_created_contexts_and_stack);
  RUN(test_attach_detach);
  RUN(test_context_per_thread);
  nv_nvmlShutdown();
  return TEST_END();
}

/* The current context is per thread. */
#include <pthread.h>
static void *other_thread(void *arg) {
  CUdeviceptr p;
  *(CUresult *)arg = cu_cuMemAlloc(&p, 4096);
  return NULL;
}
static void test_context_per_thread(void) {
  fgt_init_ctx();
  CUresult rc = 0;
  pthread_t t;
  pthread_create(&t, NULL, other_thread, &rc);
  pthread_join(t, NULL);
  CHECK_EQ_INT(rc, CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}
