/* Loads libcuda with dlopen and fills the entry point table: each entry by
 * base name at its pinned ABI version through cuGetProcAddress_v2, falling
 * back to dlsym of the exact versioned symbol. */
#include "device/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ebb/error.h"

#define DEFAULT_LIBCUDA "libcuda.so.1"

static const char *const entry_names[] = {
#define NAME_(name, sym, ver, params) #name,
    EBB_CUDA_ENTRY_POINTS(NAME_)
#undef NAME_
};

int dev_cuda_entry_count(void) { return EBB_CUDA_NENTRIES; }

const char *dev_cuda_entry_name(int i) {
  return i >= 0 && i < EBB_CUDA_NENTRIES ? entry_names[i] : NULL;
}

const char *dev_cuda_driver_path(void) {
  const char *p = getenv("EBB_LIBCUDA");
  return p && *p ? p : DEFAULT_LIBCUDA;
}

static dev_cuda_res resolve_one(void *lib, dev_pfn_cuGetProcAddress_v2 gpa, const char *base,
                                const char *sym, int version, void **out) {
  void *p = NULL;
  if (gpa) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = gpa(base, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && p) {
      *out = p;
      return EBB_CUDA_RES_PROCADDR;
    }
    p = NULL;
  }
  p = dlsym(lib, sym);
  *out = p;
  return p ? EBB_CUDA_RES_DLSYM : EBB_CUDA_RES_MISSING;
}

static void resolve_all(dev_cuda_driver *d, dev_pfn_cuGetProcAddress_v2 gpa) {
  int i = 0;
  void *p;
#define RESOLVE_(name, sym, ver, params)                     \
  d->how[i] = resolve_one(d->lib, gpa, #name, sym, ver, &p); \
  memcpy(&d->fn.name, &p, sizeof p);                         \
  d->n_procaddr += d->how[i] == EBB_CUDA_RES_PROCADDR;       \
  d->n_dlsym += d->how[i] == EBB_CUDA_RES_DLSYM;             \
  d->n_missing += d->how[i] == EBB_CUDA_RES_MISSING;         \
  i++;
  EBB_CUDA_ENTRY_POINTS(RESOLVE_)
#undef RESOLVE_
}

/* Names of the entries that are missing, comma separated, into buf. */
static void missing_list(const dev_cuda_driver *d, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < EBB_CUDA_NENTRIES && n + 1 < len; i++)
    if (d->how[i] == EBB_CUDA_RES_MISSING)
      n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", entry_names[i]);
}

static const struct {
  CUresult r;
  const char *name;
} own_names[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
};

