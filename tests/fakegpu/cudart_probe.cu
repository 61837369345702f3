// The runtime-API probe: an nvcc program that makes as many distinct CUDA
// runtime calls as a real program would and checks each answer, good calls
// and mistakes alike, against what the documentation gives. Built with
// static and shared libcudart and run on the fake (two devices) by
// tests/integration/fakegpu_cudart_probe.sh. Prints
//   probe: N distinct runtime calls, M checks passed
// or "FAIL line L: CALL answered X (NAME), want Y" and exits 1.
#include <cuda_profiler_api.h>

#include "cudart_check.h"

__device__ int g_var[4];
__global__ void touch(int *p) {
  if (p)
    p[threadIdx.x] += 1;
}

static void host_fn(void *arg) { ++*(int *)arg; }
static void CUDART_CB callback(cudaStream_t, cudaError_t, void *arg) { ++*(int *)arg; }

static void versions_and_errors(void) {
  int v = 0;
  OK(cudaDriverGetVersion(&v));
  EXPECT(v >= 12000, "driver version %d", v);
  OK(cudaRuntimeGetVersion(&v));
  EXPECT(v >= 12000, "runtime version %d", v);
  EXPECT(!strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue"), "name");
  note("cudaGetErrorName(");
  EXPECT(strlen(cudaGetErrorString(cudaErrorMemoryAllocation)) > 0, "error string");
  note("cudaGetErrorString(");
  EXPECT_RC(cudaGetLastError(), cudaSuccess);
  EXPECT_RC(cudaPeekAtLastError(), cudaSuccess);
}

static void devices(void) {
  int n = 0, dev = -1, v = 0;
  OK(cudaGetDeviceCount(&n));
  EXPECT(n == 2, "%d devices, want 2", n);
  OK(cudaSetDevice(0));
  OK(cudaGetDevice(&dev));
  EXPECT(dev == 0, "current device %d", dev);
  EXPECT_RC(cudaSetDevice(7), cudaErrorInvalidDevice);
  cudaDeviceProp p;
  OK(cudaGetDeviceProperties(&p, 0));
  EXPECT(p.major == 9 && p.maxThreadsPerBlock == 1024 && p.multiProcessorCount == 132,
         "properties %d.%d %d %d", p.major, p.minor, p.maxThreadsPerBlock, p.multiProcessorCount);
  OK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0));
  EXPECT(v == 32, "warp size %d", v);
  OK(cudaDeviceGetAttribute(&v, cudaDevAttrTexturePitchAlignment, 0));
  EXPECT(v == 32, "texture pitch alignment %d", v);
  int chosen = -1;
  cudaDeviceProp want;
  memset(&want, 0, sizeof want);
  want.major = 9;
  OK(cudaChooseDevice(&chosen, &want));
  EXPECT(chosen >= 0 && chosen < 2, "chosen %d", chosen);
  size_t lim = 0;
  OK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
  OK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
  OK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
  EXPECT(lim == 4096, "stack limit %zu", lim);
  cudaFuncCache cc;
  OK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
  OK(cudaDeviceGetCacheConfig(&cc));
  EXPECT(cc == cudaFuncCachePreferShared, "cache config %d", (int)cc);
  int least = 0, greatest = 0;
  OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(least == 0 && greatest < 0, "priorities %d %d", least, greatest);
  char bus[32];
  OK(cudaDeviceGetPCIBusId(bus, sizeof bus, 1));
  OK(cudaDeviceGetByPCIBusId(&dev, bus));
  EXPECT(dev == 1, "device of bus %s: %d", bus, dev);
  OK(cudaDeviceCanAccessPeer(&v, 0, 1));
  EXPECT(v == 1, "peer access %d", v);
  OK(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 1));
  unsigned flags = 0;
  OK(cudaGetDeviceFlags(&flags));
  OK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  OK(cudaGetDeviceFlags(&flags));
  EXPECT(flags & cudaDeviceScheduleBlockingSync, "device flags 0x%x", flags);
  OK(cudaDeviceEnablePeerAccess(1, 0));
  EXPECT_RC(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  OK(cudaDeviceDisablePeerAccess(1));
  EXPECT_RC(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  OK(cudaDeviceSynchronize());
  OK(cudaCtxResetPersistingL2Cache());
  OK(cudaProfilerStart());
  OK(cudaProfilerStop());
}

static void memory(void) {
  size_t fr = 0, tot = 0;
  OK(cudaMemGetInfo(&fr, &tot));
  EXPECT(tot == (size_t)8192 << 20 && fr < tot, "memory %zu of %zu", fr, tot);
  void *d = NULL, *d2 = NULL, *h = NULL, *hp = NULL, *m = NULL;
  OK(cudaMalloc(&d, 1 << 20));
  OK(cudaMalloc(&d2, 1 << 20));
  EXPECT_RC(cudaMalloc(&d, (size_t)1 << 40), cudaErrorMemoryAllocation);
  OK(cudaMallocHost(&h, 1 << 20));
  OK(cudaHostAlloc(&hp, 4096, cudaHostAllocMapped));
  unsigned fl = 0;
  OK(cudaHostGetFlags(&fl, hp));
  EXPECT(fl & cudaHostAllocMapped, "host flags 0x%x", fl);
  void *dp = NULL;
  OK(cudaHostGetDevicePointer(&dp, hp, 0));
  EXPECT(dp == hp, "mapped pointer %p for %p", dp, hp);
  static char reg[8192] __attribute__((aligned(4096)));
  OK(cudaHostRegister(reg, sizeof reg, cudaHostRegisterDefault));
  OK(cudaHostUnregister(reg));
  OK(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
  memset(h, 7, 1 << 20);
  OK(cudaMemcpy(d, h, 1 << 20, cudaMemcpyHostToDevice));
  OK(cudaMemcpyAsync(d2, d, 1 << 20, cudaMemcpyDeviceToDevice, 0));
  OK(cudaMemset(d, 1, 4096));
  OK(cudaMemsetAsync(d, 2, 4096, 0));
  OK(cudaMemcpy(h, d2, 16, cudaMemcpyDeviceToHost));
  EXPECT(((unsigned char *)h)[15] == 7, "copied byte %d", ((unsigned char *)h)[15]);
  EXPECT_RC(cudaMemcpy(d, h, (2 << 20), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  cudaPointerAttributes pa;
  OK(cudaPointerGetAttributes(&pa, d));
  EXPECT(pa.type == cudaMemoryTypeDevice && pa.device == 0, "pointer type %d", (int)pa.type);
  OK(cudaPointerGetAttributes(&pa, m));
  EXPECT(pa.type == cudaMemoryTypeManaged, "managed pointer type %d", (int)pa.type);
  cudaMemLocation loc = {cudaMemLocationTypeDevice, 0};
  OK(cudaMemAdvise(m, 4096, cudaMemAdviseSetReadMostly, loc));
  OK(cudaMemPrefetchAsync(m, 4096, loc, 0, 0));
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  OK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
  EXPECT_RC(cudaStreamAttachMemAsync(s, d, 0, cudaMemAttachHost), cudaErrorInvalidValue);
  OK(cudaStreamSynchronize(s));
  OK(cudaStreamDestroy(s));
  // Pitched and 3D memory, 2D memset and copies.
  void *pd = NULL;
  size_t pitch = 0;
  OK(cudaMallocPitch(&pd, &pitch, 100, 8));
  EXPECT(pitch >= 100, "pitch %zu", pitch);
  OK(cudaMemset2D(pd, pitch, 0x3c, 100, 8));
  OK(cudaMemset2DAsync(pd, pitch, 0x3d, 50, 8, 0));
  EXPECT_RC(cudaMemset2D(pd, pitch, 0, pitch + 1, 8), cudaErrorInvalidValue);
  unsigned char rows[8][100];
  OK(cudaMemcpy2D(rows, 100, pd, pitch, 100, 8, cudaMemcpyDeviceToHost));
  EXPECT(rows[7][49] == 0x3d && rows[7][50] == 0x3c, "2D memset rows %x %x", rows[7][49],
         rows[7][50]);
  OK(cudaMemcpy2DAsync(pd, pitch, rows, 100, 100, 8, cudaMemcpyHostToDevice, 0));
  cudaPitchedPtr pp;
  OK(cudaMalloc3D(&pp, make_cudaExtent(64, 4, 2)));
  OK(cudaMemset3D(pp, 9, make_cudaExtent(64, 4, 2)));
  cudaMemcpy3DParms p3 = {};
  p3.srcPtr = pp;
  p3.dstPtr = make_cudaPitchedPtr(h, 64, 64, 4);
  p3.extent = make_cudaExtent(64, 4, 2);
  p3.kind = cudaMemcpyDeviceToHost;
  OK(cudaMemcpy3D(&p3));
  EXPECT(((unsigned char *)h)[511] == 9, "3D memset/copy byte %d", ((unsigned char *)h)[511]);
  OK(cudaFree(pp.ptr));
  OK(cudaFree(pd));
  // Peer copies.
  void *d1 = NULL;
  OK(cudaSetDevice(1));
  OK(cudaMalloc(&d1, 4096));
  OK(cudaMemcpyPeer(d1, 1, d2, 0, 4096));
  OK(cudaMemcpyPeerAsync(d, 0, d1, 1, 4096, 0));
  OK(cudaFree(d1));
  OK(cudaSetDevice(0));
  // Device variables.
  int vals[4] = {1, 2, 3, 4}, back[4] = {0};
  OK(cudaMemcpyToSymbol(g_var, vals, sizeof vals));
  OK(cudaMemcpyFromSymbol(back, g_var, sizeof back));
  EXPECT(back[3] == 4, "symbol round trip %d", back[3]);
  void *sym = NULL;
  size_t ssz = 0;
  OK(cudaGetSymbolAddress(&sym, g_var));
  OK(cudaGetSymbolSize(&ssz, g_var));
  EXPECT(sym != NULL && ssz == sizeof vals, "symbol %p size %zu", sym, ssz);
  OK(cudaFree(m));
  OK(cudaFreeHost(hp));
  OK(cudaFreeHost(h));
  OK(cudaFree(d));
  OK(cudaFree(d2));
  EXPECT_RC(cudaFree((void *)0x1234), cudaErrorInvalidValue);
}

static void pools(void) {
  cudaMemPool_t def = NULL, cur = NULL, mine = NULL;
  OK(cudaDeviceGetDefaultMemPool(&def, 0));
  OK(cudaDeviceGetMemPool(&cur, 0));
  EXPECT(def == cur, "current pool is not the default");
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  OK(cudaMemPoolCreate(&mine, &props));
  unsigned long long thr = 1 << 20, got = 0;
  OK(cudaMemPoolSetAttribute(mine, cudaMemPoolAttrReleaseThreshold, &thr));
  OK(cudaMemPoolGetAttribute(mine, cudaMemPoolAttrReleaseThreshold, &got));
  EXPECT(got == thr, "release threshold %llu", got);
  cudaMemAccessDesc acc = {{cudaMemLocationTypeDevice, 1}, cudaMemAccessFlagsProtReadWrite};
  OK(cudaMemPoolSetAccess(mine, &acc, 1));
  cudaMemAccessFlags af;
  cudaMemLocation l1 = {cudaMemLocationTypeDevice, 1};
  OK(cudaMemPoolGetAccess(&af, mine, &l1));
  EXPECT(af == cudaMemAccessFlagsProtReadWrite, "pool access %d", (int)af);
  OK(cudaDeviceSetMemPool(0, mine));
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *a = NULL, *b = NULL;
  OK(cudaMallocAsync(&a, 1 << 16, s));
  OK(cudaMallocFromPoolAsync(&b, 1 << 16, def, s));
  OK(cudaFreeAsync(a, s));
  OK(cudaFreeAsync(b, s));
  OK(cudaStreamSynchronize(s));
  OK(cudaMemPoolTrimTo(mine, 0));
  OK(cudaDeviceSetMemPool(0, def));
  OK(cudaMemPoolDestroy(mine));
  OK(cudaStreamDestroy(s));
}

static void streams_and_events(void) {
  cudaStream_t s, n, hi;
  OK(cudaStreamCreate(&s));
  OK(cudaStreamCreateWithFlags(&n, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, -5));
  int prio = 0, dev = -1, count = 0;
  unsigned flags = 0;
  unsigned long long id = 0;
  OK(cudaStreamGetPriority(hi, &prio));
  EXPECT(prio == -5, "priority %d", prio);
  OK(cudaStreamGetFlags(n, &flags));
  EXPECT(flags == cudaStreamNonBlocking, "stream flags %u", flags);
  OK(cudaStreamGetId(s, &id));
  OK(cudaStreamGetDevice(s, &dev));
  EXPECT(dev == 0, "stream device %d", dev);
  cudaLaunchAttributeValue av = {}, av2 = {};
  av.syncPolicy = cudaSyncPolicyYield;
  OK(cudaStreamSetAttribute(s, cudaLaunchAttributeSynchronizationPolicy, &av));
  OK(cudaStreamGetAttribute(s, cudaLaunchAttributeSynchronizationPolicy, &av2));
  EXPECT(av2.syncPolicy == cudaSyncPolicyYield, "sync policy %d", (int)av2.syncPolicy);
  av.accessPolicyWindow.hitRatio = 2.0f;
  EXPECT_RC(cudaStreamSetAttribute(s, cudaLaunchAttributeAccessPolicyWindow, &av),
            cudaErrorInvalidValue);
  OK(cudaStreamCopyAttributes(n, s));
  OK(cudaStreamGetAttribute(n, cudaLaunchAttributeSynchronizationPolicy, &av2));
  EXPECT(av2.syncPolicy == cudaSyncPolicyYield, "copied sync policy %d", (int)av2.syncPolicy);
  OK(cudaLaunchHostFunc(s, host_fn, &count));
  OK(cudaStreamAddCallback(s, callback, &count, 0));
  OK(cudaStreamSynchronize(s));
  EXPECT(count == 2, "host function and callback ran %d times", count);
  OK(cudaStreamQuery(s));
  cudaEvent_t a, b, ipc;
  OK(cudaEventCreate(&a));
  OK(cudaEventCreateWithFlags(&b, cudaEventDefault));
  OK(cudaEventCreateWithFlags(&ipc, cudaEventInterprocess | cudaEventDisableTiming));
  OK(cudaEventRecord(a, s));
  OK(cudaStreamWaitEvent(n, a, 0));
  OK(cudaEventRecordWithFlags(b, n, 0));
  OK(cudaEventSynchronize(b));
  OK(cudaEventQuery(b));
  float ms = -1;
  OK(cudaEventElapsedTime(&ms, a, b));
  EXPECT(ms >= 0, "elapsed %f ms", ms);
  EXPECT_RC(cudaEventElapsedTime(&ms, a, ipc), cudaErrorInvalidResourceHandle);
  cudaIpcEventHandle_t eh;
  OK(cudaIpcGetEventHandle(&eh, ipc));
  void *d = NULL;
  OK(cudaMalloc(&d, 4096));
  cudaIpcMemHandle_t mh;
  OK(cudaIpcGetMemHandle(&mh, d));
  OK(cudaFree(d));
  OK(cudaEventDestroy(a));
  OK(cudaEventDestroy(b));
  OK(cudaEventDestroy(ipc));
  OK(cudaStreamDestroy(s));
  OK(cudaStreamDestroy(n));
  OK(cudaStreamDestroy(hi));
}

static void launches(void) {
  int *d = NULL;
  (void)cudaGetLastError(); /* the refusals checked before are each the last error */
  OK(cudaMalloc(&d, 4096));
  touch<<<2, 64>>>(d);
  OK(cudaGetLastError());
  void *args[] = {&d};
  OK(cudaLaunchKernel((void *)touch, dim3(1), dim3(32), args, 0, 0));
  OK(cudaLaunchCooperativeKernel((void *)touch, dim3(4), dim3(32), args, 0, 0));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2);
  cfg.blockDim = dim3(32);
  OK(cudaLaunchKernelExC(&cfg, (void *)touch, args));
  OK(cudaDeviceSynchronize());
  cudaFuncAttributes fa;
  OK(cudaFuncGetAttributes(&fa, (void *)touch));
  EXPECT(fa.maxThreadsPerBlock == 1024, "max threads per block %d", fa.maxThreadsPerBlock);
  OK(cudaFuncSetAttribute((void *)touch, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
  OK(cudaFuncSetCacheConfig((void *)touch, cudaFuncCachePreferL1));
  const char *name = NULL;
  OK(cudaFuncGetName(&name, (void *)touch));
  EXPECT(name && strstr(name, "touch"), "kernel name %s", name ? name : "(null)");
  cudaFunction_t fn = NULL;
  OK(cudaGetFuncBySymbol(&fn, (void *)touch));
  size_t off = 0, psize = 0;
  OK(cudaFuncGetParamInfo((void *)touch, 0, &off, &psize));
  EXPECT(off == 0 && psize == 8, "parameter 0 at %zu, %zu bytes", off, psize);
  int blocks = 0, minGrid = 0, block = 0;
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, touch, 256, 0));
  EXPECT(blocks == 8, "blocks per SM at 256 threads: %d", blocks);
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, touch, 1024, 0, 0));
  EXPECT(blocks == 2, "blocks per SM at 1024 threads: %d", blocks);
  OK(cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, touch, 0, 0));
  EXPECT(block > 0 && block <= 1024 && minGrid > 0, "potential block %d grid %d", block,
         minGrid);
  size_t smem = 0;
  OK(cudaOccupancyAvailableDynamicSMemPerBlock(&smem, touch, 1, 256));
  EXPECT(smem > 0, "dynamic shared memory %zu", smem);
  int clusters = 0;
  OK(cudaOccupancyMaxPotentialClusterSize(&clusters, (void *)touch, &cfg));
  EXPECT(clusters == 8, "potential cluster size %d", clusters);
  // Launch-configuration mistakes are refused and leave no sticky error. The
  // code is the driver's answer, passed through by the runtime (the fake gives
  // CUDA_ERROR_INVALID_VALUE, cuLaunchKernel's documented code; a GPU's runtime
  // reports cudaErrorInvalidConfiguration, 9, which no GPU here could confirm
  // comes from the driver), so only the refusal is checked.
  cudaError_t bad[3] = {cudaLaunchKernel((void *)touch, dim3(1), dim3(1025), args, 0, 0),
                        cudaLaunchKernel((void *)touch, dim3(0), dim3(32), args, 0, 0),
                        cudaLaunchKernel((void *)touch, dim3(1, 70000), dim3(32), args, 0, 0)};
  EXPECT(bad[0] != cudaSuccess && bad[1] != cudaSuccess && bad[2] != cudaSuccess,
         "a launch of 1025 threads, of 0 blocks or of 70000 blocks in y was taken (%d %d %d)",
         (int)bad[0], (int)bad[1], (int)bad[2]);
  EXPECT_RC(cudaGetLastError(), bad[2]); /* the last error, then cleared: not sticky */
  EXPECT_RC(cudaGetLastError(), cudaSuccess);
  OK(cudaMemset(d, 0, 16));
  void *entry = NULL;
  cudaDriverEntryPointQueryResult q;
  OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &entry, 12000, cudaEnableDefault, &q));
  EXPECT(entry != NULL && q == cudaDriverEntryPointSuccess, "entry point %p", entry);
  OK(cudaFree(d));
}

