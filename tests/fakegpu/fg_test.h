/* Helpers for the fake GPU's own tests (tests/unit/fakegpu_*.c): load the
 * fake driver and NVML exactly as ebb does (dlopen $EBB_LIBCUDA / $EBB_LIBNVML,
 * dlsym of the versioned names in EBB_CUDA_ENTRY_POINTS), re-run the test
 * binary as a child with extra environment, and drive fakegpu-hold. */
#ifndef FAKEGPU_FG_TEST_H
#define FAKEGPU_FG_TEST_H

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/cuda_api.h"
#include "device/kernel_twin.h"
#include "test.h"

extern char **environ;

#define FGT_DECL_(base, sym, ver, params) static CUresult(*cu_##base) params;
EBB_CUDA_ENTRY_POINTS(FGT_DECL_)
#undef FGT_DECL_
static dev_pfn_cuGetProcAddress_v2 cu_cuGetProcAddress_v2;
static void *fgt_cuda;

#define FGT_NVML_DECL_(sym, ret, params) static ret(*nv_##sym) params;
EBB_NVML_ENTRY_POINTS(FGT_NVML_DECL_)
#undef FGT_NVML_DECL_
static void *fgt_nvml;

#define MIB (1024ull * 1024ull)

/* Loads $EBB_LIBCUDA and resolves every versioned entry point by its exact
 * exported name; a missing one fails the test. */
__attribute__((unused)) static void fgt_load_cuda(void) {
  const char *path = getenv("EBB_LIBCUDA");
  REQUIRE(path && *path);
  fgt_cuda = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!fgt_cuda)
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
  REQUIRE(fgt_cuda != NULL);
#define FGT_LOAD_(base, sym, ver, params)      \
  *(void **)&cu_##base = dlsym(fgt_cuda, sym); \
  CHECK_MSG(cu_##base != NULL, "fake libcuda does not export %s", sym);
  EBB_CUDA_ENTRY_POINTS(FGT_LOAD_)
#undef FGT_LOAD_
  *(void **)&cu_cuGetProcAddress_v2 = dlsym(fgt_cuda, "cuGetProcAddress_v2");
  REQUIRE(cu_cuGetProcAddress_v2 != NULL);
}

__attribute__((unused)) static void fgt_load_nvml(void) {
  const char *path = getenv("EBB_LIBNVML");
  REQUIRE(path && *path);
  fgt_nvml = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fgt_nvml != NULL);
#define FGT_NVML_LOAD_(sym, ret, params)       \
  *(void **)&nv_##sym = dlsym(fgt_nvml, #sym); \
  CHECK_MSG(nv_##sym != NULL, "fake NVML does not export %s", #sym);
  EBB_NVML_ENTRY_POINTS(FGT_NVML_LOAD_)
#undef FGT_NVML_LOAD_
}

/* The driver entry point name at version, through cuGetProcAddress_v2; a
 * check fails when it is not handed out. */
__attribute__((unused)) static void *fgt_proc(const char *name, int version) {
  void *pfn = NULL;
  CUdriverProcAddressQueryResult s = -1;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2(name, &pfn, version, 0, &s), CUDA_SUCCESS);
  CHECK_MSG(pfn != NULL, "cuGetProcAddress does not hand out %s at %d", name, version);
  return pfn;
}

