/* cuInit and the rules around it: NOT_INITIALIZED (3) before cuInit and in
 * a child forked after cuInit; NO_DEVICE (100) with FAKEGPU_DEVICES=0;
 * STUB_LIBRARY (34) with FAKEGPU_STUB=1; and what the device reports. */
#include "fakegpu/fg_test.h"

static void test_calls_before_init_answer_3(void) {
  int n = -1;
  CUdevice d;
  CUcontext c;
  CUdeviceptr p;
  size_t fr, tot;
  CHECK_EQ_INT(cu_cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRetain(&c, 0), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuMemAlloc(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuMemGetInfo(&fr, &tot), CUDA_ERROR_NOT_INITIALIZED);
  size_t g;
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  CHECK_EQ_INT(cu_cuMemGetAllocationGranularity(&g, &prop, 0), CUDA_ERROR_NOT_INITIALIZED);
  /* What a sleep and a wake call: pinned staging, streams, async copies. */
  void *host;
  CUstream s;
  unsigned char b[8] = {0};
  CHECK_EQ_INT(cu_cuMemHostAlloc(&host, 4096, 0), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuMemFreeHost(b), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuStreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuStreamSynchronize(NULL), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuMemcpyHtoDAsync(0x1000, b, sizeof b, NULL), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_EQ_INT(cu_cuMemcpyDtoHAsync(b, 0x1000, sizeof b, NULL), CUDA_ERROR_NOT_INITIALIZED);
  /* Not even a slot in the state file: NVML would show nothing. */
}

static void test_init_flags_must_be_zero(void) {
  CHECK_EQ_INT(cu_cuInit(1), CUDA_ERROR_INVALID_VALUE);
  int n = -1;
  CHECK_EQ_INT(cu_cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
}

static void test_device_queries(void) {
  REQUIRE(cu_cuInit(0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuInit(0), CUDA_SUCCESS); /* idempotent */
  int n = -1;
  CHECK_EQ_INT(cu_cuDeviceGetCount(&n), CUDA_SUCCESS);
  CHECK_EQ_INT(n, 1);
  CUdevice d = -1;
  CHECK_EQ_INT(cu_cuDeviceGet(&d, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(d, 0);
  CHECK_EQ_INT(cu_cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
  char name[128] = "";
  CHECK_EQ_INT(cu_cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  CHECK_EQ_STR(name, "fakegpu (ebb test device)");
  size_t total = 0;
  CHECK_EQ_INT(cu_cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
  CHECK_EQ_U64(total, 81920ull * MIB);
  CHECK_EQ_INT(cu_cuDeviceTotalMem(&total, 3), CUDA_ERROR_INVALID_DEVICE);
  int v = -1;
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
               CUDA_SUCCESS);
  CHECK_EQ_INT(v, 9);
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
               CUDA_SUCCESS);
  CHECK_EQ_INT(v, 0);
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                       0),
               CUDA_SUCCESS);
  CHECK_EQ_INT(v, 1);
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0),
               CUDA_SUCCESS);
  CHECK_EQ_INT(v, 1024);
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&v, 120 /* CLUSTER_LAUNCH */, 0), CUDA_SUCCESS);
  CHECK_MSG(v == 1, "a Hopper device answers cluster launch %d", v);
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&v, 139 /* GPU_PCI_DEVICE_ID */, 0), CUDA_SUCCESS);
  CHECK_MSG((v & 0xffff) == 0x10de, "PCI vendor id %#x, want NVIDIA's 0x10de", v & 0xffff);
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&v, 100000, 0), CUDA_ERROR_INVALID_VALUE);
  CUuuid a, b;
  CHECK_EQ_INT(cu_cuDeviceGetUuid(&a, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuDeviceGetUuid(&b, 0), CUDA_SUCCESS);
  CHECK(memcmp(a.bytes, b.bytes, 16) == 0);
  size_t g = 0;
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  CHECK_EQ_INT(cu_cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
               CUDA_SUCCESS);
  CHECK_EQ_U64(g, 2 * MIB);
}

/* Child modes: each prints nothing and exits with the CUresult it saw. */
static int child_init(void) { return cu_cuInit(0); }

static int child_devices(void) {
  if (cu_cuInit(0) != 0)
    return 200;
  int n = 0;
  size_t t = 0;
  cu_cuDeviceGetCount(&n);
  cu_cuDeviceTotalMem(&t, n - 1);
  return n * 10 + (t == 4096 * MIB);
}

static void test_env_devices_zero_stub_and_config(void) {
  const char *none[] = {"FAKEGPU_DEVICES=0", NULL};
  CHECK_EQ_INT(fgt_run_self("init", none), CUDA_ERROR_NO_DEVICE);
  const char *stub[] = {"FAKEGPU_STUB=1", NULL};
  CHECK_EQ_INT(fgt_run_self("init", stub), CUDA_ERROR_STUB_LIBRARY);
  /* A device of its own (another state file), 3 GPUs of 4 GiB each. */
  char state[4200];
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.three", getenv("FAKEGPU_STATE"));
  const char *three[] = {"FAKEGPU_DEVICES=3", "FAKEGPU_MEMORY_MIB=4096", state, NULL};
  CHECK_EQ_INT(fgt_run_self("devices", three), 31);
  unlink(state + strlen("FAKEGPU_STATE="));
}

static void test_fork_after_init_answers_3(void) {
  REQUIRE(cu_cuInit(0) == CUDA_SUCCESS);
  CUcontext ctx;
  REQUIRE(cu_cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    /* Every call, cuInit included, must answer 3 here. */
    CUdeviceptr p;
    int n;
    int bad = 0;
    bad |= cu_cuMemAlloc(&p, 4096) != CUDA_ERROR_NOT_INITIALIZED;
    bad |= (cu_cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED) << 1;
    bad |= (cu_cuInit(0) != CUDA_ERROR_NOT_INITIALIZED) << 2;
    bad |= (cu_cuCtxSetCurrent(ctx) != CUDA_ERROR_NOT_INITIALIZED) << 3;
    _exit(bad);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "forked child could use the driver (mask %d, status %d)", WEXITSTATUS(st), st);
  /* The parent is unaffected and the child took nothing with it. */
  CUdeviceptr p;
  CHECK_EQ_INT(cu_cuMemAlloc(&p, 4096), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1 && !strcmp(argv[1], "init"))
    return child_init();
  if (argc > 1 && !strcmp(argv[1], "devices"))
    return child_devices();
  RUN(test_calls_before_init_answer_3);
  RUN(test_init_flags_must_be_zero);
  RUN(test_env_devices_zero_stub_and_config);
  RUN(test_device_queries);
  RUN(test_fork_after_init_answers_3);
  return TEST_END();
}
