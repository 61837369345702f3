/* The HTTP server behind `ebb serve`: the HTTP API of docs/api.md over
 * libmicrohttpd (one thread per connection: a session item or a load answers
 * when it is done), the job store (store.h) and the job queue (queue.h). The
 * routes, bodies and errors are documented in docs/api.md. Every error is
 *   {"error": {"code": "...", "message": "..."}}
 * with a 4xx/5xx status; a bad request never stops the server or changes
 * another job. */
#ifndef EBB_SERVER_SERVER_H
#define EBB_SERVER_SERVER_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "pipeline/manager.h"

typedef struct srv_server srv_server;

/* DATA_DIR/EBB_SERVER_SCRATCH: the managers' scratch_dir (isolated stages'
 * private load directories); the server empties it at start, once it holds
 * the data directory's lock (what is there was left by a killed server). */
#define EBB_SERVER_SCRATCH "scratch"

typedef struct srv_opts {
  uint32_t size;        /* sizeof(srv_opts) */
  const char *listen;   /* "HOST:PORT" (PORT 0: any free port) */
  const char *data_dir; /* jobs.db, jobs/ID/, sessions/ID/, uploads/, scratch/ (created) */
  pl_manager *manager;  /* borrowed */
  mem_allocator *alloc; /* borrowed (the manager's) */
  /* Several devices (ebb serve --devices): one manager and allocator per
   * device, borrowed; managers[0] is manager. ndevices 0: manager alone. */
  pl_manager *const *managers;
  mem_allocator *const *allocs;
  size_t ndevices;
  double max_wait_s;       /* a queued job waiting longer reserves a device: 60 */
  double keep_resident_s;  /* an idle job-loaded pipeline goes; 0: 300 with several
                              devices, off with one (jobs leave nothing loaded) */
  size_t max_json_bytes;   /* a JSON body larger than this is 413; 0: 1 MiB */
  size_t max_upload_bytes; /* a request with an upload larger than this is 413; 0: 1 GiB */
  void (*on_listen)(const char *url); /* called once bound, before any log line */
  /* Who may call (docs/api.md, "Security"). A non-loopback listen address
   * without a token is refused (EBB_EINVAL). */
  const char *token_file;         /* lines `TOKEN [admin|submit]`; NULL: none */
  const char *token;              /* EBB_TOKEN (admin); NULL or "": none */
  int metrics_public;             /* /metrics without a token */
  const char *const *allow_hosts; /* more names the Host header may give */
  size_t nallow_hosts;
  /* Origins a browser request may come from besides the server's own
   * (scheme http, the Host header's host, the bound port) */
  const char *const *allow_origins;
  size_t nallow_origins;
  const char *const *input_dirs; /* JSON jobs may name files under these */
  size_t ninput_dirs;
  /* Limits; 0 takes the default. */
  size_t max_field_bytes;      /* a multipart field other than the file: 1 MiB */
  size_t max_lyrics_bytes;     /* lyrics sent with a job or session item (413 beyond): 256 KiB */
  unsigned max_connections;    /* in all: 1024 (capped by RLIMIT_NOFILE) */
  unsigned max_per_ip;         /* from one address: 64 */
  double idle_timeout_s;       /* a connection with no traffic: 60 */
  double header_timeout_s;     /* headers complete after accept / the last answer: 10 */
  double min_body_rate;        /* bytes/s a body averages after header_timeout_s: 4096 */
  size_t max_queued;           /* jobs waiting to run; beyond it 429: 10000 */
  size_t max_queued_per_token; /* of them, one token's; beyond it 429: 1000 */
  uint64_t queued_bytes;       /* files the waiting jobs keep on disk; beyond 507: 32 GiB */
  uint64_t queued_bytes_per_token; /* of them, one token's; beyond it 429: 8 GiB */
  double job_timeout_s;            /* a job's deadline (a pipeline's timeout_s wins): 1 day */
  /* A job whose stages' estimated work (CPU seconds, pipeline/work.h) is
   * over this is refused at submit: >0 this many seconds; 0 (the default)
   * the job's timeout (the pipeline's timeout_s, else job_timeout_s); <0 no
   * refusal by estimate. */
  double max_job_s;
  uint64_t keep_jobs;                     /* keep the newest N finished jobs: all */
  double keep_jobs_s;                     /* keep finished jobs this long: forever */
  const struct srv_cluster_opts *cluster; /* --queue redis://...: NULL: SQLite, one node */
  /* The broker (docs/broker.md, srv_broker_start below): set, POST
   * /v1/memory/reclaim asks the peers (srv_broker_reclaim) and /metrics
   * shows the ebb_broker_* families; 0: the endpoint answers 503, no
   * families. */
  int broker;
} srv_opts;

/* Locks the data directory (EBB_EBUSY naming the holder's pid when another
 * server has it), removes partial uploads, opens the store (jobs a previous
 * server left running become failed; queued ones are queued again), starts
 * the worker and the HTTP daemon. *out owned by the caller. Errors name the
 * address or the path. */
int srv_start(const srv_opts *o, srv_server **out);
/* Once a second from the serve loop: --keep-jobs retention. */
void srv_tick(srv_server *s);
/* Stops accepting connections, stops the running job and puts it back in
 * the queue (a later server runs it), cancels session items, waits for the
 * connection threads and the worker, closes the store (the manager is the
 * caller's). NULL: no-op. */
void srv_stop(srv_server *s);

/* --- "broker_peer.c": ebb serve as a broker peer (docs/broker.md) ---------- */
struct brk_peer;
struct pl_manager;
struct dev_device;
typedef struct srv_broker_opts {
  const char *dir, *group; /* --broker-dir (NULL: the default), --broker-group */
  double timeout_s;        /* --broker-timeout: skip a peer silent that long; 0: 2 s */
  uint64_t reserve;        /* --reserve: device bytes never given to a peer */
  int token;               /* the server has a token: its asks carry BRK_BY_TOKEN, and it
                    gives nothing to an ask made for anyone (docs/broker.md) */
  double wait_s;           /* how long an ask waits for what the peers committed:
                    --job-timeout, else 60 s */
} srv_broker_opts;
/* Registers this server (when it serves a CUDA device) and answers peers
 * with pl_manager_give_back. *out NULL when nothing was registered (a
 * warning says why). */
void srv_broker_start(const srv_broker_opts *o, struct pl_manager **ms, struct dev_device **devs,
                      size_t n, struct brk_peer **out);
void srv_broker_stop(struct brk_peer *p); /* NULL: no-op */
/* pl_manager_opts.ask_peers: asks the peers on dev until need bytes are
 * free there (docs/broker.md), logging who gave what. */
int srv_broker_ask(void *arg, struct dev_device *dev, uint64_t need);
/* pl_manager_opts.ask_done: the ask's claim on dev goes. */
void srv_broker_ask_done(void *arg, struct dev_device *dev);
/* POST /v1/memory/reclaim: asks the peers on device ("cuda:N") for bytes;
 * *answer a new reference, or an EBB_E code with a message on bad input. */
int srv_broker_reclaim(const char *device, uint64_t bytes, struct json_t **answer);
/* The ebb_broker_* families of /metrics. */
void srv_broker_metrics(FILE *f);
/* The UUID ("GPU-...") of CUDA device ordinal (cuInit, no context; probed
 * once); 0 or an EBB_E code with a message. */
int srv_cuda_uuid(int ordinal, char *uuid, size_t len);

#endif
