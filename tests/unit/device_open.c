/* Opening devices: cpu (never loads the driver), auto, cuda, cuda:N, bad
 * specs, and auto's fallback to the CPU with the reason noted. */
#include <string.h>

#include "device/cuda_driver.h"
#include "device/device.h"
#include "support/devtest.h"
#include "test.h"

static int real;

static void test_cpu_loads_no_driver(void) {
  dev_device *d = NULL;
  REQUIRE(dev_open("cpu", &d) == 0);
  CHECK_EQ_INT(dev_kind_of(d), EBB_DEVICE_CPU);
  CHECK_EQ_STR(dev_device_label(d), "cpu");
  CHECK_EQ_INT(dev_ordinal(d), -1);
  CHECK(dev_total_bytes(d) > (64ull << 20));
  CHECK(strlen(dev_name(d)) > 0);
  CHECK(dev_note(d) == NULL);
  dev_meminfo mi;
  CHECK_EQ_INT(dev_mem_info(d, &mi), 0);
  CHECK_EQ_INT(mi.source, EBB_MEMINFO_HOST);
  CHECK(mi.free_bytes > 0 && mi.free_bytes <= mi.total_bytes);
  dev_close(d);
  CHECK_MSG(!dev_cuda_driver_is_loaded(), "opening cpu loaded the CUDA driver");
  CHECK_MSG(dt_maps_have("libcuda") == 0 && dt_maps_have("fakegpu/libcuda") == 0,
            "a libcuda is mapped after opening only the CPU device");
}

static void test_bad_specs(void) {
  const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:0x", "CPU", "cuda0", "cpu:0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dev_device *d = (dev_device *)0x1;
    int rc = dev_open(bad[i], &d);
    CHECK_MSG(rc == EBB_EINVAL, "open(\"%s\") answered %d (%s), want EBB_EINVAL", bad[i], rc,
              ebb_errmsg());
    CHECK_MSG(d == NULL, "open(\"%s\") left *out set on failure", bad[i]);
    CHECK_MSG(strstr(ebb_errmsg(), bad[i]) != NULL, "message does not name '%s': %s", bad[i],
              ebb_errmsg());
  }
  CHECK_MSG(!dev_cuda_driver_is_loaded(), "a bad spec loaded the CUDA driver");
}

static void test_cuda_specs(void) {
  const char *specs[] = {"cuda", "cuda:0", "auto"};
  for (size_t i = 0; i < 3; i++) {
    dev_device *d = NULL;
    int rc = dev_open(specs[i], &d);
    CHECK_MSG(rc == 0, "open(\"%s\"): %s", specs[i], ebb_errmsg());
    if (rc)
      continue;
    CHECK_EQ_INT(dev_kind_of(d), EBB_DEVICE_CUDA);
    CHECK_EQ_STR(dev_device_label(d), "cuda:0");
    CHECK_EQ_INT(dev_ordinal(d), 0);
    CHECK(dev_note(d) == NULL);
    if (!real) {
      CHECK_EQ_STR(dev_name(d), "fakegpu (ebb test device)");
      CHECK_EQ_U64(dev_total_bytes(d), 81920ull << 20);
    } else {
      CHECK(dev_total_bytes(d) > 0);
    }
    CHECK_MSG(!dev_ctx_active(d), "open(\"%s\") created a context", specs[i]);
    dev_close(d);
  }
}

static void test_cuda_out_of_range(void) {
  const dev_cuda_driver *drv;
  REQUIRE(dev_cuda_driver_get(&drv) == 0);
  char spec[32];
  snprintf(spec, sizeof spec, "cuda:%d", drv->ndevices);
  dev_device *d = NULL;
  int rc = dev_open(spec, &d);
  CHECK_EQ_INT(rc, EBB_ENODEV);
  CHECK(d == NULL);
  CHECK_MSG(strstr(ebb_errmsg(), spec) != NULL, "message does not name %s: %s", spec, ebb_errmsg());
  CHECK_EQ_INT(dev_open("cuda:99", &d), EBB_ENODEV);
}

/* Child: open auto with whatever driver the environment names. */
static int child_auto(void) {
  dev_device *d = NULL;
  if (dev_open("auto", &d)) {
    printf("open failed: %s\n", ebb_errmsg());
    return 3;
  }
  printf("label=%s\nnote=%s\n", dev_device_label(d), dev_note(d) ? dev_note(d) : "");
  dev_close(d);
  return 0;
}

static void test_auto_falls_back(void) {
  char out[8192];
  char *env[] = {"EBB_LIBCUDA=/nonexistent/libcuda.so.1", "-EBB_REAL_GPU", NULL};
  int st = dt_run_self("child-auto", env, out, sizeof out);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exited with status %d: %s", st, out);
  CHECK_MSG(strstr(out, "label=cpu\n") != NULL, "auto did not fall back to cpu: %s", out);
  CHECK_MSG(strstr(out, "note=cannot load the CUDA driver /nonexistent/libcuda.so.1") != NULL,
            "the fallback note does not say why: %s", out);
  CHECK_MSG(strstr(out, "using the CPU device") != NULL, "auto did not log the fallback: %s", out);
}

int main(int argc, char **argv) {
  real = dt_real_gpu();
  if (argc > 1 && !strcmp(argv[1], "child-auto"))
    return child_auto();
  dev_close(NULL); /* a no-op */
  RUN(test_cpu_loads_no_driver);
  RUN(test_bad_specs);
  RUN(test_auto_falls_back);
  RUN(test_cuda_specs);
  RUN(test_cuda_out_of_range);
  return TEST_END();
}
