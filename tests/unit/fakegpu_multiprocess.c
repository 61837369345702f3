/* One simulated device shared by every process on the same FAKEGPU_STATE:
 * each sees the others' usage (contexts included), runs out of memory
 * against their allocations, gets back the memory of a process that died
 * without cleaning up (SIGKILL, _exit), and can open the others' memory
 * through IPC handles and exported VMM handles. The other process is
 * fakegpu-hold, built next to fakegpu-smi. */
#include <fcntl.h>
#include <time.h>

#include "fakegpu/fg_test.h"

static unsigned long long field_after_ok(const char *reply, int index) {
  const char *p = reply + 2;
  unsigned long long v = 0;
  for (int i = 0; i <= index; i++)
    v = strtoull(p, (char **)&p, 0);
  return v;
}

static void test_two_processes_share_one_device(void) {
  fgt_hold h;
  char r[256];
  fgt_hold_start(&h);
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  HOLD_OK(&h, "alloc 1000");
  /* This process sees the other's 1000 MiB + its context, plus its own. */
  CHECK_EQ_U64(fgt_used(), (1300 + 300) * MIB);
  CHECK_EQ_U64(fgt_nvml_used_by(h.pid), 1300 * MIB);
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 300 * MIB);
  /* And the other sees ours. */
  CUdeviceptr mine;
  REQUIRE(cu_cuMemAlloc(&mine, 100 * MIB) == CUDA_SUCCESS);
  fgt_hold_cmd(&h, "info", r, sizeof r);
  CHECK_EQ_U64(field_after_ok(r, 0), (81920 - 1700) * MIB);
  /* Out of memory counts everyone's memory. */
  size_t fr, tot;
  REQUIRE(cu_cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS);
  CUdeviceptr big;
  CHECK_EQ_INT(cu_cuMemAlloc(&big, fr + 1), CUDA_ERROR_OUT_OF_MEMORY);
  REQUIRE(cu_cuMemAlloc(&big, fr) == CUDA_SUCCESS); /* the whole rest */
  fgt_hold_cmd(&h, "alloc 2", r, sizeof r);
  CHECK_EQ_STR(r, "err 2");
  CHECK_EQ_INT(cu_cuMemFree(big), CUDA_SUCCESS);
  HOLD_OK(&h, "alloc 2");
  /* The other releases everything: only we remain. */
  HOLD_OK(&h, "release");
  CHECK_EQ_U64(fgt_nvml_used_by(h.pid), 0);
  CHECK_EQ_U64(fgt_used(), 400 * MIB);
  fgt_hold_wait(&h);
  CHECK_EQ_INT(cu_cuMemFree(mine), CUDA_SUCCESS);
}

static int is_zombie(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[2] == 'Z';
}

static void test_killed_process_memory_comes_back(void) {
  unsigned long long base = fgt_used();
  fgt_hold h;
  fgt_hold_start(&h);
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  HOLD_OK(&h, "alloc 512");
  HOLD_OK(&h, "vmm 64");
  CHECK_EQ_U64(fgt_used() - base, (300 + 512 + 64) * MIB);
  kill(h.pid, SIGKILL);
  /* Not yet reaped by its parent (a zombie): already gone from the device. */
  for (int i = 0; i < 200 && !is_zombie(h.pid); i++)
    usleep(10000);
  CHECK(is_zombie(h.pid));
  CHECK_EQ_U64(fgt_used(), base);
  CHECK_EQ_U64(fgt_nvml_used_by(h.pid), 0);
  int st = fgt_hold_wait(&h);
  CHECK(WIFSIGNALED(st));
  CHECK_EQ_U64(fgt_used(), base);
}

static void test_exit_without_cleanup_and_clean_exit(void) {
  unsigned long long base = fgt_used();
  fgt_hold h;
  fgt_hold_start(&h);
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  HOLD_OK(&h, "alloc 128");
  HOLD_OK(&h, "exit"); /* _exit(0): no destructor, nothing freed by it */
  fgt_hold_wait(&h);
  CHECK_EQ_U64(fgt_used(), base);
  /* A normal exit (end of input) without freeing anything. */
  fgt_hold_start(&h);
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  HOLD_OK(&h, "alloc 128");
  CHECK_EQ_U64(fgt_used() - base, 428 * MIB);
  fgt_hold_wait(&h);
  CHECK_EQ_U64(fgt_used(), base);
  /* exec: same pid, same start time, but the image that held the memory is
   * gone (and the new one has not called cuInit). */
  fgt_hold_start(&h);
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  HOLD_OK(&h, "alloc 64");
  CHECK_EQ_U64(fgt_used() - base, 364 * MIB);
  HOLD_OK(&h, "exec");
  CHECK_EQ_U64(fgt_used(), base);
  CHECK_EQ_U64(fgt_nvml_used_by(h.pid), 0);
  /* The new image can use the device again under the same pid. */
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  CHECK_EQ_U64(fgt_nvml_used_by(h.pid), 300 * MIB);
  HOLD_OK(&h, "release");
  fgt_hold_wait(&h);
}

