/* The runner (runner.h): a job through its pipeline's stages, with the
 * cache, loads, runs and the release after every stage in every exit path,
 * and the pool of stage instances it keeps between jobs. What it notes per
 * stage (measured peaks, estimates) is in runner_notes.c; the pipelines it
 * keeps loaded, asleep or awake for the manager in runner_kept.c. */
#include "pipeline/runner.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/events.h"
#include "base/fs.h"
#include "base/log.h"
#include "pipeline/cache.h"
#include "pipeline/hook.h"
#include "pipeline/host.h"
#include "pipeline/instance.h"
#include "pipeline/isolated.h"
#include "pipeline/items.h"
#include "pipeline/trust.h"
#include "pipeline/runner_int.h"

/* --- helpers ------------------------------------------------------------------ */
int pl__run_fail(pl_job_result *res, int code, const char *stage, const char *fmt, ...) {
  if (res->code) /* keep the first failure */
    return res->code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->message, sizeof res->message, fmt, ap);
  va_end(ap);
  snprintf(res->stage, sizeof res->stage, "%s", stage ? stage : "");
  res->code = code ? code : EBB_ESTAGE;
  ebb_seterr(res->code, "%s", res->message);
  return res->code;
}

/* --- the pool ---------------------------------------------------------------- */
static slot *find_slot(pl_runner *r, const char *pipeline, const char *name) {
  for (slot *s = r->pool; s; s = s->next)
    if (!strcmp(pl_instance_pipeline(s->inst), pipeline) &&
        !strcmp(pl_instance_name(s->inst), name))
      return s;
  return NULL;
}

static void pool_unlink(pl_runner *r, slot *s) {
  for (slot **p = &r->pool; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      return;
    }
}

/* A release published with owner `owner` handed back bytes: counted for
 * the stage running now when it is that stage's (pl_stage_figures). */
static void note_release(pl_runner *r, const char *owner, uint64_t bytes) {
  if (r->cur && owner && !strcmp(owner, r->cur->name))
    r->cur->released_bytes += bytes;
}

/* Every path that ends an instance comes here: after a stage, a job's end,
 * idle expiry, eviction, an unload, the runner's end. The release itself is
 * pl_instance_release (instance.c). with_context: the device context goes
 * too when this is the last instance in the pool. job (may be NULL): the
 * job the release is for, which a failed unload fails. rep (may be NULL)
 * gets the report. Returns the bytes handed back to the driver. */
uint64_t pl__run_release_slot(pl_runner *r, slot *s, int with_context, pl_job_result *job,
                              pl_instance_report *rep) {
  pl_instance_report local = {.size = sizeof local};
  if (!rep)
    rep = &local;
  pl_instance_plan plan = {.quiet = s->quiet,
                           .with_context = with_context && r->pool == s && !s->next};
  char name[128];
  snprintf(name, sizeof name, "%s", pl_instance_name(s->inst));
  /* the hook measures the device around this one release (any path) */
  pl_hook_run(r->hook, "release-start", name, 0);
  if (pl_instance_release(s->inst, &plan, rep) != 0) /* running: a bug; destroy forces it */
    base_log(EBB_LOG_ERROR, name, "%s", ebb_errmsg());
  pl_hook_run(r->hook, "release-end", name, rep->released_bytes);
  note_release(r, name, rep->released_bytes);
  if (job && rep->unload_error)
    pl__run_fail(job, rep->unload_error, name, "stage '%s' failed to unload: %s", name,
                 rep->unload_message);
  pool_unlink(r, s);
  pl_instance_destroy(s->inst);
  free(s);
  return rep->released_bytes;
}

/* A release no owner of a stage made, published: the process-wide owner's
 * (flags EBB_EVENT_PROCESS; the log writes "[process] released N MiB of GPU
 * memory") or the trim and context of a vacate (owner NULL: its line is the
 * vacate's own). */
static void publish_vacated(pl_runner *r, unsigned flags, const char *owner,
                            const mem_release_result *rr, uint64_t before, uint64_t after) {
  ebb_event ev = {.kind = EBB_EVENT_RELEASED,
                  .flags = flags,
                  .device = dev_device_label(r->dev),
                  .owner = owner,
                  .what = !owner || dev_kind_of(r->dev) == EBB_DEVICE_CUDA ? "GPU memory"
                                                                           : "device memory (cpu)",
                  .bytes = rr->released_bytes,
                  .context_bytes = owner ? 0 : rr->context_bytes,
                  .driver_free_before = before,
                  .driver_free_after = after,
                  .callbacks_run = rr->callbacks_run,
                  .callbacks_failed = rr->callbacks_failed};
  base_event_publish(&ev);
}

/* Vacates the device when no instance is left. First the process-wide
 * owner: callbacks registered for nobody (a library's cache, mem_on_release)
 * are dropped and what they freed is trimmed, on a line of their own
 * ("[process] released N MiB of GPU memory"), never in a stage's. Then
 * trim, pinned pool and the device context go back to the driver, so the
 * process holds 0 bytes on the GPU. Not the per-stage line's shape: this is
 * a job's (or an unload's, or the idle timer's) end, not a stage. Returns
 * the bytes handed back. */
