/* The job queue (queue.h): the FIFO, one worker thread per device, pick
 * (placement over the devices, one or several: one path) and cancel; a
 * job's deadline and its wait for the device are the manager's
 * (pl_run_limits). The store's
 * writes for the jobs go through the recorder (recorder.c); a pipeline a
 * job loaded leaves its device by residency (pipeline/residency.h). */
#include "server/queue.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/events.h"
#include "base/log.h"
#include "pipeline/host.h"
#include "pipeline/placement.h"
#include "pipeline/residency.h"
#include "server/jobfacts.h"
#include "server/recorder.h"

typedef struct qjob {
  struct qjob *next;
  int64_t id;
  char uid[40];   /* the public id, as the job's events name it */
  char owner[24]; /* the token's owner tag that submitted it ("" without tokens) */
  uint64_t bytes; /* the files it keeps on disk while queued (its input, lyrics, options) */
  char *pipeline, *input, *outdir;
  json_t *options;
  atomic_int cancel;
  atomic_int by_client; /* DELETE /v1/jobs/ID: cancelled for good */
  double queued_at;     /* monotonic seconds */
  int asked;            /* fitting nowhere, the other processes were asked once */
} qjob;

/* One device the queue runs jobs on: its manager, its worker thread, the
 * job it runs and whether it failed. */
typedef struct qdev {
  srv_queue *q;
  pl_manager *m;
  mem_allocator *alloc;
  qjob *running;
  int failed;     /* taken out of placement */
  char why[1100]; /* the error that failed it */
  uint64_t jobs;  /* jobs started here */
  pthread_t worker;
  int started;
  pl_residency *res; /* the pipelines jobs loaded here (off: none stay) */
  char *ask;         /* pick: this worker asks the peers for a job's pipeline */
  pl_place_job ask_pj;
} qdev;

struct srv_queue {
  srv_store *store;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  qjob *head, *tail;
  qdev *devs;
  size_t ndevs;
  int asking; /* workers asking the peers for a job now (d->ask) */
  double max_wait_s;
  int stop;
  atomic_int stopping; /* the server is stopping: a cancelled running job is requeued */
  double timeout_s;
  void (*on_state)(void *arg);
  void *arg;
  srv_recorder *rec; /* the store's writes for the jobs, in order (recorder.h) */
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


/* The job's deadline (its run's, pl_run_limits) and where it comes from. */
static double timeout_of(srv_queue *q, const char *pipeline, const char **from) {
  const pl_def *d = pl_manager_pipeline(q->devs[0].m, pipeline);
  *from = d && d->timeout_s > 0 ? "the pipeline's timeout_s" : "--job-timeout";
  return d && d->timeout_s > 0 ? d->timeout_s : q->timeout_s;
}

void srv_deadline_message(const char *what, const char *device, const pl_run_limits *lim,
                          const char *from, const pl_job_result *res, char *buf, size_t n) {
  if (res->over_wait)
    snprintf(buf, n,
             "the %s waited %.1f s for device %s, held by other work (a session item, a load), "
             "and gave up unrun at this server's --max-wait of %g s",
             what, res->waited_s, device ? device : "(none)", lim->max_wait_s);
  else
    snprintf(buf, n,
             "the %s ran past its %g s deadline (%s; counted from its start on %s, not its "
             "wait): %s; it was cancelled and its memory released",
             what, lim->timeout_s, from, device ? device : "the device", res->message);
}

/* Stopped by the server's stop: back to queued. Past its deadline, or
 * waiting for the device past --max-wait: failed, with a message that
 * names which (srv_deadline_message). */
static int ended_early(srv_queue *q, qjob *j, const char *device, int rc,
                       const pl_job_result *res) {
  if (rc == EBB_ECANCELED && atomic_load(&q->stopping) && !atomic_load(&j->by_client)) {
    srv_job_publish(j->id, j->uid, j->pipeline, device, EBB_JOB_QUEUED, NULL, NULL, 0, NULL);
    srv_record_requeue(q->rec, j->id);
    return 1;
  }
  if (rc && (res->over_deadline || res->over_wait)) {
    const char *from;
    pl_run_limits lim = {timeout_of(q, j->pipeline, &from), q->max_wait_s};
    char msg[1400];
    srv_deadline_message("job", device, &lim, from, res, msg, sizeof msg);
    const char *code = ebb_errname(rc);
    srv_job_publish(j->id, j->uid, j->pipeline, device, EBB_JOB_FAILED, code, msg, 0, "[]");
    srv_record_finish(q->rec, j->id, EBB_JOB_FAILED, code, msg, NULL, res->released_bytes, NULL);
    return 1;
  }
  return 0;
}

/* A driver error: the device is taken out of placement (a sticky error, a
 * lost device). */
static int device_fault(int rc) { return rc == EBB_EDRIVER || rc == EBB_ENODEV; }

/* The device is taken out of placement (its queued jobs go to the others:
 * placement never sends a job to a failed device), then its pipelines are
 * unloaded there and then, not at the server's stop: their memory is
 * accounted as released and nothing shows them loaded on a dead device. */
static void mark_failed(qdev *d, const char *msg) {
  srv_queue *q = d->q;
  const char *label = dev_device_label(pl_manager_device(d->m));
  pthread_mutex_lock(&q->lock);
  d->failed = 1;
  snprintf(d->why, sizeof d->why, "%s", msg);
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->lock);
  base_log(EBB_LOG_ERROR, "server", "device %s failed and is taken out of placement: %s", label,
           msg);
  ebb_event lost = {.kind = EBB_EVENT_DEVICE_LOST, .device = label, .message = msg};
  base_event_publish(&lost);
  uint64_t rel = 0;
  int n = 0;
  int rc = pl_manager_unload_all(d->m, &rel, &n);
  base_log(rc ? EBB_LOG_WARN : EBB_LOG_INFO, "server",
           "device %s failed: %d pipeline%s unloaded there, %llu MiB released%s%s", label, n,
           n == 1 ? "" : "s", (unsigned long long)(rel >> 20), rc ? "; " : "",
           rc ? ebb_errmsg() : "");
  if (q->on_state)
    q->on_state(q->arg);
}

