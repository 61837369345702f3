/* GET /v1/events: the server's live picture as Server-Sent Events (the
 * format and every event are in docs/api.md, "GET /v1/events").
 *
 * One publisher thread wakes every interval and turns what changed into
 * events: every device's allocator ledger (allocations aggregated per owner
 * per interval with the device's driver numbers, releases with the bytes the
 * driver got back, marks, leaks with their allocation sites; each event names
 * its device; an asleep owner's parked bytes are told apart), pipeline and
 * session state, and the state of the jobs it watches. Each event is
 * formatted once and appended to every client's bounded buffer; a client
 * whose buffer would overflow (a reader slower than the events) gets one
 * last `dropped` event and its stream ends, so no client can make the
 * server buffer without bound. The number of clients is capped (503 beyond).
 * A new client first gets `hello` (the current state) and the last minutes
 * of events, then the live ones.
 *
 * Threads: every function may be called from any thread. The streams are
 * written from libmicrohttpd's connection threads (one per connection), which
 * wait on the client's condition variable between events. */
#ifndef EBB_SERVER_EVENTS_H
#define EBB_SERVER_EVENTS_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/memory.h"
#include "pipeline/manager.h"
#include "server/store.h"

typedef struct ebb_events ebb_events;

typedef struct ebb_events_opts {
  uint32_t size;          /* sizeof(ebb_events_opts) */
  ebb_manager *manager;   /* borrowed: device 0's (pipelines' definitions) */
  ebb_allocator *alloc;   /* borrowed (the manager's) */
  ebb_manager **managers; /* borrowed: one per device (ebb serve --devices); NULL:
                             manager and alloc are the only device */
  ebb_allocator **allocs; /* borrowed: managers[i]'s allocator */
  size_t ndevices;        /* entries of managers and allocs */
  ebb_store *store;       /* borrowed: job states */
  int interval_ms;        /* aggregation interval; 0: 500 (env EBB_EVENTS_INTERVAL_MS) */
  int max_clients;        /* 0: 256 (env EBB_EVENTS_MAX_CLIENTS) */
  size_t client_buffer;   /* bytes queued per client before it is dropped;
                             0: 256 KiB (env EBB_EVENTS_CLIENT_BUFFER) */
  int history_s;          /* seconds of events a new client is sent; 0: 300 */
} ebb_events_opts;

/* Starts the publisher thread. *out owned by the caller. */
int ebb_events_create(const ebb_events_opts *o, ebb_events **out);
/* Ends every stream and joins the publisher; call before the HTTP daemon
 * joins its connection threads and before the store and manager go.
 * Idempotent; NULL: no-op. */
void ebb_events_stop(ebb_events *e);
/* Stops (if not yet) and frees. Streams must have ended (the daemon stopped).
 * NULL: no-op. */
void ebb_events_destroy(ebb_events *e);

/* Answers GET /v1/events on c: a stream, or 503 too_many_clients. */
enum MHD_Result ebb_events_serve(ebb_events *e, struct MHD_Connection *c);

/* Watch a job (queued now): its state changes become `job` events. */
void ebb_events_watch_job(ebb_events *e, int64_t id);
/* Watch a session (opened now) until it is closed. */
void ebb_events_watch_session(ebb_events *e, const char *id);

/* Counters for tests and the bench: clients now, clients dropped as too
 * slow, events published. */
typedef struct ebb_events_stats {
  int clients;
  uint64_t dropped, published;
} ebb_events_stats;
void ebb_events_get_stats(ebb_events *e, ebb_events_stats *out);

#endif
