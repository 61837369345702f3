/* Streams, events, modules and kernel launches. Work runs synchronously at
 * the call, so streams only have to exist and events only record the time.
 *
 * Kernels: cuModuleLoadData takes any image without parsing it; the module's
 * functions are the process's host twins, cuModuleGetFunction(name) looking
 * up `fakegpu_twin_<name>` with dlsym(RTLD_DEFAULT), and cuLaunchKernel calls
 * the twin once per launch. Faults (see README.md): the built-in kernel
 * "fakegpu_illegal_address", a twin that calls fakegpu_kernel_fault(), or
 * FAKEGPU_FAULT_LAUNCH_AT=N make the launch return CUDA_SUCCESS and leave the
 * context with CUDA_ERROR_ILLEGAL_ADDRESS for every later call, as a kernel
 * that touched a bad address does on a real GPU. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"

#define FK_FAULT_KERNEL "fakegpu_illegal_address"
#define FK_EVENT_DISABLE_TIMING 0x2

static fk_obj *g_objs;
static fk_hmap g_obj_map;   /* handle -> object */
static fk_hmap g_owned_map; /* (owner, ctx | kind) -> object */
static long g_launches;
static __thread int t_fault;

/* A twin calls this (through dlsym, or by linking) to report that the kernel
 * touched memory it must not: the launch faults with 700. */
FK_API void fakegpu_kernel_fault(void) { t_fault = 1; }

fk_obj *fk_obj_first(void) { return g_objs; }

fk_obj *fk_obj_check(void *h, int kind) {
  fk_obj *o = h ? fk_hmap_get(&g_obj_map, (uintptr_t)h, 0, NULL) : NULL;
  if (o && o->kind == kind && o->magic == FK_OBJ_MAGIC + (uint32_t)kind)
    return o;
  return NULL;
}

static uintptr_t owned_key(const struct CUctx_st *ctx, int kind) {
  return (uintptr_t)ctx | (uintptr_t)kind; /* contexts are 8-byte aligned, kinds below 8 */
}

int fk_obj_set_owner(fk_obj *o, void *owner) {
  o->owner = owner;
  return fk_hmap_put(&g_owned_map, (uintptr_t)owner, owned_key(o->ctx, o->kind), NULL, o);
}

int fk_stream_ok(CUstream s) {
  return !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || fk_obj_check(s, FK_OBJ_STREAM);
}

static void free_obj(fk_obj *o) {
  fk_hmap_del(&g_obj_map, (uintptr_t)o, 0, NULL, o);
  if (o->owner)
    fk_hmap_del(&g_owned_map, (uintptr_t)o->owner, owned_key(o->ctx, o->kind), NULL, o);
  fk_module_globals_free(o);
  fk_capture_free(o);
  free(o->attrs);
  o->attrs = NULL;
  free(o->legacy);
  o->legacy = NULL;
  free(o->name);
  free(o->ptx);
  if (o->image_owned) {
    fk_image_forget(o->image);
    fk_params_forget(o->image);
    free((void *)o->image);
  }
  o->magic = 0;
  free(o);
}

void fk_exec_free_ctx(struct CUctx_st *ctx) {
  fk_obj **pp = &g_objs;
  while (*pp) {
    fk_obj *o = *pp;
    if (o->ctx == ctx) {
      *pp = o->next;
      free_obj(o);
    } else {
      pp = &o->next;
    }
  }
}

fk_obj *fk_obj_find_owned(int kind, const void *owner, const struct CUctx_st *ctx) {
  return fk_hmap_get(&g_owned_map, (uintptr_t)owner, owned_key(ctx, kind), NULL);
}

void fk_objs_drop_owner(const void *owner) {
  fk_obj **pp = &g_objs;
  while (*pp) {
    fk_obj *o = *pp;
    if (o->owner == owner || (o->module && o->module->owner == owner)) {
      *pp = o->next;
      free_obj(o);
    } else {
      pp = &o->next;
    }
  }
}

CUresult fk_new_obj(int kind, fk_obj **out) {
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    return rc;
  fk_obj *o = calloc(1, sizeof *o);
  if (o && fk_hmap_put(&g_obj_map, (uintptr_t)o, 0, NULL, o)) {
    free(o);
    o = NULL;
  }
  if (!o)
    return CUDA_ERROR_OUT_OF_MEMORY;
  o->magic = FK_OBJ_MAGIC + (uint32_t)kind;
  o->kind = kind;
  o->ctx = c;
  o->next = g_objs;
  g_objs = o;
  *out = o;
  return CUDA_SUCCESS;
}

