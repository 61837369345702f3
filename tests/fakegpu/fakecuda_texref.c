/* Texture references (cuTexRef*), the texture API before texture objects,
 * deprecated but still in the driver. Kernels do no arithmetic on the fake,
 * so nothing reads through a reference; what is faked is what a client can
 * observe: a handle made by cuTexRefCreate on the current context (201
 * without one) that names the reference until cuTexRefDestroy or the end of
 * its context, the state each setter stores and each getter answers, and the
 * driver's checks, with its codes (1 unless said): an unknown handle, NULL
 * pointers; cuTexRefSetArray takes a live CUDA array and only the flag
 * CU_TRSA_OVERRIDE_FORMAT, which sets the reference's format and channels to
 * the array's; cuTexRefSetAddress takes a range inside one allocation (or
 * dptr 0, which unbinds) and passes back the byte offset from the texture
 * alignment (512, 0 for cuMemAlloc's memory); cuTexRefSetAddress2D a
 * descriptor of a plain format with 1, 2 or 4 channels, an address on the
 * texture alignment, a pitch that is a multiple of the pitch alignment (32)
 * and holds a row, all inside one allocation; a format of the eight plain
 * ones with 1, 2 or 4 channels; address modes WRAP..BORDER for dimensions
 * 0-2; filter modes POINT or LINEAR; flags of the CU_TRSF_* bits. Binding
 * memory unbinds what was bound before (cuTexRefGetArray/GetAddress/
 * GetMipmappedArray then answer 1, as for a reference bound to nothing).
 * cuTexRefSetMipmappedArray takes a live mipmapped array (fakecuda_mipmap.c)
 * with the same flag rule as cuTexRefSetArray. A fresh reference has every field 0 (format unset, WRAP, POINT). */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_TEXREF_MAGIC 0x7e8ef00du
#define FK_TEX_ALIGN 512u
#define FK_TEX_PITCH_ALIGN 32u
#define FK_TRSA_OVERRIDE_FORMAT 0x01u
#define FK_TRSF_ALL \
  0x73u /* READ_AS_INTEGER 1, NORMALIZED 2, SRGB 0x10, DISABLE_TRILINEAR 0x20, SEAMLESS_CUBEMAP 0x40 */
#define FK_BOUND_NONE 0
#define FK_BOUND_ARRAY 1
#define FK_BOUND_LINEAR 2
#define FK_BOUND_MIPMAP 3

typedef struct CUtexref_st *CUtexref;

struct CUtexref_st {
  uint32_t magic;
  struct CUctx_st *ctx;
  int bound; /* FK_BOUND_* */
  CUarray array;
  void *mipmap;
  CUdeviceptr dptr;
  int format, channels;
  int address_mode[3];
  int filter, mipmap_filter;
  float bias, min_clamp, max_clamp, border[4];
  unsigned max_aniso, flags;
  struct CUtexref_st *next;
};

static struct CUtexref_st *g_refs;

/* fakecuda_array.c; takes fk_lock. */
CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h);

static int channels_ok(int n) { return n == 1 || n == 2 || n == 4; }

/* The live reference h, NULL if none. Caller holds fk_lock. */
static struct CUtexref_st *ref_find(CUtexref h) {
  for (struct CUtexref_st *r = g_refs; r; r = r->next)
    if (r == h && r->magic == FK_TEXREF_MAGIC)
      return r;
  return NULL;
}

/* Takes fk_lock and finds h: *rc is 3 before cuInit, 1 for an unknown
 * handle or when !ok (a NULL argument). Returns the reference with fk_lock
 * held, or NULL with it released. */
static struct CUtexref_st *ref_begin(CUtexref h, int ok, CUresult *rc) {
  *rc = fk_check_init();
  if (*rc)
    return NULL;
  fk_lock();
  struct CUtexref_st *r = ok ? ref_find(h) : NULL;
  if (!r) {
    fk_unlock();
    *rc = CUDA_ERROR_INVALID_VALUE;
  }
  return r;
}

/* Called with fk_lock held when context c is destroyed: its references go. */
void fk_texref_ctx_gone(struct CUctx_st *c) {
  struct CUtexref_st **pp = &g_refs;
  while (*pp) {
    struct CUtexref_st *r = *pp;
    if (r->ctx == c) {
      *pp = r->next;
      r->magic = 0;
      free(r);
    } else {
      pp = &r->next;
    }
  }
}

