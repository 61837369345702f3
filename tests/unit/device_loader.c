/* The driver loader: every entry point resolved by base name at its pinned ABI
 * version through cuGetProcAddress_v2, falling back to dlsym of the exact
 * versioned name when cuGetProcAddress is missing or answers NULL. */
#include <dlfcn.h>
#include <string.h>

#include "device/cuda_driver.h"
#include "support/devtest.h"
#include "test.h"

static int entry(const char *name) {
  for (int i = 0; i < dev_cuda_entry_count(); i++)
    if (!strcmp(dev_cuda_entry_name(i), name))
      return i;
  return -1;
}

static void *fnptr(const dev_cuda_driver *d, const char *name) {
  void *p = NULL;
#define GET_(n, sym, ver, params) \
  if (!strcmp(#n, name))          \
    memcpy(&p, &d->fn.n, sizeof p);
  EBB_CUDA_ENTRY_POINTS(GET_)
#undef GET_
  return p;
}

static void test_fake_all_through_procaddr(void) {
  dev_cuda_driver d;
  int rc = dev_cuda_driver_load(NULL, &d);
  REQUIRE(rc == 0);
  CHECK(d.has_get_proc);
  CHECK_EQ_INT(d.n_procaddr, dev_cuda_entry_count());
  CHECK_EQ_INT(d.n_dlsym, 0);
  CHECK_EQ_INT(d.n_missing, 0);
  CHECK(d.version >= 12000);
  CHECK(d.ndevices >= 1);
  /* Each pointer is what the driver's cuGetProcAddress_v2 answers for the base
   * name at the pinned version. */
  void *gsym = dlsym(d.lib, "cuGetProcAddress_v2");
  dev_pfn_cuGetProcAddress_v2 gpa;
  memcpy(&gpa, &gsym, sizeof gpa);
  REQUIRE(gpa != NULL);
#define SAME_(n, sym, ver, params)                                                   \
  {                                                                                  \
    void *want = NULL;                                                               \
    CUdriverProcAddressQueryResult st;                                               \
    gpa(#n, &want, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st);                           \
    CHECK_MSG(want &&fnptr(&d, #n) == want, "%s: table %p, cuGetProcAddress %p", #n, \
              fnptr(&d, #n), want);                                                  \
  }
  EBB_CUDA_ENTRY_POINTS(SAME_)
#undef SAME_
}

static void test_pinned_versions(void) {
  dev_cuda_driver d;
  REQUIRE(dev_cuda_driver_load(MARKCUDA_GPA_PATH, &d) == 0);
  int (*asked)(const char *);
  void *(*gptr)(const char *, int);
  void *s = dlsym(d.lib, "markcuda_asked");
  memcpy(&asked, &s, sizeof s);
  s = dlsym(d.lib, "markcuda_gpa_ptr");
  memcpy(&gptr, &s, sizeof s);
  REQUIRE(asked && gptr);
  /* Base names at the pinned versions, never the versioned names. */
  CHECK_EQ_INT(asked("cuMemAlloc"), 3020);
  CHECK_EQ_INT(asked("cuDevicePrimaryCtxRelease"), 11000);
  CHECK_EQ_INT(asked("cuDeviceTotalMem"), 3020);
  CHECK_EQ_INT(asked("cuMemCreate"), 10020);
  CHECK_EQ_INT(asked("cuMemAlloc_v2"), -1);
  int i = entry("cuMemAlloc");
  REQUIRE(i >= 0);
  CHECK_EQ_INT(d.how[i], EBB_CUDA_RES_PROCADDR);
  CHECK_MSG(fnptr(&d, "cuMemAlloc") == gptr("cuMemAlloc", 3020),
            "cuMemAlloc is not the v2 entry cuGetProcAddress gives at 3020");
  CHECK(fnptr(&d, "cuMemAlloc") != gptr("cuMemAlloc", 2000));
  CHECK(fnptr(&d, "cuMemAlloc") != dlsym(d.lib, "cuMemAlloc_v2"));
  CHECK_EQ_INT(d.how[entry("cuDevicePrimaryCtxRelease")], EBB_CUDA_RES_PROCADDR);
  CHECK(fnptr(&d, "cuDevicePrimaryCtxRelease") == gptr("cuDevicePrimaryCtxRelease", 11000));
  /* The driver's answers are what the loader calls: cuDriverGetVersion from
   * cuGetProcAddress says 54321, the exported one 12345. */
  CHECK_EQ_INT(d.version, 54321);
  /* Entry points this library lacks are missing, not fatal. */
  CHECK_EQ_INT(d.how[entry("cuMemCreate")], EBB_CUDA_RES_MISSING);
  CHECK(d.n_missing > 0);
  CHECK(fnptr(&d, "cuMemCreate") == NULL);
}

static void test_fallback_when_procaddr_answers_null(void) {
  setenv("MARKCUDA_GPA_NULL", "1", 1);
  dev_cuda_driver d;
  REQUIRE(dev_cuda_driver_load(MARKCUDA_GPA_PATH, &d) == 0);
  unsetenv("MARKCUDA_GPA_NULL");
  CHECK(d.has_get_proc);
  CHECK_EQ_INT(d.n_procaddr, 0);
  CHECK_EQ_INT(d.how[entry("cuMemAlloc")], EBB_CUDA_RES_DLSYM);
  CHECK_MSG(fnptr(&d, "cuMemAlloc") == dlsym(d.lib, "cuMemAlloc_v2"),
            "fallback did not take the exact versioned symbol cuMemAlloc_v2");
  CHECK(fnptr(&d, "cuMemAlloc") != dlsym(d.lib, "cuMemAlloc"));
  CHECK(fnptr(&d, "cuDevicePrimaryCtxRelease") == dlsym(d.lib, "cuDevicePrimaryCtxRelease_v2"));
  CHECK_EQ_INT(d.version, 12345);
}

static void test_fallback_without_procaddr(void) {
  dev_cuda_driver d;
  REQUIRE(dev_cuda_driver_load(MARKCUDA_NOGPA_PATH, &d) == 0);
  CHECK(!d.has_get_proc);
  CHECK_EQ_INT(d.n_procaddr, 0);
  CHECK(d.n_dlsym >= 6);
  CHECK_EQ_INT(d.how[entry("cuMemAlloc")], EBB_CUDA_RES_DLSYM);
  CHECK(fnptr(&d, "cuMemAlloc") == dlsym(d.lib, "cuMemAlloc_v2"));
  CHECK_EQ_INT(d.version, 12345);
}

static void test_missing_and_not_a_driver(void) {
  dev_cuda_driver d;
  CHECK_EQ_INT(dev_cuda_driver_load("/nonexistent/libcuda.so.1", &d), EBB_ENOLIB);
  CHECK(strstr(ebb_errmsg(), "/nonexistent/libcuda.so.1") != NULL);
  CHECK_EQ_INT(dev_cuda_driver_load("libm.so.6", &d), EBB_ENOLIB);
  CHECK_MSG(strstr(ebb_errmsg(), "libm.so.6 is not a CUDA driver library") &&
                strstr(ebb_errmsg(), "cuInit"),
            "not-a-driver message: %s", ebb_errmsg());
}

static void test_error_names(void) {
  dev_cuda_driver d;
  REQUIRE(dev_cuda_driver_load(NULL, &d) == 0);
  CHECK_EQ_STR(dev_cuda_errname(&d, CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_EQ_STR(dev_cuda_errname(NULL, CUDA_ERROR_NO_DEVICE), "CUDA_ERROR_NO_DEVICE");
  CHECK_EQ_INT(dev_cuda_fail(&d, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2", "cuda:0", "x"),
               EBB_EOOM);
  CHECK_EQ_STR(ebb_errmsg(), "cuMemAlloc_v2 failed on cuda:0: CUDA_ERROR_OUT_OF_MEMORY (2); x");
  CHECK_EQ_INT(dev_cuda_code(CUDA_ERROR_NO_DEVICE), EBB_ENODEV);
  CHECK_EQ_INT(dev_cuda_code(CUDA_ERROR_STUB_LIBRARY), EBB_ENOLIB);
  CHECK_EQ_INT(dev_cuda_code(CUDA_ERROR_LAUNCH_FAILED), EBB_EDRIVER);
}

int main(void) {
  int real = dt_real_gpu();
  if (!real)
    RUN(test_fake_all_through_procaddr);
  else
    fprintf(stderr, "note: EBB_REAL_GPU=1: the fake's table is not checked; the real "
                    "driver's table is checked at the end\n");
  RUN(test_pinned_versions);
  RUN(test_fallback_when_procaddr_answers_null);
  RUN(test_fallback_without_procaddr);
  RUN(test_missing_and_not_a_driver);
  if (!real)
    RUN(test_error_names);
  if (real) {
    dev_cuda_driver d;
    REQUIRE(dev_cuda_driver_load(NULL, &d) == 0);
    fprintf(stderr, "real driver %d at %s: %d via cuGetProcAddress_v2, %d via dlsym, %d missing\n",
            d.version, d.found_at, d.n_procaddr, d.n_dlsym, d.n_missing);
    CHECK(d.has_get_proc);
    CHECK_EQ_INT(d.n_missing, 0);
    CHECK_EQ_INT(d.n_procaddr, dev_cuda_entry_count());
  }
  return TEST_END();
}