uint64_t pl__run_vacate(pl_runner *r, const char *scope) {
  if (r->pool)
    return 0;
  uint64_t process = 0, before, after;
  mem_release_result rr = {.size = sizeof rr};
  if (mem_release_count_of(NULL)) {
    before = pl_driver_free(r->dev, NULL);
    int run = 0, failed = 0;
    mem_release_callbacks_of(NULL, &run, &failed);
    mem_release(r->alloc, EBB_RELEASE_TRIM | EBB_RELEASE_PINNED, &rr);
    rr.callbacks_run = run;
    rr.callbacks_failed = failed;
    publish_vacated(r, EBB_EVENT_PROCESS, EBB_RELEASE_PROCESS_OWNER, &rr, before,
                    pl_driver_free(r->dev, NULL));
    process = rr.released_bytes;
    note_release(r, EBB_RELEASE_PROCESS_OWNER, process);
  }
  if (!dev_ctx_active(r->dev))
    return process;
  before = pl_driver_free(r->dev, NULL);
  rr = (mem_release_result){.size = sizeof rr};
  mem_release(r->alloc, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr);
  if (rr.context_error)
    base_log(EBB_LOG_WARN, scope, "could not release the device context: %s",
             ebb_strerror(rr.context_error));
  after = pl_driver_free(r->dev, NULL);
  rr.callbacks_run = rr.callbacks_failed = 0; /* every owner's: not this event's to count */
  publish_vacated(r, 0, NULL, &rr, before, after);
  base_log_field f[] = {EBB_LF_S("event", "context_released"),
                        EBB_LF_S("scope", scope),
                        EBB_LF_U("released_bytes", rr.released_bytes),
                        EBB_LF_U("context_bytes", rr.context_bytes),
                        EBB_LF_U("driver_free_before", before),
                        EBB_LF_U("driver_free_after", after)};
  if (rr.context_released)
    base_log_ev(EBB_LOG_INFO, scope, f, 6,
                "idle: device context released, %llu MiB of GPU memory back to the driver; "
                "ebb holds nothing on %s",
                MIB(rr.released_bytes), dev_device_label(r->dev));
  return process + rr.released_bytes;
}

/* Sleep (issue 12): when every instance left is asleep, nothing else holds
 * the device context, so it goes back too (a wake re-creates it). Returns
 * the bytes handed back. */
uint64_t pl__run_vacate_asleep(pl_runner *r, const char *scope) {
  if (!r->pool || !dev_ctx_active(r->dev))
    return 0;
  for (slot *s = r->pool; s; s = s->next)
    if (pl_instance_state_of(s->inst) != EBB_INSTANCE_PARKED)
      return 0;
  mem_release_result rr = {.size = sizeof rr};
  mem_release(r->alloc, EBB_RELEASE_TRIM | EBB_RELEASE_PINNED | EBB_RELEASE_CONTEXT, &rr);
  if (rr.context_released)
    base_log(EBB_LOG_INFO, scope,
             "asleep: device context released, %llu MiB of GPU memory "
             "back to the driver",
             MIB(rr.released_bytes));
  else if (rr.context_error)
    base_log(EBB_LOG_DEBUG, scope, "asleep: device context kept: %s",
             ebb_strerror(rr.context_error));
  return rr.released_bytes;
}

/* Puts s to sleep (policy sleep); a failure is logged, the instance is
 * asleep anyway (instance.h). */
uint64_t pl__run_sleep_slot(slot *s) {
  mem_sleep_stats st = {.size = sizeof st};
  if (pl_instance_sleep(s->inst, &st) != 0)
    base_log(EBB_LOG_WARN, pl_instance_name(s->inst), "%s", ebb_errmsg());
  return st.device_bytes;
}

/* Out of device memory in stage `who`: idle instances go first. */
static int on_oom(void *arg, pl_sctx *who) {
  pl_runner *r = arg;
  int freed = 0;
  for (slot *s = r->pool, *next; s; s = next) {
    next = s->next;
    if (pl_instance_state_of(s->inst) == EBB_INSTANCE_IDLE && pl_instance_ctx(s->inst) != who) {
      base_log(EBB_LOG_INFO, pl_instance_name(s->inst), "evicted: %s needs the memory", who->name);
      pl__run_release_slot(r, s, 0, NULL, NULL);
      freed = 1;
    }
  }
  return freed;
}

/* The instance for stage d of pipeline p with these options: the one kept
 * loaded with the same definition, else a new one in the pool (one kept with
 * another definition is released first). NULL: res says why. */
