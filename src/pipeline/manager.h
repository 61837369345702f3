/* The pipeline manager: one device, one allocator, one runner, and the
 * pipelines a long-lived process (ebb serve) keeps loaded.
 *
 * Loaded: the pipeline's stage instances are loaded and kept (runner policy
 * never) so session items and jobs of that pipeline run without reloading.
 * Sessions (sessions.h) hold counted leases on a loaded pipeline.
 *
 * Unload (also the first half of a switch): stop the sessions on it, wait
 * until their items in flight are drained, drop their leases, unload the
 * stages (the runner reports leaks and frees them: owners end at 0 bytes),
 * release (the device context too when nothing else is loaded) and confirm
 * the drop against the driver's free memory, logging
 *   [pipeline NAME] GPU memory free before unload: X.XX GiB
 *   [pipeline NAME] GPU memory free after unload: X.XX GiB
 * Load: when the pipeline's need is unknown (never measured) or larger than
 * the driver's free memory, every other loaded pipeline is unloaded first (a
 * switch). A need that still does not fit waits (bounded by load_wait_s) for
 * the driver's free memory, then fails with EBB_EOOM naming the numbers; a
 * load predicted to run out is never started. Then
 *   [pipeline NAME] GPU memory free after load: X.XX GiB
 * The need is the last measured peak: the larger of the driver's free-memory
 * drop across the load and the stage owners' peak bytes (+ the context when
 * it had to be created); before a first measurement, the sum of what the
 * stages declare (their `estimate`, pl_manager_pipeline_need), else the
 * pipeline's "expected_mib".
 *
 * EBB_STAGE_HOOK (hook.h), when set, also runs after each unload (event
 * pipeline-unloaded, EBB_HOOK_STAGE = the pipeline, EBB_HOOK_RELEASED_BYTES)
 * and after each load (pipeline-loaded), while the switch waits for it, so a
 * script can measure the device from outside between the two.
 *
 * Jobs: pl_manager_run_job runs one job through the runner as `ebb run`
 * does (the pipeline's or the server's release policy); a job of a loaded
 * pipeline uses the kept instances (policy never) instead.
 *
 * Threads: every runner call (jobs, items, loads, unloads, releases) runs on
 * the manager's own device thread, one at a time (a device runs one burst at
 * a time), while the calling thread waits. That thread lives as long as the
 * manager, so the worker processes of isolated stages kept loaded, which die
 * with the thread that started them (PR_SET_PDEATHSIG), are not killed when
 * the HTTP connection that loaded them ends. Draining sessions happens in the
 * calling thread, before the unload is handed over. Loads/unloads are also
 * serialised among themselves. Queries (list, memory) never wait for a job.
 *
 * Files: manager.c (create, destroy, load, unload, switch, run),
 * manager_state.c (lookups, figures, JSON views), manager_thread.c (the
 * device thread), manager_ask.c (needs, asking peers), manager_sleep.c
 * (sleep, wake, the sleep budget), manager_give.c (giving back to a peer).
 *
 * Locks (manager_int.h): `lock` guards each pipeline's loaded flag and need and
 * the released total; it is taken inside small helpers and never held across
 * a call. `switch_lock` serialises loads and unloads: the functions named
 * *_in_switch expect it held. `dev_lock` guards the device thread's task
 * queue only. Functions named *_on_dev run on the device thread, the only
 * thread that calls the runner. No pipeline-room function is named _locked
 * (in src/memory that suffix means the allocator's mutex; in src/device the
 * device's). */
#ifndef EBB_PIPELINE_MANAGER_H
#define EBB_PIPELINE_MANAGER_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "memory/memory.h"
#include "pipeline/config.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"
#include "pipeline/sessions.h"
#include "pipeline/trust.h"

struct pl_job_work;

typedef struct pl_manager pl_manager;

typedef struct pl_manager_opts {
  uint32_t size;           /* sizeof(pl_manager_opts) */
  dev_device *dev;         /* borrowed; outlives the manager */
  mem_allocator *alloc;    /* borrowed, on dev */
  const pl_registry *reg;  /* borrowed */
  const pl_config *cfg;    /* borrowed: the pipelines known */
  const char *work_dir;    /* loaded pipelines write under WORK/pipelines/NAME. Copied. */
  const char *cache_dir;   /* stage result cache; NULL: none. Copied. */
  const char *scratch_dir; /* isolated stages' private load directories (runner.h);
                                 NULL: $TMPDIR. Copied. */
  const pl_policy *policy; /* default for pipelines without one; NULL: after-stage */
  double load_wait_s;      /* how long a load waits for memory; <= 0: 10 s */
  /* Asking other processes for memory (issue 35, docs/broker.md): a load, or
   * a wake, or a job of a pipeline not loaded or asleep, whose need is over the driver's free
   * memory (after the manager's own switch) calls ask_peers(ask_arg, dev,
   * need) before it waits or fails: it should leave `need` bytes free on dev
   * if peers can give them. NULL: nobody is asked. */
  int (*ask_peers)(void *arg, dev_device *dev, uint64_t need);
  /* After the load, wake or job that asked (landed or failed): the asker's
   * claim on the freed bytes may go (docs/broker.md, "Claims"). May be NULL. */
  void (*ask_done)(void *arg, dev_device *dev);
  void *ask_arg;
} pl_manager_opts;

