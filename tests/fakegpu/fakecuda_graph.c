/* Stream capture: work recorded on capturing streams becomes a graph.
 *
 * cuStreamBeginCapture_v2 puts a stream (not the legacy or per-thread one:
 * 900) into capture; a second begin is 401 (ILLEGAL_STATE). While a stream
 * captures, kernel launches (their arguments copied; a kernel with a host
 * twin only when its parameter layout is known), host functions
 * (cuLaunchHostFunc), event records, memsets and copies between device,
 * managed or page-locked memory are recorded, not done. Every other piece
 * of work on it is something the fake does at the call and cannot record
 * (copies from or to pageable memory, stream-ordered allocation, waits on
 * events recorded outside the capture, callbacks): it answers 900
 * (STREAM_CAPTURE_UNSUPPORTED) and invalidates the capture, as the driver
 * does for work it cannot capture; so do cuStreamSynchronize and
 * cuStreamQuery, as on the driver. Work on an invalidated capture answers
 * 901; cuStreamEndCapture ends the capture and answers 901 with no graph,
 * else the graph of the recorded work, each node depending on the one
 * recorded before (fakecuda_graphnode.c holds graphs, fakecuda_graphexec.c
 * their replay). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_graph.h"

#define FK_ERR_ILLEGAL_STATE ((CUresult)401)
#define FK_ERR_CAPTURE_UNSUPPORTED ((CUresult)900)
#define FK_ERR_CAPTURE_INVALIDATED ((CUresult)901)
#define FK_ERR_CAPTURE_UNJOINED ((CUresult)904)
#define FK_ERR_CAPTURE_ISOLATION ((CUresult)905)
#define FK_ERR_CAPTURE_UNMATCHED ((CUresult)903)
#define FK_CAPTURE_ACTIVE 1
#define FK_CAPTURE_INVALIDATED 2

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

static struct fk_capture *g_captures; /* live captures */
static unsigned long long g_capture_ids;

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
  for (size_t i = 0; i < cap->work.n; i++)
    fk_node_clear(&cap->work.v[i]);
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
  } else if (!fk_nodes_add(&cap->work, n)) {
    *rc = CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    fk_member *mb = member_of(cap, (fk_obj *)s);
    if (mb)
      mb->last = ++cap->seq;
    *rc = CUDA_SUCCESS;
  }
  return 1;
}

/* A launch on a capturing stream becomes a kernel node holding a copy of
 * its arguments (checked again at each replay, as a launch's are). A kernel
 * with a host twin needs them to run at replay: one whose layout is unknown
 * (a module of host twins only) cannot be recorded (900). */
int fk_capture_kernel(CUstream s, const fk_launch_args *a, const fk_obj *fn, CUresult *rc) {
  if (!capture_of(s))
    return 0;
  fk_node n = {.type = FK_NODE_KERNEL, .fn = a->f, .shmem = a->shmem, .args_known = 1};
  memcpy(n.dims, a->dims, sizeof n.dims);
  CUresult pk = fk_params_pack(fn, a->params, a->extra, &n.args, &n.args_n);
  if (pk == CUDA_ERROR_NOT_FOUND && fn->noop) {
    n.args_known = 0; /* a no-op at replay: nothing reads them */
  } else if (pk == CUDA_ERROR_NOT_FOUND) {
    *rc = fk_stream_work(s);
    return 1;
  } else if (pk != CUDA_SUCCESS) {
    *rc = pk;
    return 1;
  }
  if (!capture_record(s, &n, rc) || *rc != CUDA_SUCCESS)
    fk_node_clear(&n);
  return 1;
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
    return 0;         /* an event of no live capture: a capturing s cannot wait on it (900) */
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
  fk_node node = {.type = FK_NODE_MEMSET,
                  .dst = dst,
                  .value = v,
                  .count = n,
                  .width = width,
                  .pitch = n * width,
                  .height = 1};
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
  fk_node node = {.type = FK_NODE_MEMCPY, .dst = dst, .src = src, .count = n, .one1d = 1};
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

/* The graph of an ended capture: its recorded work in order, each node
 * depending on the one before. */
static CUresult capture_graph(struct fk_capture *cap, CUgraph *graph) {
  for (size_t i = 1; i < cap->nm; i++)
    if (!member_merged(cap, &cap->m[i]))
      return FK_ERR_CAPTURE_UNJOINED;
  struct CUgraph_st *g = fk_graph_new();
  fk_gnode *prev = NULL;
  for (size_t i = 0; g && i < cap->work.n; i++)
    if (!(prev = fk_graph_append(g, &cap->work.v[i], &prev, prev ? 1 : 0))) {
      fk_graph_free(g);
      g = NULL;
    }
  if (!g)
    return CUDA_ERROR_OUT_OF_MEMORY;
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
