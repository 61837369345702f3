/* CUDA graphs built node by node, and what can be asked of them.
 *
 * A graph owns its nodes in the order they were made; each node lists the
 * nodes it depends on (fakecuda_graph.h). cuGraphCreate makes an empty one;
 * cuGraphAddKernelNode(_v2), cuGraphAddMemcpyNode, cuGraphAddMemsetNode,
 * cuGraphAddHostNode, cuGraphAddEmptyNode, cuGraphAddEventRecordNode and
 * cuGraphAddEventWaitNode add a node depending on the nodes given (each a
 * node of that graph, none twice: 1 otherwise); cuGraphAddDependencies and
 * cuGraphRemoveDependencies add and remove edges (an edge already there,
 * or one that is not, a node of another graph: 1). A kernel node keeps a
 * copy of its arguments, read by the kernel's parameter layout (from its
 * image) or from `extra`'s buffer; kernelParams of a kernel whose layout the
 * fake cannot read (a module of host twins only) cannot be copied: 1, the
 * reason on stderr. Queries (nodes in the order made, roots, edges,
 * dependencies and dependents, with edge data in the _v2 forms: every edge
 * is the default one, other edge data is refused with 1), clone and
 * find-in-clone, node parameters got and set, and cuGraphDebugDotPrint.
 * Replay is fakecuda_graphexec.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_graph.h"

FK_API CUresult cuGraphDestroy(CUgraph graph);

static struct CUgraph_st *g_graphs;
static fk_hmap g_node_map; /* live node -> itself */

/* --- nodes ------------------------------------------------------------------ */
void fk_node_clear(fk_node *n) {
  free(n->args);
  free(n->argv);
  n->args = NULL;
  n->argv = NULL;
  n->args_n = 0;
}

int fk_node_copy(fk_node *dst, const fk_node *src) {
  *dst = *src;
  dst->argv = NULL;
  if (!src->args_n)
    return 1;
  if (!(dst->args = malloc(src->args_n)))
    return 0;
  memcpy(dst->args, src->args, src->args_n);
  return 1;
}

int fk_nodes_add(fk_nodes *l, const fk_node *n) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 8;
    fk_node *v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return 0;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *n;
  return 1;
}

int fk_node_type(const fk_node *n) {
  switch (n->type) {
  case FK_NODE_MEMCPY: return 1;
  case FK_NODE_MEMSET: return 2;
  case FK_NODE_HOST: return 3;
  case FK_NODE_EMPTY: return 5;
  case FK_NODE_WAIT: return 6;
  case FK_NODE_EVENT: return 7;
  default: return 0; /* CU_GRAPH_NODE_TYPE_KERNEL */
  }
}

CUresult fk_node_set_kernel(fk_node *n, void *f, const unsigned dims[6], unsigned shmem,
                            void **params, void **extra, struct CUctx_st *ctx) {
  for (int i = 0; i < 6; i++)
    if (!dims[i])
      return CUDA_ERROR_INVALID_VALUE;
  fk_obj *fn = f ? fk_launch_function(f, ctx) : NULL;
  if (!fn)
    return CUDA_ERROR_INVALID_HANDLE;
  unsigned char *args = NULL;
  size_t args_n = 0;
  int known = 1;
  CUresult rc = fk_params_pack(fn, params, extra, &args, &args_n);
  if (rc == CUDA_ERROR_NOT_FOUND && fn->noop) {
    known = 0; /* no twin reads them: the node replays as a no-op */
  } else if (rc == CUDA_ERROR_NOT_FOUND) {
    fprintf(stderr,
            "fakegpu: kernel '%.200s': its parameter layout is unknown (a module of host twins "
            "only has no image to read it from), so a graph node cannot copy its kernelParams; "
            "pass the arguments in `extra` or load the kernel from a real image\n",
            fn->name ? fn->name : "?");
    return CUDA_ERROR_INVALID_VALUE;
  } else if (rc != CUDA_SUCCESS) {
    return rc;
  }
  fk_node_clear(n);
  n->type = FK_NODE_KERNEL;
  n->fn = f;
  memcpy(n->dims, dims, sizeof n->dims);
  n->shmem = shmem;
  n->args = args;
  n->args_n = args_n;
  n->args_known = known;
  return CUDA_SUCCESS;
}

