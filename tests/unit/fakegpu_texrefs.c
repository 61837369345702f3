/* Texture references on the fake (tests/fakegpu/fakecuda_texref.c), reached
 * through cuGetProcAddress_v2 as the runtime reaches the driver: a reference
 * is made, keeps what each setter stores and gives it back, binds a CUDA
 * array (taking its format), linear and pitched 2D memory (each binding
 * replacing the one before), and answers the driver's codes: 1 for bad
 * arguments, an unknown or destroyed handle, a reference bound to nothing;
 * 201 without a context; 3 before cuInit; references die with their
 * context. Mipmapped arrays (fakecuda_mipmap.c): levels halve, their count
 * is clamped, they hold device memory until destroyed, and references and
 * texture objects bind them. */
#include "fakegpu/fg_test.h"

#define FLOAT 0x20
#define U8 0x01

typedef struct {
  size_t Width, Height, Depth;
  int Format;
  unsigned NumChannels, Flags;
} desc3d;

typedef struct {
  size_t Width, Height;
  int Format;
  unsigned NumChannels;
} desc2d;

typedef void *tref;

static CUresult (*ref_create)(tref *);
static CUresult (*ref_destroy)(tref);
static CUresult (*set_array)(tref, void *, unsigned);
static CUresult (*get_array)(void **, tref);
static CUresult (*set_address)(size_t *, tref, CUdeviceptr, size_t);
static CUresult (*set_address2d)(tref, const desc2d *, CUdeviceptr, size_t);
static CUresult (*get_address)(CUdeviceptr *, tref);
static CUresult (*set_format)(tref, int, int);
static CUresult (*get_format)(int *, int *, tref);
static CUresult (*set_amode)(tref, int, int);
static CUresult (*get_amode)(int *, tref, int);
static CUresult (*set_filter)(tref, int), (*set_mfilter)(tref, int);
static CUresult (*get_filter)(int *, tref), (*get_mfilter)(int *, tref);
static CUresult (*set_bias)(tref, float), (*get_bias)(float *, tref);
static CUresult (*set_clamp)(tref, float, float), (*get_clamp)(float *, float *, tref);
static CUresult (*set_aniso)(tref, unsigned), (*get_aniso)(int *, tref);
static CUresult (*set_border)(tref, float *), (*get_border)(float *, tref);
static CUresult (*set_flags)(tref, unsigned), (*get_flags)(unsigned *, tref);
static CUresult (*array_create)(void **, const desc3d *);
static CUresult (*array_destroy)(void *);
static CUresult (*array_desc)(desc3d *, void *);
static CUresult (*set_mipmap)(tref, void *, unsigned), (*get_mipmap)(void **, tref);
static CUresult (*mip_create)(void **, const desc3d *, unsigned);
static CUresult (*mip_level)(void **, void *, unsigned);
static CUresult (*mip_destroy)(void *);
static CUresult (*tex_create)(unsigned long long *, const void *, const void *, const void *);
static CUresult (*tex_destroy)(unsigned long long);
static CUresult (*surf_create)(unsigned long long *, const void *);

typedef struct { /* CUDA_RESOURCE_DESC */
  int resType;
  union {
    void *handle;
    int reserved[32];
  } res;
  unsigned flags;
} res_desc;

#define P(var, name) *(void **)&var = fgt_proc(name, 12080)

