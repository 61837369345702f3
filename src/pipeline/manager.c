/* The pipeline manager (manager.h): load, unload, switch and run the
 * pipelines a long-lived process keeps, give memory back, and ask peers. */
#include "pipeline/manager.h"
#include "pipeline/work.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/events.h"
#include "base/clock.h"
#include "base/wait.h"
#include "base/log.h"
#include "pipeline/hook.h"
#include "pipeline/host.h"

#define MIB(x) ((unsigned long long)((x) >> 20))
#define GIB(x) ((double)(x) / (1024.0 * 1024.0 * 1024.0))

typedef struct mpipe {
  const pl_def *def; /* borrowed from the config */
  int loaded;
  uint64_t need;      /* last measured peak, else "expected_mib"; 0: unknown */
  int measured;       /* need is a measurement here (a load or a run) */
  int need_ctx;       /* need counts the device context (measured while making one) */
  char *outdir;       /* WORK/pipelines/NAME (kept while instances live) */
  int asleep;         /* sleep (issue 12): loaded, its stages asleep */
  double slept_at;    /* when it fell asleep (the budget unloads the oldest) */
  double used_at;     /* last load or run (giving back takes the least recent first) */
  uint64_t work;      /* a run's working memory over what the loaded pipeline held, measured */
  uint64_t load_peak; /* the owners' peak its last load measured (no context) */
  int need_work;      /* need covers a run's working memory (a run measured it since the load) */
} mpipe;

struct pl_manager {
  dev_device *dev;
  mem_allocator *alloc;
  const pl_registry *reg;
  const pl_config *cfg;
  char *work_dir;
  char *hook; /* $EBB_STAGE_HOOK: also run at pipeline-unloaded / pipeline-loaded */
  pl_policy policy;
  double load_wait_s;
  pl_runner *runner;
  pl_sessions *sessions;
  /* Every runner call runs on one long-lived device thread: a burst at a
   * time, and worker processes (isolated stages, which die with the thread
   * that started them: PR_SET_PDEATHSIG) outlive the HTTP connection that
   * loaded them. Callers wait for their task. */
  pthread_t dev_thread;
  int dev_started;
  pthread_mutex_t dev_lock;
  pthread_cond_t dev_cond, dev_done;
  struct task *head, *tail;
  int dev_busy, dev_stop;
  pthread_mutex_t switch_lock; /* loads and unloads, one at a time */
  pthread_mutex_t lock;        /* pipes[].loaded/need, released_total */
  mpipe *pipes;
  size_t npipes;
  uint64_t released_total;
  /* sleep (issue 12), under lock */
  uint64_t sleep_budget; /* host bytes for backups; 0: no limit */
  uint64_t wakes;        /* wakes done (by the API or by a job) */
  double wake_seconds;   /* their time, summed */
  uint64_t backup_bytes; /* last seen (the read side never waits on the allocator) */
  mpipe *running;        /* the pipeline of the job on the device thread, under lock */
  double sleep_bps;      /* bytes a second the last sleep parked (a giving's estimate) */
  int (*ask_peers)(void *arg, dev_device *dev, uint64_t need); /* issue 35; may be NULL */
  void (*ask_done)(void *arg, dev_device *dev);
  void *ask_arg;
  int room_asked; /* pl_manager_ask_room's claim stands for the load that follows */
  double used_at; /* last load or run, under lock */
};

/* --- helpers --------------------------------------------------------------- */
static uint64_t driver_free(pl_manager *m, int *known) { return pl_driver_free(m->dev, known); }

static void log_free(const char *name, const char *when, uint64_t bytes) {
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  base_log_field f[] = {EBB_LF_S("event", "pipeline_memory"), EBB_LF_S("pipeline", name),
                        EBB_LF_S("when", when), EBB_LF_U("driver_free_bytes", bytes)};
  base_log_ev(EBB_LOG_INFO, scope, f, 4, "GPU memory free %s: %.2f GiB", when, GIB(bytes));
}

/* A pipeline's state changed on this manager's device: the fact, once
 * (include/ebb/events.h; the server's stream marks it on the chart). */
static void publish_pipe(pl_manager *m, const char *name, const char *state, uint64_t before,
                         uint64_t after) {
  ebb_event ev = {.kind = EBB_EVENT_PIPELINE,
                  .device = dev_device_label(m->dev),
                  .pipeline = name,
                  .state = state,
                  .driver_free_before = before,
                  .driver_free_after = after};
  base_event_publish(&ev);
}

static mpipe *find_pipe(pl_manager *m, const char *name) {
  for (size_t i = 0; i < m->npipes; i++)
    if (!strcmp(m->pipes[i].def->name, name))
      return &m->pipes[i];
  return NULL;
}

static int unknown_pipeline(pl_manager *m, const char *name) {
  char known[1024] = "";
  for (size_t i = 0; i < m->npipes; i++)
    snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
             m->pipes[i].def->name);
  return ebb_seterr(EBB_ENOTFOUND, "unknown pipeline '%s' (known: %s)", name, known);
}

static int loaded_count(pl_manager *m) {
  int n = 0;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    n += m->pipes[i].loaded;
  pthread_mutex_unlock(&m->lock);
  return n;
}

static void add_released(pl_manager *m, uint64_t b) {
  pthread_mutex_lock(&m->lock);
  m->released_total += b;
  pthread_mutex_unlock(&m->lock);
}

/* A copy of def with options[stage name] merged over each stage's options.
 * Unknown stage names are EBB_ECONFIG. Free with free_def. */
static int merge_def(const pl_def *def, json_t *options, pl_def *out) {
  *out = *def;
  out->stages = calloc(def->nstages ? def->nstages : 1, sizeof *out->stages);
  if (!out->stages)
    return ebb_seterr(EBB_ENOMEM, "out of host memory");
  for (size_t i = 0; i < def->nstages; i++) {
    out->stages[i] = def->stages[i];
    out->stages[i].options = json_deep_copy(def->stages[i].options);
  }
  if (!options || json_is_null(options))
    return 0;
  if (!json_is_object(options))
    return ebb_seterr(EBB_ECONFIG, "\"options\" must be an object {stage name: {option: value}}");
  const char *key;
  json_t *val;
  json_object_foreach(options, key, val) {
    size_t i = 0;
    while (i < def->nstages && strcmp(def->stages[i].name, key))
      i++;
    if (i == def->nstages)
      return ebb_seterr(EBB_ECONFIG, "\"options\": pipeline '%s' has no stage named '%s'",
                        def->name, key);
    if (!json_is_object(val))
      return ebb_seterr(EBB_ECONFIG, "\"options\".\"%s\" must be an object of stage options", key);
    json_object_update(out->stages[i].options, val);
  }
  return 0;
}

static void free_def(pl_def *d) {
  if (!d->stages)
    return;
  for (size_t i = 0; i < d->nstages; i++)
    json_decref(d->stages[i].options);
  free(d->stages);
  d->stages = NULL;
}


/* --- the device thread --------------------------------------------------------- */
typedef struct task {
  struct task *next;
  int (*fn)(void *);
  void *arg;
  int rc, done, started;
  char err[1024];
} task;

static void *device_thread(void *arg) {
  pl_manager *m = arg;
  pthread_mutex_lock(&m->dev_lock);
  for (;;) {
    while (!m->head && !m->dev_stop)
      pthread_cond_wait(&m->dev_cond, &m->dev_lock);
    if (!m->head)
      break;
    task *t = m->head;
    m->head = t->next;
    if (!m->head)
      m->tail = NULL;
    m->dev_busy = t->started = 1;
    pthread_mutex_unlock(&m->dev_lock);
    ebb_clearerr();
    t->rc = t->fn(t->arg);
    if (t->rc)
      snprintf(t->err, sizeof t->err, "%s", ebb_errmsg());
    pthread_mutex_lock(&m->dev_lock);
    m->dev_busy = 0;
    t->done = 1;
    pthread_cond_broadcast(&m->dev_done);
  }
  pthread_mutex_unlock(&m->dev_lock);
  return NULL;
}

