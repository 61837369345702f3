/* cuGetExportTable: the driver's private tables that the CUDA runtime
 * (libcudart.so, libcudart_static.a, CuPy's and PyTorch's copies) asks for
 * by uuid right after cuInit. Without them the runtime answers every call
 * with cudaErrorCallRequiresNewerDriver (36) or worse.
 *
 * The tables are not documented by NVIDIA. Their layout here follows what
 * others who host the runtime on a driver of their own have published (the
 * ZLUDA project's dark_api notes) and what the runtime was seen to ask
 * (FAKEGPU_TRACE=1). A table is an array of pointers; in most of them slot 0
 * holds the table's size in bytes and the runtime calls the slots it knows.
 * Slots the fake leaves NULL were never seen called.
 *
 *   6bd5fb6c-5bf4-e74a-8987-d93912fd9df9  runtime interface (13 slots):
 *       1, 6, 8 load a registered fatbin as a module, 2 the primary context
 *       of a device without retaining it, 7 a no-op, 12 load the JIT
 *       compilers (nothing to load)
 *   42d85a81-23f6-cb47-8298-f6e78a3aecdc  tools thread-local storage: 0 the
 *       size, 2 the current context
 *   a094798c-2e74-2e74-93f2-0800200c0a66  tools callback hooks: 2 and 6 hand
 *       out buffers the runtime writes its hook state into
 *   c693336e-1121-df11-a8c3-68f355d89593  context-local storage: 0 put,
 *       1 delete, 2 get (no size slot); put's destructor runs when the
 *       context is destroyed, reset or released to 0
 *   263e8860-7cd2-6143-92f6-bbd5006dfa7e  context checks: 2 answers "no
 *       special context" (0), 3 answers 0
 *   d4082055-bde6-704b-8d34-ba123c66e1f2  integrity check: 1 answers an
 *       HMAC-MD2 over pid, thread, the table addresses, the time and the
 *       identity of every device, which the runtime computes too and compares
 *   21318c60-9714-3248-8ca6-41ff7324c8f2  context interface (91 slots, as a
 *       driver's; cuFFT needs the table to be there): 4 a context's id, as
 *       cuCtxGetId. The others were never seen called
 *   6e163fbe-b958-444d-835c-e182aff1991e  module interface (8 slots): 7 calls
 *       back with each kernel of a module, read from its cubin, and answers
 *       how many (cuFFT gets the kernel of each of its one-kernel modules so)
 *
 * Any other uuid (the runtime first probes f8cff951-2146-8b4e-b9e2-
 * fb469e7c0dd9, a table only some drivers have) answers
 * CUDA_ERROR_INVALID_VALUE with a NULL table, as a driver without it does. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"

FK_API CUresult cuGetExportTable(const void **table, const CUuuid *id);
/* Entry points of the fake's other files used here. */
FK_API CUresult cuDeviceGetCount(int *count);
FK_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
FK_API CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev);

/* --- runtime interface -------------------------------------------------------- */
/* __fatBinC_Wrapper_t: what the compiler registers for each translation unit. */
typedef struct fk_fatbin_wrapper {
  int magic;
  int version;
  const void *data; /* the fatbin: header magic 0xba55ed50 */
  const void *prelinked;
} fk_fatbin_wrapper;

#define FK_FATBINC_MAGIC 0x466243b1

static CUresult load_fatbin(CUmodule *m, const void *fatbin) {
  if (!m || !fatbin)
    return CUDA_ERROR_INVALID_VALUE;
  return fk_module_load_binary(m, fatbin);
}

static CUresult rt_module_from_wrapper(CUmodule *m, const fk_fatbin_wrapper *w) {
  if (!w || w->magic != FK_FATBINC_MAGIC)
    return CUDA_ERROR_INVALID_VALUE;
  return load_fatbin(m, w); /* the wrapper: its image is static data */
}

static CUresult rt_primary_ctx(CUcontext *ctx, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  *ctx = fk_primary_handle(dev);
  return CUDA_SUCCESS;
}

