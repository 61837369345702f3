/* Stream capture and CUDA graphs, as far as the fake can keep them.
 *
 * cuStreamBeginCapture_v2 puts a stream (not the legacy or per-thread one:
 * 900) into capture; a second begin is 401 (ILLEGAL_STATE). While a stream
 * captures, a kernel launch with no host twin and a host function
 * (cuLaunchHostFunc) are recorded, not done. Every other piece of work on it
 * is something the fake does at the call and cannot record (copies, memset,
 * stream-ordered allocation, event records and waits, callbacks, a kernel
 * with a host twin): it answers 900 (STREAM_CAPTURE_UNSUPPORTED) and
 * invalidates the capture, as the driver does for work it cannot capture;
 * so do cuStreamSynchronize and cuStreamQuery, as on the driver. Work on an
 * invalidated capture answers 901; cuStreamEndCapture ends the capture and
 * answers 901 with no graph, else the graph of the recorded work.
 *
 * A graph is its list of recorded work. cuGraphInstantiateWithFlags copies
 * it; cuGraphUpload checks; cuGraphLaunch replays it on a stream in order
 * (kernels launched as no-ops and counted, host functions run on the
 * driver's callback thread as cuLaunchHostFunc runs them). Graphs belong to
 * the process, as on the driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_ERR_ILLEGAL_STATE ((CUresult)401)
#define FK_ERR_CAPTURE_UNSUPPORTED ((CUresult)900)
#define FK_ERR_CAPTURE_INVALIDATED ((CUresult)901)
#define FK_ERR_CAPTURE_UNJOINED ((CUresult)904)
#define FK_ERR_CAPTURE_ISOLATION ((CUresult)905)
#define FK_ERR_CAPTURE_UNMATCHED ((CUresult)903)
#define FK_CAPTURE_ACTIVE 1
#define FK_CAPTURE_INVALIDATED 2
#define FK_GRAPH_MAGIC 0x67a9400u
#define FK_EXEC_MAGIC 0x67a9e00u

enum { FK_NODE_KERNEL = 1, FK_NODE_HOST, FK_NODE_EVENT, FK_NODE_MEMSET, FK_NODE_MEMCPY };
typedef struct fk_node {
  int type;
  CUfunction fn;
  unsigned dims[6];
  unsigned shmem;
  CUhostFn host;
  void *user;
  uint64_t dst, src; /* memset and memcpy nodes */
  size_t count;      /* memset: elements; memcpy: bytes */
  unsigned width;    /* memset: bytes per element */
  uint32_t value;
  int disabled; /* in an exec: cuGraphNodeSetEnabled(0) */
} fk_node;

typedef struct fk_nodes {
  fk_node *v;
  size_t n, cap;
} fk_nodes;

/* A stream taking part in a capture: the origin (index 0) or one that
 * joined it by waiting on an event recorded in it. last: the place of its
 * last work; merged: the place of its last event the origin waited on
 * (directly, or through the stream `via` that the origin merged). */
typedef struct fk_member {
  fk_obj *s;
  unsigned long long last, merged;
  int via; /* -1: merged into the origin directly */
} fk_member;

struct fk_capture {
  unsigned long long id, seq;
  int mode;
  int invalidated;
  fk_nodes work;
  fk_member *m; /* m[0] is the origin */
  size_t nm;
  struct fk_capture *next;
};

struct CUgraph_st {
  uint32_t magic;
  fk_nodes work;
  const struct CUgraph_st *origin; /* cuGraphClone: the graph cloned (compared only) */
  struct CUgraph_st *next;
};

struct fk_graph_exec {
  uint32_t magic;
  fk_nodes work;
  const struct CUgraph_st *from; /* the graph instantiated (compared only) */
  unsigned long long flags;
  struct fk_graph_exec *next;
};

FK_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user);
FK_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
FK_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
FK_API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s);
FK_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s);
FK_API CUresult cuEventRecord(CUevent e, CUstream s);
FK_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shmem, CUstream s, void **params, void **extra);

static struct CUgraph_st *g_graphs;
static struct fk_graph_exec *g_execs;
static struct fk_capture *g_captures; /* live captures */
static unsigned long long g_capture_ids;