/* With residency on the pipeline stays loaded on its device (a later job of
 * it runs there without a load): a job not placed where it is loaded
 * (EBB_PLACE_FITS, EVICT, or WAIT when sent to the manager to wait) loads
 * it first. With residency off the job runs it under its release policy. */
static int run_on(qdev *d, qjob *j, pl_place_how how, pl_job_result *res) {
  const char *from;
  pl_run_limits lim = {timeout_of(d->q, j->pipeline, &from), d->q->max_wait_s};
  if (how != EBB_PLACE_LOADED && pl_residency_keeps(d->res)) {
    memset(res, 0, sizeof *res);
    int rc = pl_manager_load(d->m, j->pipeline);
    if (rc) {
      res->code = rc;
      snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
      return rc;
    }
  }
  return pl_manager_run_job(d->m, j->pipeline, j->input, j->outdir, j->options, &j->cancel, &lim,
                            res);
}

/* Whether a job of name waits (q->lock held): residency keeps it then. */
static int queued_for(void *arg, const char *name) {
  const srv_queue *q = arg;
  for (const qjob *j = q->head; j; j = j->next)
    if (!strcmp(j->pipeline, name))
      return 1;
  return 0;
}

/* Called by d's worker with q->lock held when it has no job to run: a
 * resident pipeline whose keep time is over leaves d (pipeline/residency.h). */
static void vacate(qdev *d) {
  srv_queue *q = d->q;
  pl_resident_due due;
  if (d->failed || !pl_residency_due(d->res, queued_for, q, &due))
    return;
  pthread_mutex_unlock(&q->lock);
  pl_residency_leave(d->res, &due);
  if (q->on_state)
    q->on_state(q->arg);
  pthread_mutex_lock(&q->lock);
}

