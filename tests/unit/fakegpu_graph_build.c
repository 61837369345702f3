/* CUDA graphs built node by node on the fake (fakecuda_graphnode.c,
 * fakecuda_graphquery.c, fakecuda_graphexec.c): kernel, memset, memcpy,
 * host and empty nodes joined by dependencies given at creation and added
 * after it; a replay runs them in dependency order, not in the order made;
 * a kernel node keeps a copy of its arguments and runs the kernel's host
 * twin with them (gb_axpy below: its layout comes from the PTX); kernel
 * node parameters got and set, in the graph and in an exec; exec update
 * (parameters taken; a changed shape refused with 910 and the driver's
 * result code); queries; cycles, foreign and duplicate dependencies
 * refused; a replayed kernel whose copied argument points into memory
 * freed since faults (700) as a direct launch does (FAKEGPU_CHECK_ARGS);
 * the generic form (cuGraphAddNode, cuGraphNodeSetParams,
 * cuGraphExecNodeSetParams). */
#include <stdint.h>

#include "fakegpu/fg_test.h"

#define PROC(type, name, version) ((type)fgt_proc(name, version))
#define ERR_EXEC_UPDATE 910

typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void *node_t;
typedef void (*host_fn)(void *);
typedef struct {
  void *func;
  unsigned dims[6], shmem;
  void **params, **extra;
  void *kern;
  CUcontext ctx;
} kparams_t; /* CUDA_KERNEL_NODE_PARAMS_v2 */
typedef struct {
  CUdeviceptr dst;
  size_t pitch;
  unsigned value, elem;
  size_t width, height;
} msparams_t;
typedef struct {
  host_fn fn;
  void *user;
} hparams_t;
typedef struct {
  size_t srcX, srcY, srcZ, srcLOD;
  int srcType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  void *srcArray, *r0;
  size_t srcPitch, srcHeight;
  size_t dstX, dstY, dstZ, dstLOD;
  int dstType;
  void *dstHost;
  CUdeviceptr dstDevice;
  void *dstArray, *r1;
  size_t dstPitch, dstHeight;
  size_t width, height, depth;
} copy3d_t; /* CUDA_MEMCPY3D */

typedef struct {
  int type, reserved0[3];
  union {
    long long pad[29];
    kparams_t kernel;
    msparams_t memset;
    hparams_t host;
  } u;
  long long reserved2;
} gparams_t; /* CUgraphNodeParams */

static CUresult (*graph_create)(CUgraph *, unsigned);
static CUresult (*graph_destroy)(CUgraph);
static CUresult (*add_kernel)(node_t *, CUgraph, const node_t *, size_t, const kparams_t *);
static CUresult (*add_memset)(node_t *, CUgraph, const node_t *, size_t, const msparams_t *,
                              CUcontext);
static CUresult (*add_memcpy)(node_t *, CUgraph, const node_t *, size_t, const copy3d_t *,
                              CUcontext);
static CUresult (*add_host)(node_t *, CUgraph, const node_t *, size_t, const hparams_t *);
static CUresult (*add_empty)(node_t *, CUgraph, const node_t *, size_t);
static CUresult (*add_deps)(CUgraph, const node_t *, const node_t *, size_t);
static CUresult (*remove_deps)(CUgraph, const node_t *, const node_t *, size_t);
static CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult (*instantiate_log)(CUgraphExec *, CUgraph, node_t *, char *, size_t);
static CUresult (*launch)(CUgraphExec, CUstream);
static CUresult (*exec_destroy)(CUgraphExec);
static CUresult (*kernel_get)(node_t, kparams_t *);
static CUresult (*kernel_set)(node_t, const kparams_t *);
static CUresult (*x_kernel_set)(CUgraphExec, node_t, const kparams_t *);
static CUresult (*update)(CUgraphExec, CUgraph, void *);
static CUresult (*graph_clone)(CUgraph *, CUgraph);
static CUresult (*find)(node_t *, node_t, CUgraph);
static CUresult (*get_nodes)(CUgraph, node_t *, size_t *);
static CUresult (*get_roots)(CUgraph, node_t *, size_t *);
static CUresult (*get_edges)(CUgraph, node_t *, node_t *, void *, size_t *);
static CUresult (*get_deps)(node_t, node_t *, void *, size_t *);
static CUresult (*get_dependents)(node_t, node_t *, void *, size_t *);
static CUresult (*node_type)(node_t, int *);
static CUresult (*destroy_node)(node_t);
static CUresult (*memset32)(CUdeviceptr, unsigned, size_t);

