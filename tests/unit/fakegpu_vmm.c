/* Virtual memory management: sizes must be multiples of the granularity (1
 * otherwise), memory is mapped with no access until cuMemSetAccess, physical
 * memory is counted from cuMemCreate until it is released and unmapped,
 * VMM memory survives the context it was made under, and many ranges made
 * and freed out of address order each answer for themselves. */
#include <sys/mman.h>

#include "fakegpu/fg_test.h"

static const CUmemAllocationProp k_prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                           .requestedHandleTypes =
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                           .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
static const CUmemAccessDesc k_rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                     CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

static void test_sizes_must_be_multiples(void) {
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  CHECK_EQ_INT(cu_cuMemAddressReserve(&va, 1 * MIB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemAddressReserve(&va, 2 * MIB + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemCreate(&h, 3 * MIB, &k_prop, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemCreate(&h, 0, &k_prop, 0), CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cu_cuMemAddressReserve(&va, 8 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  CHECK_EQ_U64(va % (2 * MIB), 0);
  REQUIRE(cu_cuMemCreate(&h, 4 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemMap(va, 1 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemMap(va, 2 * MIB, 1 * MIB, h, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemMap(va + 4096, 2 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemMap(va, 6 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* > handle */
  CHECK_EQ_INT(cu_cuMemMap(va + 6 * MIB, 4 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* > range */
  CHECK_EQ_INT(cu_cuMemMap(va, 4 * MIB, 0, h, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemMap(va + 2 * MIB, 2 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlap */
  CHECK_EQ_INT(cu_cuMemUnmap(va, 1 * MIB), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemUnmap(va, 2 * MIB), CUDA_ERROR_INVALID_VALUE); /* part of a mapping */
  CHECK_EQ_INT(cu_cuMemUnmap(va, 4 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(h), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemAddressFree(va, 4 * MIB), CUDA_ERROR_INVALID_VALUE); /* not the range */
  CHECK_EQ_INT(cu_cuMemAddressFree(va, 8 * MIB), CUDA_SUCCESS);
}

static void test_map_access_and_accounting(void) {
  unsigned long long base = fgt_used();
  CUdeviceptr va;
  CUmemGenericAllocationHandle h1, h2;
  REQUIRE(cu_cuMemAddressReserve(&va, 8 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used(), base); /* address space is free */
  REQUIRE(cu_cuMemCreate(&h1, 4 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemCreate(&h2, 4 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 8 * MIB);
  REQUIRE(cu_cuMemMap(va, 4 * MIB, 0, h1, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemMap(va + 4 * MIB, 4 * MIB, 0, h2, 0) == CUDA_SUCCESS);
  /* Mapped but no access yet (cuMemGetAccess: NONE, then READWRITE). */
  CUresult (*get_access)(unsigned long long *, const CUmemLocation *, CUdeviceptr) = NULL;
  CUdriverProcAddressQueryResult qs;
  REQUIRE(cu_cuGetProcAddress_v2("cuMemGetAccess", (void **)&get_access, 10020, 0, &qs) ==
              CUDA_SUCCESS &&
          get_access);
  unsigned long long acc = 9;
  CHECK_EQ_INT(get_access(&acc, &k_rw.location, va + 5 * MIB), CUDA_SUCCESS);
  CHECK_MSG(acc == CU_MEM_ACCESS_FLAGS_PROT_NONE, "access before cuMemSetAccess: %llu", acc);
  unsigned char buf[64] = {0};
  CHECK_EQ_INT(cu_cuMemcpyHtoD(va, buf, 64), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemSetAccess(va, 8 * MIB, &k_rw, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(get_access(&acc, &k_rw.location, va + 5 * MIB), CUDA_SUCCESS);
  CHECK_MSG(acc == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access after cuMemSetAccess: %llu", acc);
  CHECK_EQ_INT(get_access(&acc, &k_rw.location, va + 9 * MIB), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemsetD8(va, 7, 8 * MIB), CUDA_SUCCESS);
  CHECK(((unsigned char *)(uintptr_t)va)[8 * MIB - 1] == 7);
  /* A copy across the two mappings of one range works. */
  unsigned char src[64];
  for (int i = 0; i < 64; i++)
    src[i] = (unsigned char)(i + 1);
  CHECK_EQ_INT(cu_cuMemcpyHtoD(va + 4 * MIB - 32, src, 64), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(buf, va + 4 * MIB - 32, 64), CUDA_SUCCESS);
  CHECK(memcmp(buf, src, 64) == 0);
  CHECK(((unsigned char *)(uintptr_t)va)[4 * MIB] == 33); /* real memory */
  CHECK_EQ_INT(cu_cuMemcpyHtoD(va + 8 * MIB - 1, src, 2), CUDA_ERROR_INVALID_VALUE);
  /* Released while mapped: still counted until unmapped. */
  CHECK_EQ_INT(cu_cuMemRelease(h1), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 8 * MIB);
  CHECK_EQ_INT(cu_cuMemAddressFree(va, 8 * MIB), CUDA_ERROR_INVALID_VALUE); /* still mapped */
  CHECK_EQ_INT(cu_cuMemUnmap(va, 8 * MIB), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used() - base, 4 * MIB); /* h2 still held by its handle */
  CHECK_EQ_INT(cu_cuMemcpyHtoD(va, src, 1), CUDA_ERROR_INVALID_VALUE);
  /* Remap h2 at the same address (what ebb's wake does) and find its bytes. */
  CHECK_EQ_INT(cu_cuMemMap(va + 2 * MIB, 4 * MIB, 0, h2, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemSetAccess(va + 2 * MIB, 4 * MIB, &k_rw, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(buf, va + 2 * MIB, 32), CUDA_SUCCESS);
  CHECK(memcmp(buf, src + 32, 32) == 0);
  CHECK_EQ_INT(cu_cuMemUnmap(va + 2 * MIB, 4 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(h2), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_used(), base);
  CHECK_EQ_INT(cu_cuMemAddressFree(va, 8 * MIB), CUDA_SUCCESS);
}

static void test_vmm_survives_context_destroy(void) {
  CUcontext c;
  REQUIRE(cu_cuCtxCreate(&c, 0, 0) == CUDA_SUCCESS);
  unsigned long long before = fgt_nvml_used_by(getpid());
  CUdeviceptr va, plain;
  CUmemGenericAllocationHandle h;
  REQUIRE(cu_cuMemAddressReserve(&va, 4 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemCreate(&h, 4 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemMap(va, 4 * MIB, 0, h, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemSetAccess(va, 4 * MIB, &k_rw, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemsetD8(va, 0x5a, 4 * MIB) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAlloc(&plain, 2 * MIB) == CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()) - before, 6 * MIB);
  CHECK_EQ_INT(cu_cuCtxDestroy(c), CUDA_SUCCESS);
  /* The context (300 MiB) and the plain allocation are gone, VMM is not. */
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), before - 300 * MIB + 4 * MIB);
  CHECK(((unsigned char *)(uintptr_t)va)[4 * MIB - 1] == 0x5a);
  /* Its own cuMemRelease (no context needed) gives it back. */
  CHECK_EQ_INT(cu_cuMemUnmap(va, 4 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(h), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemAddressFree(va, 4 * MIB), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), before - 300 * MIB);
}

static void test_vmm_survives_primary_release(void) {
  fgt_init_ctx();
  CUmemGenericAllocationHandle h;
  REQUIRE(cu_cuMemCreate(&h, 2 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 2 * MIB);
  CHECK_EQ_INT(cu_cuMemRelease(h), CUDA_SUCCESS);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 0);
  CHECK_EQ_INT(cu_cuCtxSetCurrent(NULL), CUDA_SUCCESS);
}

static void test_export_import(void) {
  CUmemGenericAllocationHandle h, imported, plain_h;
  REQUIRE(cu_cuMemCreate(&h, 2 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  int fd = -1;
  CHECK_EQ_INT(cu_cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               CUDA_SUCCESS);
  REQUIRE(fd >= 0);
  CHECK_EQ_INT(cu_cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               CUDA_SUCCESS);
  CUdeviceptr a, b;
  REQUIRE(cu_cuMemAddressReserve(&a, 2 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAddressReserve(&b, 2 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemMap(a, 2 * MIB, 0, h, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemMap(b, 2 * MIB, 0, imported, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemSetAccess(a, 2 * MIB, &k_rw, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemSetAccess(b, 2 * MIB, &k_rw, 1) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemsetD8(a + 100, 0x77, 1), CUDA_SUCCESS);
  unsigned char v = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&v, b + 100, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(v, 0x77); /* one physical allocation, two mappings */
  CHECK_EQ_INT(cu_cuMemUnmap(a, 2 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemUnmap(b, 2 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(imported), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(h), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemAddressFree(a, 2 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemAddressFree(b, 2 * MIB), CUDA_SUCCESS);
  close(fd);
  /* Not exportable unless asked for at creation. */
  CUmemAllocationProp p = k_prop;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  REQUIRE(cu_cuMemCreate(&plain_h, 2 * MIB, &p, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemExportToShareableHandle(&fd, plain_h,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemRelease(plain_h), CUDA_SUCCESS);
}

/* FAKEGPU_POISON=1: freed physical memory is overwritten with 0xdb, which a
 * holder of an exported fd can see. */
static int child_poison(void) {
  fgt_init_ctx();
  CUmemGenericAllocationHandle h;
  int fd = -1;
  if (cu_cuMemCreate(&h, 2 * MIB, &k_prop, 0) ||
      cu_cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
    return 10;
  unsigned char *m = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    return 11;
  m[5] = 0x11;
  if (cu_cuMemRelease(h))
    return 12;
  return m[5] == 0xdb ? 0 : 13;
}

/* Many reservations, mapped and freed out of address order (the fake finds
 * them by address in sorted sets, fakecuda_spans.c): each range answers for
 * itself after its neighbours came and went. Range i of NR is 4 MiB; an even
 * one has a 2 MiB mapping in its upper half (read-write when i % 4 == 0). */
#define NR 48
static CUresult (*g_get_access)(unsigned long long *, const CUmemLocation *, CUdeviceptr);

static void check_range(const CUdeviceptr *va, const int *live, int i) {
  unsigned long long acc = 9;
  int mapped = live[i] && i % 2 == 0, rw = mapped && i % 4 == 0;
  CUdeviceptr up = va[i] + 2 * MIB;
  CHECK_MSG(cu_cuMemsetD8(up, 1, 2 * MIB) == (rw ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE),
            "range %d (live %d, mapped %d, rw %d): memset of its upper half", i, live[i], mapped,
            rw);
  CHECK_MSG(cu_cuMemsetD8(up - 1, 1, 2) == CUDA_ERROR_INVALID_VALUE,
            "range %d: a memset across its unmapped lower half was taken", i);
  CHECK_MSG(g_get_access(&acc, &k_rw.location, up + MIB) ==
                (mapped ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE),
            "range %d: cuMemGetAccess of its mapping", i);
  if (mapped)
    CHECK_MSG(acc == (rw ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE),
              "range %d: access %llu", i, acc);
}

static void test_many_ranges(void) {
  CUdriverProcAddressQueryResult qs;
  REQUIRE(cu_cuGetProcAddress_v2("cuMemGetAccess", (void **)&g_get_access, 10020, 0, &qs) ==
              CUDA_SUCCESS &&
          g_get_access);
  CUdeviceptr va[NR];
  int live[NR];
  CUmemGenericAllocationHandle h;
  REQUIRE(cu_cuMemCreate(&h, 2 * MIB, &k_prop, 0) == CUDA_SUCCESS);
  for (int i = 0; i < NR; i++) {
    REQUIRE(cu_cuMemAddressReserve(&va[i], 4 * MIB, 0, 0, 0) == CUDA_SUCCESS);
    live[i] = 1;
  }
  for (int k = 0; k < NR; k++) { /* mapped in an order unlike the addresses' */
    int i = (k * 7) % NR;
    if (i % 2)
      continue;
    CHECK_EQ_INT(cu_cuMemMap(va[i] + 2 * MIB, 2 * MIB, 0, h, 0), CUDA_SUCCESS);
    CHECK_EQ_INT(cu_cuMemMap(va[i], 4 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlap */
    if (i % 4 == 0)
      CHECK_EQ_INT(cu_cuMemSetAccess(va[i] + 2 * MIB, 2 * MIB, &k_rw, 1), CUDA_SUCCESS);
  }
  for (int i = 0; i < NR; i++)
    check_range(va, live, i);
  for (int k = 0; k < NR; k++) { /* freed in yet another order */
    int i = (k * 11 + 5) % NR;
    if (i % 2 == 0) {
      CHECK_EQ_INT(cu_cuMemAddressFree(va[i], 4 * MIB), CUDA_ERROR_INVALID_VALUE); /* mapped */
      CHECK_EQ_INT(cu_cuMemUnmap(va[i], 4 * MIB), CUDA_ERROR_INVALID_VALUE); /* half unmapped */
      CHECK_EQ_INT(cu_cuMemUnmap(va[i] + 2 * MIB, 2 * MIB), CUDA_SUCCESS);
    }
    CHECK_EQ_INT(cu_cuMemAddressFree(va[i], 4 * MIB), CUDA_SUCCESS);
    live[i] = 0;
    if (k == NR / 2)
      for (int j = 0; j < NR; j++)
        if (live[j])
          check_range(va, live, j);
  }
  CHECK_EQ_INT(cu_cuMemRelease(h), CUDA_SUCCESS);
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  fgt_load_nvml();
  if (argc > 1)
    return !strcmp(argv[1], "poison") ? child_poison() : 99;
  REQUIRE(nv_nvmlInit_v2() == NVML_SUCCESS);
  fgt_init_ctx();
  RUN(test_sizes_must_be_multiples);
  RUN(test_map_access_and_accounting);
  RUN(test_export_import);
  RUN(test_many_ranges);
  RUN(test_vmm_survives_context_destroy);
  CHECK_EQ_INT(cu_cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  RUN(test_vmm_survives_primary_release);
  char state[4200];
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.child", getenv("FAKEGPU_STATE"));
  CHECK_EQ_INT(fgt_run_self("poison", (const char *[]){"FAKEGPU_POISON=1", state, NULL}), 0);
  CHECK_EQ_INT(fgt_run_self("poison", (const char *[]){"FAKEGPU_POISON=0", state, NULL}), 13);
  unlink(state + strlen("FAKEGPU_STATE="));
  return TEST_END();
}