static void run_one(qdev *d, qjob *j, pl_place_how how) {
  srv_queue *q = d->q;
  const char *label = dev_device_label(pl_manager_device(d->m));
  srv_record_running(q->rec, j->id, j->pipeline, label);
  srv_job_publish(j->id, j->uid, j->pipeline, label, EBB_JOB_RUNNING, NULL, NULL, 0, NULL);
  pl_job_result res;
  int rc = run_on(d, j, how, &res);
  pl_residency_note(d->res, j->pipeline, how != EBB_PLACE_LOADED);
  if (ended_early(q, j, label, rc, &res))
    return;
  if (rc && device_fault(rc)) {
    if (!strstr(res.message, label)) { /* the job's error names the device */
      char m[sizeof res.message + 64];
      snprintf(m, sizeof m, "%s: %s", label, res.message);
      memcpy(res.message, m, sizeof res.message - 1);
      res.message[sizeof res.message - 1] = 0;
    }
    mark_failed(d, res.message);
  }
  srv_job_state st = rc == 0                                          ? EBB_JOB_SUCCEEDED
                     : rc == EBB_ECANCELED && atomic_load(&j->cancel) ? EBB_JOB_CANCELLED
                                                                      : EBB_JOB_FAILED;
  char *result = rc == 0 ? result_text(j->outdir) : NULL;
  /* each stage's bytes and peak, as the runner counted them: the store keeps
   * the bytes (its API's fields), the fact has the peaks too */
  char *stored = srv_job_stages_json(&res, 0), *fact = srv_job_stages_json(&res, 1);
  srv_job_publish(j->id, j->uid, j->pipeline, label, st, rc ? ebb_errname(rc) : NULL,
                  rc ? res.message : NULL, res.released_bytes, fact ? fact : "[]");
  srv_record_finish(q->rec, j->id, st, rc ? ebb_errname(rc) : NULL, rc ? res.message : NULL, result,
                    res.released_bytes, stored);
  free(result);
  free(stored);
  free(fact);
}

/* --- placement (pipeline/placement.h) over the queue's devices ---------------- */
static void unlink_job(srv_queue *q, qjob *j, qjob *prev) {
  if (prev)
    prev->next = j->next;
  else
    q->head = j->next;
  if (q->tail == j)
    q->tail = prev;
  j->next = NULL;
}

/* The devices as placement sees them for pipeline name (q->lock held). */
static void picture(srv_queue *q, const char *name, const uint64_t *free_b, const int *known,
                    pl_place_dev *pd) {
  for (size_t i = 0; i < q->ndevs; i++) {
    qdev *d = &q->devs[i];
    uint64_t meas;
    pd[i] = (pl_place_dev){.ordinal = dev_ordinal(pl_manager_device(d->m)),
                           .idle = !d->running && !d->failed,
                           .failed = d->failed,
                           .loaded = pl_manager_is_loaded(d->m, name),
                           .free_known = known[i],
                           .free_bytes = free_b[i],
                           .asleep_bytes = pl_manager_asleep_bytes(d->m, name)};
    pl_manager_place_figures(d->m, name, &meas, &pd[i].asleep);
    pd[i].other_bytes = pl_manager_loaded_bytes(d->m, name, &pd[i].others);
  }
}

/* The job as placement sees it: its need (the largest measured over the
 * devices, else the stages' estimate, else "expected_mib"), pins, overdue. */
static void job_place(srv_queue *q, const qjob *j, double now, pl_place_job *pj) {
  const pl_def *def = pl_manager_pipeline(q->devs[0].m, j->pipeline);
  uint64_t measured = 0;
  for (size_t i = 0; i < q->ndevs; i++) {
    uint64_t n;
    int asleep;
    pl_manager_place_figures(q->devs[i].m, j->pipeline, &n, &asleep);
    measured = n > measured ? n : measured;
  }
  uint64_t est = def && !measured ? pl_place_estimate_hook(q->devs[0].m, def) : 0;
  *pj = (pl_place_job){.need = def ? pl_place_need(def, measured, est) : 0,
                       .pin_cuda = def ? def->pin_cuda : 0,
                       .pin_cpu = def ? def->pin_cpu : 0,
                       .overdue = q->max_wait_s > 0 && now - j->queued_at > q->max_wait_s};
}

static void fail_unplaceable(srv_queue *q, qjob *j) {
  char msg[700] = "";
  for (size_t i = 0; i < q->ndevs; i++)
    if (q->devs[i].failed)
      snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "; %s failed",
               dev_device_label(pl_manager_device(q->devs[i].m)));
  char full[900];
  snprintf(full, sizeof full,
           "no device this server drives can run pipeline '%s' (its "
           "\"devices\", its need)%s",
           j->pipeline, msg);
  srv_job_publish(j->id, j->uid, j->pipeline, NULL, EBB_JOB_FAILED, "EBB_ENODEV", full, 0, "[]");
  srv_store_finish(q->store, j->id, EBB_JOB_FAILED, "EBB_ENODEV", full, NULL, 0, "[]");
  base_log(EBB_LOG_WARN, "server", "job %lld: failed: %s", (long long)j->id, full);
}