static void load(void) {
  graph_create = PROC(CUresult(*)(CUgraph *, unsigned), "cuGraphCreate", 10000);
  graph_destroy = PROC(CUresult(*)(CUgraph), "cuGraphDestroy", 10000);
  *(void **)&add_kernel = fgt_proc("cuGraphAddKernelNode", 12000);
  *(void **)&add_memset = fgt_proc("cuGraphAddMemsetNode", 10000);
  *(void **)&add_memcpy = fgt_proc("cuGraphAddMemcpyNode", 10000);
  *(void **)&add_host = fgt_proc("cuGraphAddHostNode", 10000);
  *(void **)&add_empty = fgt_proc("cuGraphAddEmptyNode", 10000);
  *(void **)&add_deps = fgt_proc("cuGraphAddDependencies", 10000);
  *(void **)&remove_deps = fgt_proc("cuGraphRemoveDependencies", 10000);
  *(void **)&instantiate = fgt_proc("cuGraphInstantiateWithFlags", 11040);
  *(void **)&instantiate_log = fgt_proc("cuGraphInstantiate", 10000);
  *(void **)&launch = fgt_proc("cuGraphLaunch", 10000);
  *(void **)&exec_destroy = fgt_proc("cuGraphExecDestroy", 10000);
  *(void **)&kernel_get = fgt_proc("cuGraphKernelNodeGetParams", 12000);
  *(void **)&kernel_set = fgt_proc("cuGraphKernelNodeSetParams", 12000);
  *(void **)&x_kernel_set = fgt_proc("cuGraphExecKernelNodeSetParams", 12000);
  *(void **)&update = fgt_proc("cuGraphExecUpdate", 12000);
  *(void **)&graph_clone = fgt_proc("cuGraphClone", 10000);
  *(void **)&find = fgt_proc("cuGraphNodeFindInClone", 10000);
  *(void **)&get_nodes = fgt_proc("cuGraphGetNodes", 10000);
  *(void **)&get_roots = fgt_proc("cuGraphGetRootNodes", 10000);
  *(void **)&get_edges = fgt_proc("cuGraphGetEdges", 12030);
  *(void **)&get_deps = fgt_proc("cuGraphNodeGetDependencies", 12030);
  *(void **)&get_dependents = fgt_proc("cuGraphNodeGetDependentNodes", 12030);
  *(void **)&node_type = fgt_proc("cuGraphNodeGetType", 10000);
  *(void **)&destroy_node = fgt_proc("cuGraphDestroyNode", 10000);
  *(void **)&memset32 = fgt_proc("cuMemsetD32", 3020);
  REQUIRE(graph_create && add_kernel && add_memset && add_memcpy && add_host && add_empty &&
          add_deps && remove_deps && instantiate && launch && kernel_get && x_kernel_set &&
          update && graph_clone && get_edges && destroy_node);
}

/* x[i] = x[i] * a + 1 for i < n: the host twin of the PTX kernel below. */
__attribute__((visibility("default"))) void fakegpu_twin_gb_axpy(const dev_launch_dims *d,
                                                                 void **p) {
  (void)d;
  float *x = *(float **)p[0];
  unsigned n = *(unsigned *)p[1];
  float a = *(float *)p[2];
  for (unsigned i = 0; i < n; i++)
    x[i] = x[i] * a + 1.0f;
}

static const char k_ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry gb_axpy(.param .u64 gb_x, .param .u32 gb_n, .param .f32 gb_a)\n{ ret; }\n";
/* The PTX in a fatbin (cuModuleLoadData keeps a fatbin's image, where the
 * fake reads the parameter layout; the twin is still what runs). */
static unsigned char g_fatbin[16 + 64 + sizeof k_ptx + 8];

