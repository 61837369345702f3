/* cuGetProcAddress: (base name, CUDA version) -> the versioned entry point,
 * built from the same table ebb's loader uses (EBB_CUDA_ENTRY_POINTS) plus
 * the versions of a few entry points that ebb does not pin. */

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "fakecuda.h"

typedef struct fk_entry {
  const char *base;
  int version; /* the CUDA version that introduced this ABI */
  const char *symbol;
  void *fn;
} fk_entry;

FK_API CUresult cuCtxCreate_v3(CUcontext *ctx, CUexecAffinityParam *params, int n,
                               unsigned int flags, CUdevice dev);
FK_API CUresult cuCtxCreate_v4(CUcontext *ctx, CUctxCreateParams *params, unsigned int flags,
                               CUdevice dev);
FK_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
FK_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                 cuuint64_t flags);
FK_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/* One table entry a line (laid out by hand). */
/* clang-format off */
#define FK_ENTRY_(base, sym, ver, params) {#base, ver, sym, NULL},
static fk_entry g_table[] = {
    EBB_CUDA_ENTRY_POINTS(FK_ENTRY_)
    FK_EXTRA_ENTRY_POINTS(FK_ENTRY_)
    FK_RT_ENTRY_POINTS(FK_ENTRY_)
    {"cuCtxCreate", 11040, "cuCtxCreate_v3", NULL},
    {"cuCtxCreate", 12050, "cuCtxCreate_v4", NULL},
    {"cuDeviceGetUuid", 9020, "cuDeviceGetUuid", NULL},
    {"cuGetProcAddress", 11030, "cuGetProcAddress", NULL},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2", NULL},
    {"cuGetExportTable", 3000, "cuGetExportTable", NULL},
#define FK_UNEXPORTED_(base, sym, ver, fn) {#base, ver, sym, (void *)fn},
    FK_RT_UNEXPORTED_ENTRY_POINTS(FK_UNEXPORTED_)
#undef FK_UNEXPORTED_
};
#undef FK_ENTRY_
/* clang-format on */
#define FK_NTABLE (sizeof g_table / sizeof g_table[0])

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Resolves every versioned symbol through this library's own exports, so a
 * name in the table that the fake does not export answers NOT_FOUND instead
 * of a wrong function. */
static void resolve_table(void) {
  Dl_info info;
  void *self = NULL;
  if (dladdr((void *)&cuGetProcAddress_v2, &info) && info.dli_fname)
    self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  for (size_t i = 0; i < FK_NTABLE; i++)
    if (!g_table[i].fn) /* those not exported come with their address */
      g_table[i].fn = self ? dlsym(self, g_table[i].symbol) : NULL;
  /* The handle stays open: the library is in use while we answer. */
}

int fk_trace_on(void) {
  static int on = -1;
  if (on < 0) {
    const char *v = getenv("FAKEGPU_TRACE");
    on = v && *v && strcmp(v, "0") != 0;
  }
  return on;
}

void fk_trace(const char *fmt, ...) {
  if (!fk_trace_on())
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakegpu[%d]: %s\n", (int)getpid(), line);
}

static const char *status_name(CUdriverProcAddressQueryResult st) {
  return st == CU_GET_PROC_ADDRESS_SUCCESS                  ? "found"
         : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "VERSION_NOT_SUFFICIENT"
                                                            : "SYMBOL_NOT_FOUND";
}

/* FAKEGPU_TRACE=2: a name the fake does not have is answered with a stub
 * that says on stderr which function the client called, then answers
 * CUDA_ERROR_NOT_SUPPORTED, so a client that fails without calling the driver
 * shows what it was missing. Off by default: a real driver answers NULL. */
#define FK_STUBS 512
static const char *g_stub_name[FK_STUBS];
static int g_nstubs;

