/* Images, the JIT linker and what can be asked of a function.
 *
 * The fake runs kernels as host twins (fakegpu_twin_<name>, see
 * fakecuda_exec.c), so it can take an image only if it can run what the image
 * holds. A binary image (fatbin, cubin, ELF) is never parsed: its kernels are
 * looked up by name when asked for. A PTX image is text, so the fake reads its
 * `.entry` names: if one of them has no host twin the image is refused with
 * CUDA_ERROR_INVALID_PTX (218, "a PTX JIT compilation failed", what a driver
 * answers for PTX it cannot turn into code for the device), the reason in the
 * JIT error log (CU_JIT_ERROR_LOG_BUFFER) and on stderr. An entry whose body
 * is `ret;` alone needs no twin: a no-op is what it does. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakecuda.h"

#define FK_THREADS_PER_SM 2048
#define FK_BLOCKS_PER_SM 32
#define FK_REGS_PER_SM 65536
#define FK_REGS_PER_THREAD 32
#define FK_SMEM_PER_SM 233472
#define FK_SMEM_PER_BLOCK 49152

FK_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shmem, CUstream s, void **params, void **extra);

/* --- images ----------------------------------------------------------------- */
/* PTX is NUL-terminated text with .version and .target directives; a binary
 * image has a non-text byte before any NUL (a fatbin's magic, ELF's 0x7f). */
static int is_ptx(const char *t) {
  const unsigned char *p = (const unsigned char *)t;
  for (; *p; p++)
    if (*p < 0x20 && *p != '\n' && *p != '\r' && *p != '\t')
      return 0;
    else if (*p >= 0x7f)
      return 0;
  return strstr(t, ".version") && strstr(t, ".target");
}

/* Skips white space and PTX comments (// to the line's end, block comments). */
static const char *skip_blank(const char *p) {
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
      p++;
    if (p[0] == '/' && p[1] == '/')
      p += strcspn(p, "\n");
    else if (p[0] == '/' && p[1] == '*') {
      const char *e = strstr(p + 2, "*/");
      if (!e)
        return p;
      p = e + 2;
    } else
      return p;
  }
}

/* An entry whose body is `ret;` alone (after its parameter list, at p) does
 * nothing on any GPU, so running it as a no-op is exact: cuDNN's
 * nopCudnnHardwareDetection is one, loaded before its first graph runs. */
static int ptx_body_is_ret(const char *p) {
  p = skip_blank(p);
  if (*p == '(') {
    const char *e = strchr(p, ')');
    if (!e)
      return 0;
    p = skip_blank(e + 1);
  }
  if (*p != '{')
    return 0;
  p = skip_blank(p + 1);
  if (strncmp(p, "ret;", 4))
    return 0;
  return *skip_blank(p + 4) == '}';
}

int fk_ptx_entry_does_nothing(const char *ptx, const char *name) {
  size_t len = strlen(name);
  for (const char *e = strstr(ptx, ".entry"); e; e = strstr(e + 6, ".entry")) {
    const char *n = e + 6;
    while (*n == ' ' || *n == '\t' || *n == '\n' || *n == '\r')
      n++;
    if (n > e + 6 && !strncmp(n, name, len) && strchr(" \t\r\n(", n[len]))
      return ptx_body_is_ret(n + len);
  }
  return 0;
}

CUresult fk_image_check(const void *image, char *msg, size_t msg_len) {
  const char *t = image;
  if (!is_ptx(t))
    return CUDA_SUCCESS;
  for (const char *e = strstr(t, ".entry"); e; e = strstr(e + 6, ".entry")) {
    const char *n = e + 6;
    if (*n != ' ' && *n != '\t' && *n != '\n')
      continue;
    while (*n == ' ' || *n == '\t' || *n == '\n' || *n == '\r')
      n++;
    size_t len = strcspn(n, " \t\r\n(");
    if (len == 0)
      continue;
    char *name = strndup(n, len);
    if (!name)
      return CUDA_ERROR_OUT_OF_MEMORY;
    if (fk_find_twin(name) || ptx_body_is_ret(n + len)) {
      free(name);
      continue;
    }
    char buf[800];
    snprintf(buf, sizeof buf,
             "fakegpu: cannot run this PTX: kernel '%s' has no host twin "
             "(the fake driver runs a kernel only as a host function %s%s)",
             name, EBB_TWIN_PREFIX, name);
    free(name);
    fprintf(stderr, "%s\n", buf);
    if (msg && msg_len) {
      size_t k = strlen(buf) < msg_len - 1 ? strlen(buf) : msg_len - 1;
      memcpy(msg, buf, k);
      msg[k] = 0;
    }
    return CUDA_ERROR_INVALID_PTX;
  }
  return CUDA_SUCCESS;
}