slot *pl__run_slot_for(pl_runner *r, const pl_def *p, const pl_stage_def *d, const ebb_stage *st,
                       const char *opts, const char *outdir, pl_job_result *res) {
  slot *s = find_slot(r, p->name, d->name);
  if (s && (pl_instance_stage(s->inst) != st || strcmp(pl_instance_options(s->inst), opts))) {
    res->released_bytes += pl__run_release_slot(r, s, 0, NULL, NULL);
    s = NULL;
  }
  if (s)
    return s;
  pl_instance_spec spec = {.size = sizeof spec,
                           .dev = r->dev,
                           .alloc = r->alloc,
                           .stage = st,
                           .pipeline = p->name,
                           .name = d->name,
                           .options = opts,
                           .output_dir = outdir,
                           .scratch_dir = r->scratch_dir,
                           .on_oom = on_oom,
                           .on_oom_arg = r};
  if (!(s = calloc(1, sizeof *s))) {
    pl__run_fail(res, EBB_ENOMEM, d->name, "stage '%s': out of host memory", d->name);
    return NULL;
  }
  int rc = pl_instance_create(&spec, &s->inst);
  if (rc) {
    free(s);
    pl__run_fail(res, rc, d->name, "%s", ebb_errmsg());
    return NULL;
  }
  s->next = r->pool;
  r->pool = s;
  return s;
}

/* --- runner ------------------------------------------------------------------ */
int pl_runner_create(const pl_runner_opts *o, pl_runner **out) {
  if (!o || !o->dev || !o->alloc || !o->reg)
    return ebb_seterr(EBB_EINVAL, "runner: device, allocator and registry are required");
  pl_runner *r = calloc(1, sizeof *r);
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "runner: out of host memory");
  pthread_mutex_init(&r->notes_mu, NULL);
  r->dev = o->dev;
  r->alloc = o->alloc;
  r->reg = o->reg;
  r->oneshot = o->oneshot;
  r->cache_default = o->cache_default;
  const char *hook = o->hook ? o->hook : getenv("EBB_STAGE_HOOK");
  if ((o->cache_dir && !(r->cache_dir = strdup(o->cache_dir))) ||
      (o->scratch_dir && !(r->scratch_dir = strdup(o->scratch_dir))) ||
      (hook && *hook && !(r->hook = strdup(hook)))) {
    pl_runner_destroy(r);
    return ebb_seterr(EBB_ENOMEM, "runner: out of host memory");
  }
  *out = r;
  return 0;
}

void pl_runner_destroy(pl_runner *r) {
  if (!r)
    return;
  while (r->pool)
    pl__run_release_slot(r, r->pool, 0, NULL, NULL);
  free(r->cache_dir);
  free(r->scratch_dir);
  free(r->hook);
  free(r->notes);
  pthread_mutex_destroy(&r->notes_mu);
  free(r);
}

int pl_runner_loaded(const pl_runner *r) {
  int n = 0;
  for (slot *s = r ? r->pool : NULL; s; s = s->next)
    n += pl_instance_is_loaded(s->inst);
  return n;
}

int pl_runner_evict_idle(pl_runner *r, double now, uint64_t *released) {
  uint64_t total = 0;
  for (slot *s = r->pool, *next; s; s = next) {
    next = s->next;
    if (pl_instance_state_of(s->inst) != EBB_INSTANCE_IDLE)
      continue;
    pl_leave_how how = now < 0 ? EBB_LEAVE_RELEASE
                               : pl_policy_leave(&s->policy, now - s->idle_since, 0);
    if (how != EBB_LEAVE_STAY) /* evicting all (now < 0): asleep under sleep, as when due */
      total += s->policy.kind == EBB_POLICY_SLEEP ? pl__run_sleep_slot(s)
                                                  : pl__run_release_slot(r, s, 0, NULL, NULL);
  }
  if (!r->pool)
    total += pl__run_vacate(r, "runner");
  else
    total += pl__run_vacate_asleep(r, "runner");
  if (released)
    *released = total;
  return 0;
}

/* --- checking ------------------------------------------------------------ */
int pl__run_check_stage(const pl_registry *reg, const pl_def *p, const pl_stage_def *d,
                        const ebb_stage **st, json_t **merged) {
  char where[768];
  snprintf(where, sizeof where, "%s: pipeline '%s' stage '%s'", p->origin, p->name, d->name);
  const char *origin = NULL;
  *st = d->worker ? NULL : pl_registry_find(reg, d->stage, &origin);
  if (!*st && !d->worker)
    return ebb_seterr(EBB_ENOTFOUND,
                      "%s: unknown stage '%s' (not built in and not in any plugin; see `ebb "
                      "stages`)",
                      where, d->stage);
  int rc = d->worker ? 0 : pl_stage_validate_options(*st, d->options, where, merged);
  if (rc || !d->isolate)
    return rc;
  /* isolated (src/pipeline/isolated.h): the proxy stage runs it in a worker;
   * its options are the spec (stage, options, worker); a "worker" entry's
   * options are the worker's to check */
  json_t *spec = pl_isolated_spec(d, *st, *merged);
  json_decref(*merged);
  *merged = spec;
  *st = pl_isolated_stage();
  if (spec && origin && strcmp(origin, "built-in")) /* the worker loads the same plugin */
    json_object_set_new(spec, "plugin", json_string(origin));
  return spec ? 0 : ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
}