int pl_manager_create(const pl_manager_opts *o, pl_manager **out);
/* Stops every session, unloads every pipeline, releases everything the
 * runner holds and the context. NULL: no-op. */
void pl_manager_destroy(pl_manager *m);

pl_sessions *pl_manager_sessions(pl_manager *m);
const pl_def *pl_manager_pipeline(pl_manager *m, const char *name);

/* Load (switching if needed, see above). EBB_ENOTFOUND unknown pipeline,
 * EBB_EOOM would not fit, a stage's error otherwise (its message). */
int pl_manager_load(pl_manager *m, const char *name);
/* Unload; *released (may be NULL) bytes handed back. EBB_ENOTFOUND unknown
 * pipeline; unloading a pipeline that is not loaded is not an error. */
int pl_manager_unload(pl_manager *m, const char *name, uint64_t *released);
int pl_manager_is_loaded(pl_manager *m, const char *name);
/* The release policy a job of the pipeline runs with when it is not loaded:
 * its own, else the manager's default. EBB_ENOTFOUND unknown pipeline. */
int pl_manager_policy_of(pl_manager *m, const char *name, pl_policy *out);
/* Unloads every loaded pipeline (a device taken out of service); *released
 * and *count (may be NULL): bytes handed back, pipelines unloaded. The
 * first unload error, after trying them all. */
int pl_manager_unload_all(pl_manager *m, uint64_t *released, int *count);

/* The time a job or session item may take (0: no bound). timeout_s counts
 * its run, from the moment the device thread starts it, never its wait for
 * the device: past it the running stage is cancelled and the result says
 * res->over_deadline (EBB_ETIMEDOUT). max_wait_s bounds that wait (the
 * device held by a session item, a load, a release): past it the work is
 * taken back unrun, res->over_wait (EBB_EBUSY). */
typedef struct pl_run_limits {
  double timeout_s;
  double max_wait_s;
} pl_run_limits;

/* Runs one job (synchronously, on the device thread). outdir is created.
 * options: {stage name -> options object} merged over the pipeline's
 * (may be NULL). lim (may be NULL: no bounds) as above; cancel also ends
 * its wait. Returns res->code; res has the runner's figures (each stage's
 * released bytes and peak: pl_job_result.stages). */
int pl_manager_run_job(pl_manager *m, const char *pipeline, const char *input, const char *outdir,
                       json_t *options, const atomic_int *cancel, const pl_run_limits *lim,
                       pl_job_result *res);

/* Checks a job before it is queued: the pipeline exists (EBB_ENOTFOUND),
 * options names only its stages, every merged option is valid (EBB_ECONFIG,
 * naming the stage and option) and every option the job set is one it may
 * set (pipeline/trust.h: operator-only ones only where "allow_options"
 * names them; on_path, may be NULL, takes an allowed path option). */
int pl_manager_check_job(pl_manager *m, const char *pipeline, json_t *options,
                         pl_trust_path_fn on_path, void *arg);
/* The work a job of pipeline with options (merged as for a run) would take
 * on input_s seconds of input: its stages' estimates (pipeline/work.h). */
int pl_manager_job_work(pl_manager *m, const char *pipeline, json_t *options, double input_s,
                        uint32_t input_rate, struct pl_job_work *out);

/* Sessions: open loads the pipeline if needed and takes a lease. */
int pl_manager_session_open(pl_manager *m, const char *pipeline, char *id);
/* Runs one item (the input file) through the session's loaded pipeline,
 * under lim (may be NULL) as a job. */
int pl_manager_session_item(pl_manager *m, const char *id, const char *input, const char *outdir,
                            json_t *options, const atomic_int *cancel, const pl_run_limits *lim,
                            pl_job_result *res);
int pl_manager_session_close(pl_manager *m, const char *id);

/* Releases idle stages whose time is up and, when nothing is loaded, the
 * context (a server's timer; skipped while a job runs). */
void pl_manager_tick(pl_manager *m);
/* POST /v1/release. Waits for the device, then drops every cache (the
 * release registry), hands back (trim, pinned pool), releases idle stages
 * and vacates the device (its context) when nothing is loaded. *released:
 * bytes handed back to the driver. */
int pl_manager_release(pl_manager *m, uint64_t *released);

/* The sum over the pipeline's stages of pl_runner_stage_need's device
 * bytes (stages that declare nothing and never ran count 0; *complete (may
 * be NULL) is then 0). */
int pl_manager_pipeline_need(pl_manager *m, const char *pipeline, uint64_t *device_bytes,
                             int *complete);

/* [{"name","description","origin","stages":[..],"loaded":bool,"sessions":N,
 *   "need_bytes":N|null}] (new reference). */
