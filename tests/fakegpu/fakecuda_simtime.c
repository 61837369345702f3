/* Simulated time (FAKEGPU_KERNEL_US=N; default 0, off): every kernel launch
 * is work that takes N microseconds of wall-clock time on its stream, queued
 * behind the work already there, so a test can see work still running where
 * the fake otherwise finishes everything at the call.
 *
 * Each stream has a timeline: the CLOCK_MONOTONIC time its last work item
 * ends (a stream's fk_obj t_ms; the legacy and per-thread default streams
 * keep theirs per context here). A launch starts when the stream is free
 * (for the legacy stream: when every blocking stream of the context is
 * free too; for a blocking stream: when the legacy stream is), and ends N us
 * later. An event recorded on a stream completes when the work before it
 * does (its t_ms, also what cuEventElapsedTime measures). cuStreamWaitEvent
 * makes the stream's later work start after the event. Queries answer
 * CUDA_ERROR_NOT_READY until then; synchronize calls sleep until then.
 * Copies and memsets still happen at the call and take no time. */
#include <errno.h>
#include <time.h>

#include "fakecuda.h"

#define FK_SIM_CTXS 64
#define FK_STREAM_NON_BLOCKING 0x1u

static struct {
  const struct CUctx_st *ctx;
  double legacy, per_thread;
} g_ctx[FK_SIM_CTXS];

int fk_sim_on(void) { return fk_cfg.kernel_us > 0; }

double fk_sim_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The timeline of stream s of context c (NULL: not a stream). */
static double *timeline(const struct CUctx_st *c, CUstream s) {
  if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
    fk_obj *o = fk_obj_check(s, FK_OBJ_STREAM);
    return o ? &o->t_ms : NULL;
  }
  int free_slot = -1;
  for (int i = 0; i < FK_SIM_CTXS; i++) {
    if (g_ctx[i].ctx == c)
      return s == CU_STREAM_PER_THREAD ? &g_ctx[i].per_thread : &g_ctx[i].legacy;
    if (free_slot < 0 && (!g_ctx[i].ctx || !fk_ctx_known(g_ctx[i].ctx)))
      free_slot = i;
  }
  if (free_slot < 0)
    free_slot = 0; /* more contexts than slots: the oldest slot is shared */
  g_ctx[free_slot].ctx = c;
  g_ctx[free_slot].legacy = g_ctx[free_slot].per_thread = 0;
  return s == CU_STREAM_PER_THREAD ? &g_ctx[free_slot].per_thread : &g_ctx[free_slot].legacy;
}

static int is_legacy(CUstream s) { return !s || s == CU_STREAM_LEGACY; }

/* When new work on s may start: after the stream's own work, and after the
 * work the legacy stream synchronises with. */
static double start_on(const struct CUctx_st *c, CUstream s) {
  double *t = timeline(c, s), at = fk_sim_now();
  if (t && *t > at)
    at = *t;
  fk_obj *o = is_legacy(s) ? NULL : fk_obj_check(s, FK_OBJ_STREAM);
  if (o && !(o->flags & FK_STREAM_NON_BLOCKING) && *timeline(c, NULL) > at)
    at = *timeline(c, NULL);
  for (fk_obj *b = is_legacy(s) ? fk_obj_first() : NULL; b; b = b->next)
    if (b->kind == FK_OBJ_STREAM && b->ctx == c && !(b->flags & FK_STREAM_NON_BLOCKING) &&
        b->t_ms > at)
      at = b->t_ms;
  return at;
}

void fk_sim_launch(const struct CUctx_st *c, CUstream s) {
  double *t = timeline(c, s);
  if (t)
    *t = start_on(c, s) + (double)fk_cfg.kernel_us / 1e3;
}

double fk_sim_record(const struct CUctx_st *c, CUstream s) {
  double at = start_on(c, s), *t = timeline(c, s);
  if (t && is_legacy(s))
    *t = at; /* the legacy stream's later work waits for what it waited for */
  return at;
}

double fk_sim_stream_done(const struct CUctx_st *c, CUstream s) {
  double *t = timeline(c, s);
  return t ? *t : 0;
}

double fk_sim_ctx_done(const struct CUctx_st *c) {
  double at = *timeline(c, NULL);
  if (*timeline(c, CU_STREAM_PER_THREAD) > at)
    at = *timeline(c, CU_STREAM_PER_THREAD);
  for (fk_obj *o = fk_obj_first(); o; o = o->next)
    if (o->kind == FK_OBJ_STREAM && o->ctx == c && o->t_ms > at)
      at = o->t_ms;
  return at;
}

void fk_sim_wait_event(const struct CUctx_st *c, CUstream s, double event_ms) {
  double *t = timeline(c, s);
  if (t && event_ms > *t)
    *t = event_ms;
}

void fk_sim_sleep_until(double ms) {
  double left = ms - fk_sim_now();
  if (left <= 0)
    return;
  struct timespec ts = {(time_t)(left / 1e3),
                        (long)((left - (double)(time_t)(left / 1e3) * 1e3) * 1e6)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}
