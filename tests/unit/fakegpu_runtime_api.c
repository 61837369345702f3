/* What the CUDA runtime needs of the driver (FK_RT_ENTRY_POINTS and the
 * private tables, tests/fakegpu/README.md "The CUDA runtime on the fake"),
 * reached as the runtime reaches it: through cuGetProcAddress_v2 at the
 * versions it asks for. The nvcc-built client (fakegpu_cudart) and CuPy
 * (fakegpu_cupy) run the runtime itself; this test pins the answers. */
#include "fakegpu/fg_test.h"

typedef CUresult (*fn_any)(void);

/* The function cuGetProcAddress_v2 hands out for (name, version); NULL with
 * the status in *st otherwise. */
static void *proc(const char *name, int version, CUdriverProcAddressQueryResult *st) {
  void *pfn = NULL;
  CUdriverProcAddressQueryResult s = -1;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2(name, &pfn, version, 0, &s), CUDA_SUCCESS);
  if (st)
    *st = s;
  return pfn;
}

#define PROC(type, name, version) ((type)proc(name, version, NULL))

static void test_versions(void) {
  /* The CUDA 13 ABIs are not the old ones; the old ones are still there. */
  void *old_dev = proc("cuCtxGetDevice", 2000, NULL),
       *new_dev = proc("cuCtxGetDevice", 13000, NULL);
  CHECK(old_dev != NULL && new_dev != NULL && old_dev != new_dev);
  CHECK(dlsym(fgt_cuda, "cuCtxGetDevice_v2") == NULL); /* see README: Numba 0.56 */
  void *old_sync = proc("cuCtxSynchronize", 2000, NULL),
       *new_sync = proc("cuCtxSynchronize", 13000, NULL);
  CHECK(old_sync != NULL && new_sync != NULL && old_sync != new_sync);
  static const struct {
    const char *name;
    int version;
  } asked[] = {{"cuDevicePrimaryCtxRelease", 7000},
               {"cuDevicePrimaryCtxReset", 7000},
               {"cuLinkCreate", 5050},
               {"cuLinkAddData", 5050},
               {"cuLinkAddFile", 5050},
               {"cuIpcOpenMemHandle", 4010},
               {"cuGetExportTable", 3000},
               {"cuMemAllocAsync", 11020},
               {"cuLibraryLoadData", 12000},
               {"cuMemGetDefaultMemPool", 13000}};
  for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
    CUdriverProcAddressQueryResult st;
    void *p = proc(asked[i].name, asked[i].version, &st);
    CHECK_MSG(p != NULL && st == CU_GET_PROC_ADDRESS_SUCCESS, "%s at %d: status %d", asked[i].name,
              asked[i].version, (int)st);
  }
  CUdriverProcAddressQueryResult st;
  CHECK(proc("cuMemAllocAsync", 11010, &st) == NULL);
  CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

