/* The job store: one SQLite database (DATA_DIR/jobs.db, WAL mode) holding
 * every job the server accepted: id, pipeline, input path, options JSON,
 * state (queued | running | succeeded | failed | cancelled), timestamps
 * (unix seconds), error code/message, result JSON, output directory, bytes
 * released in all and per stage (JSON).
 *
 * Opening a store marks the jobs a previous process left running as failed
 * ("server restarted"); queued jobs stay queued (ebb_store_queued lists them
 * so the server can queue them again).
 *
 * Threads: one connection guarded by a mutex; every function may be called
 * from any thread. */
#ifndef EBB_SERVER_STORE_H
#define EBB_SERVER_STORE_H

#include <jansson.h>
#include <stdint.h>

#include "ebb/error.h"

typedef struct ebb_store ebb_store;

typedef enum {
  EBB_JOB_QUEUED,
  EBB_JOB_RUNNING,
  EBB_JOB_SUCCEEDED,
  EBB_JOB_FAILED,
  EBB_JOB_CANCELLED,
  EBB_JOB_NSTATES
} ebb_job_state;
const char *ebb_job_state_name(ebb_job_state s);

/* path: the database file (created). *interrupted (may be NULL): jobs found
 * running and marked failed. *out owned by the caller. Errors: EBB_EIO with
 * SQLite's message and the path. */
int ebb_store_open(const char *path, ebb_store **out, int *interrupted);
void ebb_store_close(ebb_store *s); /* NULL: no-op */

/* A new queued job; *id gets its id (> 0). options: a JSON text or NULL. */
int ebb_store_insert(ebb_store *s, const char *pipeline, const char *input,
                     const char *options, int64_t *id);
int ebb_store_set_input(ebb_store *s, int64_t id, const char *input, const char *outdir);
int ebb_store_set_running(ebb_store *s, int64_t id);
/* Final state with its error (code NULL when none), result JSON text
 * (may be NULL), released bytes in all and per stage (JSON text). */
int ebb_store_finish(ebb_store *s, int64_t id, ebb_job_state state, const char *err_code,
                     const char *err_msg, const char *result, uint64_t released,
                     const char *released_stages);
/* EBB_ENOTFOUND for an unknown id. *out: a new object with every field. */
int ebb_store_get(ebb_store *s, int64_t id, json_t **out);
int ebb_store_state(ebb_store *s, int64_t id, ebb_job_state *state);
/* Jobs per state (counts[EBB_JOB_NSTATES]). */
int ebb_store_counts(ebb_store *s, uint64_t *counts);
/* Ids of queued jobs, oldest first (*ids: malloc'd, caller frees). */
int ebb_store_queued(ebb_store *s, int64_t **ids, size_t *n);

#endif
