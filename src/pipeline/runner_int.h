/* What the runner's files share (runner.c, runner_notes.c, runner_kept.c):
 * its pool and notes, and the pl__run_ internals, grouped by the file that
 * defines them. runner_notes.c is below runner.c, runner_kept.c above it
 * (build_cycles). Not for other files. */
#ifndef EBB_PIPELINE_RUNNER_INT_H
#define EBB_PIPELINE_RUNNER_INT_H

#include <pthread.h>
#include <stdint.h>

#include "pipeline/instance.h"
#include "pipeline/runner.h"

#define MIB(x) ((unsigned long long)((x) >> 20))

/* A stage instance in the runner's pool, with the runner's notes on it: the
 * runner decides when it is released, instance.c what a release is. */
typedef struct slot {
  struct slot *next;
  pl_instance *inst;
  pl_policy policy;  /* of the job that used it last */
  double idle_since; /* idle (policy idle, sleep) since: pl_policy_leave says when it goes */
  int quiet;         /* policy never: its release lines go to debug */
} slot;

/* What the runner learned of a stage entry: its last measured peaks. */
typedef struct stage_note {
  char pipeline[128], name[128];
  uint64_t peak, host_peak, estimate;
} stage_note;

struct pl_runner {
  pthread_mutex_t notes_mu; /* leaf: notes only (pl_runner_stage_need, any thread) */
  stage_note *notes;
  size_t nnotes;
  dev_device *dev;
  mem_allocator *alloc;
  const pl_registry *reg;
  char *cache_dir;
  char *scratch_dir;
  char *hook;
  int oneshot;
  int cache_default;
  slot *pool; /* newest first */
  /* The figures of the stage a job runs now (pl_runner_run, between its
   * progress calls; NULL between stages): its entry in the job's result, or
   * `over` past PL_JOB_STAGES. note_release (runner.c) adds its releases,
   * stage_done its peak. */
  pl_stage_figures *cur;
  pl_stage_figures over;
};

/* "runner_notes.c": stage `name` of `pipeline` measured these (any thread). */
void pl__run_note_peak(pl_runner *r, const char *pipeline, const char *name, uint64_t peak,
                       uint64_t host_peak, uint64_t estimate);

/* "runner.c" */
/* res gets the first failure (code, stage, message); answers its code. */
int pl__run_fail(pl_job_result *res, int code, const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* One instance's release (instance.c) with the runner's notes, for job
 * (NULL: none; a failed unload fails it); its bytes. rep may be NULL. */
uint64_t pl__run_release_slot(pl_runner *r, slot *s, int with_context, pl_job_result *job,
                              pl_instance_report *rep);
/* The process-wide callbacks and the device context, when no instance is
 * left; the bytes. */
uint64_t pl__run_vacate(pl_runner *r, const char *scope);
/* The same when everything left is asleep. */
uint64_t pl__run_vacate_asleep(pl_runner *r, const char *scope);
/* Puts s's instance asleep; the device bytes it parked. */
uint64_t pl__run_sleep_slot(slot *s);
/* The instance for stage d of pipeline p with these options (kept, else a
 * new one in the pool). NULL: res says why. */
slot *pl__run_slot_for(pl_runner *r, const pl_def *p, const pl_stage_def *d, const ebb_stage *st,
                       const char *opts, const char *outdir, pl_job_result *res);
/* Takes s for a job (or a kept pipeline) under policy pol. */
void pl__run_claim(slot *s, pl_policy pol, int quiet);
/* Stage d of p: the registered stage and its options checked and merged. */
int pl__run_check_stage(const pl_registry *reg, const pl_def *p, const pl_stage_def *d,
                        const ebb_stage **st, json_t **merged);

#endif
