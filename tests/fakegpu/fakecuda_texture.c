/* Texture and surface objects (cuTexObject*, cuSurfObject*).
 *
 * Kernels do no arithmetic on the fake, so nothing ever samples a texture or
 * writes a surface; what is faked is what a client can observe: the checks
 * of cuTexObjectCreate/cuSurfObjectCreate, a handle that names the object
 * until it is destroyed, and the descriptors it was made from. Checked, with
 * the driver's codes: a context (201), the pointers (1), resource flags 0;
 * an array resource must be a live CUDA array (1) — for a surface one
 * created with CUDA_ARRAY3D_SURFACE_LDST (1) —; a linear resource lies inside
 * one allocation, starts on the texture alignment (512, attribute 14) and
 * has a plain format and 1, 2 or 4 channels; a pitch-2D resource also has a
 * pitch that is a multiple of the pitch alignment (32, attribute 51) and
 * holds a row; a mipmapped array must be live (fakecuda_mipmap.c; 1) and
 * is no surface's resource. A resource view is only accepted for an array
 * or a mipmapped array, as documented. Objects belong to the
 * context current at creation and die with it (a later use answers 1, as
 * for any unknown handle; the driver does not say what it does). */
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_RES_ARRAY 0
#define FK_RES_MIPMAP 1
#define FK_RES_LINEAR 2
#define FK_RES_PITCH2D 3
#define FK_TEX_ALIGN 512u
#define FK_TEX_PITCH_ALIGN 32u
#define FK_ARRAY_SURFACE_LDST 0x02u

struct CUDA_RESOURCE_DESC_st { /* cuda.h's layout */
  int resType;
  union {
    struct {
      CUarray hArray;
    } array;
    struct {
      void *hMipmappedArray;
    } mipmap;
    struct {
      CUdeviceptr devPtr;
      int format;
      unsigned numChannels;
      size_t sizeInBytes;
    } linear;
    struct {
      CUdeviceptr devPtr;
      int format;
      unsigned numChannels;
      size_t width, height, pitchInBytes;
    } pitch2D;
    struct {
      int reserved[32];
    } reserved;
  } res;
  unsigned flags;
};

struct CUDA_TEXTURE_DESC_st {
  int addressMode[3];
  int filterMode;
  unsigned flags, maxAnisotropy;
  int mipmapFilterMode;
  float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
  float borderColor[4];
  int reserved[12];
};

struct CUDA_RESOURCE_VIEW_DESC_st {
  int format;
  size_t width, height, depth;
  unsigned firstMipmapLevel, lastMipmapLevel, firstLayer, lastLayer;
  unsigned reserved[16];
};

typedef struct fk_texobj {
  unsigned long long id;
  int surface;
  struct CUctx_st *ctx;
  CUDA_RESOURCE_DESC res;
  CUDA_TEXTURE_DESC tex;
  CUDA_RESOURCE_VIEW_DESC view;
  struct fk_texobj *next;
} fk_texobj;

static fk_texobj *g_objs;
static unsigned long long g_next_id;

/* Bytes per element of a linear/pitch resource, 0 if format or channels are
 * not ones a texture takes. */
static size_t elem_bytes(int format, unsigned channels) {
  if (channels != 1 && channels != 2 && channels != 4)
    return 0;
  return fk_format_bytes(format) * channels;
}