static int nodes_add(fk_nodes *l, const fk_node *n) {
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

static int nodes_copy(fk_nodes *dst, const fk_nodes *src) {
  dst->v = NULL;
  dst->n = dst->cap = 0;
  if (!src->n)
    return 1;
  if (!(dst->v = malloc(src->n * sizeof *dst->v)))
    return 0;
  memcpy(dst->v, src->v, src->n * sizeof *dst->v);
  dst->n = dst->cap = src->n;
  return 1;
}

/* --- capture state of a stream (caller holds fk_lock) --------------------- */
static struct fk_capture *capture_of(CUstream s) {
  fk_obj *o = fk_obj_check(s, FK_OBJ_STREAM);
  return o ? o->capture : NULL;
}

static struct fk_capture *capture_by_id(unsigned long long id) {
  for (struct fk_capture *c = g_captures; c && id; c = c->next)
    if (c->id == id)
      return c;
  return NULL;
}

static fk_member *member_of(struct fk_capture *cap, const fk_obj *s) {
  for (size_t i = 0; i < cap->nm; i++)
    if (cap->m[i].s == s)
      return &cap->m[i];
  return NULL;
}

/* Ends a capture for every stream in it and frees it. */
static void capture_end(struct fk_capture *cap) {
  for (struct fk_capture **pp = &g_captures; *pp; pp = &(*pp)->next)
    if (*pp == cap) {
      *pp = cap->next;
      break;
    }
  for (size_t i = 0; i < cap->nm; i++)
    cap->m[i].s->capture = NULL;
  free(cap->m);
  free(cap->work.v);
  free(cap);
}

/* A stream being destroyed leaves its capture; the origin's ends it. */
void fk_capture_free(fk_obj *stream) {
  struct fk_capture *cap = stream->capture;
  if (!cap)
    return;
  fk_member *mb = member_of(cap, stream);
  if (!mb || mb == &cap->m[0]) {
    capture_end(cap);
    return;
  }
  *mb = cap->m[--cap->nm];
  stream->capture = NULL;
}

CUresult fk_stream_work(CUstream s) {
  struct fk_capture *cap = capture_of(s);
  if (!cap)
    return CUDA_SUCCESS;
  if (cap->invalidated)
    return FK_ERR_CAPTURE_INVALIDATED;
  cap->invalidated = 1;
  fk_trace("stream %p: work the fake cannot capture: capture invalidated", (void *)s);
  return FK_ERR_CAPTURE_UNSUPPORTED;
}

/* Records a node on a capturing stream: 1 when recorded (*rc 0), or when
 * the capture refuses it (*rc 900/901); 0 when s does not capture. */
static int capture_record(CUstream s, const fk_node *n, CUresult *rc) {
  struct fk_capture *cap = capture_of(s);
  if (!cap)
    return 0;
  if (cap->invalidated) {
    *rc = FK_ERR_CAPTURE_INVALIDATED;
  } else if (!nodes_add(&cap->work, n)) {
    *rc = CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    fk_member *mb = member_of(cap, (fk_obj *)s);
    if (mb)
      mb->last = ++cap->seq;
    *rc = CUDA_SUCCESS;
  }
  return 1;
}

int fk_capture_kernel(CUstream s, CUfunction f, const unsigned dims[6], unsigned shmem, int noop,
                      CUresult *rc) {
  if (!capture_of(s))
    return 0;
  if (!noop) { /* a host twin reads its parameters now: nothing to replay */
    *rc = fk_stream_work(s);
    return 1;
  }
  fk_node n = {.type = FK_NODE_KERNEL, .fn = f, .shmem = shmem};
  memcpy(n.dims, dims, sizeof n.dims);
  return capture_record(s, &n, rc);
}

/* An event recorded on a capturing stream becomes an event-record node, as
 * on the driver (CU_GRAPH_NODE_TYPE_EVENT_RECORD): the event is recorded
 * again at each replay. It also marks the place in the capture that a
 * stream waiting on it joins at (fk_capture_wait). */
int fk_capture_event(CUstream s, CUevent e, CUresult *rc) {
  fk_node n = {.type = FK_NODE_EVENT, .user = e};
  struct fk_capture *cap = capture_of(s);
  if (!capture_record(s, &n, rc))
    return 0;
  fk_obj *ev = fk_obj_check(e, FK_OBJ_EVENT);
  if (*rc == CUDA_SUCCESS && ev) {
    ev->cap_id = cap->id;
    ev->cap_seq = cap->seq;
    ev->cap_stream = (fk_obj *)s;
  }
  return 1;
}

/* A member merged into the origin: directly, or through members that are. */
static int member_merged(const struct fk_capture *cap, const fk_member *mb) {
  for (size_t hops = 0; hops <= cap->nm; hops++) {
    if (mb == &cap->m[0])
      return 1;
    if (!mb->merged || mb->merged < mb->last)
      return 0;
    if (mb->via < 0)
      return 1;
    mb = &cap->m[mb->via];
  }
  return 0;
}

static int join_capture(struct fk_capture *cap, fk_obj *st, CUresult *rc) {
  fk_member *m = realloc(cap->m, (cap->nm + 1) * sizeof *m);
  if (!m) {
    *rc = CUDA_ERROR_OUT_OF_MEMORY;
    return 1;
  }
  cap->m = m;
  cap->m[cap->nm++] = (fk_member){.s = st, .last = ++cap->seq, .merged = 0, .via = -1};
  st->capture = cap;
  *rc = cap->invalidated ? FK_ERR_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  return 1;
}

int fk_capture_wait(CUstream s, fk_obj *ev, CUresult *rc) {
  struct fk_capture *mine = capture_of(s), *theirs = capture_by_id(ev->cap_id);
  fk_obj *st = fk_obj_check(s, FK_OBJ_STREAM);
  if (!theirs)
    return 0; /* an event of no live capture: a capturing s cannot wait on it (900) */
  if (!mine && !st) { /* the legacy or per-thread stream cannot join (900) */
    *rc = FK_ERR_CAPTURE_UNSUPPORTED;
    theirs->invalidated = 1;
    return 1;
  }
  if (!mine)
    return join_capture(theirs, st, rc);
  if (mine != theirs) { /* the two captures would depend on each other */
    mine->invalidated = theirs->invalidated = 1;
    *rc = FK_ERR_CAPTURE_ISOLATION;
    return 1;
  }
  fk_member *waiter = member_of(mine, st), *from = member_of(mine, ev->cap_stream);
  if (from && waiter && from != waiter && ev->cap_seq > from->merged) {
    from->merged = ev->cap_seq;
    from->via = waiter == &mine->m[0] ? -1 : (int)(waiter - mine->m);
  }
  if (waiter)
    waiter->last = ++mine->seq; /* the wait is work of the waiter */
  *rc = mine->invalidated ? FK_ERR_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  return 1;
}

int fk_capture_memset(CUstream s, uint64_t dst, uint32_t v, size_t n, unsigned width,
                      CUresult *rc) {
  if (!capture_of(s))
    return 0;
  if (n && (dst % width || n > SIZE_MAX / width || !fk_mem_range_ok(dst, n * width))) {
    *rc = CUDA_ERROR_INVALID_VALUE;
    return 1;
  }
  fk_node node = {.type = FK_NODE_MEMSET, .dst = dst, .value = v, .count = n, .width = width};
  return capture_record(s, &node, rc);
}

/* Copies between device, managed or page-locked memory are recorded; a copy
 * from or to pageable host memory cannot be captured (900), as on the driver. */
int fk_capture_copy(CUstream s, uint64_t dst, uint64_t src, size_t n, CUresult *rc) {
  if (!capture_of(s))
    return 0;
  if (n && (!fk_mem_range_ok(dst, n) || !fk_mem_range_ok(src, n))) {
    *rc = fk_stream_work(s);
    return 1;
  }
  fk_node node = {.type = FK_NODE_MEMCPY, .dst = dst, .src = src, .count = n};
  return capture_record(s, &node, rc);
}

int fk_capture_implicit(struct CUctx_st *c) {
  for (struct fk_capture *cap = g_captures; cap; cap = cap->next) {
    for (size_t i = 0; i < cap->nm; i++)
      if (cap->m[i].s->ctx == c && !(cap->m[i].s->flags & CU_STREAM_NON_BLOCKING))
        return 1;
  }
  return 0;
}

int fk_capture_live(unsigned long long id) { return capture_by_id(id) != NULL; }

int fk_capture_status(CUstream s, unsigned long long *id) {
  struct fk_capture *cap = capture_of(s);
  if (id)
    *id = cap ? cap->id : 0;
  return !cap ? 0 : cap->invalidated ? FK_CAPTURE_INVALIDATED : FK_CAPTURE_ACTIVE;
}

/* --- capture ----------------------------------------------------------------- */
static CUresult capture_begin(fk_obj *o, CUstreamCaptureMode mode) {
  struct fk_capture *cap = calloc(1, sizeof *cap);
  if (!cap || !(cap->m = calloc(1, sizeof *cap->m))) {
    free(cap);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  cap->id = ++g_capture_ids;
  cap->mode = mode;
  cap->nm = 1;
  cap->m[0] = (fk_member){.s = o, .via = -1};
  cap->next = g_captures;
  g_captures = cap;
  o->capture = cap;
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(s, FK_OBJ_STREAM);
  if (rc == CUDA_SUCCESS && (mode < 0 || mode > 2))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !o) /* the legacy and per-thread streams cannot */
    rc = fk_stream_ok(s) ? FK_ERR_CAPTURE_UNSUPPORTED : CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && o->capture)
    rc = FK_ERR_ILLEGAL_STATE;
  if (rc == CUDA_SUCCESS)
    rc = capture_begin(o, mode);
  fk_unlock();
  return rc;
}

