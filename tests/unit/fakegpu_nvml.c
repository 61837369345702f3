/* The fake NVML reads the same device as the fake driver: totals, and each
 * process's usage including its context, with the INSUFFICIENT_SIZE
 * protocol; it never creates a context (this test never loads libcuda, and
 * is itself never listed). */
#include "fakegpu/fg_test.h"

static nvmlDevice_t g_dev;

static void test_uninitialized(void) {
  unsigned n;
  nvmlDevice_t d;
  CHECK_EQ_INT(nv_nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
  CHECK_EQ_INT(nv_nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_ERROR_UNINITIALIZED);
  CHECK_EQ_INT(nv_nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

static void test_device(void) {
  unsigned n = 0;
  CHECK_EQ_INT(nv_nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
  CHECK_EQ_INT(n, 1);
  nvmlDevice_t d;
  CHECK_EQ_INT(nv_nvmlDeviceGetHandleByIndex_v2(1, &d), NVML_ERROR_INVALID_ARGUMENT);
  REQUIRE(nv_nvmlDeviceGetHandleByIndex_v2(0, &g_dev) == NVML_SUCCESS);
  char name[96];
  CHECK_EQ_INT(nv_nvmlDeviceGetName(g_dev, name, sizeof name), NVML_SUCCESS);
  CHECK_EQ_STR(name, "fakegpu (ebb test device)");
  CHECK_EQ_INT(nv_nvmlDeviceGetName(g_dev, name, 4), NVML_ERROR_INSUFFICIENT_SIZE);
  nvmlMemory_t m;
  CHECK_EQ_INT(nv_nvmlDeviceGetMemoryInfo(g_dev, &m), NVML_SUCCESS);
  CHECK_EQ_U64(m.total, 81920 * MIB);
  CHECK_EQ_U64(m.used, 0);
  CHECK_EQ_U64(m.free, 81920 * MIB);
  nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
  CHECK_EQ_INT(nv_nvmlDeviceGetMemoryInfo_v2(g_dev, &m2), NVML_SUCCESS);
  CHECK_EQ_U64(m2.total, 81920 * MIB);
  m2.version = 1;
  CHECK_EQ_INT(nv_nvmlDeviceGetMemoryInfo_v2(g_dev, &m2), NVML_ERROR_INVALID_ARGUMENT);
  char ver[80];
  CHECK_EQ_INT(nv_nvmlSystemGetDriverVersion(ver, sizeof ver), NVML_SUCCESS);
  CHECK(strlen(ver) > 0);
  CHECK_EQ_STR(nv_nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
  unsigned cnt = 0;
  CHECK_EQ_INT(nv_nvmlDeviceGetComputeRunningProcesses_v3(g_dev, &cnt, NULL), NVML_SUCCESS);
  CHECK_EQ_INT(cnt, 0);
}

static void test_per_process_usage(void) {
  fgt_hold a, b;
  fgt_hold_start(&a);
  fgt_hold_start(&b);
  HOLD_OK(&a, "init");
  HOLD_OK(&b, "init");
  /* cuInit alone costs nothing and is not a compute process. */
  unsigned cnt = 0;
  CHECK_EQ_INT(nv_nvmlDeviceGetComputeRunningProcesses_v3(g_dev, &cnt, NULL), NVML_SUCCESS);
  CHECK_EQ_INT(cnt, 0);
  HOLD_OK(&a, "ctx");
  HOLD_OK(&a, "alloc 100");
  HOLD_OK(&b, "ctx");
  HOLD_OK(&b, "vmm 30");
  /* The protocol: ask with 0, get the count. */
  cnt = 0;
  CHECK_EQ_INT(nv_nvmlDeviceGetComputeRunningProcesses_v3(g_dev, &cnt, NULL),
               NVML_ERROR_INSUFFICIENT_SIZE);
  CHECK_EQ_INT(cnt, 2);
  nvmlProcessInfo_t infos[8];
  cnt = 1;
  CHECK_EQ_INT(nv_nvmlDeviceGetComputeRunningProcesses_v3(g_dev, &cnt, infos),
               NVML_ERROR_INSUFFICIENT_SIZE);
  CHECK_EQ_INT(cnt, 2);
  cnt = 8;
  CHECK_EQ_INT(nv_nvmlDeviceGetComputeRunningProcesses_v3(g_dev, &cnt, infos), NVML_SUCCESS);
  CHECK_EQ_INT(cnt, 2);
  int seen = 0;
  for (unsigned i = 0; i < cnt; i++) {
    CHECK(infos[i].pid != (unsigned)getpid());
    if (infos[i].pid == (unsigned)a.pid) {
      CHECK_EQ_U64(infos[i].usedGpuMemory, 400 * MIB);
      seen |= 1;
    }
    if (infos[i].pid == (unsigned)b.pid) {
      CHECK_EQ_U64(infos[i].usedGpuMemory, 330 * MIB); /* 30 MiB: 15 granules, no rounding */
      seen |= 2;
    }
  }
  CHECK_EQ_INT(seen, 3);
  nvmlMemory_t m;
  CHECK_EQ_INT(nv_nvmlDeviceGetMemoryInfo(g_dev, &m), NVML_SUCCESS);
  CHECK_EQ_U64(m.used, 730 * MIB);
  CHECK_EQ_U64(m.free, (81920 - 730) * MIB);
  /* a gives everything back, b dies. */
  HOLD_OK(&a, "release");
  kill(b.pid, SIGKILL);
  fgt_hold_wait(&b);
  cnt = 8;
  CHECK_EQ_INT(nv_nvmlDeviceGetComputeRunningProcesses_v3(g_dev, &cnt, infos), NVML_SUCCESS);
  CHECK_EQ_INT(cnt, 0);
  CHECK_EQ_INT(nv_nvmlDeviceGetMemoryInfo(g_dev, &m), NVML_SUCCESS);
  CHECK_EQ_U64(m.used, 0);
  fgt_hold_wait(&a);
}

int main(void) {
  fgt_load_nvml();
  RUN(test_uninitialized);
  REQUIRE(nv_nvmlInit_v2() == NVML_SUCCESS);
  RUN(test_device);
  RUN(test_per_process_usage);
  CHECK_EQ_INT(nv_nvmlShutdown(), NVML_SUCCESS);
  unsigned n;
  CHECK_EQ_INT(nv_nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
  return TEST_END();
}
