/* Texture and surface objects on the fake (tests/fakegpu/fakecuda_texture.c),
 * reached as the CUDA runtime reaches them (cuGetProcAddress_v2): objects
 * over a CUDA array, linear memory and pitched 2D memory are made, named by
 * a handle until destroyed, and give back their descriptors; the driver's
 * checks answer 1 (misaligned or out-of-range memory, a bad pitch, format or
 * channel count, a surface over an array without SURFACE_LDST, a view of
 * linear memory, flags); 201 without a context; 3 before cuInit; objects
 * die with their context. */
#include "fakegpu/fg_test.h"

#define PROC(type, name, version) ((type)fgt_proc(name, version))

typedef struct {
  size_t Width, Height, Depth;
  int Format;
  unsigned NumChannels, Flags;
} desc3d;

typedef struct { /* CUDA_RESOURCE_DESC */
  int resType;
  union {
    void *array;
    struct {
      CUdeviceptr ptr;
      int format;
      unsigned channels;
      size_t bytes;
    } linear;
    struct {
      CUdeviceptr ptr;
      int format;
      unsigned channels;
      size_t width, height, pitch;
    } pitch2d;
    int reserved[32];
  } res;
  unsigned flags;
} res_desc;

typedef struct { /* CUDA_TEXTURE_DESC */
  int addressMode[3], filterMode;
  unsigned flags, maxAnisotropy;
  int mipmapFilterMode;
  float bias, minClamp, maxClamp, border[4];
  int reserved[12];
} tex_desc;

typedef struct { /* CUDA_RESOURCE_VIEW_DESC */
  int format;
  size_t w, h, d;
  unsigned a, b, c, e, reserved[16];
} view_desc;

static CUresult (*tex_create)(unsigned long long *, const res_desc *, const tex_desc *,
                              const view_desc *);
static CUresult (*tex_destroy)(unsigned long long);
static CUresult (*tex_res)(res_desc *, unsigned long long);
static CUresult (*tex_tex)(tex_desc *, unsigned long long);
static CUresult (*surf_create)(unsigned long long *, const res_desc *);
static CUresult (*surf_destroy)(unsigned long long);
static CUresult (*surf_res)(res_desc *, unsigned long long);
static CUresult (*array_create)(void **, const desc3d *);
static CUresult (*array_destroy)(void *);

static void load(void) {
  tex_create =
      PROC(CUresult(*)(unsigned long long *, const res_desc *, const tex_desc *, const view_desc *),
           "cuTexObjectCreate", 5000);
  tex_destroy = PROC(CUresult(*)(unsigned long long), "cuTexObjectDestroy", 5000);
  tex_res = PROC(CUresult(*)(res_desc *, unsigned long long), "cuTexObjectGetResourceDesc", 5000);
  tex_tex = PROC(CUresult(*)(tex_desc *, unsigned long long), "cuTexObjectGetTextureDesc", 5000);
  surf_create =
      PROC(CUresult(*)(unsigned long long *, const res_desc *), "cuSurfObjectCreate", 5000);
  surf_destroy = PROC(CUresult(*)(unsigned long long), "cuSurfObjectDestroy", 5000);
  surf_res = PROC(CUresult(*)(res_desc *, unsigned long long), "cuSurfObjectGetResourceDesc", 5000);
  array_create = PROC(CUresult(*)(void **, const desc3d *), "cuArray3DCreate", 3020);
  array_destroy = PROC(CUresult(*)(void *), "cuArrayDestroy", 2000);
  REQUIRE(tex_create && tex_destroy && tex_res && tex_tex && surf_create && surf_destroy &&
          surf_res && array_create && array_destroy);
}

#define FLOAT 0x20