static CUresult rt_module_from_wrapper_ex(CUmodule *m, const fk_fatbin_wrapper *w, void *a3,
                                          void *a4, unsigned a5) {
  (void)a3, (void)a4, (void)a5; /* JIT options: nothing to compile */
  return rt_module_from_wrapper(m, w);
}

static void rt_noop(size_t arg) { fk_trace("runtime interface slot 7 (%zu)", arg); }

static CUresult rt_module_from_fatbin_ex(const void *fatbin, CUmodule *m, void *a3, void *a4,
                                         unsigned a5) {
  (void)a3, (void)a4, (void)a5;
  return load_fatbin(m, fatbin);
}

static CUresult rt_load_compilers(void) {
  fk_trace("runtime interface: load compilers");
  return CUDA_SUCCESS;
}

#define FK_RT_SLOTS 13
static const void *g_rt_iface[FK_RT_SLOTS] = {
    [0] = (const void *)(FK_RT_SLOTS * sizeof(void *)),
    [1] = (const void *)rt_module_from_wrapper,
    [2] = (const void *)rt_primary_ctx,
    [6] = (const void *)rt_module_from_wrapper_ex,
    [7] = (const void *)rt_noop,
    [8] = (const void *)rt_module_from_fatbin_ex,
    [12] = (const void *)rt_load_compilers,
};

/* --- tools ---------------------------------------------------------------------- */
/* Slot 2: the calling thread's current context (NULL if none). cuBLASLt
 * calls it while choosing a matmul algorithm (cublasLtMatmulAlgoGetHeuristic;
 * PyTorch's matmul) without checking the slot. */
static CUresult tools_tls_current(CUcontext *ctx) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  *ctx = fk_current();
  fk_unlock();
  return CUDA_SUCCESS;
}

static const void *g_tools_tls[4] = {(const void *)(4 * sizeof(void *)), NULL,
                                     (const void *)tools_tls_current};

static uint32_t g_hook_buf1[1024];
static uint32_t g_hook_buf2[64];

static void hooks_buf1(void **p, size_t *n) {
  fk_trace("tools hooks: buffer 1");
  *p = g_hook_buf1;
  *n = 1024;
}

static void hooks_buf2(void **p, size_t *n) {
  fk_trace("tools hooks: buffer 2");
  *p = g_hook_buf2;
  *n = 14;
}

static const void *g_tools_hooks[7] = {
    [0] = (const void *)(7 * sizeof(void *)),
    [2] = (const void *)hooks_buf1,
    [6] = (const void *)hooks_buf2,
};

/* --- context-local storage --------------------------------------------------------- */
typedef void (*fk_cls_dtor)(CUcontext ctx, void *key, void *value);
typedef struct fk_cls {
  struct CUctx_st *ctx;
  void *key, *value;
  fk_cls_dtor dtor;
  struct fk_cls *next;
} fk_cls;

static fk_cls *g_cls;     /* live entries */
static fk_cls *g_cls_due; /* of torn-down contexts: destructors to run */

/* NULL names the current context. Caller holds fk_lock. */
static CUresult cls_ctx(CUcontext ctx, struct CUctx_st **out) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  struct CUctx_st *c = ctx ? ctx : fk_current();
  if (!c || fk_ctx_usable(c) == CUDA_ERROR_INVALID_CONTEXT)
    return CUDA_ERROR_INVALID_CONTEXT;
  *out = c;
  return CUDA_SUCCESS;
}

static fk_cls **cls_find(struct CUctx_st *c, void *key) {
  fk_cls **pp = &g_cls;
  while (*pp && ((*pp)->ctx != c || (*pp)->key != key))
    pp = &(*pp)->next;
  return pp;
}