/* An eligible device runs a job now: waiting may make room. */
static int eligible_busy(const pl_place_dev *pd, size_t n, const pl_place_job *pj) {
  for (size_t i = 0; i < n; i++)
    if (!pd[i].idle && !pd[i].failed && pl_place_eligible(&pd[i], pj))
      return 1;
  return 0;
}

/* Fits nowhere even after asking, and nothing of this server will make
 * room (no eligible device runs a job): the eligible device with the most
 * free memory, whose manager decides, as for any load: it asks the other
 * processes, waits for memory (bounded by --max-wait) and fails with its
 * own clear error; it never starts a load it predicts will not fit. -1:
 * none eligible. */
static int to_manager(const pl_place_dev *pd, size_t n, const pl_place_job *pj) {
  int best = -1;
  for (size_t i = 0; i < n; i++)
    if (pl_place_eligible(&pd[i], pj) && (best < 0 || pd[i].free_bytes > pd[best].free_bytes))
      best = (int)i;
  return best;
}

static int place_after_asking(srv_queue *q, const char *pipeline, const pl_place_job *pj,
                              pl_place_how *how);

/* The next job for device d (q->lock held), unlinked, or NULL: the first
 * queued job that placement sends to d. A job past --max-wait that d could
 * take reserves d: no later job starts there before it. Jobs no device can
 * ever take fail. A job that fits nowhere while no eligible device runs a
 * job has the peers asked for it once (d->ask), as a load does; still
 * fitting nowhere, it goes to a manager (to_manager). With one device this
 * is the queue's order: the first job goes, now or after the asking. */
static qjob *pick(srv_queue *q, qdev *d, pl_place_how *how) {
  *how = EBB_PLACE_LOADED;
  if (!q->head || d->running) /* a failed device takes nothing but still fails the */
    return NULL;              /* jobs no device can run (when all have failed) */
  size_t n = q->ndevs, me = (size_t)(d - q->devs);
  uint64_t free_b[16] = {0};
  int known[16] = {0};
  for (size_t i = 0; i < n; i++)
    if (!q->devs[i].running && !q->devs[i].failed)
      free_b[i] = pl_driver_free(pl_manager_device(q->devs[i].m), &known[i]);
  pl_place_dev pd[16];
  double now = base_now();
  for (qjob *j = q->head, *prev = NULL, *next; j; j = next) {
    next = j->next;
    pl_place_job pj;
    job_place(q, j, now, &pj);
    picture(q, j->pipeline, free_b, known, pd);
    int at = pl_place(pd, n, &pj, how);
    if (*how == EBB_PLACE_NEVER) {
      unlink_job(q, j, prev);
      fail_unplaceable(q, j);
      qjob_free(j);
      continue;
    }
    if (at < 0 && !eligible_busy(pd, n, &pj)) {
      /* fits nowhere, and no job here will end to make room: this worker
       * asks the other processes (unlocked) first; then its manager decides */
      int ask = !j->asked;
      j->asked = 1;
      if (ask && (d->ask = strdup(j->pipeline))) {
        d->ask_pj = pj;
        q->asking++;
        return NULL;
      }
      if (!q->asking)
        at = to_manager(pd, n, &pj);
    }
    if (at == (int)me) {
      unlink_job(q, j, prev);
      return j;
    }
    if (pj.overdue && pl_place_could_fit(&pd[me], &pj))
      return NULL; /* d is reserved for this job */
    prev = j;
  }
  return NULL;
}