json_t *pl_manager_pipelines_json(pl_manager *m);
/* {"device":{...},"allocator":{...},"owners":[{"name","bytes"}],"context":{...},
 *  "pinned":{...},"unattributed":{...},"loaded":[names]} (new reference). */
json_t *pl_manager_memory_json(pl_manager *m);
/* Placement (placement.h) over several managers, one per device: */
/* *measured: the pipeline's need as last measured here (a load or a run),
 * 0 when it never was (no "expected_mib");
 * *asleep: 1 when it is loaded here and asleep. */
void pl_manager_place_figures(pl_manager *m, const char *name, uint64_t *measured, int *asleep);
/* The summed need of the pipelines asleep here other than except (may be
 * NULL): room free now that their wake takes back. */
uint64_t pl_manager_asleep_bytes(pl_manager *m, const char *except);
/* What a device context costs on this manager's device (measured or assumed). */
uint64_t pl_manager_context_estimate(pl_manager *m);
/* The summed need of the loaded pipelines other than except (may be NULL),
 * and how many (*count, may be NULL). */
uint64_t pl_manager_loaded_bytes(pl_manager *m, const char *except, int *count);
dev_device *pl_manager_device(pl_manager *m);
/* Bytes released by the manager's jobs, items, unloads and releases. */
uint64_t pl_manager_released_total(pl_manager *m);

/* --- sleep (issue 12) -----------------------------------------------------------
 * POST /v1/pipelines/NAME/sleep and /wake. Sleep puts the stages of a loaded
 * pipeline (or of one kept by a job's policy) to sleep (runner.h); it stays
 * loaded ("asleep": true in the pipelines view) and a job of it wakes it in
 * place. Then, over the host budget for backups, the oldest sleepers are
 * unloaded instead. Wake is all or nothing; a failed one leaves it asleep.
 * *out (may be NULL): bytes released / restored and the seconds. */
int pl_manager_sleep(pl_manager *m, const char *name, mem_sleep_stats *out);
int pl_manager_wake(pl_manager *m, const char *name, mem_sleep_stats *out);
/* Host bytes the backups may hold (ebb serve --sleep-host-budget); 0: none. */
void pl_manager_set_sleep_budget(pl_manager *m, uint64_t bytes);
typedef struct pl_manager_sleep_info {
  int sleeping;          /* pipelines asleep */
  uint64_t backup_bytes; /* host bytes holding their weights */
  uint64_t budget_bytes; /* 0: no budget */
  uint64_t wakes;        /* wakes so far (API and jobs) */
  double wake_seconds;   /* their time, summed */
} pl_manager_sleep_info;
void pl_manager_sleep_figures(pl_manager *m, pl_manager_sleep_info *out);

/* --- giving back to another process (issue 35, docs/broker.md) -------------
 * The broker asks "give back N bytes on your device"; this answers by the
 * manager's own rules, with the same unload and sleep it uses itself:
 *   1. cached memory (the release registry, trim, idle job stages);
 *   2. idle pipelines, least recently used first: asleep if its release
 *      policy is sleep, else unloaded;
 * never a pipeline with a running job or an open session, never one whose
 * config says "evictable": false, never below reserve bytes held. It never
 * waits for a job: with the device busy, or a load/unload under way, it
 * gives what it has and names why it kept the rest. */
#define EBB_GIVEBACK_MAX_KEPT 32
typedef struct pl_giveback_kept {
  char what[128]; /* "pipeline P", "context" */
  uint64_t bytes; /* its need (last measured) */
  char why[160];
} pl_giveback_kept;
typedef struct pl_giveback {
  uint64_t given; /* bytes back: this process's driver usage drop when the
                         driver can say (*confirmed 1), else ebb's own figure */
  int confirmed;
  int busy;         /* a load or unload was under way: nothing was looked at */
  char reason[512]; /* "pipeline a asleep; pipeline b unloaded; cache trimmed" */
  size_t nkept;
  pl_giveback_kept kept[EBB_GIVEBACK_MAX_KEPT];
} pl_giveback;
int pl_manager_give_back(pl_manager *m, uint64_t want, uint64_t reserve, pl_giveback *out);
/* What pl_manager_give_back would give for want now (an estimate by the
 * pipelines' last measured needs) and how long it expects to take: a
 * broker peer's commit (docs/broker.md). */
void pl_manager_give_plan(pl_manager *m, uint64_t want, uint64_t reserve, uint64_t *bytes,
                          double *eta_ms);
/* Placement across devices (issue 35): when the pipeline's predicted need
 * is over the driver's free memory on m's device, asks the other processes
 * there for it (ask_peers); 1 when they were asked. The claim stays for the
 * load that follows (its own supersedes it), else pl_manager_ask_done. */
int pl_manager_ask_room(pl_manager *m, const char *name);
void pl_manager_ask_done(pl_manager *m);
/* Seconds since the manager last loaded or ran anything (most idle first). */
double pl_manager_idle_seconds(pl_manager *m);
/* This process's device bytes by the driver (context included); 0 when it
 * cannot say. */
uint64_t pl_manager_process_bytes(pl_manager *m);

#endif