static CUresult cls_put(CUcontext ctx, void *key, void *value, fk_cls_dtor dtor) {
  fk_trace("context-local storage: put %p on %p", key, (void *)ctx);
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = cls_ctx(ctx, &c);
  if (rc == CUDA_SUCCESS) {
    fk_cls *e = *cls_find(c, key);
    if (!e && (e = calloc(1, sizeof *e)) != NULL) {
      e->ctx = c;
      e->key = key;
      e->next = g_cls;
      g_cls = e;
    }
    if (e) {
      e->value = value;
      e->dtor = dtor;
    } else {
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  fk_unlock();
  return rc;
}

static CUresult cls_delete(CUcontext ctx, void *key) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = cls_ctx(ctx, &c);
  if (rc == CUDA_SUCCESS) {
    fk_cls **pp = cls_find(c, key), *e = *pp;
    if (e) {
      *pp = e->next;
      free(e);
    } else {
      rc = CUDA_ERROR_INVALID_HANDLE;
    }
  }
  fk_unlock();
  fk_trace("context-local storage: delete %p on %p -> %d", key, (void *)ctx, rc);
  return rc;
}

static CUresult cls_get(void **value, CUcontext ctx, void *key) {
  if (!value)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = cls_ctx(ctx, &c);
  if (rc == CUDA_SUCCESS) {
    fk_cls *e = *cls_find(c, key);
    if (e)
      *value = e->value;
    else
      rc = CUDA_ERROR_INVALID_HANDLE;
  }
  fk_unlock();
  fk_trace("context-local storage: get %p on %p -> %d", key, (void *)ctx, rc);
  return rc;
}

void fk_cls_teardown(struct CUctx_st *c) {
  fk_cls **pp = &g_cls;
  while (*pp) {
    fk_cls *e = *pp;
    if (e->ctx == c) {
      *pp = e->next;
      e->next = g_cls_due;
      g_cls_due = e;
    } else {
      pp = &e->next;
    }
  }
}

void fk_cls_run_due(void) {
  fk_lock();
  fk_cls *due = g_cls_due;
  g_cls_due = NULL;
  fk_unlock();
  while (due) {
    fk_cls *e = due;
    due = e->next;
    if (e->dtor)
      e->dtor(e->ctx, e->key, e->value);
    free(e);
  }
}

static const void *g_cls_iface[4] = {
    [0] = (const void *)cls_put,
    [1] = (const void *)cls_delete,
    [2] = (const void *)cls_get,
};

/* --- context checks ------------------------------------------------------------------- */
static CUresult ctx_check(CUcontext ctx, uint32_t *kind, const void **extra) {
  (void)ctx, (void)extra;
  fk_trace("context check on %p", (void *)ctx);
  if (kind)
    *kind = 0;
  return CUDA_SUCCESS;
}

static uint32_t ctx_check3(void) {
  fk_trace("context check 3");
  return 0;
}

static const void *g_ctx_checks[4] = {
    [0] = (const void *)(4 * sizeof(void *)),
    [2] = (const void *)ctx_check,
    [3] = (const void *)ctx_check3,
};

/* --- integrity check ------------------------------------------------------------------- */
/* MD2 (RFC 1319), the hash inside the runtime's HMAC. */
static const uint8_t md2_s[256] =
    {41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
     243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
     224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
     251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
     11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
     3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
     56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
     113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
     28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
     206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
     77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
     136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
     102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
     26,  219, 153, 141, 51,  159, 17,  131, 20};

typedef struct md2 {
  uint8_t x[48], sum[16], block[16];
  unsigned n;
} md2;

static void md2_block(md2 *h) {
  uint8_t l = h->sum[15];
  for (int j = 0; j < 16; j++) {
    h->x[16 + j] = h->block[j];
    h->x[32 + j] = (uint8_t)(h->block[j] ^ h->x[j]);
    l = h->sum[j] ^= md2_s[h->block[j] ^ l];
  }
  uint8_t t = 0;
  for (int j = 0; j < 18; j++) {
    for (int k = 0; k < 48; k++)
      t = h->x[k] ^= md2_s[t];
    t = (uint8_t)(t + j);
  }
}

static void md2_add(md2 *h, const void *data, size_t len, uint8_t mask) {
  const uint8_t *p = data;
  for (size_t i = 0; i < len; i++) {
    h->block[h->n++] = p[i] ^ mask;
    if (h->n == 16) {
      md2_block(h);
      h->n = 0;
    }
  }
}

static void md2_end(md2 *h, uint8_t out[16]) {
  uint8_t pad = (uint8_t)(16 - h->n), sum[16];
  for (int i = 0; i < pad; i++)
    md2_add(h, &pad, 1, 0);
  memcpy(sum, h->sum, 16);
  md2_add(h, sum, 16, 0);
  memcpy(out, h->x, 16);
}

/* The key the runtime and the driver share (the 16 bytes the runtime's own
 * first pass produces). */
static const uint8_t g_hmac_key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                       0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

/* What is hashed, in this order and layout (no padding on x86-64). */
typedef struct fk_integrity_msg {
  uint32_t driver_version, version, pid, thread;
  const void *rt_table, *integrity_table, *integrity_fn;
  uint64_t unix_seconds;
} fk_integrity_msg;

typedef struct fk_integrity_dev {
  CUuuid uuid;
  int32_t pci_domain, pci_bus, pci_device;
} fk_integrity_dev;

static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t out[2]);
/* The tables as handed out (copies under FAKEGPU_TRACE=2): the runtime hashes
 * the addresses it was given. */