static void *worker(void *arg) {
  qdev *d = arg;
  srv_queue *q = d->q;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    qjob *j = NULL;
    pl_place_how how = EBB_PLACE_LOADED;
    while (!q->stop && !(j = pick(q, d, &how))) {
      if (d->ask) { /* a job fits nowhere: ask the peers, then pick again */
        char *name = d->ask;
        d->ask = NULL;
        pthread_mutex_unlock(&q->lock);
        place_after_asking(q, name, &d->ask_pj, &how);
        free(name);
        pthread_mutex_lock(&q->lock);
        q->asking--;
        pthread_cond_broadcast(&q->cond); /* room made elsewhere: that worker picks */
        continue;
      }
      vacate(d);
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
static int place_after_asking(srv_queue *q, const char *pipeline, const pl_place_job *pj,
                              pl_place_how *how) {
  size_t n = q->ndevs;
  int at = -1, tried[16] = {0};
  for (size_t k = 0; k < n && at < 0; k++) {
    uint64_t free_b[16] = {0};
    int known[16] = {0};
    pl_place_dev pd[16];
    for (size_t i = 0; i < n; i++)
      free_b[i] = pl_driver_free(pl_manager_device(q->devs[i].m), &known[i]);
    pthread_mutex_lock(&q->lock);
    picture(q, pipeline, free_b, known, pd);
    pthread_mutex_unlock(&q->lock);
    size_t best = n;
    for (size_t i = 0; i < n; i++) /* the most free eligible device not asked yet */
      if (pl_place_eligible(&pd[i], pj) && !tried[i] && (best == n || free_b[i] > free_b[best]))
        best = i;
    if (best == n)
      break;
    tried[best] = 1;
    int asked = pl_manager_ask_room(q->devs[best].m, pipeline);
    free_b[best] = pl_driver_free(pl_manager_device(q->devs[best].m), &known[best]);
    pthread_mutex_lock(&q->lock);
    picture(q, pipeline, free_b, known, pd);
    at = pl_place(pd, n, pj, how);
    pthread_mutex_unlock(&q->lock);
    if (asked && at != (int)best)
      pl_manager_ask_done(q->devs[best].m);
  }
  return at;
}

int srv_queue_place_load(srv_queue *q, const char *pipeline, size_t *index) {
  *index = 0;
  if (!q)
    return 0;
  pthread_mutex_lock(&q->lock);
  size_t n = q->ndevs;
  uint64_t free_b[16] = {0};
  int known[16] = {0};
  for (size_t i = 0; i < n; i++)
    free_b[i] = pl_driver_free(pl_manager_device(q->devs[i].m), &known[i]);
  pl_place_dev pd[16];
  picture(q, pipeline, free_b, known, pd);
  qjob j = {.pipeline = (char *)pipeline, .queued_at = base_now()};
  pl_place_job pj;
  job_place(q, &j, base_now(), &pj);
  for (size_t i = 0; i < n; i++) /* a load may wait for a busy device's job */
    if (pd[i].loaded && pl_place_eligible(&pd[i], &pj)) {
      *index = i;
      pthread_mutex_unlock(&q->lock);
      return 0;
    }
  pl_place_how how;
  int at = pl_place(pd, n, &pj, &how);
  if (at < 0) /* every device is busy: the idle ones' picture as if idle */
    for (size_t i = 0; i < n; i++)
      pd[i].idle = !pd[i].failed;
  if (at < 0)
    at = pl_place(pd, n, &pj, &how);
  pthread_mutex_unlock(&q->lock);
  if (at < 0 && how != EBB_PLACE_NEVER)
    at = place_after_asking(q, pipeline, &pj, &how);
  if (at < 0 && how != EBB_PLACE_NEVER)
    at = to_manager(pd, n, &pj); /* its manager waits for memory or fails it */
  if (at < 0)
    return ebb_seterr(EBB_ENODEV, "no device can take pipeline '%s' now (%s)", pipeline,
                      "its \"devices\" are failed or not served");
  *index = (size_t)at;
  return 0;
}

json_t *srv_queue_devices_json(srv_queue *q) {
  json_t *a = json_array();
  pthread_mutex_lock(&q->lock);
  for (size_t i = 0; i < q->ndevs; i++) {
    qdev *d = &q->devs[i];
    json_t *o = json_pack("{s:s,s:s,s:I}", "label", dev_device_label(pl_manager_device(d->m)),
                          "state",
                          d->failed    ? "failed"
                          : d->running ? "running"
                                       : "idle",
                          "jobs_started", (json_int_t)d->jobs);
    json_object_set_new(o, "job", d->running ? json_integer(d->running->id) : json_null());
    json_object_set_new(o, "error", d->failed ? json_string(d->why) : json_null());
    json_array_append_new(a, o);
  }
  pthread_mutex_unlock(&q->lock);
  return a;
}

int srv_queue_create(srv_store *store, pl_manager *const *ms, mem_allocator *const *allocs,
                     size_t n, const srv_queue_opts *o, srv_queue **out) {
  if (n == 0 || n > 16)
    return ebb_seterr(EBB_EINVAL, "queue: %zu devices (1 to 16 are supported)", n);
  srv_queue *q = calloc(1, sizeof *q);
  if (!q || !(q->devs = calloc(n, sizeof *q->devs))) {
    free(q);
    return ebb_seterr(EBB_ENOMEM, "queue: out of host memory");
  }
  q->store = store;
  q->ndevs = n;
  q->timeout_s = o ? o->timeout_s : 0;
  q->max_wait_s = o && o->max_wait_s > 0 ? o->max_wait_s : 60;
  q->on_state = o ? o->on_state : NULL;
  q->arg = o ? o->arg : NULL;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cond, NULL);
  int rc = srv_recorder_start(store, q->on_state, q->arg, &q->rec);
  if (rc) {
    srv_queue_destroy(q);
    return rc;
  }
  for (size_t i = 0; i < n; i++) {
    q->devs[i] = (qdev){.q = q, .m = ms[i], .alloc = allocs[i]};
    if ((rc = pl_residency_create(ms[i], o ? o->keep_resident_s : 0, &q->devs[i].res))) {
      srv_queue_destroy(q);
      return rc;
    }
    if (pthread_create(&q->devs[i].worker, NULL, worker, &q->devs[i]) != 0) {
      srv_queue_destroy(q);
      return ebb_seterr(EBB_ENOMEM, "queue: cannot start a worker thread");
    }
    q->devs[i].started = 1;
  }
  *out = q;
  return 0;
}

void srv_queue_destroy(srv_queue *q) {
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
  srv_recorder_stop(q->rec); /* the workers are gone: the recorder drains and ends */
  for (size_t i = 0; i < q->ndevs; i++)
    pl_residency_destroy(q->devs[i].res);
  for (qjob *j = q->head, *n; j; j = n) {
    n = j->next;
    qjob_free(j);
  }
  pthread_cond_destroy(&q->cond);
  pthread_mutex_destroy(&q->lock);
  free(q->devs);
  free(q);
}

int srv_queue_push(srv_queue *q, int64_t id, const char *uid, const char *owner, uint64_t bytes,
                   const char *pipeline, const char *input, const char *outdir, json_t *options) {
  qjob *j = calloc(1, sizeof *j);
  if (!j || !(j->pipeline = strdup(pipeline)) || !(j->input = strdup(input)) ||
      !(j->outdir = strdup(outdir))) {
    qjob_free(j);
    return ebb_seterr(EBB_ENOMEM, "queue: out of host memory");
  }
  j->id = id;
  snprintf(j->uid, sizeof j->uid, "%s", uid ? uid : "");
  snprintf(j->owner, sizeof j->owner, "%s", owner ? owner : "");
  j->bytes = bytes;
  j->options = options ? json_deep_copy(options) : NULL;
  j->queued_at = base_now();
  /* before a worker can take it: its "running" comes after this */
  srv_job_publish(id, j->uid, pipeline, NULL, EBB_JOB_QUEUED, NULL, NULL, 0, NULL);
  pthread_mutex_lock(&q->lock);
  if (q->tail)
    q->tail->next = j;
  else
    q->head = j;
  q->tail = j;
  pthread_cond_broadcast(&q->cond); /* the workers */
  pthread_mutex_unlock(&q->lock);
  return 0;
}

void srv_queue_usage(srv_queue *q, const char *owner, srv_queue_use *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&q->lock);
  for (const qjob *j = q->head; j; j = j->next) {
    int mine = owner && !strcmp(j->owner, owner);
    out->jobs++;
    out->bytes += j->bytes;
    out->owner_jobs += (size_t)mine;
    out->owner_bytes += mine ? j->bytes : 0;
  }
  pthread_mutex_unlock(&q->lock);
}

int srv_queue_cancel(srv_queue *q, int64_t id, int *running) {
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
    srv_record_flush(q->rec); /* a job that just ended: the store says so once this returns */
    return ebb_seterr(EBB_ENOTFOUND, "job %lld is not queued or running", (long long)id);
  }
  srv_job_publish(id, found->uid, found->pipeline, NULL, EBB_JOB_CANCELLED, "EBB_ECANCELED",
                  "cancelled before it ran", 0, "[]");
  srv_store_finish(q->store, id, EBB_JOB_CANCELLED, "EBB_ECANCELED", "cancelled before it ran",
                   NULL, 0, "[]");
  qjob_free(found);
  return 0;
}