/* Takes t back out of the device thread's queue before it started
 * (dev_lock held). */
static void unqueue(pl_manager *m, task *t) {
  task *prev = NULL;
  for (task *x = m->head; x; prev = x, x = x->next)
    if (x == t) {
      if (prev)
        prev->next = t->next;
      else
        m->head = t->next;
      if (m->tail == t)
        m->tail = prev;
      return;
    }
}

/* How long a caller waits for the device thread to start its task, and
 * what makes it give up first (run_limits). */
typedef struct dev_wait {
  const atomic_int *cancel; /* set: EBB_ECANCELED; may be NULL */
  double until;             /* monotonic; past it: EBB_EBUSY; 0: no bound */
} dev_wait;

/* Runs fn(arg) on the device thread and waits; the error message comes back
 * to the calling thread. try: do nothing (return 1) when the thread is busy.
 * w (may be NULL): a task that has not started when w->cancel is set or
 * w->until passes is taken back unrun (the device is held by other work). */
static int on_device_(pl_manager *m, int (*fn)(void *), void *arg, int try, const dev_wait *w) {
  if (!m->dev_started || pthread_equal(pthread_self(), m->dev_thread))
    return fn(arg);
  task t = {.fn = fn, .arg = arg};
  pthread_mutex_lock(&m->dev_lock);
  if (try && (m->dev_busy || m->head)) {
    pthread_mutex_unlock(&m->dev_lock);
    return 1;
  }
  if (m->tail)
    m->tail->next = &t;
  else
    m->head = &t;
  m->tail = &t;
  pthread_cond_signal(&m->dev_cond);
  while (!t.done) {
    if (!w) {
      pthread_cond_wait(&m->dev_done, &m->dev_lock);
      continue;
    }
    int stop = w->cancel && atomic_load(w->cancel), late = w->until > 0 && base_now() > w->until;
    if (!t.started && (stop || late)) {
      unqueue(m, &t);
      pthread_mutex_unlock(&m->dev_lock);
      return ebb_seterr(stop ? EBB_ECANCELED : EBB_EBUSY, "%s",
                        stop ? "cancelled while it waited for the device"
                             : "the device stayed busy with other work");
    }
    base_cond_wait_ms(&m->dev_done, &m->dev_lock, 20);
  }
  pthread_mutex_unlock(&m->dev_lock);
  if (t.rc)
    ebb_seterr(t.rc, "%s", t.err);
  return t.rc;
}
#define on_device(m, fn, arg) on_device_((m), (fn), (arg), 0, NULL)

/* --- create / destroy --------------------------------------------------------- */
int pl_manager_create(const pl_manager_opts *o, pl_manager **out) {
  if (!o || !o->dev || !o->alloc || !o->reg || !o->cfg || !o->work_dir)
    return ebb_seterr(EBB_EINVAL, "manager: device, allocator, registry, config and work "
                                  "directory are required");
  pl_manager *m = calloc(1, sizeof *m);
  if (!m)
    return ebb_seterr(EBB_ENOMEM, "manager: out of host memory");
  m->dev = o->dev;
  m->alloc = o->alloc;
  m->reg = o->reg;
  m->cfg = o->cfg;
  m->policy = o->policy ? *o->policy : (pl_policy){EBB_POLICY_AFTER_STAGE, 0};
  m->load_wait_s = o->load_wait_s > 0 ? o->load_wait_s : 10;
  m->ask_peers = o->ask_peers;
  m->ask_done = o->ask_done;
  m->ask_arg = o->ask_arg;
  pthread_mutex_init(&m->dev_lock, NULL);
  pthread_cond_init(&m->dev_cond, NULL);
  pthread_cond_init(&m->dev_done, NULL);
  pthread_mutex_init(&m->switch_lock, NULL);
  pthread_mutex_init(&m->lock, NULL);
  int rc = EBB_ENOMEM;
  if (!(m->work_dir = strdup(o->work_dir)))
    goto fail;
  const char *hook = getenv("EBB_STAGE_HOOK");
  if (hook && *hook && !(m->hook = strdup(hook)))
    goto fail;
  m->npipes = o->cfg->npipelines;
  if (!(m->pipes = calloc(m->npipes ? m->npipes : 1, sizeof *m->pipes)))
    goto fail;
  for (size_t i = 0; i < m->npipes; i++) {
    const pl_def *d = &o->cfg->pipelines[i];
    m->pipes[i].def = d;
    m->pipes[i].need = d->expected_bytes; /* "expected_mib" until a load measures it */
    size_t n = strlen(m->work_dir) + strlen(d->name) + 32;
    if (!(m->pipes[i].outdir = malloc(n)))
      goto fail;
    snprintf(m->pipes[i].outdir, n, "%s/pipelines/%s", m->work_dir, d->name);
  }
  if ((rc = pl_sessions_create(&m->sessions)) != 0)
    goto fail;
  pl_runner_opts ro = {.size = sizeof ro,
                       .dev = o->dev,
                       .alloc = o->alloc,
                       .reg = o->reg,
                       .cache_dir = o->cache_dir,
                       .scratch_dir = o->scratch_dir,
                       .oneshot = 0};
  if ((rc = pl_runner_create(&ro, &m->runner)) != 0)
    goto fail;
  if (pthread_create(&m->dev_thread, NULL, device_thread, m) != 0) {
    rc = ebb_seterr(EBB_ENOMEM, "manager: cannot start the device thread");
    goto fail;
  }
  m->dev_started = 1;
  *out = m;
  return 0;
fail:
  if (rc == EBB_ENOMEM)
    ebb_seterr(rc, "manager: out of host memory");
  pl_manager_destroy(m);
  return rc;
}

static int unload_in_switch(pl_manager *m, mpipe *pp, uint64_t *released);

static int final_vacate_on_dev(void *arg) {
  pl_manager *m = arg;
  pl_runner_evict_idle(m->runner, -1, NULL);
  pl_runner_destroy(m->runner);
  m->runner = NULL;
  mem_release_result rr = {.size = sizeof rr};
  mem_release(m->alloc, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr);
  return 0;
}

void pl_manager_destroy(pl_manager *m) {
  if (!m)
    return;
  if (m->sessions)
    pl_sessions_stop_all(m->sessions, "the server is shutting down");
  pthread_mutex_lock(&m->switch_lock);
  for (size_t i = 0; i < m->npipes && m->runner; i++)
    if (m->pipes[i].loaded)
      unload_in_switch(m, &m->pipes[i], NULL);
  pthread_mutex_unlock(&m->switch_lock);
  if (m->runner)
    on_device(m, final_vacate_on_dev, m);
  if (m->dev_started) {
    pthread_mutex_lock(&m->dev_lock);
    m->dev_stop = 1;
    pthread_cond_signal(&m->dev_cond);
    pthread_mutex_unlock(&m->dev_lock);
    pthread_join(m->dev_thread, NULL);
  }
  pl_sessions_destroy(m->sessions);
  for (size_t i = 0; i < m->npipes; i++)
    free(m->pipes[i].outdir);
  free(m->pipes);
  free(m->work_dir);
  free(m->hook);
  pthread_mutex_destroy(&m->lock);
  pthread_mutex_destroy(&m->switch_lock);
  pthread_cond_destroy(&m->dev_done);
  pthread_cond_destroy(&m->dev_cond);
  pthread_mutex_destroy(&m->dev_lock);
  free(m);
}