static void test_texture_over_array(void) {
  void *arr = NULL;
  desc3d d = {64, 32, 0, FLOAT, 1, 0};
  REQUIRE(array_create(&arr, &d) == CUDA_SUCCESS);
  res_desc r = {.resType = 0, .res.array = arr};
  tex_desc t = {.addressMode = {1, 1, 1}, .filterMode = 1, .border = {0.5f}};
  unsigned long long h = 0, h2 = 0;
  CHECK_EQ_INT(tex_create(&h, &r, &t, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(tex_create(&h2, &r, &t, NULL), CUDA_SUCCESS);
  CHECK_MSG(h != 0 && h2 != 0 && h != h2, "texture handles %llu and %llu", h, h2);
  res_desc back;
  tex_desc tback;
  CHECK_EQ_INT(tex_res(&back, h), CUDA_SUCCESS);
  CHECK_MSG(back.resType == 0 && back.res.array == arr, "resource desc not given back");
  CHECK_EQ_INT(tex_tex(&tback, h), CUDA_SUCCESS);
  CHECK_MSG(tback.filterMode == 1 && tback.border[0] == 0.5f, "texture desc not given back");
  /* A surface needs an array made for surface load/store. */
  unsigned long long sf = 0;
  CHECK_MSG(surf_create(&sf, &r) == CUDA_ERROR_INVALID_VALUE,
            "a surface over an array without SURFACE_LDST was not refused");
  void *sarr = NULL;
  desc3d sd = {64, 0, 0, FLOAT, 4, 0x02 /* SURFACE_LDST */};
  REQUIRE(array_create(&sarr, &sd) == CUDA_SUCCESS);
  res_desc sr = {.resType = 0, .res.array = sarr};
  CHECK_EQ_INT(surf_create(&sf, &sr), CUDA_SUCCESS);
  CHECK_EQ_INT(surf_res(&back, sf), CUDA_SUCCESS);
  CHECK(back.res.array == sarr);
  CHECK_EQ_INT(tex_res(&back, sf == h ? h2 + 1000 : sf), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(surf_destroy(sf), CUDA_SUCCESS);
  CHECK_EQ_INT(surf_destroy(sf), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(tex_destroy(h), CUDA_SUCCESS);
  CHECK_EQ_INT(tex_destroy(h), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(tex_res(&back, h), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(tex_destroy(h2), CUDA_SUCCESS);
  /* A destroyed array is no resource. */
  CHECK_EQ_INT(array_destroy(arr), CUDA_SUCCESS);
  CHECK_EQ_INT(tex_create(&h, &r, &t, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(array_destroy(sarr), CUDA_SUCCESS);
}

static void test_linear_and_pitch2d(void) {
  CUdeviceptr p;
  REQUIRE(cu_cuMemAlloc(&p, 1 << 16) == CUDA_SUCCESS);
  tex_desc t = {.filterMode = 0};
  unsigned long long h = 0;
  res_desc r = {.resType = 2, .res.linear = {p, FLOAT, 1, 4096}};
  CHECK_EQ_INT(tex_create(&h, &r, &t, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(tex_destroy(h), CUDA_SUCCESS);
  const char *why[] = {"misaligned",     "past the allocation",   "3 channels",
                       "unknown format", "no texture descriptor", "a view of linear memory",
                       "flags"};
  res_desc bad[7];
  for (int i = 0; i < 7; i++)
    bad[i] = r;
  bad[0].res.linear.ptr = p + 4;
  bad[1].res.linear.bytes = (1 << 16) + 4;
  bad[2].res.linear.channels = 3;
  bad[3].res.linear.format = 0x7;
  bad[6].flags = 1;
  view_desc v = {0};
  for (int i = 0; i < 7; i++) {
    CUresult rc = tex_create(&h, &bad[i], i == 4 ? NULL : &t, i == 5 ? &v : NULL);
    CHECK_MSG(rc == CUDA_ERROR_INVALID_VALUE, "a linear texture %s answered %d, want 1", why[i],
              (int)rc);
  }
  res_desc p2 = {.resType = 3, .res.pitch2d = {p, FLOAT, 2, 64, 32, 512}};
  CHECK_EQ_INT(tex_create(&h, &p2, &t, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(tex_destroy(h), CUDA_SUCCESS);
  p2.res.pitch2d.pitch = 500; /* not a multiple of the pitch alignment (32) */
  CHECK_EQ_INT(tex_create(&h, &p2, &t, NULL), CUDA_ERROR_INVALID_VALUE);
  p2.res.pitch2d.pitch = 256; /* narrower than a row: 64 * 8 bytes */
  CHECK_EQ_INT(tex_create(&h, &p2, &t, NULL), CUDA_ERROR_INVALID_VALUE);
  p2.res.pitch2d.pitch = 4096; /* 32 rows of 4 KiB: past the 64 KiB allocation */
  p2.res.pitch2d.height = 32;
  CHECK_EQ_INT(tex_create(&h, &p2, &t, NULL), CUDA_ERROR_INVALID_VALUE);
  unsigned long long sf = 0;
  CHECK_MSG(surf_create(&sf, &r) == CUDA_ERROR_INVALID_VALUE,
            "a surface over linear memory was not refused");
  int align = 0;
  CHECK_EQ_INT(cu_cuDeviceGetAttribute(&align, 51, 0), CUDA_SUCCESS);
  CHECK_MSG(align == 32, "texture pitch alignment (attribute 51) is %d, want 32", align);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_SUCCESS);
}

/* An object of a context that is destroyed is gone with it. */
static void test_dies_with_context(void) {
  CUcontext mine, prev = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&prev) == CUDA_SUCCESS);
  unsigned long long h = 0;
  res_desc r = {.resType = 0};
  tex_desc t = {0};
  CHECK_EQ_INT(tex_create(&h, &r, &t, NULL), CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cu_cuCtxCreate(&mine, 0, 0) == CUDA_SUCCESS);
  void *arr = NULL;
  desc3d d = {16, 0, 0, FLOAT, 1, 0};
  REQUIRE(array_create(&arr, &d) == CUDA_SUCCESS);
  r.res.array = arr;
  CHECK_EQ_INT(tex_create(&h, &r, &t, NULL), CUDA_SUCCESS);
  REQUIRE(cu_cuCtxDestroy(mine) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxPushCurrent(prev) == CUDA_SUCCESS);
  res_desc back;
  CHECK_MSG(tex_res(&back, h) == CUDA_ERROR_INVALID_VALUE, "a texture object outlived its context");
}

static int child_uninit(void) {
  load();
  unsigned long long h;
  return tex_create(&h, NULL, NULL, NULL) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 10;
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "uninit") ? child_uninit() : 99;
  load();
  fgt_init_ctx();
  RUN(test_texture_over_array);
  RUN(test_linear_and_pitch2d);
  RUN(test_dies_with_context);
  CHECK_EQ_INT(fgt_run_self("uninit", NULL), 0);
  return TEST_END();
}
