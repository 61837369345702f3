/* Several devices on the fake: FAKEGPU_MEMORY_MIB as a list (one figure per
 * device, the count taken from it), accounting per device in the driver and
 * in NVML, and FAKEGPU_FAIL_DEVICE=D[:after=N][:lost] making one device fail
 * (a sticky 700 on its context, or lost for every process: 999, NVML
 * GPU_IS_LOST) while the others go on. Each scenario runs in a child with an
 * environment and a state file of its own; the child exits with the number of
 * the first check that failed (0: all held). */
#include "fakegpu/fg_test.h"

#define NVML_ERROR_GPU_IS_LOST 15

/* NVML functions beyond ebb's table that the fake also answers. */
static nvmlReturn_t (*nv_nvmlDeviceGetIndex)(nvmlDevice_t dev, unsigned *index);
static nvmlReturn_t (*nv_nvmlDeviceGetUUID)(nvmlDevice_t dev, char *uuid, unsigned len);

static int used_on(unsigned idx, unsigned long long *used, unsigned long long *total) {
  nvmlDevice_t dev;
  nvmlMemory_t m;
  int r = nv_nvmlDeviceGetHandleByIndex_v2(idx, &dev);
  if (r == NVML_SUCCESS)
    r = nv_nvmlDeviceGetMemoryInfo(dev, &m);
  if (r == NVML_SUCCESS) {
    *used = m.used;
    *total = m.total;
  }
  return r;
}

static unsigned long long pid_on(unsigned idx) {
  nvmlDevice_t dev;
  nvmlProcessInfo_t infos[16];
  unsigned n = 16;
  if (nv_nvmlDeviceGetHandleByIndex_v2(idx, &dev) ||
      nv_nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, infos))
    return ~0ull;
  for (unsigned i = 0; i < n; i++)
    if (infos[i].pid == (unsigned)getpid())
      return infos[i].usedGpuMemory;
  return 0;
}

static CUcontext ctx_on(int dev) {
  CUcontext c = NULL;
  if (cu_cuDevicePrimaryCtxRetain(&c, dev) || cu_cuCtxSetCurrent(c))
    return NULL;
  return c;
}

/* FAKEGPU_MEMORY_MIB=8192,8192,4096,4096, FAKEGPU_DEVICES unset. */
static int child_list(void) {
  if (cu_cuInit(0))
    return 1;
  int n = 0;
  cu_cuDeviceGetCount(&n);
  if (n != 4)
    return 2;
  static const size_t want[4] = {8192, 8192, 4096, 4096};
  for (int d = 0; d < 4; d++) {
    size_t t = 0;
    if (cu_cuDeviceTotalMem(&t, d) || t != want[d] * MIB)
      return 3;
  }
  if (nv_nvmlInit_v2())
    return 4;
  /* 1 GiB on device 2: counted there only, with its context. */
  CUdeviceptr p;
  if (!ctx_on(2) || cu_cuMemAlloc(&p, 1024 * MIB))
    return 5;
  unsigned long long used, total;
  if (used_on(2, &used, &total) || used != 1324 * MIB || total != 4096 * MIB)
    return 6;
  if (used_on(0, &used, &total) || used != 0 || total != 8192 * MIB)
    return 7;
  if (pid_on(2) != 1324 * MIB || pid_on(0) != 0 || pid_on(3) != 0)
    return 8;
  size_t fr = 0, tot = 0;
  if (cu_cuMemGetInfo(&fr, &tot) || tot != 4096 * MIB || fr != (4096 - 1324) * MIB)
    return 9;
  /* Device 3 (4 GiB) cannot take 4 GiB more than its context; device 0 can. */
  if (!ctx_on(3) || cu_cuMemAlloc(&p, 4000 * MIB) != CUDA_ERROR_OUT_OF_MEMORY)
    return 10;
  if (!ctx_on(0) || cu_cuMemAlloc(&p, 4000 * MIB) != CUDA_SUCCESS)
    return 11;
  /* NVML names each device. */
  nvmlDevice_t dev;
  unsigned idx = 9;
  if (nv_nvmlDeviceGetHandleByIndex_v2(3, &dev) || nv_nvmlDeviceGetIndex(dev, &idx) || idx != 3)
    return 12;
  char uuid[80];
  if (nv_nvmlDeviceGetUUID(dev, uuid, sizeof uuid) || strncmp(uuid, "GPU-", 4) ||
      uuid[strlen(uuid) - 1] != '3')
    return 13;
  return 0;
}

