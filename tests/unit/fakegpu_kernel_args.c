/* A fake that faults where a GPU would: a kernel whose arguments point into
 * freed or unmapped device memory leaves its context with
 * CUDA_ERROR_ILLEGAL_ADDRESS (700) for every later call, read by the
 * kernel's parameter layout (cuFuncGetParamInfo / cuKernelGetParamInfo
 * answer it) from nvcc's images: a cubin, a compressed fatbin, a fatbin of
 * PTX only. Integers, live pointers and one-past-the-end pointers never
 * fault; a large structure is judged only at FAKEGPU_CHECK_ARGS=2;
 * FAKEGPU_CHECK_ARGS=0 turns the check off; FAKEGPU_QUARANTINE keeps
 * freed ranges from being handed out again. Needs the images nvcc builds
 * (tests/unit/fakegpu.cmake): skipped (77) without nvcc. */
#include <sys/mman.h>

#include "fakegpu/fg_test.h"

#ifdef FAKEGPU_ARGS_IMAGES
typedef CUresult (*param_info_fn)(void *, size_t, size_t *, size_t *);
typedef CUresult (*lib_load_fn)(void **, const void *, void *, void **, unsigned, void *, void **,
                                unsigned);
typedef CUresult (*lib_kernel_fn)(void **, void *, const char *);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

struct holder {
  int a;
  float *p;
  double d;
};

static void *read_image(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", FAKEGPU_ARGS_IMAGES, name);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  REQUIRE(f != NULL);
  static char buf[4][1 << 16];
  static int next;
  char *b = buf[next++ % 4];
  size_t n = fread(b, 1, sizeof buf[0], f);
  fclose(f);
  REQUIRE(n > 0 && n < sizeof buf[0]);
  return b;
}

static CUfunction load(const char *image, const char *kernel) {
  CUmodule m;
  CUfunction f = NULL;
  REQUIRE(cu_cuModuleLoadData(&m, read_image(image)) == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&f, m, kernel) == CUDA_SUCCESS);
  return f;
}

/* args_add(float *x, const float *y, int n, holder s, char c, double *z). */
static const size_t k_off[] = {0, 8, 16, 24, 48, 56}, k_size[] = {8, 8, 4, 24, 1, 8};

static void check_layout(param_info_fn info, void *f, const char *what) {
  for (size_t i = 0; i < 6; i++) {
    size_t off = 99, size = 99;
    CHECK_EQ_INT(info(f, i, &off, &size), CUDA_SUCCESS);
    CHECK_MSG(off == k_off[i] && size == k_size[i],
              "%s: parameter %zu at %zu, %zu bytes; want %zu, %zu", what, i, off, size, k_off[i],
              k_size[i]);
  }
  size_t off, size;
  CHECK_EQ_INT(info(f, 6, &off, &size), CUDA_ERROR_INVALID_VALUE);
}

static void test_layouts_from_every_image(void) {
  param_info_fn func_info = (param_info_fn)fgt_proc("cuFuncGetParamInfo", 12040);
  param_info_fn kernel_info = (param_info_fn)fgt_proc("cuKernelGetParamInfo", 12040);
  lib_load_fn lib_load = (lib_load_fn)fgt_proc("cuLibraryLoadData", 12000);
  lib_kernel_fn lib_kernel = (lib_kernel_fn)fgt_proc("cuLibraryGetKernel", 12000);
  REQUIRE(func_info && kernel_info && lib_load && lib_kernel);
  check_layout(func_info, load("args.cubin", "args_add"), "cubin");
  check_layout(func_info, load("args.fatbin", "args_add"), "compressed fatbin");
  check_layout(func_info, load("args_ptx.fatbin", "args_add"), "PTX fatbin");
  size_t off, size;
  CHECK_EQ_INT(func_info(load("args.cubin", "args_none"), 0, &off, &size),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(func_info(NULL, 0, &off, &size), CUDA_ERROR_INVALID_HANDLE);
  void *lib, *k;
  REQUIRE(lib_load(&lib, read_image("args.fatbin"), NULL, NULL, 0, NULL, NULL, 0) == CUDA_SUCCESS);
  REQUIRE(lib_kernel(&k, lib, "args_add") == CUDA_SUCCESS);
  check_layout(kernel_info, k, "library kernel");
  /* A module of host twins has no image to read it from. */
  CUmodule m;
  CUfunction twin;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&twin, m, "fakegpu_illegal_address") == CUDA_SUCCESS);
  CHECK_EQ_INT(func_info(twin, 0, &off, &size), CUDA_ERROR_NOT_SUPPORTED);
}

