/* A job's facts (include/ebb/events.h), from the queue that makes them:
 * its state changes published once, and the bytes each of its stages handed
 * back, as the runner counts them, for the store. */
#ifndef EBB_SERVER_JOBFACTS_H
#define EBB_SERVER_JOBFACTS_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "ebb/events.h"
#include "pipeline/manager.h"
#include "server/store.h"

/* Publishes EBB_EVENT_JOB: job id (the store's row id; uid its public id) of
 * pipeline on device
 * (NULL: none yet) is now st; code and msg its error (NULL: none);
 * released the bytes it handed back; stages its per-stage bytes (JSON text,
 * NULL until it ends). Strings borrowed. */
void srv_job_publish(int64_t id, const char *uid, const char *pipeline, const char *device,
                     srv_job_state st, const char *code, const char *msg, uint64_t released,
                     const char *stages);

/* The bytes each stage of one running job released, as the runner counts
 * them (pl_manager_stage_released at each stage's end: the stage's own
 * release facts), for the job's record and its last event. */
typedef struct srv_stage_bytes {
  pl_manager *m;  /* the job's device's */
  json_t *stages; /* [{"name":S,"released_bytes":N}] of the stages done; NULL: out of memory */
} srv_stage_bytes;

void srv_stage_bytes_begin(srv_stage_bytes *t, pl_manager *m);
/* A pl_progress_fn (arg: the srv_stage_bytes), for pl_manager_run_job. */
void srv_stage_bytes_progress(void *t, int index, int count, const char *stage, int done);
/* The stages' JSON text (malloc'd; NULL when out of memory); frees what
 * begin took. */
char *srv_stage_bytes_end(srv_stage_bytes *t);

#endif
