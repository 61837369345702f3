/* Stream capture and graphs on the fake (tests/fakegpu/fakecuda_graph.c),
 * reached as the CUDA runtime reaches them (cuGetProcAddress_v2): a
 * capturing stream records host functions and kernels without running
 * them, a graph replays them at each launch; waiting on or querying a
 * capturing stream, or work the fake cannot record, answers 900 and
 * invalidates the capture (end: 901, no graph); the legacy stream cannot
 * capture (900); begin twice or end without begin: 401. The fake's rules:
 * 3 before cuInit, 201 without a context. */
#include "fakegpu/fg_test.h"

#define PROC(type, name, version) ((type)proc(name, version))
#define ERR_ILLEGAL_STATE 401
#define ERR_CAPTURE_UNSUPPORTED 900
#define ERR_CAPTURE_INVALIDATED 901

typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void (*host_fn)(void *);

static void *proc(const char *name, int version) {
  void *pfn = NULL;
  CUdriverProcAddressQueryResult s = -1;
  CHECK_EQ_INT(cu_cuGetProcAddress_v2(name, &pfn, version, 0, &s), CUDA_SUCCESS);
  CHECK_MSG(pfn != NULL, "cuGetProcAddress does not hand out %s at %d", name, version);
  return pfn;
}

static CUresult (*begin)(CUstream, int);
static CUresult (*end)(CUstream, CUgraph *);
static CUresult (*is_capturing)(CUstream, int *);
static CUresult (*capture_info)(CUstream, int *, unsigned long long *);
static CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult (*upload)(CUgraphExec, CUstream);
static CUresult (*launch)(CUgraphExec, CUstream);
static CUresult (*exec_destroy)(CUgraphExec);
static CUresult (*graph_destroy)(CUgraph);
static CUresult (*graph_create)(CUgraph *, unsigned);
static CUresult (*host_func)(CUstream, host_fn, void *);
static CUresult (*query)(CUstream);

static void load(void) {
  begin = PROC(CUresult(*)(CUstream, int), "cuStreamBeginCapture", 10010);
  end = PROC(CUresult(*)(CUstream, CUgraph *), "cuStreamEndCapture", 10000);
  is_capturing = PROC(CUresult(*)(CUstream, int *), "cuStreamIsCapturing", 10000);
  capture_info =
      PROC(CUresult(*)(CUstream, int *, unsigned long long *), "cuStreamGetCaptureInfo", 10010);
  instantiate = PROC(CUresult(*)(CUgraphExec *, CUgraph, unsigned long long),
                     "cuGraphInstantiateWithFlags", 11040);
  upload = PROC(CUresult(*)(CUgraphExec, CUstream), "cuGraphUpload", 11010);
  launch = PROC(CUresult(*)(CUgraphExec, CUstream), "cuGraphLaunch", 10000);
  exec_destroy = PROC(CUresult(*)(CUgraphExec), "cuGraphExecDestroy", 10000);
  graph_destroy = PROC(CUresult(*)(CUgraph), "cuGraphDestroy", 10000);
  graph_create = PROC(CUresult(*)(CUgraph *, unsigned), "cuGraphCreate", 10000);
  host_func = PROC(CUresult(*)(CUstream, host_fn, void *), "cuLaunchHostFunc", 10000);
  query = PROC(CUresult(*)(CUstream), "cuStreamQuery", 2000);
  REQUIRE(begin && end && is_capturing && capture_info && instantiate && upload && launch &&
          exec_destroy && graph_destroy && graph_create && host_func && query);
}

static void bump(void *arg) { __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST); }

/* A fatbin holding PTX of one kernel with no host twin: launched as a no-op. */
static const char k_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry graph_kernel()\n{ ret; }\n";
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

