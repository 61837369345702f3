/* Driver calls of issue 41's coverage round, reached as clients reach them
 * (cuGetProcAddress_v2): copies between host or device memory and 1D CUDA
 * arrays (range inside the array's row, else 1), context events
 * (cuCtxRecordEvent / cuCtxWaitEvent: the event must be the context's, 400),
 * a function's module and loading state, cuDeviceGetProperties and the
 * widest linear 1D texture. 3 before cuInit. */
#include <fcntl.h>
#include <stdbool.h>
#include <unistd.h>

#include "fakegpu/fg_test.h"

#define PROC(type, name, version) ((type)fgt_proc(name, version))

/* A host twin for the function queries (found with dlsym, as the fake does). */
static dev_launch_dims g_last_dims;
static int g_twin_runs;
__attribute__((visibility("default"))) void fakegpu_twin_queries_k(const dev_launch_dims *d,
                                                                   void **params) {
  (void)params;
  g_last_dims = *d;
  g_twin_runs++;
}

typedef struct {
  size_t Width, Height, Depth;
  int Format;
  unsigned NumChannels, Flags;
} desc3d;

static void test_array_1d_copies(void) {
  CUresult (*create)(void **, const desc3d *) =
      PROC(CUresult(*)(void **, const desc3d *), "cuArray3DCreate", 3020);
  CUresult (*destroy)(void *) = PROC(CUresult(*)(void *), "cuArrayDestroy", 2000);
  CUresult (*htoa)(void *, size_t, const void *, size_t) =
      PROC(CUresult(*)(void *, size_t, const void *, size_t), "cuMemcpyHtoA", 3020);
  CUresult (*atoh)(void *, void *, size_t, size_t) =
      PROC(CUresult(*)(void *, void *, size_t, size_t), "cuMemcpyAtoH", 3020);
  CUresult (*atod)(CUdeviceptr, void *, size_t, size_t) =
      PROC(CUresult(*)(CUdeviceptr, void *, size_t, size_t), "cuMemcpyAtoD", 3020);
  CUresult (*dtoa)(void *, size_t, CUdeviceptr, size_t) =
      PROC(CUresult(*)(void *, size_t, CUdeviceptr, size_t), "cuMemcpyDtoA", 3020);
  CUresult (*atoa)(void *, size_t, void *, size_t, size_t) =
      PROC(CUresult(*)(void *, size_t, void *, size_t, size_t), "cuMemcpyAtoA", 3020);
  void *a = NULL, *b = NULL;
  desc3d d = {256, 0, 0, 0x03 /* int32 */, 1, 0}; /* 1 KiB */
  REQUIRE(create(&a, &d) == CUDA_SUCCESS && create(&b, &d) == CUDA_SUCCESS);
  unsigned char in[512], out[512];
  for (int i = 0; i < 512; i++)
    in[i] = (unsigned char)(i * 7 + 1);
  CHECK_EQ_INT(htoa(a, 256, in, 512), CUDA_SUCCESS);
  CHECK_EQ_INT(atoa(b, 0, a, 256, 512), CUDA_SUCCESS);
  CUdeviceptr dp;
  REQUIRE(cu_cuMemAlloc(&dp, 512) == CUDA_SUCCESS);
  CHECK_EQ_INT(atod(dp, b, 0, 512), CUDA_SUCCESS);
  CHECK_EQ_INT(dtoa(a, 512, dp, 512), CUDA_SUCCESS);
  CHECK_EQ_INT(atoh(out, a, 512, 512), CUDA_SUCCESS);
  CHECK_MSG(!memcmp(in, out, 512),
            "host -> array -> array -> device -> array -> host changed bytes");
  CHECK_MSG(htoa(a, 768, in, 512) == CUDA_ERROR_INVALID_VALUE,
            "a copy past the array's end was not refused with 1");
  CHECK_EQ_INT(atoh(out, (void *)&d, 0, 4), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuMemFree(dp), CUDA_SUCCESS);
  CHECK_EQ_INT(destroy(a), CUDA_SUCCESS);
  CHECK_EQ_INT(destroy(b), CUDA_SUCCESS);
}

