/* What can be asked of a CUDA graph, and its copies: its nodes in the order
 * made (cuGraphGetNodes), roots (nodes with no dependency), edges (for each
 * node in order, its dependencies in the order added), a node's kind,
 * dependencies and dependents (the _v2 forms give each edge's data: the
 * default edge, all zero, for every edge), cuGraphDestroyNode,
 * cuGraphClone and cuGraphNodeFindInClone, and cuGraphDebugDotPrint.
 *
 * Lists follow the driver's rule: with the array NULL, *count gets how many
 * there are; else up to *count entries are written, *count is the number
 * written, and the rest of the array up to the count asked for is NULL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_graph.h"

/* Writes up to *count of the n handles of v (or, with out NULL, the number
 * there is), and the default edge data for each when data is not NULL. */
static void list_out(fk_gnode *const *v, size_t n, CUgraphNode *out, void *data, size_t *count) {
  if (!out) {
    *count = n;
    return;
  }
  size_t asked = *count, got = asked < n ? asked : n;
  for (size_t i = 0; i < asked; i++)
    out[i] = i < got ? (CUgraphNode)(void *)v[i] : NULL;
  if (data)
    memset(data, 0, 8 * got);
  *count = got;
}

/* The nodes of g that pass keep(node, arg), in the order made. */
static fk_gnode **nodes_where(const struct CUgraph_st *g,
                              int (*keep)(const fk_gnode *, const void *), const void *arg,
                              size_t *n) {
  fk_gnode **v = malloc((g->n ? g->n : 1) * sizeof *v);
  *n = 0;
  for (size_t i = 0; v && i < g->n; i++)
    if (keep(g->v[i], arg))
      v[(*n)++] = g->v[i];
  return v;
}

static int any_node(const fk_gnode *x, const void *arg) { return (void)x, (void)arg, 1; }
static int is_root(const fk_gnode *x, const void *arg) { return (void)arg, x->ndeps == 0; }
static int depends_on(const fk_gnode *x, const void *arg) {
  for (size_t i = 0; i < x->ndeps; i++)
    if (x->deps[i] == arg)
      return 1;
  return 0;
}

/* which 0: all nodes, 1: roots, of a graph. */
static CUresult graph_list(CUgraph graph, CUgraphNode *out, size_t *count, int which) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = fk_graph_check(graph);
  size_t n = 0;
  fk_gnode **v = g && count ? nodes_where(g, which ? is_root : any_node, NULL, &n) : NULL;
  if (!v)
    rc = g && count ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
  else
    list_out(v, n, out, NULL, count);
  free(v);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count) {
  return graph_list(graph, nodes, count, 0);
}
FK_API CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode *nodes, size_t *count) {
  return graph_list(graph, nodes, count, 1);
}

FK_API CUresult cuGraphNodeGetType(CUgraphNode node, int *type) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_gnode *gn = fk_gnode_check(node);
  if (!gn || !type)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *type = fk_node_type(&gn->n);
  fk_unlock();
  return rc;
}

static CUresult edges(CUgraph graph, CUgraphNode *from, CUgraphNode *to, void *data,
                      size_t *count) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = fk_graph_check(graph);
  size_t total = 0, k = 0;
  for (size_t i = 0; g && i < g->n; i++)
    total += g->v[i]->ndeps;
  if (!g || !count || (!from != !to) || (data && !from)) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (!from) {
    *count = total;
  } else {
    size_t asked = *count;
    for (size_t i = 0; i < g->n; i++)
      for (size_t j = 0; j < g->v[i]->ndeps && k < asked; j++, k++) {
        from[k] = (CUgraphNode)(void *)g->v[i]->deps[j];
        to[k] = (CUgraphNode)(void *)g->v[i];
      }
    for (size_t i = k; i < asked; i++)
      from[i] = to[i] = NULL;
    if (data)
      memset(data, 0, 8 * k);
    *count = k;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *count) {
  return edges(g, from, to, NULL, count);
}
FK_API CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode *from, CUgraphNode *to, void *data,
                                   size_t *count) {
  return edges(g, from, to, data, count);
}

/* dir -1: the node's dependencies, +1: its dependents. */
static CUresult neighbours(CUgraphNode node, CUgraphNode *out, void *data, size_t *count, int dir) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_gnode *gn = fk_gnode_check(node);
  size_t n = 0;
  fk_gnode **v = NULL;
  if (!gn || !count || (data && !out))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (dir < 0)
    list_out(gn->deps, gn->ndeps, out, data, count);
  else if (!(v = nodes_where(gn->graph, depends_on, gn, &n)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  else
    list_out(v, n, out, data, count);
  free(v);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode *deps, size_t *count) {
  return neighbours(node, deps, NULL, count, -1);
}
FK_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode *deps, void *data,
                                              size_t *count) {
  return neighbours(node, deps, data, count, -1);
}
FK_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode *deps, size_t *count) {
  return neighbours(node, deps, NULL, count, 1);
}
FK_API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode *deps, void *data,
                                                size_t *count) {
  return neighbours(node, deps, data, count, 1);
}

/* cuGraphDestroyNode: the node and every edge to or from it go; the nodes
 * made after it move up one place. */