static void test_ipc_between_processes(void) {
  fgt_hold h;
  char r[256];
  fgt_hold_start(&h);
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  HOLD_OK(&h, "alloc 4");
  HOLD_OK(&h, "fill 0x42");
  fgt_hold_cmd(&h, "ipc", r, sizeof r);
  REQUIRE(!strncmp(r, "ok ", 3));
  CUipcMemHandle ih;
  for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++) {
    unsigned v;
    sscanf(r + 3 + 2 * i, "%2x", &v);
    ih.reserved[i] = (char)v;
  }
  CUdeviceptr p = 0;
  CHECK_EQ_INT(cu_cuIpcOpenMemHandle(&p, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS);
  unsigned char b = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&b, p, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(b, 0x42);
  /* Opening costs this process nothing on the device. */
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 300 * MIB);
  /* Closing needs a context too. */
  CUcontext cur;
  REQUIRE(cu_cuCtxPopCurrent(&cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cu_cuCtxPushCurrent(cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuIpcCloseMemHandle(p), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
  /* The other way round; and a process cannot open its own handle. */
  CUdeviceptr mine;
  REQUIRE(cu_cuMemAlloc(&mine, 2 * MIB) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemsetD8(mine, 0x43, 1) == CUDA_SUCCESS);
  CUipcMemHandle own;
  REQUIRE(cu_cuIpcGetMemHandle(&own, mine) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuIpcOpenMemHandle(&p, own, 1), CUDA_ERROR_INVALID_CONTEXT);
  char cmd[256] = "open ";
  for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++)
    snprintf(cmd + 5 + 2 * i, 3, "%02x", (unsigned char)own.reserved[i]);
  fgt_hold_cmd(&h, cmd, r, sizeof r);
  CHECK_EQ_STR(r, "ok 67");
  /* A handle to freed memory no longer opens. */
  CHECK_EQ_INT(cu_cuMemFree(mine), CUDA_SUCCESS);
  fgt_hold_cmd(&h, cmd, r, sizeof r);
  CHECK_EQ_STR(r, "err 1");
  /* VMM: the other exports a POSIX fd; we reach it through /proc. */
  HOLD_OK(&h, "vmm 2");
  HOLD_OK(&h, "fill 0x33");
  fgt_hold_cmd(&h, "export", r, sizeof r);
  REQUIRE(!strncmp(r, "ok ", 3));
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, atoi(r + 3));
  int fd = open(path, O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CUmemGenericAllocationHandle imp;
  CHECK_EQ_INT(cu_cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               CUDA_SUCCESS);
  close(fd);
  CUdeviceptr va;
  CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  REQUIRE(cu_cuMemAddressReserve(&va, 2 * MIB, 0, 0, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemMap(va, 2 * MIB, 0, imp, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemSetAccess(va, 2 * MIB, &rw, 1), CUDA_SUCCESS);
  b = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&b, va, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(b, 0x33);
  /* The exporter pays for it, not the importer. */
  CHECK_EQ_U64(fgt_nvml_used_by(getpid()), 300 * MIB);
  CHECK_EQ_INT(cu_cuMemUnmap(va, 2 * MIB), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemRelease(imp), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemAddressFree(va, 2 * MIB), CUDA_SUCCESS);
  HOLD_OK(&h, "release");
  fgt_hold_wait(&h);
}

int main(void) {
  fgt_load_cuda();
  fgt_load_nvml();
  REQUIRE(nv_nvmlInit_v2() == NVML_SUCCESS);
  fgt_init_ctx();
  RUN(test_two_processes_share_one_device);
  RUN(test_killed_process_memory_comes_back);
  RUN(test_exit_without_cleanup_and_clean_exit);
  RUN(test_ipc_between_processes);
  return TEST_END();
}