static void test_context_events(void) {
  CUresult (*rec)(CUcontext, CUevent) =
      PROC(CUresult(*)(CUcontext, CUevent), "cuCtxRecordEvent", 12050);
  CUresult (*wait)(CUcontext, CUevent) =
      PROC(CUresult(*)(CUcontext, CUevent), "cuCtxWaitEvent", 12050);
  CUcontext cur = NULL, other = NULL;
  REQUIRE(cu_cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  CUevent e;
  REQUIRE(cu_cuEventCreate(&e, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(rec(cur, e), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventQuery(e), CUDA_SUCCESS);
  CHECK_EQ_INT(wait(cur, e), CUDA_SUCCESS);
  REQUIRE(cu_cuCtxCreate(&other, 0, 0) == CUDA_SUCCESS);
  CUresult rc = rec(other, e);
  CHECK_MSG(rc == CUDA_ERROR_INVALID_HANDLE, "recording another context's event answered %d",
            (int)rc);
  CHECK_EQ_INT(rec(NULL, e), CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cu_cuCtxDestroy(other) == CUDA_SUCCESS);
  REQUIRE(cu_cuCtxSetCurrent(cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventDestroy(e), CUDA_SUCCESS);
}

static void test_function_and_device(void) {
  CUresult (*get_module)(CUmodule *, CUfunction) =
      PROC(CUresult(*)(CUmodule *, CUfunction), "cuFuncGetModule", 11000);
  CUresult (*is_loaded)(int *, CUfunction) =
      PROC(CUresult(*)(int *, CUfunction), "cuFuncIsLoaded", 12040);
  CUresult (*load)(CUfunction) = PROC(CUresult(*)(CUfunction), "cuFuncLoad", 12040);
  CUresult (*props)(int *, CUdevice) =
      PROC(CUresult(*)(int *, CUdevice), "cuDeviceGetProperties", 2000);
  CUresult (*tex1d)(size_t *, int, unsigned, CUdevice) =
      PROC(CUresult(*)(size_t *, int, unsigned, CUdevice), "cuDeviceGetTexture1DLinearMaxWidth",
           11010);
  CUmodule m = NULL, back = NULL;
  CUfunction f = NULL;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&f, m, "queries_k") == CUDA_SUCCESS);
  CHECK_EQ_INT(get_module(&back, f), CUDA_SUCCESS);
  CHECK_MSG(back == m, "cuFuncGetModule gave another module");
  int state = -1;
  CHECK_EQ_INT(is_loaded(&state, f), CUDA_SUCCESS);
  CHECK_EQ_INT(state, 1);
  CHECK_EQ_INT(load(f), CUDA_SUCCESS);
  CHECK_EQ_INT(load((CUfunction)&state), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  int p[14] = {0};
  CHECK_EQ_INT(props(p, 0), CUDA_SUCCESS);
  CHECK_MSG(p[0] == 1024 && p[1] == 1024 && p[3] == 64 && p[8] == 65536 && p[9] == 32,
            "properties: threads %d dims %d,%d constant %d warp %d", p[0], p[1], p[3], p[8], p[9]);
  CHECK_EQ_INT(props(p, 9), CUDA_ERROR_INVALID_DEVICE);
  size_t w = 0;
  CHECK_EQ_INT(tex1d(&w, 0x20, 4, 0), CUDA_SUCCESS);
  CHECK_MSG(w == (size_t)1 << 28, "widest linear 1D texture %zu", w);
  CHECK_EQ_INT(tex1d(&w, 0x20, 3, 0), CUDA_ERROR_INVALID_VALUE);
}

static int g_destroyed;
static void count_destroy(void *arg) { __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST); }

/* A user object's destructor runs once, when the last reference goes: the
 * caller's, then the graph's (dropped with the graph). */
static void test_user_objects(void) {
  CUresult (*create)(void **, void *, void (*)(void *), unsigned, unsigned) =
      PROC(CUresult(*)(void **, void *, void (*)(void *), unsigned, unsigned), "cuUserObjectCreate",
           11030);
  CUresult (*retain)(void *, unsigned) =
      PROC(CUresult(*)(void *, unsigned), "cuUserObjectRetain", 11030);
  CUresult (*release)(void *, unsigned) =
      PROC(CUresult(*)(void *, unsigned), "cuUserObjectRelease", 11030);
  CUresult (*g_retain)(void *, void *, unsigned, unsigned) =
      PROC(CUresult(*)(void *, void *, unsigned, unsigned), "cuGraphRetainUserObject", 11030);
  CUresult (*g_release)(void *, void *, unsigned) =
      PROC(CUresult(*)(void *, void *, unsigned), "cuGraphReleaseUserObject", 11030);
  CUresult (*g_create)(void **, unsigned) =
      PROC(CUresult(*)(void **, unsigned), "cuGraphCreate", 10000);
  CUresult (*g_destroy)(void *) = PROC(CUresult(*)(void *), "cuGraphDestroy", 10000);
  void *o = NULL, *g = NULL;
  CHECK_EQ_INT(create(&o, &g_destroyed, count_destroy, 1, 0), CUDA_ERROR_INVALID_VALUE); /* flags */
  CHECK_EQ_INT(create(&o, &g_destroyed, count_destroy, 1, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(retain(o, 2), CUDA_SUCCESS); /* 3 */
  REQUIRE(g_create(&g, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(g_retain(g, o, 2, 1 /* MOVE */), CUDA_SUCCESS); /* caller 1, graph 2 */
  CHECK_EQ_INT(g_release(g, o, 3), CUDA_ERROR_INVALID_VALUE);  /* the graph holds 2 */
  CHECK_EQ_INT(g_release(g, o, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(release(o, 1), CUDA_SUCCESS); /* the graph's last reference keeps it */
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_MSG(g_destroyed == 0, "the destructor ran while the graph held a reference");
  CHECK_EQ_INT(g_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_MSG(g_destroyed == 1, "the destructor ran %d times after the graph went, want 1",
            g_destroyed);
  CHECK_EQ_INT(release(o, 1), CUDA_ERROR_INVALID_VALUE); /* gone */
}

/* Graph memory (none on the fake), execution affinity (not supported, all
 * 132 SMs), RDMA flush arguments, 3D peer copies between live contexts. */
static void test_device_settings(void) {
  CUresult (*gm_get)(CUdevice, int, void *) =
      PROC(CUresult(*)(CUdevice, int, void *), "cuDeviceGetGraphMemAttribute", 11040);
  CUresult (*gm_set)(CUdevice, int, void *) =
      PROC(CUresult(*)(CUdevice, int, void *), "cuDeviceSetGraphMemAttribute", 11040);
  CUresult (*gm_trim)(CUdevice) = PROC(CUresult(*)(CUdevice), "cuDeviceGraphMemTrim", 11040);
  CUresult (*aff_support)(int *, int, CUdevice) =
      PROC(CUresult(*)(int *, int, CUdevice), "cuDeviceGetExecAffinitySupport", 11040);
  CUresult (*aff)(int *, int) = PROC(CUresult(*)(int *, int), "cuCtxGetExecAffinity", 11040);
  CUresult (*flush)(int, int) = PROC(CUresult(*)(int, int), "cuFlushGPUDirectRDMAWrites", 11030);
  CUresult (*peer3d)(const void *) = PROC(CUresult(*)(const void *), "cuMemcpy3DPeer", 4000);
  unsigned long long v = 7;
  CHECK_EQ_INT(gm_get(0, 0, &v), CUDA_SUCCESS);
  CHECK_MSG(v == 0, "graph memory in use %llu, want 0", v);
  CHECK_EQ_INT(gm_get(0, 4, &v), CUDA_ERROR_INVALID_VALUE);
  v = 0;
  CHECK_EQ_INT(gm_set(0, 1, &v), CUDA_SUCCESS); /* reset a high watermark */
  v = 5;
  CHECK_EQ_INT(gm_set(0, 1, &v), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(gm_trim(0), CUDA_SUCCESS);
  int sup = 9, p[2] = {9, 9};
  CHECK_EQ_INT(aff_support(&sup, 0, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(sup, 0);
  CHECK_EQ_INT(aff(p, 0), CUDA_SUCCESS);
  CHECK_MSG(p[0] == 0 && p[1] == 132, "context affinity: type %d, %d SMs", p[0], p[1]);
  /* SM resources (green-context API): the device's and the context's, all
   * 132 SMs; another resource type 914; no device 101. */
  CUresult (*dev_res)(CUdevice, void *, int) =
      PROC(CUresult(*)(CUdevice, void *, int), "cuDeviceGetDevResource", 12040);
  CUresult (*ctx_res)(CUcontext, void *, int) =
      PROC(CUresult(*)(CUcontext, void *, int), "cuCtxGetDevResource", 12040);
  struct {
    int type;
    unsigned char internal[92];
    unsigned sm_count, min_partition, alignment;
    unsigned char rest[36];
  } res;
  memset(&res, 0xff, sizeof res);
  CHECK_EQ_INT(dev_res(0, &res, 1), CUDA_SUCCESS);
  CHECK_MSG(res.type == 1 && res.sm_count == 132 && res.min_partition == 8 &&
                res.sm_count % res.alignment == 0,
            "device SM resource: type %d, %u SMs, min %u, alignment %u", res.type, res.sm_count,
            res.min_partition, res.alignment);
  memset(&res, 0, sizeof res);
  CHECK_EQ_INT(ctx_res(NULL, &res, 1), CUDA_SUCCESS);
  CHECK_MSG(res.sm_count == 132, "context SM resource: %u SMs", res.sm_count);
  CHECK_EQ_INT(dev_res(0, &res, 2), 914);
  CHECK_EQ_INT(dev_res(0, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(dev_res(99, &res, 1), CUDA_ERROR_INVALID_DEVICE);
  CHECK_EQ_INT(ctx_res((CUcontext)0x10, &res, 1), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(flush(0, 100), CUDA_SUCCESS);
  CHECK_EQ_INT(flush(0, 7), CUDA_ERROR_INVALID_VALUE);
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  CUdeviceptr a, b;
  REQUIRE(cu_cuMemAlloc(&a, 4096) == CUDA_SUCCESS && cu_cuMemAlloc(&b, 4096) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemsetD8(a, 0x42, 4096) == CUDA_SUCCESS &&
          cu_cuMemsetD8(b, 0, 4096) == CUDA_SUCCESS);
  struct {
    size_t sx, sy, sz, slod;
    int stype;
    const void *shost;
    CUdeviceptr sdev;
    void *sarr, *sctx;
    size_t spitch, sheight;
    size_t dx, dy, dz, dlod;
    int dtype;
    void *dhost;
    CUdeviceptr ddev;
    void *darr, *dctx;
    size_t dpitch, dheight, w, h, d;
  } q = {0};
  q.stype = q.dtype = 2; /* device */
  q.sdev = a;
  q.ddev = b;
  q.spitch = q.dpitch = 1024;
  q.sheight = q.dheight = 4;
  q.w = 1024;
  q.h = 4;
  q.d = 1;
  CHECK_EQ_INT(peer3d(&q), CUDA_ERROR_INVALID_CONTEXT); /* no contexts named */
  q.sctx = q.dctx = cur;
  CHECK_EQ_INT(peer3d(&q), CUDA_SUCCESS);
  unsigned char last = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&last, b + 4095, 1), CUDA_SUCCESS);
  CHECK_MSG(last == 0x42, "the 3D peer copy left 0x%x", last);
  CHECK_EQ_INT(cu_cuMemFree(a), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(b), CUDA_SUCCESS);
}

/* The pre-4.0 launch API: block shape, shared size and parameters kept per
 * function, then cuLaunchGrid launches with them (the twin sees the dims). */
static void test_legacy_launch(void) {
  CUresult (*shape)(CUfunction, int, int, int) =
      PROC(CUresult(*)(CUfunction, int, int, int), "cuFuncSetBlockShape", 2000);
  CUresult (*shared)(CUfunction, unsigned) =
      PROC(CUresult(*)(CUfunction, unsigned), "cuFuncSetSharedSize", 2000);
  CUresult (*psize)(CUfunction, unsigned) =
      PROC(CUresult(*)(CUfunction, unsigned), "cuParamSetSize", 2000);
  CUresult (*seti)(CUfunction, int, unsigned) =
      PROC(CUresult(*)(CUfunction, int, unsigned), "cuParamSeti", 2000);
  CUresult (*setf)(CUfunction, int, float) =
      PROC(CUresult(*)(CUfunction, int, float), "cuParamSetf", 2000);
  CUresult (*setv)(CUfunction, int, void *, unsigned) =
      PROC(CUresult(*)(CUfunction, int, void *, unsigned), "cuParamSetv", 2000);
  CUresult (*launch1)(CUfunction) = PROC(CUresult(*)(CUfunction), "cuLaunch", 2000);
  CUresult (*grid)(CUfunction, int, int) =
      PROC(CUresult(*)(CUfunction, int, int), "cuLaunchGrid", 2000);
  CUresult (*grid_async)(CUfunction, int, int, CUstream) =
      PROC(CUresult(*)(CUfunction, int, int, CUstream), "cuLaunchGridAsync", 2000);
  CUmodule m = NULL;
  CUfunction f = NULL;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&f, m, "queries_k") == CUDA_SUCCESS);
  CHECK_EQ_INT(shape(f, 32, 2, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(shape(f, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(shared(f, 128), CUDA_SUCCESS);
  g_twin_runs = 0;
  CHECK_EQ_INT(grid(f, 3, 2), CUDA_SUCCESS);
  CHECK_MSG(g_twin_runs == 1 && g_last_dims.grid[0] == 3 && g_last_dims.grid[1] == 2 &&
                g_last_dims.block[0] == 32 && g_last_dims.block[1] == 2 &&
                g_last_dims.shared_bytes == 128,
            "cuLaunchGrid ran %d times with grid %ux%u block %ux%u shared %u", g_twin_runs,
            g_last_dims.grid[0], g_last_dims.grid[1], g_last_dims.block[0], g_last_dims.block[1],
            g_last_dims.shared_bytes);
  CHECK_EQ_INT(launch1(f), CUDA_SUCCESS);
  CHECK_MSG(g_last_dims.grid[0] == 1 && g_last_dims.grid[1] == 1, "cuLaunch: grid %ux%u",
            g_last_dims.grid[0], g_last_dims.grid[1]);
  CHECK_EQ_INT(grid_async(f, 1, 1, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(grid(f, 0, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(shape(f, 2048, 1, 1), CUDA_SUCCESS);
  CHECK_MSG(grid(f, 1, 1) == CUDA_ERROR_INVALID_VALUE, "a 2048-thread block shape was launched");
  char blob[8] = {0};
  CHECK_EQ_INT(psize(f, 16), CUDA_SUCCESS);
  CHECK_EQ_INT(seti(f, 0, 7), CUDA_SUCCESS);
  CHECK_EQ_INT(setf(f, 4, 1.5f), CUDA_SUCCESS);
  CHECK_EQ_INT(setv(f, 8, blob, 8), CUDA_SUCCESS);
  CHECK_EQ_INT(setv(f, 4092, blob, 8), CUDA_ERROR_INVALID_VALUE); /* past 4 KiB */
  CHECK_EQ_INT(psize(f, 4097), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(seti((CUfunction)blob, 0, 1), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
}

/* Core dump settings: global ones and the current context's (which start
 * as the global ones), checked sizes and values. */
static void test_coredump_settings(void) {
  typedef CUresult (*attr_fn)(int, void *, size_t *);
  attr_fn get = PROC(attr_fn, "cuCoredumpGetAttribute", 12010);
  attr_fn get_g = PROC(attr_fn, "cuCoredumpGetAttributeGlobal", 12010);
  attr_fn set = PROC(attr_fn, "cuCoredumpSetAttribute", 12010);
  attr_fn set_g = PROC(attr_fn, "cuCoredumpSetAttributeGlobal", 12010);
  unsigned char on = 1, v = 0;
  size_t n = 1;
  CHECK_EQ_INT(set_g(1 /* ENABLE_ON_EXCEPTION */, &on, &n), CUDA_SUCCESS);
  n = 1;
  CHECK_EQ_INT(get(1, &v, &n), CUDA_SUCCESS);
  CHECK_MSG(v == 1 && n == 1, "the context does not see the global setting (%d, %zu)", v, n);
  char file[] = "/tmp/fake.nvcudmp", back[64];
  n = sizeof file;
  CHECK_EQ_INT(set(5 /* FILE */, file, &n), CUDA_SUCCESS);
  n = sizeof back;
  CHECK_EQ_INT(get(5, back, &n), CUDA_SUCCESS);
  CHECK_MSG(!strcmp(back, file) && n == sizeof file, "context file %s (%zu bytes)", back, n);
  n = sizeof back;
  CHECK_EQ_INT(get_g(5, back, &n), CUDA_SUCCESS);
  CHECK_MSG(strcmp(back, file) != 0, "setting the context's file changed the global one");
  n = 4;
  CHECK_EQ_INT(get(5, back, &n), CUDA_ERROR_INVALID_VALUE); /* no room */
  int flags = 0x40;
  n = sizeof flags;
  CHECK_EQ_INT(set(7 /* GENERATION_FLAGS */, &flags, &n), CUDA_ERROR_INVALID_VALUE);
  flags = 0x2;
  CHECK_EQ_INT(set(7, &flags, &n), CUDA_SUCCESS);
  CHECK_EQ_INT(get(8, &flags, &n), CUDA_ERROR_INVALID_VALUE);
  n = 2;
  CHECK_EQ_INT(set_g(2, &on, &n), CUDA_ERROR_INVALID_VALUE); /* a bool is 1 byte */
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&cur) == CUDA_SUCCESS);
  n = 1;
  CHECK_EQ_INT(get(1, &v, &n), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(get_g(1, &v, &n), CUDA_SUCCESS);
  REQUIRE(cu_cuCtxPushCurrent(cur) == CUDA_SUCCESS);
}

/* Shared memory bank settings are fixed on the fake's devices: valid ones are
 * taken and cuCtxGetSharedMemConfig still answers 4-byte banks; others 1.
 * SYNC_MEMOPS is the one settable pointer attribute and reads back. */
static void test_shared_config_and_sync_memops(void) {
  CUresult (*ctx_set)(int) = PROC(CUresult(*)(int), "cuCtxSetSharedMemConfig", 4020);
  CUresult (*ctx_get)(int *) = PROC(CUresult(*)(int *), "cuCtxGetSharedMemConfig", 4020);
  CUresult (*fn_set)(CUfunction, int) =
      PROC(CUresult(*)(CUfunction, int), "cuFuncSetSharedMemConfig", 4020);
  CUresult (*ptr_set)(const void *, int, CUdeviceptr) =
      PROC(CUresult(*)(const void *, int, CUdeviceptr), "cuPointerSetAttribute", 6000);
  CUresult (*ptr_get)(void *, int, CUdeviceptr) =
      PROC(CUresult(*)(void *, int, CUdeviceptr), "cuPointerGetAttribute", 4000);
  int cfg = -1;
  CHECK_EQ_INT(ctx_set(2), CUDA_SUCCESS); /* EIGHT_BYTE_BANK_SIZE */
  CHECK_EQ_INT(ctx_get(&cfg), CUDA_SUCCESS);
  CHECK_MSG(cfg == 1, "banks read back as config %d after a set on fixed 4-byte banks", cfg);
  CHECK_MSG(ctx_set(3) == CUDA_ERROR_INVALID_VALUE, "shared memory config 3 taken");
  CUmodule m = NULL;
  CUfunction f = NULL;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&f, m, "queries_k") == CUDA_SUCCESS);
  CHECK_EQ_INT(fn_set(f, 1), CUDA_SUCCESS);
  CHECK_MSG(fn_set(f, -1) == CUDA_ERROR_INVALID_VALUE, "function config -1 taken");
  CHECK_MSG(fn_set((CUfunction)&cfg, 0) == CUDA_ERROR_INVALID_HANDLE, "a non-function taken");
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  REQUIRE(cu_cuMemAlloc(&p, 4096) == CUDA_SUCCESS);
  unsigned one = 1, two = 2;
  bool sync = true;
  CHECK_EQ_INT(ptr_get(&sync, 6, p), CUDA_SUCCESS);
  CHECK_MSG(!sync, "SYNC_MEMOPS set on a fresh allocation");
  CHECK_EQ_INT(ptr_set(&one, 6, p + 100), CUDA_SUCCESS);
  CHECK_EQ_INT(ptr_get(&sync, 6, p), CUDA_SUCCESS);
  CHECK_MSG(sync, "SYNC_MEMOPS set through p+100 does not read back at p");
  CHECK_MSG(ptr_set(&two, 6, p) == CUDA_ERROR_INVALID_VALUE, "SYNC_MEMOPS value 2 taken");
  CHECK_MSG(ptr_set(&one, 1, p) == CUDA_ERROR_INVALID_VALUE, "attribute CONTEXT set");
  CHECK_MSG(ptr_set(NULL, 6, p) == CUDA_ERROR_INVALID_VALUE, "NULL value taken");
  CHECK_MSG(ptr_set(&one, 6, p + 8192) == CUDA_ERROR_INVALID_VALUE, "a pointer past the end taken");
  CHECK_EQ_INT(cu_cuMemFree(p), CUDA_SUCCESS);
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(ctx_set(0), CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cu_cuCtxPushCurrent(cur) == CUDA_SUCCESS);
}

/* cuModuleLoad reads a module from a file (a PTX whose kernel has a host
 * twin here loads, one without answers 218 as cuModuleLoadData does; a
 * missing file 301); cuModuleLoadFatBinary takes an image as
 * cuModuleLoadData does. */
static void test_module_from_file(void) {
  CUresult (*load_file)(CUmodule *, const char *) =
      PROC(CUresult(*)(CUmodule *, const char *), "cuModuleLoad", 2000);
  CUresult (*load_fat)(CUmodule *, const void *) =
      PROC(CUresult(*)(CUmodule *, const void *), "cuModuleLoadFatBinary", 2000);
  static const char ptx[] = "//\n.version 7.8\n.target sm_90\n.address_size 64\n"
                            ".visible .entry queries_k(\n)\n{\n ret;\n}\n";
  static const char ptx_none[] =
      "//\n.version 7.8\n.target sm_90\n.address_size 64\n"
      ".visible .entry no_twin_in_file(\n)\n{\n .reg .b32 r;\n mov.u32 r, 1;\n ret;\n}\n";
  char path[] = "/tmp/fakegpu_queries_ptx_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, ptx, strlen(ptx)) == (ssize_t)strlen(ptx));
  close(fd);
  CUmodule m = NULL;
  CUfunction f = NULL;
  CHECK_EQ_INT(load_file(&m, path), CUDA_SUCCESS);
  CHECK_MSG(m && cu_cuModuleGetFunction(&f, m, "queries_k") == CUDA_SUCCESS,
            "the kernel of a module loaded from a file is not found");
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  fd = open(path, O_WRONLY | O_TRUNC);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, ptx_none, strlen(ptx_none)) == (ssize_t)strlen(ptx_none));
  close(fd);
  CHECK_MSG(load_file(&m, path) == CUDA_ERROR_INVALID_PTX,
            "a file's PTX with a kernel the fake cannot run was taken");
  unlink(path);
  CHECK_MSG(load_file(&m, path) == 301, "a missing file did not answer 301");
  CHECK_MSG(load_file(NULL, "/dev/null") == CUDA_ERROR_INVALID_VALUE, "NULL module pointer taken");
  CHECK_EQ_INT(load_fat(&m, ptx), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  CHECK_MSG(load_fat(&m, ptx_none) == CUDA_ERROR_INVALID_PTX, "a fat binary load took a bad PTX");
  CHECK_MSG(load_fat(&m, NULL) == CUDA_ERROR_INVALID_VALUE, "a NULL fat binary taken");
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(load_file(&m, "/dev/null"), CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cu_cuCtxPushCurrent(cur) == CUDA_SUCCESS);
}

static int child_uninit(void) {
  CUresult (*rec)(CUcontext, CUevent) =
      PROC(CUresult(*)(CUcontext, CUevent), "cuCtxRecordEvent", 12050);
  return rec(NULL, NULL) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 10;
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "uninit") ? child_uninit() : 99;
  fgt_init_ctx();
  RUN(test_array_1d_copies);
  RUN(test_context_events);
  RUN(test_function_and_device);
  RUN(test_user_objects);
  RUN(test_device_settings);
  RUN(test_legacy_launch);
  RUN(test_coredump_settings);
  RUN(test_shared_config_and_sync_memops);
  RUN(test_module_from_file);
  CHECK_EQ_INT(fgt_run_self("uninit", NULL), 0);
  return TEST_END();
}