/* The graph of an ended capture (its recorded work moves into it). */
static CUresult capture_graph(struct fk_capture *cap, CUgraph *graph) {
  for (size_t i = 1; i < cap->nm; i++)
    if (!member_merged(cap, &cap->m[i]))
      return FK_ERR_CAPTURE_UNJOINED;
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g)
    return CUDA_ERROR_OUT_OF_MEMORY;
  g->magic = FK_GRAPH_MAGIC;
  g->work = cap->work;
  cap->work = (fk_nodes){NULL, 0, 0};
  g->next = g_graphs;
  g_graphs = g;
  *graph = g;
  return CUDA_SUCCESS;
}

/* Ending on a stream that joined the capture (not its origin) is UNMATCHED
 * invalidates the capture; on the origin it ends the capture for every
 * stream in it: 901 if invalidated, 904 if a joined stream was not merged
 * back, else the graph. */
FK_API CUresult cuStreamEndCapture(CUstream s, CUgraph *graph) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(s, FK_OBJ_STREAM);
  if (rc == CUDA_SUCCESS && !graph)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !o && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && (!o || !o->capture))
    rc = FK_ERR_ILLEGAL_STATE;
  if (rc == CUDA_SUCCESS) {
    struct fk_capture *cap = o->capture;
    *graph = NULL;
    if (cap->m[0].s != o) {
      cap->invalidated = 1;
      rc = FK_ERR_CAPTURE_UNMATCHED;
    } else {
      rc = cap->invalidated ? FK_ERR_CAPTURE_INVALIDATED : capture_graph(cap, graph);
      capture_end(cap); /* the capture ends either way */
    }
  }
  fk_unlock();
  return rc;
}

