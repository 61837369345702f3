/* Executable graphs: instantiate, launch, update.
 *
 * cuGraphInstantiate(WithFlags, _v2, WithParams) copies a graph's nodes in
 * an order that respects every dependency (among nodes ready at once, the
 * one made first): a graph whose edges form a cycle cannot be ordered (1,
 * the error node and a log given). cuGraphUpload checks; cuGraphLaunch
 * replays the copies on a stream in that order, each as the call that does
 * it: a kernel node through fk_launch as cuLaunchKernel would launch it
 * (its copied arguments checked as a direct launch's, FAKEGPU_CHECK_ARGS;
 * its host twin run, or a no-op without one), a host node as
 * cuLaunchHostFunc, memset and memcpy nodes as cuMemsetD*Async /
 * cuMemcpy3DAsync, event nodes as cuEventRecord / cuStreamWaitEvent; a
 * node turned off (cuGraphNodeSetEnabled) is skipped. The first call that
 * fails ends the replay with its error.
 *
 * cuGraphExec*NodeSetParams change an exec's copy of a node of the graph it
 * was made from (1 for a node of another graph or kind). cuGraphExecUpdate
 * (and _v2) take another graph's parameters when it has the same shape:
 * the same number of nodes, each (paired by the order made) of the same
 * kind, the same edges; a memset node may not change its element size.
 * Otherwise 910 (GRAPH_EXEC_UPDATE_FAILURE), with the driver's result code
 * (2 topology changed, 3 node type changed, 5 parameters changed) and the
 * node of the new graph where it was found; the exec is unchanged. */
#include <stdlib.h>
#include <string.h>

#include "fakecuda_graph.h"

FK_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user);
FK_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
FK_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
FK_API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s);
FK_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s);
FK_API CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w,
                                  size_t h, CUstream s);
FK_API CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w,
                                   size_t h, CUstream s);
FK_API CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w,
                                   size_t h, CUstream s);
FK_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s);
FK_API CUresult cuEventRecord(CUevent e, CUstream s);
FK_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags);

#define FK_UPDATE_TOPOLOGY_CHANGED 2
#define FK_UPDATE_NODE_TYPE_CHANGED 3
#define FK_UPDATE_PARAMETERS_CHANGED 5

static struct fk_graph_exec *g_execs;

struct fk_graph_exec *fk_exec_check(CUgraphExec e) {
  for (struct fk_graph_exec *x = g_execs; x; x = x->next)
    if (x == e && x->magic == FK_EXEC_MAGIC)
      return x;
  return NULL;
}

fk_node *fk_exec_node(struct fk_graph_exec *e, CUgraphNode h) {
  fk_gnode *gn = fk_gnode_check(h);
  for (size_t k = 0; gn && gn->graph == e->from && k < e->n; k++)
    if (e->src[k] == gn)
      return &e->work[k];
  return NULL;
}

static void exec_free(struct fk_graph_exec *e) {
  for (size_t k = 0; k < e->n; k++)
    fk_node_clear(&e->work[k]);
  free(e->work);
  free(e->src);
  free(e->gidx);
  free(e->edges);
  e->magic = 0;
  free(e);
}

/* --- order -------------------------------------------------------------------
 * The places of g's nodes in an order that respects every dependency (Kahn:
 * a queue of the nodes ready, in the order made): how many could be
 * ordered (fewer than g->n when edges form a cycle). */
static size_t topo_order(const struct CUgraph_st *g, size_t *order) {
  size_t n = g->n, done = 0, head = 0, tail = 0;
  size_t *indeg = calloc(n + 1, sizeof *indeg), *first = calloc(n + 2, sizeof *first);
  size_t edges = 0;
  for (size_t i = 0; i < n; i++)
    edges += g->v[i]->ndeps;
  size_t *to = malloc((edges + 1) * sizeof *to);
  if (!indeg || !first || !to)
    goto out;
  for (size_t i = 0; i < n; i++) /* dependents of each node, CSR */
    for (size_t j = 0; j < g->v[i]->ndeps; j++)
      first[g->v[i]->deps[j]->index + 2]++;
  for (size_t i = 0; i < n; i++)
    first[i + 2] += first[i + 1];
  for (size_t i = 0; i < n; i++) {
    indeg[i] = g->v[i]->ndeps;
    for (size_t j = 0; j < g->v[i]->ndeps; j++)
      to[first[g->v[i]->deps[j]->index + 1]++] = i;
  }
  for (size_t i = 0; i < n; i++)
    if (!indeg[i])
      order[tail++] = i;
  while (head < tail) {
    size_t x = order[head++];
    done++;
    for (size_t k = first[x]; k < first[x + 1]; k++)
      if (--indeg[to[k]] == 0)
        order[tail++] = to[k];
  }
out:
  free(indeg);
  free(first);
  free(to);
  return done;
}

