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

/* Starts the worker. store, manager and alloc are borrowed. */
int ebb_queue_create(ebb_store *store, ebb_manager *m, ebb_allocator *alloc, ebb_queue **out);
/* Cancels the running job, leaves queued ones queued in the store (a later
 * server runs them), joins the worker. NULL: no-op. */
void ebb_queue_destroy(ebb_queue *q);
/* options: borrowed (copied). */
int ebb_queue_push(ebb_queue *q, int64_t id, const char *pipeline, const char *input,
                   const char *outdir, json_t *options);
/* EBB_ENOTFOUND when the job is neither queued nor running here. *running:
 * 1 when the job was running (it ends cancelled shortly). */
int ebb_queue_cancel(ebb_queue *q, int64_t id, int *running);

#endif
