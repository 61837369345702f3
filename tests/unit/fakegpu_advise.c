/* Managed-memory advice on the fake (tests/fakegpu/fakecuda_advise.c),
 * reached through cuGetProcAddress_v2: cuMemAdvise and prefetches are read
 * back by cuMemRangeGetAttribute(s) page by page (all pages or -2), the
 * accessed-by list is filled with -2, the CUDA 12.2 type/id forms agree, a
 * new allocation starts clean, and the driver's codes answer: bad advice,
 * attribute, size or a non-managed range 1, a device that does not exist
 * 101. */
#include "fakegpu/fg_test.h"

#define PAGE 4096
#define CPU (-1)
#define NONE (-2)

typedef struct {
  int type, id;
} loc_t;

static CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned);
static CUresult (*advise)(CUdeviceptr, size_t, int, int);
static CUresult (*advise2)(CUdeviceptr, size_t, int, loc_t);
static CUresult (*prefetch)(CUdeviceptr, size_t, int, CUstream);
static CUresult (*range_attr)(void *, size_t, int, CUdeviceptr, size_t);
static CUresult (*range_attrs)(void **, size_t *, int *, size_t, CUdeviceptr, size_t);

static void load(void) {
  *(void **)&alloc_managed = fgt_proc("cuMemAllocManaged", 12080);
  *(void **)&advise = fgt_proc("cuMemAdvise", 11000);
  *(void **)&advise2 = fgt_proc("cuMemAdvise", 12080);
  *(void **)&prefetch = fgt_proc("cuMemPrefetchAsync", 11000);
  *(void **)&range_attr = fgt_proc("cuMemRangeGetAttribute", 12080);
  *(void **)&range_attrs = fgt_proc("cuMemRangeGetAttributes", 12080);
}

static int attr(int which, CUdeviceptr p, size_t n) {
  int v = 12345;
  CHECK_EQ_INT(range_attr(&v, 4, which, p, n), CUDA_SUCCESS);
  return v;
}

