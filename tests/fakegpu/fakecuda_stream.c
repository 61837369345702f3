/* Stream callbacks, waits and queries, and the profiler switches.
 *
 * Work on the fake is done at the call, so when cuStreamAddCallback returns
 * everything queued before it on the stream is complete. The callback still
 * runs as the real driver runs it: later, on a driver thread (never the
 * caller's), one at a time in the order they were added; a driver call from
 * inside a callback answers 800 (NOT_PERMITTED). cuStreamSynchronize and cuCtxSynchronize return only
 * after the callbacks queued before them have run; cuStreamQuery answers 600
 * (NOT_READY) while one of its stream's callbacks is pending. */
#include <pthread.h>
#include <time.h>
#include <stdlib.h>

#include "fakecuda.h"

typedef struct fk_cb {
  CUstream stream;
  CUstreamCallback fn;
  void *user;
  CUresult status;
  struct fk_cb *next;
} fk_cb;

static pthread_mutex_t g_cb_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cb_cv = PTHREAD_COND_INITIALIZER;
static fk_cb *g_head, *g_tail;
static unsigned long long g_queued, g_done;
static int g_thread_started;
static pthread_t g_thread;
static __thread int t_is_cb_thread;

static void *callback_thread(void *arg) {
  (void)arg;
  t_is_cb_thread = 1;
  pthread_mutex_lock(&g_cb_mu);
  for (;;) {
    while (!g_head)
      pthread_cond_wait(&g_cb_cv, &g_cb_mu);
    fk_cb *cb = g_head;
    pthread_mutex_unlock(&g_cb_mu);
    cb->fn(cb->stream, cb->status, cb->user);
    pthread_mutex_lock(&g_cb_mu);
    g_head = cb->next; /* dequeued after it ran: cuStreamQuery sees it pending */
    if (!g_head)
      g_tail = NULL;
    g_done++;
    free(cb);
    pthread_cond_broadcast(&g_cb_cv);
  }
  return NULL;
}

int fk_in_callback(void) { return t_is_cb_thread; }

void fk_callbacks_drain(void) {
  if (t_is_cb_thread)
    return; /* a callback must not wait for itself */
  pthread_mutex_lock(&g_cb_mu);
  unsigned long long target = g_queued;
  while (g_done < target)
    pthread_cond_wait(&g_cb_cv, &g_cb_mu);
  pthread_mutex_unlock(&g_cb_mu);
}

FK_API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback fn, void *user,
                                    unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (!fn || flags != 0))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s);
  fk_unlock();
  return rc ? rc : fk_callback_enqueue(s, fn, user);
}

/* Queues fn for the callback thread (started on first use), after every
 * callback queued before; call without fk_lock. */
CUresult fk_callback_enqueue(CUstream s, CUstreamCallback fn, void *user) {
  CUresult rc = CUDA_SUCCESS;
  fk_cb *cb = calloc(1, sizeof *cb);
  if (!cb)
    return CUDA_ERROR_OUT_OF_MEMORY;
  cb->stream = s;
  cb->fn = fn;
  cb->user = user;
  cb->status = CUDA_SUCCESS; /* a faulted context answers 700 above instead */
  pthread_mutex_lock(&g_cb_mu);
  if (!g_thread_started) {
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&g_thread, &at, callback_thread, NULL) != 0)
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
      g_thread_started = 1;
    pthread_attr_destroy(&at);
  }
  if (rc == CUDA_SUCCESS) {
    if (g_tail)
      g_tail->next = cb;
    else
      g_head = cb;
    g_tail = cb;
    g_queued++;
    pthread_cond_broadcast(&g_cb_cv);
  } else {
    free(cb);
  }
  pthread_mutex_unlock(&g_cb_mu);
  return rc;
}

FK_API CUresult cuStreamQuery(CUstream s) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s); /* querying a capturing stream: 900 */
  if (rc == CUDA_SUCCESS && fk_sim_on() && fk_sim_now() < fk_sim_stream_done(c, s))
    rc = CUDA_ERROR_NOT_READY; /* its simulated work still runs */
  fk_unlock();
  if (rc)
    return rc;
  pthread_mutex_lock(&g_cb_mu);
  for (fk_cb *cb = g_head; cb; cb = cb->next)
    if (cb->stream == s || !s || !cb->stream) /* the legacy stream waits for all */
      rc = CUDA_ERROR_NOT_READY;
  pthread_mutex_unlock(&g_cb_mu);
  return rc;
}