pl_sessions *pl_manager_sessions(pl_manager *m) { return m->sessions; }

const pl_def *pl_manager_pipeline(pl_manager *m, const char *name) {
  mpipe *pp = find_pipe(m, name);
  return pp ? pp->def : NULL;
}

int pl_manager_is_loaded(pl_manager *m, const char *name) {
  pthread_mutex_lock(&m->lock);
  mpipe *pp = find_pipe(m, name);
  int l = pp && pp->loaded;
  pthread_mutex_unlock(&m->lock);
  return l;
}

int pl_manager_policy_of(pl_manager *m, const char *name, pl_policy *out) {
  mpipe *pp = find_pipe(m, name); /* the definitions never change after create */
  if (!pp)
    return ebb_seterr(EBB_ENOTFOUND, "no pipeline '%s'", name);
  *out = pp->def->has_policy ? pp->def->policy : m->policy;
  return 0;
}

void pl_manager_place_figures(pl_manager *m, const char *name, uint64_t *measured, int *asleep) {
  pthread_mutex_lock(&m->lock);
  mpipe *pp = find_pipe(m, name);
  *measured = pp && pp->measured ? pp->need : 0;
  *asleep = pp && pp->loaded && pp->asleep;
  pthread_mutex_unlock(&m->lock);
}

uint64_t pl_manager_context_estimate(pl_manager *m) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(m->alloc, &st);
  return st.context_estimate;
}

uint64_t pl_manager_asleep_bytes(pl_manager *m, const char *except) {
  uint64_t b = 0;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    if (m->pipes[i].loaded && m->pipes[i].asleep &&
        (!except || strcmp(m->pipes[i].def->name, except)))
      b += m->pipes[i].need;
  pthread_mutex_unlock(&m->lock);
  return b;
}

uint64_t pl_manager_loaded_bytes(pl_manager *m, const char *except, int *count) {
  uint64_t b = 0;
  int c = 0;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    if (m->pipes[i].loaded && (!except || strcmp(m->pipes[i].def->name, except))) {
      b += m->pipes[i].need;
      c++;
    }
  pthread_mutex_unlock(&m->lock);
  if (count)
    *count = c;
  return b;
}

dev_device *pl_manager_device(pl_manager *m) { return m->dev; }

uint64_t pl_manager_released_total(pl_manager *m) {
  pthread_mutex_lock(&m->lock);
  uint64_t b = m->released_total;
  pthread_mutex_unlock(&m->lock);
  return b;
}

/* --- unload ----------------------------------------------------------------- */
typedef struct unload_args {
  pl_manager *m;
  mpipe *pp;
  uint64_t rel;
} unload_args;
static int unload_on_dev(void *arg);
static void note_backup(pl_manager *m);

/* switch_lock held (the _in_switch functions). */
static int unload_in_switch(pl_manager *m, mpipe *pp, uint64_t *released) {
  const char *name = pp->def->name;
  char scope[160], reason[256];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  snprintf(reason, sizeof reason, "pipeline '%s' was unloaded", name);
  if (released)
    *released = 0;
  /* 1. no new items; 2. the items in flight finish; the leases go */
  int stopped = 0;
  pl_sessions_stop_pipeline(m->sessions, name, reason, &stopped);
  if (stopped)
    base_log(EBB_LOG_INFO, scope, "stopped %d session%s (drained)", stopped,
             stopped == 1 ? "" : "s");
  unload_args a = {m, pp, 0};
  int rc = on_device(m, unload_on_dev, &a);
  add_released(m, a.rel);
  if (released)
    *released = a.rel;
  return rc;
}

/* On the device thread: the stages go, the driver confirms. */
static int unload_on_dev(void *arg) {
  unload_args *a = arg;
  pl_manager *m = a->m;
  mpipe *pp = a->pp;
  const char *name = pp->def->name;
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  uint64_t held = 0;
  int was_loaded = pp->loaded;
  int n = pl_runner_pipeline_bytes(m->runner, name, &held, NULL);
  if (!was_loaded && n == 0)
    return 0;
  int known;
  uint64_t before = driver_free(m, &known);
  log_free(name, "before unload", before);
  pthread_mutex_lock(&m->lock);
  pp->loaded = 0;
  pp->asleep = 0;
  int others = 0;
  for (size_t i = 0; i < m->npipes; i++)
    others += m->pipes[i].loaded;
  pthread_mutex_unlock(&m->lock);
  /* 3. unload the stages: the runner destroys their owners, reporting and
   * freeing whatever they still held (a leak); then trim, pinned, and the
   * context when nothing else is loaded */
  uint64_t rel = 0, more = 0;
  int rc = pl_runner_unload_pipeline(m->runner, name, !others, &rel);
  if (rc)
    base_log(EBB_LOG_WARN, scope, "%s", ebb_errmsg());
  if (!others)
    pl_runner_evict_idle(m->runner, -1, &more); /* idle job stages + context */
  rel += more;
  uint64_t left = 0;
  pl_runner_pipeline_bytes(m->runner, name, &left, NULL);
  if (left)
    base_log(EBB_LOG_ERROR, scope, "its stages still hold %llu MiB after unload", MIB(left));
  /* 4. confirm against the driver */
  uint64_t after = driver_free(m, NULL);
  log_free(name, "after unload", after);
  if (was_loaded)
    publish_pipe(m, name, "unloaded", before, after);
  if (known) {
    int64_t seen = (int64_t)after - (int64_t)before;
    if (seen + (2 << 20) < (int64_t)rel)
      base_log(EBB_LOG_WARN, scope,
               "the driver shows %lld MiB more free memory but ebb handed back %llu MiB",
               (long long)(seen / (1 << 20)), MIB(rel));
    else
      base_log(EBB_LOG_DEBUG, scope, "driver confirms: +%lld MiB free (ebb handed back %llu MiB)",
               (long long)(seen / (1 << 20)), MIB(rel));
  }
  pl_hook_run(m->hook, "pipeline-unloaded", name, rel);
  note_backup(m); /* a sleeping pipeline's backup went with it */
  a->rel = rel;
  return rc;
}

int pl_manager_unload(pl_manager *m, const char *name, uint64_t *released) {
  if (released)
    *released = 0;
  mpipe *pp = find_pipe(m, name);
  if (!pp)
    return unknown_pipeline(m, name);
  pthread_mutex_lock(&m->switch_lock);
  int rc = unload_in_switch(m, pp, released);
  pthread_mutex_unlock(&m->switch_lock);
  return rc;
}

int pl_manager_unload_all(pl_manager *m, uint64_t *released, int *count) {
  uint64_t total = 0;
  int n = 0, rc = 0;
  pthread_mutex_lock(&m->switch_lock);
  for (size_t i = 0; i < m->npipes; i++) {
    if (!pl_manager_is_loaded(m, m->pipes[i].def->name))
      continue;
    uint64_t rel = 0;
    int r = unload_in_switch(m, &m->pipes[i], &rel);
    rc = rc ? rc : r;
    total += rel;
    n++;
  }
  pthread_mutex_unlock(&m->switch_lock);
  if (released)
    *released = total;
  if (count)
    *count = n;
  return rc;
}

/* --- load ------------------------------------------------------------------- */
typedef struct evict_args {
  pl_manager *m;
  double now;
  uint64_t rel;
} evict_args;

static int evict_on_dev(void *arg) {
  evict_args *a = arg;
  return pl_runner_evict_idle(a->m->runner, a->now, &a->rel);
}