static void graphs(void) {
  cudaStream_t s, s2;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  int *d = NULL, count = 0;
  OK(cudaMalloc(&d, 4096));
  cudaStreamCaptureStatus st;
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  OK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusActive, "capture status %d", (int)st);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  OK(cudaThreadExchangeStreamCaptureMode(&mode));
  OK(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaEvent_t fork, join;
  OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  OK(cudaMemsetAsync(d, 5, 4096, s));
  OK(cudaEventRecord(fork, s));
  OK(cudaStreamWaitEvent(s2, fork, 0));
  touch<<<1, 32, 0, s2>>>(d);
  OK(cudaLaunchHostFunc(s2, host_fn, &count));
  OK(cudaEventRecord(join, s2));
  OK(cudaStreamWaitEvent(s, join, 0));
  cudaGraph_t g = NULL;
  OK(cudaStreamEndCapture(s, &g));
  EXPECT(count == 0, "a captured host function ran at capture");
  size_t nn = 0;
  OK(cudaGraphGetNodes(g, NULL, &nn));
  EXPECT(nn >= 3 && nn <= 8, "%zu nodes", nn);
  cudaGraphNode_t nodes[8];
  OK(cudaGraphGetNodes(g, nodes, &nn));
  int seen = 0; /* a memset, a kernel and a host node, whatever the events make */
  for (size_t i = 0; i < nn; i++) {
    cudaGraphNodeType t;
    OK(cudaGraphNodeGetType(nodes[i], &t));
    seen |= t == cudaGraphNodeTypeMemset ? 1 : t == cudaGraphNodeTypeKernel ? 2
          : t == cudaGraphNodeTypeHost   ? 4 : 0;
  }
  EXPECT(seen == 7, "node types seen 0x%x, want memset, kernel and host", seen);
  OK(cudaGraphDebugDotPrint(g, "/dev/null", cudaGraphDebugDotFlagsVerbose));
  cudaGraphExec_t x = NULL, x2 = NULL;
  OK(cudaGraphInstantiate(&x, g, 0));
  OK(cudaGraphInstantiateWithFlags(&x2, g, 0));
  OK(cudaGraphUpload(x, s));
  OK(cudaGraphLaunch(x, s));
  OK(cudaGraphLaunch(x2, s));
  OK(cudaStreamSynchronize(s));
  EXPECT(count == 2, "host function ran %d times in two replays", count);
  OK(cudaGraphExecDestroy(x));
  OK(cudaGraphExecDestroy(x2));
  OK(cudaGraphDestroy(g));
  cudaGraph_t e = NULL;
  OK(cudaGraphCreate(&e, 0));
  OK(cudaGraphDestroy(e));
  OK(cudaEventDestroy(fork));
  OK(cudaEventDestroy(join));
  OK(cudaFree(d));
  OK(cudaStreamDestroy(s));
  OK(cudaStreamDestroy(s2));
}