static CUresult check_linear(const CUDA_RESOURCE_DESC *r) {
  size_t eb = elem_bytes(r->res.linear.format, r->res.linear.numChannels);
  uint64_t p = r->res.linear.devPtr;
  if (!eb || !p || p % FK_TEX_ALIGN || !r->res.linear.sizeInBytes ||
      !fk_mem_range_ok(p, r->res.linear.sizeInBytes))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static CUresult check_pitch2d(const CUDA_RESOURCE_DESC *r) {
  size_t eb = elem_bytes(r->res.pitch2D.format, r->res.pitch2D.numChannels);
  uint64_t p = r->res.pitch2D.devPtr;
  size_t w = r->res.pitch2D.width, h = r->res.pitch2D.height, pitch = r->res.pitch2D.pitchInBytes;
  if (!eb || !p || p % FK_TEX_ALIGN || !w || !h || pitch % FK_TEX_PITCH_ALIGN || w > pitch / eb ||
      h - 1 > (SIZE_MAX - w * eb) / pitch)
    return CUDA_ERROR_INVALID_VALUE;
  return fk_mem_range_ok(p, pitch * (h - 1) + w * eb) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult check_resource(const CUDA_RESOURCE_DESC *r, int surface) {
  unsigned aflags;
  if (r->flags)
    return CUDA_ERROR_INVALID_VALUE;
  switch (r->resType) {
  case FK_RES_ARRAY:
    if (!fk_array_flags(r->res.array.hArray, &aflags))
      return CUDA_ERROR_INVALID_VALUE;
    return surface && !(aflags & FK_ARRAY_SURFACE_LDST) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  case FK_RES_LINEAR: return surface ? CUDA_ERROR_INVALID_VALUE : check_linear(r);
  case FK_RES_PITCH2D: return surface ? CUDA_ERROR_INVALID_VALUE : check_pitch2d(r);
  case FK_RES_MIPMAP: /* a texture of a live mipmapped array; no surface */
    return !surface && fk_mipmap_desc(r->res.mipmap.hMipmappedArray, NULL)
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult obj_create(unsigned long long *out, const CUDA_RESOURCE_DESC *res,
                           const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view,
                           int surface) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_texobj *o = NULL;
  if (rc == CUDA_SUCCESS && (!out || !res || (!surface && !tex)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = check_resource(res, surface);
  if (rc == CUDA_SUCCESS && view && res->resType != FK_RES_ARRAY && res->resType != FK_RES_MIPMAP)
    rc = CUDA_ERROR_INVALID_VALUE; /* a view is of a (mipmapped) array only */
  if (rc == CUDA_SUCCESS && !(o = calloc(1, sizeof *o)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (rc == CUDA_SUCCESS) {
    o->id = ++g_next_id;
    o->surface = surface;
    o->ctx = c;
    o->res = *res;
    if (tex)
      o->tex = *tex;
    if (view)
      o->view = *view;
    o->next = g_objs;
    g_objs = o;
    *out = o->id;
  }
  fk_unlock();
  return rc;
}

/* The live object with this id and kind; NULL if none. Holds fk_lock. */
static fk_texobj *obj_find(unsigned long long id, int surface) {
  for (fk_texobj *o = g_objs; o; o = o->next)
    if (o->id == id && o->surface == surface)
      return o;
  return NULL;
}

static CUresult obj_destroy(unsigned long long id, int surface) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_texobj **pp = &g_objs;
  while (*pp && !((*pp)->id == id && (*pp)->surface == surface))
    pp = &(*pp)->next;
  fk_texobj *o = *pp;
  if (o)
    *pp = o->next;
  fk_unlock();
  free(o);
  return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Copies what an object was made from (part: 0 resource, 1 texture, 2 view). */
static CUresult obj_get(void *dst, unsigned long long id, int surface, int part) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_texobj *o = obj_find(id, surface);
  if (!o || !dst)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (part == 0)
    memcpy(dst, &o->res, sizeof o->res);
  else if (part == 1)
    memcpy(dst, &o->tex, sizeof o->tex);
  else
    memcpy(dst, &o->view, sizeof o->view);
  fk_unlock();
  return rc;
}

/* Called with fk_lock held when context c is destroyed: its objects go. */
void fk_texobj_ctx_gone(struct CUctx_st *c) {
  fk_texobj **pp = &g_objs;
  while (*pp) {
    fk_texobj *o = *pp;
    if (o->ctx == c) {
      *pp = o->next;
      free(o);
    } else {
      pp = &o->next;
    }
  }
}

FK_API CUresult cuTexObjectCreate(CUtexObject *t, const CUDA_RESOURCE_DESC *res,
                                  const CUDA_TEXTURE_DESC *tex,
                                  const CUDA_RESOURCE_VIEW_DESC *view) {
  return obj_create(t, res, tex, view, 0);
}
FK_API CUresult cuTexObjectDestroy(CUtexObject t) { return obj_destroy(t, 0); }
FK_API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUtexObject t) {
  return obj_get(res, t, 0, 0);
}
FK_API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *tex, CUtexObject t) {
  return obj_get(tex, t, 0, 1);
}
FK_API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *view, CUtexObject t) {
  return obj_get(view, t, 0, 2);
}
FK_API CUresult cuSurfObjectCreate(CUsurfObject *sf, const CUDA_RESOURCE_DESC *res) {
  return obj_create(sf, res, NULL, NULL, 1);
}
FK_API CUresult cuSurfObjectDestroy(CUsurfObject sf) { return obj_destroy(sf, 1); }
FK_API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUsurfObject sf) {
  return obj_get(res, sf, 1, 0);
}