/* Checks that p can run: every stage is registered, options are valid
 * against the stage's schema ("worker" entries: checked by the worker). Errors are
 * EBB_ECONFIG / EBB_ENOTFOUND / EBB_EUNSUPPORTED with a message naming the
 * pipeline's origin, the stage and the option (`ebb run` exits 2). */
static int pl_runner_check(const pl_runner *r, const pl_def *p) { return pl_check(r->reg, p); }

int pl_check(const pl_registry *reg, const pl_def *p) {
  for (size_t i = 0; i < p->nstages; i++) {
    const ebb_stage *st;
    json_t *m = NULL;
    int rc = pl__run_check_stage(reg, p, &p->stages[i], &st, &m);
    json_decref(m);
    if (rc)
      return rc;
  }
  return pl_check_trust(reg, p);
}

/* --- one stage ------------------------------------------------------------- */
typedef struct job_state {
  pl_runner *r;
  const pl_job *job;
  pl_job_result *res;
  pl_policy policy;
  const char *outdir;
  ebb_owner *job_owner;
  ebb_items *items;
} job_state;

/* One stage of a job, as it goes. */
typedef struct stage_run {
  int idx;
  const pl_stage_def *d;
  const ebb_stage *st; /* the stage, or the isolated proxy */
  json_t *merged;      /* its options, merged over the schema's defaults */
  char *opts;          /* the same, canonical: the instance's reuse key */
  int use_cache;
  uint8_t key[32]; /* the result cache's key, when use_cache */
  slot *s;
  ebb_items *out;
  double t0, t_loaded, t1;
  int64_t base; /* memory held outside ebb before the stage */
  int base_known;
} stage_run;

static int64_t outside_now(pl_runner *r, int *known) {
  mem_unattributed u = {.size = sizeof u};
  /* On the CPU device the "driver" figure is the whole host's memory: no use
   * for attributing; what ebb handed out through raw_driver_alloc is used. */
  if (dev_kind_of(r->dev) != EBB_DEVICE_CUDA || mem_allocator_unattributed(r->alloc, &u) != 0 ||
      !u.known) {
    *known = 0;
    return 0;
  }
  *known = 1;
  return u.unattributed;
}

/* The baseline for report_outside, taken before the stage loads. */
static void outside_base(pl_runner *r, stage_run *sr) {
  sr->base_known = 0;
  sr->base = dev_ctx_active(r->dev) ? outside_now(r, &sr->base_known) : 0;
  if (!dev_ctx_active(r->dev))
    sr->base_known = 1; /* no context: nothing is held, the baseline is 0 */
}

static void report_outside(pl_runner *r, const stage_run *sr) {
  pl_sctx *c = pl_instance_ctx(sr->s->inst);
  int known;
  int64_t now = outside_now(r, &known);
  int64_t outside = known && sr->base_known ? now - sr->base : (int64_t)c->raw_bytes;
  if (outside < (1 << 20))
    return;
  base_log_field f[] = {EBB_LF_S("event", "outside"), EBB_LF_S("stage", c->name),
                        EBB_LF_I("outside_bytes", outside),
                        EBB_LF_S("measured_by", known && sr->base_known ? "driver" : "ebb")};
  base_log_ev(EBB_LOG_WARN, c->name, f, 4,
              "%llu MiB held outside ebb (taken from the driver directly)", MIB((uint64_t)outside));
}

static int cancelled(const pl_job *job) { return job->cancel && atomic_load(job->cancel); }

/* After a stage: the before-release hook, the release per policy (else the
 * instance is kept: idle under policy idle, loaded otherwise), the
 * after-stage hook. */
static void after_stage(job_state *js, slot *s, int failed, int next_uses_gpu) {
  pl_runner *r = js->r;
  char name[128];
  snprintf(name, sizeof name, "%s", pl_instance_name(s->inst));
  pl_hook_run(r->hook, "before-release", name, 0);
  uint64_t released = 0;
  int release_now = js->policy.kind == EBB_POLICY_AFTER_STAGE ||
                    (failed && js->policy.kind != EBB_POLICY_NEVER);
  s->idle_since = base_now();
  if (release_now) {
    released = pl__run_release_slot(r, s, !failed && !next_uses_gpu, js->res, NULL);
    js->res->released_bytes += released;
  } else if (s->policy.kind == EBB_POLICY_IDLE &&
             pl_instance_state_of(s->inst) == EBB_INSTANCE_LOADED) {
    pl_instance_idle(s->inst);
  }
  pl_hook_run(r->hook, "after-stage", name, released);
}

/* Whether the stage after idx may use the GPU (unknown stages count as yes;
 * the last stage's "next" is the job's end, which releases anyway). */
