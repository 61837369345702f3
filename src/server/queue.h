/* The job queue: jobs accepted by POST /v1/jobs wait here (FIFO) and one
 * worker thread runs them one at a time through the manager (a GPU runs one
 * burst at a time; the runner serialises anyway). The store is updated at
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

typedef struct ebb_queue ebb_queue;

typedef struct ebb_queue_opts {
  double timeout_s; /* a job's deadline when its pipeline sets no timeout_s; 0: none */
  void (*on_state)(void *arg); /* after a job starts and after it ends (may be NULL) */
  void *arg;
} ebb_queue_opts;

/* Starts the worker. store, manager and alloc are borrowed; o may be NULL.
 * A job past its deadline (its pipeline's timeout_s, else o->timeout_s) is
 * cancelled, released and ends failed with EBB_ETIMEDOUT. */
int ebb_queue_create(ebb_store *store, ebb_manager *m, ebb_allocator *alloc,
                     const ebb_queue_opts *o, ebb_queue **out);
/* Stops the running job and puts it back in the store as queued (it did not
 * fail: a later server runs it, like the ones still queued), joins the
 * worker. NULL: no-op. */
void ebb_queue_destroy(ebb_queue *q);
/* options: borrowed (copied). */
int ebb_queue_push(ebb_queue *q, int64_t id, const char *pipeline, const char *input,
                   const char *outdir, json_t *options);
/* EBB_ENOTFOUND when the job is neither queued nor running here. *running:
 * 1 when the job was running (it ends cancelled shortly). */
int ebb_queue_cancel(ebb_queue *q, int64_t id, int *running);

#endif
