/* The runner: takes a job through its pipeline's stages in order.
 *
 * For each stage instance: result cache lookup (a hit is neither run nor
 * released: "[a] cached") -> load (unless an instance with the same
 * pipeline, name and options is still loaded and kept by the policy) -> run
 * -> release per policy. The job input is the FILE item "input" added
 * before the first stage; a stage's outputs join the job's items (owned by
 * the job) when it succeeds.
 *
 * The runner decides WHEN an instance is released (in every exit path:
 * success, error, cancel, timeout; per policy; never for a cached stage);
 * what a release IS, and its line
 *   [a] released N MiB of GPU memory      (only when N > 0)
 * is pl_instance_release (instance.h), the one function every path calls:
 * after a stage, at the job's end, idle expiry, eviction on out-of-memory,
 * a pipeline's unload, the runner's destruction.
 *
 * Policies: after-stage (default: release after each stage), after-job
 * (stages stay loaded until the job ends), idle:S (a stage stays loaded S
 * seconds after its last use, is reused by a later job with the same
 * definition, and is evicted first when an allocation runs out of memory;
 * with opts.oneshot, as in `ebb run`, no later job can come, so idle stages
 * are released at job end; a server calls pl_runner_evict_idle from its
 * timer), never (nothing released, no release lines). At the end of a job
 * under any policy but never, when no stage remains loaded, the runner
 * vacates the device: its context goes back too ("[pipeline P] idle: device
 * context released, N MiB of GPU memory back to the driver; ..."), so the
 * process holds 0 bytes on the GPU. After a stage whose successor needs no
 * GPU, the context goes with the stage's own release and is counted in its
 * line.
 *
 * Cancellation: the job's cancel flag (a signal handler may set it) makes
 * ebb_cancelled() answer 1; the runner waits for the stage to return,
 * releases, and fails the job with EBB_ECANCELED. Deadline: a stage entry's
 * timeout_s covers its load + run; when it passes, ebb_cancelled() answers 1
 * and the job fails with EBB_ETIMEDOUT naming the stage and the timeout.
 *
 * Threads: one job at a time per runner (a server serialises jobs per
 * runner or holds one runner per device); the runner takes no lock of its
 * own but one leaf mutex around its per-stage notes (last measured peaks,
 * read by pl_runner_stage_need from any thread), so nothing here is named
 * _locked.
 *
 * Declared needs: after every run the stage's estimate (pl_stage_estimate
 * with the job's items) is checked against the measured peak; off by more
 * than 10 %: a debug line "[a] estimate N MiB, measured peak M MiB". */
#ifndef EBB_PIPELINE_RUNNER_H
#define EBB_PIPELINE_RUNNER_H

#include <stdatomic.h>
#include <stdint.h>

#include "pipeline/config.h"
#include "pipeline/registry.h"
#include "pipeline/stage_api.h"

typedef struct pl_runner pl_runner;

typedef struct pl_runner_opts {
  uint32_t size;           /* sizeof(pl_runner_opts) */
  dev_device *dev;         /* borrowed; must outlive the runner */
  mem_allocator *alloc;    /* borrowed, on dev */
  const pl_registry *reg;  /* borrowed */
  const char *cache_dir;   /* NULL: no result cache. Copied. */
  const char *scratch_dir; /* isolated stages' private load directories go under it
                             (made 0700 if absent); NULL: $TMPDIR, else /tmp. Copied. */
  const char *hook;        /* NULL: $EBB_STAGE_HOOK (see hook.h). Copied. */
  int oneshot;             /* 1: no other job will come (ebb run) */
  int cache_default;       /* 1: stages whose entry says nothing about "cache"
                             use the result cache; 0: only "cache": true ones */
} pl_runner_opts;

int pl_runner_create(const pl_runner_opts *o, pl_runner **out);
/* Releases every stage still loaded (quietly for policy never), not the
 * context. NULL: no-op. */
void pl_runner_destroy(pl_runner *r);

/* The same check against a registry alone (no device needed). */
int pl_check(const pl_registry *reg, const pl_def *p);

/* Called at each stage's start (done 0) and end (done 1). */
typedef void (*pl_progress_fn)(void *arg, int index, int count, const char *stage, int done);

typedef struct pl_job {
  uint32_t size;            /* sizeof(pl_job) */
  const pl_def *pipeline;   /* borrowed */
  const char *input;        /* must exist (EBB_EINPUT) */
  const char *output_dir;   /* created if absent; NULL: "ebb-out" */
  const pl_policy *policy;  /* NULL: the pipeline's, else after-stage */
  const atomic_int *cancel; /* nonzero: cancel; may be NULL */
  pl_progress_fn progress;
  void *progress_arg;
  double deadline; /* the job's own (CLOCK_MONOTONIC seconds; 0: none): every stage
                    * is bound to it (or to its timeout_s when sooner) */
} pl_job;

/* The runner's figures for one stage of a job (pl_job_result.stages). */
typedef struct pl_stage_figures {
  char name[128]; /* the stage instance's name */
  /* what the stage's own releases handed back while it ran: the bytes of the
   * `[STAGE] released N MiB` facts whose owner is the stage (its after-stage
   * release, and any of an instance of the same name); 0 when none */
  uint64_t released_bytes;
  uint64_t peak_bytes; /* its owner's peak device bytes at its end, as its `done ... peak`
                        * line says (a worker's own for an isolated stage) */
  int measured;        /* 1: it ran to its end and peak_bytes was read; 0: cached,
                        * failed or cancelled (peak_bytes 0) */
} pl_stage_figures;