static const void *g_rt_out, *g_integrity_out;

static const void *g_integrity[3] = {
    [0] = (const void *)(3 * sizeof(void *)),
    [1] = (const void *)integrity_check,
};

static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t out[2]) {
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  fk_trace("integrity check: protocol %u", version);
  /* Runtimes of the oldest protocol versions accept a fixed answer. */
  if (version % 10 < 2) {
    out[0] = version % 10 ? 0x1841181c03cb675cull : 0x3341181c03cb675cull;
    out[1] = 0x8ed383aa1f4cd1e8ull;
    return CUDA_SUCCESS;
  }
  int ndev = 0;
  CUresult rc = cuDeviceGetCount(&ndev);
  if (rc)
    return rc;
  fk_integrity_msg msg = {FK_DRIVER_VERSION,
                          version,
                          (uint32_t)getpid(),
                          (uint32_t)pthread_self(),
                          g_rt_out ? g_rt_out : g_rt_iface,
                          g_integrity_out ? g_integrity_out : g_integrity,
                          g_integrity[1],
                          unix_seconds};
  md2 h = {0};
  md2_add(&h, g_hmac_key, 16, 0x36);
  md2_add(&h, &msg, sizeof msg, 0);
  for (int d = 0; d < ndev; d++) {
    fk_integrity_dev dev = {0};
    if ((rc = cuDeviceGetUuid_v2(&dev.uuid, d)) != CUDA_SUCCESS ||
        (rc = cuDeviceGetAttribute(&dev.pci_domain, FK_ATTR_PCI_DOMAIN_ID, d)) != 0 ||
        (rc = cuDeviceGetAttribute(&dev.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d)) != 0 ||
        (rc = cuDeviceGetAttribute(&dev.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d)) != 0)
      return rc;
    md2_add(&h, &dev, sizeof dev, 0);
  }
  uint8_t inner[16];
  md2_end(&h, inner);
  md2 o = {0};
  md2_add(&o, g_hmac_key, 16, 0x5c);
  md2_add(&o, inner, 16, 0);
  uint8_t digest[16];
  md2_end(&o, digest);
  memcpy(out, digest, 16);
  return CUDA_SUCCESS;
}

/* --- context interface --------------------------------------------------------- */
FK_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id);
/* Slot 4: cuFFT asks for the id of the context it plans in. */
static CUresult ctxi_id(CUcontext ctx, unsigned long long *id) {
  CUresult rc = cuCtxGetId(ctx, id);
  fk_trace("context interface: id of context %p -> %d", (void *)ctx, (int)rc);
  return rc;
}

#define FK_CTXI_SLOTS 91
static const void *g_ctx_iface[FK_CTXI_SLOTS] = {
    [0] = (const void *)(FK_CTXI_SLOTS * sizeof(void *)),
    [4] = (const void *)ctxi_id,
};

/* --- module interface --------------------------------------------------------- */
/* Slot 7: the kernels of a module. cuFFT loads each of its kernels as a module
 * of one kernel and asks for "the" function of it without a name:
 * (context, module, callback, opaque) calls callback(opaque, function) for
 * each kernel of the module and answers how many there were (cuFFT wants 1).
 * The fake reads the kernels from the module's cubin (fk_image_kernels). */