static void test_capture_and_replay(void) {
  CUstream s;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  CUmodule m;
  CUfunction k;
  REQUIRE(cu_cuModuleLoadData(&m, g_fatbin) == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&k, m, "graph_kernel") == CUDA_SUCCESS);
  int count = 0, status = -1;
  unsigned long long id = 0;
  CHECK_EQ_INT(is_capturing(s, &status), CUDA_SUCCESS);
  CHECK_EQ_INT(status, 0);
  CHECK_EQ_INT(begin(s, 0 /* GLOBAL */), CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s, 0), ERR_ILLEGAL_STATE);
  CHECK_EQ_INT(capture_info(s, &status, &id), CUDA_SUCCESS);
  CHECK(status == 1 && id != 0);
  CHECK_EQ_INT(host_func(s, bump, &count), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(k, 2, 1, 1, 32, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(host_func(s, bump, &count), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_INT(count, 0); /* recorded, not run */
  CUgraph g = NULL;
  CHECK_EQ_INT(end(s, &g), CUDA_SUCCESS);
  REQUIRE(g != NULL);
  CHECK_EQ_INT(is_capturing(s, &status), CUDA_SUCCESS);
  CHECK_EQ_INT(status, 0);
  /* Its nodes, as PyTorch counts them at the end of a capture: host, kernel,
   * host (CU_GRAPH_NODE_TYPE_HOST 3, KERNEL 0). */
  CUresult (*get_nodes)(CUgraph, void **, size_t *) =
      PROC(CUresult(*)(CUgraph, void **, size_t *), "cuGraphGetNodes", 10000);
  CUresult (*node_type)(void *, int *) =
      PROC(CUresult(*)(void *, int *), "cuGraphNodeGetType", 10000);
  REQUIRE(get_nodes && node_type);
  size_t nn = 0;
  CHECK_EQ_INT(get_nodes(g, NULL, &nn), CUDA_SUCCESS);
  CHECK_EQ_INT((int)nn, 3);
  void *nodes[4] = {0};
  nn = 4;
  CHECK_EQ_INT(get_nodes(g, nodes, &nn), CUDA_SUCCESS);
  CHECK_EQ_INT((int)nn, 3);
  CHECK(nodes[2] != NULL && nodes[3] == NULL);
  int types[3] = {-1, -1, -1};
  for (int i = 0; i < 3; i++)
    CHECK_EQ_INT(node_type(nodes[i], &types[i]), CUDA_SUCCESS);
  CHECK(types[0] == 3 && types[1] == 0 && types[2] == 3);
  CHECK_EQ_INT(node_type((char *)nodes[0] + 1, &types[0]), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(get_nodes((CUgraph)&nn, NULL, &nn), CUDA_ERROR_INVALID_VALUE);
  CUgraphExec x = NULL;
  CHECK_EQ_INT(instantiate(&x, g, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS); /* the exec keeps its own copy */
  CHECK_EQ_INT(upload(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(launch(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  CHECK_EQ_INT(count, 2);
  CHECK_EQ_INT(launch(x, NULL), CUDA_SUCCESS); /* on any stream */
  CHECK_EQ_INT(cu_cuStreamSynchronize(NULL), CUDA_SUCCESS);
  CHECK_EQ_INT(count, 4);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(exec_destroy(x), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(graph_destroy(g), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* An event recorded on a capturing stream is a node of the graph
 * (EVENT_RECORD, 7), recorded again at each replay; the capture goes on. */
static void test_event_record_is_captured(void) {
  CUstream s;
  CUevent e;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuEventCreate(&e, 0) == CUDA_SUCCESS);
  CUresult (*get_nodes)(CUgraph, void **, size_t *) =
      PROC(CUresult(*)(CUgraph, void **, size_t *), "cuGraphGetNodes", 10000);
  CUresult (*node_type)(void *, int *) =
      PROC(CUresult(*)(void *, int *), "cuGraphNodeGetType", 10000);
  REQUIRE(get_nodes && node_type);
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventRecord(e, s), CUDA_SUCCESS);
  int status = -1;
  CHECK_EQ_INT(is_capturing(s, &status), CUDA_SUCCESS);
  CHECK_EQ_INT(status, 1); /* still active */
  CUgraph g = NULL;
  CHECK_EQ_INT(end(s, &g), CUDA_SUCCESS);
  REQUIRE(g != NULL);
  void *node = NULL;
  size_t n = 1;
  int type = -1;
  CHECK_EQ_INT(get_nodes(g, &node, &n), CUDA_SUCCESS);
  CHECK_EQ_INT((int)n, 1);
  CHECK_EQ_INT(node_type(node, &type), CUDA_SUCCESS);
  CHECK_EQ_INT(type, 7);
  CUgraphExec x = NULL;
  CHECK_EQ_INT(instantiate(&x, g, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(launch(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventQuery(e), CUDA_SUCCESS);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventDestroy(e), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* What the driver refuses while capturing invalidates the capture. */
static void invalidated_by(const char *what, int which) {
  CUstream s;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  CUdeviceptr d;
  REQUIRE(cu_cuMemAlloc(&d, 4096) == CUDA_SUCCESS);
  char host[64] = {0};
  int count = 0, status = -1;
  CHECK_EQ_INT(begin(s, 2 /* RELAXED */), CUDA_SUCCESS);
  CUresult rc = which == 0   ? cu_cuStreamSynchronize(s)
                : which == 1 ? query(s)
                             : cu_cuMemcpyHtoDAsync(d, host, sizeof host, s);
  CHECK_MSG(rc == ERR_CAPTURE_UNSUPPORTED, "%s while capturing answered %d", what, (int)rc);
  CHECK_EQ_INT(is_capturing(s, &status), CUDA_SUCCESS);
  CHECK_EQ_INT(status, 2); /* invalidated */
  CHECK_EQ_INT(host_func(s, bump, &count), ERR_CAPTURE_INVALIDATED);
  CUgraph g = (CUgraph)1;
  CHECK_EQ_INT(end(s, &g), ERR_CAPTURE_INVALIDATED);
  CHECK(g == NULL);
  CHECK_EQ_INT(is_capturing(s, &status), CUDA_SUCCESS);
  CHECK_EQ_INT(status, 0);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS); /* usable again */
  CHECK_EQ_INT(count, 0);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

static void test_invalidation(void) {
  invalidated_by("cuStreamSynchronize", 0);
  invalidated_by("cuStreamQuery", 1);
  invalidated_by("cuMemcpyHtoDAsync", 2);
}

static void test_refusals(void) {
  CUgraph g = NULL;
  CHECK_EQ_INT(begin(NULL, 0), ERR_CAPTURE_UNSUPPORTED); /* the legacy stream */
  CHECK_EQ_INT(begin((CUstream)0x77, 0), CUDA_ERROR_INVALID_HANDLE);
  CUstream s;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s, 3), CUDA_ERROR_INVALID_VALUE); /* no such mode */
  CHECK_EQ_INT(end(s, &g), ERR_ILLEGAL_STATE);          /* not capturing */
  CHECK_EQ_INT(end(NULL, &g), ERR_ILLEGAL_STATE);
  /* A stream destroyed while capturing takes its capture with it. */
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_create(&g, 0), CUDA_SUCCESS);
  CUgraphExec x = NULL;
  CHECK_EQ_INT(instantiate(&x, g, 0), CUDA_SUCCESS); /* an empty graph */
  CHECK_EQ_INT(launch(x, NULL), CUDA_SUCCESS);
  /* No context: 201. */
  CUcontext cur = NULL;
  REQUIRE(cu_cuCtxPopCurrent(&cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(launch(x, NULL), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_EQ_INT(begin(NULL, 0), CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cu_cuCtxPushCurrent(cur) == CUDA_SUCCESS);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
}

static int child_uninit(void) {
  load();
  CUgraph g;
  if (graph_create(&g, 0) != CUDA_ERROR_NOT_INITIALIZED)
    return 10;
  if (begin(NULL, 0) != CUDA_ERROR_NOT_INITIALIZED)
    return 11;
  return 0;
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "uninit") ? child_uninit() : 99;
  load();
  make_fatbin();
  fgt_init_ctx();
  RUN(test_capture_and_replay);
  RUN(test_event_record_is_captured);
  RUN(test_invalidation);
  RUN(test_refusals);
  CHECK_EQ_INT(fgt_run_self("uninit", NULL), 0);
  return TEST_END();
}
