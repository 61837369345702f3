/* A stage instance: one entry of a pipeline (a stage, its options, its owner
 * in the device allocator, its stage context), from creation to release.
 * The runner (runner.h) decides WHEN an instance is loaded, run and
 * released (policy, result cache, items); the manager (manager.h) decides
 * WHAT is scheduled. What a release IS lives here, in one function,
 * pl_instance_release, that every path calls: after a stage, at the job's
 * end, idle expiry, eviction on out-of-memory, a pipeline's unload, the
 * runner's destruction.
 *
 * States (pl_instance_state; every change goes through pl_instance_enter,
 * which refuses the others with EBB_ESTATE and a message naming the instance
 * and both states):
 *
 *   NEW --load--> RUNNING --(load ok, run returned)--> LOADED --run--> RUNNING
 *    ^               |                                  |  ^  \
 *    +--load failed--+                    keep for reuse |  |   park (issue 12)
 *                                                       v  |     v
 *                                                      IDLE   PARKED --wake--> LOADED
 *   NEW | LOADED | IDLE | PARKED --release--> RELEASED (terminal)
 *
 *   NEW      created: owner and stage context exist, nothing loaded
 *   RUNNING  inside the stage's load or run: never released or evicted
 *   LOADED   loaded, held by a job or kept by its pipeline (not evictable)
 *   IDLE     loaded, kept between jobs (policy idle:S): the first to go when
 *            memory runs out or its time is up; a job may claim it (run)
 *   PARKED   asleep (state name "parked"): loaded, its device memory parked at the same
 *            addresses (pl_instance_sleep); pl_instance_wake goes back to
 *            LOADED
 *   RELEASED unloaded, owner destroyed; only pl_instance_destroy is left
 *
 * Words (each means one thing in the pipeline room):
 *   release  the whole sequence of pl_instance_release, ending in RELEASED
 *            and the line `[name] released N MiB of GPU memory`
 *   drop     the stage's own `release` entry of the ABI plus the release
 *            callbacks this instance registered (its owner's, never a
 *            neighbour's): caches go, the stage stays loaded
 *   hand back  the memory room's mem_release (trim, pinned pool, context):
 *            bytes go back to the driver
 *   vacate   the device context goes back because nothing is loaded (the
 *            runner's, at a job's end or after the last eviction/unload)
 *
 * Room for what comes next, without reshaping:
 *   - own callbacks (issue 17, done): `drop` runs this instance's owner's
 *     callbacks only; process-wide ones are the runner's "process" owner,
 *     released when it vacates, on a line of their own.
 *   - sleep (issue 12): ebb_instance_park (LOADED|IDLE -> PARKED: drop, then
 *     ebb_owner_park, the context vacated when nothing else holds it) and
 *     pl_instance_wake (PARKED -> LOADED via ebb_owner_wake; a failed wake
 *     stays PARKED and may be retried), each with the same report. The table
 *     in instance.c already allows exactly these changes; a release from
 *     PARKED runs the same sequence (the owner's teardown frees the backup).
 *
 * Threads: an instance is used by one thread at a time (the runner's); no
 * function here takes a lock of its own. The memory room's calls take the
 * allocator's mutex and the release registry's themselves. */
#ifndef EBB_PIPELINE_INSTANCE_H
#define EBB_PIPELINE_INSTANCE_H

#include <stdatomic.h>
#include <stdint.h>

#include "pipeline/host.h"
#include "pipeline/stage_api.h"

typedef struct pl_instance pl_instance;

#define EBB_INSTANCE_STATES(X) \
  X(NEW, "new")                \
  X(LOADED, "loaded")          \
  X(RUNNING, "running")        \
  X(IDLE, "idle")              \
  X(PARKED, "parked")          \
  X(RELEASED, "released")

typedef enum {
#define EBB_X_(s, name) EBB_INSTANCE_##s,
  EBB_INSTANCE_STATES(EBB_X_)
#undef EBB_X_
} pl_instance_state;

const char *pl_instance_state_name(pl_instance_state s);