const char *dev_cuda_errname(const dev_cuda_driver *drv, CUresult r) {
  if (drv && drv->fn.cuGetErrorName) {
    const char *s = NULL;
    if (drv->fn.cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
      return s;
  }
  for (size_t i = 0; i < sizeof own_names / sizeof own_names[0]; i++)
    if (own_names[i].r == r)
      return own_names[i].name;
  return "CUDA_ERROR_(unknown code)";
}

int dev_cuda_code(CUresult r) {
  switch (r) {
  case CUDA_SUCCESS: return EBB_OK;
  case CUDA_ERROR_OUT_OF_MEMORY: return EBB_EOOM;
  case CUDA_ERROR_NO_DEVICE:
  case CUDA_ERROR_INVALID_DEVICE: return EBB_ENODEV;
  case CUDA_ERROR_STUB_LIBRARY: return EBB_ENOLIB;
  case CUDA_ERROR_INVALID_VALUE:
  case CUDA_ERROR_INVALID_HANDLE:
  case CUDA_ERROR_INVALID_IMAGE:
  case CUDA_ERROR_INVALID_PTX: return EBB_EINVAL;
  case CUDA_ERROR_NOT_FOUND: return EBB_ENOTFOUND;
  case CUDA_ERROR_NOT_SUPPORTED: return EBB_EUNSUPPORTED;
  case CUDA_ERROR_NOT_INITIALIZED:
  case CUDA_ERROR_DEINITIALIZED:
  case CUDA_ERROR_INVALID_CONTEXT:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED: return EBB_ESTATE;
  default: return EBB_EDRIVER;
  }
}

int dev_cuda_fail(const dev_cuda_driver *drv, CUresult r, const char *fn, const char *label,
                  const char *extra) {
  return ebb_seterr(dev_cuda_code(r), "%s failed on %s: %s (%d)%s%s", fn, label,
                    dev_cuda_errname(drv, r), r, extra && *extra ? "; " : "", extra ? extra : "");
}

static void fill_found_at(dev_cuda_driver *d) {
  struct link_map *lm = NULL;
  snprintf(d->found_at, sizeof d->found_at, "%s", d->path);
  if (dlinfo(d->lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
    snprintf(d->found_at, sizeof d->found_at, "%s", lm->l_name);
}

int dev_cuda_driver_load(const char *path, dev_cuda_driver *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", path ? path : dev_cuda_driver_path());
  out->lib = dlopen(out->path, RTLD_NOW | RTLD_LOCAL);
  if (!out->lib) {
    const char *why = dlerror();
    return ebb_seterr(EBB_ENOLIB,
                      "cannot load the CUDA driver %s (%s); install the NVIDIA driver or "
                      "set EBB_LIBCUDA to the path of libcuda.so.1",
                      out->path, why ? why : "dlopen failed");
  }
  fill_found_at(out);
  void *gpa_sym = dlsym(out->lib, "cuGetProcAddress_v2");
  dev_pfn_cuGetProcAddress_v2 gpa = NULL;
  memcpy(&gpa, &gpa_sym, sizeof gpa);
  out->has_get_proc = gpa != NULL;
  resolve_all(out, gpa);

  if (!out->fn.cuInit || !out->fn.cuDeviceGetCount || !out->fn.cuDeviceGet) {
    char miss[1024];
    missing_list(out, miss, sizeof miss);
    dlclose(out->lib);
    out->lib = NULL;
    return ebb_seterr(EBB_ENOLIB, "%s is not a CUDA driver library (missing %s)", out->path, miss);
  }
  /* From here on the library stays loaded even on failure: a driver that ran
   * cuInit may have started threads, and unloading it is not safe. */
  CUresult r = out->fn.cuInit(0);
  if (r == CUDA_ERROR_STUB_LIBRARY)
    return ebb_seterr(EBB_ENOLIB,
                      "%s is the stub libcuda from the CUDA toolkit, not a "
                      "driver (cuInit: CUDA_ERROR_STUB_LIBRARY (34)); install the NVIDIA "
                      "driver or set EBB_LIBCUDA to the driver's libcuda.so.1",
                      out->found_at);
  if (r == CUDA_ERROR_NO_DEVICE)
    return ebb_seterr(EBB_ENODEV, "the CUDA driver at %s reports no device (cuInit: %s (%d))",
                      out->found_at, dev_cuda_errname(out, r), r);
  if (r != CUDA_SUCCESS)
    return ebb_seterr(dev_cuda_code(r) == EBB_ENODEV ? EBB_ENODEV : EBB_EDRIVER,
                      "CUDA driver at %s failed to initialise: cuInit: %s (%d)", out->found_at,
                      dev_cuda_errname(out, r), r);
  if (out->fn.cuDriverGetVersion)
    out->fn.cuDriverGetVersion(&out->version);
  r = out->fn.cuDeviceGetCount(&out->ndevices);
  if (r != CUDA_SUCCESS)
    return ebb_seterr(EBB_EDRIVER, "CUDA driver at %s: cuDeviceGetCount: %s (%d)", out->found_at,
                      dev_cuda_errname(out, r), r);
  if (out->ndevices <= 0)
    return ebb_seterr(EBB_ENODEV, "the CUDA driver at %s reports 0 devices", out->found_at);
  if (out->n_missing) {
    char miss[1024];
    missing_list(out, miss, sizeof miss);
    base_log(EBB_LOG_DEBUG, "device", "driver at %s lacks %s; those calls will fail", out->found_at,
             miss);
  }
  return 0;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_cuda_driver g_drv;
static int g_loaded; /* written under g_lock, read with __atomic */

int dev_cuda_driver_get(const dev_cuda_driver **out) {
  if (__atomic_load_n(&g_loaded, __ATOMIC_ACQUIRE)) {
    *out = &g_drv;
    return 0;
  }
  pthread_mutex_lock(&g_lock);
  int rc = 0;
  if (!g_loaded) {
    rc = dev_cuda_driver_load(NULL, &g_drv);
    if (rc == 0)
      __atomic_store_n(&g_loaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_lock);
  *out = rc == 0 ? &g_drv : NULL;
  return rc;
}

int dev_cuda_driver_is_loaded(void) { return __atomic_load_n(&g_loaded, __ATOMIC_ACQUIRE); }