/* The most stages a pl_job_result has figures for: a longer pipeline's
 * later stages still run and count in released_bytes, but have no entry
 * (stages_over counts them). */
#define PL_JOB_STAGES 64

typedef struct pl_job_result {
  int code;                /* 0 or the EBB_E... the job failed with */
  char stage[128];         /* the failing stage instance, or "" */
  char message[1024];      /* names the stage and what went wrong */
  uint64_t released_bytes; /* handed back to the driver during the job */
  double seconds;
  int stages_run, stages_cached;
  int over_deadline; /* 1: the job's deadline ended it (EBB_ETIMEDOUT) */
  int over_wait;     /* 1: it never ran, the device was held past its max_wait_s
                      * (EBB_EBUSY, pl_manager_run_job) */
  double waited_s;   /* how long it waited for the device before it ran (or gave up) */
  /* each stage the job started (cached ones too), in pipeline order: the
   * first PL_JOB_STAGES of them */
  pl_stage_figures stages[PL_JOB_STAGES];
  int nstages;     /* entries in stages */
  int stages_over; /* stages started beyond PL_JOB_STAGES (no entry) */
} pl_job_result;

/* Runs one job. Returns 0 when every stage succeeded; otherwise the job's
 * error code (res->message says why). Errors before any stage starts
 * (unknown stage, bad options, missing input) come back the same way with
 * res->stage empty and a configuration/input code. On success the job's
 * items are summarised in OUTDIR/result.json. */
int pl_runner_run(pl_runner *r, const pl_job *job, pl_job_result *res);

/* Releases idle stages whose time is up at now (CLOCK_MONOTONIC seconds);
 * now < 0: every idle stage. Then, if nothing remains loaded, vacates the
 * device (its context). *released (may be NULL): bytes handed back. */
int pl_runner_evict_idle(pl_runner *r, double now, uint64_t *released);
/* Stage instances loaded now. */
int pl_runner_loaded(const pl_runner *r);

/* --- pipelines kept loaded (for the manager) ---------------------------------
 * Loads every stage instance of p (reusing instances already loaded with the
 * same definition) and keeps them under policy never, without running
 * anything: a later job of p with policy never runs them without reloading.
 * outdir (borrowed; must outlive the instances) is where the stages write.
 * On failure res says which stage; instances loaded so far stay loaded (call
 * pl_runner_unload_pipeline). */
int pl_runner_load_pipeline(pl_runner *r, const pl_def *p, const char *outdir, pl_job_result *res);
/* Releases every instance of the pipeline named (in load order; leaks are
 * reported and freed by ebb, whatever the policy), then, when with_context
 * and nothing remains loaded, vacates the device (its context). *released
 * (may be NULL): bytes handed back. Returns the first unload error (the
 * instances are released anyway). */
int pl_runner_unload_pipeline(pl_runner *r, const char *pipeline, int with_context,
                              uint64_t *released);
/* What a stage needs, for placement and "will it fit" before it loads: the
 * last measured peak of that stage (pipeline, stage entry name) when it has
 * run in this runner, else its declared estimate (pl_stage_estimate with
 * its merged options and no input). */
typedef struct pl_stage_need {
  uint32_t size;                  /* sizeof(pl_stage_need), set by the caller */
  uint64_t device_bytes;          /* peak device bytes of the stage's owner */
  uint64_t host_bytes;            /* peak host bytes (pageable host_alloc + pinned) */
  int measured;                   /* 1: the last measured peak; 0: the estimate */
  uint64_t estimate_device_bytes; /* the estimate for the last run's input (0: none) */
} pl_stage_need;
/* EBB_ENOTFOUND: no such stage in p; EBB_EUNSUPPORTED: never run and no
 * estimate declared. Any thread (the notes have a leaf lock of their own). */
int pl_runner_stage_need(pl_runner *r, const pl_def *p, const char *stage, pl_stage_need *out);

/* Device bytes held now (owners' trees) and the sum of the owners' peaks of
 * the pipeline's instances; returns how many are loaded. */
int pl_runner_pipeline_bytes(pl_runner *r, const char *pipeline, uint64_t *current, uint64_t *peak);

/* --- sleep (issue 12) ----------------------------------------------------------
 * Puts every loaded instance of the pipeline to sleep (pl_instance_sleep:
 * weights to host memory, device memory back at the same addresses); when
 * every instance left in the runner is asleep the device context goes too.
 * *out (may be NULL): the sums, device_bytes including the context.
 * EBB_ENOTFOUND: nothing of it is loaded; EBB_ESTATE: asleep already. */
int pl_runner_sleep_pipeline(pl_runner *r, const char *pipeline, mem_sleep_stats *out);
/* Wakes every sleeping instance of the pipeline. All or nothing: on a
 * failure (out of memory, driver error) the ones woken go back to sleep and
 * the error names the pipeline and the cause; it can be retried.
 * EBB_ESTATE: not asleep. A job of a sleeping pipeline wakes its stages in
 * place without this. */
int pl_runner_wake_pipeline(pl_runner *r, const char *pipeline, mem_sleep_stats *out);
/* 1 when the pipeline has instances and all of them are asleep. */
int pl_runner_pipeline_asleep(pl_runner *r, const char *pipeline);

#endif
