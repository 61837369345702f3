/* The HTTP server behind `ebb serve`: the API of DESIGN.md ("HTTP API") over
 * libmicrohttpd (one thread per connection: a session item or a load answers
 * when it is done), the job store (store.h) and the job queue (queue.h). The
 * routes, bodies and errors are documented in docs/api.md. Every error is
 *   {"error": {"code": "...", "message": "..."}}
 * with a 4xx/5xx status; a bad request never stops the server or changes
 * another job. */
#ifndef EBB_SERVER_SERVER_H
#define EBB_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/manager.h"

typedef struct ebb_server ebb_server;

typedef struct ebb_server_opts {
  uint32_t size;          /* sizeof(ebb_server_opts) */
  const char *listen;     /* "HOST:PORT" (PORT 0: any free port) */
  const char *data_dir;   /* jobs.db, jobs/ID/, sessions/ID/, uploads/ (created) */
  ebb_manager *manager;   /* borrowed */
  ebb_allocator *alloc;   /* borrowed (the manager's) */
  size_t max_json_bytes;  /* a JSON body larger than this is 413; 0: 1 MiB */
  size_t max_upload_bytes;/* an upload larger than this is 413; 0: 1 GiB */
  void (*on_listen)(const char *url); /* called once bound, before any log line */
} ebb_server_opts;

/* Opens the store (jobs a previous server left running become failed; queued
 * ones are queued again), starts the worker and the HTTP daemon. *out owned
 * by the caller. Errors name the address or the path. */
int ebb_server_start(const ebb_server_opts *o, ebb_server **out);
/* "http://HOST:PORT" with the port actually bound. */
const char *ebb_server_url(const ebb_server *s);
/* Stops accepting connections, cancels the running job and session items,
 * waits for the connection threads and the worker, closes the store (the
 * manager is the caller's). NULL: no-op. */
void ebb_server_stop(ebb_server *s);

#endif