/* --- graphs ----------------------------------------------------------------- */
struct CUgraph_st *fk_graph_check(CUgraph g) {
  for (struct CUgraph_st *x = g_graphs; x; x = x->next)
    if (x == g && x->magic == FK_GRAPH_MAGIC)
      return x;
  return NULL;
}

int fk_graph_live(CUgraph graph) { return fk_graph_check(graph) != NULL; }

fk_gnode *fk_gnode_check(CUgraphNode h) {
  fk_gnode *gn = h ? fk_hmap_get(&g_node_map, (uintptr_t)h, 0, NULL) : NULL;
  return gn && gn->magic == FK_GNODE_MAGIC ? gn : NULL;
}

struct CUgraph_st *fk_graph_new(void) {
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->magic = FK_GRAPH_MAGIC;
  g->next = g_graphs;
  g_graphs = g;
  return g;
}

void fk_gnode_free(fk_gnode *gn) {
  fk_hmap_del(&g_node_map, (uintptr_t)gn, 0, NULL, gn);
  fk_node_clear(&gn->n);
  free(gn->deps);
  gn->magic = 0;
  free(gn);
}

void fk_graph_free(struct CUgraph_st *g) {
  for (struct CUgraph_st **pp = &g_graphs; *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      break;
    }
  for (size_t i = 0; i < g->n; i++)
    fk_gnode_free(g->v[i]);
  free(g->v);
  g->magic = 0;
  free(g);
}

fk_gnode *fk_graph_append(struct CUgraph_st *g, const fk_node *n, fk_gnode *const *deps,
                          size_t nd) {
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 8;
    fk_gnode **v = realloc(g->v, cap * sizeof *v);
    if (!v)
      return NULL;
    g->v = v;
    g->cap = cap;
  }
  fk_gnode *gn = calloc(1, sizeof *gn);
  if (!gn || (nd && !(gn->deps = malloc(nd * sizeof *gn->deps))) || !fk_node_copy(&gn->n, n) ||
      fk_hmap_put(&g_node_map, (uintptr_t)gn, 0, NULL, gn) < 0) {
    if (gn)
      fk_node_clear(&gn->n), free(gn->deps);
    free(gn);
    return NULL;
  }
  gn->magic = FK_GNODE_MAGIC;
  gn->graph = g;
  gn->index = g->n;
  if (nd)
    memcpy(gn->deps, deps, nd * sizeof *deps);
  gn->ndeps = nd;
  g->v[g->n++] = gn;
  return gn;
}

FK_API CUresult cuGraphCreate(CUgraph *graph, unsigned int flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!graph || flags)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  struct CUgraph_st *g = fk_graph_new();
  fk_unlock();
  if (!g)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *graph = g;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphDestroy(CUgraph graph) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = fk_graph_check(graph);
  for (struct CUgraph_st **pp = &g_graphs; g && *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next; /* unlisted: no other call finds it now */
      break;
    }
  fk_unlock();
  if (!g)
    return CUDA_ERROR_INVALID_VALUE;
  fk_graph_user_objects_gone(g); /* its user objects' references */
  fk_lock();
  fk_graph_free(g);
  fk_unlock();
  return CUDA_SUCCESS;
}

/* --- adding nodes ------------------------------------------------------------ */
/* deps[0..nd-1]: live nodes of g, none twice; they go to out. */
static CUresult deps_ok(const struct CUgraph_st *g, const CUgraphNode *deps, size_t nd,
                        fk_gnode **out) {
  if (nd && !deps)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < nd; i++) {
    fk_gnode *d = fk_gnode_check(deps[i]);
    if (!d || d->graph != g)
      return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; j++)
      if (out[j] == d)
        return CUDA_ERROR_INVALID_VALUE;
    out[i] = d;
  }
  return CUDA_SUCCESS;
}

