/* dev_device_probe (what `ebb devices` / `ebb version` show): the fields on
 * the fake, and that probing creates no context: while this process is still
 * alive after the probe, the smi (a separate process) does not list it. A
 * failed probe fills `why` and still answers 0. */
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "support/devtest.h"
#include "test.h"

static int real;

static void test_probe_fields(void) {
  dev_probe p;
  CHECK_EQ_INT(dev_device_probe(&p), 0);
  REQUIRE(p.driver_loaded);
  CHECK_EQ_STR(p.why, "");
  CHECK(p.driver_path[0] == '/');
  CHECK(p.ndevices >= 1);
  CHECK(p.nvml_loaded);
  CHECK(strlen(p.nvml_driver) > 0);
  const dev_probe_device *d = &p.devices[0];
  CHECK_EQ_INT(d->index, 0);
  CHECK(strlen(d->name) > 0);
  CHECK_MSG(strncmp(d->uuid, "GPU-", 4) == 0 && strlen(d->uuid) == 40, "uuid '%s'", d->uuid);
  CHECK(d->cc_major >= 3);
  CHECK(d->total_bytes > 0);
  CHECK(d->free_bytes > 0 && d->free_bytes <= d->total_bytes);
  if (!real) {
    CHECK_EQ_INT(p.driver_version, 13000);
    CHECK_EQ_STR(d->name, "fakegpu (ebb test device)");
    CHECK_EQ_U64(d->total_bytes, 81920ull << 20);
    CHECK_EQ_U64(d->free_bytes, 81920ull << 20);
    CHECK_EQ_INT(d->cc_major, 9);
    CHECK_EQ_INT(d->cc_minor, 0);
    CHECK_EQ_INT(d->vmm, 1);
    CHECK_EQ_STR(p.driver_path, getenv("EBB_LIBCUDA"));
  }
  long long mib = dt_smi_proc_mib(getpid());
  CHECK_MSG(mib == 0, "after the probe the smi lists this process with %lld MiB", mib);
  if (!real)
    CHECK_EQ_INT(dt_smi_used_mib(), 0);
}

static int child_probe(void) {
  dev_probe p;
  int rc = dev_device_probe(&p);
  printf("rc=%d loaded=%d ndevices=%d nvml=%d why=%s\n", rc, p.driver_loaded, p.ndevices,
         p.nvml_loaded, p.why);
  return 0;
}

static void test_probe_without_driver(void) {
  char out[4096];
  char *env[] = {"EBB_LIBCUDA=/nonexistent/libcuda.so.1", "EBB_LIBNVML=/nonexistent/nvml.so",
                 "-EBB_REAL_GPU", NULL};
  int st = dt_run_self("child-probe", env, out, sizeof out);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d: %s", st, out);
  CHECK_MSG(strstr(out, "rc=0 loaded=0 ndevices=0 nvml=0 why=cannot load the CUDA driver "
                        "/nonexistent/libcuda.so.1"),
            "probe without a driver: %s", out);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "child-probe"))
    return child_probe();
  real = dt_real_gpu();
  RUN(test_probe_without_driver);
  RUN(test_probe_fields);
  return TEST_END();
}