typedef void (*fk_kernel_cb)(void *opaque, CUfunction f);
typedef struct fk_kernel_walk {
  CUmodule mod;
  CUfunction *fns;
  size_t n, cap;
  CUresult rc;
} fk_kernel_walk;

FK_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);

static int walk_one(const char *name, void *arg) {
  fk_kernel_walk *w = arg;
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 8;
    CUfunction *fns = realloc(w->fns, cap * sizeof *fns);
    if (!fns) {
      w->rc = CUDA_ERROR_OUT_OF_MEMORY;
      return 0;
    }
    w->fns = fns;
    w->cap = cap;
  }
  w->rc = cuModuleGetFunction(&w->fns[w->n], w->mod, name);
  if (w->rc)
    return 0;
  w->n++;
  return 1;
}

static unsigned long long mod_functions(CUcontext ctx, CUmodule mod, fk_kernel_cb cb,
                                        void *opaque) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *m = rc ? NULL : fk_obj_check(mod, FK_OBJ_MODULE);
  const void *image = m && (!ctx || ctx == (CUcontext)m->ctx) ? m->image : NULL;
  fk_unlock();
  fk_kernel_walk w = {mod, NULL, 0, 0, CUDA_SUCCESS};
  if (!image || !cb || fk_image_kernels(image, walk_one, &w) < 0 || w.rc) {
    fk_trace("module interface: kernels of module %p (image %p, first bytes %08x): none readable "
             "(%d)",
             (void *)mod, image, image ? *(const uint32_t *)image : 0u, (int)w.rc);
    free(w.fns);
    return 0;
  }
  for (size_t i = 0; i < w.n; i++)
    cb(opaque, w.fns[i]);
  free(w.fns);
  fk_trace("module interface: module %p has %zu kernels", (void *)mod, w.n);
  return w.n;
}

#define FK_MODI_SLOTS 8
static const void *g_mod_iface[FK_MODI_SLOTS] = {
    [0] = (const void *)(FK_MODI_SLOTS * sizeof(void *)),
    [7] = (const void *)mod_functions,
};

static CUresult lt_slot4(void **a, void **b) {
  fk_trace("cuBLASLt's table: slot 4 (%p, %p) -> 801", (void *)a, (void *)b);
  if (a)
    *a = NULL;
  if (b)
    *b = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}

#define FK_LT_SLOTS 16
static const void *g_lt_iface[FK_LT_SLOTS] = {
    [0] = (const void *)(FK_LT_SLOTS * sizeof(void *)),
    [4] = (const void *)lt_slot4,
};

/* --- the lookup -------------------------------------------------------------------------- */
typedef struct fk_export {
  uint8_t uuid[16];
  const void *table;
  const char *what;
} fk_export;

/* One table entry a line (laid out by hand). */
/* clang-format off */
static const fk_export g_exports[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     g_rt_iface, "runtime interface"},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     g_tools_tls, "tools thread-local storage"},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     g_tools_hooks, "tools callback hooks"},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     g_cls_iface, "context-local storage"},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     g_ctx_checks, "context checks"},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     g_integrity, "integrity check"},
    {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     g_ctx_iface, "context interface"},
    {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e},
     g_mod_iface, "module interface"},
    {{0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca},
     g_lt_iface, "cuBLASLt's table"},
};
/* clang-format on */