typedef struct load_args {
  pl_manager *m;
  mpipe *pp;
  uint64_t rel;
} load_args;

/* On the device thread: load, measure, log. */
static int load_on_dev(void *arg) {
  load_args *a = arg;
  pl_manager *m = a->m;
  mpipe *pp = a->pp;
  const char *name = pp->def->name;
  uint64_t before = driver_free(m, NULL);
  int had_ctx = dev_ctx_active(m->dev);
  pl_job_result res;
  int rc = pl_runner_load_pipeline(m->runner, pp->def, pp->outdir, &res);
  if (rc) {
    pl_runner_unload_pipeline(m->runner, name, loaded_count(m) == 0, &a->rel);
    return ebb_seterr(rc, "loading pipeline '%s': %s", name, res.message);
  }
  uint64_t after = driver_free(m, NULL), peak = 0;
  pl_runner_pipeline_bytes(m->runner, name, NULL, &peak);
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(m->alloc, &st);
  uint64_t measured = before > after ? before - after : 0;
  uint64_t owners = peak + (had_ctx ? 0 : st.context_estimate);
  pthread_mutex_lock(&m->lock);
  pp->loaded = 1;
  pp->need = measured > owners ? measured : owners;
  pp->need_ctx = !had_ctx;
  pp->load_peak = peak;
  pp->need_work = 0;
  pp->measured = 1;
  pp->used_at = m->used_at = base_now();
  pthread_mutex_unlock(&m->lock);
  log_free(name, "after load", after);
  publish_pipe(m, name, "loaded", before, after);
  pl_hook_run(m->hook, "pipeline-loaded", name, 0);
  return 0;
}
/* The device context a load would create: 0 while one is active. */
#define ASSUMED_CONTEXT (300ull << 20) /* the allocator's own default (allocator.c) */
static uint64_t context_need(pl_manager *m) {
  if (dev_ctx_active(m->dev))
    return 0;
  uint64_t ctx = pl_manager_context_estimate(m);
  return ctx ? ctx : ASSUMED_CONTEXT;
}

/* What loading (or waking) pp will take (placement's order, placement.h):
 * its last measured peak, else what its stages declare, else
 * "expected_mib"; each with the context a first load creates (a need
 * measured while a context existed does not count it). 0: unknown. *why
 * says which. */
static uint64_t predicted_need(pl_manager *m, mpipe *pp, const char **why) {
  pthread_mutex_lock(&m->lock);
  uint64_t need = pp->measured ? pp->need : 0;
  int with_ctx = pp->need_ctx;
  pthread_mutex_unlock(&m->lock);
  *why = "its last measured peak";
  if (need)
    return need + (with_ctx ? 0 : context_need(m));
  uint64_t declared = 0;
  int complete = 0;
  pl_manager_pipeline_need(m, pp->def->name, &declared, &complete);
  if (declared && complete) {
    *why = "declared by its stages";
    return declared + context_need(m);
  }
  *why = "its \"expected_mib\"";
  return pp->def->expected_bytes ? pp->def->expected_bytes + context_need(m) : 0;
}

/* Over the driver's free memory: the other processes on the device are
 * asked (the broker) before waiting or failing (`what`: "needs", "wakes
 * into"). 1 when they were asked (then ask_finished once the memory is
 * taken, or the attempt failed). */
static int ask_peers_for(pl_manager *m, const char *name, const char *what, uint64_t need) {
  int known;
  uint64_t free_now = driver_free(m, &known);
  if (!m->ask_peers || !known)
    return 0;
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  if (free_now < need)
    base_log(EBB_LOG_INFO, scope,
             "%s about %llu MiB, %llu MiB free: asking the other "
             "processes on %s",
             what, MIB(need), MIB(free_now), dev_device_label(m->dev));
  /* asked even when the driver shows enough: the bytes may be another
   * asker's claim (docs/broker.md, "Claims"), and this load claims its own */
  pthread_mutex_lock(&m->lock);
  int room = m->room_asked;
  m->room_asked = 0;
  pthread_mutex_unlock(&m->lock);
  if (room && m->ask_done) /* the placement's ask: this one stands for it */
    m->ask_done(m->ask_arg, m->dev);
  m->ask_peers(m->ask_arg, m->dev, need);
  return 1;
}

static void ask_finished(pl_manager *m, int asked) {
  if (asked && m->ask_done)
    m->ask_done(m->ask_arg, m->dev);
}

int pl_manager_ask_room(pl_manager *m, const char *name) {
  mpipe *pp = find_pipe(m, name);
  const char *why;
  uint64_t need = pp ? predicted_need(m, pp, &why) : 0;
  int known;
  uint64_t free_now = driver_free(m, &known);
  if (!need || !known || free_now >= need)
    return 0;
  int asked = ask_peers_for(m, name, "needs", need);
  pthread_mutex_lock(&m->lock);
  m->room_asked = asked;
  pthread_mutex_unlock(&m->lock);
  return asked;
}

void pl_manager_ask_done(pl_manager *m) {
  pthread_mutex_lock(&m->lock);
  int room = m->room_asked;
  m->room_asked = 0;
  pthread_mutex_unlock(&m->lock);
  ask_finished(m, room);
}

static int pipe_asleep(pl_manager *m, mpipe *pp) {
  pthread_mutex_lock(&m->lock);
  int a = pp->loaded && pp->asleep;
  pthread_mutex_unlock(&m->lock);
  return a;
}

static int load_in_switch(pl_manager *m, mpipe *pp) {
  const char *name = pp->def->name;
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  if (pl_manager_is_loaded(m, name))
    return 0;
  const char *why;
  uint64_t need = predicted_need(m, pp, &why);
  int known, asked = 0;
  uint64_t free_now = driver_free(m, &known);
  /* a switch: unknown need, or more than is free now */
  if (need == 0 || (known && need > free_now)) {
    for (size_t i = 0; i < m->npipes; i++) {
      mpipe *o = &m->pipes[i];
      if (o == pp || !pl_manager_is_loaded(m, o->def->name))
        continue;
      base_log(EBB_LOG_INFO, scope, "switching: unloading pipeline '%s' first", o->def->name);
      unload_in_switch(m, o, NULL);
    }
    evict_args ev = {m, -1, 0};
    on_device(m, evict_on_dev, &ev);
    add_released(m, ev.rel);
    need = predicted_need(m, pp, &why); /* the switch may have let the context go */
  }
  if (need && known) {
    uint64_t total = dev_total_bytes(m->dev);
    if (total && need > total)
      return ebb_seterr(EBB_EOOM,
                        "pipeline '%s' needs about %llu MiB (%s) but the "
                        "device %s has only %llu MiB in all; not loading it",
                        name, MIB(need), why, dev_device_label(m->dev), MIB(total));
    asked = ask_peers_for(m, name, "needs", need);
    double until = base_now() + m->load_wait_s;
    while ((free_now = driver_free(m, NULL)) < need && base_now() < until) {
      struct timespec ts = {0, 100 * 1000000L};
      nanosleep(&ts, NULL);
    }
    if (free_now < need) {
      ask_finished(m, asked);
      return ebb_seterr(EBB_EOOM,
                        "pipeline '%s' needs about %llu MiB (%s) but %s has "
                        "%llu MiB free after unloading the other pipelines and waiting %.0f s; "
                        "not loading it (something else holds the memory)",
                        name, MIB(need), why, dev_device_label(m->dev), MIB(free_now),
                        m->load_wait_s);
    }
  }
  load_args la = {m, pp, 0};
  int rc = on_device(m, load_on_dev, &la);
  ask_finished(m, asked);
  add_released(m, la.rel);
  return rc;
}

