/* Isolated stages: a proxy stage vtable that runs the real stage in a worker
 * process (ebb-worker, or any executable that speaks docs/worker-protocol.md)
 * through the worker room (src/worker/).
 *
 * The runner instantiates the proxy instead of the real stage when a stage
 * entry has "isolate": true or "worker": PATH. The proxy's options are the
 * spec built by pl_isolated_spec; its load starts the worker (hello, load),
 * run ships the job's items over (payloads in shared memory) and adds the
 * outputs, release asks the worker to drop its caches, unload tells it to
 * exit and reaps it (SIGKILL after a grace period). What the worker held on
 * the device (its allocations and its context) is measured as the worker
 * process's usage just before it is told to release (NVML per-process usage;
 * else the driver's free-memory delta; on the CPU device what the worker
 * reports) and counted, when its exit gives it back, in the stage context's
 * raw_freed: memory taken from the driver outside this process's allocator,
 * handed back, so the runner's "[a] released N MiB" line includes it.
 *
 * Files: load's output_dir is the worker's private load directory
 * (ROOT/NAME-XXXXXX, 0700; ROOT the stage context's scratch_dir, else
 * $TMPDIR, else /tmp), made before the worker starts and removed with what
 * is in it once the worker has exited; each run's is the bound job's.
 *
 * A worker that crashes, hangs past the deadline (timeout_s, else
 * $EBB_WORKER_TIMEOUT_S, else 300 s), closes early or speaks garbage makes
 * load/run fail with a message naming the worker's pid and what happened;
 * the worker is killed and reaped, never left behind. */
#ifndef EBB_PIPELINE_ISOLATED_H
#define EBB_PIPELINE_ISOLATED_H

#include <jansson.h>

#include "pipeline/config.h"
#include "pipeline/stage_api.h"

/* The proxy vtable (static storage), registry name "isolated". */
const ebb_stage *pl_isolated_stage(void);

/* The proxy's options for stage entry d: {"stage", "options" (merged, new
 * reference taken), "version" (the real stage's, 0 for a "worker" entry),
 * "worker", "worker_args"}. Returns a new reference or NULL (out of
 * memory). real: the registered stage, NULL for a "worker" entry. */
json_t *pl_isolated_spec(const pl_stage_def *d, const ebb_stage *real, json_t *merged);

/* The worker's peak device bytes as it last reported them (state: the
 * proxy's loaded state). */
uint64_t pl_isolated_peak(const void *state);
/* Its peak host bytes likewise ("host_peak_bytes"; 0 from a worker that does
 * not say). */
uint64_t pl_isolated_host_peak(const void *state);
/* The worker's pid, 0 when none runs. */
long pl_isolated_pid(const void *state);

/* Sleep in the worker (docs/worker-protocol.md, "sleep"): 1 when its hello
 * offered it and it runs. pl_isolated_sleep asks it to put its device
 * memory in host memory, keeping the addresses, and give the device memory
 * back (its context stays: the process lives on); *released is what the
 * worker process's usage dropped (NVML; else what it reports), *backup the
 * bytes it keeps in host memory. pl_isolated_wake asks it to map them back
 * (*restored: the bytes it says it restored). Errors fail like a run's. */
int pl_isolated_can_sleep(const void *state);
int pl_isolated_sleep(ebb_stage_ctx *ctx, void *state, uint64_t *released, uint64_t *backup);
int pl_isolated_wake(ebb_stage_ctx *ctx, void *state, uint64_t *restored);


#endif
