/* Libraries and kernels (cuLibrary*, cuKernel*): the context-independent
 * form of modules and functions that the CUDA runtime uses since CUDA 12.
 * A library holds its image; in each context it is used in, it becomes a
 * module (made on first use, as lazy loading does) and a kernel becomes that
 * module's function. The runtime passes a CUkernel to cuLaunchKernel and
 * cuFuncGetAttribute as it is, so those take either handle.
 *
 * A library from a real binary (fatbin, cubin) finds any kernel name: one
 * with a host twin runs it, one without is launched as a no-op (see
 * fakecuda_exec.c). PTX is checked as cuModuleLoadData checks it (218 when a
 * kernel has no twin); any other image needs a twin for every kernel name
 * asked (500 otherwise). Device variables (cuLibraryGetGlobal) are read from
 * the image's cubin, see fakecuda_globals.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_LIB_MAGIC 0x11b7a7e5u
#define FK_KERNEL_MAGIC 0x6e72e100u

struct fk_library {
  uint32_t magic;
  int binary;
  const void *image; /* fk_image_keep's */
  int image_owned;
  struct fk_kernel *kernels; /* its kernels, found so far */
};

struct fk_kernel {
  uint32_t magic;
  struct fk_library *lib;
  dev_kernel_twin_fn twin;
  int max_dyn_smem;       /* cuKernelSetAttribute's dynamic shared memory limit (0: default) */
  char *name;             /* owned: any length, as the driver's (cuRAND's reach 139) */
  struct fk_kernel *next; /* the library's next kernel */
};


static fk_hmap g_handles;      /* library or kernel handle -> itself */
static fk_hmap g_kernel_names; /* (library, name) -> kernel */

static struct fk_library *lib_check(CUlibrary h) {
  struct fk_library *l = h ? fk_hmap_get(&g_handles, (uintptr_t)h, 0, NULL) : NULL;
  return l && l->magic == FK_LIB_MAGIC ? l : NULL;
}

struct fk_kernel *fk_kernel_check(void *h) {
  struct fk_kernel *k = h ? fk_hmap_get(&g_handles, (uintptr_t)h, 0, NULL) : NULL;
  return k && k->magic == FK_KERNEL_MAGIC ? k : NULL;
}

FK_API CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jit_opts,
                                  void **jit_vals, unsigned int njit, CUlibraryOption *lib_opts,
                                  void **lib_vals, unsigned int nlib) {
  (void)jit_opts, (void)jit_vals, (void)lib_opts, (void)lib_vals;
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!lib || !code || (njit && !jit_opts) || (nlib && !lib_opts))
    return CUDA_ERROR_INVALID_VALUE;
  int binary = fk_image_is_binary(code);
  fk_trace("cuLibraryLoadData %p: %s image (first bytes %08x)", code, binary ? "binary" : "other",
           *(const uint32_t *)code);
  if (!binary && (rc = fk_image_check(code, NULL, 0)) != CUDA_SUCCESS)
    return rc;
  struct fk_library *l = calloc(1, sizeof *l);
  if (!l)
    return CUDA_ERROR_OUT_OF_MEMORY;
  l->magic = FK_LIB_MAGIC;
  l->binary = binary;
  if (binary)
    l->image = fk_image_keep(code, &l->image_owned);
  fk_lock();
  rc = fk_hmap_put(&g_handles, (uintptr_t)l, 0, NULL, l) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  fk_unlock();
  if (rc) {
    if (l->image_owned)
      free((void *)l->image);
    free(l);
    return rc;
  }
  *lib = l;
  return CUDA_SUCCESS;
}

/* A library read from a file (cuDNN loads its kernels so): the file's bytes
 * go to cuLibraryLoadData, which keeps what it needs of them. A file that
 * cannot be read: CUDA_ERROR_FILE_NOT_FOUND. Exported by name for dlsym. */
