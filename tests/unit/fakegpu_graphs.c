/* Stream capture and graphs on the fake (tests/fakegpu/fakecuda_graph.c),
 * reached as the CUDA runtime reaches them (cuGetProcAddress_v2): a
 * capturing stream records host functions and kernels without running
 * them, a graph replays them at each launch; waiting on or querying a
 * capturing stream, or work the fake cannot record, answers 900 and
 * invalidates the capture (end: 901, no graph); the legacy stream cannot
 * capture (900); begin twice or end without begin: 401. Memsets and copies
 * between device memory are recorded as nodes; a stream waiting on an event
 * recorded in a capture joins it (fork), the origin waiting on the joined
 * stream's event merges it back (join): 904 if not, 903 for an end on the
 * joined stream, 905 across two captures, 907 querying a captured event;
 * the legacy stream's capture status while a blocking stream captures: 906.
 * cuGraphDebugDotPrint writes the nodes with the kernels' names. The fake's
 * rules: 3 before cuInit, 201 without a context. */
#include "fakegpu/fg_test.h"

#define PROC(type, name, version) ((type)fgt_proc(name, version))
#define ERR_ILLEGAL_STATE 401
#define ERR_CAPTURE_UNSUPPORTED 900
#define ERR_CAPTURE_INVALIDATED 901
#define ERR_CAPTURE_UNMATCHED 903
#define ERR_CAPTURE_UNJOINED 904
#define ERR_CAPTURE_ISOLATION 905
#define ERR_CAPTURE_IMPLICIT 906
#define ERR_CAPTURED_EVENT 907

typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void (*host_fn)(void *);

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
  CHECK_EQ_INT(end(s, &g), ERR_ILLEGAL_STATE);         /* not capturing */
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


static CUresult (*get_nodes_fn)(CUgraph, void **, size_t *);
static CUresult (*wait_event)(CUstream, CUevent, unsigned);
static CUresult (*node_type_fn)(void *, int *);

/* The node types of a graph, in order, written into types (up to max). */
static size_t graph_types(CUgraph g, int *types, size_t max) {
  void *nodes[16] = {0};
  size_t n = 16;
  REQUIRE(max <= 16);
  CHECK_EQ_INT(get_nodes_fn(g, nodes, &n), CUDA_SUCCESS);
  for (size_t i = 0; i < n && i < max; i++)
    CHECK_EQ_INT(node_type_fn(nodes[i], &types[i]), CUDA_SUCCESS);
  return n;
}

/* Memsets and device-to-device copies on a capturing stream are nodes
 * (MEMSET 2, MEMCPY 1) done at each replay, not at the call. */