static void load(void) {
  P(ref_create, "cuTexRefCreate");
  P(ref_destroy, "cuTexRefDestroy");
  P(set_array, "cuTexRefSetArray");
  P(get_array, "cuTexRefGetArray");
  P(set_address, "cuTexRefSetAddress");
  P(set_address2d, "cuTexRefSetAddress2D");
  P(get_address, "cuTexRefGetAddress");
  P(set_format, "cuTexRefSetFormat");
  P(get_format, "cuTexRefGetFormat");
  P(set_amode, "cuTexRefSetAddressMode");
  P(get_amode, "cuTexRefGetAddressMode");
  P(set_filter, "cuTexRefSetFilterMode");
  P(get_filter, "cuTexRefGetFilterMode");
  P(set_mfilter, "cuTexRefSetMipmapFilterMode");
  P(get_mfilter, "cuTexRefGetMipmapFilterMode");
  P(set_bias, "cuTexRefSetMipmapLevelBias");
  P(get_bias, "cuTexRefGetMipmapLevelBias");
  P(set_clamp, "cuTexRefSetMipmapLevelClamp");
  P(get_clamp, "cuTexRefGetMipmapLevelClamp");
  P(set_aniso, "cuTexRefSetMaxAnisotropy");
  P(get_aniso, "cuTexRefGetMaxAnisotropy");
  P(set_border, "cuTexRefSetBorderColor");
  P(get_border, "cuTexRefGetBorderColor");
  P(set_flags, "cuTexRefSetFlags");
  P(get_flags, "cuTexRefGetFlags");
  P(array_create, "cuArray3DCreate");
  P(array_destroy, "cuArrayDestroy");
  P(array_desc, "cuArray3DGetDescriptor");
  P(set_mipmap, "cuTexRefSetMipmappedArray");
  P(get_mipmap, "cuTexRefGetMipmappedArray");
  P(mip_create, "cuMipmappedArrayCreate");
  P(mip_level, "cuMipmappedArrayGetLevel");
  P(mip_destroy, "cuMipmappedArrayDestroy");
  P(tex_create, "cuTexObjectCreate");
  P(tex_destroy, "cuTexObjectDestroy");
  P(surf_create, "cuSurfObjectCreate");
}