static int child_init_only(void) { return cu_cuInit(0); }

/* Devices of 1, 2, 3 and 4 GiB; CUDA_VISIBLE_DEVICES from the parent. Exits
 * with (visible count) * 10 + (index of the fake device behind ordinal 0 as
 * its memory says), or 99 when an allocation is not counted on it. */
static int child_visible(void) {
  CUresult rc = cu_cuInit(0);
  if (rc)
    return 100 + rc % 100;
  int n = 0;
  size_t t = 0;
  cu_cuDeviceGetCount(&n);
  cu_cuDeviceTotalMem(&t, 0);
  unsigned phys = (unsigned)(t / (1024 * MIB)) - 1;
  CUdeviceptr p;
  unsigned long long used, total;
  if (nv_nvmlInit_v2() || !ctx_on(0) || cu_cuMemAlloc(&p, 64 * MIB) ||
      used_on(phys, &used, &total) || used != 364 * MIB)
    return 99;
  return n * 10 + (int)phys;
}

/* FAKEGPU_DEVICES=2 FAKEGPU_FAIL_DEVICE=1:after=3 */
static int child_sticky(void) {
  if (cu_cuInit(0) || nv_nvmlInit_v2())
    return 1;
  CUdeviceptr p;
  if (!ctx_on(1))
    return 2;
  for (int i = 0; i < 3; i++) /* calls 1..3 on device 1 work */
    if (cu_cuCtxSynchronize())
      return 3;
  if (cu_cuMemAlloc(&p, MIB) != CUDA_ERROR_ILLEGAL_ADDRESS) /* the 4th fails */
    return 4;
  if (cu_cuCtxSynchronize() != CUDA_ERROR_ILLEGAL_ADDRESS) /* and it sticks */
    return 5;
  /* Device 0 goes on. */
  if (!ctx_on(0) || cu_cuMemAlloc(&p, MIB) || cu_cuMemFree(p))
    return 6;
  /* A reset of device 1 clears it, and it does not fire again. */
  if (cu_cuDevicePrimaryCtxReset(1) || !ctx_on(1))
    return 7;
  for (int i = 0; i < 10; i++)
    if (cu_cuCtxSynchronize())
      return 8;
  unsigned long long used, total;
  if (used_on(1, &used, &total)) /* a sticky error is not a lost device */
    return 9;
  return 0;
}

/* FAKEGPU_DEVICES=2 FAKEGPU_FAIL_DEVICE=1:lost: the first call that needs a
 * context on device 1 loses it, for every process. */
static int child_lost(void) {
  if (cu_cuInit(0) || nv_nvmlInit_v2())
    return 1;
  CUdeviceptr p;
  if (!ctx_on(1))
    return 2;
  if (cu_cuMemAlloc(&p, MIB) != CUDA_ERROR_UNKNOWN)
    return 3;
  if (cu_cuCtxSynchronize() != CUDA_ERROR_UNKNOWN)
    return 4;
  unsigned long long used, total;
  if (used_on(1, &used, &total) != NVML_ERROR_GPU_IS_LOST)
    return 5;
  if (used_on(0, &used, &total) != NVML_SUCCESS)
    return 6;
  if (!ctx_on(0) || cu_cuMemAlloc(&p, MIB))
    return 7;
  /* Another process on the same state file finds device 1 lost too. */
  fgt_hold h;
  fgt_hold_start(&h);
  char r[128];
  fgt_hold_cmd(&h, "init", r, sizeof r);
  int bad = strcmp(fgt_hold_cmd(&h, "ctx 1", r, sizeof r), "err 999") != 0;
  bad |= strncmp(fgt_hold_cmd(&h, "ctx 0", r, sizeof r), "ok", 2) != 0;
  fgt_hold_cmd(&h, "exit", r, sizeof r);
  fgt_hold_wait(&h);
  return bad ? 8 : 0;
}

static const char *state_env(const char *tag) {
  static char buf[8][4200];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, 4200, "FAKEGPU_STATE=%s.%s", getenv("FAKEGPU_STATE"), tag);
  unlink(b + strlen("FAKEGPU_STATE="));
  return b;
}

static void test_memory_list(void) {
  const char *env[] = {"FAKEGPU_MEMORY_MIB=8192,8192,4096,4096", state_env("list"), NULL};
  CHECK_EQ_INT(fgt_run_self("list", env), 0);
}

