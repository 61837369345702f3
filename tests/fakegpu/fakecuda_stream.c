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
  if (rc)
    return rc;
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