/* One launch of args_add with x, y, s.p, z; answers what cuCtxSynchronize
 * answers afterwards, and resets the context when it faulted. */
static CUresult launch(CUfunction f, CUdeviceptr x, CUdeviceptr y, int n, uint64_t p,
                       CUdeviceptr z) {
  struct holder s = {7, (float *)(uintptr_t)p, 1.5};
  char c = 3;
  void *params[] = {&x, &y, &n, &s, &c, &z};
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
  CUresult rc = cu_cuCtxSynchronize();
  if (rc == CUDA_ERROR_ILLEGAL_ADDRESS) {
    CUdeviceptr d;
    CHECK_EQ_INT(cu_cuMemAlloc(&d, 64), CUDA_ERROR_ILLEGAL_ADDRESS); /* sticky */
    REQUIRE(cu_cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
  }
  return rc;
}

static void alloc4(CUdeviceptr *x, CUdeviceptr *y, CUdeviceptr *p, CUdeviceptr *z) {
  REQUIRE(cu_cuMemAlloc(x, 4096) == CUDA_SUCCESS && cu_cuMemAlloc(y, 4096) == CUDA_SUCCESS &&
          cu_cuMemAlloc(p, 64) == CUDA_SUCCESS && cu_cuMemAlloc(z, 2 * MIB) == CUDA_SUCCESS);
}

static void test_freed_pointer_faults(void) {
  const char *images[] = {"args.cubin", "args.fatbin", "args_ptx.fatbin"};
  for (int i = 0; i < 3; i++) {
    CUdeviceptr x, y, p, z;
    alloc4(&x, &y, &p, &z);
    CUfunction f = load(images[i], "args_add");
    /* Live pointers, one past the end of z, an integer: no fault. */
    CHECK_EQ_INT(launch(f, x, y, 1 << 30, p, z + 2 * MIB), CUDA_SUCCESS);
    CHECK_EQ_INT(cu_cuMemFree(y), CUDA_SUCCESS);
    CHECK_MSG(launch(f, x, y, 32, p, z) == CUDA_ERROR_ILLEGAL_ADDRESS,
              "%s: a launch on freed y did not fault", images[i]);
    alloc4(&x, &y, &p, &z);
    f = load(images[i], "args_add");
    CHECK_EQ_INT(cu_cuMemFree(p), CUDA_SUCCESS);
    CHECK_MSG(launch(f, x, y, 32, p + 16, z) == CUDA_ERROR_ILLEGAL_ADDRESS,
              "%s: a freed pointer inside a structure argument did not fault", images[i]);
  }
}

/* The packed form: CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE. */
static void test_packed_buffer(void) {
  CUdeviceptr x, y, p, z;
  alloc4(&x, &y, &p, &z);
  CUfunction f = load("args.cubin", "args_add");
  unsigned char buf[64] = {0};
  memcpy(buf + 0, &x, 8), memcpy(buf + 8, &y, 8), memcpy(buf + 32, &p, 8), memcpy(buf + 56, &z, 8);
  size_t n = sizeof buf;
  void *extra[] = {(void *)1, buf, (void *)2, &n, (void *)0};
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  void *params[] = {&x};
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, extra),
               CUDA_ERROR_INVALID_VALUE);
  void *no_size[] = {(void *)1, buf, (void *)0};
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, no_size),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemFree(z), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  REQUIRE(cu_cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
}

static const CUmemAllocationProp k_prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                           .requestedHandleTypes =
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                           .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
static const CUmemAccessDesc k_rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                     CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

/* VMM: a reservation's unmapped part faults, its mapped part does not; a
 * pool block freed with cuMemFreeAsync faults. */