typedef struct pl_instance_spec {
  uint32_t size;           /* sizeof(pl_instance_spec) */
  dev_device *dev;         /* borrowed; outlives the instance */
  mem_allocator *alloc;    /* borrowed, on dev: the instance's owner lives here */
  const ebb_stage *stage;  /* borrowed (built-in, plugin, or the isolated proxy) */
  const char *pipeline;    /* copied */
  const char *name;        /* instance name: owner name and log scope. Copied */
  const char *options;     /* canonical merged options JSON: what load gets, and
                                 the reuse key (pl_instance_options). Copied */
  const char *output_dir;  /* borrowed; pl_instance_bind replaces it */
  const char *scratch_dir; /* borrowed, outlives the instance: an isolated stage's
                                 private load directory goes under it (NULL: $TMPDIR) */
  pl_sctx_oom_fn on_oom;   /* out of device memory in this stage: may evict others */
  void *on_oom_arg;
} pl_instance_spec;

/* What a release should do beyond the sequence every release runs. */
typedef struct pl_instance_plan {
  int quiet;        /* 1: the release and leak lines go to debug (policy never,
                       a runner's final clean-up) */
  int with_context; /* 1: the caller knows no other instance is loaded: the
                       device context goes back too and is counted in this
                       instance's line (the next stage needs no GPU) */
  int no_line;      /* 1: no `[name] released N MiB` line, though not quiet:
                       ebb-worker, whose host says that line for the whole
                       worker; leak lines and warnings still appear */
} pl_instance_plan;

/* What a release did. Every field is filled (0 when nothing happened). */
typedef struct pl_instance_report {
  uint32_t size;                /* sizeof(pl_instance_report): set by the caller */
  uint64_t released_bytes;      /* handed back to the driver: the line's N (segments
                                    trimmed after the drop and after the owner's
                                    teardown, raw segments, a worker's exit, the context) */
  uint64_t context_bytes;       /* of which: the device context */
  uint64_t unattributed_bytes;  /* taken from the driver directly (raw_driver_alloc)
                                    and not given back by the stage: freed by ebb */
  uint64_t leaked_bytes;        /* device blocks the stage did not free: reported, freed */
  uint64_t leaked_pinned_bytes; /* pinned host buffers likewise */
  uint32_t leaked_blocks;
  uint64_t driver_free_before;         /* the driver's free memory around the release */
  uint64_t driver_free_after;          /* (both 0: the driver could not say) */
  int callbacks_run, callbacks_failed; /* the release registry's, during the drop */
  int drop_error;                      /* the stage's own release failed (logged; not fatal) */
  int unload_error;                    /* the stage's unload set an error: */
  char unload_message[1024];           /* its message */
  int context_error;                   /* with_context, and the context was kept: why */
  uint64_t leaked_host_bytes;          /* pageable host_alloc blocks not freed: reported, freed */
} pl_instance_report;

/* NEW. The owner (named spec->name, kind "stage") and the stage context are
 * created here. *out is the caller's; free it with pl_instance_destroy. */
int pl_instance_create(const pl_instance_spec *spec, pl_instance **out);
/* Releases quietly if not released yet, then frees. NULL: no-op. */
void pl_instance_destroy(pl_instance *in);

/* The one place a state changes. EBB_ESTATE (nothing changes) for a change
 * the diagram above does not draw; the message names the instance, both
 * states and what to do instead. The verbs below use it; a state with no verb
 * yet (PARKED) is entered through it by the code that parked the memory. */
int pl_instance_enter(pl_instance *in, pl_instance_state to);

/* NEW -> RUNNING -> LOADED; on failure back to NEW with the stage's error
 * (message: pl_instance_error). Marks "NAME load" on the ledger. */
int pl_instance_load(pl_instance *in);
/* LOADED or IDLE -> RUNNING -> LOADED, whatever the stage answers (its error
 * is returned; message: pl_instance_error). Marks "NAME run". */
int pl_instance_run(pl_instance *in, const ebb_items *inputs, ebb_items *outputs);
/* LOADED -> IDLE: kept for reuse, evictable. */
int pl_instance_idle(pl_instance *in);
/* Points the stage at the job about to use it: its cancel flag (may be
 * NULL), output directory (borrowed until the next bind) and deadline
 * (CLOCK_MONOTONIC seconds, 0 none). Clears a previous timeout and error. */