static int cmp_edge(const void *a, const void *b) {
  const size_t *x = a, *y = b;
  return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : x[1] != y[1] ? (x[1] < y[1] ? -1 : 1) : 0;
}

/* g's edges as sorted (from, to) places; NULL without memory (or none). */
static size_t *edge_list(const struct CUgraph_st *g, size_t *count) {
  size_t n = 0, k = 0;
  for (size_t i = 0; i < g->n; i++)
    n += g->v[i]->ndeps;
  size_t *e = malloc((2 * n + 1) * sizeof *e);
  for (size_t i = 0; e && i < g->n; i++)
    for (size_t j = 0; j < g->v[i]->ndeps; j++, k += 2) {
      e[k] = g->v[i]->deps[j]->index;
      e[k + 1] = i;
    }
  if (e)
    qsort(e, n, 2 * sizeof *e, cmp_edge);
  *count = n;
  return e;
}

/* --- instantiate ------------------------------------------------------------- */
/* A new exec of g; *bad: a node on a cycle (1), else NULL. */
static CUresult exec_make(struct CUgraph_st *g, unsigned long long flags,
                          struct fk_graph_exec **out, fk_gnode **bad) {
  struct fk_graph_exec *e = calloc(1, sizeof *e);
  size_t *order = malloc((g->n + 1) * sizeof *order), got = 0;
  CUresult rc = CUDA_SUCCESS;
  if (!e || !order || !(e->work = calloc(g->n + 1, sizeof *e->work)) ||
      !(e->src = calloc(g->n + 1, sizeof *e->src)) ||
      !(e->gidx = calloc(g->n + 1, sizeof *e->gidx)) || !(e->edges = edge_list(g, &e->nedges)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  else if ((got = topo_order(g, order)) < g->n)
    rc = CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; rc == CUDA_SUCCESS && k < g->n; k++, e->n++) {
    if (!fk_node_copy(&e->work[k], &g->v[order[k]]->n))
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    e->src[k] = g->v[order[k]];
    e->gidx[k] = order[k];
  }
  if (rc == CUDA_ERROR_INVALID_VALUE) { /* the first node that could not be ordered */
    char *seen = calloc(g->n + 1, 1);
    for (size_t k = 0; seen && k < got; k++)
      seen[order[k]] = 1;
    for (size_t i = 0; seen && i < g->n && !*bad; i++)
      *bad = seen[i] ? NULL : g->v[i];
    free(seen);
  }
  free(order);
  if (rc == CUDA_SUCCESS) {
    e->magic = FK_EXEC_MAGIC;
    e->from = g;
    e->flags = flags;
    e->next = g_execs;
    g_execs = e;
    *out = e;
  } else if (e) {
    exec_free(e);
  }
  return rc;
}

static CUresult instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags,
                            CUgraphNode *err_node, char *log, size_t log_size) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  struct CUgraph_st *g = rc ? NULL : fk_graph_check(graph);
  struct fk_graph_exec *e = NULL;
  fk_gnode *bad = NULL;
  if (rc == CUDA_SUCCESS && (!exec || !g || (flags & ~0xfull)))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS)
    rc = exec_make(g, flags, &e, &bad);
  if (rc == CUDA_SUCCESS)
    *exec = e;
  if (err_node)
    *err_node = (CUgraphNode)(void *)bad;
  if (log && log_size)
    strncpy(log, bad ? "fakegpu: the graph's dependencies form a cycle" : "", log_size - 1),
        log[log_size - 1] = 0;
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                            unsigned long long flags) {
  return instantiate(exec, graph, flags, NULL, NULL, 0);
}

/* CUDA 11's form, which cuBLASLt resolves with dlsym, and its _v2 name. */
FK_API CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, CUgraphNode *err_node,
                                   char *log, size_t log_size) {
  return instantiate(exec, graph, 0, err_node, log, log_size);
}
FK_API CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *err_node,
                                      char *log, size_t log_size) {
  return instantiate(exec, graph, 0, err_node, log, log_size);
}

/* CUDA_GRAPH_INSTANTIATE_PARAMS: flags, upload stream, error node and
 * result out (CUDA_GRAPH_INSTANTIATE_SUCCESS 0, ERROR 1). */
typedef struct {
  unsigned long long flags;
  CUstream upload;
  CUgraphNode err_node;
  int result;
} fk_instantiate_params;

