/* The driver functions beyond ebb's own table (FK_EXTRA_ENTRY_POINTS, what
 * Numba's CUDA target needs) keep the fake's rules: 3 before cuInit and in a
 * child forked after it, 201 without a current context, a context's sticky
 * error once raised; memory they take is counted on the device. And each one
 * behaves as the CUDA Driver API reference says: pointer queries, host
 * registration, managed memory, async memset, stream callbacks (in order, on
 * a driver thread), JIT images (PTX without a host twin: 218 with a message
 * in the error log), the linker, function and occupancy queries, peers. */
#include <pthread.h>
#include <stdbool.h>

#include "fakegpu/fakecuda_extra.h"
#include "fakegpu/fg_test.h"

#define FGX_DECL_(base, sym, ver, params) static CUresult(*x_##base) params;
FK_EXTRA_ENTRY_POINTS(FGX_DECL_)
#undef FGX_DECL_

static void load_extra(void) {
#define FGX_LOAD_(base, sym, ver, params)                                                      \
  *(void **)&x_##base = dlsym(fgt_cuda, sym);                                                  \
  REQUIRE(x_##base != NULL);                                                                   \
  {                                                                                            \
    void *pfn = NULL;                                                                          \
    CUdriverProcAddressQueryResult st = -1;                                                    \
    CHECK_EQ_INT(cu_cuGetProcAddress_v2(#base, &pfn, ver, 0, &st), CUDA_SUCCESS);              \
    CHECK_MSG(pfn == (void *)x_##base, "cuGetProcAddress(%s, %d) is not %s", #base, ver, sym); \
  }
  FK_EXTRA_ENTRY_POINTS(FGX_LOAD_)
#undef FGX_LOAD_
}

/* A host twin for PTX entry "fgt_fill": x[i] = v for i < n. */
__attribute__((visibility("default"))) void fakegpu_twin_fgt_fill(const dev_launch_dims *d,
                                                                  void **params) {
  (void)d;
  int *x = (int *)(uintptr_t)(*(CUdeviceptr *)params[0]);
  int v = *(int *)params[1];
  int n = *(int *)params[2];
  for (int i = 0; i < n; i++)
    x[i] = v;
}

static const char ptx_twin[] = "//\n.version 7.8\n.target sm_90\n.address_size 64\n"
                               ".visible .entry fgt_fill(\n .param .u64 p0\n)\n{\n ret;\n}\n";
static const char ptx_none[] = "//\n.version 7.8\n.target sm_90\n.address_size 64\n"
                               ".visible .entry no_twin_here(\n)\n{\n .reg .b32 r;\n"
                               " mov.u32 r, 1;\n ret;\n}\n";
/* cuDNN's hardware probe, as it ships: a kernel that does nothing needs no
 * twin (test_ptx_without_twin_is_refused_with_a_message). */
static const char ptx_ret[] = ".version 5.0\n.target sm_50\n.address_size 64\n"
                              "// .globl nopCudnnHardwareDetection\n"
                              ".visible .entry nopCudnnHardwareDetection()\n{\n  ret;\n}\n";

/* The current context, or a bogus handle where there is none (so that the
 * peer copy's context check answers 201 like the others). */
static CUcontext fk_cur(void) {
  CUcontext c = NULL;
  cu_cuCtxGetCurrent(&c);
  return c ? c : (CUcontext)0x10;
}

/* Every extra function that needs a context, called with harmless
 * arguments; each must answer `want`. Answers the number that did not. */
static int calls_needing_ctx(CUresult want, CUstream s, CUevent e, CUfunction f) {
  int bad = 0, v = 0, v2 = 0;
  unsigned u = 0;
  CUdevice dev;
  CUdeviceptr p = 0;
  size_t sz = 0;
  CUmodule m;
  CUlinkState ls;
  char host[64];
#define EXPECT_(call)                                                  \
  do {                                                                 \
    CUresult r_ = (call);                                              \
    if (r_ != want) {                                                  \
      fprintf(stderr, "  %s answered %d, want %d\n", #call, r_, want); \
      bad++;                                                           \
    }                                                                  \
  } while (0)
  EXPECT_(x_cuCtxGetDevice(&dev));
  EXPECT_(x_cuCtxEnablePeerAccess(NULL, 0));
  EXPECT_(x_cuCtxDisablePeerAccess(NULL));
  EXPECT_(x_cuMemGetAddressRange(&p, &sz, 0x1000));
  EXPECT_(x_cuMemHostRegister(host, sizeof host, 0));
  EXPECT_(x_cuMemHostUnregister(host));
  EXPECT_(x_cuMemHostGetDevicePointer(&p, host, 0));
  EXPECT_(x_cuMemHostGetFlags(&u, host));
  EXPECT_(x_cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL));
  EXPECT_(x_cuMemcpy((CUdeviceptr)(uintptr_t)host, (CUdeviceptr)(uintptr_t)host, 8));
  EXPECT_(x_cuMemcpyAsync((CUdeviceptr)(uintptr_t)host, (CUdeviceptr)(uintptr_t)host, 8, s));
  EXPECT_(x_cuMemcpyPeerAsync((CUdeviceptr)(uintptr_t)host, fk_cur(), (CUdeviceptr)(uintptr_t)host,
                              fk_cur(), 8, s));
  EXPECT_(x_cuMemsetD16(0x1000, 0, 1));
  EXPECT_(x_cuMemsetD32(0x1000, 0, 1));
  EXPECT_(x_cuMemsetD8Async(0x1000, 0, 1, s));
  EXPECT_(x_cuMemsetD16Async(0x1000, 0, 1, s));
  EXPECT_(x_cuMemsetD32Async(0x1000, 0, 1, s));
  EXPECT_(x_cuStreamQuery(s));
  EXPECT_(x_cuStreamWaitEvent(s, e, 0));
  EXPECT_(x_cuStreamAddCallback(s, NULL, NULL, 0));
  EXPECT_(x_cuEventQuery(e));
  EXPECT_(x_cuProfilerStart());
  EXPECT_(x_cuProfilerStop());
  EXPECT_(x_cuModuleLoadDataEx(&m, ptx_twin, 0, NULL, NULL));
  EXPECT_(x_cuModuleGetGlobal(&p, &sz, NULL, "g"));
  EXPECT_(x_cuLinkCreate(0, NULL, NULL, &ls));
  EXPECT_(x_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  EXPECT_(x_cuFuncSetCacheConfig(f, 0));
  EXPECT_(x_cuOccupancyMaxActiveBlocksPerMultiprocessor(&v, f, 128, 0));
  EXPECT_(x_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 128, 0, 0));
  EXPECT_(x_cuOccupancyMaxPotentialBlockSize(&v, &v2, f, NULL, 0, 0));
  EXPECT_(x_cuOccupancyMaxPotentialBlockSizeWithFlags(&v, &v2, f, NULL, 0, 0, 0));
  EXPECT_(x_cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL));
  return bad;
}

/* The ones that need only cuInit. */
static int calls_needing_init(CUresult want) {
  int bad = 0, a = 0, b = 0;
  unsigned u;
  CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void *data[1] = {&u};
  void *cubin;
  size_t sz;
  EXPECT_(x_cuDeviceComputeCapability(&a, &b, 0));
  EXPECT_(x_cuDevicePrimaryCtxSetFlags(0, 0));
  EXPECT_(x_cuDeviceCanAccessPeer(&a, 0, 0));
  EXPECT_(x_cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x1000));
  EXPECT_(x_cuPointerGetAttributes(1, &attr, data, 0x1000));
  EXPECT_(x_cuLinkAddData(NULL, CU_JIT_INPUT_PTX, (void *)ptx_twin, sizeof ptx_twin, "x", 0, NULL,
                          NULL));
  EXPECT_(x_cuLinkAddFile(NULL, CU_JIT_INPUT_PTX, "/nonexistent", 0, NULL, NULL));
  EXPECT_(x_cuLinkComplete(NULL, &cubin, &sz));
  EXPECT_(x_cuLinkDestroy(NULL));
  return bad;
#undef EXPECT_
}

static void test_before_init_answers_3(void) {
  CHECK_EQ_INT(calls_needing_init(CUDA_ERROR_NOT_INITIALIZED), 0);
  CHECK_EQ_INT(calls_needing_ctx(CUDA_ERROR_NOT_INITIALIZED, NULL, NULL, NULL), 0);
}

static void test_without_context_answers_201(void) {
  REQUIRE(cu_cuInit(0) == CUDA_SUCCESS);
  CUcontext cur = (CUcontext)1;
  REQUIRE(cu_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == NULL);
  CHECK_EQ_INT(calls_needing_ctx(CUDA_ERROR_INVALID_CONTEXT, NULL, NULL, NULL), 0);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0); /* nothing was charged */
}

static void test_fork_child_answers_3(void) {
  fgt_init_ctx();
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0)
    _exit(calls_needing_init(CUDA_ERROR_NOT_INITIALIZED) +
          calls_needing_ctx(CUDA_ERROR_NOT_INITIALIZED, NULL, NULL, NULL));
  int st;
  waitpid(pid, &st, 0);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%d calls in the forked child did not answer 3",
            WEXITSTATUS(st));
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

