/* Driver errors name the path and say what is wrong: a missing library
 * (EBB_ENOLIB), the CUDA toolkit's stub (cuInit answers 34: EBB_ENOLIB saying
 * it is the stub and not a driver), no device (100: EBB_ENODEV), a library
 * that is not a driver. Each case runs in a child process of its own (the
 * driver is loaded once per process) with a device state of its own. */
#include <string.h>

#include "device/device.h"
#include "support/devtest.h"
#include "test.h"

/* Child: open SPEC from $DT_SPEC and print the outcome. */
static int child_open(void) {
  const char *spec = getenv("DT_SPEC");
  dev_device *d = NULL;
  int rc = dev_open(spec, &d);
  printf("rc=%s\nmsg=%s\n", ebb_errname(rc), rc ? ebb_errmsg() : "");
  if (d)
    printf("label=%s\nnote=%s\n", dev_device_label(d), dev_note(d) ? dev_note(d) : "");
  dev_close(d);
  return 0;
}

static void run_case(const char *spec, const char *libcuda, const char *extra_env,
                     const char *state, char *out, size_t len) {
  char e_spec[64], e_lib[1024], e_state[1024];
  snprintf(e_spec, sizeof e_spec, "DT_SPEC=%s", spec);
  snprintf(e_lib, sizeof e_lib, "EBB_LIBCUDA=%s", libcuda);
  snprintf(e_state, sizeof e_state, "FAKEGPU_STATE=%s", dt_tmp(state));
  char *env[] = {e_spec, e_lib, e_state, "-EBB_REAL_GPU", (char *)extra_env, NULL};
  int st = dt_run_self("child-open", env, out, len);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child for %s exited with status %d: %s", spec,
            st, out);
}

static const char *fake(void) { return getenv("EBB_LIBCUDA"); }

static void test_missing_library(void) {
  char out[8192];
  run_case("cuda", "/nonexistent/dir/libcuda.so.1", NULL, "missing.state", out, sizeof out);
  CHECK_MSG(strstr(out, "rc=EBB_ENOLIB\n"), "missing library: want EBB_ENOLIB: %s", out);
  CHECK_MSG(strstr(out, "/nonexistent/dir/libcuda.so.1"), "message does not name the path: %s",
            out);
  CHECK_MSG(strstr(out, "EBB_LIBCUDA"), "message does not say how to point ebb at a driver: %s",
            out);
  run_case("auto", "/nonexistent/dir/libcuda.so.1", NULL, "missing2.state", out, sizeof out);
  CHECK_MSG(strstr(out, "rc=EBB_OK\n") && strstr(out, "label=cpu\n") &&
                strstr(out, "note=cannot load the CUDA driver /nonexistent/dir/libcuda.so.1"),
            "auto with a missing library: want the CPU device and the reason: %s", out);
}

static void test_stub(void) {
  char out[8192];
  run_case("cuda:0", fake(), "FAKEGPU_STUB=1", "stub.state", out, sizeof out);
  CHECK_MSG(strstr(out, "rc=EBB_ENOLIB\n"), "stub: want EBB_ENOLIB: %s", out);
  CHECK_MSG(strstr(out, "stub libcuda from the CUDA toolkit, not a driver"),
            "stub: message does not say it is the toolkit's stub: %s", out);
  CHECK_MSG(strstr(out, "CUDA_ERROR_STUB_LIBRARY (34)"), "stub: message lacks the error: %s", out);
  CHECK_MSG(strstr(out, "libcuda.so.1"), "stub: message does not name the library: %s", out);
  run_case("auto", fake(), "FAKEGPU_STUB=1", "stub2.state", out, sizeof out);
  CHECK_MSG(strstr(out, "label=cpu\n") && strstr(out, "note=") && strstr(out, "stub"),
            "auto with the stub: want the CPU device and why: %s", out);
}

static void test_no_device(void) {
  char out[8192];
  run_case("cuda", fake(), "FAKEGPU_DEVICES=0", "nodev.state", out, sizeof out);
  CHECK_MSG(strstr(out, "rc=EBB_ENODEV\n"), "no device: want EBB_ENODEV: %s", out);
  CHECK_MSG(strstr(out, "reports no device") || strstr(out, "reports 0 devices"),
            "no device: message does not say so: %s", out);
  run_case("auto", fake(), "FAKEGPU_DEVICES=0", "nodev2.state", out, sizeof out);
  CHECK_MSG(strstr(out, "label=cpu\n"), "auto with no device: want the CPU device: %s", out);
}

static void test_not_a_driver(void) {
  char out[8192];
  run_case("cuda", "libm.so.6", NULL, "notdriver.state", out, sizeof out);
  CHECK_MSG(strstr(out, "rc=EBB_ENOLIB\n") && strstr(out, "libm.so.6 is not a CUDA driver"),
            "libm as libcuda: want EBB_ENOLIB naming it: %s", out);
}

static void test_two_devices(void) {
  char out[8192];
  run_case("cuda:1", fake(), "FAKEGPU_DEVICES=2", "two.state", out, sizeof out);
  CHECK_MSG(strstr(out, "rc=EBB_OK\n") && strstr(out, "label=cuda:1\n"),
            "cuda:1 with two fake devices: %s", out);
  run_case("cuda:2", fake(), "FAKEGPU_DEVICES=2", "two2.state", out, sizeof out);
  CHECK_MSG(strstr(out, "rc=EBB_ENODEV\n") && strstr(out, "reports 2 devices"),
            "cuda:2 with two devices: want EBB_ENODEV saying there are 2: %s", out);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "child-open"))
    return child_open();
  if (dt_real_gpu()) {
    fprintf(stderr, "SKIP: device_errors drives the fake driver's failure modes (stub, no "
                    "device); not run against a real GPU (EBB_REAL_GPU=1)\n");
    return DT_SKIP;
  }
  RUN(test_missing_library);
  RUN(test_stub);
  RUN(test_no_device);
  RUN(test_not_a_driver);
  RUN(test_two_devices);
  return TEST_END();
}