FK_API CUresult cuTexRefCreate(CUtexref *out) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  struct CUtexref_st *r = NULL;
  if (rc == CUDA_SUCCESS && !out)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && !(r = calloc(1, sizeof *r)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (rc == CUDA_SUCCESS) {
    r->magic = FK_TEXREF_MAGIC;
    r->ctx = c;
    r->next = g_refs;
    g_refs = r;
    *out = r;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuTexRefDestroy(CUtexref h) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUtexref_st **pp = &g_refs;
  while (*pp && *pp != h)
    pp = &(*pp)->next;
  struct CUtexref_st *r = *pp;
  if (r) {
    *pp = r->next;
    r->magic = 0;
  }
  fk_unlock();
  free(r);
  return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuTexRefSetArray(CUtexref h, CUarray a, unsigned int flags) {
  CUDA_ARRAY3D_DESCRIPTOR d;
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (flags != FK_TRSA_OVERRIDE_FORMAT)
    return CUDA_ERROR_INVALID_VALUE;
  rc = cuArray3DGetDescriptor_v2(&d, a);
  if (rc == CUDA_ERROR_INVALID_HANDLE)
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc)
    return rc;
  struct CUtexref_st *r = ref_begin(h, 1, &rc);
  if (!r)
    return rc;
  r->bound = FK_BOUND_ARRAY;
  r->array = a;
  r->mipmap = NULL;
  r->dptr = 0;
  r->format = (int)d.Format;
  r->channels = (int)d.NumChannels;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefGetArray(CUarray *out, CUtexref h) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, out != NULL, &rc);
  if (!r)
    return rc;
  rc = r->bound == FK_BOUND_ARRAY ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!rc)
    *out = r->array;
  fk_unlock();
  return rc;
}

FK_API CUresult cuTexRefSetAddress_v2(size_t *offset, CUtexref h, CUdeviceptr dptr, size_t bytes) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, 1, &rc);
  if (!r)
    return rc;
  if (dptr && !fk_mem_range_ok(dptr, bytes ? bytes : 1)) {
    fk_unlock();
    return CUDA_ERROR_INVALID_VALUE;
  }
  r->bound = dptr ? FK_BOUND_LINEAR : FK_BOUND_NONE;
  r->dptr = dptr;
  r->array = NULL;
  r->mipmap = NULL;
  fk_unlock();
  if (offset)
    *offset = (size_t)(dptr % FK_TEX_ALIGN);
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefSetAddress2D_v3(CUtexref h, const CUDA_ARRAY_DESCRIPTOR *d,
                                        CUdeviceptr dptr, size_t pitch) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, d != NULL, &rc);
  if (!r)
    return rc;
  size_t eb = channels_ok((int)d->NumChannels) ? fk_format_bytes((int)d->Format) * d->NumChannels
                                               : 0;
  size_t w = d->Width, ht = d->Height;
  int ok = eb && dptr && dptr % FK_TEX_ALIGN == 0 && w && ht && pitch % FK_TEX_PITCH_ALIGN == 0 &&
           w <= pitch / eb && ht - 1 <= (SIZE_MAX - w * eb) / pitch &&
           fk_mem_range_ok(dptr, pitch * (ht - 1) + w * eb);
  if (ok) {
    r->bound = FK_BOUND_LINEAR;
    r->dptr = dptr;
    r->array = NULL;
    r->mipmap = NULL;
  }
  fk_unlock();
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuTexRefGetAddress_v2(CUdeviceptr *out, CUtexref h) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, out != NULL, &rc);
  if (!r)
    return rc;
  rc = r->bound == FK_BOUND_LINEAR ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!rc)
    *out = r->dptr;
  fk_unlock();
  return rc;
}

FK_API CUresult cuTexRefSetFormat(CUtexref h, int format, int channels) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, fk_format_bytes(format) && channels_ok(channels), &rc);
  if (!r)
    return rc;
  r->format = format;
  r->channels = channels;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefGetFormat(int *format, int *channels, CUtexref h) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, 1, &rc);
  if (!r)
    return rc;
  if (format)
    *format = r->format;
  if (channels)
    *channels = r->channels;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefSetAddressMode(CUtexref h, int dim, int mode) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, dim >= 0 && dim < 3 && mode >= 0 && mode <= 3, &rc);
  if (!r)
    return rc;
  r->address_mode[dim] = mode;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefGetAddressMode(int *mode, CUtexref h, int dim) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, mode && dim >= 0 && dim < 3, &rc);
  if (!r)
    return rc;
  *mode = r->address_mode[dim];
  fk_unlock();
  return CUDA_SUCCESS;
}