/* The handles are checked; with simulated time (FAKEGPU_KERNEL_US) the
 * stream's later work starts after the event. */
FK_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && (flags & ~1u))
    rc = CUDA_ERROR_INVALID_VALUE;
  fk_obj *ev = rc ? NULL : fk_obj_check(e, FK_OBJ_EVENT);
  if (rc == CUDA_SUCCESS && (!fk_stream_ok(s) || !ev))
    rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS && fk_capture_wait(s, ev, &rc)) {
    fk_unlock(); /* s joined the event's capture, or merged a stream back */
    return rc;
  }
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s);
  if (rc == CUDA_SUCCESS && fk_sim_on() && ev->recorded)
    fk_sim_wait_event(c, s, ev->t_ms); /* s's later work starts after the event */
  fk_unlock();
  return rc;
}

/* Complete once recorded (work is synchronous; with simulated time, once the
 * work before it has ended); an event never recorded is
 * complete too, as the driver documents. */
FK_API CUresult cuEventQuery(CUevent e) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(e, FK_OBJ_EVENT);
  if (rc == CUDA_SUCCESS && !o)
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && fk_capture_live(o->cap_id))
    rc = FK_ERR_CAPTURED_EVENT; /* last recorded in a capture that goes on */
  if (rc == CUDA_SUCCESS && o->recorded && fk_sim_on() && fk_sim_now() < o->t_ms)
    rc = CUDA_ERROR_NOT_READY; /* the work before it still runs */
  fk_unlock();
  return rc;
}

static CUresult profiler(void) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_unlock();
  return rc;
}

FK_API CUresult cuProfilerStart(void) { return profiler(); }
FK_API CUresult cuProfilerStop(void) { return profiler(); }

/* --- stream attributes (cuStreamGet/SetAttribute, cuStreamCopyAttributes) --
 * The ones the driver takes for a stream: ACCESS_POLICY_WINDOW (1; bytes up
 * to the device's window, 134,213,632, hit ratio in [0, 1], properties
 * NORMAL/STREAMING/PERSISTING), SYNCHRONIZATION_POLICY (3; AUTO..BLOCKING_SYNC
 * = 1..4), PRIORITY (8; clamped into the stream priority range, as
 * cuStreamCreateWithPriority does), MEM_SYNC_DOMAIN_MAP (9) and
 * MEM_SYNC_DOMAIN (10; 0 or 1). Any other id or value: 1. Values are kept
 * and given back (the fake has no cache or scheduler to steer); the legacy
 * and per-thread streams answer the defaults and take no values (1). */
#define FK_ATTR_VALUE_BYTES 64
#define FK_ATTR_SLOTS 11

typedef struct {
  void *base;
  size_t bytes;
  float hit_ratio;
  int hit_prop, miss_prop;
} fk_apw;

static int attr_ok(int id) { return id == 1 || id == 3 || id == 8 || id == 9 || id == 10; }

static int attr_value_ok(int id, const unsigned char *v) {
  fk_apw w;
  int i;
  switch (id) {
  case 1:
    memcpy(&w, v, sizeof w);
    return w.bytes <= 134213632u && w.hit_ratio >= 0.0f && w.hit_ratio <= 1.0f && w.hit_prop >= 0 &&
           w.hit_prop <= 2 && w.miss_prop >= 0 && w.miss_prop <= 2;
  case 3: memcpy(&i, v, sizeof i); return i >= 1 && i <= 4;
  case 10: memcpy(&i, v, sizeof i); return i == 0 || i == 1;
  default: return 1;
  }
}

FK_API CUresult cuStreamGetAttribute(CUstream s, int attr, void *value) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(s, FK_OBJ_STREAM);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && (!value || !attr_ok(attr)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    unsigned char *v = value;
    memset(v, 0, FK_ATTR_VALUE_BYTES);
    if (o && o->attrs)
      memcpy(v, o->attrs + attr * FK_ATTR_VALUE_BYTES, FK_ATTR_VALUE_BYTES);
    else if (attr == 3)
      v[0] = 1; /* CU_SYNC_POLICY_AUTO */
    if (attr == 8) {
      int prio = o ? o->priority : 0;
      memcpy(v, &prio, sizeof prio);
    }
  }
  fk_unlock();
  return rc;
}