static int next_uses_gpu(const pl_runner *r, const pl_def *p, int idx) {
  if ((size_t)idx + 1 >= p->nstages)
    return 1;
  if (p->stages[idx + 1].isolate) /* its worker has a context of its own */
    return 0;
  const ebb_stage *next = pl_registry_find(r->reg, p->stages[idx + 1].stage, NULL);
  return !next || next->needs_gpu;
}

/* Takes s for a job (or a kept pipeline) under policy pol: an idle instance
 * is claimed (loaded again: no longer evictable). */
void pl__run_claim(slot *s, pl_policy pol, int quiet) {
  if (pl_instance_state_of(s->inst) == EBB_INSTANCE_IDLE)
    pl_instance_enter(s->inst, EBB_INSTANCE_LOADED);
  s->policy = pol;
  s->quiet = quiet;
}

/* The stage's options, checked (the proxy stage's when isolated) and
 * canonical. */
static int stage_options(job_state *js, stage_run *sr) {
  const pl_stage_def *d = sr->d;
  int rc = pl__run_check_stage(js->r->reg, js->job->pipeline, d, &sr->st, &sr->merged);
  if (rc)
    return pl__run_fail(js->res, rc, d->name, "%s", ebb_errmsg());
  if (!(sr->opts = json_dumps(sr->merged, JSON_COMPACT | JSON_SORT_KEYS)))
    return pl__run_fail(js->res, EBB_ENOMEM, d->name, "stage '%s': out of host memory", d->name);
  return 0;
}

/* The result cache: *hit when the stage's result came from it (the stage is
 * then neither run nor released: "[a] cached"). */
static int cache_lookup(job_state *js, stage_run *sr, int *hit) {
  pl_runner *r = js->r;
  const pl_stage_def *d = sr->d;
  *hit = 0;
  sr->use_cache = r->cache_dir && (d->cache > 0 || (d->cache < 0 && r->cache_default)) &&
                  !d->worker; /* a worker has no version */
  if (sr->use_cache && pl_cache_key(sr->st, sr->merged, js->items, sr->key) != 0) {
    base_log(EBB_LOG_DEBUG, d->name, "not cacheable: %s", ebb_errmsg());
    sr->use_cache = 0;
  }
  if (!sr->use_cache)
    return 0;
  int corrupt = 0;
  int rc = pl_cache_load(r->cache_dir, sr->key, js->items, js->outdir, hit, &corrupt);
  if (corrupt)
    base_log(EBB_LOG_WARN, d->name, "%s; recomputing", ebb_errmsg());
  if (rc)
    return pl__run_fail(js->res, rc, d->name, "stage '%s': reading its cached result: %s", d->name,
                        ebb_errmsg());
  if (*hit) {
    base_log_field f[] = {EBB_LF_S("event", "cached"), EBB_LF_S("stage", d->name)};
    base_log_ev(EBB_LOG_INFO, d->name, f, 2, "cached");
    js->res->stages_cached++;
  }
  return 0;
}

/* The instance (reused when kept loaded with the same definition), bound to
 * this job: its cancel flag, output directory and deadline. */
static int stage_instance(job_state *js, stage_run *sr) {
  pl_runner *r = js->r;
  const pl_stage_def *d = sr->d;
  if (!(sr->s = pl__run_slot_for(r, js->job->pipeline, d, sr->st, sr->opts, js->outdir, js->res)))
    return js->res->code;
  sr->t0 = sr->t_loaded = base_now();
  /* a kept instance writes where this job writes (bound before a wake: an
   * isolated stage's wake is a load in a new worker, this job's) */
  double due = d->timeout_s > 0 ? sr->t0 + d->timeout_s : 0, job = js->job->deadline;
  pl_instance_bind(sr->s->inst, js->job->cancel, js->outdir,
                   job > 0 && (due <= 0 || job <= due) ? job : due);
  int rc = pl_instance_state_of(sr->s->inst) == EBB_INSTANCE_PARKED
               ? pl_instance_wake(sr->s->inst, NULL) /* a job wakes a sleeping stage in place */
               : 0;
  if (rc)
    return pl__run_fail(js->res, rc, d->name, "%s", ebb_errmsg());
  outside_base(r, sr);
  pl__run_claim(sr->s, js->policy, js->policy.kind == EBB_POLICY_NEVER);
  return 0;
}