/* Adds node n (taken over: its arguments are freed on failure) to graph. */
static CUresult add_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t nd,
                         fk_node *n) {
  struct CUgraph_st *g = fk_graph_check(graph);
  fk_gnode **d = nd ? calloc(nd, sizeof *d) : NULL, *gn = NULL;
  CUresult rc = !out || !g ? CUDA_ERROR_INVALID_VALUE
                : nd && !d ? CUDA_ERROR_OUT_OF_MEMORY
                           : deps_ok(g, deps, nd, d);
  if (rc == CUDA_SUCCESS && !(gn = fk_graph_append(g, n, d, nd)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (rc == CUDA_SUCCESS)
    *out = (CUgraphNode)(void *)gn;
  free(d);
  fk_node_clear(n);
  return rc;
}

/* CUDA_KERNEL_NODE_PARAMS (v1: up to extra; v2 adds kern and ctx). */
typedef struct {
  void *func;
  unsigned dims[6];
  unsigned shmem;
  void **params;
  void **extra;
  void *kern;
  CUcontext ctx;
} fk_kernel_params;

/* The kernel of p (v2: kern when func is NULL) in p's context (v2) or the
 * current one, into n. Caller holds fk_lock. */
static CUresult kernel_from(fk_node *n, const fk_kernel_params *p, int v2) {
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc)
    return rc;
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  if (v2 && p->ctx && (rc = fk_ctx_usable(p->ctx)) != CUDA_SUCCESS)
    return rc;
  void *f = p->func ? p->func : v2 ? p->kern : NULL;
  rc = fk_node_set_kernel(n, f, p->dims, p->shmem, p->params, p->extra, v2 && p->ctx ? p->ctx : c);
  if (rc == CUDA_SUCCESS) { /* given back as they came (the runtime maps kern to its stub) */
    n->kern = v2 ? p->kern : NULL;
    n->kctx = v2 ? p->ctx : NULL;
  }
  return rc;
}

static CUresult add_kernel(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
                           const void *params, int v2) {
  fk_node n = {0};
  fk_lock();
  CUresult rc = kernel_from(&n, params, v2);
  if (rc == CUDA_SUCCESS)
    rc = add_node(out, g, deps, nd, &n);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                     size_t nd, const void *params) {
  return add_kernel(out, g, deps, nd, params, 0);
}
FK_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                        size_t nd, const void *params) {
  return add_kernel(out, g, deps, nd, params, 1);
}

static CUresult add_simple(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
                           int kind, const void *params) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_node n = {.type = kind};
  fk_lock();
  if (kind == FK_NODE_MEMCPY || kind == FK_NODE_MEMSET) {
    struct CUctx_st *c;
    rc = fk_need_ctx(&c);
  }
  if (rc == CUDA_SUCCESS && kind != FK_NODE_EMPTY)
    rc = fk_node_set(&n, kind, params);
  if (rc == CUDA_SUCCESS)
    rc = add_node(out, g, deps, nd, &n);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                     size_t nd, const void *copy, CUcontext ctx) {
  (void)ctx;
  return add_simple(out, g, deps, nd, FK_NODE_MEMCPY, copy);
}
FK_API CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                     size_t nd, const void *params, CUcontext ctx) {
  (void)ctx;
  return add_simple(out, g, deps, nd, FK_NODE_MEMSET, params);
}
FK_API CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
                                   const void *params) {
  return add_simple(out, g, deps, nd, FK_NODE_HOST, params);
}
FK_API CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                    size_t nd) {
  return add_simple(out, g, deps, nd, FK_NODE_EMPTY, NULL);
}
FK_API CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                          size_t nd, CUevent e) {
  return add_simple(out, g, deps, nd, FK_NODE_EVENT, &e);
}
FK_API CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                        size_t nd, CUevent e) {
  return add_simple(out, g, deps, nd, FK_NODE_WAIT, &e);
}

/* --- edges ------------------------------------------------------------------- */
static int has_dep(const fk_gnode *to, const fk_gnode *from) {
  for (size_t i = 0; i < to->ndeps; i++)
    if (to->deps[i] == from)
      return 1;
  return 0;
}

/* Edge data other than the default edge (all zero): not supported (1). */
static int edges_default(const void *edge_data, size_t n) {
  const unsigned char *b = edge_data;
  for (size_t i = 0; b && i < 8 * n; i++)
    if (b[i])
      return 0;
  return 1;
}

/* add 1: add the edges from[i] -> to[i]; 0: remove them. All are checked
 * before any is changed. */