/* Sets (set) or gets an int field of the reference; a mode set must be
 * POINT (0) or LINEAR (1). */
static CUresult filter_field(CUtexref h, int mipmap, int set, int *v) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, set ? (*v == 0 || *v == 1) : v != NULL, &rc);
  if (!r)
    return rc;
  int *f = mipmap ? &r->mipmap_filter : &r->filter;
  if (set)
    *f = *v;
  else
    *v = *f;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefSetFilterMode(CUtexref h, int mode) { return filter_field(h, 0, 1, &mode); }
FK_API CUresult cuTexRefGetFilterMode(int *mode, CUtexref h) { return filter_field(h, 0, 0, mode); }
FK_API CUresult cuTexRefSetMipmapFilterMode(CUtexref h, int mode) {
  return filter_field(h, 1, 1, &mode);
}
FK_API CUresult cuTexRefGetMipmapFilterMode(int *mode, CUtexref h) {
  return filter_field(h, 1, 0, mode);
}

FK_API CUresult cuTexRefSetMipmapLevelBias(CUtexref h, float bias) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, 1, &rc);
  if (!r)
    return rc;
  r->bias = bias;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefGetMipmapLevelBias(float *bias, CUtexref h) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, bias != NULL, &rc);
  if (!r)
    return rc;
  *bias = r->bias;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefSetMipmapLevelClamp(CUtexref h, float min_clamp, float max_clamp) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, 1, &rc);
  if (!r)
    return rc;
  r->min_clamp = min_clamp;
  r->max_clamp = max_clamp;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefGetMipmapLevelClamp(float *min_clamp, float *max_clamp, CUtexref h) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, min_clamp && max_clamp, &rc);
  if (!r)
    return rc;
  *min_clamp = r->min_clamp;
  *max_clamp = r->max_clamp;
  fk_unlock();
  return CUDA_SUCCESS;
}

/* Sets (set) or gets an unsigned field: 0 the anisotropy, 1 the flags (only
 * CU_TRSF_* bits). */
static CUresult uint_field(CUtexref h, int which, int set, unsigned *v) {
  CUresult rc;
  int ok = v != NULL && (!set || which == 0 || !(*v & ~FK_TRSF_ALL));
  struct CUtexref_st *r = ref_begin(h, ok, &rc);
  if (!r)
    return rc;
  unsigned *f = which ? &r->flags : &r->max_aniso;
  if (set)
    *f = *v;
  else
    *v = *f;
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefSetMaxAnisotropy(CUtexref h, unsigned int n) {
  return uint_field(h, 0, 1, &n);
}
FK_API CUresult cuTexRefGetMaxAnisotropy(int *n, CUtexref h) {
  return uint_field(h, 0, 0, (unsigned *)n);
}
FK_API CUresult cuTexRefSetFlags(CUtexref h, unsigned int flags) {
  return uint_field(h, 1, 1, &flags);
}
FK_API CUresult cuTexRefGetFlags(unsigned int *flags, CUtexref h) {
  return uint_field(h, 1, 0, flags);
}

/* Copies the four border colour channels in (set) or out. */
static CUresult border(CUtexref h, int set, float *c) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, c != NULL, &rc);
  if (!r)
    return rc;
  if (set)
    memcpy(r->border, c, sizeof r->border);
  else
    memcpy(c, r->border, sizeof r->border);
  fk_unlock();
  return CUDA_SUCCESS;
}

FK_API CUresult cuTexRefSetBorderColor(CUtexref h, float *c) { return border(h, 1, c); }
FK_API CUresult cuTexRefGetBorderColor(float *c, CUtexref h) { return border(h, 0, c); }

FK_API CUresult cuTexRefSetMipmappedArray(CUtexref h, void *m, unsigned int flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (flags != FK_TRSA_OVERRIDE_FORMAT)
    return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d;
  fk_lock();
  struct CUtexref_st *r = ref_find(h);
  int live = fk_mipmap_desc(m, &d);
  if (r && live) {
    r->bound = FK_BOUND_MIPMAP;
    r->mipmap = m;
    r->array = NULL;
    r->dptr = 0;
    r->format = (int)d.Format;
    r->channels = (int)d.NumChannels;
  }
  fk_unlock();
  return r && live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuTexRefGetMipmappedArray(void **out, CUtexref h) {
  CUresult rc;
  struct CUtexref_st *r = ref_begin(h, out != NULL, &rc);
  if (!r)
    return rc;
  rc = r->bound == FK_BOUND_MIPMAP ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!rc)
    *out = r->mipmap;
  fk_unlock();
  return rc;
}
