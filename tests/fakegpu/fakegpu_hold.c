/* fakegpu-hold: a tiny process that holds memory on the fake GPU, driven by
 * commands on stdin (one per line), answering one line each on stdout:
 *   init               cuInit(0)
 *   ctx [DEV]          retain the primary context of device DEV (default: the
 *                      --device given, else 0), make it current; later
 *                      commands act on that device
 *   alloc MIB          cuMemAlloc(MIB MiB)            -> "ok 0xPTR"
 *   vmm MIB            reserve + create + map + set access (MIB MiB)
 *   fill BYTE          memset every allocation to BYTE
 *   ipc                IPC handle of the first allocation -> "ok HEX"
 *   open HEX           cuIpcOpenMemHandle, answers the first byte there
 *   export             cuMemExportToShareableHandle of the first VMM handle -> "ok FD"
 *   info               cuMemGetInfo -> "ok FREE TOTAL" (bytes)
 *   free               cuMemFree every allocation, release every VMM range
 *   release            free + primary context release
 *   pid                -> "ok PID"
 *   exit               _exit(0) without cleaning up (the driver reclaims)
 *   exec               exec this program again (same pid, fresh image): the
 *                      new image answers "ok" when it starts
 * Errors answer "err CODE". The library is EBB_LIBCUDA (or the fake built
 * next to this program). Used by the fake's own tests and scripts.
 *
 * Options, run before the commands: --device N (the device `ctx` takes),
 * --alloc MIB (init, ctx and alloc at start, answering as the commands do;
 * repeatable), --wait (at the end of stdin, hold until killed instead of
 * exiting). So `fakegpu-hold --device 2 --alloc 7168 --wait </dev/null &`
 * holds 7 GiB of device 2 (plus its context) until it is killed. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/cuda_api.h"

#define DECL_(base, sym, ver, params) static CUresult(*p_##base) params;
EBB_CUDA_ENTRY_POINTS(DECL_)
#undef DECL_

#define MAXA 256
static CUdeviceptr g_ptr[MAXA];
static int g_n;
static struct {
  CUdeviceptr va;
  size_t size;
  CUmemGenericAllocationHandle h;
} g_vmm[MAXA];
static int g_nv;
static CUcontext g_ctx;
static int g_dev;

static void load(void) {
  const char *path = getenv("EBB_LIBCUDA");
  if (!path || !*path)
    path = FAKEGPU_DEFAULT_LIBCUDA;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "fakegpu-hold: %s\n", dlerror());
    exit(3);
  }
#define LOAD_(base, sym, ver, params)                          \
  *(void **)&p_##base = dlsym(h, sym);                         \
  if (!p_##base) {                                             \
    fprintf(stderr, "fakegpu-hold: %s lacks %s\n", path, sym); \
    exit(3);                                                   \
  }
  EBB_CUDA_ENTRY_POINTS(LOAD_)
#undef LOAD_
}

static int answer(CUresult rc) {
  if (rc)
    printf("err %d\n", rc);
  return rc;
}

static CUresult free_all(void) {
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < g_n; i++)
    if (!rc)
      rc = p_cuMemFree(g_ptr[i]);
  g_n = 0;
  for (int i = 0; i < g_nv; i++) {
    if (!rc)
      rc = p_cuMemUnmap(g_vmm[i].va, g_vmm[i].size);
    if (!rc)
      rc = p_cuMemRelease(g_vmm[i].h);
    if (!rc)
      rc = p_cuMemAddressFree(g_vmm[i].va, g_vmm[i].size);
  }
  g_nv = 0;
  return rc;
}

static CUresult vmm(size_t size) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g_dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  CUresult rc = p_cuMemAddressReserve(&va, size, 0, 0, 0);
  if (rc)
    return rc;
  if ((rc = p_cuMemCreate(&h, size, &prop, 0)) != 0) {
    p_cuMemAddressFree(va, size);
    return rc;
  }
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, g_dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if ((rc = p_cuMemMap(va, size, 0, h, 0)) != 0 || (rc = p_cuMemSetAccess(va, size, &acc, 1)) != 0)
    return rc;
  g_vmm[g_nv].va = va;
  g_vmm[g_nv].size = size;
  g_vmm[g_nv].h = h;
  g_nv++;
  return CUDA_SUCCESS;
}

static void run(const char *line);

/* A number option's value; exits 2 naming the option when it is not one. */
static long number_arg(const char *opt, const char *v) {
  char *end;
  long x = v ? strtol(v, &end, 10) : -1;
  if (!v || end == v || *end || x < 0) {
    fprintf(stderr, "fakegpu-hold: %s wants a number, got '%s'\n", opt, v ? v : "");
    exit(2);
  }
  return x;
}

