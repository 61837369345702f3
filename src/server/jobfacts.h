/* A job's facts (include/ebb/events.h), from the queue that makes them:
 * its state changes published once, and the bytes each of its stages handed
 * back, counted from the stages' own release events for the store. */
#ifndef EBB_SERVER_JOBFACTS_H
#define EBB_SERVER_JOBFACTS_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "ebb/events.h"
#include "server/store.h"

/* Publishes EBB_EVENT_JOB: job id (the store's row id; uid its public id) of
 * pipeline on device
 * (NULL: none yet) is now st; code and msg its error (NULL: none);
 * released the bytes it handed back; stages its per-stage bytes (JSON text,
 * NULL until it ends). Strings borrowed. */
void srv_job_publish(int64_t id, const char *uid, const char *pipeline, const char *device,
                     srv_job_state st, const char *code, const char *msg, uint64_t released,
                     const char *stages);

/* The bytes each stage of one running job released on one device: a
 * subscription while the job runs (srv_stage_bytes_begin .. _end). The
 * stage a release belongs to is the one the runner reports running
 * (srv_stage_bytes_progress, an pl_progress_fn) when the stage's own
 * release event names it. */
typedef struct srv_stage_bytes {
  pthread_mutex_t mu;
  ebb_subscription *sub;
  char device[64];
  char stage[128]; /* running now; "" between stages */
  uint64_t bytes;  /* the running stage's, so far */
  json_t *stages;  /* [{"name":S,"released_bytes":N}] of the stages done */
} srv_stage_bytes;

/* 0, or EBB_ENOMEM / EBB_EINVAL. device: the label releases name. */
int srv_stage_bytes_begin(srv_stage_bytes *t, const char *device);
void srv_stage_bytes_progress(void *t, int index, int count, const char *stage, int done);
/* Unsubscribes; answers the stages' JSON text (malloc'd; NULL when out of
 * memory) and frees what begin took. */
char *srv_stage_bytes_end(srv_stage_bytes *t);

#endif