FK_API CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph, void *params) {
  fk_instantiate_params *p = params;
  if (!p) {
    CUresult rc = fk_check_init();
    return rc ? rc : CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = instantiate(exec, graph, p->flags & ~2ull /* UPLOAD */, &p->err_node, NULL, 0);
  p->result = rc == CUDA_SUCCESS ? 0 : 1;
  return rc;
}

FK_API CUresult cuGraphExecDestroy(CUgraphExec exec) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_graph_exec **pp = &g_execs;
  while (*pp && *pp != exec)
    pp = &(*pp)->next;
  struct fk_graph_exec *e = *pp && (*pp)->magic == FK_EXEC_MAGIC ? *pp : NULL;
  if (e) {
    *pp = e->next;
    exec_free(e);
  }
  fk_unlock();
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t *flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_graph_exec *e = fk_exec_check(exec);
  if (!e || !flags)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *flags = e->flags;
  fk_unlock();
  return rc;
}

/* --- launch ------------------------------------------------------------------ */
/* The exec's work, copied under the lock (arguments too), for a launch on
 * stream s; out NULL: only the checks (cuGraphUpload). */
static CUresult exec_work(CUgraphExec exec, CUstream s, fk_nodes *out) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  struct fk_graph_exec *e = rc ? NULL : fk_exec_check(exec);
  if (rc == CUDA_SUCCESS && !e)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && out)
    rc = fk_stream_work(s);
  for (size_t k = 0; rc == CUDA_SUCCESS && out && k < e->n; k++) {
    fk_node n;
    if (!fk_node_copy(&n, &e->work[k]) || !fk_nodes_add(out, &n))
      rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphUpload(CUgraphExec exec, CUstream s) { return exec_work(exec, s, NULL); }

static CUresult run_memset(const fk_node *n, CUstream s) {
  if (n->height > 1)
    return n->width == 1   ? cuMemsetD2D8Async(n->dst, n->pitch, (unsigned char)n->value, n->count,
                                               n->height, s)
           : n->width == 2 ? cuMemsetD2D16Async(n->dst, n->pitch, (unsigned short)n->value,
                                                n->count, n->height, s)
                           : cuMemsetD2D32Async(n->dst, n->pitch, n->value, n->count, n->height, s);
  return n->width == 1   ? cuMemsetD8Async(n->dst, (unsigned char)n->value, n->count, s)
         : n->width == 2 ? cuMemsetD16Async(n->dst, (unsigned short)n->value, n->count, s)
                         : cuMemsetD32Async(n->dst, n->value, n->count, s);
}

/* A kernel node as cuLaunchKernel would launch it, its arguments in the
 * `extra` form (none kept: no arguments; the kernel is a no-op then). */
static CUresult run_kernel(const fk_node *n, CUstream s) {
  size_t size = n->args_n;
  void *extra[] = {(void *)1, n->args, (void *)2, &size, NULL};
  fk_launch_args a = {.f = n->fn, .shmem = n->shmem, .s = s, .extra = n->args_n ? extra : NULL};
  memcpy(a.dims, n->dims, sizeof a.dims);
  return fk_launch(&a);
}

static CUresult run_node(const fk_node *n, CUstream s) {
  switch (n->type) {
  case FK_NODE_HOST: return cuLaunchHostFunc(s, n->host, n->user);
  case FK_NODE_EVENT: return cuEventRecord((CUevent)n->user, s);
  case FK_NODE_WAIT: return cuStreamWaitEvent(s, (CUevent)n->user, 0);
  case FK_NODE_MEMSET: return run_memset(n, s);
  case FK_NODE_MEMCPY:
    return n->one1d ? cuMemcpyAsync(n->dst, n->src, n->count, s)
                    : cuMemcpy3DAsync_v2((const CUDA_MEMCPY3D *)(const void *)&n->copy, s);
  case FK_NODE_KERNEL: return run_kernel(n, s);
  default: return CUDA_SUCCESS; /* an empty node */
  }
}

FK_API CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  fk_nodes work = {NULL, 0, 0};
  CUresult rc = exec_work(exec, s, &work);
  for (size_t i = 0; rc == CUDA_SUCCESS && i < work.n; i++)
    if (!work.v[i].disabled) /* cuGraphNodeSetEnabled(exec, node, 0) */
      rc = run_node(&work.v[i], s);
  for (size_t i = 0; i < work.n; i++)
    fk_node_clear(&work.v[i]);
  free(work.v);
  return rc;
}