/* Destroys h if it is a live object of this kind (and, for a module, its
 * functions). Like cuMemFree, works with no current context. */
static CUresult destroy_obj(void *h, int kind) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = fk_obj_check(h, kind);
  /* The handle names its context: with none current it may still go. */
  if (rc == CUDA_ERROR_INVALID_CONTEXT && !fk_current() && o && o->ctx->active && !o->ctx->sticky)
    rc = CUDA_SUCCESS;
  if (rc == CUDA_SUCCESS && !o)
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS) {
    fk_obj **pp = &g_objs;
    while (*pp) {
      fk_obj *o = *pp;
      if (o == h || (kind == FK_OBJ_MODULE && o->module == h)) {
        *pp = o->next;
        free_obj(o);
      } else {
        pp = &o->next;
      }
    }
  }
  fk_unlock();
  return rc;
}

/* --- streams ---------------------------------------------------------------- */
FK_API CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  fk_lock();
  fk_obj *o;
  CUresult rc = fk_check_init();
  if (rc == CUDA_SUCCESS && (!s || (flags & ~1u)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = fk_new_obj(FK_OBJ_STREAM, &o);
  if (rc == CUDA_SUCCESS) {
    o->flags = flags;
    *s = (CUstream)o;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuStreamDestroy_v2(CUstream s) { return destroy_obj(s, FK_OBJ_STREAM); }

FK_API CUresult cuStreamSynchronize(CUstream s) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s); /* waiting on a capturing stream: 900 */
  if (rc == CUDA_SUCCESS)
    fk_pools_sync(); /* pools give back what is over their threshold */
  double done = rc == CUDA_SUCCESS && fk_sim_on() ? fk_sim_stream_done(c, s) : 0;
  fk_unlock();
  fk_sim_sleep_until(done); /* its simulated work has ended when it returns */
  if (rc == CUDA_SUCCESS)
    fk_callbacks_drain(); /* its callbacks have run when it returns */
  return rc;
}

/* --- events ----------------------------------------------------------------- */
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

FK_API CUresult cuEventCreate(CUevent *e, unsigned int flags) {
  fk_lock();
  fk_obj *o;
  CUresult rc = fk_check_init();
  if (rc == CUDA_SUCCESS && (!e || (flags & ~0xfu)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = fk_new_obj(FK_OBJ_EVENT, &o);
  if (rc == CUDA_SUCCESS) {
    o->flags = flags;
    *e = (CUevent)o;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuEventRecord(CUevent e, CUstream s) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(e, FK_OBJ_EVENT);
  if (rc == CUDA_SUCCESS && (!o || !fk_stream_ok(s)))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && fk_capture_event(s, e, &rc)) {
    fk_unlock(); /* recorded into the stream's capture: recorded at each replay */
    return rc;
  }
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s);
  if (rc == CUDA_SUCCESS) {
    o->recorded = 1;
    o->cap_id = 0;                                          /* recorded outside any capture now */
    o->t_ms = fk_sim_on() ? fk_sim_record(c, s) : now_ms(); /* when the work before it ends */
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuEventSynchronize(CUevent e) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(e, FK_OBJ_EVENT);
  if (rc == CUDA_SUCCESS && !o)
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && fk_capture_live(o->cap_id))
    rc = FK_ERR_CAPTURED_EVENT; /* last recorded in a capture that goes on */
  if (rc == CUDA_SUCCESS)
    fk_pools_sync();
  double done = o && o->recorded && fk_sim_on() ? o->t_ms : 0;
  fk_unlock();
  fk_sim_sleep_until(done);
  return rc;
}

FK_API CUresult cuEventDestroy_v2(CUevent e) { return destroy_obj(e, FK_OBJ_EVENT); }

FK_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *ea = rc ? NULL : fk_obj_check(a, FK_OBJ_EVENT);
  fk_obj *eb = rc ? NULL : fk_obj_check(b, FK_OBJ_EVENT);
  if (rc == CUDA_SUCCESS && !ms)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && (!ea || !eb || (ea->flags & FK_EVENT_DISABLE_TIMING) ||
                                  (eb->flags & FK_EVENT_DISABLE_TIMING)))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && (!ea->recorded || !eb->recorded))
    rc = CUDA_ERROR_NOT_READY;
  if (rc == CUDA_SUCCESS)
    *ms = (float)(eb->t_ms - ea->t_ms);
  fk_unlock();
  return rc;
}