int pl_manager_pipeline_need(pl_manager *m, const char *pipeline, uint64_t *device_bytes,
                             int *complete) {
  mpipe *pp = m ? find_pipe(m, pipeline) : NULL;
  if (!pp)
    return m ? unknown_pipeline(m, pipeline) : ebb_seterr(EBB_EINVAL, "no manager");
  uint64_t sum = 0;
  int all = 1;
  for (size_t i = 0; i < pp->def->nstages; i++) {
    pl_stage_need n = {.size = sizeof n};
    if (pl_runner_stage_need(m->runner, pp->def, pp->def->stages[i].name, &n) == 0)
      sum += n.device_bytes;
    else
      all = 0;
  }
  if (device_bytes)
    *device_bytes = sum;
  if (complete)
    *complete = all;
  return 0;
}

int pl_manager_load(pl_manager *m, const char *name) {
  mpipe *pp = find_pipe(m, name);
  if (!pp)
    return unknown_pipeline(m, name);
  pthread_mutex_lock(&m->switch_lock);
  int rc = load_in_switch(m, pp);
  pthread_mutex_unlock(&m->switch_lock);
  return rc;
}

/* --- jobs and items ---------------------------------------------------------------- */
int pl_manager_check_job(pl_manager *m, const char *pipeline, json_t *options,
                         pl_trust_path_fn on_path, void *arg) {
  mpipe *pp = find_pipe(m, pipeline);
  if (!pp)
    return unknown_pipeline(m, pipeline);
  pl_def d;
  int rc = merge_def(pp->def, options, &d);
  if (!rc)
    rc = pl_check(m->reg, &d);
  free_def(&d);
  if (!rc && options)
    rc = pl_job_options_trust(m->reg, pp->def, options, on_path, arg);
  return rc;
}

int pl_manager_job_work(pl_manager *m, const char *pipeline, json_t *options, double input_s,
                        uint32_t input_rate, pl_job_work *out) {
  mpipe *pp = find_pipe(m, pipeline);
  if (!pp)
    return unknown_pipeline(m, pipeline);
  pl_def d;
  int rc = merge_def(pp->def, options, &d);
  if (!rc)
    rc = pl_work(m->reg, &d, input_s, input_rate, out);
  free_def(&d);
  return rc;
}

typedef struct run_args {
  pl_manager *m;
  mpipe *pp;
  const char *input, *outdir;
  json_t *options;
  const atomic_int *cancel;
  pl_progress_fn progress;
  void *progress_arg;
  pl_job_result *res;
  double timeout_s; /* counted from the run's start on the device thread */
} run_args;

/* On the device thread: one job (or session item) through the runner. */
static int run_on_dev(void *arg) {
  run_args *a = arg;
  pl_manager *m = a->m;
  mpipe *pp = a->pp;
  pl_job_result *res = a->res;
  memset(res, 0, sizeof *res);
  pl_def d;
  int rc = merge_def(pp->def, a->options, &d);
  if (rc) {
    res->code = rc;
    snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
    free_def(&d);
    return rc;
  }
  pthread_mutex_lock(&m->lock);
  int loaded = pp->loaded;
  pthread_mutex_unlock(&m->lock);
  pl_policy never = {EBB_POLICY_NEVER, 0};
  const pl_policy *pol = loaded ? &never : (pp->def->has_policy ? &pp->def->policy : &m->policy);
  pl_job job = {.size = sizeof job,
                .pipeline = &d,
                .input = a->input,
                .output_dir = a->outdir,
                .policy = pol,
                .cancel = a->cancel,
                .progress = a->progress,
                .progress_arg = a->progress_arg,
                .deadline = a->timeout_s > 0 ? base_now() + a->timeout_s : 0};
  int was_asleep = pl_runner_pipeline_asleep(m->runner, pp->def->name);
  uint64_t held0 = 0; /* what the loaded pipeline holds before its run */
  if (loaded && !was_asleep)
    pl_runner_pipeline_bytes(m->runner, pp->def->name, &held0, NULL);
  double tw = base_now();
  pthread_mutex_lock(&m->lock);
  m->running = pp;
  pthread_mutex_unlock(&m->lock);
  rc = pl_runner_run(m->runner, &job, res);
  pthread_mutex_lock(&m->lock);
  m->running = NULL;
  pp->used_at = m->used_at = base_now();
  pthread_mutex_unlock(&m->lock);
  if (was_asleep && !pl_runner_pipeline_asleep(m->runner, pp->def->name)) {
    pthread_mutex_lock(&m->lock);
    pp->asleep = 0;
    m->wakes++;
    m->wake_seconds += base_now() - tw; /* the job's time bounds its wake's */
    pthread_mutex_unlock(&m->lock);
    note_backup(m);
    publish_pipe(m, pp->def->name, "awake", 0, 0);
  }
  if (loaded) {
    uint64_t peak = 0;
    pl_runner_pipeline_bytes(m->runner, pp->def->name, NULL, &peak);
    mem_alloc_stats st = {.size = sizeof st};
    mem_allocator_get_stats(m->alloc, &st);
    pthread_mutex_lock(&m->lock);
    if (held0 && peak > held0)
      pp->work = peak - held0; /* the run's working memory (asked before the next run) */
    peak += st.context_estimate;
    if (peak > pp->need) {
      pp->need = peak;
      pp->need_ctx = st.context_estimate > 0;
    }
    pp->need_work = 1;
    pp->measured = 1;
    pthread_mutex_unlock(&m->lock);
  }
  free_def(&d);
  add_released(m, res->released_bytes);
  return rc;
}

/* a on the device thread under lim (may be NULL): its run's deadline, and
 * its wait for the device (held by a session item, a load, another job's
 * run) bounded by lim->max_wait_s, past which it gives up unrun. */
static int run_bounded(pl_manager *m, run_args *a, const pl_run_limits *lim) {
  double t0 = base_now();
  dev_wait w = {a->cancel, lim && lim->max_wait_s > 0 ? t0 + lim->max_wait_s : 0};
  a->timeout_s = lim ? lim->timeout_s : 0;
  int rc = on_device_(m, run_on_dev, a, 0, &w);
  if (rc && !a->res->code) { /* taken back unrun */
    a->res->over_wait = rc == EBB_EBUSY;
    a->res->waited_s = base_now() - t0;
  }
  return rc;
}

/* A run's working memory over what its loaded pipeline holds: measured by
 * an earlier run of the loaded pipeline, else what its stages declare over
 * what its load measured; 0: unknown. */
static uint64_t work_need(pl_manager *m, mpipe *pp) {
  pthread_mutex_lock(&m->lock);
  uint64_t work = pp->work, load_peak = pp->load_peak;
  pthread_mutex_unlock(&m->lock);
  uint64_t declared = 0;
  int complete = 0;
  if (!work && load_peak)
    pl_manager_pipeline_need(m, pp->def->name, &declared, &complete);
  return work ? work : complete && declared > load_peak ? declared - load_peak : 0;
}

/* What a job takes from the driver before it is done (claimed from the
 * peers before it runs): a pipeline loaded and awake, its working memory
 * (the run allocates it: another asker must not count it free); else its
 * load or wake, with the working memory when the need measured by its load
 * does not cover it. */
static uint64_t job_need(pl_manager *m, mpipe *pp) {
  const char *why;
  if (pl_manager_is_loaded(m, pp->def->name) && !pipe_asleep(m, pp))
    return work_need(m, pp);
  uint64_t need = predicted_need(m, pp, &why);
  pthread_mutex_lock(&m->lock);
  int add = need && pp->measured && !pp->need_work;
  pthread_mutex_unlock(&m->lock);
  return need + (add ? work_need(m, pp) : 0);
}

