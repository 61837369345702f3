// CUDA graphs built node by node through the runtime API, as frameworks
// build them, run on the fake GPU (tests/integration/fakegpu_cudart_graphs.sh,
// static and shared libcudart). rg_axpy has a host twin
// (fakegpu_twin_rg_axpy, exported with -rdynamic), so replays compute real
// values; rg_poke has none and replays as a no-op. Checks the values after
// replays in dependency order, parameters set in the graph and in an exec,
// exec update, clone, queries, the debug print, refusals, a capture of
// the kernel, and the generic form (cudaGraphAddNode, NodeSetParams).
// Prints "graphs: N distinct runtime calls, M checks passed" or
// "FAIL line L: ..." and exits 1.
#include <unistd.h>

#include "cudart_check.h"

#define N 64

extern "C" __global__ void rg_axpy(float *x, unsigned n, float a) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = x[i] * a + 1.0f;
}

// No host twin: a no-op on the fake (a GPU would write 42).
extern "C" __global__ void rg_poke(float *x) { x[0] = 42.0f; }

// The twin the fake runs for rg_axpy (src/device/kernel_twin.h's contract).
struct twin_dims {
  unsigned grid[3], block[3], shared;
};
extern "C" __attribute__((visibility("default"))) void fakegpu_twin_rg_axpy(const twin_dims *d,
                                                                             void **p) {
  float *x = *(float **)p[0];
  unsigned n = *(unsigned *)p[1];
  float a = *(float *)p[2];
  unsigned threads = d->grid[0] * d->block[0];
  for (unsigned i = 0; i < n && i < threads; i++)
    x[i] = x[i] * a + 1.0f;
}

static void count_up(void *arg) { ++*(int *)arg; }

static cudaKernelNodeParams axpy_params(float **x, unsigned *n, float *a, void **argv) {
  argv[0] = x;
  argv[1] = n;
  argv[2] = a;
  cudaKernelNodeParams p = {};
  p.func = (void *)rg_axpy;
  p.gridDim = dim3(2);
  p.blockDim = dim3(32);
  p.kernelParams = argv;
  return p;
}

// memset x = 1.0 -> axpy x (a = 2) -> copy x to y -> host count -> empty ->
// poke y (no-op) -> copy y to the host. The kernel node is made first and
// joined to the memset afterwards: replayed in the order made it would run
// on x's old contents.
struct built {
  cudaGraph_t g;
  cudaGraphNode_t k, m, c, h, e, p, d;
  float *x, *y, host[N];
  unsigned n;
  float a;
  void *argv[3], *pargv[1];
  int hits;
};

static void build(built *b) {
  memset(b, 0, sizeof *b);
  OK(cudaMalloc(&b->x, N * sizeof(float)));
  OK(cudaMalloc(&b->y, N * sizeof(float)));
  OK(cudaMemset(b->x, 0, N * sizeof(float)));
  OK(cudaGraphCreate(&b->g, 0));
  b->n = N;
  b->a = 2.0f;
  cudaKernelNodeParams kp = axpy_params(&b->x, &b->n, &b->a, b->argv);
  OK(cudaGraphAddKernelNode(&b->k, b->g, NULL, 0, &kp));
  cudaMemsetParams mp = {};
  mp.dst = b->x;
  mp.value = 0x3f800000u; // 1.0f
  mp.elementSize = 4;
  mp.width = N;
  mp.height = 1;
  OK(cudaGraphAddMemsetNode(&b->m, b->g, NULL, 0, &mp));
  OK(cudaGraphAddDependencies(b->g, &b->m, &b->k, NULL, 1));
  OK(cudaGraphAddMemcpyNode1D(&b->c, b->g, &b->k, 1, b->y, b->x, N * sizeof(float),
                              cudaMemcpyDeviceToDevice));
  cudaHostNodeParams hp = {count_up, &b->hits};
  OK(cudaGraphAddHostNode(&b->h, b->g, &b->c, 1, &hp));
  OK(cudaGraphAddEmptyNode(&b->e, b->g, &b->h, 1));
  cudaKernelNodeParams pp = {};
  pp.func = (void *)rg_poke;
  pp.gridDim = pp.blockDim = dim3(1);
  b->pargv[0] = &b->y;
  pp.kernelParams = b->pargv;
  OK(cudaGraphAddKernelNode(&b->p, b->g, &b->e, 1, &pp));
  OK(cudaGraphAddMemcpyNode1D(&b->d, b->g, &b->p, 1, b->host, b->y, N * sizeof(float),
                              cudaMemcpyDeviceToHost));
  b->a = 100.0f; // the node keeps the value it was given
}

static void unbuild(built *b) {
  OK(cudaGraphDestroy(b->g));
  OK(cudaFree(b->x));
  OK(cudaFree(b->y));
}

static void replay(cudaGraphExec_t x, cudaStream_t s, int times) {
  for (int i = 0; i < times; i++)
    OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
}

static void expect_all(const float *v, float want, int line) {
  for (int i = 0; i < N; i++)
    if (v[i] != want) {
      printf("FAIL line %d: element %d is %g, want %g\n", line, i, v[i], want);
      exit(1);
    }
  g_checks++;
}

