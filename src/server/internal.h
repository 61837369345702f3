/* What the files of the server room share. Every name here starts with srv_
 * (file-local names are static); the names are grouped by the file that
 * defines them. Nothing outside src/server/ includes this header. */
#ifndef EBB_SERVER_INTERNAL_H
#define EBB_SERVER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "server/cluster/cluster.h"
#include "server/events.h"
#include "server/queue.h"
#include "server/server.h"
#include "server/store.h"

/* Roles a token grants (auth.c). Without tokens every caller is admin. */
typedef enum { SRV_ROLE_NONE, SRV_ROLE_SUBMIT, SRV_ROLE_ADMIN } srv_role;

typedef struct srv_auth srv_auth;
typedef struct srv_conns srv_conns;

struct srv_server {
  struct MHD_Daemon *d;
  int broker;    /* srv_opts.broker: POST /v1/memory/reclaim and ebb_broker_* ("broker.c") */
  pl_manager *m; /* devices[0]'s: pipelines, sessions, loads */
  mem_allocator *alloc;
  pl_manager **ms; /* one per device (ndev; ms[0] == m) */
  mem_allocator **allocs;
  size_t ndev;
  srv_store *store;
  srv_queue *queue;
  pthread_mutex_t queue_lock;  /* the snapshot's reads of queue vs. its destroy */
  pthread_mutex_t submit_lock; /* --max-queued: the count and the push as one */
  size_t max_queued;
  size_t max_queued_per_token;                   /* --max-queued-per-token */
  uint64_t queued_bytes, queued_bytes_per_token; /* --queued-bytes[-per-token] */
  srv_events *events;                            /* GET /v1/events (events.h) */
  struct srv_fact_counts *facts;                 /* /metrics' counters of the bus's facts */
  srv_auth *auth;
  srv_conns *conns;
  struct srv_snap *snap;
  struct srv_cluster *cluster;    /* --queue redis://: jobs live in Redis (cluster/) */
  const struct srv_route *routes; /* the local or the cluster table (srv_routes_choose) */
  pthread_mutex_t owners_lock;    /* guards session_owners */
  struct srv_owner *session_owners;
  char *data_dir;
  char url[320];
  char host[256]; /* the listen host, as given */
  int port;       /* the port bound */
  int loopback;   /* the listen address is a loopback one */
  int lock_fd;    /* the data directory's descriptor, holding its flock; -1 none */
  size_t max_json, max_upload, max_field, max_lyrics;
  char **input_dirs; /* realpath()s */
  size_t ninput_dirs;
  int metrics_public;
  uint64_t keep_jobs;   /* --keep-jobs COUNT (0: no count limit) */
  double keep_jobs_s;   /* --keep-jobs DURATION (0: no age limit) */
  double job_timeout_s; /* --job-timeout (a pipeline's timeout_s wins) */
  double max_wait_s;    /* --max-wait: a job's or item's wait for a busy device */
  double max_job_s;     /* --max-job-seconds: >0 the limit, <0 none, 0 the job's timeout */
  atomic_int stop;      /* session items see it as their cancel flag */
  atomic_ulong counter; /* upload temp files, session item numbers */
};

/* --- one request ------------------------------------------------------------ */
enum { BODY_NONE, BODY_BUFFER, BODY_FILE, BODY_MULTIPART };

/* A route the first call of a request found (routes.c). */
typedef struct srv_route srv_route;

/* A growing text with its own length (multipart fields: appends are
 * linear, never a strlen of what came before). */
typedef struct srv_text {
  char *p;
  size_t len, cap;
} srv_text;