int pl_manager_run_job(pl_manager *m, const char *pipeline, const char *input, const char *outdir,
                       json_t *options, const atomic_int *cancel, pl_progress_fn progress,
                       void *progress_arg, const pl_run_limits *lim, pl_job_result *res) {
  memset(res, 0, sizeof *res);
  mpipe *pp = find_pipe(m, pipeline);
  if (!pp) {
    res->code = unknown_pipeline(m, pipeline);
    snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
    return res->code;
  }
  uint64_t need = job_need(m, pp);
  int asked = !need                                ? 0
              : !pl_manager_is_loaded(m, pipeline) ? ask_peers_for(m, pipeline, "needs", need)
              : pipe_asleep(m, pp)                 ? ask_peers_for(m, pipeline, "wakes into", need)
                                                   : ask_peers_for(m, pipeline, "runs in", need);
  run_args a = {m, pp, input, outdir, options, cancel, progress, progress_arg, res, 0};
  int rc = run_bounded(m, &a, lim);
  ask_finished(m, asked);
  if (rc && !res->code) { /* failed before the runner could say why */
    res->code = rc;
    snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
  }
  return rc;
}

int pl_manager_session_open(pl_manager *m, const char *pipeline, char *id) {
  mpipe *pp = find_pipe(m, pipeline);
  if (!pp)
    return unknown_pipeline(m, pipeline);
  pthread_mutex_lock(&m->switch_lock);
  int rc = load_in_switch(m, pp);
  if (!rc)
    rc = pl_sessions_open(m->sessions, pipeline, id);
  pthread_mutex_unlock(&m->switch_lock);
  return rc;
}

int pl_manager_session_item(pl_manager *m, const char *id, const char *input, const char *outdir,
                            json_t *options, const atomic_int *cancel, const pl_run_limits *lim,
                            pl_job_result *res) {
  memset(res, 0, sizeof *res);
  char pipeline[128];
  int rc = pl_sessions_item_begin(m->sessions, id, pipeline);
  if (rc) {
    res->code = rc;
    snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
    return rc;
  }
  mpipe *pp = find_pipe(m, pipeline);
  run_args a = {m, pp, input, outdir, options, cancel, NULL, NULL, res, 0};
  rc = run_bounded(m, &a, lim);
  pl_sessions_item_end(m->sessions, id, rc != 0);
  return rc;
}

int pl_manager_session_close(pl_manager *m, const char *id) {
  return pl_sessions_close(m->sessions, id);
}

/* --- release ---------------------------------------------------------------- */
void pl_manager_tick(pl_manager *m) {
  evict_args ev = {m, base_now(), 0};
  if (on_device_(m, evict_on_dev, &ev, 1, NULL) == 0) /* skipped while busy */
    add_released(m, ev.rel);
}

typedef struct release_args {
  pl_manager *m;
  uint64_t rel;
} release_args;

static int release_on_dev(void *arg) {
  release_args *a = arg;
  mem_release_result rr = {.size = sizeof rr};
  mem_release(a->m->alloc, EBB_RELEASE_DEFAULT, &rr);
  /* the trim is no owner's (the evicted stages publish their own) */
  ebb_event ev = {.kind = EBB_EVENT_RELEASED,
                  .device = dev_device_label(a->m->dev),
                  .what = "GPU memory",
                  .bytes = rr.released_bytes,
                  .context_bytes = rr.context_bytes};
  base_event_publish(&ev);
  uint64_t more = 0;
  pl_runner_evict_idle(a->m->runner, -1, &more);
  a->rel = rr.released_bytes + more;
  return 0;
}

int pl_manager_release(pl_manager *m, uint64_t *released) {
  release_args a = {m, 0};
  on_device(m, release_on_dev, &a);
  uint64_t total = a.rel;
  add_released(m, total);
  if (total >> 20)
    base_log(EBB_LOG_INFO, "server", "released %llu MiB of GPU memory", MIB(total));
  if (released)
    *released = total;
  return 0;
}

/* --- JSON views ---------------------------------------------------------------- */
json_t *pl_manager_pipelines_json(pl_manager *m) {
  json_t *arr = json_array();
  for (size_t i = 0; i < m->npipes; i++) {
    mpipe *pp = &m->pipes[i];
    const pl_def *d = pp->def;
    json_t *o = json_object(), *st = json_array();
    for (size_t k = 0; k < d->nstages; k++)
      json_array_append_new(st, json_pack("{s:s,s:s}", "name", d->stages[k].name, "stage",
                                          d->stages[k].stage));
    char pol[64];
    pl_policy_format(d->has_policy ? &d->policy : &m->policy, pol, sizeof pol);
    pthread_mutex_lock(&m->lock);
    int loaded = pp->loaded;
    uint64_t need = pp->need;
    pthread_mutex_unlock(&m->lock);
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "description",
                        d->description ? json_string(d->description) : json_null());
    json_object_set_new(o, "origin", json_string(d->origin ? d->origin : ""));
    json_object_set_new(o, "release", json_string(pol));
    json_object_set_new(o, "stages", st);
    json_object_set_new(o, "loaded", json_boolean(loaded));
    json_object_set_new(o, "asleep", json_boolean(loaded && pp->asleep));
    json_object_set_new(o, "sessions", json_integer(pl_sessions_leases(m->sessions, d->name)));
    json_object_set_new(o, "need_bytes", need ? json_integer((json_int_t)need) : json_null());
    json_array_append_new(arr, o);
  }
  return arr;
}

/* Per-owner current bytes from the ledger (thread-safe, never waits for a
 * job): an owner's last event carries its bytes after it. */
static json_t *owners_json(pl_manager *m) {
  mem_ledger *l = mem_allocator_ledger(m->alloc);
  size_t cap = mem_ledger_count(l) + 64, n = 0;
  mem_ledger_event *ev = malloc(cap * sizeof *ev);
  json_t *arr = json_array();
  if (!ev || mem_ledger_events(l, ev, cap, &n, NULL) != 0) {
    free(ev);
    return arr;
  }
  typedef struct {
    uint32_t id;
    const char *label;
    uint64_t bytes;
  } row;
  row *rows = calloc(n + 1, sizeof *rows);
  size_t nr = 0;
  for (size_t i = 0; rows && i < n; i++) {
    if (!ev[i].owner_id || ev[i].kind == EBB_EV_MARK)
      continue;
    size_t k = 0;
    while (k < nr && rows[k].id != ev[i].owner_id)
      k++;
    if (k == nr)
      rows[nr++] = (row){ev[i].owner_id, ev[i].label, 0};
    rows[k].bytes = ev[i].owner_bytes;
  }
  for (size_t k = 0; k < nr; k++)
    if (rows[k].bytes)
      json_array_append_new(arr, json_pack("{s:s,s:I}", "name", rows[k].label ? rows[k].label : "?",
                                           "bytes", (json_int_t)rows[k].bytes));
  free(rows);
  free(ev);
  return arr;
}