/* Sets one attribute of stream o (fk_lock held). */
static CUresult attr_set(fk_obj *o, int attr, const unsigned char *v) {
  if (!o->attrs) {
    if (!(o->attrs = calloc(FK_ATTR_SLOTS, FK_ATTR_VALUE_BYTES)))
      return CUDA_ERROR_OUT_OF_MEMORY;
    o->attrs[3 * FK_ATTR_VALUE_BYTES] = 1; /* CU_SYNC_POLICY_AUTO */
  }
  memcpy(o->attrs + attr * FK_ATTR_VALUE_BYTES, v, FK_ATTR_VALUE_BYTES);
  if (attr == 8) {
    int prio;
    memcpy(&prio, v, sizeof prio);
    o->priority = prio > FK_PRIO_LEAST      ? FK_PRIO_LEAST
                  : prio < FK_PRIO_GREATEST ? FK_PRIO_GREATEST
                                            : prio;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamSetAttribute(CUstream s, int attr, const void *value) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *o = rc ? NULL : fk_obj_check(s, FK_OBJ_STREAM);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && (!o || !value || !attr_ok(attr) || !attr_value_ok(attr, value)))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS)
    rc = attr_set(o, attr, value);
  fk_unlock();
  return rc;
}

FK_API CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  fk_obj *d = rc ? NULL : fk_obj_check(dst, FK_OBJ_STREAM);
  fk_obj *o = rc ? NULL : fk_obj_check(src, FK_OBJ_STREAM);
  if (rc == CUDA_SUCCESS && (!fk_stream_ok(dst) || !fk_stream_ok(src)))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && !d)
    rc = CUDA_ERROR_INVALID_VALUE;
  for (int a = 1; rc == CUDA_SUCCESS && a < FK_ATTR_SLOTS; a++) {
    unsigned char v[FK_ATTR_VALUE_BYTES] = {0};
    if (!attr_ok(a))
      continue;
    if (o && o->attrs)
      memcpy(v, o->attrs + a * FK_ATTR_VALUE_BYTES, FK_ATTR_VALUE_BYTES);
    else if (a == 3)
      v[0] = 1;
    if (a == 8) {
      int prio = o ? o->priority : 0;
      memcpy(v, &prio, sizeof prio);
    }
    rc = attr_set(d, a, v);
  }
  fk_unlock();
  return rc;
}

/* --- context events (cuCtxRecordEvent, cuCtxWaitEvent) ----------------------
 * Record: the event completes when all work of the context done so far has
 * (at once, the fake's work being done at each call; with simulated time,
 * when the legacy stream's work ends). Wait: the context's later work starts
 * after the event (simulated time: on the legacy stream). The context must be
 * usable (201, or its sticky error), the event one of that context (400); an
 * event of a capture that goes on: 907. */
static CUresult ctx_event(CUcontext ctx, CUevent e, int record) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_obj *ev = NULL;
  rc = ctx ? fk_ctx_usable(ctx) : CUDA_ERROR_INVALID_CONTEXT;
  if (rc == CUDA_SUCCESS && (!(ev = fk_obj_check(e, FK_OBJ_EVENT)) || ev->ctx != ctx))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (rc == CUDA_SUCCESS && fk_capture_live(ev->cap_id))
    rc = FK_ERR_CAPTURED_EVENT;
  if (rc == CUDA_SUCCESS && record) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ev->recorded = 1;
    ev->t_ms = fk_sim_on() ? fk_sim_record(ctx, NULL)
                           : (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
  } else if (rc == CUDA_SUCCESS && fk_sim_on() && ev->recorded) {
    fk_sim_wait_event(ctx, NULL, ev->t_ms);
  }
  fk_unlock();
  return rc;
}

FK_API CUresult cuCtxRecordEvent(CUcontext ctx, CUevent e) { return ctx_event(ctx, e, 1); }
FK_API CUresult cuCtxWaitEvent(CUcontext ctx, CUevent e) { return ctx_event(ctx, e, 0); }