static void test_sticky_error_answers_700(void) {
  fgt_init_ctx();
  CUstream s;
  CUevent e;
  CUmodule m;
  CUfunction bad, fill;
  REQUIRE(cu_cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuEventCreate(&e, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&fill, m, "fgt_fill") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&bad, m, "fakegpu_illegal_address") == CUDA_SUCCESS);
  REQUIRE(cu_cuLaunchKernel(bad, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) == CUDA_SUCCESS);
  CHECK_EQ_INT(calls_needing_ctx(CUDA_ERROR_ILLEGAL_ADDRESS, s, e, fill), 0);
  /* Reset clears it. */
  REQUIRE(cu_cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
  CUdevice dev = -1;
  CHECK_EQ_INT(x_cuCtxGetDevice(&dev), CUDA_SUCCESS);
  CHECK_EQ_INT(dev, 0);
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

static void test_managed_memory_is_counted_and_host_visible(void) {
  fgt_init_ctx();
  unsigned long long base = fgt_nvml_used_by(getpid());
  CUdeviceptr p;
  CHECK_EQ_INT(x_cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuMemAllocManaged(&p, 4096, 3), CUDA_ERROR_INVALID_VALUE);
  REQUIRE(x_cuMemAllocManaged(&p, 3 * MIB, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), base + 4 * MIB);           /* rounded to 2 MiB */
  memset((void *)(uintptr_t)p, 5, 3 * MIB);                           /* the host may touch it */
  CHECK_EQ_INT(x_cuMemsetD32(p + 2, 1, 4), CUDA_ERROR_INVALID_VALUE); /* misaligned */
  CHECK_EQ_INT(x_cuMemsetD32(p, 0x01020304, 4), CUDA_SUCCESS);
  CHECK_EQ_INT(((unsigned *)(uintptr_t)p)[3], 0x01020304);
  CHECK_EQ_INT(x_cuMemsetD16Async(p, 0xabcd, 2, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  CHECK_EQ_INT(((unsigned short *)(uintptr_t)p)[1], 0xabcd);
  CHECK_EQ_INT(x_cuMemsetD8Async(p, 1, 3 * MIB + 1, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuMemsetD8Async(p, 1, 8, (CUstream)0x77), CUDA_ERROR_INVALID_HANDLE);
  /* Attributes. */
  unsigned type = 0;
  unsigned managed = 0; /* IS_MANAGED is an unsigned int, as the runtime reads it */
  CUdeviceptr start = 0;
  size_t size = 0;
  void *hostp = NULL;
  CHECK_EQ_INT(x_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100),
               CUDA_SUCCESS);
  CHECK_EQ_INT(type, CU_MEMORYTYPE_DEVICE);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p), CUDA_SUCCESS);
  CHECK_EQ_INT(managed, 1);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&hostp, CU_POINTER_ATTRIBUTE_HOST_POINTER, p), CUDA_SUCCESS);
  CHECK(hostp == (void *)(uintptr_t)p);
  CHECK_EQ_INT(x_cuMemGetAddressRange(&start, &size, p + 4096), CUDA_SUCCESS);
  CHECK(start == p);
  CHECK_EQ_U64(size, 3 * MIB);
  /* Dies with its context. */
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
}