static void make_fatbin(void) {
  size_t padded = (sizeof k_ptx + 7) & ~(size_t)7;
  uint32_t magic = 0xba55ed50u, ehsize = 64, arch = 90;
  uint16_t one = 1, hsize = 16, ptx = 1;
  uint64_t fsize = 64 + padded, payload = padded, n = sizeof k_ptx;
  memcpy(g_fatbin, &magic, 4);
  memcpy(g_fatbin + 4, &one, 2);
  memcpy(g_fatbin + 6, &hsize, 2);
  memcpy(g_fatbin + 8, &fsize, 8);
  unsigned char *e = g_fatbin + 16;
  memcpy(e, &ptx, 2);
  memcpy(e + 4, &ehsize, 4);
  memcpy(e + 8, &payload, 8);
  memcpy(e + 28, &arch, 4);
  memcpy(e + 56, &n, 8);
  memcpy(e + 64, k_ptx, sizeof k_ptx);
}

static CUmodule g_mod;
static CUfunction g_axpy;

static void host_note(void *arg) { __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST); }

static kparams_t axpy(CUdeviceptr *x, unsigned *n, float *a, void **argv) {
  argv[0] = x;
  argv[1] = n;
  argv[2] = a;
  kparams_t p = {g_axpy, {1, 1, 1, 32, 1, 1}, 0, argv, NULL, NULL, NULL};
  return p;
}

static float first_float(CUdeviceptr d) {
  float v = -1;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&v, d, sizeof v), CUDA_SUCCESS);
  return v;
}

/* The graph of the test: K (axpy on x, made first, no dependency), M (x = 1.0,
 * made second), then the edge M -> K, C (copy x to y) after K, H (a host
 * node) and E (empty) after C. Replayed in creation order K would run on
 * the old x; in dependency order x = 1 * a + 1. */
typedef struct {
  CUgraph g;
  node_t k, m, c, h, e;
  CUdeviceptr x, y;
  unsigned n;
  float a;
  void *argv[3];
  int hits;
} built;