/* --- nodes of an exec ------------------------------------------------------- */
/* The exec's copy of a node, if of a kind that can be turned off. */
static fk_node *switchable(CUgraphExec exec, CUgraphNode node) {
  struct fk_graph_exec *e = fk_exec_check(exec);
  fk_node *n = e ? fk_exec_node(e, node) : NULL;
  return n && (n->type == FK_NODE_KERNEL || n->type == FK_NODE_MEMSET || n->type == FK_NODE_MEMCPY)
             ? n
             : NULL;
}

FK_API CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int on) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_node *n = switchable(exec, node);
  if (!n)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    n->disabled = !on;
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int *on) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_node *n = switchable(exec, node);
  if (!n || !on)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *on = !n->disabled;
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                             const void *params) {
  return exec ? fk_node_params_set(exec, node, FK_NODE_HOST, params, 0) : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                               const void *params, CUcontext ctx) {
  (void)ctx;
  return exec ? fk_node_params_set(exec, node, FK_NODE_MEMSET, params, 0)
              : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                               const void *params, CUcontext ctx) {
  (void)ctx;
  return exec ? fk_node_params_set(exec, node, FK_NODE_MEMCPY, params, 0)
              : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node,
                                                   CUevent event) {
  return exec ? fk_node_params_set(exec, node, FK_NODE_EVENT, &event, 0) : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node,
                                                 CUevent event) {
  return exec ? fk_node_params_set(exec, node, FK_NODE_WAIT, &event, 0) : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                               const void *params) {
  return exec ? fk_node_params_set(exec, node, FK_NODE_KERNEL, params, 0)
              : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                  const void *params) {
  return exec ? fk_node_params_set(exec, node, FK_NODE_KERNEL, params, 1)
              : CUDA_ERROR_INVALID_VALUE;
}

/* --- update ------------------------------------------------------------------- */
/* Whether g has e's shape: the result code (0: it has) and the node of g
 * where it differs (NULL for a different count or edges). */
static int update_check(const struct fk_graph_exec *e, const struct CUgraph_st *g,
                        fk_gnode **where) {
  size_t ne = 0;
  *where = NULL;
  if (g->n != e->n)
    return FK_UPDATE_TOPOLOGY_CHANGED;
  size_t *edges = edge_list(g, &ne);
  int same = edges && ne == e->nedges && !memcmp(edges, e->edges, 2 * ne * sizeof *edges);
  free(edges);
  if (!same)
    return FK_UPDATE_TOPOLOGY_CHANGED;
  for (size_t k = 0; k < e->n; k++) {
    const fk_node *old = &e->work[k], *nu = &g->v[e->gidx[k]]->n;
    *where = g->v[e->gidx[k]];
    if (old->type != nu->type)
      return FK_UPDATE_NODE_TYPE_CHANGED;
    if (old->type == FK_NODE_MEMSET && old->width != nu->width)
      return FK_UPDATE_PARAMETERS_CHANGED;
  }
  *where = NULL;
  return 0;
}

static CUresult update(CUgraphExec exec, CUgraph graph, int *result, CUgraphNode *err_node) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_graph_exec *e = fk_exec_check(exec);
  struct CUgraph_st *g = fk_graph_check(graph);
  fk_gnode *where = NULL;
  int res = 1; /* CU_GRAPH_EXEC_UPDATE_ERROR */
  if (!e || !g) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if ((res = update_check(e, g, &where)) != 0) {
    rc = FK_ERR_EXEC_UPDATE;
  } else {
    fk_node *fresh = calloc(e->n + 1, sizeof *fresh);
    size_t k = 0;
    while (fresh && k < e->n && fk_node_copy(&fresh[k], &g->v[e->gidx[k]]->n))
      fresh[k].disabled = e->work[k].disabled, k++;
    if (!fresh || k < e->n) {
      while (fresh && k--)
        fk_node_clear(&fresh[k]);
      res = 1;
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      for (k = 0; k < e->n; k++)
        fk_node_clear(&e->work[k]);
      free(e->work);
      e->work = fresh;
      fresh = NULL;
    }
    free(fresh);
  }
  if (result)
    *result = res;
  if (err_node)
    *err_node = (CUgraphNode)(void *)where;
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode *err_node,
                                  int *result) {
  return update(exec, graph, result, err_node);
}

/* CUgraphExecUpdateResultInfo: the result, the node of the new graph where
 * the update failed, and its counterpart in the exec's graph (not kept). */
typedef struct {
  int result;
  CUgraphNode err_node, err_from_node;
} fk_update_info;

FK_API CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, void *info) {
  fk_update_info *i = info;
  if (!i) {
    CUresult rc = fk_check_init();
    return rc ? rc : CUDA_ERROR_INVALID_VALUE;
  }
  i->err_from_node = NULL;
  return update(exec, graph, &i->result, &i->err_node);
}
