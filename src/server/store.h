/* The job store: one SQLite database (DATA_DIR/jobs.db, WAL mode) holding
 * every job the server accepted: id, pipeline, input path, options JSON,
 * state (queued | running | succeeded | failed | cancelled), timestamps
 * (unix seconds), error code/message, result JSON, output directory, bytes
 * released in all and per stage (JSON).
 *
 * Opening a store marks the jobs a previous process left running as failed
 * ("server restarted"); queued jobs stay queued (srv_store_queued lists them
 * so the server can queue them again).
 *
 * Threads: one connection guarded by a mutex; every function may be called
 * from any thread. */
#ifndef EBB_SERVER_STORE_H
#define EBB_SERVER_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ebb/error.h"

typedef struct srv_store srv_store;

typedef enum {
  EBB_JOB_QUEUED,
  EBB_JOB_RUNNING,
  EBB_JOB_SUCCEEDED,
  EBB_JOB_FAILED,
  EBB_JOB_CANCELLED,
  EBB_JOB_NSTATES
} srv_job_state;
const char *srv_job_state_name(srv_job_state s);

/* path: the database file (created). *interrupted (may be NULL): jobs found
 * running and marked failed. *out owned by the caller. Errors: EBB_EIO with
 * SQLite's message and the path. */
int srv_store_open(const char *path, srv_store **out, int *interrupted);
void srv_store_close(srv_store *s); /* NULL: no-op */

/* A new queued job; *id gets its row id (> 0). uid: its public id (the one
 * GET /v1/jobs/ID takes, 128 random bits); owner: the token tag that made it
 * ("" without tokens). options: a JSON text or NULL. */
int srv_store_insert(srv_store *s, const char *uid, const char *owner, const char *pipeline,
                     const char *input, const char *options, int64_t *id);
/* The row id and owner of a public id; EBB_ENOTFOUND. */
int srv_store_find(srv_store *s, const char *uid, int64_t *id, char *owner, size_t n);
/* A job the server stopped while it ran goes back to queued. */
int srv_store_requeue(srv_store *s, int64_t id);
/* Deletes finished jobs beyond the newest keep (0: no count limit) or
 * finished more than max_age_s ago (0: no age limit); fn sees each one's
 * output directory first. Returns how many, or a negative code. */
typedef void (*srv_store_prune_fn)(void *arg, int64_t id, const char *output_dir);
int srv_store_prune(srv_store *s, uint64_t keep, double max_age_s, srv_store_prune_fn fn,
                    void *arg);
int srv_store_set_input(srv_store *s, int64_t id, const char *input, const char *outdir);
int srv_store_set_running(srv_store *s, int64_t id);
/* Final state with its error (code NULL when none), result JSON text
 * (may be NULL), released bytes in all and per stage (JSON text). */
int srv_store_finish(srv_store *s, int64_t id, srv_job_state state, const char *err_code,
                     const char *err_msg, const char *result, uint64_t released,
                     const char *released_stages);
/* EBB_ENOTFOUND for an unknown id. *out: a new object with every field
 * ("id" is the public id). */
int srv_store_get(srv_store *s, int64_t id, json_t **out);
int srv_store_state(srv_store *s, int64_t id, srv_job_state *state);
/* Jobs per state (counts[EBB_JOB_NSTATES]). */
int srv_store_counts(srv_store *s, uint64_t *counts);
/* Ids of queued jobs, oldest first (*ids: malloc'd, caller frees). */
int srv_store_queued(srv_store *s, int64_t **ids, size_t *n);
/* Ids of the newest max jobs the store holds (whatever --keep-jobs pruned is
 * gone), oldest first (*ids: malloc'd, caller frees; NULL when none). */
int srv_store_newest(srv_store *s, size_t max, int64_t **ids, size_t *n);

#endif
