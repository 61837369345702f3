/* A CPU-only run provably makes no driver call. EBB_LIBCUDA and EBB_LIBNVML
 * point at abortcuda (tests/support/abortcuda.c: every entry point aborts,
 * and loading it writes $ABORTCUDA_MARK). Everything the CPU device does runs
 * with nothing aborting and the library never loaded; then a child that opens
 * "cuda" (and one that opens "auto") must die of SIGABRT, so this test fails
 * if the library stops being a trap. */
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/cuda_api.h"
#include "device/cuda_driver.h"
#include "device/kernel_twin.h"
#include "device/device.h"
#include "support/devtest.h"
#include "test.h"

void fakegpu_twin_ebbtest_fill(const dev_launch_dims *dims, void **params);
void fakegpu_twin_ebbtest_fill(const dev_launch_dims *dims, void **params) {
  unsigned char *p = (unsigned char *)(uintptr_t)(*(uint64_t *)params[0]);
  memset(p, 0x42, (size_t)dims->grid[0] * dims->block[0]);
}

static const char *mark;

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static void test_cpu_device_everything(void) {
  dev_device *d = NULL;
  REQUIRE(dev_open("cpu", &d) == 0);
  dev_meminfo mi;
  CHECK_EQ_INT(dev_mem_info(d, &mi), 0);
  uint64_t used;
  CHECK_EQ_INT(dev_process_used(d, getpid(), &used), 0);
  CHECK_EQ_INT(dev_activate(d), 0);
  size_t g;
  CHECK_EQ_INT(dev_granularity(d, &g), 0);
  CHECK(dev_supports_vmm(d));
  dev_dseg a, b;
  CHECK_EQ_INT(dev_seg_alloc(d, 1 << 20, EBB_SEG_PLAIN, &a), 0);
  CHECK_EQ_INT(dev_seg_alloc(d, 1 << 20, EBB_SEG_VMM, &b), 0);
  CHECK_EQ_INT(dev_memset8(d, a.addr, 1, 1 << 20), 0);
  CHECK_EQ_INT(dev_copy_dtod(d, b.addr, a.addr, 1 << 20), 0);
  CHECK_EQ_INT(dev_seg_park(d, &b), 0);
  CHECK_EQ_INT(dev_seg_wake(d, &b), 0);
  void *h;
  CHECK_EQ_INT(dev_host_alloc(d, 4096, &h), 0);
  CHECK_EQ_INT(dev_copy_dtoh(d, h, a.addr, 4096), 0);
  CHECK_EQ_INT(dev_host_free(d, h), 0);
  dev_module *m;
  dev_kernel *k;
  CHECK_EQ_INT(dev_module_load(d, NULL, &m), 0);
  CHECK_EQ_INT(dev_device_kernel(d, m, "ebbtest_fill", &k), 0);
  uint64_t dst = a.addr;
  void *params[] = {&dst};
  unsigned grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
  CHECK_EQ_INT(dev_launch(d, k, grid, block, 0, params), 0);
  CHECK_EQ_INT(((unsigned char *)(uintptr_t)a.addr)[63], 0x42);
  dev_module_unload(d, m);
  CHECK_EQ_INT(dev_synchronize(d), 0);
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  CHECK_EQ_INT(dev_seg_free(d, &a), 0);
  dev_close(d); /* frees b */

  CHECK_MSG(!exists(mark), "the CPU device loaded the driver library (%s exists)", mark);
  CHECK_MSG(dt_maps_have("abortcuda") == 0, "abortcuda is mapped into this process");
  CHECK(!dev_cuda_driver_is_loaded());
}

static int child_open(const char *spec) {
  dev_device *d = NULL;
  int rc = dev_open(spec, &d);
  printf("open(%s) returned %d without aborting: %s\n", spec, rc, ebb_errmsg());
  dev_close(d);
  return 0;
}

static void expect_abort(const char *mode) {
  char out[4096];
  unlink(mark);
  int st = dt_run_self(mode, NULL, out, sizeof out);
  CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
            "%s: the child did not die of SIGABRT (status %d): %s", mode, st, out);
  CHECK_MSG(exists(mark), "%s: the child did not even load the trap library", mode);
}

static void test_cuda_does_call_the_driver(void) {
  expect_abort("child-cuda");
  expect_abort("child-auto");
}

int main(int argc, char **argv) {
  /* The environment is set before anything else, for the children too. */
  dt_real_gpu();
  struct rlimit nocore = {0, 0};
  setrlimit(RLIMIT_CORE, &nocore); /* the children abort on purpose */
  setenv("EBB_LIBCUDA", ABORTCUDA_PATH, 1);
  setenv("EBB_LIBNVML", ABORTCUDA_PATH, 1);
  if (!getenv("ABORTCUDA_MARK"))
    setenv("ABORTCUDA_MARK", dt_tmp("abortcuda.mark"), 1);
  mark = getenv("ABORTCUDA_MARK");
  if (argc > 1 && !strcmp(argv[1], "child-cuda"))
    return child_open("cuda");
  if (argc > 1 && !strcmp(argv[1], "child-auto"))
    return child_open("auto");
  unlink(mark);
  RUN(test_cpu_device_everything);
  RUN(test_cuda_does_call_the_driver);
  return TEST_END();
}