/* A failed load or run (or one past its deadline) becomes the job's error. */
static int stage_failed(job_state *js, stage_run *sr, int rc) {
  const pl_stage_def *d = sr->d;
  pl_instance *in = sr->s->inst;
  pl_sctx *c = pl_instance_ctx(in);
  const char *phase = pl_instance_is_loaded(in) ? "failed" : "failed to load";
  const char *why = pl_instance_error(in);
  if (cancelled(js->job))
    return pl__run_fail(js->res, EBB_ECANCELED, d->name, "stage '%s' was cancelled (job cancelled)",
                        d->name);
  int late = atomic_load(&c->timed_out) || (c->deadline > 0 && sr->t1 >= c->deadline);
  if (late && c->deadline > 0 && c->deadline == js->job->deadline) { /* the job's, not its own */
    js->res->over_deadline = 1;
    return pl__run_fail(js->res, EBB_ETIMEDOUT, d->name,
                        "stage '%s' was running at the job's deadline", d->name);
  }
  if (late)
    return pl__run_fail(js->res, EBB_ETIMEDOUT, d->name,
                        "stage '%s' timed out: it ran past its timeout_s of %g s%s%s", d->name,
                        d->timeout_s, d->isolate && c->err_msg[0] ? ": " : "",
                        d->isolate ? c->err_msg : "");
  return pl__run_fail(js->res, rc, d->name, "stage '%s' (%s) %s: %s", d->name, d->stage, phase,
                      why);
}

/* The stage's estimate for this job's items (0: it declares none); off from
 * the measured peak by more than 10 %: a debug line. */
static uint64_t check_estimate(job_state *js, stage_run *sr, uint64_t peak) {
  ebb_estimate e = {.size = sizeof e};
  const ebb_stage *real = pl_registry_find(js->r->reg, sr->d->stage, NULL);
  if (!real || pl_stage_estimate(real, sr->d->isolate ? NULL : sr->opts, js->items, &e) != 0)
    return 0;
  if (sr->d->isolate) { /* the proxy's options are a spec: ask with the real stage's */
    char *o = json_dumps(json_object_get(sr->merged, "options"), JSON_COMPACT | JSON_SORT_KEYS);
    e.size = sizeof e;
    int rc = o ? pl_stage_estimate(real, o, js->items, &e) : EBB_ENOMEM;
    free(o);
    if (rc)
      return 0;
  }
  double off = peak ? ((double)e.device_bytes - (double)peak) / (double)peak : 0;
  if (off > 0.10 || off < -0.10)
    base_log(EBB_LOG_DEBUG, sr->d->name,
             "estimate %llu MiB, measured peak %llu MiB (off by %+.0f %%)", MIB(e.device_bytes),
             MIB(peak), off * 100);
  return e.device_bytes ? e.device_bytes : 1;
}

static int stage_done(job_state *js, stage_run *sr) {
  pl_runner *r = js->r;
  const pl_stage_def *d = sr->d;
  /* A stage that added nothing is not stored: it may have been skipped for
   * want of something outside the key (transcribe without EBB_WHISPER_URL),
   * and rerunning it costs nothing worth caching. */
  if (sr->use_cache && pl_items_count(sr->out) > 0 &&
      pl_cache_store(r->cache_dir, sr->key, sr->out, r->dev) != 0)
    base_log(EBB_LOG_WARN, d->name, "result not cached: %s", ebb_errmsg());
  mem_owner_stats os = {.size = sizeof os};
  mem_owner_get_stats(pl_instance_owner(sr->s->inst), &os);
  uint64_t host_peak = pl_sctx_host_peak(pl_instance_ctx(sr->s->inst));
  if (d->isolate) { /* the worker's own allocator, as it reported it */
    os.bytes.peak = pl_isolated_peak(pl_instance_stage_state(sr->s->inst));
    host_peak = pl_isolated_host_peak(pl_instance_stage_state(sr->s->inst));
  }
  /* the estimate is for the inputs the stage was given: before its outputs join */
  uint64_t est = check_estimate(js, sr, os.bytes.peak);
  pl__run_note_peak(r, js->job->pipeline->name, d->name, os.bytes.peak, host_peak, est);
  if (r->cur) {
    r->cur->peak_bytes = os.bytes.peak;
    r->cur->measured = 1;
  }
  int rc = pl_items_take(js->items, sr->out);
  if (rc)
    return pl__run_fail(js->res, rc, d->name, "stage '%s': %s", d->name, ebb_errmsg());
  js->res->stages_run++;
  base_log_field f[] = {EBB_LF_S("event", "stage_done"),
                        EBB_LF_S("stage", d->name),
                        EBB_LF_F("seconds", sr->t1 - sr->t0),
                        EBB_LF_F("load_seconds", sr->t_loaded - sr->t0),
                        EBB_LF_F("run_seconds", sr->t1 - sr->t_loaded),
                        EBB_LF_U("peak_bytes", os.bytes.peak),
                        EBB_LF_U("host_peak_bytes", host_peak),
                        EBB_LF_U("estimate_bytes", est > 1 ? est : 0)};
  base_log_ev(EBB_LOG_INFO, d->name, f, 8, "done in %.2f s, peak %llu MiB, host peak %llu MiB",
              sr->t1 - sr->t0, MIB(os.bytes.peak), MIB(host_peak));
  if (!d->isolate) /* a worker's memory is its own, not held outside ebb */
    report_outside(r, sr);
  return 0;
}

