#include "server/queue.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/wait.h"

typedef struct qjob {
  struct qjob *next;
  int64_t id;
  char *pipeline, *input, *outdir;
  json_t *options;
  atomic_int cancel;
  atomic_int timed_out;
  atomic_int by_client; /* DELETE /v1/jobs/ID: cancelled for good */
  double deadline; /* monotonic seconds; 0: none */
} qjob;

struct ebb_queue {
  ebb_store *store;
  ebb_manager *m;
  ebb_allocator *alloc;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  qjob *head, *tail;
  qjob *running;
  int stop;
  atomic_int stopping; /* the server is stopping: a cancelled running job is requeued */
  double timeout_s;
  void (*on_state)(void *arg);
  void *arg;
  pthread_t worker, watchdog;
  int started, watching;
};

static void qjob_free(qjob *j) {
  if (!j)
    return;
  free(j->pipeline);
  free(j->input);
  free(j->outdir);
  json_decref(j->options);
  free(j);
}

/* --- per-stage released bytes: RELEASE events in the ledger between a stage's
 * start and end (the runner releases before it reports the stage done) ---- */
typedef struct stage_track {
  ebb_ledger *ledger;
  uint64_t t0;
  json_t *stages;
} stage_track;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_progress(void *arg, int index, int count, const char *stage, int done) {
  (void)index;
  (void)count;
  stage_track *t = arg;
  if (!done) {
    t->t0 = mono_ns();
    return;
  }
  size_t cap = ebb_ledger_count(t->ledger) + 16, n = 0;
  ebb_ledger_event *ev = malloc(cap * sizeof *ev);
  uint64_t bytes = 0;
  if (ev && ebb_ledger_events(t->ledger, ev, cap, &n, NULL) == 0)
    for (size_t i = 0; i < n; i++)
      if (ev[i].kind == EBB_EV_RELEASE && ev[i].t_ns >= t->t0)
        bytes += ev[i].bytes;
  free(ev);
  json_array_append_new(t->stages, json_pack("{s:s,s:I}", "name", stage, "released_bytes",
                                             (json_int_t)bytes));
}

/* {"result": <result.json>, "files": [paths under the job directory]} */
static char *result_text(const char *outdir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/result.json", outdir);
  json_t *res = json_load_file(path, 0, NULL);
  json_t *files = json_array();
  DIR *d = opendir(outdir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(path, sizeof path, "%s/%s", outdir, e->d_name);
      json_array_append_new(files, json_string(path));
    }
  if (d)
    closedir(d);
  json_t *o = json_pack("{s:o,s:o}", "result", res ? res : json_null(), "files", files);
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return t;
}

static double mono_s(void) { return mono_ns() / 1e9; }