/* --- graphs ------------------------------------------------------------------ */
static struct CUgraph_st *graph_check(CUgraph g) {
  for (struct CUgraph_st *x = g_graphs; x; x = x->next)
    if (x == g && x->magic == FK_GRAPH_MAGIC)
      return x;
  return NULL;
}

static struct fk_graph_exec *exec_check(CUgraphExec e) {
  for (struct fk_graph_exec *x = g_execs; x; x = x->next)
    if (x == e && x->magic == FK_EXEC_MAGIC)
      return x;
  return NULL;
}

FK_API CUresult cuGraphCreate(CUgraph *graph, unsigned int flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!graph || flags)
    return CUDA_ERROR_INVALID_VALUE;
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g)
    return CUDA_ERROR_OUT_OF_MEMORY;
  g->magic = FK_GRAPH_MAGIC;
  fk_lock();
  g->next = g_graphs;
  g_graphs = g;
  fk_unlock();
  *graph = g;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphDestroy(CUgraph graph) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st **pp = &g_graphs;
  while (*pp && *pp != graph)
    pp = &(*pp)->next;
  struct CUgraph_st *g = *pp && (*pp)->magic == FK_GRAPH_MAGIC ? *pp : NULL;
  if (g)
    *pp = g->next;
  fk_unlock();
  if (!g)
    return CUDA_ERROR_INVALID_VALUE;
  fk_graph_user_objects_gone(g); /* its user objects' references */
  g->magic = 0;
  free(g->work.v);
  free(g);
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                            unsigned long long flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  struct CUgraph_st *g = rc ? NULL : graph_check(graph);
  struct fk_graph_exec *e = NULL;
  if (rc == CUDA_SUCCESS && (!exec || !g || (flags & ~0xfull)))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !(e = calloc(1, sizeof *e)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  else if (rc == CUDA_SUCCESS && !nodes_copy(&e->work, &g->work))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (rc == CUDA_SUCCESS) {
    e->magic = FK_EXEC_MAGIC;
    e->from = g;
    e->flags = flags;
    e->next = g_execs;
    g_execs = e;
    *exec = e;
  } else {
    free(e);
  }
  fk_unlock();
  return rc;
}

