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
 * it had to be created). Stages declare no memory needs in the ABI yet.
 *
 * EBB_STAGE_HOOK (hook.h), when set, also runs after each unload (event
 * pipeline-unloaded, EBB_HOOK_STAGE = the pipeline, EBB_HOOK_RELEASED_BYTES)
 * and after each load (pipeline-loaded), while the switch waits for it, so a
 * script can measure the device from outside between the two.
 *
 * Jobs: ebb_manager_run_job runs one job through the runner as `ebb run`
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
 * Locks (manager.c): `lock` guards each pipeline's loaded flag and need and
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

struct ebb_job_work;

typedef struct ebb_manager ebb_manager;

typedef struct ebb_manager_opts {
  uint32_t size;              /* sizeof(ebb_manager_opts) */
  ebb_device *dev;            /* borrowed; outlives the manager */
  ebb_allocator *alloc;       /* borrowed, on dev */
  const ebb_registry *reg;    /* borrowed */
  const ebb_config *cfg;      /* borrowed: the pipelines known */
  const char *work_dir;       /* loaded pipelines write under WORK/pipelines/NAME. Copied. */
  const char *cache_dir;      /* stage result cache; NULL: none. Copied. */
  const char *scratch_dir;    /* isolated stages' private load directories (runner.h);
                                 NULL: $TMPDIR. Copied. */
  const ebb_policy *policy;   /* default for pipelines without one; NULL: after-stage */
  double load_wait_s;         /* how long a load waits for memory; <= 0: 10 s */
  /* Asking other processes for memory (issue 35, docs/broker.md): a load, or
   * a wake, or a job of a pipeline not loaded or asleep, whose need is over the driver's free
   * memory (after the manager's own switch) calls ask_peers(ask_arg, dev,
   * need) before it waits or fails: it should leave `need` bytes free on dev
   * if peers can give them. NULL: nobody is asked. */
  int (*ask_peers)(void *arg, ebb_device *dev, uint64_t need);
  /* After the load, wake or job that asked (landed or failed): the asker's
   * claim on the freed bytes may go (docs/broker.md, "Claims"). May be NULL. */
  void (*ask_done)(void *arg, ebb_device *dev);
  void *ask_arg;
} ebb_manager_opts;

int ebb_manager_create(const ebb_manager_opts *o, ebb_manager **out);
/* Stops every session, unloads every pipeline, releases everything the
 * runner holds and the context. NULL: no-op. */
void ebb_manager_destroy(ebb_manager *m);

ebb_sessions *ebb_manager_sessions(ebb_manager *m);
const ebb_pipeline_def *ebb_manager_pipeline(ebb_manager *m, const char *name);

/* Load (switching if needed, see above). EBB_ENOTFOUND unknown pipeline,
 * EBB_EOOM would not fit, a stage's error otherwise (its message). */
int ebb_manager_load(ebb_manager *m, const char *name);
/* Unload; *released (may be NULL) bytes handed back. EBB_ENOTFOUND unknown
 * pipeline; unloading a pipeline that is not loaded is not an error. */
int ebb_manager_unload(ebb_manager *m, const char *name, uint64_t *released);
int ebb_manager_is_loaded(ebb_manager *m, const char *name);
/* The release policy a job of the pipeline runs with when it is not loaded:
 * its own, else the manager's default. EBB_ENOTFOUND unknown pipeline. */
int ebb_manager_policy_of(ebb_manager *m, const char *name, ebb_policy *out);
/* Unloads every loaded pipeline (a device taken out of service); *released
 * and *count (may be NULL): bytes handed back, pipelines unloaded. The
 * first unload error, after trying them all. */
int ebb_manager_unload_all(ebb_manager *m, uint64_t *released, int *count);

/* Runs one job (synchronously, holding the run lock). outdir is created.
 * options: {stage name -> options object} merged over the pipeline's
 * (may be NULL). progress (may be NULL) as in ebb_job. Returns res->code. */
int ebb_manager_run_job(ebb_manager *m, const char *pipeline, const char *input,
                        const char *outdir, json_t *options, const atomic_int *cancel,
                        ebb_progress_fn progress, void *progress_arg, ebb_job_result *res);

/* Checks a job before it is queued: the pipeline exists (EBB_ENOTFOUND),
 * options names only its stages, every merged option is valid (EBB_ECONFIG,
 * naming the stage and option) and every option the job set is one it may
 * set (pipeline/trust.h: operator-only ones only where "allow_options"
 * names them; on_path, may be NULL, takes an allowed path option). */
int ebb_manager_check_job(ebb_manager *m, const char *pipeline, json_t *options,
                          ebb_trust_path_fn on_path, void *arg);
/* The work a job of pipeline with options (merged as for a run) would take
 * on input_s seconds of input: its stages' estimates (pipeline/work.h). */
int ebb_manager_job_work(ebb_manager *m, const char *pipeline, json_t *options, double input_s,
                         uint32_t input_rate, struct ebb_job_work *out);

/* Sessions: open loads the pipeline if needed and takes a lease. */
int ebb_manager_session_open(ebb_manager *m, const char *pipeline, char *id);
/* Runs one item (the input file) through the session's loaded pipeline. */
int ebb_manager_session_item(ebb_manager *m, const char *id, const char *input,
                             const char *outdir, json_t *options, const atomic_int *cancel,
                             ebb_job_result *res);
int ebb_manager_session_close(ebb_manager *m, const char *id);

/* Releases idle stages whose time is up and, when nothing is loaded, the
 * context (a server's timer; skipped while a job runs). */