/* The JIT options a caller passes: where the logs go. */
typedef struct jit_logs {
  char *err, *info;
  size_t err_size, info_size;
  void **err_size_val, **info_size_val; /* written back: bytes used */
} jit_logs;

static CUresult parse_jit_options(unsigned n, CUjit_option *opts, void **vals, jit_logs *l) {
  memset(l, 0, sizeof *l);
  if (n && (!opts || !vals))
    return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    if (opts[i] < 0 || opts[i] >= CU_JIT_NUM_OPTIONS)
      return CUDA_ERROR_INVALID_VALUE;
    switch (opts[i]) {
    case CU_JIT_ERROR_LOG_BUFFER: l->err = vals[i]; break;
    case CU_JIT_INFO_LOG_BUFFER: l->info = vals[i]; break;
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
      l->err_size = (size_t)(uintptr_t)vals[i];
      l->err_size_val = &vals[i];
      break;
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
      l->info_size = (size_t)(uintptr_t)vals[i];
      l->info_size_val = &vals[i];
      break;
    default: break;
    }
  }
  return CUDA_SUCCESS;
}

static void write_log(char *buf, size_t size, void **size_val, const char *text) {
  if (!buf || !size)
    return;
  snprintf(buf, size, "%s", text);
  if (size_val)
    *size_val = (void *)(uintptr_t)(strlen(buf) + (*text ? 1 : 0));
}

FK_API CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n,
                                   CUjit_option *opts, void **vals) {
  fk_lock();
  struct CUctx_st *c;
  jit_logs logs;
  char msg[800] = "";
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!m || !image))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = parse_jit_options(n, opts, vals, &logs);
  if (rc == CUDA_SUCCESS) {
    rc = fk_image_check(image, msg, sizeof msg);
    write_log(logs.err, logs.err_size, logs.err_size_val, msg);
    write_log(logs.info, logs.info_size, logs.info_size_val, "");
  }
  fk_obj *o;
  if (rc == CUDA_SUCCESS)
    rc = fk_new_obj(FK_OBJ_MODULE, &o);
  if (rc == CUDA_SUCCESS) {
    o->binary = fk_image_is_binary(image);
    if (o->binary)
      o->image = fk_image_keep(image, &o->image_owned);
    else
      o->ptx = strdup(image);
    *m = (CUmodule)o;
  }
  fk_unlock();
  return rc;
}

/* A module from a file: the file's bytes (NUL-terminated, for PTX) go to
 * cuModuleLoadData, which copies what it keeps. A file that cannot be read:
 * 301 (FILE_NOT_FOUND); a fatbin wrapper (a struct of pointers, meaningless
 * in a file): 200 (INVALID_IMAGE). */
FK_API CUresult cuModuleLoadData(CUmodule *m, const void *image); /* fakecuda_exec.c */

CUresult fk_read_file(const char *path, char **buf, long *n) {
  FILE *f = fopen(path, "rb");
  *buf = NULL;
  *n = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (*n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (*buf = calloc(1, (size_t)*n + 1)) != NULL && fread(*buf, 1, (size_t)*n, f) != (size_t)*n) {
    free(*buf);
    *buf = NULL;
  }
  if (f)
    fclose(f);
  if (!*buf)
    return f ? CUDA_ERROR_OUT_OF_MEMORY : (CUresult)301;
  return CUDA_SUCCESS;
}

FK_API CUresult cuModuleLoad(CUmodule *m, const char *path) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_unlock();
  if (rc)
    return rc;
  if (!m || !path)
    return CUDA_ERROR_INVALID_VALUE;
  char *buf;
  long n;
  rc = fk_read_file(path, &buf, &n);
  if (rc)
    return rc;
  static const unsigned char wrapper[4] = {0xb1, 0x43, 0x62, 0x46};
  rc = n >= 4 && !memcmp(buf, wrapper, 4) ? (CUresult)200 : cuModuleLoadData(m, buf);
  free(buf);
  return rc;
}

/* A fat binary (or any image cuModuleLoadData takes: the driver's loader is
 * the same). */