static void test_pointer_queries(void) {
  CUcontext ctx = fgt_init_ctx();
  CUdeviceptr d;
  REQUIRE(cu_cuMemAlloc(&d, 1 * MIB) == CUDA_SUCCESS);
  CUcontext owner = NULL;
  CUdeviceptr dp = 0;
  int ordinal = -1;
  unsigned type = 0;
  void *hp = NULL;
  CHECK_EQ_INT(x_cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d), CUDA_SUCCESS);
  CHECK(owner == ctx);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 8),
               CUDA_SUCCESS);
  CHECK(dp == d + 8);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d),
               CUDA_SUCCESS);
  CHECK_EQ_INT(ordinal, 0);
  /* IS_MANAGED fills an unsigned int: the runtime's cudaPointerGetAttributes
   * reads all four bytes without clearing them (CuPy saw "managed" device
   * memory while the fake wrote one byte). */
  unsigned managed = 0xffffffffu;
  CHECK_EQ_INT(x_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d), CUDA_SUCCESS);
  CHECK_EQ_INT(managed, 0);
  /* cuda.h's numbering: 14 ALLOWED_HANDLE_TYPES (a 64-bit mask: none for
   * cuMemAlloc memory), 15 IS_GPU_DIRECT_RDMA_CAPABLE (a flag: one byte, the
   * next untouched), 16 ACCESS_FLAGS (3, read-write). */
  unsigned long long handle_types = ~0ull;
  CHECK_EQ_INT(x_cuPointerGetAttribute(&handle_types, 14, d), CUDA_SUCCESS);
  CHECK_EQ_U64(handle_types, 0);
  unsigned char rdma[2] = {0xee, 0xee};
  CHECK_EQ_INT(x_cuPointerGetAttribute(rdma, 15, d), CUDA_SUCCESS);
  CHECK(rdma[0] == 0 && rdma[1] == 0xee);
  unsigned access = 0;
  CHECK_EQ_INT(x_cuPointerGetAttribute(&access, 16, d), CUDA_SUCCESS);
  CHECK_EQ_INT(access, 3);
  /* Plain device memory has no host pointer; unknown pointers are an error
   * for the single query and null values for the batch. */
  CHECK_EQ_INT(x_cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + MIB),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d),
               CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
  type = 9;
  owner = ctx;
  void *data[2] = {&type, &owner};
  CHECK_EQ_INT(x_cuPointerGetAttributes(2, attrs, data, 0x10), CUDA_SUCCESS);
  CHECK_EQ_INT(type, 0);
  CHECK(owner == NULL);
  CUdeviceptr base;
  CHECK_EQ_INT(x_cuMemGetAddressRange(&base, NULL, d + MIB), CUDA_ERROR_NOT_FOUND);
  /* Pinned host memory: host type, the same address on the device. */
  void *h;
  REQUIRE(cu_cuMemHostAlloc(&h, 8192, CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS);
  unsigned flags = 0;
  CHECK_EQ_INT(x_cuMemHostGetFlags(&flags, h), CUDA_SUCCESS);
  CHECK_EQ_INT(flags, CU_MEMHOSTALLOC_DEVICEMAP);
  CHECK_EQ_INT(x_cuMemHostGetDevicePointer(&dp, (char *)h + 16, 0), CUDA_SUCCESS);
  CHECK(dp == (CUdeviceptr)(uintptr_t)h + 16);
  CHECK_EQ_INT(x_cuMemHostGetDevicePointer(&dp, h, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                       (CUdeviceptr)(uintptr_t)h),
               CUDA_SUCCESS);
  CHECK_EQ_INT(type, CU_MEMORYTYPE_HOST);
  /* Unified copies both ways. */
  memset(h, 9, 8192);
  CHECK_EQ_INT(x_cuMemcpy(d, (CUdeviceptr)(uintptr_t)h, 8192), CUDA_SUCCESS);
  CHECK_EQ_INT(((unsigned char *)(uintptr_t)d)[8191], 9);
  CHECK_EQ_INT(cu_cuMemFreeHost(h), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

/* VMM memory: device memory of no context; its range is the mapping. */
static void test_pointer_queries_on_vmm(void) {
  fgt_init_ctx();
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  REQUIRE(cu_cuMemAddressReserve(&va, 8 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemCreate(&h, 4 * MIB, &prop, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemMap(va + 2 * MIB, 4 * MIB, 0, h, 0) == CUDA_SUCCESS);
  CUdeviceptr base = 0, dp = 0;
  size_t size = 0;
  CHECK_EQ_INT(x_cuMemGetAddressRange(&base, &size, va + 3 * MIB), CUDA_SUCCESS);
  CHECK(base == va + 2 * MIB);
  CHECK_EQ_U64(size, 4 * MIB);
  CHECK_EQ_INT(x_cuMemGetAddressRange(&base, &size, va), CUDA_ERROR_NOT_FOUND); /* reserved only */
  unsigned type = 0;
  CUcontext owner = (CUcontext)1;
  int ordinal = -1;
  void *hp;
  CHECK_EQ_INT(x_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 2 * MIB),
               CUDA_SUCCESS);
  CHECK_EQ_INT(type, CU_MEMORYTYPE_DEVICE);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, va + 5 * MIB),
               CUDA_SUCCESS);
  CHECK(dp == va + 5 * MIB);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, va + 2 * MIB),
               CUDA_SUCCESS);
  CHECK(owner == NULL);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + 2 * MIB),
               CUDA_SUCCESS);
  CHECK_EQ_INT(ordinal, 0);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, va + 2 * MIB),
               CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cu_cuMemUnmap(va + 2 * MIB, 4 * MIB) == CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 2 * MIB),
               CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cu_cuMemRelease(h) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAddressFree(va, 8 * MIB) == CUDA_SUCCESS);
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