static void build(built *b) {
  memset(b, 0, sizeof *b);
  REQUIRE(cu_cuMemAlloc(&b->x, 256) == CUDA_SUCCESS && cu_cuMemAlloc(&b->y, 256) == CUDA_SUCCESS);
  REQUIRE(memset32(b->x, 0x40a00000u /* 5.0f */, 64) == CUDA_SUCCESS);
  REQUIRE(graph_create(&b->g, 0) == CUDA_SUCCESS);
  b->n = 4;
  b->a = 2.0f;
  kparams_t kp = axpy(&b->x, &b->n, &b->a, b->argv);
  CHECK_EQ_INT(add_kernel(&b->k, b->g, NULL, 0, &kp), CUDA_SUCCESS);
  msparams_t mp = {b->x, 0, 0x3f800000u /* 1.0f */, 4, 64, 1};
  CHECK_EQ_INT(add_memset(&b->m, b->g, NULL, 0, &mp, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(add_deps(b->g, &b->m, &b->k, 1), CUDA_SUCCESS);
  copy3d_t cp = {0};
  cp.srcType = cp.dstType = 2; /* CU_MEMORYTYPE_DEVICE */
  cp.srcDevice = b->x;
  cp.dstDevice = b->y;
  cp.width = 256;
  cp.height = cp.depth = 1;
  CHECK_EQ_INT(add_memcpy(&b->c, b->g, &b->k, 1, &cp, NULL), CUDA_SUCCESS);
  hparams_t hp = {host_note, &b->hits};
  CHECK_EQ_INT(add_host(&b->h, b->g, &b->c, 1, &hp), CUDA_SUCCESS);
  node_t both[2] = {b->c, b->h};
  CHECK_EQ_INT(add_empty(&b->e, b->g, both, 2), CUDA_SUCCESS);
  b->a = 100.0f; /* the node keeps the value it was given */
}

static void unbuild(built *b) {
  CHECK_EQ_INT(graph_destroy(b->g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(b->x), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(b->y), CUDA_SUCCESS);
}

static void run(CUgraphExec x, CUstream s) {
  CHECK_EQ_INT(launch(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
}

static void test_dependency_order(void) {
  built b;
  build(&b);
  CUstream s;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  CUgraphExec x = NULL;
  CHECK_EQ_INT(instantiate(&x, b.g, 0), CUDA_SUCCESS);
  for (int i = 0; i < 3; i++)
    run(x, s);
  float y = first_float(b.y);
  CHECK_MSG(y == 3.0f,
            "y[0] = %g after replay, want 3 (memset 1, then 1 * 2 + 1; 1 means the "
            "kernel ran before the memset, 101 that it read a changed argument)",
            y);
  CHECK_MSG(b.hits == 3, "the host node ran %d times in 3 replays", b.hits);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
  unbuild(&b);
}

static void test_queries(void) {
  built b;
  build(&b);
  node_t v[8] = {0}, w[8] = {0};
  unsigned char data[64];
  size_t n = 8;
  CHECK_EQ_INT(get_nodes(b.g, v, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 5 && v[0] == b.k && v[1] == b.m && v[4] == b.e,
            "nodes: %zu, not in the order made", n);
  n = 8;
  CHECK_EQ_INT(get_roots(b.g, v, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 1 && v[0] == b.m, "roots: %zu (want the memset node only)", n);
  n = 0;
  CHECK_EQ_INT(get_edges(b.g, NULL, NULL, NULL, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 5, "%zu edges, want 5", n);
  n = 8;
  memset(data, 0xff, sizeof data);
  CHECK_EQ_INT(get_edges(b.g, v, w, data, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 5 && v[0] == b.m && w[0] == b.k && data[0] == 0 && data[39] == 0,
            "edges: %zu, first not memset -> kernel, or edge data not the default", n);
  n = 8;
  CHECK_EQ_INT(get_deps(b.e, v, NULL, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 2 && v[0] == b.c && v[1] == b.h, "the empty node's dependencies: %zu", n);
  n = 8;
  CHECK_EQ_INT(get_dependents(b.k, v, NULL, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 1 && v[0] == b.c, "the kernel's dependents: %zu", n);
  int t = -1;
  CHECK_EQ_INT(node_type(b.k, &t), CUDA_SUCCESS);
  CHECK_EQ_INT(t, 0);
  CHECK_EQ_INT(node_type(b.e, &t), CUDA_SUCCESS);
  CHECK_EQ_INT(t, 5);
  kparams_t kp;
  memset(&kp, 0, sizeof kp);
  CHECK_EQ_INT(kernel_get(b.k, &kp), CUDA_SUCCESS);
  CHECK_MSG(kp.dims[3] == 32 && kp.params && *(float *)kp.params[2] == 2.0f &&
                *(unsigned *)kp.params[1] == 4,
            "kernel node parameters not given back (block %u)", kp.dims[3]);
  /* the empty node goes, and its edges with it */
  CHECK_EQ_INT(destroy_node(b.e), CUDA_SUCCESS);
  n = 0;
  CHECK_EQ_INT(get_edges(b.g, NULL, NULL, NULL, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 3, "%zu edges after destroying the empty node, want 3", n);
  CHECK_EQ_INT(node_type(b.e, &t), CUDA_ERROR_INVALID_VALUE);
  unbuild(&b);
}

static void test_refusals(void) {
  built b;
  build(&b);
  CUgraph other;
  REQUIRE(graph_create(&other, 0) == CUDA_SUCCESS);
  node_t o = NULL, twice[2] = {b.k, b.k};
  CHECK_EQ_INT(add_empty(&o, other, &b.k, 1), CUDA_ERROR_INVALID_VALUE); /* b's node */
  CHECK_EQ_INT(add_empty(&o, b.g, twice, 2), CUDA_ERROR_INVALID_VALUE);  /* twice */
  CHECK_EQ_INT(add_empty(&o, b.g, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(add_deps(b.g, &b.m, &b.k, 1), CUDA_ERROR_INVALID_VALUE);    /* already there */
  CHECK_EQ_INT(remove_deps(b.g, &b.h, &b.k, 1), CUDA_ERROR_INVALID_VALUE); /* not there */
  CHECK_EQ_INT(add_deps(b.g, &b.k, &b.k, 1), CUDA_ERROR_INVALID_VALUE);
  msparams_t bad = {b.x, 0, 0, 3, 4, 1}; /* element size 3 */
  CHECK_EQ_INT(add_memset(&o, b.g, NULL, 0, &bad, NULL), CUDA_ERROR_INVALID_VALUE);
  hparams_t nofn = {NULL, NULL};
  CHECK_EQ_INT(add_host(&o, b.g, NULL, 0, &nofn), CUDA_ERROR_INVALID_VALUE);
  kparams_t kp = {(void *)&o, {1, 1, 1, 1, 1, 1}, 0, NULL, NULL, NULL, NULL};
  CHECK_EQ_INT(add_kernel(&o, b.g, NULL, 0, &kp), CUDA_ERROR_INVALID_HANDLE);
  /* a cycle: h -> m closes m -> k -> c -> h */
  CHECK_EQ_INT(add_deps(b.g, &b.h, &b.m, 1), CUDA_SUCCESS);
  CUgraphExec x = NULL;
  node_t err = NULL;
  char log[128] = "x";
  CHECK_EQ_INT(instantiate_log(&x, b.g, &err, log, sizeof log), CUDA_ERROR_INVALID_VALUE);
  CHECK_MSG(err != NULL && strstr(log, "cycle"), "a cycle: no error node or log ('%s')", log);
  CHECK_EQ_INT(remove_deps(b.g, &b.h, &b.m, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(instantiate(&x, b.g, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(other), CUDA_SUCCESS);
  unbuild(&b);
}

/* Kernel parameters set in the graph and in an exec; an update takes a
 * clone's parameters; a changed shape is refused. */
static void test_set_and_update(void) {
  built b;
  build(&b);
  CUstream s;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  CUgraphExec x = NULL;
  CHECK_EQ_INT(instantiate(&x, b.g, 0), CUDA_SUCCESS);
  float a = 5.0f;
  void *argv[3];
  kparams_t kp = axpy(&b.x, &b.n, &a, argv);
  CHECK_EQ_INT(x_kernel_set(x, b.k, &kp), CUDA_SUCCESS);
  run(x, s);
  CHECK_MSG(first_float(b.y) == 6.0f, "exec kernel parameters: y = %g, want 6", first_float(b.y));
  kparams_t got;
  CHECK_EQ_INT(kernel_get(b.k, &got), CUDA_SUCCESS);
  CHECK_MSG(*(float *)got.params[2] == 2.0f, "setting the exec's node changed the graph's");
  CUgraph c = NULL;
  node_t ck = NULL;
  CHECK_EQ_INT(graph_clone(&c, b.g), CUDA_SUCCESS);
  CHECK_EQ_INT(find(&ck, b.k, c), CUDA_SUCCESS);
  a = 10.0f;
  CHECK_EQ_INT(kernel_set(ck, &kp), CUDA_SUCCESS);
  struct {
    int result;
    node_t err, err_from;
  } info = {-1, NULL, NULL};
  CHECK_EQ_INT(update(x, c, &info), CUDA_SUCCESS);
  CHECK_EQ_INT(info.result, 0);
  run(x, s);
  CHECK_MSG(first_float(b.y) == 11.0f, "after update: y = %g, want 11", first_float(b.y));
  node_t extra = NULL;
  CHECK_EQ_INT(add_empty(&extra, c, NULL, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(update(x, c, &info), ERR_EXEC_UPDATE);
  CHECK_MSG(info.result == 2, "a node more: result %d, want 2 (topology changed)", info.result);
  CHECK_EQ_INT(destroy_node(extra), CUDA_SUCCESS);
  node_t cm = NULL, cc = NULL;
  CHECK_EQ_INT(find(&cm, b.m, c), CUDA_SUCCESS);
  CHECK_EQ_INT(find(&cc, b.c, c), CUDA_SUCCESS);
  CHECK_EQ_INT(add_deps(c, &cm, &cc, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(update(x, c, &info), ERR_EXEC_UPDATE);
  CHECK_MSG(info.result == 2, "an edge more: result %d, want 2", info.result);
  run(x, s); /* the exec is as it was */
  CHECK_MSG(first_float(b.y) == 11.0f, "after a refused update: y = %g, want 11", first_float(b.y));
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(c), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
  unbuild(&b);
}

/* A kernel with a host twin launched on a capturing stream is recorded with
 * its arguments and runs at each replay. */
static void test_captured_twin(void) {
  CUresult (*begin)(CUstream, int) =
      PROC(CUresult(*)(CUstream, int), "cuStreamBeginCapture", 10010);
  CUresult (*end_capture)(CUstream, CUgraph *) =
      PROC(CUresult(*)(CUstream, CUgraph *), "cuStreamEndCapture", 10000);
  CUstream s;
  CUdeviceptr x;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&x, 64) == CUDA_SUCCESS);
  REQUIRE(memset32(x, 0, 16) == CUDA_SUCCESS);
  unsigned n = 1;
  float a = 1.0f;
  void *argv[] = {&x, &n, &a};
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(g_axpy, 1, 1, 1, 1, 1, 1, 0, s, argv, NULL), CUDA_SUCCESS);
  CUgraph g = NULL;
  CHECK_EQ_INT(end_capture(s, &g), CUDA_SUCCESS);
  CHECK_MSG(first_float(x) == 0.0f, "a captured kernel ran at the call");
  CUgraphExec e = NULL;
  CHECK_EQ_INT(instantiate(&e, g, 0), CUDA_SUCCESS);
  run(e, s);
  run(e, s);
  CHECK_MSG(first_float(x) == 2.0f, "two replays of x = x + 1 gave %g", first_float(x));
  CHECK_EQ_INT(exec_destroy(e), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(x), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* A module of host twins only has no parameter layout: kernelParams cannot
 * be copied (1); the packed `extra` form can. */
static void test_twin_without_layout(void) {
  CUmodule m;
  CUfunction f;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&f, m, "gb_axpy") == CUDA_SUCCESS);
  CUgraph g;
  REQUIRE(graph_create(&g, 0) == CUDA_SUCCESS);
  CUdeviceptr x = 0;
  unsigned n = 0;
  float a = 1;
  void *argv[3];
  kparams_t kp = axpy(&x, &n, &a, argv);
  kp.func = f;
  node_t k = NULL;
  CHECK_EQ_INT(add_kernel(&k, g, NULL, 0, &kp), CUDA_ERROR_INVALID_VALUE);
  unsigned char buf[16] = {0};
  size_t size = sizeof buf;
  void *extra[] = {(void *)1, buf, (void *)2, &size, NULL};
  kp.params = NULL;
  kp.extra = extra;
  CHECK_EQ_INT(add_kernel(&k, g, NULL, 0, &kp), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
}

/* The generic form: nodes added and set through CUgraphNodeParams. */
static void test_generic_nodes(void) {
  CUresult (*add)(node_t *, CUgraph, const node_t *, const void *, size_t, gparams_t *) =
      PROC(CUresult(*)(node_t *, CUgraph, const node_t *, const void *, size_t, gparams_t *),
           "cuGraphAddNode", 12030);
  CUresult (*set)(node_t, gparams_t *) =
      PROC(CUresult(*)(node_t, gparams_t *), "cuGraphNodeSetParams", 12020);
  CUresult (*x_set)(CUgraphExec, node_t, gparams_t *) =
      PROC(CUresult(*)(CUgraphExec, node_t, gparams_t *), "cuGraphExecNodeSetParams", 12020);
  CUstream s;
  CUdeviceptr x;
  CUgraph g;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&x, 256) == CUDA_SUCCESS);
  REQUIRE(graph_create(&g, 0) == CUDA_SUCCESS);
  gparams_t ms, k, h, bad;
  memset(&ms, 0, sizeof ms);
  ms.type = 2; /* memset */
  ms.u.memset = (msparams_t){x, 0, 0x3f800000u, 4, 64, 1};
  node_t m = NULL, kn = NULL, hn = NULL;
  CHECK_EQ_INT(add(&m, g, NULL, NULL, 0, &ms), CUDA_SUCCESS);
  unsigned n = 4;
  float a = 3.0f;
  void *argv[3];
  memset(&k, 0, sizeof k);
  k.type = 0; /* kernel */
  k.u.kernel = axpy(&x, &n, &a, argv);
  CHECK_EQ_INT(add(&kn, g, &m, NULL, 1, &k), CUDA_SUCCESS);
  int hits = 0;
  memset(&h, 0, sizeof h);
  h.type = 3; /* host */
  h.u.host = (hparams_t){host_note, &hits};
  CHECK_EQ_INT(add(&hn, g, &kn, NULL, 1, &h), CUDA_SUCCESS);
  unsigned char edge[8] = {0, 0, 1}; /* a programmatic edge */
  node_t o = NULL;
  CHECK_EQ_INT(add(&o, g, &kn, edge, 1, &h), CUDA_ERROR_INVALID_VALUE);
  memset(&bad, 0, sizeof bad);
  bad.type = 4; /* a child graph: not on the fake */
  CHECK_EQ_INT(add(&o, g, NULL, NULL, 0, &bad), CUDA_ERROR_NOT_SUPPORTED);
  bad.type = 14; /* no such type */
  CHECK_EQ_INT(add(&o, g, NULL, NULL, 0, &bad), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(set(kn, &ms), CUDA_ERROR_INVALID_VALUE); /* memset parameters for a kernel */
  a = 4.0f;
  CHECK_EQ_INT(set(kn, &k), CUDA_SUCCESS);
  CUgraphExec e = NULL;
  CHECK_EQ_INT(instantiate(&e, g, 0), CUDA_SUCCESS);
  run(e, s);
  CHECK_MSG(first_float(x) == 5.0f && hits == 1, "generic graph: x = %g (want 1 * 4 + 1), %d hits",
            first_float(x), hits);
  a = 6.0f;
  CHECK_EQ_INT(x_set(e, kn, &k), CUDA_SUCCESS);
  run(e, s);
  CHECK_MSG(first_float(x) == 7.0f, "exec generic set: x = %g, want 7", first_float(x));
  CHECK_EQ_INT(exec_destroy(e), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(x), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* A child: a kernel node whose argument points into memory freed after the
 * node was made: the replay faults (700, sticky) unless FAKEGPU_CHECK_ARGS=0. */
static int child_freed(void) {
  load();
  fgt_init_ctx();
  make_fatbin();
  if (cu_cuModuleLoadData(&g_mod, g_fatbin) || cu_cuModuleGetFunction(&g_axpy, g_mod, "gb_axpy"))
    return 10;
  CUgraph g;
  CUdeviceptr x;
  unsigned n = 0; /* the twin touches nothing */
  float a = 1;
  void *argv[3];
  if (graph_create(&g, 0) || cu_cuMemAlloc(&x, 1 << 20))
    return 11;
  kparams_t kp = axpy(&x, &n, &a, argv);
  node_t k;
  CUgraphExec e;
  if (add_kernel(&k, g, NULL, 0, &kp) || instantiate(&e, g, 0) || cu_cuMemFree(x))
    return 12;
  if (launch(e, NULL) != CUDA_SUCCESS)
    return 13;
  CUresult rc = cu_cuCtxSynchronize();
  const char *check = getenv("FAKEGPU_CHECK_ARGS");
  int want = check && !strcmp(check, "0") ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
  return rc == (CUresult)want ? 0 : 20 + (int)rc % 50;
}

static void test_replay_checks_arguments(void) {
  const char *on[] = {"FAKEGPU_CHECK_ARGS=1", NULL}, *off[] = {"FAKEGPU_CHECK_ARGS=0", NULL};
  CHECK_MSG(fgt_run_self("freed", on) == 0,
            "a replayed kernel on freed memory did not fault with 700 (the argument check)");
  CHECK_MSG(fgt_run_self("freed", off) == 0,
            "FAKEGPU_CHECK_ARGS=0: the replay faulted all the same");
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "freed") ? child_freed() : 99;
  load();
  fgt_init_ctx();
  make_fatbin();
  REQUIRE(cu_cuModuleLoadData(&g_mod, g_fatbin) == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&g_axpy, g_mod, "gb_axpy") == CUDA_SUCCESS);
  RUN(test_dependency_order);
  RUN(test_queries);
  RUN(test_refusals);
  RUN(test_set_and_update);
  RUN(test_captured_twin);
  RUN(test_twin_without_layout);
  RUN(test_generic_nodes);
  RUN(test_replay_checks_arguments);
  CHECK_EQ_INT(cu_cuModuleUnload(g_mod), CUDA_SUCCESS);
  return TEST_END();
}