FK_API CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fat) {
  return cuModuleLoadData(m, fat);
}

/* Device variables of a binary image (fakecuda_globals.c); PTX modules have none here. */
FK_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule m,
                                     const char *name) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !name)
    rc = CUDA_ERROR_INVALID_VALUE;
  fk_obj *mod = rc == CUDA_SUCCESS ? fk_obj_check(m, FK_OBJ_MODULE) : NULL;
  if (rc == CUDA_SUCCESS && !mod)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS)
    rc = fk_module_global(mod, c, name, dptr, bytes);
  fk_unlock();
  return rc;
}

/* --- the linker: collects PTX (checked as it is added) and binaries, and
 * completes to one image that cuModuleLoadData takes. A link state is not
 * tied to a context's life. ----------------------------------------------------- */
#define FK_LINK_MAGIC 0x4c494e4bu
typedef struct fk_link {
  uint32_t magic;
  char *image; /* the PTX added, concatenated, NUL-terminated */
  size_t len;
  int inputs;
  jit_logs logs;
  struct fk_link *next;
} fk_link;

static fk_link *g_links;

static fk_link *link_check(CUlinkState s) {
  for (fk_link *l = g_links; l; l = l->next)
    if ((CUlinkState)l == s && l->magic == FK_LINK_MAGIC)
      return l;
  return NULL;
}

FK_API CUresult cuLinkCreate_v2(unsigned int n, CUjit_option *opts, void **vals,
                                CUlinkState *state) {
  fk_lock();
  struct CUctx_st *c;
  fk_link *l = NULL;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !state)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    l = calloc(1, sizeof *l);
    rc = l ? parse_jit_options(n, opts, vals, &l->logs) : CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (rc == CUDA_SUCCESS) {
    l->magic = FK_LINK_MAGIC;
    l->next = g_links;
    g_links = l;
    *state = (CUlinkState)l;
    write_log(l->logs.err, l->logs.err_size, NULL, "");
    write_log(l->logs.info, l->logs.info_size, NULL, "");
  } else {
    free(l);
  }
  fk_unlock();
  return rc;
}

/* Caller holds fk_lock; data is size bytes, not necessarily NUL-terminated. */
static CUresult link_add(fk_link *l, CUjitInputType type, const void *data, size_t size) {
  if (!data || size == 0 || type < CU_JIT_INPUT_CUBIN || type > CU_JIT_INPUT_LIBRARY)
    return CUDA_ERROR_INVALID_VALUE;
  l->inputs++;
  if (type != CU_JIT_INPUT_PTX)
    return CUDA_SUCCESS; /* binaries: kernels resolved by name later */
  char *text = malloc(size + 1);
  if (!text)
    return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(text, data, size);
  text[size] = 0;
  char msg[800] = "";
  CUresult rc = is_ptx(text) ? fk_image_check(text, msg, sizeof msg) : CUDA_ERROR_INVALID_PTX;
  if (rc == CUDA_ERROR_INVALID_PTX && !*msg)
    snprintf(msg, sizeof msg, "fakegpu: input is not PTX text (no .version/.target)");
  if (rc) {
    write_log(l->logs.err, l->logs.err_size, l->logs.err_size_val, msg);
    free(text);
    return rc;
  }
  size_t n = strlen(text);
  char *img = realloc(l->image, l->len + n + 2);
  if (!img) {
    free(text);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(img + l->len, text, n);
  l->len += n;
  img[l->len++] = '\n';
  img[l->len] = 0;
  l->image = img;
  free(text);
  return CUDA_SUCCESS;
}

FK_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                 const char *name, unsigned int n, CUjit_option *opts,
                                 void **vals) {
  (void)name;
  fk_lock();
  jit_logs unused;
  CUresult rc = fk_check_init();
  fk_link *l = rc ? NULL : link_check(state);
  if (rc == CUDA_SUCCESS && !l)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS)
    rc = parse_jit_options(n, opts, vals, &unused);
  if (rc == CUDA_SUCCESS)
    rc = link_add(l, type, data, size);
  fk_unlock();
  return rc;
}