json_t *pl_manager_memory_json(pl_manager *m) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(m->alloc, &st);
  mem_unattributed un = {.size = sizeof un};
  int un_ok = mem_allocator_unattributed(m->alloc, &un) == 0;
  json_t *loaded = json_array();
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    if (m->pipes[i].loaded)
      json_array_append_new(loaded, json_string(m->pipes[i].def->name));
  pthread_mutex_unlock(&m->lock);
  static const char *src[] = {"none", "driver", "nvml", "host"};
  json_t *dev = json_pack("{s:s,s:s,s:I,s:I,s:I,s:s}", "label", dev_device_label(m->dev), "name",
                          dev_name(m->dev), "total_bytes", (json_int_t)dev_total_bytes(m->dev),
                          "driver_free_bytes", (json_int_t)st.driver_free, "driver_total_bytes",
                          (json_int_t)st.driver_total, "driver_source",
                          src[st.driver_source <= EBB_MEMINFO_HOST ? st.driver_source : 0]);
  json_t *al =
      json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "reserved_bytes", (json_int_t)st.reserved.current,
                "allocated_bytes", (json_int_t)st.allocated.current, "cached_bytes",
                (json_int_t)st.cached.current, "reserved_peak_bytes", (json_int_t)st.reserved.peak,
                "segments", (json_int_t)st.segments.current, "blocks",
                (json_int_t)st.blocks.current, "trimmed_bytes", (json_int_t)st.trimmed_bytes);
  json_t *ctx = json_pack("{s:b,s:I}", "held", st.ctx_active, "estimate_bytes",
                          (json_int_t)st.context_estimate);
  json_t *pin = json_pack("{s:I,s:I}", "reserved_bytes", (json_int_t)st.pinned_reserved.current,
                          "allocated_bytes", (json_int_t)st.pinned_allocated.current);
  json_t *una = un_ok && un.known
                    ? json_pack("{s:b,s:b,s:I,s:I,s:I,s:I}", "known", 1, "per_process",
                                un.per_process, "driver_used_bytes", (json_int_t)un.driver_used,
                                "ebb_reserved_bytes", (json_int_t)un.ebb_reserved,
                                "context_estimate_bytes", (json_int_t)un.context_estimate,
                                "unattributed_bytes", (json_int_t)un.unattributed)
                    : json_pack("{s:b}", "known", 0);
  return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I}", "device", dev, "allocator", al, "owners",
                   owners_json(m), "context", ctx, "pinned", pin, "unattributed", una, "loaded",
                   loaded, "released_total_bytes", (json_int_t)pl_manager_released_total(m));
}

/* --- sleep and wake (issue 12) ---------------------------------------------- */
typedef struct sleep_args {
  pl_manager *m;
  mpipe *pp;
  int wake;
  mem_sleep_stats st;
} sleep_args;

static int sleep_on_dev(void *arg) {
  sleep_args *a = arg;
  const char *name = a->pp->def->name;
  a->st = (mem_sleep_stats){.size = sizeof a->st};
  return a->wake ? pl_runner_wake_pipeline(a->m->runner, name, &a->st)
                 : pl_runner_sleep_pipeline(a->m->runner, name, &a->st);
}

static uint64_t backup_bytes(pl_manager *m) { return mem_allocator_backup_bytes(m->alloc); }

/* The figure the read side shows, refreshed after every change. */
static void note_backup(pl_manager *m) {
  uint64_t b = backup_bytes(m);
  pthread_mutex_lock(&m->lock);
  m->backup_bytes = b;
  pthread_mutex_unlock(&m->lock);
}

/* Over the host budget for backups: the oldest sleepers are unloaded
 * instead (switch_lock held). */
static void enforce_budget(pl_manager *m) {
  for (;;) {
    pthread_mutex_lock(&m->lock);
    uint64_t budget = m->sleep_budget;
    mpipe *oldest = NULL;
    for (size_t i = 0; i < m->npipes; i++)
      if (m->pipes[i].loaded && m->pipes[i].asleep &&
          (!oldest || m->pipes[i].slept_at < oldest->slept_at))
        oldest = &m->pipes[i];
    pthread_mutex_unlock(&m->lock);
    uint64_t held = backup_bytes(m);
    if (!budget || held <= budget || !oldest)
      return;
    base_log(EBB_LOG_INFO, "server",
             "sleep: backups hold %llu MiB of host memory, over the budget of %llu MiB: "
             "unloading pipeline '%s' (the oldest asleep)",
             MIB(held), MIB(budget), oldest->def->name);
    unload_in_switch(m, oldest, NULL);
  }
}

/* switch_lock held. try: do nothing (return 1) while the device is busy. */
static int sleep_in_switch(pl_manager *m, mpipe *pp, int try, mem_sleep_stats *out) {
  const char *name = pp->def->name;
  sleep_args a = {m, pp, 0, {.size = sizeof a.st}};
  int rc = on_device_(m, sleep_on_dev, &a, try, NULL);
  if (rc == 1)
    return 1;
  if (!rc || pl_runner_pipeline_asleep(m->runner, name)) {
    pthread_mutex_lock(&m->lock);
    pp->asleep = 1;
    pp->slept_at = base_now();
    if (!pp->loaded) /* kept by a job's policy: it counts as loaded while asleep */
      pp->loaded = 1;
    pthread_mutex_unlock(&m->lock);
    add_released(m, a.st.device_bytes);
    publish_pipe(m, name, "asleep", 0, 0);
  }
  if (!rc)
    enforce_budget(m);
  note_backup(m);
  if (out)
    *out = a.st;
  return rc;
}

int pl_manager_sleep(pl_manager *m, const char *name, mem_sleep_stats *out) {
  mpipe *pp = find_pipe(m, name);
  if (!pp)
    return unknown_pipeline(m, name);
  pthread_mutex_lock(&m->switch_lock);
  int rc = sleep_in_switch(m, pp, 0, out);
  pthread_mutex_unlock(&m->switch_lock);
  return rc;
}

int pl_manager_wake(pl_manager *m, const char *name, mem_sleep_stats *out) {
  mpipe *pp = find_pipe(m, name);
  if (!pp)
    return unknown_pipeline(m, name);
  pthread_mutex_lock(&m->switch_lock);
  const char *why;
  uint64_t need = pipe_asleep(m, pp) ? predicted_need(m, pp, &why) : 0;
  int asked = need ? ask_peers_for(m, name, "wakes into", need) : 0;
  sleep_args a = {m, pp, 1, {.size = sizeof a.st}};
  int rc = on_device(m, sleep_on_dev, &a);
  ask_finished(m, asked);
  pthread_mutex_lock(&m->lock);
  if (!rc) {
    pp->asleep = 0;
    m->wakes++;
    m->wake_seconds += a.st.seconds;
  }
  pthread_mutex_unlock(&m->lock);
  note_backup(m);
  pthread_mutex_unlock(&m->switch_lock);
  if (!rc)
    publish_pipe(m, name, "awake", 0, 0);
  if (out)
    *out = a.st;
  return rc;
}

void pl_manager_set_sleep_budget(pl_manager *m, uint64_t bytes) {
  pthread_mutex_lock(&m->lock);
  m->sleep_budget = bytes;
  pthread_mutex_unlock(&m->lock);
}

void pl_manager_sleep_figures(pl_manager *m, pl_manager_sleep_info *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    out->sleeping += m->pipes[i].loaded && m->pipes[i].asleep;
  out->wakes = m->wakes;
  out->wake_seconds = m->wake_seconds;
  out->budget_bytes = m->sleep_budget;
  out->backup_bytes = m->backup_bytes;
  pthread_mutex_unlock(&m->lock);
}

/* --- giving back to another process (issue 35) ----------------------------- */
uint64_t pl_manager_process_bytes(pl_manager *m) {
  uint64_t b = 0;
  if (dev_process_used(m->dev, getpid(), &b) != 0)
    return 0;
  return b;
}

double pl_manager_idle_seconds(pl_manager *m) {
  pthread_mutex_lock(&m->lock);
  double t = m->used_at;
  pthread_mutex_unlock(&m->lock);
  return t > 0 ? base_now() - t : base_now(); /* never used: as idle as can be */
}