/* --- modules and kernels ----------------------------------------------------- */
dev_kernel_twin_fn fk_find_twin(const char *name) {
  size_t n = strlen(EBB_TWIN_PREFIX) + strlen(name) + 1;
  char *sym = malloc(n);
  if (!sym)
    return NULL;
  snprintf(sym, n, "%s%s", EBB_TWIN_PREFIX, name);
  void *p = dlsym(RTLD_DEFAULT, sym);
  free(sym);
  dev_kernel_twin_fn twin = NULL;
  memcpy(&twin, &p, sizeof twin);
  return twin;
}

/* Real binary images: a fatbin (0xba55ed50), the wrapper nvcc registers
 * around one (__fatDeviceText, 0x466243b1), or a 64-bit little-endian ELF
 * cubin. fk_image_extent gives the bytes such an image spans (0 for one that
 * does not say) and whether some of its entries are compressed (their kernel
 * names cannot be read). */
static const unsigned char k_fatbin[4] = {0x50, 0xed, 0x55, 0xba};
static const unsigned char k_wrapper[4] = {0xb1, 0x43, 0x62, 0x46};
static const unsigned char k_elf64le[6] = {0x7f, 'E', 'L', 'F', 2, 1};

/* image starts with the n bytes of magic, read one byte at a time: a PTX
 * image may be a string shorter than the magic, and no magic byte is 0, so
 * the comparison stops at its end (memcmp may read all n bytes first). */
static int starts_with(const unsigned char *image, const unsigned char *magic, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (image[i] != magic[i])
      return 0;
  return 1;
}

int fk_image_is_binary(const void *image) {
  return image && (starts_with(image, k_fatbin, 4) || starts_with(image, k_wrapper, 4) ||
                   starts_with(image, k_elf64le, 6));
}

#define FK_FATBIN_COMPRESSED (0x2000u | 0x8000u) /* LZ4, Zstandard */

static const unsigned char *image_extent(const void *image, size_t *size, int *compressed) {
  const unsigned char *p = image;
  *size = 0;
  *compressed = 0;
  if (starts_with(p, k_wrapper, 4)) {
    const void *data;
    memcpy(&data, p + 8, sizeof data);
    p = data;
    if (!p || memcmp(p, k_fatbin, 4))
      return NULL;
  }
  if (starts_with(p, k_elf64le, 6)) {
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    *size = (size_t)(shoff + (uint64_t)shentsize * shnum);
    return p;
  }
  uint16_t hsize;
  uint64_t fsize;
  memcpy(&hsize, p + 6, 2);
  memcpy(&fsize, p + 8, 8);
  *size = hsize + (size_t)fsize;
  /* The entries: kind, version, header size, payload size, ..., flags at 40. */
  for (size_t off = hsize; off + 48 <= *size;) {
    uint32_t ehsize;
    uint64_t payload, flags;
    memcpy(&ehsize, p + off + 4, 4);
    uint32_t pl32;
    memcpy(&pl32, p + off + 8, 4);
    payload = pl32;
    memcpy(&flags, p + off + 40, 8);
    if (flags & FK_FATBIN_COMPRESSED)
      *compressed = 1;
    if (!ehsize)
      break;
    off += ehsize + payload;
  }
  return p;
}

const void *fk_image_keep(const void *image, int *owned) {
  size_t size;
  int compressed;
  *owned = 0;
  if (starts_with(image, k_wrapper, 4))
    return image; /* registered by the runtime: static data of the program */
  const unsigned char *p = image_extent(image, &size, &compressed);
  if (!p || !size || size > ((size_t)256 << 20))
    return NULL; /* names cannot be checked: any name is taken */
  /* A compressed image is kept too: its names are not checked (any name is
   * taken), but its variables and kernels are read from it decompressed. */
  void *copy = malloc(size);
  if (copy) {
    memcpy(copy, p, size);
    *owned = 1;
  }
  return copy;
}

static int ident_char(unsigned char c) {
  return c == '_' || c == '$' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* The identifiers of a large image, read once: a library is asked for
 * thousands of kernel names, and each scan read the whole image. Each
 * maximal run of identifier characters (not at the image's first or last
 * byte, as the scan had it) is listed by (hash, length) -> its first byte. */
#define FK_INDEX_MIN ((size_t)256 << 10)
static fk_hmap g_image_index; /* image -> fk_hmap of its identifiers */

static fk_hmap *image_index(const void *image, const unsigned char *p, size_t size) {
  fk_hmap *ix = fk_hmap_get(&g_image_index, (uintptr_t)image, 0, NULL);
  if (ix)
    return ix;
  if (!(ix = calloc(1, sizeof *ix)))
    return NULL;
  for (size_t i = 1; i < size;) {
    if (!ident_char(p[i]) || ident_char(p[i - 1])) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < size && ident_char(p[j]))
      j++;
    if (j < size &&
        fk_hmap_put(ix, (uintptr_t)fk_hash_bytes(p + i, j - i), j - i, NULL, (void *)(p + i))) {
      fk_hmap_clear(ix);
      free(ix);
      return NULL;
    }
    i = j;
  }
  if (fk_hmap_put(&g_image_index, (uintptr_t)image, 0, NULL, ix)) {
    fk_hmap_clear(ix);
    free(ix);
    return NULL;
  }
  return ix;
}