static void test_state_round_trip(void) {
  tref r = NULL;
  REQUIRE(ref_create(&r) == CUDA_SUCCESS && r != NULL);
  CHECK_EQ_INT(ref_create(NULL), CUDA_ERROR_INVALID_VALUE);
  int f = -1, ch = -1, m = -1;
  CHECK_EQ_INT(get_format(&f, &ch, r), CUDA_SUCCESS);
  CHECK_MSG(f == 0 && ch == 0, "a fresh reference has format %d x%d, not unset", f, ch);
  CHECK_EQ_INT(set_format(r, FLOAT, 2), CUDA_SUCCESS);
  CHECK_EQ_INT(get_format(&f, &ch, r), CUDA_SUCCESS);
  CHECK_MSG(f == FLOAT && ch == 2, "format read back %#x x%d, set float x2", f, ch);
  CHECK_EQ_INT(get_format(NULL, &ch, r), CUDA_SUCCESS); /* NULL is ignored */
  CHECK_MSG(set_format(r, FLOAT, 3) == CUDA_ERROR_INVALID_VALUE, "3 channels taken");
  CHECK_MSG(set_format(r, 0x77, 1) == CUDA_ERROR_INVALID_VALUE, "format 0x77 taken");
  CHECK_EQ_INT(set_amode(r, 1, 3), CUDA_SUCCESS); /* BORDER */
  CHECK_EQ_INT(get_amode(&m, r, 1), CUDA_SUCCESS);
  CHECK_MSG(m == 3, "address mode of dim 1 read back %d, set 3", m);
  CHECK_EQ_INT(get_amode(&m, r, 0), CUDA_SUCCESS);
  CHECK_MSG(m == 0, "address mode of dim 0 changed to %d by a set of dim 1", m);
  CHECK_MSG(set_amode(r, 3, 0) == CUDA_ERROR_INVALID_VALUE, "dimension 3 taken");
  CHECK_MSG(set_amode(r, 0, 4) == CUDA_ERROR_INVALID_VALUE, "address mode 4 taken");
  CHECK_EQ_INT(set_filter(r, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(set_mfilter(r, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(get_filter(&m, r), CUDA_SUCCESS);
  CHECK_MSG(m == 1, "filter mode read back %d, set LINEAR", m);
  CHECK_EQ_INT(get_mfilter(&m, r), CUDA_SUCCESS);
  CHECK_MSG(m == 0, "mipmap filter mode read back %d, set POINT", m);
  CHECK_MSG(set_filter(r, 2) == CUDA_ERROR_INVALID_VALUE, "filter mode 2 taken");
  float b = 0, lo = 0, hi = 0, col[4] = {0.25f, 0.5f, 0.75f, 1.0f}, back[4] = {0};
  CHECK_EQ_INT(set_bias(r, 1.5f), CUDA_SUCCESS);
  CHECK_EQ_INT(get_bias(&b, r), CUDA_SUCCESS);
  CHECK_MSG(b == 1.5f, "mipmap level bias read back %g, set 1.5", b);
  CHECK_EQ_INT(set_clamp(r, 0.5f, 4.0f), CUDA_SUCCESS);
  CHECK_EQ_INT(get_clamp(&lo, &hi, r), CUDA_SUCCESS);
  CHECK_MSG(lo == 0.5f && hi == 4.0f, "level clamp read back %g..%g, set 0.5..4", lo, hi);
  CHECK_EQ_INT(set_border(r, col), CUDA_SUCCESS);
  CHECK_EQ_INT(get_border(back, r), CUDA_SUCCESS);
  CHECK_MSG(!memcmp(col, back, sizeof col), "border colour not read back as set");
  CHECK_EQ_INT(set_border(r, NULL), CUDA_ERROR_INVALID_VALUE);
  unsigned fl = 0;
  int an = 0;
  CHECK_EQ_INT(set_aniso(r, 8), CUDA_SUCCESS);
  CHECK_EQ_INT(get_aniso(&an, r), CUDA_SUCCESS);
  CHECK_MSG(an == 8, "max anisotropy read back %d, set 8", an);
  CHECK_EQ_INT(set_flags(r, 0x03), CUDA_SUCCESS);
  CHECK_EQ_INT(get_flags(&fl, r), CUDA_SUCCESS);
  CHECK_MSG(fl == 0x03, "flags read back %#x, set 0x3", fl);
  CHECK_MSG(set_flags(r, 0x04) == CUDA_ERROR_INVALID_VALUE, "flag bit 0x4 (no CU_TRSF_) taken");
  CHECK_MSG(get_flags(NULL, r) == CUDA_ERROR_INVALID_VALUE, "NULL flags pointer taken");
  CHECK_EQ_INT(ref_destroy(r), CUDA_SUCCESS);
  CHECK_MSG(get_flags(&fl, r) == CUDA_ERROR_INVALID_VALUE, "a destroyed reference still answers");
  CHECK_MSG(ref_destroy(r) == CUDA_ERROR_INVALID_VALUE, "a reference destroyed twice");
}

static void test_bindings(void) {
  tref r = NULL;
  REQUIRE(ref_create(&r) == CUDA_SUCCESS);
  void *arr = NULL, *back = NULL;
  CUdeviceptr p = 0, got = 0;
  desc3d d = {64, 8, 0, U8, 4, 0};
  REQUIRE(array_create(&arr, &d) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAlloc(&p, 1 << 16) == CUDA_SUCCESS);
  CHECK_MSG(get_array(&back, r) == CUDA_ERROR_INVALID_VALUE, "an unbound reference names an array");
  CHECK_MSG(get_address(&got, r) == CUDA_ERROR_INVALID_VALUE,
            "an unbound reference has an address");
  CHECK_MSG(set_array(r, arr, 0) == CUDA_ERROR_INVALID_VALUE,
            "flags 0 (not OVERRIDE_FORMAT) taken");
  CHECK_MSG(set_array(r, (void *)&d, 1) == CUDA_ERROR_INVALID_VALUE, "a non-array bound");
  CHECK_EQ_INT(set_array(r, arr, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(get_array(&back, r), CUDA_SUCCESS);
  CHECK_MSG(back == arr, "bound array read back as %p, not %p", back, arr);
  int f = 0, ch = 0;
  CHECK_EQ_INT(get_format(&f, &ch, r), CUDA_SUCCESS);
  CHECK_MSG(f == U8 && ch == 4, "OVERRIDE_FORMAT left format %#x x%d, array is u8 x4", f, ch);
  size_t off = 99;
  CHECK_EQ_INT(set_address(&off, r, p, 4096), CUDA_SUCCESS);
  CHECK_MSG(off == 0, "cuMemAlloc's memory bound at byte offset %zu, not 0", off);
  CHECK_MSG(get_array(&back, r) == CUDA_ERROR_INVALID_VALUE, "linear binding kept the array");
  CHECK_EQ_INT(get_address(&got, r), CUDA_SUCCESS);
  CHECK_MSG(got == p, "bound address read back %#llx, not %#llx", (unsigned long long)got,
            (unsigned long long)p);
  CHECK_EQ_INT(set_address(&off, r, p + 100, 256), CUDA_SUCCESS);
  CHECK_MSG(off == 100, "a pointer 100 bytes past alignment gave offset %zu", off);
  CHECK_MSG(set_address(&off, r, p + 65000, 4096) == CUDA_ERROR_INVALID_VALUE,
            "a range past its allocation's end bound");
  desc2d d2 = {16, 4, FLOAT, 1};
  CHECK_EQ_INT(set_address2d(r, &d2, p, 64), CUDA_SUCCESS);
  CHECK_MSG(set_address2d(r, &d2, p, 48) == CUDA_ERROR_INVALID_VALUE, "pitch 48 (not /32) taken");
  CHECK_MSG(set_address2d(r, &d2, p, 32) == CUDA_ERROR_INVALID_VALUE, "a 64-byte row in pitch 32");
  CHECK_MSG(set_address2d(r, &d2, p + 4, 64) == CUDA_ERROR_INVALID_VALUE, "misaligned 2D base");
  CHECK_MSG(set_address2d(r, NULL, p, 64) == CUDA_ERROR_INVALID_VALUE, "NULL descriptor taken");
  CHECK_EQ_INT(set_address(NULL, r, 0, 0), CUDA_SUCCESS);
  CHECK_MSG(get_address(&got, r) == CUDA_ERROR_INVALID_VALUE, "address 0 did not unbind");
  CHECK_EQ_INT(ref_destroy(r), CUDA_SUCCESS);
  CHECK_EQ_INT(array_destroy(arr), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_SUCCESS);
}

static void test_mipmapped_levels(void) {
  unsigned long long before = fgt_used();
  void *m = NULL, *lv = NULL;
  desc3d d = {64, 8, 0, U8, 4, 0}, back;
  CHECK_EQ_INT(mip_create(&m, &d, 10), CUDA_SUCCESS); /* clamped to 1 + log2(64) = 7 */
  CHECK_MSG(fgt_used() > before, "a mipmapped array took no device memory");
  CHECK_EQ_INT(mip_level(&lv, m, 6), CUDA_SUCCESS);
  CHECK_MSG(mip_level(&lv, m, 7) == CUDA_ERROR_INVALID_VALUE,
            "level 7 of a 64-wide array (7 levels)");
  CHECK_EQ_INT(mip_level(&lv, m, 3), CUDA_SUCCESS);
  CHECK_EQ_INT(array_desc(&back, lv), CUDA_SUCCESS);
  CHECK_MSG(back.Width == 8 && back.Height == 1 && back.Depth == 0 && back.Format == U8 &&
                back.NumChannels == 4,
            "level 3 of 64x8 is %zux%zux%zu fmt %#x x%u, want 8x1x0 u8 x4", back.Width, back.Height,
            back.Depth, back.Format, back.NumChannels);
  CHECK_MSG(mip_level(NULL, m, 0) == CUDA_ERROR_INVALID_VALUE, "NULL level pointer taken");
  CHECK_MSG(mip_level(&lv, &d, 0) == CUDA_ERROR_INVALID_HANDLE, "a non-mipmap's level given");
  void *one = NULL;
  CHECK_EQ_INT(mip_create(&one, &d, 0), CUDA_SUCCESS); /* clamped up to 1 */
  CHECK_MSG(mip_level(&lv, one, 1) == CUDA_ERROR_INVALID_VALUE, "0 levels gave more than 1");
  desc3d bad = {0, 8, 0, U8, 4, 0}, layered = {64, 8, 2, U8, 4, 0x01};
  CHECK_MSG(mip_create(&lv, &bad, 2) == CUDA_ERROR_INVALID_VALUE, "width 0 taken");
  CHECK_MSG(mip_create(&lv, &layered, 2) == CUDA_ERROR_NOT_SUPPORTED, "a layered one made");
  tref r = NULL;
  REQUIRE(ref_create(&r) == CUDA_SUCCESS);
  CHECK_MSG(get_mipmap(&lv, r) == CUDA_ERROR_INVALID_VALUE, "an unbound reference names a mipmap");
  CHECK_MSG(set_mipmap(r, m, 0) == CUDA_ERROR_INVALID_VALUE, "flags 0 taken for a mipmap");
  CHECK_MSG(set_mipmap(r, &d, 1) == CUDA_ERROR_INVALID_VALUE, "a non-mipmap bound");
  CHECK_EQ_INT(set_format(r, FLOAT, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(set_mipmap(r, m, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(get_mipmap(&lv, r), CUDA_SUCCESS);
  CHECK_MSG(lv == m, "bound mipmap read back as %p, not %p", lv, m);
  int f = 0, ch = 0;
  CHECK_EQ_INT(get_format(&f, &ch, r), CUDA_SUCCESS);
  CHECK_MSG(f == U8 && ch == 4, "OVERRIDE_FORMAT left %#x x%d, mipmap is u8 x4", f, ch);
  CHECK_MSG(get_array(&lv, r) == CUDA_ERROR_INVALID_VALUE, "a mipmap binding names an array");
  res_desc rd = {1, {.handle = m}, 0};
  float tex[32] = {0}; /* CUDA_TEXTURE_DESC, all zero */
  unsigned long long t = 0, sf = 0;
  CHECK_EQ_INT(tex_create(&t, &rd, tex, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(tex_destroy(t), CUDA_SUCCESS);
  CHECK_MSG(surf_create(&sf, &rd) == CUDA_ERROR_INVALID_VALUE, "a surface of a mipmap made");
  CHECK_EQ_INT(ref_destroy(r), CUDA_SUCCESS);
  CHECK_EQ_INT(mip_destroy(m), CUDA_SUCCESS);
  CHECK_EQ_INT(mip_destroy(one), CUDA_SUCCESS);
  CHECK_MSG(mip_destroy(m) == CUDA_ERROR_INVALID_HANDLE, "a mipmapped array destroyed twice");
  CHECK_MSG(tex_create(&t, &rd, tex, NULL) == CUDA_ERROR_INVALID_VALUE,
            "a texture of a destroyed mipmap made");
  CHECK_MSG(fgt_used() == before, "mipmapped arrays left %llu bytes in use", fgt_used() - before);
}

static void test_context_rules(void) {
  CUcontext prev = NULL, mine = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&prev) == CUDA_SUCCESS);
  tref r = NULL;
  CHECK_MSG(ref_create(&r) == CUDA_ERROR_INVALID_CONTEXT, "created without a context");
  REQUIRE(cu_cuCtxCreate(&mine, 0, 0) == CUDA_SUCCESS);
  REQUIRE(ref_create(&r) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxDestroy(mine) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxPushCurrent(prev) == CUDA_SUCCESS);
  unsigned fl;
  CHECK_MSG(get_flags(&fl, r) == CUDA_ERROR_INVALID_VALUE,
            "a texture reference outlived its context");
}

static int child_uninit(void) {
  load();
  tref r;
  return ref_create(&r) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 10;
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "uninit") ? child_uninit() : 99;
  load();
  fgt_init_ctx();
  RUN(test_state_round_trip);
  RUN(test_bindings);
  RUN(test_mipmapped_levels);
  RUN(test_context_rules);
  CHECK_EQ_INT(fgt_run_self("uninit", NULL), 0);
  return TEST_END();
}