FK_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                 unsigned int n, CUjit_option *opts, void **vals) {
  fk_lock();
  jit_logs unused;
  char *buf = NULL;
  CUresult rc = fk_check_init();
  fk_link *l = rc ? NULL : link_check(state);
  if (rc == CUDA_SUCCESS && !l)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && !path)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = parse_jit_options(n, opts, vals, &unused);
  int fd = rc == CUDA_SUCCESS ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  if (rc == CUDA_SUCCESS && fd < 0)
    rc = CUDA_ERROR_FILE_NOT_FOUND;
  struct stat sb;
  if (rc == CUDA_SUCCESS) {
    buf = fstat(fd, &sb) == 0 ? malloc((size_t)sb.st_size + 1) : NULL;
    if (!buf || read(fd, buf, (size_t)sb.st_size) != sb.st_size)
      rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (fd >= 0)
    close(fd);
  if (rc == CUDA_SUCCESS)
    rc = link_add(l, type, buf, (size_t)sb.st_size);
  free(buf);
  fk_unlock();
  return rc;
}

FK_API CUresult cuLinkComplete(CUlinkState state, void **cubin, size_t *size) {
  fk_lock();
  CUresult rc = fk_check_init();
  fk_link *l = rc ? NULL : link_check(state);
  if (rc == CUDA_SUCCESS && !l)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && (!cubin || !size || l->inputs == 0))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && !l->image) {
    /* Only binaries went in: an image that names no PTX entry. */
    static const char bin[] = "fakegpu: linked binary image";
    l->image = strdup(bin);
    l->len = l->image ? strlen(bin) : 0;
    if (!l->image)
      rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (rc == CUDA_SUCCESS) {
    *cubin = l->image;
    *size = l->len + 1;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuLinkDestroy(CUlinkState state) {
  fk_lock();
  CUresult rc = fk_check_init();
  fk_link *l = rc ? NULL : link_check(state);
  if (rc == CUDA_SUCCESS && !l)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS) {
    for (fk_link **pp = &g_links; *pp; pp = &(*pp)->next)
      if (*pp == l) {
        *pp = l->next;
        break;
      }
    l->magic = 0;
    free(l->image);
    free(l);
  }
  fk_unlock();
  return rc;
}

/* --- functions --------------------------------------------------------------- */
static CUresult need_function(CUfunction f, fk_obj **out) {
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    return rc;
  *out = fk_launch_function(f, c);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

int fk_func_max_dyn_smem(const fk_obj *fn) {
  int v = fn->max_dyn_smem ? fn->max_dyn_smem : fn->owner ? fk_kernel_max_dyn_smem(fn->owner) : 0;
  return v ? v : FK_SMEM_PER_BLOCK;
}

CUresult fk_func_attribute(CUfunction_attribute attr, int *value, int max_dyn) {
  if (!value)
    return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = FK_REGS_PER_THREAD; break;
  case CU_FUNC_ATTRIBUTE_PTX_VERSION:
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; break;
  case 7: *value = 0; break; /* CACHE_MODE_CA */
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    *value = max_dyn ? max_dyn : FK_SMEM_PER_BLOCK;
    break;
  case 9: *value = -1; break; /* PREFERRED_SHARED_MEMORY_CARVEOUT: default */
  default:
    if (attr >= 10 && attr <= 16)
      *value = 0; /* cluster attributes: none set */
    else
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* Settable: the dynamic shared memory limit (up to the SM's 227 KiB; the
 * caller keeps it, occupancy answers by it) and the carveout (-1..100). */
CUresult fk_func_attribute_settable(CUfunction_attribute attr, int value) {
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    return value >= 0 && value <= 227 * 1024 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (attr == 9)
    return value >= -1 && value <= 100 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (attr >= 11 && attr <= 16) /* cluster sizes and scheduling */
    return value >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction f) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS)
    rc = fk_func_attribute(attr, value, fk_func_max_dyn_smem(fn));
  fk_unlock();
  return rc;
}

FK_API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS)
    rc = fk_func_attribute_settable(attr, value);
  if (rc == CUDA_SUCCESS && attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    fn->max_dyn_smem = value ? value : FK_SMEM_PER_BLOCK;
  fk_unlock();
  return rc;
}

FK_API CUresult cuFuncGetName(const char **name, CUfunction f) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && !name)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    *name = fn->name;
  fk_unlock();
  return rc;
}

FK_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *smem, CUfunction f, int blocks,
                                                        int block_size) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && (!smem || blocks <= 0 || block_size <= 0 || block_size > 1024))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    size_t per = (size_t)FK_SMEM_PER_SM / (size_t)blocks;
    *smem = per > (size_t)227 * 1024 ? (size_t)227 * 1024 : per;
  }
  fk_unlock();
  return rc;
}

