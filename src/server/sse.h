/* Server-Sent Events: the transport under GET /v1/events (events.h says
 * what is sent; docs/api.md, "GET /v1/events", the format).
 *
 * Every event gets the next id (`id:` line; ids start at the server's start
 * time in microseconds, so they keep growing across restarts) and is kept
 * in a bounded buffer: the last `buffer_events` events (default 4096, env
 * EBB_EVENTS_BUFFER), none older than `history_s`. Each is formatted once
 * and appended to every client's own bounded queue; a client whose queue
 * would pass `client_buffer` bytes (a reader slower than the events) gets
 * one last `dropped` event and its stream ends. The number of clients is
 * capped (503 beyond).
 *
 * A new client gets `hello` (the current state, from the hello callback;
 * its id is that of the last event it reflects), then the buffered events
 * marked for replay, then the live ones. A client that reconnects with
 * `Last-Event-ID: N` (the header browsers send) gets, instead, every buffered
 * event after N and no hello, when N is still in the buffer; when it is not
 * (older than the buffer, from another server, unreadable, or the missed
 * events are more than 512 KiB) it gets a fresh hello, as a new client.
 *
 * Threads: every function may be called from any thread. The streams are
 * written from libmicrohttpd's connection threads (one per connection),
 * which wait on the client's condition variable between events. */
#ifndef EBB_SERVER_SSE_H
#define EBB_SERVER_SSE_H

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_sse srv_sse;

/* The data of a new client's `hello` (a new reference; NULL: out of memory).
 * Called with no lock of the transport held. */
typedef json_t *(*srv_sse_hello_fn)(void *ctx);

typedef struct srv_sse_opts {
  int max_clients;      /* 0: 256 (env EBB_EVENTS_MAX_CLIENTS) */
  size_t client_buffer; /* bytes queued per client before it is dropped; 0: 256 KiB
                            (env EBB_EVENTS_CLIENT_BUFFER) */
  size_t buffer_events; /* events kept for replay and Last-Event-ID; 0: 4096
                            (env EBB_EVENTS_BUFFER; 16 to 65536) */
  int history_s;        /* the oldest event kept, seconds; 0: 300 */
  srv_sse_hello_fn hello;
  void *hello_ctx;
} srv_sse_opts;

/* *out owned by the caller. */
int srv_sse_create(const srv_sse_opts *o, srv_sse **out);
/* Ends every stream (they return end-of-stream); later sends are dropped.
 * Idempotent; NULL: no-op. */
void srv_sse_stop(srv_sse *s);
/* Streams must have ended (the daemon stopped). NULL: no-op. */
void srv_sse_destroy(srv_sse *s);

/* Sends `event: name` with data o (taken) to every client under the next
 * id and keeps it in the buffer; replay: a new client gets it too after
 * its hello (state changes, samples), else only clients that resume. */
void srv_sse_send(srv_sse *s, const char *name, json_t *o, int replay);

/* Answers GET /v1/events on c: a stream, or 503 too_many_clients. */
enum MHD_Result srv_sse_serve(srv_sse *s, struct MHD_Connection *c);


#endif