static void test_export_tables(void) {
  CUresult (*get)(const void **, const CUuuid *) =
      PROC(CUresult(*)(const void **, const CUuuid *), "cuGetExportTable", 3000);
  REQUIRE(get != NULL);
  static const unsigned char probe[16] = {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e,
                                          0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9};
  static const unsigned char rt[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                       0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
  CUuuid id;
  const void *table = (const void *)1;
  memcpy(id.bytes, probe, 16);
  CHECK_EQ_INT(get(&table, &id), CUDA_ERROR_INVALID_VALUE);
  CHECK(table == NULL);
  memcpy(id.bytes, rt, 16);
  CHECK_EQ_INT(get(&table, &id), CUDA_SUCCESS);
  REQUIRE(table != NULL);
  CHECK_EQ_U64((unsigned long long)((const size_t *)table)[0], 13 * sizeof(void *));
  /* Slot 2: the primary context of a device, the handle cuDevicePrimaryCtxRetain gives. */
  CUresult (*primary)(CUcontext *, CUdevice) =
      (CUresult(*)(CUcontext *, CUdevice))((void *const *)table)[2];
  CUcontext c = NULL, r = NULL;
  CHECK_EQ_INT(primary(&c, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRetain(&r, 0), CUDA_SUCCESS);
  CHECK(c == r);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}


/* The default pool: counted like cuMemAlloc; the release threshold keeps
 * freed memory in the pool, trimming gives it back. */
static void test_pools(void) {
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) =
      PROC(CUresult(*)(CUdeviceptr *, size_t, CUstream), "cuMemAllocAsync", 11020);
  CUresult (*free_async)(CUdeviceptr, CUstream) =
      PROC(CUresult(*)(CUdeviceptr, CUstream), "cuMemFreeAsync", 11020);
  CUresult (*default_pool)(void **, CUdevice) =
      PROC(CUresult(*)(void **, CUdevice), "cuDeviceGetDefaultMemPool", 11020);
  CUresult (*set_attr)(void *, int, void *) =
      PROC(CUresult(*)(void *, int, void *), "cuMemPoolSetAttribute", 11020);
  CUresult (*get_attr)(void *, int, void *) =
      PROC(CUresult(*)(void *, int, void *), "cuMemPoolGetAttribute", 11020);
  CUresult (*trim)(void *, size_t) = PROC(CUresult(*)(void *, size_t), "cuMemPoolTrimTo", 11020);
  REQUIRE(alloc_async && free_async && default_pool && set_attr && get_attr && trim);
  void *pool = NULL;
  REQUIRE(default_pool(&pool, 0) == CUDA_SUCCESS);
  unsigned long long base = fgt_used(), v = 0;
  CUdeviceptr p;
  REQUIRE(alloc_async(&p, 3 * MIB, NULL) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 4 * MIB); /* rounded like cuMemAlloc */
  CHECK_EQ_INT(cu_cuMemsetD8(p, 7, 3 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(free_async(p, NULL), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 4 * MIB); /* reserved until a synchronisation */
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used(), base); /* threshold 0: back at the synchronisation */
  CHECK_EQ_INT(free_async(p, NULL), CUDA_ERROR_INVALID_VALUE);
  v = 64 * MIB;
  CHECK_EQ_INT(set_attr(pool, 4 /* RELEASE_THRESHOLD */, &v), CUDA_SUCCESS);
  REQUIRE(alloc_async(&p, 8 * MIB, NULL) == CUDA_SUCCESS);
  CHECK_EQ_INT(free_async(p, NULL), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 8 * MIB); /* kept in the pool */
  CHECK_EQ_INT(get_attr(pool, 5 /* RESERVED_MEM_CURRENT */, &v), CUDA_SUCCESS);
  CHECK_EQ_U64(v, 8 * MIB);
  CHECK_EQ_INT(get_attr(pool, 7 /* USED_MEM_CURRENT */, &v), CUDA_SUCCESS);
  CHECK_EQ_U64(v, 0);
  CHECK_EQ_INT(cu_cuMemsetD8(p, 1, 1), CUDA_ERROR_INVALID_VALUE); /* freed: not usable */
  CUdeviceptr q;
  REQUIRE(alloc_async(&q, 6 * MIB, NULL) == CUDA_SUCCESS); /* reuses the cached block */
  CHECK_EQ_U64(fgt_used() - base, 8 * MIB);
  CHECK_EQ_INT(free_async(q, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(trim(pool, 0), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used(), base);
  v = 0;
  CHECK_EQ_INT(set_attr(pool, 4, &v), CUDA_SUCCESS);

  /* Small allocations share a chunk, as on the driver: reserved stays one
   * granule, used counts the bytes asked for, the blocks do not overlap. */
  CUdeviceptr s1, s2;
  unsigned long long reserved = 0;
  REQUIRE(alloc_async(&s1, 1024, NULL) == CUDA_SUCCESS);
  CHECK_EQ_INT(get_attr(pool, 5, &reserved), CUDA_SUCCESS);
  CHECK_EQ_U64(reserved, 2 * MIB);
  REQUIRE(alloc_async(&s2, 2048, NULL) == CUDA_SUCCESS);
  CHECK_EQ_INT(get_attr(pool, 5, &v), CUDA_SUCCESS);
  CHECK_MSG(v == reserved, "a second small allocation reserved more: %llu -> %llu bytes", reserved,
            v);
  CHECK_EQ_U64(fgt_used() - base, 2 * MIB);
  CHECK_EQ_INT(get_attr(pool, 7, &v), CUDA_SUCCESS);
  CHECK_EQ_U64(v, 3072);
  CHECK_MSG(s2 >= s1 + 1024 || s1 >= s2 + 2048, "blocks overlap: %#llx (1024) and %#llx (2048)",
            (unsigned long long)s1, (unsigned long long)s2);
  unsigned char back[2048];
  CHECK_EQ_INT(cu_cuMemsetD8(s1, 0x11, 1024), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemsetD8(s2, 0x22, 2048), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(back, s1, 1024), CUDA_SUCCESS);
  CHECK_MSG(back[0] == 0x11 && back[1023] == 0x11, "block 1 was overwritten: %#x %#x", back[0],
            back[1023]);
  CHECK_EQ_INT(free_async(s1, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(free_async(s1, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(back, s2, 2048), CUDA_SUCCESS);
  CHECK_MSG(back[0] == 0x22 && back[2047] == 0x22, "block 2 changed when block 1 was freed");
  CHECK_EQ_INT(free_async(s2, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(get_attr(pool, 7, &v), CUDA_SUCCESS);
  CHECK_EQ_U64(v, 0);
  CHECK_EQ_U64(fgt_used() - base, 2 * MIB); /* the empty chunk: until a synchronisation */
  CHECK_EQ_INT(cu_cuStreamSynchronize(NULL), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used(), base);
  CHECK_EQ_INT(get_attr(pool, 5, &v), CUDA_SUCCESS);
  CHECK_EQ_U64(v, 0);

  CHECK_EQ_INT(alloc_async(&p, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(alloc_async(&p, MIB, (CUstream)&v), CUDA_ERROR_INVALID_HANDLE);
}

/* Rules: 3 before cuInit, 201 without a context; two devices; managed
 * memory beyond the device; the CUDA 13 cuCtxGetDevice names its context. */
static int child_rules(void) {
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) =
      PROC(CUresult(*)(CUdeviceptr *, size_t, CUstream), "cuMemAllocAsync", 11020);
  CUresult (*get_device_v2)(CUdevice *, CUcontext) =
      PROC(CUresult(*)(CUdevice *, CUcontext), "cuCtxGetDevice", 13000);
  CUresult (*managed)(CUdeviceptr *, size_t, unsigned) =
      PROC(CUresult(*)(CUdeviceptr *, size_t, unsigned), "cuMemAllocManaged", 6000);
  if (!alloc_async || !get_device_v2 || !managed)
    return 10;
  CUdeviceptr p;
  if (alloc_async(&p, MIB, NULL) != CUDA_ERROR_NOT_INITIALIZED)
    return 11;
  if (cu_cuInit(0) != CUDA_SUCCESS)
    return 12;
  if (alloc_async(&p, MIB, NULL) != CUDA_ERROR_INVALID_CONTEXT)
    return 13;
  CUcontext c0, c1;
  if (cu_cuDevicePrimaryCtxRetain(&c0, 0) || cu_cuDevicePrimaryCtxRetain(&c1, 1) ||
      cu_cuCtxSetCurrent(c0))
    return 14;
  CUdevice d = -1;
  if (get_device_v2(&d, c1) != CUDA_SUCCESS || d != 1)
    return 15; /* the context named, not the current one */
  if (get_device_v2(&d, NULL) != CUDA_SUCCESS || d != 0)
    return 16;
  /* Twice the device (128 MiB, 16 of them the context): all of it usable. */
  size_t n = 256 * MIB;
  if (managed(&p, n, 1 /* ATTACH_GLOBAL */) != CUDA_SUCCESS)
    return 17;
  unsigned char *m = (unsigned char *)(uintptr_t)p;
  for (size_t i = 0; i < n; i += 4096)
    m[i] = (unsigned char)(i >> 12);
  for (size_t i = 0; i < n; i += 4096)
    if (m[i] != (unsigned char)(i >> 12))
      return 18;
  if (fgt_used() != 128 * MIB) /* the part that fits is resident and counted */
    return 19;
  if (cu_cuMemFree(p) != CUDA_SUCCESS || fgt_used() != 16 * MIB)
    return 20;
  return 0;
}

/* FAKEGPU_TRACE=2: a name the fake does not have gets a stub that answers
 * 801 (and says on stderr which function was called); without it, NULL. */
static int child_trace_stubs(void) {
  CUdriverProcAddressQueryResult st;
  CUresult (*a)(void) =
      (CUresult(*)(void))proc("cuGraphAddExternalSemaphoresSignalNode", 11020, &st);
  CUresult (*b)(void) =
      (CUresult(*)(void))proc("cuGraphAddExternalSemaphoresWaitNode", 11020, NULL);
  if (!a || !b || a == b || st != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
    return 10;
  if (a() != CUDA_ERROR_NOT_SUPPORTED || b() != CUDA_ERROR_NOT_SUPPORTED)
    return 11;
  return proc("cuGraphAddExternalSemaphoresSignalNode", 11020, NULL) == (void *)a ? 0 : 12;
}

/* cudaMemPrefetchAsync: to a device of the process or to the host; any
 * other destination is 101 (CuPy's test_managed_memory_prefetch_basic). */
typedef struct {
  int type, id;
} loc_t;
static void test_prefetch_destinations(void) {
  CUresult (*managed)(CUdeviceptr *, size_t, unsigned) =
      PROC(CUresult(*)(CUdeviceptr *, size_t, unsigned), "cuMemAllocManaged", 6000);
  CUresult (*pf1)(CUdeviceptr, size_t, CUdevice, CUstream) =
      PROC(CUresult(*)(CUdeviceptr, size_t, CUdevice, CUstream), "cuMemPrefetchAsync", 8000);
  CUresult (*pf2)(CUdeviceptr, size_t, loc_t, unsigned, CUstream) =
      PROC(CUresult(*)(CUdeviceptr, size_t, loc_t, unsigned, CUstream), "cuMemPrefetchAsync",
           12020);
  REQUIRE(managed && pf1 && pf2);
  CUdeviceptr p = 0;
  REQUIRE(managed(&p, 4096, 1) == CUDA_SUCCESS);
  CHECK_EQ_INT(pf1(p, 4096, 0, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(pf1(p, 4096, -1, NULL), CUDA_SUCCESS); /* CU_DEVICE_CPU */
  CHECK_EQ_INT(pf1(p, 4096, 100000000, NULL), CUDA_ERROR_INVALID_DEVICE);
  CHECK_EQ_INT(pf1(p, 4096, -2, NULL), CUDA_ERROR_INVALID_DEVICE);
  CHECK_EQ_INT(pf2(p, 4096, (loc_t){1, 0}, 0, NULL), CUDA_SUCCESS); /* device 0 */
  CHECK_EQ_INT(pf2(p, 4096, (loc_t){2, 0}, 0, NULL), CUDA_SUCCESS); /* host */
  CHECK_EQ_INT(pf2(p, 4096, (loc_t){1, 100000000}, 0, NULL), CUDA_ERROR_INVALID_DEVICE);
  CHECK_EQ_INT(pf2(p, 4096, (loc_t){9, 0}, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(pf1(p, 8192, 0, NULL), CUDA_ERROR_INVALID_VALUE); /* past its end */
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_SUCCESS);
}

static void test_children(void) {
  /* A state file of its own: the device settings are the first process's. */
  char state[4200];
  const char *st = getenv("FAKEGPU_STATE");
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.rules", st ? st : "/tmp/fakegpu-runtime-api");
  const char *env[] = {"FAKEGPU_DEVICES=2", "FAKEGPU_MEMORY_MIB=128", "FAKEGPU_CONTEXT_MIB=16",
                       state, NULL};
  CHECK_EQ_INT(fgt_run_self("rules", env), 0);
  const char *trace[] = {"FAKEGPU_TRACE=2", NULL};
  CHECK_EQ_INT(fgt_run_self("trace_stubs", trace), 0);
  CHECK(proc("cuGraphAddExternalSemaphoresSignalNode", 11020, NULL) ==
        NULL); /* this process: no trace */
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "rules")         ? child_rules()
           : !strcmp(argv[1], "trace_stubs") ? child_trace_stubs()
                                             : 99;
  fgt_init_ctx();
  RUN(test_versions);
  RUN(test_export_tables);
  RUN(test_pools);
  RUN(test_prefetch_destinations);
  RUN(test_children);
  return TEST_END();
}
