#include "pipeline/runner.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "pipeline/cache.h"
#include "pipeline/hook.h"
#include "pipeline/host.h"
#include "pipeline/isolated.h"
#include "pipeline/items.h"

#define MIB(x) ((unsigned long long)((x) >> 20))

/* A stage instance: one entry of a pipeline, loaded or about to be. */
typedef struct inst {
  struct inst *next;
  char pipeline[128];
  char *opts;          /* canonical merged options (reuse key) */
  const ebb_stage *st;
  ebb_owner *owner;
  ebb_sctx ctx;
  void *state;
  int loaded;
  ebb_policy policy;
  double last_used;
  double idle_until;   /* policy idle: evictable after this */
  int running;         /* inside load/run now: never evicted */
  int quiet;           /* policy never: teardown logs at debug only */
} inst;

struct ebb_runner {
  ebb_device *dev;
  ebb_allocator *alloc;
  const ebb_registry *reg;
  char *cache_dir;
  char *hook;
  int oneshot;
  int cache_default;
  inst *pool;
};

/* --- helpers ------------------------------------------------------------------ */
static const char *mem_word(const ebb_runner *r) {
  return ebb_device_kind_of(r->dev) == EBB_DEVICE_CUDA ? "GPU memory" : "device memory (cpu)";
}

static uint64_t driver_free(ebb_runner *r) {
  ebb_dev_meminfo mi;
  if (ebb_device_mem_info(r->dev, &mi) != 0 || mi.source == EBB_MEMINFO_NONE)
    return 0;
  return mi.free_bytes;
}

static void mark(ebb_runner *r, const char *stage, const char *what) {
  char buf[200];
  snprintf(buf, sizeof buf, "%s %s", stage, what);
  ebb_ledger_mark(ebb_allocator_ledger(r->alloc), buf);
}