void pl_instance_bind(pl_instance *in, const atomic_int *cancel, const char *output_dir,
                      double deadline);

/* Releases the instance: NEW, LOADED, IDLE or PARKED -> RELEASED. In order:
 *   1. drop: the stage's own release (if loaded), then its own callbacks;
 *   2. unload (if loaded); an error it sets goes to rep->unload_error;
 *   3. stage-context cleanup: callbacks it left registered, segments it took
 *      from the driver directly (unattributed: a warning), kernel modules;
 *   4. owner teardown: what the stage did not free is a leak, reported
 *      (`[name] leaked N MiB in M blocks; freed by ebb`) and freed;
 *   5. hand back: trim, pinned pool, and the context when plan->with_context;
 *   6. the driver's free memory before and after, checked (debug line);
 *   7. `[name] released N MiB of GPU memory` when N > 0 and not quiet, with
 *      " (ctx.release_note)" appended when the stage left one (a worker's
 *      death: "worker exited: killed by SIGKILL").
 * plan may be NULL (not quiet, no context); rep may be NULL. Returns 0 once
 * the sequence ran (even when the stage's release or unload failed: the
 * report says so), or EBB_ESTATE without doing anything when the instance is
 * RUNNING or already RELEASED. */
int pl_instance_release(pl_instance *in, const pl_instance_plan *plan, pl_instance_report *rep);

/* Drops what the instance cached and keeps it loaded (the worker
 * protocol's "release"): step 1 of pl_instance_release (the stage's own
 * release, then its own callbacks), then trim and the pinned pool. LOADED or
 * IDLE only (EBB_ESTATE otherwise); the state does not change. rep (may be
 * NULL): released_bytes, callbacks_run/failed, drop_error and the driver's
 * free memory before/after; the rest 0. */
int pl_instance_drop(pl_instance *in, pl_instance_report *rep);

/* Sleep (issue 12): LOADED or IDLE -> PARKED ("asleep"). The drop runs (the
 * stage's release, the registry's callbacks: caches go), then the owner
 * sleeps (mem_owner_sleep: what the stage allocated during its load is its
 * weights and is copied to host memory; every segment it alone uses gives
 * its physical memory back and keeps its address), then trim. *st (may be
 * NULL): device_bytes = bytes handed back (segments parked + trimmed). Line:
 * `[name] asleep: N MiB of GPU memory released, M MiB of weights kept in host
 * memory`. EBB_ESTATE (nothing done) when not LOADED/IDLE: asleep already,
 * not loaded, running. On a failed owner sleep the segments parked so far
 * stay parked and the instance is PARKED anyway (a wake restores them).
 * An isolated stage (the proxy, isolated.h) sleeps by stopping its worker:
 * its exit gives every byte back (device_bytes: what the worker held, its
 * context too), nothing is backed up, and its wake is a load in a new worker
 * (bind the instance first when a job wakes it). */
int pl_instance_sleep(pl_instance *in, mem_sleep_stats *st);
/* PARKED -> LOADED: memory mapped again at the same addresses, the weights
 * copied back, the rest zeroed. A failed wake (out of memory, driver error)
 * leaves it PARKED with its backup (retry, or release it) and returns the
 * error with a message naming the stage. EBB_ESTATE when not asleep. */
int pl_instance_wake(pl_instance *in, mem_sleep_stats *st);

pl_instance_state pl_instance_state_of(const pl_instance *in);
/* 1 from a successful load until the unload (also while RUNNING a run). */
int pl_instance_is_loaded(const pl_instance *in);
const char *pl_instance_name(const pl_instance *in);
const char *pl_instance_pipeline(const pl_instance *in);
const ebb_stage *pl_instance_stage(const pl_instance *in);
const char *pl_instance_options(const pl_instance *in);
/* NULL once released. */
ebb_owner *pl_instance_owner(const pl_instance *in);
/* The stage context (borrowed): error, timeout flag, raw bytes held. */
pl_sctx *pl_instance_ctx(pl_instance *in);
/* The stage's loaded state (NULL when not loaded). */
void *pl_instance_stage_state(const pl_instance *in);
/* The stage's last error message, else the thread's (ebb_errmsg). */
const char *pl_instance_error(pl_instance *in);

#endif
