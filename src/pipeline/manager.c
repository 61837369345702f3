/* The pipeline manager (manager.h): create and destroy it, and load,
 * unload, switch and run the pipelines a long-lived process keeps. Its
 * state and read side are in manager_state.c, its device thread in
 * manager_thread.c, needs and asking peers in manager_ask.c, sleep and the
 * sleep budget in manager_sleep.c, giving back in manager_give.c. */
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
#include "pipeline/manager_int.h"

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
  if (pthread_create(&m->dev_thread, NULL, pl__mgr_device_thread, m) != 0) {
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
      pl__mgr_unload_in_switch(m, &m->pipes[i], NULL);
  pthread_mutex_unlock(&m->switch_lock);
  if (m->runner)
    pl__mgr_on_device(m, final_vacate_on_dev, m);
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

/* --- unload ----------------------------------------------------------------- */
typedef struct unload_args {
  pl_manager *m;
  mpipe *pp;
  uint64_t rel;
} unload_args;
static int unload_on_dev(void *arg);

/* switch_lock held (the _in_switch functions). */
int pl__mgr_unload_in_switch(pl_manager *m, mpipe *pp, uint64_t *released) {
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
  int rc = pl__mgr_on_device(m, unload_on_dev, &a);
  pl__mgr_add_released(m, a.rel);
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
  uint64_t before = pl__mgr_driver_free(m, &known);
  pl__mgr_log_free(name, "before unload", before);
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
  uint64_t after = pl__mgr_driver_free(m, NULL);
  pl__mgr_log_free(name, "after unload", after);
  if (was_loaded)
    pl__mgr_publish(m, name, "unloaded", before, after);
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
  pl__mgr_note_backup(m); /* a sleeping pipeline's backup went with it */
  a->rel = rel;
  return rc;
}

int pl_manager_unload(pl_manager *m, const char *name, uint64_t *released) {
  if (released)
    *released = 0;
  mpipe *pp = pl__mgr_find(m, name);
  if (!pp)
    return pl__mgr_unknown(m, name);
  pthread_mutex_lock(&m->switch_lock);
  int rc = pl__mgr_unload_in_switch(m, pp, released);
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
    int r = pl__mgr_unload_in_switch(m, &m->pipes[i], &rel);
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
  uint64_t before = pl__mgr_driver_free(m, NULL);
  int had_ctx = dev_ctx_active(m->dev);
  pl_job_result res;
  int rc = pl_runner_load_pipeline(m->runner, pp->def, pp->outdir, &res);
  if (rc) {
    pl_runner_unload_pipeline(m->runner, name, pl__mgr_loaded_count(m) == 0, &a->rel);
    return ebb_seterr(rc, "loading pipeline '%s': %s", name, res.message);
  }
  uint64_t after = pl__mgr_driver_free(m, NULL), peak = 0;
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
  pl__mgr_log_free(name, "after load", after);
  pl__mgr_publish(m, name, "loaded", before, after);
  pl_hook_run(m->hook, "pipeline-loaded", name, 0);
  return 0;
}

static int load_in_switch(pl_manager *m, mpipe *pp) {
  const char *name = pp->def->name;
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  if (pl_manager_is_loaded(m, name))
    return 0;
  const char *why;
  uint64_t need = pl__mgr_predicted_need(m, pp, &why);
  int known, asked = 0;
  uint64_t free_now = pl__mgr_driver_free(m, &known);
  /* a switch: unknown need, or more than is free now */
  if (need == 0 || (known && need > free_now)) {
    for (size_t i = 0; i < m->npipes; i++) {
      mpipe *o = &m->pipes[i];
      if (o == pp || !pl_manager_is_loaded(m, o->def->name))
        continue;
      base_log(EBB_LOG_INFO, scope, "switching: unloading pipeline '%s' first", o->def->name);
      pl__mgr_unload_in_switch(m, o, NULL);
    }
    evict_args ev = {m, -1, 0};
    pl__mgr_on_device(m, evict_on_dev, &ev);
    pl__mgr_add_released(m, ev.rel);
    need = pl__mgr_predicted_need(m, pp, &why); /* the switch may have let the context go */
  }
  if (need && known) {
    uint64_t total = dev_total_bytes(m->dev);
    if (total && need > total)
      return ebb_seterr(EBB_EOOM,
                        "pipeline '%s' needs about %llu MiB (%s) but the "
                        "device %s has only %llu MiB in all; not loading it",
                        name, MIB(need), why, dev_device_label(m->dev), MIB(total));
    asked = pl__mgr_ask_peers(m, name, "needs", need);
    double until = base_now() + m->load_wait_s;
    while ((free_now = pl__mgr_driver_free(m, NULL)) < need && base_now() < until) {
      struct timespec ts = {0, 100 * 1000000L};
      nanosleep(&ts, NULL);
    }
    if (free_now < need) {
      pl__mgr_ask_finished(m, asked);
      return ebb_seterr(EBB_EOOM,
                        "pipeline '%s' needs about %llu MiB (%s) but %s has "
                        "%llu MiB free after unloading the other pipelines and waiting %.0f s; "
                        "not loading it (something else holds the memory)",
                        name, MIB(need), why, dev_device_label(m->dev), MIB(free_now),
                        m->load_wait_s);
    }
  }
  load_args la = {m, pp, 0};
  int rc = pl__mgr_on_device(m, load_on_dev, &la);
  pl__mgr_ask_finished(m, asked);
  pl__mgr_add_released(m, la.rel);
  return rc;
}

int pl_manager_load(pl_manager *m, const char *name) {
  mpipe *pp = pl__mgr_find(m, name);
  if (!pp)
    return pl__mgr_unknown(m, name);
  pthread_mutex_lock(&m->switch_lock);
  int rc = load_in_switch(m, pp);
  pthread_mutex_unlock(&m->switch_lock);
  return rc;
}

/* --- jobs and items ---------------------------------------------------------------- */
int pl_manager_check_job(pl_manager *m, const char *pipeline, json_t *options,
                         pl_trust_path_fn on_path, void *arg) {
  mpipe *pp = pl__mgr_find(m, pipeline);
  if (!pp)
    return pl__mgr_unknown(m, pipeline);
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
  mpipe *pp = pl__mgr_find(m, pipeline);
  if (!pp)
    return pl__mgr_unknown(m, pipeline);
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
    pl__mgr_note_backup(m);
    pl__mgr_publish(m, pp->def->name, "awake", 0, 0);
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
  pl__mgr_add_released(m, res->released_bytes);
  return rc;
}

/* a on the device thread under lim (may be NULL): its run's deadline, and
 * its wait for the device (held by a session item, a load, another job's
 * run) bounded by lim->max_wait_s, past which it gives up unrun. */
static int run_bounded(pl_manager *m, run_args *a, const pl_run_limits *lim) {
  double t0 = base_now();
  mgr_wait w = {a->cancel, lim && lim->max_wait_s > 0 ? t0 + lim->max_wait_s : 0};
  a->timeout_s = lim ? lim->timeout_s : 0;
  int rc = pl__mgr_on_device_(m, run_on_dev, a, 0, &w);
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
  if (pl_manager_is_loaded(m, pp->def->name) && !pl__mgr_asleep(m, pp))
    return work_need(m, pp);
  uint64_t need = pl__mgr_predicted_need(m, pp, &why);
  pthread_mutex_lock(&m->lock);
  int add = need && pp->measured && !pp->need_work;
  pthread_mutex_unlock(&m->lock);
  return need + (add ? work_need(m, pp) : 0);
}

int pl_manager_run_job(pl_manager *m, const char *pipeline, const char *input, const char *outdir,
                       json_t *options, const atomic_int *cancel, const pl_run_limits *lim,
                       pl_job_result *res) {
  memset(res, 0, sizeof *res);
  mpipe *pp = pl__mgr_find(m, pipeline);
  if (!pp) {
    res->code = pl__mgr_unknown(m, pipeline);
    snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
    return res->code;
  }
  uint64_t need = job_need(m, pp);
  int asked = !need                                ? 0
              : !pl_manager_is_loaded(m, pipeline) ? pl__mgr_ask_peers(m, pipeline, "needs", need)
              : pl__mgr_asleep(m, pp) ? pl__mgr_ask_peers(m, pipeline, "wakes into", need)
                                      : pl__mgr_ask_peers(m, pipeline, "runs in", need);
  run_args a = {m, pp, input, outdir, options, cancel, res, 0};
  int rc = run_bounded(m, &a, lim);
  pl__mgr_ask_finished(m, asked);
  if (rc && !res->code) { /* failed before the runner could say why */
    res->code = rc;
    snprintf(res->message, sizeof res->message, "%s", ebb_errmsg());
  }
  return rc;
}

int pl_manager_session_open(pl_manager *m, const char *pipeline, char *id) {
  mpipe *pp = pl__mgr_find(m, pipeline);
  if (!pp)
    return pl__mgr_unknown(m, pipeline);
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
  mpipe *pp = pl__mgr_find(m, pipeline);
  run_args a = {m, pp, input, outdir, options, cancel, res, 0};
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
  if (pl__mgr_on_device_(m, evict_on_dev, &ev, 1, NULL) == 0) /* skipped while busy */
    pl__mgr_add_released(m, ev.rel);
}

int pl__mgr_release_on_dev(void *arg) {
  pl__mgr_release_args *a = arg;
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
  pl__mgr_release_args a = {m, 0};
  pl__mgr_on_device(m, pl__mgr_release_on_dev, &a);
  uint64_t total = a.rel;
  pl__mgr_add_released(m, total);
  if (total >> 20)
    base_log(EBB_LOG_INFO, "server", "released %llu MiB of GPU memory", MIB(total));
  if (released)
    *released = total;
  return 0;
}