static CUresult edges_change(CUgraph graph, const CUgraphNode *from, const CUgraphNode *to,
                             const void *edge_data, size_t n, int add) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = fk_graph_check(graph);
  if (!g || (n && (!from || !to)) || !edges_default(edge_data, n))
    rc = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
    fk_gnode *a = fk_gnode_check(from[i]), *b = fk_gnode_check(to[i]);
    int twice = 0;
    for (size_t j = 0; a && b && j < i; j++)
      twice |= from[j] == from[i] && to[j] == to[i];
    if (!a || !b || a == b || a->graph != g || b->graph != g || twice || has_dep(b, a) != !add)
      rc = CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
    fk_gnode *a = fk_gnode_check(from[i]), *b = fk_gnode_check(to[i]);
    if (add) {
      fk_gnode **d = realloc(b->deps, (b->ndeps + 1) * sizeof *d);
      if (!d) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        break;
      }
      b->deps = d;
      b->deps[b->ndeps++] = a;
    } else {
      size_t k = 0;
      while (b->deps[k] != a)
        k++;
      memmove(&b->deps[k], &b->deps[k + 1], (b->ndeps - k - 1) * sizeof *b->deps);
      b->ndeps--;
    }
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                       size_t n) {
  return edges_change(g, from, to, NULL, n, 1);
}
FK_API CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                          const void *edge_data, size_t n) {
  return edges_change(g, from, to, edge_data, n, 1);
}
FK_API CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                          size_t n) {
  return edges_change(g, from, to, NULL, n, 0);
}
FK_API CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode *from,
                                             const CUgraphNode *to, const void *edge_data,
                                             size_t n) {
  return edges_change(g, from, to, edge_data, n, 0);
}

/* --- node parameters ----------------------------------------------------------
 * Host nodes take a function (not NULL) and its argument; memset nodes a
 * destination, value, element size (1, 2 or 4), width in elements, height
 * and pitch (at least a row, for more than one row), the whole area inside
 * one allocation; memcpy nodes a CUDA_MEMCPY3D (checked when the copy
 * runs, as cuMemcpy3DAsync checks it); event nodes a live event. 1 for
 * anything else, 400 for a dead event. */
static CUresult memset_set(fk_node *n, const fk_memset_params *p) {
  unsigned w = p->elementSize;
  size_t rows = p->height, row = p->width * w;
  if ((w != 1 && w != 2 && w != 4) || !rows || p->dst % w || (p->width && row / w != p->width) ||
      (rows > 1 && p->pitch < row))
    return CUDA_ERROR_INVALID_VALUE;
  size_t span = rows > 1 ? (rows - 1) * p->pitch + row : row;
  if (p->width && !fk_mem_range_ok(p->dst, span))
    return CUDA_ERROR_INVALID_VALUE;
  n->dst = p->dst;
  n->value = p->value;
  n->width = w;
  n->count = p->width;
  n->height = rows;
  n->pitch = rows > 1 ? p->pitch : row;
  return CUDA_SUCCESS;
}