FK_API CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, CUjit_option *jit_opts,
                                      void **jit_vals, unsigned int njit, CUlibraryOption *lib_opts,
                                      void **lib_vals, unsigned int nlib) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!lib || !path)
    return CUDA_ERROR_INVALID_VALUE;
  char *buf;
  long n;
  rc = fk_read_file(path, &buf, &n);
  if (rc)
    return rc;
  rc = cuLibraryLoadData(lib, buf, jit_opts, jit_vals, njit, lib_opts, lib_vals, nlib);
  fk_lock();
  struct fk_library *l = rc ? NULL : lib_check(*lib);
  int kept = l && l->image == buf;
  if (kept)
    l->image_owned = 1; /* kept as it is (wrapper-like images are not copied) */
  fk_unlock();
  if (!kept)
    free(buf);
  return rc;
}

/* Unloading ends the library's kernels and its module in every context. */
FK_API CUresult cuLibraryUnload(CUlibrary lib) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_library *l = lib_check(lib);
  if (!l) {
    fk_unlock();
    return CUDA_ERROR_INVALID_HANDLE;
  }
  for (struct fk_kernel *k = l->kernels, *next; k; k = next) {
    next = k->next;
    fk_hmap_del(&g_handles, (uintptr_t)k, 0, NULL, k);
    fk_hmap_del(&g_kernel_names, (uintptr_t)l, 0, k->name, k);
    k->magic = 0;
    free(k->name);
    free(k);
  }
  fk_objs_drop_owner(l);
  fk_hmap_del(&g_handles, (uintptr_t)l, 0, NULL, l);
  fk_image_forget(l->image);
  fk_params_forget(l->image);
  if (l->image_owned)
    free((void *)l->image);
  l->magic = 0;
  free(l);
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuLibraryGetKernel(CUkernel *out, CUlibrary lib, const char *name) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!out || !name)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct fk_library *l = lib_check(lib);
  struct fk_kernel *k = NULL;
  if (!l) {
    rc = CUDA_ERROR_INVALID_HANDLE;
    goto out;
  }
  if ((k = fk_hmap_get(&g_kernel_names, (uintptr_t)l, 0, name)) != NULL)
    goto found;
  dev_kernel_twin_fn twin = fk_find_twin(name);
  if (!twin && (!l->binary || !fk_image_may_hold(l->image, name))) {
    rc = CUDA_ERROR_NOT_FOUND;
    goto out;
  }
  if (!(k = calloc(1, sizeof *k)) || !(k->name = strdup(name))) {
    free(k);
    k = NULL;
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  k->magic = FK_KERNEL_MAGIC;
  k->lib = l;
  k->twin = twin;
  if (fk_hmap_put(&g_handles, (uintptr_t)k, 0, NULL, k) ||
      fk_hmap_put(&g_kernel_names, (uintptr_t)l, 0, k->name, k)) {
    fk_hmap_del(&g_handles, (uintptr_t)k, 0, NULL, k);
    free(k->name);
    free(k);
    k = NULL;
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  k->next = l->kernels;
  l->kernels = k;
found:
  *out = k;
out:
  fk_unlock();
  return rc;
}

/* The library's module in the current context, made on first use. Caller
 * holds fk_lock and checked the context. */
static CUresult module_in_ctx(struct fk_library *l, struct CUctx_st *c, fk_obj **out) {
  fk_obj *m = fk_obj_find_owned(FK_OBJ_MODULE, l, c);
  CUresult rc = CUDA_SUCCESS;
  if (!m && (rc = fk_new_obj(FK_OBJ_MODULE, &m)) == CUDA_SUCCESS) {
    m->binary = l->binary;
    m->image = l->image;
    if (fk_obj_set_owner(m, l))
      rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (rc == CUDA_SUCCESS)
    *out = m;
  return rc;
}

FK_API CUresult cuLibraryGetModule(CUmodule *out, CUlibrary lib) {
  fk_lock();
  struct CUctx_st *c;
  fk_obj *m;
  CUresult rc = fk_need_ctx(&c);
  struct fk_library *l = rc ? NULL : lib_check(lib);
  if (rc == CUDA_SUCCESS && !out)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !l)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && (rc = module_in_ctx(l, c, &m)) == CUDA_SUCCESS)
    *out = (CUmodule)m;
  fk_unlock();
  return rc;
}

