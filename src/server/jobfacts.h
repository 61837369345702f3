/* A job's facts (include/ebb/events.h), from the queue that makes them:
 * its state changes published once, and the bytes each of its stages handed
 * back and its peak, as the runner counted them (pl_job_result), for the
 * store and the fact. */
#ifndef EBB_SERVER_JOBFACTS_H
#define EBB_SERVER_JOBFACTS_H

#include <stdint.h>

#include "ebb/events.h"
#include "pipeline/runner.h"
#include "server/store.h"

/* Publishes EBB_EVENT_JOB: job id (the store's row id; uid its public id) of
 * pipeline on device
 * (NULL: none yet) is now st; code and msg its error (NULL: none);
 * released the bytes it handed back; stages its per-stage bytes (JSON text,
 * NULL until it ends). Strings borrowed. */
void srv_job_publish(int64_t id, const char *uid, const char *pipeline, const char *device,
                     srv_job_state st, const char *code, const char *msg, uint64_t released,
                     const char *stages);

/* The runner's figures for each stage of a finished job (res->stages) as
 * JSON text (malloc'd; NULL when out of memory): [{"name":S,
 * "released_bytes":N}] for the store (GET /v1/jobs/ID), with "peak_bytes"
 * (N, or null when not measured) when peaks, for the job's fact. */
char *srv_job_stages_json(const pl_job_result *res, int peaks);

#endif