/* Modules are loaded whole when asked (eager), as the fake has nothing to defer. */
FK_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
  CUresult rc = fk_check_init();
  if (rc == CUDA_SUCCESS && !mode)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    *mode = 1; /* CU_MODULE_EAGER_LOADING */
  return rc;
}

FK_API CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && (config < 0 || config > CU_FUNC_CACHE_PREFER_EQUAL))
    rc = CUDA_ERROR_INVALID_VALUE;
  fk_unlock();
  return rc;
}

/* As cuCtxSetSharedMemConfig: banks are fixed, a valid setting (0-2) is
 * taken and changes nothing; others 1; an unknown function 400. */
FK_API CUresult cuFuncSetSharedMemConfig(CUfunction f, CUsharedconfig config) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && (config < 0 || config > 2))
    rc = CUDA_ERROR_INVALID_VALUE;
  fk_unlock();
  return rc;
}

/* Blocks of block_size threads (and dyn bytes of dynamic shared memory, at
 * most the function's limit max_dyn) that fit on one SM of the fake
 * (Hopper's limits, 32 registers a thread). */
static int blocks_per_sm(int block_size, size_t dyn, int max_dyn) {
  if (block_size <= 0 || block_size > 1024 || dyn > (size_t)max_dyn)
    return 0;
  int warps = (block_size + 31) / 32;
  int b = FK_BLOCKS_PER_SM;
  if (FK_THREADS_PER_SM / (warps * 32) < b)
    b = FK_THREADS_PER_SM / (warps * 32);
  if (FK_REGS_PER_SM / (warps * 32 * FK_REGS_PER_THREAD) < b)
    b = FK_REGS_PER_SM / (warps * 32 * FK_REGS_PER_THREAD);
  if (dyn && (int)(FK_SMEM_PER_SM / dyn) < b)
    b = (int)(FK_SMEM_PER_SM / dyn);
  return b;
}

static CUresult max_active(int *blocks, CUfunction f, int block_size, size_t dyn, unsigned flags) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && (!blocks || (flags & ~1u)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    *blocks = blocks_per_sm(block_size, dyn, fk_func_max_dyn_smem(fn));
  fk_unlock();
  return rc;
}

FK_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction f,
                                                            int block_size, size_t dyn) {
  return max_active(blocks, f, block_size, dyn, 0);
}

FK_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction f,
                                                                     int block_size, size_t dyn,
                                                                     unsigned int flags) {
  return max_active(blocks, f, block_size, dyn, flags);
}

/* The block size with the most resident threads per SM (the largest such,
 * trying sizes from the limit down in warps), and the grid that fills the
 * device with it. b2d, when given, says the dynamic shared memory a block
 * size needs; it is the caller's code, so it is called without fk_lock. */
static CUresult potential_block_size(int *min_grid, int *block_size, CUfunction f,
                                     CUoccupancyB2DSize b2d, size_t dyn, int limit,
                                     unsigned flags) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && (!min_grid || !block_size || limit < 0 || (flags & ~1u)))
    rc = CUDA_ERROR_INVALID_VALUE;
  int max_dyn = rc ? 0 : fk_func_max_dyn_smem(fn);
  fk_unlock();
  if (rc)
    return rc;
  int top = limit == 0 || limit > 1024 ? 1024 : limit;
  int best_bs = 0, best_blocks = 0;
  for (int bs = (top + 31) / 32 * 32; bs > 0; bs -= 32) {
    int size = bs > top ? top : bs;
    int b = blocks_per_sm(size, b2d ? b2d(size) : dyn, max_dyn);
    if (b * size > best_blocks * best_bs) {
      best_bs = size;
      best_blocks = b;
    }
  }
  *block_size = best_bs;
  *min_grid = best_blocks * FK_DEVICE_SMS;
  return CUDA_SUCCESS;
}

FK_API CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size, CUfunction f,
                                                 CUoccupancyB2DSize b2d, size_t dyn, int limit) {
  return potential_block_size(min_grid, block_size, f, b2d, dyn, limit, 0);
}

FK_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block_size,
                                                          CUfunction f, CUoccupancyB2DSize b2d,
                                                          size_t dyn, int limit,
                                                          unsigned int flags) {
  return potential_block_size(min_grid, block_size, f, b2d, dyn, limit, flags);
}