FK_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib,
                                   const char *name) {
  fk_lock();
  struct CUctx_st *c;
  fk_obj *m;
  CUresult rc = fk_need_ctx(&c);
  struct fk_library *l = rc ? NULL : lib_check(lib);
  if (rc == CUDA_SUCCESS && !name)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !l)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && (rc = module_in_ctx(l, c, &m)) == CUDA_SUCCESS)
    rc = fk_module_global(m, c, name, dptr, bytes);
  fk_unlock();
  fk_trace("cuLibraryGetGlobal %s -> %d", name ? name : "(null)", rc);
  return rc;
}

fk_obj *fk_launch_function(void *handle, struct CUctx_st *c) {
  fk_obj *fn = fk_obj_check(handle, FK_OBJ_FUNCTION);
  if (fn)
    return fn;
  struct fk_kernel *k = fk_kernel_check(handle);
  if (!k)
    return NULL;
  if ((fn = fk_obj_find_owned(FK_OBJ_FUNCTION, k, c)) != NULL)
    return fn;
  fk_obj *m;
  char *copy = strdup(k->name);
  if (!copy || module_in_ctx(k->lib, c, &m) != CUDA_SUCCESS ||
      fk_new_obj(FK_OBJ_FUNCTION, &fn) != CUDA_SUCCESS) {
    free(copy);
    return NULL;
  }
  fn->name = copy;
  fn->module = m;
  if (fk_obj_set_owner(fn, k))
    return NULL;
  fn->twin = k->twin;
  fn->noop = !k->twin;
  return fn;
}

FK_API CUresult cuKernelGetFunction(CUfunction *f, CUkernel kernel) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !f)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    fk_obj *fn = fk_kernel_check(kernel) ? fk_launch_function(kernel, c) : NULL;
    if (fn)
      *f = (CUfunction)fn;
    else
      rc = CUDA_ERROR_INVALID_HANDLE;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuKernelGetName(const char **name, CUkernel kernel) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!name)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct fk_kernel *k = fk_kernel_check(kernel);
  if (k)
    *name = k->name;
  else
    rc = CUDA_ERROR_INVALID_HANDLE;
  fk_unlock();
  return rc;
}

FK_API CUresult cuKernelGetLibrary(CUlibrary *lib, CUkernel kernel) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!lib)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct fk_kernel *k = fk_kernel_check(kernel);
  if (k)
    *lib = k->lib;
  else
    rc = CUDA_ERROR_INVALID_HANDLE;
  fk_unlock();
  return rc;
}

const void *fk_kernel_image(void *kernel, const char **name) {
  const struct fk_kernel *k = fk_kernel_check(kernel);
  *name = k ? k->name : NULL;
  return k ? k->lib->image : NULL;
}

/* Kernel attributes are the fake's function attributes (cuFuncGetAttribute),
 * the same on every device; the dynamic shared memory limit is kept. */
int fk_kernel_max_dyn_smem(const void *kernel) {
  const struct fk_kernel *k = fk_kernel_check((void *)kernel);
  return k ? k->max_dyn_smem : 0;
}

FK_API CUresult cuKernelGetAttribute(int *value, CUfunction_attribute attr, CUkernel kernel,
                                     CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  fk_lock();
  struct fk_kernel *k = fk_kernel_check(kernel);
  int max_dyn = k ? k->max_dyn_smem : 0;
  fk_unlock();
  if (!k)
    return CUDA_ERROR_INVALID_HANDLE;
  return fk_func_attribute(attr, value, max_dyn);
}

FK_API CUresult cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel kernel,
                                     CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  rc = fk_func_attribute_settable(attr, value);
  fk_lock();
  struct fk_kernel *k = fk_kernel_check(kernel);
  if (!k)
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    k->max_dyn_smem = value; /* its functions in every context answer by it */
  fk_unlock();
  return rc;
}

FK_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (config < 0 || config > 3)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  rc = fk_kernel_check(kernel) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  fk_unlock();
  return rc;
}