static void textures(void) {
  cudaChannelFormatDesc ch = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  note("cudaCreateChannelDesc(");
  cudaArray_t arr = NULL, sarr = NULL;
  OK(cudaMallocArray(&arr, &ch, 64, 16));
  OK(cudaMalloc3DArray(&sarr, &ch, make_cudaExtent(64, 16, 0), cudaArraySurfaceLoadStore));
  cudaChannelFormatDesc back;
  cudaExtent ext;
  unsigned fl = 0;
  OK(cudaArrayGetInfo(&back, &ext, &fl, arr));
  EXPECT(ext.width == 64 && ext.height == 16 && back.x == 32, "array info %zux%zu", ext.width,
         ext.height);
  OK(cudaGetChannelDesc(&back, arr));
  float rows[16][64];
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 64; j++)
      rows[i][j] = (float)(i * 64 + j);
  OK(cudaMemcpy2DToArray(arr, 0, 0, rows, sizeof rows[0], sizeof rows[0], 16,
                         cudaMemcpyHostToDevice));
  float out[16][64];
  OK(cudaMemcpy2DFromArray(out, sizeof out[0], arr, 0, 0, sizeof out[0], 16,
                           cudaMemcpyDeviceToHost));
  EXPECT(out[15][63] == rows[15][63], "array round trip %f", out[15][63]);
  cudaResourceDesc rd = {};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr;
  cudaTextureDesc td = {};
  td.addressMode[0] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t tex = 0;
  OK(cudaCreateTextureObject(&tex, &rd, &td, NULL));
  cudaResourceDesc rback;
  cudaTextureDesc tback;
  OK(cudaGetTextureObjectResourceDesc(&rback, tex));
  EXPECT(rback.resType == cudaResourceTypeArray, "texture resource type %d",
         (int)rback.resType);
  OK(cudaGetTextureObjectTextureDesc(&tback, tex));
  OK(cudaDestroyTextureObject(tex));
  cudaSurfaceObject_t surf = 0;
  EXPECT_RC(cudaCreateSurfaceObject(&surf, &rd), cudaErrorInvalidValue); // no load/store flag
  rd.res.array.array = sarr;
  OK(cudaCreateSurfaceObject(&surf, &rd));
  OK(cudaGetSurfaceObjectResourceDesc(&rback, surf));
  OK(cudaDestroySurfaceObject(surf));
  OK(cudaFreeArray(arr));
  OK(cudaFreeArray(sarr));
}

int main(void) {
  versions_and_errors();
  devices();
  memory();
  pools();
  streams_and_events();
  launches();
  graphs();
  textures();
  OK(cudaDeviceReset());
  printf("probe: %d distinct runtime calls, %d checks passed\n", g_nnames, g_checks);
  return 0;
}