static void test_vmm_and_pool(void) {
  CUdeviceptr x, y, p, z, va;
  alloc4(&x, &y, &p, &z);
  CUfunction f = load("args.cubin", "args_add");
  CUmemGenericAllocationHandle h;
  REQUIRE(cu_cuMemAddressReserve(&va, 4 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemCreate(&h, 2 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemMap(va, 2 * MIB, 0, h, 0) == CUDA_SUCCESS);
  CHECK_MSG(launch(f, x, y, 32, p, va) == CUDA_ERROR_ILLEGAL_ADDRESS, "mapped without access");
  alloc4(&x, &y, &p, &z);
  f = load("args.cubin", "args_add");
  REQUIRE(cu_cuMemSetAccess(va, 2 * MIB, &k_rw, 1) == CUDA_SUCCESS);
  CHECK_EQ_INT(launch(f, x, y, 32, p, va + 2 * MIB), CUDA_SUCCESS); /* one past the end */
  CHECK_MSG(launch(f, x, y, 32, p, va + 2 * MIB + 8) == CUDA_ERROR_ILLEGAL_ADDRESS,
            "an unmapped part of a reservation did not fault");
  alloc4(&x, &y, &p, &z);
  f = load("args.cubin", "args_add");
  alloc_async_fn alloc_async = (alloc_async_fn)fgt_proc("cuMemAllocAsync", 11020);
  free_async_fn free_async = (free_async_fn)fgt_proc("cuMemFreeAsync", 11020);
  CUdeviceptr b1, b2;
  REQUIRE(alloc_async(&b1, 4096, NULL) == CUDA_SUCCESS &&
          alloc_async(&b2, 4096, NULL) == CUDA_SUCCESS);
  CHECK_EQ_INT(launch(f, x, y, 32, p, b1), CUDA_SUCCESS);
  CHECK_EQ_INT(free_async(b1, NULL), CUDA_SUCCESS);
  CHECK_MSG(launch(f, x, y, 32, p, b1) == CUDA_ERROR_ILLEGAL_ADDRESS,
            "a freed pool block did not fault");
  REQUIRE(cu_cuMemUnmap(va, 2 * MIB) == CUDA_SUCCESS && cu_cuMemRelease(h) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAddressFree(va, 4 * MIB) == CUDA_SUCCESS);
}

/* A freed pointer inside a 128-byte structure: not judged at level 1 (large
 * structures are state hosts fill in part), judged at level 2. Answers what
 * cuCtxSynchronize answers after the launch. */
static CUresult launch_big(void) {
  struct {
    CUdeviceptr p;
    long long rest[15];
  } b = {0, {0}};
  REQUIRE(cu_cuMemAlloc(&b.p, 4096) == CUDA_SUCCESS);
  CUfunction f = load("args.cubin", "args_big");
  size_t off = 9, size = 0;
  CHECK_EQ_INT(((param_info_fn)fgt_proc("cuFuncGetParamInfo", 12040))(f, 0, &off, &size),
               CUDA_SUCCESS);
  CHECK_MSG(off == 0 && size == 128, "args_big: parameter at %zu, %zu bytes", off, size);
  REQUIRE(cu_cuMemFree(b.p) == CUDA_SUCCESS);
  void *params[] = {&b};
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
  CUresult rc = cu_cuCtxSynchronize();
  if (rc)
    REQUIRE(cu_cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
  return rc;
}

static void test_large_structure_level_1(void) {
  CHECK_MSG(launch_big() == CUDA_SUCCESS, "level 1 judged a 128-byte structure");
}

/* A launch of args_index(indexer {size, shape[1], index[1]}, out) whose
 * unwritten index[0] holds a stale pointer into freed memory, as CuPy's
 * CIndexer can; answers what cuCtxSynchronize answers. */
static CUresult launch_stale_index(void) {
  struct {
    long long size, shape[1], index[1];
  } ix = {32, {32}, {0}};
  CUdeviceptr out, gone;
  REQUIRE(cu_cuMemAlloc(&out, 4096) == CUDA_SUCCESS && cu_cuMemAlloc(&gone, 4096) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemFree(gone) == CUDA_SUCCESS);
  ix.index[0] = (long long)gone;
  CUfunction f = load("args.cubin", "args_index");
  void *params[] = {&ix, &out};
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
  CUresult rc = cu_cuCtxSynchronize();
  if (rc)
    REQUIRE(cu_cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
  return rc;
}

/* Level 1 judges a structure's leading pointers, not what follows its sizes:
 * the stale index[0] does not fault; a freed third element of an array of
 * data pointers does. */
static void test_structure_words(void) {
  CHECK_MSG(launch_stale_index() == CUDA_SUCCESS,
            "level 1 faulted on an indexer's unwritten index[] (a GPU never reads it)");
  CUdeviceptr p[3];
  for (int i = 0; i < 3; i++)
    REQUIRE(cu_cuMemAlloc(&p[i], 4096) == CUDA_SUCCESS);
  CUfunction f = load("args.cubin", "args_ptrs");
  void *params[] = {p};
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  REQUIRE(cu_cuMemFree(p[2]) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
  CHECK_MSG(cu_cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS,
            "a freed third pointer of an array of data pointers did not fault");
  REQUIRE(cu_cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
}

static int child_strict(void) {
  fgt_init_ctx();
  if (launch_big() != CUDA_ERROR_ILLEGAL_ADDRESS)
    return 1;
  return launch_stale_index() == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 2;
}

/* FAKEGPU_CHECK_ARGS=0: the same launch on freed memory does not fault. */
static int child_unchecked(void) {
  fgt_init_ctx();
  CUdeviceptr x, y, p, z;
  alloc4(&x, &y, &p, &z);
  CUfunction f = load("args.cubin", "args_add");
  REQUIRE(cu_cuMemFree(y) == CUDA_SUCCESS);
  return launch(f, x, y, 32, p, z) == CUDA_SUCCESS ? 0 : 1;
}

/* 1 when [addr, addr+n) is mapped in this process (reserved counts). */
static int mapped(CUdeviceptr addr, size_t n) {
  unsigned char vec[1024];
  return mincore((void *)(uintptr_t)addr, n, vec) == 0 || errno != ENOMEM;
}

/* FAKEGPU_QUARANTINE=2: the two newest freed ranges stay reserved, older
 * ones go back to the system; quarantined addresses are not handed out. */
static int child_quarantine(void) {
  fgt_init_ctx();
  CUdeviceptr a[3];
  for (int i = 0; i < 3; i++)
    REQUIRE(cu_cuMemAlloc(&a[i], 2 * MIB) == CUDA_SUCCESS);
  for (int i = 0; i < 3; i++)
    REQUIRE(cu_cuMemFree(a[i]) == CUDA_SUCCESS);
  int bad = 0;
  if (mapped(a[0], 2 * MIB) || !mapped(a[1], 2 * MIB) || !mapped(a[2], 2 * MIB)) {
    fprintf(stderr, "quarantine: mapped %d %d %d, want 0 1 1\n", mapped(a[0], 2 * MIB),
            mapped(a[1], 2 * MIB), mapped(a[2], 2 * MIB));
    bad = 1;
  }
  /* a[0] went back to the system: the host may map it next (held here from
   * now on), and a pointer there is a host pointer, not a freed device one. */
  void *host = mmap((void *)(uintptr_t)a[0], 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  for (int i = 0; i < 8; i++) {
    CUdeviceptr d;
    REQUIRE(cu_cuMemAlloc(&d, 2 * MIB) == CUDA_SUCCESS);
    if (d == a[1] || d == a[2]) {
      fprintf(stderr, "quarantine: a quarantined address was handed out again\n");
      bad = 1;
    }
  }
  /* No false fault on the host's buffer; a[1] is still the fake's and faults. */
  CUdeviceptr x, y, p, z;
  alloc4(&x, &y, &p, &z);
  CUfunction f = load("args.cubin", "args_add");
  if (host == (void *)(uintptr_t)a[0] && launch(f, x, y, 32, p, a[0]) != CUDA_SUCCESS) {
    fprintf(stderr, "quarantine: a host buffer where freed device memory was faulted\n");
    bad = 1;
  }
  if (launch(f, x, y, 32, p, a[1]) != CUDA_ERROR_ILLEGAL_ADDRESS) {
    fprintf(stderr, "quarantine: a launch on quarantined memory did not fault\n");
    bad = 1;
  }
  return bad;
}

static void test_settings(void) {
  char state[4200];
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.child", getenv("FAKEGPU_STATE"));
  CHECK_EQ_INT(fgt_run_self("unchecked", (const char *[]){"FAKEGPU_CHECK_ARGS=0", state, NULL}), 0);
  CHECK_MSG(fgt_run_self("strict", (const char *[]){"FAKEGPU_CHECK_ARGS=2", state, NULL}) == 0,
            "FAKEGPU_CHECK_ARGS=2 did not judge a 128-byte structure (exit 1) or an "
            "indexer's index[] (exit 2)");
  CHECK_EQ_INT(fgt_run_self("quarantine", (const char *[]){"FAKEGPU_QUARANTINE=2", state, NULL}),
               0);
  CHECK_EQ_INT(fgt_run_self("bad_setting", (const char *[]){"FAKEGPU_CHECK_ARGS=yes", state, NULL}),
               0);
  unlink(state + strlen("FAKEGPU_STATE="));
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1 && !strcmp(argv[1], "unchecked"))
    return child_unchecked();
  if (argc > 1 && !strcmp(argv[1], "strict"))
    return child_strict();
  if (argc > 1 && !strcmp(argv[1], "quarantine"))
    return child_quarantine();
  if (argc > 1 && !strcmp(argv[1], "bad_setting"))
    return cu_cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1;
  fgt_init_ctx();
  RUN(test_layouts_from_every_image);
  RUN(test_freed_pointer_faults);
  RUN(test_packed_buffer);
  RUN(test_vmm_and_pool);
  RUN(test_large_structure_level_1);
  RUN(test_structure_words);
  RUN(test_settings);
  return TEST_END();
}
#else
int main(void) {
  fprintf(stderr, "fakegpu_kernel_args: built without nvcc, no kernel images: skipped\n");
  return 77;
}
#endif