void fk_image_forget(const void *image) {
  fk_hmap *ix = image ? fk_hmap_get(&g_image_index, (uintptr_t)image, 0, NULL) : NULL;
  if (ix) {
    fk_hmap_del(&g_image_index, (uintptr_t)image, 0, NULL, ix);
    fk_hmap_clear(ix);
    free(ix);
  }
}

static int all_ident(const char *name, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!ident_char((unsigned char)name[i]))
      return 0;
  return n > 0;
}

/* 1 when the binary image names kernel `name` (in an ELF string table or
 * PTX text), or may (compressed entries, an image that gives no size). */
int fk_image_may_hold(const void *image, const char *name) {
  size_t size, n = strlen(name);
  int compressed;
  const unsigned char *p = image ? image_extent(image, &size, &compressed) : NULL;
  if (!image || !p || !size || compressed)
    return 1;
  fk_hmap *ix = size >= FK_INDEX_MIN && all_ident(name, n) ? image_index(image, p, size) : NULL;
  if (ix) {
    const unsigned char *at = fk_hmap_get(ix, (uintptr_t)fk_hash_bytes(name, n), n, NULL);
    return at && !memcmp(at, name, n);
  }
  for (size_t i = 1; i + n < size; i++)
    if (p[i] == (unsigned char)name[0] && !memcmp(p + i, name, n) && !ident_char(p[i - 1]) &&
        !ident_char(p[i + n]))
      return 1;
  return 0;
}