static CUresult stub_hit(int i) {
  fprintf(stderr, "fakegpu[%d]: called %s, which the fake does not have (FAKEGPU_TRACE=2)\n",
          (int)getpid(), g_stub_name[i]);
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* The stubs, eight to a macro (laid out by hand). */
/* clang-format off */
#define FK_STUB1(i) static CUresult stub_##i(void) { return stub_hit(0##i); } /* octal digits */
#define FK_STUB8(i) FK_STUB1(i##0) FK_STUB1(i##1) FK_STUB1(i##2) FK_STUB1(i##3) \
  FK_STUB1(i##4) FK_STUB1(i##5) FK_STUB1(i##6) FK_STUB1(i##7)
#define FK_STUB64(i) FK_STUB8(i##0) FK_STUB8(i##1) FK_STUB8(i##2) FK_STUB8(i##3) \
  FK_STUB8(i##4) FK_STUB8(i##5) FK_STUB8(i##6) FK_STUB8(i##7)
FK_STUB64(1) FK_STUB64(2) FK_STUB64(3) FK_STUB64(4) FK_STUB64(5) FK_STUB64(6) FK_STUB64(7)
    FK_STUB64(0)
#define FK_REF1(i) stub_##i,
#define FK_REF8(i) FK_REF1(i##0) FK_REF1(i##1) FK_REF1(i##2) FK_REF1(i##3) FK_REF1(i##4) \
  FK_REF1(i##5) FK_REF1(i##6) FK_REF1(i##7)
#define FK_REF64(i) FK_REF8(i##0) FK_REF8(i##1) FK_REF8(i##2) FK_REF8(i##3) FK_REF8(i##4) \
  FK_REF8(i##5) FK_REF8(i##6) FK_REF8(i##7)
static CUresult (*const g_stubs[FK_STUBS])(void) = {FK_REF64(0) FK_REF64(1) FK_REF64(2)
    FK_REF64(3) FK_REF64(4) FK_REF64(5) FK_REF64(6) FK_REF64(7)};
/* clang-format on */

static int trace_stubs(void) {
  const char *v = getenv("FAKEGPU_TRACE");
  return v && !strcmp(v, "2");
}

static void *stub_for(const char *symbol) {
  for (int i = 0; i < g_nstubs; i++)
    if (!strcmp(g_stub_name[i], symbol))
      return (void *)g_stubs[i];
  if (g_nstubs == FK_STUBS || !(g_stub_name[g_nstubs] = strdup(symbol)))
    return NULL;
  return (void *)g_stubs[g_nstubs++];
}

static CUresult get_proc(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status) {
  if (fk_cfg.stub)
    return CUDA_ERROR_STUB_LIBRARY;
  if (!symbol || !pfn || flags > 2)
    return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  if (cuda_version > FK_DRIVER_VERSION)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_once(&g_once, resolve_table);
  const fk_entry *best = NULL;
  int known = 0;
  for (size_t i = 0; i < FK_NTABLE; i++) {
    const fk_entry *e = &g_table[i];
    if (strcmp(e->base, symbol) != 0 || !e->fn)
      continue;
    known = 1;
    if (e->version <= cuda_version && (!best || e->version > best->version))
      best = e;
  }
  if (best)
    *pfn = best->fn;
  else if (!known && *symbol && trace_stubs())
    *pfn = stub_for(symbol);
  CUdriverProcAddressQueryResult st = best    ? CU_GET_PROC_ADDRESS_SUCCESS
                                      : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                              : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (status)
    *status = st;
  fk_trace("cuGetProcAddress %s %d flags %llu -> %s%s%s", symbol, cuda_version,
           (unsigned long long)flags, status_name(st), best ? " " : "", best ? best->symbol : "");
  return CUDA_SUCCESS;
}

FK_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                 cuuint64_t flags) {
  return get_proc(symbol, pfn, cuda_version, flags, NULL);
}

FK_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
  return get_proc(symbol, pfn, cuda_version, flags, status);
}