static void test_advice_read_back(void) {
  CUdeviceptr m = 0;
  REQUIRE(alloc_managed(&m, 4 * PAGE, 1) == CUDA_SUCCESS);
  CHECK_MSG(attr(1, m, 4 * PAGE) == 0, "fresh managed memory is read-mostly");
  CHECK_MSG(attr(2, m, 4 * PAGE) == NONE, "fresh managed memory has a preferred location");
  CHECK_MSG(attr(4, m, 4 * PAGE) == NONE, "fresh managed memory has a last prefetch location");
  CHECK_EQ_INT(advise(m, 2 * PAGE, 1, 0), CUDA_SUCCESS); /* READ_MOSTLY, pages 0-1 */
  CHECK_MSG(attr(1, m, 2 * PAGE) == 1, "READ_MOSTLY on pages 0-1 not read back");
  CHECK_MSG(attr(1, m, 3 * PAGE) == 0, "pages 0-2 read-mostly though page 2 was not advised");
  CHECK_EQ_INT(advise(m, 4 * PAGE, 3, 0), CUDA_SUCCESS); /* PREFERRED_LOCATION device 0 */
  CHECK_MSG(attr(2, m + 100, 10) == 0, "preferred location %d, set device 0", attr(2, m + 100, 10));
  CHECK_MSG(attr(5, m, PAGE) == 1 && attr(6, m, PAGE) == 0, "12.2 preferred type/id not device/0");
  CHECK_EQ_INT(advise(m + 3 * PAGE, PAGE, 3, CPU), CUDA_SUCCESS);
  CHECK_MSG(attr(2, m + 3 * PAGE, PAGE) == CPU, "page 3's preferred location is not the CPU");
  CHECK_MSG(attr(2, m, 4 * PAGE) == NONE, "pages with two preferred locations answered one");
  CHECK_MSG(attr(5, m + 3 * PAGE, 1) == 2, "the CPU's location type is not HOST (2)");
  CHECK_EQ_INT(advise(m, 4 * PAGE, 4, 0), CUDA_SUCCESS); /* UNSET_PREFERRED_LOCATION */
  CHECK_MSG(attr(2, m, 4 * PAGE) == NONE, "UNSET_PREFERRED_LOCATION left a location");
  CHECK_EQ_INT(advise(m, 4 * PAGE, 5, 0), CUDA_SUCCESS); /* ACCESSED_BY device 0 */
  CHECK_EQ_INT(advise(m, 4 * PAGE, 5, CPU), CUDA_SUCCESS);
  int list[4] = {9, 9, 9, 9};
  CHECK_EQ_INT(range_attr(list, sizeof list, 3, m, 4 * PAGE), CUDA_SUCCESS);
  CHECK_MSG(list[0] == 0 && list[1] == CPU && list[2] == NONE && list[3] == NONE,
            "accessed-by list %d %d %d %d, want 0 -1 -2 -2", list[0], list[1], list[2], list[3]);
  CHECK_EQ_INT(advise(m, PAGE, 6, 0), CUDA_SUCCESS); /* UNSET_ACCESSED_BY on page 0 */
  CHECK_EQ_INT(range_attr(list, sizeof list, 3, m, 4 * PAGE), CUDA_SUCCESS);
  CHECK_MSG(list[0] == CPU && list[1] == NONE, "device 0 listed though page 0 dropped it");
  loc_t dev0 = {1, 0};
  CHECK_EQ_INT(advise2(m, PAGE, 3, dev0), CUDA_SUCCESS);
  CHECK_MSG(attr(2, m, PAGE) == 0, "cuMemAdvise_v2 device location not read back");
  CHECK_EQ_INT(prefetch(m, 2 * PAGE, 0, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(prefetch(m + 2 * PAGE, 2 * PAGE, CPU, NULL), CUDA_SUCCESS);
  CHECK_MSG(attr(4, m, 2 * PAGE) == 0, "last prefetch of pages 0-1 is not device 0");
  CHECK_MSG(attr(4, m + 2 * PAGE, PAGE) == CPU, "last prefetch of page 2 is not the CPU");
  CHECK_MSG(attr(4, m, 4 * PAGE) == NONE, "two prefetch locations answered as one");
  CHECK_MSG(attr(7, m, PAGE) == 1 && attr(8, m, PAGE) == 0, "12.2 prefetch type/id not device/0");
  int rm = 7, pl = 7;
  void *data[2] = {&rm, &pl};
  size_t sizes[2] = {4, 4};
  int which[2] = {1, 2};
  CHECK_EQ_INT(range_attrs(data, sizes, which, 2, m, PAGE), CUDA_SUCCESS);
  CHECK_MSG(rm == 1 && pl == 0, "batch query read-mostly %d preferred %d, want 1 0", rm, pl);
  CHECK_EQ_INT(cu_cuMemFree(m), CUDA_SUCCESS);
  CUdeviceptr again = 0;
  REQUIRE(alloc_managed(&again, 4 * PAGE, 1) == CUDA_SUCCESS);
  CHECK_MSG(attr(1, again, PAGE) == 0 && attr(4, again, PAGE) == NONE,
            "a new allocation inherited the advice of a freed one");
  CHECK_EQ_INT(cu_cuMemFree(again), CUDA_SUCCESS);
}

static void test_mistakes(void) {
  CUdeviceptr m = 0, d = 0;
  REQUIRE(alloc_managed(&m, PAGE, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAlloc(&d, PAGE) == CUDA_SUCCESS);
  int v = 0;
  CHECK_MSG(advise(m, PAGE, 7, 0) == CUDA_ERROR_INVALID_VALUE, "advice 7 taken");
  CHECK_MSG(advise(m, PAGE, 3, 99) == CUDA_ERROR_INVALID_DEVICE, "preferred device 99 taken");
  CHECK_MSG(advise(m, PAGE, 5, -5) == CUDA_ERROR_INVALID_DEVICE, "accessed-by device -5 taken");
  CHECK_MSG(advise(m, 2 * PAGE, 1, 0) == CUDA_ERROR_INVALID_VALUE, "advice past the end taken");
  CHECK_EQ_INT(advise(d, PAGE, 1, 0), CUDA_SUCCESS); /* device memory: checked, kept nowhere */
  CHECK_MSG(range_attr(&v, 4, 1, d, PAGE) == CUDA_ERROR_INVALID_VALUE,
            "a range query of plain device memory answered");
  CHECK_MSG(range_attr(&v, 8, 1, m, PAGE) == CUDA_ERROR_INVALID_VALUE, "data size 8 taken");
  CHECK_MSG(range_attr(&v, 6, 3, m, PAGE) == CUDA_ERROR_INVALID_VALUE, "ACCESSED_BY size 6 taken");
  CHECK_MSG(range_attr(&v, 4, 9, m, PAGE) == CUDA_ERROR_INVALID_VALUE, "attribute 9 taken");
  CHECK_MSG(range_attr(NULL, 4, 1, m, PAGE) == CUDA_ERROR_INVALID_VALUE, "NULL data taken");
  CHECK_MSG(range_attr(&v, 4, 1, m, 0) == CUDA_ERROR_INVALID_VALUE, "count 0 taken");
  CHECK_MSG(range_attrs(NULL, NULL, NULL, 0, m, PAGE) == CUDA_ERROR_INVALID_VALUE,
            "an empty batch query taken");
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(range_attr(&v, 4, 1, m, PAGE), CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cu_cuCtxPushCurrent(cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(m), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
}

static int child_uninit(void) {
  load();
  return advise(0, 1, 1, 0) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 10;
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "uninit") ? child_uninit() : 99;
  load();
  fgt_init_ctx();
  RUN(test_advice_read_back);
  RUN(test_mistakes);
  CHECK_EQ_INT(fgt_run_self("uninit", NULL), 0);
  return TEST_END();
}