static void uuid_text(const CUuuid *id, char *out, size_t len) {
  const unsigned char *b = (const unsigned char *)id->bytes;
  snprintf(out, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
}

/* FAKEGPU_TRACE=2: the tables are handed out as copies whose empty slots
 * hold stubs that say which slot the client called (then answer 801). */
#define FK_SLOT_STUBS 128
static const char *g_slot_table[FK_SLOT_STUBS];
static int g_slot_index[FK_SLOT_STUBS];
static int g_nslot_stubs;

static CUresult slot_hit(int i) {
  fprintf(stderr, "fakegpu[%d]: called empty slot %d of the %s table (FAKEGPU_TRACE=2)\n",
          (int)getpid(), g_slot_index[i], g_slot_table[i]);
  return CUDA_ERROR_NOT_SUPPORTED;
}
/* The stubs, eight to a macro (laid out by hand). */
/* clang-format off */
#define FK_SLOT1(i) static CUresult slot_##i(void) { return slot_hit(0##i); } /* octal digits */
#define FK_SLOT8(i) FK_SLOT1(i##0) FK_SLOT1(i##1) FK_SLOT1(i##2) FK_SLOT1(i##3) \
  FK_SLOT1(i##4) FK_SLOT1(i##5) FK_SLOT1(i##6) FK_SLOT1(i##7)
FK_SLOT8(1) FK_SLOT8(2) FK_SLOT8(3) FK_SLOT8(4) FK_SLOT8(5) FK_SLOT8(6) FK_SLOT8(7) FK_SLOT8(0)
FK_SLOT8(10) FK_SLOT8(11) FK_SLOT8(12) FK_SLOT8(13) FK_SLOT8(14) FK_SLOT8(15) FK_SLOT8(16) FK_SLOT8(17)
#define FK_SREF1(i) slot_##i,
#define FK_SREF8(i) FK_SREF1(i##0) FK_SREF1(i##1) FK_SREF1(i##2) FK_SREF1(i##3) \
  FK_SREF1(i##4) FK_SREF1(i##5) FK_SREF1(i##6) FK_SREF1(i##7)
static CUresult (*const g_slot_stubs[FK_SLOT_STUBS])(void) = {
    FK_SREF8(0) FK_SREF8(1) FK_SREF8(2) FK_SREF8(3) FK_SREF8(4) FK_SREF8(5) FK_SREF8(6) FK_SREF8(7)
    FK_SREF8(10) FK_SREF8(11) FK_SREF8(12) FK_SREF8(13) FK_SREF8(14) FK_SREF8(15) FK_SREF8(16) FK_SREF8(17)};
/* clang-format on */

static const void *stubbed_copy(const fk_export *e, size_t slots, int first) {
  const void **copy = calloc(slots, sizeof *copy);
  if (!copy)
    return e->table;
  memcpy(copy, e->table, slots * sizeof *copy);
  for (size_t k = (size_t)first; k < slots; k++)
    if (!copy[k] && g_nslot_stubs < FK_SLOT_STUBS) {
      g_slot_table[g_nslot_stubs] = e->what;
      g_slot_index[g_nslot_stubs] = (int)k;
      copy[k] = (const void *)g_slot_stubs[g_nslot_stubs++];
    }
  return copy; /* kept for the life of the process */
}

FK_API CUresult cuGetExportTable(const void **table, const CUuuid *id) {
  if (fk_cfg.stub)
    return CUDA_ERROR_STUB_LIBRARY;
  if (!table || !id)
    return CUDA_ERROR_INVALID_VALUE;
  *table = NULL;
  const fk_export *hit = NULL;
  for (size_t i = 0; i < sizeof g_exports / sizeof g_exports[0] && !hit; i++)
    if (!memcmp(g_exports[i].uuid, id->bytes, 16))
      hit = &g_exports[i];
  if (fk_trace_on()) {
    char u[40];
    uuid_text(id, u, sizeof u);
    fk_trace("cuGetExportTable %s -> %s", u, hit ? hit->what : "not found");
  }
  if (!hit)
    return CUDA_ERROR_INVALID_VALUE;
  *table = hit->table;
  const char *t = getenv("FAKEGPU_TRACE");
  if (t && !strcmp(t, "2")) {
    int cls = hit->table == (const void *)g_cls_iface;
    size_t slots = cls ? 4 : *(const size_t *)hit->table / sizeof(void *);
    *table = stubbed_copy(hit, slots, cls ? 0 : 1);
  }
  if (hit->table == (const void *)g_rt_iface)
    g_rt_out = *table;
  else if (hit->table == (const void *)g_integrity)
    g_integrity_out = *table;
  return CUDA_SUCCESS;
}
