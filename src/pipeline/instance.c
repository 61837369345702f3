/* A stage instance and its release (instance.h). Read pl_instance_release
 * from top to bottom: it is the whole of what "released" means. */
#include "pipeline/instance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/events.h"
#include "base/log.h"
#include "pipeline/isolated.h"

#define MIB(x) ((unsigned long long)((x) >> 20))

struct pl_instance {
  pl_instance_state state; /* changed only by pl_instance_enter */
  int loaded;              /* the stage's load succeeded and its unload has not run */
  dev_device *dev;         /* borrowed */
  mem_allocator *alloc;    /* borrowed */
  const ebb_stage *st;     /* borrowed */
  char pipeline[128];
  char *opts;         /* canonical merged options (load's argument, reuse key) */
  ebb_owner *owner;   /* the stage's device memory; destroyed by the release */
  pl_sctx ctx;        /* what the stage sees; ctx.name is the instance name */
  void *stage_state;  /* the stage's loaded state (its load's *state) */
  int worker_stopped; /* isolated and asleep: its worker exited (no stage state) */
};

/* --- states ------------------------------------------------------------------ */
const char *pl_instance_state_name(pl_instance_state s) {
  static const char *const names[] = {
#define EBB_X_(s, name) name,
      EBB_INSTANCE_STATES(EBB_X_)
#undef EBB_X_
  };
  return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

/* allowed[from][to]: the diagram in instance.h. */
#define N_ (EBB_INSTANCE_RELEASED + 1)
static const unsigned char allowed[N_][N_] = {
    [EBB_INSTANCE_NEW] = {[EBB_INSTANCE_RUNNING] = 1, [EBB_INSTANCE_RELEASED] = 1},
    [EBB_INSTANCE_RUNNING] = {[EBB_INSTANCE_NEW] = 1, [EBB_INSTANCE_LOADED] = 1},
    [EBB_INSTANCE_LOADED] = {[EBB_INSTANCE_RUNNING] = 1,
                             [EBB_INSTANCE_IDLE] = 1,
                             [EBB_INSTANCE_PARKED] = 1,
                             [EBB_INSTANCE_RELEASED] = 1},
    [EBB_INSTANCE_IDLE] = {[EBB_INSTANCE_LOADED] = 1,
                           [EBB_INSTANCE_RUNNING] = 1,
                           [EBB_INSTANCE_PARKED] = 1,
                           [EBB_INSTANCE_RELEASED] = 1},
    [EBB_INSTANCE_PARKED] = {[EBB_INSTANCE_LOADED] = 1, [EBB_INSTANCE_RELEASED] = 1},
};

/* What to do instead, by the state that refuses. */
static const char *hint(pl_instance_state from, pl_instance_state to) {
  switch (from) {
  case EBB_INSTANCE_NEW: return "it is not loaded; load it first";
  case EBB_INSTANCE_RUNNING: return "it is inside its load or run; wait until that returns";
  case EBB_INSTANCE_PARKED: return "its memory is parked; wake it first";
  case EBB_INSTANCE_RELEASED: return "a released instance is finished; create another";
  default: break;
  }
  return to == EBB_INSTANCE_NEW ? "an instance is new only until it loads"
                                : "that change is not one of an instance's";
}

static int refuse(const pl_instance *in, pl_instance_state to) {
  return ebb_seterr(EBB_ESTATE, "stage '%s' of pipeline '%s': cannot go from %s to %s: %s",
                    in->ctx.name, in->pipeline, pl_instance_state_name(in->state),
                    pl_instance_state_name(to), hint(in->state, to));
}

int pl_instance_enter(pl_instance *in, pl_instance_state to) {
  if (!in)
    return ebb_seterr(EBB_EINVAL, "stage instance: none given");
  if ((unsigned)to >= N_ || !allowed[in->state][to])
    return refuse(in, to);
  in->state = to;
  return 0;
}

/* --- create / destroy ------------------------------------------------------------ */
int pl_instance_create(const pl_instance_spec *s, pl_instance **out) {
  if (!s || !s->dev || !s->alloc || !s->stage || !s->name || !s->pipeline || !out)
    return ebb_seterr(EBB_EINVAL, "stage instance: device, allocator, stage, pipeline and name "
                                  "are required");
  pl_instance *in = calloc(1, sizeof *in);
  if (!in || !(in->opts = strdup(s->options ? s->options : "{}"))) {
    free(in);
    return ebb_seterr(EBB_ENOMEM, "stage '%s': out of host memory", s->name);
  }
  int rc = mem_owner_create(s->alloc, s->name, NULL, &in->owner);
  if (rc) {
    free(in->opts);
    free(in);
    return ebb_errctx(rc, "stage '%s': ", s->name);
  }
  in->state = EBB_INSTANCE_NEW;
  in->dev = s->dev;
  in->alloc = s->alloc;
  in->st = s->stage;
  snprintf(in->pipeline, sizeof in->pipeline, "%s", s->pipeline);
  pl_sctx_init(&in->ctx, s->dev, in->owner, s->name, s->output_dir);
  in->ctx.scratch_dir = s->scratch_dir;
  in->ctx.on_oom = s->on_oom;
  in->ctx.on_oom_arg = s->on_oom_arg;
  *out = in;
  return 0;
}

void pl_instance_destroy(pl_instance *in) {
  if (!in)
    return;
  if (in->state == EBB_INSTANCE_RUNNING) /* a caller's bug; the memory still goes */
    in->state = in->loaded ? EBB_INSTANCE_LOADED : EBB_INSTANCE_NEW;
  if (in->state != EBB_INSTANCE_RELEASED)
    pl_instance_release(in, &(pl_instance_plan){.quiet = 1}, NULL);
  free(in->opts);
  free(in);
}

/* --- load, run, idle ---------------------------------------------------------- */
static void mark(pl_instance *in, const char *what) {
  char buf[200];
  snprintf(buf, sizeof buf, "%s %s", in->ctx.name, what);
  mem_ledger_mark(mem_allocator_ledger(in->alloc), buf);
}

int pl_instance_load(pl_instance *in) {
  if (in->state != EBB_INSTANCE_NEW)
    return ebb_seterr(EBB_ESTATE, "stage '%s' of pipeline '%s': cannot load: it is %s, not new",
                      in->ctx.name, in->pipeline, pl_instance_state_name(in->state));
  pl_instance_enter(in, EBB_INSTANCE_RUNNING);
  pl_sctx_clear_error(&in->ctx);
  mark(in, "load");
  ebb_clearerr();
  mem_owner_mark_weights(in->owner, 1); /* what load allocates is the weights (sleep) */
  int rc = in->st->load(&in->ctx.pub, in->opts, &in->stage_state);
  mem_owner_mark_weights(in->owner, 0);
  in->loaded = rc == 0;
  if (rc)
    in->stage_state = NULL;
  pl_instance_enter(in, rc ? EBB_INSTANCE_NEW : EBB_INSTANCE_LOADED);
  return rc;
}

int pl_instance_run(pl_instance *in, const ebb_items *inputs, ebb_items *outputs) {
  if (in->state != EBB_INSTANCE_LOADED && in->state != EBB_INSTANCE_IDLE)
    return refuse(in, EBB_INSTANCE_RUNNING); /* (new -> running is a load's) */
  pl_instance_enter(in, EBB_INSTANCE_RUNNING);
  mark(in, "run");
  pl_sctx_clear_error(&in->ctx);
  ebb_clearerr();
  int rc = in->st->run(&in->ctx.pub, in->stage_state, inputs, outputs);
  pl_instance_enter(in, EBB_INSTANCE_LOADED);
  return rc;
}

int pl_instance_idle(pl_instance *in) { return pl_instance_enter(in, EBB_INSTANCE_IDLE); }

void pl_instance_bind(pl_instance *in, const atomic_int *cancel, const char *output_dir,
                      double deadline) {
  in->ctx.cancel = cancel;
  in->ctx.output_dir = output_dir;
  in->ctx.deadline = deadline;
  atomic_store(&in->ctx.timed_out, 0);
  pl_sctx_clear_error(&in->ctx);
}

/* --- release: the steps, in the order pl_instance_release takes them ----------- */
static const char *mem_word(const pl_instance *in) {
  return dev_kind_of(in->dev) == EBB_DEVICE_CUDA ? "GPU memory" : "device memory (cpu)";
}

/* 1. drop: the stage's own release, then the callbacks this instance
 * registered (its owner's in the release registry): never a neighbour's,
 * never the process-wide ones (those are the runner's, released on a line of
 * their own: runner.c pl__run_vacate). */
static void drop(pl_instance *in, pl_instance_report *rep) {
  /* asleep: its caches went when it fell asleep, and its memory is parked */
  if (in->loaded && in->st->release && in->state != EBB_INSTANCE_PARKED) {
    rep->drop_error = in->st->release(&in->ctx.pub, in->stage_state);
    if (rep->drop_error)
      base_log(EBB_LOG_WARN, in->ctx.name, "the stage's release failed: %s",
               in->ctx.err_msg[0] ? in->ctx.err_msg : ebb_strerror(rep->drop_error));
    pl_sctx_clear_error(&in->ctx);
  }
  mem_release_callbacks_of(in->owner, &rep->callbacks_run, &rep->callbacks_failed);
}

/* 2. unload: the stage frees its loaded state. */
static void unload(pl_instance *in, pl_instance_report *rep) {
  if (!in->loaded)
    return;
  if (!in->worker_stopped) /* an isolated sleeper's worker is gone already */
    in->st->unload(&in->ctx.pub, in->stage_state);
  in->worker_stopped = 0;
  in->loaded = 0;
  in->stage_state = NULL;
  if (in->ctx.err_code) {
    rep->unload_error = in->ctx.err_code;
    snprintf(rep->unload_message, sizeof rep->unload_message, "%s", in->ctx.err_msg);
  }
}

/* 3. what the stage left outside its owner. raw_freed counts every raw
 * segment given back (by the stage during unload, by ebb here, by a worker's
 * exit: isolated.h), so the bytes are taken as a difference from raw0. */
static void cleanup_context(pl_instance *in, const pl_instance_plan *plan, uint64_t raw0,
                            pl_instance_report *rep) {
  rep->unattributed_bytes = in->ctx.raw_bytes;
  if (rep->unattributed_bytes) {
    ebb_event ev = {.kind = EBB_EVENT_LEAK,
                    .flags = plan->quiet ? EBB_EVENT_QUIET : 0,
                    .device = dev_device_label(in->dev),
                    .owner = in->ctx.name,
                    .bytes = rep->unattributed_bytes,
                    .outside = 1};
    base_event_publish(&ev);
  }
  rep->leaked_host_bytes = pl_sctx_host_reclaim(&in->ctx, plan->quiet, NULL);
  pl_sctx_cleanup(&in->ctx);
  rep->released_bytes += in->ctx.raw_freed - raw0;
}

/* 4. the owner goes: what is still in it is a leak, reported and freed. */
static void teardown_owner(pl_instance *in, const pl_instance_plan *plan, pl_instance_report *rep) {
  mem_leak_report *leaks = NULL;
  mem_owner_destroy(in->owner, &leaks);
  in->owner = NULL;
  if (!leaks)
    return;
  rep->leaked_bytes = leaks->bytes;
  rep->leaked_pinned_bytes = leaks->pinned_bytes;
  rep->leaked_blocks = (uint32_t)leaks->nleaks;
  mem_leak_report_publish(leaks, plan->quiet ? EBB_EVENT_QUIET : 0);
  mem_leak_report_free(leaks);
}

/* 5. hand back: trim, pinned pool, and the context when nothing else holds it. */
static void hand_back(pl_instance *in, const pl_instance_plan *plan, pl_instance_report *rep) {
  unsigned flags = EBB_RELEASE_TRIM | EBB_RELEASE_PINNED;
  if (plan->with_context && dev_ctx_active(in->dev))
    flags |= EBB_RELEASE_CONTEXT;
  mem_release_result rr = {.size = sizeof rr};
  mem_release(in->alloc, flags, &rr);
  if ((flags & EBB_RELEASE_CONTEXT) && rr.context_error) {
    rep->context_error = rr.context_error;
    base_log(EBB_LOG_DEBUG, in->ctx.name, "device context kept: %s",
             ebb_strerror(rr.context_error));
  }
  rep->released_bytes += rr.released_bytes;
  rep->context_bytes = rr.context_bytes;
}

static uint64_t driver_free(const pl_instance *in) { return pl_driver_free(in->dev, NULL); }

/* 6 and 7. The fact, published once: the log writes the line (only N > 0,
 * none when quiet or no_line) and the driver's own figures (debug); the
 * server's stream, store and metrics take it from there
 * (include/ebb/events.h). */
static void publish_released(pl_instance *in, const pl_instance_plan *plan,
                             const pl_instance_report *rep) {
  ebb_event ev = {.kind = EBB_EVENT_RELEASED,
                  .flags = plan->quiet || plan->no_line ? EBB_EVENT_QUIET : 0,
                  .device = dev_device_label(in->dev),
                  .owner = in->ctx.name,
                  .message = in->ctx.release_note,
                  .what = mem_word(in),
                  .bytes = rep->released_bytes,
                  .context_bytes = rep->context_bytes,
                  .driver_free_before = rep->driver_free_before,
                  .driver_free_after = rep->driver_free_after,
                  .callbacks_run = rep->callbacks_run,
                  .callbacks_failed = rep->callbacks_failed};
  base_event_publish(&ev);
}

static void report_out(const pl_instance_report *rep, pl_instance_report *out);

int pl_instance_release(pl_instance *in, const pl_instance_plan *plan, pl_instance_report *out) {
  static const pl_instance_plan plain = {0};
  if (!in)
    return ebb_seterr(EBB_EINVAL, "stage instance: none given to release");
  if (!plan)
    plan = &plain;
  if (in->state == EBB_INSTANCE_RUNNING || in->state == EBB_INSTANCE_RELEASED)
    return refuse(in, EBB_INSTANCE_RELEASED);
  pl_instance_report rep = {.size = sizeof rep};
  uint64_t raw0 = in->ctx.raw_freed;
  rep.driver_free_before = driver_free(in);
  pl_sctx_clear_error(&in->ctx);
  mark(in, "release");

  drop(in, &rep);                          /* 1. caches: the stage's, the registry's */
  unload(in, &rep);                        /* 2. the loaded state */
  cleanup_context(in, plan, raw0, &rep);   /* 3. raw segments, callbacks, modules */
  teardown_owner(in, plan, &rep);          /* 4. leaks reported and freed */
  hand_back(in, plan, &rep);               /* 5. trim, pinned, maybe the context */
  rep.driver_free_after = driver_free(in); /* 6. the driver's view */
  publish_released(in, plan, &rep);        /* 7. [name] released N MiB of GPU memory */

  in->ctx.release_note[0] = '\0';
  pl_instance_enter(in, EBB_INSTANCE_RELEASED);
  report_out(&rep, out);
  return 0;
}

static void report_out(const pl_instance_report *rep, pl_instance_report *out) {
  if (!out)
    return;
  uint32_t keep = out->size && out->size < sizeof *rep ? out->size : sizeof *rep;
  memcpy(out, rep, keep);
  out->size = keep;
}

int pl_instance_drop(pl_instance *in, pl_instance_report *out) {
  if (!in)
    return ebb_seterr(EBB_EINVAL, "stage instance: none given to drop");
  if (in->state != EBB_INSTANCE_LOADED && in->state != EBB_INSTANCE_IDLE)
    return ebb_seterr(EBB_ESTATE,
                      "stage '%s' of pipeline '%s': cannot drop its caches: it is "
                      "%s, not loaded",
                      in->ctx.name, in->pipeline, pl_instance_state_name(in->state));
  pl_instance_report rep = {.size = sizeof rep};
  rep.driver_free_before = driver_free(in);
  mark(in, "drop");
  drop(in, &rep);
  mem_release_result rr = {.size = sizeof rr};
  mem_release(in->alloc, EBB_RELEASE_TRIM | EBB_RELEASE_PINNED, &rr);
  rep.released_bytes = rr.released_bytes;
  rep.driver_free_after = driver_free(in);
  report_out(&rep, out);
  return 0;
}

/* --- sleep and wake (issue 12) ------------------------------------------- */
static int not_for_sleep(const pl_instance *in, const char *verb, const char *why) {
  return ebb_seterr(EBB_ESTATE, "stage '%s' of pipeline '%s': cannot %s: %s", in->ctx.name,
                    in->pipeline, verb, why);
}

/* An isolated stage's memory is its worker's, out of this process's
 * allocator: it sleeps by stopping its worker, whose exit returns every byte
 * (its context too; counted in raw_freed: isolated.h). Its weights are not
 * kept, so its wake is a load in a new worker. */
static int sleep_isolated(pl_instance *in, mem_sleep_stats *st) {
  long pid = pl_isolated_pid(in->stage_state);
  uint64_t raw0 = in->ctx.raw_freed;
  pl_sctx_clear_error(&in->ctx);
  if (in->st->release) /* the proxy measures what the worker holds here */
    in->st->release(&in->ctx.pub, in->stage_state);
  pl_sctx_clear_error(&in->ctx);
  in->st->unload(&in->ctx.pub, in->stage_state);
  in->stage_state = NULL;
  in->worker_stopped = 1;
  /* its wake is a load: it must not see this job's binding once the job is
   * gone (a job that wakes it binds it first; a POST wake loads unbound) */
  in->ctx.cancel = NULL;
  in->ctx.output_dir = NULL;
  in->ctx.deadline = 0;
  st->device_bytes = in->ctx.raw_freed - raw0;
  int rc = in->ctx.err_code;
  if (rc)
    ebb_seterr(rc, "stage '%s' of pipeline '%s': stopping its worker to sleep: %s", in->ctx.name,
               in->pipeline, in->ctx.err_msg);
  pl_sctx_clear_error(&in->ctx);
  pl_instance_enter(in, EBB_INSTANCE_PARKED);
  base_log_field f[] = {EBB_LF_S("event", "asleep"), EBB_LF_S("stage", in->ctx.name),
                        EBB_LF_U("released_bytes", st->device_bytes), EBB_LF_U("backup_bytes", 0),
                        EBB_LF_S("isolated", "worker stopped")};
  base_log_ev(EBB_LOG_INFO, in->ctx.name, f, 5,
              "asleep: isolated, its worker (pid %ld) stopped: %llu MiB of %s released, no "
              "weights kept (the wake loads it again in a new worker)",
              pid, MIB(st->device_bytes), mem_word(in));
  return rc;
}

/* A worker that offered "sleep" (the Python SDK's GPU stages) keeps running:
 * it drops its caches, puts its device memory in host memory at the same
 * addresses and gives the device memory back; its wake copies it back, with
 * no load. */
static int sleep_in_worker(pl_instance *in, mem_sleep_stats *st) {
  long pid = pl_isolated_pid(in->stage_state);
  pl_sctx_clear_error(&in->ctx);
  double t0 = base_now();
  int rc = pl_isolated_sleep(&in->ctx.pub, in->stage_state, &st->device_bytes, &st->backup_bytes);
  st->seconds = base_now() - t0;
  if (rc) {
    rc = ebb_seterr(in->ctx.err_code ? in->ctx.err_code : rc,
                    "stage '%s' of pipeline '%s': its worker could not sleep: %s", in->ctx.name,
                    in->pipeline, in->ctx.err_msg);
    pl_sctx_clear_error(&in->ctx);
    return rc;
  }
  pl_instance_enter(in, EBB_INSTANCE_PARKED);
  base_log_field f[] = {EBB_LF_S("event", "asleep"),
                        EBB_LF_S("stage", in->ctx.name),
                        EBB_LF_U("released_bytes", st->device_bytes),
                        EBB_LF_U("backup_bytes", st->backup_bytes),
                        EBB_LF_S("isolated", "worker asleep"),
                        EBB_LF_F("seconds", st->seconds)};
  base_log_ev(EBB_LOG_INFO, in->ctx.name, f, 6,
              "asleep: isolated, its worker (pid %ld) keeps %llu MiB of weights in host memory: "
              "%llu MiB of %s released",
              pid, MIB(st->backup_bytes), MIB(st->device_bytes), mem_word(in));
  return 0;
}

/* Its wake: the load again, in a new worker. */
static int wake_isolated(pl_instance *in, mem_sleep_stats *st) {
  double t0 = base_now();
  pl_sctx_clear_error(&in->ctx);
  void *state = NULL;
  int rc = in->st->load(&in->ctx.pub, in->opts, &state);
  st->seconds = base_now() - t0;
  if (rc) {
    ebb_seterr(rc, "%s", in->ctx.err_msg[0] ? in->ctx.err_msg : ebb_strerror(rc));
    pl_sctx_clear_error(&in->ctx);
    return rc;
  }
  in->stage_state = state;
  in->worker_stopped = 0;
  st->device_bytes = pl_isolated_peak(state);
  return 0;
}

int pl_instance_sleep(pl_instance *in, mem_sleep_stats *out) {
  if (!in)
    return ebb_seterr(EBB_EINVAL, "stage instance: none given to sleep");
  if (in->state == EBB_INSTANCE_PARKED)
    return not_for_sleep(in, "sleep", "it is asleep already");
  if (in->state != EBB_INSTANCE_LOADED && in->state != EBB_INSTANCE_IDLE)
    return not_for_sleep(in, "sleep",
                         in->state == EBB_INSTANCE_RUNNING ? "it is inside its load or run"
                                                           : "it is not loaded");
  pl_instance_report rep = {.size = sizeof rep};
  mem_sleep_stats st = {.size = sizeof st};
  mark(in, "sleep");
  if (in->st == pl_isolated_stage()) {
    int rc = pl_isolated_can_sleep(in->stage_state) ? sleep_in_worker(in, &st)
                                                    : sleep_isolated(in, &st);
    if (out)
      *out = st;
    return rc;
  }
  drop(in, &rep);
  int rc = mem_owner_sleep(in->owner, &st);
  mem_release_result rr = {.size = sizeof rr};
  mem_release(in->alloc, EBB_RELEASE_TRIM | EBB_RELEASE_PINNED, &rr);
  st.device_bytes += rep.released_bytes + rr.released_bytes;
  pl_instance_enter(in, EBB_INSTANCE_PARKED); /* even on failure: wake restores it */
  if (rc)
    ebb_errctx(rc, "stage '%s' of pipeline '%s': sleep: ", in->ctx.name, in->pipeline);
  base_log_field f[] = {EBB_LF_S("event", "asleep"),
                        EBB_LF_S("stage", in->ctx.name),
                        EBB_LF_U("released_bytes", st.device_bytes),
                        EBB_LF_U("backup_bytes", st.backup_bytes),
                        EBB_LF_U("dropped_bytes", st.dropped_bytes),
                        EBB_LF_F("seconds", st.seconds)};
  base_log_ev(EBB_LOG_INFO, in->ctx.name, f, 6,
              "asleep: %llu MiB of %s released, %llu MiB of weights kept in host memory",
              MIB(st.device_bytes), mem_word(in), MIB(st.backup_bytes));
  if (out)
    *out = st;
  return rc;
}

int pl_instance_wake(pl_instance *in, mem_sleep_stats *out) {
  if (!in)
    return ebb_seterr(EBB_EINVAL, "stage instance: none given to wake");
  if (in->state != EBB_INSTANCE_PARKED)
    return not_for_sleep(in, "wake", "it is not asleep");
  mem_sleep_stats st = {.size = sizeof st};
  mark(in, "wake");
  int iso = in->worker_stopped;
  int in_worker = !iso && in->st == pl_isolated_stage();
  int rc;
  if (iso) {
    rc = wake_isolated(in, &st);
  } else if (in_worker) { /* it slept keeping its weights: they come back, no load */
    double t0 = base_now();
    rc = pl_isolated_wake(&in->ctx.pub, in->stage_state, &st.device_bytes);
    st.backup_bytes = st.device_bytes;
    st.seconds = base_now() - t0;
    if (rc) {
      ebb_seterr(in->ctx.err_code ? in->ctx.err_code : rc, "%s", in->ctx.err_msg);
      pl_sctx_clear_error(&in->ctx);
    }
  } else {
    rc = mem_owner_wake_stats(in->owner, &st);
  }
  if (out)
    *out = st;
  if (rc)
    return ebb_errctx(rc, "stage '%s' of pipeline '%s' stays asleep: ", in->ctx.name, in->pipeline);
  pl_instance_enter(in, EBB_INSTANCE_LOADED);
  base_log_field f[] = {EBB_LF_S("event", "awake"), EBB_LF_S("stage", in->ctx.name),
                        EBB_LF_U("restored_bytes", st.device_bytes),
                        EBB_LF_U("backup_bytes", st.backup_bytes), EBB_LF_F("seconds", st.seconds)};
  if (iso)
    base_log_ev(EBB_LOG_INFO, in->ctx.name, f, 5,
                "awake: isolated, loaded again in a new worker (pid %ld, %llu MiB of %s) in "
                "%.3f s",
                pl_isolated_pid(in->stage_state), MIB(st.device_bytes), mem_word(in), st.seconds);
  else if (in_worker)
    base_log_ev(EBB_LOG_INFO, in->ctx.name, f, 5,
                "awake: isolated, its worker (pid %ld) restored %llu MiB of weights from host "
                "memory in %.3f s",
                pl_isolated_pid(in->stage_state), MIB(st.device_bytes), st.seconds);
  else
    base_log_ev(EBB_LOG_INFO, in->ctx.name, f, 5,
                "awake: %llu MiB of %s restored (%llu MiB of weights) in %.3f s",
                MIB(st.device_bytes), mem_word(in), MIB(st.backup_bytes), st.seconds);
  return 0;
}

/* --- accessors --------------------------------------------------------------- */
pl_instance_state pl_instance_state_of(const pl_instance *in) { return in->state; }
int pl_instance_is_loaded(const pl_instance *in) { return in->loaded; }
const char *pl_instance_name(const pl_instance *in) { return in->ctx.name; }
const char *pl_instance_pipeline(const pl_instance *in) { return in->pipeline; }
const ebb_stage *pl_instance_stage(const pl_instance *in) { return in->st; }
const char *pl_instance_options(const pl_instance *in) { return in->opts; }
ebb_owner *pl_instance_owner(const pl_instance *in) { return in->owner; }
pl_sctx *pl_instance_ctx(pl_instance *in) { return &in->ctx; }
void *pl_instance_stage_state(const pl_instance *in) { return in->stage_state; }
const char *pl_instance_error(pl_instance *in) {
  return in->ctx.err_msg[0] ? in->ctx.err_msg : ebb_errmsg();
}