static int fail(ebb_job_result *res, int code, const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(ebb_job_result *res, int code, const char *stage, const char *fmt, ...) {
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

static void log_released(ebb_runner *r, const char *scope, uint64_t bytes, uint64_t free_before,
                         uint64_t free_after, uint64_t context_bytes) {
  int64_t delta = (int64_t)free_after - (int64_t)free_before;
  ebb_log_field f[] = {
      EBB_LF_S("event", "released"),         EBB_LF_S("stage", scope),
      EBB_LF_U("released_bytes", bytes),     EBB_LF_U("released_mib", bytes >> 20),
      EBB_LF_U("context_bytes", context_bytes), EBB_LF_U("driver_free_before", free_before),
      EBB_LF_U("driver_free_after", free_after), EBB_LF_I("driver_freed_bytes", delta),
  };
  if (bytes >> 20)
    ebb_log_ev(EBB_LOG_INFO, scope, f, 8, "released %llu MiB of %s", MIB(bytes), mem_word(r));
  if (free_before || free_after)
    ebb_log(EBB_LOG_DEBUG, scope,
            "driver confirms: free memory %.2f GiB -> %.2f GiB (%+lld MiB; ebb handed back "
            "%llu MiB)",
            (double)free_before / (1 << 30), (double)free_after / (1 << 30),
            (long long)(delta / (1 << 20)), MIB(bytes));
}

/* --- instances ------------------------------------------------------------- */
static void pool_unlink(ebb_runner *r, inst *in) {
  for (inst **p = &r->pool; *p; p = &(*p)->next)
    if (*p == in) {
      *p = in->next;
      return;
    }
}

/* The release sequence for one instance; frees it. *unload_err gets the
 * stage's set_error from release/unload (0 if none). with_context: when this
 * was the last loaded instance, the device context goes back too and is
 * counted in the stage's line (the runner asks for it when the next stage
 * does not use the GPU, so a process waiting on e.g. a transcription server
 * holds 0 bytes). Returns the bytes handed back to the driver. */
static uint64_t inst_release(ebb_runner *r, inst *in, int with_context, int *unload_err, char *msg,
                             size_t msgn) {
  const char *name = in->ctx.name;
  uint64_t before = driver_free(r), released = 0, raw0 = in->ctx.raw_freed;
  if (unload_err)
    *unload_err = 0;
  ebb_sctx_clear_error(&in->ctx);
  mark(r, name, "release");
  if (in->loaded && in->st->release) {
    int rc = in->st->release(&in->ctx.pub, in->state);
    if (rc)
      ebb_log(EBB_LOG_WARN, name, "the stage's release failed: %s",
              in->ctx.err_msg[0] ? in->ctx.err_msg : ebb_strerror(rc));
    ebb_sctx_clear_error(&in->ctx);
  }
  ebb_release_result rr = {.size = sizeof rr};
  ebb_release(r->alloc, EBB_RELEASE_CALLBACKS, &rr);
  released += rr.released_bytes;
  if (in->loaded) {
    in->st->unload(&in->ctx.pub, in->state);
    in->loaded = 0;
    in->state = NULL;
    if (in->ctx.err_code && unload_err) {
      *unload_err = in->ctx.err_code;
      snprintf(msg, msgn, "%s", in->ctx.err_msg);
    }
  }
  uint64_t raw_held = in->ctx.raw_bytes;
  if (raw_held)
    ebb_log(in->quiet ? EBB_LOG_DEBUG : EBB_LOG_WARN, name,
            "%llu MiB taken from the driver directly were not given back; freed by ebb",
            MIB(raw_held));
  ebb_sctx_cleanup(&in->ctx);
  released += in->ctx.raw_freed - raw0;
  ebb_leak_report *rep = NULL;
  ebb_owner_destroy(in->owner, &rep);
  in->owner = NULL;
  if (rep) {
    if (!in->quiet)
      ebb_leak_report_log(rep);
    ebb_leak_report_free(rep);
  }
  rr = (ebb_release_result){.size = sizeof rr};
  int flags = EBB_RELEASE_TRIM | EBB_RELEASE_PINNED;
  if (with_context && r->pool == in && !in->next && ebb_device_ctx_active(r->dev))
    flags |= EBB_RELEASE_CONTEXT;
  ebb_release(r->alloc, flags, &rr);
  if ((flags & EBB_RELEASE_CONTEXT) && rr.context_error)
    ebb_log(EBB_LOG_DEBUG, name, "device context kept: %s", ebb_strerror(rr.context_error));
  released += rr.released_bytes;
  uint64_t after = driver_free(r);
  if (!in->quiet)
    log_released(r, name, released, before, after, rr.context_bytes);
  pool_unlink(r, in);
  free(in->opts);
  free(in);
  return released;
}

/* Releases the context when nothing is loaded. */
static uint64_t release_context(ebb_runner *r, const char *scope) {
  if (r->pool || !ebb_device_ctx_active(r->dev))
    return 0;
  uint64_t before = driver_free(r);
  ebb_release_result rr = {.size = sizeof rr};
  ebb_release(r->alloc, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr);
  if (rr.context_error)
    ebb_log(EBB_LOG_WARN, scope, "could not release the device context: %s",
            ebb_strerror(rr.context_error));
  /* Not the per-stage line's shape: this is the job's end, not a stage. */
  uint64_t after = driver_free(r);
  ebb_log_field f[] = {
      EBB_LF_S("event", "context_released"), EBB_LF_S("scope", scope),
      EBB_LF_U("released_bytes", rr.released_bytes), EBB_LF_U("context_bytes", rr.context_bytes),
      EBB_LF_U("driver_free_before", before), EBB_LF_U("driver_free_after", after)};
  if (rr.context_released)
    ebb_log_ev(EBB_LOG_INFO, scope, f, 6,
               "idle: device context released, %llu MiB of GPU memory back to the driver; "
               "ebb holds nothing on %s",
               MIB(rr.released_bytes), ebb_device_label(r->dev));
  return rr.released_bytes;
}

static int on_oom(void *arg, ebb_sctx *who) {
  ebb_runner *r = arg;
  int freed = 0;
  for (inst *in = r->pool, *next; in; in = next) {
    next = in->next;
    if (in->policy.kind == EBB_POLICY_IDLE && !in->running && &in->ctx != who) {
      ebb_log(EBB_LOG_INFO, in->ctx.name, "evicted: %s needs the memory", who->name);
      inst_release(r, in, 0, NULL, NULL, 0);
      freed = 1;
    }
  }
  return freed;
}

/* --- runner ------------------------------------------------------------------ */
int ebb_runner_create(const ebb_runner_opts *o, ebb_runner **out) {
  if (!o || !o->dev || !o->alloc || !o->reg)
    return ebb_seterr(EBB_EINVAL, "runner: device, allocator and registry are required");
  ebb_runner *r = calloc(1, sizeof *r);
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "runner: out of host memory");
  r->dev = o->dev;
  r->alloc = o->alloc;
  r->reg = o->reg;
  r->oneshot = o->oneshot;
  r->cache_default = o->cache_default;
  const char *hook = o->hook ? o->hook : getenv("EBB_STAGE_HOOK");
  if ((o->cache_dir && !(r->cache_dir = strdup(o->cache_dir))) ||
      (hook && *hook && !(r->hook = strdup(hook)))) {
    ebb_runner_destroy(r);
    return ebb_seterr(EBB_ENOMEM, "runner: out of host memory");
  }
  *out = r;
  return 0;
}

void ebb_runner_destroy(ebb_runner *r) {
  if (!r)
    return;
  while (r->pool)
    inst_release(r, r->pool, 0, NULL, NULL, 0);
  free(r->cache_dir);
  free(r->hook);
  free(r);
}

int ebb_runner_loaded(const ebb_runner *r) {
  int n = 0;
  for (inst *in = r ? r->pool : NULL; in; in = in->next)
    n += in->loaded;
  return n;
}

int ebb_runner_evict_idle(ebb_runner *r, double now, uint64_t *released) {
  uint64_t total = 0;
  for (inst *in = r->pool, *next; in; in = next) {
    next = in->next;
    if (in->policy.kind == EBB_POLICY_IDLE && !in->running && (now < 0 || now >= in->idle_until))
      total += inst_release(r, in, 0, NULL, NULL, 0);
  }
  if (!r->pool)
    total += release_context(r, "runner");
  if (released)
    *released = total;
  return 0;
}

/* --- checking ------------------------------------------------------------ */
static int check_stage(const ebb_registry *reg, const ebb_pipeline_def *p,
                       const ebb_stage_def *d, const ebb_stage **st, json_t **merged) {
  char where[768];
  snprintf(where, sizeof where, "%s: pipeline '%s' stage '%s'", p->origin, p->name, d->name);
  const char *origin = NULL;
  *st = d->worker ? NULL : ebb_registry_find(reg, d->stage, &origin);
  if (!*st && !d->worker)
    return ebb_seterr(EBB_ENOTFOUND,
                      "%s: unknown stage '%s' (not built in and not in any plugin; see `ebb "
                      "stages`)",
                      where, d->stage);
  int rc = d->worker ? 0 : ebb_stage_validate_options(*st, d->options, where, merged);
  if (rc || !d->isolate)
    return rc;
  /* isolated (src/pipeline/isolated.h): the proxy stage runs it in a worker;
   * its options are the spec (stage, options, worker); a "worker" entry's
   * options are the worker's to check */
  json_t *spec = ebb_isolated_spec(d, *st, *merged);
  json_decref(*merged);
  *merged = spec;
  *st = ebb_isolated_stage();
  if (spec && origin && strcmp(origin, "built-in")) /* the worker loads the same plugin */
    json_object_set_new(spec, "plugin", json_string(origin));
  return spec ? 0 : ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
}

int ebb_runner_check(const ebb_runner *r, const ebb_pipeline_def *p) {
  return ebb_pipeline_check(r->reg, p);
}

int ebb_pipeline_check(const ebb_registry *reg, const ebb_pipeline_def *p) {
  for (size_t i = 0; i < p->nstages; i++) {
    const ebb_stage *st;
    json_t *m = NULL;
    int rc = check_stage(reg, p, &p->stages[i], &st, &m);
    json_decref(m);
    if (rc)
      return rc;
  }
  return 0;
}

/* --- one stage ------------------------------------------------------------- */
typedef struct job_state {
  ebb_runner *r;
  const ebb_job *job;
  ebb_job_result *res;
  ebb_policy policy;
  const char *outdir;
  ebb_owner *job_owner;
  ebb_items *items;
} job_state;

static inst *find_inst(ebb_runner *r, const char *pipeline, const char *name) {
  for (inst *in = r->pool; in; in = in->next)
    if (!strcmp(in->pipeline, pipeline) && !strcmp(in->ctx.name, name))
      return in;
  return NULL;
}

static int64_t outside_now(ebb_runner *r, int *known) {
  ebb_unattributed u = {.size = sizeof u};
  /* On the CPU device the "driver" figure is the whole host's memory: no use
   * for attributing; what ebb handed out through raw_driver_alloc is used. */
  if (ebb_device_kind_of(r->dev) != EBB_DEVICE_CUDA ||
      ebb_allocator_unattributed(r->alloc, &u) != 0 || !u.known) {
    *known = 0;
    return 0;
  }
  *known = 1;
  return u.unattributed;
}

static void report_outside(ebb_runner *r, inst *in, int64_t base, int base_known) {
  int known;
  int64_t now = outside_now(r, &known);
  int64_t outside = known && base_known ? now - base : (int64_t)in->ctx.raw_bytes;
  if (outside < (1 << 20))
    return;
  ebb_log_field f[] = {EBB_LF_S("event", "outside"), EBB_LF_S("stage", in->ctx.name),
                       EBB_LF_I("outside_bytes", outside),
                       EBB_LF_S("measured_by", known && base_known ? "driver" : "ebb")};
  ebb_log_ev(EBB_LOG_WARN, in->ctx.name, f, 4,
             "%llu MiB held outside ebb (taken from the driver directly)",
             MIB((uint64_t)outside));
}

static int cancelled(const ebb_job *job) { return job->cancel && atomic_load(job->cancel); }

/* After a stage: the before-release hook, the release per policy, the
 * after-stage hook. */
static void after_stage(job_state *js, inst *in, int failed, int next_uses_gpu) {
  ebb_runner *r = js->r;
  char name[128];
  snprintf(name, sizeof name, "%s", in->ctx.name);
  ebb_hook_run(r->hook, "before-release", name, 0);
  uint64_t released = 0;
  int release_now = js->policy.kind == EBB_POLICY_AFTER_STAGE ||
                    (failed && js->policy.kind != EBB_POLICY_NEVER);
  in->running = 0;
  in->last_used = ebb_now();
  in->idle_until = in->last_used + (in->policy.kind == EBB_POLICY_IDLE ? in->policy.idle_s : 0);
  if (release_now) {
    int uerr;
    char umsg[1024] = "";
    released = inst_release(r, in, !failed && !next_uses_gpu, &uerr, umsg, sizeof umsg);
    js->res->released_bytes += released;
    if (uerr)
      fail(js->res, uerr, name, "stage '%s' failed to unload: %s", name, umsg);
  }
  ebb_hook_run(r->hook, "after-stage", name, released);
}

/* Whether the stage after idx may use the GPU (unknown stages count as yes;
 * the last stage's "next" is the job's end, which releases anyway). */
static int next_uses_gpu(const ebb_runner *r, const ebb_pipeline_def *p, int idx) {
  if ((size_t)idx + 1 >= p->nstages)
    return 1;
  if (p->stages[idx + 1].isolate) /* its worker has a context of its own */
    return 0;
  const ebb_stage *next = ebb_registry_find(r->reg, p->stages[idx + 1].stage, NULL);
  return !next || next->needs_gpu;
}

static int run_stage(job_state *js, int idx) {
  ebb_runner *r = js->r;
  const ebb_pipeline_def *p = js->job->pipeline;
  const ebb_stage_def *d = &p->stages[idx];
  ebb_job_result *res = js->res;
  const ebb_stage *st;
  json_t *merged = NULL;
  int rc = check_stage(r->reg, p, d, &st, &merged);
  if (rc)
    return fail(res, rc, d->name, "%s", ebb_errmsg());
  char *opts = json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
  ebb_items *out = NULL;
  inst *in = NULL;
  if (!opts) {
    rc = fail(res, EBB_ENOMEM, d->name, "stage '%s': out of host memory", d->name);
    goto done;
  }

  /* the result cache */
  uint8_t key[32];
  int use_cache = r->cache_dir && (d->cache > 0 || (d->cache < 0 && r->cache_default)) &&
                  !d->worker; /* a worker has no version */
  if (use_cache && ebb_cache_key(st, merged, js->items, key) != 0) {
    ebb_log(EBB_LOG_DEBUG, d->name, "not cacheable: %s", ebb_errmsg());
    use_cache = 0;
  }
  if (use_cache) {
    int hit = 0, corrupt = 0;
    rc = ebb_cache_load(r->cache_dir, key, js->items, js->outdir, &hit, &corrupt);
    if (corrupt)
      ebb_log(EBB_LOG_WARN, d->name, "%s; recomputing", ebb_errmsg());
    if (rc) {
      rc = fail(res, rc, d->name, "stage '%s': reading its cached result: %s", d->name,
                ebb_errmsg());
      goto done;
    }
    if (hit) {
      ebb_log_field f[] = {EBB_LF_S("event", "cached"), EBB_LF_S("stage", d->name)};
      ebb_log_ev(EBB_LOG_INFO, d->name, f, 2, "cached");
      res->stages_cached++;
      goto done;
    }
  }

  /* an instance: reuse one kept loaded by the policy, else load */
  in = find_inst(r, p->name, d->name);
  if (in && (in->st != st || strcmp(in->opts, opts) != 0)) {
    js->res->released_bytes += inst_release(r, in, 0, NULL, NULL, 0);
    in = NULL;
  }
  double t0 = ebb_now(), t_loaded = t0;
  int base_known = 0;
  int64_t base = ebb_device_ctx_active(r->dev) ? outside_now(r, &base_known) : 0;
  if (!ebb_device_ctx_active(r->dev))
    base_known = 1; /* no context: nothing is held, the baseline is 0 */
  if (!in) {
    in = calloc(1, sizeof *in);
    if (!in || !(in->opts = strdup(opts))) {
      free(in);
      in = NULL;
      rc = fail(res, EBB_ENOMEM, d->name, "stage '%s': out of host memory", d->name);
      goto done;
    }
    snprintf(in->pipeline, sizeof in->pipeline, "%s", p->name);
    in->st = st;
    in->policy = js->policy;
    in->quiet = js->policy.kind == EBB_POLICY_NEVER;
    if ((rc = ebb_owner_create(r->alloc, d->name, NULL, &in->owner)) != 0) {
      free(in->opts);
      free(in);
      in = NULL;
      rc = fail(res, rc, d->name, "stage '%s': %s", d->name, ebb_errmsg());
      goto done;
    }
    ebb_sctx_init(&in->ctx, r->dev, in->owner, d->name, js->outdir);
    in->ctx.on_oom = on_oom;
    in->ctx.on_oom_arg = r;
    in->next = r->pool;
    r->pool = in;
  }
  in->running = 1;
  in->policy = js->policy;
  in->quiet = js->policy.kind == EBB_POLICY_NEVER;
  in->ctx.cancel = js->job->cancel;
  in->ctx.output_dir = js->outdir; /* a kept instance writes where this job writes */
  in->ctx.deadline = d->timeout_s > 0 ? t0 + d->timeout_s : 0;
  atomic_store(&in->ctx.timed_out, 0);
  ebb_sctx_clear_error(&in->ctx);

  if (!in->loaded) {
    mark(r, d->name, "load");
    ebb_clearerr();
    rc = st->load(&in->ctx.pub, opts, &in->state);
    t_loaded = ebb_now();
    if (rc == 0)
      in->loaded = 1;
    ebb_log(EBB_LOG_DEBUG, d->name, "load: %s in %.2f s", rc ? "failed" : "done", t_loaded - t0);
  }
  if (!rc) {
    if ((rc = ebb_items_create(js->job_owner, js->items, &out)) != 0) {
      rc = fail(res, rc, d->name, "stage '%s': %s", d->name, ebb_errmsg());
      goto release;
    }
    mark(r, d->name, "run");
    ebb_sctx_clear_error(&in->ctx);
    ebb_clearerr();
    rc = st->run(&in->ctx.pub, in->state, js->items, out);
  }
  double t1 = ebb_now();
  const char *phase = in->loaded ? "failed" : "failed to load";
  if (rc == 0 && in->ctx.deadline > 0 && t1 >= in->ctx.deadline)
    rc = EBB_ETIMEDOUT;
  if (rc) {
    const char *why = in->ctx.err_msg[0] ? in->ctx.err_msg : ebb_errmsg();
    if (cancelled(js->job))
      rc = fail(res, EBB_ECANCELED, d->name, "stage '%s' was cancelled (job cancelled)", d->name);
    else if (atomic_load(&in->ctx.timed_out) || (in->ctx.deadline > 0 && t1 >= in->ctx.deadline))
      rc = fail(res, EBB_ETIMEDOUT, d->name,
                "stage '%s' timed out: it ran past its timeout_s of %g s%s%s", d->name,
                d->timeout_s, d->isolate && in->ctx.err_msg[0] ? ": " : "",
                d->isolate ? in->ctx.err_msg : "");
    else
      rc = fail(res, rc, d->name, "stage '%s' (%s) %s: %s", d->name, d->stage, phase, why);
    goto release;
  }
  /* A stage that added nothing is not stored: it may have been skipped for
   * want of something outside the key (transcribe without EBB_WHISPER_URL),
   * and rerunning it costs nothing worth caching. */
  if (use_cache && ebb_items_count(out) > 0 &&
      ebb_cache_store(r->cache_dir, key, out, r->dev) != 0)
    ebb_log(EBB_LOG_WARN, d->name, "result not cached: %s", ebb_errmsg());
  if ((rc = ebb_items_take(js->items, out)) != 0) {
    rc = fail(res, rc, d->name, "stage '%s': %s", d->name, ebb_errmsg());
    goto release;
  }
  res->stages_run++;
  ebb_owner_stats os = {.size = sizeof os};
  ebb_owner_get_stats(in->owner, &os);
  if (d->isolate) /* the worker's own allocator, as it reported it */
    os.bytes.peak = ebb_isolated_peak(in->state);
  ebb_log_field f[] = {EBB_LF_S("event", "stage_done"), EBB_LF_S("stage", d->name),
                       EBB_LF_F("seconds", t1 - t0), EBB_LF_F("load_seconds", t_loaded - t0),
                       EBB_LF_F("run_seconds", t1 - t_loaded),
                       EBB_LF_U("peak_bytes", os.bytes.peak)};
  ebb_log_ev(EBB_LOG_INFO, d->name, f, 6, "done in %.2f s, peak %llu MiB", t1 - t0,
             MIB(os.bytes.peak));
  if (!d->isolate) /* a worker's memory is its own, not held outside ebb */
    report_outside(r, in, base, base_known);
release:
  if (in)
    after_stage(js, in, rc != 0, next_uses_gpu(r, p, idx));
done:
  ebb_items_destroy(out);
  json_decref(merged);
  free(opts);
  return rc;
}

/* --- the job --------------------------------------------------------------- */
static int mkdir_p(const char *dir) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *q = tmp + 1; *q; q++)
    if (*q == '/') {
      *q = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
      *q = '/';
    }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void write_result(job_state *js) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/result.json", js->outdir);
  json_t *root = json_object(), *arr = json_array();
  json_object_set_new(root, "pipeline", json_string(js->job->pipeline->name));
  for (int i = 0; i < ebb_items_count(js->items); i++) {
    const ebb_item_rec *it = ebb_items_rec(js->items, i);
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(it->name));
    switch (it->kind) {
    case EBB_ITEM_AUDIO:
      json_object_set_new(o, "kind", json_string("audio"));
      json_object_set_new(o, "frames", json_integer((json_int_t)it->frames));
      json_object_set_new(o, "channels", json_integer(it->channels));
      json_object_set_new(o, "rate", json_integer(it->rate));
      break;
    case EBB_ITEM_TENSOR: {
      json_t *shape = json_array();
      for (uint32_t d = 0; d < it->ndim; d++)
        json_array_append_new(shape, json_integer((json_int_t)it->shape[d]));
      json_object_set_new(o, "kind", json_string("tensor"));
      json_object_set_new(o, "shape", shape);
      break;
    }
    case EBB_ITEM_JSON: {
      json_t *v = json_loads(it->text, JSON_DECODE_ANY, NULL);
      json_object_set_new(o, "kind", json_string("json"));
      json_object_set_new(o, "value", v ? v : json_string(it->text));
      break;
    }
    case EBB_ITEM_FILE:
      json_object_set_new(o, "kind", json_string("file"));
      json_object_set_new(o, "path", json_string(it->text));
      break;
    }
    json_array_append_new(arr, o);
  }
  json_object_set_new(root, "items", arr);
  if (json_dump_file(root, path, JSON_INDENT(2)) != 0)
    ebb_log(EBB_LOG_WARN, NULL, "cannot write %s", path);
  json_decref(root);
}