static void replays(built *b, cudaStream_t s) {
  cudaGraphExec_t x;
  OK(cudaGraphInstantiate(&x, b->g, 0));
  replay(x, s, 3);
  // 1 * 2 + 1; 1 would mean the kernel ran before the memset, 101 that it
  // read its argument as changed after the node was made, 42 that the
  // twinless kernel wrote
  expect_all(b->host, 3.0f, __LINE__);
  EXPECT(b->hits == 3, "the host node ran %d times in 3 replays", b->hits);
  // an exec's kernel node takes new arguments; the graph's keeps its own
  float a = 5.0f;
  void *argv[3];
  cudaKernelNodeParams kp = axpy_params(&b->x, &b->n, &a, argv);
  OK(cudaGraphExecKernelNodeSetParams(x, b->k, &kp));
  replay(x, s, 1);
  expect_all(b->host, 6.0f, __LINE__);
  cudaKernelNodeParams got = {};
  OK(cudaGraphKernelNodeGetParams(b->k, &got));
  EXPECT(got.gridDim.x == 2 && got.blockDim.x == 32 && got.kernelParams &&
             *(float *)got.kernelParams[2] == 2.0f && *(unsigned *)got.kernelParams[1] == N,
         "kernel node parameters: grid %u block %u", got.gridDim.x, got.blockDim.x);
  // host and memset nodes of the exec
  int other = 0;
  cudaHostNodeParams hp = {count_up, &other};
  OK(cudaGraphExecHostNodeSetParams(x, b->h, &hp));
  cudaMemsetParams mp = {};
  mp.dst = b->x;
  mp.value = 0x40000000u; // 2.0f
  mp.elementSize = 4;
  mp.width = N;
  mp.height = 1;
  OK(cudaGraphExecMemsetNodeSetParams(x, b->m, &mp));
  replay(x, s, 1);
  expect_all(b->host, 11.0f, __LINE__); // 2 * 5 + 1
  EXPECT(other == 1 && b->hits == 4, "exec host node: %d, %d", other, b->hits);
  // an update from a clone whose kernel node has other arguments
  cudaGraph_t c;
  cudaGraphNode_t ck;
  OK(cudaGraphClone(&c, b->g));
  OK(cudaGraphNodeFindInClone(&ck, b->k, c));
  a = 10.0f;
  OK(cudaGraphKernelNodeSetParams(ck, &kp));
  cudaGraphExecUpdateResultInfo info;
  OK(cudaGraphExecUpdate(x, c, &info));
  EXPECT(info.result == cudaGraphExecUpdateSuccess, "update result %d", (int)info.result);
  replay(x, s, 1);
  expect_all(b->host, 11.0f, __LINE__); // the clone's memset 1.0: 1 * 10 + 1
  EXPECT(b->hits == 5, "after the update the host node is the clone's: %d", b->hits);
  cudaGraphNode_t more;
  OK(cudaGraphAddEmptyNode(&more, c, NULL, 0));
  EXPECT_RC(cudaGraphExecUpdate(x, c, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged, "a node more: result %d",
         (int)info.result);
  OK(cudaGraphDestroyNode(more));
  OK(cudaGraphExecUpdate(x, c, &info));
  OK(cudaGraphDestroy(c));
  OK(cudaGraphExecDestroy(x));
}

static void queries(built *b) {
  cudaGraphNode_t v[8], w[8];
  size_t n = 0;
  OK(cudaGraphGetNodes(b->g, NULL, &n));
  EXPECT(n == 7, "%zu nodes, want 7", n);
  n = 8;
  OK(cudaGraphGetRootNodes(b->g, v, &n));
  EXPECT(n == 1 && v[0] == b->m, "roots: %zu, want the memset node only", n);
  n = 8;
  OK(cudaGraphGetEdges(b->g, v, w, NULL, &n));
  EXPECT(n == 6 && v[0] == b->m && w[0] == b->k, "%zu edges, the first not memset -> kernel", n);
  n = 8;
  OK(cudaGraphNodeGetDependencies(b->k, v, NULL, &n));
  EXPECT(n == 1 && v[0] == b->m, "the kernel's dependencies: %zu", n);
  n = 8;
  OK(cudaGraphNodeGetDependentNodes(b->k, v, NULL, &n));
  EXPECT(n == 1 && v[0] == b->c, "the kernel's dependents: %zu", n);
  cudaGraphNodeType t;
  OK(cudaGraphNodeGetType(b->k, &t));
  EXPECT(t == cudaGraphNodeTypeKernel, "kernel node type %d", (int)t);
  OK(cudaGraphNodeGetType(b->c, &t));
  EXPECT(t == cudaGraphNodeTypeMemcpy, "memcpy node type %d", (int)t);
  OK(cudaGraphNodeGetType(b->e, &t));
  EXPECT(t == cudaGraphNodeTypeEmpty, "empty node type %d", (int)t);
  cudaMemsetParams mp;
  OK(cudaGraphMemsetNodeGetParams(b->m, &mp));
  EXPECT(mp.dst == b->x && mp.value == 0x3f800000u && mp.width == N, "memset node parameters");
  cudaHostNodeParams hp;
  OK(cudaGraphHostNodeGetParams(b->h, &hp));
  EXPECT(hp.fn == count_up && hp.userData == &b->hits, "host node parameters");
  char path[] = "/tmp/cudart_graphsXXXXXX", text[4096] = {0};
  int fd = mkstemp(path);
  EXPECT(fd >= 0, "mkstemp");
  close(fd);
  OK(cudaGraphDebugDotPrint(b->g, path, cudaGraphDebugDotFlagsVerbose));
  FILE *f = fopen(path, "r");
  size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f)
    fclose(f);
  unlink(path);
  EXPECT(got && strstr(text, "rg_axpy") && strstr(text, "->"),
         "the DOT output lacks the kernel or the edges:\n%s", text);
}