typedef struct srv_req {
  const srv_route *route;
  const char *allow; /* "GET, HEAD, ..." of the route found (a 405's Allow); NULL: none */
  char *parts[6];    /* the path's segments (in path_buf) */
  int np;
  char path_buf[1024];
  srv_role role;
  char owner[24]; /* the token's owner tag ("" without tokens) */
  int kind;
  char *buf; /* BODY_BUFFER: the body (NUL-terminated) */
  size_t len, cap, limit;
  size_t field_limit; /* a multipart field that is not the file */
  size_t total;       /* every body byte received, files and fields */
  int too_large;      /* 1 the whole body, 2 a field */
  char big_field[64];
  int io_error;
  FILE *f;        /* BODY_FILE / the multipart file field */
  char tmp[4096]; /* the upload's temp path ("" if none) */
  char filename[256];
  char file_key[64];
  int two_files;
  char ctype[128];
  unsigned retry_after_s; /* a 429's Retry-After (0: none) */
  int close;              /* answer with Connection: close */
  struct MHD_PostProcessor *pp;
  srv_text field_pipeline, field_options, field_input, field_lyrics;
} srv_req;

/* --- "http.c": responses ---------------------------------------------------- */
enum MHD_Result srv_send_text(struct MHD_Connection *c, srv_req *r, unsigned status,
                              const char *ctype, char *text /* taken */);
enum MHD_Result srv_send_json(struct MHD_Connection *c, srv_req *r, unsigned status,
                              json_t *o /* taken */);