__attribute__((format(printf, 2, 3))) static void gb_reason(pl_giveback *g, const char *fmt, ...) {
  size_t n = strlen(g->reason);
  if (n + 4 >= sizeof g->reason)
    return;
  if (n)
    n += (size_t)snprintf(g->reason + n, sizeof g->reason - n, "; ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->reason + n, sizeof g->reason - n, fmt, ap);
  va_end(ap);
}

static void gb_kept(pl_giveback *g, const char *what, uint64_t bytes, const char *why) {
  if (g->nkept == EBB_GIVEBACK_MAX_KEPT)
    return;
  pl_giveback_kept *k = &g->kept[g->nkept++];
  snprintf(k->what, sizeof k->what, "%s", what);
  k->bytes = bytes;
  snprintf(k->why, sizeof k->why, "%s", why);
}

/* Why pp may not be given (NULL: it may), under lock. */
static const char *keep_why(pl_manager *m, mpipe *pp, uint64_t held, uint64_t reserve, char *buf,
                            size_t len) {
  if (!pp->loaded)
    return "not loaded";
  if (pp->asleep)
    return "asleep (its device memory is already back)";
  if (m->running == pp)
    return "a job is running on it";
  int leases = pl_sessions_leases(m->sessions, pp->def->name);
  if (leases > 0) {
    snprintf(buf, len, "%d open session%s", leases, leases == 1 ? "" : "s");
    return buf;
  }
  if (!pp->def->evictable)
    return "\"evictable\": false in its config";
  if (reserve && (held < pp->need || held - pp->need < reserve)) {
    snprintf(buf, len, "--reserve %llu MiB (this process holds %llu MiB)", MIB(reserve), MIB(held));
    return buf;
  }
  return NULL;
}

/* The least recently used pipeline that may go, or NULL. */
static mpipe *next_victim(pl_manager *m, uint64_t held, uint64_t reserve) {
  char buf[160];
  mpipe *best = NULL;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++) {
    mpipe *pp = &m->pipes[i];
    if (!keep_why(m, pp, held, reserve, buf, sizeof buf) && (!best || pp->used_at < best->used_at))
      best = pp;
  }
  pthread_mutex_unlock(&m->lock);
  return best;
}

/* Gives one pipeline back by its policy; 1: the device is busy (a job). */
static int give_pipe(pl_manager *m, mpipe *pp, pl_giveback *g) {
  const pl_policy *pol = pp->def->has_policy ? &pp->def->policy : &m->policy;
  if (pol->kind == EBB_POLICY_SLEEP) {
    mem_sleep_stats st;
    int rc = sleep_in_switch(m, pp, 1, &st);
    if (rc == 0)
      gb_reason(g, "pipeline %s asleep (%llu MiB)", pp->def->name, MIB(st.device_bytes));
    if (rc == 0 && st.seconds > 0.01 && st.backup_bytes > (64u << 20))
      m->sleep_bps = (double)st.backup_bytes / st.seconds; /* under switch_lock */
    return rc == 1 ? 1 : 0;
  }
  uint64_t rel = 0;
  unload_in_switch(m, pp, &rel);
  gb_reason(g, "pipeline %s unloaded (%llu MiB)", pp->def->name, MIB(rel));
  return 0;
}

static void kept_list(pl_manager *m, uint64_t held, uint64_t reserve, pl_giveback *g) {
  char buf[160], what[128];
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++) {
    mpipe *pp = &m->pipes[i];
    const char *why = keep_why(m, pp, held, reserve, buf, sizeof buf);
    if (why && !strcmp(why, "not loaded"))
      continue;
    snprintf(what, sizeof what, "pipeline %s", pp->def->name);
    gb_kept(g, what, pp->asleep ? 0 : pp->need, why ? why : "not needed (enough was given)");
  }
  pthread_mutex_unlock(&m->lock);
  if (held && dev_ctx_active(m->dev))
    gb_kept(g, "context", pl_manager_context_estimate(m),
            loaded_count(m) ? "kept while pipelines are loaded" : "held by this process");
}

/* pl_manager_give_back's rules run dry: the pipelines it would give, least
 * recently used first, by their last measured need, until want; the
 * context when all would go. The time: a sleep at the last measured rate
 * (1 GiB/s before any), an unload at 50 ms. Nothing while the device runs
 * a job or a switch is under way (give_back gives nothing then either). */
void pl_manager_give_plan(pl_manager *m, uint64_t want, uint64_t reserve, uint64_t *bytes,
                          double *eta_ms) {
  char buf[160];
  *bytes = 0;
  *eta_ms = 0;
  if (pthread_mutex_trylock(&m->switch_lock) != 0)
    return;
  uint64_t held = pl_manager_process_bytes(m);
  double bps = m->sleep_bps > 0 ? m->sleep_bps : (double)(1u << 30);
  int loaded = loaded_count(m), going = 0;
  unsigned char taken[256] = {0};
  pthread_mutex_lock(&m->lock);
  while (!m->running && *bytes < want) {
    mpipe *best = NULL;
    for (size_t i = 0; i < m->npipes && i < 256; i++) {
      mpipe *pp = &m->pipes[i];
      if (!taken[i] && !keep_why(m, pp, held, reserve, buf, sizeof buf) &&
          (!best || pp->used_at < best->used_at))
        best = pp;
    }
    if (!best)
      break;
    taken[best - m->pipes] = 1;
    const pl_policy *pol = best->def->has_policy ? &best->def->policy : &m->policy;
    *bytes += best->need;
    *eta_ms += pol->kind == EBB_POLICY_SLEEP ? 1000.0 * (double)best->need / bps : 50;
    held = held > best->need ? held - best->need : 0;
    going++;
  }
  pthread_mutex_unlock(&m->lock);
  if (going && going == loaded && *bytes < want && dev_ctx_active(m->dev))
    *bytes += pl_manager_context_estimate(m);
  pthread_mutex_unlock(&m->switch_lock);
}

int pl_manager_give_back(pl_manager *m, uint64_t want, uint64_t reserve, pl_giveback *out) {
  memset(out, 0, sizeof *out);
  uint64_t before = pl_manager_process_bytes(m), ebb_given = 0;
  out->confirmed = before > 0;
  if (pthread_mutex_trylock(&m->switch_lock) != 0) {
    gb_kept(out, "pipelines", 0, "a load or unload is under way here");
    out->busy = 1;
    return 0;
  }
  release_args ra = {m, 0};
  int busy = on_device_(m, release_on_dev, &ra, 1, NULL) == 1;
  if (!busy && ra.rel >> 20) {
    add_released(m, ra.rel);
    gb_reason(out, "cache trimmed (%llu MiB)", MIB(ra.rel));
  }
  ebb_given += busy ? 0 : ra.rel;
  for (mpipe *pp; !busy;) {
    uint64_t held = pl_manager_process_bytes(m);
    uint64_t gone = before > held ? before - held : 0;
    if ((out->confirmed ? gone : ebb_given) >= want || !(pp = next_victim(m, held, reserve)))
      break;
    uint64_t r0 = pl_manager_released_total(m);
    busy = give_pipe(m, pp, out);
    ebb_given += pl_manager_released_total(m) - r0;
  }
  uint64_t after = pl_manager_process_bytes(m);
  if (busy) {
    pthread_mutex_lock(&m->lock);
    const char *r = m->running ? m->running->def->name : "?";
    pthread_mutex_unlock(&m->lock);
    char why[160];
    snprintf(why, sizeof why, "the device is running a job (pipeline %s)", r);
    gb_kept(out, "device", after, why);
  }
  kept_list(m, after, reserve, out);
  pthread_mutex_unlock(&m->switch_lock);
  out->given = out->confirmed ? (before > after ? before - after : 0) : ebb_given;
  return 0;
}
