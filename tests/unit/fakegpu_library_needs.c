/* What the CUDA math libraries (cuRAND, cuBLAS/cuBLASLt, cuSOLVER, cuSPARSE)
 * and NCCL need of the driver beyond the runtime's own needs
 * (tests/fakegpu/README.md "The CUDA math libraries"): cuMemFree(0) is
 * cudaFree(0) and succeeds; device variables of a binary image
 * (cuModuleGetGlobal_v2 / cuLibraryGetGlobal: size, initial bytes, memory
 * counted and given back, not freeable by cuMemFree); thread block cluster
 * occupancy; cuKernelGetLibrary; cuMemRetainAllocationHandle; the names
 * cuBLASLt resolves with dlsym and the fake does not implement (801);
 * kernel names of any length (cuRAND's templates); a kernel's dynamic
 * shared memory limit kept for occupancy (cuBLASLt's 227 KiB kernels); the two private tables
 * cuFFT asks for (a context's id; the kernels of a module).
 * The nvcc-built client (fakegpu_cudalibs) runs the libraries themselves. */
#include "fakegpu/fg_test.h"

#define PROC(type, name, version) ((type)proc(name, version))

/* cuda.h's types for what this test calls (the fake's headers keep them
 * private). */
typedef void *CUlibrary;
typedef void *CUkernel;
typedef struct {
  int id;
  char pad[4];
  union {
    char pad[64];
    struct {
      unsigned x, y, z;
    } clusterDim;
  } value;
} CUlaunchAttribute;
typedef struct {
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned numAttrs;
} CUlaunchConfig;
#define LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4
#define ERROR_INVALID_CLUSTER_SIZE 912

static void *proc(const char *name, int version) {
  void *pfn = NULL;
  CUdriverProcAddressQueryResult s = -1;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2(name, &pfn, version, 0, &s), CUDA_SUCCESS);
  return pfn;
}

/* --- a minimal ELF cubin: two variables, one kernel name ------------------ */
enum { SEC_NULL, SEC_SHSTR, SEC_STR, SEC_SYM, SEC_INIT, SEC_BSS, SEC_TEXT, NSEC };
static const char k_shstr[] =
    "\0.shstrtab\0.strtab\0.symtab\0.nv.global.init\0.nv.global\0.text.kern";
/* After the symbols' names, cuRAND's double-precision XORWOW kernel: kernel
 * names are not limited in length (this one has 139 characters; the fake
 * once kept 127 and answered 500, which cuRAND turned into
 * CURAND_STATUS_LAUNCH_FAILURE). */
#define LONG_KERNEL                                                                               \
  "_Z13gen_sequencedI17curandStateXORWOWdiXadL_Z28curand_uniform_double_noargsIS0_EdPT_iEE10rng_" \
  "configIS0_L14curandOrdering101EEEvS3_PT0_mmT1_"
static const char k_str[] = "\0gv_init\0gv_zero\0kern\0" LONG_KERNEL;
static const unsigned char k_init[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};

static void put16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static void section(unsigned char *sh, uint32_t name, uint32_t type, uint64_t off, uint64_t size,
                    uint32_t link, uint64_t entsize) {
  put32(sh, name);
  put32(sh + 4, type);
  put64(sh + 8, type == 1 || type == 8 ? 2 /* SHF_ALLOC */ : 0);
  put64(sh + 24, off);
  put64(sh + 32, size);
  put32(sh + 40, link);
  put64(sh + 56, entsize);
}

static void symbol(unsigned char *st, uint32_t name, unsigned type, uint16_t shndx, uint64_t value,
                   uint64_t size) {
  put32(st, name);
  st[4] = (unsigned char)(0x10 | type); /* STB_GLOBAL */
  put16(st + 6, shndx);
  put64(st + 8, value);
  put64(st + 16, size);
}

/* gv_init: 8 bytes at offset 8 of .nv.global.init (1..8); gv_zero: 64 bytes
 * of .nv.global (no contents: zero); kern: a function. */
