/* The job queue: jobs accepted by POST /v1/jobs wait here and one worker
 * thread per device runs them through that device's manager, one at a time
 * per device (a GPU runs one burst at a time). The store is updated at
 * each step: running, then succeeded / failed / cancelled with the error,
 * the result (result.json + the files in the job's directory) and the bytes
 * released in all and per stage.
 *
 * Cancel: a queued job is removed and marked cancelled at once; a running
 * job gets its cancel flag set (the stage sees ebb_cancelled(), the runner
 * releases) and ends cancelled. */
#ifndef EBB_SERVER_QUEUE_H
#define EBB_SERVER_QUEUE_H

#include <jansson.h>
#include <stdint.h>

#include "pipeline/manager.h"
#include "server/store.h"

typedef struct srv_queue srv_queue;

typedef struct srv_queue_opts {
  double timeout_s;            /* a job's deadline when its pipeline sets no timeout_s; 0: none */
  double max_wait_s;           /* several devices: a job queued longer reserves the next device that
                        can fit it; any job or item: its longest wait for a device held by
                        other work; <= 0: 60 s */
  double keep_resident_s;      /* a pipeline a job loaded is released (by its policy) once
                             idle this long with no job of it queued, unless its policy
                             gives seconds; 0: 300 s (1e-9: at once); < 0: off, a job
                             runs its pipeline under its release policy and leaves it
                             unloaded */
  void (*on_state)(void *arg); /* after a job starts and after it ends (may be NULL) */
  void *arg;
} srv_queue_opts;

/* Starts one worker per device (ms[i] and allocs[i], borrowed, n of them, at
 * most 16); o may be NULL. One path for any n: each job goes where
 * placement (pipeline/placement.h) sends it (with one device: in the
 * order queued); with residency on (o->keep_resident_s not < 0) it is
 * loaded there first and stays resident, with it off it runs under its
 * release policy and leaves nothing loaded; jobs on different devices run
 * side by side, one at a time per device; a driver error (EBB_EDRIVER,
 * EBB_ENODEV) takes its device out of placement, fails that job naming the
 * device, and the queued jobs go to the others (none left: they fail).
 * A job's deadline (its pipeline's timeout_s, else o->timeout_s) counts its
 * run on the device, not its wait: past it the job is cancelled, released
 * and ends failed with EBB_ETIMEDOUT. Its wait for a device held by other
 * work (a session item, a load) is bounded by o->max_wait_s: past it the
 * job ends failed, unrun, with EBB_EBUSY naming --max-wait. */
int srv_queue_create(srv_store *store, pl_manager *const *ms, mem_allocator *const *allocs,
                     size_t n, const srv_queue_opts *o, srv_queue **out);
/* POST /v1/pipelines/NAME/load (and a session's open): the device index to
 * load on (where it is loaded already, else placement as for a job, waiting
 * for no busy device; fitting nowhere even after asking the other
 * processes, the eligible device with the most free memory, whose manager
 * waits for memory or fails the load). EBB_ENODEV when no device may. */
int srv_queue_place_load(srv_queue *q, const char *pipeline, size_t *index);
/* [{"label","state":"idle"|"running"|"failed","job":ID|null,"error":MSG|null,
 *   "jobs_started":N}] one per device (new reference). */
json_t *srv_queue_devices_json(srv_queue *q);
/* Stops the running job and puts it back in the store as queued (it did not
 * fail: a later server runs it, like the ones still queued), joins the
 * worker. NULL: no-op. */
void srv_queue_destroy(srv_queue *q);
/* id: the store's row id; uid: the job's public id (its events name it);
 * owner: the token's owner tag that submitted it (the per-token limits);
 * bytes: what its files hold on disk while it waits. Strings and options:
 * borrowed (copied). */
int srv_queue_push(srv_queue *q, int64_t id, const char *uid, const char *owner, uint64_t bytes,
                   const char *pipeline, const char *input, const char *outdir, json_t *options);
/* The error of work (what: "job", "item") that a limit of lim ended
 * (res->over_deadline: its run's deadline, from names where it comes from;
 * res->over_wait: its wait for device, --max-wait), into buf. */
void srv_deadline_message(const char *what, const char *device, const pl_run_limits *lim,
                          const char *from, const pl_job_result *res, char *buf, size_t n);

/* The jobs waiting to run (not the running ones) and the bytes their files
 * hold, in all and of
 * owner (may be NULL): the fair limits (--max-queued-per-token,
 * --queued-bytes, --queued-bytes-per-token). */
typedef struct srv_queue_use {
  size_t jobs, owner_jobs;
  uint64_t bytes, owner_bytes;
} srv_queue_use;
void srv_queue_usage(srv_queue *q, const char *owner, srv_queue_use *out);
/* EBB_ENOTFOUND when the job is neither queued nor running here. *running:
 * 1 when the job was running (it ends cancelled shortly). */
int srv_queue_cancel(srv_queue *q, int64_t id, int *running);

#endif