CUresult fk_module_load_binary(CUmodule *m, const void *image) {
  fk_lock();
  struct CUctx_st *c;
  fk_obj *o = NULL;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!m || !image))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = fk_new_obj(FK_OBJ_MODULE, &o);
  if (rc == CUDA_SUCCESS) {
    o->binary = 1;
    o->image = fk_image_keep(image, &o->image_owned);
    *m = (CUmodule)o;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  if (fk_image_is_binary(image))
    return fk_module_load_binary(m, image);
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = NULL;
  if (rc == CUDA_SUCCESS && (!m || !image))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = fk_image_check(image, NULL, 0);
  if (rc == CUDA_SUCCESS)
    rc = fk_new_obj(FK_OBJ_MODULE, &o);
  if (rc == CUDA_SUCCESS) {
    o->ptx = strdup(image);
    *m = (CUmodule)o;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuModuleUnload(CUmodule m) { return destroy_obj(m, FK_OBJ_MODULE); }

FK_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out;
  if (!f || !name) {
    rc = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  fk_obj *mod = fk_obj_check(m, FK_OBJ_MODULE);
  if (!mod) {
    rc = CUDA_ERROR_INVALID_HANDLE;
    goto out;
  }
  dev_kernel_twin_fn twin = NULL;
  int empty = 0; /* a PTX kernel that does nothing */
  if (strcmp(name, FK_FAULT_KERNEL) != 0) {
    twin = fk_find_twin(name);
    empty = !twin && mod->ptx && fk_ptx_entry_does_nothing(mod->ptx, name);
    if (!twin && !empty && (!mod->binary || !fk_image_may_hold(mod->image, name))) {
      rc = CUDA_ERROR_NOT_FOUND;
      goto out;
    }
  }
  fk_obj *fn;
  char *copy = strdup(name);
  if (!copy) {
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  rc = fk_new_obj(FK_OBJ_FUNCTION, &fn);
  if (rc) {
    free(copy);
    goto out;
  }
  fn->name = copy;
  fn->module = mod;
  fn->twin = twin;
  fn->noop = !twin && (mod->binary || empty) && strcmp(name, FK_FAULT_KERNEL) != 0;
  *f = (CUfunction)fn;
out:
  fk_unlock();
  return rc;
}

/* Once per process, on stderr: what a launch without a twin does. */
static void noop_notice(const char *name) {
  static int said;
  if (said)
    return;
  said = 1;
  fprintf(stderr,
          "fakegpu: kernel '%.100s' has no host twin: launched as a no-op. The fake GPU keeps "
          "memory and bytes, not arithmetic (tests/fakegpu/README.md); this message is shown "
          "once per process.\n",
          name);
}

/* The launch configuration as the driver checks it: every dimension at least
 * 1, grid y and z up to 65,535, block x and y up to 1,024, z up to 64 and
 * 1,024 threads in all, dynamic shared memory up to the SM's opt-in limit
 * (227 KiB): CUDA_ERROR_INVALID_VALUE otherwise. */
static CUresult check_dims(const unsigned d[6], unsigned shmem) {
  if (!d[0] || !d[1] || !d[2] || !d[3] || !d[4] || !d[5] || d[1] > 65535 || d[2] > 65535 ||
      d[3] > 1024 || d[4] > 1024 || d[5] > 64 || (uint64_t)d[3] * d[4] * d[5] > 1024 ||
      shmem > 227 * 1024)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* Every launch goes through here: cuLaunchKernel, cuLaunchKernelEx,
 * cooperative launches and graph replay, with the arguments as kernelParams
 * (a->params) or packed in `extra` (a->extra), which fk_params_check
 * (fakecuda_params.c) reads and checks either way. */
CUresult fk_launch(const fk_launch_args *a) {
  void **params = a->params, **extra = a->extra;
  fk_lock();
  struct CUctx_st *c;
  fk_obj *fn = NULL;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    goto out_locked;
  fn = fk_launch_function(a->f, c);
  if (!fn || fn->ctx != c || !fk_stream_ok(a->s)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
    goto out_locked;
  }
  if ((rc = check_dims(a->dims, a->shmem)) != CUDA_SUCCESS)
    goto out_locked;
  dev_kernel_twin_fn twin = fn->twin;
  int noop = fn->noop;
  if (fk_capture_kernel(a->s, a, fn, &rc))
    goto out_locked; /* recorded into the stream's capture (or refused): run at graph launch */
  int bad_args;      /* arguments pointing into freed or unmapped memory fault */
  if ((rc = fk_params_check(fn, params, extra, &bad_args)) != CUDA_SUCCESS ||
      (twin && extra && (rc = fk_params_unpack(fn, extra, &params)) != CUDA_SUCCESS))
    goto out_locked; /* a twin takes kernelParams: `extra` needs the layout */
  int injected = fk_cfg.fault_launch_at > 0 && ++g_launches == fk_cfg.fault_launch_at;
  injected |= bad_args;
  fg_state_count_launch(fk_device_of(c->device));
  if (noop && !injected)
    noop_notice(fn->name);
  fk_unlock();

  t_fault = 0;
  if (twin && !injected) {
    const unsigned *d = a->dims;
    dev_launch_dims dims = {{d[0], d[1], d[2]}, {d[3], d[4], d[5]}, a->shmem};
    twin(&dims, params);
  }
  if (twin && extra)
    free(params); /* fk_params_unpack's */
  int fault = (!twin && !noop) || injected || t_fault;

  fk_lock();
  /* The error shows up on the next call, like an asynchronous kernel fault. */
  if (fault)
    fk_ctx_raise(c, CUDA_ERROR_ILLEGAL_ADDRESS);
  if (fk_sim_on() && fk_stream_ok(a->s))
    fk_sim_launch(c, a->s); /* the kernel takes its simulated time on s */
out_locked:
  if (rc) {
    const unsigned *d = a->dims;
    fk_trace("launch of %s refused: grid %u %u %u block %u %u %u shmem %u -> %d",
             fn ? fn->name : "(no function)", d[0], d[1], d[2], d[3], d[4], d[5], a->shmem,
             (int)rc);
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shmem, CUstream s, void **params, void **extra) {
  fk_launch_args a = {.f = f,
                      .dims = {gx, gy, gz, bx, by, bz},
                      .shmem = shmem,
                      .s = s,
                      .params = params,
                      .extra = extra};
  return fk_launch(&a);
}

/* cuLaunchKernelEx: the launch attributes (clusters, priorities, ...) change
 * nothing on the fake; the launch itself is cuLaunchKernel's. */
FK_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                 void **extra) {
  if (!config || (config->numAttrs && !config->attrs)) {
    CUresult rc = fk_check_init();
    return rc ? rc : CUDA_ERROR_INVALID_VALUE;
  }
  fk_launch_args a = {.f = f,
                      .dims = {config->gridDimX, config->gridDimY, config->gridDimZ,
                               config->blockDimX, config->blockDimY, config->blockDimZ},
                      .shmem = config->sharedMemBytes,
                      .s = config->hStream,
                      .params = params,
                      .extra = extra};
  return fk_launch(&a);
}