CUresult fk_node_set(fk_node *n, int kind, const void *in) {
  if (!n || !in || n->type != kind)
    return CUDA_ERROR_INVALID_VALUE;
  if (kind == FK_NODE_HOST) {
    const fk_host_params *p = in;
    if (!p->fn)
      return CUDA_ERROR_INVALID_VALUE;
    n->host = p->fn;
    n->user = p->userData;
  } else if (kind == FK_NODE_MEMSET) {
    return memset_set(n, in);
  } else if (kind == FK_NODE_MEMCPY) {
    memcpy(&n->copy, in, sizeof n->copy);
    n->one1d = 0;
  } else if (kind == FK_NODE_EVENT || kind == FK_NODE_WAIT) {
    if (!fk_obj_check(*(CUevent const *)in, FK_OBJ_EVENT))
      return CUDA_ERROR_INVALID_HANDLE;
    n->user = *(CUevent const *)in;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* A captured 1D copy as a CUDA_MEMCPY3D (unified addressing both sides). */
static void copy_as_3d(const fk_node *n, fk_copy3d *c) {
  if (!n->one1d) {
    *c = n->copy;
    return;
  }
  memset(c, 0, sizeof *c);
  c->srcMemoryType = c->dstMemoryType = 4; /* CU_MEMORYTYPE_UNIFIED */
  c->srcDevice = n->src;
  c->dstDevice = n->dst;
  c->WidthInBytes = n->count;
  c->Height = c->Depth = 1;
}

/* kernelParams pointing into the node's copy of the arguments, made once
 * (NULL when the fake keeps none, or cannot lay them out). */
static void **kernel_argv(fk_node *n) {
  struct CUctx_st *c = fk_current();
  fk_obj *fn = c && n->args_n ? fk_launch_function(n->fn, c) : NULL;
  if (!n->argv && fn) {
    size_t size = n->args_n;
    void *extra[] = {(void *)1, n->args, (void *)2, &size, NULL};
    if (fk_params_unpack(fn, extra, &n->argv) != CUDA_SUCCESS)
      n->argv = NULL;
  }
  return n->argv;
}

/* A node's parameters by kind; 1 for a node of another kind. */
static CUresult node_get(CUgraphNode node, int want, void *out, int v2) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_gnode *gn = fk_gnode_check(node);
  fk_node *n = gn ? &gn->n : NULL;
  if (!n || !out || n->type != want) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (want == FK_NODE_MEMSET) {
    fk_memset_params p = {n->dst, n->pitch, n->value, n->width, n->count, n->height};
    memcpy(out, &p, sizeof p);
  } else if (want == FK_NODE_HOST) {
    fk_host_params p = {n->host, n->user};
    memcpy(out, &p, sizeof p);
  } else if (want == FK_NODE_MEMCPY) {
    copy_as_3d(n, out);
  } else if (want == FK_NODE_KERNEL) {
    fk_kernel_params p =
        {n->fn, {0}, n->shmem, kernel_argv(n), NULL, n->kern, n->kctx ? n->kctx : fk_current()};
    memcpy(p.dims, n->dims, sizeof p.dims);
    memcpy(out, &p, v2 ? sizeof p : offsetof(fk_kernel_params, kern));
  } else {
    *(CUevent *)out = (CUevent)n->user;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, void *params) {
  return node_get(node, FK_NODE_MEMSET, params, 0);
}
FK_API CUresult cuGraphHostNodeGetParams(CUgraphNode node, void *params) {
  return node_get(node, FK_NODE_HOST, params, 0);
}
FK_API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, void *params) {
  return node_get(node, FK_NODE_MEMCPY, params, 0);
}
FK_API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent *event) {
  return node_get(node, FK_NODE_EVENT, event, 0);
}
FK_API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent *event) {
  return node_get(node, FK_NODE_WAIT, event, 0);
}
FK_API CUresult cuGraphKernelNodeGetParams(CUgraphNode node, void *params) {
  return node_get(node, FK_NODE_KERNEL, params, 0);
}
FK_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, void *params) {
  return node_get(node, FK_NODE_KERNEL, params, 1);
}

/* A graph's node (exec NULL) or an exec's copy of it; NULL when either is
 * not one (fk_lock held). */
static fk_node *node_of(CUgraphExec exec, CUgraphNode node) {
  if (!exec) {
    fk_gnode *gn = fk_gnode_check(node);
    return gn ? &gn->n : NULL;
  }
  struct fk_graph_exec *e = fk_exec_check(exec);
  return e ? fk_exec_node(e, node) : NULL;
}

/* Sets parameters of a graph's node (exec NULL) or of an exec's copy of it
 * (fakecuda_graphexec.c: the node must be of the graph the exec was made
 * from). kind FK_NODE_KERNEL: v2 tells the struct's version. */
CUresult fk_node_params_set(CUgraphExec exec, CUgraphNode node, int kind, const void *in, int v2) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_node *n = node_of(exec, node);
  if (n && kind == FK_NODE_KERNEL && n->type == FK_NODE_KERNEL)
    rc = kernel_from(n, in, v2);
  else
    rc = fk_node_set(n, kind, in);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphHostNodeSetParams(CUgraphNode node, const void *params) {
  return fk_node_params_set(NULL, node, FK_NODE_HOST, params, 0);
}
FK_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const void *params) {
  return fk_node_params_set(NULL, node, FK_NODE_MEMSET, params, 0);
}
FK_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const void *params) {
  return fk_node_params_set(NULL, node, FK_NODE_MEMCPY, params, 0);
}
FK_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent event) {
  return fk_node_params_set(NULL, node, FK_NODE_EVENT, &event, 0);
}
FK_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent event) {
  return fk_node_params_set(NULL, node, FK_NODE_WAIT, &event, 0);
}
FK_API CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const void *params) {
  return fk_node_params_set(NULL, node, FK_NODE_KERNEL, params, 0);
}
FK_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const void *params) {
  return fk_node_params_set(NULL, node, FK_NODE_KERNEL, params, 1);
}