static void refusals(built *b) {
  cudaGraphNode_t twice[2] = {b->k, b->k}, o;
  EXPECT_RC(cudaGraphAddEmptyNode(&o, b->g, twice, 2), cudaErrorInvalidValue);
  EXPECT_RC(cudaGraphAddDependencies(b->g, &b->m, &b->k, NULL, 1), cudaErrorInvalidValue);
  EXPECT_RC(cudaGraphRemoveDependencies(b->g, &b->d, &b->m, NULL, 1), cudaErrorInvalidValue);
  // d -> m closes a cycle: the graph cannot be instantiated
  OK(cudaGraphAddDependencies(b->g, &b->d, &b->m, NULL, 1));
  cudaGraphExec_t x;
  EXPECT(cudaGraphInstantiate(&x, b->g, 0) != cudaSuccess, "a graph with a cycle instantiated");
  note("cudaGraphInstantiate");
  (void)cudaGetLastError();
  OK(cudaGraphRemoveDependencies(b->g, &b->d, &b->m, NULL, 1));
}

// A capture of the kernel: recorded with its arguments, run at each replay.
static void capture(cudaStream_t s) {
  float *x;
  unsigned n = N;
  float a = 1.0f, host[N];
  OK(cudaMalloc(&x, N * sizeof(float)));
  OK(cudaMemset(x, 0, N * sizeof(float)));
  cudaGraph_t g;
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  rg_axpy<<<2, 32, 0, s>>>(x, n, a);
  OK(cudaGetLastError());
  OK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  OK(cudaGraphInstantiateWithFlags(&e, g, 0));
  OK(cudaGraphUpload(e, s));
  replay(e, s, 2);
  OK(cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost));
  expect_all(host, 2.0f, __LINE__); // x + 1, twice
  OK(cudaGraphExecDestroy(e));
  OK(cudaGraphDestroy(g));
  OK(cudaFree(x));
}

// The generic form: cudaGraphAddNode, cudaGraphNodeSetParams,
// cudaGraphExecNodeSetParams with cudaGraphNodeParams.
static void generic(cudaStream_t s) {
  float *x, host[N];
  unsigned n = N;
  float a = 3.0f;
  void *argv[3] = {&x, &n, &a};
  OK(cudaMalloc(&x, N * sizeof(float)));
  cudaGraph_t g;
  OK(cudaGraphCreate(&g, 0));
  cudaGraphNodeParams ms = {};
  ms.type = cudaGraphNodeTypeMemset;
  ms.memset.dst = x;
  ms.memset.value = 0x3f800000u; // 1.0f
  ms.memset.elementSize = 4;
  ms.memset.width = N;
  ms.memset.height = 1;
  cudaGraphNode_t m, k;
  OK(cudaGraphAddNode(&m, g, NULL, NULL, 0, &ms));
  cudaGraphNodeParams kp = {};
  kp.type = cudaGraphNodeTypeKernel;
  kp.kernel.func = (void *)rg_axpy;
  kp.kernel.gridDim = dim3(2);
  kp.kernel.blockDim = dim3(32);
  kp.kernel.kernelParams = argv;
  OK(cudaGraphAddNode(&k, g, &m, NULL, 1, &kp));
  a = 4.0f;
  OK(cudaGraphNodeSetParams(k, &kp));
  cudaGraphExec_t e;
  OK(cudaGraphInstantiate(&e, g, 0));
  replay(e, s, 1);
  OK(cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost));
  expect_all(host, 5.0f, __LINE__); // 1 * 4 + 1
  a = 6.0f;
  OK(cudaGraphExecNodeSetParams(e, k, &kp));
  replay(e, s, 1);
  OK(cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost));
  expect_all(host, 7.0f, __LINE__); // 1 * 6 + 1
  OK(cudaGraphExecDestroy(e));
  OK(cudaGraphDestroy(g));
  OK(cudaFree(x));
}

int main(void) {
  cudaStream_t s;
  OK(cudaSetDevice(0));
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  built b;
  build(&b);
  replays(&b, s);
  queries(&b);
  refusals(&b);
  unbuild(&b);
  capture(s);
  generic(s);
  OK(cudaStreamDestroy(s));
  OK(cudaDeviceReset());
  printf("graphs: %d distinct runtime calls, %d checks passed\n", g_nnames, g_checks);
  return 0;
}