static size_t make_cubin(unsigned char *img) {
  memset(img, 0, 1024);
  memcpy(img,
         "\x7f"
         "ELF\x02\x01\x01",
         7);
  put16(img + 0x10, 2);   /* ET_EXEC */
  put16(img + 0x12, 190); /* EM_CUDA */
  size_t off = 64;
  size_t shstr = off;
  memcpy(img + off, k_shstr, sizeof k_shstr);
  off += sizeof k_shstr;
  size_t str = off;
  memcpy(img + off, k_str, sizeof k_str);
  off += sizeof k_str;
  off = (off + 7) & ~(size_t)7;
  size_t sym = off;
  symbol(img + off + 24, 1, 1 /* OBJECT */, SEC_INIT, 8, 8);
  symbol(img + off + 48, 9, 1, SEC_BSS, 0, 64);
  symbol(img + off + 72, 17, 2 /* FUNC */, SEC_TEXT, 0, 16);
  off += 4 * 24;
  size_t init = off;
  memcpy(img + off, k_init, sizeof k_init);
  off += sizeof k_init;
  size_t text = off;
  off += 16;
  size_t sh = (off + 63) & ~(size_t)63;
  put64(img + 0x28, sh);
  put16(img + 0x34, 64);
  put16(img + 0x3a, 64);
  put16(img + 0x3c, NSEC);
  put16(img + 0x3e, SEC_SHSTR);
  section(img + sh + 64 * SEC_SHSTR, 1, 3, shstr, sizeof k_shstr, 0, 0);
  section(img + sh + 64 * SEC_STR, 11, 3, str, sizeof k_str, 0, 0);
  section(img + sh + 64 * SEC_SYM, 19, 2, sym, 4 * 24, SEC_STR, 24);
  section(img + sh + 64 * SEC_INIT, 27, 1, init, sizeof k_init, 0, 0);
  section(img + sh + 64 * SEC_BSS, 43, 8, 0, 64, 0, 0);
  section(img + sh + 64 * SEC_TEXT, 54, 1, text, 16, 0, 0);
  return sh + 64 * NSEC;
}

static unsigned char g_img[1024];

static void test_free_null(void) {
  CHECK_EQ_INT(cu_cuMemFree(0), CUDA_SUCCESS); /* cudaFree(0), as the driver */
  CHECK_EQ_INT(cu_cuMemFree(16), CUDA_ERROR_INVALID_VALUE);
}

static void test_module_globals(void) {
  CUresult (*get_global)(CUdeviceptr *, size_t *, CUmodule, const char *) =
      PROC(CUresult(*)(CUdeviceptr *, size_t *, CUmodule, const char *), "cuModuleGetGlobal", 3020);
  REQUIRE(get_global != NULL);
  unsigned long long used0 = fgt_used();
  CUmodule m;
  REQUIRE(cu_cuModuleLoadData(&m, g_img) == CUDA_SUCCESS);
  CUdeviceptr a = 0, z = 0;
  size_t na = 0, nz = 0;
  CHECK_EQ_INT(get_global(&a, &na, m, "gv_init"), CUDA_SUCCESS);
  CHECK_EQ_INT(get_global(&z, &nz, m, "gv_zero"), CUDA_SUCCESS);
  CHECK(na == 8 && nz == 64);
  CHECK_MSG(a && z && a != z && a % 256 == 0 && z % 256 == 0, "addresses %#llx %#llx",
            (unsigned long long)a, (unsigned long long)z);
  unsigned char got[64];
  CHECK_EQ_INT(cu_cuMemcpyDtoH(got, a, 8), CUDA_SUCCESS);
  CHECK(!memcmp(got, k_init + 8, 8)); /* its initial bytes */
  memset(got, 0xee, sizeof got);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(got, z, 64), CUDA_SUCCESS);
  CHECK(got[0] == 0 && got[63] == 0);
  CHECK_EQ_INT(cu_cuMemcpyHtoD(z, k_init, 16), CUDA_SUCCESS);
  CUdeviceptr again = 0;
  CHECK_EQ_INT(get_global(&again, NULL, m, "gv_zero"), CUDA_SUCCESS);
  CHECK(again == z); /* the same variable every time */
  CHECK_EQ_INT(get_global(&again, NULL, m, "kern"), CUDA_ERROR_NOT_FOUND);
  CHECK_EQ_INT(get_global(&again, NULL, m, "nothing"), CUDA_ERROR_NOT_FOUND);
  CHECK_EQ_INT(cu_cuMemFree(a), CUDA_ERROR_INVALID_VALUE); /* the module's, not yours */
  CHECK_MSG(fgt_used() > used0, "used %llu before, %llu with variables", used0, fgt_used());
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  CHECK_EQ_INT((long long)fgt_used(), (long long)used0);
}