int main(int argc, char **argv) {
  load();
  setvbuf(stdout, NULL, _IOLBF, 0);
  int wait = 0, started = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--announce")) {
      printf("ok\n");
    } else if (!strcmp(argv[i], "--device")) {
      g_dev = (int)number_arg("--device", i + 1 < argc ? argv[++i] : NULL);
    } else if (!strcmp(argv[i], "--alloc")) {
      long mib = number_arg("--alloc", i + 1 < argc ? argv[++i] : NULL);
      char cmd[64];
      if (!started) {
        run("init");
        run("ctx");
        started = 1;
      }
      snprintf(cmd, sizeof cmd, "alloc %ld", mib);
      run(cmd);
    } else if (!strcmp(argv[i], "--wait")) {
      wait = 1;
    } else {
      fprintf(stderr, "fakegpu-hold: unknown option '%s' (want --device N, --alloc MIB, --wait)\n",
              argv[i]);
      return 2;
    }
  }
  char line[512];
  while (fgets(line, sizeof line, stdin))
    run(line);
  while (wait)
    pause();
  return 0;
}

static void run(const char *line) {
  {
    char cmd[32] = "", arg[256] = "";
    if (sscanf(line, "%31s %255s", cmd, arg) < 1)
      return;
    CUresult rc;
    if (!strcmp(cmd, "init")) {
      if (!answer(p_cuInit(0)))
        printf("ok\n");
    } else if (!strcmp(cmd, "ctx")) {
      if (arg[0])
        g_dev = atoi(arg);
      if (!answer(p_cuDevicePrimaryCtxRetain(&g_ctx, g_dev)) && !answer(p_cuCtxSetCurrent(g_ctx)))
        printf("ok\n");
    } else if (!strcmp(cmd, "alloc")) {
      if (g_n == MAXA) {
        printf("err full\n");
        return;
      }
      size_t mib = strtoull(arg, NULL, 10);
      if (!answer(p_cuMemAlloc(&g_ptr[g_n], mib << 20)))
        printf("ok 0x%llx\n", g_ptr[g_n++]);
    } else if (!strcmp(cmd, "vmm")) {
      if (g_nv == MAXA) {
        printf("err full\n");
        return;
      }
      if (!answer(vmm(strtoull(arg, NULL, 10) << 20)))
        printf("ok 0x%llx\n", g_vmm[g_nv - 1].va);
    } else if (!strcmp(cmd, "fill")) {
      unsigned char v = (unsigned char)strtoul(arg, NULL, 0);
      rc = CUDA_SUCCESS;
      for (int i = 0; i < g_n && !rc; i++)
        rc = p_cuMemsetD8(g_ptr[i], v, 4096);
      for (int i = 0; i < g_nv && !rc; i++)
        rc = p_cuMemsetD8(g_vmm[i].va, v, 4096);
      if (!answer(rc))
        printf("ok\n");
    } else if (!strcmp(cmd, "ipc")) {
      CUipcMemHandle h;
      if (g_n == 0) {
        printf("err none\n");
      } else if (!answer(p_cuIpcGetMemHandle(&h, g_ptr[0]))) {
        printf("ok ");
        for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++)
          printf("%02x", (unsigned char)h.reserved[i]);
        printf("\n");
      }
    } else if (!strcmp(cmd, "open")) {
      CUipcMemHandle h;
      memset(&h, 0, sizeof h);
      for (int i = 0; i < CU_IPC_HANDLE_SIZE && arg[2 * i] && arg[2 * i + 1]; i++) {
        unsigned v;
        sscanf(arg + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
      }
      CUdeviceptr p;
      unsigned char b = 0;
      if (!answer(p_cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) &&
          !answer(p_cuMemcpyDtoH(&b, p, 1)) && !answer(p_cuIpcCloseMemHandle(p)))
        printf("ok %u\n", b);
    } else if (!strcmp(cmd, "export")) {
      int fd = -1;
      if (g_nv == 0)
        printf("err none\n");
      else if (!answer(p_cuMemExportToShareableHandle(&fd, g_vmm[0].h,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)))
        printf("ok %d\n", fd);
    } else if (!strcmp(cmd, "info")) {
      size_t fr, tot;
      if (!answer(p_cuMemGetInfo(&fr, &tot)))
        printf("ok %zu %zu\n", fr, tot);
    } else if (!strcmp(cmd, "free")) {
      if (!answer(free_all()))
        printf("ok\n");
    } else if (!strcmp(cmd, "release")) {
      if (!answer(free_all()) && !answer(p_cuDevicePrimaryCtxRelease(g_dev)))
        printf("ok\n");
    } else if (!strcmp(cmd, "pid")) {
      printf("ok %d\n", (int)getpid());
    } else if (!strcmp(cmd, "exec")) {
      char *args[] = {(char *)"fakegpu-hold", (char *)"--announce", NULL};
      execv("/proc/self/exe", args);
      printf("err exec\n");
    } else if (!strcmp(cmd, "exit")) {
      printf("ok\n");
      fflush(stdout);
      _exit(0);
    } else {
      printf("err unknown command %s\n", cmd);
    }
  }
}