/* CUDA 11's form, which cuBLASLt resolves with dlsym: no error node or log
 * to give (instantiating a recorded list cannot fail but for memory). */
FK_API CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, void **err_node, char *log,
                                   size_t log_size) {
  if (err_node)
    *err_node = NULL;
  if (log && log_size)
    log[0] = 0;
  return cuGraphInstantiateWithFlags(exec, graph, 0);
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
  if (e)
    *pp = e->next;
  fk_unlock();
  if (!e)
    return CUDA_ERROR_INVALID_VALUE;
  e->magic = 0;
  free(e->work.v);
  free(e);
  return CUDA_SUCCESS;
}

/* The exec's work, copied under the lock, for a launch on stream s. */
static CUresult exec_work(CUgraphExec exec, CUstream s, fk_nodes *out) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  struct fk_graph_exec *e = rc ? NULL : exec_check(exec);
  if (rc == CUDA_SUCCESS && !e)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && out && (rc = fk_stream_work(s)) == CUDA_SUCCESS &&
           !nodes_copy(out, &e->work))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphUpload(CUgraphExec exec, CUstream s) { return exec_work(exec, s, NULL); }

FK_API CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  fk_nodes work = {NULL, 0, 0};
  CUresult rc = exec_work(exec, s, &work);
  for (size_t i = 0; rc == CUDA_SUCCESS && i < work.n; i++) {
    const fk_node *n = &work.v[i];
    if (n->disabled)
      continue; /* cuGraphNodeSetEnabled(exec, node, 0) */
    if (n->type == FK_NODE_HOST)
      rc = cuLaunchHostFunc(s, n->host, n->user);
    else if (n->type == FK_NODE_EVENT)
      rc = cuEventRecord((CUevent)n->user, s);
    else if (n->type == FK_NODE_MEMCPY)
      rc = cuMemcpyAsync(n->dst, n->src, n->count, s);
    else if (n->type == FK_NODE_MEMSET)
      rc = n->width == 1   ? cuMemsetD8Async(n->dst, (unsigned char)n->value, n->count, s)
           : n->width == 2 ? cuMemsetD16Async(n->dst, (unsigned short)n->value, n->count, s)
                           : cuMemsetD32Async(n->dst, n->value, n->count, s);
    else
      rc = fk_launch(&(fk_launch_args){.f = n->fn,
                                         .dims = {n->dims[0], n->dims[1], n->dims[2], n->dims[3],
                                                  n->dims[4], n->dims[5]},
                                         .shmem = n->shmem,
                                         .s = s});
  }
  free(work.v);
  return rc;
}

/* The nodes of a graph: a node's handle is its place in the graph's list
 * (valid while the graph lives and is not changed, as nodes are only
 * recorded by capture). With nodes NULL, *count gets how many there are;
 * else up to *count handles are written and *count is the number written,
 * the rest of the array NULL up to the count asked for, as the driver does. */
#define FK_NODE_TYPE_KERNEL 0 /* CU_GRAPH_NODE_TYPE_KERNEL */
#define FK_NODE_TYPE_HOST 3   /* CU_GRAPH_NODE_TYPE_HOST */
#define FK_NODE_TYPE_EVENT 7  /* CU_GRAPH_NODE_TYPE_EVENT_RECORD */
#define FK_NODE_TYPE_MEMCPY 1 /* CU_GRAPH_NODE_TYPE_MEMCPY */
#define FK_NODE_TYPE_MEMSET 2 /* CU_GRAPH_NODE_TYPE_MEMSET */

static int node_type(const fk_node *n) {
  switch (n->type) {
  case FK_NODE_HOST: return FK_NODE_TYPE_HOST;
  case FK_NODE_EVENT: return FK_NODE_TYPE_EVENT;
  case FK_NODE_MEMCPY: return FK_NODE_TYPE_MEMCPY;
  case FK_NODE_MEMSET: return FK_NODE_TYPE_MEMSET;
  default: return FK_NODE_TYPE_KERNEL;
  }
}