/* Load (unless kept loaded), run, and the outcome. */
static int load_and_run(job_state *js, stage_run *sr) {
  const pl_stage_def *d = sr->d;
  pl_instance *in = sr->s->inst;
  int rc = 0;
  if (!pl_instance_is_loaded(in)) {
    rc = pl_instance_load(in);
    sr->t_loaded = base_now();
    base_log(EBB_LOG_DEBUG, d->name, "load: %s in %.2f s", rc ? "failed" : "done",
             sr->t_loaded - sr->t0);
  }
  if (!rc) {
    if ((rc = pl_items_create(js->job_owner, js->items, &sr->out)) != 0)
      return pl__run_fail(js->res, rc, d->name, "stage '%s': %s", d->name, ebb_errmsg());
    rc = pl_instance_run(in, js->items, sr->out);
  }
  sr->t1 = base_now();
  pl_sctx *c = pl_instance_ctx(in);
  if (rc == 0 && c->deadline > 0 && sr->t1 >= c->deadline)
    rc = EBB_ETIMEDOUT;
  return rc ? stage_failed(js, sr, rc) : stage_done(js, sr);
}

/* One stage of a job: options, the result cache, the instance, load and run,
 * then the release the policy asks for (after_stage), in every exit path
 * once an instance exists. */
static int run_stage(job_state *js, int idx) {
  const pl_def *p = js->job->pipeline;
  stage_run sr = {.idx = idx, .d = &p->stages[idx]};
  int hit = 0;
  int rc = stage_options(js, &sr);
  if (!rc)
    rc = cache_lookup(js, &sr, &hit);
  if (!rc && !hit && !(rc = stage_instance(js, &sr))) {
    rc = load_and_run(js, &sr);
    after_stage(js, sr.s, rc != 0, next_uses_gpu(js->r, p, idx));
  }
  pl_items_destroy(sr.out);
  json_decref(sr.merged);
  free(sr.opts);
  return rc;
}

/* --- the job --------------------------------------------------------------- */
static void write_result(job_state *js) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/result.json", js->outdir);
  json_t *root = json_object(), *arr = json_array();
  json_object_set_new(root, "pipeline", json_string(js->job->pipeline->name));
  for (int i = 0; i < pl_items_count(js->items); i++) {
    const pl_item_rec *it = pl_items_rec(js->items, i);
    json_t *o = pl_item_describe(it);
    if (!o)
      continue;
    if (it->kind == EBB_ITEM_JSON) { /* the result shows the value, not its text */
      json_t *v = json_loads(it->text, JSON_DECODE_ANY, NULL);
      json_object_del(o, "text");
      json_object_set_new(o, "value", v ? v : json_string(it->text));
    }
    json_array_append_new(arr, o);
  }
  json_object_set_new(root, "items", arr);
  if (json_dump_file(root, path, JSON_INDENT(2)) != 0)
    base_log(EBB_LOG_WARN, NULL, "cannot write %s", path);
  json_decref(root);
}

/* The job's end: under after-job (and idle in a one-shot process) the
 * instances go, in pipeline order; then, under any policy but never, the
 * device is vacated when nothing is left. */
static void job_end(job_state *js) {
  pl_runner *r = js->r;
  const pl_def *p = js->job->pipeline;
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", p->name);
  uint64_t released = 0;
  if (js->policy.kind == EBB_POLICY_AFTER_JOB ||
      (js->policy.kind == EBB_POLICY_IDLE && r->oneshot)) {
    for (size_t i = 0; i < p->nstages; i++) {
      slot *s = find_slot(r, p->name, p->stages[i].name);
      if (s)
        released += pl__run_release_slot(r, s, 0, js->res, NULL);
    }
  }
  if (js->policy.kind == EBB_POLICY_SLEEP) {
    for (size_t i = 0; i < p->nstages; i++) {
      slot *s = find_slot(r, p->name, p->stages[i].name);
      if (!s || pl_instance_state_of(s->inst) != EBB_INSTANCE_LOADED)
        continue;
      s->idle_since = base_now();
      if (js->policy.idle_s > 0 && !r->oneshot)
        pl_instance_idle(s->inst); /* sleeps when pl_runner_evict_idle finds it due */
      else
        released += pl__run_sleep_slot(s);
    }
    released += pl__run_vacate_asleep(r, scope);
  }
  if (js->policy.kind != EBB_POLICY_NEVER)
    released += pl__run_vacate(r, scope);
  /* a stage kept loaded outlives the job: its cancel flag and output
   * directory are the caller's and may be freed once this returns */
  for (size_t i = 0; i < p->nstages; i++) {
    slot *s = find_slot(r, p->name, p->stages[i].name);
    if (s)
      pl_instance_bind(s->inst, NULL, NULL, 0);
  }
  js->res->released_bytes += released;
  pl_hook_run(r->hook, "after-job", p->name, released);
}

/* The entry of a stage the job starts now: the next in res, or the
 * runner's spare one past PL_JOB_STAGES (counted in stages_over). */
