/* What the graph files share (fakecuda_graph.c: stream capture;
 * fakecuda_graphnode.c: graphs built node by node, queries, clone;
 * fakecuda_graphexec.c: instantiate, launch, update). Callers hold fk_lock
 * unless said.
 *
 * A graph owns its nodes in the order they were made (capture or
 * cuGraphAdd*Node); each node lists the nodes it depends on. A node handle
 * (CUgraphNode) is its fk_gnode, known by a map of live nodes. An exec is a
 * copy of the nodes in an order that respects every dependency; each copy
 * remembers the graph node it came from (compared only). */
#ifndef FAKEGPU_FAKECUDA_GRAPH_H
#define FAKEGPU_FAKECUDA_GRAPH_H

#include "fakecuda.h"

/* Node kinds (FK_NODE_*) and the driver's CU_GRAPH_NODE_TYPE_* for each. */
enum {
  FK_NODE_KERNEL = 1,
  FK_NODE_HOST,
  FK_NODE_EVENT,
  FK_NODE_MEMSET,
  FK_NODE_MEMCPY,
  FK_NODE_EMPTY,
  FK_NODE_WAIT
};
#define FK_ERR_EXEC_UPDATE ((CUresult)910) /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE */

/* CUDA_MEMCPY3D's layout (cuda.h, _v2). */
typedef struct fk_copy3d {
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  int srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  void *srcArray, *reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  void *dstArray, *reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
} fk_copy3d;

/* CUDA_MEMSET_NODE_PARAMS and CUDA_HOST_NODE_PARAMS. */
typedef struct {
  CUdeviceptr dst;
  size_t pitch;
  unsigned int value, elementSize;
  size_t width, height;
} fk_memset_params;
typedef struct {
  CUhostFn fn;
  void *userData;
} fk_host_params;

/* One piece of work. Kernel: the launch handle (CUfunction or CUkernel),
 * grid and block, shared memory, and its arguments packed as `extra`'s
 * buffer would hold them (args, args_n; args_known 0: not kept, a kernel
 * with no host twin whose layout is unknown); argv: kernelParams pointing
 * into args, made for cuGraphKernelNodeGetParams. Memcpy: one1d, a copy of
 * count bytes from src to dst (a capture), else copy (a 3D descriptor). */
typedef struct fk_node {
  int type;
  void *fn;
  void *kern, *kctx; /* kernel: the CUkernel and context of a _v2 struct, given back */
  unsigned dims[6];
  unsigned shmem;
  unsigned char *args;
  size_t args_n;
  int args_known;
  void **argv;
  CUhostFn host;
  void *user; /* host: its argument; event record and wait: the event */
  uint64_t dst, src;
  size_t count;   /* memset: elements per row; memcpy (one1d): bytes */
  size_t pitch;   /* memset: bytes between rows */
  size_t height;  /* memset: rows */
  unsigned width; /* memset: bytes per element */
  uint32_t value;
  int one1d;
  fk_copy3d copy;
  int disabled; /* in an exec: cuGraphNodeSetEnabled(0) */
} fk_node;

/* A growable list of nodes by value: a capture's recorded work. */
typedef struct fk_nodes {
  fk_node *v;
  size_t n, cap;
} fk_nodes;

#define FK_GNODE_MAGIC 0x6e0de00u
typedef struct fk_gnode {
  uint32_t magic;
  struct CUgraph_st *graph;
  size_t index; /* its place in the graph's list */
  fk_node n;
  struct fk_gnode **deps;
  size_t ndeps;
} fk_gnode;

#define FK_GRAPH_MAGIC 0x67a9400u
struct CUgraph_st {
  uint32_t magic;
  fk_gnode **v; /* in the order made */
  size_t n, cap;
  const struct CUgraph_st *origin; /* cuGraphClone: the graph cloned (compared only) */
  struct CUgraph_st *next;
};

#define FK_EXEC_MAGIC 0x67a9e00u
struct fk_graph_exec {
  uint32_t magic;
  fk_node *work;        /* in an order that respects every dependency */
  const fk_gnode **src; /* the graph node of each (compared only) */
  size_t *gidx;         /* the place of each in that graph */
  size_t n;
  size_t *edges; /* the graph's edges as places (from, to), sorted: cuGraphExecUpdate */
  size_t nedges;
  const struct CUgraph_st *from; /* the graph instantiated (compared only) */
  unsigned long long flags;
  struct fk_graph_exec *next;
};

/* Nodes: a deep copy (its arguments too; 0 without memory), freeing what a
 * node owns, appending a copy to a list. */
int fk_node_copy(fk_node *dst, const fk_node *src);
void fk_node_clear(fk_node *n);
int fk_nodes_add(fk_nodes *l, const fk_node *n);
/* A kernel node's function, launch dimensions and arguments (either form)
 * into n (its old arguments freed): 1 for bad dimensions or arguments,
 * 400 for a handle that is no function, 201 without a context. */
CUresult fk_node_set_kernel(fk_node *n, void *f, const unsigned dims[6], unsigned shmem,
                            void **params, void **extra, struct CUctx_st *ctx);
/* A new, empty graph, listed (NULL without memory). */
struct CUgraph_st *fk_graph_new(void);
/* Appends a node (a deep copy of n) depending on deps[0..nd-1] of g: the
 * new node, or NULL without memory. */
fk_gnode *fk_graph_append(struct CUgraph_st *g, const fk_node *n, fk_gnode *const *deps, size_t nd);
/* Unlists and frees a graph and its nodes (its user objects are the
 * caller's: fk_graph_user_objects_gone, without fk_lock). */
void fk_graph_free(struct CUgraph_st *g);
/* Frees a node (unlisted from the live nodes; its graph's list is the
 * caller's). */
void fk_gnode_free(fk_gnode *gn);
/* Node parameters by kind (FK_NODE_HOST, MEMSET, MEMCPY, EVENT, WAIT),
 * checked, into n (1 when n is of another kind). */
CUresult fk_node_set(fk_node *n, int kind, const void *in);
/* Sets the parameters of a graph's node (exec NULL) or of an exec's copy
 * of it; kind FK_NODE_KERNEL: v2 tells the struct's version. Takes
 * fk_lock. */
CUresult fk_node_params_set(CUgraphExec exec, CUgraphNode node, int kind, const void *in, int v2);
/* The live graph g, the live node h (NULL if not one). */
struct CUgraph_st *fk_graph_check(CUgraph g);
fk_gnode *fk_gnode_check(CUgraphNode h);
/* The driver's CU_GRAPH_NODE_TYPE_* of a node. */
int fk_node_type(const fk_node *n);
/* The live exec e (NULL if not one); its copy of graph node h (NULL when h
 * is not a node of the graph e was made from). */
struct fk_graph_exec *fk_exec_check(CUgraphExec e);
fk_node *fk_exec_node(struct fk_graph_exec *e, CUgraphNode h);

#endif