FK_API CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = graph_check(graph);
  if (!g || !count) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (!nodes) {
    *count = g->work.n;
  } else {
    size_t asked = *count, n = asked < g->work.n ? asked : g->work.n;
    for (size_t i = 0; i < asked; i++)
      nodes[i] = i < n ? (CUgraphNode)(void *)&g->work.v[i] : NULL;
    *count = n;
  }
  fk_unlock();
  return rc;
}

/* A node handle: a place in some graph's list (NULL if none). Holds fk_lock. */
static fk_node *node_check(CUgraphNode node) {
  for (struct CUgraph_st *g = g_graphs; g; g = g->next)
    if ((fk_node *)(void *)node >= g->work.v && (fk_node *)(void *)node < g->work.v + g->work.n &&
        ((uintptr_t)node - (uintptr_t)g->work.v) % sizeof(fk_node) == 0)
      return (fk_node *)(void *)node;
  return NULL;
}

FK_API CUresult cuGraphNodeGetType(CUgraphNode node, int *type) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_node *n = node_check(node);
  if (!n || !type)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *type = node_type(n);
  fk_unlock();
  return rc;
}

/* Called by cuLaunchHostFunc: 1 when s captures (the function is recorded,
 * or refused in *rc), 0 otherwise. Takes fk_lock. */
int fk_capture_host_fn(CUstream s, CUhostFn fn, void *user, CUresult *rc) {
  fk_node n = {.type = FK_NODE_HOST, .host = fn, .user = user};
  fk_lock();
  struct CUctx_st *c;
  int captured = (*rc = fk_need_ctx(&c)) != CUDA_SUCCESS || capture_record(s, &n, rc);
  fk_unlock();
  return captured;
}

/* CUDA 11's name of the same ABI. */
FK_API CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, void **err_node, char *log,
                                      size_t log_size) {
  return cuGraphInstantiate(exec, graph, err_node, log, log_size);
}

/* cuGraphDebugDotPrint: the graph in Graphviz's DOT language, one node per
 * recorded piece of work in the order it runs (the fake keeps no other
 * dependencies), each labelled with its kind and, for kernels, the kernel's
 * name; CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE (1) adds each node's parameters. A
 * path that cannot be written: 1 (the driver's OPERATING_SYSTEM, 304, is for
 * a failing write after opening). */
static void dot_node(FILE *f, size_t i, const fk_node *n, int verbose) {
  static const char *kinds[] = {"?", "KERNEL", "HOST", "EVENT_RECORD", "MEMSET", "MEMCPY"};
  fk_obj *fn = n->type == FK_NODE_KERNEL ? fk_obj_check(n->fn, FK_OBJ_FUNCTION) : NULL;
  fprintf(f, "\"node%zu\" [shape=record, label=\"{%s", i, kinds[n->type]);
  if (n->type == FK_NODE_KERNEL)
    fprintf(f, "\\n%s", fn && fn->name ? fn->name : "(unloaded kernel)");
  if (verbose && n->type == FK_NODE_KERNEL)
    fprintf(f, "| grid (%u,%u,%u) block (%u,%u,%u) shared %u", n->dims[0], n->dims[1],
            n->dims[2], n->dims[3], n->dims[4], n->dims[5], n->shmem);
  else if (verbose && n->type == FK_NODE_MEMSET)
    fprintf(f, "| dst 0x%llx value 0x%x width %u count %zu", (unsigned long long)n->dst,
            n->value, n->width, n->count);
  else if (verbose && n->type == FK_NODE_MEMCPY)
    fprintf(f, "| dst 0x%llx src 0x%llx bytes %zu", (unsigned long long)n->dst,
            (unsigned long long)n->src, n->count);
  fprintf(f, "}\"];\n");
  if (i)
    fprintf(f, "\"node%zu\" -> \"node%zu\";\n", i - 1, i);
}

FK_API CUresult cuGraphDebugDotPrint(CUgraph graph, const char *path, unsigned int flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = graph_check(graph);
  FILE *f = g && path ? fopen(path, "w") : NULL;
  if (!f) {
    fk_unlock();
    return CUDA_ERROR_INVALID_VALUE;
  }
  fprintf(f, "digraph dot {\n subgraph cluster_1 {\nlabel=\"graph_%p\";\n", (void *)g);
  for (size_t i = 0; i < g->work.n; i++)
    dot_node(f, i, &g->work.v[i], (flags & 1u) != 0);
  fprintf(f, "}\n}\n");
  fk_unlock();
  return fclose(f) == 0 ? CUDA_SUCCESS : (CUresult)304;
}

