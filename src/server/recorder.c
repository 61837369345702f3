/* The recorder (recorder.h): the store's writes for the queue's jobs, in
 * order, each followed by its log line and on_state. */
#include "server/recorder.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

typedef enum { REC_RUNNING, REC_FINISH, REC_REQUEUE } rec_kind;

typedef struct qrec {
  struct qrec *next;
  rec_kind kind;
  int64_t id;
  srv_job_state st;
  char *code, *msg, *result, *stages; /* owned; may be NULL */
  uint64_t released;
  base_log_level level;
  char *line; /* logged after the write (owned; may be NULL) */
} qrec;

struct srv_recorder {
  srv_store *store;
  void (*on_state)(void *arg);
  void *arg;
  pthread_mutex_t rlock;
  pthread_cond_t rcond, ridle;
  qrec *rhead, *rtail;
  int rstop, rbusy;
  pthread_t thread;
  int recording;
};

static char *dup_or_null(const char *t) { return t ? strdup(t) : NULL; }

static void rec_free(qrec *r) {
  free(r->code);
  free(r->msg);
  free(r->result);
  free(r->stages);
  free(r->line);
  free(r);
}

static void rec_write(srv_recorder *q, qrec *r) {
  if (r->kind == REC_RUNNING)
    srv_store_set_running(q->store, r->id);
  else if (r->kind == REC_REQUEUE)
    srv_store_requeue(q->store, r->id);
  else
    srv_store_finish(q->store, r->id, r->st, r->code, r->msg, r->result, r->released,
                     r->stages ? r->stages : "[]");
  if (r->line)
    base_log(r->level, "server", "%s", r->line);
  if (r->kind != REC_REQUEUE && q->on_state)
    q->on_state(q->arg);
}

static void *recorder(void *arg) {
  srv_recorder *q = arg;
  pthread_mutex_lock(&q->rlock);
  for (;;) {
    while (!q->rhead && !q->rstop)
      pthread_cond_wait(&q->rcond, &q->rlock);
    qrec *r = q->rhead;
    if (!r)
      break; /* stopping and drained */
    q->rhead = r->next;
    if (!q->rhead)
      q->rtail = NULL;
    q->rbusy = 1;
    pthread_mutex_unlock(&q->rlock);
    rec_write(q, r);
    rec_free(r);
    pthread_mutex_lock(&q->rlock);
    q->rbusy = 0;
    if (!q->rhead)
      pthread_cond_broadcast(&q->ridle);
  }
  pthread_mutex_unlock(&q->rlock);
  return NULL;
}

/* Hands r (owned) to the recorder; without one (or out of host memory)
 * the write is made here. */
static void record(srv_recorder *q, qrec *r) {
  if (!r) /* out of host memory: the store keeps the job's last state */
    return;
  pthread_mutex_lock(&q->rlock);
  if (q->recording && !q->rstop) {
    if (q->rtail)
      q->rtail->next = r;
    else
      q->rhead = r;
    q->rtail = r;
    pthread_cond_signal(&q->rcond);
    r = NULL;
  }
  pthread_mutex_unlock(&q->rlock);
  if (r) {
    rec_write(q, r);
    rec_free(r);
  }
}

/* A write of kind for job id, with the log line fmt (may be NULL). */
static qrec *rec_new(rec_kind kind, int64_t id, base_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static qrec *rec_new(rec_kind kind, int64_t id, base_log_level level, const char *fmt, ...) {
  qrec *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  *r = (qrec){.kind = kind, .id = id, .level = level};
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&r->line, fmt, ap) < 0)
      r->line = NULL;
    va_end(ap);
  }
  return r;
}

void srv_record_running(srv_recorder *q, int64_t id, const char *pipeline, const char *label) {
  /* written before the job runs: whoever reads the store (the events, a
   * client) finds it running while its stages take memory */
  qrec *r = rec_new(REC_RUNNING, id, EBB_LOG_INFO, "job %lld: running pipeline '%s' on %s",
                    (long long)id, pipeline, label);
  if (r) {
    rec_write(q, r);
    rec_free(r);
  }
}

void srv_record_requeue(srv_recorder *q, int64_t id) {
  record(q, rec_new(REC_REQUEUE, id, EBB_LOG_INFO,
                    "job %lld: stopped by the server's stop; queued again", (long long)id));
}

void srv_record_finish(srv_recorder *q, int64_t id, srv_job_state st, const char *code,
                       const char *msg, const char *result, uint64_t released, const char *stages) {
  qrec *r = rec_new(REC_FINISH, id, msg ? EBB_LOG_WARN : EBB_LOG_INFO, "job %lld: %s%s%s",
                    (long long)id, srv_job_state_name(st), msg ? ": " : "", msg ? msg : "");
  if (!r)
    return;
  r->st = st;
  r->released = released;
  r->code = dup_or_null(code);
  r->msg = dup_or_null(msg);
  r->result = dup_or_null(result);
  r->stages = dup_or_null(stages);
  record(q, r);
}

void srv_record_flush(srv_recorder *q) {
  pthread_mutex_lock(&q->rlock);
  while (q->recording && (q->rhead || q->rbusy))
    pthread_cond_wait(&q->ridle, &q->rlock);
  pthread_mutex_unlock(&q->rlock);
}

int srv_recorder_start(srv_store *store, void (*on_state)(void *arg), void *arg,
                       srv_recorder **out) {
  *out = NULL;
  srv_recorder *q = calloc(1, sizeof *q);
  if (!q)
    return ebb_seterr(EBB_ENOMEM, "queue: out of host memory");
  *q = (srv_recorder){.store = store, .on_state = on_state, .arg = arg};
  pthread_mutex_init(&q->rlock, NULL);
  pthread_cond_init(&q->rcond, NULL);
  pthread_cond_init(&q->ridle, NULL);
  if (pthread_create(&q->thread, NULL, recorder, q) != 0) {
    srv_recorder_stop(q);
    return ebb_seterr(EBB_ENOMEM, "queue: cannot start the recorder thread");
  }
  q->recording = 1;
  *out = q;
  return 0;
}

void srv_recorder_stop(srv_recorder *q) {
  if (!q)
    return;
  pthread_mutex_lock(&q->rlock); /* the writers are gone: the recorder drains and ends */
  q->rstop = 1;
  pthread_cond_signal(&q->rcond);
  pthread_mutex_unlock(&q->rlock);
  if (q->recording)
    pthread_join(q->thread, NULL);
  pthread_cond_destroy(&q->ridle);
  pthread_cond_destroy(&q->rcond);
  pthread_mutex_destroy(&q->rlock);
  free(q);
}