/* Thread block clusters (Hopper): a cluster's blocks are resident together.
 * The fake has no GPCs: it answers the portable limit (8 blocks) for the
 * potential size, accepts up to the non-portable 16 (the attribute that
 * allows more than 8 is not kept), and counts the clusters that fit when
 * every SM holds as many blocks as its occupancy allows. */
#define FK_CLUSTER_PORTABLE 8
#define FK_CLUSTER_MAX 16

static CUresult cluster_args(CUfunction f, const CUlaunchConfig *config, const int *out,
                             int *per_sm, unsigned *cluster) {
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc)
    return rc;
  if (!out || !config || (config->numAttrs && !config->attrs))
    return CUDA_ERROR_INVALID_VALUE;
  unsigned threads = config->blockDimX * config->blockDimY * config->blockDimZ;
  if (threads == 0 || threads > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  *per_sm = blocks_per_sm((int)threads, config->sharedMemBytes, fk_func_max_dyn_smem(fn));
  *cluster = 0;
  for (unsigned i = 0; i < config->numAttrs; i++) {
    const CUlaunchAttribute *a = &config->attrs[i];
    if (a->id == FK_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      *cluster = a->value.clusterDim.x * a->value.clusterDim.y * a->value.clusterDim.z;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction f,
                                                   const CUlaunchConfig *config) {
  fk_lock();
  int per_sm;
  unsigned cluster;
  CUresult rc = cluster_args(f, config, size, &per_sm, &cluster);
  if (rc == CUDA_SUCCESS)
    *size = per_sm > 0 ? FK_CLUSTER_PORTABLE : 0;
  fk_unlock();
  return rc;
}

/* The cluster size comes from the config's CLUSTER_DIMENSION attribute (the
 * fake's kernels require none): missing or over 16 -> 912. */
FK_API CUresult cuOccupancyMaxActiveClusters(int *clusters, CUfunction f,
                                             const CUlaunchConfig *config) {
  fk_lock();
  int per_sm;
  unsigned cluster;
  CUresult rc = cluster_args(f, config, clusters, &per_sm, &cluster);
  if (rc == CUDA_SUCCESS && (cluster == 0 || cluster > FK_CLUSTER_MAX))
    rc = CUDA_ERROR_INVALID_CLUSTER_SIZE;
  if (rc == CUDA_SUCCESS)
    *clusters = per_sm * FK_DEVICE_SMS / (int)cluster;
  fk_unlock();
  return rc;
}

/* A cooperative grid must be resident all at once: at most what fits on
 * every SM together, else 720 (COOPERATIVE_LAUNCH_TOO_LARGE). */
FK_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                          unsigned int gz, unsigned int bx, unsigned int by,
                                          unsigned int bz, unsigned int shmem, CUstream s,
                                          void **params) {
  uint64_t threads = (uint64_t)bx * by * bz;
  uint64_t blocks = (uint64_t)gx * gy * gz;
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  int max_dyn = rc ? 0 : fk_func_max_dyn_smem(fn);
  fk_unlock();
  if (rc)
    return rc;
  if (threads >= 1 && threads <= 1024 && blocks >= 1 &&
      blocks > (uint64_t)blocks_per_sm((int)threads, shmem, max_dyn) * FK_DEVICE_SMS)
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  return fk_launch(&(fk_launch_args){.f = f,
                                     .dims = {gx, gy, gz, bx, by, bz},
                                     .shmem = shmem,
                                     .s = s,
                                     .params = params});
}

/* A function's module (500 for a kernel of a library, which has none), and
 * its loading state: the fake loads every function with its module
 * (CU_FUNCTION_LOADING_STATE_LOADED, 1), so cuFuncLoad has nothing to do. */
FK_API CUresult cuFuncGetModule(CUmodule *m, CUfunction f) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && !m)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !fn->module)
    rc = CUDA_ERROR_NOT_FOUND;
  if (rc == CUDA_SUCCESS)
    *m = (CUmodule)fn->module;
  fk_unlock();
  return rc;
}

FK_API CUresult cuFuncIsLoaded(int *state, CUfunction f) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  if (rc == CUDA_SUCCESS && !state)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    *state = 1;
  fk_unlock();
  return rc;
}

FK_API CUresult cuFuncLoad(CUfunction f) {
  fk_lock();
  fk_obj *fn;
  CUresult rc = need_function(f, &fn);
  fk_unlock();
  return rc;
}