/* --- graph and node queries ------------------------------------------------
 * A graph on the fake is its recorded work in order, and a replay does it in
 * that order: each node depends on the one before. So the root is the first
 * node, the edges join each node to the next, and a node's dependency and
 * dependent are its neighbours. Node handles stay valid while the graph
 * lives (graphs only grow by capture, which hands the list over whole). */

/* The graph holding a node handle and its place; NULL if none. fk_lock held. */
static struct CUgraph_st *node_graph(CUgraphNode node, size_t *index) {
  fk_node *n = node_check(node);
  for (struct CUgraph_st *g = g_graphs; n && g; g = g->next)
    if (n >= g->work.v && n < g->work.v + g->work.n) {
      *index = (size_t)(n - g->work.v);
      return g;
    }
  return NULL;
}

/* Writes up to *count of the handles first..first+n-1 of g (NULLs after), or
 * with out NULL the number there is, as cuGraphGetNodes does. */
static void node_list(const struct CUgraph_st *g, size_t first, size_t n, CUgraphNode *out,
                      size_t *count) {
  if (!out) {
    *count = n;
    return;
  }
  size_t asked = *count, got = asked < n ? asked : n;
  for (size_t i = 0; i < asked; i++)
    out[i] = i < got ? (CUgraphNode)(void *)&g->work.v[first + i] : NULL;
  *count = got;
}

FK_API CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode *nodes, size_t *count) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = graph_check(graph);
  if (!g || !count)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    node_list(g, 0, g->work.n ? 1 : 0, nodes, count);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphGetEdges(CUgraph graph, CUgraphNode *from, CUgraphNode *to, size_t *count) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = graph_check(graph);
  size_t edges = g && g->work.n ? g->work.n - 1 : 0;
  if (!g || !count || (!from != !to)) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (from) {
    size_t asked = *count;
    node_list(g, 0, edges, from, count);
    node_list(g, 1, edges, to, &asked);
  } else {
    *count = edges;
  }
  fk_unlock();
  return rc;
}

/* dir -1: the node's dependencies (the one before), +1: its dependents. */
static CUresult neighbours(CUgraphNode node, CUgraphNode *out, size_t *count, int dir) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  size_t i = 0;
  struct CUgraph_st *g = node_graph(node, &i);
  if (!g || !count)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (dir < 0)
    node_list(g, i ? i - 1 : 0, i ? 1 : 0, out, count);
  else
    node_list(g, i + 1, i + 1 < g->work.n ? 1 : 0, out, count);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode *deps, size_t *count) {
  return neighbours(node, deps, count, -1);
}
FK_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode *deps, size_t *count) {
  return neighbours(node, deps, count, 1);
}

FK_API CUresult cuGraphClone(CUgraph *clone, CUgraph graph) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = graph_check(graph), *c = NULL;
  if (!g || !clone)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (!(c = calloc(1, sizeof *c)) || !nodes_copy(&c->work, &g->work))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (rc == CUDA_SUCCESS) {
    c->magic = FK_GRAPH_MAGIC;
    c->origin = g;
    c->next = g_graphs;
    g_graphs = c;
    *clone = c;
  } else {
    free(c);
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode node, CUgraph clone) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  size_t i = 0;
  struct CUgraph_st *g = node_graph(node, &i), *c = graph_check(clone);
  if (!out || !g || !c || c->origin != g || i >= c->work.n)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *out = (CUgraphNode)(void *)&c->work.v[i];
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t *flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct fk_graph_exec *e = exec_check(exec);
  if (!e || !flags)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *flags = e->flags;
  fk_unlock();
  return rc;
}

/* The exec's copy of a node of the graph it was instantiated from, if the
 * node is of a kind that can be turned off (kernel, memset, memcpy). */
static fk_node *exec_node(CUgraphExec exec, CUgraphNode node) {
  size_t i = 0;
  struct fk_graph_exec *e = exec_check(exec);
  struct CUgraph_st *g = node_graph(node, &i);
  if (!e || !g || e->from != g || i >= e->work.n)
    return NULL;
  fk_node *n = &e->work.v[i];
  return n->type == FK_NODE_KERNEL || n->type == FK_NODE_MEMSET || n->type == FK_NODE_MEMCPY ? n
                                                                                           : NULL;
}

FK_API CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int on) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_node *n = exec_node(exec, node);
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
  fk_node *n = exec_node(exec, node);
  if (!n || !on)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *on = !n->disabled;
  fk_unlock();
  return rc;
}