void ebb_manager_tick(ebb_manager *m);
/* POST /v1/release. Waits for the device, then drops every cache (the
 * release registry), hands back (trim, pinned pool), releases idle stages
 * and vacates the device (its context) when nothing is loaded. *released:
 * bytes handed back to the driver. */
int ebb_manager_release(ebb_manager *m, uint64_t *released);

/* What stage `stage` of pipeline `pipeline` needs (placement, "will it fit",
 * the multi-GPU work): its last measured peak when it has run here, else
 * its declared estimate (the stage ABI's `estimate`, default input: none).
 * See ebb_runner_stage_need. Any thread; never waits for a job.
 * EBB_ENOTFOUND unknown pipeline or stage; EBB_EUNSUPPORTED never run and
 * no estimate declared. */
int ebb_manager_stage_need(ebb_manager *m, const char *pipeline, const char *stage,
                           ebb_stage_need *out);
/* The sum over the pipeline's stages of ebb_manager_stage_need's device
 * bytes (stages that declare nothing and never ran count 0; *complete (may
 * be NULL) is then 0). */
int ebb_manager_pipeline_need(ebb_manager *m, const char *pipeline, uint64_t *device_bytes,
                              int *complete);

/* [{"name","description","origin","stages":[..],"loaded":bool,"sessions":N,
 *   "need_bytes":N|null}] (new reference). */
json_t *ebb_manager_pipelines_json(ebb_manager *m);
/* {"device":{...},"allocator":{...},"owners":[{"name","bytes"}],"context":{...},
 *  "pinned":{...},"unattributed":{...},"loaded":[names]} (new reference). */
json_t *ebb_manager_memory_json(ebb_manager *m);
/* Placement (placement.h) over several managers, one per device: */
/* The pipeline's need here: its last measured peak, else its "expected_mib";
 * 0 when unknown or not a pipeline. */
uint64_t ebb_manager_need(ebb_manager *m, const char *name);
/* *measured: the pipeline's need as last measured here (a load or a run),
 * 0 when it never was (unlike ebb_manager_need, no "expected_mib");
 * *asleep: 1 when it is loaded here and asleep. */
void ebb_manager_place_figures(ebb_manager *m, const char *name, uint64_t *measured,
                               int *asleep);
/* The summed need of the pipelines asleep here other than except (may be
 * NULL): room free now that their wake takes back. */
uint64_t ebb_manager_asleep_bytes(ebb_manager *m, const char *except);
/* What a device context costs on this manager's device (measured or assumed). */
uint64_t ebb_manager_context_estimate(ebb_manager *m);
/* The summed need of the loaded pipelines other than except (may be NULL),
 * and how many (*count, may be NULL). */
uint64_t ebb_manager_loaded_bytes(ebb_manager *m, const char *except, int *count);
ebb_device *ebb_manager_device(ebb_manager *m);
/* Bytes released by the manager's jobs, items, unloads and releases. */
uint64_t ebb_manager_released_total(ebb_manager *m);

/* --- sleep (issue 12) -----------------------------------------------------------
 * POST /v1/pipelines/NAME/sleep and /wake. Sleep puts the stages of a loaded
 * pipeline (or of one kept by a job's policy) to sleep (runner.h); it stays
 * loaded ("asleep": true in the pipelines view) and a job of it wakes it in
 * place. Then, over the host budget for backups, the oldest sleepers are
 * unloaded instead. Wake is all or nothing; a failed one leaves it asleep.
 * *out (may be NULL): bytes released / restored and the seconds. */
int ebb_manager_sleep(ebb_manager *m, const char *name, ebb_sleep_stats *out);
int ebb_manager_wake(ebb_manager *m, const char *name, ebb_sleep_stats *out);
/* Host bytes the backups may hold (ebb serve --sleep-host-budget); 0: none. */
void ebb_manager_set_sleep_budget(ebb_manager *m, uint64_t bytes);
typedef struct ebb_manager_sleep_info {
  int sleeping;            /* pipelines asleep */
  uint64_t backup_bytes;   /* host bytes holding their weights */
  uint64_t budget_bytes;   /* 0: no budget */
  uint64_t wakes;          /* wakes so far (API and jobs) */
  double wake_seconds;     /* their time, summed */
} ebb_manager_sleep_info;
void ebb_manager_sleep_figures(ebb_manager *m, ebb_manager_sleep_info *out);

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
typedef struct ebb_giveback_kept {
  char what[128]; /* "pipeline P", "context" */
  uint64_t bytes; /* its need (last measured) */
  char why[160];
} ebb_giveback_kept;
typedef struct ebb_giveback {
  uint64_t given;     /* bytes back: this process's driver usage drop when the
                         driver can say (*confirmed 1), else ebb's own figure */
  int confirmed;
  char reason[512];   /* "pipeline a asleep; pipeline b unloaded; cache trimmed" */
  size_t nkept;
  ebb_giveback_kept kept[EBB_GIVEBACK_MAX_KEPT];
} ebb_giveback;
int ebb_manager_give_back(ebb_manager *m, uint64_t want, uint64_t reserve, ebb_giveback *out);
/* Placement across devices (issue 35): when the pipeline's predicted need
 * is over the driver's free memory on m's device, asks the other processes
 * there for it (ask_peers); 1 when they were asked. The claim stays for the
 * load that follows (its own supersedes it), else ebb_manager_ask_done. */
int ebb_manager_ask_room(ebb_manager *m, const char *name);
void ebb_manager_ask_done(ebb_manager *m);
/* Seconds since the manager last loaded or ran anything (most idle first). */
double ebb_manager_idle_seconds(ebb_manager *m);
/* This process's device bytes by the driver (context included); 0 when it
 * cannot say. */
uint64_t ebb_manager_process_bytes(ebb_manager *m);

#endif