static void test_host_register(void) {
  fgt_init_ctx();
  unsigned long long base = fgt_nvml_used_by(getpid());
  static char buf[3 * 4096] __attribute__((aligned(4096)));
  CHECK_EQ_INT(x_cuMemHostRegister(buf, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuMemHostRegister(buf, sizeof buf, 0x100), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuMemHostRegister((void *)0x1000, 4096, 0),
               CUDA_ERROR_INVALID_VALUE); /* unmapped */
  CHECK_EQ_INT(x_cuMemHostRegister(buf, sizeof buf, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuMemHostRegister(buf + 4096, 100, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), base); /* host memory: not on the device */
  CUdeviceptr dp;
  CHECK_EQ_INT(x_cuMemHostGetDevicePointer(&dp, buf + 5, 0), CUDA_SUCCESS);
  CHECK(dp == (CUdeviceptr)(uintptr_t)(buf + 5));
  CHECK_EQ_INT(x_cuMemHostUnregister(buf + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK_EQ_INT(x_cuMemHostUnregister(buf), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  buf[0] = 1; /* still ours */
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

/* --- stream callbacks ------------------------------------------------------- */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_order[8], g_n, g_on_caller, g_inner = -1;
static pthread_t g_caller;

static void on_done(CUstream s, CUresult status, void *user) {
  (void)s;
  usleep(20000); /* slow: synchronize must wait for it */
  pthread_mutex_lock(&g_mu);
  if (pthread_equal(pthread_self(), g_caller))
    g_on_caller++;
  if (g_n < 8 && status == CUDA_SUCCESS)
    g_order[g_n++] = (int)(intptr_t)user;
  if (g_n == 1)
    g_inner = cu_cuCtxSynchronize(); /* callbacks may not call the driver */
  pthread_mutex_unlock(&g_mu);
}

static void test_stream_callbacks(void) {
  fgt_init_ctx();
  CUstream s;
  REQUIRE(cu_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  g_caller = pthread_self();
  CHECK_EQ_INT(x_cuStreamAddCallback(s, on_done, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuStreamAddCallback((CUstream)0x55, on_done, NULL, 0), CUDA_ERROR_INVALID_HANDLE);
  for (int i = 1; i <= 3; i++)
    CHECK_EQ_INT(x_cuStreamAddCallback(s, on_done, (void *)(intptr_t)i, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* the first sleeps 20 ms */
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  pthread_mutex_lock(&g_mu);
  CHECK_EQ_INT(g_n, 3);
  CHECK(g_order[0] == 1 && g_order[1] == 2 && g_order[2] == 3);
  CHECK_EQ_INT(g_on_caller, 0);
  CHECK_EQ_INT(g_inner, CUDA_ERROR_NOT_PERMITTED);
  pthread_mutex_unlock(&g_mu);
  CHECK_EQ_INT(x_cuStreamQuery(s), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuStreamAddCallback(CU_STREAM_LEGACY, on_done, (void *)4, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_INT(g_n, 4);
  /* Events: never recorded is complete; wait checks handles and flags. */
  CUevent e;
  REQUIRE(cu_cuEventCreate(&e, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuEventQuery(e), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventRecord(e, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuEventQuery(e), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuStreamWaitEvent(s, e, 2), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuStreamWaitEvent(s, (CUevent)s, 0), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(x_cuProfilerStart(), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuProfilerStop(), CUDA_SUCCESS);
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

/* --- images, linker, functions ------------------------------------------------ */
static void test_ptx_without_twin_is_refused_with_a_message(void) {
  fgt_init_ctx();
  char err[1024] = "x", info[256] = "x";
  CUjit_option opts[4] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *vals[4] = {err, (void *)(uintptr_t)sizeof err, info, (void *)(uintptr_t)sizeof info};
  CUmodule m;
  CHECK_EQ_INT(x_cuModuleLoadDataEx(&m, ptx_none, 4, opts, vals), CUDA_ERROR_INVALID_PTX);
  CHECK_MSG(strstr(err, "no_twin_here") && strstr(err, "no host twin"), "error log: '%s'", err);
  CHECK_EQ_INT(cu_cuModuleLoadData(&m, ptx_none), CUDA_ERROR_INVALID_PTX);
  /* The context is not harmed (not a sticky error). */
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CUjit_option badopt = 99;
  CHECK_EQ_INT(x_cuModuleLoadDataEx(&m, ptx_twin, 1, &badopt, vals), CUDA_ERROR_INVALID_VALUE);
  /* A kernel whose body is `ret;` alone loads and launches as the no-op it is. */
  CUmodule mr;
  CUfunction fr;
  CHECK_EQ_INT(cu_cuModuleLoadData(&mr, ptx_ret), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleGetFunction(&fr, mr, "nopCudnnHardwareDetection"), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(fr, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleUnload(mr), CUDA_SUCCESS);
  /* PTX whose kernels have twins loads and runs. */
  REQUIRE(x_cuModuleLoadDataEx(&m, ptx_twin, 4, opts, vals) == CUDA_SUCCESS);
  CHECK_EQ_STR(err, "");
  CUfunction f;
  REQUIRE(cu_cuModuleGetFunction(&f, m, "fgt_fill") == CUDA_SUCCESS);
  CUdeviceptr d;
  REQUIRE(cu_cuMemAlloc(&d, 64) == CUDA_SUCCESS);
  int v = 42, n = 16;
  void *params[3] = {&d, &v, &n};
  CHECK_EQ_INT(x_cuLaunchCooperativeKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, params), CUDA_SUCCESS);
  CHECK_EQ_INT(((int *)(uintptr_t)d)[15], 42);
  CHECK_EQ_INT(x_cuLaunchCooperativeKernel(f, 1000000, 1, 1, 1024, 1, 1, 0, NULL, params),
               CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  CHECK_EQ_INT(x_cuModuleGetGlobal(NULL, NULL, m, "g"), CUDA_ERROR_NOT_FOUND);
  CHECK_EQ_INT(x_cuModuleGetGlobal(NULL, NULL, (CUmodule)f, "g"), CUDA_ERROR_INVALID_HANDLE);
  /* Function queries and occupancy. */
  int a = 0, b = 0;
  CHECK_EQ_INT(x_cuFuncGetAttribute(&a, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
  CHECK_EQ_INT(a, 1024);
  CHECK_EQ_INT(x_cuFuncGetAttribute(&a, 99, f), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuFuncGetAttribute(&a, 0, (CUfunction)m), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(x_cuFuncSetCacheConfig(f, 4), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuOccupancyMaxActiveBlocksPerMultiprocessor(&a, f, 256, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(a, 8); /* 2048 threads (and 64K registers at 32 a thread) per SM */
  CHECK_EQ_INT(x_cuOccupancyMaxActiveBlocksPerMultiprocessor(&a, f, 2048, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(a, 0);
  CHECK_EQ_INT(x_cuOccupancyMaxPotentialBlockSize(&a, &b, f, NULL, 0, 0), CUDA_SUCCESS);
  CHECK(b > 0 && b <= 1024 && b % 32 == 0 && a > 0);
  CHECK_EQ_INT(x_cuOccupancyMaxPotentialBlockSizeWithFlags(&a, &b, f, NULL, 0, 0, 4),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

static void test_linker(void) {
  fgt_init_ctx();
  char err[512] = "x";
  CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {err, (void *)(uintptr_t)sizeof err};
  CUlinkState ls;
  REQUIRE(x_cuLinkCreate(2, opts, vals, &ls) == CUDA_SUCCESS);
  void *cubin = NULL;
  size_t size = 0;
  CHECK_EQ_INT(x_cuLinkComplete(ls, &cubin, &size), CUDA_ERROR_INVALID_VALUE); /* nothing in */
  CHECK_EQ_INT(x_cuLinkAddFile(ls, CU_JIT_INPUT_PTX, "/nonexistent.ptx", 0, NULL, NULL),
               CUDA_ERROR_FILE_NOT_FOUND);
  CHECK_EQ_INT(x_cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx_none, strlen(ptx_none), "n", 0,
                               NULL, NULL),
               CUDA_ERROR_INVALID_PTX);
  CHECK_MSG(strstr(err, "no_twin_here") != NULL, "link error log: '%s'", err);
  CHECK_EQ_INT(x_cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx_twin, strlen(ptx_twin), "t", 0,
                               NULL, NULL),
               CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuLinkAddData(ls, 9, (void *)ptx_twin, 4, "t", 0, NULL, NULL),
               CUDA_ERROR_INVALID_VALUE);
  REQUIRE(x_cuLinkComplete(ls, &cubin, &size) == CUDA_SUCCESS);
  CHECK(cubin && size > 0);
  CUmodule m;
  CHECK_EQ_INT(cu_cuModuleLoadData(&m, cubin), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuLinkDestroy(ls), CUDA_SUCCESS);
  CHECK_EQ_INT(x_cuLinkDestroy(ls), CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(cu_cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

static void test_device_queries(void) {
  REQUIRE(cu_cuInit(0) == CUDA_SUCCESS);
  int major = 0, minor = -1, can = 7;
  CHECK_EQ_INT(x_cuDeviceComputeCapability(&major, &minor, 0), CUDA_SUCCESS);
  CHECK(major == 9 && minor == 0);
  CHECK_EQ_INT(x_cuDeviceComputeCapability(&major, &minor, 1), CUDA_ERROR_INVALID_DEVICE);
  CHECK_EQ_INT(x_cuDeviceCanAccessPeer(&can, 0, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(can, 0); /* not its own peer */
  CHECK_EQ_INT(x_cuDevicePrimaryCtxSetFlags(0, 0x3), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(x_cuDevicePrimaryCtxSetFlags(0, 0x4), CUDA_SUCCESS);
  unsigned flags = 0;
  int active = 1;
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHECK_EQ_INT(flags, 4);
  CHECK_EQ_INT(x_cuDevicePrimaryCtxSetFlags(0, 0), CUDA_SUCCESS);
}

/* Child: two devices, peer access between their primary contexts. Exits 0
 * when every check held, else the number of the failed one. */
static int child_peers(void) {
  if (cu_cuInit(0) != CUDA_SUCCESS)
    return 1;
  int can = 0;
  if (x_cuDeviceCanAccessPeer(&can, 0, 1) != CUDA_SUCCESS || can != 1)
    return 2;
  CUcontext c0, c1;
  if (cu_cuDevicePrimaryCtxRetain(&c0, 0) || cu_cuDevicePrimaryCtxRetain(&c1, 1))
    return 3;
  if (cu_cuCtxSetCurrent(c0))
    return 4;
  if (x_cuCtxEnablePeerAccess(c1, 1) != CUDA_ERROR_INVALID_VALUE)
    return 5;
  if (x_cuCtxEnablePeerAccess(c0, 0) != CUDA_ERROR_INVALID_DEVICE)
    return 6;
  if (x_cuCtxEnablePeerAccess(c1, 0) != CUDA_SUCCESS)
    return 7;
  if (x_cuCtxEnablePeerAccess(c1, 0) != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    return 8;
  if (x_cuCtxDisablePeerAccess(c1) != CUDA_SUCCESS)
    return 9;
  if (x_cuCtxDisablePeerAccess(c1) != CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
    return 10;
  CUdevice d = -1;
  if (cu_cuCtxSetCurrent(c1) || x_cuCtxGetDevice(&d) || d != 1)
    return 11;
  /* A copy from device 0 to device 1, with no context current. */
  CUdeviceptr a, b;
  if (cu_cuMemAlloc(&b, 4096) || cu_cuCtxSetCurrent(c0) || cu_cuMemAlloc(&a, 4096) ||
      cu_cuMemsetD8(a, 0x5a, 4096) || cu_cuCtxSetCurrent(NULL))
    return 12;
  if (x_cuMemcpyPeer(b, c1, a, c0, 4096) || ((unsigned char *)(uintptr_t)b)[4095] != 0x5a)
    return 13;
  if (x_cuMemcpyPeer(b, c1, a, c0, 8192) != CUDA_ERROR_INVALID_VALUE)
    return 14;
  if (x_cuMemcpyPeer(b, (CUcontext)0x10, a, c0, 16) != CUDA_ERROR_INVALID_CONTEXT)
    return 15;
  return 0;
}

static void test_peers_with_two_devices(void) {
  char state[4200];
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.two", getenv("FAKEGPU_STATE"));
  const char *env[] = {"FAKEGPU_DEVICES=2", state, NULL};
  CHECK_EQ_INT(fgt_run_self("peers", env), 0);
  unlink(state + strlen("FAKEGPU_STATE="));
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  fgt_load_nvml();
  REQUIRE(nv_nvmlInit_v2() == NVML_SUCCESS);
  load_extra();
  if (argc > 1 && !strcmp(argv[1], "peers"))
    return child_peers();
  RUN(test_before_init_answers_3);
  RUN(test_without_context_answers_201);
  RUN(test_fork_child_answers_3);
  RUN(test_sticky_error_answers_700);
  RUN(test_managed_memory_is_counted_and_host_visible);
  RUN(test_pointer_queries);
  RUN(test_pointer_queries_on_vmm);
  RUN(test_host_register);
  RUN(test_stream_callbacks);
  RUN(test_ptx_without_twin_is_refused_with_a_message);
  RUN(test_linker);
  RUN(test_device_queries);
  RUN(test_peers_with_two_devices);
  return TEST_END();
}