static void job_end(job_state *js) {
  ebb_runner *r = js->r;
  const char *pname = js->job->pipeline->name;
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", pname);
  uint64_t released = 0;
  if (js->policy.kind == EBB_POLICY_AFTER_JOB ||
      (js->policy.kind == EBB_POLICY_IDLE && r->oneshot)) {
    /* in pipeline order */
    for (size_t i = 0; i < js->job->pipeline->nstages; i++) {
      inst *in = find_inst(r, pname, js->job->pipeline->stages[i].name);
      if (!in)
        continue;
      int uerr;
      char umsg[1024] = "";
      char name[128];
      snprintf(name, sizeof name, "%s", in->ctx.name);
      released += inst_release(r, in, 0, &uerr, umsg, sizeof umsg);
      if (uerr)
        fail(js->res, uerr, name, "stage '%s' failed to unload: %s", name, umsg);
    }
  }
  if (js->policy.kind != EBB_POLICY_NEVER)
    released += release_context(r, scope);
  js->res->released_bytes += released;
  ebb_hook_run(r->hook, "after-job", pname, released);
}

int ebb_runner_run(ebb_runner *r, const ebb_job *job, ebb_job_result *res) {
  memset(res, 0, sizeof *res);
  if (!r || !job || !job->pipeline)
    return fail(res, EBB_EINVAL, NULL, "runner: no job or pipeline");
  const ebb_pipeline_def *p = job->pipeline;
  job_state js = {.r = r, .job = job, .res = res};
  js.policy = job->policy ? *job->policy
                          : (p->has_policy ? p->policy : (ebb_policy){EBB_POLICY_AFTER_STAGE, 0});
  js.outdir = job->output_dir ? job->output_dir : "ebb-out";
  double t0 = ebb_now();
  int rc = ebb_runner_check(r, p);
  if (rc)
    return fail(res, rc, NULL, "%s", ebb_errmsg());
  struct stat sb;
  if (!job->input || stat(job->input, &sb) != 0)
    return fail(res, EBB_EINPUT, NULL, "input %s: %s", job->input ? job->input : "(none)",
                job->input ? strerror(errno) : "no input given");
  if (S_ISDIR(sb.st_mode))
    return fail(res, EBB_EINPUT, NULL, "input %s: is a directory, expected a file", job->input);
  if (!S_ISREG(sb.st_mode))
    return fail(res, EBB_EINPUT, NULL, "input %s: not a regular file (a pipe or device?)",
                job->input);
  if (mkdir_p(js.outdir) != 0)
    return fail(res, EBB_EINPUT, NULL, "output directory %s: %s", js.outdir, strerror(errno));
  if (stat(js.outdir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(js.outdir, W_OK) != 0)
    return fail(res, EBB_EINPUT, NULL, "output directory %s: %s", js.outdir,
                S_ISDIR(sb.st_mode) ? "not writable" : "exists and is not a directory");

  char jname[200];
  snprintf(jname, sizeof jname, "job %s", p->name);
  if ((rc = ebb_owner_create(r->alloc, jname, NULL, &js.job_owner)) ||
      (ebb_owner_set_kind(js.job_owner, "job"), 0) ||
      (rc = ebb_items_create(js.job_owner, NULL, &js.items)) ||
      (rc = ebb_items_add_file(js.items, "input", job->input))) {
    fail(res, rc, NULL, "job: %s", ebb_errmsg());
    goto out;
  }
  for (size_t i = 0; i < p->nstages; i++) {
    if (cancelled(job)) {
      fail(res, EBB_ECANCELED, p->stages[i].name, "job cancelled before stage '%s'",
           p->stages[i].name);
      break;
    }
    if (job->progress)
      job->progress(job->progress_arg, (int)i, (int)p->nstages, p->stages[i].name, 0);
    rc = run_stage(&js, (int)i);
    if (job->progress)
      job->progress(job->progress_arg, (int)i, (int)p->nstages, p->stages[i].name, 1);
    if (rc || res->code)
      break;
  }
  if (!res->code)
    write_result(&js);
out:
  ebb_items_destroy(js.items); /* before the job's owner: device tensors */
  js.items = NULL;
  if (js.job_owner) {
    ebb_leak_report *rep = NULL;
    ebb_owner_destroy(js.job_owner, &rep);
    if (rep) {
      ebb_leak_report_log(rep);
      ebb_leak_report_free(rep);
    }
  }
  job_end(&js);
  res->seconds = ebb_now() - t0;
  if (!res->code) {
    ebb_log_field f[] = {EBB_LF_S("event", "job_done"), EBB_LF_S("pipeline", p->name),
                         EBB_LF_F("seconds", res->seconds),
                         EBB_LF_U("released_bytes", res->released_bytes)};
    ebb_log_ev(EBB_LOG_INFO, NULL, f, 4, "pipeline %s done in %.2f s (%d stages run, %d cached)",
               p->name, res->seconds, res->stages_run, res->stages_cached);
  }
  return res->code;
}

/* --- pipelines kept loaded (for the manager, src/pipeline/manager.c) --------- */
int ebb_runner_load_pipeline(ebb_runner *r, const ebb_pipeline_def *p, const char *outdir,
                             ebb_job_result *res) {
  memset(res, 0, sizeof *res);
  if (!r || !p || !outdir)
    return fail(res, EBB_EINVAL, NULL, "runner: no pipeline or output directory to load");
  int rc = ebb_runner_check(r, p);
  if (rc)
    return fail(res, rc, NULL, "%s", ebb_errmsg());
  if (mkdir_p(outdir) != 0)
    return fail(res, EBB_EINPUT, NULL, "output directory %s: %s", outdir, strerror(errno));
  for (size_t i = 0; i < p->nstages && !rc; i++) {
    const ebb_stage_def *d = &p->stages[i];
    const ebb_stage *st;
    json_t *merged = NULL;
    if ((rc = check_stage(r->reg, p, d, &st, &merged)) != 0) {
      fail(res, rc, d->name, "%s", ebb_errmsg());
      break;
    }
    char *opts = json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(merged);
    if (!opts) {
      rc = fail(res, EBB_ENOMEM, d->name, "stage '%s': out of host memory", d->name);
      break;
    }
    inst *in = find_inst(r, p->name, d->name);
    if (in && (in->st != st || strcmp(in->opts, opts) != 0)) {
      res->released_bytes += inst_release(r, in, 0, NULL, NULL, 0);
      in = NULL;
    }
    if (!in) {
      in = calloc(1, sizeof *in);
      if (!in || !(in->opts = strdup(opts)) ||
          (rc = ebb_owner_create(r->alloc, d->name, NULL, &in->owner)) != 0) {
        if (in)
          free(in->opts);
        free(in);
        free(opts);
        rc = fail(res, rc ? rc : EBB_ENOMEM, d->name, "stage '%s': %s", d->name,
                  rc ? ebb_errmsg() : "out of host memory");
        break;
      }
      snprintf(in->pipeline, sizeof in->pipeline, "%s", p->name);
      in->st = st;
      ebb_sctx_init(&in->ctx, r->dev, in->owner, d->name, outdir);
      in->ctx.on_oom = on_oom;
      in->ctx.on_oom_arg = r;
      in->next = r->pool;
      r->pool = in;
    }
    free(opts);
    in->policy = (ebb_policy){EBB_POLICY_NEVER, 0};
    in->quiet = 0;
    if (in->loaded)
      continue;
    in->running = 1;
    ebb_sctx_clear_error(&in->ctx);
    mark(r, d->name, "load");
    ebb_clearerr();
    rc = st->load(&in->ctx.pub, in->opts, &in->state);
    in->running = 0;
    in->last_used = ebb_now();
    if (rc == 0) {
      in->loaded = 1;
    } else {
      const char *why = in->ctx.err_msg[0] ? in->ctx.err_msg : ebb_errmsg();
      fail(res, rc, d->name, "stage '%s' (%s) failed to load: %s", d->name, d->stage, why);
    }
  }
  return res->code;
}

int ebb_runner_unload_pipeline(ebb_runner *r, const char *pipeline, int with_context,
                               uint64_t *released) {
  uint64_t total = 0;
  int err = 0;
  /* the pool is newest first: release from the tail so stages go in load order */
  for (;;) {
    inst *last = NULL;
    for (inst *in = r->pool; in; in = in->next)
      if (!strcmp(in->pipeline, pipeline))
        last = in;
    if (!last)
      break;
    int uerr;
    char umsg[1024] = "";
    last->quiet = 0; /* leaks are reported whatever the policy was */
    total += inst_release(r, last, 0, &uerr, umsg, sizeof umsg);
    if (uerr && !err)
      err = ebb_seterr(uerr, "pipeline '%s': a stage failed to unload: %s", pipeline, umsg);
  }
  if (with_context && !r->pool) {
    char scope[160];
    snprintf(scope, sizeof scope, "pipeline %s", pipeline);
    total += release_context(r, scope);
  }
  if (released)
    *released = total;
  return err;
}

int ebb_runner_pipeline_bytes(ebb_runner *r, const char *pipeline, uint64_t *current,
                              uint64_t *peak) {
  uint64_t cur = 0, pk = 0;
  int n = 0;
  for (inst *in = r->pool; in; in = in->next) {
    if (strcmp(in->pipeline, pipeline) || !in->owner)
      continue;
    ebb_owner_stats os = {.size = sizeof os};
    if (ebb_owner_get_stats(in->owner, &os) == 0) {
      cur += os.tree_bytes;
      pk += os.bytes.peak;
    }
    n += in->loaded;
  }
  if (current)
    *current = cur;
  if (peak)
    *peak = pk;
  return n;
}
