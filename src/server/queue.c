#include "server/queue.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "pipeline/host.h"
#include "pipeline/placement.h"
#include "pipeline/sessions.h"
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
  double queued_at; /* monotonic seconds */
} qjob;

/* One device the queue runs jobs on: its manager, its worker thread, the
 * job it runs and whether it failed. */
typedef struct qdev {
  ebb_queue *q;
  ebb_manager *m;
  ebb_allocator *alloc;
  qjob *running;
  int failed;      /* taken out of placement */
  char why[1100]; /* the error that failed it */
  uint64_t jobs;   /* jobs started here */
  pthread_t worker;
  int started;
  /* Residency (several devices): the pipelines a job loaded here, when a
   * job of each last ended here, and whether its policy put it to sleep. */
  struct {
    char name[128];
    double last;
    int asleep;
  } res[16];
  size_t nres;
} qdev;

struct ebb_queue {
  ebb_store *store;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  qjob *head, *tail;
  qdev *devs;
  size_t ndevs;
  int place; /* several devices: placement, resident pipelines, failures */
  double max_wait_s;
  double keep_resident_s; /* --keep-resident */
  int stop;
  atomic_int stopping; /* the server is stopping: a cancelled running job is requeued */
  double timeout_s;
  void (*on_state)(void *arg);
  void *arg;
  pthread_t watchdog;
  int watching;
  /* the recorder (below): the store's writes for the jobs, in order */
  pthread_mutex_t rlock;
  pthread_cond_t rcond, ridle;
  struct qrec *rhead, *rtail;
  int rstop, rbusy;
  pthread_t recorder;
  int recording;
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

/* --- the recorder -------------------------------------------------------------
 * A store write commits (fsync): a job's end written by the device's worker
 * kept the device idle for the disk before its next job (about 15 ms a job
 * on a busy disk, up to 100 ms, of a 500 ms job). One thread writes the ends
 * (and requeues) in order instead, each followed by its log line and
 * on_state, so the log never runs ahead of the store; the device starts its
 * next job meanwhile. A job's "running" is written before it runs, by the
 * worker. ebb_queue_destroy drains the recorder. */
typedef enum { REC_RUNNING, REC_FINISH, REC_REQUEUE } rec_kind;

typedef struct qrec {
  struct qrec *next;
  rec_kind kind;
  int64_t id;
  ebb_job_state st;
  char *code, *msg, *result, *stages; /* owned; may be NULL */
  uint64_t released;
  ebb_log_level level;
  char *line; /* logged after the write (owned; may be NULL) */
} qrec;

static char *dup_or_null(const char *t) { return t ? strdup(t) : NULL; }

static void rec_free(qrec *r) {
  free(r->code);
  free(r->msg);
  free(r->result);
  free(r->stages);
  free(r->line);
  free(r);
}

static void rec_write(ebb_queue *q, qrec *r) {
  if (r->kind == REC_RUNNING)
    ebb_store_set_running(q->store, r->id);
  else if (r->kind == REC_REQUEUE)
    ebb_store_requeue(q->store, r->id);
  else
    ebb_store_finish(q->store, r->id, r->st, r->code, r->msg, r->result, r->released,
                     r->stages ? r->stages : "[]");
  if (r->line)
    ebb_log(r->level, "server", "%s", r->line);
  if (r->kind != REC_REQUEUE && q->on_state)
    q->on_state(q->arg);
}

static void *recorder(void *arg) {
  ebb_queue *q = arg;
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
static void record(ebb_queue *q, qrec *r) {
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
static qrec *rec_new(rec_kind kind, int64_t id, ebb_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static qrec *rec_new(rec_kind kind, int64_t id, ebb_log_level level, const char *fmt, ...) {
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

/* A job's end: its state, error (code, msg), result and released bytes
 * (strings borrowed, copied), logged as "job ID: STATE[: msg]". */
static void record_finish(ebb_queue *q, int64_t id, ebb_job_state st, const char *code,
                          const char *msg, const char *result, uint64_t released,
                          const char *stages) {
  qrec *r = rec_new(REC_FINISH, id, msg ? EBB_LOG_WARN : EBB_LOG_INFO, "job %lld: %s%s%s",
                    (long long)id, ebb_job_state_name(st), msg ? ": " : "", msg ? msg : "");
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

/* Waits until the recorder has made every write handed to it so far. */
static void record_flush(ebb_queue *q) {
  pthread_mutex_lock(&q->rlock);
  while (q->recording && (q->rhead || q->rbusy))
    pthread_cond_wait(&q->ridle, &q->rlock);
  pthread_mutex_unlock(&q->rlock);
}

/* --- per-stage released bytes: RELEASE events in the ledger between a stage's
 * start and end (the runner releases before it reports the stage done) ---- */
typedef struct stage_track {
  ebb_ledger *ledger;
  uint64_t t0;
  json_t *stages;
} stage_track;

static void on_progress(void *arg, int index, int count, const char *stage, int done) {
  (void)index;
  (void)count;
  stage_track *t = arg;
  if (!done) {
    t->t0 = ebb_mono_ns();
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


/* Cancels the running job once its deadline has passed. */
static void *watchdog(void *arg) {
  ebb_queue *q = arg;
  pthread_mutex_lock(&q->lock);
  while (!q->stop) {
    ebb_cond_wait_ms(&q->cond, &q->lock, 100);
    for (size_t i = 0; i < q->ndevs; i++) {
      qjob *j = q->devs[i].running;
      if (j && j->deadline > 0 && ebb_now() > j->deadline && !atomic_load(&j->timed_out)) {
        atomic_store(&j->timed_out, 1);
        atomic_store(&j->cancel, 1);
      }
    }
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

static double timeout_of(ebb_queue *q, const char *pipeline) {
  const ebb_pipeline_def *d = ebb_manager_pipeline(q->devs[0].m, pipeline);
  return d && d->timeout_s > 0 ? d->timeout_s : q->timeout_s;
}

/* Stopped by the server's stop: back to queued. Past its deadline: failed,
 * EBB_ETIMEDOUT. */
static int ended_early(ebb_queue *q, qjob *j, int rc, double timeout) {
  if (rc == EBB_ECANCELED && atomic_load(&q->stopping) && !atomic_load(&j->timed_out) &&
      !atomic_load(&j->by_client)) {
    record(q, rec_new(REC_REQUEUE, j->id, EBB_LOG_INFO,
                      "job %lld: stopped by the server's stop; queued again", (long long)j->id));
    return 1;
  }
  if (rc && atomic_load(&j->timed_out)) {
    char msg[160];
    snprintf(msg, sizeof msg, "the job ran past its %.0f s deadline; it was cancelled and its "
                              "memory released", timeout);
    record_finish(q, j->id, EBB_JOB_FAILED, "EBB_ETIMEDOUT", msg, NULL, 0, NULL);
    return 1;
  }
  return 0;
}

/* A driver error on a device with others beside it: the device is taken out
 * of placement (a sticky error, a lost device). */
static int device_fault(ebb_queue *q, int rc) {
  return q->place && (rc == EBB_EDRIVER || rc == EBB_ENODEV);
}

/* The device is taken out of placement (its queued jobs go to the others:
 * placement never sends a job to a failed device), then its pipelines are
 * unloaded there and then, not at the server's stop: their memory is
 * accounted as released and nothing shows them loaded on a dead device. */
static void mark_failed(qdev *d, const char *msg) {
  ebb_queue *q = d->q;
  const char *label = ebb_device_label(ebb_manager_device(d->m));
  pthread_mutex_lock(&q->lock);
  d->failed = 1;
  snprintf(d->why, sizeof d->why, "%s", msg);
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->lock);
  ebb_log(EBB_LOG_ERROR, "server", "device %s failed and is taken out of placement: %s", label,
          msg);
  uint64_t rel = 0;
  int n = 0;
  int rc = ebb_manager_unload_all(d->m, &rel, &n);
  ebb_log(rc ? EBB_LOG_WARN : EBB_LOG_INFO, "server",
          "device %s failed: %d pipeline%s unloaded there, %llu MiB released%s%s", label, n,
          n == 1 ? "" : "s", (unsigned long long)(rel >> 20), rc ? "; " : "",
          rc ? ebb_errmsg() : "");
  if (q->on_state)
    q->on_state(q->arg);
}

/* With placement the pipeline stays loaded on its device (a later job of it
 * runs there without a load); EBB_PLACE_FITS / EVICT load it first. */
static int run_on(qdev *d, qjob *j, ebb_place_how how, stage_track *t, ebb_job_result *res) {
  if (d->q->place && how != EBB_PLACE_LOADED) {
    memset(res, 0, sizeof *res);
    int rc = ebb_manager_load(d->m, j->pipeline);
    if (rc) {
      res->code = rc;
      snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
      return rc;
    }
  }
  return ebb_manager_run_job(d->m, j->pipeline, j->input, j->outdir, j->options, &j->cancel,
                             on_progress, t, res);
}

/* --- residency (several devices) ------------------------------------------------
 * A pipeline a job loaded stays on its device while jobs use it, so the next
 * job of it runs without a load. Once no job of it is queued and it has been
 * idle for its keep time, it goes the way its release policy says: asleep
 * under sleep / sleep:S (a later job wakes it in place), unloaded otherwise;
 * "never" keeps it. Keep time: the policy's seconds (idle:S, sleep:S; plain
 * sleep: none), else --keep-resident (default 300 s). A pipeline with open
 * sessions stays. One loaded through the API (POST .../load) is not
 * touched here: whoever loaded it unloads it. So an idle server with
 * several devices comes back to 0 bytes too. */
static double keep_of(const ebb_queue *q, const ebb_policy *p) {
  if (p->kind == EBB_POLICY_IDLE || p->kind == EBB_POLICY_SLEEP)
    return p->idle_s;
  return q->keep_resident_s;
}

static int res_find(const qdev *d, const char *name) {
  for (size_t i = 0; i < d->nres; i++)
    if (!strcmp(d->res[i].name, name))
      return (int)i;
  return -1;
}

static void res_drop(qdev *d, const char *name) {
  int i = res_find(d, name);
  if (i >= 0)
    d->res[i] = d->res[--d->nres];
}

/* After a job of name ended on d: a load by placement starts its residency,
 * a job of a resident pipeline renews it (and wakes it, if it slept). */
static void resident_note(qdev *d, const char *name, ebb_place_how how) {
  ebb_queue *q = d->q;
  ebb_policy pol;
  if (ebb_manager_policy_of(d->m, name, &pol) || pol.kind == EBB_POLICY_NEVER)
    return;
  pthread_mutex_lock(&q->lock);
  int i = res_find(d, name);
  if (i < 0 && how != EBB_PLACE_LOADED &&
      d->nres < sizeof d->res / sizeof d->res[0] && strlen(name) < sizeof d->res[0].name) {
    i = (int)d->nres++;
    snprintf(d->res[i].name, sizeof d->res[i].name, "%s", name);
  }
  if (i >= 0) {
    d->res[i].last = ebb_now();
    d->res[i].asleep = 0;
  }
  pthread_mutex_unlock(&q->lock);
}

static int queued_for(const ebb_queue *q, const char *name) {
  for (const qjob *j = q->head; j; j = j->next)
    if (!strcmp(j->pipeline, name))
      return 1;
  return 0;
}

/* A resident pipeline of d whose keep time is over and of which no job is
 * queued: its name and policy (q->lock held). */
static int resident_due(qdev *d, char *name, size_t cap, ebb_policy *pol, double *idle) {
  double now = ebb_now();
  for (size_t i = 0; i < d->nres; i++) {
    if (d->res[i].asleep || ebb_manager_policy_of(d->m, d->res[i].name, pol))
      continue;
    *idle = now - d->res[i].last;
    if (*idle < keep_of(d->q, pol) || queued_for(d->q, d->res[i].name))
      continue;
    snprintf(name, cap, "%s", d->res[i].name);
    return 1;
  }
  return 0;
}

/* Called by d's worker with q->lock held when it has no job to run. */
static void resident_vacate(qdev *d) {
  ebb_queue *q = d->q;
  char name[128];
  ebb_policy pol;
  double idle;
  if (d->failed || !resident_due(d, name, sizeof name, &pol, &idle))
    return;
  pthread_mutex_unlock(&q->lock);
  const char *label = ebb_device_label(ebb_manager_device(d->m));
  int gone = 1, slept = 0, rc = 0;
  if (!ebb_manager_is_loaded(d->m, name)) {
    /* unloaded meanwhile (evicted by placement, POST .../unload) */
  } else if (ebb_sessions_leases(ebb_manager_sessions(d->m), name) > 0) {
    gone = 0; /* its sessions keep it; looked at again after another keep time */
  } else if (pol.kind == EBB_POLICY_SLEEP) {
    ebb_sleep_stats st = {.size = sizeof st};
    rc = ebb_manager_sleep(d->m, name, &st);
    slept = rc == 0;
    gone = !slept;
    if (slept)
      ebb_log(EBB_LOG_INFO, "server", "pipeline %s on %s: idle %.0f s with no job of it "
              "queued: asleep, %llu MiB released", name, label, idle,
              (unsigned long long)(st.device_bytes >> 20));
  }
  if (gone && !slept && ebb_manager_is_loaded(d->m, name)) {
    uint64_t rel = 0;
    if (rc)
      ebb_log(EBB_LOG_WARN, "server", "pipeline %s on %s: sleep failed (%s); unloading it",
              name, label, ebb_errmsg());
    rc = ebb_manager_unload(d->m, name, &rel);
    ebb_log(rc ? EBB_LOG_WARN : EBB_LOG_INFO, "server", "pipeline %s on %s: idle %.0f s with "
            "no job of it queued: unloaded, %llu MiB released%s%s", name, label, idle,
            (unsigned long long)(rel >> 20), rc ? "; " : "", rc ? ebb_errmsg() : "");
  }
  pthread_mutex_lock(&q->lock);
  int i = res_find(d, name);
  if (i >= 0 && slept)
    d->res[i].asleep = 1;
  else if (i >= 0 && !gone)
    d->res[i].last = ebb_now();
  else
    res_drop(d, name);
  pthread_mutex_unlock(&q->lock);
  if (q->on_state)
    q->on_state(q->arg);
  pthread_mutex_lock(&q->lock);
}

static void run_one(qdev *d, qjob *j, ebb_place_how how) {
  ebb_queue *q = d->q;
  const char *label = ebb_device_label(ebb_manager_device(d->m));
  /* written before the job runs: whoever reads the store (the events, a
   * client) finds it running while its stages take memory */
  qrec *r = rec_new(REC_RUNNING, j->id, EBB_LOG_INFO, "job %lld: running pipeline '%s' on %s",
                    (long long)j->id, j->pipeline, label);
  if (r) {
    rec_write(q, r);
    rec_free(r);
  }
  stage_track t = {.ledger = ebb_allocator_ledger(d->alloc), .stages = json_array()};
  ebb_job_result res;
  int rc = run_on(d, j, how, &t, &res);
  if (q->place)
    resident_note(d, j->pipeline, how);
  if (ended_early(q, j, rc, timeout_of(q, j->pipeline))) {
    json_decref(t.stages);
    return;
  }
  if (rc && device_fault(q, rc)) {
    if (!strstr(res.message, label)) { /* the job's error names the device */
      char m[sizeof res.message + 64];
      snprintf(m, sizeof m, "%s: %s", label, res.message);
      memcpy(res.message, m, sizeof res.message - 1);
      res.message[sizeof res.message - 1] = 0;
    }
    mark_failed(d, res.message);
  }
  ebb_job_state st = rc == 0                   ? EBB_JOB_SUCCEEDED
                     : rc == EBB_ECANCELED &&
                               atomic_load(&j->cancel) ? EBB_JOB_CANCELLED
                                                       : EBB_JOB_FAILED;
  char *result = rc == 0 ? result_text(j->outdir) : NULL;
  char *stages = json_dumps(t.stages, JSON_COMPACT);
  record_finish(q, j->id, st, rc ? ebb_errname(rc) : NULL, rc ? res.message : NULL, result,
                res.released_bytes, stages);
  free(result);
  free(stages);
  json_decref(t.stages);
}

/* --- placement (pipeline/placement.h) over the queue's devices ---------------- */
static void unlink_job(ebb_queue *q, qjob *j, qjob *prev) {
  if (prev)
    prev->next = j->next;
  else
    q->head = j->next;
  if (q->tail == j)
    q->tail = prev;
  j->next = NULL;
}

/* The devices as placement sees them for pipeline name (q->lock held). */
static void picture(ebb_queue *q, const char *name, const uint64_t *free_b, const int *known,
                    ebb_place_dev *pd) {
  for (size_t i = 0; i < q->ndevs; i++) {
    qdev *d = &q->devs[i];
    uint64_t meas;
    pd[i] = (ebb_place_dev){.ordinal = ebb_device_ordinal(ebb_manager_device(d->m)),
                            .idle = !d->running && !d->failed,
                            .failed = d->failed,
                            .loaded = ebb_manager_is_loaded(d->m, name),
                            .free_known = known[i],
                            .free_bytes = free_b[i],
                            .asleep_bytes = ebb_manager_asleep_bytes(d->m, name)};
    ebb_manager_place_figures(d->m, name, &meas, &pd[i].asleep);
    pd[i].other_bytes = ebb_manager_loaded_bytes(d->m, name, &pd[i].others);
  }
}

/* The job as placement sees it: its need (the largest measured over the
 * devices, else the stages' estimate, else "expected_mib"), pins, overdue. */
static void job_place(ebb_queue *q, const qjob *j, double now, ebb_place_job *pj) {
  const ebb_pipeline_def *def = ebb_manager_pipeline(q->devs[0].m, j->pipeline);
  uint64_t measured = 0;
  for (size_t i = 0; i < q->ndevs; i++) {
    uint64_t n;
    int asleep;
    ebb_manager_place_figures(q->devs[i].m, j->pipeline, &n, &asleep);
    measured = n > measured ? n : measured;
  }
  uint64_t est = def && !measured ? ebb_place_estimate_hook(q->devs[0].m, def) : 0;
  *pj = (ebb_place_job){.need = def ? ebb_place_need(def, measured, est) : 0,
                        .pin_cuda = def ? def->pin_cuda : 0,
                        .pin_cpu = def ? def->pin_cpu : 0,
                        .overdue = q->max_wait_s > 0 && now - j->queued_at > q->max_wait_s};
}

static void fail_unplaceable(ebb_queue *q, qjob *j) {
  char msg[700] = "";
  for (size_t i = 0; i < q->ndevs; i++)
    if (q->devs[i].failed)
      snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "; %s failed",
               ebb_device_label(ebb_manager_device(q->devs[i].m)));
  char full[900];
  snprintf(full, sizeof full, "no device this server drives can run pipeline '%s' (its "
                              "\"devices\", its need)%s", j->pipeline, msg);
  ebb_store_finish(q->store, j->id, EBB_JOB_FAILED, "EBB_ENODEV", full, NULL, 0, "[]");
  ebb_log(EBB_LOG_WARN, "server", "job %lld: failed: %s", (long long)j->id, full);
}

/* The next job for device d (q->lock held), unlinked, or NULL: the first
 * queued job that placement sends to d. A job past --max-wait that d could
 * take reserves d: no later job starts there before it. Jobs no device can
 * ever take fail. */
static qjob *pick(ebb_queue *q, qdev *d, ebb_place_how *how) {
  *how = EBB_PLACE_LOADED;
  if (!q->place) {
    qjob *j = q->head;
    if (j)
      unlink_job(q, j, NULL);
    return j;
  }
  if (!q->head || d->running) /* a failed device takes nothing but still fails the */
    return NULL;                 /* jobs no device can run (when all have failed) */
  size_t n = q->ndevs, me = (size_t)(d - q->devs);
  uint64_t free_b[16] = {0};
  int known[16] = {0};
  for (size_t i = 0; i < n; i++)
    if (!q->devs[i].running && !q->devs[i].failed)
      free_b[i] = ebb_driver_free(ebb_manager_device(q->devs[i].m), &known[i]);
  ebb_place_dev pd[16];
  double now = ebb_now();
  for (qjob *j = q->head, *prev = NULL, *next; j; j = next) {
    next = j->next;
    ebb_place_job pj;
    job_place(q, j, now, &pj);
    picture(q, j->pipeline, free_b, known, pd);
    int at = ebb_place(pd, n, &pj, how);
    if (*how == EBB_PLACE_NEVER) {
      unlink_job(q, j, prev);
      fail_unplaceable(q, j);
      qjob_free(j);
      continue;
    }
    if (at == (int)me) {
      unlink_job(q, j, prev);
      return j;
    }
    if (pj.overdue && ebb_place_could_fit(&pd[me], &pj))
      return NULL; /* d is reserved for this job */
    prev = j;
  }
  return NULL;
}

static void *worker(void *arg) {
  qdev *d = arg;
  ebb_queue *q = d->q;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    qjob *j = NULL;
    ebb_place_how how = EBB_PLACE_LOADED;
    while (!q->stop && !(j = pick(q, d, &how))) {
      if (q->place)
        resident_vacate(d);
      /* placement also changes without a signal (another process's memory) */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 200 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&q->cond, &q->lock, &ts);
    }
    if (q->stop)
      break;
    double timeout = timeout_of(q, j->pipeline);
    j->deadline = timeout > 0 ? ebb_now() + timeout : 0;
    d->running = j;
    d->jobs++;
    pthread_mutex_unlock(&q->lock);
    if (q->on_state)
      q->on_state(q->arg);
    run_one(d, j, how);
    if (q->on_state)
      q->on_state(q->arg);
    pthread_mutex_lock(&q->lock);
    d->running = NULL;
    qjob_free(j);
    pthread_cond_broadcast(&q->cond); /* the others may place now */
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

/* Fits nowhere: the other processes on each eligible device are asked for
 * room (the broker, docs/broker.md), most free first, until it fits. */
static int place_after_asking(ebb_queue *q, const char *pipeline, const ebb_place_job *pj,
                              ebb_place_how *how) {
  size_t n = q->ndevs;
  int at = -1, tried[16] = {0};
  for (size_t k = 0; k < n && at < 0; k++) {
    uint64_t free_b[16] = {0};
    int known[16] = {0};
    ebb_place_dev pd[16];
    for (size_t i = 0; i < n; i++)
      free_b[i] = ebb_driver_free(ebb_manager_device(q->devs[i].m), &known[i]);
    pthread_mutex_lock(&q->lock);
    picture(q, pipeline, free_b, known, pd);
    pthread_mutex_unlock(&q->lock);
    size_t best = n;
    for (size_t i = 0; i < n; i++) /* the most free eligible device not asked yet */
      if (ebb_place_eligible(&pd[i], pj) && !tried[i] &&
          (best == n || free_b[i] > free_b[best]))
        best = i;
    if (best == n)
      break;
    tried[best] = 1;
    int asked = ebb_manager_ask_room(q->devs[best].m, pipeline);
    free_b[best] = ebb_driver_free(ebb_manager_device(q->devs[best].m), &known[best]);
    pthread_mutex_lock(&q->lock);
    picture(q, pipeline, free_b, known, pd);
    at = ebb_place(pd, n, pj, how);
    pthread_mutex_unlock(&q->lock);
    if (asked && at != (int)best)
      ebb_manager_ask_done(q->devs[best].m);
  }
  return at;
}

int ebb_queue_place_load(ebb_queue *q, const char *pipeline, size_t *index) {
  *index = 0;
  if (!q || !q->place)
    return 0;
  pthread_mutex_lock(&q->lock);
  size_t n = q->ndevs;
  uint64_t free_b[16] = {0};
  int known[16] = {0};
  for (size_t i = 0; i < n; i++)
    free_b[i] = ebb_driver_free(ebb_manager_device(q->devs[i].m), &known[i]);
  ebb_place_dev pd[16];
  picture(q, pipeline, free_b, known, pd);
  qjob j = {.pipeline = (char *)pipeline, .queued_at = ebb_now()};
  ebb_place_job pj;
  job_place(q, &j, ebb_now(), &pj);
  for (size_t i = 0; i < n; i++) /* a load may wait for a busy device's job */
    if (pd[i].loaded && ebb_place_eligible(&pd[i], &pj)) {
      *index = i;
      pthread_mutex_unlock(&q->lock);
      return 0;
    }
  ebb_place_how how;
  int at = ebb_place(pd, n, &pj, &how);
  if (at < 0) /* every device is busy: the idle ones' picture as if idle */
    for (size_t i = 0; i < n; i++)
      pd[i].idle = !pd[i].failed;
  if (at < 0)
    at = ebb_place(pd, n, &pj, &how);
  pthread_mutex_unlock(&q->lock);
  if (at < 0 && how != EBB_PLACE_NEVER)
    at = place_after_asking(q, pipeline, &pj, &how);
  if (at < 0)
    return ebb_seterr(how == EBB_PLACE_NEVER ? EBB_ENODEV : EBB_EOOM,
                      "no device can take pipeline '%s' now (%s)", pipeline,
                      how == EBB_PLACE_NEVER ? "its \"devices\" are failed or not served"
                                             : "its predicted need fits nowhere");
  *index = (size_t)at;
  return 0;
}

json_t *ebb_queue_devices_json(ebb_queue *q) {
  json_t *a = json_array();
  pthread_mutex_lock(&q->lock);
  for (size_t i = 0; i < q->ndevs; i++) {
    qdev *d = &q->devs[i];
    json_t *o = json_pack("{s:s,s:s,s:I}", "label",
                          ebb_device_label(ebb_manager_device(d->m)), "state",
                          d->failed ? "failed" : d->running ? "running" : "idle", "jobs_started",
                          (json_int_t)d->jobs);
    json_object_set_new(o, "job", d->running ? json_integer(d->running->id) : json_null());
    json_object_set_new(o, "error", d->failed ? json_string(d->why) : json_null());
    json_array_append_new(a, o);
  }
  pthread_mutex_unlock(&q->lock);
  return a;
}

int ebb_queue_create(ebb_store *store, ebb_manager *const *ms, ebb_allocator *const *allocs,
                     size_t n, const ebb_queue_opts *o, ebb_queue **out) {
  if (n == 0 || n > 16)
    return ebb_seterr(EBB_EINVAL, "queue: %zu devices (1 to 16 are supported)", n);
  ebb_queue *q = calloc(1, sizeof *q);
  if (!q || !(q->devs = calloc(n, sizeof *q->devs))) {
    free(q);
    return ebb_seterr(EBB_ENOMEM, "queue: out of host memory");
  }
  q->store = store;
  q->ndevs = n;
  q->place = n > 1;
  q->timeout_s = o ? o->timeout_s : 0;
  q->max_wait_s = o && o->max_wait_s > 0 ? o->max_wait_s : 60;
  q->keep_resident_s = o && o->keep_resident_s > 0 ? o->keep_resident_s : 300;
  q->on_state = o ? o->on_state : NULL;
  q->arg = o ? o->arg : NULL;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cond, NULL);
  pthread_mutex_init(&q->rlock, NULL);
  pthread_cond_init(&q->rcond, NULL);
  pthread_cond_init(&q->ridle, NULL);
  if (pthread_create(&q->recorder, NULL, recorder, q) != 0) {
    ebb_queue_destroy(q);
    return ebb_seterr(EBB_ENOMEM, "queue: cannot start the recorder thread");
  }
  q->recording = 1;
  for (size_t i = 0; i < n; i++) {
    q->devs[i] = (qdev){.q = q, .m = ms[i], .alloc = allocs[i]};
    if (pthread_create(&q->devs[i].worker, NULL, worker, &q->devs[i]) != 0) {
      ebb_queue_destroy(q);
      return ebb_seterr(EBB_ENOMEM, "queue: cannot start a worker thread");
    }
    q->devs[i].started = 1;
  }
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
  for (size_t i = 0; i < q->ndevs; i++)
    if (q->devs[i].running)
      atomic_store(&q->devs[i].running->cancel, 1);
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->lock);
  for (size_t i = 0; i < q->ndevs; i++)
    if (q->devs[i].started)
      pthread_join(q->devs[i].worker, NULL);
  if (q->watching)
    pthread_join(q->watchdog, NULL);
  pthread_mutex_lock(&q->rlock); /* the workers are gone: the recorder drains and ends */
  q->rstop = 1;
  pthread_cond_signal(&q->rcond);
  pthread_mutex_unlock(&q->rlock);
  if (q->recording)
    pthread_join(q->recorder, NULL);
  for (qjob *j = q->head, *n; j; j = n) {
    n = j->next;
    qjob_free(j);
  }
  pthread_cond_destroy(&q->cond);
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->ridle);
  pthread_cond_destroy(&q->rcond);
  pthread_mutex_destroy(&q->rlock);
  free(q->devs);
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
  j->queued_at = ebb_now();
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

size_t ebb_queue_waiting(ebb_queue *q) {
  size_t n = 0;
  pthread_mutex_lock(&q->lock);
  for (const qjob *j = q->head; j; j = j->next)
    n++;
  pthread_mutex_unlock(&q->lock);
  return n;
}

int ebb_queue_cancel(ebb_queue *q, int64_t id, int *running) {
  *running = 0;
  pthread_mutex_lock(&q->lock);
  for (size_t i = 0; i < q->ndevs; i++) {
    qjob *r = q->devs[i].running;
    if (r && r->id == id) {
      atomic_store(&r->by_client, 1);
      atomic_store(&r->cancel, 1);
      *running = 1;
      pthread_mutex_unlock(&q->lock);
      return 0;
    }
  }
  qjob *found = NULL, *prev = NULL;
  for (qjob *j = q->head; j; prev = j, j = j->next)
    if (j->id == id) {
      found = j;
      unlink_job(q, j, prev);
      break;
    }
  pthread_mutex_unlock(&q->lock);
  if (!found) {
    record_flush(q); /* a job that just ended: the store says so once this returns */
    return ebb_seterr(EBB_ENOTFOUND, "job %lld is not queued or running", (long long)id);
  }
  ebb_store_finish(q->store, id, EBB_JOB_CANCELLED, "EBB_ECANCELED", "cancelled before it ran",
                   NULL, 0, "[]");
  qjob_free(found);
  return 0;
}
