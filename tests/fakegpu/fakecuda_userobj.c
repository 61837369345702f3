/* User objects (cuUserObjectCreate/Retain/Release) and the references
 * graphs hold on them (cuGraphRetainUserObject/ReleaseUserObject); the
 * graphs themselves are fakecuda_graph.c's. */
#include <stdlib.h>

#include "fakecuda.h"

/* --- user objects (cuUserObject*, cuGraphRetain/ReleaseUserObject) ---------
 * A reference count and a destructor: the destructor runs once, on the
 * driver's callback thread (as cuLaunchHostFunc's functions do), when the
 * last reference goes, whether the caller's or a graph's. A graph's
 * references go with the graph. Flags: CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
 * (1) is required at creation; CU_GRAPH_USER_OBJECT_MOVE (1) moves the
 * caller's references into the graph. Counts of 0, more references released
 * than held, or unknown handles: 1. */
#define FK_USER_MAGIC 0x05e60b1u

typedef struct fk_user_object {
  uint32_t magic;
  unsigned long long refs;
  void *ptr;
  CUhostFn destroy;
  struct fk_user_object *next;
} fk_user_object;

typedef struct fk_graph_ref {
  struct CUgraph_st *g;
  fk_user_object *o;
  unsigned long long refs;
  struct fk_graph_ref *next;
} fk_graph_ref;

static fk_user_object *g_user_objects;
static fk_graph_ref *g_graph_refs;

static fk_user_object *user_check(void *h) {
  for (fk_user_object *o = g_user_objects; o; o = o->next)
    if (o == h && o->magic == FK_USER_MAGIC)
      return o;
  return NULL;
}

/* Drops n references (fk_lock held): at 0 the object goes and its
 * destructor is handed to the callback thread (run after fk_unlock). */
static void user_drop(fk_user_object *o, unsigned long long n, CUhostFn *fn, void **arg) {
  o->refs -= n;
  if (o->refs)
    return;
  for (fk_user_object **pp = &g_user_objects; *pp; pp = &(*pp)->next)
    if (*pp == o) {
      *pp = o->next;
      break;
    }
  *fn = o->destroy;
  *arg = o->ptr;
  o->magic = 0;
  free(o);
}

typedef struct {
  CUhostFn fn;
  void *arg;
} fk_destructor;

static void run_destructor(CUstream s, CUresult status, void *p) {
  fk_destructor *d = p;
  (void)s, (void)status;
  d->fn(d->arg);
  free(d);
}

/* Hands a destructor to the callback thread; call without fk_lock. */
static void user_destroy_later(CUhostFn fn, void *arg) {
  fk_destructor *d = fn ? malloc(sizeof *d) : NULL;
  if (!d)
    return;
  *d = (fk_destructor){fn, arg};
  if (fk_callback_enqueue(NULL, run_destructor, d) != CUDA_SUCCESS)
    free(d);
}

FK_API CUresult cuUserObjectCreate(void **out, void *ptr, CUhostFn destroy, unsigned int refs,
                                   unsigned int flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!out || !destroy || !refs || flags != 1)
    return CUDA_ERROR_INVALID_VALUE;
  fk_user_object *o = calloc(1, sizeof *o);
  if (!o)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *o = (fk_user_object){FK_USER_MAGIC, refs, ptr, destroy, NULL};
  fk_lock();
  o->next = g_user_objects;
  g_user_objects = o;
  fk_unlock();
  *out = o;
  return CUDA_SUCCESS;
}

static CUresult user_count(void *h, unsigned int n, int retain) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  CUhostFn fn = NULL;
  void *arg = NULL;
  fk_lock();
  fk_user_object *o = user_check(h);
  if (!o || !n || (!retain && n > o->refs))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (retain)
    o->refs += n;
  else
    user_drop(o, n, &fn, &arg);
  fk_unlock();
  user_destroy_later(fn, arg);
  return rc;
}

FK_API CUresult cuUserObjectRetain(void *h, unsigned int n) { return user_count(h, n, 1); }
FK_API CUresult cuUserObjectRelease(void *h, unsigned int n) { return user_count(h, n, 0); }

static fk_graph_ref *graph_ref(struct CUgraph_st *g, fk_user_object *o) {
  for (fk_graph_ref *r = g_graph_refs; r; r = r->next)
    if (r->g == g && r->o == o)
      return r;
  return NULL;
}

FK_API CUresult cuGraphRetainUserObject(CUgraph graph, void *h, unsigned int n,
                                        unsigned int flags) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  struct CUgraph_st *g = fk_graph_live(graph) ? graph : NULL;
  fk_user_object *o = user_check(h);
  fk_graph_ref *r = g && o ? graph_ref(g, o) : NULL;
  if (!g || !o || !n || (flags & ~1u) || ((flags & 1u) && n > o->refs))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (!r && !(r = calloc(1, sizeof *r)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  else if (!r->g) {
    *r = (fk_graph_ref){g, o, 0, g_graph_refs};
    g_graph_refs = r;
  }
  if (rc == CUDA_SUCCESS) {
    r->refs += n;
    if (!(flags & 1u))
      o->refs += n; /* new references; MOVE takes the caller's */
  }
  fk_unlock();
  return rc;
}

/* Releases n of a graph's references (all of them: n 0). fk_lock held. */
static CUresult graph_release(struct CUgraph_st *g, fk_user_object *o, unsigned long long n,
                              CUhostFn *fn, void **arg) {
  for (fk_graph_ref **pp = &g_graph_refs; *pp; pp = &(*pp)->next) {
    fk_graph_ref *r = *pp;
    if (r->g != g || (o && r->o != o))
      continue;
    unsigned long long k = n ? n : r->refs;
    if (k > r->refs)
      return CUDA_ERROR_INVALID_VALUE;
    r->refs -= k;
    fk_user_object *obj = r->o;
    if (!r->refs) {
      *pp = r->next;
      free(r);
    }
    user_drop(obj, k, fn, arg);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuGraphReleaseUserObject(CUgraph graph, void *h, unsigned int n) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  CUhostFn fn = NULL;
  void *arg = NULL;
  fk_lock();
  struct CUgraph_st *g = fk_graph_live(graph) ? graph : NULL;
  fk_user_object *o = user_check(h);
  rc = !g || !o || !n ? CUDA_ERROR_INVALID_VALUE : graph_release(g, o, n, &fn, &arg);
  fk_unlock();
  user_destroy_later(fn, arg);
  return rc;
}

/* A graph being destroyed drops every reference it holds; without fk_lock. */
void fk_graph_user_objects_gone(struct CUgraph_st *g) {
  for (int more = 1; more;) {
    CUhostFn fn = NULL;
    void *arg = NULL;
    fk_lock();
    more = graph_release(g, NULL, 0, &fn, &arg) == CUDA_SUCCESS;
    fk_unlock();
    user_destroy_later(fn, arg);
  }
}
