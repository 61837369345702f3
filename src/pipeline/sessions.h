/* Sessions: clients that hold a counted lease on a loaded pipeline and run
 * items through it one at a time (POST /v1/sessions/ID/items).
 *
 * A session is open (takes items), stopping/stopped (its pipeline is being or
 * was unloaded: new items are refused with EBB_EBUSY, items in flight finish)
 * or gone (closed). The table only counts; the manager (manager.h) decides
 * what a lease means (the pipeline stays loaded while a session holds it)
 * and drains sessions before an unload.
 *
 * Threads: every function may be called from any thread (one mutex, one
 * condition variable for the drain). */
#ifndef EBB_PIPELINE_SESSIONS_H
#define EBB_PIPELINE_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "ebb/error.h"

typedef struct pl_sessions pl_sessions;

typedef enum { EBB_SESSION_OPEN = 0, EBB_SESSION_STOPPED = 1 } pl_session_state;

typedef struct pl_session_info {
  char id[40];
  char pipeline[128];
  pl_session_state state;
  char stop_reason[256]; /* why it stopped ("pipeline A was unloaded") */
  int inflight;          /* items running now (0 or 1) */
  uint64_t items_done, items_failed;
  double created; /* CLOCK_REALTIME seconds */
} pl_session_info;

/* *out is owned by the caller. */
int pl_sessions_create(pl_sessions **out);
/* Frees the table (callers must have drained it). NULL: no-op. */
void pl_sessions_destroy(pl_sessions *s);

/* Opens a session holding a lease on pipeline; id (>= 40 bytes) gets its id. */
int pl_sessions_open(pl_sessions *s, const char *pipeline, char *id);
/* Stops the session, waits for its item in flight, removes it.
 * EBB_ENOTFOUND for an unknown id. */
int pl_sessions_close(pl_sessions *s, const char *id);
/* Starts an item: EBB_ENOTFOUND (unknown id), EBB_EBUSY (stopped, or an item
 * is already in flight: one item at a time per session). pipeline (>= 128
 * bytes) gets the session's pipeline. Pair with pl_sessions_item_end. */
int pl_sessions_item_begin(pl_sessions *s, const char *id, char *pipeline);
void pl_sessions_item_end(pl_sessions *s, const char *id, int failed);
/* Stops every open session on pipeline (reason is copied into each), then
 * waits until none of them has an item in flight. *stopped (may be NULL):
 * how many were stopped. Stopped sessions keep no lease. */
int pl_sessions_stop_pipeline(pl_sessions *s, const char *pipeline, const char *reason,
                              int *stopped);
/* Open sessions (leases) on pipeline; NULL: on any pipeline. */
int pl_sessions_leases(pl_sessions *s, const char *pipeline);
int pl_sessions_info(pl_sessions *s, const char *id, pl_session_info *out);
/* Stops every session and waits for their items (server shutdown). */
void pl_sessions_stop_all(pl_sessions *s, const char *reason);

#endif