/* Cancels the running job once its deadline has passed. */
static void *watchdog(void *arg) {
  ebb_queue *q = arg;
  pthread_mutex_lock(&q->lock);
  while (!q->stop) {
    ebb_cond_wait_ms(&q->cond, &q->lock, 100);
    qjob *j = q->running;
    if (j && j->deadline > 0 && mono_s() > j->deadline && !atomic_load(&j->timed_out)) {
      atomic_store(&j->timed_out, 1);
      atomic_store(&j->cancel, 1);
    }
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

static double timeout_of(ebb_queue *q, const char *pipeline) {
  const ebb_pipeline_def *d = ebb_manager_pipeline(q->m, pipeline);
  return d && d->timeout_s > 0 ? d->timeout_s : q->timeout_s;
}

/* Stopped by the server's stop: back to queued. Past its deadline: failed,
 * EBB_ETIMEDOUT. */
static int ended_early(ebb_queue *q, qjob *j, int rc, double timeout) {
  if (rc == EBB_ECANCELED && atomic_load(&q->stopping) && !atomic_load(&j->timed_out) &&
      !atomic_load(&j->by_client)) {
    ebb_store_requeue(q->store, j->id);
    ebb_log(EBB_LOG_INFO, "server", "job %lld: stopped by the server's stop; queued again",
            (long long)j->id);
    return 1;
  }
  if (rc && atomic_load(&j->timed_out)) {
    char msg[160];
    snprintf(msg, sizeof msg, "the job ran past its %.0f s deadline; it was cancelled and its "
                              "memory released", timeout);
    ebb_store_finish(q->store, j->id, EBB_JOB_FAILED, "EBB_ETIMEDOUT", msg, NULL, 0, "[]");
    ebb_log(EBB_LOG_WARN, "server", "job %lld: failed: %s", (long long)j->id, msg);
    return 1;
  }
  return 0;
}

static void run_one(ebb_queue *q, qjob *j) {
  ebb_store_set_running(q->store, j->id);
  ebb_log(EBB_LOG_INFO, "server", "job %lld: running pipeline '%s'", (long long)j->id,
          j->pipeline);
  stage_track t = {.ledger = ebb_allocator_ledger(q->alloc), .stages = json_array()};
  ebb_job_result res;
  int rc = ebb_manager_run_job(q->m, j->pipeline, j->input, j->outdir, j->options,
                                        &j->cancel, on_progress, &t, &res);
  if (ended_early(q, j, rc, timeout_of(q, j->pipeline))) {
    json_decref(t.stages);
    return;
  }
  ebb_job_state st = rc == 0                   ? EBB_JOB_SUCCEEDED
                     : rc == EBB_ECANCELED &&
                               atomic_load(&j->cancel) ? EBB_JOB_CANCELLED
                                                       : EBB_JOB_FAILED;
  char *result = rc == 0 ? result_text(j->outdir) : NULL;
  char *stages = json_dumps(t.stages, JSON_COMPACT);
  ebb_store_finish(q->store, j->id, st, rc ? ebb_errname(rc) : NULL, rc ? res.message : NULL,
                   result, res.released_bytes, stages);
  ebb_log(rc ? EBB_LOG_WARN : EBB_LOG_INFO, "server", "job %lld: %s%s%s", (long long)j->id,
          ebb_job_state_name(st), rc ? ": " : "", rc ? res.message : "");
  free(result);
  free(stages);
  json_decref(t.stages);
}

static void *worker(void *arg) {
  ebb_queue *q = arg;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (!q->stop && !q->head)
      pthread_cond_wait(&q->cond, &q->lock);
    if (q->stop)
      break;
    qjob *j = q->head;
    q->head = j->next;
    if (!q->head)
      q->tail = NULL;
    double timeout = timeout_of(q, j->pipeline);
    j->deadline = timeout > 0 ? mono_s() + timeout : 0;
    q->running = j;
    pthread_mutex_unlock(&q->lock);
    if (q->on_state)
      q->on_state(q->arg);
    run_one(q, j);
    if (q->on_state)
      q->on_state(q->arg);
    pthread_mutex_lock(&q->lock);
    q->running = NULL;
    qjob_free(j);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

int ebb_queue_create(ebb_store *store, ebb_manager *m, ebb_allocator *alloc,
                     const ebb_queue_opts *o, ebb_queue **out) {
  ebb_queue *q = calloc(1, sizeof *q);
  if (!q)
    return ebb_seterr(EBB_ENOMEM, "queue: out of host memory");
  q->store = store;
  q->m = m;
  q->alloc = alloc;
  q->timeout_s = o ? o->timeout_s : 0;
  q->on_state = o ? o->on_state : NULL;
  q->arg = o ? o->arg : NULL;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cond, NULL);
  if (pthread_create(&q->worker, NULL, worker, q) != 0) {
    ebb_queue_destroy(q);
    return ebb_seterr(EBB_ENOMEM, "queue: cannot start the worker thread");
  }
  q->started = 1;
  if (pthread_create(&q->watchdog, NULL, watchdog, q) != 0) {
    ebb_queue_destroy(q);
    return ebb_seterr(EBB_ENOMEM, "queue: cannot start the watchdog thread");
  }
  q->watching = 1;
  *out = q;
  return 0;
}

void ebb_queue_destroy(ebb_queue *q) {
  if (!q)
    return;
  atomic_store(&q->stopping, 1);
  pthread_mutex_lock(&q->lock);
  q->stop = 1;
  if (q->running)
    atomic_store(&q->running->cancel, 1);
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->lock);
  if (q->started)
    pthread_join(q->worker, NULL);
  if (q->watching)
    pthread_join(q->watchdog, NULL);
  for (qjob *j = q->head, *n; j; j = n) {
    n = j->next;
    qjob_free(j);
  }
  pthread_cond_destroy(&q->cond);
  pthread_mutex_destroy(&q->lock);
  free(q);
}

int ebb_queue_push(ebb_queue *q, int64_t id, const char *pipeline, const char *input,
                   const char *outdir, json_t *options) {
  qjob *j = calloc(1, sizeof *j);
  if (!j || !(j->pipeline = strdup(pipeline)) || !(j->input = strdup(input)) ||
      !(j->outdir = strdup(outdir))) {
    qjob_free(j);
    return ebb_seterr(EBB_ENOMEM, "queue: out of host memory");
  }
  j->id = id;
  j->options = options ? json_deep_copy(options) : NULL;
  pthread_mutex_lock(&q->lock);
  if (q->tail)
    q->tail->next = j;
  else
    q->head = j;
  q->tail = j;
  pthread_cond_broadcast(&q->cond); /* the worker, not the watchdog */
  pthread_mutex_unlock(&q->lock);
  return 0;
}

int ebb_queue_cancel(ebb_queue *q, int64_t id, int *running) {
  *running = 0;
  pthread_mutex_lock(&q->lock);
  if (q->running && q->running->id == id) {
    atomic_store(&q->running->by_client, 1);
    atomic_store(&q->running->cancel, 1);
    *running = 1;
    pthread_mutex_unlock(&q->lock);
    return 0;
  }
  qjob *found = NULL, *prev = NULL;
  for (qjob *j = q->head; j; prev = j, j = j->next)
    if (j->id == id) {
      found = j;
      if (prev)
        prev->next = j->next;
      else
        q->head = j->next;
      if (q->tail == j)
        q->tail = prev;
      break;
    }
  pthread_mutex_unlock(&q->lock);
  if (!found)
    return ebb_seterr(EBB_ENOTFOUND, "job %lld is not queued or running", (long long)id);
  ebb_store_finish(q->store, id, EBB_JOB_CANCELLED, "EBB_ECANCELED", "cancelled before it ran",
                   NULL, 0, "[]");
  qjob_free(found);
  return 0;
}