static void test_bad_settings_fail_init_with_1(void) {
  const char *mismatch[] = {"FAKEGPU_DEVICES=2", "FAKEGPU_MEMORY_MIB=8192,4096,4096",
                            state_env("mismatch"), NULL};
  CHECK_EQ_INT(fgt_run_self("init", mismatch), CUDA_ERROR_INVALID_VALUE);
  const char *garbage[] = {"FAKEGPU_MEMORY_MIB=8192,lots", state_env("garbage"), NULL};
  CHECK_EQ_INT(fgt_run_self("init", garbage), CUDA_ERROR_INVALID_VALUE);
  const char *baddev[] = {"FAKEGPU_DEVICES=2", "FAKEGPU_FAIL_DEVICE=5", state_env("baddev"), NULL};
  CHECK_EQ_INT(fgt_run_self("init", baddev), CUDA_ERROR_INVALID_VALUE);
  const char *badopt[] = {"FAKEGPU_DEVICES=2", "FAKEGPU_FAIL_DEVICE=1:soon", state_env("badopt"),
                          NULL};
  CHECK_EQ_INT(fgt_run_self("init", badopt), CUDA_ERROR_INVALID_VALUE);
  const char *fine[] = {"FAKEGPU_DEVICES=3", "FAKEGPU_MEMORY_MIB=4096", state_env("fine"), NULL};
  CHECK_EQ_INT(fgt_run_self("init", fine), CUDA_SUCCESS);
}

static void test_cuda_visible_devices(void) {
  char vis[128], st[4200];
  static const struct {
    const char *value;
    int want;
  } cases[] = {
      {"3,1", 23},                                      /* two devices; ordinal 0 is the fake's 3 */
      {"2,x,0", 12},                                    /* the list ends at the first bad entry */
      {"1,1", 11},                                      /* ... or at a repeated one */
      {"GPU-66616b65-6770-752d-6562-621042133702", 12}, /* by uuid */
      {"GPU-66616b65-6770-752d-6562-62104213370", 10},  /* a uuid prefix: the first match */
      {"", 100 + CUDA_ERROR_NO_DEVICE % 100},           /* none visible */
      {"7", 100 + CUDA_ERROR_NO_DEVICE % 100},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(vis, sizeof vis, "CUDA_VISIBLE_DEVICES=%s", cases[i].value);
    snprintf(st, sizeof st, "%s", state_env("visible"));
    const char *env[] = {"FAKEGPU_MEMORY_MIB=1024,2048,3072,4096", vis, st, NULL};
    int got = fgt_run_self("visible", env);
    CHECK_MSG(got == cases[i].want, "CUDA_VISIBLE_DEVICES='%s': child answered %d, want %d",
              cases[i].value, got, cases[i].want);
  }
}

static void test_fail_device_sticky(void) {
  const char *env[] = {"FAKEGPU_DEVICES=2", "FAKEGPU_FAIL_DEVICE=1:after=3", state_env("sticky"),
                       NULL};
  CHECK_EQ_INT(fgt_run_self("sticky", env), 0);
}

static void test_fail_device_lost(void) {
  const char *env[] = {"FAKEGPU_DEVICES=2", "FAKEGPU_FAIL_DEVICE=1:lost", state_env("lost"), NULL};
  CHECK_EQ_INT(fgt_run_self("lost", env), 0);
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  fgt_load_nvml();
  *(void **)&nv_nvmlDeviceGetIndex = dlsym(fgt_nvml, "nvmlDeviceGetIndex");
  *(void **)&nv_nvmlDeviceGetUUID = dlsym(fgt_nvml, "nvmlDeviceGetUUID");
  REQUIRE(nv_nvmlDeviceGetIndex && nv_nvmlDeviceGetUUID);
  if (argc > 1) {
    if (!strcmp(argv[1], "list"))
      return child_list();
    if (!strcmp(argv[1], "init"))
      return child_init_only();
    if (!strcmp(argv[1], "visible"))
      return child_visible();
    if (!strcmp(argv[1], "sticky"))
      return child_sticky();
    if (!strcmp(argv[1], "lost"))
      return child_lost();
    return 99;
  }
  RUN(test_memory_list);
  RUN(test_bad_settings_fail_init_with_1);
  RUN(test_cuda_visible_devices);
  RUN(test_fail_device_sticky);
  RUN(test_fail_device_lost);
  return TEST_END();
}