enum MHD_Result srv_send_err(struct MHD_Connection *c, srv_req *r, unsigned status,
                             const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An ebb error code answered with the HTTP status and wire name of its row
 * in EBB_ERRORS. */
enum MHD_Result srv_send_ebb_err(struct MHD_Connection *c, srv_req *r, int rc, const char *msg);
void srv_req_free(srv_req *r);
/* --max-queued: 0 when a job may be queued, else 1 with 429 queue_full and
 * Retry-After queued (the caller holds s->submit_lock up to its push). */
#define SRV_RETRY_AFTER_S 5
/* "fairness.c": the queue's fair limits for a POST /v1/jobs by r->owner
 * (call under submit_lock; bytes: what the job keeps on disk, 0 before its
 * body is read): 0, or 1 with 429 or 507 queued naming the limit. */
int srv_queue_full(srv_server *s, struct MHD_Connection *c, srv_req *r, uint64_t bytes,
                   enum MHD_Result *ret);
int srv_starts_with(const char *s, const char *prefix);

/* What a connection's head (request line and headers) may take: the
 * connection's memory in libmicrohttpd (MHD_OPTION_CONNECTION_MEMORY_LIMIT). */
#define SRV_HEAD_KIB 32

/* --- "body.c": bodies and a job's input --------------------------------------- */
/* First call of a request whose route takes a body: decide how to take it.
 * 0 to go on, 1 when a response was queued. */
int srv_begin_body(srv_server *s, struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret);
void srv_take_body(srv_req *r, const char *data, size_t n);

/* A path option the operator let a job set, opened under --input-dir. */
#define SRV_MAX_OPTFILES 8
typedef struct srv_optfile {
  char stage[72], option[72];
  int fd;
} srv_optfile;

typedef struct srv_input {
  const char *pipeline; /* borrowed from the body or the fields */
  const char *path;     /* the server-side path the request named, or NULL with an upload */
  json_t *options;      /* new reference or NULL */
  json_t *body;         /* the parsed JSON body (keeps the strings alive) */
  int upload;           /* r->tmp holds the file */
  int fd;               /* path, opened once under --input-dir (-1: none) */
  char real[4096];      /* "/proc/self/fd/N" of fd: the file checked, never the path again */
  const char *lyrics;   /* lyrics sent with the job (borrowed), or NULL */
  size_t lyrics_len;
  const char *lyrics_stage; /* the align stage entry that gets them (borrowed) */
  srv_optfile files[SRV_MAX_OPTFILES];
  size_t nfiles;
} srv_input;
/* The first key of JSON object o that is not in known (NULL-terminated),
 * or NULL when there is none. */
const char *srv_unknown_key(json_t *o, const char *const known[]);
/* Returns 0, or 1 with a response queued. */
int srv_parse_input(srv_server *s, struct MHD_Connection *c, srv_req *r, int want_pipeline,
                    srv_input *in, enum MHD_Result *ret);
void srv_input_free(srv_input *in);
/* "fairness.c": the bytes a job's files keep on disk once placed: its input
 * (the upload, or the file named), its lyrics and its option files. */
uint64_t srv_job_bytes(const srv_req *r, const srv_input *in);
/* The manager's check of a job's (or session item's) pipeline and options,
 * with the trust levels (pipeline/trust.h): an allowed path option is opened
 * into in->files; lyrics get their align stage. 0 or EBB_E... (400). */
int srv_check_job_options(srv_server *s, const char *pipeline, srv_input *in);
/* The stage entry of pipeline that takes lyrics sent with a job: its first
 * "align" (*stage, borrowed from the pipeline's definition); EBB_ECONFIG
 * when it has none or options already set its lyrics. */
int srv_lyrics_stage(srv_server *s, const char *pipeline, json_t *options, const char **stage);
/* srv_parse_input for a job (a pipeline is required) and the manager's check
 * of its pipeline and options. Returns 0, or 1 with a response queued and in
 * freed. */
int srv_parse_job(srv_server *s, struct MHD_Connection *c, srv_req *r, srv_input *in,
                  enum MHD_Result *ret);
/* --- "workcheck.c": a job's estimated work against the server's limit ---- */
/* The job's (or session item's: in->pipeline set to the session's)
 * stages' work estimate (pipeline/work.h) for the input's length
 * against --max-job-seconds (else the job's timeout): 0 when within it (or
 * no limit), else 1 with 400 bad_request queued naming the costliest stage,
 * its options, the estimate and the limit. */
int srv_check_work(srv_server *s, struct MHD_Connection *c, srv_req *r, srv_input *in,
                   enum MHD_Result *ret);
/* Lyrics sent with a job: at most this many bytes (413 beyond) unless the
 * config's "server"."max_lyrics_kib" says otherwise (s->max_lyrics). */
#define SRV_MAX_LYRICS (256u * 1024u)

/* --- "jobfiles.c": what a job brings, made its own at submit ------------------------ */
enum { SRV_CONFINE_REFUSED = 1, SRV_CONFINE_LINKED, SRV_CONFINE_TOO_BIG };
/* Opens path (absolute) beneath one of the --input-dir directories with no
 * symlink on the way, non-blocking: 0 and *fd for a regular file with one
 * link and at most cap bytes (*size), else SRV_CONFINE_* (nothing open). */
int srv_open_confined(srv_server *s, const char *path, size_t cap, int *fd, int64_t *size);
/* The refusal's message in buf (the same for a missing file, a directory,
 * a FIFO, a symlink: no existence oracle); what: "input", "option a.b:". */
const char *srv_confine_message(srv_server *s, int why, const char *what, const char *path,
                                int64_t size, size_t cap, char *buf, size_t n);
/* The job's input in dir: the upload moved there, or a copy of in->fd
 * (input-NAME); path gets where. */
int srv_place_input(srv_server *s, srv_req *r, srv_input *in, const char *dir, char *path,
                    size_t n);
/* The opened path options and the lyrics copied into dir; in->options then
 * name those copies (the stage reads the server's file). */
int srv_place_extras(srv_server *s, srv_input *in, const char *dir);
typedef struct srv_path_ctx {
  srv_server *s;
  srv_input *in;
} srv_path_ctx;
/* pl_trust_path_fn for pl_manager_check_job (arg: a srv_path_ctx). */
int srv_trust_path(void *arg, const char *stage, const char *option, const char *value,
                   json_t *opts);

/* --- "auth.c": tokens, roles, Host/Origin, ids --------------------------------- */
/* token_file (may be NULL), env_token (may be NULL or ""). *out has no token
 * when neither gives one. Errors name the file and line. */
int srv_auth_load(const char *token_file, const char *env_token, srv_auth **out);
void srv_auth_free(srv_auth *a);
int srv_auth_add_host(srv_auth *a, const char *host);
/* One --allow-origin ("SCHEME://HOST[:PORT]"); EBB_EINVAL naming it when it
 * is not in that form. */
int srv_auth_add_origin(srv_auth *a, const char *origin);
/* The role the request's Authorization header grants and the token's owner
 * tag; admin with owner "" when no token is configured. */
srv_role srv_auth_check(const srv_auth *a, struct MHD_Connection *c, char *owner, size_t n);
int srv_auth_enabled(const srv_auth *a);
/* 1 when the Host header names this server and the Origin header, when
 * sent, is its own origin (scheme, host and bound port) or an
 * --allow-origin; else 0 with why in msg. */
int srv_host_ok(const srv_server *s, struct MHD_Connection *c, char *msg, size_t n);
/* 32 hex digits from the kernel's random source (128 bits). */
int srv_random_id(char out[33]);

/* --- "conns.c": who gets a connection, who loses one, deadlines ---------------- */
typedef struct srv_conn_limits {
  unsigned max_connections; /* open at once; a newcomer over it evicts (conns.c) */
  unsigned max_per_ip;      /* from one address; a newcomer over it evicts that address's */
  double header_timeout_s;  /* from accept (or the last answer) to complete headers */
  double min_body_rate;     /* bytes/s a body must average after header_timeout_s */
  double idle_pressure_s;   /* a kept-alive connection idle this long goes when 3/4 of
                               max_connections are taken */
} srv_conn_limits;
typedef struct srv_conn_stats {
  unsigned open;
  uint64_t evicted, refused, idle_closed, timed_out;
} srv_conn_stats;
int srv_conns_create(const srv_conn_limits *l, srv_conns **out);
void srv_conns_destroy(srv_conns *cs);
void srv_conns_stats(srv_conns *cs, srv_conn_stats *st);
/* libmicrohttpd's accept policy (the per-address cap, its eviction) and connection
 * notification (the list, eviction); cls is the srv_conns. */
enum MHD_Result srv_conn_accept(void *cls, const struct sockaddr *addr, socklen_t len);
void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
/* The request's phases, for eviction and the deadlines. */
void srv_conn_headers_done(srv_conns *cs, struct MHD_Connection *c);
void srv_conn_body_bytes(srv_conns *cs, struct MHD_Connection *c, size_t n);
void srv_conn_handling(srv_conns *cs, struct MHD_Connection *c);
void srv_conn_answered(srv_conns *cs, struct MHD_Connection *c);

/* --- "routes.c": the API ----------------------------------------------------- */
/* First call: finds the route (404/405 otherwise), checks Host/Origin, the
 * token and its role, the content type. 0 to go on; 1 with a response. */
int srv_route_begin(srv_server *s, struct MHD_Connection *c, srv_req *r, const char *url,
                    const char *method, enum MHD_Result *ret);
enum MHD_Result srv_route_run(srv_server *s, struct MHD_Connection *c, srv_req *r,
                              const char *method);
/* s->routes: the local table, or under --queue the cluster's (at start). */
void srv_routes_choose(srv_server *s);

/* --- "jobs.c": jobs and sessions -------------------------------------------------- */
#define SRV_HANDLER(name) \
  enum MHD_Result name(srv_server *s, struct MHD_Connection *c, srv_req *r, const char *method)
SRV_HANDLER(srv_h_jobs_post);
SRV_HANDLER(srv_h_job);
SRV_HANDLER(srv_h_job_result);
SRV_HANDLER(srv_h_sessions_post);
SRV_HANDLER(srv_h_session);
SRV_HANDLER(srv_h_session_item);
/* --- "joboutputs.c": GET /v1/jobs/ID/files/NAME --------------------------------- */
SRV_HANDLER(srv_h_job_file);
/* buf (taken) sent as application/octet-stream, 200. */
enum MHD_Result srv_send_octets(struct MHD_Connection *c, char *buf, size_t n);
/* The entry of o's result "files" whose base name is name, or NULL. */
const char *srv_output_listed(json_t *o, const char *name);
/* Job o's output r->parts[4] from a disk: 409 before it succeeded, 404 when
 * its result does not list it or the file is on another node's disk. */
enum MHD_Result srv_send_output(struct MHD_Connection *c, srv_req *r, json_t *o);
/* --- "sleep.c": POST /v1/pipelines/NAME/sleep|wake, the sleep metrics ------------- */
SRV_HANDLER(srv_h_pipeline_sleep);
void srv_sleep_metrics(srv_server *s, FILE *f);
/* --- "broker.c": POST /v1/memory/reclaim (docs/broker.md) ------------------------- */
SRV_HANDLER(srv_h_memory_reclaim);

/* --- "cluster/": scale-out on Redis (cluster/cluster.h); the job routes
 * handlers when s->cluster is set (the route table is chosen once at start,
 * srv_routes_choose) --------------------------------------------------------------- */
typedef struct srv_cluster srv_cluster;
int srv_cluster_start(srv_server *s, const srv_cluster_opts *o);
void srv_cluster_stop(srv_server *s); /* no-op without a cluster */
SRV_HANDLER(srv_cluster_jobs_post);
SRV_HANDLER(srv_cluster_job);
SRV_HANDLER(srv_cluster_job_result);
SRV_HANDLER(srv_cluster_job_file); /* "cluster_files.c" */
SRV_HANDLER(srv_h_cluster);        /* GET /v1/cluster (one node without --queue) */
void srv_cluster_metrics(srv_server *s, FILE *f);
/* /metrics with node="ID" on every series under --queue; text is taken and
 * the answer is the caller's (text itself without a cluster). */
char *srv_cluster_label_metrics(srv_server *s, char *text);
/* Sessions belong to the token that opened them (and to admins). */
void srv_session_owners_free(srv_server *s);

/* --- "snapshot.c": what the read side shows ---------------------------------------- */
/* The read side (/metrics, /v1/memory, /v1/pipelines) never waits on the
 * manager or the allocator: a thread takes a snapshot on request and a
 * reader waits at most 30 ms for a fresh one (none while the thread has
 * been stuck taking one for 20 ms), else it gets the last one. A snapshot
 * younger than 100 ms with no change marked since serves without waiting.
 * {"memory": ..., "pipelines": [...], "sessions": N, "released_total": N,
 *  "taken": unix seconds} (new reference). */
json_t *srv_snapshot(srv_server *s);
/* After a change (load, unload, release, a job's end): the next snapshot is
 * taken before a reader gets one (waits up to 1 s). */
void srv_snapshot_changed(srv_server *s);
/* Marks a change (a job ended, a second passed) without waiting. */
void srv_snapshot_dirty(srv_server *s);
int srv_snapshot_start(srv_server *s);
void srv_snapshot_stop(srv_server *s);

/* --- "metrics_facts.c": counters of the event bus's facts, for /metrics ---------- */
typedef struct srv_fact_counts srv_fact_counts;
int srv_fact_counts_create(srv_fact_counts **out);         /* subscribes; *out the caller's */
void srv_fact_counts_destroy(srv_fact_counts *c);          /* unsubscribes; NULL: no-op */
void srv_fact_counts_metrics(srv_fact_counts *c, FILE *f); /* NULL: nothing */

/* --- "metrics.c" ------------------------------------------------------------- */
enum MHD_Result srv_metrics(srv_server *s, struct MHD_Connection *c, srv_req *r);

/* --- "datadir.c": the data directory ------------------------------------------ */
/* Takes the exclusive lock of dir: flock on the directory's own descriptor
 * (*fd, kept open while the server runs), so removing DATA_DIR/lock (which
 * names the pid) admits no second server; EBB_EBUSY naming the holder's pid
 * when another process has it. */
int srv_datadir_lock(const char *dir, int *fd);
/* Removes partial uploads a killed server left in DATA_DIR/uploads. */
void srv_datadir_clean_uploads(const char *dir);
/* Empties DATA_DIR/scratch (EBB_SERVER_SCRATCH): load directories of workers
 * a killed server left; made 0700 if absent. */
void srv_datadir_clean_scratch(const char *dir);
/* --keep-jobs: removes finished jobs past the count or the age, rows and
 * directories. */
void srv_retention(srv_server *s);

#endif