typedef struct {
  CUdeviceptr dst;
  size_t pitch;
  unsigned int value, elementSize;
  size_t width, height;
} fk_memset_params; /* CUDA_MEMSET_NODE_PARAMS */

typedef struct {
  CUhostFn fn;
  void *userData;
} fk_host_params; /* CUDA_HOST_NODE_PARAMS */

/* A node's parameters by kind (want: its FK_NODE_*); 1 for another kind. */
static CUresult node_params(CUgraphNode node, int want, void *out) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_node *n = node_check(node);
  if (!n || !out || n->type != want) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (want == FK_NODE_MEMSET) {
    fk_memset_params p = {n->dst, n->count * n->width, n->value, n->width, n->count, 1};
    memcpy(out, &p, sizeof p);
  } else if (want == FK_NODE_HOST) {
    fk_host_params p = {n->host, n->user};
    memcpy(out, &p, sizeof p);
  } else {
    *(CUevent *)out = (CUevent)n->user;
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, void *params) {
  return node_params(node, FK_NODE_MEMSET, params);
}
FK_API CUresult cuGraphHostNodeGetParams(CUgraphNode node, void *params) {
  return node_params(node, FK_NODE_HOST, params);
}
FK_API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent *event) {
  return node_params(node, FK_NODE_EVENT, event);
}

/* --- node parameters set (graph nodes and an exec's copies) ----------------
 * Host nodes take a function and its argument, memset nodes a new
 * destination, value, element size (1, 2, 4) and count (one row: height 1,
 * the range inside one allocation), event-record nodes another event. In an
 * exec the node must be of the graph it was instantiated from, of the same
 * kind (1 otherwise). */
static CUresult set_params(fk_node *n, int kind, const void *in) {
  if (!n || !in || n->type != kind)
    return CUDA_ERROR_INVALID_VALUE;
  if (kind == FK_NODE_HOST) {
    const fk_host_params *p = in;
    if (!p->fn)
      return CUDA_ERROR_INVALID_VALUE;
    n->host = p->fn;
    n->user = p->userData;
  } else if (kind == FK_NODE_MEMSET) {
    const fk_memset_params *p = in;
    unsigned w = p->elementSize;
    if ((w != 1 && w != 2 && w != 4) || p->height != 1 || p->dst % w ||
        (p->width && !fk_mem_range_ok(p->dst, p->width * w)))
      return CUDA_ERROR_INVALID_VALUE;
    n->dst = p->dst;
    n->value = p->value;
    n->width = w;
    n->count = p->width;
  } else {
    if (!fk_obj_check(*(CUevent const *)in, FK_OBJ_EVENT))
      return CUDA_ERROR_INVALID_HANDLE;
    n->user = *(CUevent const *)in;
  }
  return CUDA_SUCCESS;
}

/* exec NULL: the graph's node; else the exec's copy of it. */
static CUresult node_set(CUgraphExec exec, CUgraphNode node, int kind, const void *in) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_node *n = node_check(node);
  if (exec) {
    size_t i = 0;
    struct fk_graph_exec *e = exec_check(exec);
    struct CUgraph_st *g = node_graph(node, &i);
    n = e && g && e->from == g && i < e->work.n ? &e->work.v[i] : NULL;
  }
  rc = set_params(n, kind, in);
  fk_unlock();
  return rc;
}

FK_API CUresult cuGraphHostNodeSetParams(CUgraphNode node, const void *params) {
  return node_set(NULL, node, FK_NODE_HOST, params);
}
FK_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const void *params) {
  return node_set(NULL, node, FK_NODE_MEMSET, params);
}
FK_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent event) {
  return node_set(NULL, node, FK_NODE_EVENT, &event);
}
FK_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                             const void *params) {
  return exec ? node_set(exec, node, FK_NODE_HOST, params) : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                               const void *params, CUcontext ctx) {
  (void)ctx;
  return exec ? node_set(exec, node, FK_NODE_MEMSET, params) : CUDA_ERROR_INVALID_VALUE;
}
FK_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node,
                                                   CUevent event) {
  return exec ? node_set(exec, node, FK_NODE_EVENT, &event) : CUDA_ERROR_INVALID_VALUE;
}

/* 1 if graph is a live graph of this process (fakecuda_userobj.c). Caller
 * holds fk_lock. */
int fk_graph_live(CUgraph graph) { return graph_check(graph) != NULL; }
