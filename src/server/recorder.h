/* The recorder: the store's writes for the queue's jobs, in order, on a
 * thread of their own (recorder.c).
 *
 * A store write commits (fsync): a job's end written by the device's worker
 * kept the device idle for the disk before its next job (about 15 ms a job
 * on a busy disk, up to 100 ms, of a 500 ms job). One thread writes the ends
 * (and requeues) in order instead, each followed by its log line and
 * on_state, so the log never runs ahead of the store; the device starts its
 * next job meanwhile. A job's "running" is written before it runs, by the
 * worker (srv_record_running). srv_recorder_stop drains the recorder. */
#ifndef EBB_SERVER_RECORDER_H
#define EBB_SERVER_RECORDER_H

#include <stdint.h>

#include "server/store.h"

typedef struct srv_recorder srv_recorder;

/* Starts the recorder thread over store (borrowed); on_state (may be NULL)
 * is called with arg after each write but a requeue. EBB_ENOMEM when the
 * thread cannot start. */
int srv_recorder_start(srv_store *store, void (*on_state)(void *arg), void *arg,
                       srv_recorder **out);
/* Makes every write handed over so far, joins the thread, frees r. Call it
 * once nothing hands writes over any more. NULL: no-op. */
void srv_recorder_stop(srv_recorder *r);
/* Job id is running, written here and now (the worker's thread), then
 * logged "job ID: running pipeline 'P' on LABEL". */
void srv_record_running(srv_recorder *r, int64_t id, const char *pipeline, const char *label);
/* Job id goes back to queued (the server's stop), logged as such. */
void srv_record_requeue(srv_recorder *r, int64_t id);
/* A job's end: its state, error (code, msg), result and released bytes in
 * all and per stage (strings borrowed, copied; may be NULL), logged as
 * "job ID: STATE[: msg]". */
void srv_record_finish(srv_recorder *r, int64_t id, srv_job_state st, const char *code,
                       const char *msg, const char *result, uint64_t released, const char *stages);
/* Waits until the recorder has made every write handed to it so far. */
void srv_record_flush(srv_recorder *r);

#endif