/* cuInit + retain the primary context of device 0 + make it current. */
__attribute__((unused)) static CUcontext fgt_init_ctx(void) {
  CUcontext ctx = NULL;
  REQUIRE(cu_cuInit(0) == CUDA_SUCCESS);
  REQUIRE(cu_cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  return ctx;
}

/* Bytes in use on device 0 as the driver sees them (needs a context). */
__attribute__((unused)) static unsigned long long fgt_used(void) {
  size_t fr = 0, tot = 0;
  CUresult rc = cu_cuMemGetInfo(&fr, &tot);
  CHECK_EQ_INT(rc, CUDA_SUCCESS);
  return (unsigned long long)(tot - fr);
}

/* Runs this test binary again as `self MODE` with the extra "K=V" settings
 * (NULL-terminated) added to the environment; answers its exit status, or
 * 128+signal. */
__attribute__((unused)) static int fgt_run_self(const char *mode, const char *const *extra) {
  char *env[512];
  int n = 0;
  for (const char *const *e = extra; e && *e; e++)
    env[n++] = (char *)*e;
  for (char **e = environ; *e && n < 510; e++) {
    int overridden = 0;
    for (const char *const *x = extra; x && *x; x++) {
      size_t k = strcspn(*x, "=");
      if (!strncmp(*e, *x, k + 1))
        overridden = 1;
    }
    if (!overridden)
      env[n++] = *e;
  }
  env[n] = NULL;
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(len > 0);
  self[len] = 0;
  char *argv[] = {self, (char *)mode, NULL};
  pid_t pid;
  REQUIRE(posix_spawn(&pid, self, NULL, NULL, argv, env) == 0);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* --- fakegpu-hold: a second process on the same device ---------------------- */
typedef struct fgt_hold {
  pid_t pid;
  FILE *in, *out;
} fgt_hold;

__attribute__((unused)) static void fgt_hold_path(char *buf, size_t len) {
  const char *smi = getenv("FAKEGPU_SMI");
  REQUIRE(smi && *smi);
  snprintf(buf, len, "%s", smi);
  char *slash = strrchr(buf, '/');
  REQUIRE(slash != NULL);
  snprintf(slash + 1, len - (size_t)(slash + 1 - buf), "fakegpu-hold");
}

__attribute__((unused)) static void fgt_hold_start(fgt_hold *h) {
  int to[2], from[2];
  REQUIRE(pipe(to) == 0 && pipe(from) == 0);
  char path[4096];
  fgt_hold_path(path, sizeof path);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from[1], 1);
  posix_spawn_file_actions_addclose(&fa, to[1]);
  posix_spawn_file_actions_addclose(&fa, from[0]);
  char *argv[] = {path, NULL};
  REQUIRE(posix_spawn(&h->pid, path, &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  close(to[0]);
  close(from[1]);
  h->in = fdopen(to[1], "w");
  h->out = fdopen(from[0], "r");
  REQUIRE(h->in && h->out);
}

/* Sends one command; answers its reply line (without newline) in buf. */
__attribute__((unused)) static const char *fgt_hold_cmd(fgt_hold *h, const char *cmd, char *buf,
                                                        size_t len) {
  fprintf(h->in, "%s\n", cmd);
  fflush(h->in);
  if (!fgets(buf, (int)len, h->out))
    snprintf(buf, len, "(fakegpu-hold died)");
  buf[strcspn(buf, "\n")] = 0;
  return buf;
}

#define HOLD_OK(h, cmd)                                                           \
  do {                                                                            \
    char r_[256];                                                                 \
    fgt_hold_cmd(h, cmd, r_, sizeof r_);                                          \
    CHECK_MSG(!strncmp(r_, "ok", 2), "fakegpu-hold '%s' answered '%s'", cmd, r_); \
  } while (0)

__attribute__((unused)) static int fgt_hold_wait(fgt_hold *h) {
  fclose(h->in);
  fclose(h->out);
  int st;
  while (waitpid(h->pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

#endif

#ifndef FGT_NO_NVML_HELPERS
/* Bytes process pid holds on device 0 according to NVML (0 if not listed). */
__attribute__((unused)) static unsigned long long fgt_nvml_used_by(pid_t pid) {
  nvmlDevice_t dev;
  REQUIRE(nv_nvmlDeviceGetHandleByIndex_v2(0, &dev) == NVML_SUCCESS);
  nvmlProcessInfo_t infos[64];
  unsigned n = 64;
  REQUIRE(nv_nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, infos) == NVML_SUCCESS);
  for (unsigned i = 0; i < n; i++)
    if (infos[i].pid == (unsigned)pid)
      return infos[i].usedGpuMemory;
  return 0;
}

/* Bytes used on device 0 by everyone, according to NVML. */
__attribute__((unused)) static unsigned long long fgt_nvml_used(void) {
  nvmlDevice_t dev;
  REQUIRE(nv_nvmlDeviceGetHandleByIndex_v2(0, &dev) == NVML_SUCCESS);
  nvmlMemory_t m;
  REQUIRE(nv_nvmlDeviceGetMemoryInfo(dev, &m) == NVML_SUCCESS);
  return m.used;
}
#endif