FK_API CUresult cuGraphDestroyNode(CUgraphNode node) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_gnode *gn = fk_gnode_check(node);
  if (!gn) {
    fk_unlock();
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUgraph_st *g = gn->graph;
  for (size_t i = 0; i < g->n; i++) {
    fk_gnode *x = g->v[i];
    for (size_t j = 0; j < x->ndeps;)
      if (x->deps[j] == gn)
        memmove(&x->deps[j], &x->deps[j + 1], (--x->ndeps - j) * sizeof *x->deps);
      else
        j++;
  }
  memmove(&g->v[gn->index], &g->v[gn->index + 1], (g->n - gn->index - 1) * sizeof *g->v);
  g->n--;
  for (size_t i = gn->index; i < g->n; i++)
    g->v[i]->index = i;
  fk_gnode_free(gn);
  fk_unlock();
  return CUDA_SUCCESS;
}

/* A copy of g: every node (arguments too) and every edge; NULL without
 * memory. */
static struct CUgraph_st *graph_copy(const struct CUgraph_st *g) {
  struct CUgraph_st *c = fk_graph_new();
  for (size_t i = 0; c && i < g->n; i++)
    if (!fk_graph_append(c, &g->v[i]->n, NULL, 0)) {
      fk_graph_free(c);
      return NULL;
    }
  for (size_t i = 0; c && i < g->n; i++) {
    const fk_gnode *from = g->v[i];
    fk_gnode *to = c->v[i];
    if (from->ndeps && !(to->deps = malloc(from->ndeps * sizeof *to->deps))) {
      fk_graph_free(c);
      return NULL;
    }
    for (size_t j = 0; j < from->ndeps; j++)
      to->deps[j] = c->v[from->deps[j]->index];
    to->ndeps = from->ndeps;
  }
  return c;
}

FK_API CUresult cuGraphClone(CUgraph *clone, CUgraph graph) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = fk_graph_check(graph), *c = NULL;
  if (!g || !clone)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (!(c = graph_copy(g)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (rc == CUDA_SUCCESS) {
    c->origin = g;
    *clone = c;
  }
  fk_unlock();
  return rc;
}

/* The clone's node at the original's place (the clone is unchanged since,
 * as far as that place goes). */
FK_API CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode node, CUgraph clone) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_gnode *gn = fk_gnode_check(node);
  struct CUgraph_st *c = fk_graph_check(clone);
  if (!out || !gn || !c || c->origin != gn->graph || gn->index >= c->n)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *out = (CUgraphNode)(void *)c->v[gn->index];
  fk_unlock();
  return rc;
}

/* cuGraphDebugDotPrint: the graph in Graphviz's DOT language, one node per
 * graph node in the order made, labelled with its kind and, for kernels,
 * the kernel's name, and one edge per dependency;
 * CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE (1) adds each node's parameters. A path
 * that cannot be opened: 1 (the driver's OPERATING_SYSTEM, 304, is for a
 * failing write after opening). */
static void dot_node(FILE *f, const fk_gnode *gn, int verbose) {
  static const char *kinds[] = {"?",      "KERNEL", "HOST",  "EVENT_RECORD",
                                "MEMSET", "MEMCPY", "EMPTY", "WAIT_EVENT"};
  const fk_node *n = &gn->n;
  struct CUctx_st *c = fk_current();
  fk_obj *fn = n->type == FK_NODE_KERNEL && c ? fk_launch_function(n->fn, c) : NULL;
  fprintf(f, "\"node%zu\" [shape=record, label=\"{%s", gn->index, kinds[n->type]);
  if (n->type == FK_NODE_KERNEL)
    fprintf(f, "\\n%s", fn && fn->name ? fn->name : "(unloaded kernel)");
  if (verbose && n->type == FK_NODE_KERNEL)
    fprintf(f, "| grid (%u,%u,%u) block (%u,%u,%u) shared %u args %zu bytes", n->dims[0],
            n->dims[1], n->dims[2], n->dims[3], n->dims[4], n->dims[5], n->shmem, n->args_n);
  else if (verbose && n->type == FK_NODE_MEMSET)
    fprintf(f, "| dst 0x%llx value 0x%x width %u count %zu rows %zu", (unsigned long long)n->dst,
            n->value, n->width, n->count, n->height);
  else if (verbose && n->type == FK_NODE_MEMCPY && n->one1d)
    fprintf(f, "| dst 0x%llx src 0x%llx bytes %zu", (unsigned long long)n->dst,
            (unsigned long long)n->src, n->count);
  else if (verbose && n->type == FK_NODE_MEMCPY)
    fprintf(f, "| 3D copy %zu x %zu x %zu bytes", n->copy.WidthInBytes, n->copy.Height,
            n->copy.Depth);
  fprintf(f, "}\"];\n");
  for (size_t j = 0; j < gn->ndeps; j++)
    fprintf(f, "\"node%zu\" -> \"node%zu\";\n", gn->deps[j]->index, gn->index);
}

FK_API CUresult cuGraphDebugDotPrint(CUgraph graph, const char *path, unsigned int flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = fk_graph_check(graph);
  FILE *f = g && path ? fopen(path, "w") : NULL;
  if (!f) {
    fk_unlock();
    return CUDA_ERROR_INVALID_VALUE;
  }
  fprintf(f, "digraph dot {\n subgraph cluster_1 {\nlabel=\"graph_%p\";\n", (void *)g);
  for (size_t i = 0; i < g->n; i++)
    dot_node(f, g->v[i], (flags & 1u) != 0);
  fprintf(f, "}\n}\n");
  fk_unlock();
  return fclose(f) == 0 ? CUDA_SUCCESS : (CUresult)304;
}