static void test_memset_and_copy_are_captured(void) {
  CUresult (*memset32)(CUdeviceptr, unsigned, size_t, CUstream) =
      PROC(CUresult(*)(CUdeviceptr, unsigned, size_t, CUstream), "cuMemsetD32Async", 3020);
  CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t, CUstream) =
      PROC(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream), "cuMemcpyAsync", 4000);
  CUstream s;
  CUdeviceptr a, b;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemAlloc(&a, 4096) == CUDA_SUCCESS && cu_cuMemAlloc(&b, 4096) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemsetD8(a, 0, 4096) == CUDA_SUCCESS && cu_cuMemsetD8(b, 0, 4096) == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(memset32(a, 0x11223344u, 1024, s), CUDA_SUCCESS);
  CHECK_EQ_INT(copy(b, a, 4096, s), CUDA_SUCCESS);
  CHECK_MSG(memset32(a, 1, 2048, s) == CUDA_ERROR_INVALID_VALUE,
            "a captured memset past its allocation was not refused with 1");
  int status = -1;
  CHECK_EQ_INT(is_capturing(s, &status), CUDA_SUCCESS);
  CHECK_MSG(status == 1, "a captured memset or copy ended the capture (status %d)", status);
  uint32_t word = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&word, a, 4), CUDA_SUCCESS);
  CHECK_MSG(word == 0, "a captured memset was done at the call (0x%x)", word);
  CUgraph g = NULL;
  CHECK_EQ_INT(end(s, &g), CUDA_SUCCESS);
  REQUIRE(g != NULL);
  int types[2] = {-1, -1};
  CHECK_EQ_INT((int)graph_types(g, types, 2), 2);
  CHECK_MSG(types[0] == 2 && types[1] == 1, "node types %d, %d; want MEMSET 2, MEMCPY 1", types[0],
            types[1]);
  CUgraphExec x = NULL;
  CHECK_EQ_INT(instantiate(&x, g, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(launch(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&word, b + 4092, 4), CUDA_SUCCESS);
  CHECK_MSG(word == 0x11223344u, "the replay did not memset then copy (b ends 0x%x)", word);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(a), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(b), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* Fork and join across streams, as CuPy's and PyTorch's captures do. how:
 * 0 joined back (a graph), 1 never joined back (904), 2 end on the joined
 * stream (903, then 901 on the origin). Either way both streams leave it. */
static void fork_join(int how) {
  CUstream s1, s2;
  CUevent e1, e2;
  int count = 0, st = -1;
  unsigned long long id1 = 0, id2 = 0;
  REQUIRE(cu_cuStreamCreate(&s1, 1) == CUDA_SUCCESS && cu_cuStreamCreate(&s2, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuEventCreate(&e1, 0) == CUDA_SUCCESS && cu_cuEventCreate(&e2, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s1, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventRecord(e1, s1), CUDA_SUCCESS);
  CHECK_MSG(cu_cuEventQuery(e1) == ERR_CAPTURED_EVENT,
            "querying a captured event did not give 907");
  CHECK_EQ_INT(wait_event(s2, e1, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(capture_info(s2, &st, &id2), CUDA_SUCCESS);
  CHECK_EQ_INT(capture_info(s1, &st, &id1), CUDA_SUCCESS);
  CHECK_MSG(st == 1 && id1 == id2, "the waiting stream did not join the capture (ids %llu, %llu)",
            id1, id2);
  CHECK_EQ_INT(host_func(s2, bump, &count), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventRecord(e2, s2), CUDA_SUCCESS);
  CUgraph g = NULL;
  CUresult rc;
  if (how == 2) {
    CHECK_MSG((rc = end(s2, &g)) == ERR_CAPTURE_UNMATCHED, "end on the joined stream: %d", (int)rc);
    CHECK_MSG((rc = end(s1, &g)) == ERR_CAPTURE_INVALIDATED, "end after 903: %d", (int)rc);
  } else {
    if (how == 0)
      CHECK_EQ_INT(wait_event(s1, e2, 0), CUDA_SUCCESS);
    rc = end(s1, &g);
    CHECK_MSG(rc == (how == 0 ? CUDA_SUCCESS : ERR_CAPTURE_UNJOINED), "end (%s): %d",
              how == 0 ? "joined" : "unjoined", (int)rc);
  }
  CHECK_EQ_INT(is_capturing(s2, &st), CUDA_SUCCESS);
  CHECK_MSG(st == 0, "the joined stream still captures after the end (%d)", st);
  CHECK_EQ_INT(cu_cuEventQuery(e1), CUDA_SUCCESS); /* its capture is over */
  if (how == 0) {
    REQUIRE(g != NULL);
    CUgraphExec x = NULL;
    CHECK_EQ_INT(instantiate(&x, g, 0), CUDA_SUCCESS);
    CHECK_EQ_INT(launch(x, s1), CUDA_SUCCESS);
    CHECK_EQ_INT(cu_cuStreamSynchronize(s1), CUDA_SUCCESS);
    CHECK_MSG(count == 1, "the joined stream's host function ran %d times in a replay", count);
    CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
    CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  } else {
    CHECK(g == NULL);
  }
  CHECK_EQ_INT(cu_cuEventDestroy(e1), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventDestroy(e2), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s1), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s2), CUDA_SUCCESS);
}

static void test_fork_join(void) {
  fork_join(0);
  fork_join(1);
  fork_join(2);
}

/* A stream of one capture waiting on an event of another: 905. */
static void test_isolation(void) {
  CUstream s1, s2;
  CUevent e;
  REQUIRE(cu_cuStreamCreate(&s1, 1) == CUDA_SUCCESS && cu_cuStreamCreate(&s2, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuEventCreate(&e, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s1, 2), CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s2, 2), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventRecord(e, s1), CUDA_SUCCESS);
  CUresult rc = wait_event(s2, e, 0);
  CHECK_MSG(rc == ERR_CAPTURE_ISOLATION, "waiting across two captures answered %d", (int)rc);
  CUgraph g = NULL;
  CHECK_EQ_INT(end(s2, &g), ERR_CAPTURE_INVALIDATED);
  CHECK_EQ_INT(end(s1, &g), ERR_CAPTURE_INVALIDATED);
  CHECK_EQ_INT(cu_cuEventDestroy(e), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s1), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s2), CUDA_SUCCESS);
}

/* The legacy stream's capture status while a blocking stream captures: 906
 * (the capture goes on); a non-blocking one does not involve it. */
static void test_legacy_implicit(void) {
  CUstream blocking, nonblocking;
  REQUIRE(cu_cuStreamCreate(&blocking, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuStreamCreate(&nonblocking, 1) == CUDA_SUCCESS);
  int st = -1;
  CHECK_EQ_INT(begin(nonblocking, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(is_capturing(NULL, &st), CUDA_SUCCESS);
  CHECK_EQ_INT(begin(blocking, 2), CUDA_SUCCESS);
  CUresult rc = is_capturing(NULL, &st), rc1 = is_capturing((CUstream)1, &st);
  CHECK_MSG(rc == ERR_CAPTURE_IMPLICIT && rc1 == ERR_CAPTURE_IMPLICIT,
            "legacy stream's status while a blocking stream captures: %d, %d (want 906)", (int)rc,
            (int)rc1);
  CHECK_EQ_INT(is_capturing(blocking, &st), CUDA_SUCCESS);
  CHECK_EQ_INT(st, 1);
  CUgraph g1 = NULL, g2 = NULL;
  CHECK_EQ_INT(end(blocking, &g1), CUDA_SUCCESS);
  CHECK_EQ_INT(end(nonblocking, &g2), CUDA_SUCCESS);
  CHECK_EQ_INT(is_capturing(NULL, &st), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g1), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g2), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(blocking), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(nonblocking), CUDA_SUCCESS);
}

static size_t read_file(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = 0;
  return n;
}

/* cuGraphDebugDotPrint: the nodes with the kernel's name; verbose adds
 * the launch dimensions; a path it cannot write: 1. */
static void test_debug_dot_print(void) {
  CUresult (*dot)(CUgraph, const char *, unsigned) =
      PROC(CUresult(*)(CUgraph, const char *, unsigned), "cuGraphDebugDotPrint", 11030);
  CUstream s;
  CUmodule m;
  CUfunction k;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleLoadData(&m, g_fatbin) == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&k, m, "graph_kernel") == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuLaunchKernel(k, 3, 1, 1, 64, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
  CUgraph g = NULL;
  CHECK_EQ_INT(end(s, &g), CUDA_SUCCESS);
  char path[] = "/tmp/fakegpu_dotXXXXXX", plain[4096], verbose[4096];
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  CHECK_EQ_INT(dot(g, path, 0), CUDA_SUCCESS);
  read_file(path, plain, sizeof plain);
  CHECK_EQ_INT(dot(g, path, 1), CUDA_SUCCESS);
  read_file(path, verbose, sizeof verbose);
  unlink(path);
  CHECK_MSG(strstr(plain, "digraph") && strstr(plain, "graph_kernel"),
            "the DOT output lacks the graph or the kernel's name:\n%s", plain);
  CHECK_MSG(strstr(verbose, "graph_kernel") && strstr(verbose, "grid (3,1,1)") &&
                strcmp(plain, verbose) != 0,
            "the verbose DOT output lacks the launch dimensions:\n%s", verbose);
  CHECK_EQ_INT(dot(g, "/nonexistent-dir/x.dot", 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(dot((CUgraph)&fd, path, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuModuleUnload(m), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* The fake's graphs are chains in recorded order: root, edges, neighbours;
 * clone and find-in-clone; an exec's flags; a node turned off in an exec is
 * skipped at replay; memset, host and event-record node parameters. */
static void test_graph_queries(void) {
  typedef CUresult (*list_fn)(void *, void **, size_t *);
  list_fn roots = PROC(list_fn, "cuGraphGetRootNodes", 10000);
  list_fn deps = PROC(list_fn, "cuGraphNodeGetDependencies", 10000);
  list_fn dependents = PROC(list_fn, "cuGraphNodeGetDependentNodes", 10000);
  CUresult (*edges)(CUgraph, void **, void **, size_t *) =
      PROC(CUresult(*)(CUgraph, void **, void **, size_t *), "cuGraphGetEdges", 10000);
  CUresult (*clone)(CUgraph *, CUgraph) =
      PROC(CUresult(*)(CUgraph *, CUgraph), "cuGraphClone", 10000);
  CUresult (*find)(void **, void *, CUgraph) =
      PROC(CUresult(*)(void **, void *, CUgraph), "cuGraphNodeFindInClone", 10000);
  CUresult (*xflags)(CUgraphExec, unsigned long long *) =
      PROC(CUresult(*)(CUgraphExec, unsigned long long *), "cuGraphExecGetFlags", 12000);
  CUresult (*set_on)(CUgraphExec, void *, unsigned) =
      PROC(CUresult(*)(CUgraphExec, void *, unsigned), "cuGraphNodeSetEnabled", 11060);
  CUresult (*get_on)(CUgraphExec, void *, unsigned *) =
      PROC(CUresult(*)(CUgraphExec, void *, unsigned *), "cuGraphNodeGetEnabled", 11060);
  CUresult (*memset_params)(void *, void *) =
      PROC(CUresult(*)(void *, void *), "cuGraphMemsetNodeGetParams", 10000);
  CUresult (*host_params)(void *, void *) =
      PROC(CUresult(*)(void *, void *), "cuGraphHostNodeGetParams", 10000);
  CUresult (*memset32)(CUdeviceptr, unsigned, size_t, CUstream) =
      PROC(CUresult(*)(CUdeviceptr, unsigned, size_t, CUstream), "cuMemsetD32Async", 3020);
  CUstream s;
  CUdeviceptr d;
  int count = 0;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&d, 4096) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemsetD8(d, 0, 4096) == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(host_func(s, bump, &count), CUDA_SUCCESS);
  CHECK_EQ_INT(memset32(d, 7, 16, s), CUDA_SUCCESS);
  CUgraph g = NULL, c = NULL;
  CHECK_EQ_INT(end(s, &g), CUDA_SUCCESS);
  void *nodes[2] = {0}, *from[2] = {0}, *to[2] = {0}, *one[2] = {0};
  size_t n = 2;
  CHECK_EQ_INT(get_nodes_fn(g, nodes, &n), CUDA_SUCCESS);
  n = 2;
  CHECK_EQ_INT(roots(g, one, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 1 && one[0] == nodes[0], "roots: %zu, the first node? %d", n, one[0] == nodes[0]);
  n = 2;
  CHECK_EQ_INT(edges(g, from, to, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 1 && from[0] == nodes[0] && to[0] == nodes[1], "edges: %zu, not first->second", n);
  n = 1;
  CHECK_EQ_INT(deps(nodes[1], one, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 1 && one[0] == nodes[0], "the second node's dependency is not the first");
  CHECK_EQ_INT(dependents(nodes[1], NULL, &n), CUDA_SUCCESS);
  CHECK_MSG(n == 0, "the last node has %zu dependents", n);
  struct {
    void (*fn)(void *);
    void *user;
  } hp = {0};
  CHECK_EQ_INT(host_params(nodes[0], &hp), CUDA_SUCCESS);
  CHECK_MSG(hp.fn == bump && hp.user == &count, "host node parameters not given back");
  struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned value, elem;
    size_t width, height;
  } mp = {0};
  CHECK_EQ_INT(memset_params(nodes[1], &mp), CUDA_SUCCESS);
  CHECK_MSG(mp.dst == d && mp.value == 7 && mp.elem == 4 && mp.width == 16 && mp.height == 1,
            "memset node parameters: dst ok %d value %u elem %u width %zu", mp.dst == d, mp.value,
            mp.elem, mp.width);
  CHECK_EQ_INT(memset_params(nodes[0], &mp), CUDA_ERROR_INVALID_VALUE); /* a host node */
  CHECK_EQ_INT(clone(&c, g), CUDA_SUCCESS);
  void *in_clone = NULL;
  CHECK_EQ_INT(find(&in_clone, nodes[1], c), CUDA_SUCCESS);
  CHECK_MSG(in_clone && in_clone != nodes[1], "the clone's node is the original's");
  CHECK_EQ_INT(find(&in_clone, nodes[1], g), CUDA_ERROR_INVALID_VALUE); /* g is no clone */
  CUgraphExec x = NULL;
  unsigned long long fl = 99;
  unsigned on = 9;
  CHECK_EQ_INT(instantiate(&x, c, 1 /* AUTO_FREE_ON_LAUNCH */), CUDA_SUCCESS);
  CHECK_EQ_INT(xflags(x, &fl), CUDA_SUCCESS);
  CHECK_MSG(fl == 1, "exec flags %llu, want 1", fl);
  CHECK_EQ_INT(set_on(x, nodes[1], 0), CUDA_ERROR_INVALID_VALUE); /* not of the clone */
  CHECK_EQ_INT(set_on(x, in_clone, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(get_on(x, in_clone, &on), CUDA_SUCCESS);
  CHECK_EQ_INT((int)on, 0);
  CHECK_EQ_INT(launch(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  uint32_t word = 1;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&word, d, 4), CUDA_SUCCESS);
  CHECK_MSG(word == 0 && count == 1,
            "a disabled memset node ran (0x%x) or the host node did not (%d)", word, count);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(c), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* Node parameters changed in the graph and in an exec's copy: the replay
 * does what was set last (memset value and size, host function argument,
 * event recorded), and bad values are refused with 1. */
static void test_node_set_params(void) {
  typedef struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned value, elem;
    size_t width, height;
  } ms_t;
  typedef struct {
    void (*fn)(void *);
    void *user;
  } host_t;
  CUresult (*ms_set)(void *, const ms_t *) =
      PROC(CUresult(*)(void *, const ms_t *), "cuGraphMemsetNodeSetParams", 10000);
  CUresult (*host_set)(void *, const host_t *) =
      PROC(CUresult(*)(void *, const host_t *), "cuGraphHostNodeSetParams", 10000);
  CUresult (*x_ms_set)(CUgraphExec, void *, const ms_t *, CUcontext) =
      PROC(CUresult(*)(CUgraphExec, void *, const ms_t *, CUcontext),
           "cuGraphExecMemsetNodeSetParams", 10020);
  CUresult (*x_host_set)(CUgraphExec, void *, const host_t *) =
      PROC(CUresult(*)(CUgraphExec, void *, const host_t *), "cuGraphExecHostNodeSetParams", 10020);
  CUresult (*ev_set)(void *, CUevent) =
      PROC(CUresult(*)(void *, CUevent), "cuGraphEventRecordNodeSetEvent", 11010);
  CUresult (*x_ev_set)(CUgraphExec, void *, CUevent) =
      PROC(CUresult(*)(CUgraphExec, void *, CUevent), "cuGraphExecEventRecordNodeSetEvent", 11010);
  CUresult (*memset32)(CUdeviceptr, unsigned, size_t, CUstream) =
      PROC(CUresult(*)(CUdeviceptr, unsigned, size_t, CUstream), "cuMemsetD32Async", 3020);
  CUstream s;
  CUdeviceptr d;
  CUevent e1, e2;
  int a = 0, b = 0;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&d, 4096) == CUDA_SUCCESS);
  REQUIRE(cu_cuEventCreate(&e1, 0) == CUDA_SUCCESS && cu_cuEventCreate(&e2, 0) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemsetD8(d, 0, 4096) == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(memset32(d, 1, 4, s), CUDA_SUCCESS);
  CHECK_EQ_INT(host_func(s, bump, &a), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventRecord(e1, s), CUDA_SUCCESS);
  CUgraph g = NULL;
  CHECK_EQ_INT(end(s, &g), CUDA_SUCCESS);
  void *nodes[3] = {0};
  size_t n = 3;
  CHECK_EQ_INT(get_nodes_fn(g, nodes, &n), CUDA_SUCCESS);
  ms_t ms = {d, 64, 0x0a0b0c0du, 4, 16, 1};
  CHECK_EQ_INT(ms_set(nodes[0], &ms), CUDA_SUCCESS);
  ms_t bad = ms;
  bad.elem = 3;
  CHECK_EQ_INT(ms_set(nodes[0], &bad), CUDA_ERROR_INVALID_VALUE);
  bad = ms;
  bad.width = 2048; /* 8 KiB in a 4 KiB allocation */
  CHECK_EQ_INT(ms_set(nodes[0], &bad), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(ms_set(nodes[1], &ms), CUDA_ERROR_INVALID_VALUE); /* a host node */
  host_t hp = {bump, &b};
  CHECK_EQ_INT(host_set(nodes[1], &hp), CUDA_SUCCESS);
  CHECK_EQ_INT(ev_set(nodes[2], e2), CUDA_SUCCESS);
  CUgraphExec x = NULL;
  CHECK_EQ_INT(instantiate(&x, g, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(launch(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  uint32_t w = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&w, d + 60, 4), CUDA_SUCCESS);
  CHECK_MSG(w == 0x0a0b0c0du && a == 0 && b == 1,
            "the replay did not use the new parameters (word 0x%x, old host fn %d, new %d)", w, a,
            b);
  ms.value = 0x55u;
  CHECK_EQ_INT(x_ms_set(x, nodes[0], &ms, NULL), CUDA_SUCCESS);
  hp.user = &a;
  CHECK_EQ_INT(x_host_set(x, nodes[1], &hp), CUDA_SUCCESS);
  CHECK_EQ_INT(x_ev_set(x, nodes[2], e1), CUDA_SUCCESS);
  CHECK_EQ_INT(x_ev_set(x, nodes[2], (CUevent)&w), CUDA_ERROR_INVALID_HANDLE);
  CHECK_EQ_INT(launch(x, s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamSynchronize(s), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&w, d, 4), CUDA_SUCCESS);
  CHECK_MSG(w == 0x55u && a == 1 && b == 1,
            "the exec's new parameters were not used (0x%x, %d, %d)", w, a, b);
  CHECK_EQ_INT(exec_destroy(x), CUDA_SUCCESS);
  CHECK_EQ_INT(graph_destroy(g), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventDestroy(e1), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuEventDestroy(e2), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
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
  get_nodes_fn = PROC(CUresult(*)(CUgraph, void **, size_t *), "cuGraphGetNodes", 10000);
  node_type_fn = PROC(CUresult(*)(void *, int *), "cuGraphNodeGetType", 10000);
  wait_event = PROC(CUresult(*)(CUstream, CUevent, unsigned), "cuStreamWaitEvent", 3020);
  RUN(test_memset_and_copy_are_captured);
  RUN(test_fork_join);
  RUN(test_isolation);
  RUN(test_legacy_implicit);
  RUN(test_debug_dot_print);
  RUN(test_graph_queries);
  RUN(test_node_set_params);
  CHECK_EQ_INT(fgt_run_self("uninit", NULL), 0);
  return TEST_END();
}
