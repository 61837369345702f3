/* GET /v1/events: the server's live picture as Server-Sent Events (the
 * format and every event are in docs/api.md, "GET /v1/events").
 *
 * The picture is made of facts, not of logs: it subscribes to ebb's event
 * bus (include/ebb/events.h) for the facts the code that makes them
 * publishes (a stage released, a leak with its allocation sites, a job's
 * state, a pipeline loaded, unloaded, asleep or awake, a session's change,
 * a device lost) and reads each device's allocator ledger for the memory
 * timeline (per-owner bytes per interval, marks, parked owners). One
 * publisher thread turns them into events every interval (sooner when a
 * fact comes); sse.h carries them to the clients, buffered for
 * Last-Event-ID. A new client's `hello` holds the current state, its jobs
 * the newest the store holds (the one time the store is read).
 *
 * Threads: every function may be called from any thread. */
#ifndef EBB_SERVER_EVENTS_H
#define EBB_SERVER_EVENTS_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/memory.h"
#include "pipeline/manager.h"
#include "server/store.h"

typedef struct srv_events srv_events;

typedef struct srv_events_opts {
  uint32_t size;          /* sizeof(srv_events_opts) */
  pl_manager *manager;    /* borrowed: device 0's (pipelines' definitions) */
  mem_allocator *alloc;   /* borrowed (the manager's) */
  pl_manager **managers;  /* borrowed: one per device (ebb serve --devices); NULL:
                             manager and alloc are the only device */
  mem_allocator **allocs; /* borrowed: managers[i]'s allocator */
  size_t ndevices;        /* entries of managers and allocs */
  srv_store *store;       /* borrowed: the jobs a new client's hello lists */
  int interval_ms;        /* aggregation interval; 0: 500 (env EBB_EVENTS_INTERVAL_MS) */
  int max_clients;        /* 0: 256 (env EBB_EVENTS_MAX_CLIENTS) */
  size_t client_buffer;   /* bytes queued per client before it is dropped;
                             0: 256 KiB (env EBB_EVENTS_CLIENT_BUFFER) */
  int history_s;          /* seconds of events kept (new clients, Last-Event-ID); 0: 300 */
} srv_events_opts;

/* Subscribes to the bus and starts the publisher thread. *out owned by the
 * caller. */
int srv_events_create(const srv_events_opts *o, srv_events **out);
/* Unsubscribes, ends every stream and joins the publisher; call before the
 * HTTP daemon joins its connection threads and before the store and
 * manager go. Idempotent; NULL: no-op. */
void srv_events_stop(srv_events *e);
/* Stops (if not yet) and frees. Streams must have ended (the daemon
 * stopped). NULL: no-op. */
void srv_events_destroy(srv_events *e);

/* Answers GET /v1/events on c: a stream (resumed after Last-Event-ID when
 * it can be), or 503 too_many_clients. */
enum MHD_Result srv_events_serve(srv_events *e, struct MHD_Connection *c);

#endif