static pl_stage_figures *stage_figures(pl_runner *r, pl_job_result *res, const char *name) {
  pl_stage_figures *f = &r->over;
  if (res->nstages < PL_JOB_STAGES)
    f = &res->stages[res->nstages++];
  else
    res->stages_over++;
  *f = (pl_stage_figures){.released_bytes = 0};
  snprintf(f->name, sizeof f->name, "%s", name);
  return f;
}

/* The job's input is a regular file; its output directory exists (made if
 * absent) and is writable. */
static int check_paths(const pl_job *job, const char *outdir, pl_job_result *res) {
  struct stat sb;
  if (!job->input || stat(job->input, &sb) != 0)
    return pl__run_fail(res, EBB_EINPUT, NULL, "input %s: %s", job->input ? job->input : "(none)",
                        job->input ? strerror(errno) : "no input given");
  if (S_ISDIR(sb.st_mode))
    return pl__run_fail(res, EBB_EINPUT, NULL, "input %s: is a directory, expected a file",
                        job->input);
  if (!S_ISREG(sb.st_mode))
    return pl__run_fail(res, EBB_EINPUT, NULL, "input %s: not a regular file (a pipe or device?)",
                        job->input);
  if (base_mkdirs(outdir, 0755, "mkdir") != 0)
    return pl__run_fail(res, EBB_EINPUT, NULL, "output directory %s: %s", outdir, strerror(errno));
  if (stat(outdir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(outdir, W_OK) != 0)
    return pl__run_fail(res, EBB_EINPUT, NULL, "output directory %s: %s", outdir,
                        S_ISDIR(sb.st_mode) ? "not writable" : "exists and is not a directory");
  return 0;
}

int pl_runner_run(pl_runner *r, const pl_job *job, pl_job_result *res) {
  memset(res, 0, sizeof *res);
  if (!r || !job || !job->pipeline)
    return pl__run_fail(res, EBB_EINVAL, NULL, "runner: no job or pipeline");
  const pl_def *p = job->pipeline;
  job_state js = {.r = r, .job = job, .res = res};
  js.policy = job->policy ? *job->policy
                          : (p->has_policy ? p->policy : (pl_policy){EBB_POLICY_AFTER_STAGE, 0});
  js.outdir = job->output_dir ? job->output_dir : "ebb-out";
  double t0 = base_now();
  int rc = pl_runner_check(r, p);
  if (rc)
    return pl__run_fail(res, rc, NULL, "%s", ebb_errmsg());
  if ((rc = check_paths(job, js.outdir, res)) != 0)
    return rc;

  char jname[200];
  snprintf(jname, sizeof jname, "job %s", p->name);
  if ((rc = mem_owner_create(r->alloc, jname, NULL, &js.job_owner)) ||
      (mem_owner_set_kind(js.job_owner, "job"), 0) ||
      (rc = pl_items_create(js.job_owner, NULL, &js.items)) ||
      (rc = pl_items_add_file(js.items, "input", job->input))) {
    pl__run_fail(res, rc, NULL, "job: %s", ebb_errmsg());
    goto out;
  }
  for (size_t i = 0; i < p->nstages; i++) {
    if (cancelled(job)) {
      pl__run_fail(res, EBB_ECANCELED, p->stages[i].name, "job cancelled before stage '%s'",
                   p->stages[i].name);
      break;
    }
    if (job->deadline > 0 && base_now() >= job->deadline) {
      res->over_deadline = 1;
      pl__run_fail(res, EBB_ETIMEDOUT, p->stages[i].name,
                   "the job's deadline came before stage '%s'", p->stages[i].name);
      break;
    }
    if (job->progress)
      job->progress(job->progress_arg, (int)i, (int)p->nstages, p->stages[i].name, 0);
    r->cur = stage_figures(r, res, p->stages[i].name);
    rc = run_stage(&js, (int)i);
    r->cur = NULL;
    if (job->progress)
      job->progress(job->progress_arg, (int)i, (int)p->nstages, p->stages[i].name, 1);
    if (rc || res->code)
      break;
  }
  if (!res->code)
    write_result(&js);
out:
  pl_items_destroy(js.items); /* before the job's owner: device tensors */
  js.items = NULL;
  if (js.job_owner) {
    mem_leak_report *rep = NULL;
    mem_owner_destroy(js.job_owner, &rep);
    if (rep) {
      mem_leak_report_publish(rep, 0);
      mem_leak_report_free(rep);
    }
  }
  job_end(&js);
  res->seconds = base_now() - t0;
  if (!res->code) {
    base_log_field f[] = {EBB_LF_S("event", "job_done"), EBB_LF_S("pipeline", p->name),
                          EBB_LF_F("seconds", res->seconds),
                          EBB_LF_U("released_bytes", res->released_bytes)};
    base_log_ev(EBB_LOG_INFO, NULL, f, 4, "pipeline %s done in %.2f s (%d stages run, %d cached)",
                p->name, res->seconds, res->stages_run, res->stages_cached);
  }
  return res->code;
}