/* --- the generic form: cuGraphAddNode(_v2), cuGraphNodeSetParams,
 * cuGraphExecNodeSetParams -----------------------------------------------------
 * CUgraphNodeParams: the node type, 12 reserved bytes, then the kind's
 * parameters (kernel: CUDA_KERNEL_NODE_PARAMS_v3, the _v2 layout; memcpy:
 * flags 0, a context, a CUDA_MEMCPY3D; memset: CUDA_MEMSET_NODE_PARAMS and a
 * context; host; event record and wait: the event). The kinds the fake has
 * (kernel, memcpy, memset, host, empty, event wait, event record) are
 * taken by the rules of their own calls; child graphs, external
 * semaphores, memory allocation and free, batch memory operations and
 * conditional nodes are not there: 801. Setting parameters of another
 * kind than the node's, or a type the driver does not know: 1. */
#define FK_GENERIC_UNION 16 /* offset of the kind's parameters */

static int kind_of_type(int type) {
  static const int kinds[] = {FK_NODE_KERNEL, FK_NODE_MEMCPY, FK_NODE_MEMSET, FK_NODE_HOST, 0,
                              FK_NODE_EMPTY,  FK_NODE_WAIT,   FK_NODE_EVENT};
  return type >= 0 && type < 8 ? kinds[type] : 0;
}

/* The generic parameters into n, whose kind they must be. fk_lock held. */
static CUresult generic_set(fk_node *n, const void *params) {
  const unsigned char *u = (const unsigned char *)params + FK_GENERIC_UNION;
  int type = *(const int *)params, kind = kind_of_type(type);
  struct CUctx_st *c;
  if (type < 0 || type > 13) /* past CU_GRAPH_NODE_TYPE_CONDITIONAL */
    return CUDA_ERROR_INVALID_VALUE;
  if (!kind)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (!n || n->type != kind)
    return CUDA_ERROR_INVALID_VALUE;
  if (kind == FK_NODE_KERNEL)
    return kernel_from(n, (const fk_kernel_params *)(const void *)u, 1);
  if (kind == FK_NODE_EMPTY)
    return CUDA_SUCCESS;
  if (kind == FK_NODE_MEMCPY || kind == FK_NODE_MEMSET) {
    CUresult rc = fk_need_ctx(&c);
    if (rc)
      return rc;
  }
  if (kind == FK_NODE_MEMCPY) /* flags and reserved must be 0; then a context */
    return *(const int *)u || *(const int *)(u + 4) ? CUDA_ERROR_INVALID_VALUE
                                                    : fk_node_set(n, kind, u + 16);
  return fk_node_set(n, kind, u);
}

static CUresult add_generic(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                            const void *edge_data, size_t nd, const void *params) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!params || !edges_default(edge_data, nd))
    return CUDA_ERROR_INVALID_VALUE;
  fk_node n = {.type = kind_of_type(*(const int *)params)};
  fk_lock();
  rc = generic_set(&n, params);
  if (rc == CUDA_SUCCESS)
    rc = add_node(out, g, deps, nd, &n);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphAddNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
                               void *params) {
  return add_generic(out, g, deps, NULL, nd, params);
}
FK_API CUresult cuGraphAddNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                  const void *edge_data, size_t nd, void *params) {
  return add_generic(out, g, deps, edge_data, nd, params);
}

/* exec NULL: the graph's node; else the exec's copy of it. */
static CUresult generic_node_set(CUgraphExec exec, CUgraphNode node, const void *params) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!params)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  fk_node *n = node_of(exec, node);
  rc = generic_set(n, params);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphNodeSetParams(CUgraphNode node, void *params) {
  return generic_node_set(NULL, node, params);
}
FK_API CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, void *params) {
  return exec ? generic_node_set(exec, node, params) : CUDA_ERROR_INVALID_VALUE;
}