static void test_library(void) {
  CUresult (*load)(CUlibrary *, const void *, void *, void *, unsigned, void *, void *, unsigned) =
      PROC(CUresult(*)(CUlibrary *, const void *, void *, void *, unsigned, void *, void *,
                       unsigned),
           "cuLibraryLoadData", 12000);
  CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *) =
      PROC(CUresult(*)(CUkernel *, CUlibrary, const char *), "cuLibraryGetKernel", 12000);
  CUresult (*get_global)(CUdeviceptr *, size_t *, CUlibrary, const char *) =
      PROC(CUresult(*)(CUdeviceptr *, size_t *, CUlibrary, const char *), "cuLibraryGetGlobal",
           12000);
  CUresult (*unload)(CUlibrary) = PROC(CUresult(*)(CUlibrary), "cuLibraryUnload", 12000);
  CUresult (*kernel_lib)(CUlibrary *, CUkernel) =
      (CUresult(*)(CUlibrary *, CUkernel))dlsym(fgt_cuda, "cuKernelGetLibrary");
  CUresult (*clusters)(int *, CUkernel, const CUlaunchConfig *) =
      PROC(CUresult(*)(int *, CUkernel, const CUlaunchConfig *), "cuOccupancyMaxActiveClusters",
           11070);
  CUresult (*cluster_size)(int *, CUkernel, const CUlaunchConfig *) =
      PROC(CUresult(*)(int *, CUkernel, const CUlaunchConfig *),
           "cuOccupancyMaxPotentialClusterSize", 11070);
  REQUIRE(load && get_kernel && get_global && unload && kernel_lib && clusters && cluster_size);
  unsigned long long used0 = fgt_used();
  CUlibrary lib;
  REQUIRE(load(&lib, g_img, NULL, NULL, 0, NULL, NULL, 0) == CUDA_SUCCESS);
  CUkernel k;
  REQUIRE(get_kernel(&k, lib, "kern") == CUDA_SUCCESS);
  CUlibrary back = NULL;
  CHECK_EQ_INT(kernel_lib(&back, k), CUDA_SUCCESS);
  CHECK(back == lib);
  CUdeviceptr a = 0;
  size_t n = 0;
  CHECK_EQ_INT(get_global(&a, &n, lib, "gv_init"), CUDA_SUCCESS);
  CHECK(a != 0 && n == 8);

  /* 128 threads: 16 blocks per SM, 132 SMs; clusters of 2 -> 1056. */
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = 2;
  attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int v = -1;
  CHECK_EQ_INT(clusters(&v, k, &cfg), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 1056);
  attr.value.clusterDim.x = 17;
  CHECK_EQ_INT(clusters(&v, k, &cfg), ERROR_INVALID_CLUSTER_SIZE);
  cfg.numAttrs = 0;
  CHECK_EQ_INT(clusters(&v, k, &cfg), ERROR_INVALID_CLUSTER_SIZE);
  CHECK_EQ_INT(cluster_size(&v, k, &cfg), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 8);
  CHECK_EQ_INT(clusters(&v, k, NULL), CUDA_ERROR_INVALID_VALUE);

  /* cuBLASLt (PyTorch's matmul) raises a kernel's dynamic shared memory to
   * the opt-in 227 KiB, then asks how many clusters of 2 fit with all of it:
   * one block per SM, 66 clusters. The fake once kept 48 KiB as the limit,
   * answered 0, and cuBLASLt divided by it (SIGFPE). */
  CUresult (*kset)(int, int, CUkernel, CUdevice) =
      PROC(CUresult(*)(int, int, CUkernel, CUdevice), "cuKernelSetAttribute", 12000);
  CUresult (*kget)(int *, int, CUkernel, CUdevice) =
      PROC(CUresult(*)(int *, int, CUkernel, CUdevice), "cuKernelGetAttribute", 12000);
  CUresult (*fget)(int *, int, CUfunction) =
      PROC(CUresult(*)(int *, int, CUfunction), "cuFuncGetAttribute", 2020);
  CUresult (*fset)(CUfunction, int, int) =
      PROC(CUresult(*)(CUfunction, int, int), "cuFuncSetAttribute", 9000);
  CUresult (*active)(int *, CUfunction, int, size_t) =
      PROC(CUresult(*)(int *, CUfunction, int, size_t),
           "cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050);
  REQUIRE(kset && kget && fget && fset && active);
  enum { MAX_DYN = 8 };
  CHECK_EQ_INT(kget(&v, MAX_DYN, k, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 48 * 1024);
  CHECK_EQ_INT(active(&v, (CUfunction)k, 128, 100 * 1024), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 0); /* more than the kernel may use */
  CHECK_EQ_INT(kset(MAX_DYN, 228 * 1024, k, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(kset(MAX_DYN, 232448, k, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(kget(&v, MAX_DYN, k, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 232448);
  CHECK_EQ_INT(fget(&v, MAX_DYN, (CUfunction)k), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 232448);
  CHECK_EQ_INT(active(&v, (CUfunction)k, 128, 100 * 1024), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 2); /* 228 KiB of shared memory per SM */
  attr.value.clusterDim.x = 2;
  cfg.numAttrs = 1;
  cfg.sharedMemBytes = 232448;
  CHECK_EQ_INT(clusters(&v, k, &cfg), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 66);
  /* A module's function keeps its own. */
  CUmodule m;
  CUfunction f;
  REQUIRE(cu_cuModuleLoadData(&m, g_img) == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&f, m, "kern") == CUDA_SUCCESS);
  CHECK_EQ_INT(fset(f, MAX_DYN, 100 * 1024), CUDA_SUCCESS);
  CHECK_EQ_INT(fget(&v, MAX_DYN, f), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 100 * 1024);
  CHECK_EQ_INT(active(&v, f, 128, 100 * 1024), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 2);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  CHECK_EQ_INT(unload(lib), CUDA_SUCCESS);
  CHECK_EQ_INT((long long)fgt_used(), (long long)used0);
}

/* A kernel named by a long mangled template is found, launched (a no-op)
 * and named back whole, through a library and through a module. */
static void test_long_kernel_name(void) {
  CUresult (*load)(CUlibrary *, const void *, void *, void *, unsigned, void *, void *, unsigned) =
      PROC(CUresult(*)(CUlibrary *, const void *, void *, void *, unsigned, void *, void *,
                       unsigned),
           "cuLibraryLoadData", 12000);
  CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *) =
      PROC(CUresult(*)(CUkernel *, CUlibrary, const char *), "cuLibraryGetKernel", 12000);
  CUresult (*kernel_name)(const char **, CUkernel) =
      PROC(CUresult(*)(const char **, CUkernel), "cuKernelGetName", 12030);
  CUresult (*kernel_function)(CUfunction *, CUkernel) =
      PROC(CUresult(*)(CUfunction *, CUkernel), "cuKernelGetFunction", 12000);
  CUresult (*func_name)(const char **, CUfunction) =
      PROC(CUresult(*)(const char **, CUfunction), "cuFuncGetName", 12030);
  CUresult (*unload)(CUlibrary) = PROC(CUresult(*)(CUlibrary), "cuLibraryUnload", 12000);
  REQUIRE(load && get_kernel && kernel_name && kernel_function && func_name && unload);
  REQUIRE(strlen(LONG_KERNEL) == 139);
  CUlibrary lib;
  REQUIRE(load(&lib, g_img, NULL, NULL, 0, NULL, NULL, 0) == CUDA_SUCCESS);
  CUkernel k = NULL;
  CHECK_EQ_INT(get_kernel(&k, lib, LONG_KERNEL), CUDA_SUCCESS);
  const char *name = NULL;
  CHECK_EQ_INT(kernel_name(&name, k), CUDA_SUCCESS);
  CHECK_EQ_STR(name ? name : "(null)", LONG_KERNEL);
  CUfunction f = NULL;
  CHECK_EQ_INT(kernel_function(&f, k), CUDA_SUCCESS);
  name = NULL;
  CHECK_EQ_INT(func_name(&name, f), CUDA_SUCCESS);
  CHECK_EQ_STR(name ? name : "(null)", LONG_KERNEL);
  CHECK_EQ_INT(cu_cuLaunchKernel((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL),
               CUDA_SUCCESS);
  /* A long name the image does not hold is still not found. */
  CHECK_EQ_INT(get_kernel(&k, lib, LONG_KERNEL "x"), CUDA_ERROR_NOT_FOUND);
  CHECK_EQ_INT(unload(lib), CUDA_SUCCESS);

  CUmodule m;
  REQUIRE(cu_cuModuleLoadData(&m, g_img) == CUDA_SUCCESS);
  f = NULL;
  CHECK_EQ_INT(cu_cuModuleGetFunction(&f, m, LONG_KERNEL), CUDA_SUCCESS);
  name = NULL;
  CHECK_EQ_INT(func_name(&name, f), CUDA_SUCCESS);
  CHECK_EQ_STR(name ? name : "(null)", LONG_KERNEL);
  CHECK_EQ_INT(cu_cuModuleGetFunction(&f, m, LONG_KERNEL "x"), CUDA_ERROR_NOT_FOUND);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
}

/* cuFFT's tables. 21318c60-…: slot 4 is a context's id, as cuCtxGetId.
 * 6e163fbe-…: slot 7 calls back with each kernel of a module and answers
 * how many (cuFFT loads modules of one kernel and wants 1). */
static void found_kernel(void *opaque, CUfunction f) {
  CUfunction *out = opaque;
  *out = f;
}

static void test_fft_tables(void) {
  CUresult (*get)(const void **, const CUuuid *) =
      PROC(CUresult(*)(const void **, const CUuuid *), "cuGetExportTable", 3000);
  CUresult (*ctx_id)(CUcontext, unsigned long long *) =
      PROC(CUresult(*)(CUcontext, unsigned long long *), "cuCtxGetId", 12000);
  CUresult (*func_name)(const char **, CUfunction) =
      PROC(CUresult(*)(const char **, CUfunction), "cuFuncGetName", 12030);
  REQUIRE(get && ctx_id && func_name);
  static const unsigned char ctx_uuid[16] = {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                                             0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2};
  static const unsigned char mod_uuid[16] = {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                             0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e};
  CUuuid id;
  const void *t = NULL;
  memcpy(id.bytes, ctx_uuid, 16);
  REQUIRE(get(&t, &id) == CUDA_SUCCESS && t != NULL);
  void *const *slots = t;
  CHECK((size_t)slots[0] >= 5 * sizeof(void *) && slots[4] != NULL);
  CUresult (*slot_id)(CUcontext, unsigned long long *) =
      (CUresult(*)(CUcontext, unsigned long long *))slots[4];
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur);
  unsigned long long want = 0, got = 0;
  CHECK_EQ_INT(ctx_id(cur, &want), CUDA_SUCCESS);
  CHECK_EQ_INT(slot_id(cur, &got), CUDA_SUCCESS);
  CHECK_EQ_U64(got, want);

  memcpy(id.bytes, mod_uuid, 16);
  t = NULL;
  REQUIRE(get(&t, &id) == CUDA_SUCCESS && t != NULL);
  slots = t;
  REQUIRE((size_t)slots[0] > 7 * sizeof(void *) && slots[7] != NULL); /* cuFFT checks both */
  unsigned long long (*kernels)(CUcontext, CUmodule, void (*)(void *, CUfunction), void *) =
      (unsigned long long (*)(CUcontext, CUmodule, void (*)(void *, CUfunction), void *))slots[7];
  CUmodule m;
  REQUIRE(cu_cuModuleLoadData(&m, g_img) == CUDA_SUCCESS);
  CUfunction f = NULL;
  CHECK_EQ_U64(kernels(cur, m, found_kernel, &f), 1); /* the image's one kernel */
  const char *name = NULL;
  CHECK_EQ_INT(func_name(&name, f), CUDA_SUCCESS);
  CHECK_EQ_STR(name ? name : "(null)", "kern");
  /* A module whose kernels cannot be read (not a binary image) has none. */
  CUmodule marker;
  REQUIRE(cu_cuModuleLoadData(&marker, "") == CUDA_SUCCESS);
  f = NULL;
  CHECK_EQ_U64(kernels(cur, marker, found_kernel, &f), 0);
  CHECK(f == NULL);
  /* Not a module, and no context: none. */
  CHECK_EQ_U64(kernels(cur, (CUmodule)&f, found_kernel, &f), 0);
  CUcontext popped = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&popped) == CUDA_SUCCESS);
  CHECK_EQ_U64(kernels(NULL, m, found_kernel, &f), 0);
  CHECK(f == NULL);
  REQUIRE(cu_cuCtxPushCurrent(popped) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleUnload(marker), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
}

/* A fatbin holding only PTX (some of cuFFT's modules: sm_75 PTX, LZ4
 * compressed): its kernels are the PTX's .entry names, its variables the
 * module-scope .global/.const declarations. The entry's
 * compressed size is 32 bits; cuFFT's entries keep other bits above it. */
static const char k_ptx[] =
    ".version 8.0\n.target sm_75\n.address_size 64\n"
    ".visible .global .align 4 .u32 counter = 7;\n"
    ".visible .const .align 4 .f32 table[3] = {0f3F800000, 2.5, -1.0};\n"
    ".global .align 8 .b8 lut[] = {1, 2, 3, 4, 5};\n"
    ".extern .global .u32 ext;\n"
    ".visible .entry first_kernel(.param .u64 a)\n{ ld.global.u32 %r1, [counter]; ret; }\n"
    ".visible .entry second_kernel()\n{ ret; }\n"
    ".visible .global .align 8 .u64 after_fn;\n";

static size_t make_ptx_fatbin(unsigned char *img, size_t cap, int compress) {
  typedef int (*lz4_fn)(const char *, char *, int, int);
  unsigned char payload[512];
  size_t n = sizeof k_ptx, csize = n;
  memcpy(payload, k_ptx, n);
  if (compress) {
    void *h = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    void *sym = h ? dlsym(h, "LZ4_compress_default") : NULL;
    if (!sym)
      return 0;
    lz4_fn lz4;
    memcpy(&lz4, &sym, sizeof lz4);
    int got = lz4(k_ptx, (char *)payload, (int)n, (int)sizeof payload);
    if (got <= 0)
      return 0;
    csize = (size_t)got;
  }
  size_t padded = (csize + 7) & ~(size_t)7; /* entries are padded: not part of the data */
  size_t total = 16 + 64 + padded;
  REQUIRE(total <= cap);
  memset(img, 0, total);
  put32(img, 0xba55ed50u);
  put16(img + 4, 1);
  put16(img + 6, 16);
  put64(img + 8, 64 + padded);
  unsigned char *e = img + 16;
  put16(e, 1); /* PTX */
  put16(e + 2, 0x101);
  put32(e + 4, 64);
  put64(e + 8, padded);
  put32(e + 16, (uint32_t)csize);
  put32(e + 20, 0x40); /* what cuFFT's entries hold above the size */
  put32(e + 28, 75);
  put64(e + 40, compress ? 0x2011 : 0x11);
  put64(e + 56, n);
  memcpy(e + 64, payload, csize);
  return total;
}

static void collect_kernel(void *opaque, CUfunction f) {
  CUfunction *out = opaque;
  if (!out[0])
    out[0] = f;
  else
    out[1] = f;
}

static void test_ptx_only_kernels(void) {
  CUresult (*get)(const void **, const CUuuid *) =
      PROC(CUresult(*)(const void **, const CUuuid *), "cuGetExportTable", 3000);
  CUresult (*func_name)(const char **, CUfunction) =
      PROC(CUresult(*)(const char **, CUfunction), "cuFuncGetName", 12030);
  REQUIRE(get && func_name);
  static const unsigned char mod_uuid[16] = {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                             0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e};
  CUuuid id;
  memcpy(id.bytes, mod_uuid, 16);
  const void *t = NULL;
  REQUIRE(get(&t, &id) == CUDA_SUCCESS && t != NULL);
  unsigned long long (*kernels)(CUcontext, CUmodule, void (*)(void *, CUfunction), void *) =
      (unsigned long long (*)(CUcontext, CUmodule, void (*)(void *, CUfunction), void *))(
          (void *const *)t)[7];
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  for (int compress = 0; compress < 2; compress++) {
    static unsigned char img[1024];
    size_t n = make_ptx_fatbin(img, sizeof img, compress);
    CHECK_MSG(n > 0, "could not build the %s PTX fatbin (liblz4.so.1?)",
              compress ? "LZ4" : "plain");
    if (!n)
      continue;
    CUmodule m;
    REQUIRE(cu_cuModuleLoadData(&m, img) == CUDA_SUCCESS);
    CUfunction f[2] = {NULL, NULL};
    CHECK_EQ_U64(kernels(cur, m, collect_kernel, f), 2);
    const char *a = NULL, *b = NULL;
    CHECK_EQ_INT(func_name(&a, f[0]), CUDA_SUCCESS);
    CHECK_EQ_INT(func_name(&b, f[1]), CUDA_SUCCESS);
    CHECK_EQ_STR(a ? a : "(null)", "first_kernel");
    CHECK_EQ_STR(b ? b : "(null)", "second_kernel");
    /* Its variables are the PTX's module-scope .global / .const ones, with
     * their initial values (cuFFT's multi-GPU plans ask for lut_sp). */
    CUresult (*get_global)(CUdeviceptr *, size_t *, CUmodule, const char *) =
        PROC(CUresult(*)(CUdeviceptr *, size_t *, CUmodule, const char *), "cuModuleGetGlobal",
             3020);
    CUdeviceptr d = 0;
    size_t vn = 0;
    unsigned u = 0;
    CHECK_EQ_INT(get_global(&d, &vn, m, "counter"), CUDA_SUCCESS);
    CHECK_EQ_U64(vn, 4);
    CHECK_EQ_INT(cu_cuMemcpyDtoH(&u, d, 4), CUDA_SUCCESS);
    CHECK_EQ_INT(u, 7);
    float tbl[3] = {0, 0, 0};
    CHECK_EQ_INT(get_global(&d, &vn, m, "table"), CUDA_SUCCESS);
    CHECK_EQ_U64(vn, 12);
    CHECK_EQ_INT(cu_cuMemcpyDtoH(tbl, d, 12), CUDA_SUCCESS);
    CHECK(tbl[0] == 1.0f && tbl[1] == 2.5f && tbl[2] == -1.0f);
    unsigned char lut[5] = {0};
    CHECK_EQ_INT(get_global(&d, &vn, m, "lut"), CUDA_SUCCESS);
    CHECK_EQ_U64(vn, 5);
    CHECK_EQ_INT(cu_cuMemcpyDtoH(lut, d, 5), CUDA_SUCCESS);
    CHECK(lut[0] == 1 && lut[4] == 5);
    unsigned long long after = 1;
    CHECK_EQ_INT(get_global(&d, &vn, m, "after_fn"), CUDA_SUCCESS);
    CHECK_EQ_U64(vn, 8);
    CHECK_EQ_INT(cu_cuMemcpyDtoH(&after, d, 8), CUDA_SUCCESS);
    CHECK_EQ_U64(after, 0);
    CHECK_EQ_INT(get_global(&d, &vn, m, "ext"), CUDA_ERROR_NOT_FOUND); /* declared elsewhere */
    CHECK_EQ_INT(get_global(&d, &vn, m, "first_kernel"), CUDA_ERROR_NOT_FOUND);
    CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  }
}

static void test_retain_handle(void) {
  CUresult (*retain)(CUmemGenericAllocationHandle *, void *) =
      PROC(CUresult(*)(CUmemGenericAllocationHandle *, void *), "cuMemRetainAllocationHandle",
           11000);
  REQUIRE(retain != NULL);
  unsigned long long used0 = fgt_used();
  size_t g = 2 * MIB;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUdeviceptr va;
  CUmemGenericAllocationHandle h, h2 = 0;
  REQUIRE(cu_cuMemAddressReserve(&va, g, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemCreate(&h, g, &prop, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemMap(va, g, 0, h, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(h), CUDA_SUCCESS); /* mapped: still there */
  CHECK_EQ_INT(retain(&h2, (void *)(uintptr_t)(va + 4096)), CUDA_SUCCESS);
  CHECK(h2 == h);
  CHECK_EQ_INT(cu_cuMemRelease(h2), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(h2), CUDA_ERROR_INVALID_VALUE); /* one retain, one release */
  CHECK_EQ_INT(cu_cuMemUnmap(va, g), CUDA_SUCCESS);
  CHECK_EQ_INT(retain(&h2, (void *)(uintptr_t)va), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemAddressFree(va, g), CUDA_SUCCESS);
  CHECK_EQ_INT((long long)fgt_used(), (long long)used0);
}

/* The stream memory operations cuBLASLt looks up with dlsym: exported and
 * handed out by cuGetProcAddress (fakegpu_stream_memops tests what they
 * do); without a context they answer 201. */
static void test_memop_names(void) {
  static const char *names[] = {"cuStreamWaitValue32", "cuStreamBatchMemOp"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    CHECK_MSG(dlsym(fgt_cuda, names[i]) != NULL, "%s is not exported", names[i]);
  CHECK(proc("cuStreamBatchMemOp", 11070) != NULL);
  CUcontext c;
  REQUIRE(cu_cuCtxGetCurrent(&c) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  CUresult (*ops)(void *, unsigned, void *, unsigned) =
      (CUresult(*)(void *, unsigned, void *, unsigned))dlsym(fgt_cuda, "cuStreamBatchMemOp");
  if (ops)
    CHECK_EQ_INT(ops(NULL, 1, NULL, 0), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(cu_cuCtxSetCurrent(c), CUDA_SUCCESS);
}

/* The tools thread-local storage table's slot 2 (cuBLASLt's matmul
 * heuristics call it): the current context. */
static void test_tools_tls_context(void) {
  CUresult (*get)(const void **, const CUuuid *) =
      PROC(CUresult(*)(const void **, const CUuuid *), "cuGetExportTable", 3000);
  REQUIRE(get != NULL);
  static const unsigned char tls[16] = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                                        0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
  CUuuid id;
  memcpy(id.bytes, tls, 16);
  const void *const *table = NULL;
  REQUIRE(get((const void **)&table, &id) == CUDA_SUCCESS && table && table[2]);
  CUresult (*current)(CUcontext *) = (CUresult(*)(CUcontext *))table[2];
  CUcontext want, got = NULL;
  REQUIRE(cu_cuCtxGetCurrent(&want) == CUDA_SUCCESS);
  CHECK_EQ_INT(current(&got), CUDA_SUCCESS);
  CHECK(got == want && got != NULL);
}

/* NCCL's view of NVML: the NVML 1 names, devices by PCI bus id (bus 0x18 +
 * index, as fakegpu-smi and cuDeviceGetPCIBusId say), compute capability,
 * peers, no NVLink, no confidential computing. */
static void test_nvml_for_nccl(void) {
  fgt_load_nvml();
  nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(fgt_nvml, "nvmlInit");
  nvmlReturn_t (*count)(unsigned *) =
      (nvmlReturn_t(*)(unsigned *))dlsym(fgt_nvml, "nvmlDeviceGetCount");
  nvmlReturn_t (*by_bus)(const char *, nvmlDevice_t *) =
      (nvmlReturn_t(*)(const char *, nvmlDevice_t *))dlsym(fgt_nvml,
                                                           "nvmlDeviceGetHandleByPciBusId");
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *) =
      (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(fgt_nvml, "nvmlDeviceGetHandleByIndex");
  nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *) =
      (nvmlReturn_t(*)(nvmlDevice_t, int *, int *))dlsym(fgt_nvml,
                                                         "nvmlDeviceGetCudaComputeCapability");
  nvmlReturn_t (*p2p)(nvmlDevice_t, nvmlDevice_t, int, int *) =
      (nvmlReturn_t(*)(nvmlDevice_t, nvmlDevice_t, int, int *))dlsym(fgt_nvml,
                                                                     "nvmlDeviceGetP2PStatus");
  nvmlReturn_t (*nvlink)(nvmlDevice_t, unsigned, int *) =
      (nvmlReturn_t(*)(nvmlDevice_t, unsigned, int *))dlsym(fgt_nvml, "nvmlDeviceGetNvLinkState");
  nvmlReturn_t (*cc_state)(unsigned *) =
      (nvmlReturn_t(*)(unsigned *))dlsym(fgt_nvml, "nvmlSystemGetConfComputeState");
  REQUIRE(init && count && by_bus && by_index && cc && p2p && nvlink && cc_state);
  REQUIRE(init() == NVML_SUCCESS);
  unsigned n = 0;
  CHECK_EQ_INT(count(&n), NVML_SUCCESS);
  CHECK(n >= 1);
  nvmlDevice_t d0 = NULL, b0 = NULL, none = NULL;
  CHECK_EQ_INT(by_index(0, &d0), NVML_SUCCESS);
  CHECK_EQ_INT(by_bus("0000:18:00.0", &b0), NVML_SUCCESS);
  CHECK(b0 == d0);
  CHECK_EQ_INT(by_bus("00000000:18:00.0", &b0), NVML_SUCCESS);
  CHECK(b0 == d0);
  CHECK_EQ_INT(by_bus("0000:40:00.0", &none), NVML_ERROR_NOT_FOUND);
  CHECK_EQ_INT(by_bus("bus", &none), NVML_ERROR_INVALID_ARGUMENT);
  int major = 0, minor = -1, st = -1, active = -1;
  CHECK_EQ_INT(cc(d0, &major, &minor), NVML_SUCCESS);
  CHECK(major == 9 && minor == 0);
  CHECK_EQ_INT(p2p(d0, d0, 0, &st), NVML_SUCCESS);
  CHECK_EQ_INT(st, 5); /* a device is not its own peer */
  CHECK_EQ_INT(nvlink(d0, 0, &active), NVML_ERROR_NOT_SUPPORTED);
  unsigned state[3] = {7, 7, 7};
  CHECK_EQ_INT(cc_state(state), NVML_SUCCESS);
  CHECK(state[0] == 0 && state[1] == 0 && state[2] == 0);
  nv_nvmlShutdown();
}

int main(void) {
  fgt_load_cuda();
  fgt_init_ctx();
  size_t n = make_cubin(g_img);
  REQUIRE(n <= sizeof g_img);
  RUN(test_free_null);
  RUN(test_module_globals);
  RUN(test_library);
  RUN(test_long_kernel_name);
  RUN(test_fft_tables);
  RUN(test_ptx_only_kernels);
  RUN(test_retain_handle);
  RUN(test_memop_names);
  RUN(test_tools_tls_context);
  RUN(test_nvml_for_nccl);
  return TEST_END();
}
